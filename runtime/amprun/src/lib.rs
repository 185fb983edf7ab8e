//! The Amp runtime as a library: every command of `amprun` (its crate header, or
//! docs/amprun.md, says what each does), for the `amprun` binary and for programs that
//! embed it (the Python package, `python/`). The binary parses its flags with [`cli::Cli`]
//! and calls [`run`]; an embedding parses the same flags and calls the commands with
//! [`memory::Inputs`] (a compiled model, parameters and instances held in memory), so both
//! run one implementation.

mod batches;
pub mod cli;
mod cluster;
pub mod commands;
mod data;
pub mod datasets;
mod download;
mod embeddings;
pub mod failure;
mod frames;
mod html_report;
pub mod memory;
pub mod model;
pub mod placement;
mod report;
mod schedule;
pub mod setup;
mod staleness;
mod start;
mod steps;
mod tensorboard;
pub mod train;

use cli::Command;

/// Runs a parsed command (data set names already resolved to files), as the binary does.
pub fn run(command: &Command) -> Result<(), failure::Failure> {
    let exec = match command {
        Command::Train(args) => &args.exec,
        Command::Eval(args) | Command::Infer(args) => &args.exec,
        Command::Grad(args) => &args.exec,
        Command::Data(data) => return datasets::run(data),
        Command::Report(args) => return html_report::run(args),
    };
    let result = cluster::prepare(exec).and_then(|()| match command {
        Command::Train(args) => train::run(args),
        Command::Eval(args) => commands::eval(args),
        Command::Infer(args) => commands::infer(args),
        Command::Grad(args) => commands::grad(args),
        Command::Data(data) => datasets::run(data),
        Command::Report(args) => html_report::run(args),
    });
    cluster::finish(result)
}
