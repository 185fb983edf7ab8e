//! Runs split over processes (`--processes`, docs/distributed.md), on loopback only: the
//! same losses and checkpoint as the same workers in one process (over two and three
//! processes), a lost process ends the run on the others with an error naming it, and a
//! process without the key is refused.

mod common;

use common::*;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

/// The training losses of every epoch in a metrics file, each followed by its validation
/// loss when there is one.
fn train_losses(dir: &Path, metrics: &str) -> Vec<f64> {
    let text = std::fs::read_to_string(dir.join(metrics)).expect("metrics");
    json_lines(&text)
        .iter()
        .filter(|m| m["split"] == "train" || m["split"] == "valid")
        .map(|m| m["loss"].as_f64().expect("a finite loss"))
        .collect()
}

/// Trains with `args` twice, in one process and split over two, and checks that the
/// losses agree to rounding and that the checkpoint process 0 writes holds the one-process
/// run's tensors (same names and shapes, values to rounding) and metadata.
fn same_in_one_and_two_processes(test: &str, model: &str, defines: &[(&str, i64)], args: &[&str]) {
    same_in_one_and_split(test, model, defines, args, "2");
}

/// [`same_in_one_and_two_processes`] over `processes` processes.
fn same_in_one_and_split(test: &str, model: &str, defines: &[(&str, i64)], args: &[&str], processes: &str) {
    let dir = scratch(test);
    let dir = dir.path();
    let mut common: Vec<String> = vec!["train".into(), example(&format!("{model}.amp"))];
    for (k, v) in defines {
        common.push("-D".into());
        common.push(format!("{k}={v}"));
    }
    common.extend(args.iter().map(|a| a.to_string()));
    let run = |processes: Option<&str>, name: &str| {
        let mut all = common.clone();
        all.extend(["--save".into(), format!("{name}.safetensors"), "--metrics".into(), format!("{name}.jsonl")]);
        if let Some(p) = processes {
            all.extend(["--processes".into(), p.into()]);
        }
        let refs: Vec<&str> = all.iter().map(String::as_str).collect();
        amprun_ok(dir, &refs);
        train_losses(dir, &format!("{name}.jsonl"))
    };
    let one = run(None, "one");
    let two = run(Some(processes), "two");
    assert_eq!(one.len(), two.len());
    for (epoch, (a, b)) in one.iter().zip(&two).enumerate() {
        let epoch = epoch + 1;
        assert!((a - b).abs() <= 1e-5 * a.abs().max(1.0), "epoch {epoch}: {a} in one process, {b} in {processes}");
    }
    let graph = compile_example(model, defines);
    let (a, b) = (checkpoint(&dir.join("one.safetensors"), &graph), checkpoint(&dir.join("two.safetensors"), &graph));
    assert_eq!(a.metadata, b.metadata);
    let names = |c: &amp_params::checkpoint::Checkpoint| c.params.specs().to_vec();
    assert_eq!(names(&a), names(&b));
    assert_params_agree(&a.params, &b.params, 1.0, ("in one process", &format!("in {processes}")));
    let (sa, sb) = (a.optim.expect("optimizer state"), b.optim.expect("optimizer state"));
    assert_eq!(sa.kind, sb.kind);
    let steps = |s: &amp_params::OptimState| s.tensors.iter().map(|t| t.step).collect::<Vec<_>>();
    assert_eq!(steps(&sa), steps(&sb));
}

/// List-reduce trained over `processes` processes, a worker each, laid out by `layout`,
/// against one process.
fn list_reduce_trains_the_same(test: &str, processes: &str, limit: &str, layout: &[&str]) {
    let data = example("data/list_reduce.train.jsonl");
    let mut args = vec!["--data", &data, "--limit", limit, "--epochs", "2", "--optimizer", "adam"];
    args.extend(["--workers", processes, "--min-update-frequency", "4"]);
    args.extend_from_slice(layout);
    same_in_one_and_split(test, "list_reduce", &[("hidden", 16)], &args, processes);
}

// Dealt out, every worker (so every process) holds nodes and parameters.
const ROUND_ROBIN: &[&str] = &["--plan", "round-robin"];

