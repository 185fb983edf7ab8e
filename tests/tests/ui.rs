//! Data-driven diagnostics tests: every `tests/ui/*.amp` file is one test case.
//!
//! A file's header states what the checker must report, one line per diagnostic:
//!
//! ```text
//! // expect: E0302 @ 12      (code and 1-based line of the primary span)
//! // define: hidden=0        (optional `-D` override)
//! ```
//!
//! A file without `expect` lines must check cleanly. The reported (code, line) pairs must
//! equal the expected ones exactly, as multisets. Each case also has an insta snapshot
//! holding the source and the rendered diagnostics together, so a reviewer sees both.

use amp_sema::{check_source, Options};
use std::path::{Path, PathBuf};

struct Case {
    expected: Vec<(String, usize)>,
    defines: Vec<(String, i64)>,
}

fn parse_header(path: &Path, text: &str) -> Case {
    let mut case = Case { expected: Vec::new(), defines: Vec::new() };
    for line in text.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("// expect:") {
            let (code, at) =
                rest.split_once('@').unwrap_or_else(|| panic!("{}: bad expect line `{line}`", path.display()));
            let at: usize =
                at.trim().parse().unwrap_or_else(|_| panic!("{}: bad line number in `{line}`", path.display()));
            case.expected.push((code.trim().to_string(), at));
        } else if let Some(rest) = line.strip_prefix("// define:") {
            let (k, v) =
                rest.trim().split_once('=').unwrap_or_else(|| panic!("{}: bad define `{line}`", path.display()));
            case.defines.push((k.trim().to_string(), v.trim().parse().expect("define value is an integer")));
        }
    }
    case
}

fn ui_files() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("ui");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/ui exists")
        .map(|e| e.expect("readable entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "amp"))
        .collect();
    files.sort();
    files
}

#[test]
fn ui_cases() {
    let files = ui_files();
    assert!(files.len() >= 60, "expected at least 60 ui cases, found {}", files.len());
    let mut failures = Vec::new();
    for path in &files {
        let text = std::fs::read_to_string(path).expect("readable case");
        let case = parse_header(path, &text);
        let name = path.file_stem().and_then(|s| s.to_str()).expect("utf-8 name").to_string();
        let (map, checked) = check_source(&format!("{name}.amp"), &text, &Options { defines: case.defines.clone() });
        let mut actual: Vec<(String, usize)> = checked
            .diagnostics
            .iter()
            .map(|d| {
                let file = map.get(d.span.file).expect("diagnostic file is in the map");
                (d.code.as_str().to_string(), file.line_col(d.span.start as usize).0 + 1)
            })
            .collect();
        let mut expected = case.expected.clone();
        actual.sort();
        expected.sort();
        if actual != expected {
            failures.push(format!("{}:\n  expected {:?}\n  actual   {:?}", path.display(), expected, actual));
        }
        let rendered = amp_diagnostics::render_human(&map, &checked.diagnostics, false);
        let snapshot = format!("{text}\n---- diagnostics ----\n{rendered}");
        insta::with_settings!({ snapshot_path => "snapshots/ui", prepend_module_to_snapshot => false, omit_expression => true }, {
            insta::assert_snapshot!(name, snapshot);
        });
    }
    assert!(failures.is_empty(), "{} ui case(s) differ:\n{}", failures.len(), failures.join("\n"));
}
