//! The `.ampg` file: round trips (graph and plan), each structural error, and a loader
//! that neither panics nor misbehaves on truncated, bit-flipped or random files.
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use amp_ir::ampg::{read, to_json, write, AmpgError, MAGIC, MAX_NODES, VERSION};
use amp_ir::text::print;
use amp_ir::Graph;
use common::*;
use proptest::prelude::*;
use serde_json::{json, Value};

fn check_round_trip(graph: &Graph, plan: Option<&Value>) {
    let bytes = write(graph, plan);
    let (loaded, loaded_plan) = read(&bytes).unwrap_or_else(|e| panic!("{e}"));
    assert_same_graph(graph, &loaded);
    assert_eq!(print(graph), print(&loaded));
    assert_eq!(loaded_plan.as_ref(), plan);
    // Writing the loaded graph gives the same bytes: the format is canonical.
    assert_eq!(write(&loaded, plan), bytes);
}

#[test]
fn fixtures_round_trip() {
    let plan = json!({"workers": [[0, 1, 2], [3]], "note": "later"});
    for (name, graph) in fixtures() {
        eprintln!("fixture {name}");
        check_round_trip(&graph, None);
        check_round_trip(&graph, Some(&plan));
    }
}

/// Type names that are not identifiers print quoted where they are used, as where they are
/// declared (a bit flip once turned `Tree` into `Tr%e` and the field `tree: Tr%e` did not
/// parse back).
#[test]
fn odd_type_names_print_quoted_everywhere() {
    let mut graph = every_op();
    let schema = graph.input.as_mut().expect("every_op reads data");
    schema.enums[0].name = "Tr%e".into();
    schema.records[0].name = "Ed ge".into();
    let text = print(&graph);
    assert!(text.contains("tree: \"Tr%e\""), "{text}");
    let parsed = amp_ir::text::parse(&text).unwrap_or_else(|e| panic!("{e:?}\n{text}"));
    assert_eq!(print(&parsed), text);
}

#[test]
fn header_is_magic_then_little_endian_version() {
    let bytes = write(&straight_line(), None);
    assert_eq!(&bytes[..4], b"AMPG");
    assert_eq!(&bytes[4..8], &VERSION.to_le_bytes());
    assert_eq!(bytes[8], b'{');
}

#[test]
fn to_json_is_the_files_document() {
    let plan = json!({"p": 1});
    let graph = with_holes();
    assert_eq!(
        to_json(&graph, Some(&plan)),
        serde_json::from_slice::<Value>(&write(&graph, Some(&plan))[8..]).unwrap()
    );
    assert_eq!(to_json(&graph, None)["nodes"][2], Value::Null, "a hole is null");
}

/// A valid file's JSON document, to damage in the tests below.
fn document(graph: &Graph) -> Value {
    serde_json::from_slice(&write(graph, None)[8..]).unwrap()
}

fn file_of(doc: &Value) -> Vec<u8> {
    let mut bytes = MAGIC.to_vec();
    bytes.extend_from_slice(&VERSION.to_le_bytes());
    bytes.extend(serde_json::to_vec(doc).unwrap());
    bytes
}

fn error_of(doc: &Value) -> AmpgError {
    match read(&file_of(doc)) {
        Ok(_) => panic!("expected an error for {doc}"),
        Err(e) => e,
    }
}

#[test]
fn header_errors() {
    assert_eq!(read(b"").unwrap_err(), AmpgError::Truncated);
    assert_eq!(read(b"AMP").unwrap_err(), AmpgError::Truncated);
    assert_eq!(read(b"AMPG\x01\0").unwrap_err(), AmpgError::Truncated);
    assert_eq!(read(b"ELF\x7f....{}").unwrap_err(), AmpgError::BadMagic);
    assert_eq!(read(b"X").unwrap_err(), AmpgError::BadMagic);
    let err = read(b"AMPG\x01\0\0\0{}").unwrap_err();
    assert_eq!(err, AmpgError::UnsupportedVersion { found: 1, supported: VERSION });
    assert!(err.to_string().contains("version 1"), "{err}");
}

#[test]
fn malformed_json_reports_its_position() {
    let err = read(b"AMPG\x02\0\0\0{\n  \"name\": @\n}").unwrap_err();
    match &err {
        AmpgError::Json { line, column, .. } => assert_eq!((*line, *column), (2, 11)),
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("line 2, column 11"), "{err}");
    // Valid JSON of the wrong shape, and trailing bytes after the document.
    assert!(matches!(read(b"AMPG\x02\0\0\0[1, 2]"), Err(AmpgError::Json { .. })));
    let mut bytes = write(&straight_line(), None);
    bytes.extend_from_slice(b" x");
    assert!(matches!(read(&bytes), Err(AmpgError::Json { .. })));
}