#[test]
fn list_reduce_trains_the_same_over_two_processes() {
    list_reduce_trains_the_same("split-list-reduce", "2", "60", ROUND_ROBIN);
}

#[test]
fn list_reduce_trains_the_same_over_three_processes() {
    list_reduce_trains_the_same("split3-list-reduce", "3", "16", ROUND_ROBIN);
}

/// Copies of the graph, one per process (their gradients all-reduced around the ring of
/// processes), train as the same copies in one process.
fn copies_train_the_same(test: &str, processes: &str) {
    list_reduce_trains_the_same(test, processes, "48", &["--copies", processes]);
}

#[test]
fn copies_over_two_processes_train_as_in_one() {
    copies_train_the_same("copies2-list-reduce", "2");
}

#[test]
fn copies_over_three_processes_train_as_in_one() {
    copies_train_the_same("copies3-list-reduce", "3");
}

/// The metrics of copies over two processes give each update's all-reduce: 4 bytes per
/// parameter sent by process 0 (half the gradients each way, twice).
#[test]
fn the_metrics_give_the_bytes_of_each_all_reduce() {
    let dir = scratch("copies-allreduce-metrics");
    let dir = dir.path();
    let data = example("data/list_reduce.train.jsonl");
    let args = ["train", &example("list_reduce.amp"), "-D", "hidden=16", "--data", &data, "--limit", "32"];
    let flags =
        ["--workers", "2", "--copies", "2", "--processes", "2", "--metrics", "m.jsonl", "--save", "m.safetensors"];
    amprun_ok(dir, &[&args[..], &flags[..]].concat());
    let text = std::fs::read_to_string(dir.join("m.jsonl")).expect("metrics");
    let train = json_lines(&text).into_iter().find(|m| m["split"] == "train").expect("a training epoch");
    let allreduce = &train["allreduce"];
    let graph = compile_example("list_reduce", &[("hidden", 16)]);
    let parameters: u64 =
        checkpoint(&dir.join("m.safetensors"), &graph).params.iter().map(|(_, v)| v.len() as u64).sum();
    assert!(allreduce["updates"].as_u64().expect("updates") > 0, "{allreduce}");
    assert_eq!(allreduce["bytes_per_update"].as_u64(), Some(4 * parameters), "{allreduce}");
}

/// A small Tree-LSTM trained over `processes` processes, a worker each, against one
/// process.
fn tree_lstm_trains_the_same(test: &str, processes: &str) {
    let dir = scratch(&format!("{test}-data"));
    let vocab = dir.path().join("v.txt");
    std::fs::write(&vocab, "<unk>\nthe\nrock\nis\ngreat\nbad\nfilm\n").expect("a vocabulary");
    let trees = dir.path().join("t.txt");
    let lines = [
        "(3 (2 The) (4 (2 rock) (3 (2 is) (4 great))))",
        "(1 (2 the) (0 bad))",
        "(4 (2 (2 the) (2 film)) (4 (2 is) (4 great)))",
        "(0 (2 (2 the) (2 rock)) (0 (2 is) (0 bad)))",
    ];
    std::fs::write(&trees, lines.join("\n") + "\n").expect("trees");
    let (vocab, trees) = (vocab.display().to_string(), trees.display().to_string());
    same_in_one_and_split(
        test,
        "tree_lstm",
        &[("vocab", 8), ("embed", 4), ("hidden", 3)],
        &[
            "--data",
            &trees,
            "--vocab",
            &vocab,
            "--epochs",
            "2",
            "--workers",
            processes,
            "--plan",
            "round-robin",
            "--min-update-frequency",
            "2",
        ],
        processes,
    );
}

#[test]
fn tree_lstm_trains_the_same_over_two_processes() {
    tree_lstm_trains_the_same("split-tree-lstm", "2");
}

#[test]
fn tree_lstm_trains_the_same_over_three_processes() {
    tree_lstm_trains_the_same("split3-tree-lstm", "3");
}

