//! `amprun train` end to end: metrics, learning, checkpoints, resume, `.ampg` input.

mod common;

use common::*;

/// The metrics reports of one split.
fn reports<'a>(metrics: &'a [serde_json::Value], split: &str) -> Vec<&'a serde_json::Value> {
    metrics.iter().filter(|m| m["split"] == split).collect()
}

#[test]
fn mlp_learns_digits_and_reports_metrics() {
    let digits = bundled("digits/digits.csv");
    let dir = scratch("digits");
    let dir = dir.path();
    let out = amprun_ok(
        dir,
        &[
            "train",
            &example("mlp.amp"),
            "-D",
            "hidden=16",
            "--data",
            &digits,
            "--valid",
            &digits,
            "--scale",
            "0.0625",
            "--limit",
            "200",
            "--epochs",
            "2",
            "--lr",
            "0.1",
            "--min-update-frequency",
            "4",
            "--metrics",
            "m.jsonl",
        ],
    );
    let metrics = json_lines(&std::fs::read_to_string(dir.join("m.jsonl")).expect("metrics file"));
    // On several workers (the default on a machine with several cores) a `plan` object too.
    let metrics: Vec<_> = metrics.into_iter().filter(|m| m["split"] == "train" || m["split"] == "valid").collect();
    assert_eq!(metrics.len(), 4, "train and valid, two epochs");
    for m in &metrics {
        for key in ["split", "epoch", "instances", "loss", "accuracy", "instances_per_s", "elapsed_s"] {
            assert!(m.get(key).is_some(), "no `{key}` in {m}");
        }
        assert_eq!(m["instances"], 200);
        assert!(m["instances_per_s"].as_f64().unwrap() > 0.0);
        let accuracy = m["accuracy"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&accuracy));
    }
    let train = reports(&metrics, "train");
    assert_eq!((train[0]["epoch"].as_u64(), train[1]["epoch"].as_u64()), (Some(1), Some(2)));
    let (first, second) = (train[0]["loss"].as_f64().unwrap(), train[1]["loss"].as_f64().unwrap());
    assert!(second < first, "the training loss decreases: {first} then {second}");
    let valid = reports(&metrics, "valid");
    assert!(valid[1]["loss"].as_f64().unwrap() < valid[0]["loss"].as_f64().unwrap());
    assert!(train[1]["elapsed_s"].as_f64().unwrap() >= train[0]["elapsed_s"].as_f64().unwrap());
    let summary = stdout(&out);
    assert!(summary.contains("Mlp3: trained epochs 1..2") && summary.contains("valid  loss"), "{summary}");
    // Not a terminal: plain lines on stderr, one per epoch for training and one for its
    // validation, right after it.
    let err = stderr(&out);
    assert_eq!(err.lines().filter(|l| l.starts_with("epoch ") && l.contains(": train ")).count(), 2, "{err}");
    assert_eq!(err.lines().filter(|l| l.starts_with("epoch ") && l.contains(": valid ")).count(), 2, "{err}");
}

#[test]
fn list_reduce_trains_with_validation_checkpoint_and_trace() {
    let dir = scratch("list-reduce");
    let dir = dir.path();
    let out = amprun_ok(
        dir,
        &[
            "train",
            &example("list_reduce.amp"),
            "-D",
            "hidden=16",
            "--data",
            &example("data/list_reduce.train.jsonl"),
            "--valid",
            &example("data/list_reduce.valid.jsonl"),
            "--limit",
            "120",
            "--epochs",
            "2",
            "--optimizer",
            "adam",
            "--workers",
            "2",
            // The plan keeps a model this small on one worker (a second one costs more
            // in messages than it takes over); dealt out, both workers trace work.
            "--plan",
            "round-robin",
            "--max-active-keys",
            "4",
            "--min-update-frequency",
            "4",
            "--save",
            "c.safetensors",
            "--metrics",
            "m.jsonl",
            "--trace",
            "t.json",
        ],
    );
    assert!(stdout(&out).contains("checkpoint  c.safetensors"), "{}", stdout(&out));
    let graph = compile_example("list_reduce", &[("hidden", 16)]);
    let saved = checkpoint(&dir.join("c.safetensors"), &graph);
    assert_eq!(saved.metadata["epoch"], "2");
    assert_eq!(saved.metadata["model"], "ListReduce");
    assert_eq!(saved.metadata["seed"], "0");
    assert_eq!(saved.metadata["instances"], "120");
    assert_eq!(saved.optim.as_ref().map(|o| o.kind.as_str()), Some("adam"));
    let metrics = json_lines(&std::fs::read_to_string(dir.join("m.jsonl")).expect("metrics"));
    assert_eq!(reports(&metrics, "valid").len(), 2);
    let trace: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("t.json")).expect("trace")).expect("trace is JSON");
    let events = trace["traceEvents"].as_array().expect("traceEvents");
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["cat"].as_str()).collect();
    for kind in ["forward", "backward", "update"] {
        assert!(kinds.contains(&kind), "a {kind} event in the trace");
    }
    assert!(events.iter().any(|e| e["tid"] == 1), "work on the second worker");
}

