//! Sizes within `crate::limits`: every parameter and port tensor, the parameters in total,
//! and the depth of every state expression. The lowering reports these as E0310 with the
//! node's source location; a graph file that breaks them is refused like any other.

use super::ops::attribute_exprs;
use super::{Checker, VerifyErrorKind};
use crate::limits::{self, MAX_EXPR_DEPTH, MAX_PARAMETERS, MAX_PARAM_TENSORS};
use crate::{DataStep, PayloadTy, StateExpr};

pub(super) fn check_param_sizes(cx: &mut Checker) {
    let graph = cx.graph;
    if let Err(error) = limits::within(Some(graph.params.len() as u128), MAX_PARAM_TENSORS, "the parameter tensors") {
        cx.report_graph(VerifyErrorKind::OverLimit { error });
    }
    let mut total: u128 = 0;
    for param in &graph.params {
        match limits::tensor_elements(&param.shape) {
            Ok(n) => total += u128::from(n),
            Err(error) => {
                cx.report_graph(VerifyErrorKind::ParamTooLarge { name: param.name.clone(), error });
                return;
            }
        }
    }
    if let Err(error) = limits::within(Some(total), MAX_PARAMETERS, "the model's parameters") {
        cx.report_graph(VerifyErrorKind::OverLimit { error });
    }
}

pub(super) fn check_node_sizes(cx: &mut Checker) {
    for i in 0..cx.bound() {
        let Some(node) = cx.node(i) else { continue };
        let ports = node.inputs.iter().chain(&node.outputs);
        if let Some(error) = ports.filter_map(|ty| port_elements(ty).err()).next() {
            cx.report(i, VerifyErrorKind::OverLimit { error });
        }
        if attribute_exprs(&node.op).into_iter().any(|(e, _)| too_deep(e)) {
            cx.report(i, VerifyErrorKind::ExprTooDeep { limit: MAX_EXPR_DEPTH });
        }
    }
}

fn port_elements(ty: &PayloadTy) -> Result<u64, limits::LimitError> {
    match ty {
        PayloadTy::Unit => Ok(0),
        PayloadTy::F32(dims) | PayloadTy::Batch(dims) => limits::tensor_elements(dims),
    }
}

/// Whether `expr` nests deeper than [`MAX_EXPR_DEPTH`], walked with an explicit stack
/// (the point is that recursion over it may not be safe).
fn too_deep(expr: &StateExpr) -> bool {
    let mut stack = vec![(expr, 1usize)];
    while let Some((e, depth)) = stack.pop() {
        if depth > MAX_EXPR_DEPTH {
            return true;
        }
        match e {
            StateExpr::Field(_) | StateExpr::Const(_) => {}
            StateExpr::Data(path) | StateExpr::Len(path) => {
                for step in path {
                    if let DataStep::Index(inner) = step {
                        stack.push((inner, depth + 1));
                    }
                }
            }
            StateExpr::Not(inner) => stack.push((inner, depth + 1)),
            StateExpr::Bin(_, a, b) => {
                stack.push((a, depth + 1));
                stack.push((b, depth + 1));
            }
        }
    }
    false
}
