//! Getting a verified graph: compile an `.amp` source in-process (checker, lowering,
//! passes, verifier: what `ampc compile` runs) or load an `.ampg` file and verify it, with
//! its partition plan when it has one (checked against the graph). The runtime only ever
//! sees graphs the verifier accepted and plans that fit them.

use crate::cli::ModelArgs;
use crate::failure::{Exit, Failure};
use amp_diagnostics::{render_human, Diagnostic, FileId, SourceMap};
use amp_ir::verify::Verified;
use amp_ir::Graph;
use amp_sema::rollout::{Pattern, RolloutGraph};
use amp_sema::Checked;
use amp_sema::{check_program, DiskFiles, Options};
use std::borrow::Cow;
use std::io::IsTerminal;
use std::path::Path;

/// A verified graph (verified once, here), and the partition plan its `.ampg` file holds.
#[derive(Clone)]
pub struct Model {
    pub graph: Verified,
    pub plan: Option<amp_plan::Plan>,
}

/// What hears a compilation's diagnostics (warnings too), with the files they point into.
pub type Diagnostics<'a> = &'a mut dyn FnMut(&SourceMap, &[Diagnostic]);

/// `given` (borrowed), else the model named on the command line, compiled or loaded.
pub fn given_or_load<'a>(args: &ModelArgs, given: Option<&'a Model>) -> Result<Cow<'a, Model>, Failure> {
    match given {
        Some(model) => Ok(Cow::Borrowed(model)),
        None => load(args).map(Cow::Owned),
    }
}

/// Compiles or loads the model named on the command line; diagnostics go to stderr.
pub fn load(args: &ModelArgs) -> Result<Model, Failure> {
    load_reporting(args, None, &mut print_diagnostics)
}

/// Compiles `source`, the text of an `.amp` file at `args.path` (in memory: imports are
/// read beside that path), or without it compiles or loads `args.path`; diagnostics go to
/// `report` (an error then ends it with `Failure::printed`).
pub fn load_reporting(args: &ModelArgs, source: Option<&str>, report: Diagnostics) -> Result<Model, Failure> {
    let is_graph_file = args.path.extension().is_some_and(|e| e.eq_ignore_ascii_case("ampg"));
    if is_graph_file && source.is_none() {
        load_graph_file(args)
    } else {
        Ok(Model { graph: compile_source(args, source, report)?, plan: None })
    }
}

fn load_graph_file(args: &ModelArgs) -> Result<Model, Failure> {
    let path = &args.path;
    if args.network.is_some() {
        return Err(Failure::usage(format!(
            "--network applies to `.amp` sources; `{}` is compiled already (its graph says how it was rolled out)",
            path.display()
        )));
    }
    if !args.define.is_empty() {
        return Err(Failure::usage(format!(
            "-D applies to `.amp` sources; `{}` is compiled already (recompile it with `ampc compile -D ...`)",
            path.display()
        )));
    }
    let bytes = amp_ir::limits::read_bounded(path, amp_ir::limits::MAX_GRAPH_BYTES)
        .map_err(|e| Failure::io("read", path, &e))?;
    let (graph, plan) = match amp_ir::ampg::read_verified(&bytes) {
        Ok(loaded) => loaded,
        Err(amp_ir::ampg::LoadError::Read(e)) => {
            return Err(Failure::bad_input(format!("`{}` is not a loadable graph file: {e}", path.display())));
        }
        Err(amp_ir::ampg::LoadError::Verify(errors)) => {
            let mut message = format!("`{}` failed verification; amprun runs only verified graphs:", path.display());
            for e in errors.iter().take(20) {
                message.push_str(&format!("\n  {e}"));
            }
            if errors.len() > 20 {
                message.push_str(&format!("\n  ... and {} more", errors.len() - 20));
            }
            return Err(Failure::bad_input(message));
        }
    };
    if let Some(name) = &args.model_name {
        if *name != graph.name {
            let message = format!("`{}` holds model `{}`, not `{name}`", path.display(), graph.name);
            return Err(Failure::usage(message));
        }
    }
    // A plan that does not fit the graph is refused even when this run would not use it:
    // the file is wrong, and the user should hear it now.
    let plan = plan.filter(|p| !p.is_null()).map(|value| {
        let plan = amp_plan::Plan::from_json(&value)?;
        plan.placement(&graph)?;
        Ok(plan)
    });
    let plan = plan.transpose().map_err(|e: amp_plan::PlanError| {
        Failure::bad_input(format!("`{}` has a partition plan amprun cannot follow: {e}", path.display()))
    })?;
    Ok(Model { graph, plan })
}

/// The checked program of `source` (or the file `args.path`), with `args`' overrides;
/// its diagnostics go to `report`, and errors end it.
fn check(args: &ModelArgs, source: Option<&str>, report: Diagnostics) -> Result<(SourceMap, FileId, Checked), Failure> {
    let path = &args.path;
    let text = match source {
        Some(text) if text.len() > amp_ir::limits::MAX_SOURCE_BYTES as usize => {
            return Err(Failure::usage(format!(
                "the model's source is {} bytes, over the limit of {} (docs/limits.md)",
                text.len(),
                amp_ir::limits::MAX_SOURCE_BYTES
            )));
        }
        Some(text) => text.to_string(),
        None => {
            let bytes = amp_ir::limits::read_bounded(path, amp_ir::limits::MAX_SOURCE_BYTES)
                .map_err(|e| Failure::io("read", path, &e))?;
            String::from_utf8_lossy(&bytes).into_owned()
        }
    };
    let mut map = SourceMap::new();
    let main = map.add(path.display().to_string(), text);
    let checked = check_program(&mut map, main, &Options { defines: args.define.clone() }, &DiskFiles);
    report(&map, &checked.diagnostics);
    if checked.has_errors() {
        return Err(Failure::printed(Exit::BadInput));
    }
    Ok((map, main, checked))
}

