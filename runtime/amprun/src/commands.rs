//! `amprun eval`, `amprun infer` and `amprun grad`: saved parameters, one data set, one
//! pass of the executor.

use crate::cli::{EvalArgs, GradArgs};
use crate::data::{DataSet, Loader};
use crate::failure::Failure;
use crate::memory::Inputs;
use crate::model::{self, display_name, Model};
use crate::report::{finite, Metrics};
use crate::setup;
use crate::steps::StepTiming;
use amp_exec::Executor;
use amp_ir::Graph;
use amp_params::{OptimConfig, ParamSet};
use serde_json::json;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::io::Write;

/// The model, its parameters, an executor and the data of a one-pass command.
struct Session<'a> {
    /// The model given in memory, else the one the flags name.
    model: Cow<'a, Model>,
    executor: Executor,
    loader: Loader,
    data: DataSet,
}

impl<'a> Session<'a> {
    fn open(args: &EvalArgs, unlabeled: bool, inputs: &Inputs<'a>) -> Result<Session<'a>, Failure> {
        open(&args.model, &args.params, &args.data, &args.data_args, &args.exec, args.seed, unlabeled, inputs)
    }

    fn evaluate(&self) -> Result<amp_exec::EvalStats, Failure> {
        self.executor.evaluate(&self.data.all()).map_err(|e| Failure::exec(&e, &|i| self.describe(i)))
    }

    fn infer(&self) -> Result<Vec<Vec<f32>>, Failure> {
        self.executor.infer(&self.data.all()).map_err(|e| Failure::exec(&e, &|i| self.describe(i)))
    }

    fn describe(&self, i: i64) -> String {
        match usize::try_from(i) {
            Ok(i) => self.loader.describe(&self.data, i),
            Err(_) => format!("instance {i}"),
        }
    }
}

#[allow(clippy::too_many_arguments)] // eval's and grad's flags, taken apart
fn open<'a>(
    model_args: &crate::cli::ModelArgs,
    params: &std::path::Path,
    data: &std::path::Path,
    data_args: &crate::cli::DataArgs,
    exec: &crate::cli::ExecArgs,
    seed: Option<u64>,
    unlabeled: bool,
    inputs: &Inputs<'a>,
) -> Result<Session<'a>, Failure> {
    let model = model::given_or_load(model_args, inputs.model)?;
    let graph = &model.graph;
    // A forward pass never updates; the update period is the default's (synchronous), so
    // that a plan `ampc compile --workers N` stored for the default training setup is
    // followed.
    let assumptions = crate::placement::assumptions(crate::cli::DEFAULT_UPDATE_SIZE, None, true);
    let choice = crate::placement::choose(graph, model.plan.as_ref(), exec, &model_args.path, assumptions)?;
    let params = match inputs.params {
        Some(given) => setup::given_params(given, graph)?,
        None => setup::load_params(params, graph)?,
    };
    // Forward passes and single gradients never update: the optimizer is never used.
    let mut config = amp_exec::ExecConfig {
        placement: choice.placement,
        ..setup::exec_config(exec, OptimConfig::sgd(0.0), crate::cli::DEFAULT_IN_FLIGHT)
    };
    config.replicas.extend(choice.replicas);
    config.copies = choice.copies;
    let executor = setup::start(graph, params, config)?;
    let files = if inputs.data.is_some() { &[][..] } else { &[data][..] };
    let mut loader = Loader::new(graph, data_args, files, None)?.with_noise_seed(seed.unwrap_or(0));
    if unlabeled {
        loader = loader.unlabeled(graph);
    }
    let data = loader.load_from(data, inputs.data.as_ref())?;
    let data = crate::frames::check(graph, &loader, data, data_args.skip_bad_data)?;
    Ok(Session { model, executor, loader, data })
}

