//! The entry point's checks: wrong buffers are errors before any code runs, and a kernel
//! touches exactly its buffers.

use crate::common::{compile, output_lens, random_call, single_op_kernel};
use crate::differential::spec_strategy;
use amp_ir::{BinaryFn, UnaryFn};
use amp_jit::{BufferRole, Elementwise, Kernel, KernelError, Pass, SpecBuilder, Width};
use proptest::prelude::*;

#[test]
fn wrong_buffers_are_errors() {
    let kernel = single_op_kernel(Elementwise::Unary(UnaryFn::Tanh), 6);
    let x = vec![0.5f32; 12];
    let mut y = vec![0.0f32; 12];
    let mut short = vec![0.0f32; 11];
    assert_eq!(
        kernel.run(Pass::Forward, 2, &[&x, &x], &mut [&mut y]),
        Err(KernelError::BufferCount { role: BufferRole::Inputs, expected: 1, found: 2 })
    );
    assert_eq!(
        kernel.run(Pass::Forward, 2, &[&x], &mut [&mut short]),
        Err(KernelError::BufferLength { role: BufferRole::Outputs, port: 0, expected: 12, found: 11 })
    );
    assert_eq!(
        kernel.run(Pass::Forward, 3, &[&x], &mut [&mut y]),
        Err(KernelError::BufferLength { role: BufferRole::Inputs, port: 0, expected: 18, found: 12 })
    );
    assert_eq!(
        kernel.run(Pass::Backward, 2, &[&x], &mut [&mut y]),
        Err(KernelError::BufferCount { role: BufferRole::Inputs, expected: 2, found: 1 })
    );
    assert!(matches!(
        kernel.run(Pass::Forward, usize::MAX, &[&x], &mut [&mut y]),
        Err(KernelError::RowsOverflow { .. })
    ));
    assert_eq!(
        kernel.run_interpreted(Pass::Forward, 3, &[&x], &mut [&mut y]),
        kernel.run(Pass::Forward, 3, &[&x], &mut [&mut y])
    );
    // Zero rows: empty buffers, nothing runs.
    assert_eq!(kernel.run(Pass::Forward, 0, &[&[]], &mut [&mut []]), Ok(()));
}

#[test]
fn scalar_ports_hold_one_value_per_row() {
    let mut b = SpecBuilder::new(5);
    let x = b.input(Width::Vector);
    let s = b.input(Width::Scalar);
    let y = b.op(Elementwise::Binary(BinaryFn::Mul), &[x, s]);
    let t = b.op(Elementwise::Unary(UnaryFn::Exp), &[s]);
    b.output(y);
    b.output(t);
    let kernel = compile(&b.finish().unwrap());
    let x: Vec<f32> = (0..10).map(|i| i as f32).collect();
    let s = [2.0f32, -1.0];
    let (mut y, mut t) = (vec![0.0; 10], vec![0.0; 2]);
    kernel.run(Pass::Forward, 2, &[&x, &s], &mut [&mut y, &mut t]).unwrap();
    assert_eq!(y, [0.0, 2.0, 4.0, 6.0, 8.0, -5.0, -6.0, -7.0, -8.0, -9.0]);
    assert!((t[0] - 2f32.exp()).abs() < 1e-6 && (t[1] - (-1f32).exp()).abs() < 1e-7);
    // d/ds of Σ y·1 + t·1 = Σ_row x + e^s.
    let (mut gx, mut gs) = (vec![0.0; 10], vec![0.0; 2]);
    kernel.run(Pass::Backward, 2, &[&x, &s, &[1.0; 10], &[1.0; 2]], &mut [&mut gx, &mut gs]).unwrap();
    assert_eq!(gx, [2.0, 2.0, 2.0, 2.0, 2.0, -1.0, -1.0, -1.0, -1.0, -1.0]);
    assert!((gs[0] - (10.0 + 2f32.exp())).abs() < 1e-5 && (gs[1] - (35.0 + (-1f32).exp())).abs() < 1e-5, "{gs:?}");
}

#[test]
fn kernels_are_shared_between_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Kernel>();
    send_sync::<amp_jit::GroupKernel>();
    let kernel = single_op_kernel(Elementwise::Unary(UnaryFn::Exp), 9);
    let threads: Vec<_> = (0..2)
        .map(|t| {
            let kernel = std::sync::Arc::clone(&kernel);
            std::thread::spawn(move || {
                let x = vec![t as f32; 9];
                let mut y = vec![0.0; 9];
                kernel.run(Pass::Forward, 1, &[&x], &mut [&mut y]).unwrap();
                y
            })
        })
        .collect();
    for (t, thread) in threads.into_iter().enumerate() {
        let y = thread.join().unwrap();
        assert!(y.iter().all(|&v| (v - (t as f32).exp()).abs() < 1e-6), "{y:?}");
    }
}

const GUARD: usize = 37;

/// Runs a call on buffers embedded in guard regions filled with `canary`; returns the
/// outputs, after checking that no guard (and no input) changed.
fn guarded_run(kernel: &Kernel, pass: Pass, rows: usize, inputs: &[Vec<f32>], canary: f32) -> Vec<Vec<f32>> {
    let embed = |b: &[f32]| -> Vec<f32> {
        let mut v = vec![canary; b.len() + 2 * GUARD];
        v[GUARD..GUARD + b.len()].copy_from_slice(b);
        v
    };
    let ins: Vec<Vec<f32>> = inputs.iter().map(|b| embed(b)).collect();
    let mut outs: Vec<Vec<f32>> =
        output_lens(kernel, pass, rows).into_iter().map(|n| embed(&vec![canary; n])).collect();
    {
        let in_refs: Vec<&[f32]> = ins.iter().zip(inputs).map(|(v, b)| &v[GUARD..GUARD + b.len()]).collect();
        let mut out_refs: Vec<&mut [f32]> = outs
            .iter_mut()
            .map(|v| {
                let n = v.len() - 2 * GUARD;
                &mut v[GUARD..GUARD + n]
            })
            .collect();
        kernel.run(pass, rows, &in_refs, &mut out_refs).expect("well formed");
    }
    for (v, b) in ins.iter().zip(inputs) {
        assert!(v[GUARD..GUARD + b.len()].iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()), "an input changed");
    }
    outs.iter()
        .map(|v| {
            let n = v.len() - 2 * GUARD;
            let untouched = |g: &[f32]| g.iter().all(|x| x.to_bits() == canary.to_bits());
            assert!(untouched(&v[..GUARD]) && untouched(&v[GUARD + n..]), "a write outside the buffer");
            v[GUARD..GUARD + n].to_vec()
        })
        .collect()
}

/// Guards catch stray writes; running with two different canaries catches stray reads
/// (an output that depends on bytes outside the buffers).
pub fn check_confined(kernel: &Kernel, rows: usize, seed: u64) {
    let (inputs, grads) = random_call(kernel, rows, seed, 0.2);
    for pass in [Pass::Forward, Pass::Backward] {
        let mut all = inputs.clone();
        if pass == Pass::Backward {
            all.extend(grads.iter().cloned());
        }
        let a = guarded_run(kernel, pass, rows, &all, f32::from_bits(0x7fc0_dead));
        let b = guarded_run(kernel, pass, rows, &all, 1.5e10);
        for (x, y) in a.iter().flatten().zip(b.iter().flatten()) {
            assert!(
                x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()),
                "an output depends on memory outside the buffers"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn kernels_touch_only_their_buffers(spec in spec_strategy(), rows in 0usize..=3, seed in any::<u64>()) {
        check_confined(&compile(&spec), rows, seed);
    }
}
