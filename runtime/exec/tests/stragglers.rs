//! Stragglers (`ExecConfig::slow_workers`): a slowed worker still trains every instance
//! once (the same losses as without it), also with replicas, and a bad request is refused.

mod common;

use amp_exec::{ExecConfig, NodeSelector, Placement, SlowWorker, TraceKind};
use amp_params::OptimConfig;
use common::*;

fn slow(worker: usize, factor: f64, during: Option<(f64, f64)>) -> SlowWorker {
    SlowWorker { worker, factor, during }
}

/// Synchronous training on two workers with worker 1 three times slower, always or for a
/// window only: the same losses and parameters as without a straggler (to rounding: split
/// over workers, sums may change order), so no instance was lost or trained twice.
#[test]
fn a_slow_worker_trains_the_same_instances() {
    let graph = compile_example("list_reduce", &[("hidden", 8)]);
    let lens: Vec<usize> = (0..16).map(|i| 1 + i % 4).collect();
    let data = token_lists(&graph, &lens, 14, 3);
    let base = ExecConfig {
        workers: 2,
        placement: Placement::RoundRobin,
        max_active_keys: 4,
        ..ExecConfig::deterministic(4, OptimConfig::sgd(0.1))
    };
    for straggler in [slow(1, 3.0, None), slow(1, 3.0, Some((0.0, 0.05)))] {
        let mut plain = executor(&graph, 2, base.clone());
        let mut slowed = executor(&graph, 2, ExecConfig { slow_workers: vec![straggler.clone()], ..base.clone() });
        for epoch in 0..2 {
            train_alike(&format!("{straggler:?}, epoch {epoch}"), &mut plain, &mut slowed, &data);
        }
    }
}

/// `cell` replicated on both workers, worker 1 (the replica's) ten times slower and
/// asynchronous: every instance is trained once (a finite loss each) and both copies
/// serve messages. (How the least-loaded routing splits the messages between a slow and
/// a fast copy is measured, not asserted: docs/experiments/stragglers/.)
#[test]
fn replicas_with_a_slow_copy_train_every_instance() {
    let graph = compile_example("list_reduce", &[("hidden", 16)]);
    let lens: Vec<usize> = (0..64).map(|i| 2 + i % 5).collect();
    let data = token_lists(&graph, &lens, 10, 8);
    let config = ExecConfig {
        workers: 2,
        max_active_keys: 16,
        sync_updates: false,
        replicas: vec![(NodeSelector::Label("cell".into()), 2)],
        trace: true,
        slow_workers: vec![slow(1, 10.0, None)],
        ..ExecConfig::deterministic(4, OptimConfig::sgd(0.05))
    };
    let mut ex = executor(&graph, 1, config);
    let (replica, original) = ex.replica_nodes()[0];
    let stats = ex.train_epoch(&data).unwrap();
    assert_eq!(stats.losses.len(), data.len());
    assert!(stats.losses.iter().all(|l| l.is_finite()));
    let trace = ex.take_trace();
    for node in [original, replica] {
        assert!(trace.iter().any(|e| e.node == node && e.kind == TraceKind::Forward), "%{node} served nothing");
    }
}

#[test]
fn bad_slow_workers_are_refused() {
    let graph = compile_example("mlp", &[("hidden", 4)]);
    let params = amp_params::ParamSet::init(&amp_params::ParamSpec::of_graph(&graph), 0);
    for (straggler, expected) in [
        (slow(2, 2.0, None), "does not exist"),
        (slow(0, 0.5, None), "factor"),
        (slow(0, f64::NAN, None), "factor"),
        (slow(1, 2.0, Some((3.0, 1.0))), "window"),
    ] {
        let config = ExecConfig { workers: 2, slow_workers: vec![straggler], ..ExecConfig::default() };
        match amp_exec::Executor::new(&graph, params.clone(), config) {
            Err(e) => assert!(e.to_string().contains(expected), "{e}"),
            Ok(_) => panic!("accepted a bad slow worker ({expected})"),
        }
    }
}