#[test]
fn structural_errors() {
    let good = document(&list_reduce());

    let mut doc = good.clone();
    doc["edges"].as_array_mut().unwrap().push(json!([0, 0, 99, 0]));
    assert!(matches!(error_of(&doc), AmpgError::MissingNode { node: 99, .. }));

    let mut doc = document(&with_holes());
    doc["edges"].as_array_mut().unwrap().push(json!([0, 0, 2, 0]));
    assert!(matches!(error_of(&doc), AmpgError::MissingNode { node: 2, .. }), "an edge into a hole");

    let mut doc = good.clone();
    doc["edges"].as_array_mut().unwrap().push(json!([0, 3, 1, 0]));
    assert!(matches!(error_of(&doc), AmpgError::MissingPort { node: 0, port: 3, output: true, .. }));

    let mut doc = good.clone();
    doc["edges"].as_array_mut().unwrap().push(json!([0, 0, 1, 7]));
    assert!(matches!(error_of(&doc), AmpgError::MissingPort { node: 1, port: 7, output: false, .. }));

    let mut doc = good.clone();
    doc["nodes"][0]["outputs"] = Value::Array(vec![json!("Unit"); 65_536]);
    assert!(matches!(error_of(&doc), AmpgError::TooManyPorts { node: 0, count: 65_536, .. }));

    let mut doc = good.clone();
    doc["nodes"] = Value::Array(vec![Value::Null; MAX_NODES + 1]);
    doc["edges"] = json!([]);
    assert!(matches!(error_of(&doc), AmpgError::TooManyNodes { .. }));

    let mut doc = good.clone();
    doc["nodes"][0]["loc"]["file"] = json!(5);
    assert!(matches!(error_of(&doc), AmpgError::FileOutOfRange { node: 0, file: 5, files: 1 }));

    let mut doc = good.clone();
    doc["nodes"][3]["key"] = json!([0, 9]);
    assert!(matches!(error_of(&doc), AmpgError::FieldOutOfRange { node: 3, field: 9, .. }));

    let mut doc = good.clone();
    doc["nodes"][4]["op"]["Cond"]["pred"]["Bin"][1] = json!({"Field": 40});
    assert!(matches!(error_of(&doc), AmpgError::FieldOutOfRange { node: 4, field: 40, .. }));

    let mut doc = good.clone();
    doc["nodes"][1]["outputs"][0] = json!({"F32": [u64::MAX, 2]});
    assert!(matches!(error_of(&doc), AmpgError::TooLarge { .. }));

    let mut doc = good.clone();
    doc["params"][0]["shape"] = json!([u64::MAX, u64::MAX]);
    assert!(matches!(error_of(&doc), AmpgError::TooLarge { .. }));

    let mut doc = good.clone();
    doc["state"][1]["name"] = json!("inst");
    assert!(matches!(error_of(&doc), AmpgError::DuplicateField { .. }));

    let mut doc = good.clone();
    doc["surprise"] = json!(1);
    assert!(matches!(error_of(&doc), AmpgError::Json { .. }), "unknown fields are rejected");

    // Every error names what is wrong.
    let mut doc = good;
    doc["edges"][0][0] = json!(1234);
    assert_eq!(error_of(&doc).to_string(), "edge 0 connects node %1234, which does not exist");
}

#[test]
fn collection_ops_and_the_input_schema_round_trip() {
    let graph = every_op();
    let keywords: Vec<&str> = graph.nodes.node_weights().map(|n| n.op.keyword()).collect();
    let ops = ["flatmap", "group", "ungroup", "gather", "scatter_sum", "reduce", "top_k", "state_from_payload"];
    for op in ops.into_iter().chain(["gather_rows", "mask_rows"]) {
        assert!(keywords.contains(&op), "the fixture lost its `{op}` node");
    }
    check_round_trip(&graph, None);
    let (loaded, _) = read(&write(&graph, None)).unwrap();
    let schema = loaded.input.expect("the schema is stored");
    assert_eq!(schema, every_data_type());
    assert_eq!(schema.input_record().map(|r| r.name.as_str()), Some("Example"));
    assert!(schema.is_recursive(0), "Tree still contains itself");
}

