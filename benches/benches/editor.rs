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
}
