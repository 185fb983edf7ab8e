//! `amp._amp`, the native module of the `amp` Python package: the amprun library's
//! commands (`amprun::train::train`, `amprun::commands::{outputs, evaluation, gradient}`)
//! on a model compiled in process, with parameters and instances held in memory. The
//! options arrive as amprun's own command line (the Python layer spells each keyword as
//! its flag), so they are parsed and checked by amprun's parser, with its names and its
//! messages. The Python layer (`python/amp/__init__.py`) turns dicts into JSON Lines,
//! JSON text into dicts and this module's `Failure` into the package's exceptions.

use amp_diagnostics::{render_human, JsonDiagnostic, SourceMap};
use amp_params::{ParamSet, ParamSpec};
use amprun::cli::{Cli, Command, ModelArgs};
use amprun::failure::{Exit, Failure};
use amprun::memory::{Inputs, Text};
use amprun::model::Model;
use clap::Parser;
use numpy::{PyArray1, PyArrayMethods, PyReadonlyArrayDyn, PyUntypedArrayMethods};
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

pyo3::create_exception!(
    _amp,
    AmpFailure,
    PyException,
    "Why a command stopped: (kind, message, amprun's exit code, detail as JSON text)."
);

/// The names in-memory inputs go by in messages (`data:4: field ...`) and in the command
/// line the Python layer builds for them (in place of a path, never read).
const DATA: &str = "data";
const VALID: &str = "valid";

/// How often a training run looks for Ctrl-C (Python's signal flag) while it waits.
const POLL: Duration = Duration::from_millis(50);

/// A compiled model and, once set, its parameters.
#[pyclass(module = "amp._amp", name = "Model")]
struct PyModel {
    model: Model,
    /// The model's path (or the name its source goes by), for amprun's command line.
    path: String,
    /// None until trained, loaded or asked for: then a run starts as amprun does (from
    /// `seed`), and asking for them initialises them as `--seed 0` does.
    params: Option<ParamSet>,
    /// The compiler's warnings, as JSON text (a list).
    warnings: String,
    /// What it was compiled from, for a network's rollout analysis.
    args: ModelArgs,
    source: Option<String>,
}

fn failure(f: Failure) -> PyErr {
    let kind = match (f.exit, &f.data) {
        (_, Some(_)) => "data",
        (Exit::BadInput, None) => "input",
        (Exit::Usage, None) => "usage",
        (Exit::NonFiniteLoss, None) => "nonfinite",
        (Exit::Executor, None) => "executor",
        (Exit::Interrupted, None) => "interrupted",
    };
    let detail = f.data.as_ref().map_or(Value::Null, |e| {
        let file = e.file().unwrap_or_default();
        // The message without its location, which the fields carry.
        let mut what = e.to_string();
        if let Some(line) = e.line() {
            what = what.strip_prefix(&format!("{file}:{line}: ")).map_or(what.clone(), str::to_string);
        }
        json!({ "file": file, "line": e.line(), "field": e.field(), "what": what })
    });
    AmpFailure::new_err((kind, f.message, f.exit as i32, detail.to_string()))
}

fn usage(message: impl Into<String>) -> PyErr {
    failure(Failure::usage(message))
}

/// Parses amprun's command line (`argv` without the program's name), resolving data set
/// names (`digits`, `sst:train`) to their files as amprun does.
fn parse(argv: Vec<String>) -> PyResult<Command> {
    let cli = Cli::try_parse_from(std::iter::once("amprun".to_string()).chain(argv))
        .map_err(|e| usage(e.render().to_string().trim_end().to_string()))?;
    let mut command = cli.command;
    amprun::datasets::resolve_names(&mut command).map_err(failure)?;
    let exec = match &command {
        Command::Train(args) => &args.exec,
        Command::Eval(args) | Command::Infer(args) => &args.exec,
        Command::Grad(args) => &args.exec,
        Command::Data(_) | Command::Report(_) => return Ok(command),
    };
    // `--processes` starts more processes of the running program: here, Python.
    if exec.processes.unwrap_or(1) > 1 || exec.process.is_some() {
        return Err(usage("`processes` is for the amprun command line; in Python a run uses one process"));
    }
    Ok(command)
}

fn text(name: &str, jsonl: Option<Vec<u8>>) -> Option<Text> {
    jsonl.map(|jsonl| Text { name: name.to_string(), jsonl })
}

/// A flat `f32` array in the shape of `spec`.
fn array<'py>(py: Python<'py>, values: &[f32], shape: &[usize]) -> PyResult<Bound<'py, PyAny>> {
    Ok(PyArray1::from_slice(py, values).reshape(shape.to_vec())?.into_any())
}

