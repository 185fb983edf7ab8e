//! Rolled-out networks (docs/rollouts.md): the graph `amp_lower::compile_network` gives,
//! run by the executor, has the loss and every parameter gradient of the reference's
//! eager rollout (`amp_reference::NetworkReference`), to 1e-5 relative, for the
//! streaming, the sequential and a hybrid pattern of the three rollout examples (feed-
//! forward, skip, skip + recurrent), with a fixed frame count and with the instance's own,
//! with the JIT's fused kernels and without.

use super::relative_error;
use amp_data::{Instance, Tensor, Value};
use amp_exec::{ExecConfig, Executor};
use amp_lower::Frames;
use amp_params::ParamSet;
use amp_reference::NetworkReference;
use amp_sema::rollout::{Pattern, RolloutGraph};
use amp_sema::{check_source, Options};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Streaming, sequential, and a hybrid: every odd edge delayed, and the recurrent ones.
fn patterns(graph: &RolloutGraph) -> Vec<(&'static str, Pattern)> {
    let hybrid: Vec<u8> = (0..graph.edges.len()).map(|e| u8::from(e % 2 == 1 || graph.is_recurrent(e))).collect();
    vec![
        ("streaming", Pattern::streaming(graph)),
        ("sequential", Pattern::sequential(graph)),
        ("hybrid", Pattern::from_delays(graph, &hybrid).expect("one delay per edge")),
    ]
}

/// `{frames, label}` with `frames` frames of 64 values in -1..1.
fn instance(rng: &mut ChaCha8Rng, frames: usize) -> Value {
    let frames = (0..frames)
        .map(|_| {
            let x: Vec<f32> = (0..64).map(|_| rng.random_range(-1.0..1.0)).collect();
            Value::Tensor(Tensor::new(vec![64], x).expect("a vector"))
        })
        .collect();
    Value::Record(vec![Value::Seq(frames), Value::Int(rng.random_range(0..10))])
}

fn assert_rollout_matches(name: &str, source: &str, frames: Frames, seed: u64) {
    let options = Options { defines: vec![("hidden".into(), 6)] };
    let (map, checked) = check_source(&format!("{name}.amp"), source, &options);
    assert!(!checked.has_errors(), "{name} checks");
    let program = &checked.program;
    let rollout = RolloutGraph::of_network(&program.networks[0]);
    for (which, pattern) in patterns(&rollout) {
        let (graph, _) = amp_lower::compile_network(program, &map, 0, &pattern, frames)
            .unwrap_or_else(|e| panic!("{name} {which}: {e:?}"));
        let fixed = match frames {
            Frames::Fixed(n) => Some(n as usize),
            Frames::FromData => None,
        };
        let reference = NetworkReference::new(program, 0, &pattern, fixed).expect("reference");
        let specs = amp_params::ParamSpec::of_graph(&graph);
        assert_eq!(specs, reference.specs(), "{name}: the graph and the network name the same parameters");
        let params = ParamSet::init(&specs, seed);
        let schema = graph.input.clone().expect("schema");
        for jit in [true, false] {
            let config = ExecConfig { jit, ..ExecConfig::default() };
            let mut executor = Executor::new(&graph, params.clone(), config).expect("executor");
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            for i in 0..4 {
                let count = fixed.unwrap_or_else(|| rng.random_range(1..8));
                let value = instance(&mut rng, count);
                let (ref_loss, ref_grads) = reference.loss_and_grads(&params, &value).expect("reference runs");
                let inst = Instance::new(&schema, value).expect("instance");
                let what = format!("{name} {which} jit={jit} #{i} ({count} frames)");
                let (loss, grads) = executor.grads(&inst).unwrap_or_else(|e| panic!("{what}: {e}"));
                let err = relative_error(&[loss], &[ref_loss]);
                assert!(err <= 1e-5, "{what}: loss {loss} vs reference {ref_loss}");
                for (spec, expected) in ref_grads.iter() {
                    let got = grads.get(&spec.name).expect("gradient");
                    let err = relative_error(got, expected);
                    assert!(err <= 1e-5, "{what}: gradient of `{}` differs by {err:e}", spec.name);
                    // Under the streaming rollout an input reaches the output of the depth-4
                    // networks five frames later; with fewer frames some weights rightly
                    // get no gradient.
                    if count >= 5 {
                        assert!(expected.iter().any(|g| *g != 0.0), "{what}: `{}` gets a gradient", spec.name);
                    }
                }
            }
        }
    }
}

