//! `ampc rollout`: the rollout analysis of a `network` (docs/rollouts.md). Checks the
//! file, builds the network's pattern (streaming, sequential, or the sequential one with
//! edges overridden) and prints its validity, inference tableau and inference factor, or
//! every valid pattern with `--enumerate`; as a table for people or one JSON object.

use crate::{MessageFormat, Printer};
use amp_diagnostics::{Diagnostic, FileId};
use amp_sema::rollout::{
    analyse, analysis_json, enumerate_valid, enumeration_json, Analysis, Enumerated, Pattern, RolloutGraph,
};
use amp_sema::Program;
use std::path::PathBuf;
use std::process::ExitCode;

pub(crate) struct RolloutArgs {
    pub file: PathBuf,
    pub network: Option<String>,
    /// `streaming`, `sequential` or an edge list such as `a->b=1,b->b=0`.
    pub pattern: String,
    pub window: usize,
    pub enumerate: bool,
    pub defines: Vec<(String, i64)>,
}

pub(crate) fn rollout(args: RolloutArgs, printer: &Printer) -> ExitCode {
    let (map, main, checked) = match crate::check_file(&args.file, &args.defines, printer) {
        Ok(checked) => checked,
        Err(code) => return code,
    };
    let Some(graph) = network_graph(&checked.program, main, &args) else { return ExitCode::from(2) };
    let fail = |diagnostic: Diagnostic| {
        let _ = printer.print(&map, &[diagnostic]);
        ExitCode::from(1)
    };
    let json = printer.format == MessageFormat::Json;
    let output = if args.enumerate {
        match enumerate_valid(&graph) {
            Ok(found) if json => enumeration_json(&graph, &found).to_string() + "\n",
            Ok(found) => enumeration_table(&graph, &found),
            Err(e) => return fail(e.to_diagnostic(&graph)),
        }
    } else {
        let (pattern, described) = match args.pattern.as_str() {
            "streaming" => (Pattern::streaming(&graph), "streaming".to_string()),
            "sequential" => (Pattern::sequential(&graph), "sequential".to_string()),
            edges => match Pattern::with_overrides(&graph, edges) {
                Ok(p) => (p, format!("sequential with {edges}")),
                Err(e) => return fail(e.to_diagnostic(&graph)),
            },
        };
        match analyse(&graph, &pattern, args.window) {
            Ok(analysis) if json => analysis_json(&graph, &pattern, &analysis).to_string() + "\n",
            Ok(analysis) => analysis_table(&graph, &pattern, &described, &analysis),
            Err(e) => return fail(e.to_diagnostic(&graph)),
        }
    };
    print!("{output}");
    ExitCode::SUCCESS
}

/// The graph of the network asked for (default: the file's first); `None` after saying
/// why there is none, a usage error.
fn network_graph(program: &Program, main: FileId, args: &RolloutArgs) -> Option<RolloutGraph> {
    let networks: Vec<_> = program.networks.iter().filter(|n| n.span.file == main).collect();
    let found = match &args.network {
        Some(name) => networks.iter().find(|n| n.name == *name),
        None => networks.first(),
    };
    if let Some(def) = found {
        return Some(RolloutGraph::of_network(def));
    }
    let file = args.file.display();
    match &args.network {
        Some(name) => {
            let names: Vec<&str> = networks.iter().map(|n| n.name.as_str()).collect();
            eprintln!("error: no network `{name}` in `{file}` (networks: {})", names.join(", "));
        }
        None => eprintln!("error: `{file}` defines no network"),
    }
    None
}

/// The pattern edge by edge, validity, the tableau (a row per node, a column per frame)
/// and F(R).
fn analysis_table(graph: &RolloutGraph, pattern: &Pattern, described: &str, analysis: &Analysis) -> String {
    let mut out = format!("network {}, {described} pattern\n", graph.name);
    let edge_width = (0..graph.edges.len()).map(|e| graph.edge_name(e).len()).max().unwrap_or(0).max(4);
    out.push_str(&format!("  {:<edge_width$}  delay\n", "edge"));
    for e in 0..graph.edges.len() {
        let recurrent = if graph.is_recurrent(e) { "  (recurrent)" } else { "" };
        out.push_str(&format!("  {:<edge_width$}  {}{recurrent}\n", graph.edge_name(e), pattern.delay(e)));
    }
    out.push_str("valid: the undelayed edges form no cycle\n");
    let window = analysis.tableau.window;
    out.push_str(&format!(
        "inference tableau T(i, v), the update steps until frame i of v is known (window {window}):\n"
    ));
    let name_width = graph.nodes.iter().map(|n| n.name.len()).max().unwrap_or(0).max(4);
    let cell = (0..graph.nodes.len())
        .flat_map(|v| analysis.tableau.row(v).iter().map(|t| t.to_string().len()))
        .chain((0..=window).map(|i| i.to_string().len()))
        .max()
        .unwrap_or(1);
    out.push_str(&format!("  {:<name_width$}", "node"));
    for i in 0..=window {
        out.push_str(&format!("  {i:>cell$}"));
    }
    out.push('\n');
    for (v, node) in graph.nodes.iter().enumerate() {
        out.push_str(&format!("  {:<name_width$}", node.name));
        for t in analysis.tableau.row(v) {
            out.push_str(&format!("  {t:>cell$}"));
        }
        out.push('\n');
    }
    out.push_str(&format!("inference factor F(R) = {}\n", analysis.inference_factor));
    out
}

/// One line per valid pattern: F, then each edge's delay under its name.
fn enumeration_table(graph: &RolloutGraph, found: &[Enumerated]) -> String {
    let names: Vec<String> = (0..graph.edges.len()).map(|e| graph.edge_name(e)).collect();
    let total = 1u64 << graph.edges.len().min(63);
    let mut out = format!(
        "network {}: {} valid pattern{} of {total} ({} edge{})\n",
        graph.name,
        found.len(),
        if found.len() == 1 { "" } else { "s" },
        names.len(),
        if names.len() == 1 { "" } else { "s" }
    );
    out.push_str("  F(R)");
    for name in &names {
        out.push_str(&format!("  {name}"));
    }
    out.push('\n');
    for e in found {
        out.push_str(&format!("  {:>4}", e.inference_factor));
        for (i, name) in names.iter().enumerate() {
            out.push_str(&format!("  {:>width$}", e.pattern.delay(i), width = name.len()));
        }
        out.push('\n');
    }
    out
}
