//! Replicas' parameters during a run: their stores, and what moves between a master and
//! its replicas (gradients gathered before the master's update, values after it), in
//! memory or, for a replica in another process, as a `ReplicaGrads`.

use super::*;

/// The tensors of a replica's group during a run: a copy of its master's values, its own
/// gradient accumulators, and an optimizer state it never uses (the master updates).
#[derive(Default)]
pub(crate) struct ReplicaStore {
    pub(super) values: Vec<Vec<f32>>,
    pub(super) grads: Vec<Vec<f32>>,
    pub(super) optim: Vec<TensorState>,
}

/// One store per group: the master's current values for replica groups, empty for the
/// others.
pub(crate) fn replica_stores(groups: &[GroupInfo], params: &ParamSet) -> Vec<ReplicaStore> {
    groups
        .iter()
        .map(|info| match info.master {
            None => ReplicaStore::default(),
            Some(_) => {
                let values: Vec<Vec<f32>> =
                    info.tensors.iter().filter(|&&i| i < params.len()).map(|&i| params.data(i).to_vec()).collect();
                let grads = values.iter().map(|v| vec![0.0; v.len()]).collect();
                let optim = values.iter().map(|_| TensorState { step: 0, m: Vec::new(), v: Vec::new() }).collect();
                ReplicaStore { values, grads, optim }
            }
        })
        .collect()
}

/// Adds what the replicas accumulated and their masters have not gathered into `grads`
/// (at the end of a run: it carries over like any accumulated gradient).
pub(crate) fn fold_replica_grads(groups: &[GroupInfo], stores: &[ReplicaStore], grads: &mut ParamSet) {
    for (info, store) in groups.iter().zip(stores) {
        for (&i, acc) in info.tensors.iter().zip(&store.grads) {
            if i < grads.len() {
                grads.data_mut(i).iter_mut().zip(acc).for_each(|(g, x)| *g += x);
            }
        }
    }
}

/// Adds a replica's accumulated gradients into the master's and clears them. A linear
/// replica's deferred weight-gradient rows move to the master's instead (`take_deferred`):
/// when neither group's weight accumulator holds anything else, the master's update adds
/// every copy's rows to the weight in one product, where settling each copy's and summing
/// the accumulators made several passes over a weight-sized buffer per copy and update
/// (the same sum, in another order: equal to f32 rounding).
pub(crate) fn gather_grads(master: &mut LiveGroup, replica: &mut LiveGroup) {
    replica.staleness.hand_over(&mut master.staleness);
    if !replica.touched {
        return;
    }
    // Whether the replica's weight gradient is all in the rows moved: its accumulator
    // holds nothing then (`LiveGroup::accumulated`) and is passed over.
    let rows_only = master.take_deferred(replica) && !replica.accumulated;
    replica.settle();
    match (&mut replica.rows, replica.tensors.as_mut_slice(), master.tensors.as_mut_slice()) {
        // A table's rows: the others' gradients are zero (a copy of an Embedding reaches
        // a few rows of a large table between two updates).
        (Some(log), [r], [m]) if log.width > 0 => {
            log.rows.sort_unstable();
            log.rows.dedup();
            let w = log.width;
            for &row in &log.rows {
                let span = row * w..(row + 1) * w;
                if let (Some(g), Some(x)) = (m.grad.get_mut(span.clone()), r.grad.get_mut(span)) {
                    g.iter_mut().zip(x.iter_mut()).for_each(|(g, x)| {
                        *g += *x;
                        *x = 0.0;
                    });
                }
            }
        }
        _ => {
            let skip = usize::from(rows_only);
            for (m, r) in master.tensors.iter_mut().zip(replica.tensors.iter_mut()).skip(skip) {
                for (g, x) in m.grad.iter_mut().zip(r.grad.iter_mut()) {
                    *g += *x;
                    *x = 0.0;
                }
            }
        }
    }
    master.touched = true;
    master.accumulated |= !rows_only;
    replica.touched = false;
    replica.accumulated = false;
    // The master's row log covers the replica's rows too, or neither is known.
    match (&mut master.rows, replica.rows.take()) {
        (Some(m), Some(r)) => {
            m.width = r.width;
            m.rows.extend(r.rows);
        }
        _ => master.rows = None,
    }
    replica.rows = Some(Default::default());
}

