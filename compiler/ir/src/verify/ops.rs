//! Each node on its own: the op's arity, port types and parameter shapes (the table in
//! `docs/IR.md`), the state fields it names, and whether its key holds the instance.

use super::structure::Adjacency;
use super::{Arity, Checker, FieldUse, KeyReason, ParamExpectation, PortDir, TypeExpectation, VerifyErrorKind};
use crate::{DataStep, FieldId, LossBase, LossKind, Node, Op, PayloadInt, PayloadTy, StateExpr};

pub(super) fn check_nodes(cx: &mut Checker, adjacency: &Adjacency) {
    for i in 0..cx.bound() {
        let Some(node) = cx.node(i) else { continue };
        check_op(cx, i, node);
        check_fields(cx, i, node);
        check_key_instance(cx, i, node, adjacency.fans_out(i));
    }
}

// ------------------------------------------------------------------ ops and types

fn check_op(cx: &mut Checker, i: usize, node: &Node) {
    let one = Arity::Exactly(1);
    match &node.op {
        Op::Source => {
            if ports(cx, i, node, Arity::Exactly(0), one) {
                expect(cx, i, PortDir::Output, 0, &node.outputs[0], &TypeExpectation::Unit);
            }
        }
        Op::Read { .. } | Op::Const { .. } => {
            if ports(cx, i, node, one, one) {
                expect(cx, i, PortDir::Input, 0, &node.inputs[0], &TypeExpectation::Unit);
                expect(cx, i, PortDir::Output, 0, &node.outputs[0], &TypeExpectation::AnyF32);
            }
        }
        Op::Linear { param } => {
            if ports(cx, i, node, one, one) {
                check_linear(cx, i, param, &node.inputs[0], &node.outputs[0]);
            }
        }
        Op::Affine { param } => {
            if ports(cx, i, node, one, one) {
                check_affine(cx, i, param, &node.inputs[0], &node.outputs[0]);
            }
        }
        Op::Embedding { param, .. } | Op::EmbeddingRows { param, .. } => {
            if ports(cx, i, node, one, one) {
                expect(cx, i, PortDir::Input, 0, &node.inputs[0], &TypeExpectation::Unit);
                let weight = format!("{param}.weight");
                let rows = matches!(node.op, Op::EmbeddingRows { .. });
                if let Some([_, dim]) = matrix(cx, i, &weight, "[rows, dim]") {
                    let expected = if rows { PayloadTy::Batch(vec![dim]) } else { PayloadTy::F32(vec![dim]) };
                    if node.outputs[0] != expected {
                        let shape = cx.param(&weight).map(|p| p.shape.clone()).unwrap_or_default();
                        let found = node.outputs[0].clone();
                        let kind = VerifyErrorKind::ParamMismatch {
                            dir: PortDir::Output,
                            found,
                            param: weight,
                            shape,
                            expected,
                        };
                        cx.report(i, kind);
                    }
                } else if rows {
                    expect(cx, i, PortDir::Output, 0, &node.outputs[0], &TypeExpectation::AnyBatch);
                } else {
                    expect(cx, i, PortDir::Output, 0, &node.outputs[0], &TypeExpectation::F32Rank1);
                }
            }
        }
        Op::Unary(f) => {
            if ports(cx, i, node, one, one) {
                // A row-wise function reads rows of the last dimension: of a tensor of rank
                // 1 or more, or of a batch (a batch of scalars `f32[?]` is one row, the
                // whole sequence).
                let rowwise = !f.is_elementwise();
                // An elementwise function maps a batch's rows too (a batched map's body).
                let input = match (&node.inputs[0], rowwise) {
                    (_, true) => TypeExpectation::Rows,
                    (PayloadTy::Batch(_), false) => TypeExpectation::AnyBatch,
                    (_, false) => TypeExpectation::AnyF32,
                };
                if expect(cx, i, PortDir::Input, 0, &node.inputs[0], &input) {
                    same_as_input(cx, i, 0, &node.outputs[0], &node.inputs[0]);
                }
            }
        }
        Op::Binary(_) => {
            if ports(cx, i, node, Arity::Exactly(2), one) {
                // Batches (a batched map's rows) pair with a batch of the same rows or a scalar.
                let operand = |ty: &PayloadTy| match ty {
                    PayloadTy::Batch(_) => TypeExpectation::AnyBatch,
                    _ => TypeExpectation::AnyF32,
                };
                let lhs_ok = expect(cx, i, PortDir::Input, 0, &node.inputs[0], &operand(&node.inputs[0]));
                let rhs_ok = expect(cx, i, PortDir::Input, 1, &node.inputs[1], &operand(&node.inputs[1]));
                if lhs_ok && rhs_ok {
                    check_binary(cx, i, &node.inputs[0], &node.inputs[1], &node.outputs[0]);
                }
            }
        }
        Op::Concat => {
            if ports(cx, i, node, Arity::AtLeast(1), one) {
                // Vectors, or batches of vectors row by row (a batched map's body): all one kind.
                let rows = matches!(node.inputs[0], PayloadTy::Batch(_));
                let mut width = Some(0u64);
                for (port, ty) in node.inputs.iter().enumerate() {
                    match ty {
                        PayloadTy::F32(dims) if dims.len() == 1 && !rows => {
                            width = width.and_then(|w| w.checked_add(dims[0]));
                        }
                        PayloadTy::Batch(dims) if dims.len() == 1 && rows => {
                            width = width.and_then(|w| w.checked_add(dims[0]));
                        }
                        _ => {
                            let like = if rows {
                                TypeExpectation::Exactly(PayloadTy::Batch(vec![ty.elements()]))
                            } else {
                                TypeExpectation::F32Rank1
                            };
                            expect(cx, i, PortDir::Input, port, ty, &like);
                            width = None;
                        }
                    }
                }
                match width {
                    Some(w) => {
                        let out = if rows { PayloadTy::Batch(vec![w]) } else { PayloadTy::F32(vec![w]) };
                        expect(cx, i, PortDir::Output, 0, &node.outputs[0], &TypeExpectation::Exactly(out));
                    }
                    None if node.inputs.iter().all(|t| match t {
                        PayloadTy::F32(d) | PayloadTy::Batch(d) => d.len() == 1,
                        PayloadTy::Unit => false,
                    }) =>
                    {
                        cx.report(i, VerifyErrorKind::ConcatTooLarge);
                    }
                    None => {}
                }
            }
        }
        Op::Split { parts } => {
            if *parts == 0 {
                cx.report(i, VerifyErrorKind::NoArms);
            } else if ports(cx, i, node, one, Arity::Exactly(*parts as usize)) {
                check_split(cx, i, *parts, &node.inputs[0], &node.outputs);
            }
        }
        Op::Forget => {
            if ports(cx, i, node, one, one) {
                expect(cx, i, PortDir::Output, 0, &node.outputs[0], &TypeExpectation::Unit);
            }
        }
        Op::Cond { .. } => {
            if ports(cx, i, node, one, Arity::Exactly(2)) {
                for (port, out) in node.outputs.iter().enumerate() {
                    same_as_input(cx, i, port, out, &node.inputs[0]);
                }
            }
        }
        Op::Switch { arms, .. } => {
            if *arms == 0 {
                cx.report(i, VerifyErrorKind::NoArms);
            } else if ports(cx, i, node, one, Arity::Exactly(*arms as usize)) {
                for (port, out) in node.outputs.iter().enumerate() {
                    same_as_input(cx, i, port, out, &node.inputs[0]);
                }
            }
        }
        Op::Phi { arms } => {
            if *arms == 0 {
                cx.report(i, VerifyErrorKind::NoArms);
            } else if ports(cx, i, node, Arity::Exactly(*arms as usize), one) {
                inputs_equal(cx, i, &node.inputs);
                same_as_input(cx, i, 0, &node.outputs[0], &node.inputs[0]);
            }
        }
        Op::Isu { .. } => {
            if ports(cx, i, node, one, one) {
                same_as_input(cx, i, 0, &node.outputs[0], &node.inputs[0]);
            }
        }
        Op::Dropout { rate, .. } => {
            if ports(cx, i, node, one, one)
                && expect(cx, i, PortDir::Input, 0, &node.inputs[0], &TypeExpectation::AnyF32)
            {
                same_as_input(cx, i, 0, &node.outputs[0], &node.inputs[0]);
            }
            if !crate::dropout::valid_rate(*rate) {
                cx.report(i, VerifyErrorKind::DropoutRate { bits: rate.to_bits() });
            }
        }
        Op::Loss(LossKind::CrossEntropy { .. } | LossKind::CrossEntropyMean { .. }) => {
            if ports(cx, i, node, one, Arity::Exactly(0)) {
                expect(cx, i, PortDir::Input, 0, &node.inputs[0], &TypeExpectation::F32Rank1);
            }
        }
        Op::Loss(LossKind::Term { base: LossBase::CrossEntropy { .. }, weight, .. }) => {
            if ports(cx, i, node, one, Arity::Exactly(0)) {
                expect(cx, i, PortDir::Input, 0, &node.inputs[0], &TypeExpectation::F32Rank1);
            }
            finite_weight(cx, i, *weight);
        }
        Op::Loss(LossKind::Term { base: LossBase::Scalar, weight, .. }) => {
            if ports(cx, i, node, one, Arity::Exactly(0)) {
                let scalar = TypeExpectation::Exactly(PayloadTy::F32(Vec::new()));
                expect(cx, i, PortDir::Input, 0, &node.inputs[0], &scalar);
            }
            finite_weight(cx, i, *weight);
        }
        Op::Loss(LossKind::Term { base: LossBase::Mse, weight, .. }) => {
            if ports(cx, i, node, Arity::Exactly(2), Arity::Exactly(0))
                && expect(cx, i, PortDir::Input, 0, &node.inputs[0], &TypeExpectation::AnyF32)
            {
                inputs_equal(cx, i, &node.inputs);
            }
            finite_weight(cx, i, *weight);
        }
        Op::Loss(LossKind::Mse) => {
            if ports(cx, i, node, Arity::Exactly(2), Arity::Exactly(0))
                && expect(cx, i, PortDir::Input, 0, &node.inputs[0], &TypeExpectation::AnyF32)
            {
                inputs_equal(cx, i, &node.inputs);
            }
        }
        Op::Sink { .. } => {
            ports(cx, i, node, one, Arity::Exactly(0));
        }
        Op::Flatmap { .. } => {
            if ports(cx, i, node, one, one) {
                same_as_input(cx, i, 0, &node.outputs[0], &node.inputs[0]);
            }
        }
        Op::Group { .. } => {
            if ports(cx, i, node, Arity::Exactly(2), one) {
                expect(cx, i, PortDir::Input, 1, &node.inputs[1], &TypeExpectation::Unit);
                if let PayloadTy::F32(dims) = &node.inputs[0] {
                    let expected = TypeExpectation::Exactly(PayloadTy::Batch(dims.clone()));
                    expect(cx, i, PortDir::Output, 0, &node.outputs[0], &expected);
                } else {
                    expect(cx, i, PortDir::Input, 0, &node.inputs[0], &TypeExpectation::AnyF32);
                }
            }
        }
        Op::Ungroup { .. } => {
            if ports(cx, i, node, one, one) {
                if let PayloadTy::Batch(dims) = &node.inputs[0] {
                    let expected = TypeExpectation::Exactly(PayloadTy::F32(dims.clone()));
                    expect(cx, i, PortDir::Output, 0, &node.outputs[0], &expected);
                } else {
                    expect(cx, i, PortDir::Input, 0, &node.inputs[0], &TypeExpectation::AnyBatch);
                }
            }
        }
        Op::Gather { .. } => {
            if ports(cx, i, node, one, one) {
                match &node.inputs[0] {
                    PayloadTy::Batch(dims) => {
                        let expected = TypeExpectation::Exactly(PayloadTy::F32(dims.clone()));
                        expect(cx, i, PortDir::Output, 0, &node.outputs[0], &expected);
                    }
                    PayloadTy::F32(dims) if !dims.is_empty() => {
                        let expected = TypeExpectation::Exactly(PayloadTy::F32(dims[1..].to_vec()));
                        expect(cx, i, PortDir::Output, 0, &node.outputs[0], &expected);
                    }
                    other => {
                        expect(cx, i, PortDir::Input, 0, other, &TypeExpectation::Rows);
                    }
                }
            }
        }
        Op::ScatterSum { .. } => {
            if ports(cx, i, node, one, one)
                && expect(cx, i, PortDir::Input, 0, &node.inputs[0], &TypeExpectation::AnyBatch)
            {
                same_as_input(cx, i, 0, &node.outputs[0], &node.inputs[0]);
            }
        }
        Op::GatherRows { .. } | Op::MaskRows { .. } => {
            if ports(cx, i, node, one, one)
                && expect(cx, i, PortDir::Input, 0, &node.inputs[0], &TypeExpectation::AnyBatch)
            {
                same_as_input(cx, i, 0, &node.outputs[0], &node.inputs[0]);
            }
        }
        Op::PartitionRows { arms, .. } => {
            if *arms == 0 {
                cx.report(i, VerifyErrorKind::NoArms);
            } else if ports(cx, i, node, one, Arity::Exactly(*arms as usize))
                && expect(cx, i, PortDir::Input, 0, &node.inputs[0], &TypeExpectation::AnyBatch)
            {
                for (port, out) in node.outputs.iter().enumerate() {
                    same_as_input(cx, i, port, out, &node.inputs[0]);
                }
            }
        }
        Op::MergeRows { arms, .. } => {
            if *arms == 0 {
                cx.report(i, VerifyErrorKind::NoArms);
            } else if ports(cx, i, node, Arity::Exactly(*arms as usize), one)
                && expect(cx, i, PortDir::Input, 0, &node.inputs[0], &TypeExpectation::AnyBatch)
            {
                inputs_equal(cx, i, &node.inputs);
                same_as_input(cx, i, 0, &node.outputs[0], &node.inputs[0]);
            }
        }
        Op::Reduce(_) => {
            if ports(cx, i, node, one, one) {
                let expected = match &node.inputs[0] {
                    PayloadTy::Batch(dims) => Some(PayloadTy::F32(dims.clone())),
                    PayloadTy::F32(_) => Some(PayloadTy::F32(Vec::new())),
                    PayloadTy::Unit => None,
                };
                match expected {
                    Some(ty) => {
                        expect(cx, i, PortDir::Output, 0, &node.outputs[0], &TypeExpectation::Exactly(ty));
                    }
                    None => {
                        expect(cx, i, PortDir::Input, 0, &node.inputs[0], &TypeExpectation::Rows);
                    }
                }
            }
        }
        Op::TopK { k } => {
            if ports(cx, i, node, one, one)
                && expect(cx, i, PortDir::Input, 0, &node.inputs[0], &TypeExpectation::F32Rank1)
            {
                let n = match &node.inputs[0] {
                    PayloadTy::F32(dims) => dims[0],
                    _ => 0,
                };
                let expected = TypeExpectation::Exactly(PayloadTy::F32(vec![u64::from(*k).min(n)]));
                expect(cx, i, PortDir::Output, 0, &node.outputs[0], &expected);
            }
        }
        Op::StateFromPayload { .. } => {
            if ports(cx, i, node, Arity::Exactly(2), one) {
                expect(cx, i, PortDir::Input, 0, &node.inputs[0], &TypeExpectation::F32Rank1);
                same_as_input(cx, i, 0, &node.outputs[0], &node.inputs[1]);
            }
        }
    }
}

