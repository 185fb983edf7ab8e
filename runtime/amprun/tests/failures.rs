//! Bad input and faults: each ends with its documented exit code and a message that says
//! what and where, and loses nothing (SPEC §7).
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use amp_params::{ParamSet, ParamSpec};
use common::*;

fn list_reduce_lines(n: usize) -> Vec<String> {
    let text = std::fs::read_to_string(example("data/list_reduce.train.jsonl")).expect("example data");
    text.lines().take(n).map(String::from).collect()
}

#[test]
fn a_bad_data_line_names_file_and_line_and_writes_nothing() {
    let dir = scratch("bad-data");
    let dir = dir.path();
    let mut lines = list_reduce_lines(5);
    lines.insert(3, r#"{"tokens":[1,"x"],"label":2}"#.to_string());
    std::fs::write(dir.join("bad.jsonl"), lines.join("\n") + "\n").unwrap();
    let model = example("list_reduce.amp");
    let args =
        ["train", &model, "-D", "hidden=8", "--data", "bad.jsonl", "--save", "c.safetensors", "--metrics", "m.jsonl"];
    let out = amprun(dir, &args);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("bad.jsonl:4: field `tokens[1]`: expected an int"), "{err}");
    assert!(!dir.join("c.safetensors").exists(), "no checkpoint after bad data");

    let mut skipping = args.to_vec();
    skipping.push("--skip-bad-data");
    let out = amprun_ok(dir, &skipping);
    assert!(stderr(&out).contains("skipped 1 bad instance(s) in bad.jsonl"), "{}", stderr(&out));
    assert!(stdout(&out).contains("skipped     1 bad instance(s)"), "{}", stdout(&out));
    let metrics = json_lines(&std::fs::read_to_string(dir.join("m.jsonl")).unwrap());
    let train = metrics.iter().find(|m| m["split"] == "train").unwrap();
    assert_eq!(train["instances"], 5);
}

/// Eight digit rows (a header first); row `huge` has pixels that overflow every sum.
fn digits_csv(dir: &std::path::Path, huge: usize) -> String {
    let mut text = (0..64).map(|i| format!("p{i}")).collect::<Vec<_>>().join(",") + ",label\n";
    for row in 0..8 {
        let pixel = if row == huge { "3e38".to_string() } else { ((row * 5) % 17).to_string() };
        text += &(vec![pixel; 64].join(",") + &format!(",{}\n", row % 10));
    }
    let path = dir.join("digits.csv");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn a_non_finite_loss_stops_with_the_instance_and_the_last_good_parameters() {
    let dir = scratch("nan");
    let dir = dir.path();
    let data = digits_csv(dir, 3);
    // All-ones weights: the huge row's logits overflow to infinity, its loss is NaN.
    let graph = compile_example("mlp", &[("hidden", 4)]);
    let mut ones = ParamSet::init(&ParamSpec::of_graph(&graph), 0);
    for t in 0..ones.len() {
        ones.data_mut(t).iter_mut().for_each(|v| *v = 1.0);
    }
    amp_params::save(&ones, &dir.join("ones.safetensors"), &Default::default()).unwrap();
    let model = example("mlp.amp");
    let mut args = vec!["train", &model, "-D", "hidden=4", "--data", &data, "--init", "ones.safetensors"];
    args.extend(["--no-shuffle", "--lr", "0.0001", "--save", "c.safetensors"]);
    let out = amprun(dir, &args);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("loss of instance 3 (") && err.contains("digits.csv:5)"), "{err}");
    assert!(err.contains("is NaN") && err.contains("training stopped in epoch 1"), "{err}");
    assert!(err.contains("last good parameters") && err.contains("c.safetensors"), "{err}");
    // The checkpoint holds the parameters of the start of the epoch (those of --init), not
    // those the failing epoch had reached: an update may already have blown them up.
    let stopped = checkpoint(&dir.join("c.safetensors"), &graph);
    assert!(stopped.metadata["status"].starts_with("stopped: non-finite loss in epoch 1"));
    assert_eq!(stopped.metadata["epoch"], "0");
    assert_eq!(stopped.params, ones);
    let optim = stopped.optim.expect("the optimizer state");
    assert!(optim.tensors.iter().all(|t| t.step == 0), "the optimizer state of the start too");
}

