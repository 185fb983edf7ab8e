//! The hand-built schemas the loader tests use are the ones the compiler derives from the
//! canonical examples, so the loaders are tested on what `amprun` will hand them.

mod common;

use amp_ir::Schema;

/// The input schema of record `record` in `examples/<file>`.
fn example_schema(file: &str, record: &str) -> Schema {
    let path = common::examples_dir().join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let (_, checked) = amp_sema::check_source(file, &text, &amp_sema::Options::default());
    assert!(!checked.has_errors(), "{file}: {:?}", checked.diagnostics);
    let id = checked.program.records.iter().position(|r| r.name == record).expect("record in example");
    amp_lower::input_schema(&checked.program, amp_sema::RecordId(id as u32)).expect("a data record")
}

#[test]
fn hand_built_schemas_match_the_examples() {
    assert_eq!(example_schema("tree_lstm.amp", "Sentence"), common::tree_schema());
    assert_eq!(example_schema("mlp.amp", "Digit"), common::digit_schema());
    assert_eq!(example_schema("ggsnn.amp", "Graph"), common::graph_schema());
    assert_eq!(example_schema("list_reduce.amp", "Example"), amp_data::generate::list_reduce_schema());
    assert_eq!(example_schema("moe.amp", "Sample"), amp_data::generate::moe_schema());
}