/// Checks the port counts; the per-op checks index ports only after this says yes.
fn ports(cx: &mut Checker, i: usize, node: &Node, inputs: Arity, outputs: Arity) -> bool {
    let mut ok = true;
    for (dir, expected, found) in
        [(PortDir::Input, inputs, node.inputs.len()), (PortDir::Output, outputs, node.outputs.len())]
    {
        let fits = match expected {
            Arity::Exactly(n) => found == n,
            Arity::AtLeast(n) => found >= n,
        };
        if !fits {
            cx.report(i, VerifyErrorKind::PortCount { dir, expected, found });
            ok = false;
        }
    }
    ok
}

fn expect(
    cx: &mut Checker,
    i: usize,
    dir: PortDir,
    port: usize,
    found: &PayloadTy,
    expected: &TypeExpectation,
) -> bool {
    let fits = match (expected, found) {
        (TypeExpectation::Unit, PayloadTy::Unit) | (TypeExpectation::AnyF32, PayloadTy::F32(_)) => true,
        (TypeExpectation::F32Ranked, PayloadTy::F32(dims)) => !dims.is_empty(),
        (TypeExpectation::F32Rank1, PayloadTy::F32(dims)) => dims.len() == 1,
        (TypeExpectation::AnyBatch | TypeExpectation::Rows, PayloadTy::Batch(_)) => true,
        (TypeExpectation::Rows, PayloadTy::F32(dims)) => !dims.is_empty(),
        (TypeExpectation::Exactly(ty), found) => ty == found,
        _ => false,
    };
    if !fits {
        let kind = VerifyErrorKind::PortType { dir, port, found: found.clone(), expected: expected.clone() };
        cx.report(i, kind);
    }
    fits
}

