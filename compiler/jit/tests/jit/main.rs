//! The JIT's tests, in one binary (one link of Cranelift).

mod approx;
mod calls;
mod common;
mod differential;
mod finite_diff;
mod groups;
mod smoke;
mod strided;