/// Trains list_reduce into `dir/NAME` for `epochs` (total), optionally resuming, on one
/// worker: what these tests compare is bit for bit, which several workers keep only to
/// rounding (batches form as messages meet).
fn train_list_reduce(dir: &std::path::Path, model: &str, name: &str, epochs: &str, resume: bool) {
    let data = example("data/list_reduce.train.jsonl");
    let mut args = vec![
        "train",
        model,
        "--workers",
        "1",
        "--data",
        &data,
        "--limit",
        "48",
        "--epochs",
        epochs,
        "--optimizer",
        "adam",
        "--min-update-frequency",
        "4",
        "--seed",
        "7",
        "--save",
        name,
        "--metrics",
        "m.jsonl",
    ];
    let defines = ["-D", "hidden=8"];
    if model.ends_with(".amp") {
        args.extend(defines);
    }
    if resume {
        args.push("--resume");
    }
    amprun_ok(dir, &args);
}

#[test]
fn a_resumed_run_ends_with_the_parameters_of_an_uninterrupted_one() {
    let dir = scratch("resume");
    let dir = dir.path();
    let model = example("list_reduce.amp");
    train_list_reduce(dir, &model, "whole.safetensors", "3", false);
    train_list_reduce(dir, &model, "parts.safetensors", "1", false);
    train_list_reduce(dir, &model, "parts.safetensors", "3", true);
    let graph = compile_example("list_reduce", &[("hidden", 8)]);
    let whole = checkpoint(&dir.join("whole.safetensors"), &graph);
    let parts = checkpoint(&dir.join("parts.safetensors"), &graph);
    assert_eq!(parts.metadata["epoch"], "3");
    assert_eq!(whole.params, parts.params, "parameters equal bit for bit");
    assert_eq!(whole.optim, parts.optim, "Adam's moments and step counts too");
    let first = first_values(&whole.params);
    let fresh = amp_params::ParamSet::init(&amp_params::ParamSpec::of_graph(&graph), 7);
    assert_ne!(first, first_values(&fresh), "training changed the parameters");
    // Metrics: the resumed run appended to the file both runs share.
    let metrics = json_lines(&std::fs::read_to_string(dir.join("m.jsonl")).expect("metrics"));
    let epochs: Vec<u64> = metrics.iter().filter_map(|m| m["epoch"].as_u64()).collect();
    assert_eq!(&epochs[epochs.len() - 3..], &[1, 2, 3]);
    // Resuming past the last epoch does nothing.
    let out = amprun_ok(
        dir,
        &[
            "train",
            &model,
            "-D",
            "hidden=8",
            "--data",
            &example("data/list_reduce.train.jsonl"),
            "--limit",
            "48",
            "--epochs",
            "3",
            "--optimizer",
            "adam",
            "--save",
            "parts.safetensors",
            "--resume",
        ],
    );
    assert!(stdout(&out).contains("nothing to do"), "{}", stdout(&out));
}

fn first_values(params: &amp_params::ParamSet) -> Vec<f32> {
    params.iter().map(|(_, v)| v.first().copied().unwrap_or(0.0)).collect()
}