/// The output `port` carries what came in (cond, switch, phi, isu, unary).
fn same_as_input(cx: &mut Checker, i: usize, port: usize, output: &PayloadTy, input: &PayloadTy) {
    if output != input {
        let kind = VerifyErrorKind::PortType {
            dir: PortDir::Output,
            port,
            found: output.clone(),
            expected: TypeExpectation::Exactly(input.clone()),
        };
        cx.report(i, kind);
    }
}

/// A loss term's weight must be finite: a NaN or infinite weight makes every loss useless.
fn finite_weight(cx: &mut Checker, i: usize, weight: f32) {
    if !weight.is_finite() {
        cx.report(i, VerifyErrorKind::LossWeightNotFinite { bits: weight.to_bits() });
    }
}

fn inputs_equal(cx: &mut Checker, i: usize, inputs: &[PayloadTy]) {
    let Some(first) = inputs.first() else { return };
    for (port, ty) in inputs.iter().enumerate().skip(1) {
        if ty != first {
            cx.report(i, VerifyErrorKind::InputsDiffer { port, found: ty.clone(), first: first.clone() });
        }
    }
}

/// The shape `[a, b]` of a rank-2 parameter, reporting when it is missing or not a matrix.
fn matrix(cx: &mut Checker, i: usize, name: &str, dims: &'static str) -> Option<[u64; 2]> {
    match cx.param(name) {
        None => {
            cx.report(i, VerifyErrorKind::MissingParam { name: name.to_string() });
            None
        }
        Some(p) => match p.shape.as_slice() {
            &[rows, cols] => Some([rows, cols]),
            shape => {
                let kind = VerifyErrorKind::ParamShape {
                    name: name.to_string(),
                    shape: shape.to_vec(),
                    expected: ParamExpectation::Matrix(dims),
                };
                cx.report(i, kind);
                None
            }
        },
    }
}

