//! `--max-staleness`, `--staleness-schedule` and the staleness the metrics and the trace
//! report.
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use common::*;

fn list_reduce_data(dir: &std::path::Path, n: usize) {
    let text = std::fs::read_to_string(example("data/list_reduce.train.jsonl")).expect("example data");
    let lines: Vec<&str> = text.lines().take(n).collect();
    std::fs::write(dir.join("train.jsonl"), lines.join("\n") + "\n").unwrap();
}

/// A layer-wise bound from 1: `head` (nearest the loss) 1, `cell` 2, `embed` 3; each
/// group's reported max stays within its bound, every instance is measured, and the
/// trace's updates carry their staleness.
#[test]
fn metrics_report_each_groups_staleness_within_its_bound() {
    let dir = scratch("staleness-metrics");
    let dir = dir.path();
    list_reduce_data(dir, 48);
    let model = example("list_reduce.amp");
    let args = [
        "train",
        &model,
        "-D",
        "hidden=8",
        "--data",
        "train.jsonl",
        "--async",
        "--max-active-keys",
        "8",
        "--max-staleness",
        "1",
        "--staleness-schedule",
        "layerwise",
        "--metrics",
        "m.jsonl",
        "--trace",
        "t.json",
        "--epochs",
        "2",
    ];
    amprun_ok(dir, &args);
    let metrics = json_lines(&std::fs::read_to_string(dir.join("m.jsonl")).unwrap());
    let train: Vec<&serde_json::Value> = metrics.iter().filter(|m| m["split"] == "train").collect();
    assert_eq!(train.len(), 2);
    for epoch in train {
        let groups = epoch["staleness"].as_array().unwrap();
        let bounds: Vec<(&str, u64)> =
            groups.iter().map(|g| (g["group"].as_str().unwrap(), g["bound"].as_u64().unwrap())).collect();
        assert_eq!(bounds, [("embed", 3), ("cell", 2), ("head", 1)]);
        for g in groups {
            assert!(g["max"].as_u64().unwrap() <= g["bound"].as_u64().unwrap(), "{g}");
            assert!(g["mean"].as_f64().unwrap() <= g["max"].as_f64().unwrap(), "{g}");
            assert!(g["gradients"].as_u64().unwrap() >= 48, "{g}");
        }
    }
    let trace: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("t.json")).unwrap()).unwrap();
    let updates: Vec<&serde_json::Value> =
        trace["traceEvents"].as_array().unwrap().iter().filter(|e| e["cat"] == "update").collect();
    assert!(updates.iter().any(|e| e["args"]["staleness"].is_u64()), "no update marks its staleness");
}

/// A node that is not one is a usage error naming those that are; a bound that is not a
/// number too.
#[test]
fn a_bound_on_an_unknown_node_is_a_usage_error() {
    let dir = scratch("staleness-usage");
    let dir = dir.path();
    list_reduce_data(dir, 4);
    let model = example("list_reduce.amp");
    let out = amprun(dir, &["train", &model, "-D", "hidden=8", "--data", "train.jsonl", "--max-staleness", "nope=1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--max-staleness: `nope` is not a node with parameters"), "{}", stderr(&out));
    let out = amprun(dir, &["train", &model, "-D", "hidden=8", "--data", "train.jsonl", "--max-staleness", "x"]);
    assert_eq!(out.status.code(), Some(2));
}

/// `--slow-worker 1=3` on two workers, synchronous: the same losses as without (to
/// rounding), so nothing was lost or trained twice; a worker that does not exist is an
/// error naming it.
#[test]
fn a_slow_worker_trains_the_same_instances() {
    let dir = scratch("slow-worker");
    let dir = dir.path();
    list_reduce_data(dir, 24);
    let model = example("list_reduce.amp");
    let base = [
        "train",
        &model,
        "-D",
        "hidden=8",
        "--data",
        "train.jsonl",
        "--workers",
        "2",
        "--max-active-keys",
        "4",
        "--min-update-frequency",
        "4",
        "--plan",
        "round-robin",
    ];
    let losses = |extra: &[&str], metrics: &str| -> Vec<f64> {
        let mut args = base.to_vec();
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--metrics", metrics, "--epochs", "2"]);
        amprun_ok(dir, &args);
        let lines = json_lines(&std::fs::read_to_string(dir.join(metrics)).unwrap());
        lines.iter().filter(|m| m["split"] == "train").map(|m| m["loss"].as_f64().unwrap()).collect()
    };
    let plain = losses(&[], "plain.jsonl");
    let slowed = losses(&["--slow-worker", "1=3", "--slow-worker", "0=2@0..0.01"], "slow.jsonl");
    assert_eq!(plain.len(), 2);
    for (a, b) in plain.iter().zip(&slowed) {
        assert!((a - b).abs() <= 1e-5 * (1.0 + a.abs()), "{a} vs {b}");
    }
    let mut args = base.to_vec();
    args.extend_from_slice(&["--slow-worker", "5=2"]);
    let out = amprun(dir, &args);
    assert_ne!(out.status.code(), Some(0));
    assert!(stderr(&out).contains("slow worker 5 does not exist"), "{}", stderr(&out));
}

/// `--worker-speed 1=0.25` tells the planner: the MoE's plan for two workers still uses
/// both, balanced on their times (work over speed), and predicts less speed-up than with
/// equal workers; a worker the run does not have is a usage error.
#[test]
fn the_planner_gives_a_slow_worker_less() {
    let dir = scratch("worker-speed");
    let dir = dir.path();
    let text = std::fs::read_to_string(example("data/moe.train.jsonl")).expect("example data");
    let lines: Vec<&str> = text.lines().take(32).collect();
    std::fs::write(dir.join("moe.jsonl"), lines.join("\n") + "\n").unwrap();
    let model = example("moe.amp");
    let plan = |extra: &[&str], metrics: &str| -> serde_json::Value {
        let mut args = vec!["train", &model, "--data", "moe.jsonl", "--workers", "2", "--metrics", metrics];
        args.extend_from_slice(extra);
        amprun_ok(dir, &args);
        let lines = json_lines(&std::fs::read_to_string(dir.join(metrics)).unwrap());
        lines.into_iter().find(|m| m["split"] == "plan").unwrap()
    };
    let even = plan(&[], "even.jsonl");
    let slow = plan(&["--worker-speed", "1=0.25"], "slow.jsonl");
    let speedup = |p: &serde_json::Value| p["predicted_speedup"].as_f64().unwrap();
    assert!(speedup(&slow) < speedup(&even), "{slow} vs {even}");
    let used = slow["predicted_utilization"].as_array().unwrap();
    assert!(used.iter().all(|u| u.as_f64().unwrap() > 0.5), "{slow}");
    let out = amprun(dir, &["train", &model, "--data", "moe.jsonl", "--workers", "2", "--worker-speed", "2=0.5"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("worker 2 does not exist"), "{}", stderr(&out));
}
