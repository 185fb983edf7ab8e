//! Staleness, measured and bounded (`ExecConfig::max_staleness`, DSP): the staleness
//! each parameter group reports equals the count by hand on deterministic runs; a bound of
//! K is never exceeded over random setups (up to 3 workers, replicas, several instances in
//! flight), and every instance is still trained once; K = 0 with one instance in flight
//! is synchronous training; K = 0 with many in flight updates all through the epoch
//! (admission holds while a group defers).

mod common;

use amp_data::Instance;
use amp_exec::{EpochStats, ExecConfig, NodeSelector, Placement, TraceKind};
use amp_ir::verify::Verified;
use amp_params::OptimConfig;
use common::*;
use proptest::prelude::*;
use std::sync::OnceLock;

fn list_reduce() -> &'static (Verified, Vec<Instance>) {
    static MODEL: OnceLock<(Verified, Vec<Instance>)> = OnceLock::new();
    MODEL.get_or_init(|| {
        let graph = compile_example("list_reduce", &[("hidden", 8)]);
        let lens: Vec<usize> = (0..24).map(|i| 1 + (i * 7) % 5).collect();
        let data = token_lists(&graph, &lens, 14, 5);
        (graph, data)
    })
}

fn group<'a>(stats: &'a EpochStats, name: &str) -> &'a amp_exec::GroupStaleness {
    stats.staleness.iter().find(|g| g.group == name).unwrap_or_else(|| panic!("no group {name}: {stats:?}"))
}

/// Synchronous training applies every gradient to the version it read: staleness 0, one
/// measured gradient per instance and group (each instance reads every group of the MLP).
/// Asynchronous training on one worker with two instances in flight moves them in lock
/// step (same shapes, batched together): they end in one step, one update applies both,
/// and the next two read the new version: again 0, six gradients, three updates a group.
#[test]
fn staleness_equals_the_count_by_hand() {
    let graph = compile_example("mlp", &[("hidden", 8)]);
    let data = digits(&graph, 6, 3);
    for asynchronous in [false, true] {
        let config = ExecConfig {
            sync_updates: !asynchronous,
            max_active_keys: if asynchronous { 2 } else { 1 },
            ..ExecConfig::deterministic(1, OptimConfig::sgd(0.1))
        };
        let mut ex = executor(&graph, 1, config);
        let stats = ex.train_epoch(&data).unwrap();
        assert_eq!(stats.staleness.len(), 3);
        for name in ["l1", "l2", "out"] {
            let g = group(&stats, name);
            assert_eq!((g.stats.gradients, g.stats.total, g.stats.max), (6, 0, 0), "{name}: {g:?}");
            assert_eq!(g.bound, None);
        }
        assert_eq!(stats.updates, if asynchronous { 9 } else { 18 });
    }
}

/// Two instances of different lengths on one worker, an update after each instance: the
/// short one (one token) ends first and its update moves every group to version 1 while
/// the long one (four tokens) still owes gradients it computed at version 0, so they are
/// applied one update late. Counted by hand from the protocol and the worker's agenda
/// (forward work before backward, the classifier's backward before the cell's): both
/// forwards read version 0; the classifier's backward takes both instances in one batch,
/// so `head`'s first update applies both gradients on time (2 gradients, staleness 0);
/// the cell's first backward batch holds the short instance's step and the long one's
/// last, so `cell` and `embed` apply part of the long instance's gradient at the short
/// one's end (on time) and the rest at its own end, one update late (an instance applied
/// over two updates counts in both: 3 gradients, total 1, max 1). The trace's updates
/// carry it.
#[test]
fn a_long_instance_overtaken_by_a_short_one_is_one_update_stale() {
    let (graph, _) = list_reduce();
    let data = token_lists(graph, &[1, 4], 14, 2);
    let config = ExecConfig {
        sync_updates: false,
        max_active_keys: 2,
        trace: true,
        ..ExecConfig::deterministic(1, OptimConfig::sgd(0.1))
    };
    let mut ex = executor(graph, 1, config);
    let stats = ex.train_epoch(&data).unwrap();
    for (name, counted) in [("embed", (3, 1, 1)), ("cell", (3, 1, 1)), ("head", (2, 0, 0))] {
        let g = group(&stats, name);
        assert_eq!((g.stats.gradients, g.stats.total, g.stats.max), counted, "{name}: {g:?}");
    }
    let marked: Vec<Option<u64>> =
        ex.take_trace().iter().filter(|e| e.kind == TraceKind::Update).map(|e| e.staleness).collect();
    assert!(marked.contains(&Some(1)) && marked.contains(&Some(0)), "{marked:?}");
}

