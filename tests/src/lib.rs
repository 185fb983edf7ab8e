//! Amp end-to-end test suites live in `tests/` of this crate.
