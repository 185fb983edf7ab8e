//! `amprun train|eval --network NAME --pattern P --frames F` (docs/rollouts.md): a
//! rolled-out network trains and evaluates on JSON Lines of frames, and bad instances
//! (a frame of the wrong width, no frame, another frame count) are named by
//! file:line:field.

mod common;

use common::*;
use std::path::Path;

/// `n` instances of `frames` frames of 64 values (a fixed pattern per class plus a small
/// wobble per frame), as JSON Lines.
fn frames_jsonl(n: usize, frames: usize) -> String {
    let mut out = String::new();
    for i in 0..n {
        let label = i % 3;
        let frames: Vec<String> = (0..frames)
            .map(|t| {
                let x: Vec<String> = (0..64)
                    .map(|j| {
                        let on = if j % 3 == label { 1.0 } else { 0.0 };
                        format!("{:.3}", on + 0.01 * ((i * 7 + t * 3 + j) % 5) as f32)
                    })
                    .collect();
                format!("[{}]", x.join(","))
            })
            .collect();
        out.push_str(&format!("{{\"frames\": [{}], \"label\": {label}}}\n", frames.join(",")));
    }
    out
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write data");
    path.display().to_string()
}

fn network_args<'a>(pattern: &'a str, data: &'a str) -> Vec<&'a str> {
    vec!["-D", "hidden=8", "--network", "SkipRecurrent", "--pattern", pattern, "--frames", "4", "--data", data]
}

#[test]
fn a_rolled_out_network_trains_and_evaluates() {
    let dir = scratch("rollout-train");
    let dir = dir.path();
    let data = write(dir, "train.jsonl", &frames_jsonl(30, 4));
    let model = example("rollout/skip_recurrent.amp");
    for pattern in ["streaming", "sequential"] {
        let params = dir.join(format!("{pattern}.safetensors")).display().to_string();
        let mut args = vec!["train", model.as_str()];
        args.extend(network_args(pattern, &data));
        args.extend(["--epochs", "8", "--lr", "0.2", "--save", &params]);
        let out = amprun_ok(dir, &args);
        assert!(stderr(&out).contains("train  loss") || stdout(&out).contains("train  loss"), "{}", stderr(&out));
        let mut args = vec!["eval", model.as_str()];
        args.extend(network_args(pattern, &data));
        args.extend(["--params", &params]);
        let out = amprun_ok(dir, &args);
        let text = stdout(&out) + &stderr(&out);
        assert!(text.contains("instances 30"), "{text}");
    }
}

#[test]
fn bad_frames_are_named_by_file_line_and_field() {
    let dir = scratch("rollout-bad");
    let dir = dir.path();
    let good = frames_jsonl(1, 4);
    let mut short: serde_json::Value = serde_json::from_str(good.trim()).expect("json");
    if let Some(first) = short["frames"][0].as_array_mut() {
        first.pop();
    }
    let short = format!("{short}\n");
    let cases = [
        ("width.jsonl", format!("{good}{short}"), ":2: field `frames[0]`"),
        (
            "empty.jsonl",
            format!("{good}{{\"frames\": [], \"label\": 1}}\n"),
            ":2: field `frames`: the sequence of frames is empty",
        ),
        (
            "count.jsonl",
            format!("{good}{}", frames_jsonl(1, 3)),
            ":2: field `frames`: 3 frames, the network is rolled out over 4",
        ),
    ];
    let model = example("rollout/skip_recurrent.amp");
    for (name, text, expected) in cases {
        let data = write(dir, name, &text);
        let mut args = vec!["train", model.as_str()];
        args.extend(network_args("streaming", &data));
        args.extend(["--epochs", "1", "--lr", "0.1"]);
        let out = amprun(dir, &args);
        assert_eq!(out.status.code(), Some(1), "{name}: {}", stderr(&out));
        assert!(stderr(&out).contains(&format!("{name}{expected}")), "{name}: {}", stderr(&out));
        args.push("--skip-bad-data");
        let out = amprun(dir, &args);
        assert_eq!(out.status.code(), Some(0), "{name} skipped: {}", stderr(&out));
    }
}

#[test]
fn network_flags_are_refused_where_they_do_not_apply() {
    let dir = scratch("rollout-refused");
    let dir = dir.path();
    let data = write(dir, "d.jsonl", &frames_jsonl(2, 4));
    let model = example("rollout/skip_recurrent.amp");
    let mut args = vec!["train", model.as_str()];
    args.extend(network_args("h2->h2=0", &data));
    args.extend(["--epochs", "1", "--lr", "0.1"]);
    let out = amprun(dir, &args);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("E0700"), "{}", stderr(&out));
    let out = amprun(dir, &["train", &model, "--network", "Nope", "--data", &data, "--epochs", "1", "--lr", "0.1"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("no network `Nope`"), "{}", stderr(&out));
}

/// `infer` on a rolled-out network reads `{"frames": [...]}` without a label, and gives
/// what it gives with one.
#[test]
fn a_rolled_out_network_infers_without_labels() {
    let dir = scratch("rollout-infer");
    let dir = dir.path();
    let labeled = frames_jsonl(6, 4);
    let unlabeled: String =
        labeled.lines().map(|l| l.split(", \"label\"").next().unwrap_or(l).to_string() + "}\n").collect();
    assert!(!unlabeled.contains("label"), "{unlabeled}");
    let (labeled, unlabeled) = (write(dir, "l.jsonl", &labeled), write(dir, "u.jsonl", &unlabeled));
    let model = example("rollout/skip_recurrent.amp");
    let mut args = vec!["train", model.as_str()];
    args.extend(network_args("streaming", &labeled));
    args.extend(["--epochs", "1", "--save", "p.safetensors"]);
    amprun_ok(dir, &args);
    let infer = |data: &str| {
        let mut args = vec!["infer", model.as_str()];
        args.extend(network_args("streaming", data));
        args.extend(["--params", "p.safetensors"]);
        json_lines(&stdout(&amprun_ok(dir, &args)))
    };
    let (with, without) = (infer(&labeled), infer(&unlabeled));
    assert_eq!(with.len(), 6);
    assert_eq!(with, without);
    assert!(with.iter().all(|l| l["output"].as_array().is_some_and(|o| o.len() == 10)), "{with:?}");
}