/// `affine @p`: `p.weight [d]`, `p.bias [d]`, `f32[.., d] -> f32[.., d]`.
fn check_affine(cx: &mut Checker, i: usize, param: &str, input: &PayloadTy, output: &PayloadTy) {
    let weight = format!("{param}.weight");
    let mut width = None;
    for name in [weight.clone(), format!("{param}.bias")] {
        match cx.param(&name).map(|p| p.shape.clone()) {
            None => cx.report(i, VerifyErrorKind::MissingParam { name }),
            Some(shape) => match (shape.as_slice(), width) {
                (&[d], None) => width = Some(d),
                (&[d], Some(w)) if d == w => {}
                _ => {
                    let expected = ParamExpectation::Exactly(vec![width.unwrap_or(0)]);
                    cx.report(i, VerifyErrorKind::ParamShape { name, shape, expected });
                }
            },
        }
    }
    let Some(d) = width else {
        if expect(cx, i, PortDir::Input, 0, input, &TypeExpectation::F32Ranked) {
            same_as_input(cx, i, 0, output, input);
        }
        return;
    };
    if !matches!(input, PayloadTy::F32(dims) if dims.last() == Some(&d)) {
        let expected = PayloadTy::F32(vec![d]);
        let kind = VerifyErrorKind::ParamMismatch {
            dir: PortDir::Input,
            found: input.clone(),
            param: weight,
            shape: vec![d],
            expected,
        };
        cx.report(i, kind);
        return;
    }
    same_as_input(cx, i, 0, output, input);
}

