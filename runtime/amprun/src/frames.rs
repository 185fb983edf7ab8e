//! The instances of a rolled-out network (a graph whose metadata has `rollout.frames`,
//! docs/rollouts.md): each needs at least one frame (an empty sequence has no loss to
//! average), and exactly F when the graph computes F frames. A frame of the wrong width is
//! refused by the loader already, against the schema (`file:line: field
//! `frames[2]`: ...`). A bad instance is named by `file:line: field `frames``, or skipped
//! with `--skip-bad-data`.

use crate::data::{DataSet, Loader};
use crate::failure::Failure;
use amp_ir::{Graph, InstanceData, ResolvedStep};
use amp_lower::network::{FRAMES_FIELD, ROLLOUT_FRAMES_META};

/// `set` with its instances checked against the frame count of `graph` (unchanged when
/// `graph` is not a rolled-out network).
pub fn check(graph: &Graph, loader: &Loader, mut set: DataSet, skip_bad: bool) -> Result<DataSet, Failure> {
    let Some(rule) = graph.meta.get(ROLLOUT_FRAMES_META) else { return Ok(set) };
    // `data`, or a count the compiler wrote; anything else (a hand-edited file) asks for
    // no particular count.
    let fixed: Option<i64> = rule.parse().ok();
    let path = [ResolvedStep::Field(FRAMES_FIELD)];
    let problem = |len: Option<i64>| match (len, fixed) {
        (None, _) => Some("missing: the instance has no sequence of frames".to_string()),
        (Some(0), _) => Some("the sequence of frames is empty".to_string()),
        (Some(n), Some(f)) if n != f => Some(format!("{n} frames, the network is rolled out over {f}")),
        _ => None,
    };
    let bad: Vec<(usize, String)> =
        set.instances.iter().enumerate().filter_map(|(i, inst)| problem(inst.len_at(&path)).map(|p| (i, p))).collect();
    let Some((first, message)) = bad.first() else { return Ok(set) };
    let at = match loader.line_of(&set, *first) {
        Some(line) => format!("{}:{line}", set.path.display()),
        None => format!("{} (instance {first})", set.path.display()),
    };
    if !skip_bad {
        return Err(Failure::bad_input(format!("{at}: field `{FRAMES_FIELD}`: {message}")));
    }
    eprintln!(
        "amprun: skipped {} instance(s) with bad frames in {}; the first: {at}: field `{FRAMES_FIELD}`: {message}",
        bad.len(),
        set.path.display()
    );
    let mut index = 0;
    set.instances.retain(|_| {
        let keep = !bad.iter().any(|(i, _)| *i == index);
        index += 1;
        keep
    });
    set.skipped += bad.len();
    Ok(set)
}