#[test]
fn ggsnn_trains_the_same_over_two_processes() {
    let molecules = bundled("molecules/solubility.test.sdf");
    same_in_one_and_two_processes(
        "split-ggsnn",
        "ggsnn",
        &[("classes", 3), ("edge_kinds", 3), ("hidden", 4)],
        &[
            "--data",
            &molecules,
            "--limit",
            "8",
            "--epochs",
            "2",
            "--workers",
            "2",
            "--plan",
            "round-robin",
            "--min-update-frequency",
            "4",
        ],
    );
}

/// 8x8 "digits" for the MLP: `rows` rows of varied pixels, labels 0 to 9 in turn.
fn digits(dir: &Path, rows: usize) -> String {
    let mut text = (0..64).map(|i| format!("p{i}")).collect::<Vec<_>>().join(",") + ",label\n";
    for row in 0..rows {
        let pixels: Vec<String> = (0..64).map(|i| ((row * 7 + i * 3) % 17).to_string()).collect();
        text += &format!("{},{}\n", pixels.join(","), row % 10);
    }
    let path = dir.join("digits.csv");
    std::fs::write(&path, text).expect("digits");
    path.display().to_string()
}

/// A `--replicate` copy in the other process than its node: with two workers split over
/// two processes, the MLP's hidden layer `l2` runs on one and its copy on the other, so its
/// gradients cross before every update and its values after it. Synchronous, with
/// `--replica-sync 1`: the losses and the checkpoint of the one-process run with the same
/// copies (to rounding); the validation, whose copy reads the values its process was
/// sent after the epoch, too.
#[test]
fn a_replica_in_another_process_trains_the_same() {
    let data = scratch("split-replica-data");
    let digits = digits(data.path(), 24);
    same_in_one_and_two_processes(
        "split-replica",
        "mlp",
        &[("hidden", 8)],
        &[
            "--data",
            &digits,
            "--valid",
            &digits,
            "--epochs",
            "2",
            "--workers",
            "2",
            "--plan",
            "naive",
            "--replicate",
            "l2=2",
            "--replica-sync",
            "1",
            "--max-active-keys",
            "4",
            "--min-update-frequency",
            "4",
            "--optimizer",
            "adam",
        ],
    );
}

/// A staleness bound over two processes, synchronous: deterministic, so the losses and
/// checkpoint of the one-process run.
#[test]
fn a_bounded_run_over_two_processes_trains_as_one_synchronously() {
    list_reduce_with(
        "split-bounded-sync",
        &["--max-staleness", "0", "--optimizer", "adam", "--min-update-frequency", "4", "--limit", "40"],
    );
}

/// List-reduce's embedding table copied into the other process, under plain SGD: the
/// copy sends only the rows its gradients reached, the owner updates those rows, and the
/// run is the one-process run with the same copies. The plan keeps the model on worker 0
/// and the copy goes to worker 1, in process 1 (a replicated node's neighbours run in one
/// process; dealt round-robin, the lookup's trigger and its consumer part ways).
#[test]
fn a_tables_replica_in_another_process_trains_the_same() {
    let data = example("data/list_reduce.train.jsonl");
    let args = ["--data", &data, "--epochs", "2", "--workers", "2", "--plan", "auto", "--replicate", "embed=2"];
    let args = [&args[..], &["--optimizer", "sgd", "--min-update-frequency", "4", "--limit", "40"]].concat();
    same_in_one_and_two_processes("split-replica-embed", "list_reduce", &[("hidden", 16)], &args);
}

/// List-reduce over two processes, a worker each, nodes dealt round-robin (every process
/// owns parameters), with `extra` flags, against one process.
fn list_reduce_with(test: &str, extra: &[&str]) {
    let mut args = vec!["--data".to_string(), example("data/list_reduce.train.jsonl"), "--epochs".into(), "2".into()];
    args.extend(["--workers", "2", "--plan", "round-robin"].map(String::from));
    args.extend(extra.iter().map(|a| a.to_string()));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    same_in_one_and_two_processes(test, "list_reduce", &[("hidden", 16)], &refs);
}

