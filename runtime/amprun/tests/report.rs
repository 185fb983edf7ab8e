//! `amprun report` and `amprun train --report`: one self-contained HTML page of runs'
//! metrics, several runs on shared axes, written also when a run stops on a NaN loss.
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use common::*;
use std::path::Path;

/// Trains list-reduce (hidden 16) on 48 instances for `epochs`, with `extra` flags.
fn train(dir: &Path, metrics: &str, epochs: &str, extra: &[&str]) -> std::process::Output {
    train_list_reduce(dir, &[&["--limit", "48", "--epochs", epochs, "--metrics", metrics][..], extra].concat())
}

/// The `points` of every polyline in the figure captioned `caption`.
fn polylines(page: &str, caption: &str) -> Vec<Vec<(f64, f64)>> {
    let figure =
        page.split(&format!("<figcaption>{caption}</figcaption>")).nth(1).unwrap_or_else(|| panic!("{caption}"));
    let figure = figure.split("</figure>").next().unwrap();
    figure
        .split("<polyline")
        .skip(1)
        .map(|p| {
            let points = p.split("points=\"").nth(1).and_then(|s| s.split('"').next()).unwrap();
            points
                .split(' ')
                .map(|xy| {
                    let (x, y) = xy.split_once(',').unwrap();
                    (x.parse().unwrap(), y.parse().unwrap())
                })
                .collect()
        })
        .collect()
}

#[test]
fn runs_share_the_axes_of_one_self_contained_page() {
    let dir = scratch("report");
    let dir = dir.path();
    train(dir, "a.jsonl", "2", &["--async", "--max-staleness", "1"]);
    train(dir, "b.jsonl", "3", &[]);
    amprun_ok(dir, &["report", "a.jsonl", "b.jsonl", "-o", "page.html"]);
    let page = std::fs::read_to_string(dir.join("page.html")).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>"));
    // Self-contained: nothing fetched, no script.
    assert!(!page.contains("http") && !page.contains("<script") && !page.contains("src="), "{page}");
    assert!(page.contains(">a.jsonl</td><td>2</td>") && page.contains(">b.jsonl</td><td>3</td>"), "{page}");
    // Training and validation of both runs: a point per epoch, on one x axis (epoch 1 at
    // the left edge, the longest run's last epoch at the right).
    let loss = polylines(&page, "Loss per epoch");
    let lengths: Vec<usize> = loss.iter().map(Vec::len).collect();
    assert_eq!(lengths, [2, 3, 2, 3], "train a, train b, valid a, valid b");
    assert_eq!(loss[0][0].0, loss[1][0].0);
    assert!(loss[0][1].0 < loss[1][2].0);
    assert_eq!(polylines(&page, "Accuracy per epoch").len(), 4);
    assert_eq!(polylines(&page, "Learning rate").len(), 2);
    // Staleness from run a only (b trained synchronously: no staleness above 0, but the
    // groups are reported); a's bound is drawn.
    assert!(page.contains("a.jsonl embed bound"), "{page}");
}

#[test]
fn train_writes_its_page_also_when_it_stops_on_a_bad_loss() {
    let dir = scratch("report-nan");
    let dir = dir.path();
    train(dir, "m.jsonl", "2", &["--report", "run.html"]);
    let page = std::fs::read_to_string(dir.join("run.html")).unwrap();
    assert!(page.contains("ListReduce: <code>") && page.contains("--report run.html"), "{page}");
    // The model's graph, drawn inline, with its zoom.
    assert!(page.contains("<div class=\"graph\" id=\"graph\">") && page.contains("<svg"), "{page}");
    assert_eq!(polylines(&page, "Loss per epoch").len(), 2);
    // A learning rate that overflows the loss: exit 3, and the page of what ran.
    let model = example("list_reduce.amp");
    let data = example("data/list_reduce.train.jsonl");
    let args =
        ["train", &model, "--data", &data, "--limit", "64", "--lr", "1e30", "--epochs", "3", "--report", "bad.html"];
    let out = amprun(dir, &args);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let page = std::fs::read_to_string(dir.join("bad.html")).unwrap();
    assert!(page.contains("Amp run report") && page.contains("--lr 1e30"), "{page}");
}

