//! What model authors asked for in issue 28: `infer` on unlabeled data (JSON Lines, CSV,
//! PTB trees), pretrained embeddings and frozen parameter groups, learning-rate schedules,
//! and each epoch's validation line under its training line.
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use amp_params::{ParamSet, ParamSpec};
use common::*;
use std::path::Path;

/// Parameters of `graph` from `seed`, saved as a plain safetensors file.
fn save_params(dir: &Path, graph: &amp_ir::Graph, seed: u64) -> String {
    let params = ParamSet::init(&ParamSpec::of_graph(graph), seed);
    let path = dir.join("p.safetensors");
    amp_params::save(&params, &path, &Default::default()).expect("save parameters");
    path.display().to_string()
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write a test file");
    path.display().to_string()
}

/// The `output` arrays of infer's lines, checking that `instance` counts 0, 1, ...
fn outputs(text: &str) -> Vec<Vec<f64>> {
    json_lines(text)
        .iter()
        .enumerate()
        .map(|(i, line)| {
            assert_eq!(line["instance"], i, "{line}");
            line["output"].as_array().expect("output").iter().map(|x| x.as_f64().unwrap()).collect()
        })
        .collect()
}

fn assert_close(a: &[Vec<f64>], b: &[Vec<f64>], tolerance: f64) {
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(b) {
        assert_eq!(x.len(), y.len());
        for (p, q) in x.iter().zip(y) {
            assert!((p - q).abs() <= tolerance * (1.0 + q.abs()), "{x:?} vs {y:?}");
        }
    }
}

/// Inference reads instances without their label (a label present is ignored, even one
/// out of the model's range), in input order, batched on several workers, to stdout or
/// `--output`, with the probabilities of a classifier.
#[test]
fn infer_reads_jsonl_without_labels() {
    let dir = scratch("infer-unlabeled");
    let dir = dir.path();
    let graph = compile_example("list_reduce", &[("hidden", 8)]);
    let params = save_params(dir, &graph, 5);
    let text = std::fs::read_to_string(example("data/list_reduce.valid.jsonl")).unwrap();
    let labeled: Vec<&str> = text.lines().take(30).collect();
    let unlabeled: Vec<String> = labeled
        .iter()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            v.as_object_mut().unwrap().remove("label");
            v.to_string()
        })
        .collect();
    let with = write(dir, "with.jsonl", &(labeled.join("\n") + "\n"));
    let without = write(dir, "without.jsonl", &(unlabeled.join("\n") + "\n"));
    // A label of 99 is out of the 10 classes: `eval` refuses it, `infer` ignores it.
    let mut odd: serde_json::Value = serde_json::from_str(labeled[0]).unwrap();
    odd["label"] = serde_json::json!(99);
    let odd = write(dir, "odd.jsonl", &format!("{odd}\n"));
    let model = example("list_reduce.amp");
    let infer = |data: &str, extra: &[&str]| {
        let mut args = vec!["infer", &model, "-D", "hidden=8", "--params", &params, "--data", data];
        args.extend_from_slice(extra);
        amprun_ok(dir, &args)
    };
    let reference = outputs(&stdout(&infer(&with, &[])));
    assert_eq!(reference.len(), 30);
    assert_eq!(outputs(&stdout(&infer(&without, &[]))), reference, "the label changes nothing");
    assert_eq!(outputs(&stdout(&infer(&odd, &[])))[0], reference[0]);
    let batched = infer(&without, &["--workers", "2", "--max-active-keys", "8", "--output", "out.jsonl"]);
    assert!(stdout(&batched).is_empty(), "--output takes the lines");
    let written = std::fs::read_to_string(dir.join("out.jsonl")).unwrap();
    assert_close(&outputs(&written), &reference, 1e-5);
    for line in json_lines(&written) {
        let p: Vec<f64> = line["probabilities"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
        assert_eq!(p.len(), 10);
        assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-5);
        let best = p.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).unwrap().0;
        assert_eq!(line["argmax"], best);
    }
    // Evaluation still needs its labels.
    let out = amprun(dir, &["eval", &model, "-D", "hidden=8", "--params", &params, "--data", &without]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("field `label`: missing"), "{}", stderr(&out));
    // The forward input is still checked: a missing `tokens` is bad data.
    let bad = write(dir, "bad.jsonl", "{\"label\": 3}\n");
    let out = amprun(dir, &["infer", &model, "-D", "hidden=8", "--params", &params, "--data", &bad]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("bad.jsonl:1: field `tokens`: missing"), "{}", stderr(&out));
}

