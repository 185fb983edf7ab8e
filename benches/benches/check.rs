//! `ampc check` speed on the canonical examples.
//!
//! For each example it times, in one run: lexing alone (the baseline), parsing (lexer +
//! parser), and the whole check (parse + imports + names, types, shapes). It prints the
//! median of many repetitions, the ratio of the check to the lexing baseline measured in
//! the same run, and the share of the 50 ms interactive budget the check uses.
//!
//! Run: `cargo bench -p amp-benches --bench check`

use amp_diagnostics::FileId;
use amp_sema::{check_source, Options};
use amp_tests::EXAMPLES;
use std::hint::black_box;
use std::time::Duration;

const BUDGET: Duration = Duration::from_millis(50);

/// Median wall time of `f` over enough repetitions to fill ~200 ms.
fn median(f: impl FnMut()) -> Duration {
    amp_benches::median(Duration::from_millis(200), 11..=20_001, f)
}

fn main() {
    println!("{:<12} {:>10} {:>10} {:>10} {:>12} {:>12}", "example", "lex", "parse", "check", "check/lex", "of 50 ms");
    for (name, text) in EXAMPLES {
        let lex = median(|| {
            black_box(amp_grammar::lexer::lex(black_box(text)));
        });
        let parse = median(|| {
            black_box(amp_grammar::parse(FileId(0), black_box(text)));
        });
        let check = median(|| {
            black_box(check_source("bench.amp", black_box(text), &Options::default()));
        });
        println!(
            "{:<12} {:>8.1}µs {:>8.1}µs {:>8.1}µs {:>11.1}x {:>11.3}%",
            name,
            lex.as_secs_f64() * 1e6,
            parse.as_secs_f64() * 1e6,
            check.as_secs_f64() * 1e6,
            check.as_secs_f64() / lex.as_secs_f64(),
            100.0 * check.as_secs_f64() / BUDGET.as_secs_f64(),
        );
    }
}
