//! `ampc compile` as a user runs it.

use std::path::Path;
use std::process::{Command, Output};

fn ampc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ampc")).args(args).output().expect("ampc runs")
}

fn example(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples").join(name).display().to_string()
}

/// A fresh temporary directory, removed when the value is dropped.
fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("ampc-compile-").tempdir().expect("temp dir")
}

#[test]
fn writes_a_loadable_verified_ampg() {
    let dir = temp_dir();
    let out = dir.path().join("lr.ampg");
    let run = ampc(&["compile", &example("list_reduce.amp"), "-o", out.to_str().unwrap()]);
    assert_eq!(run.status.code(), Some(0), "{}", String::from_utf8_lossy(&run.stderr));
    let bytes = std::fs::read(&out).expect("the file was written");
    assert!(bytes.starts_with(b"AMPG"));
    let (graph, _) = amp_ir::ampg::read(&bytes).expect("it loads");
    amp_ir::verify::verify(&graph).expect("it verifies");
    assert_eq!(graph.name, "ListReduce");
    assert_eq!(graph.meta.get("hyper.hidden").map(String::as_str), Some("128"));
    let leftovers: Vec<_> = std::fs::read_dir(out.parent().unwrap())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "no temporary file is left behind");
}

/// `-o -` is stdout, as for other tools (it wrote a file named `-`); with `--emit`, which
/// prints there too, it is refused.
#[test]
fn a_dash_writes_the_graph_to_stdout() {
    let dir = temp_dir();
    let run = Command::new(env!("CARGO_BIN_EXE_ampc"))
        .args(["compile", &example("mlp.amp"), "-o", "-"])
        .current_dir(dir.path())
        .output()
        .expect("ampc runs");
    assert_eq!(run.status.code(), Some(0), "{}", String::from_utf8_lossy(&run.stderr));
    let (graph, _) = amp_ir::ampg::read(&run.stdout).expect("stdout holds the graph file");
    assert_eq!(graph.name, "Mlp3");
    assert!(!dir.path().join("-").exists());
    let run = ampc(&["compile", &example("mlp.amp"), "--emit", "ir", "-o", "-"]);
    assert_eq!(run.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&run.stderr).contains("give `-o` a file"));
}

#[test]
fn emits_ir_text_json_and_dot_with_overrides() {
    let ir = ampc(&["compile", &example("mlp.amp"), "--emit", "ir", "-D", "hidden=32"]);
    assert_eq!(ir.status.code(), Some(0));
    let text = String::from_utf8_lossy(&ir.stdout);
    assert!(text.starts_with("amp.graph @Mlp3 {"), "{text}");
    assert!(text.contains("param l1.weight: f32[32, 64]"), "{text}");
    let parsed = amp_ir::text::parse(&text).expect("the printed IR parses");
    assert_eq!(amp_ir::text::print(&parsed), text);

    let json = ampc(&["compile", &example("mlp.amp"), "--emit", "ir-json"]);
    let value: serde_json::Value = serde_json::from_slice(&json.stdout).expect("valid JSON");
    assert_eq!(value["name"], "Mlp3");

    let dot = ampc(&["compile", &example("list_reduce.amp"), "--emit", "dot"]);
    assert!(String::from_utf8_lossy(&dot.stdout).starts_with("digraph"));
}

#[test]
fn verbose_reports_the_passes() {
    let run = ampc(&["compile", &example("list_reduce.amp"), "--emit", "ir", "-v"]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(stderr.contains("pass dead-node elimination: 1 changed"), "{stderr}");
    assert!(stderr.contains("pass key minimisation"), "{stderr}");
}

#[test]
fn constructs_not_lowered_are_errors_with_a_code() {
    let dir = temp_dir();
    let dir = dir.path();
    let file = dir.join("after_loop.amp");
    std::fs::write(
        &file,
        "record R { x: f32[4], n: int, label: int }\n\
         model M {\n\
             fn forward(r: R) -> f32[4] {\n\
                 var i = 0;\n\
                 while i < r.n { i = i + 1; }\n\
                 if i > 2 { r.x } else { relu(r.x) }\n\
             }\n\
             fn loss(r: R) -> f32 { cross_entropy(forward(r), r.label) }\n\
         }\n",
    )
    .unwrap();
    let run = ampc(&["compile", file.to_str().unwrap(), "--emit", "ir", "--message-format", "json"]);
    assert_eq!(run.status.code(), Some(1));
    let diag: serde_json::Value = serde_json::from_slice(run.stdout.split(|b| *b == b'\n').next().unwrap()).unwrap();
    assert_eq!(diag["code"], "E0600");
    assert!(diag["message"].as_str().unwrap().contains("after the loop"), "{diag}");
}

#[test]
fn check_errors_stop_compilation_and_bad_models_are_usage_errors() {
    let dir = temp_dir();
    let dir = dir.path();
    let bad = dir.join("bad.amp");
    std::fs::write(&bad, "model M { fn forward(x: int) -> int { y } }").unwrap();
    assert_eq!(ampc(&["compile", bad.to_str().unwrap()]).status.code(), Some(1));
    assert!(!dir.join("bad.ampg").exists());
    assert_eq!(ampc(&["compile", &example("mlp.amp"), "--model", "Nope", "--emit", "ir"]).status.code(), Some(2));
}

#[test]
fn emits_the_cranelift_ir_of_each_kernel() {
    let run = ampc(&["compile", &example("tree_lstm.amp"), "--emit", "clif"]);
    assert_eq!(run.status.code(), Some(0), "{}", String::from_utf8_lossy(&run.stderr));
    let text = String::from_utf8_lossy(&run.stdout);
    assert!(text.starts_with("; @TreeLstm: 2 fusion group(s), 2 kernel(s), 0 refused"), "{text}");
    let functions: Vec<&str> = text.lines().filter(|l| l.starts_with("function ")).collect();
    assert_eq!(functions.len(), 4, "{text}");
    assert!(functions[0].starts_with("function %kernel0_forward(i64, i64, i64)"), "{text}");
    assert!(functions[1].starts_with("function %kernel0_backward(i64, i64, i64)"), "{text}");
    assert!(text.contains("; fusion group 0: inputs %5#0 %5#2 %5#1; outputs %8 %11"), "{text}");
    assert!(text.contains(";   %6 = sigmoid(%5#0) \"sigmoid\""), "{text}");
    assert!(text.contains("f32x4"), "the loop is vectorized: {text}");
    // No file is written when the IR is printed.
    assert!(!Path::new(&example("tree_lstm.ampg")).exists());

    let none = ampc(&["compile", &example("mlp.amp"), "--emit", "clif"]);
    assert_eq!(none.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&none.stdout), "; @Mlp3: 0 fusion group(s), 0 kernel(s), 0 refused\n");
}

