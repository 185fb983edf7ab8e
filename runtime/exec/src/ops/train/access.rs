//! How ops reach the parameters during a run: frozen values (inference) or live groups
//! behind their locks (training), one group at a time.

use super::*;
use std::borrow::Cow;

/// How ops reach parameters in a run.
pub(crate) enum ParamAccess<'a> {
    /// Read-only (evaluation and inference): no locks, no gradients.
    Frozen { params: &'a ParamSet, groups: &'a [GroupInfo] },
    /// Training: one lock per group, and per master group the version whose values its
    /// replicas on other workers are to take ([`ParamAccess::publish`]).
    Live { groups: Vec<Mutex<LiveGroup<'a>>>, published: Vec<AtomicU64> },
}

/// A group's tensors while an op uses them.
pub(crate) enum GroupView<'g, 'a> {
    Frozen(Vec<&'g [f32]>),
    Live(MutexGuard<'g, LiveGroup<'a>>),
}

impl GroupView<'_, '_> {
    /// Values of the group's `i`-th tensor (empty when there is none).
    pub fn value(&self, i: usize) -> &[f32] {
        match self {
            GroupView::Frozen(values) => values.get(i).copied().unwrap_or(&[]),
            GroupView::Live(g) => g.tensors.get(i).map_or(&[], |t| &*t.value),
        }
    }

    /// A forward message of `instance` read the values (training only: staleness; a
    /// frozen group never updates, so its reads are never stale and are not kept).
    pub fn note_read(&mut self, instance: Option<usize>) {
        if let (GroupView::Live(g), Some(i)) = (self, instance) {
            if !g.frozen {
                g.staleness.read(i);
            }
        }
    }

    /// A gradient of `instance` reached the accumulators (training only: staleness).
    pub fn note_gradient(&mut self, instance: Option<usize>) {
        if let (GroupView::Live(g), Some(i)) = (self, instance) {
            if !g.frozen {
                g.staleness.gradient(i);
            }
        }
    }

    /// Changes whenever the group's values do (counting in this run; the op that reads it
    /// is built anew for every run): ops that keep something derived from the values,
    /// such as a transposed weight, make it again when the version moved.
    pub fn version(&self) -> u64 {
        match self {
            GroupView::Frozen(_) => 0,
            GroupView::Live(g) => g.version,
        }
    }

    /// The gradient accumulator of row `row` (`width` values) of the group's first
    /// tensor (training only; `None` past its end or for a frozen group), logged for the
    /// row-sparse update.
    pub fn row_grad(&mut self, row: usize, width: usize) -> Option<&mut [f32]> {
        match self {
            GroupView::Frozen(_) => None,
            GroupView::Live(g) if g.frozen => None,
            GroupView::Live(g) => {
                g.touched = true;
                g.accumulated = true;
                if let Some(log) = &mut g.rows {
                    log.width = width;
                    log.rows.push(row);
                }
                g.tensors.first_mut().and_then(|t| t.grad.get_mut(row * width..(row + 1) * width))
            }
        }
    }

    /// The gradient accumulators of all the group's tensors, in order, for a dense
    /// update (training only; `None` on frozen parameters, a run's or a frozen group's).
    pub fn dense_grads(&mut self) -> Option<Vec<&mut [f32]>> {
        let GroupView::Live(g) = self else { return None };
        if g.frozen {
            return None;
        }
        g.touched = true;
        g.accumulated = true;
        g.rows = None;
        Some(g.tensors.iter_mut().map(|t| &mut *t.grad).collect())
    }