/// K = 0 with one instance in flight is synchronous training: the same losses and
/// parameters, on one worker and on two.
#[test]
fn a_zero_bound_with_one_instance_in_flight_is_synchronous() {
    let (graph, data) = list_reduce();
    for workers in [1, 2] {
        let base = ExecConfig {
            workers,
            placement: Placement::RoundRobin,
            ..ExecConfig::deterministic(2, OptimConfig::sgd(0.1))
        };
        let mut sync = executor(graph, 4, base.clone());
        let mut bounded = executor(graph, 4, ExecConfig { sync_updates: false, max_staleness: Some(0), ..base });
        for epoch in 0..2 {
            let (a, b) = (sync.train_epoch(data).unwrap(), bounded.train_epoch(data).unwrap());
            assert_eq!(a.losses, b.losses, "{workers} workers, epoch {epoch}");
            assert!(b.staleness.iter().all(|g| g.stats.max == 0 && g.bound == Some(0)), "{:?}", b.staleness);
        }
        assert_eq!(sync.params(), bounded.params(), "{workers} workers");
    }
}

/// The layer-wise schedule: the group nearest the loss gets K, each one before it one
/// more; a node's own bound overrides it.
#[test]
fn the_layerwise_schedule_grows_towards_the_input() {
    let (graph, data) = list_reduce();
    let config = ExecConfig {
        sync_updates: false,
        max_active_keys: 4,
        max_staleness: Some(1),
        staleness_layerwise: true,
        ..ExecConfig::deterministic(1, OptimConfig::sgd(0.1))
    };
    let mut ex = executor(graph, 1, config.clone());
    let stats = ex.train_epoch(data).unwrap();
    let bounds: Vec<(String, Option<u64>)> = stats.staleness.iter().map(|g| (g.group.clone(), g.bound)).collect();
    assert_eq!(bounds, [("embed".into(), Some(3)), ("cell".into(), Some(2)), ("head".into(), Some(1))]);
    let overridden = ExecConfig { staleness_overrides: vec![(NodeSelector::Label("embed".into()), 0)], ..config };
    let stats = executor(graph, 1, overridden).train_epoch(data).unwrap();
    assert_eq!(group(&stats, "embed").bound, Some(0));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// A bound of K is never exceeded, whatever the workers (up to 3), placement,
    /// replicas, instances in flight and update interval; every instance is trained once
    /// (one finite loss each) and every group measured every instance (each reaches every
    /// group of list-reduce).
    #[test]
    fn a_bound_is_never_exceeded(
        workers in 1usize..=3,
        round_robin in any::<bool>(),
        replicas in 1usize..=3,
        in_flight in 1usize..=8,
        interval in 1u64..=3,
        bound in 0u64..=3,
        layerwise in any::<bool>(),
        max_batch in prop::sample::select(vec![1usize, 4, 64]),
    ) {
        let (graph, data) = list_reduce();
        let config = ExecConfig {
            workers,
            placement: if round_robin { Placement::RoundRobin } else { Placement::Contiguous },
            max_active_keys: in_flight,
            sync_updates: false,
            max_batch,
            replicas: if replicas > 1 { vec![(NodeSelector::Label("cell".into()), replicas.min(workers))] } else { Vec::new() },
            // Replicas read values up to a sync old: a smaller bound is refused (tested below).
            max_staleness: Some(if replicas > 1 { bound.max(1) } else { bound }),
            staleness_layerwise: layerwise,
            ..ExecConfig::deterministic(interval, OptimConfig::sgd(0.05))
        };
        let mut ex = executor(graph, 2, config);
        for _ in 0..2 {
            let stats = ex.train_epoch(data).unwrap();
            prop_assert_eq!(stats.losses.len(), data.len());
            prop_assert!(stats.losses.iter().all(|l| l.is_finite()));
            for g in &stats.staleness {
                let k = g.bound.unwrap_or(u64::MAX);
                prop_assert!(g.stats.max <= k, "{}: max {} over bound {}", g.group, g.stats.max, k);
                // An instance whose gradients two updates applied counts in both.
                prop_assert!(g.stats.gradients >= data.len() as u64, "{}: {:?}", g.group, g.stats);
            }
        }
    }
}