/// With a trace, the page shows each worker's busy share over time (100 spans) beside the
/// plan's prediction, from `train --report` and from `amprun report --trace`.
#[test]
fn a_trace_gives_each_workers_utilisation_beside_the_plan() {
    let dir = scratch("report-trace");
    let dir = dir.path();
    train(dir, "m.jsonl", "2", &["--workers", "2", "--trace", "t.json", "--report", "run.html"]);
    amprun_ok(dir, &["report", "m.jsonl", "--trace", "t.json", "-o", "again.html"]);
    for page in ["run.html", "again.html"] {
        let page = std::fs::read_to_string(dir.join(page)).unwrap();
        let lines = polylines(&page, "Worker utilisation over time (t.json)");
        assert_eq!(lines.len(), 4, "two workers and two predictions");
        assert_eq!(lines[0].len(), 100);
        assert!(page.contains("worker 1, the plan's prediction"), "{page}");
    }
}

#[test]
fn a_file_that_is_not_metrics_is_refused_by_line() {
    let dir = scratch("report-bad");
    let dir = dir.path();
    std::fs::write(dir.join("m.jsonl"), "{\"split\": \"train\", \"epoch\": 1, \"loss\": 2.0}\nnot json\n").unwrap();
    let out = amprun(dir, &["report", "m.jsonl", "-o", "page.html"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("m.jsonl:2: not a metrics object"), "{}", stderr(&out));
    assert!(!dir.join("page.html").exists());
}

/// The metrics start with the run's command line, build and machine (`split: "run"`), and
/// `amprun report` shows them; a profiled run's graph has each fusion group as one box
/// with its measured time per instance.
#[test]
fn a_run_carries_its_command_build_and_machine() {
    let dir = scratch("report-run");
    let dir = dir.path();
    train(dir, "m.jsonl", "1", &["--profile", "p.json", "--report", "run.html"]);
    let text = std::fs::read_to_string(dir.join("m.jsonl")).unwrap();
    let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(first["split"], "run");
    assert_eq!(first["model"], "ListReduce");
    let command: Vec<&str> = first["command"].as_array().unwrap().iter().filter_map(|c| c.as_str()).collect();
    assert!(command.windows(2).any(|w| w == ["--profile", "p.json"]), "{command:?}");
    let commit = first["commit"].as_str().unwrap();
    // Built from a clone: its commit, else `unknown` (a source tarball).
    if let Ok(out) = std::process::Command::new("git").args(["rev-parse", "--short=12", "HEAD"]).output() {
        if out.status.success() {
            assert_eq!(commit, String::from_utf8_lossy(&out.stdout).trim());
        }
    }
    assert!(first["cores"].as_u64().unwrap() >= 1 && first["amprun"].is_string() && first["host"].is_string());
    amprun_ok(dir, &["report", "m.jsonl", "-o", "page.html"]);
    let page = std::fs::read_to_string(dir.join("page.html")).unwrap();
    assert!(page.contains(&format!("(commit {commit})")) && page.contains("--profile p.json"), "{page}");
    // The graph: every box carries its measured time per instance.
    let page = std::fs::read_to_string(dir.join("run.html")).unwrap();
    let graph = page.split("id=\"graph\"").nth(1).unwrap().split("</svg>").next().unwrap();
    let labels: Vec<&str> = graph.split("dy=\"1.0em\">").skip(1).filter_map(|t| t.split('<').next()).collect();
    let timed = |l: &&str| [" ns", " µs", " ms"].iter().any(|unit| l.ends_with(unit));
    assert!(labels.len() >= 10 && labels.iter().all(timed), "{labels:?}");
}

/// The page in a real browser (headless Chromium, where it is installed: `.ci/run`
/// installs it): its script runs to the end (the graph's zoom is set up, `data-zoom`),
/// the drawing gets its `viewBox`, and every chart is there.
#[test]
fn the_page_works_in_a_real_browser() {
    let Some(browser) = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| std::process::Command::new(b).arg("--version").output().is_ok_and(|o| o.status.success()))
    else {
        skipped("the_page_works_in_a_real_browser", "no Chromium on PATH (apt-get install chromium)");
        return;
    };
    let dir = scratch("report-browser");
    let dir = dir.path();
    train(dir, "m.jsonl", "2", &["--report", "run.html"]);
    let page = dir.join("run.html");
    let out = std::process::Command::new(browser)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--dump-dom"])
        .arg(format!("file://{}", page.display()))
        .output()
        .unwrap();
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{browser}: {}", String::from_utf8_lossy(&out.stderr));
    assert!(dom.contains("data-zoom=\"ready\""), "the script ran to its end:\n{dom}");
    let graph = dom.split("id=\"graph\"").nth(1).unwrap();
    assert!(graph.contains("viewBox=\"0 0 "), "{graph}");
    assert!(dom.matches("<figcaption>").count() >= 4, "{dom}");
}
