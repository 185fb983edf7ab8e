//! What the executor needs from an instance: the ints that state expressions read
//! (`amp_ir::InstanceData`) and the f32 leaves that `read` nodes load.

use amp_ir::{InstanceData, ResolvedStep};

/// An instance the executor can run. Implemented for `amp_data::Instance`; tests may
/// implement it over their own values.
pub trait ExecInstance: InstanceData {
    /// The f32 leaf (a tensor or a scalar) at `path`, row-major; `None` when the path does
    /// not lead to one.
    fn f32_at(&self, path: &[ResolvedStep]) -> Option<&[f32]>;

    /// The instance's index in its data set, which dropout's masks hash (so that a
    /// shuffled epoch masks an instance as the reference does); `None`: its position in
    /// the run's list of instances.
    fn data_index(&self) -> Option<u64> {
        None
    }

    /// How much work the instance is beside the others of its run, at least 1 (1: all
    /// alike): copies of the graph share a window's instances by it
    /// (`sched::admission::balanced`).
    fn work(&self) -> usize {
        1
    }

    /// The ints at `prefix`, `Index(r)`, `suffix` for each row `r` in `0..rows` (a row
    /// op's index at every row); `None` if any is missing. The row ops call it once per
    /// batch; an instance that walks the prefix once overrides it.
    fn ints_along(&self, prefix: &[ResolvedStep], rows: usize, suffix: &[ResolvedStep]) -> Option<Vec<i64>> {
        let mut path = prefix.to_vec();
        path.push(ResolvedStep::Index(0));
        path.extend_from_slice(suffix);
        (0..rows)
            .map(|r| {
                path[prefix.len()] = ResolvedStep::Index(i64::try_from(r).ok()?);
                self.int_at(&path)
            })
            .collect()
    }
}

impl ExecInstance for amp_data::Instance {
    fn f32_at(&self, path: &[ResolvedStep]) -> Option<&[f32]> {
        self.tensor_at(path).map(|t| t.data.as_slice())
    }

    fn work(&self) -> usize {
        self.size()
    }

    fn ints_along(&self, prefix: &[ResolvedStep], rows: usize, suffix: &[ResolvedStep]) -> Option<Vec<i64>> {
        amp_data::Instance::ints_along(self, prefix, rows, suffix)
    }
}