/// `linear @p`: `p.weight [out, in]`, `p.bias [out]`, `f32[.., in] -> f32[.., out]`.
fn check_linear(cx: &mut Checker, i: usize, param: &str, input: &PayloadTy, output: &PayloadTy) {
    let weight = format!("{param}.weight");
    let bias = format!("{param}.bias");
    let Some([out, inp]) = matrix(cx, i, &weight, "[out, in]") else {
        if expect(cx, i, PortDir::Input, 0, input, &TypeExpectation::F32Ranked) {
            expect(cx, i, PortDir::Output, 0, output, &TypeExpectation::F32Ranked);
        }
        if cx.param(&bias).is_none() {
            cx.report(i, VerifyErrorKind::MissingParam { name: bias });
        }
        return;
    };
    let weight_shape = vec![out, inp];
    match cx.param(&bias) {
        None => cx.report(i, VerifyErrorKind::MissingParam { name: bias }),
        Some(p) if p.shape != [out] => {
            let kind = VerifyErrorKind::ParamShape {
                name: bias,
                shape: p.shape.clone(),
                expected: ParamExpectation::Exactly(vec![out]),
            };
            cx.report(i, kind);
        }
        Some(_) => {}
    }
    // The leading dims pass through; the last is `in` on the way in and `out` on the way out.
    // A batch (a batched map's rows) stays a batch.
    let (leading, batch): (&[u64], bool) = match input {
        PayloadTy::F32(dims) => (dims.split_last().map_or(&[], |(_, lead)| lead), false),
        PayloadTy::Batch(dims) => (dims.split_last().map_or(&[], |(_, lead)| lead), true),
        PayloadTy::Unit => (&[], false),
    };
    let with_last = |last: u64| {
        let dims = leading.iter().copied().chain([last]).collect();
        if batch {
            PayloadTy::Batch(dims)
        } else {
            PayloadTy::F32(dims)
        }
    };
    let input_ok = matches!(input, PayloadTy::F32(dims) | PayloadTy::Batch(dims) if dims.last() == Some(&inp));
    if !input_ok {
        let kind = VerifyErrorKind::ParamMismatch {
            dir: PortDir::Input,
            found: input.clone(),
            param: weight.clone(),
            shape: weight_shape.clone(),
            expected: with_last(inp),
        };
        cx.report(i, kind);
    }
    let expected = with_last(out);
    if *output != expected {
        let kind = VerifyErrorKind::ParamMismatch {
            dir: PortDir::Output,
            found: output.clone(),
            param: weight,
            shape: weight_shape,
            expected,
        };
        cx.report(i, kind);
    }
}

