//! docs/tutorial.md is true of today's tools: its models are the files in
//! `examples/tutorial/`, every `ampc` and `amprun` command in it runs (training cut to one
//! epoch over 200 instances, to keep the test short), in order, from a folder where
//! `examples/` is the repository's, and the mistake it shows gives the code it shows.
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn tutorial() -> String {
    std::fs::read_to_string(repo().join("docs/tutorial.md")).expect("docs/tutorial.md")
}

/// The fenced blocks of `lang`, in order.
fn blocks(page: &str, lang: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut lines = page.lines();
    while let Some(line) = lines.next() {
        if line.trim() == format!("```{lang}") {
            let text: Vec<&str> = lines.by_ref().take_while(|l| l.trim() != "```").collect();
            out.push(text.join("\n") + "\n");
        }
    }
    out
}

/// The `ampc` and `amprun` command lines of the shell blocks, continuation lines joined.
fn commands(page: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for block in blocks(page, "sh") {
        let joined = block.replace("\\\n", " ");
        for line in joined.lines() {
            let words: Vec<String> = line.split_whitespace().map(str::to_string).collect();
            if words.first().is_some_and(|w| w == "ampc" || w == "amprun") {
                out.push(words);
            }
        }
    }
    out
}

/// `amprun train`'s arguments with one epoch over 200 instances.
fn shortened(mut words: Vec<String>) -> Vec<String> {
    if words.get(1).is_some_and(|w| w == "train") {
        if let Some(i) = words.iter().position(|w| w == "--epochs") {
            words[i + 1] = "1".into();
        }
        words.extend(["--limit".to_string(), "200".to_string()]);
    }
    words
}

fn binary(name: &str) -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_amprun")).with_file_name(format!("{name}{}", std::env::consts::EXE_SUFFIX))
}

#[test]
fn the_tutorials_models_are_the_example_files() {
    let page = tutorial();
    let models = blocks(&page, "amp");
    assert_eq!(models.len(), 2, "the tutorial shows two models");
    for model in models {
        let first = model.lines().next().unwrap_or_default();
        let name = first.strip_prefix("// ").and_then(|l| l.split_whitespace().next()).unwrap_or_default();
        let path = repo().join("examples/tutorial").join(name);
        let file = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(model, file, "docs/tutorial.md's {name} differs from examples/tutorial/{name}");
    }
}

#[test]
fn every_command_of_the_tutorial_runs() {
    let page = tutorial();
    let dir = scratch("tutorial");
    let dir = dir.path();
    std::os::unix::fs::symlink(repo().join("examples"), dir.join("examples")).unwrap();
    let commands = commands(&page);
    let ran: Vec<String> = commands.iter().map(|c| c[..2].join(" ")).collect();
    for expected in ["ampc check", "amprun train", "amprun eval", "amprun infer"] {
        assert!(ran.iter().any(|r| r == expected), "the tutorial runs `{expected}`: {ran:?}");
    }
    for words in commands {
        let words = shortened(words);
        let out = Command::new(binary(&words[0])).args(&words[1..]).current_dir(dir).output().unwrap();
        let line = words.join(" ");
        assert!(out.status.success(), "`{line}` failed:\n{}", stderr(&out));
        if words[1] == "infer" {
            let lines = json_lines(&stdout(&out));
            assert!(!lines.is_empty(), "`{line}` printed nothing");
            assert!(lines.iter().all(|l| l["argmax"].is_u64() && l["output"].is_array()), "`{line}`: {lines:?}");
        }
        if words[1] == "infer" && line.contains("sentences.jsonl") {
            // Three sentences with no label anywhere: inference reads only what forward does.
            assert_eq!(json_lines(&stdout(&out)).len(), 3);
        }
    }
}

/// The mistake the tutorial describes (the cell declared `Linear(hidden, hidden)`) gives
/// the error it shows.
#[test]
fn the_tutorials_mistake_gives_the_error_it_shows() {
    let page = tutorial();
    let shown = blocks(&page, "text").into_iter().find(|b| b.starts_with("[E0301]")).expect("the E0301 block");
    let first = shown.lines().next().unwrap();
    let dir = scratch("tutorial-mistake");
    let source = std::fs::read_to_string(repo().join("examples/tutorial/rnn.amp")).unwrap();
    let broken = source.replace("Linear(2 * hidden, hidden)", "Linear(hidden, hidden)");
    assert_ne!(broken, source);
    std::fs::write(dir.path().join("rnn.amp"), broken).unwrap();
    let out = Command::new(binary("ampc")).args(["check", "rnn.amp"]).current_dir(dir.path()).output().unwrap();
    assert!(!out.status.success());
    let printed = stderr(&out) + &stdout(&out);
    assert!(printed.contains(first), "ampc check printed:\n{printed}\nnot `{first}`");
}
