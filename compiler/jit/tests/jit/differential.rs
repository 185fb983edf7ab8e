//! JIT against the interpreter: every kernel of the examples' fusion groups and random
//! kernels, forward and backward, on random inputs with edge values (0, -0, ±80, ±1e30,
//! NaN, ±inf, a subnormal), within bounds derived from the documented approximation
//! errors (`common::Tracked`).

use crate::common::{compile, differential, examples, random_call, Agreement};
use amp_jit::{Elementwise, KernelSpec, SpecOp, ValueId, Width};
use proptest::prelude::*;
use proptest::strategy::ValueTree;

/// A random spec: up to 3 inputs (mostly vectors), up to 12 ops reading earlier values,
/// the values nothing reads as outputs plus a random few more.
pub fn spec_strategy() -> impl Strategy<Value = KernelSpec> {
    let n = prop_oneof![1u64..=9, Just(13u64), Just(150u64)];
    let inputs = prop::collection::vec(prop_oneof![3 => Just(Width::Vector), 1 => Just(Width::Scalar)], 1..=3);
    let ops = prop::collection::vec((0..Elementwise::all().count(), any::<u32>(), any::<u32>()), 1..=12);
    (n, inputs, ops, any::<u64>()).prop_map(|(n, inputs, ops, extra_outputs)| {
        let count = inputs.len();
        let ops: Vec<SpecOp> = ops
            .into_iter()
            .enumerate()
            .map(|(i, (op, a, b))| {
                let op = Elementwise::all().nth(op).expect("in range");
                let defined = (count + i) as u32;
                let args = [ValueId(a % defined), ValueId(b % defined)];
                SpecOp { op, args: args[..op.arity()].to_vec() }
            })
            .collect();
        let mut read = vec![false; count + ops.len()];
        for op in &ops {
            for a in &op.args {
                read[a.index()] = true;
            }
        }
        let outputs = (count..count + ops.len())
            .filter(|&v| !read[v] || extra_outputs >> (v % 64) & 1 == 1)
            .map(|v| ValueId(v as u32))
            .collect();
        KernelSpec::new(n, inputs, ops, outputs).expect("generated specs are valid")
    })
}

fn check(spec: &KernelSpec, rows: usize, seed: u64, edge: f64) -> Result<Agreement, TestCaseError> {
    let kernel = compile(spec);
    let (inputs, grads) = random_call(&kernel, rows, seed, edge);
    differential(&kernel, rows, &inputs, &grads).map_err(|e| TestCaseError::fail(format!("{}: {e}", spec.describe())))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn random_kernels_match_the_interpreter(spec in spec_strategy(), rows in 1usize..=3, seed in any::<u64>()) {
        check(&spec, rows, seed, 0.0)?;
    }

    #[test]
    fn random_kernels_match_on_edge_values(spec in spec_strategy(), rows in 1usize..=3, seed in any::<u64>()) {
        check(&spec, rows, seed, 0.15)?;
    }
}

#[test]
fn example_fusion_groups_match_the_interpreter() {
    let mut kernels = 0;
    let mut tally = Agreement::default();
    for (file, verified) in examples() {
        for group in amp_jit::fusion_groups(&verified) {
            let group = group.unwrap_or_else(|e| panic!("{file}: {e}"));
            let kernel = compile(&group.spec);
            kernels += 1;
            for (seed, edge) in [(1, 0.0), (2, 0.0), (3, 0.1), (4, 0.3)] {
                for rows in [1, 3] {
                    let (inputs, grads) = random_call(&kernel, rows, seed, edge);
                    let t = differential(&kernel, rows, &inputs, &grads)
                        .unwrap_or_else(|e| panic!("{file} group {}: {e}", group.id));
                    tally.checked += t.checked;
                    tally.skipped += t.skipped;
                }
            }
        }
    }
    assert_eq!(kernels, 6, "tree_lstm and ggsnn have 2 + 1 groups each, at two sizes");
    assert!(tally.checked > 8 * tally.skipped, "{tally:?}");
}