#[test]
fn a_compiled_ampg_graph_trains_like_its_source() {
    let dir = scratch("ampg");
    let dir = dir.path();
    let graph = compile_example("list_reduce", &[("hidden", 8)]);
    let ampg = dir.join("list_reduce.ampg");
    std::fs::write(&ampg, amp_ir::ampg::write(&graph, None)).expect("write the graph");
    train_list_reduce(dir, &example("list_reduce.amp"), "from_source.safetensors", "1", false);
    train_list_reduce(dir, ampg.to_str().expect("utf-8 path"), "from_graph.safetensors", "1", false);
    let a = checkpoint(&dir.join("from_source.safetensors"), &graph);
    let b = checkpoint(&dir.join("from_graph.safetensors"), &graph);
    assert_eq!(a.params, b.params);
    // -D means nothing to a compiled graph: a usage error, not a silent surprise.
    let out = amprun(
        dir,
        &["train", ampg.to_str().unwrap(), "-D", "hidden=4", "--data", &example("data/list_reduce.train.jsonl")],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

/// `--keep-best` writes the parameters of the epoch with the best validation accuracy, and
/// `--patience N` stops once N validations in a row did not beat it (issue 28).
#[test]
fn keep_best_writes_the_best_epoch_and_patience_stops_early() {
    let dir = scratch("keep-best");
    let dir = dir.path();
    let args = |lr: &'static str, epochs: &'static str| {
        vec![
            "train".to_string(),
            example("list_reduce.amp"),
            "-D".into(),
            "hidden=16".into(),
            "--data".into(),
            example("data/list_reduce.train.jsonl"),
            "--valid".into(),
            example("data/list_reduce.valid.jsonl"),
            "--limit".into(),
            "200".into(),
            "--epochs".into(),
            epochs.into(),
            "--lr".into(),
            lr.into(),
            "--keep-best".into(),
            "best.safetensors".into(),
            "--metrics".into(),
            "m.jsonl".into(),
        ]
    };
    // Learning: the kept file is the epoch whose validation accuracy was highest (the
    // first of equals), with that epoch's parameters.
    let run: Vec<String> = args("0.05", "4");
    amprun_ok(dir, &run.iter().map(String::as_str).collect::<Vec<_>>());
    let metrics = json_lines(&std::fs::read_to_string(dir.join("m.jsonl")).unwrap());
    let valid = reports(&metrics, "valid");
    assert_eq!(valid.len(), 4);
    let mut best = (0u64, f64::MIN);
    for v in &valid {
        let accuracy = v["accuracy"].as_f64().unwrap();
        if accuracy > best.1 {
            best = (v["epoch"].as_u64().unwrap(), accuracy);
        }
    }
    let graph = compile_example("list_reduce", &[("hidden", 16)]);
    let kept = checkpoint(&dir.join("best.safetensors"), &graph);
    assert_eq!(kept.metadata["epoch"], best.0.to_string());

    // Nothing to learn (lr 0): epoch 1 stays the best, and with --patience 1 the run stops
    // after epoch 2, the first that did not beat it.
    std::fs::remove_file(dir.join("m.jsonl")).unwrap();
    let mut run = args("0", "10");
    run.extend(["--patience".to_string(), "1".to_string()]);
    let out = amprun_ok(dir, &run.iter().map(String::as_str).collect::<Vec<_>>());
    let (err, out) = (stderr(&out), stdout(&out));
    assert!(err.contains("stopping early: 1 epoch(s) without a better validation than epoch 1"), "{err}");
    assert!(out.contains("trained epochs 1..2 (2 this run)"), "{out}");
    assert!(out.contains("best   epoch 1: best.safetensors"), "{out}");
    let metrics = json_lines(&std::fs::read_to_string(dir.join("m.jsonl")).unwrap());
    assert_eq!(reports(&metrics, "train").len(), 2);
    assert_eq!(checkpoint(&dir.join("best.safetensors"), &graph).metadata["epoch"], "1");
}

/// Issue 48, finding 5: a 2-epoch run resumed to 3 forgot the best validation and wrote
/// epoch 3 to `--keep-best` as "the best so far"; `--patience` restarted its count. The
/// best score and the patience count are part of the checkpoint. Here (lr 1, 40
/// instances) the validation accuracy of epochs 1..4 is 20%, 32.5%, 25%, 30%: epoch 2 is
/// the best, and `--patience 1` stops a straight run after epoch 3.
#[test]
fn a_resumed_run_keeps_the_best_validation_and_the_patience_count() {
    let dir = scratch("resume-best");
    let dir = dir.path();
    let (model, data) = (example("list_reduce.amp"), example("data/list_reduce.valid.jsonl"));
    let run = |epochs: &str, save: &str, best: &str, extra: &[&str]| {
        let mut args = vec!["train", &model, "-D", "hidden=8", "--data", &data, "--valid", &data, "--limit", "40"];
        args.extend(["--lr", "1", "--epochs", epochs, "--save", save, "--keep-best", best]);
        args.extend(extra);
        amprun_ok(dir, &args)
    };
    let graph = compile_example("list_reduce", &[("hidden", 8)]);
    let kept = |file: &str| checkpoint(&dir.join(file), &graph);
    let straight = run("3", "straight.st", "straight-best.st", &[]);
    run("2", "resumed.st", "resumed-best.st", &[]);
    let resumed = run("3", "resumed.st", "resumed-best.st", &["--resume"]);
    assert_eq!(kept("straight-best.st").metadata["epoch"], "2", "{}", stdout(&straight));
    assert_eq!(kept("resumed-best.st").metadata["epoch"], "2", "{}", stdout(&resumed));
    assert_eq!(kept("resumed-best.st").params, kept("straight-best.st").params);
    assert!(stdout(&resumed).contains("best   epoch 2: resumed-best.st"), "{}", stdout(&resumed));
    let saved = kept("resumed.st").metadata;
    assert_eq!((saved["best_epoch"].as_str(), saved["since_best"].as_str()), ("2", "1"));
    assert_eq!(saved["best_score"], kept("straight.st").metadata["best_score"]);

    // --patience 1: a straight run stops after epoch 3; one resumed after epoch 3 trains
    // nothing more.
    let out = run("4", "p.st", "p-best.st", &["--patience", "1"]);
    assert!(stdout(&out).contains("trained epochs 1..3 (3 this run)"), "{}", stdout(&out));
    run("3", "q.st", "q-best.st", &["--patience", "1"]);
    let out = run("4", "q.st", "q-best.st", &["--patience", "1", "--resume"]);
    assert!(
        stdout(&out).contains("stopping early: 1 epoch(s) without a better validation than epoch 2"),
        "{}",
        stdout(&out)
    );
    assert_eq!(kept("q.st").metadata["epoch"], "3");
}

/// One epoch of 64 list-reduce instances with `flags`: the training report and the profile.
fn profiled_run(dir: &std::path::Path, flags: &[&str]) -> (serde_json::Value, serde_json::Value, String) {
    let data = example("data/list_reduce.train.jsonl");
    let model = example("list_reduce.amp");
    let _ = std::fs::remove_file(dir.join("m.jsonl"));
    let mut args = vec!["train", &model, "-D", "hidden=16", "--data", &data, "--limit", "64", "--epochs", "1"];
    args.extend(["--metrics", "m.jsonl", "--profile", "p.json"]);
    args.extend(flags);
    let out = amprun_ok(dir, &args);
    let metrics = json_lines(&std::fs::read_to_string(dir.join("m.jsonl")).expect("metrics file"));
    let train = reports(&metrics, "train")[0].clone();
    let profile: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("p.json")).expect("profile")).expect("JSON");
    (train, profile, stdout(&out))
}

