//! Data files against the canonical models' schemas and ranges, as `amprun` loads them:
//! the JSON Lines, PTB, CSV and SDF loaders on arbitrary bytes, then every loaded instance
//! built and checked against the ranges its model puts on its ints (Embedding rows,
//! classes, routing arms; `amp_data::ranges`). Nothing may panic; an out-of-range value is
//! found with the field that holds it.
//! Run: `cargo +nightly fuzz run data_ranges -- -max_total_time=300`.
#![no_main]

use amp_data::ranges::{first_out_of_range, model_ranges, Range};
use amp_data::{csv, jsonl, ptb, sdf, Instance, Vocab, VocabOptions};
use amp_ir::Schema;
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

/// Each example's input schema and ranges, from its compiled graph (small sizes, so that
/// ranges are easy to break).
fn models() -> &'static Vec<(&'static str, Schema, Vec<Range>)> {
    static MODELS: OnceLock<Vec<(&'static str, Schema, Vec<Range>)>> = OnceLock::new();
    MODELS.get_or_init(|| {
        amp_tests::EXAMPLES
            .iter()
            .copied()
            .filter_map(|(name, text)| {
                // Small ranges are easy to break: three words, four experts.
                let defines = match name {
                    "moe" => vec![("experts".into(), 4)],
                    "list_reduce" | "tree_lstm" => vec![("vocab".into(), 3)],
                    _ => Vec::new(),
                };
                let (map, checked) = amp_sema::check_source(name, text, &amp_sema::Options { defines });
                let (graph, _) = amp_lower::compile_model(&checked.program, &map, checked.program.models[0]).ok()?;
                let ranges = model_ranges(&graph);
                Some((name, graph.input.clone()?, ranges))
            })
            .collect()
    })
}

fn check(schema: &Schema, ranges: &[Range], loaded: Result<amp_data::Loaded, amp_data::DataError>) {
    let Ok(loaded) = loaded else { return };
    for value in loaded.instances {
        let instance = Instance::new(schema, value).expect("a loaded instance fits its schema");
        if let Some((field, value, range)) = first_out_of_range(&instance, ranges) {
            assert!(!(0..range.limit).contains(&value), "{field} = {value} is in range");
            assert!(!field.is_empty(), "an out-of-range value names its field");
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let vocab = Vocab::from_words(["the", "rock", "film"], &VocabOptions::default());
    for (name, schema, ranges) in models() {
        check(schema, ranges, jsonl::parse(schema, data, "fuzz.jsonl", &jsonl::JsonlOptions { skip_bad: true, threads: 0, limit: None }));
        match *name {
            "tree_lstm" => check(schema, ranges, ptb::parse(schema, data, "fuzz.txt", &vocab, &ptb::PtbOptions::default())),
            "mlp" => check(schema, ranges, csv::parse(schema, data, "fuzz.csv", &csv::CsvOptions::default())),
            "ggsnn" => check(schema, ranges, sdf::parse(schema, data, "fuzz.sdf", &sdf::SdfOptions::default())),
            _ => {}
        }
    }
});
