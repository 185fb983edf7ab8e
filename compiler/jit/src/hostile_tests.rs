//! Hostile graphs: proptest mutations of ops, port types, edges and fusion ids inside
//! the examples' fusion groups. Extraction must refuse or accept without panicking, and
//! every kernel it accepts must stay inside its buffers whatever it computes.
//!
//! These run inside the crate because they call extraction without the verifier's
//! guarantee, which the public API does not offer.

use crate::group::extract_groups;
use crate::{KernelCache, KernelError, Pass, Width};
use amp_ir::{BinaryFn, Edge, Graph, Op, PayloadTy, ReduceFn, UnaryFn};
use petgraph::stable_graph::NodeIndex;
use petgraph::visit::EdgeRef;
use proptest::prelude::*;

fn example(file: &str, defines: &[(&str, i64)]) -> Graph {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples").join(file);
    let text = std::fs::read_to_string(&path).expect("the example exists");
    let mut map = amp_diagnostics::SourceMap::new();
    let main = map.add(path.display().to_string(), text);
    let options = amp_sema::Options { defines: defines.iter().map(|(k, v)| (k.to_string(), *v)).collect() };
    let checked = amp_sema::check_program(&mut map, main, &options, &amp_sema::NoFiles);
    let model = checked.program.models[0];
    match amp_lower::compile_model(&checked.program, &map, model) {
        Ok((graph, _)) => graph.into_inner(),
        Err(_) => panic!("{file} compiles"),
    }
}

#[derive(Clone, Debug)]
enum Mutation {
    SetOp { node: usize, op: usize },
    SetInput { node: usize, port: usize, ty: usize },
    SetOutput { node: usize, ty: usize, extra: bool },
    Fuse { node: usize, group: u32 },
    Unfuse { node: usize },
    DropEdge { edge: usize },
    AddEdge { from: usize, from_port: u16, to: usize, to_port: u16 },
}

fn ops() -> Vec<Op> {
    let mut ops: Vec<Op> = UnaryFn::all().map(Op::Unary).collect();
    ops.extend(BinaryFn::all().map(Op::Binary));
    ops.extend([
        Op::Concat,
        Op::Forget,
        Op::Linear { param: "leaf".into() },
        Op::Phi { arms: 2 },
        Op::Reduce(ReduceFn::Sum),
    ]);
    ops
}

fn types(n: u64) -> Vec<PayloadTy> {
    vec![
        PayloadTy::F32(vec![]),
        PayloadTy::F32(vec![n]),
        PayloadTy::F32(vec![n + 1]),
        PayloadTy::F32(vec![0]),
        PayloadTy::F32(vec![1 << 40]),
        PayloadTy::F32(vec![u64::MAX, 3]),
        PayloadTy::F32(vec![2, 3]),
        PayloadTy::Batch(vec![n]),
        PayloadTy::Batch(vec![]),
        PayloadTy::Unit,
    ]
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let node = any::<usize>();
    prop_oneof![
        (node, 0..17usize).prop_map(|(node, op)| Mutation::SetOp { node, op }),
        (node, 0..3usize, 0..10usize).prop_map(|(node, port, ty)| Mutation::SetInput { node, port, ty }),
        (node, 0..10usize, any::<bool>()).prop_map(|(node, ty, extra)| Mutation::SetOutput { node, ty, extra }),
        (node, 0..4u32).prop_map(|(node, group)| Mutation::Fuse { node, group }),
        node.prop_map(|node| Mutation::Unfuse { node }),
        any::<usize>().prop_map(|edge| Mutation::DropEdge { edge }),
        (node, 0..3u16, node, 0..3u16).prop_map(|(from, from_port, to, to_port)| Mutation::AddEdge {
            from,
            from_port,
            to,
            to_port
        }),
    ]
}