/// Equal shapes, or one side a scalar; the result has the other side's shape.
fn check_binary(cx: &mut Checker, i: usize, lhs: &PayloadTy, rhs: &PayloadTy, output: &PayloadTy) {
    let scalar = PayloadTy::F32(Vec::new());
    let result = if lhs == rhs || *rhs == scalar {
        lhs
    } else if *lhs == scalar {
        rhs
    } else {
        cx.report(i, VerifyErrorKind::BinaryShapes { lhs: lhs.clone(), rhs: rhs.clone() });
        return;
    };
    expect(cx, i, PortDir::Output, 0, output, &TypeExpectation::Exactly(result.clone()));
}

/// `split n`: `f32[n * m] -> n x f32[m]`.
fn check_split(cx: &mut Checker, i: usize, parts: u32, input: &PayloadTy, outputs: &[PayloadTy]) {
    // A batch of vectors splits row by row (a batched map's body).
    let (width, batch) = match input {
        PayloadTy::F32(dims) | PayloadTy::Batch(dims) if dims.len() == 1 => {
            (dims[0], matches!(input, PayloadTy::Batch(_)))
        }
        _ => {
            expect(cx, i, PortDir::Input, 0, input, &TypeExpectation::F32Rank1);
            return;
        }
    };
    if width % u64::from(parts) != 0 {
        cx.report(i, VerifyErrorKind::SplitUneven { found: input.clone(), parts });
        return;
    }
    let part_dims = vec![width / u64::from(parts)];
    let part = if batch { PayloadTy::Batch(part_dims) } else { PayloadTy::F32(part_dims) };
    for (port, out) in outputs.iter().enumerate() {
        expect(cx, i, PortDir::Output, port, out, &TypeExpectation::Exactly(part.clone()));
    }
}

// ------------------------------------------------------------------ state fields