fn compile_source(args: &ModelArgs, source: Option<&str>, report: Diagnostics) -> Result<Verified, Failure> {
    let path = &args.path;
    let (map, main, checked) = check(args, source, report)?;
    let program = &checked.program;
    if let Some(network) = &args.network {
        return compile_network(args, &map, main, network, program, report);
    }
    let name_of = |m: &amp_sema::ComponentId| program.components[m.0 as usize].name.as_str();
    let model = match &args.model_name {
        Some(name) => program.models.iter().find(|m| name_of(m) == name),
        None => program.models.first(),
    };
    let Some(&model) = model else {
        let names: Vec<&str> = program.models.iter().map(name_of).collect();
        return Err(Failure::usage(match &args.model_name {
            Some(name) => format!("no model `{name}` in `{}` (models: {})", path.display(), names.join(", ")),
            None => format!("`{}` defines no model to run", path.display()),
        }));
    };
    let options = amp_lower::LowerOptions { per_element_maps: args.per_element_maps, ..Default::default() };
    match amp_lower::compile_model_with(program, &map, model, &options) {
        Ok((graph, _reports)) => Ok(graph),
        Err(e) => {
            report(&map, e.diagnostics());
            Err(Failure::printed(Exit::BadInput))
        }
    }
}

/// The network `--network` names, rolled out under `--pattern` over `--frames`.
fn compile_network(
    args: &ModelArgs,
    map: &SourceMap,
    main: FileId,
    name: &str,
    program: &amp_sema::Program,
    report: Diagnostics,
) -> Result<Verified, Failure> {
    let (index, graph) = find_network(&args.path, main, name, program)?;
    let pattern = Pattern::named(&graph, &args.pattern).map_err(|e| {
        report(map, &[e.to_diagnostic(&graph)]);
        Failure::printed(Exit::BadInput)
    })?;
    let frames = args.frames.map_or(amp_lower::Frames::FromData, amp_lower::Frames::Fixed);
    match amp_lower::compile_network(program, map, index, &pattern, frames) {
        Ok((graph, _reports)) => Ok(graph),
        Err(e) => {
            report(map, e.diagnostics());
            Err(Failure::printed(Exit::BadInput))
        }
    }
}

/// The network `name` of the main file, its index in the program and its graph.
fn find_network(
    path: &Path,
    main: FileId,
    name: &str,
    program: &amp_sema::Program,
) -> Result<(usize, RolloutGraph), Failure> {
    let ours = || program.networks.iter().enumerate().filter(|(_, n)| n.span.file == main);
    let Some((index, def)) = ours().find(|(_, n)| n.name == name) else {
        let names: Vec<&str> = ours().map(|(_, n)| n.name.as_str()).collect();
        let names = if names.is_empty() { "none".to_string() } else { names.join(", ") };
        return Err(Failure::usage(format!("no network `{name}` in `{}` (networks: {names})", path.display())));
    };
    Ok((index, RolloutGraph::of_network(def)))
}

/// `ampc rollout`'s JSON object for the network `args.network` of `source` (or the file
/// `args.path`): under `args.pattern`, its validity, tableau over frames 0..=`window` and
/// inference factor; with `enumerate`, every valid pattern instead.
pub fn rollout(
    args: &ModelArgs,
    source: Option<&str>,
    window: usize,
    enumerate: bool,
    report: Diagnostics,
) -> Result<serde_json::Value, Failure> {
    let Some(name) = &args.network else {
        return Err(Failure::usage("a rollout is a network's: this model was not compiled from a `network`"));
    };
    if window > amp_sema::rollout::MAX_WINDOW {
        return Err(Failure::usage(format!("the window is at most {}", amp_sema::rollout::MAX_WINDOW)));
    }
    let (map, main, checked) = check(args, source, report)?;
    let (_, graph) = find_network(&args.path, main, name, &checked.program)?;
    let mut failed = |e: amp_sema::rollout::RolloutError| {
        report(&map, &[e.to_diagnostic(&graph)]);
        Failure::printed(Exit::BadInput)
    };
    if enumerate {
        let found = amp_sema::rollout::enumerate_valid(&graph).map_err(&mut failed)?;
        return Ok(amp_sema::rollout::enumeration_json(&graph, &found));
    }
    let pattern = Pattern::named(&graph, &args.pattern).map_err(&mut failed)?;
    let analysis = amp_sema::rollout::analyse(&graph, &pattern, window).map_err(&mut failed)?;
    Ok(amp_sema::rollout::analysis_json(&graph, &pattern, &analysis))
}

fn print_diagnostics(map: &SourceMap, diagnostics: &[Diagnostic]) {
    if diagnostics.is_empty() {
        return;
    }
    let color = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    eprint!("{}", render_human(map, diagnostics, color));
}

/// A hyperparameter the compiler recorded in the graph (`hyper.NAME`).
pub fn hyper(graph: &Graph, name: &str) -> Option<usize> {
    graph.meta.get(&format!("hyper.{name}")).and_then(|v| v.parse().ok())
}

/// The model's name for reports: the graph's, else the file's stem.
pub fn display_name(graph: &Graph, path: &Path) -> String {
    if graph.name.is_empty() {
        path.file_stem().map_or_else(|| "model".into(), |s| s.to_string_lossy().into_owned())
    } else {
        graph.name.clone()
    }
}