/// A weighted cross-entropy (a loss term) is still a classifier's loss: its label may be
/// absent, and `infer` gives the probabilities.
#[test]
fn infer_knows_the_label_of_a_weighted_loss() {
    let dir = scratch("infer-weighted");
    let dir = dir.path();
    let graph = compile_example("list_reduce", &[("hidden", 8)]);
    let params = save_params(dir, &graph, 5);
    let source = std::fs::read_to_string(example("list_reduce.amp")).unwrap();
    let weighted =
        source.replace("{ cross_entropy(forward(x), x.label) }", "{ 0.5 * cross_entropy(forward(x), x.label) }");
    assert_ne!(weighted, source, "the example's loss line changed");
    let model = write(dir, "weighted.amp", &weighted);
    let data = write(dir, "d.jsonl", "{\"tokens\": [1, 3, 4]}\n{\"tokens\": [2, 5]}\n");
    let out = amprun_ok(dir, &["infer", &model, "-D", "hidden=8", "--params", &params, "--data", &data]);
    let lines = json_lines(&stdout(&out));
    assert_eq!(lines.len(), 2);
    for line in lines {
        let p = line["probabilities"].as_array().expect("the probabilities of a classifier");
        assert_eq!(p.len(), 10);
    }
}

/// CSV rows with the label column or without it give the same outputs.
#[test]
fn infer_reads_csv_rows_with_or_without_the_label_column() {
    let dir = scratch("infer-csv");
    let dir = dir.path();
    let graph = compile_example("mlp", &[("hidden", 8)]);
    let params = save_params(dir, &graph, 2);
    let rows: Vec<Vec<String>> =
        (0..5).map(|r| (0..64).map(|c| format!("{}", (r * 7 + c * 3) % 17)).collect()).collect();
    let with: Vec<String> = rows.iter().enumerate().map(|(r, row)| format!("{},{}", row.join(","), r % 10)).collect();
    let without: Vec<String> = rows.iter().map(|row| row.join(",")).collect();
    let with = write(dir, "with.csv", &(with.join("\n") + "\n"));
    let without = write(dir, "without.csv", &(without.join("\n") + "\n"));
    let model = example("mlp.amp");
    let infer = |data: &str| {
        let out = amprun_ok(
            dir,
            &["infer", &model, "-D", "hidden=8", "--params", &params, "--data", data, "--scale", "0.0625"],
        );
        outputs(&stdout(&out))
    };
    let reference = infer(&with);
    assert_eq!(reference.len(), 5);
    assert_eq!(infer(&without), reference);
}

/// PTB trees: the labels are part of the bracket syntax, so unlabeled trees carry any int
/// in their place; inference ignores them.
#[test]
fn infer_ignores_the_labels_of_ptb_trees() {
    let dir = scratch("infer-ptb");
    let dir = dir.path();
    let defines = [("vocab", 8), ("embed", 4), ("hidden", 3)];
    let graph = compile_example("tree_lstm", &defines);
    let params = save_params(dir, &graph, 1);
    let vocab = write(dir, "v.txt", "<unk>\nthe\nrock\nis\ngreat\n");
    let labeled = write(dir, "a.txt", "(3 (2 The) (4 (2 rock) (3 (2 is) (4 great))))\n(1 (2 the) (0 bad))\n");
    let placeholders = write(dir, "b.txt", "(0 (0 The) (0 (0 rock) (0 (0 is) (0 great))))\n(9 (9 the) (9 bad))\n");
    let model = example("tree_lstm.amp");
    let infer = |data: &str| {
        let args = [
            "infer", &model, "-D", "vocab=8", "-D", "embed=4", "-D", "hidden=3", "--params", &params, "--vocab",
            &vocab, "--data", data,
        ];
        outputs(&stdout(&amprun_ok(dir, &args)))
    };
    let reference = infer(&labeled);
    assert_eq!(reference.len(), 2);
    assert_eq!(infer(&placeholders), reference);
}

