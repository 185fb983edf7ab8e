//! `ampc compile`: check, lower, optimise, verify, then (with `--workers N`) plan the
//! partition, and write an `.ampg` file (graph and plan) or print the graph as IR text,
//! JSON or Graphviz, the plan as JSON, or the Cranelift IR of the fused kernels.

use crate::Printer;
use amp_diagnostics::SourceMap;

use clap::ValueEnum;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq, Debug)]
pub(crate) enum Emit {
    /// The stable IR text form.
    Ir,
    /// The graph as JSON (the document inside an `.ampg` file).
    IrJson,
    /// A Graphviz picture: `ampc compile m.amp --emit dot | dot -Tsvg > m.svg`.
    Dot,
    /// The partition plan as JSON (needs `--workers N`).
    Plan,
    /// The Cranelift IR of each fused kernel (forward and backward), with the fusion
    /// groups that use it.
    Clif,
}

pub(crate) struct CompileArgs {
    pub file: PathBuf,
    pub output: Option<PathBuf>,
    pub emit: Option<Emit>,
    pub defines: Vec<(String, i64)>,
    pub model: Option<String>,
    /// Compile this network rolled out instead of a model.
    pub network: Option<NetworkArgs>,
    pub workers: Option<usize>,
    pub profile: Option<PathBuf>,
    /// The cost model's view of the training run the plan is for.
    pub assumptions: amp_plan::Assumptions,
    pub verbose: bool,
    /// Lower every `map` per element (`amp_lower::LowerOptions::per_element_maps`).
    pub per_element_maps: bool,
}

/// `--network NAME --pattern P --frames F`.
pub(crate) struct NetworkArgs {
    pub name: String,
    pub pattern: String,
    pub frames: amp_lower::Frames,
}

/// A link's latency or bandwidth: a finite number, not negative (the planner refuses a
/// bandwidth of 0 by name).
pub(crate) fn parse_link_value(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("`{text}` is not a finite number of at least 0")),
    }
}

/// The optimizer a plan assumes (`amprun train --optimizer`).
#[derive(Clone, Copy, ValueEnum, PartialEq, Eq, Debug)]
pub(crate) enum Optimizer {
    Sgd,
    Momentum,
    Adam,
}

pub(crate) fn compile(args: CompileArgs, printer: &Printer) -> ExitCode {
    if args.emit == Some(Emit::Plan) && args.workers.is_none() {
        eprintln!("error: `--emit plan` needs `--workers N` (the number of workers to plan for)");
        return ExitCode::from(2);
    }
    // With --emit the graph goes to stdout; a file is written when asked for with -o, or
    // by default when nothing is emitted. Checked before any work.
    let output = match (&args.output, args.emit.is_some()) {
        (Some(path), _) => Some(path.clone()),
        (None, false) => Some(args.file.with_extension("ampg")),
        (None, true) => None,
    };
    // `-o -`: the `.ampg` bytes to stdout, which --emit's text would share.
    let to_stdout = output.as_deref() == Some(Path::new("-"));
    if to_stdout && args.emit.is_some() {
        eprintln!("error: `-o -` writes the graph file to stdout, where `--emit` prints too: give `-o` a file");
        return ExitCode::from(2);
    }
    if let Some(path) = output.as_ref().filter(|_| !to_stdout) {
        let mut inputs = vec![("source", args.file.as_path())];
        inputs.extend(args.profile.as_deref().map(|p| ("profile", p)));
        if let Err(message) = crate::output::check(path, &inputs) {
            eprintln!("error: {message}");
            return ExitCode::from(2);
        }
    }
    // Read before compiling, so that a bad profile is reported before any other output.
    let profile = match args.profile.as_deref().map(read_profile).transpose() {
        Ok(profile) => profile,
        Err(code) => return code,
    };
    let (map, main, checked) = match crate::check_file(&args.file, &args.defines, printer) {
        Ok(checked) => checked,
        Err(code) => return code,
    };
    let program = &checked.program;
    let compiled = match &args.network {
        Some(network) => compile_network(program, &map, main, &args.file, network, printer),
        None => compile_model(program, &map, &args, printer),
    };
    let (graph, reports) = match compiled {
        Ok(compiled) => compiled,
        Err(code) => return code,
    };
    if args.verbose {
        for r in &reports {
            eprintln!("pass {}: {} changed", r.pass, r.changed);
            for d in &r.details {
                eprintln!("    {d}");
            }
        }
    }
    let plan = match args.workers {
        Some(workers) => match amp_plan::plan_workers(&graph, workers, &args.assumptions, profile.as_ref()) {
            Ok(plan) => Some(plan),
            Err(e) => {
                let what = args.profile.as_ref().map_or(String::new(), |p| format!(" with `{}`", p.display()));
                eprintln!("error: cannot plan `{}`{what}: {e}", args.file.display());
                return ExitCode::from(if matches!(e, amp_plan::PlanError::Profile { .. }) { 1 } else { 2 });
            }
        },
        None => None,
    };
    if let (true, Some(plan)) = (args.verbose, &plan) {
        eprint!("{}", plan.table(&graph.name));
    }
    let plan_json = plan.as_ref().map(amp_plan::Plan::to_json);
    let emitted = match args.emit {
        Some(Emit::Ir) => Some(amp_ir::text::print(&graph)),
        Some(Emit::IrJson) => Some(format!("{:#}\n", amp_ir::ampg::to_json(&graph, plan_json.as_ref()))),
        Some(Emit::Dot) => Some(amp_ir::dot::to_dot(&graph)),
        Some(Emit::Plan) => Some(format!("{:#}\n", plan_json.clone().unwrap_or_default())),
        Some(Emit::Clif) => match kernels_clif(&graph) {
            Ok(text) => Some(text),
            Err(message) => {
                eprintln!("error: {message}");
                return ExitCode::from(1);
            }
        },
        None => None,
    };
    if let Some(text) = &emitted {
        print!("{text}");
    }
    if let Some(path) = output {
        let bytes = amp_ir::ampg::write(&graph, plan_json.as_ref());
        let written = if to_stdout {
            use std::io::Write;
            std::io::stdout().lock().write_all(&bytes).map_err(|e| format!("cannot write the graph to stdout: {e}"))
        } else {
            crate::output::write_atomically(&path, &bytes)
        };
        if let Err(message) = written {
            eprintln!("error: {message}");
            return ExitCode::from(2);
        }
        if args.verbose && !to_stdout {
            match &plan {
                Some(plan) => {
                    eprintln!("wrote {} ({} nodes, plan: {})", path.display(), graph.nodes.node_count(), plan.summary())
                }
                None => eprintln!("wrote {} ({} nodes)", path.display(), graph.nodes.node_count()),
            }
        }
    }
    ExitCode::SUCCESS
}

