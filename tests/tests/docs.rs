//! Every diagnostic code has its documentation page, titled as in the code table, and
//! listed in the index; `docs/amprun.md` is `amprun`'s crate documentation; every path the
//! docs name exists; ARCHITECTURE.md's crate table is the workspace's dependency graph.

use amp_diagnostics::Code;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn every_code_has_a_page_and_an_index_entry() {
    let dir = repo().join("docs/errors");
    let index = std::fs::read_to_string(dir.join("README.md")).expect("docs/errors/README.md");
    let mut missing = Vec::new();
    for code in Code::ALL {
        let page = dir.join(format!("{code}.md"));
        match std::fs::read_to_string(&page) {
            Ok(text) => {
                let heading = format!("# {code}: {}", code.title());
                if text.lines().next() != Some(heading.as_str()) {
                    missing.push(format!("{code}: first line should be `{heading}`"));
                }
            }
            Err(_) => missing.push(format!("{code}: no page {}", page.display())),
        }
        if !index.contains(&format!("[{code}]({code}.md)")) {
            missing.push(format!("{code}: not in docs/errors/README.md"));
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

#[test]
fn codes_are_unique_and_parse_back() {
    let mut seen = std::collections::HashSet::new();
    for code in Code::ALL {
        assert!(seen.insert(code.as_str()), "{code} is listed twice");
        assert_eq!(Code::parse(code.as_str()), Some(*code));
        let prefix = if code.severity() == amp_diagnostics::Severity::Error { 'E' } else { 'W' };
        assert!(code.as_str().starts_with(prefix), "{code} has the wrong letter for its severity");
    }
}

/// `docs/amprun.md` says it is the crate documentation of `runtime/amprun/src/main.rs`:
/// after its title and first paragraph, line for line.
#[test]
fn the_amprun_page_is_the_crate_documentation() {
    let root = repo();
    let page = std::fs::read_to_string(root.join("docs/amprun.md")).expect("docs/amprun.md");
    let main = std::fs::read_to_string(root.join("runtime/amprun/src/main.rs")).expect("amprun's main.rs");
    let doc: Vec<&str> =
        main.lines().map_while(|l| l.strip_prefix("//!")).map(|l| l.strip_prefix(' ').unwrap_or(l)).collect();
    let body: Vec<&str> = page.lines().skip(4).collect();
    let body = &body[..body.iter().rposition(|l| !l.is_empty()).map_or(0, |i| i + 1)];
    for (i, (d, b)) in doc.iter().zip(body).enumerate() {
        assert_eq!(d, b, "line {} of docs/amprun.md differs from main.rs's documentation", i + 5);
    }
    assert_eq!(doc.len(), body.len(), "docs/amprun.md and main.rs's documentation differ in length");
}

/// README.md and every page under docs/, recursively, but for docs/perf-history.md, whose
/// dated entries name the files as they were then.
fn doc_pages() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<PathBuf> =
            std::fs::read_dir(dir).expect("docs/ is readable").map(|e| e.expect("an entry").path()).collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "md") && !path.ends_with("docs/perf-history.md") {
                out.push(path);
            }
        }
    }
    let mut pages = vec![repo().join("README.md")];
    walk(&repo().join("docs"), &mut pages);
    pages
}

/// The top-level folders of the repository that a path in the docs starts with.
const ROOTS: [&str; 11] = [
    "compiler/",
    "runtime/",
    "grammar/",
    "stdlib/",
    "tests/",
    "examples/",
    "benches/",
    "docs/",
    "editors/",
    "fuzz/",
    ".ci/",
];

