//! The text form: exact round trips on hand-built and generated graphs, a golden print of
//! the loop fixture, parse errors with their positions, and parser robustness on random
//! bytes and on mutated printouts.

mod common;

use amp_ir::text::{parse, print, ParseError};
use amp_ir::{
    DataTy, EnumSchema, FieldId, FieldSchema, Graph, Op, PayloadInt, RecordSchema, ReduceFn, Schema, StateExpr,
    VariantSchema,
};
use common::*;
use petgraph::stable_graph::NodeIndex;
use proptest::prelude::*;

/// print → parse gives the same graph, and printing that gives the same text.
fn check_round_trip(graph: &Graph) {
    let text = print(graph);
    let parsed = match parse(&text) {
        Ok(parsed) => parsed,
        Err(e) => panic!("{e}\n{text}"),
    };
    assert_same_graph(graph, &parsed);
    assert_eq!(print(&parsed), text);
}

#[test]
fn fixtures_round_trip() {
    for (name, graph) in fixtures() {
        eprintln!("fixture {name}");
        check_round_trip(&graph);
    }
}

#[test]
fn holes_are_recreated() {
    let graph = with_holes();
    let parsed = parse(&print(&graph)).unwrap();
    assert_eq!(parsed.nodes.node_count(), graph.nodes.node_count());
    assert!(!parsed.nodes.contains_node(petgraph::stable_graph::NodeIndex::new(2)));
    assert!(!parsed.nodes.contains_node(petgraph::stable_graph::NodeIndex::new(7)));
    assert!(parsed.nodes.contains_node(petgraph::stable_graph::NodeIndex::new(10)));
}

