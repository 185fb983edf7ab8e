//! The tape: every tensor operation of one evaluation, in the order it ran, with its
//! inputs and its output value. [`Tape::backward`] walks it in reverse and accumulates
//! gradients (`backward.rs`).
//!
//! Tensors are dense, row-major `f32` buffers; a scalar has shape `[]` and one element.
//! Each constructor checks the shapes of its inputs and returns an [`ErrorKind`] instead
//! of panicking, so ill-typed instance data cannot crash the evaluator. Parameters are not
//! tape nodes: `Linear` and `Embedding` nodes name their parameter tensors by index into
//! the [`ParamSet`] and accumulate into a gradient set of the same layout.
//!
//! Public so that kernel tests (JIT, fused chains) can compare against these plain loops.

mod backward;

pub use backward::Gradients;

use crate::error::ErrorKind;
use amp_ir::order::top_k_order;
use amp_ir::vocab::{log_softmax_rows, softmax_rows};
use amp_params::ParamSet;

/// The most elements one tensor may have (guards allocations sized by data or by `-D`).
pub const MAX_ELEMENTS: usize = 1 << 28;

/// A node of the tape (its output tensor).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub usize);

/// The functions of `unary` and `binary` tape nodes are the IR's vocabulary
/// (`amp_ir::vocab`): the reference computes each with the same scalar function and
/// gradient as the executor, so the two differ only in the order of sums.
pub use amp_ir::{BinaryFn, UnaryFn};

/// What produced a node, with the inputs its backward step needs.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// A constant: instance data, a literal, `zeros`/`ones`. No gradient flows out.
    Leaf,
    /// An elementwise function (a row-wise one is recorded as its own op, `Softmax`).
    Unary(UnaryFn, NodeId),
    /// Equal shapes, or one side a scalar (shape `[]`) broadcast over the other.
    Binary(BinaryFn, NodeId, NodeId),
    /// Over the last axis (the whole vector for rank 1), numerically stable.
    Softmax(NodeId),
    LogSoftmax(NodeId),
    /// Another row-wise function of the vocabulary (`layer_norm`), over the last axis, with
    /// the vocabulary's row function.
    Rows(UnaryFn, NodeId),
    /// Vectors joined end to end.
    Concat(Vec<NodeId>),
    /// A contiguous part of the input starting at element `offset`, with the node's shape:
    /// a part of `split`, a row `v[i]` of a matrix, an element `v[i]` of a vector.
    Slice {
        input: NodeId,
        offset: usize,
    },
    /// The sum of all elements, a scalar.
    SumAll(NodeId),
    /// The mean of all elements, a scalar.
    MeanAll(NodeId),
    /// The elementwise sum of tensors of one shape (zeros when there are none).
    AddN(Vec<NodeId>),
    /// `factor * input`.
    Scale(NodeId, f32),
    /// The values at `indices` (the `k` largest, largest first).
    TopK {
        input: NodeId,
        indices: Vec<usize>,
    },
    /// `-log_softmax(logits)[label]`, a scalar.
    CrossEntropy {
        logits: NodeId,
        label: usize,
    },
    /// `mean((a - b)^2)`, a scalar.
    Mse(NodeId, NodeId),
    /// `W x + b` along the last axis of `x`; `weight` `[out, in]` and `bias` `[out]` are
    /// indices into the parameter set.
    Linear {
        input: NodeId,
        weight: usize,
        bias: usize,
    },
    /// Row `row` of the parameter `weight` `[count, dim]`.
    Embedding {
        weight: usize,
        row: usize,
    },
    /// `x * w + b` elementwise along the last axis of `x`, `weight` and `bias` `[dim]`
    /// indices into the parameter set (a LayerNorm's scale and shift).
    Affine {
        input: NodeId,
        weight: usize,
        bias: usize,
    },
}

/// One operation's output.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub op: Op,
    pub shape: Vec<usize>,
    pub value: Vec<f32>,
}

/// The operations of one evaluation, in order; inputs always precede their users.
#[derive(Clone, Debug, Default)]
pub struct Tape {
    nodes: Vec<Node>,
}

