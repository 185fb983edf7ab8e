//! The checker and the language server on big and broken files (issue 31, item 3).
//!
//! For each input it times, in one run: lexing alone (the baseline, linear by
//! construction), `ampc check`'s work (check and render the diagnostics as text), and the
//! language server over its real loop (`amp_lsp::serve_bytes`): one edit (a `didChange`
//! re-checks and publishes), a completion and a `documentSymbol` on the result. It prints
//! medians and the ratio of the check to the lexing baseline: a ratio that stays flat from
//! 1 to 4,000 errors means the cost is linear in the number of diagnostics.
//! Peak memory (VmHWM) is read once, after the 50k-line file.
//!
//! Then projects of 50 and 200 files (a tree of modules: file i imports the layer of file
//! (i-1)/2), in a workspace folder: opening a leaf (checked with the ~8 files above it),
//! an edit of it, a rename of the root's layer (which every file uses, so every file is
//! checked and edited) and a workspace-symbol query. Their cost per file should stay flat
//! from 50 to 200 files.
//!
//! Run: `cargo bench -p amp-benches --bench editor`

use amp_benches::{file_with_errors, long_line_with_errors, valid_file};
use amp_diagnostics::render_human;
use amp_sema::{check_source, Options};
use serde_json::{json, Value};
use std::hint::black_box;
use std::time::Duration;

/// Median wall time of `f` over enough repetitions to fill ~`budget`, at least 3.
fn median(budget: Duration, f: impl FnMut()) -> Duration {
    amp_benches::median(budget, 3..=1001, f)
}

fn framed(message: &Value) -> Vec<u8> {
    let body = message.to_string();
    let mut out = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    out.extend_from_slice(body.as_bytes());
    out
}

/// A session: `initialize`, `didOpen` of `text`, then `extra` messages.
fn session(text: &str, extra: &[Value]) -> Vec<u8> {
    let uri = "file:///bench.amp";
    let mut messages = vec![
        json!({ "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": { "capabilities": {} } }),
        json!({ "jsonrpc": "2.0", "method": "initialized", "params": {} }),
        json!({ "jsonrpc": "2.0", "method": "textDocument/didOpen", "params": { "textDocument": { "uri": uri, "languageId": "amp", "version": 1, "text": text } } }),
    ];
    messages.extend_from_slice(extra);
    messages.iter().flat_map(framed).collect()
}

fn edit(text: &str) -> Value {
    json!({ "jsonrpc": "2.0", "method": "textDocument/didChange", "params": {
        "textDocument": { "uri": "file:///bench.amp", "version": 2 },
        "contentChanges": [{ "text": text }] } })
}

fn request(method: &str, params: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// A project of `files` modules in a new folder: `m{i}.amp` defines `pub layer L{i}`,
/// built on the layer of `m{(i-1)/2}.amp`.
fn project(files: usize) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("amp-editor-bench-{}-{files}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a temporary folder");
    for i in 0..files {
        let (import, inner) = if i == 0 {
            (String::new(), "param l = Linear(d, d);\n    fn apply(x: f32[d]) -> f32[d] { tanh(l(x)) }".to_string())
        } else {
            let p = (i - 1) / 2;
            (
                format!("use m{p}::L{p};\n\n"),
                format!("param inner = L{p}(d);\n    param l = Linear(d, d);\n    fn apply(x: f32[d]) -> f32[d] {{ l(inner(x)) }}"),
            )
        };
        let text = format!("{import}/// Layer {i}.\npub layer L{i}(d: int) {{\n    {inner}\n}}\n");
        std::fs::write(dir.join(format!("m{i}.amp")), text).expect("written");
    }
    dir
}