fn param_dict<'py>(py: Python<'py>, params: &ParamSet) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    for (i, spec) in params.specs().iter().enumerate() {
        dict.set_item(&spec.name, array(py, params.data(i), &spec.shape)?)?;
    }
    Ok(dict)
}

/// Compiles `source` (the text of an `.amp` file at `path`) or the file at `path` (`.amp`,
/// or an `.ampg` graph); a compilation with errors raises `Failure("compile", ...)` whose
/// detail lists the diagnostics, each with its text as `ampc check` prints it.
#[pyfunction]
#[pyo3(signature = (path, source=None, defines=Vec::new(), model=None, network=None, pattern=None, frames=None, per_element_maps=false))]
#[allow(clippy::too_many_arguments)] // the keywords of `amp.compile`
fn compile(
    py: Python<'_>,
    path: String,
    source: Option<String>,
    defines: Vec<(String, i64)>,
    model: Option<String>,
    network: Option<String>,
    pattern: Option<String>,
    frames: Option<u32>,
    per_element_maps: bool,
) -> PyResult<PyModel> {
    if (pattern.is_some() || frames.is_some()) && network.is_none() {
        return Err(usage("`pattern` and `frames` apply to a `network`"));
    }
    let args = ModelArgs {
        path: PathBuf::from(&path),
        define: defines,
        model_name: model,
        network,
        pattern: pattern.unwrap_or_else(|| "sequential".to_string()),
        frames,
        per_element_maps,
    };
    let (loaded, warnings) = diagnosed(py, |report| amprun::model::load_reporting(&args, source.as_deref(), report))?;
    Ok(PyModel { model: loaded, path, params: None, warnings, args, source })
}

/// Runs a compilation, its diagnostics collected: the result and the warnings (JSON
/// text), or with errors `Failure("compile", ...)` whose detail lists every diagnostic,
/// errors first, each with its text as `ampc check` prints it.
fn diagnosed<T: Send>(
    py: Python<'_>,
    run: impl FnOnce(amprun::model::Diagnostics) -> Result<T, Failure> + Send,
) -> PyResult<(T, String)> {
    let mut diagnostics: Vec<Value> = Vec::new();
    let mut hear = |map: &SourceMap, found: &[amp_diagnostics::Diagnostic]| {
        for d in found {
            if let Ok(mut value) = serde_json::to_value(JsonDiagnostic::new(map, d)) {
                value["rendered"] = json!(render_human(map, std::slice::from_ref(d), false));
                diagnostics.push(value);
            }
        }
    };
    let result = py.detach(|| run(&mut hear));
    let (errors, warnings): (Vec<Value>, Vec<Value>) =
        diagnostics.into_iter().partition(|d| d["severity"].as_str() == Some("error"));
    match result {
        Ok(value) => Ok((value, Value::Array(warnings).to_string())),
        Err(f) if f.message.is_empty() && !errors.is_empty() => {
            let all: Vec<Value> = errors.into_iter().chain(warnings).collect();
            Err(AmpFailure::new_err(("compile", String::new(), f.exit as i32, Value::Array(all).to_string())))
        }
        Err(f) => Err(failure(f)),
    }
}

#[pymethods]
impl PyModel {
    /// The compiler's warnings, as JSON text (a list of diagnostics).
    #[getter]
    fn warnings(&self) -> String {
        self.warnings.clone()
    }

    /// The model's name (the graph's).
    #[getter]
    fn name(&self) -> String {
        amprun::model::display_name(&self.model.graph, Path::new(&self.path))
    }

    #[getter]
    fn path(&self) -> String {
        self.path.clone()
    }