/// Gives a replica the master's values: all of them, or only `rows` of a table (of
/// `width` values each) when the replica holds the others already (the last update moved
/// only those: `LiveGroup::moved_rows`).
pub(crate) fn sync_values(master: &LiveGroup, replica: &mut LiveGroup, rows: Option<&RowLog>) {
    match (rows, master.tensors.as_slice(), replica.tensors.as_mut_slice()) {
        (Some(log), [m], [r]) if log.width > 0 && m.value.len() == r.value.len() => {
            let w = log.width;
            for &row in &log.rows {
                if let (Some(to), Some(from)) =
                    (r.value.get_mut(row * w..(row + 1) * w), m.value.get(row * w..(row + 1) * w))
                {
                    to.copy_from_slice(from);
                }
            }
            replica.version += 1;
            replica.staleness.base = master.version;
        }
        _ => {
            let values: Vec<&[f32]> = master.tensors.iter().map(|t| &*t.value).collect();
            set_replica_values(replica, &values, master.version);
        }
    }
}

/// Gives a replica values of its master at version `base` (from memory, or from another
/// process: `sched::worker`'s remote replicas). Tensors of another length are skipped
/// (the bridge refuses them first).
pub(crate) fn set_replica_values(replica: &mut LiveGroup, values: &[&[f32]], base: u64) {
    for (r, m) in replica.tensors.iter_mut().zip(values) {
        if r.value.len() == m.len() {
            r.value.copy_from_slice(m);
        }
    }
    replica.version += 1;
    replica.staleness.base = base;
}

/// Takes what a replica accumulated (clearing it), as [`gather_grads`] would hand it to
/// its master.
pub(crate) fn take_replica_grads(replica: &mut LiveGroup) -> ReplicaGrads {
    let mut applied: Vec<(usize, u64)> = replica.staleness.applied.drain().collect();
    // In instance order: the same bytes for the same accumulators.
    applied.sort_unstable();
    if !replica.touched {
        return ReplicaGrads { tensors: Vec::new(), rows: None, applied };
    }
    replica.settle();
    let rows = replica.rows.take().map(|log| (log.width, log.rows));
    let tensors = match (&rows, replica.tensors.as_mut_slice()) {
        // A table's rows: the others' gradients are zero (a few rows of a large table
        // travel instead of all of it).
        (Some((width, rows)), [table]) if *width > 0 => {
            let mut sorted: Vec<usize> = rows.iter().copied().filter(|r| (r + 1) * width <= table.grad.len()).collect();
            sorted.sort_unstable();
            sorted.dedup();
            let mut values = Vec::with_capacity(sorted.len() * width);
            for &r in &sorted {
                let row = &mut table.grad[r * width..(r + 1) * width];
                values.extend_from_slice(row);
                row.iter_mut().for_each(|g| *g = 0.0);
            }
            replica.touched = false;
            replica.accumulated = false;
            replica.rows = Some(RowLog::default());
            return ReplicaGrads { tensors: vec![values], rows: Some((*width, sorted)), applied };
        }
        _ => replica
            .tensors
            .iter_mut()
            .map(|t| {
                let grad = t.grad.to_vec();
                t.grad.iter_mut().for_each(|g| *g = 0.0);
                grad
            })
            .collect(),
    };
    replica.touched = false;
    replica.accumulated = false;
    replica.rows = Some(RowLog::default());
    ReplicaGrads { tensors, rows, applied }
}

/// Adds a replica's gradients taken by [`take_replica_grads`] into its master's, as
/// [`gather_grads`] does in memory (the same sums in the same order).
pub(crate) fn add_replica_grads(master: &mut LiveGroup, grads: ReplicaGrads) {
    for (instance, version) in grads.applied {
        master.staleness.note_applied(instance, version);
    }
    if grads.tensors.is_empty() {
        return;
    }
    match (&grads.rows, grads.tensors.as_slice(), master.tensors.as_mut_slice()) {
        // A table's rows, row after row (see [`ReplicaGrads`]).
        (Some((width, rows)), [values], [table]) if *width > 0 && values.len() == rows.len() * width => {
            for (&r, x) in rows.iter().zip(values.chunks_exact(*width)) {
                if let Some(row) = table.grad.get_mut(r * width..(r + 1) * width) {
                    row.iter_mut().zip(x).for_each(|(g, x)| *g += *x);
                }
            }
        }
        _ => {
            for (m, r) in master.tensors.iter_mut().zip(&grads.tensors) {
                for (g, x) in m.grad.iter_mut().zip(r) {
                    *g += *x;
                }
            }
        }
    }
    master.touched = true;
    master.accumulated = true;
    match (&mut master.rows, grads.rows) {
        (Some(m), Some((width, rows))) => {
            m.width = width;
            m.rows.extend(rows);
        }
        _ => master.rows = None,
    }
}