/// Asynchronous training under `--max-staleness 1` over two processes, eight instances
/// in flight: the owners in process 1 hear of every instance's end from process 0 and
/// hold its admissions while they defer, so no group applies a gradient more than one
/// update late. Every group's staleness (process 1's gathered to process 0) is in the
/// metrics, within the bound, and every epoch ran to its end.
#[test]
fn a_bounded_asynchronous_run_over_two_processes_keeps_its_bound() {
    let dir = scratch("split-bounded-async");
    let dir = dir.path();
    let (model, data) = (example("list_reduce.amp"), example("data/list_reduce.train.jsonl"));
    let mut args = vec!["train", &model, "-D", "hidden=16", "--data", &data, "--limit", "60", "--epochs", "2"];
    args.extend(["--workers", "2", "--plan", "round-robin", "--processes", "2", "--async"]);
    args.extend(["--max-active-keys", "8", "--min-update-frequency", "2", "--max-staleness", "1"]);
    args.extend(["--metrics", "m.jsonl"]);
    amprun_ok(dir, &args);
    let text = std::fs::read_to_string(dir.join("m.jsonl")).expect("metrics");
    let epochs: Vec<serde_json::Value> = json_lines(&text).into_iter().filter(|m| m["split"] == "train").collect();
    assert_eq!(epochs.len(), 2, "{text}");
    for epoch in &epochs {
        assert_eq!(epoch["instances"], 60, "{epoch}");
        let groups = epoch["staleness"].as_array().expect("staleness per group");
        let names: Vec<&str> = groups.iter().map(|g| g["group"].as_str().expect("a name")).collect();
        assert_eq!(names, ["embed", "cell", "head"], "{epoch}");
        for group in groups {
            assert_eq!(group["bound"], 1, "{group}");
            assert!(group["max"].as_u64().expect("a max") <= 1, "{group}");
            // 60 instances each reached every group at least once.
            assert!(group["gradients"].as_u64().expect("a count") >= 60, "{group}");
        }
    }
}

/// List-reduce with a validation set and `extra` flags, trained in one process and split
/// over two with the same workers and plan, synchronously: each run's metrics and the
/// standard error of the split one.
fn validated_in_one_and_two_processes(
    test: &str,
    extra: &[&str],
) -> (tempfile::TempDir, Vec<serde_json::Value>, Vec<serde_json::Value>, String) {
    let dir = scratch(test);
    let (data, valid) = (example("data/list_reduce.train.jsonl"), example("data/list_reduce.valid.jsonl"));
    let model = example("list_reduce.amp");
    let mut common = vec!["train", &model, "-D", "hidden=16", "--data", &data, "--valid", &valid];
    common.extend(["--limit", "40", "--optimizer", "adam", "--lr", "0.02", "--workers", "2"]);
    common.extend(["--plan", "round-robin", "--min-update-frequency", "4"]);
    common.extend(extra);
    let run = |name: &str, split: bool| {
        let (best, metrics) = (format!("{name}.safetensors"), format!("{name}.jsonl"));
        let mut args = common.clone();
        args.extend(["--keep-best", &best, "--metrics", &metrics]);
        if split {
            args.extend(["--processes", "2"]);
        }
        let out = amprun_ok(dir.path(), &args);
        let text = std::fs::read_to_string(dir.path().join(&metrics)).expect("metrics");
        (json_lines(&text), stderr(&out))
    };
    let (one, _) = run("one", false);
    let (two, err) = run("two", true);
    (dir, one, two, err)
}

/// The losses of every `split` report in order, with their epochs.
fn losses(metrics: &[serde_json::Value], split: &str) -> Vec<(u64, f64)> {
    metrics
        .iter()
        .filter(|m| m["split"] == split)
        .map(|m| (m["epoch"].as_u64().expect("an epoch"), m["loss"].as_f64().expect("a finite loss")))
        .collect()
}

fn assert_same_losses(one: &[serde_json::Value], two: &[serde_json::Value]) {
    for split in ["train", "valid"] {
        let (a, b) = (losses(one, split), losses(two, split));
        assert_eq!(a.len(), b.len(), "{split}: {a:?} in one process, {b:?} in two");
        for ((epoch, x), (other, y)) in a.iter().zip(&b) {
            assert_eq!(epoch, other);
            assert!((x - y).abs() <= 1e-5 * x.abs().max(1.0), "{split} epoch {epoch}: {x} in one process, {y} in two");
        }
    }
}