/// SDF molecules without their label property give the outputs they give with it.
#[test]
fn infer_reads_molecules_without_the_label_property() {
    let molecules = bundled("molecules/solubility.test.sdf");
    let dir = scratch("infer-sdf");
    let dir = dir.path();
    let defines = [("classes", 3), ("edge_kinds", 3), ("hidden", 4)];
    let graph = compile_example("ggsnn", &defines);
    let params = save_params(dir, &graph, 4);
    let text = std::fs::read_to_string(molecules).unwrap();
    // The first three molecules, then the same without `> <SOL_classification>` and its value.
    let mut first = Vec::new();
    for line in text.lines() {
        first.push(line);
        if first.iter().filter(|l| l.trim() == "$$$$").count() == 3 {
            break;
        }
    }
    let labeled = write(dir, "l.sdf", &(first.join("\n") + "\n"));
    let mut stripped = String::new();
    let mut lines = first.into_iter();
    while let Some(line) = lines.next() {
        if line.contains("<SOL_classification>") {
            lines.next();
            continue;
        }
        stripped.push_str(line);
        stripped.push('\n');
    }
    assert!(!stripped.contains("SOL_classification"));
    let unlabeled = write(dir, "u.sdf", &stripped);
    let model = example("ggsnn.amp");
    let infer = |data: &str| {
        let args = [
            "infer",
            &model,
            "-D",
            "classes=3",
            "-D",
            "edge_kinds=3",
            "-D",
            "hidden=4",
            "--params",
            &params,
            "--data",
            data,
        ];
        outputs(&stdout(&amprun_ok(dir, &args)))
    };
    let reference = infer(&labeled);
    assert_eq!(reference.len(), 3);
    assert_eq!(infer(&unlabeled), reference);
}

/// A vocabulary for list_reduce's 14 tokens and vectors for some of them.
fn list_reduce_words(dir: &Path) -> (String, String) {
    let words: Vec<String> = std::iter::once("<unk>".to_string()).chain((1..14).map(|i| format!("w{i}"))).collect();
    let vocab = write(dir, "lr.vocab", &(words.join("\n") + "\n"));
    // word2vec's header, then w3 and w5 (and a word the vocabulary lacks).
    let vectors = "3 8\nw3 1 2 3 4 5 6 7 8\nnope 0 0 0 0 0 0 0 0\nw5 -1 -2 -3 -4 -5 -6 -7 -0.5\n";
    (vocab, write(dir, "vec.txt", vectors))
}

