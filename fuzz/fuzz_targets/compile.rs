//! Sources through the whole middle end, as `ampc compile` runs it: check, lower, passes,
//! verify — then the graph written as `.ampg` must read back and verify again (what
//! `ampc compile` writes, `amprun` reads: issue 27 item 9). Nothing may panic, hang or
//! allocate past `amp_ir::limits`.
//! Run: `cargo +nightly fuzz run compile corpus/compile seeds -- -max_total_time=300`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let (map, checked) = amp_sema::check_source("fuzz.amp", &text, &amp_sema::Options::default());
    if checked.has_errors() {
        return;
    }
    for &model in &checked.program.models {
        match amp_lower::compile_model(&checked.program, &map, model) {
            Ok((graph, _)) => {
                let bytes = amp_ir::ampg::write(&graph, None);
                let (loaded, _) = amp_ir::ampg::read(&bytes).expect("a compiled graph reads back");
                assert!(amp_ir::verify::verify(&loaded).is_ok(), "a compiled graph verifies after reading");
            }
            // The lowering's refusals are diagnostics; a verifier error is a compiler bug.
            Err(amp_lower::CompileError::Refused(_)) => {}
            Err(amp_lower::CompileError::Defect(d)) => panic!("the lowered graph fails verification: {d:?}"),
        }
    }
});