/// A fresh run (no `--resume`) that blows up in its first epoch does not replace a
/// checkpoint already at its `--save` path (issue 48: a trained file was replaced by the
/// run's starting parameters).
#[test]
fn a_fresh_run_that_blows_up_at_once_leaves_an_existing_checkpoint_as_it_was() {
    let dir = scratch("nan-fresh");
    let dir = dir.path();
    let model = example("mlp.amp");
    let good_data = digits_csv(dir, usize::MAX);
    amprun_ok(dir, &["train", &model, "-D", "hidden=4", "--data", &good_data, "--save", "c.safetensors"]);
    let trained = std::fs::read(dir.join("c.safetensors")).unwrap();
    // The same run on data whose row 3 overflows every sum, from all-ones weights.
    let data = digits_csv(dir, 3);
    let graph = compile_example("mlp", &[("hidden", 4)]);
    let mut ones = ParamSet::init(&ParamSpec::of_graph(&graph), 0);
    for t in 0..ones.len() {
        ones.data_mut(t).iter_mut().for_each(|v| *v = 1.0);
    }
    amp_params::save(&ones, &dir.join("ones.safetensors"), &Default::default()).unwrap();
    let mut args = vec!["train", &model, "-D", "hidden=4", "--data", &data, "--init", "ones.safetensors"];
    args.extend(["--no-shuffle", "--lr", "0.0001", "--save", "c.safetensors"]);
    let out = amprun(dir, &args);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("no epoch finished, so `c.safetensors` was left as it was"), "{err}");
    assert_eq!(std::fs::read(dir.join("c.safetensors")).unwrap(), trained, "the trained checkpoint is untouched");
}

#[test]
fn a_non_finite_loss_after_a_good_epoch_leaves_the_good_checkpoint_untouched() {
    let dir = scratch("nan-resume");
    let dir = dir.path();
    let data = digits_csv(dir, usize::MAX);
    let model = example("mlp.amp");
    // An update after every instance, so that the first one blows up within the epoch.
    let base = [
        "train",
        &model,
        "-D",
        "hidden=4",
        "--data",
        &data,
        "--no-shuffle",
        "--save",
        "c.safetensors",
        "--deterministic",
    ];
    amprun_ok(dir, &base);
    let good = std::fs::read(dir.join("c.safetensors")).unwrap();
    // A learning rate that blows the parameters up at the first update.
    let mut blowing = base.to_vec();
    blowing.extend(["--resume", "--epochs", "2", "--lr", "1e30"]);
    let out = amprun(dir, &blowing);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("training stopped in epoch 2"), "{err}");
    assert!(err.contains("already holds the last good parameters (those after epoch 1)"), "{err}");
    assert_eq!(std::fs::read(dir.join("c.safetensors")).unwrap(), good, "the good checkpoint is untouched");
    let out = amprun_ok(dir, &["eval", &model, "-D", "hidden=4", "--params", "c.safetensors", "--data", &data]);
    assert!(!stdout(&out).contains("NaN"), "{}", stdout(&out));
}

#[test]
fn non_finite_parameters_are_refused_naming_the_tensor() {
    let dir = scratch("nan-params");
    let dir = dir.path();
    let data = digits_csv(dir, usize::MAX);
    let graph = compile_example("mlp", &[("hidden", 4)]);
    let mut params = ParamSet::init(&ParamSpec::of_graph(&graph), 0);
    let at = params.index("l2.weight").expect("l2.weight");
    params.data_mut(at)[5] = f32::NAN;
    amp_params::save(&params, &dir.join("nan.safetensors"), &Default::default()).unwrap();
    let model = example("mlp.amp");
    let with = |command: &'static str, flag: &'static str| {
        let mut args = vec![command, &model, "-D", "hidden=4", "--data", &data, flag, "nan.safetensors"];
        if command == "grad" {
            args.extend(["--out", "g.safetensors"]);
        }
        args
    };
    for args in [with("eval", "--params"), with("infer", "--params"), with("grad", "--params"), with("train", "--init")]
    {
        let out = amprun(dir, &args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(err.contains("nan.safetensors") && err.contains("tensor `l2.weight` holds NaN at index 5"), "{err}");
        assert!(stdout(&out).is_empty(), "{args:?}: nothing printed: {}", stdout(&out));
    }
}

#[test]
fn a_checkpoint_with_a_malformed_epoch_says_so() {
    let dir = scratch("bad-epoch");
    let dir = dir.path();
    let data = digits_csv(dir, usize::MAX);
    let graph = compile_example("mlp", &[("hidden", 4)]);
    let params = ParamSet::init(&ParamSpec::of_graph(&graph), 0);
    let metadata = [("epoch", "1O"), ("seed", "0")].iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    amp_params::save(&params, &dir.join("c.safetensors"), &metadata).unwrap();
    let model = example("mlp.amp");
    let args =
        ["train", &model, "-D", "hidden=4", "--data", &data, "--save", "c.safetensors", "--resume", "--epochs", "2"];
    let out = amprun(dir, &args);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("its `epoch` is malformed: `1O` is not a whole number"), "{err}");
}

