//! Training: deterministic mode is minibatch SGD (and momentum, Adam) computed from
//! `grads()`; multi-worker runs with synchronous updates agree with one worker; updates
//! carry over epochs and resume exactly from a checkpoint; per-node update frequencies;
//! a tiny model learns, synchronously and asynchronously; asynchronous training on one
//! worker is reproducible; an observed epoch reports its
//! progress; inference and evaluation agree with the gradients' forward pass; traces and
//! wait times cover every worker.
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use amp_data::Instance;
use amp_exec::{ExecConfig, Executor, NodeSelector, Observer, Placement, Progress, TraceEvent, TraceKind};
use amp_ir::verify::Verified;
use amp_params::checkpoint::{from_bytes, to_bytes};
use amp_params::{OptimConfig, ParamSpec};
use common::*;
use std::collections::BTreeMap;

fn list_reduce() -> (Verified, Vec<Instance>) {
    let graph = compile_example("list_reduce", &[("hidden", 6)]);
    let data = token_lists(&graph, &[3, 0, 1, 4, 2, 2, 5, 1, 3, 0, 2], 14, 3);
    (graph, data)
}

#[test]
fn deterministic_mode_is_minibatch_training() {
    let (graph, data) = list_reduce();
    let configs =
        [OptimConfig::sgd(0.1), OptimConfig::momentum(0.05, 0.9).with_weight_decay(0.01), OptimConfig::adam(0.01)];
    for config in configs {
        let expected = minibatch_sgd(&graph, &data, 3, config, 2);
        let mut ex = executor(&graph, 1, ExecConfig::deterministic(3, config));
        for _ in 0..2 {
            let stats = ex.train_epoch(&data).unwrap();
            assert_eq!(stats.updates, 4 * 3, "4 batches of 11 instances, 3 parameter groups");
        }
        let diff = max_rel_diff(ex.params(), &expected);
        assert!(diff < 1e-5, "{:?}: differs from minibatch training by {diff}", config.kind);
        // And it is deterministic, bit for bit.
        let mut again = executor(&graph, 1, ExecConfig::deterministic(3, config));
        again.train_epoch(&data).unwrap();
        again.train_epoch(&data).unwrap();
        assert_eq!(again.params(), ex.params());
    }
}

/// Records what an observed epoch tells; takes the trace events when `events` is set.
#[derive(Default)]
struct Heard {
    progress: Vec<Progress>,
    events: Option<Vec<TraceEvent>>,
}

impl Observer for Heard {
    fn progress(&mut self, progress: &Progress) {
        self.progress.push(*progress);
    }

    fn takes_trace(&self) -> bool {
        self.events.is_some()
    }

    fn trace(&mut self, events: &[TraceEvent]) {
        self.events.as_mut().expect("asked only when taking them").extend_from_slice(events);
    }
}

/// Per (node, kind): how many events, of how many messages.
fn event_counts(events: &[TraceEvent]) -> BTreeMap<(u32, String), (usize, u64)> {
    let mut counts = BTreeMap::new();
    for e in events {
        let entry = counts.entry((e.node, format!("{:?}", e.kind))).or_insert((0, 0));
        entry.0 += 1;
        entry.1 += u64::from(e.batch);
    }
    counts
}

#[test]
fn an_observed_epoch_reports_its_progress_and_trains_the_same() {
    let (graph, data) = list_reduce();
    let config = ExecConfig::deterministic(3, OptimConfig::sgd(0.1));
    let mut plain = executor(&graph, 1, config.clone());
    let mut observed = executor(&graph, 1, config);
    for _ in 0..2 {
        let expected = plain.train_epoch(&data).unwrap();
        let mut heard = Heard::default();
        let stats = observed.train_epoch_observed(&data, &mut heard).unwrap();
        assert_eq!(observed.params(), plain.params(), "observing changes nothing");
        assert_eq!(stats.losses, expected.losses);
        let heard = heard.progress;
        assert!(heard.windows(2).all(|w| w[0].done <= w[1].done), "{heard:?}");
        let last = heard.last().expect("the observer hears at least the end");
        assert_eq!(last.done, data.len());
        assert_eq!(last.losses, data.len());
        assert!((last.loss() - stats.loss).abs() <= 1e-6 * stats.loss.abs(), "{} vs {}", last.loss(), stats.loss);
        assert_eq!(last.accuracy(), stats.accuracy);
    }
}

