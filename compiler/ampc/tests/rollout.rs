//! `ampc rollout` as a user runs it: the tables, the JSON object, the coded refusals and
//! the examples of `examples/rollout/`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn ampc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ampc")).args(args).output().expect("ampc runs")
}

fn example(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/rollout").join(name).display().to_string()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `text` written to `NAME` in a fresh temporary directory, removed when the first value
/// is dropped.
fn temp_file(name: &str, text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new().prefix("ampc-rollout-").tempdir().expect("temp dir");
    let path = dir.path().join(name);
    std::fs::write(&path, text).expect("write temp file");
    (dir, path)
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(out)))
}

#[test]
fn the_rollout_examples_check_clean() {
    for name in ["feed_forward.amp", "skip.amp", "skip_recurrent.amp"] {
        let out = ampc(&["check", &example(name)]);
        assert_eq!(out.status.code(), Some(0), "{name}: {}", stderr(&out));
        assert!(out.stderr.is_empty() && out.stdout.is_empty(), "{name}: {}", stderr(&out));
    }
}

#[test]
fn human_output_shows_the_pattern_the_tableau_and_the_factor() {
    let out = ampc(&["rollout", &example("skip_recurrent.amp"), "--window", "3"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let expected = "\
network SkipRecurrent, sequential pattern
  edge    delay
  x->h1   0
  h1->h2  0
  h2->h2  1  (recurrent)
  h2->h3  0
  h1->h3  0
  h3->y   0
  h1->y   0
valid: the undelayed edges form no cycle
inference tableau T(i, v), the update steps until frame i of v is known (window 3):
  node  0  1  2  3
  x     0  0  0  0
  h1    0  1  1  1
  h2    0  2  3  4
  h3    0  3  4  5
  y     0  4  5  6
inference factor F(R) = 4
";
    assert_eq!(stdout(&out), expected);
}

#[test]
fn json_output_is_one_object() {
    let out = ampc(&["rollout", &example("feed_forward.amp"), "--pattern", "streaming", "--message-format", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out).lines().count(), 1);
    let value = json(&out);
    assert_eq!(
        value,
        serde_json::json!({
            "network": "FeedForward",
            "pattern": {"x->h1": 1, "h1->h2": 1, "h2->h3": 1, "h3->y": 1},
            "valid": true,
            "window": 1,
            "inference_factor": 1,
            "tableau": {"x": [0, 0], "h1": [0, 1], "h2": [0, 1], "h3": [0, 1], "y": [0, 1]},
        })
    );
    let sequential = json(&ampc(&["rollout", &example("feed_forward.amp"), "--message-format", "json"]));
    assert_eq!(sequential["inference_factor"], 4);
}

#[test]
fn edge_lists_override_the_sequential_pattern() {
    let out = ampc(&["rollout", &example("skip.amp"), "--pattern", "h3->y=1,h1->h3=1", "--message-format", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let value = json(&out);
    assert_eq!(value["pattern"]["h3->y"], 1);
    assert_eq!(value["pattern"]["h1->h3"], 1);
    assert_eq!(value["pattern"]["h2->h3"], 0);
    // y of frame 1 reads h1 of its own frame (step 1) and h3 of frame 0.
    assert_eq!(value["tableau"]["y"], serde_json::json!([0, 2]));
    assert_eq!(value["inference_factor"], 3);
    let human = ampc(&["rollout", &example("skip.amp"), "--pattern", "h3->y=1"]);
    assert!(stdout(&human).starts_with("network Skip, sequential with h3->y=1 pattern\n"), "{}", stdout(&human));
}

#[test]
fn enumerate_lists_every_valid_pattern() {
    let out = ampc(&["rollout", &example("skip_recurrent.amp"), "--enumerate", "--message-format", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let value = json(&out);
    // Seven edges; h2->h2 must stay delayed, the six others are free.
    assert_eq!(value["network"], "SkipRecurrent");
    assert_eq!(value["valid_patterns"], 64);
    let patterns = value["patterns"].as_array().expect("patterns");
    assert_eq!(patterns.len(), 64);
    assert!(patterns.iter().all(|p| p["pattern"]["h2->h2"] == 1));
    let factors: Vec<u64> = patterns.iter().filter_map(|p| p["inference_factor"].as_u64()).collect();
    assert_eq!(factors.iter().min(), Some(&1));
    assert_eq!(factors.iter().max(), Some(&4));
    let human = ampc(&["rollout", &example("skip_recurrent.amp"), "--enumerate"]);
    let text = stdout(&human);
    assert!(text.starts_with("network SkipRecurrent: 64 valid patterns of 128 (7 edges)\n"), "{text}");
    assert!(text.contains("\n  F(R)  x->h1  h1->h2  h2->h2  h2->h3  h1->h3  h3->y  h1->y\n"), "{text}");
    assert!(text.contains("\n     4      0       0       1       0       0      0      0\n"), "{text}");
    assert_eq!(text.lines().count(), 66);
}

#[test]
fn an_invalid_pattern_is_refused_naming_its_cycle() {
    let (_dir, path) = temp_file(
        "loop.amp",
        "network Loop {\n    input x: f32[4];\n    node a = Linear(8, 4) from x, b;\n    \
         node b = Linear(4, 4) from a;\n    output y = Linear(4, 2) from b;\n}\n",
    );
    let path = path.to_str().expect("utf-8 path");
    let out = ampc(&["rollout", path, "--pattern", "b->a=0", "--message-format", "json"]);
    assert_eq!(out.status.code(), Some(1));
    let d = json(&out);
    assert_eq!(d["code"], "E0700");
    assert!(d["message"].as_str().is_some_and(|m| m.contains("b -> a -> b has no delay")), "{d}");
    assert_eq!((d["start"]["line"].as_u64(), d["start"]["column"].as_u64()), (Some(3), Some(35)));
    // The primary label comes first, then the cycle's other edge.
    let labels = d["labels"].as_array().expect("labels");
    assert_eq!(labels.len(), 2);
    assert_eq!((labels[1]["start"]["line"].as_u64(), labels[1]["start"]["column"].as_u64()), (Some(4), Some(32)));
    let human = ampc(&["rollout", path, "--pattern", "b->a=0", "--color", "never"]);
    assert_eq!(human.status.code(), Some(1));
    assert!(human.stdout.is_empty());
    let text = stderr(&human);
    assert!(text.contains("E0700") && text.contains("`a->b` undelayed") && text.contains("--pattern b->a=1"), "{text}");
}

#[test]
fn unknown_edges_and_bad_lists_are_coded_errors() {
    let out = ampc(&["rollout", &example("skip.amp"), "--pattern", "h3->h1=1", "--message-format", "json"]);
    assert_eq!(out.status.code(), Some(1));
    let d = json(&out);
    assert_eq!(d["code"], "E0701");
    assert!(d["message"].as_str().is_some_and(|m| m.contains("no edge `h3->h1`")), "{d}");
    let notes = d["notes"].to_string();
    assert!(notes.contains("x->h1, h1->h2, h2->h3, h1->h3, h3->y, h1->y"), "{notes}");
    let bad = ampc(&["rollout", &example("skip.amp"), "--pattern", "h3->y=2", "--message-format", "json"]);
    assert_eq!(bad.status.code(), Some(1));
    assert_eq!(json(&bad)["code"], "E0701");
}

#[test]
fn too_many_edges_to_enumerate_says_how_many() {
    let mut text = String::from("network Wide {\n    input x: f32[1];\n");
    for k in 0..17 {
        text.push_str(&format!("    node a{k} = Linear(1, 1) from x;\n"));
    }
    text.push_str("    output y = Linear(1, 1) from a0;\n}\n");
    let (_dir, path) = temp_file("wide.amp", &text);
    let out = ampc(&["rollout", path.to_str().expect("utf-8"), "--enumerate", "--message-format", "json"]);
    assert_eq!(out.status.code(), Some(1));
    let d = json(&out);
    assert_eq!(d["code"], "E0702");
    assert!(d["message"].as_str().is_some_and(|m| m.contains("18 edges") && m.contains("at most 16")), "{d}");
    // A single pattern of the same network is fine.
    assert_eq!(ampc(&["rollout", path.to_str().expect("utf-8")]).status.code(), Some(0));
}

#[test]
fn usage_errors_exit_two() {
    let skip = example("skip.amp");
    let no_network = ampc(&["rollout", &skip, "--network", "Nope"]);
    assert_eq!(no_network.status.code(), Some(2));
    assert!(stderr(&no_network).contains("no network `Nope`") && stderr(&no_network).contains("networks: Skip"));
    assert_eq!(ampc(&["rollout", &skip, "--network", "Skip"]).status.code(), Some(0));
    assert_eq!(ampc(&["rollout", &skip, "--window", "65"]).status.code(), Some(2));
    assert_eq!(ampc(&["rollout", &skip, "--enumerate", "--pattern", "streaming"]).status.code(), Some(2));
    let (_dir, model) = temp_file("m.amp", "record R { x: f32[2] }\n");
    let none = ampc(&["rollout", model.to_str().expect("utf-8")]);
    assert_eq!(none.status.code(), Some(2));
    assert!(stderr(&none).contains("defines no network"), "{}", stderr(&none));
    // A file with errors is reported like `ampc check` and analysed no further.
    let (_dir2, bad) =
        temp_file("bad.amp", "network N {\n    input x: f32[2];\n    output y = Linear(2, 1) from q;\n}\n");
    let out = ampc(&["rollout", bad.to_str().expect("utf-8"), "--message-format", "json"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).contains("\"E0507\""), "{}", stdout(&out));
}

#[test]
fn compile_emits_a_rolled_out_network() {
    let file = example("skip.amp");
    let args = ["compile", &file, "--network", "Skip", "--pattern", "streaming", "--frames", "5", "--emit", "ir"];
    let out = ampc(&args);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("state %inst: instance, %frame: counter"), "{text}");
    assert!(text.contains("cross_entropy [$.label] / [5]"), "{text}");
    for emit in ["dot", "ir-json"] {
        let out = ampc(&["compile", &file, "--network", "Skip", "--pattern", "h3->y=1", "--emit", emit]);
        assert_eq!(out.status.code(), Some(0), "{emit}: {}", stderr(&out));
    }
    let out = ampc(&["compile", &file, "--network", "Skip", "--workers", "2", "--emit", "plan"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(json(&out).is_object());
}

#[test]
fn compile_refuses_bad_networks_and_patterns() {
    let file = example("skip_recurrent.amp");
    let out = ampc(&["compile", &file, "--network", "Nope", "--emit", "ir"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("no network `Nope`") && stderr(&out).contains("SkipRecurrent"), "{}", stderr(&out));
    let out = ampc(&["compile", &file, "--network", "SkipRecurrent", "--pattern", "h2->h2=0", "--emit", "ir"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("E0700"), "{}", stderr(&out));
    let out = ampc(&["compile", &file, "--network", "SkipRecurrent", "--pattern", "a->b=1", "--emit", "ir"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("E0701"), "{}", stderr(&out));
    let out = ampc(&["compile", &file, "--pattern", "streaming", "--emit", "ir"]);
    assert_eq!(out.status.code(), Some(2), "--pattern needs --network");
}
