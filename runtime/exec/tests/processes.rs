//! A run split over processes, its processes as threads of this test over the in-memory
//! transport (`amp_net::memory`): the same bridge, protocol and executor as over
//! timely's sockets, with frames held back and reordered between senders, and a process
//! cut off. (runtime/amprun/tests/distributed.rs runs real processes over timely.)

mod common;

use amp_data::Instance;
use amp_exec::{Cluster, ClusterSpec, ExecConfig, ExecError, Executor, NodeSelector, Placement, SlowWorker};
use amp_ir::verify::Verified;
use amp_net::memory::{Faults, MemoryNet};
use amp_params::{OptimConfig, ParamSet};
use common::*;
use petgraph::visit::NodeIndexable;
use std::time::{Duration, Instant};

fn config() -> ExecConfig {
    ExecConfig {
        workers: 2,
        placement: Placement::Contiguous,
        max_active_keys: 4,
        ..ExecConfig::deterministic(4, OptimConfig::adam(0.01))
    }
}

/// Runs `work` in each of two processes joined by an in-memory net with `faults` (and
/// process 1 cut off once `cut_after` frames were sent), each with an executor of `graph`
/// under `config`; leaves the cluster after it. Each process's result, or its first error.
fn in_two_processes<T: Send>(
    graph: &Verified,
    config: &ExecConfig,
    faults: Faults,
    cut_after: Option<u64>,
    work: impl Fn(&mut Executor) -> Result<T, ExecError> + Sync,
) -> Vec<Result<T, ExecError>> {
    let (net, links) = MemoryNet::mesh(2, faults);
    let addresses = vec!["memory:0".to_string(), "memory:1".to_string()];
    if let Some(frames) = cut_after {
        net.cut_after_frames(1, frames);
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = links
            .into_iter()
            .enumerate()
            .map(|(process, link)| {
                let (addresses, work) = (addresses.clone(), &work);
                s.spawn(move || {
                    let spec = ClusterSpec { timeout: Duration::from_secs(2), ..ClusterSpec::new(process, addresses) };
                    let cluster = Cluster::start(Box::new(link), spec, Instant::now(), 0)?;
                    let params = ParamSet::init(&amp_params::ParamSpec::of_graph(graph), 2);
                    let result = Executor::in_cluster(graph, params, config.clone(), cluster.clone())
                        .and_then(|mut ex| work(&mut ex));
                    // A failed cluster's shutdown reports the failure again.
                    let left = cluster.shutdown();
                    result.and_then(|r| left.map(|()| r))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("a process thread panicked")).collect()
    })
}

/// `epochs` epochs of training, then the parameters gathered to process 0: the losses and
/// parameters.
fn train(
    data: &[Instance],
    epochs: usize,
) -> impl Fn(&mut Executor) -> Result<(Vec<f32>, ParamSet), ExecError> + Sync + '_ {
    move |ex| {
        let mut losses = Vec::new();
        for _ in 0..epochs {
            losses.extend(ex.train_epoch(data)?.losses);
        }
        ex.gather()?;
        Ok((losses, ex.params().clone()))
    }
}

fn list_reduce() -> (Verified, Vec<Instance>) {
    let graph = compile_example("list_reduce", &[("hidden", 6)]);
    let data = token_lists(&graph, &[3, 0, 1, 4, 2, 2, 5, 1, 3, 0, 2], 14, 3);
    (graph, data)
}

fn assert_same_training(what: &str, (losses, params): &(Vec<f32>, ParamSet), expected: &[f32], single: &ParamSet) {
    assert_eq!(losses.len(), expected.len(), "{what}");
    for (x, y) in losses.iter().zip(expected) {
        assert!((x - y).abs() <= 1e-4 * (1.0 + y.abs()), "{what}: loss {x} vs {y}");
    }
    let diff = max_rel_diff(params, single);
    assert!(diff < 1e-4, "{what}: parameters differ by {diff}");
}

/// Synchronous training over two processes gives process 0 the losses and, gathered,
/// the parameters of the same two workers in one process, whatever the order in which
/// the two processes' frames arrive.
#[test]
fn two_processes_in_memory_train_as_one_process_under_delays() {
    let (graph, data) = list_reduce();
    let mut single = executor(&graph, 2, config());
    let mut expected = Vec::new();
    for _ in 0..2 {
        expected.extend(single.train_epoch(&data).unwrap().losses);
    }
    for seed in 0..6 {
        let faults = Faults { seed, max_delay: if seed == 0 { 0 } else { 4 } };
        let mut results = in_two_processes(&graph, &config(), faults, None, train(&data, 2));
        let zero = results.remove(0).unwrap_or_else(|e| panic!("seed {seed}: process 0: {e}"));
        assert!(results.remove(0).is_ok(), "seed {seed}: process 1 failed");
        assert_same_training(&format!("seed {seed}"), &zero, &expected, single.params());
    }
}

/// A Linear node's copy in the other process (its gradients pulled before each update of
/// its master, the values sent back after it) trains as the graph without copies in one
/// process, synchronising after every update.
#[test]
fn a_copy_in_the_other_process_trains_as_no_copy() {
    let (graph, data) = list_reduce();
    // Every node on worker 0 (process 0); the copy of `cell` goes to worker 1 (process 1).
    let on_zero = ExecConfig {
        placement: Placement::Explicit(vec![0; graph.nodes.node_bound()]),
        replica_sync: 1,
        ..ExecConfig::deterministic(4, OptimConfig::sgd(0.1))
    };
    let on_zero = ExecConfig { workers: 2, max_active_keys: 4, ..on_zero };
    let mut single = executor(&graph, 2, on_zero.clone());
    let mut expected = Vec::new();
    for _ in 0..2 {
        expected.extend(single.train_epoch(&data).unwrap().losses);
    }
    let copied = ExecConfig { replicas: vec![(NodeSelector::Label("cell".into()), 2)], ..on_zero };
    let trained = train(&data, 2);
    let copy_elsewhere = |ex: &mut Executor| {
        let placement = ex.placement();
        let (copy, original) = ex.replica_nodes()[0];
        assert_eq!((placement[original as usize], placement[copy as usize]), (Some(0), Some(1)));
        trained(ex)
    };
    for seed in 0..3 {
        let mut results = in_two_processes(&graph, &copied, Faults { seed, max_delay: 3 }, None, copy_elsewhere);
        let zero = results.remove(0).unwrap_or_else(|e| panic!("seed {seed}: process 0: {e}"));
        assert!(results.remove(0).is_ok(), "seed {seed}: process 1 failed");
        assert_same_training(&format!("seed {seed}"), &zero, &expected, single.params());
    }
}

/// One instance's gradients, split over two processes and gathered to process 0, are one
/// process's; the loss is process 0's alone (NaN on the other).
#[test]
fn gradients_gathered_from_two_processes_are_one_processs() {
    let (graph, data) = list_reduce();
    let mut single = executor(&graph, 2, config());
    let (loss, grads) = single.grads(&data[3]).unwrap();
    let results = in_two_processes(&graph, &config(), Faults { seed: 5, max_delay: 2 }, None, |ex| {
        let (loss, mut grads) = ex.grads(&data[3])?;
        ex.gather_grads(&mut grads)?;
        Ok((loss, grads))
    });
    let (zero_loss, zero_grads) = results[0].as_ref().expect("process 0");
    assert!((zero_loss - loss).abs() <= 1e-5 * (1.0 + loss.abs()), "{zero_loss} vs {loss}");
    let diff = max_rel_diff(zero_grads, &grads);
    assert!(diff < 1e-5, "gradients differ by {diff}");
    assert!(results[1].as_ref().expect("process 1").0.is_nan());
}

/// Trains on many instances under `config` while process 1 is cut off after the
/// processes sent 400 frames, well into the run (its 2,200 instances send thousands):
/// process 0 ends with an error naming it, process 1 fails too, and nothing hangs.
fn a_cut_ends_the_run_naming_the_process(config: &ExecConfig) {
    let (graph, data) = list_reduce();
    let many: Vec<Instance> = data.iter().cycle().take(data.len() * 200).cloned().collect();
    let started = Instant::now();
    let results = in_two_processes(&graph, config, Faults::default(), Some(400), train(&many, 1));
    let error = results[0].as_ref().expect_err("process 0 fails").to_string();
    assert!(error.contains("process 1 (memory:1)"), "{error}");
    assert!(results[1].is_err(), "the cut process fails too");
    assert!(started.elapsed() < Duration::from_secs(60), "the run ended in bounded time");
}

/// A process cut off while the run goes on: the other ends with an error naming it,
/// within a few heartbeat timeouts, and nothing hangs.
#[test]
fn a_process_cut_off_ends_the_run_naming_it() {
    a_cut_ends_the_run_naming_the_process(&config());
}

/// The same with a copy of the graph in each process, whose updates wait for the other's
/// steps of each all-reduce.
#[test]
fn a_process_cut_off_mid_reduction_ends_the_run_naming_it() {
    a_cut_ends_the_run_naming_the_process(&ExecConfig { workers: 2, copies: 2, sync_updates: false, ..config() });
}

/// `copies` copies of the graph on `workers` workers, trained synchronously (SGD, an
/// update every 4 instances, 4 in flight).
fn synchronous_copies(workers: usize, copies: usize) -> ExecConfig {
    ExecConfig {
        workers,
        copies,
        placement: Placement::RoundRobin,
        ..ExecConfig { max_active_keys: 4, ..ExecConfig::deterministic(4, OptimConfig::sgd(0.1)) }
    }
}

/// Copies of the whole graph split over two processes (1 and 2 copies in each), trained
/// synchronously, give process 0 the losses and parameters of the same copies in one
/// process (which are minibatch SGD's: tests/copies.rs), whatever the order in which the
/// frames arrive; the all-reduce leaves process 1 with the same values, bit for bit.
#[test]
fn copies_split_over_processes_train_as_in_one_process() {
    let (graph, data) = list_reduce();
    for (workers, copies) in [(2, 2), (4, 4), (4, 2)] {
        let config = synchronous_copies(workers, copies);
        let mut single = executor(&graph, 2, config.clone());
        let mut expected = Vec::new();
        for _ in 0..2 {
            expected.extend(single.train_epoch(&data).unwrap().losses);
        }
        for seed in 0..3 {
            let what = format!("{copies} copies on {workers} workers, seed {seed}");
            let faults = Faults { seed, max_delay: if seed == 0 { 0 } else { 3 } };
            let mut results = in_two_processes(&graph, &config, faults, None, train(&data, 2));
            let zero = results.remove(0).unwrap_or_else(|e| panic!("{what}: process 0: {e}"));
            let one = results.remove(0).unwrap_or_else(|e| panic!("{what}: process 1: {e}"));
            assert_same_training(&what, &zero, &expected, single.params());
            assert_eq!(max_rel_diff(&one.1, &zero.1), 0.0, "{what}: process 1's values differ from process 0's");
        }
    }
}

/// Split over processes, copies report every process's copies' staleness: process 0's
/// metrics are those of the same copies in one process (synchronous training measures
/// the same gradients at the same updates).
#[test]
fn copies_split_over_processes_report_every_copys_staleness() {
    let (graph, data) = list_reduce();
    let config = synchronous_copies(4, 4);
    let measured = |stats: &amp_exec::EpochStats| -> Vec<(String, u64, u64, u64)> {
        stats.staleness.iter().map(|g| (g.group.clone(), g.stats.gradients, g.stats.total, g.stats.max)).collect()
    };
    let expected = measured(&executor(&graph, 2, config.clone()).train_epoch(&data).unwrap());
    assert!(expected.iter().all(|(_, gradients, _, _)| *gradients > 0), "{expected:?}");
    let results = in_two_processes(&graph, &config, Faults { seed: 1, max_delay: 2 }, None, |ex| {
        ex.train_epoch(&data).map(|stats| measured(&stats))
    });
    assert_eq!(results[0].as_ref().expect("process 0"), &expected);
}

/// With 4 copies over two processes, every copy's worker runs forward and backward
/// batches (admissions reach the copies of process 1), and each update's all-reduce has
/// each process send one copy of the gradients: 4 bytes per parameter at two processes.
#[test]
fn copies_in_both_processes_serve_instances_and_reduce_once_per_update() {
    let (graph, data) = list_reduce();
    let many: Vec<Instance> = data.iter().cycle().take(64).cloned().collect();
    let config = four_traced_copies();
    let parameters: usize =
        amp_params::ParamSpec::of_graph(&graph).iter().map(|s| s.shape.iter().product::<usize>()).sum();
    let results = in_two_processes(&graph, &config, Faults { seed: 2, max_delay: 1 }, None, |ex| {
        let stats = ex.train_epoch(&many)?;
        Ok((stats.reduced, ex.take_trace()))
    });
    let (reduced, trace) = results[0].as_ref().expect("process 0");
    assert!(reduced.updates >= 2, "{} updates of 64 instances at 8", reduced.updates);
    assert_eq!(reduced.bytes_per_update, 4 * parameters as u64);
    assert_eq!(results[1].as_ref().expect("process 1").0.updates, reduced.updates);
    for worker in 0..4u32 {
        for kind in [amp_exec::TraceKind::Forward, amp_exec::TraceKind::Backward] {
            let n = trace.iter().filter(|e| e.worker == worker && e.kind == kind).count();
            assert!(n > 0, "worker {worker} ran no {kind:?} batch");
        }
    }
}

/// Asynchronous training with copies in both processes learns: the last epoch's mean loss
/// well below the first's, and both processes end with the same values.
#[test]
fn asynchronous_copies_over_processes_learn() {
    let (graph, data) = list_reduce();
    let config = ExecConfig {
        workers: 2,
        copies: 2,
        max_active_keys: 4,
        sync_updates: false,
        ..ExecConfig::deterministic(2, OptimConfig::adam(0.02))
    };
    let results = in_two_processes(&graph, &config, Faults { seed: 3, max_delay: 2 }, None, train(&data, 12));
    let (losses, zero) = results[0].as_ref().expect("process 0");
    let one = &results[1].as_ref().expect("process 1").1;
    let mean = |epoch: &[f32]| epoch.iter().sum::<f32>() / epoch.len() as f32;
    let (first, last) = (mean(&losses[..data.len()]), mean(&losses[losses.len() - data.len()..]));
    assert!(last < 0.7 * first, "the loss went from {first} to {last}");
    assert_eq!(max_rel_diff(one, zero), 0.0, "process 1's values differ from process 0's");
}

/// Copies that cannot be split over the processes are refused by name in every process,
/// before anything runs: a copy across the processes' boundary, and a staleness bound of
/// 0 (a read made during an all-reduce is applied by the next one).
#[test]
fn copies_that_cannot_split_over_processes_are_refused() {
    let (graph, _) = list_reduce();
    let across = ExecConfig { workers: 6, copies: 3, ..config() };
    let zero = ExecConfig { workers: 2, copies: 2, sync_updates: false, max_staleness: Some(0), ..config() };
    for (config, expected) in [(across, "copy 1 of the graph runs on workers 2..=3"), (zero, "bound must be 1 or more")]
    {
        let results = in_two_processes(&graph, &config, Faults { seed: 1, max_delay: 0 }, None, |_| Ok(()));
        for (process, result) in results.iter().enumerate() {
            match result {
                Err(ExecError::Config { message }) => assert!(message.contains(expected), "{message}"),
                other => panic!("process {process}: expected a refusal, got {other:?}"),
            }
        }
    }
}

/// Asynchronous copies over two processes keep a staleness bound K: with 4 copies on 4
/// workers, 16 instances in flight and an update after every instance, no gradient is
/// applied more than K updates after the version it read in either process (process 0's
/// metrics count every process's copies), every instance is trained once with a finite
/// loss and its gradients measured, and both processes end with the same values. Without
/// a bound the same run applies gradients more than one update late.
#[test]
fn copies_over_processes_keep_a_staleness_bound() {
    let (graph, data) = list_reduce();
    let many: Vec<Instance> = data.iter().cycle().take(96).cloned().collect();
    let config = |bound| ExecConfig {
        workers: 4,
        copies: 4,
        placement: Placement::RoundRobin,
        max_active_keys: 16,
        sync_updates: false,
        max_staleness: bound,
        // A straggler in process 1: its copy's reads age while the others update.
        slow_workers: vec![SlowWorker { worker: 3, factor: 20.0, during: None }],
        ..ExecConfig::deterministic(1, OptimConfig::sgd(0.05))
    };
    let run = |bound: Option<u64>, seed| {
        let mut results = in_two_processes(&graph, &config(bound), Faults { seed, max_delay: 2 }, None, |ex| {
            let stats = ex.train_epoch(&many)?;
            ex.gather()?;
            Ok((stats, ex.params().clone()))
        });
        let (stats, zero) = results.remove(0).unwrap_or_else(|e| panic!("bound {bound:?}: process 0: {e}"));
        let one = results.remove(0).unwrap_or_else(|e| panic!("bound {bound:?}: process 1: {e}")).1;
        assert_eq!(stats.losses.len(), many.len(), "bound {bound:?}");
        assert!(stats.losses.iter().all(|l| l.is_finite()), "bound {bound:?}: {:?}", stats.losses);
        assert_eq!(max_rel_diff(&one, &zero), 0.0, "bound {bound:?}: process 1's values differ");
        stats.staleness.iter().map(|g| (g.group.clone(), g.stats.gradients, g.stats.max)).collect::<Vec<_>>()
    };
    // Synchronous, each instance's gradients are applied once: the gradients measured.
    let once = executor(&graph, 2, ExecConfig { sync_updates: true, ..config(None) }).train_epoch(&many).unwrap();
    let free = run(None, 4);
    assert!(free.iter().any(|&(_, _, max)| max > 1), "{free:?}");
    for (bound, seed) in [(1, 5), (2, 6)] {
        for (group, gradients, max) in run(Some(bound), seed) {
            assert!(max <= bound, "bound {bound}: `{group}` applied a gradient {max} updates late");
            let each = once.staleness.iter().find(|g| g.group == group).map_or(u64::MAX, |g| g.stats.gradients);
            assert!(gradients >= each, "bound {bound}: `{group}` measured {gradients} gradients of {each}");
        }
    }
}
