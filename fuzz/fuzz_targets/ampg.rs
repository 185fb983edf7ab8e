//! The graph loaders on arbitrary bytes: `ampg::read` and `text::parse` must return, never
//! panic, overflow the stack or allocate absurdly. Whatever loads must print, and the text
//! form of a loaded graph must parse again.
//! Run: `cargo +nightly fuzz run ampg -- -max_total_time=300` (see docs/testing.md).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((graph, _plan)) = amp_ir::ampg::read(data) {
        let text = amp_ir::text::print(&graph);
        assert!(amp_ir::text::parse(&text).is_ok(), "a loaded graph's text does not parse:\n{text}");
        let _ = amp_ir::dot::to_dot(&graph);
    }
    let text = String::from_utf8_lossy(data);
    if let Ok(graph) = amp_ir::text::parse(&text) {
        let printed = amp_ir::text::print(&graph);
        let again = amp_ir::text::parse(&printed).map(|g| amp_ir::text::print(&g));
        assert_eq!(again.as_deref(), Ok(printed.as_str()), "print/parse is not a fixed point");
        let _ = amp_ir::ampg::read(&amp_ir::ampg::write(&graph, None));
    }
});