    /// Trains as `amprun train ARGV` does, with `data`/`valid` (JSON Lines) in place of
    /// those files when given, starting from the model's parameters when it has them (and
    /// `--init`/`--resume` are not asked for). `callback` gets each metrics object as JSON
    /// text, on this thread, while training goes on in another with the GIL released.
    /// Ctrl-C (or an exception from the callback) stops training after the epoch in
    /// progress, keeps its parameters and checkpoint, and is raised then. Returns the
    /// metrics (JSON text) and the epoch a stop ended the run after.
    #[pyo3(signature = (argv, data=None, valid=None, callback=None))]
    fn train(
        &mut self,
        py: Python<'_>,
        argv: Vec<String>,
        data: Option<Vec<u8>>,
        valid: Option<Vec<u8>>,
        callback: Option<Py<PyAny>>,
    ) -> PyResult<(String, Option<u64>)> {
        let Command::Train(args) = parse(argv)? else { return Err(usage("not a `train` command line")) };
        let (tx, rx) = crossbeam_channel::unbounded::<String>();
        let stop = AtomicBool::new(false);
        let given = self.params.as_ref().filter(|_| args.init.is_none());
        let inputs = Inputs {
            model: Some(&self.model),
            params: given,
            data: text(DATA, data),
            valid: text(VALID, valid),
            on_metrics: Some(Box::new(move |value: &Value| {
                // The receiver outlives the run: a send cannot fail.
                let _ = tx.send(value.to_string());
            })),
            stop: Some(&stop),
        };
        let mut raised: Option<PyErr> = None;
        let joined = std::thread::scope(|scope| {
            let run = scope.spawn(|| amprun::train::train(&args, inputs));
            loop {
                match py.detach(|| rx.recv_timeout(POLL)) {
                    Ok(line) => {
                        if let (Some(callback), None) = (&callback, &raised) {
                            if let Err(e) = callback.call1(py, (line,)) {
                                stop.store(true, Ordering::SeqCst);
                                raised = Some(e);
                            }
                        }
                    }
                    Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
                    Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
                }
                if raised.is_none() {
                    if let Err(e) = py.check_signals() {
                        stop.store(true, Ordering::SeqCst);
                        raised = Some(e);
                    }
                }
            }
            run.join()
        });
        let Ok(result) = joined else {
            return Err(failure(Failure::new(Exit::Executor, "training panicked (a bug in Amp: please report it)")));
        };
        let trained = result.map_err(failure)?;
        self.params = Some(trained.params);
        if let Some(e) = raised {
            return Err(e);
        }
        Ok((Value::Array(trained.metrics).to_string(), trained.stopped_after))
    }

