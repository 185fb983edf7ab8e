//! `ampc`, the Amp compiler's command line: a thin shell over the pure compiler crates
//! (the partition planner `amp-plan` among them: `ampc compile --workers N` stores a plan
//! in the `.ampg` file, `--emit plan` prints it, `-v` shows it as a table). It reads and
//! writes files, parses `-D` overrides and prints diagnostics; it decides nothing else.
//!
//! Exit status: 0 when no errors (warnings allowed), 1 when any file has errors (or, for
//! `ampc fmt --check`, would change), 2 on a usage error (bad flags, unreadable file). `ampc lsp` exits with 0 after `shutdown` and
//! `exit`, 1 otherwise, as the protocol asks.

mod compile;
mod fmt;
mod output;
mod rollout;

use amp_diagnostics::{render_human, render_json, Diagnostic, SourceMap};
use amp_sema::{check_program, DiskFiles, Options};
use clap::{Parser, Subcommand, ValueEnum};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "ampc", version, about = "The Amp compiler for dynamic neural networks")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub(crate) enum MessageFormat {
    /// Rendered for people, with source snippets.
    Human,
    /// One JSON object per diagnostic per line.
    Json,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
enum ColorChoice {
    Auto,
    Always,
    Never,
}

#[derive(Subcommand)]
enum Command {
    /// Check `.amp` files for errors: names, types, shapes, control flow, recursion.
    Check {
        /// The files to check; each is a separate program.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Override a hyperparameter or constant: `-D hidden=256`.
        #[arg(short = 'D', value_name = "NAME=VALUE", value_parser = amp_sema::parse_define)]
        define: Vec<(String, i64)>,
        /// How to print diagnostics.
        #[arg(long, value_enum, default_value = "human")]
        message_format: MessageFormat,
        /// When to colour human-readable output.
        #[arg(long, value_enum, default_value = "auto")]
        color: ColorChoice,
    },
    /// Compile a model, or a network rolled out over frames, to an AMP dataflow graph:
    /// `model.ampg`, or IR text, JSON or dot.
    Compile {
        file: PathBuf,
        /// Where to write the `.ampg` file (default: FILE with the extension `.ampg`,
        /// unless `--emit` prints the graph instead); `-` is stdout.
        #[arg(short = 'o', long)]
        output: Option<PathBuf>,
        /// Print the graph to stdout in this form.
        #[arg(long, value_enum)]
        emit: Option<compile::Emit>,
        /// Override a hyperparameter or constant: `-D hidden=256`.
        #[arg(short = 'D', value_name = "NAME=VALUE", value_parser = amp_sema::parse_define)]
        define: Vec<(String, i64)>,
        /// The model to compile when the file defines several (default: the first).
        #[arg(long, conflicts_with = "network")]
        model: Option<String>,
        /// Compile this network rolled out over frames instead of a model (docs/rollouts.md).
        #[arg(long)]
        network: Option<String>,
        /// The network's rollout pattern: `streaming`, `sequential` or the sequential
        /// pattern with edges overridden (`a->b=1,b->b=0`).
        #[arg(long, value_name = "streaming|sequential|EDGES", default_value = "sequential", requires = "network")]
        pattern: String,
        /// How many frames the graph computes per instance (default: as many as the
        /// instance has).
        #[arg(long, value_name = "F", requires = "network",
              value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
        frames: Option<u32>,
        /// Plan the partition of the graph on N workers: stored in the `.ampg` file,
        /// printed by `--emit plan`, shown as a table by `-v`.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
        workers: Option<u16>,
        /// Refine the plan's cost model with a profile written by `amprun train --profile`.
        #[arg(long, value_name = "FILE", requires = "workers")]
        profile: Option<PathBuf>,
        /// The plan's training setup, as `amprun train` will run it: a parameter update
        /// every M instances (default 16, amprun's)...
        #[arg(long, value_name = "M", default_value_t = 16, requires = "workers",
              value_parser = clap::value_parser!(u64).range(1..))]
        min_update_frequency: u64,
        /// ...with this optimizer (`sgd`: plain SGD, no weight decay, whose updates touch
        /// only what instances used). amprun re-plans when it runs another setup.
        #[arg(long, value_enum, default_value = "sgd", requires = "workers")]
        optimizer: compile::Optimizer,
        /// ...asynchronously (amprun's `--async`): copies of the graph do not wait for each
        /// other at update boundaries.
        #[arg(long = "async", requires = "workers")]
        asynchronous: bool,
        /// ...with its instances in flight (amprun's `--max-active-keys`; default M, as
        /// amprun's), which hide the latency of a link between processes.
        #[arg(long, value_name = "K", requires = "workers",
              value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
        max_active_keys: Option<u64>,
        /// ...with the workers split over P processes or hosts (amprun's `--processes`;
        /// process p runs a contiguous block of the workers): the plan charges an edge cut
        /// between processes the link below (docs/distributed.md).
        #[arg(long, alias = "hosts", value_name = "P", default_value_t = 1, requires = "workers",
              value_parser = clap::value_parser!(u16).range(1..=256))]
        processes: u16,
        /// One-way latency of the link between processes, in µs (default 50: TCP over
        /// 10 Gb/s Ethernet).
        #[arg(long, value_name = "US", requires = "workers", value_parser = compile::parse_link_value)]
        link_latency_us: Option<f64>,
        /// Bandwidth of each process's link, in megabits per second each way (default
        /// 10000: 10 Gb/s Ethernet).
        #[arg(long, value_name = "MBPS", requires = "workers", value_parser = compile::parse_link_value)]
        link_bandwidth_mbps: Option<f64>,
        /// Report what each pass changed (and, with --workers, the plan as a table).
        #[arg(short, long)]
        verbose: bool,
        /// Lower every `map` per element (one message per element) even where its body
        /// is row-wise and would be batched (one message per collection, `gather_rows`,
        /// `mask_rows`): to compare the two lowerings.
        #[arg(long)]
        per_element_maps: bool,
        #[arg(long, value_enum, default_value = "human")]
        message_format: MessageFormat,
        #[arg(long, value_enum, default_value = "auto")]
        color: ColorChoice,
    },
    /// Analyse a network's rollout: a pattern's validity, inference tableau and
    /// inference factor, or every valid pattern (see docs/rollouts.md).
    Rollout {
        file: PathBuf,
        /// The network to analyse when the file defines several (default: the first).
        #[arg(long)]
        network: Option<String>,
        /// `streaming` (every edge delayed), `sequential` (only recurrent edges delayed),
        /// or the sequential pattern with edges overridden: `a->b=1,b->b=0`.
        #[arg(long, value_name = "streaming|sequential|EDGES", default_value = "sequential")]
        pattern: String,
        /// The tableau's frames are 0..=W.
        #[arg(long, value_name = "W", default_value_t = 1,
              value_parser = clap::value_parser!(u64).range(0..=amp_sema::rollout::MAX_WINDOW as u64))]
        window: u64,
        /// List every valid pattern with its inference factor instead.
        #[arg(long, conflicts_with_all = ["pattern", "window"])]
        enumerate: bool,
        /// Override a hyperparameter or constant: `-D h=64`.
        #[arg(short = 'D', value_name = "NAME=VALUE", value_parser = amp_sema::parse_define)]
        define: Vec<(String, i64)>,
        /// How to print the analysis and diagnostics.
        #[arg(long, value_enum, default_value = "human")]
        message_format: MessageFormat,
        #[arg(long, value_enum, default_value = "auto")]
        color: ColorChoice,
    },
    /// Format `.amp` files in place in the canonical layout (see docs/fmt.md).
    Fmt {
        /// The files to format; `-` reads stdin and writes the result to stdout.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Change nothing; list the files that would change and exit with 1 if any would.
        #[arg(long)]
        check: bool,
        /// How to print the diagnostics of a file that does not parse.
        #[arg(long, value_enum, default_value = "human")]
        message_format: MessageFormat,
        #[arg(long, value_enum, default_value = "auto")]
        color: ColorChoice,
    },
    /// Run the language server on stdio, for editors (see docs/editors.md).
    Lsp,
}

