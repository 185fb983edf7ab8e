//! Networks rolled out over frames: a checked `network` block and a valid rollout pattern
//! to a verified graph, as [`crate::compile_model`] does for a model (docs/rollouts.md).
//!
//! An instance is a sequence of input frames and a class: the record `{frames:
//! [f32[w]], label: int}` (`w` the input's width). Frame i computes every node from its
//! sources' values of frame i (undelayed edges) or of frame i − 1 (delayed edges; zeros
//! before frame 0); the loss is the mean over the frames of the output's cross-entropy
//! against `label`. The walk itself is `lowerer/network.rs`.

use crate::lowerer::network::Rollout;
use crate::lowerer::Lowerer;
use crate::{passes, CompileError};
use amp_diagnostics::{Code, Diagnostic, SourceMap};
use amp_ir::Graph;
use amp_sema::rollout::{Pattern, RolloutGraph};
use amp_sema::Program;

/// The field of an instance holding its frames (a sequence of vectors).
pub const FRAMES_FIELD: &str = "frames";
/// The field of an instance holding its class.
pub const LABEL_FIELD: &str = "label";

/// The graph's metadata key for its frame count: `F`, or `data` (as many as an instance
/// has). Its presence marks the graph of a rolled-out network.
pub const ROLLOUT_FRAMES_META: &str = "rollout.frames";
/// The graph's metadata key for its pattern: every edge with its delay, `x->h1=0,...`.
pub const ROLLOUT_PATTERN_META: &str = "rollout.pattern";
/// The graph's metadata key for the name of its frame counter (a state field).
pub const ROLLOUT_FRAME_FIELD_META: &str = "rollout.frame_field";
/// The graph's metadata key for the pattern's inference factor F(R).
pub const ROLLOUT_FACTOR_META: &str = "rollout.inference_factor";
/// The graph's metadata key for T(1, y), the update step of the window of size 1 at
/// which frame 1 of the output is known. Data frame k's output exists at update step
/// `k · F(R) + T(1, y)` (docs/rollouts.md).
pub const ROLLOUT_OUTPUT_STEP_META: &str = "rollout.output_step";

/// How many frames the rolled-out graph computes per instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frames {
    /// Exactly this many: the frame loop's bound is a constant (an instance must have at
    /// least that many frames; `amprun` checks that it has exactly as many).
    Fixed(u32),
    /// As many as the instance has (`len($.frames)`).
    FromData,
}

/// Lowers network `network` (an index into `program.networks`) under `pattern` (of the
/// network's [`RolloutGraph`]) over `frames` frames, without passes or verification. An
/// invalid pattern is its E0700 diagnostic; what the lowering does not handle (several
/// inputs or outputs, a width without a value) is E0600.
pub fn lower_network(
    program: &Program,
    map: &SourceMap,
    network: usize,
    pattern: &Pattern,
    frames: Frames,
) -> Result<Graph, Vec<Diagnostic>> {
    let Some(def) = program.networks.get(network) else {
        return Err(vec![Diagnostic::new(
            Code::NotLowered,
            amp_diagnostics::Span::default(),
            format!("network #{network} does not exist"),
        )]);
    };
    let graph = RolloutGraph::of_network(def);
    if pattern.delays().len() != graph.edges.len() {
        return Err(vec![Diagnostic::new(
            Code::BadRolloutPattern,
            def.span,
            format!(
                "the pattern has {} delays, `{}` has {} edges",
                pattern.delays().len(),
                def.name,
                graph.edges.len()
            ),
        )
        .with_primary("a pattern of another network")]);
    }
    if frames == Frames::Fixed(0) {
        return Err(vec![Diagnostic::new(Code::NotLowered, def.span, "a rollout over 0 frames has no loss")
            .with_primary(format!("`{}` rolled out over no frame", def.name))
            .with_help("give at least one frame")]);
    }
    let rollout = Rollout { def, graph: &graph, pattern, frames };
    Lowerer::for_network(program, map, network)?.run_network(&rollout)
}

/// [`lower_network`], then the passes and the verifier: the whole middle end for a
/// network, as `ampc compile --network` and `amprun --network` run it.
pub fn compile_network(
    program: &Program,
    map: &SourceMap,
    network: usize,
    pattern: &Pattern,
    frames: Frames,
) -> Result<(amp_ir::verify::Verified, Vec<passes::PassReport>), CompileError> {
    let mut graph = lower_network(program, map, network, pattern, frames).map_err(CompileError::Refused)?;
    let reports = passes::optimize(&mut graph);
    let span = program.networks.get(network).map(|n| n.span).unwrap_or_default();
    let graph = amp_ir::verify::Verified::new(graph).map_err(|r| crate::rejected(&r.graph, map, span, r.errors))?;
    Ok((graph, reports))
}
