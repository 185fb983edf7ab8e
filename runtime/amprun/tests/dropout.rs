//! `amprun train` with `dropout`: its masks follow `--seed`, each epoch and each instance's
//! index in the data file, so a run repeats itself, a resumed run trains exactly as an
//! uninterrupted one (the epoch's masks and shuffle come back with the checkpoint), and
//! another seed or no dropout trains differently.

mod common;

use common::{amprun_ok, example, json_lines, scratch};
use std::path::Path;

const MODEL: &str = r#"
record Example { tokens: [int], label: int }
model ListReduce(vocab: int = 14, hidden: int = 16, classes: int = 10, drop: int = 30) {
    param embed = Embedding(vocab, hidden);
    param cell = Linear(2 * hidden, hidden);
    param head = Linear(hidden, classes);
    fn forward(x: Example) -> f32[classes] {
        var h: f32[hidden] = zeros();
        for tok in x.tokens {
            h = relu(cell(concat(dropout(embed(tok), drop / 100.0), h)));
        }
        head(dropout(h, drop / 100.0))
    }
    fn loss(x: Example) -> f32 { cross_entropy(forward(x), x.label) }
}
"#;

/// The training losses of the epochs `metrics` holds, in order.
fn train_losses(dir: &Path, metrics: &str) -> Vec<f64> {
    let text = std::fs::read_to_string(dir.join(metrics)).expect("metrics file");
    json_lines(&text)
        .iter()
        .filter(|row| row["split"] == "train")
        .map(|row| row["loss"].as_f64().expect("a loss"))
        .collect()
}

#[test]
fn dropout_runs_repeat_resume_and_follow_the_seed() {
    let dir = scratch("dropout");
    let dir = dir.path();
    std::fs::write(dir.join("m.amp"), MODEL).expect("model file");
    let data = example("data/list_reduce.train.jsonl");
    let train = |extra: &[&str], metrics: &str| {
        let mut args = vec!["train", "m.amp", "--data", &data, "--limit", "60", "--lr", "0.05"];
        args.extend(["--min-update-frequency", "4", "--metrics", metrics]);
        args.extend(extra);
        amprun_ok(dir, &args);
        train_losses(dir, metrics)
    };
    let whole = train(&["--epochs", "3", "--seed", "3"], "whole.jsonl");
    assert_eq!(whole.len(), 3);
    assert_eq!(whole, train(&["--epochs", "3", "--seed", "3"], "again.jsonl"), "the same seed");

    train(&["--epochs", "1", "--seed", "3", "--save", "c.safetensors"], "resumed.jsonl");
    let resumed = train(&["--epochs", "3", "--save", "c.safetensors", "--resume"], "resumed.jsonl");
    assert_eq!(resumed, whole, "a resumed run masks each epoch as the uninterrupted run");

    let other = train(&["--epochs", "1", "--seed", "4"], "other.jsonl");
    let plain = train(&["--epochs", "1", "--seed", "3", "-D", "drop=0"], "plain.jsonl");
    assert_ne!(other[0], whole[0], "another seed, other masks (and initialisation)");
    assert_ne!(plain[0], whole[0], "dropout changes training");
}
