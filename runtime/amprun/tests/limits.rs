//! Issue 27: sizes over `amp_ir::limits`, out-of-range data and never-ending loops end
//! with an error that names what and where — never a panic (exit 101), an abort on a
//! failed allocation, or a run that trains forever (docs/limits.md).
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use common::*;
use std::path::Path;

fn write(dir: &Path, name: &str, text: &str) -> String {
    std::fs::write(dir.join(name), text).unwrap();
    name.to_string()
}

fn assert_refused(out: &std::process::Output, needle: &str) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(needle), "`{needle}` not in:\n{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// Item 1: `ParamSet::zeros` panicked with "capacity overflow" on an overflowing shape.
/// Item 2: `ampc check` accepted `experts=100000000`, then compiling ran out of memory.
/// Item 3: `hidden=100000000` tried to allocate 80 PB.
#[test]
fn overflowing_and_huge_hyperparameters_are_refused_before_anything_is_allocated() {
    let dir = scratch("huge-hyper");
    let dir = dir.path();
    let data = example("data/list_reduce.valid.jsonl");
    let list_reduce = example("list_reduce.amp");
    for define in ["vocab=9223372036854775807", "hidden=100000000"] {
        let out = amprun(dir, &["train", &list_reduce, "-D", define, "--data", &data, "--limit", "3"]);
        assert_refused(&out, "E0310");
    }
    let tree_lstm = example("tree_lstm.amp");
    for define in ["classes=9223372036854775807", "embed=9223372036854775807"] {
        let out = amprun(dir, &["train", &tree_lstm, "-D", define, "--data", &data, "--limit", "3"]);
        assert_refused(&out, "E0310");
    }
    let moe = example("moe.amp");
    let out = amprun(dir, &["train", &moe, "-D", "experts=100000000", "--data", &data, "--limit", "3"]);
    assert_refused(&out, "model `Moe` is over the size limits at `gate`");
    let ggsnn = example("ggsnn.amp");
    let out = amprun(dir, &["train", &ggsnn, "-D", "edge_kinds=100000000", "--data", &data, "--limit", "3"]);
    assert_refused(&out, "E0310");
}

/// Item 3: a consistent 10⁹-wide Linear in a graph file tried to allocate 256 GB. Graph
/// files are untrusted: the loader refuses the shape.
#[test]
fn a_graph_file_with_a_huge_consistent_linear_is_refused() {
    let dir = scratch("huge-graph");
    let dir = dir.path();
    let mut graph = compile_example("mlp", &[("hidden", 7)]).into_inner();
    let wide = |dims: &mut Vec<u64>| dims.iter_mut().filter(|d| **d == 7).for_each(|d| *d = 1_000_000_000);
    for p in &mut graph.params {
        wide(&mut p.shape);
    }
    for node in graph.nodes.node_weights_mut() {
        for ty in node.inputs.iter_mut().chain(node.outputs.iter_mut()) {
            if let amp_ir::PayloadTy::F32(dims) | amp_ir::PayloadTy::Batch(dims) = ty {
                wide(dims);
            }
        }
    }
    std::fs::write(dir.join("wide.ampg"), amp_ir::ampg::write(&graph, None)).unwrap();
    // The graph is refused before any data is read.
    let out = amprun(dir, &["train", "wide.ampg", "--data", "none.csv"]);
    assert_refused(&out, "over the limit of 1073741824");
}

/// Item 3: a `map` over `range(n)` with n = 10⁹ from the data grew to 6.9 GB and aborted.
#[test]
fn a_collection_count_from_hostile_data_is_an_error_naming_the_node() {
    let dir = scratch("huge-count");
    let dir = dir.path();
    let model = write(
        dir,
        "fan.amp",
        "record Sample { n: int, x: f32[4], label: int }
model Fan(hidden: int = 8, classes: int = 3) {
    param lin  = Linear(4, hidden);
    param head = Linear(hidden, classes);
    fn forward(s: Sample) -> f32[classes] { head(sum(range(s.n).map(|_i| relu(lin(s.x))))) }
    fn loss(s: Sample) -> f32 { cross_entropy(forward(s), s.label) }
}
",
    );
    let data = write(
        dir,
        "fan.jsonl",
        "{\"n\":2,\"x\":[1,2,3,4],\"label\":1}\n{\"n\":1000000000,\"x\":[1,2,3,4],\"label\":1}\n",
    );
    let out = amprun(dir, &["train", &model, "--data", &data, "--epochs", "1"]);
    assert_refused(&out, "(fan.jsonl:2): the element count is 1000000000, over the limit of 16777216");
}

