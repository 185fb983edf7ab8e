//! `amprun` and the partition plan: it follows the plan (the `.ampg` file's or one planned
//! in-process), trains to the same result as the executor's own placement, reports
//! predicted and measured utilization, writes a profile, and refuses a plan that does not
//! fit its graph.

mod common;

use amp_plan::Assumptions;
use common::*;
use std::path::Path;

/// list_reduce (hidden 16) compiled, with `plan` stored in `dir/NAME.ampg`.
fn ampg_with_plan(dir: &Path, name: &str, plan: Option<serde_json::Value>) -> String {
    let graph = compile_example("list_reduce", &[("hidden", 16)]);
    let path = dir.join(format!("{name}.ampg"));
    std::fs::write(&path, amp_ir::ampg::write(&graph, plan.as_ref())).expect("write the graph file");
    path.display().to_string()
}

/// `amprun train` on the first 96 instances for 2 epochs.
fn train_args<'a>(model: &'a str, data: &'a str) -> Vec<&'a str> {
    sized_train_args(model, data, "96", "2")
}

fn sized_train_args<'a>(model: &'a str, data: &'a str, limit: &'a str, epochs: &'a str) -> Vec<&'a str> {
    vec![
        "train",
        model,
        "--data",
        data,
        "--limit",
        limit,
        "--epochs",
        epochs,
        "--min-update-frequency",
        "8",
        "--max-active-keys",
        "4",
        "--lr",
        "0.05",
    ]
}

/// The node index in a trace event's name (`linear cell (%12)`).
fn traced_node(name: &str) -> Option<usize> {
    name.rsplit_once("(%")?.1.strip_suffix(')')?.parse().ok()
}

#[test]
fn training_follows_the_plan_in_the_graph_file() {
    let dir = scratch("plan-follow");
    let dir = dir.path();
    let graph = compile_example("list_reduce", &[("hidden", 16)]);
    // A deliberately odd plan (nodes dealt out in reverse turns), so that following it is
    // visible in the trace; planned for the run below (plain SGD, an update every 8).
    let setup = Assumptions { update_every: 8.0, plain_sgd: true, ..Assumptions::default() };
    let mut plan = amp_plan::plan_graph(&graph, 2, &setup, None).unwrap();
    for (k, node) in plan.nodes.iter_mut().enumerate() {
        node.worker = (k / 3 + 1) % 2;
    }
    let wanted: Vec<(usize, usize)> = plan.nodes.iter().map(|n| (n.id as usize, n.worker)).collect();
    let model = ampg_with_plan(dir, "odd", Some(plan.to_json()));
    let data = example("data/list_reduce.train.jsonl");
    let mut args = train_args(&model, &data);
    args.extend(["--workers", "2", "--trace", "t.json"]);
    let out = amprun_ok(dir, &args);
    assert!(stdout(&out).contains("placement   plan (") && stdout(&out).contains("odd.ampg"), "{}", stdout(&out));
    let trace: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("t.json")).unwrap()).unwrap();
    let mut checked = 0;
    for event in trace["traceEvents"].as_array().unwrap() {
        let (Some(name), Some(tid)) = (event["name"].as_str(), event["tid"].as_u64()) else { continue };
        if event["ph"] != "X" || event["cat"] == "update" {
            continue;
        }
        let node = traced_node(name).unwrap_or_else(|| panic!("no node in `{name}`"));
        let worker = wanted.iter().find(|(id, _)| *id == node).map(|(_, w)| *w).expect("a planned node");
        assert_eq!(tid as usize, worker, "{name} ran on worker {tid}, the plan says {worker}");
        checked += 1;
    }
    assert!(checked > 100, "{checked} events checked");

    // A plan for another worker count is not followed: amprun plans in-process.
    let mut args = train_args(&model, &data);
    args.extend(["--workers", "3"]);
    let out = amprun_ok(dir, &args);
    let said = stderr(&out);
    assert!(
        said.contains("holds a plan for 1 copy × 2 stages on 2 workers") && said.contains("planning for 3 workers"),
        "{said}"
    );
    assert!(stdout(&out).contains("placement   plan on 3 worker(s)"), "{}", stdout(&out));

    // Nor is a plan made for workers split over processes (whose cuts cross a link).
    let setup = Assumptions { update_every: 8.0, plain_sgd: true, processes: 2, ..Assumptions::default() };
    let hosts = amp_plan::plan_graph(&graph, 2, &setup, None).unwrap();
    let hosts_model = ampg_with_plan(dir, "hosts", Some(hosts.to_json()));
    let mut args = train_args(&hosts_model, &data);
    args.extend(["--workers", "2"]);
    let out = amprun_ok(dir, &args);
    assert!(stderr(&out).contains("holds a plan for another training setup"), "{}", stderr(&out));
    // A link without bandwidth is refused by name, before anything trains.
    let mut args = train_args(&model, &data);
    args.extend(["--workers", "2", "--link-bandwidth-mbps", "0"]);
    let out = amprun(dir, &args);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("link_bandwidth_mbps"), "{}", stderr(&out));

    // Nor is a plan made for another training setup (here Adam's dense updates).
    let mut args = train_args(&model, &data);
    args.extend(["--workers", "2", "--optimizer", "adam"]);
    let out = amprun_ok(dir, &args);
    assert!(stderr(&out).contains("holds a plan for another training setup"), "{}", stderr(&out));
    assert!(stdout(&out).contains("placement   plan on 2 worker(s)"), "{}", stdout(&out));
}