/// Prints diagnostics in the chosen format: JSON lines on stdout, rendered text on stderr.
pub(crate) struct Printer {
    format: MessageFormat,
    color: bool,
}

impl Printer {
    fn new(format: MessageFormat, color: ColorChoice) -> Printer {
        let color = match color {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
        };
        Printer { format, color }
    }

    pub(crate) fn print(&self, map: &SourceMap, diagnostics: &[Diagnostic]) -> std::io::Result<()> {
        match self.format {
            MessageFormat::Json => std::io::stdout().write_all(render_json(map, diagnostics).as_bytes()),
            MessageFormat::Human => std::io::stderr().write_all(render_human(map, diagnostics, self.color).as_bytes()),
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Check { files, define, message_format, color } => {
            check(&files, define, &Printer::new(message_format, color))
        }
        Command::Compile {
            file,
            output,
            emit,
            define,
            model,
            network,
            pattern,
            frames,
            workers,
            profile,
            min_update_frequency,
            asynchronous,
            optimizer,
            max_active_keys,
            processes,
            link_latency_us,
            link_bandwidth_mbps,
            verbose,
            per_element_maps,
            message_format,
            color,
        } => compile::compile(
            compile::CompileArgs {
                file,
                output,
                emit,
                defines: define,
                model,
                network: network.map(|name| compile::NetworkArgs {
                    name,
                    pattern,
                    frames: frames.map_or(amp_lower::Frames::FromData, amp_lower::Frames::Fixed),
                }),
                workers: workers.map(usize::from),
                profile,
                assumptions: {
                    let defaults = amp_plan::Assumptions::default();
                    amp_plan::Assumptions {
                        update_every: min_update_frequency as f64,
                        plain_sgd: optimizer == compile::Optimizer::Sgd,
                        synchronous: !asynchronous,
                        in_flight: max_active_keys.unwrap_or(min_update_frequency) as f64,
                        processes: usize::from(processes),
                        link_latency_us: link_latency_us.unwrap_or(defaults.link_latency_us),
                        link_bandwidth_mbps: link_bandwidth_mbps.unwrap_or(defaults.link_bandwidth_mbps),
                        ..defaults
                    }
                },
                per_element_maps,
                verbose,
            },
            &Printer::new(message_format, color),
        ),
        Command::Rollout { file, network, pattern, window, enumerate, define, message_format, color } => {
            rollout::rollout(
                rollout::RolloutArgs {
                    file,
                    network,
                    pattern,
                    // At most MAX_WINDOW, checked by clap.
                    window: usize::try_from(window).unwrap_or(usize::MAX),
                    enumerate,
                    defines: define,
                },
                &Printer::new(message_format, color),
            )
        }
        Command::Fmt { files, check, message_format, color } => {
            fmt::fmt(&files, check, &Printer::new(message_format, color))
        }
        Command::Lsp => match amp_lsp::run_stdio() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("ampc lsp: {e}");
                ExitCode::from(1)
            }
        },
    }
}

