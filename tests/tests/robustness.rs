//! Bad input never panics or hangs the front end: arbitrary bytes, and the canonical
//! examples and the rollout networks mutated at random (bytes deleted, duplicated,
//! swapped, tokens spliced in); the rollout analysis of whatever network the checker
//! made of them never panics either.
//! Each case runs under proptest's per-case timeout, which catches a hang.

use amp_sema::rollout::{analyse, enumerate_valid, Pattern, RolloutGraph};
use amp_sema::{check_source, Options};
use amp_tests::{EXAMPLES, ROLLOUT_EXAMPLES};
use proptest::prelude::*;

/// Fragments that stress the grammar's recovery and the checker's error paths.
const SPLICES: &[&str] = &[
    "{",
    "}",
    "(",
    ")",
    "[",
    "]",
    ";",
    ",",
    "..",
    "=>",
    "->",
    "|",
    "||",
    "=",
    "::",
    "/*",
    "*/",
    "\"",
    "///",
    "if",
    "else",
    "match",
    "for",
    "in",
    "while",
    "let",
    "var",
    "fn",
    "param",
    "model",
    "layer",
    "enum",
    "record",
    "network",
    "input",
    "node",
    "output",
    "from",
    "use std::nn::Mlp;",
    "0",
    "-1",
    "99999999999999999999",
    "1e999",
    "f32[0]",
    "split(",
    "top_k(",
    "zeros()",
    "_",
    "encode(t)",
    "x.label",
    "é",
    "𝄞",
    "\u{0}",
];

#[derive(Clone, Debug)]
enum Mutation {
    Delete { at: usize, len: usize },
    Duplicate { at: usize, len: usize },
    Splice { at: usize, fragment: usize },
    Swap { a: usize, b: usize },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1usize..40).prop_map(|(at, len)| Mutation::Delete { at, len }),
        (any::<usize>(), 1usize..60).prop_map(|(at, len)| Mutation::Duplicate { at, len }),
        (any::<usize>(), 0..SPLICES.len()).prop_map(|(at, fragment)| Mutation::Splice { at, fragment }),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Mutation::Swap { a, b }),
    ]
}

/// A char boundary at a random position.
fn boundary(text: &str, at: usize) -> usize {
    clamp(text, at % (text.len() + 1))
}

/// The char boundary at or before `at`, within the text.
fn clamp(text: &str, at: usize) -> usize {
    let mut at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

fn apply(text: &str, m: &Mutation) -> String {
    match *m {
        Mutation::Delete { at, len } => {
            let a = boundary(text, at);
            let b = clamp(text, a.saturating_add(len));
            format!("{}{}", &text[..a], &text[b.max(a)..])
        }
        Mutation::Duplicate { at, len } => {
            let a = boundary(text, at);
            let b = clamp(text, a.saturating_add(len)).max(a);
            format!("{}{}{}", &text[..b], &text[a..b], &text[b..])
        }
        Mutation::Splice { at, fragment } => {
            let a = boundary(text, at);
            format!("{} {} {}", &text[..a], SPLICES[fragment], &text[a..])
        }
        Mutation::Swap { a, b } => {
            let (mut x, mut y) = (boundary(text, a), boundary(text, b));
            if x > y {
                std::mem::swap(&mut x, &mut y);
            }
            let xe = clamp(text, x + 8).min(y);
            let ye = clamp(text, y + 8);
            format!("{}{}{}{}{}", &text[..x], &text[y..ye], &text[xe..y], &text[x..xe], &text[ye..])
        }
    }
}

/// Checks and renders: both printers must cope with whatever the checker reports.
fn check_everything(text: &str) {
    let (map, checked) = check_source("fuzz.amp", text, &Options::default());
    let _ = amp_diagnostics::render_human(&map, &checked.diagnostics, false);
    let json = amp_diagnostics::render_json(&map, &checked.diagnostics);
    for line in json.lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("each JSON diagnostic line parses");
        assert!(v["code"].is_string());
    }
    analyse_networks(&map, &checked.program);
}

