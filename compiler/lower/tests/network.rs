//! Networks rolled out over frames (docs/rollouts.md): the graphs of the rollout examples
//! under their streaming, sequential and a hybrid pattern verify; the frame loop is a
//! counter in the state; under the streaming pattern no layer of a frame waits for
//! another layer of that frame; refusals are coded.

use amp_diagnostics::Code;
use amp_ir::{FieldRole, Graph, LossKind, Op, StateExpr};
use amp_lower::{compile_network, Frames};
use amp_sema::rollout::{Pattern, RolloutGraph};
use amp_sema::{check_source, Options, Program};
use petgraph::visit::EdgeRef;
use petgraph::Direction;

fn example(name: &str) -> String {
    std::fs::read_to_string(format!("{}/../../examples/rollout/{name}.amp", env!("CARGO_MANIFEST_DIR")))
        .expect("example")
}

fn checked(text: &str) -> (amp_diagnostics::SourceMap, Program) {
    let (map, checked) = check_source("t.amp", text, &Options { defines: vec![("hidden".into(), 6)] });
    assert!(!checked.has_errors(), "{}", amp_diagnostics::render_human(&map, &checked.diagnostics, false));
    (map, checked.program)
}

/// The patterns every example is compiled under: streaming, sequential and one hybrid.
fn patterns(graph: &RolloutGraph) -> Vec<(&'static str, Pattern)> {
    let hybrid =
        graph.edges.iter().enumerate().map(|(e, _)| u8::from(e % 2 == 1 || graph.is_recurrent(e))).collect::<Vec<_>>();
    vec![
        ("streaming", Pattern::streaming(graph)),
        ("sequential", Pattern::sequential(graph)),
        ("hybrid", Pattern::from_delays(graph, &hybrid).expect("one delay per edge")),
    ]
}

fn compile(name: &str, which: &str, frames: Frames) -> Graph {
    let (map, program) = checked(&example(name));
    let rollout = RolloutGraph::of_network(&program.networks[0]);
    let pattern = patterns(&rollout).into_iter().find(|(n, _)| *n == which).expect("pattern").1;
    let (graph, _) =
        compile_network(&program, &map, 0, &pattern, frames).unwrap_or_else(|e| panic!("{name} {which}: {e:?}"));
    graph.into_inner()
}

/// How many layers (`linear` nodes) lie on the longest path of one frame: from a
/// loop-header `phi` or a `read` to a layer, through the frame's nodes. Edges into a
/// `phi` are where a frame ends.
fn layers_in_a_frame(graph: &Graph) -> usize {
    let mut memo = std::collections::HashMap::new();
    fn depth(
        graph: &Graph,
        n: petgraph::stable_graph::NodeIndex,
        memo: &mut std::collections::HashMap<petgraph::stable_graph::NodeIndex, usize>,
    ) -> usize {
        if let Some(&d) = memo.get(&n) {
            return d;
        }
        let node = &graph.nodes[n];
        let here = usize::from(matches!(node.op, Op::Linear { .. }));
        let before = if matches!(node.op, Op::Phi { .. }) {
            0
        } else {
            graph
                .nodes
                .edges_directed(n, Direction::Incoming)
                .map(|e| depth(graph, e.source(), memo))
                .max()
                .unwrap_or(0)
        };
        memo.insert(n, here + before);
        here + before
    }
    graph.nodes.node_indices().map(|n| depth(graph, n, &mut memo)).max().unwrap_or(0)
}

#[test]
fn every_example_verifies_under_every_pattern() {
    for name in ["feed_forward", "skip", "skip_recurrent"] {
        for which in ["streaming", "sequential", "hybrid"] {
            for frames in [Frames::Fixed(3), Frames::FromData] {
                let g = compile(name, which, frames);
                assert_eq!(g.params.len(), 8, "{name}: four layers, weight and bias each");
                let counters = g.state.iter().filter(|f| f.role == FieldRole::Counter).count();
                assert_eq!(counters, 1, "{name} {which}: the frames are one loop counter");
                let losses: Vec<&Op> =
                    g.nodes.node_weights().map(|n| &n.op).filter(|op| matches!(op, Op::Loss(_))).collect();
                assert_eq!(losses.len(), 1, "{name} {which}");
                let Op::Loss(LossKind::CrossEntropyMean { count, .. }) = losses[0] else { panic!("a mean loss") };
                match frames {
                    Frames::Fixed(n) => assert_eq!(*count, StateExpr::Const(i64::from(n))),
                    Frames::FromData => assert!(matches!(count, StateExpr::Len(_))),
                }
            }
        }
    }
}

#[test]
fn streaming_frames_have_one_layer_between_loop_headers() {
    for name in ["feed_forward", "skip", "skip_recurrent"] {
        assert_eq!(layers_in_a_frame(&compile(name, "streaming", Frames::Fixed(4))), 1, "{name}");
        // The sequential rollout runs the chain x -> h1 -> h2 -> h3 -> y in one frame.
        assert_eq!(layers_in_a_frame(&compile(name, "sequential", Frames::Fixed(4))), 4, "{name}");
    }
}

#[test]
fn the_text_form_round_trips() {
    let g = compile("skip_recurrent", "hybrid", Frames::FromData);
    let text = amp_ir::text::print(&g);
    assert!(text.contains("cross_entropy [$.label] / [len($.frames)]"), "{text}");
    let parsed = amp_ir::text::parse(&text).expect("parses");
    assert_eq!(amp_ir::text::print(&parsed), text);
}

#[test]
fn an_invalid_pattern_is_e0700() {
    let (map, program) = checked(&example("skip_recurrent"));
    let rollout = RolloutGraph::of_network(&program.networks[0]);
    let pattern = Pattern::with_overrides(&rollout, "h2->h2=0").expect("parses");
    match compile_network(&program, &map, 0, &pattern, Frames::Fixed(2)) {
        Err(amp_lower::CompileError::Refused(d)) => assert_eq!(d[0].code, Code::InvalidRollout),
        other => panic!("{other:?}"),
    }
}

#[test]
fn unsupported_networks_are_e0600() {
    let two_inputs = "network N(hidden: int = 2) {\n    input a: f32[2];\n    input b: f32[3];\n    output y = Linear(5, 2) from a, b;\n}\n";
    let (map, program) = checked(two_inputs);
    let pattern = Pattern::streaming(&RolloutGraph::of_network(&program.networks[0]));
    match compile_network(&program, &map, 0, &pattern, Frames::Fixed(2)) {
        Err(amp_lower::CompileError::Refused(d)) => {
            assert_eq!(d[0].code, Code::NotLowered);
            assert!(d[0].message.contains("exactly one input"), "{}", d[0].message);
        }
        other => panic!("{other:?}"),
    }
    match compile_network(&program, &map, 0, &pattern, Frames::Fixed(0)) {
        Err(amp_lower::CompileError::Refused(d)) => assert_eq!(d[0].code, Code::NotLowered),
        other => panic!("{other:?}"),
    }
}
