//! The language server over raw bytes: framing, decoding, the handshake and every
//! handler (`amp_lsp::serve_bytes`). The input follows a fixed `initialize` and
//! `initialized`, so that the fuzzer's bytes reach the dispatch and not only the
//! handshake; it must never panic, hang or allocate what a header claims.
//! Run: `cargo +nightly fuzz run lsp corpus/lsp seeds_lsp -- -max_total_time=300`
//! (see docs/testing.md).
#![no_main]

use libfuzzer_sys::fuzz_target;

fn frame(body: &str) -> Vec<u8> {
    format!("Content-Length: {}\r\n\r\n{body}", body.len()).into_bytes()
}

fuzz_target!(|data: &[u8]| {
    let mut input = frame(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"capabilities":{}}}"#);
    input.extend(frame(r#"{"jsonrpc":"2.0","method":"initialized","params":{}}"#));
    input.extend_from_slice(data);
    let _ = amp_lsp::serve_bytes(&input);
});
