//! Strided inputs: a vector input read as a column block of wider rows, in place, computes
//! bit for bit what the same call on a packed copy computes, in every function (plain,
//! saving, from saved, into new uninitialised buffers; JIT and interpreter), reads nothing
//! outside its block, and a stride or length that does not fit is an error before any code
//! runs.

use crate::common::{compile, output_lens, random_call, run_kernel, single_op_kernel};
use crate::differential::spec_strategy;
use amp_ir::{BinaryFn, UnaryFn};
use amp_jit::{BufferRole, Elementwise, Kernel, KernelError, Pass, Rows, SpecBuilder, Width};
use proptest::prelude::*;

/// `rows` rows of `width` embedded as columns `[offset, offset + width)` of rows `stride`
/// wide, every other column (and `stride` more values after the last row) `canary`.
fn embed(packed: &[f32], rows: usize, width: usize, offset: usize, stride: usize, canary: f32) -> Vec<f32> {
    let mut wide = vec![canary; rows * stride + stride];
    for r in 0..rows {
        wide[r * stride + offset..r * stride + offset + width].copy_from_slice(&packed[r * width..(r + 1) * width]);
    }
    wide
}

fn bits(buffers: &[Vec<f32>]) -> Vec<Vec<u32>> {
    buffers.iter().map(|b| b.iter().map(|v| v.to_bits()).collect()).collect()
}

/// Every vector input-side buffer of a call strided (`extra` columns more per row, the
/// block at `offset`), with `canary` around the blocks: the outputs of the JIT's plain,
/// saving and from-saved functions and of the interpreter.
fn strided_call(
    kernel: &Kernel,
    pass: Pass,
    rows: usize,
    buffers: &[Vec<f32>],
    extra: usize,
    canary: f32,
) -> Vec<Vec<Vec<f32>>> {
    let spec = kernel.spec();
    let n = spec.n();
    let widths: Vec<Width> = spec.inputs().iter().copied().chain(spec.output_widths()).collect();
    let offset = extra / 2;
    let stride = n + extra;
    let wide: Vec<Option<Vec<f32>>> = buffers
        .iter()
        .zip(&widths)
        .map(|(b, &w)| (w == Width::Vector).then(|| embed(b, rows, n, offset, stride, canary)))
        .collect();
    let views: Vec<Rows> = buffers
        .iter()
        .zip(&wide)
        .map(|(b, wide)| match wide {
            // The block's rows start at its offset and end with the last row's block.
            Some(wide) => Rows::strided(&wide[offset..offset + (rows * stride).saturating_sub(stride - n)], stride),
            None => Rows::packed(b),
        })
        .collect();
    let fresh =
        || -> Vec<Vec<f32>> { output_lens(kernel, pass, rows).into_iter().map(|l| vec![f32::NAN; l]).collect() };
    let mut results = Vec::new();
    let mut plain = fresh();
    let mut interpreted = fresh();
    {
        let mut outs: Vec<&mut [f32]> = plain.iter_mut().map(Vec::as_mut_slice).collect();
        match pass {
            Pass::Forward => kernel.forward(rows, &views, &mut outs, None),
            Pass::Backward => kernel.backward(rows, &views, None, &mut outs),
        }
        .expect("a well-formed strided call");
        let mut outs: Vec<&mut [f32]> = interpreted.iter_mut().map(Vec::as_mut_slice).collect();
        kernel.run_interpreted_rows(pass, rows, &views, &mut outs).expect("a well-formed strided call");
    }
    results.push(plain);
    results.push(interpreted);
    if pass == Pass::Forward {
        let mut saving = fresh();
        // NaN where nothing is stored: a saved value left unwritten would show as a NaN
        // here and differ from `forward_new`'s (whose buffers are not initialised).
        let mut saved = vec![f32::NAN; rows * kernel.saved_per_row()];
        let mut outs: Vec<&mut [f32]> = saving.iter_mut().map(Vec::as_mut_slice).collect();
        kernel.forward(rows, &views, &mut outs, Some(&mut saved)).expect("a well-formed strided call");
        let (new, new_saved) = kernel.forward_new(rows, &views, true).expect("a well-formed strided call");
        assert_eq!(bits(&[new_saved]), bits(&[saved.clone()]), "forward_new's saved values");
        results.push(saving);
        results.push(new);
        results.push(kernel.forward_new(rows, &views, false).expect("a well-formed strided call").0);
    } else {
        // The saved values of a packed saving forward, read by a strided backward.
        let inputs: Vec<&[f32]> = buffers[..spec.inputs().len()].iter().map(Vec::as_slice).collect();
        let mut outputs: Vec<Vec<f32>> =
            output_lens(kernel, Pass::Forward, rows).into_iter().map(|l| vec![0.0; l]).collect();
        let mut outs: Vec<&mut [f32]> = outputs.iter_mut().map(Vec::as_mut_slice).collect();
        let mut saved = vec![0.0; rows * kernel.saved_per_row()];
        kernel.run_forward_saving(rows, &inputs, &mut outs, &mut saved).expect("a well-formed call");
        let mut from_saved = fresh();
        let mut outs: Vec<&mut [f32]> = from_saved.iter_mut().map(Vec::as_mut_slice).collect();
        kernel.backward(rows, &views, Some(&saved), &mut outs).expect("a well-formed strided call");
        results.push(from_saved);
        results.push(kernel.backward_new(rows, &views, Some(&saved)).expect("a well-formed strided call"));
        results.push(kernel.backward_new(rows, &views, None).expect("a well-formed strided call"));
    }
    results
}

