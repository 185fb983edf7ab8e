//! Reverse-mode differentiation of a [`Tape`]: one pass over the nodes from last to first,
//! each adding its inputs' share of its gradient (chain rule, summed over every use).

use super::{NodeId, Op, Tape, R};
use crate::error::ErrorKind;
use amp_params::ParamSet;

/// The gradient of the differentiated output with respect to each node of the tape
/// (`None` where nothing flowed: the node does not influence the output).
#[derive(Clone, Debug)]
pub struct Gradients {
    grads: Vec<Option<Vec<f32>>>,
}

impl Gradients {
    pub fn of(&self, id: NodeId) -> Option<&[f32]> {
        self.grads.get(id.0).and_then(|g| g.as_deref())
    }
}

/// The gradient buffer of node `id` (of `len` elements), created as zeros on first use.
fn grad_of(grads: &mut [Option<Vec<f32>>], id: NodeId, len: usize) -> &mut [f32] {
    grads[id.0].get_or_insert_with(|| vec![0.0; len])
}

impl Tape {
    fn accumulate(&self, grads: &mut [Option<Vec<f32>>], id: NodeId, contribution: &[f32]) {
        let g = grad_of(grads, id, self.value(id).len());
        g.iter_mut().zip(contribution).for_each(|(acc, &c)| *acc += c);
    }

    /// Backpropagates `seed`, the gradient of some scalar objective with respect to the
    /// output of `root` (for a loss: `[1.0]`), through every node up to `root`. Gradients
    /// of parameters are added to `param_grads` (same layout as `params`); the gradients
    /// of the tape's nodes are returned.
    pub fn backward(&self, root: NodeId, seed: &[f32], params: &ParamSet, param_grads: &mut ParamSet) -> R<Gradients> {
        if root.0 >= self.len() || seed.len() != self.value(root).len() {
            return Err(ErrorKind::Shape {
                op: "backward",
                detail: "the seed gradient does not fit the root node".into(),
            });
        }
        let same_layout = param_grads.len() == params.len()
            && (0..params.len()).all(|i| param_grads.data(i).len() == params.data(i).len());
        if !same_layout {
            return Err(ErrorKind::ParamMismatch { detail: "gradient set and parameter set differ".into() });
        }
        self.check_param_layout(root, params)?;
        let mut grads: Vec<Option<Vec<f32>>> = vec![None; self.len()];
        grads[root.0] = Some(seed.to_vec());
        for i in (0..=root.0).rev() {
            let Some(g) = grads[i].take() else { continue };
            self.backward_node(NodeId(i), &g, &mut grads, params, param_grads);
            grads[i] = Some(g);
        }
        Ok(Gradients { grads })
    }

    /// Checks that `params` has the layout the parameterized nodes up to `root` were
    /// recorded with, so that the backward steps index within it.
    fn check_param_layout(&self, root: NodeId, params: &ParamSet) -> R<()> {
        for node in &self.nodes[..=root.0] {
            let fits = match &node.op {
                Op::Linear { input, weight, bias } => {
                    let (out_dim, in_dim) = super::linear_dims(params, *weight, *bias)?;
                    node.shape.last() == Some(&out_dim) && self.shape(*input).last() == Some(&in_dim)
                }
                Op::Embedding { weight, row } => {
                    let shape = super::param_shape(params, *weight, "Embedding")?;
                    matches!(shape[..], [count, dim] if *row < count && node.shape == [dim])
                }
                Op::Affine { input, weight, bias } => {
                    let dim = super::affine_dim(params, *weight, *bias)?;
                    node.shape.last() == Some(&dim) && self.shape(*input) == node.shape.as_slice()
                }
                _ => true,
            };
            if !fits {
                let detail = "the parameter set differs from the one the tape was recorded with".to_string();
                return Err(ErrorKind::ParamMismatch { detail });
            }
        }
        Ok(())
    }

