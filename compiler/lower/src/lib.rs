//! Lowering: a checked model (typed `Program`) to an AMP dataflow graph (`amp_ir::Graph`).
//!
//! In: the typed program from `amp-sema`, the source map (for node locations) and the
//! model to lower. Out: a graph whose dynamic control flow lives in message states, with
//! the state schema and every node's key derived here (see `docs/IR.md`), or E0600
//! diagnostics naming constructs this lowering does not handle yet. Pure; depends on
//! `amp-sema`, `amp-ir`, `amp-grammar` (operator enums) and `amp-diagnostics`.
//!
//! How: every function and layer call is inlined. Tensors become ports of nodes; ints and
//! bools become `StateExpr`s over state fields and the instance's data; instance data
//! (records, sequences) stays a path until a leaf is read. Each dynamic context (the
//! function body, a loop body, an `if` branch) has a *control* port carrying unit
//! messages, which triggers `read`, `const` and `embedding` nodes. Loops and branches
//! route every value they use through `cond`/`phi`/`isu` nodes, so all messages of one
//! context carry the same state.

mod lowerer;
pub mod network;
pub mod passes;
mod schema;
mod uses;
mod value;

use amp_diagnostics::{Diagnostic, SourceMap};
use amp_ir::verify::Verified;
use amp_ir::Graph;
use amp_sema::{ComponentId, Program};

pub use network::{compile_network, lower_network, Frames};
pub use schema::input_schema;

/// Lowers `model` to a graph. The graph's keys are derived; it is not yet verified or
/// optimised (run `amp_ir::verify::verify` and the passes after this).
pub fn lower_model(program: &Program, map: &SourceMap, model: ComponentId) -> Result<Graph, Vec<Diagnostic>> {
    lower_model_with(program, map, model, &LowerOptions::default())
}

/// Choices the lowering leaves to its caller.
#[derive(Clone, Debug, Default)]
pub struct LowerOptions {
    /// Lower every `map` per element (one message per element, in an element context),
    /// even where its body is row-wise and would be batched (`docs/IR.md`, Collections):
    /// `ampc compile --per-element-maps` and `amprun --per-element-maps`, for comparison.
    pub per_element_maps: bool,
    /// In a batched map, run every arm of a parameter-array call on all rows and mask
    /// (`mask_rows`), as the calls that pass ints do, instead of partitioning the rows by
    /// arm (`partition_rows`/`merge_rows`): the earlier batched form, kept for comparison
    /// and so that tests cover both.
    pub masked_arms: bool,
}

/// [`lower_model`] with options.
pub fn lower_model_with(
    program: &Program,
    map: &SourceMap,
    model: ComponentId,
    options: &LowerOptions,
) -> Result<Graph, Vec<Diagnostic>> {
    lowerer::Lowerer::new(program, map, model)
        .and_then(|l| l.per_element_maps(options.per_element_maps).mask_arms(options.masked_arms).run())
}

/// Why a model did not compile to a verified graph, as coded diagnostics at the source.
#[derive(Debug)]
pub enum CompileError {
    /// What the lowering refuses (E0600) and sizes over Amp's limits (E0310).
    Refused(Vec<Diagnostic>),
    /// A lowered graph the verifier rejects: a defect of the lowering, reported as E0600
    /// at the node's source (the fuzz target and property tests fail on it).
    Defect(Vec<Diagnostic>),
}

impl CompileError {
    pub fn diagnostics(&self) -> &[Diagnostic] {
        match self {
            CompileError::Refused(d) | CompileError::Defect(d) => d,
        }
    }
}

/// Lowers `model`, runs the passes (`passes::optimize`) and verifies the result: the whole
/// middle end, as `ampc compile` and `amprun` run it. Returns the verified graph (no
/// later stage verifies it again) and what each pass changed.
pub fn compile_model(
    program: &Program,
    map: &SourceMap,
    model: ComponentId,
) -> Result<(Verified, Vec<passes::PassReport>), CompileError> {
    compile_model_with(program, map, model, &LowerOptions::default())
}

/// [`compile_model`] with options.
pub fn compile_model_with(
    program: &Program,
    map: &SourceMap,
    model: ComponentId,
    options: &LowerOptions,
) -> Result<(Verified, Vec<passes::PassReport>), CompileError> {
    let mut graph = lower_model_with(program, map, model, options).map_err(CompileError::Refused)?;
    let reports = passes::optimize(&mut graph);
    let model_span = program.components.get(model.0 as usize).map(|c| c.span).unwrap_or_default();
    let graph = Verified::new(graph).map_err(|r| rejected(&r.graph, map, model_span, r.errors))?;
    Ok((graph, reports))
}

