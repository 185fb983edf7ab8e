//! `ampc fmt` as a user and CI run it: in place, `--check`, stdin to stdout, files with
//! syntax errors left alone, what is not a regular UTF-8 file refused.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const MESSY: &str = "// a model\nmodel M(h:int=4){\n  param l=Linear(h,h);  // the layer\n\n\n  fn forward(x:f32[h])->f32[h]{l(x)}\n    fn loss(x:f32[h])->f32{sum(forward(x))}\n}";
const FORMATTED: &str = "// a model\nmodel M(h: int = 4) {\n    param l = Linear(h, h); // the layer\n\n    fn forward(x: f32[h]) -> f32[h] { l(x) }\n    fn loss(x: f32[h]) -> f32 { sum(forward(x)) }\n}\n";
const BROKEN: &str = "model M {\n  fn forward(x: f32) -> f32 { x +  }\n}\n";

fn ampc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ampc")).args(args).output().expect("ampc runs")
}

fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("ampc-fmt-").tempdir().expect("temp dir")
}

fn write(dir: &Path, name: &str, text: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write temp file");
    path
}

fn arg(path: &Path) -> &str {
    path.to_str().expect("utf-8 temp path")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The names in `dir`, sorted: a leftover temporary file would show here.
fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("list dir")
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect();
    names.sort();
    names
}

#[test]
fn formats_files_in_place_and_leaves_formatted_ones_alone() {
    let dir = temp_dir();
    let messy = write(dir.path(), "messy.amp", MESSY.as_bytes());
    let clean = write(dir.path(), "clean.amp", FORMATTED.as_bytes());
    let out = ampc(&["fmt", arg(&messy), arg(&clean)]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(out.stdout.is_empty());
    assert_eq!(std::fs::read_to_string(&messy).expect("read back"), FORMATTED);
    assert_eq!(std::fs::read_to_string(&clean).expect("read back"), FORMATTED);
    assert_eq!(entries(dir.path()), ["clean.amp", "messy.amp"], "no temporary file is left");
}

#[test]
fn check_lists_the_files_that_would_change_and_changes_nothing() {
    let dir = temp_dir();
    let messy = write(dir.path(), "messy.amp", MESSY.as_bytes());
    let clean = write(dir.path(), "clean.amp", FORMATTED.as_bytes());
    let out = ampc(&["fmt", "--check", arg(&messy), arg(&clean)]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stdout(&out), format!("{}\n", messy.display()));
    assert_eq!(std::fs::read_to_string(&messy).expect("read back"), MESSY);

    let out = ampc(&["fmt", "--check", arg(&clean)]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(out.stdout.is_empty() && out.stderr.is_empty());
}

fn fmt_stdin(input: &str, extra: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ampc"))
        .arg("fmt")
        .args(extra)
        .arg("-")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ampc runs");
    child.stdin.take().expect("piped stdin").write_all(input.as_bytes()).expect("write stdin");
    child.wait_with_output().expect("ampc finishes")
}

#[test]
fn a_dash_reads_stdin_and_writes_stdout() {
    let out = fmt_stdin(MESSY, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), FORMATTED);

    let out = fmt_stdin(MESSY, &["--check"]);
    assert_eq!((out.status.code(), stdout(&out).as_str()), (Some(1), "<stdin>\n"));

    let out = fmt_stdin(BROKEN, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty(), "nothing is written for a broken file");
    assert!(stderr(&out).contains("E0010"), "{}", stderr(&out));

    let out = ampc(&["fmt", "-", "other.amp"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_file_with_syntax_errors_is_refused_with_its_diagnostics_and_left_untouched() {
    let dir = temp_dir();
    let broken = write(dir.path(), "broken.amp", BROKEN.as_bytes());
    let messy = write(dir.path(), "messy.amp", MESSY.as_bytes());
    let out = ampc(&["fmt", "--color", "never", arg(&broken), arg(&messy)]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("E0010") && err.contains("broken.amp:2:"), "{err}");
    assert!(err.contains("was not formatted"), "{err}");
    assert_eq!(std::fs::read_to_string(&broken).expect("read back"), BROKEN);
    assert_eq!(std::fs::read_to_string(&messy).expect("read back"), FORMATTED, "the other files are formatted");

    let out = ampc(&["fmt", "--message-format", "json", arg(&broken)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).contains("\"code\":\"E0010\""), "{}", stdout(&out));
}

#[test]
fn directories_missing_files_and_non_utf8_files_are_refused() {
    let dir = temp_dir();
    let out = ampc(&["fmt", arg(dir.path())]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("not a regular file"), "{}", stderr(&out));

    let out = ampc(&["fmt", arg(&dir.path().join("missing.amp"))]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("cannot read"), "{}", stderr(&out));

    // Invalid UTF-8 inside a comment lexes; a lossy rewrite would destroy those bytes.
    let latin1 = b"// caf\xe9\nmodel  M {}\n";
    let path = write(dir.path(), "latin1.amp", latin1);
    let out = ampc(&["fmt", arg(&path)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("not UTF-8"), "{}", stderr(&out));
    assert_eq!(std::fs::read(&path).expect("read back"), latin1);
}

#[cfg(unix)]
#[test]
fn a_symbolic_link_stays_a_link_and_its_target_is_formatted() {
    let dir = temp_dir();
    let target = write(dir.path(), "target.amp", MESSY.as_bytes());
    let link = dir.path().join("link.amp");
    std::os::unix::fs::symlink(&target, &link).expect("symlink");
    let out = ampc(&["fmt", arg(&link)]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(std::fs::symlink_metadata(&link).expect("link").file_type().is_symlink());
    assert_eq!(std::fs::read_to_string(&target).expect("read back"), FORMATTED);
}