    /// Adds the inputs' shares of `g`, the gradient of node `id`.
    fn backward_node(
        &self,
        id: NodeId,
        g: &[f32],
        grads: &mut [Option<Vec<f32>>],
        params: &ParamSet,
        param_grads: &mut ParamSet,
    ) {
        let node = self.node(id);
        let y = &node.value;
        match &node.op {
            Op::Leaf => {}
            Op::Unary(f, x) => {
                // `Tape::unary` records only elementwise functions under `Op::Unary`.
                if let Some(backward) = f.scalar().map(|s| s.backward) {
                    let xv = self.value(*x);
                    let contribution: Vec<f32> =
                        g.iter().zip(xv.iter().zip(y)).map(|(&gi, (&xi, &yi))| backward(xi, yi, gi)).collect();
                    self.accumulate(grads, *x, &contribution);
                }
            }
            Op::Binary(f, a, b) => {
                let (av, bv) = (self.value(*a), self.value(*b));
                let n = g.len();
                // A scalar side is broadcast: it contributes to every element and receives
                // the sum of their gradients.
                let at = |j: usize| if av.len() == n { av[j] } else { av[0] };
                let bt = |j: usize| if bv.len() == n { bv[j] } else { bv[0] };
                let mut ga = vec![0.0; av.len()];
                let mut gb = vec![0.0; bv.len()];
                let partials = f.scalar().backward;
                for j in 0..n {
                    let (da, db) = partials(at(j), bt(j), g[j]);
                    ga[if av.len() == n { j } else { 0 }] += da;
                    gb[if bv.len() == n { j } else { 0 }] += db;
                }
                self.accumulate(grads, *a, &ga);
                self.accumulate(grads, *b, &gb);
            }
            Op::Rows(f, x) => {
                let row = node.shape.last().copied().unwrap_or(1).max(1);
                if let Some(contribution) = f.backward_rows(self.value(*x), y, g, row) {
                    self.accumulate(grads, *x, &contribution);
                }
            }
            Op::Softmax(x) => {
                let row = node.shape.last().copied().unwrap_or(1).max(1);
                let mut contribution = vec![0.0; y.len()];
                for ((ys, gs), cs) in y.chunks(row).zip(g.chunks(row)).zip(contribution.chunks_mut(row)) {
                    let dot: f32 = ys.iter().zip(gs).map(|(&a, &b)| a * b).sum();
                    for ((c, &yi), &gi) in cs.iter_mut().zip(ys).zip(gs) {
                        *c = yi * (gi - dot);
                    }
                }
                self.accumulate(grads, *x, &contribution);
            }
            Op::LogSoftmax(x) => {
                let row = node.shape.last().copied().unwrap_or(1).max(1);
                let mut contribution = vec![0.0; y.len()];
                for ((ys, gs), cs) in y.chunks(row).zip(g.chunks(row)).zip(contribution.chunks_mut(row)) {
                    let total: f32 = gs.iter().sum();
                    for ((c, &yi), &gi) in cs.iter_mut().zip(ys).zip(gs) {
                        *c = gi - yi.exp() * total;
                    }
                }
                self.accumulate(grads, *x, &contribution);
            }
            Op::Concat(xs) => {
                let mut offset = 0;
                for &x in xs {
                    let len = self.value(x).len();
                    self.accumulate(grads, x, &g[offset..offset + len]);
                    offset += len;
                }
            }
            Op::Slice { input, offset } => {
                let gx = grad_of(grads, *input, self.value(*input).len());
                gx[*offset..*offset + g.len()].iter_mut().zip(g).for_each(|(acc, &gi)| *acc += gi);
            }
            Op::SumAll(x) => {
                let gx = grad_of(grads, *x, self.value(*x).len());
                gx.iter_mut().for_each(|acc| *acc += g[0]);
            }
            Op::MeanAll(x) => {
                let gx = grad_of(grads, *x, self.value(*x).len());
                let share = g[0] / gx.len() as f32;
                gx.iter_mut().for_each(|acc| *acc += share);
            }
            Op::AddN(xs) => {
                for &x in xs {
                    self.accumulate(grads, x, g);
                }
            }
            Op::Scale(x, factor) => {
                let contribution: Vec<f32> = g.iter().map(|&gi| factor * gi).collect();
                self.accumulate(grads, *x, &contribution);
            }
            Op::TopK { input, indices } => {
                let gx = grad_of(grads, *input, self.value(*input).len());
                for (&i, &gi) in indices.iter().zip(g) {
                    gx[i] += gi;
                }
            }
            Op::CrossEntropy { logits, label } => {
                let lv = self.value(*logits);
                let max = lv.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let sum: f32 = lv.iter().map(|&v| (v - max).exp()).sum();
                let mut contribution: Vec<f32> = lv.iter().map(|&v| g[0] * (v - max).exp() / sum).collect();
                contribution[*label] -= g[0];
                self.accumulate(grads, *logits, &contribution);
            }
            Op::Mse(a, b) => {
                let (av, bv) = (self.value(*a), self.value(*b));
                let scale = 2.0 * g[0] / av.len() as f32;
                let ga: Vec<f32> = av.iter().zip(bv).map(|(&x, &z)| scale * (x - z)).collect();
                let gb: Vec<f32> = ga.iter().map(|&v| -v).collect();
                self.accumulate(grads, *a, &ga);
                self.accumulate(grads, *b, &gb);
            }
            Op::Linear { input, weight, bias } => {
                let xv = self.value(*input);
                let out_dim = node.shape.last().copied().unwrap_or(0);
                let in_dim = self.shape(*input).last().copied().unwrap_or(0);
                let rows: usize = node.shape[..node.shape.len().saturating_sub(1)].iter().product();
                let w = params.data(*weight);
                let mut gx = vec![0.0; xv.len()];
                for r in 0..rows {
                    for o in 0..out_dim {
                        let go = g[r * out_dim + o];
                        for i in 0..in_dim {
                            gx[r * in_dim + i] += w[o * in_dim + i] * go;
                        }
                    }
                }
                let gw = param_grads.data_mut(*weight);
                for r in 0..rows {
                    for o in 0..out_dim {
                        let go = g[r * out_dim + o];
                        for i in 0..in_dim {
                            gw[o * in_dim + i] += go * xv[r * in_dim + i];
                        }
                    }
                }
                let gb = param_grads.data_mut(*bias);
                for r in 0..rows {
                    for o in 0..out_dim {
                        gb[o] += g[r * out_dim + o];
                    }
                }
                self.accumulate(grads, *input, &gx);
            }
            Op::Affine { input, weight, bias } => {
                let xv = self.value(*input);
                let dim = node.shape.last().copied().unwrap_or(1).max(1);
                let w = params.data(*weight);
                let gx: Vec<f32> = g.chunks(dim).flat_map(|gr| gr.iter().zip(w).map(|(g, w)| g * w)).collect();
                let gw = param_grads.data_mut(*weight);
                for (gr, xr) in g.chunks(dim).zip(xv.chunks(dim)) {
                    gw.iter_mut().zip(gr.iter().zip(xr)).for_each(|(acc, (g, x))| *acc += g * x);
                }
                let gb = param_grads.data_mut(*bias);
                for gr in g.chunks(dim) {
                    gb.iter_mut().zip(gr).for_each(|(acc, g)| *acc += g);
                }
                self.accumulate(grads, *input, &gx);
            }
            Op::Embedding { weight, row } => {
                let dim = g.len();
                let gw = param_grads.data_mut(*weight);
                gw[row * dim..(row + 1) * dim].iter_mut().zip(g).for_each(|(acc, &gi)| *acc += gi);
            }
        }
    }
}
