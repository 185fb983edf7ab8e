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
}

impl ExecInstance for amp_data::Instance {
    fn f32_at(&self, path: &[ResolvedStep]) -> Option<&[f32]> {
        self.tensor_at(path).map(|t| t.data.as_slice())
    }
}