#[test]
fn a_worker_panic_ends_the_run_naming_node_and_worker() {
    let dir = scratch("panic");
    let dir = dir.path();
    let data = digits_csv(dir, usize::MAX);
    let out = amprun(dir, &["train", &example("mlp.amp"), "-D", "hidden=4", "--data", &data, "--fault", "panic:3:2"]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    let err = stderr(&out);
    // %3 is l1's relu, which runs in l1's step (its epilogue): the node that panics is l1's.
    assert!(err.contains("worker 0 panicked in node %2 `l1`: injected fault at node %3"), "{err}");
    assert!(!err.contains("stack backtrace"), "one line, not a backtrace: {err}");
}

#[test]
fn a_stalled_worker_ends_the_run() {
    let dir = scratch("stall");
    let dir = dir.path();
    let data = digits_csv(dir, usize::MAX);
    let model = example("mlp.amp");
    let args =
        ["train", &model, "-D", "hidden=4", "--data", &data, "--fault", "delay:3:1:1500", "--stall-timeout", "0.2"];
    let out = amprun(dir, &args);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert!(stderr(&out).contains("no progress") && stderr(&out).contains("worker 0"), "{}", stderr(&out));
}

#[test]
fn compile_errors_are_bad_input_with_diagnostics() {
    let dir = scratch("compile");
    let dir = dir.path();
    let data = example("data/list_reduce.train.jsonl");
    let out = amprun(dir, &["train", &example("list_reduce.amp"), "-D", "hidden=0", "--data", &data]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("E0307"), "{}", stderr(&out));

    std::fs::write(dir.join("broken.ampg"), b"AMPG\x02\x00\x00\x00{not json").unwrap();
    let out = amprun(dir, &["train", "broken.ampg", "--data", &data]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("not a loadable graph file"), "{}", stderr(&out));
}

#[test]
fn usage_errors_exit_two() {
    let dir = scratch("usage");
    let dir = dir.path();
    let model = example("list_reduce.amp");
    let data = example("data/list_reduce.train.jsonl");
    let cases: [&[&str]; 6] = [
        &["train", &model, "--data", &data, "--workers", "0"],
        &["train", &model, "--data", &data, "--update-frequency", "nosuch=4"],
        &["train", &model, "--data", &data, "--resume"],
        &["train", &model, "--data", &data, "--save", "none.safetensors", "--resume"],
        &["train", &model, "--data", "missing.jsonl"],
        &["train", &model, "--data", "data.unknown"],
    ];
    for args in cases {
        let out = amprun(dir, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
    }
    let help = amprun(dir, &["train", "--help"]);
    assert!(stdout(&help).contains("Exit codes:") && stdout(&help).contains("non-finite"));
}

#[test]
fn a_non_finite_scale_is_a_usage_error_not_bad_data() {
    let dir = scratch("scale");
    let dir = dir.path();
    let data = digits_csv(dir, usize::MAX);
    for scale in ["nan", "inf"] {
        let out = amprun(dir, &["train", &example("mlp.amp"), "-D", "hidden=4", "--data", &data, "--scale", scale]);
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        let err = stderr(&out);
        assert!(err.contains("--scale") && err.contains("is not a finite number"), "{err}");
        assert!(!err.contains("digits.csv:"), "no data line is blamed: {err}");
    }
}

#[test]
fn limit_reads_nothing_after_its_instances() {
    let dir = scratch("limit");
    let dir = dir.path();
    let mut lines = list_reduce_lines(6);
    lines.push(r#"{"tokens":[1,"x"],"label":2}"#.to_string());
    std::fs::write(dir.join("late.jsonl"), lines.join("\n") + "\n").unwrap();
    let model = example("list_reduce.amp");
    let args = ["train", &model, "-D", "hidden=8", "--data", "late.jsonl", "--metrics", "m.jsonl"];
    let out = amprun(dir, &args);
    assert_eq!(out.status.code(), Some(1), "the bad line 7 is read without --limit");
    assert!(stderr(&out).contains("late.jsonl:7:"), "{}", stderr(&out));
    let mut limited = args.to_vec();
    limited.extend(["--limit", "6"]);
    amprun_ok(dir, &limited);
    let metrics = json_lines(&std::fs::read_to_string(dir.join("m.jsonl")).unwrap());
    let train = metrics.iter().find(|m| m["split"] == "train").unwrap();
    assert_eq!(train["instances"], 6);
}