/// The index of the first node whose op is `op` in a file's document.
fn node_with_op(doc: &Value, op: &str) -> usize {
    doc["nodes"].as_array().unwrap().iter().position(|n| n["op"].get(op).is_some()).unwrap()
}

#[test]
fn schema_and_collection_op_errors() {
    let good = document(&every_op());
    let bad_schema = |doc: &Value| match error_of(doc) {
        AmpgError::BadSchema { message } => message,
        other => panic!("expected BadSchema, got {other:?}"),
    };

    let mut doc = good.clone();
    doc["input"]["records"][1]["fields"][1]["ty"] = json!({"Seq": {"Record": 7}});
    assert_eq!(bad_schema(&doc), "field `edges`: record #7 does not exist");
    assert_eq!(error_of(&doc).to_string(), "bad input schema: field `edges`: record #7 does not exist");

    let mut doc = good.clone();
    doc["input"]["enums"][0]["variants"][1]["fields"][0]["ty"] = json!({"Enum": 2});
    assert_eq!(bad_schema(&doc), "field `left`: enum #2 does not exist");

    let mut doc = good.clone();
    doc["input"]["records"][1]["fields"][3]["ty"] = json!({"Tuple": ["Int", {"Seq": {"Enum": 9}}]});
    assert_eq!(bad_schema(&doc), "field `pair`: enum #9 does not exist");

    let mut doc = good.clone();
    doc["input"]["input"] = json!(2);
    assert_eq!(bad_schema(&doc), "input record #2 does not exist");

    let mut doc = good.clone();
    doc["input"]["records"][1]["fields"][5]["ty"] = json!({"F32": [u64::MAX, 2]});
    assert!(bad_schema(&doc).contains("more elements than fit in 64 bits"));

    // A graph without a schema is fine (hand-built graphs read no data).
    let mut doc = good.clone();
    doc["input"] = Value::Null;
    assert_eq!(read(&file_of(&doc)).unwrap().0.input, None);

    // Batches are checked like tensors, and the fields the new ops name are range-checked.
    let mut doc = good.clone();
    let group = node_with_op(&doc, "Group");
    doc["nodes"][group]["outputs"][0] = json!({"Batch": [u64::MAX, 2]});
    assert!(matches!(error_of(&doc), AmpgError::TooLarge { .. }));

    let mut doc = good.clone();
    let flatmap = node_with_op(&doc, "Flatmap");
    doc["nodes"][flatmap]["op"]["Flatmap"]["field"] = json!(40);
    assert!(matches!(error_of(&doc), AmpgError::FieldOutOfRange { field: 40, .. }));

    let mut doc = good.clone();
    let scatter = node_with_op(&doc, "ScatterSum");
    doc["nodes"][scatter]["op"]["ScatterSum"]["count"] = json!({"Field": 41});
    assert!(matches!(error_of(&doc), AmpgError::FieldOutOfRange { field: 41, .. }));

    let mut doc = good;
    let top_k = doc["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .position(|n| n["op"]["StateFromPayload"]["int"].get("TopK").is_some())
        .unwrap();
    doc["nodes"][top_k]["op"]["StateFromPayload"]["int"]["TopK"]["slot"] = json!({"Field": 42});
    assert!(matches!(error_of(&doc), AmpgError::FieldOutOfRange { field: 42, .. }));
}

/// What `read` accepts, `text::print` must write as text that `text::parse` reads back
/// (the `bit_flips_never_panic` property); a schema with two types of one name breaks it.
#[test]
fn a_loaded_schema_prints_as_parseable_text() {
    let mut doc = document(&every_op());
    doc["input"]["records"][0]["name"] = json!("Example");
    match read(&file_of(&doc)) {
        Err(AmpgError::BadSchema { .. }) => {}
        Err(other) => panic!("unexpected error {other:?}"),
        Ok((graph, _)) => {
            let text = print(&graph);
            if let Err(e) = amp_ir::text::parse(&text) {
                panic!("loaded, but its printout does not parse: {e}");
            }
        }
    }
}

/// `docs/IR.md`: `read` rejects unknown keys. Only the top-level document and nodes deny
/// them; the schema (like params, state fields and locations) ignores them.
#[test]
fn unknown_keys_in_the_schema_are_rejected() {
    let mut doc = document(&every_op());
    doc["input"]["records"][0]["fields"][0]["surprise"] = json!(1);
    let result = read(&file_of(&doc)).map(|_| ());
    assert!(matches!(result, Err(AmpgError::Json { .. })), "{result:?}");
}

/// A file whose `cond` predicate is `depth` nested `Not`s around a field.
fn file_with_predicate_depth(depth: usize) -> Vec<u8> {
    let mut doc = document(&list_reduce());
    doc["nodes"][4]["op"]["Cond"]["pred"] = json!("PLACEHOLDER");
    let deep = format!("{}{{\"Field\":1}}{}", "{\"Not\":".repeat(depth), "}".repeat(depth));
    let text = serde_json::to_string(&doc).unwrap().replace("\"PLACEHOLDER\"", &deep);
    let mut bytes = MAGIC.to_vec();
    bytes.extend_from_slice(&VERSION.to_le_bytes());
    bytes.extend(text.as_bytes());
    bytes
}

#[test]
fn deep_nesting_is_an_error_not_a_crash() {
    // The nesting is measured on the bytes, so a hostile expression cannot overflow the stack.
    assert!(matches!(read(&file_with_predicate_depth(100_000)), Err(AmpgError::TooDeep { .. })));
}

/// Issue 27 item 9: `ampc compile` wrote an index of ~60 chained `+` that serde_json's
/// fixed depth of 128 refused. Every expression the verifier accepts must read back, and
/// here in a test thread's small stack with the debug build's large frames.
#[test]
fn the_deepest_expression_the_verifier_accepts_reads_back() {
    let bytes = file_with_predicate_depth(amp_ir::limits::MAX_EXPR_DEPTH - 1);
    let (graph, _) = read(&bytes).unwrap();
    let errors = amp_ir::verify::verify(&graph).err().unwrap_or_default();
    assert!(!errors.iter().any(|e| e.to_string().contains("nests deeper")), "{errors:?}");
    let bytes = file_with_predicate_depth(amp_ir::limits::MAX_EXPR_DEPTH + 5);
    let (graph, _) = read(&bytes).unwrap();
    let errors = amp_ir::verify::verify(&graph).unwrap_err();
    assert!(errors.iter().any(|e| e.to_string().contains("nests deeper than 128")), "{errors:?}");
}

#[test]
fn truncation_at_every_length_is_an_error() {
    let bytes = write(&list_reduce(), Some(&json!({"a": [1, 2, 3]})));
    for len in 0..bytes.len() {
        assert!(read(&bytes[..len]).is_err(), "truncated to {len} bytes");
    }
    assert!(read(&bytes).is_ok());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_graphs_round_trip(graph in any_graph()) {
        check_round_trip(&graph, None);
    }

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = read(&bytes);
        let mut with_header = MAGIC.to_vec();
        with_header.extend_from_slice(&VERSION.to_le_bytes());
        with_header.extend_from_slice(&bytes);
        let _ = read(&with_header);
    }

    #[test]
    fn bit_flips_never_panic(fixture in 0usize..4, flips in prop::collection::vec(any::<prop::sample::Index>(), 1..4), bits in prop::collection::vec(0u8..8, 4)) {
        let mut bytes = write(&fixtures()[fixture].1, None);
        for (flip, bit) in flips.iter().zip(&bits) {
            let at = flip.index(bytes.len());
            bytes[at] ^= 1 << bit;
        }
        // Whatever still loads is a graph the text form can print and parse back.
        if let Ok((graph, _)) = read(&bytes) {
            let text = print(&graph);
            let parsed = amp_ir::text::parse(&text);
            prop_assert!(parsed.is_ok(), "{:?}\n{}", parsed.err(), text);
        }
    }
}

/// Files written before `.ampg` serialised `Op` through its own derive (by the build that
/// kept a mirror type, from `ampc compile examples/{ggsnn,tree_lstm}.amp`) still load, and
/// this build writes them back byte for byte: the format did not change. `ggsnn` holds a
/// const scalar (`{"ScalarBits": ...}`), both hold every op kind the examples lower to.
#[test]
fn files_of_the_previous_writer_read_and_write_back_identically() {
    for (name, bytes) in
        [("ggsnn", &include_bytes!("data/ggsnn.ampg")[..]), ("tree_lstm", &include_bytes!("data/tree_lstm.ampg")[..])]
    {
        let (graph, plan) = read(bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(graph.nodes.node_count() > 10, "{name}");
        assert_eq!(write(&graph, plan.as_ref()), bytes, "{name}");
    }
    let text = String::from_utf8_lossy(include_bytes!("data/ggsnn.ampg"));
    assert!(text.contains("ScalarBits"), "the fixture keeps a const scalar");
}