/// An observer that takes the trace gets every event, also of a run long enough for the
/// workers to hand them over in pieces (65,536 events each) before they stop, and the
/// executor keeps none of them.
#[test]
fn an_observer_takes_the_whole_trace_as_it_comes() {
    let graph = compile_example("list_reduce", &[("hidden", 6)]);
    let lens: Vec<usize> = (0..2_000).map(|i| 4 + i % 5).collect();
    let data = token_lists(&graph, &lens, 14, 5);
    let config = ExecConfig { trace: true, max_batch: 1, ..ExecConfig::deterministic(8, OptimConfig::sgd(0.05)) };
    let mut plain = executor(&graph, 1, config.clone());
    plain.train_epoch(&data).unwrap();
    let kept = plain.take_trace();
    assert!(kept.len() > 2 * 65_536, "{} events: too few for pieces", kept.len());
    let mut observed = executor(&graph, 1, config);
    let mut heard = Heard { events: Some(Vec::new()), ..Heard::default() };
    observed.train_epoch_observed(&data, &mut heard).unwrap();
    assert!(observed.take_trace().is_empty(), "the observer took them");
    let taken = heard.events.unwrap_or_default();
    assert_eq!(event_counts(&taken), event_counts(&kept));
    assert!(taken.windows(2).all(|w| w[0].start_us <= w[1].start_us), "one worker's events stay in order");
}

#[test]
fn multi_worker_synchronous_training_matches_one_worker() {
    for (graph, data) in [list_reduce(), {
        let g = compile_example("mlp", &[("hidden", 8)]);
        let d = digits(&g, 13, 4);
        (g, d)
    }] {
        let optimizer = OptimConfig::adam(0.01);
        let mut single = executor(&graph, 2, ExecConfig::deterministic(4, optimizer));
        single.train_epoch(&data).unwrap();
        single.train_epoch(&data).unwrap();
        for (workers, placement) in [(2, Placement::Contiguous), (3, Placement::RoundRobin), (4, Placement::Contiguous)]
        {
            let config =
                ExecConfig { workers, placement, max_active_keys: 4, ..ExecConfig::deterministic(4, optimizer) };
            let mut multi = executor(&graph, 2, config);
            let used: std::collections::BTreeSet<usize> = multi.placement().into_iter().flatten().collect();
            assert!(used.len() > 1, "nodes spread over workers: {used:?}");
            multi.train_epoch(&data).unwrap();
            multi.train_epoch(&data).unwrap();
            let diff = max_rel_diff(multi.params(), single.params());
            assert!(diff < 1e-4, "{workers} workers differ by {diff}");
        }
    }
}

#[test]
fn unflushed_gradients_carry_over_epochs() {
    let (graph, data) = list_reduce();
    let config = ExecConfig { flush_at_epoch_end: false, ..ExecConfig::deterministic(4, OptimConfig::sgd(0.1)) };
    let mut split = executor(&graph, 1, config.clone());
    let first = split.train_epoch(&data[..6]).unwrap();
    let second = split.train_epoch(&data[6..]).unwrap();
    assert_eq!((first.updates, second.updates), (3, 3), "updates after instances 4 and 8 of 11");
    let mut whole = executor(&graph, 1, config);
    whole.train_epoch(&data).unwrap();
    // The same sums, in another order: the split run carries the weight gradient of the
    // update that spans the two epochs in the accumulator, while the whole run, under
    // plain SGD, adds those products straight to the weights (`LiveGroup::update`).
    let diff = max_rel_diff(split.params(), whole.params());
    assert!(diff < 1e-6, "split and whole epochs differ by {diff}");
}

#[test]
fn resuming_from_a_checkpoint_continues_exactly() {
    let (graph, data) = list_reduce();
    let config = ExecConfig::deterministic(3, OptimConfig::adam(0.02));
    let mut continuous = executor(&graph, 1, config.clone());
    continuous.train_epoch(&data).unwrap();
    let bytes = to_bytes(continuous.params(), Some(continuous.optimizer_state()), &BTreeMap::new()).unwrap();
    continuous.train_epoch(&data).unwrap();

    let ckpt = from_bytes(&bytes, &ParamSpec::of_graph(&graph)).unwrap();
    let mut resumed = Executor::new(&graph, ckpt.params, config).unwrap();
    resumed.restore_optimizer(ckpt.optim.unwrap()).unwrap();
    resumed.train_epoch(&data).unwrap();
    assert_eq!(resumed.params(), continuous.params());
}

#[test]
fn per_node_update_frequency_overrides() {
    let graph = compile_example("mlp", &[("hidden", 8)]);
    let data = digits(&graph, 6, 2);
    let config = ExecConfig {
        update_overrides: vec![(NodeSelector::parse("out"), 3), (NodeSelector::parse("%2"), 2)],
        ..ExecConfig::deterministic(1, OptimConfig::sgd(0.1))
    };
    let mut ex = executor(&graph, 1, config.clone());
    let stats = ex.train_epoch(&data).unwrap();
    // l1 (node %2) every 2, l2 every instance, out every 3.
    assert_eq!(stats.updates, 3 + 6 + 2);
    // Across workers, with instances in flight, the controller holds each of these
    // boundaries: the same updates, the same parameters to rounding.
    let spread = ExecConfig { workers: 3, placement: Placement::RoundRobin, max_active_keys: 4, ..config };
    let mut multi = executor(&graph, 1, spread);
    assert_eq!(multi.train_epoch(&data).unwrap().updates, 3 + 6 + 2);
    let diff = max_rel_diff(multi.params(), ex.params());
    assert!(diff < 1e-5, "differs by {diff}");
}

