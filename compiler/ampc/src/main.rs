//! `ampc`, the Amp compiler's command line: a thin shell over the pure compiler crates.
//! It reads files, parses `-D` overrides and prints diagnostics; it decides nothing else.
//!
//! Exit status: 0 when no errors (warnings allowed), 1 when any file has errors, 2 on a
//! usage error (bad flags, unreadable file). `ampc lsp` exits with 0 after `shutdown` and
//! `exit`, 1 otherwise, as the protocol asks.

use amp_diagnostics::{render_human, render_json, SourceMap};
use amp_sema::{check_program, Options};
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
enum MessageFormat {
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
        #[arg(short = 'D', value_name = "NAME=VALUE", value_parser = parse_define)]
        define: Vec<(String, i64)>,
        /// How to print diagnostics.
        #[arg(long, value_enum, default_value = "human")]
        message_format: MessageFormat,
        /// When to colour human-readable output.
        #[arg(long, value_enum, default_value = "auto")]
        color: ColorChoice,
    },
    /// Run the language server on stdio, for editors (see docs/editors.md).
    Lsp,
}

fn parse_define(text: &str) -> Result<(String, i64), String> {
    let (name, value) = text.split_once('=').ok_or_else(|| format!("expected NAME=VALUE, got `{text}`"))?;
    let name = name.trim();
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(format!("`{name}` is not a hyperparameter name"));
    }
    let value = value.trim().parse::<i64>().map_err(|_| format!("`{value}` is not an integer"))?;
    Ok((name.to_string(), value))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Check { files, define, message_format, color } => check(&files, define, message_format, color),
        Command::Lsp => match amp_lsp::run_stdio() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("ampc lsp: {e}");
                ExitCode::from(1)
            }
        },
    }
}

fn check(files: &[PathBuf], defines: Vec<(String, i64)>, format: MessageFormat, color: ColorChoice) -> ExitCode {
    let options = Options { defines };
    let color = match color {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
    };
    let mut any_errors = false;
    let (mut errors, mut warnings) = (0usize, 0usize);
    for path in files {
        let text = match std::fs::read(path) {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(e) => {
                eprintln!("error: cannot read `{}`: {e}", path.display());
                return ExitCode::from(2);
            }
        };
        let mut map = SourceMap::new();
        let main = map.add(path.display().to_string(), text);
        let checked = check_program(&mut map, main, &options);
        any_errors |= checked.has_errors();
        for d in &checked.diagnostics {
            match d.severity() {
                amp_diagnostics::Severity::Error => errors += 1,
                amp_diagnostics::Severity::Warning => warnings += 1,
            }
        }
        let out = match format {
            MessageFormat::Human => render_human(&map, &checked.diagnostics, color),
            MessageFormat::Json => render_json(&map, &checked.diagnostics),
        };
        // JSON goes to stdout for tools; rendered diagnostics to stderr, like rustc.
        let result = match format {
            MessageFormat::Json => std::io::stdout().write_all(out.as_bytes()),
            MessageFormat::Human => std::io::stderr().write_all(out.as_bytes()),
        };
        if result.is_err() {
            return ExitCode::from(2);
        }
    }
    if format == MessageFormat::Human && (errors > 0 || warnings > 0) {
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
