//! What a program embedding amprun (the Python package) gives a command in memory, in
//! place of the files the command line names, and what it gets back. Everything else (the
//! flags, their checks, the loaders, the executor) is the command line's own.

use crate::model::Model;
use amp_params::ParamSet;
use serde_json::Value;
use std::sync::atomic::AtomicBool;

/// What hears each metrics object a run writes.
pub type Listener = Box<dyn FnMut(&Value) + Send>;

/// Instances in memory: JSON Lines text, one instance per line, read by the loader that
/// reads a `.jsonl` file. Messages name the line `NAME:LINE` as they name a file's.
#[derive(Clone, Debug)]
pub struct Text {
    /// What messages call it (`data`, `valid`).
    pub name: String,
    pub jsonl: Vec<u8>,
}

/// A command's inputs held in memory; each one given replaces what its flag names.
#[derive(Default)]
pub struct Inputs<'a> {
    /// The compiled model, in place of compiling or loading the model's path.
    pub model: Option<&'a Model>,
    /// Parameters, in place of `--params` (eval, infer, grad) or the starting point of
    /// training (`--seed`, `--init`; `--resume` still reads the checkpoint).
    pub params: Option<&'a ParamSet>,
    /// In place of `--data`.
    pub data: Option<Text>,
    /// In place of `--valid`.
    pub valid: Option<Text>,
    /// Hears each metrics object (`--metrics`' lines) as the run writes it.
    pub on_metrics: Option<Listener>,
    /// Set to stop training after the epoch in progress, as Ctrl-C does on the command
    /// line.
    pub stop: Option<&'a AtomicBool>,
}

/// How a training run ended, with its parameters.
pub struct Trained {
    /// The parameters after the last epoch trained (the starting ones when nothing was).
    pub params: ParamSet,
    /// Every metrics object the run wrote, in order.
    pub metrics: Vec<Value>,
    /// The epoch after which a stop (`Inputs::stop`, Ctrl-C) ended the run.
    pub stopped_after: Option<u64>,
}
