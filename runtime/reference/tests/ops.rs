//! Finite-difference checks of the backward pass of every tape operation, table-driven:
//! each case names the op, the shapes of its inputs and parameters, and how to build it.
//! The objective is `<g, op(inputs)>` for a random `g`; every coordinate of every input
//! and parameter is perturbed both ways and the central difference compared with the
//! analytic gradient.

mod common;

use amp_ir::ParamInit;
use amp_params::{ParamSet, ParamSpec};
use amp_reference::tape::{self, BinaryFn, NodeId, Tape, UnaryFn};
use amp_reference::ErrorKind;
use common::{close, Rng};

/// Where the random inputs of a case lie.
#[derive(Clone, Copy, PartialEq)]
enum Domain {
    /// Uniform in [-1, 1].
    Any,
    /// |x| in [0.5, 1.5], either sign: away from kinks (relu) and poles (division).
    AwayFromZero,
    /// In [0.5, 1.5] (log).
    Positive,
}

type Build = Box<dyn Fn(&mut Tape, &[NodeId], &ParamSet) -> Result<NodeId, ErrorKind>>;

struct Case {
    name: String,
    inputs: Vec<Vec<usize>>,
    params: Vec<Vec<usize>>,
    domain: Domain,
    build: Build,
}

fn case(
    name: impl Into<String>,
    inputs: &[&[usize]],
    domain: Domain,
    build: impl Fn(&mut Tape, &[NodeId], &ParamSet) -> Result<NodeId, ErrorKind> + 'static,
) -> Case {
    Case {
        name: name.into(),
        inputs: inputs.iter().map(|s| s.to_vec()).collect(),
        params: Vec::new(),
        domain,
        build: Box::new(build),
    }
}

fn with_params(mut c: Case, params: &[&[usize]]) -> Case {
    c.params = params.iter().map(|s| s.to_vec()).collect();
    c
}

fn sample(rng: &mut Rng, domain: Domain, n: usize) -> Vec<f32> {
    (0..n)
        .map(|_| {
            let u = rng.uniform();
            match domain {
                Domain::Any => u,
                Domain::AwayFromZero => u.signum() * (0.5 + u.abs()),
                Domain::Positive => 0.5 + u.abs(),
            }
        })
        .collect()
}

/// Runs the case on `inputs` and `params`: the output node and the objective `<g, out>`.
fn objective(c: &Case, inputs: &[Vec<f32>], params: &ParamSet, g: &[f32]) -> (Tape, NodeId, f64) {
    let mut t = Tape::new();
    let ids: Vec<NodeId> =
        c.inputs.iter().zip(inputs).map(|(s, v)| t.leaf(s.clone(), v.clone()).expect("leaf")).collect();
    let out = (c.build)(&mut t, &ids, params).unwrap_or_else(|e| panic!("{}: {e}", c.name));
    let value: f64 = t.value(out).iter().zip(g).map(|(&y, &w)| f64::from(y) * f64::from(w)).sum();
    (t, out, value)
}

fn check_case(c: &Case, seed: u64) {
    let mut rng = Rng::new(seed);
    let inputs: Vec<Vec<f32>> = c.inputs.iter().map(|s| sample(&mut rng, c.domain, s.iter().product())).collect();
    let specs: Vec<ParamSpec> = c
        .params
        .iter()
        .enumerate()
        .map(|(i, s)| ParamSpec { name: format!("p{i}"), shape: s.clone(), init: ParamInit::Normal })
        .collect();
    let mut params = ParamSet::zeros(&specs);
    for i in 0..params.len() {
        let values = rng.vec(params.data(i).len());
        params.data_mut(i).copy_from_slice(&values);
    }
    // The output's size, then a random seed gradient of that size.
    let (probe, out, _) = objective(c, &inputs, &params, &[]);
    let g = rng.vec(probe.value(out).len());
    let (t, out, _) = objective(c, &inputs, &params, &g);
    let mut param_grads = params.zeros_like();
    let grads = t.backward(out, &g, &params, &mut param_grads).expect("backward");
    let eps = 1e-2f32;
    let (abs, rel) = (2e-3, 1e-2);
    for (k, x) in inputs.iter().enumerate() {
        let analytic = grads.of(NodeId(k)).map(<[f32]>::to_vec).unwrap_or_else(|| vec![0.0; x.len()]);
        for j in 0..x.len() {
            let mut plus = inputs.clone();
            plus[k][j] += eps;
            let mut minus = inputs.clone();
            minus[k][j] -= eps;
            let numeric =
                (objective(c, &plus, &params, &g).2 - objective(c, &minus, &params, &g).2) / (2.0 * f64::from(eps));
            assert!(
                close(f64::from(analytic[j]), numeric, abs, rel),
                "{}: d/d input{k}[{j}] = {} (analytic) vs {numeric} (finite difference)",
                c.name,
                analytic[j]
            );
        }
    }
    for p in 0..params.len() {
        for j in 0..params.data(p).len() {
            let mut plus = params.clone();
            plus.data_mut(p)[j] += eps;
            let mut minus = params.clone();
            minus.data_mut(p)[j] -= eps;
            let numeric =
                (objective(c, &inputs, &plus, &g).2 - objective(c, &inputs, &minus, &g).2) / (2.0 * f64::from(eps));
            let analytic = param_grads.data(p)[j];
            assert!(
                close(f64::from(analytic), numeric, abs, rel),
                "{}: d/d param{p}[{j}] = {analytic} (analytic) vs {numeric} (finite difference)",
                c.name
            );
        }
    }
}

