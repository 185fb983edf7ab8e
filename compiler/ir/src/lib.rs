//! The AMP IR: a static dataflow graph whose nodes exchange forward and backward
//! messages made of a payload tensor and an integer state (see `docs/IR.md`).
//!
//! In: nothing of Amp's (this crate is shared by the compiler, which builds graphs, and
//! the runtime, which executes them; it depends on neither). Out: the graph types, the
//! verifier, the stable text form (print and parse, round-tripping exactly), the `.ampg`
//! file format, and Graphviz output. Invariant: the runtime executes only graphs the
//! verifier accepted; a graph read from a file is untrusted input.

pub mod ampg;
pub mod dot;
pub mod dropout;
pub mod limits;
pub mod order;
pub mod placement;
pub mod schema;
pub mod text;
pub mod units;
pub mod verify;
pub mod vocab;

mod graph;
mod op;
mod state;
mod values;

pub use schema::{DataTy, EnumSchema, FieldSchema, RecordSchema, Schema, VariantSchema};
pub use vocab::{BinaryFn, Elementwise, UnaryFn};

pub use graph::{Edge, Graph, Loc, Node};
pub use op::{LossBase, LossKind, Op, PayloadInt};
pub use state::{
    resolve_path, DataStep, FieldId, FieldRole, InstanceData, IntOp, ReduceFn, ResolvedStep, StateExpr, StateField,
};
pub use values::{ConstValue, Param, ParamInit, PayloadTy};
