//! Instance data: the values a model's entry points take, loaded from files and checked
//! against the graph's input schema (`amp_ir::Schema`).
//!
//! In: a schema and data files. Out: [`Value`]s (one per instance, nested as the source
//! types are: records, sequences, enum variants with their fields) and [`Instance`]s,
//! the view the runtime evaluates `amp_ir::StateExpr` data paths on. Depends on `amp-ir`
//! (schema and the `InstanceData` trait), serde_json, rand for the generators, and dirs
//! for the platform's cache folder.
//!
//! Loaders, one module per format, each with a `read` (the [`lines`] of a file or of bytes,
//! taken as a stream: a limit reads no further than its instances), a `parse` (bytes in
//! memory, named as a file for errors) and a `load` (reads the file):
//! - [`jsonl`]: JSON Lines matching the input record (and a writer);
//! - [`ptb`]: PTB bracket trees (the SST format) with a [`Vocab`];
//! - [`csv`]: fixed-size records, one row each;
//! - [`sdf`]: SDF V2000 molecules as graphs;
//! - [`generate`]: seeded synthetic tasks for the examples;
//! - [`noise`]: a static input repeated over frames with Gaussian noise per frame;
//! - [`vectors`]: pretrained word vectors (GloVe / word2vec text) aligned with a [`Vocab`];
//! - [`catalog`]: the real data sets known by name (`digits`, `molecules:test`,
//!   `sst:train`), bundled in the repository or downloaded into the cache folder;
//! - [`unlabeled`]: the schema inference reads with (the labels the loss alone reads may
//!   be absent) and the instances of it made whole.
//!
//! Every loader checks what it builds against the schema, reports the first bad instance
//! as a [`DataError`] naming file, line and field, or with `skip_bad` skips bad instances
//! and counts them ([`Loaded::skipped`]). No input makes a loader panic.

pub mod catalog;
pub mod csv;
pub mod error;
pub mod generate;
pub mod instance;
pub mod jsonl;
pub mod lines;
pub mod noise;
pub mod ptb;
pub mod ranges;
pub mod sdf;
mod strict_json;
pub mod unlabeled;
pub mod value;
pub mod vectors;
pub mod vocab;

pub use error::{DataError, DataErrorKind, Loaded};
pub use instance::{Instance, PreparedSchema};
pub use value::{Tensor, Value};
pub use vocab::{Vocab, VocabOptions, VocabOrder};
