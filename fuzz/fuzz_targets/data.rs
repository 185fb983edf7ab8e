//! The data loaders on arbitrary bytes, against the canonical models' input schemas:
//! JSON Lines (every model), PTB trees (Tree-LSTM), CSV (MLP) and SDF (GGSNN) must return
//! instances or an error naming file and line, never panic; every loaded instance must
//! build an `Instance` (the view the executor reads).
//! Run: `cargo +nightly fuzz run data -- -max_total_time=300` (see docs/testing.md).
#![no_main]

use amp_data::{csv, jsonl, ptb, sdf, Instance, Vocab, VocabOptions};
use amp_ir::Schema;
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

/// The input schema of each example, compiled once.
fn schemas() -> &'static Vec<(&'static str, Schema)> {
    static SCHEMAS: OnceLock<Vec<(&'static str, Schema)>> = OnceLock::new();
    SCHEMAS.get_or_init(|| {
        amp_tests::EXAMPLES
            .iter()
            .copied()
            .map(|(name, text)| {
                let (_, checked) = amp_sema::check_source(name, text, &amp_sema::Options::default());
                let program = &checked.program;
                let record = match program.components[program.models[0].0 as usize].fns.iter().find(|f| f.name == "loss") {
                    Some(f) => match &f.locals[f.params[0].0 as usize].ty {
                        amp_sema::Ty::Record(r) => *r,
                        _ => unreachable!("every example's loss takes a record"),
                    },
                    None => unreachable!("every example has a loss"),
                };
                (name, amp_lower::input_schema(program, record).expect("the examples' inputs are data"))
            })
            .collect()
    })
}

fn check(schema: &Schema, loaded: Result<amp_data::Loaded, amp_data::DataError>) {
    match loaded {
        Ok(loaded) => {
            for value in loaded.instances {
                Instance::new(schema, value).expect("a loaded instance fits its schema");
            }
        }
        Err(e) => assert!(e.to_string().starts_with("fuzz"), "errors name the file: {e}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let vocab = Vocab::from_words(["the", "rock", "film"], &VocabOptions::default());
    for (name, schema) in schemas() {
        check(schema, jsonl::parse(schema, data, "fuzz.jsonl", &jsonl::JsonlOptions { skip_bad: true, threads: 0, limit: None }));
        check(schema, jsonl::parse(schema, data, "fuzz.jsonl", &jsonl::JsonlOptions { skip_bad: false, threads: 0, limit: None }));
        match *name {
            "tree_lstm" => check(schema, ptb::parse(schema, data, "fuzz.txt", &vocab, &ptb::PtbOptions::default())),
            "mlp" => check(schema, csv::parse(schema, data, "fuzz.csv", &csv::CsvOptions::default())),
            "ggsnn" => check(schema, sdf::parse(schema, data, "fuzz.sdf", &sdf::SdfOptions::default())),
            _ => {}
        }
    }
});
