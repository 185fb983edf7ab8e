//! Amp's JIT: each NPPT fusion group of a graph becomes one native kernel, compiled with
//! Cranelift when the graph is loaded, plus an interpreter of the same kernels.
//!
//! In: a graph the verifier accepted (`amp_ir::verify::Verified`), whose elementwise nodes carry
//! the `fusion` ids of `amp_lower::passes::group_fusable_nppts`. Out: per group, a
//! [`FusionGroup`] (which ports feed the kernel, which values leave it) and a shared
//! [`Kernel`] with a forward and a backward function, SIMD (`f32x4`) with a scalar tail.
//! Groups the JIT refuses come back as [`GroupError`]s and run op by op. Depends on
//! `amp-ir`, petgraph and Cranelift only; no IO.
//!
//! The pipeline: [`group`] extracts a [`KernelSpec`] (the canonical, validated kernel
//! description, also the [`KernelCache`] key) → `codegen` and `math` emit Cranelift IR →
//! [`KernelCache`] compiles each distinct spec once → [`Kernel::run`] checks every buffer
//! against the spec and makes the crate's only `unsafe` call. [`interp`] runs the same
//! specs op by op: [`Kernel::run_interpreted`] has `run`'s signature.
//!
//! Invariants: a kernel never reads or writes outside the buffers it is given, whatever
//! the graph (the addresses the code computes depend only on `n`, `rows`, the port widths
//! and the strides of strided inputs ([`Rows`]), all checked at the call); it stores every
//! element of every output, so [`Kernel::forward_new`] and [`Kernel::backward_new`] hand
//! it uninitialised buffers; building a kernel never panics on any graph.
//!
//! # Running a graph's groups (what an executor does)
//!
//! At load: `let verified = amp_ir::verify::verify(graph)?;` then, with one [`KernelCache`]
//! per process (or per loaded graph), `let fused = compile_groups(&verified, &mut cache);`.
//! Each [`GroupKernel`] replaces its group's nodes by one node: it joins the messages
//! arriving on [`FusionGroup::input_edges`] by [`FusionGroup::key`] (kernel input `i` is
//! the payload of the port [`FusionGroup::inputs`]`[i]`), and when all inputs of a key are
//! there calls `kernel.run(Pass::Forward, rows, &inputs, &mut outputs)` (one row per
//! message; several pending keys may be stacked as rows of one call), sends output `j`
//! along every edge of node [`FusionGroup::outputs`]`[j]` that leaves the group, and keeps
//! the inputs under the key. Backward: once every output's gradient for the key has
//! arrived (zeros for outputs whose consumers dropped them), `kernel.run(Pass::Backward,
//! rows, &[inputs.., output_grads..], &mut input_grads)`, then input gradient `i` goes
//! back to the source port `inputs[i]`: it is already the sum over all the edges in
//! `input_edges[i]`, so the source must count the group as one consumer (or receive
//! zeros on the other edges). Groups in [`CompiledGroups::refused`] run node by node as before.
//! `amprun --no-jit` compiles no kernels: every node runs by itself through the executor's
//! own ops. [`Kernel::run_interpreted`] is the oracle the tests and benches compare with.

mod codegen;
mod error;
pub mod group;
pub mod interp;
mod kernel;
mod listing;
pub mod math;
pub mod spec;

pub use error::{BufferRole, KernelError};
pub use group::{fusion_groups, FusionGroup, GroupError, GroupErrorKind, PortRef};
pub use interp::{interpret, interpret_rows, Arith, Pass, Rows};
pub use kernel::{CacheStats, Kernel, KernelCache};
pub use listing::clif_listing;
pub use math::max_rel_error;
pub use spec::{Elementwise, KernelSpec, SpecBuilder, SpecError, SpecOp, ValueId, Width};

use std::sync::Arc;

/// A fusion group with its compiled kernel (shared with every equal group).
#[derive(Clone, Debug)]
pub struct GroupKernel {
    pub group: FusionGroup,
    pub kernel: Arc<Kernel>,
}

/// The kernels of a graph's fusion groups, and the groups refused (to run op by op).
#[derive(Clone, Debug, Default)]
pub struct CompiledGroups {
    pub kernels: Vec<GroupKernel>,
    pub refused: Vec<GroupError>,
}

/// Extracts every fusion group of the graph and compiles its kernel through `cache`.
pub fn compile_groups(graph: &amp_ir::verify::Verified, cache: &mut KernelCache) -> CompiledGroups {
    let mut compiled = CompiledGroups::default();
    for group in fusion_groups(graph) {
        match group {
            Ok(group) => match cache.kernel(&group.spec) {
                Ok(kernel) => compiled.kernels.push(GroupKernel { group, kernel }),
                Err(e) => compiled.refused.push(GroupError { group: group.id, kind: GroupErrorKind::Kernel(e) }),
            },
            Err(e) => compiled.refused.push(e),
        }
    }
    compiled
}

#[cfg(test)]
mod hostile_tests;