fn check(kernel: &Kernel, rows: usize, seed: u64, extra: usize) -> Result<(), TestCaseError> {
    let (inputs, grads) = random_call(kernel, rows, seed, 0.15);
    let with_grads: Vec<Vec<f32>> = inputs.iter().chain(&grads).cloned().collect();
    for (pass, buffers) in [(Pass::Forward, &inputs), (Pass::Backward, &with_grads)] {
        let packed = bits(&run_kernel(kernel, pass, rows, buffers));
        let interpreted = bits(&crate::common::run_interpreted(kernel, pass, rows, buffers));
        // Two canaries: an output that read a column outside its block would differ.
        for canary in [f32::from_bits(0x7fc0_dead), 1.5e10] {
            let results = strided_call(kernel, pass, rows, buffers, extra, canary);
            prop_assert_eq!(&bits(&results[0]), &packed, "{:?}, JIT", pass);
            prop_assert_eq!(&bits(&results[1]), &interpreted, "{:?}, interpreter", pass);
            prop_assert_eq!(&bits(&results[2]), &packed, "{:?}, saving pair", pass);
            prop_assert_eq!(&bits(&results[3]), &packed, "{:?}, new buffers (saving pair)", pass);
            prop_assert_eq!(&bits(&results[4]), &packed, "{:?}, new buffers", pass);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn strided_inputs_compute_what_packed_ones_do(
        spec in spec_strategy(),
        rows in 0usize..=3,
        seed in any::<u64>(),
        extra in 0usize..=9,
    ) {
        check(&compile(&spec), rows, seed, extra)?;
    }
}

#[test]
fn the_examples_kernels_read_blocks_in_place() {
    for (name, verified) in crate::common::examples() {
        for group in amp_jit::fusion_groups(&verified).into_iter().flatten() {
            let kernel = compile(&group.spec);
            for (rows, extra) in [(1, 3), (5, group.spec.n() * 2)] {
                check(&kernel, rows, 11, extra).unwrap_or_else(|e| panic!("{name}: {e}"));
            }
        }
    }
}

#[test]
fn strides_that_do_not_fit_are_errors() {
    let kernel = single_op_kernel(Elementwise::Unary(UnaryFn::Tanh), 6);
    let x = vec![0.5f32; 30];
    let mut y = vec![0.0f32; 18];
    let forward = |rows, input: Rows, y: &mut [f32]| kernel.forward(rows, &[input], &mut [y], None);
    // Narrower than a row.
    assert_eq!(forward(3, Rows::strided(&x, 5), &mut y), Err(KernelError::Stride { port: 0, stride: 5, width: 6 }));
    // 3 rows 10 apart need 26 values for the last row's 6, and take at most 30.
    let err = |found| Err(KernelError::BufferLength { role: BufferRole::Inputs, port: 0, expected: 26, found });
    assert_eq!(forward(3, Rows::strided(&x[..25], 10), &mut y), err(25));
    assert_eq!(forward(3, Rows::strided(&[0.5; 31], 10), &mut y), err(31));
    assert_eq!(forward(3, Rows::strided(&x[..26], 10), &mut y), Ok(()));
    assert_eq!(forward(3, Rows::strided(&x, 10), &mut y), Ok(()));
    assert_eq!(bits(&[y.clone()]), bits(&run_kernel(&kernel, Pass::Forward, 3, &[vec![0.5; 18]])));
    assert!(matches!(forward(usize::MAX, Rows::strided(&x, 10), &mut y), Err(KernelError::RowsOverflow { .. })));
    assert_eq!(forward(0, Rows::strided(&[], 10), &mut []), Ok(()));
    // Into new buffers: the same checks, before anything is allocated for `rows`.
    assert_eq!(kernel.forward_new(3, &[Rows::strided(&x[..25], 10)], true), err(25).map(|()| Default::default()));
    let huge = kernel.backward_new(usize::MAX / 2, &[Rows::packed(&x), Rows::packed(&x)], None);
    assert!(matches!(huge, Err(KernelError::RowsOverflow { .. } | KernelError::BufferLength { .. })), "{huge:?}");
    let (new, saved) = kernel.forward_new(3, &[Rows::strided(&x, 10)], false).expect("a well-formed call");
    assert_eq!((bits(&new), saved.len()), (bits(&[y.clone()]), 0));
    // A scalar port is always packed.
    let mut b = SpecBuilder::new(4);
    let v = b.input(Width::Vector);
    let s = b.input(Width::Scalar);
    let p = b.op(Elementwise::Binary(BinaryFn::Mul), &[v, s]);
    b.output(p);
    let kernel = compile(&b.finish().expect("a valid spec"));
    let (v, s, mut out) = (vec![1.0f32; 8], vec![2.0f32; 4], vec![0.0f32; 8]);
    assert_eq!(
        kernel.forward(2, &[Rows::packed(&v), Rows::strided(&s, 2)], &mut [&mut out], None),
        Err(KernelError::Stride { port: 1, stride: 2, width: 1 })
    );
}