/// Prints loss, accuracy and throughput of the parameters on the data, and for a
/// rolled-out network the accuracy at each update step where a frame's output appears
/// (`crate::steps`); `--metrics` writes them as JSON lines.
pub fn eval(args: &EvalArgs) -> Result<(), Failure> {
    if let Some(path) = &args.metrics {
        setup::check_output("--metrics", path)?;
    }
    if args.output.is_some() {
        return Err(Failure::usage("--output applies to `amprun infer`; `eval` reports with --metrics".to_string()));
    }
    let session = Session::open(args, false, &Inputs::default())?;
    let stats = session.evaluate()?;
    // A split run's followers ran their workers' part; process 0 reports.
    if crate::cluster::follower() {
        return Ok(());
    }
    let accuracy = stats.accuracy.map(|a| format!("  accuracy {:.2}%", 100.0 * a)).unwrap_or_default();
    println!(
        "{}: loss {:.6}{accuracy}  instances {}  instances/s {:.1}  ({})",
        display_name(&session.model.graph, &args.model.path),
        stats.loss,
        stats.instances,
        stats.instances_per_s,
        args.data.display()
    );
    let mut metrics = Metrics::open(args.metrics.as_deref(), false)?;
    metrics.write_json(&eval_summary(&stats))?;
    let Some(timing) = StepTiming::of(&session.model.graph) else { return Ok(()) };
    let steps = timing.accuracy_per_step(&stats.judgements);
    println!(
        "accuracy per update step (F(R) = {}, a frame's output every {} step(s) from step {}):",
        timing.factor, timing.factor, timing.first
    );
    println!("  step  accuracy");
    for step in steps.iter().filter(|s| s.answers) {
        let accuracy = step.accuracy.map_or_else(|| "-".to_string(), |a| format!("{:.2}%", 100.0 * a));
        println!("  {:>4}  {accuracy}", step.step);
    }
    for step in &steps {
        let row = json!({
            "split": "valid",
            "update_step": step.step,
            "accuracy": step.accuracy.map(|a| finite(f64::from(a))),
        });
        metrics.write_json(&row)?;
    }
    Ok(())
}

/// `amprun eval`'s summary (its `--metrics` line), with what `inputs` holds in place of
/// files, and the instances per second.
pub fn evaluation(args: &EvalArgs, inputs: &Inputs) -> Result<serde_json::Value, Failure> {
    let stats = Session::open(args, false, inputs)?.evaluate()?;
    let mut summary = eval_summary(&stats);
    summary["instances_per_s"] = json!(finite(stats.instances_per_s));
    Ok(summary)
}

fn eval_summary(stats: &amp_exec::EvalStats) -> serde_json::Value {
    json!({
        "split": "valid",
        "instances": stats.instances,
        "loss": finite(f64::from(stats.loss)),
        "accuracy": stats.accuracy.map(|a| finite(f64::from(a))),
    })
}

/// `amprun infer`'s outputs, one per instance in input order, with what `inputs` holds in
/// place of files.
pub fn outputs(args: &EvalArgs, inputs: &Inputs) -> Result<Vec<Vec<f32>>, Failure> {
    Session::open(args, true, inputs)?.infer()
}

/// Writes one JSON line per instance, in input order, to stdout or `--output`:
/// `{"instance": i, "output": [...], "argmax": k}`, with `"probabilities"` (the softmax of
/// the output) when the output is the logits of a cross-entropy loss. The labels may be
/// absent from the data (see `Loader::unlabeled`).
pub fn infer(args: &EvalArgs) -> Result<(), Failure> {
    if args.metrics.is_some() {
        return Err(Failure::usage(
            "--metrics applies to `amprun eval`; `infer` writes its outputs to stdout or --output".to_string(),
        ));
    }
    if let Some(path) = &args.output {
        setup::check_output("--output", path)?;
    }
    let session = Session::open(args, true, &Inputs::default())?;
    let outputs = session.infer()?;
    if crate::cluster::follower() {
        return Ok(());
    }
    let probabilities = feeds_cross_entropy(&session.model.graph);
    let write = |out: &mut dyn Write| -> std::io::Result<()> {
        for (i, output) in outputs.iter().enumerate() {
            writeln!(out, "{}", infer_line(i, output, probabilities))?;
        }
        out.flush()
    };
    match &args.output {
        Some(path) => {
            setup::check_target("--output", path)?;
            let file = std::fs::File::create(path).map_err(|e| Failure::io("write", path, &e))?;
            write(&mut std::io::BufWriter::new(file)).map_err(|e| Failure::io("write", path, &e))
        }
        None => {
            let stdout = std::io::stdout();
            // An error here is stdout closed (e.g. piped into `head`): nothing more to say.
            let _ = write(&mut std::io::BufWriter::new(stdout.lock()));
            Ok(())
        }
    }
}

/// One instance's line: its index, the output, the index of its largest element (for an
/// output of more than one), and with `probabilities` their softmax.
fn infer_line(i: usize, output: &[f32], probabilities: bool) -> serde_json::Value {
    let mut line = json!({ "instance": i, "output": output });
    if output.len() > 1 {
        let best = amp_ir::order::argmax(output);
        line["argmax"] = json!(best);
        if probabilities {
            line["probabilities"] = json!(amp_ir::vocab::softmax_rows(output, output.len()));
        }
    }
    line
}

