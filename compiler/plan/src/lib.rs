//! The partition planner (being written).