/// The verifier's errors as diagnostics at each node's source. Its size checks are the
/// limits a source can break (a layer instantiated with huge sizes, an index expression
/// that inlines too deep): those are the user's E0310. Anything else is a defect of the
/// lowering, but the program passed `ampc check`, so it is still reported at the
/// program's source as a construct not lowered (E0600), and never as a crash.
/// `fallback` is where a graph-wide error points (the model's or network's name).
pub(crate) fn rejected(
    graph: &Graph,
    map: &SourceMap,
    fallback: amp_diagnostics::Span,
    errors: Vec<amp_ir::verify::VerifyError>,
) -> CompileError {
    use amp_diagnostics::{Code, Diagnostic};
    use amp_ir::verify::VerifyErrorKind as K;
    let is_limit = |e: &amp_ir::verify::VerifyError| {
        matches!(e.kind, K::OverLimit { .. } | K::ParamTooLarge { .. } | K::ExprTooDeep { .. })
    };
    let defect = !errors.iter().all(is_limit);
    let diagnostics = errors
        .iter()
        .map(|e| {
            let node = e.node.as_ref().and_then(|n| graph.nodes.node_weight(n.index));
            let span = node.and_then(|n| n.loc).and_then(|loc| source_span(graph, map, loc)).unwrap_or(fallback);
            let label = node.map_or("the model", |n| if n.label.is_empty() { "this node" } else { n.label.as_str() });
            if is_limit(e) {
                Diagnostic::new(Code::TooLarge, span, e.kind.to_string())
                    .with_primary(format!("`{label}` lowers to a graph over Amp's limits"))
                    .with_note("the limits are in docs/limits.md")
            } else {
                let node = e.node.as_ref().map_or(String::new(), |n| format!("{n}: "));
                Diagnostic::new(Code::NotLowered, span, format!("{node}{}", e.kind))
                    .with_primary(format!("`{label}` lowers to a graph Amp cannot run"))
                    .with_note(
                        "this is a defect in Amp's lowering, not in the program: please report it with the program",
                    )
            }
        })
        .collect();
    if defect {
        CompileError::Defect(diagnostics)
    } else {
        CompileError::Refused(diagnostics)
    }
}

/// The span of a node's location: its file is an index into the graph's file names.
fn source_span(graph: &Graph, map: &SourceMap, loc: amp_ir::Loc) -> Option<amp_diagnostics::Span> {
    let name = graph.files.get(loc.file as usize)?;
    let (id, _) = map.files().find(|(_, f)| &f.name == name)?;
    Some(amp_diagnostics::Span::new(id, loc.start as usize, loc.end as usize))
}

#[cfg(test)]
mod tests {
    use super::*;
    use petgraph::visit::EdgeRef;

    /// A lowered graph the verifier rejects is reported as E0600 at the faulty node's
    /// source, marked a defect; never a crash or an uncoded message.
    #[test]
    fn a_rejected_graph_is_a_coded_error_at_the_source() {
        let source = "record R { x: f32[4], label: int }\nmodel M {\n    param head = Linear(4, 3);\n    \
                      fn forward(r: R) -> f32[3] { head(tanh(r.x)) }\n    \
                      fn loss(r: R) -> f32 { cross_entropy(forward(r), r.label) }\n}\n";
        let (map, checked) = amp_sema::check_source("m.amp", source, &amp_sema::Options::default());
        assert!(!checked.has_errors());
        let model = checked.program.models[0];
        let mut graph = lower_model(&checked.program, &map, model).expect("lowers");
        // Cut the edge into the `tanh` node: its input is then unconnected.
        let tanh = graph.nodes.node_indices().find(|&n| graph.nodes[n].label == "tanh").expect("a tanh node");
        let edge = graph.nodes.edges_directed(tanh, petgraph::Direction::Incoming).next().expect("an input").id();
        graph.nodes.remove_edge(edge);
        let errors = amp_ir::verify::verify(&graph).expect_err("the cut graph is rejected");
        let span = checked.program.components[model.0 as usize].span;
        let CompileError::Defect(diagnostics) = rejected(&graph, &map, span, errors) else {
            panic!("an unconnected input is a defect, not a refusal");
        };
        assert!(diagnostics.iter().all(|d| d.code == amp_diagnostics::Code::NotLowered));
        let at_tanh = diagnostics.iter().find(|d| d.message.contains("tanh")).expect("the tanh node is named");
        assert_eq!(&source[at_tanh.span.start as usize..at_tanh.span.end as usize], "tanh(r.x)");
    }
}
