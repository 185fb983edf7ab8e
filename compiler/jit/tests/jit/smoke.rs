//! A hand-written LSTM-like cell with a broadcast scalar (through `exp` and `log`),
//! several rows and a tail: JIT and interpreter agree forward and backward.

use amp_ir::{BinaryFn, UnaryFn};
use amp_jit::*;

#[test]
fn lstm_cell_forward_and_backward() {
    let mut b = SpecBuilder::new(7);
    let i = b.input(Width::Vector);
    let f = b.input(Width::Vector);
    let g = b.input(Width::Vector);
    let c = b.input(Width::Vector);
    let s = b.input(Width::Scalar);
    let si = b.op(Elementwise::Unary(UnaryFn::Sigmoid), &[i]);
    let sf = b.op(Elementwise::Unary(UnaryFn::Sigmoid), &[f]);
    let tg = b.op(Elementwise::Unary(UnaryFn::Tanh), &[g]);
    let a = b.op(Elementwise::Binary(BinaryFn::Mul), &[si, tg]);
    let bb = b.op(Elementwise::Binary(BinaryFn::Mul), &[sf, c]);
    let c2 = b.op(Elementwise::Binary(BinaryFn::Add), &[a, bb]);
    let h = b.op(Elementwise::Unary(UnaryFn::Tanh), &[c2]);
    let e = b.op(Elementwise::Unary(UnaryFn::Exp), &[s]);
    let l = b.op(Elementwise::Unary(UnaryFn::Log), &[e]);
    let h2 = b.op(Elementwise::Binary(BinaryFn::Mul), &[h, l]);
    b.output(c2);
    b.output(h2);
    b.output(l);
    let spec = b.finish().unwrap();
    let mut cache = KernelCache::new().unwrap();
    let k = cache.kernel(&spec).unwrap();
    let rows = 3;
    let vin: Vec<Vec<f32>> =
        (0..4).map(|p| (0..rows * 7).map(|x| ((x * 7 + p * 3) % 11) as f32 * 0.3 - 1.5).collect()).collect();
    let sin: Vec<f32> = vec![0.5, -1.0, 2.0];
    let inputs: Vec<&[f32]> = vec![&vin[0], &vin[1], &vin[2], &vin[3], &sin];
    let mut o1 = vec![vec![0.0; rows * 7], vec![0.0; rows * 7], vec![0.0; rows]];
    let mut o2 = o1.clone();
    {
        let mut outs: Vec<&mut [f32]> = o1.iter_mut().map(|v| v.as_mut_slice()).collect();
        k.run(Pass::Forward, rows, &inputs, &mut outs).unwrap();
        let mut outs: Vec<&mut [f32]> = o2.iter_mut().map(|v| v.as_mut_slice()).collect();
        k.run_interpreted(Pass::Forward, rows, &inputs, &mut outs).unwrap();
    }
    for (a, b) in o1.iter().flatten().zip(o2.iter().flatten()) {
        assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "{a} {b}");
    }
    let grads: Vec<Vec<f32>> = vec![vec![1.0; rows * 7], vec![0.5; rows * 7], vec![2.0; rows]];
    let mut binputs = inputs.clone();
    for g in &grads {
        binputs.push(g);
    }
    let mut g1: Vec<Vec<f32>> = vec![vec![0.0; rows * 7]; 4];
    g1.push(vec![0.0; rows]);
    let mut g2 = g1.clone();
    {
        let mut outs: Vec<&mut [f32]> = g1.iter_mut().map(|v| v.as_mut_slice()).collect();
        k.run(Pass::Backward, rows, &binputs, &mut outs).unwrap();
        let mut outs: Vec<&mut [f32]> = g2.iter_mut().map(|v| v.as_mut_slice()).collect();
        k.run_interpreted(Pass::Backward, rows, &binputs, &mut outs).unwrap();
    }
    for (a, b) in g1.iter().flatten().zip(g2.iter().flatten()) {
        assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "{a} {b}");
    }
}