fn learns(graph: &Verified, data: &[Instance], config: ExecConfig, epochs: usize) -> (f32, f32) {
    let mut ex = executor(graph, 3, config);
    let before = ex.evaluate(data).unwrap().loss;
    for _ in 0..epochs {
        ex.train_epoch(data).unwrap();
    }
    let after = ex.evaluate(data).unwrap();
    (before, after.loss)
}

#[test]
fn a_tiny_model_learns() {
    let graph = compile_example("list_reduce", &[("hidden", 16)]);
    let lens: Vec<usize> = (0..40).map(|i| 1 + i % 4).collect();
    let data = token_lists(&graph, &lens, 10, 8);
    let (before, after) = learns(&graph, &data, ExecConfig::deterministic(4, OptimConfig::adam(0.02)), 12);
    assert!(after < 0.5 * before, "loss {before} -> {after}");
}

#[test]
fn asynchronous_training_learns_too() {
    let graph = compile_example("mlp", &[("hidden", 16)]);
    let data = digits(&graph, 48, 5);
    let config = ExecConfig {
        workers: 3,
        max_active_keys: 8,
        sync_updates: false,
        ..ExecConfig::deterministic(4, OptimConfig::adam(0.01))
    };
    let (before, after) = learns(&graph, &data, config, 15);
    assert!(after < 0.6 * before, "loss {before} -> {after}");
}

/// Training on one worker, asynchronous or synchronous, with 8 instances in flight: the
/// worker admits the next instance when one finishes (in synchronous training not past an
/// update boundary before the update) and counts it towards the updates itself, so no
/// other thread's timing decides what it does: runs give the same parameters and losses,
/// bit for bit. Asynchronous groups update about as often as their interval asks (the
/// instances that finish in one step count together, so an update may average over a few
/// more); synchronous ones exactly as often.
#[test]
fn training_on_one_worker_is_reproducible() {
    for (name, graph, data) in [
        ("list_reduce", list_reduce().0, list_reduce().1),
        ("moe", compile_example("moe", &[("experts", 6)]), Vec::new()),
    ] {
        let data = if data.is_empty() { moe_samples(&graph, 40, 256, 4) } else { data };
        let mut updates = Vec::new();
        for sync_updates in [false, true] {
            let config =
                ExecConfig { max_active_keys: 8, sync_updates, ..ExecConfig::deterministic(2, OptimConfig::sgd(0.1)) };
            let run = || {
                let mut ex = executor(&graph, 5, config.clone());
                let stats: Vec<_> = (0..3).map(|_| ex.train_epoch(&data).unwrap()).collect();
                (ex.params().clone(), stats)
            };
            let (first, first_stats) = run();
            for _ in 0..3 {
                let (again, again_stats) = run();
                assert_eq!(again, first, "{name} (sync {sync_updates}): another run trained other parameters");
                for (a, b) in again_stats.iter().zip(&first_stats) {
                    assert_eq!(a.losses, b.losses, "{name} (sync {sync_updates})");
                    assert_eq!(a.updates, b.updates, "{name} (sync {sync_updates})");
                }
            }
            updates.push(first_stats.iter().map(|s| s.updates).sum::<u64>());
        }
        // Synchronous training updates every group after every 2 instances; asynchronous
        // no more often, and at least once per 8 (the most that can finish in one step).
        let (updates, every_two) = (updates[0], updates[1]);
        assert!(updates <= every_two && 4 * updates >= every_two, "{name}: {updates} updates, {every_two} every 2");
    }
}

/// Synchronous training whose nodes all run on one of two workers (a plan that keeps a
/// small model on one worker) is admitted by that worker as on one worker alone: the same
/// parameters and losses, bit for bit, with 1 and with 4 instances in flight.
#[test]
fn synchronous_training_kept_on_one_of_two_workers_is_one_workers() {
    let (graph, data) = list_reduce();
    for keys in [1, 4] {
        let config = ExecConfig { max_active_keys: keys, ..ExecConfig::deterministic(3, OptimConfig::adam(0.01)) };
        let mut single = executor(&graph, 2, config.clone());
        let nodes = single.placement().len();
        let mut kept =
            executor(&graph, 2, ExecConfig { workers: 2, placement: Placement::Explicit(vec![1; nodes]), ..config });
        assert!(kept.placement().into_iter().flatten().all(|w| w == 1));
        for epoch in 0..2 {
            let (a, b) = (single.train_epoch(&data).unwrap(), kept.train_epoch(&data).unwrap());
            assert_eq!((&a.losses, a.updates), (&b.losses, b.updates), "{keys} in flight, epoch {epoch}");
        }
        assert_eq!(single.params(), kept.params(), "{keys} in flight");
    }
}