/// Every state expression of the op's attributes, with what it is used as. A `scatter_sum`'s
/// row index may read the field the op itself writes; `attribute_reads` leaves that out.
pub(super) fn attribute_exprs(op: &Op) -> Vec<(&StateExpr, FieldUse)> {
    let mut out = Vec::new();
    match op {
        Op::Read { path } => {
            let mut exprs = Vec::new();
            push_path(path, &mut exprs);
            out.extend(exprs.into_iter().map(|e| (e, FieldUse::ReadPath)));
        }
        Op::Embedding { index, .. } => out.push((index, FieldUse::EmbeddingIndex)),
        Op::EmbeddingRows { index, count, .. } => {
            out.push((index, FieldUse::EmbeddingIndex));
            out.push((count, FieldUse::Count));
        }
        Op::Cond { pred } => out.push((pred, FieldUse::Predicate)),
        Op::Switch { index, .. } => out.push((index, FieldUse::SwitchIndex)),
        Op::Isu { value, inverse, .. } => {
            out.push((value, FieldUse::IsuValue));
            if let Some(inverse) = inverse {
                out.push((inverse, FieldUse::IsuInverse));
            }
        }
        Op::Loss(LossKind::CrossEntropy { label }) => out.push((label, FieldUse::LossLabel)),
        Op::Loss(LossKind::CrossEntropyMean { label, count }) => {
            out.push((label, FieldUse::LossLabel));
            out.push((count, FieldUse::Count));
        }
        Op::Loss(LossKind::Term { base, count, judge, .. }) => {
            if let LossBase::CrossEntropy { label } = base {
                out.push((label, FieldUse::LossLabel));
            }
            if let Some(count) = count {
                out.push((count, FieldUse::Count));
            }
            if let Some(judge) = judge {
                out.push((judge, FieldUse::Predicate));
            }
        }
        Op::Flatmap { count, .. } | Op::Group { count, .. } => out.push((count, FieldUse::Count)),
        Op::Gather { index } => out.push((index, FieldUse::RowIndex)),
        Op::ScatterSum { index, count, .. } | Op::GatherRows { index, count, .. } => {
            out.push((index, FieldUse::RowIndex));
            out.push((count, FieldUse::Count));
        }
        Op::MaskRows { pred, .. } => out.push((pred, FieldUse::Predicate)),
        Op::PartitionRows { index, .. } | Op::MergeRows { index, .. } => out.push((index, FieldUse::RowIndex)),
        Op::StateFromPayload { int: PayloadInt::TopK { slot, .. }, .. } => out.push((slot, FieldUse::PayloadInt)),
        _ => {}
    }
    out
}

/// Every state field the op's attributes read, with where.
pub(super) fn attribute_reads(op: &Op) -> Vec<(FieldId, FieldUse)> {
    // The row field these ops bind while evaluating their per-row expressions.
    let written_by_scatter = match op {
        Op::ScatterSum { field, .. }
        | Op::GatherRows { field, .. }
        | Op::MaskRows { field, .. }
        | Op::PartitionRows { field, .. }
        | Op::MergeRows { field, .. }
        | Op::EmbeddingRows { field, .. } => Some(*field),
        _ => None,
    };
    let mut out = Vec::new();
    if let Op::Dropout { context, .. } = op {
        out.extend(context.iter().map(|&f| (f, FieldUse::DropoutContext)));
    }
    for (expr, used_as) in attribute_exprs(op) {
        let mut fields = Vec::new();
        expr_fields(&mut vec![expr], &mut fields);
        let own = |f: &FieldId| {
            matches!(used_as, FieldUse::RowIndex | FieldUse::Predicate | FieldUse::EmbeddingIndex)
                && Some(*f) == written_by_scatter
        };
        out.extend(fields.into_iter().filter(|f| !own(f)).map(|f| (f, used_as)));
    }
    out
}

/// The state field the op writes, with how.
pub(super) fn attribute_write(op: &Op) -> Option<(FieldId, FieldUse)> {
    match op {
        Op::Source => Some((FieldId(0), FieldUse::SourceInstance)),
        Op::Isu { field, .. } => Some((*field, FieldUse::IsuTarget)),
        Op::Flatmap { field, .. } | Op::Group { field, .. } | Op::Ungroup { field } => {
            Some((*field, FieldUse::ElementField))
        }
        Op::StateFromPayload { field, .. } => Some((*field, FieldUse::PayloadInt)),
        _ => None,
    }
}

/// The fields of the expressions on `stack` (emptied), with an explicit stack: a hostile
/// file may nest expressions deeper than the call stack.
pub(super) fn expr_fields(stack: &mut Vec<&StateExpr>, out: &mut Vec<FieldId>) {
    while let Some(expr) = stack.pop() {
        match expr {
            StateExpr::Field(f) => out.push(*f),
            StateExpr::Const(_) => {}
            StateExpr::Data(path) | StateExpr::Len(path) => push_path(path, stack),
            StateExpr::Not(e) => stack.push(e),
            StateExpr::Bin(_, a, b) => {
                stack.push(b);
                stack.push(a);
            }
        }
    }
}

fn push_path<'e>(path: &'e [DataStep], stack: &mut Vec<&'e StateExpr>) {
    for step in path.iter().rev() {
        if let DataStep::Index(e) = step {
            stack.push(e);
        }
    }
}