    /// `amprun infer ARGV`'s outputs, one row per instance: a 2-D array when every output
    /// has the same length, else a list of 1-D arrays.
    #[pyo3(signature = (argv, data=None))]
    fn infer<'py>(&mut self, py: Python<'py>, argv: Vec<String>, data: Option<Vec<u8>>) -> PyResult<Bound<'py, PyAny>> {
        let Command::Infer(args) = parse(argv)? else { return Err(usage("not an `infer` command line")) };
        let inputs = self.with_params(data);
        let outputs = py.detach(move || amprun::commands::outputs(&args, &inputs)).map_err(failure)?;
        let width = outputs.first().map_or(0, Vec::len);
        if outputs.iter().all(|o| o.len() == width) {
            let flat: Vec<f32> = outputs.concat();
            return array(py, &flat, &[outputs.len(), width]);
        }
        let rows = outputs.iter().map(|o| array(py, o, &[o.len()])).collect::<PyResult<Vec<_>>>()?;
        Ok(rows.into_pyobject(py)?.into_any())
    }

    /// `amprun eval ARGV`'s summary, as JSON text.
    #[pyo3(signature = (argv, data=None))]
    fn evaluate(&mut self, py: Python<'_>, argv: Vec<String>, data: Option<Vec<u8>>) -> PyResult<String> {
        let Command::Eval(args) = parse(argv)? else { return Err(usage("not an `eval` command line")) };
        let inputs = self.with_params(data);
        let summary = py.detach(move || amprun::commands::evaluation(&args, &inputs)).map_err(failure)?;
        Ok(summary.to_string())
    }

    /// `amprun grad ARGV`'s mean gradient (name to array) and mean loss.
    #[pyo3(signature = (argv, data=None))]
    fn grad<'py>(
        &mut self,
        py: Python<'py>,
        argv: Vec<String>,
        data: Option<Vec<u8>>,
    ) -> PyResult<(Bound<'py, PyDict>, f64)> {
        let Command::Grad(args) = parse(argv)? else { return Err(usage("not a `grad` command line")) };
        let inputs = self.with_params(data);
        let gradient = py.detach(move || amprun::commands::gradient(&args, &inputs)).map_err(failure)?;
        let Some(gradient) = gradient else { return Err(usage("a follower of a split run has no gradient")) };
        Ok((param_dict(py, &gradient.mean)?, gradient.loss))
    }

    /// The parameters, name to array (PyTorch's `state_dict` names and shapes).
    fn parameters<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let params = self.ensure_params();
        param_dict(py, params)
    }

    /// Replaces every parameter: `arrays` must name each of the model's, in its shape
    /// (float32, C order), and nothing else; every value finite.
    fn load_parameters(&mut self, arrays: BTreeMap<String, PyReadonlyArrayDyn<'_, f32>>) -> PyResult<()> {
        let specs = ParamSpec::of_graph(&self.model.graph);
        let mut params = ParamSet::zeros(&specs);
        for (i, spec) in specs.iter().enumerate() {
            let Some(given) = arrays.get(&spec.name) else {
                return Err(usage(format!("no array for the parameter `{}` ({:?})", spec.name, spec.shape)));
            };
            if given.shape() != spec.shape.as_slice() {
                return Err(usage(format!(
                    "the parameter `{}` has the shape {:?}, the array {:?}",
                    spec.name,
                    spec.shape,
                    given.shape()
                )));
            }
            params.data_mut(i).copy_from_slice(given.as_slice()?);
        }
        if let Some(extra) = arrays.keys().find(|name| !specs.iter().any(|s| &s.name == *name)) {
            let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
            return Err(usage(format!("the model has no parameter `{extra}` (its parameters: {})", names.join(", "))));
        }
        params.check_finite().map_err(|e| usage(e.to_string()))?;
        self.params = Some(params);
        Ok(())
    }

    /// Loads the parameters from a safetensors file (an amprun checkpoint, or PyTorch's
    /// `state_dict` saved with safetensors), checked as `--params` is.
    fn load_parameter_file(&mut self, path: PathBuf) -> PyResult<()> {
        self.params = Some(amprun::setup::load_params(&path, &self.model.graph).map_err(failure)?);
        Ok(())
    }

    /// Writes the parameters to a safetensors file (`amprun eval --params` reads it), in
    /// place (through a temporary file renamed over it).
    fn save(&mut self, path: PathBuf) -> PyResult<()> {
        amprun::setup::check_output("save", &path).map_err(failure)?;
        let name = self.name();
        let params = self.ensure_params();
        let metadata = BTreeMap::from([("model".to_string(), name)]);
        amp_params::save(params, &path, &metadata)
            .map_err(|e| failure(Failure::params(&format!("cannot write `{}`", path.display()), &e)))
    }

    /// The graph in Amp's IR text (`ampc compile --emit ir`).
    fn graph(&self) -> String {
        amp_ir::text::print(&self.model.graph)
    }

    /// `ampc rollout --message-format json`'s object for the network the model was
    /// compiled from: under `pattern` (default: the one it was compiled with) the
    /// tableau over frames 0..=`window` and the inference factor, or with `enumerate`
    /// every valid pattern.
    #[pyo3(signature = (pattern=None, window=1, enumerate=false))]
    fn rollout(&self, py: Python<'_>, pattern: Option<String>, window: usize, enumerate: bool) -> PyResult<String> {
        let mut args = self.args.clone();
        if let Some(pattern) = pattern {
            args.pattern = pattern;
        }
        let source = self.source.as_deref();
        let (value, _) = diagnosed(py, |report| amprun::model::rollout(&args, source, window, enumerate, report))?;
        Ok(value.to_string())
    }

    /// The placement `amprun train ARGV` would follow, as JSON text: the one-line summary,
    /// the copies of the graph and the plan.
    fn plan(&self, argv: Vec<String>) -> PyResult<String> {
        let Command::Train(args) = parse(argv)? else { return Err(usage("not a `train` command line")) };
        let choice = amprun::train::choose_placement(&args, &self.model).map_err(failure)?;
        let plan = choice.plan.as_ref().map(serde_json::to_value).transpose();
        let plan = plan.map_err(|e| usage(format!("the plan cannot be written as JSON: {e}")))?;
        let summary = json!({ "summary": choice.summary(), "copies": choice.copies, "plan": plan });
        Ok(summary.to_string())
    }
}

impl PyModel {
    /// The model, its parameters (see `ensure_params`) and `data` as a one-pass command's
    /// inputs.
    fn with_params(&mut self, data: Option<Vec<u8>>) -> Inputs<'_> {
        self.ensure_params();
        Inputs { model: Some(&self.model), params: self.params.as_ref(), data: text(DATA, data), ..Inputs::default() }
    }

    /// The parameters, initialised as `--seed 0` does when the model has none yet.
    fn ensure_params(&mut self) -> &ParamSet {
        let graph = &self.model.graph;
        self.params.get_or_insert_with(|| ParamSet::init(&ParamSpec::of_graph(graph), 0))
    }
}

#[pymodule]
fn _amp(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("Failure", m.py().get_type::<AmpFailure>())?;
    m.add_class::<PyModel>()?;
    m.add_function(wrap_pyfunction!(compile, m)?)?;
    Ok(())
}