#[test]
fn inference_and_evaluation_agree_with_a_hand_computed_forward_pass() {
    let graph = compile_example("mlp", &[("hidden", 8)]);
    let data = digits(&graph, 5, 6);
    let config = ExecConfig { workers: 2, max_active_keys: 3, ..ExecConfig::default() };
    let mut ex = executor(&graph, 4, config);
    let outputs = ex.infer(&data).unwrap();
    let p = ex.params().clone();
    let dense = |name: &str, x: &[f32], relu: bool| -> Vec<f32> {
        let w = p.get(&format!("{name}.weight")).unwrap();
        let b = p.get(&format!("{name}.bias")).unwrap();
        let inp = x.len();
        (0..b.len())
            .map(|o| {
                let y = b[o] + (0..inp).map(|i| w[o * inp + i] * x[i]).sum::<f32>();
                if relu {
                    y.max(0.0)
                } else {
                    y
                }
            })
            .collect()
    };
    let eval = ex.evaluate(&data).unwrap();
    for (n, (inst, out)) in data.iter().zip(&outputs).enumerate() {
        let path = [amp_ir::ResolvedStep::Field("pixels")];
        let x = amp_exec::ExecInstance::f32_at(inst, &path).unwrap();
        let expected = dense("out", &dense("l2", &dense("l1", x, true), true), false);
        assert_eq!(out.len(), 10);
        for (a, b) in out.iter().zip(&expected) {
            assert!((a - b).abs() < 1e-5, "instance {n}: {out:?} vs {expected:?}");
        }
        let (loss, _) = ex.grads(inst).unwrap();
        assert!((loss - eval.losses[n]).abs() < 1e-6);
    }
    assert!(eval.accuracy.is_some());
}

#[test]
fn traces_cover_forward_backward_and_updates_on_every_worker() {
    let graph = compile_example("mlp", &[("hidden", 8)]);
    let data = digits(&graph, 4, 6);
    let config = ExecConfig { workers: 2, trace: true, max_active_keys: 2, ..ExecConfig::default() };
    let mut ex = executor(&graph, 4, config);
    let stats = ex.train_epoch(&data).unwrap();
    // Each worker's wait for messages is measured within the run's wall time.
    assert_eq!(stats.waited.len(), 2);
    assert!(stats.waited.iter().all(|w| *w <= stats.elapsed), "{:?} in {:?}", stats.waited, stats.elapsed);
    let events = ex.take_trace();
    for kind in [TraceKind::Forward, TraceKind::Backward, TraceKind::Update] {
        assert!(events.iter().any(|e| e.kind == kind), "{kind:?}");
    }
    let workers: std::collections::BTreeSet<u32> = events.iter().map(|e| e.worker).collect();
    assert_eq!(workers.len(), 2);
    let mut json = Vec::new();
    ex.write_trace(&events, &mut json).unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&json).unwrap();
    assert!(doc["traceEvents"].as_array().unwrap().len() > events.len());
    assert!(String::from_utf8(json).unwrap().contains("linear l1 (%2)"));
}

mod random_setups {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

        /// Any data, worker count, placement, admission width and batch size: synchronous
        /// training equals the deterministic single-worker run.
        #[test]
        fn synchronous_training_is_independent_of_the_setup(
            lens in prop::collection::vec(0usize..6, 1..9),
            workers in 1usize..5,
            keys in 1usize..7,
            batch in 1u64..5,
            round_robin in any::<bool>(),
            seed in 0u64..1000,
        ) {
            let graph = compile_example("list_reduce", &[("hidden", 4)]);
            let data = token_lists(&graph, &lens, 14, seed);
            let optimizer = OptimConfig::momentum(0.05, 0.9);
            let mut single = executor(&graph, seed, ExecConfig::deterministic(batch, optimizer));
            let expected = single.train_epoch(&data).unwrap();
            let placement = if round_robin { Placement::RoundRobin } else { Placement::Contiguous };
            let config = ExecConfig { workers, placement, max_active_keys: keys, ..ExecConfig::deterministic(batch, optimizer) };
            let mut multi = executor(&graph, seed, config);
            let stats = multi.train_epoch(&data).unwrap();
            prop_assert_eq!(stats.updates, expected.updates);
            let diff = max_rel_diff(multi.params(), single.params());
            prop_assert!(diff < 1e-4, "differs by {}", diff);
        }
    }
}