fn project_bench(budget: Duration) {
    println!();
    println!(
        "{:<10} {:>8} {:>8} {:>10} {:>14} {:>13}",
        "project", "open ms", "edit ms", "rename ms", "ms/file rename", "symbols ms"
    );
    for files in [50, 200] {
        let dir = project(files);
        let uri_of = |i: usize| format!("file://{}/m{i}.amp", dir.display());
        let leaf = files - 1;
        let leaf_text = std::fs::read_to_string(dir.join(format!("m{leaf}.amp"))).expect("written");
        let init = json!({ "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": { "capabilities": {}, "rootUri": format!("file://{}", dir.display()) } });
        let open = |uri: String, text: &str| json!({ "jsonrpc": "2.0", "method": "textDocument/didOpen", "params": { "textDocument": { "uri": uri, "languageId": "amp", "version": 1, "text": text } } });
        let run = |messages: &[Value]| {
            let bytes: Vec<u8> = messages.iter().flat_map(framed).collect();
            median(budget, || {
                let _ = black_box(amp_lsp::serve_bytes(&bytes));
            })
        };
        let base = run(std::slice::from_ref(&init));
        let opened = vec![init.clone(), open(uri_of(leaf), &leaf_text)];
        // Each request's cost is its run less the open alone, timed once.
        let opened_alone = run(&opened);
        let open_ms = opened_alone.saturating_sub(base);
        let mut edited = opened.clone();
        edited.push(json!({ "jsonrpc": "2.0", "method": "textDocument/didChange", "params": {
            "textDocument": { "uri": uri_of(leaf), "version": 2 }, "contentChanges": [{ "text": leaf_text.replace("Layer", "The layer") }] } }));
        let edit_ms = run(&edited).saturating_sub(opened_alone);
        let at_root = leaf_text.find(&format!("L{}", (leaf - 1) / 2)).expect("the import");
        let rename = request(
            "textDocument/rename",
            json!({ "textDocument": { "uri": uri_of(leaf) },
            "position": { "line": 0, "character": at_root }, "newName": "Renamed" }),
        );
        let mut renamed = opened.clone();
        renamed.push(rename);
        let rename_ms = run(&renamed).saturating_sub(opened_alone);
        let mut symbols = opened.clone();
        symbols.push(request("workspace/symbol", json!({ "query": "l1" })));
        let symbols_ms = run(&symbols).saturating_sub(opened_alone);
        println!(
            "{:<10} {:>8.2} {:>8.2} {:>10.1} {:>14.3} {:>13.1}",
            format!("{files} files"),
            ms(open_ms),
            ms(edit_ms),
            ms(rename_ms),
            ms(rename_ms) / files as f64,
            ms(symbols_ms)
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

fn main() {
    let budget = Duration::from_millis(400);
    let inputs: Vec<(String, String)> = vec![
        ("1 error".into(), file_with_errors(1)),
        ("1,000 errors".into(), file_with_errors(1000)),
        ("4,000 errors".into(), file_with_errors(4000)),
        ("1 line, 4,000 errors".into(), long_line_with_errors(4000)),
        ("50k lines, valid".into(), valid_file(50_000)),
    ];
    println!(
        "{:<22} {:>9} {:>10} {:>10} {:>10} {:>11} {:>12} {:>12}",
        "input", "KiB", "lex ms", "check ms", "check/lex", "edit ms", "complete ms", "symbols ms"
    );
    for (name, text) in &inputs {
        let lex = median(budget, || {
            black_box(amp_grammar::lexer::lex(black_box(text)));
        });
        let check = median(budget, || {
            let (map, checked) = check_source("bench.amp", black_box(text), &Options::default());
            black_box(render_human(&map, &checked.diagnostics, false));
        });
        // The server's loop, with one message more than the open: its cost is the difference.
        let open_only = session(text, &[]);
        let base = median(budget, || {
            let _ = black_box(amp_lsp::serve_bytes(&open_only));
        });
        let with_edit = session(text, &[edit(text)]);
        let edited = median(budget, || {
            let _ = black_box(amp_lsp::serve_bytes(&with_edit));
        });
        let middle = text.lines().count() / 2;
        let at =
            json!({ "textDocument": { "uri": "file:///bench.amp" }, "position": { "line": middle, "character": 8 } });
        let with_completion = session(text, &[request("textDocument/completion", at)]);
        let completed = median(budget, || {
            let _ = black_box(amp_lsp::serve_bytes(&with_completion));
        });
        let doc = json!({ "textDocument": { "uri": "file:///bench.amp" } });
        let with_symbols = session(text, &[request("textDocument/documentSymbol", doc)]);
        let symbols = median(budget, || {
            let _ = black_box(amp_lsp::serve_bytes(&with_symbols));
        });
        println!(
            "{:<22} {:>9} {:>10.2} {:>10.2} {:>9.0}x {:>11.1} {:>12.1} {:>12.1}",
            name,
            text.len() / 1024,
            ms(lex),
            ms(check),
            check.as_secs_f64() / lex.as_secs_f64(),
            ms(edited.saturating_sub(base)),
            ms(completed.saturating_sub(base)),
            ms(symbols.saturating_sub(base)),
        );
    }
    if let Some(mib) = peak_rss_mib() {
        println!("peak resident memory of this run (VmHWM): {mib:.0} MiB");
    }
    project_bench(budget);
    if let Some(mib) = peak_rss_mib() {
        println!("peak resident memory after the projects (VmHWM): {mib:.0} MiB");
    }
}
