//! `ampc check` as a user runs it: exit statuses, JSON output, `-D` overrides.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn ampc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ampc")).args(args).output().expect("ampc runs")
}

fn example(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples").join(name).display().to_string()
}

/// `text` written to `NAME` in a fresh temporary directory, removed when the first value
/// is dropped.
fn temp_file(name: &str, text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new().prefix("ampc-cli-").tempdir().expect("temp dir");
    let path = dir.path().join(name);
    std::fs::write(&path, text).expect("write temp file");
    (dir, path)
}

fn json_lines(out: &Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect()
}

#[test]
fn clean_examples_exit_zero_and_print_nothing() {
    let files: Vec<String> =
        ["list_reduce.amp", "tree_lstm.amp", "ggsnn.amp", "moe.amp", "mlp.amp"].iter().map(|f| example(f)).collect();
    let mut args = vec!["check"];
    args.extend(files.iter().map(String::as_str));
    let out = ampc(&args);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stderr.is_empty() && out.stdout.is_empty());
}

#[test]
fn errors_exit_one_with_json_diagnostics() {
    let (_dir, path) = temp_file("bad.amp", "record R { x: f32[4] }\nmodel M {\n    param l = Linear(3, 2);\n    fn forward(r: R) -> f32[2] { l(r.x) }\n    fn loss(r: R) -> f32 { sum(forward(r)) }\n}\n");
    let out = ampc(&["check", "--message-format", "json", path.to_str().expect("utf-8 path")]);
    assert_eq!(out.status.code(), Some(1));
    let diags = json_lines(&out);
    assert_eq!(diags.len(), 1);
    let d = &diags[0];
    assert_eq!(d["code"], "E0301");
    assert_eq!(d["severity"], "error");
    assert_eq!(d["start"]["line"], 4);
    assert_eq!(d["start"]["column"], 36);
    assert_eq!(d["end"]["column"], 39);
    assert_eq!(d["byte_end"].as_u64().unwrap() - d["byte_start"].as_u64().unwrap(), 3);
    assert!(d["file"].as_str().unwrap().ends_with("bad.amp"));
    let labels = d["labels"].as_array().expect("labels");
    assert!(labels.iter().any(|l| l["message"].as_str().unwrap().contains("declared as `Linear(3, 2)`")));
    assert!(d["message"].as_str().unwrap().contains("f32[4]"));
}

#[test]
fn human_output_goes_to_stderr_with_a_summary() {
    let (_dir, path) = temp_file("warn.amp", "record R { x: f32[4], label: int }\nmodel M {\n    param l = Linear(4, 2);\n    fn forward(r: R) -> f32[2] { let unused = 1; l(r.x) }\n    fn loss(r: R) -> f32 { cross_entropy(forward(r), r.label) }\n}\n");
    let out = ampc(&["check", "--color", "never", path.to_str().expect("utf-8 path")]);
    assert_eq!(out.status.code(), Some(0), "warnings alone do not fail the check");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("[W0001] Warning: unused variable `unused`"), "{stderr}");
    assert!(stderr.contains("0 errors, 1 warning"), "{stderr}");
}

#[test]
fn overrides_reach_the_shapes() {
    let out = ampc(&["check", "--message-format", "json", "-D", "hidden=0", &example("list_reduce.amp")]);
    assert_eq!(out.status.code(), Some(1));
    let codes: Vec<String> = json_lines(&out).iter().map(|d| d["code"].as_str().unwrap().to_string()).collect();
    assert!(!codes.is_empty() && codes.iter().all(|c| c == "E0307"), "{codes:?}");

    let out = ampc(&["check", "--message-format", "json", "-D", "hiden=64", &example("list_reduce.amp")]);
    assert_eq!(out.status.code(), Some(1));
    let diags = json_lines(&out);
    assert_eq!(diags[0]["code"], "E0108");
    assert_eq!(diags[0]["help"], "did you mean `hidden`?");

    let out = ampc(&["check", "-D", "hidden=256", "-D", "vocab=20", &example("list_reduce.amp")]);
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn usage_errors_exit_two() {
    assert_eq!(ampc(&["check"]).status.code(), Some(2));
    assert_eq!(ampc(&["check", "/nonexistent/model.amp"]).status.code(), Some(2));
    assert_eq!(ampc(&["check", "-D", "hidden", &example("mlp.amp")]).status.code(), Some(2));
    assert_eq!(ampc(&["check", "-D", "hidden=big", &example("mlp.amp")]).status.code(), Some(2));
    assert_eq!(ampc(&["frobnicate"]).status.code(), Some(2));
}

#[test]
fn help_describes_the_commands() {
    let out = ampc(&["--help"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("check"), "{text}");
    let out = ampc(&["check", "--help"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("--message-format") && text.contains("NAME=VALUE"), "{text}");
}

#[test]
fn invalid_utf8_is_read_lossily_and_reported() {
    let (_dir, path) = temp_file("bytes.amp", "model M { \u{FFFD} }");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(&[0xff, 0xfe, b'\n']);
    std::fs::write(&path, bytes).unwrap();
    let out = ampc(&["check", "--message-format", "json", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(json_lines(&out).iter().any(|d| d["code"] == "E0001"));
}

/// Issue 27 item 2: `-D experts=100000000` passed `ampc check` in 10 ms, then compiling
/// grew until memory ran out. The model is refused where its parameters are declared.
#[test]
fn a_model_over_the_size_limits_is_refused_by_check() {
    let out = ampc(&["check", &example("moe.amp"), "-D", "experts=100000000"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("[E0310]") && err.contains("over the size limits at `gate`"), "{err}");
    let dir = tempfile::Builder::new().prefix("ampc-limits-").tempdir().expect("temp dir");
    let graph = dir.path().join("moe.ampg");
    let out = ampc(&["compile", &example("moe.amp"), "-D", "experts=100000000", "-o", graph.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(!graph.exists(), "nothing written");
}

/// Issue 27 item 7: error recovery was quadratic in the number of broken items (100k
/// lines of `record R { a: }` took 29 s). Cascades are still dropped item by item: each
/// broken record is one error, and a broken member of a model damages only that member.
#[test]
fn thousands_of_broken_items_give_one_error_each() {
    let mut text = String::new();
    for i in 0..3000 {
        text.push_str(&format!("record R{i} {{ a: }}\n"));
    }
    text.push_str("model M { fn forward(x: R0) -> f32 { let y = ; zeros() } fn loss(x: R0) -> f32 { zeros( } }\n");
    let (_dir, path) = temp_file("broken.amp", &text);
    let out = ampc(&["check", path.to_str().unwrap(), "--message-format", "json"]);
    let diags = json_lines(&out);
    let syntax = diags.iter().filter(|d| d["code"] == "E0010" || d["code"] == "E0011").count();
    assert_eq!(syntax, 3002, "{diags:?}");
    assert!(diags.iter().all(|d| d["code"] != "E0501"), "no false `no loss`: {diags:?}");
}

/// Issue 48, finding 7: `ampc check /dev/zero` read without end; a source is read up to
/// `amp_ir::limits::MAX_SOURCE_BYTES` and refused past it.
#[test]
fn an_endless_source_is_refused_after_the_source_limit() {
    if !std::path::Path::new("/dev/zero").exists() {
        return;
    }
    let out = ampc(&["check", "/dev/zero"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("cannot read `/dev/zero`: it is longer than 33554432 bytes"), "{err}");
}