/// Field ids in range; `reads` lists what the attributes read, `writes` exactly what the
/// op writes (the dataflow check trusts `reads` and the op, so the two must agree).
fn check_fields(cx: &mut Checker, i: usize, node: &Node) {
    let fields = cx.field_count();
    let in_range = |f: FieldId| usize::from(f.0) < fields;
    for (list, used_as) in
        [(&node.reads, FieldUse::Reads), (&node.writes, FieldUse::Writes), (&node.key, FieldUse::Key)]
    {
        let mut bad: Vec<FieldId> = list.iter().copied().filter(|&f| !in_range(f)).collect();
        bad.sort();
        bad.dedup();
        for field in bad {
            cx.report(i, VerifyErrorKind::FieldOutOfRange { field, fields, used_as });
        }
    }

    let mut declared: Vec<FieldId> = node.reads.clone();
    declared.sort();
    declared.dedup();
    let mut used = attribute_reads(&node.op);
    used.sort_by_key(|&(f, _)| f);
    used.dedup_by_key(|&mut (f, _)| f);
    for (field, used_as) in used {
        if !in_range(field) {
            cx.report(i, VerifyErrorKind::FieldOutOfRange { field, fields, used_as });
        } else if declared.binary_search(&field).is_err() {
            let field = cx.field_ref(field);
            cx.report(i, VerifyErrorKind::ReadNotDeclared { field, used_as });
        }
    }

    let written = attribute_write(&node.op);
    if let Some((field, used_as)) = written {
        if !in_range(field) {
            cx.report(i, VerifyErrorKind::FieldOutOfRange { field, fields, used_as });
        } else if !node.writes.contains(&field) {
            let field = cx.field_ref(field);
            cx.report(i, VerifyErrorKind::WriteNotDeclared { field, used_as });
        }
    }
    let mut listed: Vec<FieldId> = node.writes.iter().copied().filter(|&f| in_range(f)).collect();
    listed.sort();
    listed.dedup();
    for field in listed {
        if written.map(|(w, _)| w) != Some(field) {
            let field = cx.field_ref(field);
            cx.report(i, VerifyErrorKind::UndueWrite { field });
        }
    }
    if !matches!(node.op, Op::Source) && matches!(written, Some((FieldId(0), _))) {
        let field = cx.field_ref(FieldId(0));
        cx.report(i, VerifyErrorKind::WritesInstance { field });
    }
}

// ------------------------------------------------------------------ keys

/// Why the node keeps something under its key, if it does: it caches for its backward
/// pass, joins inputs (forward) or gradients (backward) by key, or fans out (so it sums its
/// consumers' gradients). The source is exempt: its backward pass only counts instances.
/// This is the lowering's rule (`amp-lower`'s `passes::minimize_keys`): an `embedding` or a one-input
/// `concat` keeps nothing, since the backward message's state recomputes the row index and
/// the split widths are static.
pub fn key_reason(node: &Node, fans_out: bool) -> Option<KeyReason> {
    let caches = match &node.op {
        Op::Linear { .. } | Op::Affine { .. } | Op::Unary(_) | Op::Binary(_) | Op::Phi { .. } | Op::Loss(_) => true,
        // Row counts (gather, scatter_sum, reduce), the chosen indices (top_k), the field
        // value the write replaced (state_from_payload).
        Op::Gather { .. }
        | Op::ScatterSum { .. }
        | Op::GatherRows { .. }
        | Op::Reduce(_)
        | Op::TopK { .. }
        | Op::StateFromPayload { .. } => true,
        Op::Isu { inverse, .. } => inverse.is_none(),
        _ => false,
    };
    if caches {
        Some(KeyReason::Caches)
    } else if node.inputs.len() >= 2 {
        Some(KeyReason::JoinsInputs)
    } else if matches!(node.op, Op::Split { .. } | Op::PartitionRows { .. }) && node.outputs.len() >= 2 {
        Some(KeyReason::JoinsGradients)
    } else if matches!(node.op, Op::Flatmap { .. } | Op::Ungroup { .. }) {
        // The element messages' gradients are collected by the enclosing context's key.
        Some(KeyReason::JoinsGradients)
    } else if fans_out && !matches!(node.op, Op::Source) {
        Some(KeyReason::FansOut)
    } else {
        None
    }
}

fn check_key_instance(cx: &mut Checker, i: usize, node: &Node, fans_out: bool) {
    let Some(reason) = key_reason(node, fans_out) else { return };
    if !node.key.contains(&FieldId(0)) {
        let key = node.key.iter().map(|&f| cx.field_ref(f)).collect();
        let instance = cx.field_ref(FieldId(0));
        cx.report(i, VerifyErrorKind::KeyMissingInstance { reason, key, instance });
    }
}
