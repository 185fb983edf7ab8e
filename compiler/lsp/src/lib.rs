//! The Amp language server, `ampc lsp`: the third printer of Amp's diagnostics, plus hover,
//! go-to-definition, document symbols, completion, references, rename, semantic tokens
//! and the other requests in `handlers`.
//!
//! In: JSON-RPC messages on stdin (LSP over `lsp-server`), the documents' text with full or
//! incremental sync. Out: `publishDiagnostics` notifications and answers to requests on
//! stdout. Every change re-checks the whole document with [`amp_sema::check_program`]
//! (milliseconds on the canonical examples) and the result is cached per document for the
//! requests that follow; nothing is computed lazily or in the background.
//!
//! Depends on `amp-sema` (the checker: diagnostics, `references`, `expr_types`,
//! `symbols`), `amp-diagnostics` (spans, UTF-16 positions) and `amp-stdlib` (whose sources
//! are written once to a cache folder so that definitions in `std::nn` have a file URI).
//! Only this crate knows LSP types; the compiler crates stay pure and never see them.
//!
//! Layout: `transport` turns stdin's bytes into messages and messages into stdout's;
//! `server` runs the loop and dispatches messages; `documents` keeps one open file and its
//! last analysis; `workspace` keeps the open files, reads the modules they import (open
//! buffers before the disk) and finds the files of a project; `convert` turns spans, positions and diagnostics into
//! their LSP forms; `stdlib_files` materialises the standard library; `error_pages`
//! picks where diagnostic codes link to; `handlers` answers hover, definition, symbols
//! and completion from a cached analysis, and formatting (with `amp-fmt`).
//!
//! Robustness: no bytes a client can send make the server panic or stop. `transport`
//! frames messages itself with bounded headers and a bounded `Content-Length`
//! ([`MAX_CONTENT_LENGTH`]); a body that is not JSON, not an object or has no method gets
//! a `ParseError`/`InvalidRequest` answer where its id can be read, else a line on
//! stderr, and the next message is read. A request whose parameters do not deserialize
//! gets an `InvalidParams` error response, an unknown one `MethodNotFound`. Only the end
//! of stdin or `exit` ends the server.

mod convert;
mod documents;
mod error_pages;
mod handlers;
mod server;
mod stdlib_files;
mod transport;
mod workspace;

pub use server::{run_stdio, ServerError};
pub use transport::{serve_bytes, MAX_CONTENT_LENGTH};