/// `--patience` over two processes: process 0 sees the validation and tells process 1,
/// so both stop after the same epoch, the one a one-process run stops after, with the same
/// losses on the way.
#[test]
fn patience_stops_two_processes_where_it_stops_one() {
    let (_dir, one, two, err) =
        validated_in_one_and_two_processes("split-patience", &["--epochs", "8", "--patience", "1"]);
    let trained = losses(&one, "train").len();
    assert!((2..8).contains(&trained), "the one-process run stopped early: {one:?}");
    assert_same_losses(&one, &two);
    assert!(err.contains("stopping early: 1 epoch(s) without a better validation"), "{err}");
}

/// `--keep-best` over two processes: every process gathers when process 0 says the epoch
/// is the best, so process 0 writes the file a one-process run writes (names, metadata,
/// values to rounding), with parameters that live in process 1 among them.
#[test]
fn keep_best_over_two_processes_writes_what_one_process_does() {
    let (dir, one, two, _) = validated_in_one_and_two_processes("split-keep-best", &["--epochs", "3"]);
    assert_same_losses(&one, &two);
    let graph = compile_example("list_reduce", &[("hidden", 16)]);
    let read = |name: &str| checkpoint(&dir.path().join(name), &graph);
    let (a, b) = (read("one.safetensors"), read("two.safetensors"));
    assert_eq!(a.metadata, b.metadata);
    assert_eq!(a.params.specs(), b.params.specs());
    assert_params_agree(&a.params, &b.params, 1.0, ("in one process", "in two"));
}

/// Three processes, each with one worker of a round-robin plan: an instance's messages,
/// credits and losses take all three connections, and a loss computed on a process whose
/// parent is another one must still reach process 0 before the instance ends there (the
/// run ends with its last instance: a loss arriving later would be missing).
/// Starts a training run over `processes` processes that would last far longer than the
/// test, kills process `victim` once the first epoch is done, and returns process 0's exit
/// status and standard error (its children's lines included).
fn kill_mid_run(test: &str, processes: &str, victim: usize) -> (Option<i32>, String) {
    let dir = scratch(test);
    let dir = dir.path();
    let mut run = Command::new(env!("CARGO_BIN_EXE_amprun"))
        .args([
            "train",
            &example("list_reduce.amp"),
            "-D",
            "hidden=16",
            "--data",
            &example("data/list_reduce.train.jsonl"),
            "--limit",
            "30",
            // Far more epochs than it will live to train.
            "--epochs",
            "1000",
            "--workers",
            processes,
            "--plan",
            "round-robin",
            "--processes",
            processes,
        ])
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("amprun starts");
    let mut lines = BufReader::new(run.stderr.take().expect("stderr")).lines().map_while(Result::ok);
    let mut seen = Vec::new();
    let mut child = None;
    let announced = format!("amprun: process {victim} is pid ");
    for line in lines.by_ref() {
        seen.push(line.clone());
        if let Some(rest) = line.strip_prefix(&announced) {
            child = rest.split_whitespace().next().and_then(|p| p.parse::<u32>().ok());
        }
        // Once an epoch is done, the next one is under way in every process.
        if line.starts_with("epoch 1/") {
            break;
        }
    }
    let child = child.unwrap_or_else(|| panic!("the launcher names its child:\n{}", seen.join("\n")));
    let killed = Command::new("kill").args(["-9", &child.to_string()]).status().expect("kill runs");
    assert!(killed.success());
    seen.extend(lines);
    let status = run.wait().expect("process 0 ends");
    (status.code(), seen.join("\n"))
}

/// Killing the last of three processes mid-epoch ends the run on both others (process 1
/// loses it too, and leaves) with an error naming it, instead of a hang.
#[test]
fn a_killed_process_among_three_ends_the_run_on_the_others() {
    let (status, text) = kill_mid_run("split3-kill", "3", 2);
    assert_eq!(status, Some(4), "{text}");
    assert!(text.contains("lost process 2 (127.0.0.1:"), "{text}");
}