fn unary_cases() -> Vec<Case> {
    // Every function of the vocabulary, the row-wise ones included.
    UnaryFn::all()
        .map(|f| {
            let domain = match f {
                UnaryFn::Log => Domain::Positive,
                UnaryFn::Relu => Domain::AwayFromZero,
                _ => Domain::Any,
            };
            case(format!("{f:?}"), &[&[2, 3]], domain, move |t, x, _| t.unary(f, x[0]))
        })
        .collect()
}

fn binary_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for f in BinaryFn::all() {
        let d = Domain::AwayFromZero;
        cases.push(case(format!("{f:?} same shape"), &[&[2, 3], &[2, 3]], d, move |t, x, _| t.binary(f, x[0], x[1])));
        cases.push(case(format!("{f:?} tensor-scalar"), &[&[4], &[]], d, move |t, x, _| t.binary(f, x[0], x[1])));
        cases.push(case(format!("{f:?} scalar-tensor"), &[&[], &[4]], d, move |t, x, _| t.binary(f, x[0], x[1])));
        cases.push(case(format!("{f:?} scalars"), &[&[], &[]], d, move |t, x, _| t.binary(f, x[0], x[1])));
        cases.push(case(format!("{f:?} of a node with itself"), &[&[3]], d, move |t, x, _| t.binary(f, x[0], x[0])));
    }
    cases
}

fn structural_cases() -> Vec<Case> {
    use Domain::Any;
    vec![
        case("softmax", &[&[5]], Any, |t, x, _| t.softmax(x[0], false)),
        case("log_softmax", &[&[5]], Any, |t, x, _| t.softmax(x[0], true)),
        case("softmax rank 2 (last axis)", &[&[2, 3]], Any, |t, x, _| t.softmax(x[0], false)),
        case("log_softmax rank 2 (last axis)", &[&[2, 3]], Any, |t, x, _| t.softmax(x[0], true)),
        case("concat", &[&[2], &[3], &[1]], Any, |t, x, _| t.concat(x)),
        case("concat of a node with itself", &[&[2]], Any, |t, x, _| t.concat(&[x[0], x[0]])),
        case("split part 0 of 3", &[&[6]], Any, |t, x, _| Ok(t.split(x[0], 3)?[0])),
        case("split part 2 of 3", &[&[6]], Any, |t, x, _| Ok(t.split(x[0], 3)?[2])),
        case("slice", &[&[6]], Any, |t, x, _| t.slice(x[0], 2, vec![3])),
        case("index of a vector (scalar element)", &[&[5]], Any, |t, x, _| t.index(x[0], 3)),
        case("index of a matrix (row)", &[&[3, 4]], Any, |t, x, _| t.index(x[0], 1)),
        case("sum of a tensor", &[&[2, 3]], Any, |t, x, _| Ok(t.sum_all(x[0]))),
        case("mean of a tensor", &[&[2, 3]], Any, |t, x, _| t.mean_all(x[0])),
        case("sum of a sequence (add_n)", &[&[4], &[4], &[4]], Any, |t, x, _| t.add_n(x, vec![4])),
        case("add_n with a repeated input", &[&[4], &[4]], Any, |t, x, _| t.add_n(&[x[0], x[1], x[0]], vec![4])),
        case("mean of a sequence (add_n, scale)", &[&[4], &[4]], Any, |t, x, _| {
            let total = t.add_n(x, vec![4])?;
            Ok(t.scale(total, 0.5))
        }),
        case("top_k values", &[&[6]], Any, |t, x, _| Ok(t.top_k(x[0], 3)?.1)),
        case("cross_entropy", &[&[5]], Any, |t, x, _| t.cross_entropy(x[0], 2)),
        case("mse", &[&[2, 3], &[2, 3]], Any, |t, x, _| t.mse(x[0], x[1])),
        with_params(case("Linear", &[&[3]], Any, |t, x, p| t.linear(p, x[0], 0, 1)), &[&[2, 3], &[2]]),
        with_params(case("Linear on rows", &[&[2, 3]], Any, |t, x, p| t.linear(p, x[0], 0, 1)), &[&[4, 3], &[4]]),
        with_params(case("Embedding", &[], Any, |t, _, p| t.embedding(p, 0, 2)), &[&[4, 3]]),
    ]
}

