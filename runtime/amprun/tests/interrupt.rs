//! Ctrl-C in `amprun train`: the run stops after the epoch in progress with exit code 130,
//! its checkpoint is that epoch's and loads, and its metrics and report are written.
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use common::*;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

#[test]
fn ctrl_c_stops_after_the_epoch_with_its_checkpoint_and_report() {
    let dir = scratch("interrupt");
    let dir = dir.path();
    let (model, data) = (example("list_reduce.amp"), example("data/list_reduce.train.jsonl"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_amprun"))
        .args(["train", &model, "-D", "hidden=16", "--data", &data, "--limit", "200", "--epochs", "100000"])
        .args(["--save", "c.safetensors", "--metrics", "m.jsonl", "--report", "r.html"])
        .current_dir(dir)
        .env("AMP_WORKERS", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The first epoch's line on stderr, then SIGINT, as a terminal's Ctrl-C sends it.
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "amprun ended before an epoch: {seen}");
        seen.push_str(&line);
        if line.starts_with("epoch 1/100000") {
            break;
        }
    }
    let pid = child.id().to_string();
    assert!(Command::new("kill").args(["-INT", &pid]).status().unwrap().success());
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{seen}{rest}");
    assert!(rest.contains("Ctrl-C: stopping after this epoch"), "{rest}");
    let stopped = rest
        .lines()
        .find(|l| l.starts_with("amprun: stopped by Ctrl-C after epoch "))
        .unwrap_or_else(|| panic!("{rest}"));
    assert!(stopped.ends_with("; c.safetensors holds it"), "{stopped}");
    let epoch: u64 =
        stopped["amprun: stopped by Ctrl-C after epoch ".len()..].split(';').next().unwrap().parse().unwrap();
    assert!((1..100_000).contains(&epoch), "{stopped}");
    // The checkpoint is that epoch's, the metrics have every epoch up to it, the page is there.
    let graph = compile_example("list_reduce", &[("hidden", 16)]);
    let saved = checkpoint(&dir.join("c.safetensors"), &graph);
    assert_eq!(saved.metadata["epoch"], epoch.to_string());
    let metrics = json_lines(&std::fs::read_to_string(dir.join("m.jsonl")).unwrap());
    assert_eq!(metrics.iter().filter(|m| m["split"] == "train").count() as u64, epoch);
    assert!(std::fs::read_to_string(dir.join("r.html")).unwrap().contains("Amp run report"));
    // It resumes from there.
    let next = (epoch + 1).to_string();
    let args = ["train", &model, "-D", "hidden=16", "--data", &data, "--limit", "200", "--epochs", &next];
    amprun_ok(dir, &[&args[..], &["--save", "c.safetensors", "--resume"]].concat());
    assert_eq!(checkpoint(&dir.join("c.safetensors"), &graph).metadata["epoch"], next);
}
