//! `ampc fmt`: the formatter's shell. Reads files (or stdin), asks `amp_fmt::format` for
//! the canonical layout and writes it back in place, prints it, or only reports which
//! files it would change (`--check`).
//!
//! Exit status: 0 when every file was formatted (or, with `--check`, already was); 1 when
//! a file has lexing or syntax errors (it is left untouched, its diagnostics printed) or,
//! with `--check`, would change; 2 when a file cannot be read or written, is not a regular
//! file or is not UTF-8.

use crate::Printer;
use amp_diagnostics::SourceMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The outcome of one file, worst last: the exit status is the worst over all files.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    Done,
    /// Would change (`--check`) or has syntax errors.
    Failed,
    /// Could not be read or written.
    IoError,
}

pub(crate) fn fmt(files: &[PathBuf], check: bool, printer: &Printer) -> ExitCode {
    let stdin = Path::new("-");
    if files.iter().any(|f| f == stdin) && files.len() > 1 {
        eprintln!("error: `-` (stdin to stdout) cannot be combined with file names");
        return ExitCode::from(2);
    }
    let mut worst = Outcome::Done;
    for path in files {
        let outcome = if path == stdin { fmt_stdin(check, printer) } else { fmt_file(path, check, printer) };
        worst = worst.max(outcome);
    }
    match worst {
        Outcome::Done => ExitCode::SUCCESS,
        Outcome::Failed => ExitCode::from(1),
        Outcome::IoError => ExitCode::from(2),
    }
}

/// The canonical layout of `text`, or `None` after printing its diagnostics.
fn formatted(name: &str, text: &str, printer: &Printer) -> Option<String> {
    let mut map = SourceMap::new();
    let file = map.add(name, text);
    match amp_fmt::format(file, text) {
        Ok(formatted) => Some(formatted),
        Err(refused) => {
            // Printing can fail only on a closed stderr/stdout; the status says enough.
            let _ = printer.print(&map, &refused.diagnostics);
            eprintln!("error: `{name}` has syntax errors and was not formatted");
            None
        }
    }
}

fn fmt_stdin(check: bool, printer: &Printer) -> Outcome {
    let mut bytes = Vec::new();
    if let Err(e) = std::io::stdin().read_to_end(&mut bytes) {
        eprintln!("error: cannot read stdin: {e}");
        return Outcome::IoError;
    }
    let Ok(text) = String::from_utf8(bytes) else {
        eprintln!("error: stdin is not UTF-8");
        return Outcome::IoError;
    };
    let Some(output) = formatted("<stdin>", &text, printer) else { return Outcome::Failed };
    if check {
        if output == text {
            return Outcome::Done;
        }
        println!("<stdin>");
        return Outcome::Failed;
    }
    match std::io::stdout().write_all(output.as_bytes()) {
        Ok(()) => Outcome::Done,
        Err(e) => {
            eprintln!("error: cannot write stdout: {e}");
            Outcome::IoError
        }
    }
}

fn fmt_file(path: &Path, check: bool, printer: &Printer) -> Outcome {
    let name = path.display().to_string();
    // Through a symbolic link to the file it names, so the link stays a link.
    let target = match std::fs::canonicalize(path).and_then(|t| std::fs::metadata(&t).map(|m| (t, m))) {
        Ok((target, meta)) if meta.is_file() => target,
        Ok(_) => {
            eprintln!("error: `{name}` is not a regular file");
            return Outcome::IoError;
        }
        Err(e) => {
            eprintln!("error: cannot read `{name}`: {e}");
            return Outcome::IoError;
        }
    };
    let text = match std::fs::read(&target).map(String::from_utf8) {
        Ok(Ok(text)) => text,
        // Never rewritten: a lossy decoding would replace the bytes it could not read.
        Ok(Err(_)) => {
            eprintln!("error: `{name}` is not UTF-8");
            return Outcome::IoError;
        }
        Err(e) => {
            eprintln!("error: cannot read `{name}`: {e}");
            return Outcome::IoError;
        }
    };
    let Some(output) = formatted(&name, &text, printer) else { return Outcome::Failed };
    if output == text {
        return Outcome::Done;
    }
    if check {
        println!("{name}");
        return Outcome::Failed;
    }
    let permissions = std::fs::metadata(&target).map(|m| m.permissions());
    match permissions.and_then(|p| crate::output::replace_file(&target, output.as_bytes(), Some(p))) {
        Ok(()) => Outcome::Done,
        Err(e) => {
            eprintln!("error: cannot write `{name}`: {e}");
            Outcome::IoError
        }
    }
}