type R<T> = Result<T, ErrorKind>;

fn shape_error(op: &'static str, detail: String) -> ErrorKind {
    ErrorKind::Shape { op, detail }
}

/// The number of elements of `shape`, refusing more than [`MAX_ELEMENTS`].
pub fn element_count(shape: &[usize]) -> R<usize> {
    let mut count: u128 = 1;
    for &d in shape {
        count = count.saturating_mul(d as u128);
    }
    if count > MAX_ELEMENTS as u128 {
        return Err(ErrorKind::TooLarge { what: "a tensor", count, limit: MAX_ELEMENTS as u128 });
    }
    Ok(count as usize)
}

pub use amp_ir::order::argmax;

impl Tape {
    pub fn new() -> Tape {
        Tape::default()
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The node `id`; ids come from this tape, so it exists.
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.0]
    }

    pub fn value(&self, id: NodeId) -> &[f32] {
        &self.nodes[id.0].value
    }

    pub fn shape(&self, id: NodeId) -> &[usize] {
        &self.nodes[id.0].shape
    }

    fn push(&mut self, op: Op, shape: Vec<usize>, value: Vec<f32>) -> NodeId {
        debug_assert_eq!(shape.iter().product::<usize>(), value.len());
        self.nodes.push(Node { op, shape, value });
        NodeId(self.nodes.len() - 1)
    }

    /// A constant tensor; `data` must have as many elements as `shape` says.
    pub fn leaf(&mut self, shape: Vec<usize>, data: Vec<f32>) -> R<NodeId> {
        let count = element_count(&shape)?;
        if count != data.len() {
            return Err(shape_error("constant", format!("{} values for shape {shape:?}", data.len())));
        }
        Ok(self.push(Op::Leaf, shape, data))
    }

    /// A constant tensor with every element `value` (`zeros`, `ones`).
    pub fn fill(&mut self, shape: Vec<usize>, value: f32) -> R<NodeId> {
        let count = element_count(&shape)?;
        Ok(self.push(Op::Leaf, shape, vec![value; count]))
    }

    pub fn scalar(&mut self, value: f32) -> NodeId {
        self.push(Op::Leaf, Vec::new(), vec![value])
    }

    /// `f(x)`: each element for an elementwise function, each row of the last axis for a
    /// row-wise one (which needs rank 1 or more).
    pub fn unary(&mut self, f: UnaryFn, x: NodeId) -> R<NodeId> {
        let Some(scalar) = f.scalar() else {
            return match f {
                UnaryFn::Softmax | UnaryFn::LogSoftmax => self.softmax(x, f == UnaryFn::LogSoftmax),
                _ => self.rows(f, x),
            };
        };
        let node = self.node(x);
        let value = node.value.iter().map(|&v| (scalar.forward)(v)).collect();
        let shape = node.shape.clone();
        Ok(self.push(Op::Unary(f, x), shape, value))
    }

    /// `a op b` elementwise; one side may be a scalar (shape `[]`).
    pub fn binary(&mut self, f: BinaryFn, a: NodeId, b: NodeId) -> R<NodeId> {
        let apply = f.scalar().forward;
        let (na, nb) = (self.node(a), self.node(b));
        let (shape, value): (Vec<usize>, Vec<f32>) = if na.shape == nb.shape {
            (na.shape.clone(), na.value.iter().zip(&nb.value).map(|(&x, &y)| apply(x, y)).collect())
        } else if nb.shape.is_empty() {
            let y = nb.value[0];
            (na.shape.clone(), na.value.iter().map(|&x| apply(x, y)).collect())
        } else if na.shape.is_empty() {
            let x = na.value[0];
            (nb.shape.clone(), nb.value.iter().map(|&y| apply(x, y)).collect())
        } else {
            return Err(shape_error(
                "arithmetic",
                format!("shapes {:?} and {:?} are neither equal nor is one a scalar", na.shape, nb.shape),
            ));
        };
        Ok(self.push(Op::Binary(f, a, b), shape, value))
    }

    /// A row-wise function of the vocabulary over the last axis (rank 1 or more).
    fn rows(&mut self, f: UnaryFn, x: NodeId) -> R<NodeId> {
        let node = self.node(x);
        let Some(value) = node.shape.last().and_then(|&row| f.forward_rows(&node.value, row.max(1))) else {
            return Err(shape_error(f.name(), "needs a tensor of rank 1 or more".into()));
        };
        let shape = node.shape.clone();
        Ok(self.push(Op::Rows(f, x), shape, value))
    }

    /// Softmax (`log = false`) or log-softmax over the last axis.
    pub fn softmax(&mut self, x: NodeId, log: bool) -> R<NodeId> {
        let node = self.node(x);
        let Some(&row) = node.shape.last() else {
            return Err(shape_error(
                if log { "log_softmax" } else { "softmax" },
                "needs a tensor of rank 1 or more".into(),
            ));
        };
        let value = if log { log_softmax_rows(&node.value, row) } else { softmax_rows(&node.value, row) };
        let shape = node.shape.clone();
        let op = if log { Op::LogSoftmax(x) } else { Op::Softmax(x) };
        Ok(self.push(op, shape, value))
    }

    /// Vectors (rank 1) joined end to end.
    pub fn concat(&mut self, xs: &[NodeId]) -> R<NodeId> {
        let mut value = Vec::new();
        for &x in xs {
            let node = self.node(x);
            if node.shape.len() != 1 {
                return Err(shape_error("concat", format!("joins vectors, found shape {:?}", node.shape)));
            }
            value.extend_from_slice(&node.value);
        }
        let shape = vec![value.len()];
        Ok(self.push(Op::Concat(xs.to_vec()), shape, value))
    }

    /// The contiguous part of `x` that starts at element `offset` and has shape `shape`.
    pub fn slice(&mut self, x: NodeId, offset: usize, shape: Vec<usize>) -> R<NodeId> {
        let count = element_count(&shape)?;
        let node = self.node(x);
        let Some(part) = offset.checked_add(count).and_then(|end| node.value.get(offset..end)) else {
            return Err(shape_error(
                "slice",
                format!("elements {offset}..{offset}+{count} of a tensor of {} elements", node.value.len()),
            ));
        };
        let value = part.to_vec();
        Ok(self.push(Op::Slice { input: x, offset }, shape, value))
    }

    /// `v` cut into `parts` equal vectors.
    pub fn split(&mut self, x: NodeId, parts: usize) -> R<Vec<NodeId>> {
        let shape = self.shape(x).to_vec();
        let [n] = shape[..] else {
            return Err(shape_error("split", format!("cuts a vector, found shape {shape:?}")));
        };
        if parts == 0 || n % parts != 0 {
            return Err(shape_error("split", format!("cannot cut {n} elements into {parts} equal parts")));
        }
        let size = n / parts;
        (0..parts).map(|i| self.slice(x, i * size, vec![size])).collect()
    }

    /// `v[i]`: element `i` of a vector (a scalar) or row `i` of a higher-rank tensor.
    pub fn index(&mut self, x: NodeId, i: i64) -> R<NodeId> {
        let shape = self.shape(x).to_vec();
        let Some((&len, rest)) = shape.split_first() else {
            return Err(shape_error("index", "a scalar cannot be indexed".into()));
        };
        let i = usize::try_from(i).ok().filter(|&i| i < len).ok_or(ErrorKind::IndexOutOfRange { index: i, len })?;
        let row: usize = rest.iter().product();
        self.slice(x, i * row, rest.to_vec())
    }

    pub fn sum_all(&mut self, x: NodeId) -> NodeId {
        let total = self.value(x).iter().sum();
        self.push(Op::SumAll(x), Vec::new(), vec![total])
    }

    pub fn mean_all(&mut self, x: NodeId) -> R<NodeId> {
        let values = self.value(x);
        if values.is_empty() {
            return Err(ErrorKind::EmptyMean);
        }
        let mean = values.iter().sum::<f32>() / values.len() as f32;
        Ok(self.push(Op::MeanAll(x), Vec::new(), vec![mean]))
    }

    /// The elementwise sum of `xs`, all of shape `shape` (zeros of that shape if empty).
    pub fn add_n(&mut self, xs: &[NodeId], shape: Vec<usize>) -> R<NodeId> {
        let mut value = vec![0.0; element_count(&shape)?];
        for &x in xs {
            let node = self.node(x);
            if node.shape != shape {
                return Err(shape_error("sum", format!("adds tensors of shape {shape:?}, found {:?}", node.shape)));
            }
            value.iter_mut().zip(&node.value).for_each(|(acc, &v)| *acc += v);
        }
        Ok(self.push(Op::AddN(xs.to_vec()), shape, value))
    }

    pub fn scale(&mut self, x: NodeId, factor: f32) -> NodeId {
        let node = self.node(x);
        let value = node.value.iter().map(|&v| factor * v).collect();
        let shape = node.shape.clone();
        self.push(Op::Scale(x, factor), shape, value)
    }

    /// The `k` largest elements of a vector, largest first (lower index first on ties),
    /// and their indices.
    pub fn top_k(&mut self, x: NodeId, k: i64) -> R<(Vec<usize>, NodeId)> {
        let node = self.node(x);
        let [n] = node.shape[..] else {
            return Err(shape_error("top_k", format!("selects from a vector, found shape {:?}", node.shape)));
        };
        let k = usize::try_from(k)
            .ok()
            .filter(|&k| (1..=n).contains(&k))
            .ok_or_else(|| shape_error("top_k", format!("k = {k} is not in 1..={n}")))?;
        let order = top_k_order(&node.value, k);
        let value = order.iter().map(|&i| node.value[i]).collect();
        let id = self.push(Op::TopK { input: x, indices: order.clone() }, vec![k], value);
        Ok((order, id))
    }

    /// `-log_softmax(logits)[label]`.
    pub fn cross_entropy(&mut self, logits: NodeId, label: i64) -> R<NodeId> {
        let node = self.node(logits);
        let [classes] = node.shape[..] else {
            return Err(shape_error(
                "cross_entropy",
                format!("takes logits as a vector, found shape {:?}", node.shape),
            ));
        };
        let label = usize::try_from(label)
            .ok()
            .filter(|&l| l < classes)
            .ok_or(ErrorKind::LabelOutOfRange { label, classes })?;
        let log_probs = log_softmax_rows(&node.value, classes);
        let loss = -log_probs[label];
        Ok(self.push(Op::CrossEntropy { logits, label }, Vec::new(), vec![loss]))
    }

    /// `mean((a - b)^2)` over tensors of one shape.
    pub fn mse(&mut self, a: NodeId, b: NodeId) -> R<NodeId> {
        let (na, nb) = (self.node(a), self.node(b));
        if na.shape != nb.shape {
            return Err(shape_error("mse", format!("compares equal shapes, found {:?} and {:?}", na.shape, nb.shape)));
        }
        if na.value.is_empty() {
            return Err(ErrorKind::EmptyMean);
        }
        let sum: f32 = na.value.iter().zip(&nb.value).map(|(&x, &y)| (x - y) * (x - y)).sum();
        let loss = sum / na.value.len() as f32;
        Ok(self.push(Op::Mse(a, b), Vec::new(), vec![loss]))
    }

    /// `W x + b` along the last axis of `x`, with `W = params[weight]` (`[out, in]`) and
    /// `b = params[bias]` (`[out]`).
    pub fn linear(&mut self, params: &ParamSet, x: NodeId, weight: usize, bias: usize) -> R<NodeId> {
        let (out_dim, in_dim) = linear_dims(params, weight, bias)?;
        let node = self.node(x);
        if node.shape.last() != Some(&in_dim) {
            return Err(shape_error("Linear", format!("expects input [.., {in_dim}], found shape {:?}", node.shape)));
        }
        let (w, b) = (params.data(weight), params.data(bias));
        let rows: usize = node.shape[..node.shape.len() - 1].iter().product();
        let mut value = vec![0.0; rows * out_dim];
        for r in 0..rows {
            let xr = &node.value[r * in_dim..(r + 1) * in_dim];
            for o in 0..out_dim {
                let wo = &w[o * in_dim..(o + 1) * in_dim];
                value[r * out_dim + o] = b[o] + wo.iter().zip(xr).map(|(&wi, &xi)| wi * xi).sum::<f32>();
            }
        }
        let mut shape = node.shape.clone();
        if let Some(last) = shape.last_mut() {
            *last = out_dim;
        }
        Ok(self.push(Op::Linear { input: x, weight, bias }, shape, value))
    }

    /// `x * w + b` along the last axis of `x`, `w = params[weight]` and `b = params[bias]`
    /// both `[dim]`.
    pub fn affine(&mut self, params: &ParamSet, x: NodeId, weight: usize, bias: usize) -> R<NodeId> {
        let dim = affine_dim(params, weight, bias)?;
        let node = self.node(x);
        if node.shape.last() != Some(&dim) {
            return Err(shape_error("LayerNorm", format!("expects input [.., {dim}], found shape {:?}", node.shape)));
        }
        let (w, b) = (params.data(weight), params.data(bias));
        let value: Vec<f32> =
            node.value.chunks(dim).flat_map(|row| row.iter().zip(w).zip(b).map(|((x, w), b)| x * w + b)).collect();
        let shape = node.shape.clone();
        Ok(self.push(Op::Affine { input: x, weight, bias }, shape, value))
    }

    /// Row `row` of `params[weight]` (`[count, dim]`).
    pub fn embedding(&mut self, params: &ParamSet, weight: usize, row: i64) -> R<NodeId> {
        let [count, dim] = param_shape(params, weight, "Embedding")?[..] else {
            return Err(ErrorKind::ParamMismatch { detail: "an Embedding weight must have rank 2".into() });
        };
        let row = usize::try_from(row)
            .ok()
            .filter(|&r| r < count)
            .ok_or(ErrorKind::EmbeddingOutOfRange { index: row, count })?;
        let value = params.data(weight)[row * dim..(row + 1) * dim].to_vec();
        Ok(self.push(Op::Embedding { weight, row }, vec![dim], value))
    }
}

