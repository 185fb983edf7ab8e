//! Every page under docs/errors/ is true of today's compiler: its example produces its
//! code, run as the page says (`ampc check`, then `ampc compile`, or the page's own
//! `ampc ...` command line), and its corrected version does not — a corrected source
//! checks without errors (and compiles, when it defines a model), a corrected command
//! line succeeds. A section's `amp` blocks that start with `// file: NAME.amp` are the
//! other files of a project, written beside the main one (`main.amp`).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The fenced blocks of `lang` in the section headed `## {section}` of `page`.
fn blocks(page: &str, section: &str, langs: &[&str]) -> Vec<String> {
    let Some(body) = page.split(&format!("## {section}\n")).nth(1) else {
        return Vec::new();
    };
    let body = body.split("\n## ").next().unwrap_or(body);
    let mut lines = body.lines();
    let mut found = Vec::new();
    while let Some(line) = lines.next() {
        if langs.iter().any(|l| line.trim() == format!("```{l}")) {
            let text: Vec<&str> = lines.by_ref().take_while(|l| l.trim() != "```").collect();
            found.push(text.join("\n") + "\n");
        }
    }
    found
}

/// The first fenced block of `lang` in the section that is not another file's.
fn block(page: &str, section: &str, langs: &[&str]) -> Option<String> {
    blocks(page, section, langs).into_iter().find(|b| !b.starts_with("// file: "))
}

/// Writes the section's other files (`// file: NAME.amp` blocks) into `dir`.
fn write_other_files(page: &str, section: &str, dir: &Path) {
    for text in blocks(page, section, &["amp"]) {
        if let Some(name) = text.lines().next().and_then(|l| l.strip_prefix("// file: ")) {
            std::fs::write(dir.join(name.trim()), &text).expect("the page's other file is written");
        }
    }
}

/// The `ampc` command lines of a shell block, the source file they name replaced by `file`.
fn command_lines(block: &str, file: &Path) -> Vec<Vec<String>> {
    block
        .lines()
        .filter_map(|l| l.trim().strip_prefix("ampc "))
        .map(|l| {
            l.split_whitespace()
                .map(|w| if w.ends_with(".amp") { file.display().to_string() } else { w.to_string() })
                .collect()
        })
        .collect()
}

/// Runs `ampc args` with JSON diagnostics; (success, the codes it reported).
fn run(args: &[String], out: &Path) -> (bool, Vec<String>) {
    let mut args = args.to_vec();
    if args.first().is_some_and(|c| c == "compile") && !args.iter().any(|a| a == "-o") {
        args.extend(["-o".to_string(), out.display().to_string()]);
    }
    args.extend(["--message-format".to_string(), "json".to_string()]);
    let output = Command::new(env!("CARGO_BIN_EXE_ampc")).args(&args).output().expect("ampc runs");
    let codes = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|d| d["code"].as_str().map(|c| format!("{c}:{}", d["severity"].as_str().unwrap_or(""))))
        .collect();
    (output.status.success(), codes)
}

fn default_commands(file: &Path) -> Vec<Vec<String>> {
    let file = file.display().to_string();
    vec![vec!["check".into(), file.clone()], vec!["compile".into(), file]]
}

#[test]
fn every_error_page_is_true_of_the_compiler() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/errors");
    let scratch = tempfile::Builder::new().prefix("ampc-pages-").tempdir().expect("temp dir");
    let (source, graph): (PathBuf, PathBuf) = (scratch.path().join("main.amp"), scratch.path().join("main.ampg"));
    let mut pages: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("docs/errors")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.ends_with(".md") && n != "README.md"))
        .collect();
    pages.sort();
    assert!(pages.len() > 50, "only {} pages", pages.len());
    let mut wrong = Vec::new();
    for path in &pages {
        let code = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default().to_string();
        let page = std::fs::read_to_string(path).expect("page");
        let Some(example) = block(&page, "Example", &["amp"]) else {
            wrong.push(format!("{code}: no ```amp example"));
            continue;
        };
        std::fs::write(&source, &example).unwrap();
        write_other_files(&page, "Example", scratch.path());
        let commands = block(&page, "Example", &["sh", "text"])
            .map(|b| command_lines(&b, &source))
            .filter(|c| !c.is_empty())
            .unwrap_or_else(|| default_commands(&source));
        let produced = commands.iter().any(|c| run(c, &graph).1.iter().any(|r| r.starts_with(&format!("{code}:"))));
        if !produced {
            wrong.push(format!("{code}: the example does not produce it ({commands:?})"));
        }
        if let Some(corrected) = block(&page, "Corrected", &["amp"]) {
            std::fs::write(&source, &corrected).unwrap();
            write_other_files(&page, "Corrected", scratch.path());
            let (_, codes) = run(&default_commands(&source)[0], &graph);
            if codes.iter().any(|c| c.ends_with(":error") || c.starts_with(&format!("{code}:"))) {
                wrong.push(format!("{code}: the corrected source reports {codes:?}"));
            } else if corrected.contains("model ") && !run(&default_commands(&source)[1], &graph).0 {
                wrong.push(format!("{code}: the corrected model does not compile"));
            }
        } else if let Some(commands) = block(&page, "Corrected", &["sh", "text"]).map(|b| command_lines(&b, &source)) {
            std::fs::write(&source, &example).unwrap();
            for command in commands {
                let (ok, codes) = run(&command, &graph);
                if !ok || codes.iter().any(|c| c.starts_with(&format!("{code}:"))) {
                    wrong.push(format!("{code}: the corrected command {command:?} reports {codes:?}"));
                }
            }
        } else {
            wrong.push(format!("{code}: no corrected version"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