/// Item 6: `f32[big, big, 4]` with big = 3037000500 wrapped to 581,896,768 elements and
/// trained.
#[test]
fn a_shape_whose_element_count_wraps_is_refused() {
    let dir = scratch("wrap");
    let dir = dir.path();
    let model = write(
        dir,
        "wrap.amp",
        "record Example { tokens: [int], label: int }
model Wrap(big: int = 3037000500) {
    param embed = Embedding(14, 4);
    param head = Linear(4, 10);
    fn forward(x: Example) -> f32[10] {
        let _z: f32[big, big, 4] = zeros();
        head(embed(x.label))
    }
    fn loss(x: Example) -> f32 { cross_entropy(forward(x), x.label) }
}
",
    );
    let data = example("data/list_reduce.valid.jsonl");
    let out = amprun(dir, &["train", &model, "--data", &data, "--limit", "3"]);
    assert_refused(&out, "this tensor has 36893488148001000000 elements");
}

/// Item 8: labels past the classes and token ids past the vocabulary passed the loader and
/// ended the run mid-epoch with a node error naming no field; `--skip-bad-data` did not
/// skip them.
#[test]
fn ints_outside_the_models_ranges_are_bad_data_with_file_line_and_field() {
    let dir = scratch("ranges");
    let dir = dir.path();
    let lines = [
        r#"{"tokens":[12,0,2],"label":0}"#,
        r#"{"tokens":[10,6,9],"label":7}"#,
        r#"{"tokens":[10,6,9],"label":10}"#,
        r#"{"tokens":[11,14,9],"label":1}"#,
        r#"{"tokens":[13,4,-1],"label":5}"#,
        r#"{"tokens":[11,5,7],"label":7}"#,
    ];
    let data = write(dir, "r.jsonl", &(lines.join("\n") + "\n"));
    let model = example("list_reduce.amp");
    let args = ["train", &model, "-D", "hidden=8", "--data", &data, "--epochs", "1"];
    let out = amprun(dir, &args);
    assert_refused(
        &out,
        "r.jsonl:3: field `label`: 10 is out of range for a class label of the loss `loss` (10 classes): expected 0 to 9",
    );
    let mut skipping = args.to_vec();
    skipping.push("--skip-bad-data");
    let out = amprun_ok(dir, &skipping);
    let err = stderr(&out);
    assert!(err.contains("skipped 3 instance(s) with values out of the model's ranges in r.jsonl"), "{err}");
    assert!(stdout(&out).contains("3 instances"), "{}", stdout(&out));
    // A token id past the vocabulary, named with its element.
    let data = write(dir, "t.jsonl", &(lines[3].to_string() + "\n"));
    let out = amprun(dir, &["train", &model, "-D", "hidden=8", "--data", &data]);
    assert_refused(
        &out,
        "t.jsonl:1: field `tokens[1]`: 14 is out of range for an index of the Embedding `embed` (14 rows)",
    );
}

