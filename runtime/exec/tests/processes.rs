//! A run split over processes, its processes as threads of this test over the in-memory
//! transport (`amp_net::memory`): the same bridge, protocol and executor as over
//! timely's sockets, with frames held back and reordered between senders, and a process
//! cut off. (runtime/amprun/tests/distributed.rs runs real processes over timely.)

mod common;

use amp_data::Instance;
use amp_exec::{Cluster, ClusterSpec, ExecConfig, ExecError, Executor, Placement};
use amp_ir::verify::Verified;
use amp_net::memory::{Faults, MemoryNet};
use amp_params::{OptimConfig, ParamSet};
use common::*;
use std::time::{Duration, Instant};

fn config() -> ExecConfig {
    ExecConfig {
        workers: 2,
        placement: Placement::Contiguous,
        max_active_keys: 4,
        ..ExecConfig::deterministic(4, OptimConfig::adam(0.01))
    }
}

/// Trains `epochs` epochs split over two processes joined by `net`'s links; returns
/// process 0's losses and (gathered) parameters, or the first error of each process.
fn train_split(
    graph: &Verified,
    data: &[Instance],
    epochs: usize,
    faults: Faults,
    cut_after: Option<Duration>,
) -> Vec<Result<(Vec<f32>, ParamSet), ExecError>> {
    let (net, links) = MemoryNet::mesh(2, faults);
    let addresses = vec!["memory:0".to_string(), "memory:1".to_string()];
    let cutter = cut_after.map(|after| {
        let net = net.clone();
        std::thread::spawn(move || {
            std::thread::sleep(after);
            net.cut(1);
        })
    });
    let results = std::thread::scope(|s| {
        let handles: Vec<_> = links
            .into_iter()
            .enumerate()
            .map(|(process, link)| {
                let addresses = addresses.clone();
                s.spawn(move || {
                    let spec = ClusterSpec { timeout: Duration::from_secs(2), ..ClusterSpec::new(process, addresses) };
                    let cluster = Cluster::start(Box::new(link), spec, Instant::now(), 0)?;
                    let params = ParamSet::init(&amp_params::ParamSpec::of_graph(graph), 2);
                    let mut ex = Executor::in_cluster(graph, params, config(), cluster.clone())?;
                    let mut losses = Vec::new();
                    let trained = (0..epochs).try_for_each(|_| {
                        losses.extend(ex.train_epoch(data)?.losses);
                        Ok(())
                    });
                    let result = trained.and_then(|()| ex.gather()).map(|()| (losses, ex.params().clone()));
                    // A failed cluster's shutdown reports the failure again.
                    let left = cluster.shutdown();
                    result.and_then(|r| left.map(|()| r))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("a process thread panicked")).collect()
    });
    if let Some(cutter) = cutter {
        let _ = cutter.join();
    }
    results
}

fn list_reduce() -> (Verified, Vec<Instance>) {
    let graph = compile_example("list_reduce", &[("hidden", 6)]);
    let data = token_lists(&graph, &[3, 0, 1, 4, 2, 2, 5, 1, 3, 0, 2], 14, 3);
    (graph, data)
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
        let mut results = train_split(&graph, &data, 2, faults, None);
        let (losses, params) = results.remove(0).unwrap_or_else(|e| panic!("seed {seed}: process 0: {e}"));
        assert!(results.remove(0).is_ok(), "seed {seed}: process 1 failed");
        assert_eq!(losses.len(), expected.len());
        for (x, y) in losses.iter().zip(&expected) {
            assert!((x - y).abs() <= 1e-5 * (1.0 + y.abs()), "seed {seed}: loss {x} vs {y}");
        }
        let diff = max_rel_diff(&params, single.params());
        assert!(diff < 1e-5, "seed {seed}: parameters differ by {diff}");
    }
}

/// A process cut off while the run goes on: the other ends with an error naming it,
/// within a few heartbeat timeouts, and nothing hangs.
#[test]
fn a_process_cut_off_ends_the_run_naming_it() {
    let (graph, data) = list_reduce();
    let many: Vec<Instance> = data.iter().cycle().take(data.len() * 200).cloned().collect();
    let started = Instant::now();
    let results = train_split(&graph, &many, 1, Faults::default(), Some(Duration::from_millis(50)));
    let error = results[0].as_ref().expect_err("process 0 fails").to_string();
    assert!(error.contains("process 1 (memory:1)"), "{error}");
    assert!(results[1].is_err(), "the cut process fails too");
    assert!(started.elapsed() < Duration::from_secs(60), "the run ended in bounded time");
}
