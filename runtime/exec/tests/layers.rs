//! The executor's sources stay in three layers with no import running back up
//! (docs/ARCHITECTURE.md, the exec module map): `load/` (the program a verified graph
//! becomes) uses neither `ops/` nor `sched/`; `ops/` (op semantics) does not use
//! `sched/`; the leaf modules at the crate root (every module that is not a layer: `config`,
//! `error`, `message`, `instance`, `trace`, `wire`, `cluster`) use none of the three. Inside `sched/` the modules are ordered too
//! (executor, controller, worker, admission, agenda: each uses only those after it), so the
//! controller and the workers share the protocol through `admission` and do not import
//! each other. Read from the source text: every `crate::` path, and every `super::` path
//! resolved against the file's module, outside comments.
//!
//! Below the executor sits the transport (`runtime/net`, amp-net): it depends on no crate
//! of Amp's, and the executor names only its interface (`Link`, `Transport`, `NetError`,
//! `Traffic`, `Counters`), never an implementation: it is handed a connected link.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The layers, bottom first; a file may use its own layer, the root leaves and the
/// layers below it.
const LAYERS: &[&str] = &["load", "ops", "sched"];

/// `sched/`'s modules, lowest first: each may use only those before it.
const SCHED: &[&str] = &["agenda", "admission", "worker", "controller", "executor"];

/// The `sched/` modules a file of `sched/` uses that are not below it.
fn sched_violations(module: &[String], text: &str) -> Vec<String> {
    let Some(own) = module.get(1).filter(|_| module.first().is_some_and(|m| m == "sched")) else {
        return Vec::new();
    };
    let Some(rank) = SCHED.iter().position(|m| m == own) else {
        return vec![format!("{own} (not in the test's order of sched/)")];
    };
    // Paths into `sched` from one of its files, as paths from the crate root.
    let text = text.replace("crate::sched::", "crate::").replace("super::", "crate::");
    used_roots(&text, &[])
        .into_iter()
        .filter(|used| SCHED.iter().position(|m| m == used).is_some_and(|r| r >= rank) && used != own)
        .collect()
}

/// The top-level module of the crate a file belongs to: its folder, or the file's own name
/// at the root ("lib" for the crate root itself).
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).expect("under src");
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let last = parts.pop().expect("a file name");
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" {
        parts.push(stem.to_string());
    }
    parts
}

/// The first segment below the crate root of every path a file names: `crate::a::b` gives
/// `a`, `crate::{a, b::c}` gives `a` and `b`, `super::x` resolved from `module`.
fn used_roots(text: &str, module: &[String]) -> BTreeSet<String> {
    let mut roots = BTreeSet::new();
    for line in text.lines() {
        let code = match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        };
        let mut rest = code;
        while let Some(at) = find_path_start(rest) {
            let (base, after): (Vec<String>, &str) = if rest[at..].starts_with("crate::") {
                (Vec::new(), &rest[at + "crate::".len()..])
            } else {
                // One or more `super::`, each one module up from the file's.
                let mut after = &rest[at..];
                let mut up = 0;
                while let Some(tail) = after.strip_prefix("super::") {
                    after = tail;
                    up += 1;
                }
                let keep = module.len().saturating_sub(up);
                (module[..keep].to_vec(), after)
            };
            let firsts = if let Some(group) = after.strip_prefix('{') {
                let end = matching_brace(group).unwrap_or(group.len());
                split_top_level(&group[..end]).into_iter().filter_map(first_segment).collect()
            } else {
                first_segment(after).into_iter().collect::<Vec<_>>()
            };
            for first in firsts {
                match base.first() {
                    Some(root) => roots.insert(root.clone()),
                    None => roots.insert(first),
                };
            }
            rest = after;
        }
    }
    roots
}

/// Where the next `crate::` or `super::` path starts (at a word boundary).
fn find_path_start(text: &str) -> Option<usize> {
    let candidates = ["crate::", "super::"];
    let mut best: Option<usize> = None;
    for c in candidates {
        let mut from = 0;
        while let Some(i) = text[from..].find(c).map(|i| i + from) {
            let boundary = text[..i].chars().next_back().is_none_or(|ch| !(ch.is_alphanumeric() || ch == '_'));
            if boundary {
                best = Some(best.map_or(i, |b: usize| b.min(i)));
                break;
            }
            from = i + c.len();
        }
    }
    best
}

fn first_segment(text: &str) -> Option<String> {
    let name: String = text.trim_start().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
    (!name.is_empty() && name != "self").then_some(name)
}

/// The index of the `}` closing a group whose `{` was just before `text`.
fn matching_brace(text: &str) -> Option<usize> {
    let mut depth = 0usize;
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => return Some(i),
            '}' => depth -= 1,
            _ => {}
        }
    }
    None
}

fn split_top_level(text: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0usize, 0);
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

/// The layers a module at the top of the crate may use; `None` for the crate root file.
fn allowed(top: &str) -> Option<BTreeSet<&'static str>> {
    let rank = LAYERS.iter().position(|l| *l == top);
    match rank {
        Some(r) => Some(LAYERS[..=r].iter().copied().collect()),
        None if top == "lib" => None,
        // A root leaf: no layer at all.
        None => Some(BTreeSet::new()),
    }
}