/// `--init-embedding` writes the vectors of the words found into their rows (the rest
/// keep the seed's values) and says how many it found; `--freeze` keeps a group as it
/// started while the others train.
#[test]
fn pretrained_vectors_fill_their_rows_and_frozen_groups_stay() {
    let dir = scratch("embeddings");
    let dir = dir.path();
    let (vocab, vectors) = list_reduce_words(dir);
    let graph = compile_example("list_reduce", &[("hidden", 8)]);
    let model = example("list_reduce.amp");
    let data = example("data/list_reduce.valid.jsonl");
    let train = |extra: &[&str]| {
        let mut args =
            vec!["train", &model, "-D", "hidden=8", "--data", &data, "--limit", "40", "--lr", "0.1", "--vocab", &vocab];
        args.extend_from_slice(extra);
        amprun_ok(dir, &args)
    };
    let spec = format!("embed={vectors}");
    let out =
        train(&["--init-embedding", &spec, "--freeze", "embed", "--freeze", "head", "--save", "frozen.safetensors"]);
    assert!(
        stderr(&out).contains("--init-embedding embed: 2 of 14 vocabulary words found among 3 vectors"),
        "{}",
        stderr(&out)
    );
    let start = ParamSet::init(&ParamSpec::of_graph(&graph), 0);
    let trained = checkpoint(&dir.join("frozen.safetensors"), &graph).params;
    let table = |p: &ParamSet| p.data(p.index("embed.weight").unwrap()).to_vec();
    let (before, after) = (table(&start), table(&trained));
    assert_eq!(&after[3 * 8..4 * 8], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
    assert_eq!(&after[5 * 8..6 * 8], &[-1.0, -2.0, -3.0, -4.0, -5.0, -6.0, -7.0, -0.5]);
    for row in (0..14).filter(|r| ![3, 5].contains(r)) {
        assert_eq!(&after[row * 8..(row + 1) * 8], &before[row * 8..(row + 1) * 8], "row {row} kept");
    }
    let tensor = |p: &ParamSet, name: &str| p.data(p.index(name).unwrap()).to_vec();
    for name in ["head.weight", "head.bias"] {
        assert_eq!(tensor(&trained, name), tensor(&start, name), "the frozen Linear `{name}` stays");
    }
    assert_ne!(tensor(&trained, "cell.weight"), tensor(&start, "cell.weight"), "the other groups train");
    // Not frozen, the table trains too.
    train(&["--init-embedding", &spec, "--save", "free.safetensors"]);
    let free = checkpoint(&dir.join("free.safetensors"), &graph).params;
    assert_ne!(&table(&free)[3 * 8..4 * 8], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
}

#[test]
fn bad_vectors_and_names_are_clear_errors() {
    let dir = scratch("embedding-errors");
    let dir = dir.path();
    let (vocab, _) = list_reduce_words(dir);
    let model = example("list_reduce.amp");
    let data = example("data/list_reduce.valid.jsonl");
    let run = |extra: &[&str]| {
        let mut args = vec!["train", &model, "-D", "hidden=8", "--data", &data, "--limit", "5", "--vocab", &vocab];
        args.extend_from_slice(extra);
        amprun(dir, &args)
    };
    let short = write(dir, "short.txt", "w1 1 2 3 4\n");
    let out = run(&["--init-embedding", &format!("embed={short}")]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("short.txt:1: the vectors have 4 numbers after the word, expected 8"),
        "{}",
        stderr(&out)
    );
    let nan = write(dir, "nan.txt", "w1 1 2 3 4 5 6 7 8\nw2 1 2 3 4 5 6 7 inf\n");
    let out = run(&["--init-embedding", &format!("embed={nan}")]);
    assert!(stderr(&out).contains("nan.txt:2: number 8 of `w2`: `inf` is not a finite number"), "{}", stderr(&out));
    let out = run(&["--init-embedding", &format!("cell={short}")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("`cell` is a Linear layer, not an Embedding (embeddings: embed)"),
        "{}",
        stderr(&out)
    );
    let out = run(&["--freeze", "cell.weight"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--freeze cell)"), "{}", stderr(&out));
    let out = run(&["--freeze", "nothing"]);
    assert!(stderr(&out).contains("its groups: cell, embed, head"), "{}", stderr(&out));
    // Without a vocabulary the rows have no words.
    let args = ["train", &model, "-D", "hidden=8", "--data", &data, "--limit", "5", "--init-embedding", "embed=x.txt"];
    let out = amprun(dir, &args);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("no vocabulary"), "{}", stderr(&out));
}

/// `--lr-schedule` sets each epoch's rate (in the metrics and the epoch line), and each
/// epoch's validation line follows its training line.
#[test]
fn schedules_set_each_epochs_rate_and_validation_follows_training() {
    let dir = scratch("schedules");
    let dir = dir.path();
    let model = example("list_reduce.amp");
    let data = example("data/list_reduce.valid.jsonl");
    let run = |extra: &[&str]| {
        let mut args = vec![
            "train",
            &model,
            "-D",
            "hidden=8",
            "--data",
            &data,
            "--valid",
            &data,
            "--limit",
            "20",
            "--epochs",
            "4",
            "--lr",
            "0.2",
            "--metrics",
            "m.jsonl",
        ];
        args.extend_from_slice(extra);
        amprun(dir, &args)
    };
    let rates = || -> Vec<f64> {
        let metrics = json_lines(&std::fs::read_to_string(dir.join("m.jsonl")).unwrap());
        metrics.iter().filter(|m| m["split"] == "train").map(|m| m["lr"].as_f64().unwrap()).collect()
    };
    let out = run(&["--lr-schedule", "step", "--step-size", "1", "--gamma", "0.5", "--warmup", "1"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let expected = [0.1, 0.2, 0.1, 0.05];
    for (got, want) in rates().iter().zip(expected) {
        assert!((got - want).abs() < 1e-7, "{:?}", rates());
    }
    let err = stderr(&out);
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("epoch ")).collect();
    assert_eq!(lines.len(), 8, "{err}");
    for (e, pair) in lines.chunks(2).enumerate() {
        let epoch = format!("epoch {}/4: ", e + 1);
        assert!(pair[0].starts_with(&format!("{epoch}train ")) && pair[0].contains(" lr "), "{err}");
        assert!(pair[1].starts_with(&format!("{epoch}valid ")), "{err}");
    }
    assert_eq!(run(&["--lr-schedule", "cosine"]).status.code(), Some(0));
    let cosine = rates();
    assert!((cosine[0] - 0.2).abs() < 1e-7 && (cosine[2] - 0.1).abs() < 1e-7, "{cosine:?}");
    let out = run(&["--lr-schedule", "step"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--lr-schedule step needs --step-size N"), "{}", stderr(&out));
    let out = run(&["--gamma", "0.5"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--gamma applies to --lr-schedule step, not constant"), "{}", stderr(&out));
}
