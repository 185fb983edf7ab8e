//! Failures end runs with errors that name what failed, never a hang: an injected panic
//! (node and worker), a non-finite loss (the instance; parameters stay those of the last
//! update), bad data (an embedding index out of range; a predicate that divides by zero
//! inside a chain of routing nodes names the member), a stall (queue lengths), an
//! unverified graph, parameters that do not fit, a bad configuration.

mod common;

use amp_data::{Tensor, Value};
use amp_exec::{ExecConfig, ExecError, Executor, Fault, OpError};
use amp_params::{OptimConfig, ParamSet, ParamSpec};
use common::*;
use std::time::Duration;

#[test]
fn a_panicking_node_ends_the_run_naming_node_and_worker() {
    let graph = compile_example("mlp", &[("hidden", 8)]);
    let data = digits(&graph, 6, 1);
    let l2 = graph.nodes.node_indices().find(|&i| graph.nodes[i].label == "l2").unwrap().index() as u32;
    let config = ExecConfig {
        workers: 3,
        max_active_keys: 3,
        fault: Some(Fault::PanicAt { node: l2, after: 4 }),
        ..ExecConfig::default()
    };
    let mut ex = executor(&graph, 1, config.clone());
    let expected_worker = ex.placement()[l2 as usize].unwrap();
    let err = ex.train_epoch(&data).unwrap_err();
    match &err {
        ExecError::WorkerPanic { worker, node, label, message } => {
            assert_eq!((*worker, *node, label.as_str()), (expected_worker, l2, "l2"));
            assert!(message.contains("injected"), "{message}");
        }
        other => panic!("expected a worker panic, got {other}"),
    }
    let text = err.to_string();
    assert!(text.contains(&format!("worker {expected_worker}")) && text.contains("`l2`"), "{text}");
    // The executor stays usable: inference has no fault before the 4th message.
    assert_eq!(ex.infer(&data[..2]).unwrap().len(), 2);
}

#[test]
fn a_nan_loss_stops_training_naming_the_instance() {
    let graph = compile_example("mlp", &[("hidden", 8)]);
    let mut data = digits(&graph, 6, 2);
    let mut pixels = vec![0.5f32; 64];
    pixels[7] = f32::NAN;
    let bad = Value::Record(vec![Value::Tensor(Tensor::new(vec![64], pixels).unwrap()), Value::Int(1)]);
    data[3] = instance(&graph, bad);
    let config = ExecConfig::deterministic(1, OptimConfig::sgd(0.1));
    let mut ex = executor(&graph, 1, config.clone());
    let err = ex.train_epoch(&data).unwrap_err();
    assert!(matches!(err, ExecError::NonFiniteLoss { instance: 3, .. }), "{err}");
    assert!(err.is_non_finite_loss());
    // The parameters are those after instances 0..3: a sound checkpoint.
    assert!(ex.params().iter().all(|(_, v)| v.iter().all(|x| x.is_finite())));
    let mut clean = executor(&graph, 1, config);
    clean.train_epoch(&data[..3]).unwrap();
    assert_eq!(ex.params(), clean.params());
    // Several workers and instances in flight, synchronous or not: the same error, no hang.
    for sync_updates in [true, false] {
        let config = ExecConfig {
            workers: 2,
            max_active_keys: 4,
            sync_updates,
            ..ExecConfig::deterministic(2, OptimConfig::sgd(0.1))
        };
        let err = executor(&graph, 1, config).train_epoch(&data).unwrap_err();
        assert!(matches!(err, ExecError::NonFiniteLoss { instance: 3, .. }), "sync {sync_updates}: {err}");
    }
}

#[test]
fn bad_data_names_node_worker_and_instance() {
    let graph = compile_example("list_reduce", &[("hidden", 4)]);
    let mut data = token_lists(&graph, &[2, 3, 1], 14, 1);
    let bad = Value::Record(vec![Value::Seq(vec![Value::Int(2), Value::Int(99)]), Value::Int(1)]);
    data.push(instance(&graph, bad));
    let mut ex = executor(&graph, 1, ExecConfig { workers: 2, ..ExecConfig::default() });
    let err = ex.train_epoch(&data).unwrap_err();
    match &err {
        ExecError::Node { node, op, instance, error, .. } => {
            assert_eq!((*op, *instance), ("embedding", 3), "{err}");
            assert_eq!(*error, OpError::OutOfRange { what: "embedding index", index: 99, len: 14 });
            assert_eq!(graph.nodes[petgraph::stable_graph::NodeIndex::new(*node as usize)].label, "embed");
        }
        other => panic!("expected a node error, got {other}"),
    }
    assert!(ex.evaluate(&data).is_err());
    assert!(ex.evaluate(&data[..3]).is_ok());
}