/// The bound binds: on one worker with eight instances in flight and an update after
/// every instance, asynchronous training applies gradients more than one update late;
/// with `K = 1` none is, and the run trains every instance all the same.
#[test]
fn a_bound_holds_back_what_asynchronous_training_lets_go_stale() {
    let (graph, data) = list_reduce();
    let config =
        ExecConfig { sync_updates: false, max_active_keys: 8, ..ExecConfig::deterministic(1, OptimConfig::sgd(0.05)) };
    let free = executor(graph, 3, config.clone()).train_epoch(data).unwrap();
    let most = free.staleness.iter().map(|g| g.stats.max).max().unwrap();
    assert!(most > 1, "{:?}", free.staleness);
    let bounded = executor(graph, 3, ExecConfig { max_staleness: Some(1), ..config }).train_epoch(data).unwrap();
    assert!(bounded.staleness.iter().all(|g| g.stats.max <= 1), "{:?}", bounded.staleness);
    assert_eq!(bounded.losses.len(), data.len());
}

/// A bound a replicated group cannot keep (its replicas read values up to `replica_sync`
/// updates old) is refused when the executor is made, naming the group.
#[test]
fn a_bound_under_the_replica_sync_interval_is_refused() {
    let (graph, _) = list_reduce();
    let config = ExecConfig {
        workers: 2,
        sync_updates: false,
        replicas: vec![(NodeSelector::Label("cell".into()), 2)],
        replica_sync: 4,
        max_staleness: Some(1),
        ..ExecConfig::deterministic(1, OptimConfig::sgd(0.05))
    };
    let params = amp_params::ParamSet::init(&amp_params::ParamSpec::of_graph(graph), 1);
    let Err(err) = amp_exec::Executor::new(graph, params.clone(), config.clone()) else {
        panic!("a bound of 1 with replicas synced every 4 updates was accepted")
    };
    assert!(err.to_string().contains("`cell` has replicas synced every 4 updates"), "{err}");
    assert!(amp_exec::Executor::new(graph, params, ExecConfig { max_staleness: Some(4), ..config }).is_ok());
}

/// With K = 0 and many instances in flight, admission holds while a group defers its
/// update, so the groups update all through the epoch, not at its end: each group
/// updates at least once per interval and window of instances (96 instances, an update
/// every 2, 8 in flight: at least 9 times a group), on one worker and across two, with
/// the same instances trained once each and no gradient applied late. Without the hold,
/// on two workers some instance in flight nearly always owed `embed` and `cell` a read:
/// they updated twice in the epoch (12 times each with it; on one worker the batches keep
/// the instances in step, 16 either way).
#[test]
fn a_zero_bound_with_many_in_flight_updates_all_through_the_epoch() {
    let (graph, _) = list_reduce();
    let lens: Vec<usize> = (0..96).map(|i| 1 + (i * 5) % 6).collect();
    let data = token_lists(graph, &lens, 14, 7);
    let (interval, window) = (2, 8);
    for workers in [1, 2] {
        let config = ExecConfig {
            workers,
            placement: Placement::RoundRobin,
            sync_updates: false,
            max_active_keys: window,
            max_staleness: Some(0),
            flush_at_epoch_end: false,
            trace: true,
            ..ExecConfig::deterministic(interval, OptimConfig::sgd(0.05))
        };
        let mut ex = executor(graph, 5, config);
        let stats = ex.train_epoch(&data).unwrap();
        assert_eq!(stats.losses.len(), data.len());
        assert!(stats.losses.iter().all(|l| l.is_finite()));
        let trace = ex.take_trace();
        for g in &stats.staleness {
            assert_eq!(g.stats.max, 0, "{workers} workers: {g:?}");
        }
        // Per group (an update's event is at the group's first node), its updates.
        let mut per_group = std::collections::BTreeMap::new();
        for e in trace.iter().filter(|e| e.kind == TraceKind::Update) {
            *per_group.entry(e.node).or_insert(0usize) += 1;
        }
        let least = data.len() / (interval as usize + window);
        assert_eq!(per_group.len(), stats.staleness.len(), "{workers} workers: {per_group:?}");
        assert!(per_group.values().all(|&u| u >= least), "{workers} workers: {per_group:?}, at least {least} each");
    }
}
