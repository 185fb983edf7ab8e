//! What every command does before running: the executor configuration from the flags,
//! parameters from a file, and an executor that has shown it can run the graph.

use crate::cli::ExecArgs;
use crate::data::InstanceRef;
use crate::failure::Failure;
use amp_exec::{ExecConfig, Executor};
use amp_ir::verify::Verified;
use amp_ir::Graph;
use amp_params::{OptimConfig, ParamSet, ParamSpec};
use std::path::Path;

/// The executor settings shared by every command (training adds its own on top), with
/// `in_flight` instances in flight unless the flags say otherwise
/// ([`ExecArgs::in_flight`]).
pub fn exec_config(args: &ExecArgs, optimizer: OptimConfig, in_flight: u64) -> ExecConfig {
    ExecConfig {
        workers: args.workers(),
        max_active_keys: usize::try_from(args.in_flight(in_flight)).unwrap_or(usize::MAX),
        optimizer,
        stall_timeout: args.stall_timeout(),
        max_trips: args.max_trips,
        fault: args.fault.clone(),
        max_batch: usize::try_from(args.max_batch).unwrap_or(usize::MAX),
        defer_weight_grads: !args.no_deferred_grads,
        jit: !args.no_jit,
        chain_routes: !args.no_chains,
        linear_epilogues: !args.no_epilogues,
        replicas: args.replicate.iter().map(|(node, r)| (node.clone(), usize::try_from(*r).unwrap_or(1))).collect(),
        replica_sync: args.replica_sync,
        slow_workers: args.slow_worker.clone(),
        ..ExecConfig::default()
    }
}

/// The model's parameters from a safetensors file (an amprun checkpoint, or a file
/// written by PyTorch with the model's `state_dict` names and shapes). Parameters holding
/// a NaN or an infinity are refused, naming the tensor: evaluating or training from them
/// would only print NaN.
pub fn load_params(path: &Path, graph: &Graph) -> Result<ParamSet, Failure> {
    let what = format!("cannot use `{}` as the parameters", path.display());
    let params = amp_params::load(path, &ParamSpec::of_graph(graph)).map_err(|e| Failure::params(&what, &e))?;
    params.check_finite().map_err(|e| Failure::params(&what, &e))?;
    Ok(params)
}

/// Parameters given in memory (`memory::Inputs::params`), checked as a file's are: the
/// model's names and shapes, every value finite.
pub fn given_params(given: &ParamSet, graph: &Graph) -> Result<ParamSet, Failure> {
    const WHAT: &str = "cannot use the parameters given";
    if given.specs() != ParamSpec::of_graph(graph).as_slice() {
        let names = |specs: &[ParamSpec]| specs.iter().map(|s| format!("{} {:?}", s.name, s.shape)).collect::<Vec<_>>();
        return Err(Failure::usage(format!(
            "{WHAT}: they are {:?}, the model's are {:?}",
            names(given.specs()),
            names(&ParamSpec::of_graph(graph))
        )));
    }
    given.check_finite().map_err(|e| Failure::params(WHAT, &e))?;
    Ok(given.clone())
}

/// Checks, before any work, that the file `flag` names can be written: its directory
/// exists and takes a new file, and it is absent or a regular file.
pub fn check_output(flag: &str, path: &Path) -> Result<(), Failure> {
    amp_params::target::check_writable(path).map_err(|e| Failure::params(flag, &e))
}

/// Refuses to write through `path` when it exists and is not a regular file (checked
/// again just before writing: `check_output` ran long before).
pub fn check_target(flag: &str, path: &Path) -> Result<(), Failure> {
    amp_params::target::check_target(path).map_err(|e| Failure::params(flag, &e))
}

/// An executor for `graph`. Runs it on no instances once, so that a graph with an op the
/// executor cannot run yet is refused before any data is read or any work done.
pub fn start(graph: &Verified, params: ParamSet, config: ExecConfig) -> Result<Executor, Failure> {
    let no_instance = |_| String::from("no instance");
    // A run split over processes connects them here, once the graph is known (its hash
    // is checked against every other process's).
    let executor = match crate::cluster::join(&config, graph)? {
        Some(cluster) => Executor::in_cluster(graph, params, config, cluster),
        None => Executor::new(graph, params, config),
    };
    let executor = executor.map_err(|e| Failure::exec(&e, &no_instance))?;
    executor.evaluate::<InstanceRef>(&[]).map_err(|e| Failure::exec(&e, &no_instance))?;
    Ok(executor)
}