    /// The parameter gradients of a linear group (`W: [out, inp]`, `b: [out]`) over a batch
    /// of rows `dy: [rows, out]` with their inputs `x: [rows, inp]` (in pieces of whole rows,
    /// in order, as the op's messages brought them): adds the column sums of
    /// `dy` to the bias gradient and `dy^T x` to the weight gradient, that one deferred (see
    /// [`DeferredProducts`]). The op computes `dx` itself, on its copy of `W` laid out for
    /// the GEMM. Training only: false on frozen parameters (a run's, or a frozen group's)
    /// or a group that is not a linear layer's.
    pub fn linear_grads(&mut self, dy: &[f32], x: &[&[f32]], inp: usize, out: usize) -> bool {
        let GroupView::Live(g) = self else { return false };
        if g.frozen {
            return false;
        }
        let [_, b, ..] = g.tensors.as_mut_slice() else { return false };
        kernels::linear_bias_grad(dy, b.grad);
        g.touched = true;
        g.rows = None;
        if (g.deferred.inp, g.deferred.out) != (inp, out) {
            g.settle();
            g.deferred.inp = inp;
            g.deferred.out = out;
        }
        let d = &mut g.deferred;
        let x_len: usize = x.iter().map(|piece| piece.len()).sum();
        if d.x.is_empty() && x_len.checked_div(inp).is_some_and(|rows| rows >= d.limit) {
            // A batch that alone is what a settle adds: added now, read in place (stacked
            // only if it came in pieces), the same product on the same rows as copying
            // them and settling at once.
            let x = match x {
                [x] => Cow::Borrowed(*x),
                pieces => Cow::Owned(pieces.concat()),
            };
            if let Some(w) = g.tensors.first_mut() {
                kernels::linear_weight_grad(dy, &x, w.grad, inp, out);
                g.accumulated = true;
            }
            return true;
        }
        d.dy.extend_from_slice(dy);
        // The pieces straight into the deferred rows: stacking them first was a copy more.
        x.iter().for_each(|piece| d.x.extend_from_slice(piece));
        if d.rows() >= d.limit {
            g.settle();
        }
        true
    }
}

impl<'a> ParamAccess<'a> {
    /// Live groups for a training run, nothing published yet.
    pub fn live_run(groups: Vec<LiveGroup<'a>>) -> ParamAccess<'a> {
        let published = groups.iter().map(|_| AtomicU64::new(0)).collect();
        ParamAccess::Live { groups: groups.into_iter().map(Mutex::new).collect(), published }
    }

    /// A master group's update at `version` is for its replicas on other workers to take:
    /// each takes the values itself, on its own worker, before it next reads them
    /// (`sched::worker`'s `take_values`), in parallel, so that the master's worker does
    /// not copy them into every replica in turn after its update.
    pub fn publish(&self, g: usize, version: u64) {
        if let ParamAccess::Live { published, .. } = self {
            if let Some(p) = published.get(g) {
                p.fetch_max(version, Ordering::Release);
            }
        }
    }

    /// The version master group `g` last published (0: none in this run).
    pub fn published(&self, g: usize) -> u64 {
        match self {
            ParamAccess::Live { published, .. } => published.get(g).map_or(0, |p| p.load(Ordering::Acquire)),
            ParamAccess::Frozen { .. } => 0,
        }
    }

    /// Locks (when live) and returns group `g`'s tensors.
    pub fn group(&self, g: usize) -> GroupView<'_, 'a> {
        match self {
            ParamAccess::Frozen { params, groups } => {
                let values = groups.get(g).map_or_else(Vec::new, |info| {
                    info.tensors.iter().map(|&i| if i < params.len() { params.data(i) } else { &[] }).collect()
                });
                GroupView::Frozen(values)
            }
            ParamAccess::Live { groups, .. } => match groups.get(g) {
                Some(lock) => GroupView::Live(lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner())),
                None => GroupView::Frozen(Vec::new()),
            },
        }
    }

    /// Locks a live group for its owner's bookkeeping.
    pub fn live(&self, g: usize) -> Option<MutexGuard<'_, LiveGroup<'a>>> {
        match self {
            ParamAccess::Live { groups, .. } => {
                groups.get(g).map(|lock| lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner()))
            }
            ParamAccess::Frozen { .. } => None,
        }
    }

    /// Locks a live group when no one else holds it (None when someone does, or frozen):
    /// for work that can wait for a better moment.
    pub fn try_live(&self, g: usize) -> Option<MutexGuard<'_, LiveGroup<'a>>> {
        let ParamAccess::Live { groups, .. } = self else { return None };
        match groups.get(g)?.try_lock() {
            Ok(guard) => Some(guard),
            Err(std::sync::TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    /// The live groups back, after the workers are gone.
    pub fn into_live_groups(self) -> Vec<LiveGroup<'a>> {
        match self {
            ParamAccess::Live { groups, .. } => {
                groups.into_iter().map(|m| m.into_inner().unwrap_or_else(|p| p.into_inner())).collect()
            }
            ParamAccess::Frozen { .. } => Vec::new(),
        }
    }
}
