//! Graphviz output: every node appears with its kind's shape, ports label edges where a
//! node has several, loop back edges are marked, labels are escaped, and (when Graphviz
//! is installed) `dot -Tsvg` accepts the output.

mod common;

use amp_ir::dot::to_dot;
use amp_tests::report_skip;
use common::*;
use std::io::Write;
use std::process::{Command, Stdio};

#[test]
fn every_node_appears() {
    for (name, graph) in fixtures() {
        let dot = to_dot(&graph);
        for index in graph.nodes.node_indices() {
            let id = format!("  n{} [", index.index());
            assert!(dot.contains(&id), "{name}: node {} missing from\n{dot}", index.index());
        }
        assert!(dot.starts_with("digraph \"") && dot.ends_with("}\n"), "{name}");
    }
}

#[test]
fn kinds_have_distinct_shapes() {
    let dot = to_dot(&every_op());
    for shape in ["box, style=filled", "ellipse", "diamond", "invtriangle", "hexagon", "doubleoctagon", "note"] {
        assert!(dot.contains(&format!("shape={shape}")), "no {shape} in\n{dot}");
    }
}

#[test]
fn loop_back_edge_is_marked_and_ports_are_labelled() {
    let dot = to_dot(&list_reduce());
    // isu %10 → phi %3 closes the loop.
    assert!(dot.contains("n10 -> n3 [label=\"0→1\", style=dashed, color=red, constraint=false];"), "{dot}");
    assert_eq!(dot.matches("constraint=false").count(), 1, "{dot}");
    // cond has two outputs: its edges name their ports.
    assert!(dot.contains("n4 -> n11 [label=\"1→0\"];"), "{dot}");
    // A plain single-port edge has no label.
    assert!(dot.contains("n8 -> n9;"), "{dot}");
}

#[test]
fn labels_are_escaped() {
    let dot = to_dot(&every_op());
    // The label `n0 "quoted" \ é ✓` and the sink name `out "x"\n`.
    assert!(dot.contains(r#"n0 \"quoted\" \\ é ✓"#), "{dot}");
    assert!(dot.contains(r#"sink \"out \\\"x\\\"\\n\""#), "{dot}");
    assert!(dot.starts_with("digraph \"every op!\" {"));
    for line in dot.lines().skip(1) {
        assert!(line.starts_with("  ") || line == "}", "unescaped line break before {line:?}");
    }
}

#[test]
fn graphviz_accepts_the_output() {
    if Command::new("dot").arg("-V").stderr(Stdio::null()).status().is_err() {
        report_skip("amp-ir graphviz_accepts_the_output: the Graphviz `dot` program is not installed");
        return;
    }
    for (name, graph) in fixtures() {
        let mut child = Command::new("dot")
            .arg("-Tsvg")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn dot");
        child.stdin.take().expect("stdin").write_all(to_dot(&graph).as_bytes()).expect("write to dot");
        let output = child.wait_with_output().expect("wait for dot");
        assert!(output.status.success(), "{name}: dot failed: {}", String::from_utf8_lossy(&output.stderr));
    }
}
