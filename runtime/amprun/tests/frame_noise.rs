//! `--frame-noise S` (docs/rollouts.md): a static input (here CSV rows of 64 values and a
//! label) shown for the network's F frames with fresh Gaussian noise per frame, seeded by
//! `--seed` and the instance's index. Without noise it is the input repeated; with noise,
//! the same seed gives the same instances and another seed others.

mod common;

use common::*;
use std::path::Path;

/// `n` rows of 64 values in 0..16 and a label in 0..3.
fn rows(n: usize) -> Vec<(Vec<f32>, usize)> {
    (0..n).map(|i| ((0..64).map(|j| ((i * 5 + j * 3) % 17) as f32).collect(), i % 3)).collect()
}

fn csv(rows: &[(Vec<f32>, usize)]) -> String {
    let mut out = String::new();
    for (x, label) in rows {
        let cells: Vec<String> = x.iter().map(|v| v.to_string()).collect();
        out.push_str(&format!("{},{label}\n", cells.join(",")));
    }
    out
}

/// The rows as the network's instances, each row repeated over `frames` frames.
fn repeated_jsonl(rows: &[(Vec<f32>, usize)], frames: usize, scale: f32) -> String {
    let mut out = String::new();
    for (x, label) in rows {
        let frame: Vec<String> = x.iter().map(|v| (v * scale).to_string()).collect();
        let frame = format!("[{}]", frame.join(","));
        out.push_str(&format!("{{\"frames\": [{}], \"label\": {label}}}\n", vec![frame; frames].join(",")));
    }
    out
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write data");
    path.display().to_string()
}

const NETWORK: [&str; 8] = ["-D", "hidden=8", "--network", "SkipRecurrent", "--pattern", "streaming", "--frames", "4"];

/// Trains one epoch on `data` (with `extra` flags) and returns the parameters' path.
fn train(dir: &Path, data: &str, extra: &[&str]) -> String {
    let model = example("rollout/skip_recurrent.amp");
    let params = dir.join("p.safetensors").display().to_string();
    let mut args = vec!["train", model.as_str()];
    args.extend(NETWORK);
    args.extend(["--data", data, "--epochs", "1", "--lr", "0.05", "--save", &params]);
    args.extend(extra);
    amprun_ok(dir, &args);
    params
}

/// The `loss X  accuracy Y` of `amprun eval` on `data` with `extra` flags.
fn eval_scores(dir: &Path, params: &str, data: &str, extra: &[&str]) -> String {
    let model = example("rollout/skip_recurrent.amp");
    let mut args = vec!["eval", model.as_str()];
    args.extend(NETWORK);
    args.extend(["--data", data, "--params", params]);
    args.extend(extra);
    let out = stdout(&amprun_ok(dir, &args));
    let start = out.find("loss ").unwrap_or(0);
    let end = out.find("instances/s").unwrap_or(out.len());
    out[start..end].to_string()
}

#[test]
fn no_noise_repeats_the_input_over_the_frames() {
    let dir = scratch("frame-noise-zero");
    let dir = dir.path();
    let rows = rows(12);
    let csv = write(dir, "d.csv", &csv(&rows));
    let jsonl = write(dir, "d.jsonl", &repeated_jsonl(&rows, 4, 0.0625));
    let params = train(dir, &csv, &["--frame-noise", "0.3", "--scale", "0.0625"]);
    let static_scores = eval_scores(dir, &params, &csv, &["--frame-noise", "0", "--scale", "0.0625"]);
    let repeated = eval_scores(dir, &params, &jsonl, &[]);
    assert!(static_scores.contains("loss "), "{static_scores}");
    assert_eq!(static_scores, repeated);
}

#[test]
fn the_noise_is_fixed_by_the_seed() {
    let dir = scratch("frame-noise-seed");
    let dir = dir.path();
    let csv = write(dir, "d.csv", &csv(&rows(12)));
    let params = train(dir, &csv, &["--frame-noise", "0.5", "--scale", "0.0625", "--seed", "4"]);
    let noisy = |seed: &'static str| {
        eval_scores(dir, &params, &csv, &["--frame-noise", "0.5", "--scale", "0.0625", "--seed", seed])
    };
    let first = noisy("1");
    assert_eq!(first, noisy("1"), "the same seed gives the same frames");
    assert_ne!(first, noisy("2"), "another seed gives other frames");
    let quiet = eval_scores(dir, &params, &csv, &["--frame-noise", "0", "--scale", "0.0625", "--seed", "1"]);
    assert_ne!(first, quiet, "the noise changes the frames");
}

#[test]
fn frame_noise_needs_a_fixed_frame_count() {
    let dir = scratch("frame-noise-refused");
    let dir = dir.path();
    let csv = write(dir, "d.csv", &csv(&rows(2)));
    let model = example("rollout/skip_recurrent.amp");
    let args = ["train", &model, "--network", "SkipRecurrent", "--data", &csv, "--frame-noise", "0.5"];
    let out = amprun(dir, &args);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("give --frames F"), "{}", stderr(&out));
    let mlp = example("mlp.amp");
    let out = amprun(dir, &["train", &mlp, "--data", &csv, "--frame-noise", "0.5"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("applies to a network rolled out over frames"), "{}", stderr(&out));
    let mut args = vec!["train", model.as_str()];
    args.extend(NETWORK);
    args.extend(["--data", &csv, "--frame-noise", "-1"]);
    let out = amprun(dir, &args);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

#[test]
fn a_bad_static_row_is_named_by_file_line_and_field() {
    let dir = scratch("frame-noise-bad");
    let dir = dir.path();
    let mut text = csv(&rows(2));
    text.push_str(&format!("{}x,1\n", "1,".repeat(63)));
    let csv = write(dir, "d.csv", &text);
    let model = example("rollout/skip_recurrent.amp");
    let mut args = vec!["train", model.as_str()];
    args.extend(NETWORK);
    args.extend(["--data", &csv, "--frame-noise", "0.5", "--epochs", "1"]);
    let out = amprun(dir, &args);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("d.csv:3") && stderr(&out).contains("frame[63]"), "{}", stderr(&out));
}
