//! The Cranelift JIT for fusion groups (being written).
