//! `amprun eval` of a rolled-out network reports its accuracy per update step
//! (docs/rollouts.md): frame k's output exists at step k·F(R) + T(1, y), so the streaming
//! rollout answers at every step from 1 and the sequential one every F(R) steps, and the
//! last step's accuracy is the accuracy of the last frames.

mod common;

use common::*;
use serde_json::Value;

/// Rows of 64 values in 0..16 and a label in 0..3, as CSV.
fn csv(n: usize) -> String {
    let mut out = String::new();
    for i in 0..n {
        let cells: Vec<String> = (0..64).map(|j| (((i % 3) * 7 + j * (i % 3 + 1)) % 17).to_string()).collect();
        out.push_str(&format!("{},{}\n", cells.join(","), i % 3));
    }
    out
}

/// Trains and evaluates SkipRecurrent under `pattern` over 4 frames; the metrics rows.
fn eval_metrics(dir: &std::path::Path, pattern: &str) -> (String, Vec<Value>) {
    let data = dir.join("d.csv");
    std::fs::write(&data, csv(24)).expect("write data");
    let data = data.display().to_string();
    let model = example("rollout/skip_recurrent.amp");
    let params = dir.join(format!("{pattern}.safetensors")).display().to_string();
    let metrics = dir.join(format!("{pattern}.jsonl")).display().to_string();
    let network = ["-D", "hidden=8", "--network", "SkipRecurrent", "--pattern", pattern, "--frames", "4"];
    let noise = ["--data", data.as_str(), "--frame-noise", "0.2", "--scale", "0.0625"];
    let mut args = vec!["train", model.as_str()];
    args.extend(network);
    args.extend(noise);
    args.extend(["--epochs", "3", "--lr", "0.1", "--save", &params]);
    amprun_ok(dir, &args);
    let mut args = vec!["eval", model.as_str()];
    args.extend(network);
    args.extend(noise);
    args.extend(["--params", &params, "--metrics", &metrics, "--seed", "1"]);
    let out = stdout(&amprun_ok(dir, &args));
    let text = std::fs::read_to_string(&metrics).expect("metrics written");
    (out, json_lines(&text))
}

fn steps(rows: &[Value]) -> Vec<(u64, Option<f64>)> {
    rows.iter()
        .filter_map(|r| Some((r.get("update_step")?.as_u64()?, r.get("accuracy").and_then(Value::as_f64))))
        .collect()
}

#[test]
fn streaming_answers_at_every_update_step() {
    let dir = scratch("steps-streaming");
    let (out, rows) = eval_metrics(dir.path(), "streaming");
    assert!(out.contains("F(R) = 1"), "{out}");
    let steps = steps(&rows);
    assert_eq!(steps.iter().map(|s| s.0).collect::<Vec<_>>(), vec![1, 2, 3, 4], "{rows:?}");
    assert!(steps.iter().all(|s| s.1.is_some()), "{rows:?}");
    assert_eq!(rows[0]["split"], "valid");
    assert_eq!(rows[0]["accuracy"].as_f64(), steps[3].1, "the last step is the summary's accuracy");
}

#[test]
fn sequential_answers_every_f_steps() {
    let dir = scratch("steps-sequential");
    let (out, rows) = eval_metrics(dir.path(), "sequential");
    assert!(out.contains("F(R) = 4"), "{out}");
    for step in ["     4  ", "     8  ", "    12  ", "    16  "] {
        assert!(out.contains(step), "{out}");
    }
    let steps = steps(&rows);
    assert_eq!(steps.len(), 16, "{rows:?}");
    assert!(steps[..3].iter().all(|s| s.1.is_none()), "no output before step 4: {rows:?}");
    assert!(steps[3..].iter().all(|s| s.1.is_some()), "{rows:?}");
    // Between two outputs the accuracy stays that of the latest.
    assert_eq!(steps[4].1, steps[3].1);
    assert_eq!(rows[0]["accuracy"].as_f64(), steps[15].1);
}

#[test]
fn infer_takes_no_metrics() {
    let dir = scratch("steps-infer");
    let dir = dir.path();
    let model = example("rollout/skip_recurrent.amp");
    let args = ["infer", &model, "--network", "SkipRecurrent", "--params", "p", "--data", "d.csv", "--metrics", "m"];
    let out = amprun(dir, &args);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--metrics applies to `amprun eval`"), "{}", stderr(&out));
}
