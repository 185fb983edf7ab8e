//! Lowering (in progress).
