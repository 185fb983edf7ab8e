//! Instance data: the values a model's entry points take, loaded from files and checked
//! against the graph's input schema (`amp_ir::Schema`).
//!
//! In: a schema and data files. Out: [`Value`]s (one per instance, nested as the source
//! types are: records, sequences, enum variants with their fields) and [`Instance`]s,
//! the view the runtime evaluates `amp_ir::StateExpr` data paths on. Depends on `amp-ir`
//! (schema and the `InstanceData` trait) and serde_json.

pub mod value;

pub use value::{Tensor, Value};