#[test]
fn golden_list_reduce() {
    let expected = r#"amp.graph @ListReduce {
  file 0 "examples/list_reduce.amp"
  state %inst: instance, %t0: counter
  param embed.weight: f32[14, 128] normal
  param cell.weight: f32[128, 256] uniform(256)
  param cell.bias: f32[128] uniform(256)
  %0 = source() -> unit "x" loc(0:130..137 @13:5)
  %1 = const zeros (%0#0: unit) -> f32[128] "h"
  %2 = isu %t0 := 0 (%1#0: f32[128]) -> f32[128] writes(%t0) "for"
  %3 = phi 2 (%2#0: f32[128], %10#0: f32[128]) -> f32[128] key(%inst, %t0) "h"
  %4 = cond [%t0 < len($.tokens)] (%3#0: f32[128]) -> f32[128], f32[128] reads(%t0) ""
  %5 = embedding @embed[$.tokens[%t0]] (%6#0: unit) -> f32[128] reads(%t0) key(%inst, %t0) "embed"
  %6 = forget(%4#0: f32[128]) -> unit ""
  %7 = concat(%5#0: f32[128], %4#0: f32[128]) -> f32[256] key(%inst, %t0) ""
  %8 = linear @cell (%7#0: f32[256]) -> f32[128] key(%inst, %t0) "cell" loc(0:150..157 @15:5)
  %9 = unary tanh (%8#0: f32[128]) -> f32[128] key(%inst, %t0) "h"
  %10 = isu %t0 := %t0 + 1 inverse %t0 - 1 (%9#0: f32[128]) -> f32[128] reads(%t0) writes(%t0) ""
  %11 = isu %t0 := -1 (%4#1: f32[128]) -> f32[128] writes(%t0) key(%inst) "end for"
  %12 = sink "h" (%11#0: f32[128]) -> () ""
}
"#;
    assert_eq!(print(&list_reduce()), expected);
    check_round_trip(&parse(expected).unwrap());
}

#[test]
fn expressions_print_with_minimal_parentheses() {
    let text = print(&every_op());
    assert!(
        text.contains("cond [!%t && %\"odd name\" >= %n || (%t - -3) % 2 == -9223372036854775808 * (%tn / %s)]"),
        "{text}"
    );
    assert!(text.contains("isu %t := !!-1 inverse %t - (1 - -2)"), "{text}");
    assert!(text.contains("read $.seq[len($.len.\"x y\")]{1}.\"weird \\\"field\\\"\""), "{text}");
    assert!(text.contains("const bits(0x7fc00001)"), "{text}");
    assert!(text.contains("const -0.0"), "{text}");
    assert!(text.contains("const 1e-45"), "{text}");
    assert!(text.contains("linear @\"with space\""), "{text}");
}

#[test]
fn collection_ops_batches_and_schema_print_as_documented() {
    let text = print(&every_op());
    for line in [
        "  record Edge { src: int, dst: int, owner: Example }\n",
        "  record Example { xs: [int], edges: [Edge], tree: Tree, pair: (int, bool), nothing: (), grid: f32[2, 3], \
         scale: f32, deep: [[f32[4]]] }\n",
        "  enum Tree { Leaf { word: int }, Node { left: Tree, right: Tree }, Nil {} }\n",
        "  enum Never {  }\n",
        "  input Example\n  param layers.0.weight: f32[4, 4] uniform(4)\n",
    ] {
        assert!(text.contains(line), "{line:?} missing from\n{text}");
    }
    for op in [
        "flatmap %\"odd name\" [len($.xs)] (",
        "group %\"odd name\" [%n] (_: f32[32], _: unit) -> f32[?, 32] ",
        "ungroup %\"odd name\" (%",
        "gather [$.edges[%\"odd name\"].src] (_: f32[?, 32]) -> f32[32] ",
        "gather [0] (_: f32[4]) -> f32 ",
        "scatter_sum %\"odd name\" [$.edges[%\"odd name\"].dst] [len($.xs)] (%",
        "reduce sum (_: f32[?, 32]) -> f32[32] ",
        "reduce mean (_: f32[?]) -> f32 ",
        "top_k 2 (_: f32[4]) -> f32[2] ",
        "state_from_payload %s := argmax (_: f32[4], _: unit) -> unit ",
        "state_from_payload %s := top_k 2 [%\"odd name\"] (_: f32[4], _: f32[?, 32]) -> f32[?, 32] ",
        "gather_rows %\"odd name\" [$.edges[%\"odd name\"].src] [len($.xs)] (_: f32[?, 32]) -> f32[?, 32] ",
        "mask_rows %\"odd name\" [$.edges[%\"odd name\"].dst == 1] (_: f32[?, 32]) -> f32[?, 32] ",
    ] {
        assert!(text.contains(op), "{op:?} missing from\n{text}");
    }
}

/// A hand-written graph with every collection op: parsing must give the ops the text
/// names (a round trip alone would not notice a printer and a parser that swap two ops),
/// and printing gives the text back.
#[test]
fn collection_ops_parse_to_what_they_name() {
    let text = r#"amp.graph @Collections {
  state %inst: instance, %e0: element, %e1: element, %slot0: slot
  record Graph { nodes: [int], edges: [Edge], tree: Tree }
  record Edge { src: int, dst: int }
  enum Tree { Leaf { word: int }, Node { left: Tree, right: Tree } }
  input Graph
  param emb.weight: f32[5, 32] normal
  %0 = source() -> unit writes(%inst) "x"
  %1 = flatmap %e0 [len($.nodes)] (%0#0: unit) -> unit writes(%e0) key(%inst) "nodes"
  %2 = embedding @emb[$.nodes[%e0]] (%1#0: unit) -> f32[32] reads(%e0) "emb"
  %3 = group %e0 [len($.nodes)] (%2#0: f32[32], %0#0: unit) -> f32[?, 32] writes(%e0) key(%inst) "h"
  %4 = flatmap %e1 [len($.edges)] (%3#0: f32[?, 32]) -> f32[?, 32] writes(%e1) key(%inst) "edges"
  %5 = gather [$.edges[%e1].src] (%4#0: f32[?, 32]) -> f32[32] reads(%e1) key(%inst, %e1) "src"
  %6 = group %e1 [len($.edges)] (%5#0: f32[32], %0#0: unit) -> f32[?, 32] writes(%e1) key(%inst) "m"
  %7 = scatter_sum %e1 [$.edges[%e1].dst] [len($.nodes)] (%6#0: f32[?, 32]) -> f32[?, 32] key(%inst) "a"
  %8 = ungroup %e0 (%7#0: f32[?, 32]) -> f32[32] writes(%e0) key(%inst) "rows"
  %9 = top_k 2 (%8#0: f32[32]) -> f32[2] key(%inst, %e0) "top"
  %10 = state_from_payload %slot0 := top_k 2 [%e0] (%8#0: f32[32], %9#0: f32[2]) -> f32[2] reads(%e0) writes(%slot0) key(%inst, %e0) "slot"
  %11 = state_from_payload %slot0 := argmax (%8#0: f32[32], %10#0: f32[2]) -> f32[2] writes(%slot0) key(%inst, %e0) ""
  %12 = reduce mean (%11#0: f32[2]) -> f32 key(%inst, %e0) "mean"
  %13 = reduce sum (%7#0: f32[?, 32]) -> f32[32] key(%inst) "sum"
  %14 = sink "h" (%13#0: f32[32]) -> () ""
}
"#;
    let graph = parse(text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(print(&graph), text);
    let (e0, e1, slot) = (FieldId(1), FieldId(2), FieldId(3));
    let len = |seq: &str| StateExpr::Len(data(&[seq]));
    let expected = [
        (1, Op::Flatmap { field: e0, count: len("nodes") }),
        (3, Op::Group { field: e0, count: len("nodes") }),
        (4, Op::Flatmap { field: e1, count: len("edges") }),
        (5, Op::Gather { index: element_of("edges", field(2), "src") }),
        (6, Op::Group { field: e1, count: len("edges") }),
        (7, Op::ScatterSum { field: e1, index: element_of("edges", field(2), "dst"), count: len("nodes") }),
        (8, Op::Ungroup { field: e0 }),
        (9, Op::TopK { k: 2 }),
        (10, Op::StateFromPayload { field: slot, int: PayloadInt::TopK { k: 2, slot: field(1) } }),
        (11, Op::StateFromPayload { field: slot, int: PayloadInt::Argmax }),
        (12, Op::Reduce(ReduceFn::Mean)),
        (13, Op::Reduce(ReduceFn::Sum)),
    ];
    for (index, op) in expected {
        assert_eq!(graph.nodes[NodeIndex::new(index)].op, op, "%{index}");
    }
    assert_eq!(graph.nodes[NodeIndex::new(3)].outputs, vec![batch(&[32])]);
    assert_eq!(graph.nodes[NodeIndex::new(12)].outputs, vec![f32ty(&[])]);
    let schema = graph.input.expect("the schema lines give an input schema");
    let named = |name: &str, ty: DataTy| FieldSchema { name: name.into(), ty };
    let tree = DataTy::Enum(0);
    assert_eq!(
        schema,
        Schema {
            records: vec![
                RecordSchema {
                    name: "Graph".into(),
                    fields: vec![
                        named("nodes", DataTy::Seq(Box::new(DataTy::Int))),
                        named("edges", DataTy::Seq(Box::new(DataTy::Record(1)))),
                        named("tree", tree.clone()),
                    ],
                },
                RecordSchema {
                    name: "Edge".into(),
                    fields: vec![named("src", DataTy::Int), named("dst", DataTy::Int)]
                },
            ],
            enums: vec![EnumSchema {
                name: "Tree".into(),
                variants: vec![
                    VariantSchema { name: "Leaf".into(), fields: vec![named("word", DataTy::Int)] },
                    VariantSchema {
                        name: "Node".into(),
                        fields: vec![named("left", tree.clone()), named("right", tree)]
                    },
                ],
            }],
            input: 0,
        }
    );
    assert!(schema.is_recursive(0), "Tree contains itself");
}

#[test]
fn parse_accepts_hand_written_variations() {
    // Comments, blank lines, CRLF, extra spaces, nodes out of order, `f32[]`.
    let text = "// a comment\r\n\r\namp.graph   @g {\r\n  state %i : instance\r\n  %1 = unary relu ( %0 # 0 : f32[] ) -> f32 \"\"\r\n  // inside\r\n  %0 = source ( ) -> f32 \"\"\r\n}\r\n// after\r\n";
    let graph = parse(text).unwrap();
    assert_eq!(graph.nodes.node_count(), 2);
    assert_eq!(common::edges(&graph), vec![(0, 0, 1, 0)]);
}

/// Parses `body` inside a graph with fields `%i` and `%t` and one file, expecting an error
/// at `line:col` (counting the two header lines) whose message contains `needle`.
fn check_error(body: &str, line: usize, col: usize, needle: &str) {
    let text = format!("amp.graph @g {{\n  file 0 \"f.amp\"\n  state %i: instance, %t: counter\n{body}\n}}\n");
    match parse(&text) {
        Ok(_) => panic!("expected an error for:\n{text}"),
        Err(ParseError { line: l, col: c, message }) => {
            assert!(message.contains(needle), "message {message:?} lacks {needle:?}");
            assert_eq!((l, c), (line + 3, col), "position of {message:?}");
        }
    }
}

#[test]
fn parse_errors_point_at_the_problem() {
    let src = "  %0 = source() -> unit \"\"";
    check_error(&format!("{src}\n  %0 = source() -> unit \"\""), 2, 3, "duplicate node %0");
    check_error("  %0 = isu %x := 0 () -> () \"\"", 1, 12, "unknown state field `%x`");
    check_error(&format!("{src}\n  %1 = forget(%7#0: unit) -> unit \"\""), 2, 15, "no node %7");
    check_error(&format!("{src}\n  %1 = forget(%0#1: unit) -> unit \"\""), 2, 15, "no port #1");
    check_error("  %0 = split 99999999999 () -> () \"\"", 1, 14, "out of range");
    check_error("  %0 = source() -> f32[18446744073709551615, 2] \"\"", 1, 20, "more elements than fit");
    check_error(&format!("{src} junk"), 1, 28, "unexpected `j`");
    check_error("  %0 = source() -> unit \"\" loc(3:0..1 @1:1)", 1, 32, "no file 3");
    check_error("  %0 = frobnicate() -> unit \"\"", 1, 8, "unknown op `frobnicate`");
    check_error("  %0 = const 1.2.3 (_: unit) -> unit \"\"", 1, 14, "bad number");
    check_error("  %0 = source() -> unit \"\\q\"", 1, 26, "unknown escape");
    check_error("  %0 = source() -> unit \"open", 1, 25, "unterminated string");
    check_error("  file 1 \"g.amp\"", 1, 3, "`file` lines must come before `state` lines");
    check_error("  %0 = source() -> unit", 1, 24, "expected a string");
    check_error("  %0 = cond [%t < ] () -> () \"\"", 1, 19, "expected a state expression");
    check_error("  %2000000 = source() -> unit \"\"", 1, 3, "over the limit");
    check_error("  state %j: data", 1, 3, "duplicate `state` line");
    let deep = format!("amp.graph @g {{\n  %0 = cond [{}1{}] () -> () \"\"\n}}", "(".repeat(5000), ")".repeat(5000));
    assert!(parse(&deep).unwrap_err().message.contains("nested too deeply"));
}

#[test]
fn parse_errors_in_the_collection_and_schema_syntax() {
    check_error("  %0 = state_from_payload %t := top_k x [0] () -> () \"\"", 1, 39, "expected k, found `x`");
    check_error("  %0 = state_from_payload %t := top_k 2 () -> () \"\"", 1, 41, "expected `[`, found `(`");
    check_error("  %0 = state_from_payload %x := argmax () -> () \"\"", 1, 27, "unknown state field `%x`");
    check_error("  %0 = reduce max (_: f32[?, 2]) -> f32[2] \"\"", 1, 15, "`max`");
    check_error("  %0 = source() -> f32[?", 1, 25, "expected `]`, found the end of the line");
    check_error("  %0 = source() -> f32[?, 4", 1, 28, "expected `]`, found the end of the line");
    check_error("  %0 = source() -> f32[3, ?]", 1, 27, "expected a dimension, found `?`");
    check_error("  param p: f32[?, 3] normal", 1, 12, "a parameter is an f32 tensor");
    check_error("  input Sample", 1, 9, "no record `Sample`");
    check_error("  enum Tree { Leaf {} }\n  input Tree", 2, 9, "no record `Tree`");
    check_error("  record R {}\n  input R\n  record S {}", 3, 3, "the schema ends with its `input` line");
    check_error("  record R {}\n  input R\n  input R", 3, 3, "the schema ends with its `input` line");
    check_error("  record R { t: Tree }\n  input R", 1, 17, "no type `Tree`");
    check_error("  record R {}\n  enum R { A {} }\n  input R", 2, 8, "type `R` is declared twice");
    check_error("  record R { x: f32[?, 2] }\n  input R", 1, 17, "expected a data type");
    check_error("  record R { x: int,, }\n  input R", 1, 21, "expected a field name, found `,`");
    check_error(
        "  param p: f32[2] normal\n  record R {}\n  input R",
        2,
        3,
        "`record`, `enum` and `input` lines must come before `param` lines",
    );
    // The schema is checked once the graph is read, so this error has no line of its own.
    let err = parse("amp.graph @g {\n  record R {}\n}\n").unwrap_err();
    assert!(err.message.contains("record `R` but no `input` line"), "{err}");
}

/// The keyword after `:=` is reported where it starts, like every other unexpected word.
#[test]
fn a_bad_payload_int_is_reported_at_the_word() {
    check_error("  %0 = state_from_payload %t := max () -> () \"\"", 1, 33, "expected `argmax` or `top_k`, found `m`");
}

/// The parser reads quoted schema names (`record R { "x y": int }`), so the printer must
/// write names that need quotes quoted, or a loaded graph cannot be printed and read back.
#[test]
fn schema_names_that_need_quotes_round_trip() {
    let mut graph = Graph { name: "g".into(), ..Graph::default() };
    let mut schema = every_data_type();
    schema.records[1].fields[0].name = "x y".into();
    schema.enums[0].variants[0].name = "the leaf".into();
    graph.input = Some(schema);
    check_round_trip(&graph);
}

/// `record` lines without an `input` line are an error; `enum` lines alone should be too,
/// not a schema silently dropped.
#[test]
fn enum_lines_without_an_input_line_are_rejected() {
    let result = parse("amp.graph @g {\n  enum Tree { Leaf {} }\n}\n");
    assert!(result.is_err(), "parsed as {:?}", result.map(|g| g.input));
}

#[test]
fn trailing_garbage_after_the_graph_is_rejected() {
    let err = parse("amp.graph @g {\n}\nmore\n").unwrap_err();
    assert_eq!((err.line, err.col), (3, 1));
    let err = parse("amp.graph @g {\n").unwrap_err();
    assert!(err.message.contains("missing the closing"), "{err}");
    let err = parse("").unwrap_err();
    assert_eq!((err.line, err.col), (1, 1));
}

#[test]
fn deep_chains_are_limited_not_overflowing() {
    // A long flat chain builds a deep left-leaning tree: rejected by depth, not by the stack.
    let chain = vec!["1"; 100_000].join(" + ");
    let text = format!("amp.graph @g {{\n  %0 = cond [{chain}] () -> () \"\"\n}}\n");
    assert!(parse(&text).unwrap_err().message.contains("deeper than"));
    let nots = "!".repeat(100_000);
    let text = format!("amp.graph @g {{\n  %0 = cond [{nots}1] () -> () \"\"\n}}\n");
    assert!(parse(&text).is_err());
}

#[test]
fn unrepresentable_edges_print_as_comments() {
    let mut graph = straight_line();
    let (src, dst) = (petgraph::stable_graph::NodeIndex::new(0), petgraph::stable_graph::NodeIndex::new(1));
    graph.nodes.add_edge(src, dst, amp_ir::Edge { from_port: 0, to_port: 0 });
    graph.nodes.add_edge(src, dst, amp_ir::Edge { from_port: 0, to_port: 5 });
    let text = print(&graph);
    assert!(text.contains("// %1: edge %0#0 -> input 0 is not representable"), "{text}");
    assert!(text.contains("// %1: edge %0#0 -> input 5 is not representable"), "{text}");
    assert_same_graph(&straight_line(), &parse(&text).unwrap());
}

#[test]
fn errors_display_with_position() {
    let err = ParseError { line: 3, col: 7, message: "boom".into() };
    assert_eq!(err.to_string(), "3:7: boom");
    let _: &dyn std::error::Error = &err;
}

/// The ways the mutation test damages a printout.
#[derive(Clone, Debug)]
enum Mutation {
    DeleteChar(usize),
    DuplicateChar(usize),
    SwapChars(usize),
    InsertChar(usize, char),
    DeleteLine(usize),
    DuplicateLine(usize),
    SwapLines(usize),
}

fn apply(text: &str, mutation: &Mutation) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    let mut lines: Vec<&str> = text.lines().collect();
    let at = |i: usize, len: usize| if len == 0 { 0 } else { i % len };
    match *mutation {
        Mutation::DeleteChar(i) if !chars.is_empty() => {
            chars.remove(at(i, chars.len()));
        }
        Mutation::DuplicateChar(i) if !chars.is_empty() => {
            let i = at(i, chars.len());
            chars.insert(i, chars[i]);
        }
        Mutation::SwapChars(i) if chars.len() > 1 => {
            let i = at(i, chars.len() - 1);
            chars.swap(i, i + 1);
        }
        Mutation::InsertChar(i, c) => chars.insert(at(i, chars.len() + 1), c),
        Mutation::DeleteLine(i) if !lines.is_empty() => {
            lines.remove(at(i, lines.len()));
            return lines.join("\n");
        }
        Mutation::DuplicateLine(i) if !lines.is_empty() => {
            let i = at(i, lines.len());
            lines.insert(i, lines[i]);
            return lines.join("\n");
        }
        Mutation::SwapLines(i) if lines.len() > 1 => {
            let i = at(i, lines.len() - 1);
            lines.swap(i, i + 1);
            return lines.join("\n");
        }
        _ => {}
    }
    chars.into_iter().collect()
}

fn any_mutation() -> impl Strategy<Value = Mutation> {
    let interesting =
        prop::sample::select(vec!['%', '#', '"', '\\', '[', ']', '(', ')', '$', '-', '9', ',', '\n', 'é']);
    prop_oneof![
        any::<usize>().prop_map(Mutation::DeleteChar),
        any::<usize>().prop_map(Mutation::DuplicateChar),
        any::<usize>().prop_map(Mutation::SwapChars),
        (any::<usize>(), prop_oneof![interesting, any::<char>()]).prop_map(|(i, c)| Mutation::InsertChar(i, c)),
        any::<usize>().prop_map(Mutation::DeleteLine),
        any::<usize>().prop_map(Mutation::DuplicateLine),
        any::<usize>().prop_map(Mutation::SwapLines),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_graphs_round_trip(graph in any_graph()) {
        check_round_trip(&graph);
    }

    #[test]
    fn random_text_never_panics(text in any::<String>()) {
        let _ = parse(&text);
        let _ = parse(&format!("amp.graph @g {{\n{text}\n}}\n"));
    }

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = parse(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn mutated_printouts_never_panic(
        fixture in 0usize..4,
        mutations in prop::collection::vec(any_mutation(), 1..6),
    ) {
        let graph = fixtures().swap_remove(fixture).1;
        let mut text = print(&graph);
        for mutation in &mutations {
            text = apply(&text, mutation);
        }
        // Whatever parses must print and parse again to the same text.
        if let Ok(parsed) = parse(&text) {
            let again = print(&parsed);
            let reparsed = parse(&again);
            prop_assert!(reparsed.is_ok(), "{:?}\n{}", reparsed.err(), again);
            if let Ok(reparsed) = reparsed {
                prop_assert_eq!(print(&reparsed), again);
            }
        }
    }
}
