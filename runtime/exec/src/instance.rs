//! What the executor needs from an instance: the ints that state expressions read
//! (`amp_ir::InstanceData`) and the f32 leaves that `read` nodes load.

use amp_ir::{InstanceData, ResolvedStep};

/// An instance the executor can run. Implemented for `amp_data::Instance`; tests may
/// implement it over their own values.
pub trait ExecInstance: InstanceData {
    /// The f32 leaf (a tensor or a scalar) at `path`, row-major; `None` when the path does
    /// not lead to one.
    fn f32_at(&self, path: &[ResolvedStep]) -> Option<&[f32]>;
}

impl ExecInstance for amp_data::Instance {
    fn f32_at(&self, path: &[ResolvedStep]) -> Option<&[f32]> {
        self.tensor_at(path).map(|t| t.data.as_slice())
    }
}