/// The mean rows per call of the profile's `batches` entry for Linear nodes, forward.
fn linear_forward_rows(profile: &serde_json::Value) -> f64 {
    let batches = profile["batches"].as_array().expect("a `batches` list");
    let linear = batches.iter().find(|b| b["kind"] == "linear" && b["work"] == "forward").expect("linear forward");
    let histogram = linear["histogram"].as_array().expect("a histogram");
    let calls: u64 = histogram.iter().map(|h| h["calls"].as_u64().expect("calls")).sum();
    assert_eq!(Some(calls), linear["calls"].as_u64(), "the histogram counts every call: {linear}");
    linear["mean_rows"].as_f64().expect("mean_rows")
}

/// The profile's `time` object: the buckets cover the workers' whole training time, each
/// kind of node that ran has its own (Linear nodes among them), the executor's own work and
/// the waiting come last, and the summary prints them per instance.
fn check_time(profile: &serde_json::Value, workers: u64, summary: &str) {
    let time = &profile["time"];
    assert_eq!(time["workers"], workers, "{time}");
    assert_eq!(time["instances"], 64, "{time}");
    let wall = time["wall_s"].as_f64().expect("wall_s");
    let buckets = time["buckets"].as_array().expect("buckets");
    let names: Vec<&str> = buckets.iter().filter_map(|b| b["bucket"].as_str()).collect();
    let ran: Vec<&str> =
        profile["batches"].as_array().expect("batches").iter().filter_map(|b| b["kind"].as_str()).collect();
    assert!(ran.iter().all(|kind| names.contains(kind)) && names.contains(&"linear"), "{names:?} {ran:?}");
    assert_eq!(names[names.len() - 3..], ["between nodes", "updates", "waiting"], "{names:?}");
    let seconds: Vec<f64> = buckets.iter().map(|b| b["s"].as_f64().expect("s")).collect();
    assert!(seconds.iter().all(|&s| s >= 0.0), "{time}");
    let total: f64 = seconds.iter().sum();
    assert!((total - wall * workers as f64).abs() <= 1e-6 * total.max(1.0), "{total} against {wall}: {time}");
    let linear = buckets.iter().find(|b| b["bucket"] == "linear").expect("linear");
    assert!(linear["s"].as_f64().expect("s") > 0.0, "{time}");
    let per_instance = linear["us_per_instance"].as_f64().expect("us_per_instance");
    let expected = linear["s"].as_f64().expect("s") * 1e6 / 64.0;
    assert!((per_instance - expected).abs() <= 1e-9 * expected, "{time}");
    assert!(summary.contains("time        per instance: ") && summary.contains("between nodes "), "{summary}");
}