/// Whether the output `infer` returns (the sink named `forward`, else the first) is what
/// a cross-entropy loss takes as its logits: the same port of the same node feeds both.
fn feeds_cross_entropy(graph: &Graph) -> bool {
    use amp_ir::Op;
    let Some(sink) = graph.main_sink() else { return false };
    // (from node, from port, to node) of every edge.
    let edges = || {
        graph.nodes.edge_indices().filter_map(|e| {
            let (from, to) = graph.nodes.edge_endpoints(e)?;
            Some((from, graph.nodes[e].from_port, to))
        })
    };
    let Some((logits, port, _)) = edges().find(|&(_, _, to)| to == sink) else { return false };
    edges().any(|(from, from_port, to)| {
        (from, from_port) == (logits, port)
            // Every cross-entropy (plain, a mean's term, a weighted term) has a label.
            && matches!(&graph.nodes[to].op, Op::Loss(kind) if kind.label().is_some())
    })
}

/// Writes the mean gradient over the instances and prints the mean loss. Split over
/// processes, each sums the gradients of the groups it owns and process 0 gathers the
/// sums, then writes the file.
pub fn grad(args: &GradArgs) -> Result<(), Failure> {
    if !crate::cluster::follower() {
        setup::check_output("--out", &args.out)?;
    }
    let Some(Gradient { mean, loss, instances: n, model: name }) = gradient(args, &Inputs::default())? else {
        return Ok(());
    };
    let metadata: BTreeMap<String, String> = [
        ("model".to_string(), name.clone()),
        ("instances".to_string(), n.to_string()),
        ("mean_loss".to_string(), loss.to_string()),
    ]
    .into_iter()
    .collect();
    amp_params::save(&mean, &args.out, &metadata)
        .map_err(|e| Failure::params(&format!("cannot write `{}`", args.out.display()), &e))?;
    println!("{name}: mean loss {loss:.6} over {n} instances");
    println!("wrote the mean gradient of {} parameters to {}", mean.len(), args.out.display());
    Ok(())
}

/// The mean gradient over a data set's instances, and the mean loss.
pub struct Gradient {
    pub mean: ParamSet,
    pub loss: f64,
    pub instances: usize,
    /// The model's name.
    pub model: String,
}

/// `amprun grad`'s gradient, with what `inputs` holds in place of files; none on a split
/// run's followers (process 0 gathers it).
pub fn gradient(args: &GradArgs, inputs: &Inputs) -> Result<Option<Gradient>, Failure> {
    let follower = crate::cluster::follower();
    let mut session =
        open(&args.model, &args.params, &args.data, &args.data_args, &args.exec, args.seed, false, inputs)?;
    let instances = session.data.all();
    if instances.is_empty() {
        return Err(Failure::bad_input(format!("`{}` has no instances", session.data.path.display())));
    }
    let mut sum: Option<ParamSet> = None;
    let mut loss_sum = 0.0f64;
    for (i, instance) in instances.iter().enumerate() {
        let (loss, grads) =
            session.executor.grads(instance).map_err(|e| Failure::exec(&e, &|_| session.describe(i as i64)))?;
        loss_sum += f64::from(loss);
        match &mut sum {
            None => sum = Some(grads),
            Some(total) => {
                for t in 0..total.len() {
                    total.data_mut(t).iter_mut().zip(grads.data(t)).for_each(|(a, g)| *a += g);
                }
            }
        }
    }
    let n = instances.len();
    let mut mean = sum.unwrap_or_else(|| session.executor.params().zeros_like());
    session.executor.gather_grads(&mut mean).map_err(|e| Failure::exec(&e, &|_| String::new()))?;
    if follower {
        return Ok(None);
    }
    let scale = 1.0 / n as f32;
    for t in 0..mean.len() {
        mean.data_mut(t).iter_mut().for_each(|g| *g *= scale);
    }
    let loss = loss_sum / n as f64;
    let model = display_name(&session.model.graph, &args.model.path);
    Ok(Some(Gradient { mean, loss, instances: n, model }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn infer_lines_carry_argmax_and_probabilities() {
        let line = infer_line(3, &[0.0, 2.0, 2.0, -1.0], true);
        assert_eq!(line["instance"], 3);
        assert_eq!(line["argmax"], 1, "the first of equal maxima");
        let p: Vec<f64> = line["probabilities"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
        assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-6);
        assert!((p[1] - p[2]).abs() < 1e-7 && p[1] > p[0] && p[0] > p[3]);
        assert!(infer_line(0, &[1.0, 2.0], false).get("probabilities").is_none());
        assert!(infer_line(0, &[1.5], true).get("argmax").is_none());
        // Large logits do not overflow; NaN is never the argmax.
        let line = infer_line(0, &[1000.0, 0.0], true);
        assert!(line["probabilities"][1].as_f64().is_some_and(f64::is_finite));
        assert_eq!(infer_line(0, &[f32::NAN, -1.0], false)["argmax"], 1);
    }
}
