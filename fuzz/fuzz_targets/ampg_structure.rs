//! The `.ampg` loader and the verifier on structurally mutated graphs: the bytes drive
//! edits of a valid graph's JSON document (replace any value with a number at a limit's
//! edge, a negative, a huge or a nested value, drop or duplicate array entries), so the
//! fuzzer reaches well-formed files with hostile shapes, counts, field ids and depths that
//! byte mutations rarely produce. `read` and `verify` must return, never panic or
//! allocate past `amp_ir::limits`; a graph both accept must print and parse again.
//! Run: `cargo +nightly fuzz run ampg_structure -- -max_total_time=300`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::{json, Value};
use std::sync::OnceLock;

/// The canonical examples compiled to `.ampg` JSON documents, once.
fn documents() -> &'static Vec<Value> {
    static DOCS: OnceLock<Vec<Value>> = OnceLock::new();
    DOCS.get_or_init(|| {
        amp_tests::EXAMPLES
            .iter()
            .filter_map(|(_, text)| {
                // Four experts keep the MoE's graph small enough to mutate quickly.
                let defines = if text.contains("experts") { vec![("experts".into(), 4)] } else { Vec::new() };
                let (map, checked) = amp_sema::check_source("m.amp", text, &amp_sema::Options { defines });
                let (graph, _) = amp_lower::compile_model(&checked.program, &map, checked.program.models[0]).ok()?;
                Some(amp_ir::ampg::to_json(&graph, None))
            })
            .collect()
    })
}

/// Every value of `doc` in pre-order, as JSON pointers.
fn pointers(doc: &Value, at: String, out: &mut Vec<String>) {
    out.push(at.clone());
    match doc {
        Value::Array(items) => items.iter().enumerate().for_each(|(i, v)| pointers(v, format!("{at}/{i}"), out)),
        Value::Object(map) => map.iter().for_each(|(k, v)| pointers(v, format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")), out)),
        _ => {}
    }
}

fn replacement(kind: u8, old: &Value) -> Value {
    match kind % 12 {
        0 => json!(0),
        1 => json!(-1),
        2 => json!(u64::MAX),
        3 => json!(1u64 << 30),
        4 => json!((1u64 << 30) + 1),
        5 => json!(3_037_000_500u64),
        6 => json!(65_535),
        7 => json!(200_000),
        8 => Value::Null,
        9 => json!([old.clone(), old.clone()]),
        10 => json!({"Not": old.clone()}),
        _ => json!({"Bin": ["Add", old.clone(), old.clone()]}),
    }
}

fuzz_target!(|data: &[u8]| {
    let docs = documents();
    let Some((&pick, edits)) = data.split_first() else { return };
    let Some(doc) = docs.get(pick as usize % docs.len().max(1)) else { return };
    let mut doc = doc.clone();
    // Each edit: two bytes choose the value (by pre-order position), one the replacement.
    for edit in edits.chunks_exact(3).take(16) {
        let mut all = Vec::new();
        pointers(&doc, String::new(), &mut all);
        let target = &all[usize::from(u16::from_le_bytes([edit[0], edit[1]])) % all.len()];
        if let Some(slot) = doc.pointer_mut(target) {
            let old = slot.take();
            *slot = match (edit[2] >> 4, &old) {
                // Drop an array's last entry, or repeat its first.
                (0, Value::Array(items)) => Value::Array(items[..items.len().saturating_sub(1)].to_vec()),
                (1, Value::Array(items)) => {
                    Value::Array(items.iter().cloned().chain(items.first().cloned()).collect())
                }
                _ => replacement(edit[2], &old),
            };
        }
    }
    let mut bytes = amp_ir::ampg::MAGIC.to_vec();
    bytes.extend_from_slice(&amp_ir::ampg::VERSION.to_le_bytes());
    bytes.extend(serde_json::to_vec(&doc).unwrap_or_default());
    if let Ok((graph, _)) = amp_ir::ampg::read(&bytes) {
        if amp_ir::verify::verify(&graph).is_ok() {
            let text = amp_ir::text::print(&graph);
            assert!(amp_ir::text::parse(&text).is_ok(), "a verified graph's text does not parse:\n{text}");
        }
    }
});