fn apply(graph: &mut Graph, mutation: &Mutation, n: u64) {
    let all: Vec<NodeIndex> = graph.nodes.node_indices().collect();
    let fused: Vec<NodeIndex> = all.iter().copied().filter(|&i| graph.nodes[i].fusion.is_some()).collect();
    let pick_fused = |k: usize| if fused.is_empty() { None } else { Some(fused[k % fused.len()]) };
    match *mutation {
        Mutation::SetOp { node, op } => {
            if let Some(i) = pick_fused(node) {
                graph.nodes[i].op = ops()[op].clone();
            }
        }
        Mutation::SetInput { node, port, ty } => {
            if let Some(i) = pick_fused(node) {
                let inputs = &mut graph.nodes[i].inputs;
                let ty = types(n)[ty].clone();
                match inputs.get_mut(port) {
                    Some(slot) => *slot = ty,
                    None => inputs.push(ty),
                }
            }
        }
        Mutation::SetOutput { node, ty, extra } => {
            if let Some(i) = pick_fused(node) {
                let ty = types(n)[ty].clone();
                if extra {
                    graph.nodes[i].outputs.push(ty);
                } else if let Some(slot) = graph.nodes[i].outputs.first_mut() {
                    *slot = ty;
                }
            }
        }
        Mutation::Fuse { node, group } => {
            let i = all[node % all.len()];
            graph.nodes[i].fusion = Some(group);
        }
        Mutation::Unfuse { node } => {
            if let Some(i) = pick_fused(node) {
                graph.nodes[i].fusion = None;
            }
        }
        Mutation::DropEdge { edge } => {
            let edges: Vec<_> = fused.iter().flat_map(|&i| graph.nodes.edges(i).map(|e| e.id())).collect();
            if !edges.is_empty() {
                graph.nodes.remove_edge(edges[edge % edges.len()]);
            }
        }
        Mutation::AddEdge { from, from_port, to, to_port } => {
            if let Some(target) = pick_fused(to) {
                graph.nodes.add_edge(all[from % all.len()], target, Edge { from_port, to_port });
            }
        }
    }
}

const GUARD: usize = 19;

/// Runs a call on guarded buffers of the given lengths; returns the outputs, or the
/// entry point's error. Panics if anything outside the buffers changed.
fn guarded(
    kernel: &crate::Kernel,
    pass: Pass,
    rows: usize,
    lens: (&[usize], &[usize]),
    canary: f32,
) -> Result<Vec<Vec<f32>>, KernelError> {
    let inputs: Vec<Vec<f32>> = lens
        .0
        .iter()
        .enumerate()
        .map(|(p, &n)| {
            let mut v = vec![canary; n + 2 * GUARD];
            for (k, x) in v[GUARD..GUARD + n].iter_mut().enumerate() {
                *x = ((k * 7 + p * 13) % 17) as f32 * 0.37 - 2.9;
            }
            v
        })
        .collect();
    let mut outputs: Vec<Vec<f32>> = lens.1.iter().map(|&n| vec![canary; n + 2 * GUARD]).collect();
    let result = {
        let ins: Vec<&[f32]> = inputs.iter().map(|v| &v[GUARD..v.len() - GUARD]).collect();
        let mut outs: Vec<&mut [f32]> = outputs
            .iter_mut()
            .map(|v| {
                let end = v.len() - GUARD;
                &mut v[GUARD..end]
            })
            .collect();
        kernel.run(pass, rows, &ins, &mut outs)
    };
    let untouched = |g: &[f32]| g.iter().all(|x| x.to_bits() == canary.to_bits());
    for v in inputs.iter().chain(&outputs) {
        assert!(untouched(&v[..GUARD]) && untouched(&v[v.len() - GUARD..]), "a write outside a buffer");
    }
    result.map(|()| outputs.iter().map(|v| v[GUARD..v.len() - GUARD].to_vec()).collect())
}

fn layout(kernel: &crate::Kernel, pass: Pass, rows: usize) -> (Vec<usize>, Vec<usize>) {
    let spec = kernel.spec();
    let len = |w: Width| spec.buffer_len(w, rows).unwrap_or(usize::MAX);
    let inputs: Vec<usize> = spec.inputs().iter().map(|&w| len(w)).collect();
    let outputs: Vec<usize> = spec.output_widths().map(len).collect();
    match pass {
        Pass::Forward => (inputs, outputs),
        Pass::Backward => ([inputs.clone(), outputs].concat(), inputs),
    }
}