/// The repository paths a page names: in code spans, a word that starts with one of
/// [`ROOTS`] (a `:line` or `#anchor` after it dropped); in links, a target that is not a
/// URL and names a file of a kind the repository holds or a folder, resolved from the
/// page's folder.
fn named_paths(page: &Path, text: &str) -> Vec<(String, PathBuf)> {
    let mut found = Vec::new();
    for (i, span) in text.split('`').enumerate() {
        if i % 2 == 0 {
            continue;
        }
        let word = span.split([':', '#', ' ']).next().unwrap_or("");
        let plain = word.chars().all(|c| c.is_ascii_alphanumeric() || "_./-".contains(c));
        if plain && ROOTS.iter().any(|r| word.starts_with(r)) {
            found.push((word.to_string(), repo().join(word)));
        }
    }
    let dir = page.parent().expect("a page is in a folder");
    for link in text.split("](").skip(1) {
        let target = link.split(')').next().unwrap_or("").split('#').next().unwrap_or("");
        const KINDS: [&str; 11] = ["md", "rs", "amp", "py", "sh", "json", "jsonl", "toml", "txt", "svg", "png"];
        let kind = Path::new(target).extension().and_then(|e| e.to_str());
        let file_or_folder = kind.is_some_and(|k| KINDS.contains(&k)) || target.ends_with('/');
        if !file_or_folder || target.contains("://") || target.contains(' ') {
            continue;
        }
        found.push((target.to_string(), dir.join(target)));
    }
    found
}

#[test]
fn every_path_the_docs_name_exists() {
    let mut missing = Vec::new();
    for page in doc_pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for (named, path) in named_paths(&page, &text) {
            if !path.exists() {
                missing.push(format!("{}: `{named}`", page.strip_prefix(repo()).unwrap_or(&page).display()));
            }
        }
    }
    assert!(missing.is_empty(), "paths the docs name that do not exist:\n{}", missing.join("\n"));
}

/// The table under "## Crates" in docs/ARCHITECTURE.md lists every workspace crate with
/// its folder and exactly its dependencies (normal and build), Amp's and others', as
/// `cargo metadata` reports them.
#[test]
fn the_architecture_crate_table_is_the_dependency_graph() {
    let text = std::fs::read_to_string(repo().join("docs/ARCHITECTURE.md")).unwrap();
    let mut table: BTreeMap<String, (String, Vec<String>)> = BTreeMap::new();
    for line in text.lines().skip_while(|l| !l.starts_with("## Crates")).skip(1) {
        if line.starts_with("## ") {
            break;
        }
        let cells: Vec<&str> = line.split(" | ").map(|c| c.trim_matches(|c| c == '|' || c == ' ')).collect();
        let [name, folder, _, amp, other] = cells[..] else { continue };
        let Some(name) = name.strip_prefix('`').and_then(|n| n.strip_suffix('`')) else { continue };
        let cells = [amp, other];
        let mut deps: Vec<String> =
            cells.iter().flat_map(|c| c.split(", ")).filter(|d| *d != "–").map(String::from).collect();
        deps.sort();
        table.insert(name.to_string(), (folder.trim_matches('`').to_string(), deps));
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = std::process::Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .current_dir(repo())
        .output()
        .expect("cargo metadata runs");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let root = repo().canonicalize().unwrap();
    let mut actual: BTreeMap<String, (String, Vec<String>)> = BTreeMap::new();
    for package in metadata["packages"].as_array().unwrap() {
        let manifest = PathBuf::from(package["manifest_path"].as_str().unwrap());
        let folder = manifest.parent().unwrap().strip_prefix(&root).unwrap().display().to_string();
        let mut deps: Vec<String> = package["dependencies"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["kind"].is_null() || d["kind"] == "build")
            .map(|d| d["name"].as_str().unwrap().to_string())
            .collect();
        deps.sort();
        deps.dedup();
        actual.insert(package["name"].as_str().unwrap().to_string(), (folder, deps));
    }
    for (name, entry) in &actual {
        assert_eq!(table.get(name), Some(entry), "ARCHITECTURE.md's row of `{name}` against `cargo metadata`");
    }
    let extra: Vec<&String> = table.keys().filter(|k| !actual.contains_key(*k)).collect();
    assert!(extra.is_empty(), "ARCHITECTURE.md lists crates the workspace does not have: {extra:?}");
}