/// Killing process 1 mid-epoch ends process 0's run with an error naming the lost process
/// (its heartbeats stop and its connection breaks), instead of a hang.
#[test]
fn a_killed_process_ends_the_run_on_the_other() {
    let (status, text) = kill_mid_run("split-kill", "2", 1);
    assert_eq!(status, Some(4), "{text}");
    assert!(text.contains("lost process 1 (127.0.0.1:"), "{text}");
}

/// A process whose key differs is refused before anything else is read: the one that
/// connects says the other did not prove the key. One with the key but another graph is
/// refused too, on both sides.
#[test]
fn a_process_without_the_key_or_with_another_graph_is_refused() {
    let dir = scratch("split-key");
    let dir = dir.path();
    let ports: Vec<u16> = (0..2)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect::<Vec<_>>()
        .iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect();
    std::fs::write(dir.join("hosts.txt"), format!("127.0.0.1:{}\n127.0.0.1:{}\n", ports[0], ports[1])).unwrap();
    std::fs::write(dir.join("a.key"), "the right key").unwrap();
    std::fs::write(dir.join("b.key"), "a wrong key").unwrap();
    let args = |process: &str, key: &str, hidden: &str| {
        vec![
            "train".to_string(),
            example("list_reduce.amp"),
            "-D".into(),
            hidden.into(),
            "--data".into(),
            example("data/list_reduce.train.jsonl"),
            "--limit".into(),
            "4".into(),
            "--workers".into(),
            "2".into(),
            "--processes".into(),
            "2".into(),
            "--process".into(),
            process.into(),
            "--hostfile".into(),
            "hosts.txt".into(),
            "--cluster-key".into(),
            key.into(),
        ]
    };
    let mut zero = Command::new(env!("CARGO_BIN_EXE_amprun"))
        .args(args("0", "a.key", "hidden=16"))
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("process 0 starts");
    let refs = args("1", "b.key", "hidden=16");
    let refs: Vec<&str> = refs.iter().map(String::as_str).collect();
    let out = amprun(dir, &refs);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert!(stderr(&out).contains("did not prove the cluster key"), "{}", stderr(&out));
    // With the key but another graph (another hidden size), process 1 is refused by name
    // (process 0, still waiting for a process that proves the key, is refused too).
    let refs = args("1", "a.key", "hidden=8");
    let refs: Vec<&str> = refs.iter().map(String::as_str).collect();
    let out = amprun(dir, &refs);
    let zero_status = zero.wait().expect("process 0 ends");
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert!(stderr(&out).contains("runs with another graph"), "{}", stderr(&out));
    assert_eq!(zero_status.code(), Some(4));
}

/// `eval` over two processes reports the loss and accuracy of one process (process 0
/// prints them; the other prints nothing).
#[test]
fn eval_over_two_processes_reports_what_one_process_does() {
    let dir = scratch("split-eval");
    let dir = dir.path();
    let data = example("data/list_reduce.train.jsonl");
    let model = example("list_reduce.amp");
    let train = ["train", &model, "-D", "hidden=16", "--data", &data, "--limit", "20", "--save", "p.safetensors"];
    amprun_ok(dir, &train);
    let eval = |extra: &[&str]| {
        let mut args = vec!["eval", &model, "-D", "hidden=16", "--params", "p.safetensors", "--data", &data];
        args.extend(["--limit", "30", "--workers", "2", "--plan", "round-robin"]);
        args.extend(extra);
        let out = stdout(&amprun_ok(dir, &args));
        // `ListReduce: loss L  accuracy A%  instances N  instances/s R  (...)`: all but the rate.
        let line = out.lines().next().expect("a result line").to_string();
        line.split("  instances/s").next().expect("the line").to_string()
    };
    let one = eval(&[]);
    assert!(one.contains("loss"), "{one}");
    assert_eq!(eval(&["--processes", "2"]), one);
}

