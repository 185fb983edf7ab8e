//! Benchmarks of Amp; run with `cargo bench -p amp-benches`.
