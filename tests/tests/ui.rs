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
//!
//! A folder `tests/ui/modules/NAME/` is one case of several files: `main.amp` is checked,
//! and the files it imports are read from the folder. Its `expect` lines may name the
//! file of a diagnostic: `// expect: E0100 @ shared/enc.amp:4`.

use amp_diagnostics::SourceMap;
use amp_sema::{check_program, check_source, Checked, DiskFiles, Files, Options};
use std::path::{Path, PathBuf};

struct Case {
    expected: Vec<(String, String)>,
    defines: Vec<(String, i64)>,
}

fn parse_header(path: &Path, text: &str) -> Case {
    let mut case = Case { expected: Vec::new(), defines: Vec::new() };
    for line in text.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("// expect:") {
            let (code, at) =
                rest.split_once('@').unwrap_or_else(|| panic!("{}: bad expect line `{line}`", path.display()));
            let at = at.trim();
            let line_number = at.rsplit(':').next().unwrap_or(at);
            line_number.parse::<usize>().unwrap_or_else(|_| panic!("{}: bad line number in `{line}`", path.display()));
            case.expected.push((code.trim().to_string(), at.to_string()));
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
        compare(path, &case, &map, &checked, &mut failures);
        let rendered = amp_diagnostics::render_human(&map, &checked.diagnostics, false);
        let snapshot = format!("{text}\n---- diagnostics ----\n{rendered}");
        insta::with_settings!({ snapshot_path => "snapshots/ui", prepend_module_to_snapshot => false, omit_expression => true }, {
            insta::assert_snapshot!(name, snapshot);
        });
    }
    assert!(failures.is_empty(), "{} ui case(s) differ:\n{}", failures.len(), failures.join("\n"));
}

/// Where a diagnostic is, as an `expect` line names it: the line alone in `main`, else
/// `file:line`.
fn located(map: &SourceMap, main: amp_diagnostics::FileId, d: &amp_diagnostics::Diagnostic) -> String {
    let file = map.get(d.span.file).expect("diagnostic file is in the map");
    let line = file.line_col(d.span.start as usize).0 + 1;
    if d.span.file == main {
        line.to_string()
    } else {
        format!("{}:{line}", file.name)
    }
}

fn compare(path: &Path, case: &Case, map: &SourceMap, checked: &Checked, failures: &mut Vec<String>) {
    let main = amp_diagnostics::FileId(0);
    let mut actual: Vec<(String, String)> =
        checked.diagnostics.iter().map(|d| (d.code.as_str().to_string(), located(map, main, d))).collect();
    let mut expected = case.expected.clone();
    actual.sort();
    expected.sort();
    if actual != expected {
        failures.push(format!("{}:\n  expected {:?}\n  actual   {:?}", path.display(), expected, actual));
    }
}

/// The files of one folder case, named by their paths inside the folder.
struct Folder(PathBuf);

impl Files for Folder {
    fn read(&self, path: &Path) -> std::io::Result<String> {
        DiskFiles.read(&self.0.join(path))
    }
}

#[test]
fn module_cases() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("ui/modules");
    let mut cases: Vec<PathBuf> =
        std::fs::read_dir(&dir).expect("tests/ui/modules exists").map(|e| e.expect("readable entry").path()).collect();
    cases.sort();
    assert!(cases.len() >= 5, "expected at least 5 module cases, found {}", cases.len());
    let mut failures = Vec::new();
    for folder in &cases {
        let text = std::fs::read_to_string(folder.join("main.amp")).expect("a case has main.amp");
        let case = parse_header(folder, &text);
        let name = folder.file_name().and_then(|s| s.to_str()).expect("utf-8 name").to_string();
        let mut map = SourceMap::new();
        let main = map.add("main.amp", text);
        let checked =
            check_program(&mut map, main, &Options { defines: case.defines.clone() }, &Folder(folder.clone()));
        compare(folder, &case, &map, &checked, &mut failures);
        // Every file the check read, in the order it read them, then what it found.
        let sources: Vec<String> = map
            .files()
            .map(|(_, f)| f)
            .filter(|f| !f.name.starts_with("<std>"))
            .map(|f| format!("---- {} ----\n{}", f.name, f.text))
            .collect();
        let rendered = amp_diagnostics::render_human(&map, &checked.diagnostics, false);
        let snapshot = format!("{}\n---- diagnostics ----\n{rendered}", sources.join("\n"));
        insta::with_settings!({ snapshot_path => "snapshots/ui", prepend_module_to_snapshot => false, omit_expression => true }, {
            insta::assert_snapshot!(format!("modules_{name}"), snapshot);
        });
    }
    assert!(failures.is_empty(), "{} module case(s) differ:\n{}", failures.len(), failures.join("\n"));
}