/// Issue 48, finding 2: a module network whose `Un` and `Bin` variants both have an `op`
/// (3 unary modules, 4 binary) refused a `Bin` with `op = 3`, as if it were a `Un`'s.
#[test]
fn two_variants_sharing_a_field_name_each_keep_their_range() {
    let dir = scratch("variant-ranges");
    let dir = dir.path();
    let model = write(
        dir,
        "modules.amp",
        "
enum Step { Un { op: int, arg: int }, Bin { op: int, left: int, right: int } }
record Program { prog: [Step], label: int }
model Modules(d: int = 4) {
    param emb = Embedding(6, d);
    param unary = [Linear(d, d); 3];
    param binary = [Linear(2 * d, d); 4];
    param head = Linear(d, 2);
    fn forward(p: Program) -> f32[2] {
        let hs = p.prog.map(|s| match s {
            Un { op, arg } => tanh(unary[op](emb(arg))),
            Bin { op, left, right } => tanh(binary[op](concat(emb(left), emb(right)))),
        });
        head(sum(hs))
    }
    fn loss(p: Program) -> f32 { cross_entropy(forward(p), p.label) }
}
",
    );
    let good = [
        r#"{"prog": [{"Un": {"op": 2, "arg": 1}}, {"Bin": {"op": 3, "left": 0, "right": 5}}], "label": 1}"#,
        r#"{"prog": [{"Bin": {"op": 0, "left": 2, "right": 3}}], "label": 0}"#,
    ];
    let data = write(dir, "p.jsonl", &(good.join("\n") + "\n"));
    amprun_ok(dir, &["train", &model, "--data", &data, "--epochs", "1"]);
    let bad = r#"{"prog": [{"Bin": {"op": 3, "left": 0, "right": 1}}, {"Un": {"op": 3, "arg": 1}}], "label": 0}"#;
    let data = write(dir, "bad.jsonl", &(bad.to_string() + "\n"));
    let out = amprun(dir, &["train", &model, "--data", &data, "--epochs", "1"]);
    assert_refused(&out, "bad.jsonl:1: field `prog[1].op`: 3 is out of range for a choice of `route` (3 arms)");
}

/// Item 9: `ampc compile` wrote an index of ~60 chained `+` that `amprun` could not read
/// (serde_json's depth 128); past the verifier's depth it is E0310 at its source.
#[test]
fn every_graph_ampc_compile_writes_amprun_reads_and_too_deep_ones_are_refused_at_the_source() {
    let dir = scratch("deep-index");
    let dir = dir.path();
    // `a`, `b`, `c` nest to the left: c is 3 × `terms` deep, and 0.
    let model = |terms: usize| {
        let zero = vec!["x.label - x.label"; terms / 2].join(" + ");
        format!(
            "record Example {{ tokens: [int], label: int }}
model Deep {{
    param embed = Embedding(14, 8);
    param head  = Linear(8, 10);
    fn forward(x: Example) -> f32[10] {{
        let a = {zero};
        let b = a + {zero};
        let c = b + {zero};
        head(embed(x.tokens[c]))
    }}
    fn loss(x: Example) -> f32 {{ cross_entropy(forward(x), x.label) }}
}}
"
        )
    };
    // The binary beside amprun's (not a replace over the whole path, which may name amprun).
    let ampc = std::path::Path::new(env!("CARGO_BIN_EXE_amprun"))
        .with_file_name(format!("ampc{}", std::env::consts::EXE_SUFFIX));
    let compile = |file: &str| {
        std::process::Command::new(&ampc).args(["compile", file, "-o", "deep.ampg"]).current_dir(dir).output().unwrap()
    };
    write(dir, "deep.amp", &model(26));
    let out = compile("deep.amp");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let data = example("data/list_reduce.valid.jsonl");
    amprun_ok(dir, &["train", "deep.ampg", "--data", &data, "--limit", "3", "--epochs", "1"]);
    write(dir, "deeper.amp", &model(50));
    let out = compile("deeper.amp");
    assert_refused(&out, "E0310");
    assert!(stderr(&out).contains("a state expression nests deeper than 128"), "{}", stderr(&out));
}

/// Item 12: `while true` trained forever (messages kept flowing, so the stall watchdog
/// never fired); an index past the data said "cannot evaluate" with no reason.
#[test]
fn a_loop_that_never_ends_is_an_error_naming_it_and_failed_indices_say_why() {
    let dir = scratch("forever");
    let dir = dir.path();
    let model = write(
        dir,
        "forever.amp",
        "record Example { tokens: [int], label: int }
model Forever {
    param embed = Embedding(14, 8);
    param cell  = Linear(8, 8);
    param head  = Linear(8, 10);
    fn forward(x: Example) -> f32[10] {
        var h: f32[8] = embed(x.tokens[0]);
        var i = 0;
        while i >= 0 {
            h = relu(cell(h));
            i = i + 1;
        }
        head(h)
    }
    fn loss(x: Example) -> f32 { cross_entropy(forward(x), x.label) }
}
",
    );
    let data = example("data/list_reduce.valid.jsonl");
    let out = amprun(dir, &["train", &model, "--data", &data, "--limit", "2", "--max-trips", "500"]);
    assert_refused(&out, "forever.amp:9:");
    assert!(stderr(&out).contains("this loop made more than 500 trips in one instance"), "{}", stderr(&out));

    let model = write(
        dir,
        "index.amp",
        "record Example { tokens: [int], label: int }
model Index {
    param embed = Embedding(14, 8);
    param head  = Linear(8, 10);
    fn forward(x: Example) -> f32[10] { head(embed(x.tokens[5])) }
    fn loss(x: Example) -> f32 { cross_entropy(forward(x), x.label) }
}
",
    );
    // One worker: with several, the instances run at once and whichever fails first is named.
    let out = amprun(dir, &["train", &model, "--data", &data, "--limit", "3", "--workers", "1"]);
    assert!(stderr(&out).contains("index 5 is outside `tokens`, which has 5 elements"), "{}", stderr(&out));
}