#[test]
fn rolled_out_networks_match_the_reference_over_fixed_frames() {
    for (name, source) in amp_tests::ROLLOUT_EXAMPLES {
        assert_rollout_matches(name, source, Frames::Fixed(6), 5);
    }
}

#[test]
fn rolled_out_networks_match_the_reference_over_the_instances_frames() {
    for (name, source) in amp_tests::ROLLOUT_EXAMPLES {
        assert_rollout_matches(name, source, Frames::FromData, 11);
    }
}

/// Accuracy per update step (docs/rollouts.md) rests on the executor's evaluation telling
/// which frame each verdict is about: every instance's verdict for frame k (read from the
/// frame counter the graph's metadata names) is the reference's argmax of frame k's
/// output against the label, and the metadata's F(R) and T(1, y) are the tableau's.
#[test]
fn each_frames_verdict_matches_the_reference() {
    use amp_lower::network::{ROLLOUT_FACTOR_META, ROLLOUT_FRAME_FIELD_META, ROLLOUT_OUTPUT_STEP_META};
    for (name, source) in amp_tests::ROLLOUT_EXAMPLES {
        let options = Options { defines: vec![("hidden".into(), 6)] };
        let (map, checked) = check_source(&format!("{name}.amp"), source, &options);
        let program = &checked.program;
        let rollout = RolloutGraph::of_network(&program.networks[0]);
        let output = rollout.nodes.len() - 1;
        for (which, pattern) in patterns(&rollout) {
            let (graph, _) = amp_lower::compile_network(program, &map, 0, &pattern, Frames::Fixed(5))
                .unwrap_or_else(|e| panic!("{name} {which}: {e:?}"));
            let analysis = amp_sema::rollout::analyse(&rollout, &pattern, 1).expect("valid");
            assert_eq!(graph.meta.get(ROLLOUT_FACTOR_META), Some(&analysis.inference_factor.to_string()));
            assert_eq!(graph.meta.get(ROLLOUT_OUTPUT_STEP_META), Some(&analysis.tableau.step(output, 1).to_string()));
            let frame_field = graph.meta.get(ROLLOUT_FRAME_FIELD_META).and_then(|f| graph.field_named(f));
            let frame_field = usize::from(frame_field.expect("the frame counter is named").0);
            let reference = NetworkReference::new(program, 0, &pattern, Some(5)).expect("reference");
            let params = ParamSet::init(&amp_params::ParamSpec::of_graph(&graph), 3);
            let schema = graph.input.clone().expect("schema");
            let mut rng = ChaCha8Rng::seed_from_u64(8);
            let values: Vec<Value> = (0..6).map(|_| instance(&mut rng, 5)).collect();
            let instances: Vec<Instance> =
                values.iter().map(|v| Instance::new(&schema, v.clone()).expect("instance")).collect();
            let executor = Executor::new(&graph, params.clone(), ExecConfig::default()).expect("executor");
            let stats = executor.evaluate(&instances).expect("evaluates");
            for (i, value) in values.iter().enumerate() {
                let Value::Record(fields) = value else { unreachable!("an instance is a record") };
                let Some(Value::Int(label)) = fields.get(1) else { unreachable!("a label") };
                let outputs = reference.frame_outputs(&params, value).expect("reference runs");
                let mut expected: Vec<(i64, bool)> = outputs
                    .iter()
                    .enumerate()
                    .map(|(k, logits)| {
                        let best = (0..logits.len()).fold(0, |b, j| if logits[j] > logits[b] { j } else { b });
                        (k as i64, best as i64 == *label)
                    })
                    .collect();
                let mut got: Vec<(i64, bool)> =
                    stats.judgements[i].iter().map(|j| (j.state[frame_field], j.correct)).collect();
                got.sort();
                expected.sort();
                assert_eq!(got, expected, "{name} {which} instance {i}");
            }
        }
    }
}
