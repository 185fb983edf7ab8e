//! The instances of a rolled-out network (a graph whose metadata has `rollout.frames`,
//! docs/rollouts.md): each needs at least one frame (an empty sequence has no loss to
//! average), and exactly F when the graph computes F frames. A frame of the wrong width is
//! refused by the loader already, against the schema (`file:line: field
//! `frames[2]`: ...`). A bad instance is named by `file:line: field `frames``, or skipped
//! with `--skip-bad-data`.
//!
//! With `--frame-noise S` ([`FrameNoise`]) the data is a static input per instance, shown
//! for the F frames with fresh Gaussian noise in each.

use crate::data::{DataSet, Loader};
use crate::failure::Failure;
use amp_data::Value;
use amp_ir::{DataTy, FieldSchema, Graph, InstanceData, ResolvedStep, Schema};
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

/// The field of a static instance holding the input shown in every frame
/// (`--frame-noise`: a CSV row or `{"frame": [...], "label": k}`).
pub const STATIC_FIELD: &str = "frame";

/// `--frame-noise S`: instances read as a static input (the network's record with one
/// `frame` instead of the sequence `frames`) and shown for the graph's F frames, each with
/// its own Gaussian noise of standard deviation S, seeded by the run's seed and the
/// instance's index among those read from its file (`amp_data::noise`). The same instance
/// gets the same frames every epoch and every run.
#[derive(Clone, Debug)]
pub struct FrameNoise {
    frames: usize,
    sigma: f32,
    seed: u64,
    /// The position of `frames` among the input record's fields.
    field: usize,
    /// The schema a static instance is read with.
    pub static_schema: Schema,
}

impl FrameNoise {
    /// The noise `--frame-noise sigma` asks of `graph`: refused unless `graph` is a network
    /// rolled out over a fixed number of frames (`--frames F`) and `sigma` is finite and not
    /// negative.
    pub fn new(graph: &Graph, sigma: f32) -> Result<FrameNoise, Failure> {
        if !sigma.is_finite() || sigma < 0.0 {
            return Err(Failure::usage(format!("--frame-noise {sigma} is not a finite number of at least 0")));
        }
        let frames = match graph.meta.get(ROLLOUT_FRAMES_META).map(|f| f.parse::<usize>()) {
            Some(Ok(f)) if f > 0 => f,
            Some(_) => {
                return Err(Failure::usage(
                    "--frame-noise shows an input for a fixed number of frames: give --frames F".to_string(),
                ))
            }
            None => {
                return Err(Failure::usage(format!(
                    "--frame-noise applies to a network rolled out over frames (--network NAME --frames F); `{}` is not one",
                    graph.name
                )))
            }
        };
        let schema =
            graph.input.clone().ok_or_else(|| Failure::bad_input("the network's graph has no input schema"))?;
        let mut static_schema = schema.clone();
        let record = static_schema.records.get_mut(schema.input as usize);
        let found = record.and_then(|r| {
            let field = r.fields.iter().position(|f| f.name == FRAMES_FIELD)?;
            let DataTy::Seq(frame) = r.fields[field].ty.clone() else { return None };
            r.fields[field] = FieldSchema { name: STATIC_FIELD.into(), ty: *frame };
            Some(field)
        });
        let field = found.ok_or_else(|| {
            Failure::bad_input(format!("the input of `{}` has no sequence `{FRAMES_FIELD}` to fill", graph.name))
        })?;
        Ok(FrameNoise { frames, sigma, seed: 0, field, static_schema })
    }

    /// The seed the noise is drawn from (default 0).
    pub fn with_seed(self, seed: u64) -> FrameNoise {
        FrameNoise { seed, ..self }
    }

    /// Static instance number `index` of a file as the network's instance: its input shown
    /// for F frames with noise. A value that is not a static instance (the loader checked it
    /// against the static schema, so this does not happen) is returned unchanged.
    pub fn expand(&self, index: usize, value: Value) -> Value {
        let Value::Record(mut fields) = value else { return value };
        let seed = amp_data::noise::instance_seed(self.seed, index as u64);
        let frames = match fields.get(self.field) {
            Some(Value::Tensor(frame)) => amp_data::noise::noisy_frames(frame, self.frames, self.sigma, seed),
            _ => return Value::Record(fields),
        };
        fields[self.field] = Value::Seq(frames.into_iter().map(Value::Tensor).collect());
        Value::Record(fields)
    }
}