/// Every network's streaming, sequential and all-undelayed patterns analysed, and the
/// valid patterns of small ones enumerated; each refusal rendered.
fn analyse_networks(map: &amp_diagnostics::SourceMap, program: &amp_sema::Program) {
    for def in &program.networks {
        let graph = RolloutGraph::of_network(def);
        let undelayed = Pattern::from_delays(&graph, &vec![0; graph.edges.len()]).expect("one delay per edge");
        for pattern in [Pattern::streaming(&graph), Pattern::sequential(&graph), undelayed] {
            if let Err(e) = analyse(&graph, &pattern, 3) {
                let _ = amp_diagnostics::render_human(map, &[e.to_diagnostic(&graph)], false);
            }
        }
        if graph.edges.len() <= 10 {
            let _ = enumerate_valid(&graph);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, timeout: 10_000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        check_everything(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn mutated_examples_never_panic(example in 0..EXAMPLES.len(), mutations in proptest::collection::vec(mutation(), 1..6)) {
        let mut text = EXAMPLES[example].1.to_string();
        for m in &mutations {
            text = apply(&text, m);
        }
        check_everything(&text);
    }

    #[test]
    fn mutated_networks_never_panic(example in 0..ROLLOUT_EXAMPLES.len(), mutations in proptest::collection::vec(mutation(), 1..6)) {
        let mut text = ROLLOUT_EXAMPLES[example].1.to_string();
        for m in &mutations {
            text = apply(&text, m);
        }
        check_everything(&text);
    }

    #[test]
    fn token_soup_never_panics(parts in proptest::collection::vec(0..SPLICES.len(), 0..80)) {
        let text: Vec<&str> = parts.iter().map(|&i| SPLICES[i]).collect();
        check_everything(&text.join(" "));
    }
}

#[test]
fn nesting_beyond_the_limits_is_refused_with_a_diagnostic() {
    let deep = format!("model M {{ fn forward(x: int) -> int {{ {}1{} }} }}", "(".repeat(5000), ")".repeat(5000));
    let long = format!("model M {{ fn forward(x: int) -> int {{ {}1 }} }}", "1 + ".repeat(100_000));
    let unary = format!("model M {{ fn forward(x: int) -> int {{ {}1 }} }}", "-".repeat(100_000));
    for text in [deep, long, unary] {
        let (_, checked) = check_source("deep.amp", &text, &Options::default());
        let codes: Vec<_> = checked.diagnostics.iter().map(|d| d.code.as_str()).collect();
        assert_eq!(codes, vec!["E0014"]);
    }
}

#[test]
fn nesting_at_the_limits_is_analysed_on_a_small_stack() {
    // Just inside both limits, on a thread with a 1 MiB stack (half of a test thread's):
    // every stage must stay well inside its stack.
    let depth = amp_grammar::MAX_BRACKET_DEPTH - 4;
    let parens = format!("model M {{ fn forward(x: int) -> int {{ {}x{} }} }}", "(".repeat(depth), ")".repeat(depth));
    let ops = format!(
        "model M {{ fn forward(x: int) -> int {{ {}x }} }}",
        "x + -".repeat(amp_grammar::MAX_OPERATORS_PER_STATEMENT / 2 - 2)
    );
    for text in [parens, ops] {
        let handle =
            std::thread::Builder::new().stack_size(1 << 20).spawn(move || check_everything(&text)).expect("spawn");
        handle.join().expect("analysed without overflowing the stack");
    }
}

#[test]
fn canonical_examples_and_stdlib_check_cleanly() {
    for (name, text) in EXAMPLES {
        let (map, checked) = check_source(name, text, &Options::default());
        assert!(
            checked.diagnostics.is_empty(),
            "{name}:\n{}",
            amp_diagnostics::render_human(&map, &checked.diagnostics, false)
        );
        assert_eq!(checked.program.models.len(), 1, "{name} has one model");
    }
    for (name, text) in ROLLOUT_EXAMPLES {
        let (map, checked) = check_source(name, text, &Options::default());
        assert!(
            checked.diagnostics.is_empty(),
            "{name}:\n{}",
            amp_diagnostics::render_human(&map, &checked.diagnostics, false)
        );
        assert_eq!(checked.program.networks.len(), 1, "{name} has one network");
    }
    for module in amp_stdlib::MODULES {
        let (map, checked) = check_source(module.file_name, module.source, &Options::default());
        assert!(
            checked.diagnostics.is_empty(),
            "{}:\n{}",
            module.file_name,
            amp_diagnostics::render_human(&map, &checked.diagnostics, false)
        );
    }
}