#[test]
fn never_writes_the_graph_over_an_input_or_a_special_file() {
    let dir = temp_dir();
    let source = dir.path().join("m.amp");
    std::fs::copy(example("list_reduce.amp"), &source).unwrap();
    let text = std::fs::read(&source).unwrap();
    let shown = source.to_str().unwrap();
    // `-o` naming the source, directly or through another spelling or a link.
    let dotted = dir.path().join(".").join("m.amp");
    let linked = dir.path().join("link.amp");
    #[cfg(unix)]
    std::os::unix::fs::symlink(&source, &linked).unwrap();
    #[cfg(not(unix))]
    std::fs::hard_link(&source, &linked).unwrap();
    for output in [shown, dotted.to_str().unwrap(), linked.to_str().unwrap()] {
        let run = ampc(&["compile", shown, "-o", output]);
        let err = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(2), "-o {output}: {err}");
        assert!(err.contains("is the source"), "-o {output}: {err}");
        assert_eq!(std::fs::read(&source).unwrap(), text, "the source is intact");
    }
    // The default output of a source named `.ampg` is the source itself.
    let odd = dir.path().join("odd.ampg");
    std::fs::copy(&source, &odd).unwrap();
    let run = ampc(&["compile", odd.to_str().unwrap()]);
    assert_eq!(run.status.code(), Some(2), "{}", String::from_utf8_lossy(&run.stderr));
    assert_eq!(std::fs::read(&odd).unwrap(), text);
    // A symbolic link to another file is refused (the link and its file stay as they are).
    #[cfg(unix)]
    {
        let kept = dir.path().join("kept.ampg");
        std::fs::write(&kept, b"precious").unwrap();
        let link = dir.path().join("out.ampg");
        std::os::unix::fs::symlink(&kept, &link).unwrap();
        let run = ampc(&["compile", shown, "-o", link.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(2), "{err}");
        assert!(err.contains("symbolic link"), "{err}");
        assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read(&kept).unwrap(), b"precious");
    }
}

/// `--emit ir` shows GGSNN's maps batched (`embedding_rows`, `gather_rows`, the edges'
/// rows split by kind with `partition_rows` and put back with `merge_rows`), and
/// `--per-element-maps` the per-element lowering (a `flatmap` per edge, a `switch`); both
/// graphs write as `.ampg` files that load and verify.
#[test]
fn per_element_maps_switches_the_lowering() {
    let batched = ampc(&["compile", &example("ggsnn.amp"), "--emit", "ir"]);
    let per_element = ampc(&["compile", &example("ggsnn.amp"), "--emit", "ir", "--per-element-maps"]);
    let (batched, per_element) =
        (String::from_utf8_lossy(&batched.stdout), String::from_utf8_lossy(&per_element.stdout));
    assert!(batched.contains("gather_rows %e1 [$.edges[%e1].src] [len($.edges)]"), "{batched}");
    assert!(batched.contains("partition_rows %e1 [$.edges[%e1].kind] 2"), "{batched}");
    assert!(batched.contains("merge_rows %e1 [$.edges[%e1].kind] 2"), "{batched}");
    assert!(batched.contains("embedding_rows @emb %e0 [$.nodes[%e0]] [len($.nodes)]"), "{batched}");
    assert!(!batched.contains("switch") && !batched.contains("flatmap"), "{batched}");
    assert!(per_element.contains("switch [$.edges[%e1].kind] 2"), "{per_element}");
    for op in ["gather_rows", "partition_rows", "merge_rows", "embedding_rows"] {
        assert!(!per_element.contains(op), "{op}: {per_element}");
    }
    let dir = temp_dir();
    for flags in [&[][..], &["--per-element-maps"][..]] {
        let out = dir.path().join("g.ampg");
        let mut args = vec!["compile", &example("ggsnn.amp"), "-o", out.to_str().unwrap()]
            .into_iter()
            .map(String::from)
            .collect::<Vec<_>>();
        args.extend(flags.iter().map(|f| f.to_string()));
        let run = ampc(&args.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(run.status.code(), Some(0), "{}", String::from_utf8_lossy(&run.stderr));
        amp_ir::ampg::read_verified(&std::fs::read(&out).expect("written")).expect("loads and verifies");
    }
}
