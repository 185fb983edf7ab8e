//! The AMP executor (being written).