type Compiled = (amp_ir::verify::Verified, Vec<amp_lower::passes::PassReport>);

/// The model `--model` names (default: the file's first), compiled; the exit code after
/// saying why not.
fn compile_model(
    program: &amp_sema::Program,
    map: &SourceMap,
    args: &CompileArgs,
    printer: &Printer,
) -> Result<Compiled, ExitCode> {
    let model = match &args.model {
        Some(name) => program.models.iter().copied().find(|&m| program.components[m.0 as usize].name == *name),
        None => program.models.first().copied(),
    };
    let Some(model) = model else {
        let names: Vec<&str> = program.models.iter().map(|m| program.components[m.0 as usize].name.as_str()).collect();
        match &args.model {
            Some(name) => {
                eprintln!("error: no model `{name}` in `{}` (models: {})", args.file.display(), names.join(", "))
            }
            None => eprintln!("error: `{}` defines no model to compile", args.file.display()),
        }
        return Err(ExitCode::from(2));
    };
    let options = amp_lower::LowerOptions { per_element_maps: args.per_element_maps, ..Default::default() };
    match amp_lower::compile_model_with(program, map, model, &options) {
        Ok(compiled) => Ok(compiled),
        Err(e) => {
            let _ = printer.print(map, e.diagnostics());
            Err(ExitCode::from(1))
        }
    }
}

/// The network `--network` names, rolled out under `--pattern` over `--frames`, compiled;
/// the exit code after saying why not (2 for no such network, 1 for a refused pattern or
/// network).
fn compile_network(
    program: &amp_sema::Program,
    map: &SourceMap,
    main: amp_diagnostics::FileId,
    file: &Path,
    network: &NetworkArgs,
    printer: &Printer,
) -> Result<Compiled, ExitCode> {
    let found = program.networks.iter().position(|n| n.span.file == main && n.name == network.name);
    let Some(index) = found else {
        let names: Vec<&str> =
            program.networks.iter().filter(|n| n.span.file == main).map(|n| n.name.as_str()).collect();
        let names = if names.is_empty() { "none".to_string() } else { names.join(", ") };
        eprintln!("error: no network `{}` in `{}` (networks: {names})", network.name, file.display());
        return Err(ExitCode::from(2));
    };
    let graph = amp_sema::rollout::RolloutGraph::of_network(&program.networks[index]);
    let pattern = match amp_sema::rollout::Pattern::named(&graph, &network.pattern) {
        Ok(pattern) => pattern,
        Err(e) => {
            let _ = printer.print(map, &[e.to_diagnostic(&graph)]);
            return Err(ExitCode::from(1));
        }
    };
    match amp_lower::compile_network(program, map, index, &pattern, network.frames) {
        Ok(compiled) => Ok(compiled),
        Err(e) => {
            let _ = printer.print(map, e.diagnostics());
            Err(ExitCode::from(1))
        }
    }
}

/// Reads a profile written by `amprun train --profile`; a usage error when the file cannot
/// be read, bad input when it is not a profile.
fn read_profile(path: &Path) -> Result<amp_plan::Profile, ExitCode> {
    let bytes = amp_ir::limits::read_bounded(path, amp_ir::limits::MAX_GRAPH_BYTES);
    let text = bytes.and_then(|b| String::from_utf8(b).map_err(std::io::Error::other)).map_err(|e| {
        eprintln!("error: cannot read `{}`: {e}", path.display());
        ExitCode::from(2)
    })?;
    amp_plan::Profile::from_json(&text).map_err(|e| {
        eprintln!("error: `{}` is not a profile: {e}", path.display());
        ExitCode::from(1)
    })
}

/// Compiles every fusion group's kernel (each distinct one once) and lists their
/// Cranelift IR.
fn kernels_clif(graph: &amp_ir::verify::Verified) -> Result<String, String> {
    let mut cache = amp_jit::KernelCache::new().map_err(|e| e.to_string())?;
    let compiled = amp_jit::compile_groups(graph, &mut cache);
    Ok(amp_jit::clif_listing(graph, &compiled))
}