/// Issue 48, finding 7: `/dev/zero` as the model, `--init` or `--params` was read without
/// end (1 GB within a second). Each is read with a bound and refused with a clear error.
#[test]
fn endless_inputs_are_refused_after_a_bound() {
    if !Path::new("/dev/zero").exists() {
        eprintln!("skipped: no /dev/zero");
        return;
    }
    let dir = scratch("endless");
    let dir = dir.path();
    let data = example("data/list_reduce.valid.jsonl");
    let model = example("list_reduce.amp");
    let out = amprun(dir, &["train", "/dev/zero", "--data", &data]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("cannot read `/dev/zero`: it is longer than 33554432 bytes"), "{err}");
    for args in [
        vec!["train", &model, "-D", "hidden=8", "--data", &data, "--init", "/dev/zero"],
        vec!["eval", &model, "-D", "hidden=8", "--data", &data, "--params", "/dev/zero"],
    ] {
        let out = amprun(dir, &args);
        let err = stderr(&out);
        assert!(matches!(out.status.code(), Some(1 | 2)), "{args:?}: {err}");
        assert!(err.contains("/dev/zero") && err.contains("not a valid safetensors file"), "{args:?}: {err}");
    }
    // The hostfile too (it reached 3.5 GB in 6 s): refused after 1 MiB, before any
    // connection is tried.
    let args = [
        "train",
        &model,
        "-D",
        "hidden=8",
        "--data",
        &data,
        "--workers",
        "2",
        "--processes",
        "2",
        "--process",
        "1",
        "--hostfile",
        "/dev/zero",
        "--cluster-key",
        "/dev/null",
    ];
    let out = amprun(dir, &args);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("the hostfile `/dev/zero` is longer than 1048576 bytes"), "{err}");
}

/// Issue 48, findings 7 and 8: `--limit N` read the whole file first (one 216 MB `read()`
/// of a 300 MB file), and `/dev/zero` as `--data` never ended even with `--limit 5`. The
/// file is now read as a stream: here a pipe gives 5 instances and then zeros without
/// end, and the run trains on the 5 and ends.
#[test]
fn a_limit_reads_its_instances_from_an_endless_pipe_and_stops() {
    let dir = scratch("endless-pipe");
    let dir = dir.path();
    let fifo = dir.join("data.jsonl");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    if !made.is_ok_and(|s| s.success()) {
        eprintln!("skipped: mkfifo is not available");
        return;
    }
    let lines = std::fs::read_to_string(example("data/list_reduce.valid.jsonl")).unwrap();
    let head: String = lines.lines().take(5).map(|l| format!("{l}\n")).collect();
    let writer = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            use std::io::Write;
            let mut pipe = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
            pipe.write_all(head.as_bytes()).unwrap();
            let zeros = vec![0u8; 1 << 16];
            let mut written = 0u64;
            // Until the reader is gone (a broken pipe), or far past what it should read.
            while written < 1 << 30 && pipe.write_all(&zeros).is_ok() {
                written += zeros.len() as u64;
            }
            written
        })
    };
    let model = example("list_reduce.amp");
    let out = amprun_ok(dir, &["train", &model, "-D", "hidden=8", "--data", "data.jsonl", "--limit", "5"]);
    assert!(stdout(&out).contains("5 instances"), "{}", stdout(&out));
    let written = writer.join().unwrap();
    // The pipe holds 64 KiB; the reader takes a buffer more at most.
    assert!(written < 1 << 20, "the run read {written} bytes of zeros");
}