fn run_all(cases: Vec<Case>) {
    for (i, c) in cases.iter().enumerate() {
        check_case(c, 1000 + i as u64);
    }
}

#[test]
fn unary_functions_have_correct_gradients() {
    run_all(unary_cases());
}

#[test]
fn binary_arithmetic_with_broadcast_has_correct_gradients() {
    run_all(binary_cases());
}

#[test]
fn structural_ops_losses_and_parameterized_ops_have_correct_gradients() {
    run_all(structural_cases());
}

#[test]
fn cross_entropy_of_uniform_logits_is_ln_classes() {
    let mut t = Tape::new();
    let x = t.fill(vec![7], 0.25).unwrap();
    let loss = t.cross_entropy(x, 4).unwrap();
    assert!((t.value(loss)[0] - 7f32.ln()).abs() < 1e-6);
    let (params, mut grads) = (ParamSet::zeros(&[]), ParamSet::zeros(&[]));
    let g = t.backward(loss, &[1.0], &params, &mut grads).unwrap();
    let expected: Vec<f32> = (0..7).map(|i| 1.0 / 7.0 - if i == 4 { 1.0 } else { 0.0 }).collect();
    for (a, b) in g.of(x).unwrap().iter().zip(&expected) {
        assert!((a - b).abs() < 1e-6, "softmax minus one-hot: {a} vs {b}");
    }
}

#[test]
fn softmax_is_stable_for_large_logits() {
    let mut t = Tape::new();
    let x = t.leaf(vec![3], vec![1000.0, 1001.0, -1000.0]).unwrap();
    let s = t.softmax(x, false).unwrap();
    let l = t.softmax(x, true).unwrap();
    let ce = t.cross_entropy(x, 2).unwrap();
    assert!(t.value(s).iter().all(|v| v.is_finite()));
    assert!((t.value(s)[1] - 1.0 / (1.0 + (-1f32).exp())).abs() < 1e-6);
    assert!((t.value(l)[0] - (-1.0 - (1.0 + (-1f32).exp()).ln())).abs() < 1e-5);
    let expected = 2001.0 + (1.0 + (-1f32).exp()).ln();
    assert!((t.value(ce)[0] - expected).abs() < 1e-3, "{} vs {expected}", t.value(ce)[0]);
}

#[test]
fn mse_is_the_mean_of_squared_differences() {
    let mut t = Tape::new();
    let a = t.leaf(vec![4], vec![1.0, 2.0, 3.0, 4.0]).unwrap();
    let b = t.leaf(vec![4], vec![1.0, 0.0, 3.0, 1.0]).unwrap();
    let m = t.mse(a, b).unwrap();
    assert_eq!(t.value(m), &[(4.0 + 9.0) / 4.0]);
}

