//! Benchmarks of Amp; run with `cargo bench -p amp-benches`.
//!
//! The generators below build the inputs of the editor bench (`benches/editor.rs`);
//! [`median`] times what the check and editor benches measure.

use std::time::{Duration, Instant};

/// Median wall time of `f` over enough repetitions to fill about `budget`, at least
/// `reps.start()` and at most `reps.end()` (after one call to size them).
pub fn median(budget: Duration, reps: std::ops::RangeInclusive<u128>, mut f: impl FnMut()) -> Duration {
    let start = Instant::now();
    f();
    let once = start.elapsed().max(Duration::from_nanos(100));
    let reps = (budget.as_nanos() / once.as_nanos()).clamp(*reps.start(), *reps.end()) as usize;
    let mut times: Vec<Duration> = (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    times.sort();
    times[times.len() / 2]
}

/// A model of `errors` functions, each with one type error (`let k: int = 0.5;`), so the
/// checker reports `errors` diagnostics (plus the model's one valid `loss`).
pub fn file_with_errors(errors: usize) -> String {
    let mut text = String::from("model M(n: int = 4) {\n    param l = Linear(n, n);\n");
    for i in 0..errors {
        text.push_str(&format!(
            "    fn f{i}(x: f32[n]) -> f32[n] {{\n        let k: int = 0.5;\n        l(x)\n    }}\n"
        ));
    }
    text.push_str(
        "    fn forward(x: f32[n]) -> f32[n] { l(x) }\n    fn loss(x: f32[n]) -> f32 { sum(forward(x)) }\n}\n",
    );
    text
}

/// One line holding `errors` type errors (`let k0: int = 0.5; let k1: int = 0.5; ...`).
pub fn long_line_with_errors(errors: usize) -> String {
    let mut line = String::new();
    for i in 0..errors {
        line.push_str(&format!("let k{i}: int = 0.5; "));
    }
    format!("model M(n: int = 4) {{\n    param l = Linear(n, n);\n    fn forward(x: f32[n]) -> f32[n] {{ {line}l(x) }}\n    fn loss(x: f32[n]) -> f32 {{ sum(forward(x)) }}\n}}\n")
}

/// A valid file of about `lines` lines: records and models like the canonical examples.
pub fn valid_file(lines: usize) -> String {
    let mut text = String::from("record Example { tokens: [int], label: int }\n");
    let mut i = 0;
    // Each model below is 15 lines.
    while 1 + 15 * i < lines {
        text.push_str(&format!(
            "\nmodel M{i}(vocab: int = 14, hidden: int = 16, classes: int = 10) {{\n    param embed = Embedding(vocab, hidden);\n    param cell = Linear(2 * hidden, hidden);\n    param head = Linear(hidden, classes);\n\n    fn forward(x: Example) -> f32[classes] {{\n        var h: f32[hidden] = zeros();\n        for tok in x.tokens {{\n            h = relu(cell(concat(embed(tok), h)));\n        }}\n        head(h)\n    }}\n    fn loss(x: Example) -> f32 {{ cross_entropy(forward(x), x.label) }}\n}}\n"
        ));
        i += 1;
    }
    text
}
