//! Support for Amp's end-to-end test suites (in `tests/` of this crate), the other crates'
//! tests and the benchmarks: the canonical example models, embedded once, and how a test
//! reports that it could not run here.

/// The five canonical models of SPEC §2, by name, with their source.
pub const EXAMPLES: &[(&str, &str)] = &[
    ("list_reduce", include_str!("../../examples/list_reduce.amp")),
    ("tree_lstm", include_str!("../../examples/tree_lstm.amp")),
    ("ggsnn", include_str!("../../examples/ggsnn.amp")),
    ("moe", include_str!("../../examples/moe.amp")),
    ("mlp", include_str!("../../examples/mlp.amp")),
    ("module_network", include_str!("../../examples/module_network.amp")),
    ("child_sum_tree_lstm", include_str!("../../examples/child_sum_tree_lstm.amp")),
];

/// The source of the example `name`.
pub fn example(name: &str) -> Option<&'static str> {
    EXAMPLES.iter().find(|(n, _)| *n == name).map(|(_, text)| *text)
}

/// The networks of `examples/rollout/` (docs/rollouts.md), by name, with their source.
pub const ROLLOUT_EXAMPLES: &[(&str, &str)] = &[
    ("feed_forward", include_str!("../../examples/rollout/feed_forward.amp")),
    ("skip", include_str!("../../examples/rollout/skip.amp")),
    ("skip_recurrent", include_str!("../../examples/rollout/skip_recurrent.amp")),
];

/// Reports a test (or a part of one) that could not run here: printed, and appended to
/// the file `$AMP_SKIP_LOG` names (`.ci/run` counts its lines).
pub fn report_skip(line: &str) {
    println!("skipped: {line}");
    if let Some(log) = std::env::var_os("AMP_SKIP_LOG") {
        use std::io::Write;
        let written =
            std::fs::OpenOptions::new().create(true).append(true).open(log).and_then(|mut f| writeln!(f, "{line}"));
        written.expect("the skip log takes a line");
    }
}