/// The shape of parameter `index`, checking that it exists and holds as many values.
pub(super) fn param_shape(params: &ParamSet, index: usize, what: &str) -> R<Vec<usize>> {
    if index >= params.len() {
        return Err(ErrorKind::ParamMismatch { detail: format!("{what} parameter #{index} does not exist") });
    }
    let spec = params.spec(index);
    if spec.elements() != params.data(index).len() {
        return Err(ErrorKind::ParamMismatch { detail: format!("`{}` has the wrong number of values", spec.name) });
    }
    Ok(spec.shape.clone())
}

/// `dim` of an affine map whose weight and bias are both `[dim]`.
pub(super) fn affine_dim(params: &ParamSet, weight: usize, bias: usize) -> R<usize> {
    let w = param_shape(params, weight, "LayerNorm weight")?;
    let b = param_shape(params, bias, "LayerNorm bias")?;
    match (&w[..], &b[..]) {
        (&[d], &[db]) if d == db => Ok(d),
        _ => Err(ErrorKind::ParamMismatch { detail: format!("LayerNorm weight {w:?} and bias {b:?} do not fit") }),
    }
}

/// `(out, in)` of a Linear whose weight is `[out, in]` and bias `[out]`.
pub(super) fn linear_dims(params: &ParamSet, weight: usize, bias: usize) -> R<(usize, usize)> {
    let w = param_shape(params, weight, "Linear weight")?;
    let b = param_shape(params, bias, "Linear bias")?;
    match (&w[..], &b[..]) {
        (&[o, i], &[ob]) if o == ob => Ok((o, i)),
        _ => Err(ErrorKind::ParamMismatch { detail: format!("Linear weight {w:?} and bias {b:?} do not fit") }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn element_counts_refuse_huge_and_overflowing_shapes() {
        assert_eq!(element_count(&[]), Ok(1));
        assert_eq!(element_count(&[3, 0]), Ok(0));
        assert!(matches!(element_count(&[usize::MAX, usize::MAX]), Err(ErrorKind::TooLarge { .. })));
    }
}
