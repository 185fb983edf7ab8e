//! Lexer + parser + checker + both diagnostic printers on arbitrary bytes.
//! Run: `cargo +nightly fuzz run check -- -max_total_time=300` (see docs/testing.md).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let (map, checked) = amp_sema::check_source("fuzz.amp", &text, &amp_sema::Options::default());
    let _ = amp_diagnostics::render_human(&map, &checked.diagnostics, false);
    let _ = amp_diagnostics::render_json(&map, &checked.diagnostics);
});
