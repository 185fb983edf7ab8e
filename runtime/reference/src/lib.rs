//! The eager reference evaluator (being written).