fn exercise(graph: &Graph, cache: &mut KernelCache) {
    let groups = extract_groups(graph);
    if let Ok(verified) = amp_ir::verify::verify(graph.clone()) {
        let public = crate::fusion_groups(&verified);
        assert_eq!(public.len(), groups.len());
    }
    for group in groups.into_iter().flatten() {
        let kernel = cache.kernel(&group.spec).expect("an accepted group compiles");
        for rows in [0usize, 1, 2] {
            for pass in [Pass::Forward, Pass::Backward] {
                let (ins, outs) = layout(&kernel, pass, rows);
                if ins.iter().chain(&outs).any(|&n| n > 1 << 16) {
                    continue;
                }
                // The kernel's own layout runs, and reads nothing outside its buffers.
                let a = guarded(&kernel, pass, rows, (&ins, &outs), f32::from_bits(0x7fc0_dead)).expect("runs");
                let b = guarded(&kernel, pass, rows, (&ins, &outs), 3.0e9).expect("runs");
                for (x, y) in a.iter().flatten().zip(b.iter().flatten()) {
                    assert!(x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()), "a read outside a buffer");
                }
                // Buffers sized from the graph's declared port types: run or refused.
                let declared: Vec<usize> = group
                    .inputs
                    .iter()
                    .map(|p| {
                        let ty = graph.nodes[p.node].outputs.get(usize::from(p.port));
                        let elements = match ty {
                            Some(PayloadTy::F32(d)) | Some(PayloadTy::Batch(d)) => {
                                d.iter().try_fold(1u64, |a, &x| a.checked_mul(x)).unwrap_or(u64::MAX)
                            }
                            _ => 0,
                        };
                        (elements as usize).saturating_mul(rows).min(1 << 16)
                    })
                    .collect();
                if pass == Pass::Forward {
                    match guarded(&kernel, pass, rows, (&declared, &outs), 0.0) {
                        Ok(_) | Err(KernelError::BufferLength { .. }) => {}
                        Err(e) => panic!("unexpected {e}"),
                    }
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn hostile_groups_are_refused_or_stay_in_bounds(
        which in 0usize..2,
        mutations in prop::collection::vec(mutation(), 1..6),
    ) {
        let (mut graph, n) = match which {
            0 => (example("tree_lstm.amp", &[("vocab", 20), ("embed", 8), ("hidden", 6)]), 6),
            _ => (example("ggsnn.amp", &[("kinds", 3), ("hidden", 5), ("steps", 2)]), 5),
        };
        for m in &mutations {
            apply(&mut graph, m, n);
        }
        let mut cache = KernelCache::new().expect("a JIT");
        exercise(&graph, &mut cache);
    }
}

#[test]
fn unmutated_examples_extract_cleanly() {
    let mut cache = KernelCache::new().expect("a JIT");
    for graph in [example("tree_lstm.amp", &[("hidden", 6)]), example("ggsnn.amp", &[("hidden", 5)])] {
        assert!(extract_groups(&graph).iter().all(Result::is_ok));
        exercise(&graph, &mut cache);
    }
}

#[test]
fn a_cycle_and_a_softmax_are_refused() {
    use crate::GroupErrorKind;
    let mut graph = example("tree_lstm.amp", &[("hidden", 6)]);
    let fused: Vec<NodeIndex> = graph.nodes.node_indices().filter(|&i| graph.nodes[i].fusion == Some(0)).collect();
    // %6 sigmoid → ... → %11: feed %11 back into %6 in place of its input.
    let (first, last) = (fused[0], fused[fused.len() - 1]);
    let incoming: Vec<_> = graph.nodes.edges_directed(first, petgraph::Direction::Incoming).map(|e| e.id()).collect();
    for e in incoming {
        graph.nodes.remove_edge(e);
    }
    graph.nodes.add_edge(last, first, Edge { from_port: 0, to_port: 0 });
    assert_eq!(extract_groups(&graph)[0].as_ref().map_err(|e| e.kind.clone()).err(), Some(GroupErrorKind::Cycle));
    let mut graph = example("tree_lstm.amp", &[("hidden", 6)]);
    let first = graph.nodes.node_indices().find(|&i| graph.nodes[i].fusion == Some(0)).unwrap();
    graph.nodes[first].op = Op::Unary(UnaryFn::Softmax);
    assert!(matches!(
        extract_groups(&graph)[0].as_ref().map_err(|e| e.kind.clone()),
        Err(GroupErrorKind::NotElementwise { op: "unary", .. })
    ));
}