#[test]
fn the_profile_accounts_for_every_worker_s_time() {
    let dir = scratch("time");
    let (_, profile, summary) = profiled_run(dir.path(), &["--workers", "2", "--plan", "round-robin"]);
    check_time(&profile, 2, &summary);
}

#[test]
fn by_default_training_batches_a_minibatch_of_16_and_deterministic_runs_one_at_a_time() {
    let dir = scratch("defaults");
    let dir = dir.path();
    let (batched, profile, summary) = profiled_run(dir, &[]);
    assert_eq!(profile["in_flight"], 16, "the update size in flight");
    let rows = linear_forward_rows(&profile);
    assert!(rows > 2.0, "Linear calls take several instances' rows: {rows}");
    assert!(summary.contains("batches     linear forward: "), "{summary}");
    // List-reduce's routing nodes run as a chain, which is not a fused kernel (it has no
    // fusion group of several nodes at this size).
    let kinds: Vec<&str> =
        profile["batches"].as_array().expect("batches").iter().filter_map(|b| b["kind"].as_str()).collect();
    assert!(kinds.contains(&"chain") && !kinds.contains(&"fused"), "{kinds:?}");
    check_time(&profile, 1, &summary);
    let (single, profile, _) = profiled_run(dir, &["--deterministic"]);
    assert_eq!(profile["in_flight"], 1);
    assert_eq!(linear_forward_rows(&profile), 1.0, "one instance in flight: one row per call");
    // An update per instance instead of per 16 (the metrics sum the groups' updates).
    let updates = |r: &serde_json::Value| r["updates"].as_u64().expect("updates");
    assert!(updates(&batched) > 0);
    assert_eq!(updates(&single), 16 * updates(&batched), "{batched} / {single}");
    // The old default is one flag away, and not mixed with an explicit count.
    let data = example("data/list_reduce.train.jsonl");
    let model = example("list_reduce.amp");
    let out = amprun(dir, &["train", &model, "--data", &data, "--deterministic", "--max-active-keys", "4"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

/// A model whose data types and word encoder live in another file (`examples/shared/`)
/// trains from its root file, and its checkpoint names the shared layer's parameters by
/// the instance; a mistake in the imported file fails the run naming that file.
#[test]
fn a_model_importing_a_module_trains_from_its_root_file() {
    let dir = scratch("modules");
    let dir = dir.path();
    let data = example("data/tree_sentiment.train.jsonl");
    let params = dir.join("bag.safetensors");
    let params_arg = params.display().to_string();
    let model = example("sentiment_bag.amp");
    let args = ["train", &model, "--data", &data, "--epochs", "1", "--limit", "200", "--save", &params_arg];
    amprun_ok(dir, &args);
    let saved = std::fs::read(&params).unwrap();
    // A safetensors file starts with its JSON header of tensor names.
    assert!(String::from_utf8_lossy(&saved).contains("\"words.emb.weight\""));

    std::fs::create_dir(dir.join("shared")).unwrap();
    let broken = std::fs::read_to_string(example("shared/encoders.amp")).unwrap().replace("tanh(u)", "tanh(v)");
    std::fs::write(dir.join("shared/encoders.amp"), broken).unwrap();
    std::fs::copy(&model, dir.join("bag.amp")).unwrap();
    let out = amprun(dir, &["train", "bag.amp", "--data", &data, "--epochs", "1"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("shared/encoders.amp") && err.contains("unknown name `v`"), "{err}");
}