/// The violations in one file: each a layer it uses that it may not.
fn violations(module: &[String], text: &str) -> Vec<String> {
    let top = module.first().map_or("lib", String::as_str);
    let Some(allowed) = allowed(top) else { return Vec::new() };
    used_roots(text, module)
        .into_iter()
        .filter(|used| LAYERS.contains(&used.as_str()) && !allowed.contains(used.as_str()))
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_import_runs_back_up_a_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut seen_layers = BTreeSet::new();
    let mut problems = Vec::new();
    for file in &files {
        let module = module_path(&src, file);
        if let Some(top) = module.first() {
            seen_layers.insert(top.clone());
        }
        let text = std::fs::read_to_string(file).expect("readable source");
        for used in violations(&module, &text).into_iter().chain(sched_violations(&module, &text)) {
            problems.push(format!("{} uses `{used}`", file.strip_prefix(&src).unwrap_or(file).display()));
        }
    }
    for layer in LAYERS {
        assert!(seen_layers.contains(*layer), "no folder `src/{layer}`: the test reads the wrong tree");
    }
    assert!(problems.is_empty(), "imports running back up the layers:\n  {}", problems.join("\n  "));
}

#[test]
fn the_check_sees_every_form_of_path() {
    let module = |m: &[&str]| m.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    // `use`, grouped `use`, an inline path, and `super::` out of a folder.
    assert_eq!(violations(&module(&["load", "program"]), "use crate::ops::build;\n"), ["ops"]);
    assert_eq!(violations(&module(&["load", "fuse"]), "use crate::{message::Key, sched::worker};\n"), ["sched"]);
    assert_eq!(violations(&module(&["ops", "ppt"]), "    let x = crate::sched::controller::run();\n"), ["sched"]);
    assert_eq!(violations(&module(&["load"]), "use super::ops::Emit;\n"), ["ops"]);
    assert_eq!(violations(&module(&["ops", "loss"]), "use super::super::sched::worker;\n"), ["sched"]);
    assert_eq!(violations(&module(&["error"]), "use crate::load::program::NodeInfo;\n"), ["load"]);
    // Allowed: downward, within a folder, comments, and the crate root.
    assert!(violations(&module(&["sched", "worker"]), "use crate::{load::program::Program, ops::NodeOp};\n").is_empty());
    assert!(violations(
        &module(&["ops", "chain"]),
        "use super::{Emit, NodeCx};\nuse crate::load::program::ChainSpec;\n"
    )
    .is_empty());
    assert!(violations(&module(&["load", "chain"]), "//! see `crate::ops::chain`\n").is_empty());
    assert!(violations(&module(&[]), "pub use sched::executor::Executor;\n").is_empty());
    // Inside sched/: downward only.
    assert_eq!(
        sched_violations(&module(&["sched", "worker"]), "use crate::sched::controller::Report;\n"),
        ["controller"]
    );
    assert_eq!(sched_violations(&module(&["sched", "admission"]), "use super::{worker::ToWorker};\n"), ["worker"]);
    assert!(sched_violations(
        &module(&["sched", "controller"]),
        "use crate::sched::{admission::Credits, worker::Report};\n"
    )
    .is_empty());
}

/// What of amp-net the executor may name: the interface, not an implementation.
const NET_INTERFACE: &[&str] = &["Link", "Transport", "NetError", "Traffic", "Counters"];

/// The names after `amp_net::` in `text` (outside comments) that are not the interface.
fn net_violations(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        for (i, _) in code.match_indices("amp_net::") {
            let rest = &code[i + "amp_net::".len()..];
            let names: Vec<&str> = match rest.strip_prefix('{') {
                Some(group) => group.split('}').next().unwrap_or("").split(',').collect(),
                None => vec![rest],
            };
            for name in names {
                let name: String = name.trim().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                if !name.is_empty() && !NET_INTERFACE.contains(&name.as_str()) {
                    found.push(name);
                }
            }
        }
    }
    found
}

#[test]
fn the_executor_names_only_the_transports_interface() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut problems = Vec::new();
    let mut named = false;
    for file in &files {
        // The cluster's unit tests (`tests.rs`, or after `#[cfg(test)]`) connect real
        // processes, as amprun does.
        if file.ends_with("tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(file).expect("readable source");
        let text = text.split("#[cfg(test)]").next().unwrap_or("");
        named |= text.contains("amp_net::");
        for name in net_violations(text) {
            problems.push(format!("{} names `amp_net::{name}`", file.strip_prefix(&src).unwrap_or(file).display()));
        }
    }
    assert!(named, "no file names amp_net: the test reads the wrong tree");
    assert!(problems.is_empty(), "the executor reaches past the transport's interface:\n  {}", problems.join("\n  "));
    // The transport depends on no crate of Amp's.
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../net/Cargo.toml");
    let manifest = std::fs::read_to_string(manifest).expect("runtime/net/Cargo.toml");
    let amp: Vec<&str> = manifest.lines().filter(|l| l.trim_start().starts_with("amp-")).collect();
    assert!(amp.is_empty(), "amp-net depends on {amp:?}");
}

#[test]
fn the_transport_check_sees_an_implementation_named() {
    assert_eq!(net_violations("use amp_net::timely::TimelyLink;\n"), ["timely"]);
    assert_eq!(net_violations("use amp_net::{Link, memory::MemoryNet, Transport};\n"), ["memory"]);
    assert_eq!(net_violations("    let c = amp_net::connect(&spec, &mut |_| {});\n"), ["connect"]);
    assert!(net_violations("use amp_net::{Counters, Link, Traffic, Transport};\n").is_empty());
    assert!(net_violations("// see amp_net::timely\n").is_empty());
}