/// A checkpoint written over two processes resumes in one: the run ends with the
/// parameters of an uninterrupted one-process run (to rounding).
#[test]
fn a_checkpoint_of_two_processes_resumes_in_one() {
    let dir = scratch("split-resume");
    let dir = dir.path();
    let model = example("list_reduce.amp");
    let data = example("data/list_reduce.train.jsonl");
    let train = |epochs: &str, save: &str, extra: &[&str]| {
        let mut args = vec!["train", &model, "-D", "hidden=16", "--data", &data, "--limit", "40"];
        args.extend(["--workers", "2", "--plan", "round-robin", "--min-update-frequency", "4", "--optimizer", "adam"]);
        args.extend(["--epochs", epochs, "--save", save]);
        args.extend(extra);
        amprun_ok(dir, &args);
    };
    train("2", "whole.safetensors", &[]);
    train("1", "split.safetensors", &["--processes", "2"]);
    train("2", "split.safetensors", &["--resume"]);
    let graph = compile_example("list_reduce", &[("hidden", 16)]);
    let whole = checkpoint(&dir.join("whole.safetensors"), &graph);
    let resumed = checkpoint(&dir.join("split.safetensors"), &graph);
    assert_eq!(resumed.metadata["epoch"], "2");
    assert_params_agree(&whole.params, &resumed.params, 1.0, ("uninterrupted", "resumed"));
}

/// `--trace` over two processes: process 0 writes one trace, with a named process per
/// process, each worker's row in its own, and events on both; worker 1 (process 1) starts
/// no earlier than the source's worker (process 0) that sent its first message, on the one
/// clock they share (to far more than the loopback clock probe's error).
#[test]
fn a_trace_over_two_processes_merges_both() {
    let dir = scratch("split-trace");
    let dir = dir.path();
    let data = example("data/list_reduce.train.jsonl");
    let model = example("list_reduce.amp");
    let args = ["train", &model, "-D", "hidden=16", "--data", &data, "--limit", "12", "--workers", "2"];
    let mut args = args.to_vec();
    args.extend(["--plan", "round-robin", "--processes", "2", "--trace", "t.json"]);
    amprun_ok(dir, &args);
    let trace: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("t.json")).expect("a trace")).expect("the trace is JSON");
    let events = trace["traceEvents"].as_array().expect("traceEvents");
    for (pid, process) in [(1, 0), (2, 1)] {
        let named = events.iter().find(|e| e["name"] == "process_name" && e["pid"] == pid);
        let name = named.map(|e| e["args"]["name"].as_str().unwrap_or_default()).unwrap_or_default();
        assert!(name.starts_with(&format!("process {process} (127.0.0.1:")), "pid {pid}: {name:?}");
    }
    let work = |pid: u64, tid: u64| -> Vec<u64> {
        events
            .iter()
            .filter(|e| e["ph"] == "X" && e["pid"] == pid && e["tid"] == tid)
            .map(|e| e["ts"].as_u64().expect("a time"))
            .collect()
    };
    let (zero, one) = (work(1, 0), work(2, 1));
    assert!(!zero.is_empty() && !one.is_empty(), "events on both: {} and {}", zero.len(), one.len());
    assert!(work(1, 1).is_empty() && work(2, 0).is_empty(), "each worker in its own process");
    let (first_zero, first_one) = (zero.iter().min().unwrap(), one.iter().min().unwrap());
    assert!(first_one + 50_000 >= *first_zero, "worker 1 began at {first_one} us, worker 0 at {first_zero} us");
}

/// `grad` over two processes, each owning some parameters, writes the mean gradient of a
/// one-process run (every tensor, to rounding) and prints the same loss.
#[test]
fn grad_over_two_processes_writes_what_one_process_does() {
    let dir = scratch("split-grad");
    let dir = dir.path();
    let data = example("data/list_reduce.train.jsonl");
    let model = example("list_reduce.amp");
    let train = ["train", &model, "-D", "hidden=16", "--data", &data, "--limit", "20", "--save", "p.safetensors"];
    amprun_ok(dir, &train);
    let grad = |out: &str, extra: &[&str]| {
        let mut args = vec!["grad", &model, "-D", "hidden=16", "--params", "p.safetensors", "--data", &data];
        args.extend(["--limit", "12", "--workers", "2", "--plan", "round-robin", "--out", out]);
        args.extend(extra);
        let printed = stdout(&amprun_ok(dir, &args));
        printed.lines().next().expect("the loss line").to_string()
    };
    let one = grad("one.safetensors", &[]);
    assert_eq!(grad("two.safetensors", &["--processes", "2"]), one);
    let graph = compile_example("list_reduce", &[("hidden", 16)]);
    let (a, b) = (checkpoint(&dir.join("one.safetensors"), &graph), checkpoint(&dir.join("two.safetensors"), &graph));
    let (a, b) = (a.params, b.params);
    let mut nonzero = 0;
    for (spec, values) in a.iter() {
        let other = b.get(&spec.name).expect("the same tensors");
        assert_eq!(values.len(), other.len(), "`{}`", spec.name);
        for (x, y) in values.iter().zip(other) {
            assert!((x - y).abs() <= 1e-5 * x.abs().max(1e-3), "`{}`: {x} in one process, {y} in two", spec.name);
            nonzero += usize::from(*y != 0.0);
        }
    }
    assert!(nonzero > 0, "the gradients are not all zero");
}