/// Reads and checks a source file, printing its diagnostics: the source map, the file's id
/// and a program without errors, or the exit code (2: unreadable or unprintable, 1: errors).
pub(crate) fn check_file(
    file: &std::path::Path,
    defines: &[(String, i64)],
    printer: &Printer,
) -> Result<(SourceMap, amp_diagnostics::FileId, amp_sema::Checked), ExitCode> {
    let text = read_source(file).ok_or(ExitCode::from(2))?;
    let mut map = SourceMap::new();
    let main = map.add(file.display().to_string(), text);
    let checked = check_program(&mut map, main, &Options { defines: defines.to_vec() }, &DiskFiles);
    if printer.print(&map, &checked.diagnostics).is_err() {
        return Err(ExitCode::from(2));
    }
    if checked.has_errors() {
        return Err(ExitCode::from(1));
    }
    Ok((map, main, checked))
}

/// Reads a source file, invalid UTF-8 replaced (the lexer reports it); `None` after
/// printing why the file cannot be read (a usage error).
pub(crate) fn read_source(path: &std::path::Path) -> Option<String> {
    match amp_ir::limits::read_bounded(path, amp_ir::limits::MAX_SOURCE_BYTES) {
        Ok(bytes) => Some(String::from_utf8_lossy(&bytes).into_owned()),
        Err(e) => {
            eprintln!("error: cannot read `{}`: {e}", path.display());
            None
        }
    }
}

fn check(files: &[PathBuf], defines: Vec<(String, i64)>, printer: &Printer) -> ExitCode {
    let options = Options { defines };
    let mut any_errors = false;
    let (mut errors, mut warnings) = (0usize, 0usize);
    for path in files {
        let Some(text) = read_source(path) else { return ExitCode::from(2) };
        let mut map = SourceMap::new();
        let main = map.add(path.display().to_string(), text);
        let checked = check_program(&mut map, main, &options, &DiskFiles);
        any_errors |= checked.has_errors();
        for d in &checked.diagnostics {
            match d.severity() {
                amp_diagnostics::Severity::Error => errors += 1,
                amp_diagnostics::Severity::Warning => warnings += 1,
            }
        }
        if printer.print(&map, &checked.diagnostics).is_err() {
            return ExitCode::from(2);
        }
    }
    if printer.format == MessageFormat::Human && (errors > 0 || warnings > 0) {
        eprintln!(
            "{errors} error{}, {warnings} warning{}",
            if errors == 1 { "" } else { "s" },
            if warnings == 1 { "" } else { "s" }
        );
    }
    if any_errors {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
