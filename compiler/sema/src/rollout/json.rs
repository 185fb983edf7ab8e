//! The rollout analysis as JSON: what `ampc rollout --message-format json` prints and the
//! Python package's `Model.rollout` returns.

use super::{Analysis, Enumerated, Pattern, RolloutGraph};
use serde_json::{json, Map, Value};

/// Each edge's delay, by the edge's name.
pub fn pattern_json(graph: &RolloutGraph, pattern: &Pattern) -> Value {
    let delays: Map<String, Value> =
        (0..graph.edges.len()).map(|e| (graph.edge_name(e), json!(pattern.delay(e)))).collect();
    Value::Object(delays)
}

/// `ampc rollout --message-format json`'s object for a valid pattern: its delays, the
/// window, the inference factor and the tableau (a row per node).
pub fn analysis_json(graph: &RolloutGraph, pattern: &Pattern, analysis: &Analysis) -> Value {
    let tableau: Map<String, Value> =
        graph.nodes.iter().enumerate().map(|(v, n)| (n.name.clone(), json!(analysis.tableau.row(v)))).collect();
    json!({
        "network": graph.name,
        "pattern": pattern_json(graph, pattern),
        "valid": true,
        "window": analysis.tableau.window,
        "inference_factor": analysis.inference_factor,
        "tableau": tableau,
    })
}

/// `ampc rollout --enumerate --message-format json`'s object: every valid pattern with
/// its inference factor.
pub fn enumeration_json(graph: &RolloutGraph, found: &[Enumerated]) -> Value {
    let patterns: Vec<Value> = found
        .iter()
        .map(|e| json!({ "pattern": pattern_json(graph, &e.pattern), "inference_factor": e.inference_factor }))
        .collect();
    json!({ "network": graph.name, "valid_patterns": found.len(), "patterns": patterns })
}