/// `grad` with the MLP's `l2` copied into the other process writes the one-process run's
/// file (every tensor, to rounding). Each instance runs alone on fresh routes, which send
/// it to the node itself (the first copy, in turn), so this checks that a remote copy
/// changes nothing here; the gather adds a remote copy's part when one served.
#[test]
fn grad_with_a_replica_in_another_process_writes_what_one_process_does() {
    let dir = scratch("split-grad-replica");
    let dir = dir.path();
    let data = digits(dir, 12);
    let model = example("mlp.amp");
    let train = ["train", &model, "-D", "hidden=8", "--data", &data, "--save", "p.safetensors"];
    amprun_ok(dir, &train);
    let grad = |out: &str, extra: &[&str]| {
        let mut args = vec!["grad", &model, "-D", "hidden=8", "--params", "p.safetensors", "--data", &data];
        args.extend(["--workers", "2", "--plan", "naive", "--replicate", "l2=2", "--out", out]);
        args.extend(extra);
        amprun_ok(dir, &args);
    };
    grad("one.safetensors", &[]);
    grad("two.safetensors", &["--processes", "2"]);
    let graph = compile_example("mlp", &[("hidden", 8)]);
    let (a, b) = (checkpoint(&dir.join("one.safetensors"), &graph), checkpoint(&dir.join("two.safetensors"), &graph));
    for (spec, values) in a.params.iter() {
        assert!(values.iter().any(|&x| x != 0.0), "`{}` has a gradient", spec.name);
    }
    assert_params_agree(&a.params, &b.params, 1e-3, ("in one process", "in two"));
}

/// What a split run cannot do with replicas is refused before it trains, by name: a
/// replicated node whose producer and consumer run in two processes (one process must
/// route its messages), and a bounded group whose replica runs away from its owner's
/// process.
#[test]
fn replicas_a_split_run_cannot_route_or_bound_are_refused() {
    let dir = scratch("split-replica-refused");
    let dir = dir.path();
    let data = digits(dir, 4);
    let model = example("mlp.amp");
    let refused = |extra: &[&str], what: &str| {
        let mut args = vec!["train", &model, "-D", "hidden=8", "--data", &data, "--workers", "2"];
        args.extend(["--plan", "naive", "--processes", "2"]);
        args.extend(extra);
        let out = amprun(dir, &args);
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert!(stderr(&out).contains(what), "{}", stderr(&out));
    };
    // The contiguous plan puts `l1`'s input on worker 0 and its consumer on worker 1.
    refused(&["--replicate", "l1=2"], "(l1) is replicated, and its producers and consumers run in processes 0, 1");
    refused(&["--replicate", "l2=2", "--max-staleness", "2"], "parameter `l2` has a staleness bound and a replica");
}

/// More processes than `amp_ir::placement::MAX_RUN_PROCESSES` are refused before anything starts.
#[test]
fn too_many_processes_are_refused() {
    let dir = scratch("split-many");
    let dir = dir.path();
    let data = example("data/list_reduce.train.jsonl");
    let model = example("list_reduce.amp");
    let args = ["train", &model, "--data", &data, "--limit", "4", "--workers", "17", "--processes", "17"];
    let out = amprun(dir, &args);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("at most 16 processes"), "{}", stderr(&out));
}