/// Without edge values almost every value has a finite bound: the tests check, not skip.
#[test]
fn bounds_are_informative() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let mut tally = Agreement::default();
    for _ in 0..40 {
        let spec = spec_strategy().new_tree(&mut runner).expect("a spec").current();
        let t = check(&spec, 2, 7, 0.0).expect("agrees");
        tally.checked += t.checked;
        tally.skipped += t.skipped;
    }
    assert!(tally.checked > 4 * tally.skipped, "{tally:?}");
}

/// The saving forward and the backward from saved values against the plain functions:
/// the same outputs and gradients bit for bit (NaNs included), and saved buffers of the
/// wrong length refused before anything runs.
fn check_saving(spec: &KernelSpec, rows: usize, seed: u64) -> Result<(), TestCaseError> {
    use crate::common::{output_lens, run_kernel};
    use amp_jit::Pass;
    let kernel = compile(spec);
    let (inputs, grads) = random_call(&kernel, rows, seed, 0.15);
    let bits = |buffers: &[Vec<f32>]| -> Vec<Vec<u32>> {
        buffers.iter().map(|b| b.iter().map(|v| v.to_bits()).collect()).collect()
    };
    let ins: Vec<&[f32]> = inputs.iter().map(Vec::as_slice).collect();
    let mut outputs: Vec<Vec<f32>> =
        output_lens(&kernel, Pass::Forward, rows).into_iter().map(|len| vec![f32::NAN; len]).collect();
    let mut saved = vec![f32::NAN; rows * kernel.saved_per_row()];
    {
        let mut outs: Vec<&mut [f32]> = outputs.iter_mut().map(Vec::as_mut_slice).collect();
        kernel.run_forward_saving(rows, &ins, &mut outs, &mut saved).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let mut short = vec![0.0; saved.len().saturating_sub(1)];
        if !saved.is_empty() {
            prop_assert!(kernel.run_forward_saving(rows, &ins, &mut outs, &mut short).is_err());
        }
    }
    prop_assert_eq!(bits(&outputs), bits(&run_kernel(&kernel, Pass::Forward, rows, &inputs)), "forward");
    let with_grads: Vec<Vec<f32>> = inputs.iter().chain(&grads).cloned().collect();
    let ins: Vec<&[f32]> = with_grads.iter().map(Vec::as_slice).collect();
    let mut input_grads: Vec<Vec<f32>> =
        output_lens(&kernel, Pass::Backward, rows).into_iter().map(|len| vec![f32::NAN; len]).collect();
    let mut outs: Vec<&mut [f32]> = input_grads.iter_mut().map(Vec::as_mut_slice).collect();
    kernel.run_backward_from_saved(rows, &ins, &saved, &mut outs).map_err(|e| TestCaseError::fail(e.to_string()))?;
    if !saved.is_empty() {
        prop_assert!(kernel.run_backward_from_saved(rows, &ins, &saved[1..], &mut outs).is_err());
    }
    prop_assert_eq!(bits(&input_grads), bits(&run_kernel(&kernel, Pass::Backward, rows, &with_grads)), "backward");
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn saving_kernels_match_the_plain_ones_bit_for_bit(spec in spec_strategy(), rows in 0usize..=3, seed in any::<u64>()) {
        check_saving(&spec, rows, seed)?;
    }
}

#[test]
fn the_examples_kernels_save_their_transcendentals() {
    for (name, verified) in examples() {
        for group in amp_jit::fusion_groups(&verified).into_iter().flatten() {
            let kernel = compile(&group.spec);
            let expected = group.spec.saved().len() * group.spec.n();
            assert_eq!(kernel.saved_per_row(), expected, "{name}");
            for rows in [1, 4] {
                check_saving(&group.spec, rows, 7).unwrap_or_else(|e| panic!("{name}: {e}"));
            }
        }
    }
}