#[test]
fn the_plan_trains_like_the_default_placement_and_reports_utilization() {
    let dir = scratch("plan-same");
    let dir = dir.path();
    let data = example("data/list_reduce.train.jsonl");
    let model = example("list_reduce.amp");
    let run = |placement: &str, save: &str, metrics: &str| {
        let mut args = train_args(&model, &data);
        args.extend(["-D", "hidden=16", "--workers", "2", "--plan", placement, "--save", save, "--metrics", metrics]);
        args.push("--report-utilization");
        amprun_ok(dir, &args)
    };
    let planned = run("auto", "plan.safetensors", "plan.jsonl");
    run("naive", "naive.safetensors", "naive.jsonl");
    run("round-robin", "rr.safetensors", "rr.jsonl");
    let graph = compile_example("list_reduce", &[("hidden", 16)]);
    let reference = checkpoint(&dir.join("naive.safetensors"), &graph);
    for other in ["plan.safetensors", "rr.safetensors"] {
        let saved = checkpoint(&dir.join(other), &graph);
        for ((name, a), (_, b)) in reference.params.iter().zip(saved.params.iter()) {
            for (x, y) in a.iter().zip(b.iter()) {
                assert!((x - y).abs() <= 1e-4 * (1.0 + x.abs()), "{other}: {} differs: {x} vs {y}", name.name);
            }
        }
    }
    let losses = |file: &str| -> Vec<f64> {
        json_lines(&std::fs::read_to_string(dir.join(file)).unwrap())
            .iter()
            .filter(|m| m["split"] == "train")
            .map(|m| m["loss"].as_f64().unwrap())
            .collect()
    };
    for (a, b) in losses("plan.jsonl").iter().zip(losses("naive.jsonl")) {
        assert!((a - b).abs() <= 1e-4 * (1.0 + a.abs()), "train loss {a} vs {b}");
    }

    // A model this small gains nothing from a second stage: the plan runs two copies of
    // it (trained as one, above), and amprun says so at the start.
    assert!(stderr(&planned).contains("amprun: 2 copies × 1 stage on 2 workers (predicted "), "{}", stderr(&planned));

    // The summary and the metrics report predicted and measured utilization.
    let summary = stdout(&planned);
    assert!(summary.contains("placement   plan on 2 worker(s), 2 copies of the graph, predicted speedup"), "{summary}");
    for w in 0..2 {
        assert!(summary.contains(&format!("worker {w}")) && summary.contains("measured"), "{summary}");
    }
    for file in ["plan.jsonl", "naive.jsonl", "rr.jsonl"] {
        let metrics = json_lines(&std::fs::read_to_string(dir.join(file)).unwrap());
        let report = metrics.iter().find(|m| m["split"] == "plan").unwrap_or_else(|| panic!("{file}: no plan report"));
        assert_eq!(report["workers"], 2);
        for key in ["predicted_utilization", "measured_utilization", "busy_s"] {
            let values = report[key].as_array().unwrap_or_else(|| panic!("{file}: no {key} in {report}"));
            assert_eq!(values.len(), 2, "{file}: {key}");
            assert!(values.iter().all(|v| v.as_f64().is_some_and(|x| (0.0..=1.5).contains(&x) || key == "busy_s")));
        }
        assert!(report["wall_s"].as_f64().unwrap() > 0.0);
        let predicted: Vec<f64> =
            report["predicted_utilization"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
        assert!(predicted.iter().any(|&u| (u - 1.0).abs() < 1e-9), "{file}: the busiest worker is at 100%");
    }
    let placements: Vec<String> = ["plan.jsonl", "naive.jsonl", "rr.jsonl"]
        .iter()
        .map(|f| {
            let metrics = json_lines(&std::fs::read_to_string(dir.join(f)).unwrap());
            metrics.iter().find(|m| m["split"] == "plan").unwrap()["placement"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(placements, ["plan", "naive", "round-robin"]);
}

/// `--copies` sets the copies whatever the plan would choose (one: stages alone), must
/// divide the workers, and runs in one process without node replicas.
#[test]
fn copies_on_the_command_line() {
    let dir = scratch("plan-copies");
    let dir = dir.path();
    let data = example("data/list_reduce.train.jsonl");
    let model = example("list_reduce.amp");
    let mut args = train_args(&model, &data);
    args.extend(["-D", "hidden=16", "--workers", "2", "--copies", "1", "--metrics", "m.jsonl"]);
    let out = amprun_ok(dir, &args);
    assert!(stderr(&out).contains("amprun: 1 copy × 1 stage on 2 workers, 1 idle"), "{}", stderr(&out));
    let metrics = json_lines(&std::fs::read_to_string(dir.join("m.jsonl")).unwrap());
    assert_eq!(metrics.iter().find(|m| m["split"] == "plan").unwrap()["copies"], 1);
    // Copies forced on: the prediction is the planner's for that layout, as the layout it
    // weighs, not the one-copy stage plan's.
    let mut args = train_args(&model, &data);
    args.extend(["-D", "hidden=16", "--workers", "2", "--copies", "2", "--metrics", "m.jsonl"]);
    let out = amprun_ok(dir, &args);
    let metrics = json_lines(&std::fs::read_to_string(dir.join("m.jsonl")).unwrap());
    let plan = metrics.iter().find(|m| m["split"] == "plan").unwrap();
    assert_eq!(plan["copies"], 2);
    let predicted = plan["predicted_speedup"].as_f64().unwrap();
    assert!(predicted > 1.2, "two copies on two workers: {plan}");
    let line = format!("amprun: 2 copies × 1 stage on 2 workers (predicted {predicted:.2}×)");
    assert!(stderr(&out).contains(&line), "{line}: {}", stderr(&out));
    // Without `--workers` (nor `AMP_WORKERS`), every core: the plan's layout on as many
    // workers as this process may use.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_amprun"))
        .args(train_args(&model, &data))
        .args(["-D", "hidden=16"])
        .current_dir(dir)
        .env_remove("AMP_WORKERS")
        .output()
        .expect("amprun runs");
    assert!(out.status.success(), "{}", stderr(&out));
    if cores > 1 {
        assert!(stderr(&out).contains(&format!(" on {cores} workers (predicted ")), "{}", stderr(&out));
    }
    for (extra, says) in [
        (&["--workers", "2", "--copies", "3"][..], "--copies 3 must divide --workers 2"),
        (&["--workers", "2", "--copies", "2", "--replicate", "cell=2"][..], "cannot go with node replicas"),
    ] {
        let mut args = train_args(&model, &data);
        args.extend(extra);
        let out = amprun(dir, &args);
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert!(stderr(&out).contains(says), "{}", stderr(&out));
    }
}

#[test]
fn a_profile_is_written_and_refines_the_next_plan() {
    let dir = scratch("plan-profile");
    let dir = dir.path();
    let data = example("data/list_reduce.train.jsonl");
    let model = example("list_reduce.amp");
    let mut args = train_args(&model, &data);
    // With batching off each event of the profile is one message (a node takes the
    // messages waiting together in one step otherwise: the source its admissions).
    args.extend(["-D", "hidden=16", "--profile", "prof.json", "--max-batch", "1"]);
    let out = amprun_ok(dir, &args);
    assert!(stdout(&out).contains("profile     prof.json"), "{}", stdout(&out));
    let text = std::fs::read_to_string(dir.join("prof.json")).expect("the profile");
    let profile = amp_plan::Profile::from_json(&text).expect("a profile");
    assert_eq!(profile.model, "ListReduce");
    assert_eq!(profile.instances, 2 * 96);
    let graph = compile_example("list_reduce", &[("hidden", 16)]);
    assert_eq!(profile.nodes.len(), graph.nodes.node_count());
    let source = profile.nodes.iter().find(|n| n.op == "source").unwrap();
    assert!((source.forward_per_instance - 1.0).abs() < 1e-9, "one admission per instance: {source:?}");
    let cell = profile.nodes.iter().find(|n| n.name == "linear cell").unwrap();
    assert!(cell.forward_per_instance > 0.0 && cell.updates_per_instance > 0.0, "{cell:?}");
    let costs = amp_plan::estimate(&graph, &Assumptions::default(), Some(&profile)).expect("it fits the graph");
    assert!(costs.profiled);

    // amprun plans with it, too.
    let mut args = sized_train_args(&model, &data, "16", "1");
    args.extend(["-D", "hidden=16", "--workers", "2", "--plan-profile", "prof.json"]);
    amprun_ok(dir, &args);
    // A profile of another model does not fit.
    let mut args = train_args(&model, &data);
    args.extend(["-D", "hidden=8", "--workers", "2", "--plan-profile", "prof.json"]);
    let out = amprun(dir, &args);
    let mlp = example("mlp.amp");
    let mut args = vec!["train", &mlp];
    let digits = dir.join("d.csv");
    std::fs::write(&digits, format!("{}0\n", "1,".repeat(64))).unwrap();
    let digits = digits.display().to_string();
    args.extend(["--data", &digits, "--workers", "2", "--plan-profile", "prof.json"]);
    let other = amprun(dir, &args);
    assert_eq!(other.status.code(), Some(1), "{}", stderr(&other));
    assert!(stderr(&other).contains("profile does not fit"), "{}", stderr(&other));
    // Same model, other sizes: the ops still match, so the profile is used.
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

/// A plan that carries replicas: `--plan-replicas` runs them where the plan says (both
/// workers run the replicated product), training as without them (`--replica-sync 1`);
/// without the flag the plan's placement alone runs; a stored proposal the executor
/// could not follow is refused by name.
#[test]
fn a_plan_that_carries_replicas_trains_as_without_them() {
    let dir = scratch("plan-replicas");
    let dir = dir.path();
    let graph = compile_example("list_reduce", &[("hidden", 16)]);
    let setup = Assumptions { update_every: 8.0, plain_sgd: true, ..Assumptions::default() };
    let mut plan = amp_plan::plan_graph(&graph, 2, &setup, None).unwrap();
    let cell = plan.nodes.iter().find(|n| n.name == "linear cell").expect("the cell's product").clone();
    // The cost model proposes no replica here (list-reduce's products are too small for
    // the crossings a copy adds); the plan file below carries one, as a plan for a model
    // where one pays would.
    assert!(plan.replicas.is_empty());
    plan.replicas.push(amp_plan::Replica {
        id: cell.id,
        name: cell.name.clone(),
        replicas: 2,
        predicted_load: cell.predicted_load,
        workers: vec![cell.worker, (cell.worker + 1) % 2],
    });
    let model = ampg_with_plan(dir, "replicas", Some(plan.to_json()));
    let data = example("data/list_reduce.train.jsonl");
    let run = |extra: &[&str], save: &str, metrics: &str| {
        let mut args = train_args(&model, &data);
        args.extend(["--workers", "2", "--save", save, "--metrics", metrics, "--trace", "t.json"]);
        args.extend(extra);
        amprun_ok(dir, &args)
    };
    let workers_of_cell = || -> Vec<u64> {
        let trace: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("t.json")).unwrap()).unwrap();
        let mut tids: Vec<u64> = trace["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "X" && e["name"].as_str().is_some_and(|n| n.starts_with("linear cell")))
            .filter_map(|e| e["tid"].as_u64())
            .collect();
        tids.sort_unstable();
        tids.dedup();
        tids
    };
    let plain = run(&[], "plain.safetensors", "plain.jsonl");
    assert!(!stdout(&plain).contains("replicated"), "{}", stdout(&plain));
    assert_eq!(workers_of_cell(), vec![cell.worker as u64]);
    let replicated = run(&["--plan-replicas", "--replica-sync", "1"], "rep.safetensors", "rep.jsonl");
    assert!(stdout(&replicated).contains("1 node(s) replicated"), "{}", stdout(&replicated));
    assert_eq!(workers_of_cell(), vec![0, 1], "both copies of the cell's product ran");
    let report = json_lines(&std::fs::read_to_string(dir.join("rep.jsonl")).unwrap())
        .into_iter()
        .find(|m| m["split"] == "plan")
        .expect("a plan report");
    assert_eq!(report["replicated_nodes"], serde_json::json!([{"id": cell.id, "replicas": 2}]));
    let (a, b) = (checkpoint(&dir.join("plain.safetensors"), &graph), checkpoint(&dir.join("rep.safetensors"), &graph));
    for ((name, x), (_, y)) in a.params.iter().zip(b.params.iter()) {
        for (p, q) in x.iter().zip(y.iter()) {
            assert!((p - q).abs() <= 1e-4 * (1.0 + p.abs()), "{} differs: {p} vs {q}", name.name);
        }
    }

    // The flag goes with the plan only.
    let mut args = train_args(&model, &data);
    args.extend(["--workers", "2", "--plan", "naive", "--plan-replicas"]);
    let out = amprun(dir, &args);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--plan-replicas"), "{}", stderr(&out));

    // A proposal the executor could not follow is refused by name, not run.
    let mut bad = plan.clone();
    bad.replicas[0].id = plan.nodes.iter().find(|n| n.name.starts_with("concat")).unwrap().id;
    let bad_model = ampg_with_plan(dir, "bad-replicas", Some(bad.to_json()));
    let mut args = train_args(&bad_model, &data);
    args.extend(["--workers", "2", "--plan-replicas"]);
    let out = amprun(dir, &args);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("has no parameters to copy"), "{}", stderr(&out));
}

#[test]
fn a_plan_that_does_not_fit_the_graph_is_refused() {
    let dir = scratch("plan-bad");
    let dir = dir.path();
    let graph = compile_example("list_reduce", &[("hidden", 16)]);
    let good = amp_plan::plan_graph(&graph, 2, &Assumptions::default(), None).unwrap().to_json();
    let data = example("data/list_reduce.train.jsonl");
    let cases: Vec<(&str, serde_json::Value, &str)> = vec![
        (
            "range",
            {
                let mut p = good.clone();
                p["nodes"][3]["worker"] = 5.into();
                p
            },
            "on worker 5, but it has only 2 workers",
        ),
        (
            "short",
            {
                let mut p = good.clone();
                p["nodes"].as_array_mut().unwrap().truncate(4);
                p
            },
            "places 4 nodes, but the graph has",
        ),
        (
            "ghost",
            {
                let mut p = good.clone();
                p["nodes"][0]["id"] = 9.into();
                p
            },
            "node %9, which the graph does not have",
        ),
        ("junk", serde_json::json!({"workers": "two"}), "the plan is malformed"),
        (
            "zero",
            {
                let mut p = good.clone();
                p["workers"] = 0.into();
                p
            },
            "0 workers",
        ),
    ];
    for (name, plan, expected) in cases {
        let model = ampg_with_plan(dir, name, Some(plan));
        for command in
            [train_args(&model, &data), vec!["eval", &model, "--params", "none.safetensors", "--data", &data]]
        {
            let mut args = command.clone();
            args.extend(["--workers", "2"]);
            let out = amprun(dir, &args);
            let err = stderr(&out);
            assert_eq!(out.status.code(), Some(1), "{name}: {err}");
            assert!(
                err.contains("has a partition plan amprun cannot follow") && err.contains(expected),
                "{name}: {err}"
            );
            assert!(!err.contains("panicked"), "{name}: {err}");
        }
    }
    // With the right plan the same file trains.
    let model = ampg_with_plan(dir, "good", Some(good));
    let mut args = train_args(&model, &data);
    args.extend(["--workers", "2"]);
    amprun_ok(dir, &args);
}

#[test]
fn plans_are_computed_for_any_worker_count_of_an_amp_source() {
    let dir = scratch("plan-counts");
    let dir = dir.path();
    let data = example("data/list_reduce.train.jsonl");
    let model = example("list_reduce.amp");
    for workers in ["1", "3"] {
        let mut args = sized_train_args(&model, &data, "24", "1");
        args.extend(["-D", "hidden=8", "--workers", workers, "--metrics", "m.jsonl"]);
        let out = amprun_ok(dir, &args);
        let metrics = json_lines(&std::fs::read_to_string(dir.join("m.jsonl")).unwrap());
        let reported = metrics.iter().any(|m| m["split"] == "plan");
        // One worker and no --report-utilization: nothing about the placement.
        assert_eq!(reported, workers != "1", "{workers}: {metrics:?}");
        assert_eq!(stdout(&out).contains("placement"), workers != "1");
    }
}
