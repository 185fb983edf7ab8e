//! From graphs to kernels: the examples' fusion groups, their wiring, the kernel cache,
//! and `--emit clif`'s listing.

use crate::common::{compile_example, examples};
use amp_jit::{compile_groups, fusion_groups, KernelCache, Width};

#[test]
fn tree_lstm_groups_have_the_expected_kernels() {
    let verified = compile_example("tree_lstm.amp", &[]);
    let groups: Vec<_> = fusion_groups(&verified).into_iter().map(Result::unwrap).collect();
    assert_eq!(groups.len(), 2);
    let leaf = &groups[0];
    assert_eq!(
        leaf.spec.describe(),
        "n=150 in(v, v, v) v3=sigmoid(v0) v4=tanh(v1) v5=mul(v3, v4) v6=sigmoid(v2) v7=tanh(v5) v8=mul(v6, v7) out(v5, v8)"
    );
    let ports: Vec<String> = leaf.inputs.iter().map(|p| format!("%{}#{}", p.node.index(), p.port)).collect();
    assert_eq!(ports, ["%5#0", "%5#2", "%5#1"]);
    assert_eq!(leaf.outputs.iter().map(|n| n.index()).collect::<Vec<_>>(), [8, 11]);
    assert_eq!(leaf.nodes.len(), 6);
    assert!(!leaf.key.is_empty());
    let branch = &groups[1];
    assert_eq!(branch.spec.inputs(), [Width::Vector; 7]);
    assert_eq!(branch.spec.ops().len(), 12);
}

#[test]
fn ggsnn_group_broadcasts_a_scalar() {
    let verified = compile_example("ggsnn.amp", &[]);
    let groups: Vec<_> = fusion_groups(&verified).into_iter().map(Result::unwrap).collect();
    assert_eq!(groups.len(), 1);
    let gru = &groups[0];
    assert_eq!(gru.spec.n(), 32);
    assert_eq!(gru.spec.inputs().iter().filter(|&&w| w == Width::Scalar).count(), 1, "{}", gru.spec.describe());
    // One input per distinct source port, however many group ports it feeds.
    let fed: usize = gru.input_edges.iter().map(Vec::len).sum();
    assert!(fed >= gru.inputs.len());
}

#[test]
fn equal_groups_compile_once() {
    let mut cache = KernelCache::new().unwrap();
    let verified = compile_example("tree_lstm.amp", &[]);
    let first = compile_groups(&verified, &mut cache);
    let second = compile_groups(&verified, &mut cache);
    assert_eq!(cache.stats().compiled, 2);
    assert_eq!(cache.stats().hits, 2);
    for (a, b) in first.kernels.iter().zip(&second.kernels) {
        assert!(std::sync::Arc::ptr_eq(&a.kernel, &b.kernel));
    }
}

/// Two gate chains of the same structure in one model share a kernel.
#[test]
fn equal_groups_in_one_graph_share_a_kernel() {
    let source = "record R { x: f32[4], y: f32[4], label: int }\n\
        model Twins {\n\
            fn forward(r: R) -> f32[8] { concat(sigmoid(r.x) * tanh(r.y), sigmoid(r.y) * tanh(r.x)) }\n\
            fn loss(r: R) -> f32 { cross_entropy(forward(r), r.label) }\n\
        }\n";
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("twins.amp");
    std::fs::write(&file, source).unwrap();
    let verified = compile_example(file.to_str().unwrap(), &[]);
    let mut cache = KernelCache::new().unwrap();
    let compiled = compile_groups(&verified, &mut cache);
    assert_eq!(compiled.kernels.len(), 2);
    assert!(compiled.refused.is_empty());
    assert_eq!(cache.stats(), amp_jit::CacheStats { compiled: 1, hits: 1 });
}

#[test]
fn clif_listing_names_groups_and_prints_each_kernel_once() {
    let mut cache = KernelCache::new().unwrap();
    for (file, verified) in examples() {
        let compiled = compile_groups(&verified, &mut cache);
        assert!(compiled.refused.is_empty(), "{file}: {:?}", compiled.refused);
        let text = amp_jit::clif_listing(&verified, &compiled);
        let functions = text.lines().filter(|l| l.starts_with("function ")).count();
        let kernels: std::collections::BTreeSet<usize> = compiled.kernels.iter().map(|g| g.kernel.id()).collect();
        assert_eq!(functions, 2 * kernels.len(), "{file}:\n{text}");
        for g in &compiled.kernels {
            assert!(text.contains(&format!("; fusion group {}:", g.group.id)), "{text}");
            assert!(text.contains(&format!("function %kernel{}_forward(", g.kernel.id())), "{text}");
            assert!(text.contains(&format!("function %kernel{}_backward(", g.kernel.id())), "{text}");
        }
    }
}