#[test]
fn top_k_orders_largest_first_and_breaks_ties_by_lower_index() {
    let mut t = Tape::new();
    let x = t.leaf(vec![6], vec![0.5, 2.0, -1.0, 2.0, 0.5, f32::NAN]).unwrap();
    let (idx, values) = t.top_k(x, 4).unwrap();
    assert_eq!(idx, [1, 3, 0, 4]);
    assert_eq!(t.value(values), &[2.0, 2.0, 0.5, 0.5]);
    assert_eq!(tape::argmax(t.value(x)), Some(1), "argmax: lowest index among ties, NaN never wins");
    assert_eq!(tape::argmax(&[f32::NAN, 1.0]), Some(1));
    assert_eq!(tape::argmax(&[]), None);
    let zero_signs = t.leaf(vec![2], vec![-0.0, 0.0]).unwrap();
    assert_eq!(t.top_k(zero_signs, 1).unwrap().0, [0], "-0.0 and 0.0 are a tie");
}

#[test]
fn shape_and_range_errors_are_errors_not_panics() {
    let mut t = Tape::new();
    let v = t.leaf(vec![3], vec![1.0, 2.0, 3.0]).unwrap();
    let w = t.leaf(vec![2], vec![1.0, 2.0]).unwrap();
    let s = t.scalar(1.0);
    assert!(matches!(t.binary(BinaryFn::Add, v, w), Err(ErrorKind::Shape { .. })));
    assert!(matches!(t.cross_entropy(v, 3), Err(ErrorKind::LabelOutOfRange { label: 3, classes: 3 })));
    assert!(matches!(t.cross_entropy(v, -1), Err(ErrorKind::LabelOutOfRange { .. })));
    assert!(matches!(t.index(v, 3), Err(ErrorKind::IndexOutOfRange { index: 3, len: 3 })));
    assert!(matches!(t.index(s, 0), Err(ErrorKind::Shape { .. })));
    assert!(matches!(t.split(v, 2), Err(ErrorKind::Shape { .. })));
    assert!(matches!(t.split(v, 0), Err(ErrorKind::Shape { .. })));
    assert!(matches!(t.top_k(v, 4), Err(ErrorKind::Shape { .. })));
    assert!(matches!(t.top_k(v, 0), Err(ErrorKind::Shape { .. })));
    assert!(matches!(t.mse(v, w), Err(ErrorKind::Shape { .. })));
    assert!(matches!(t.concat(&[v, s]), Err(ErrorKind::Shape { .. })));
    assert!(matches!(t.slice(v, 2, vec![2]), Err(ErrorKind::Shape { .. })));
    assert!(matches!(t.slice(v, usize::MAX, vec![2]), Err(ErrorKind::Shape { .. })));
    assert!(matches!(t.fill(vec![1 << 20, 1 << 20], 0.0), Err(ErrorKind::TooLarge { .. })));
    assert!(matches!(t.leaf(vec![2], vec![1.0]), Err(ErrorKind::Shape { .. })));
    let specs = [
        ParamSpec { name: "w".into(), shape: vec![2, 3], init: ParamInit::Normal },
        ParamSpec { name: "b".into(), shape: vec![2], init: ParamInit::Normal },
    ];
    let params = ParamSet::zeros(&specs);
    assert!(matches!(t.linear(&params, w, 0, 1), Err(ErrorKind::Shape { .. })));
    assert!(matches!(t.linear(&params, v, 0, 7), Err(ErrorKind::ParamMismatch { .. })));
    assert!(matches!(t.embedding(&params, 0, 2), Err(ErrorKind::EmbeddingOutOfRange { index: 2, count: 2 })));
    assert!(matches!(t.embedding(&params, 0, -1), Err(ErrorKind::EmbeddingOutOfRange { .. })));
    assert!(matches!(t.embedding(&params, 1, 0), Err(ErrorKind::ParamMismatch { .. })));
    // Backward with another parameter set than the one recorded with is refused.
    let x = t.leaf(vec![3], vec![1.0, 2.0, 3.0]).unwrap();
    let y = t.linear(&params, x, 0, 1).unwrap();
    let (empty, mut empty_grads) = (ParamSet::zeros(&[]), ParamSet::zeros(&[]));
    assert!(matches!(t.backward(y, &[1.0, 1.0], &empty, &mut empty_grads), Err(ErrorKind::ParamMismatch { .. })));
    let mut grads = params.zeros_like();
    assert!(matches!(t.backward(y, &[1.0], &params, &mut grads), Err(ErrorKind::Shape { .. })), "seed size");
    assert!(t.backward(y, &[1.0, 1.0], &params, &mut grads).is_ok());
}