/// The inner `if` runs in a chain with the outer one (its only consumer); its predicate
/// divides by `k`, so `k = 0` fails there. The error names that `cond` and where it is in
/// the model, as it would with no chain, and the instance that failed, also when four in
/// flight reach the node together and it takes them in one step.
#[test]
fn an_error_inside_a_chain_names_the_member() {
    let source = r#"
record S { x: f32[4], k: int, label: int }
model M() {
    param a = Linear(4, 4);
    param h = Linear(4, 2);
    fn forward(s: S) -> f32[2] {
        let y = a(s.x);
        h(if s.k > -100 { if 10 / s.k > 1 { relu(y) } else { y } } else { -y })
    }
    fn loss(s: S) -> f32 { cross_entropy(forward(s), s.label) }
}
"#;
    let graph = compile_source("chain.amp", source, &[]);
    let sample = |k: i64| {
        let x = Value::Tensor(Tensor::new(vec![4], vec![0.5, -1.0, 2.0, 0.25]).unwrap());
        instance(&graph, Value::Record(vec![x, Value::Int(k), Value::Int(1)]))
    };
    let data = vec![sample(3), sample(20), sample(0), sample(-4)];
    let is_cond = |i: petgraph::stable_graph::NodeIndex| matches!(graph.nodes[i].op, amp_ir::Op::Cond { .. });
    let inner = graph
        .nodes
        .node_indices()
        .find(|&i| is_cond(i) && graph.input_edge(i, 0).is_some_and(|(from, _)| is_cond(from)))
        .expect("a cond fed by a cond")
        .index() as u32;
    for (chain_routes, max_active_keys) in [(true, 1), (false, 1), (true, 4), (false, 4)] {
        let config = ExecConfig {
            chain_routes,
            max_active_keys,
            min_update_frequency: max_active_keys as u64,
            ..ExecConfig::default()
        };
        let mut ex = executor(&graph, 1, config);
        assert_eq!(!ex.chained_nodes().is_empty(), chain_routes, "the two conds form a chain");
        match ex.train_epoch(&data).unwrap_err() {
            ExecError::Node { node, label, op, source, instance, error, .. } => {
                assert_eq!((node, label.as_str(), op, instance), (inner, "if", "cond", 2));
                assert_eq!(&*source, "chain.amp:8:27", "where the inner `if` is");
                assert!(matches!(error, OpError::Eval { .. }), "{error}");
            }
            other => panic!("expected a node error, got {other}"),
        }
    }
}

#[test]
fn a_stall_is_reported_with_queue_lengths() {
    let graph = compile_example("mlp", &[("hidden", 8)]);
    let data = digits(&graph, 4, 3);
    let l1 = graph.nodes.node_indices().find(|&i| graph.nodes[i].label == "l1").unwrap().index() as u32;
    let config = ExecConfig {
        workers: 2,
        max_active_keys: 4,
        stall_timeout: Duration::from_millis(60),
        fault: Some(Fault::DelayAt { node: l1, after: 1, delay: Duration::from_millis(400) }),
        ..ExecConfig::default()
    };
    let err = executor(&graph, 1, config).train_epoch(&data).unwrap_err();
    match &err {
        ExecError::Stalled { in_flight, queues, .. } => {
            assert!(!in_flight.is_empty());
            assert_eq!(queues.len(), 2);
        }
        other => panic!("expected a stall, got {other}"),
    }
    assert!(err.to_string().contains("worker 1"), "{err}");
}

#[test]
fn graphs_parameters_and_configurations_are_checked() {
    let graph = compile_example("mlp", &[("hidden", 8)]);
    let params = ParamSet::init(&ParamSpec::of_graph(&graph), 0);
    // An edge removed: the verifier rejects the graph, so no executor can be made of it
    // (`Executor::new` takes only a verified graph).
    let mut broken = graph.clone().into_inner();
    let edge = broken.nodes.edge_indices().next().unwrap();
    broken.nodes.remove_edge(edge);
    assert!(amp_ir::verify::verify(&broken).is_err());
    // Parameters of another model.
    let other = compile_example("mlp", &[("hidden", 4)]);
    let wrong = ParamSet::init(&ParamSpec::of_graph(&other), 0);
    assert!(matches!(Executor::new(&graph, wrong, ExecConfig::default()), Err(ExecError::Params { .. })));
    // Configurations out of range.
    for config in [
        ExecConfig { workers: 0, ..ExecConfig::default() },
        ExecConfig { max_active_keys: 0, ..ExecConfig::default() },
        ExecConfig { min_update_frequency: 0, ..ExecConfig::default() },
        ExecConfig { placement: amp_exec::Placement::Explicit(vec![5; 20]), ..ExecConfig::default() },
    ] {
        assert!(matches!(Executor::new(&graph, params.clone(), config), Err(ExecError::Config { .. })));
    }
}
