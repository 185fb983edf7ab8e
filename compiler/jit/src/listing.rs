//! `ampc compile --emit clif`: the Cranelift IR of every kernel of a graph.

use crate::interp::Pass;
use crate::{CompiledGroups, GroupKernel};
use amp_ir::verify::Verified;
use std::fmt::Write as _;

/// Each distinct kernel once (forward and backward, in Cranelift's text form), preceded
/// by `;` comments naming the fusion groups that use it and their nodes; then the groups
/// the JIT refused, with the reason.
pub fn clif_listing(graph: &Verified, compiled: &CompiledGroups) -> String {
    let mut kernels: Vec<usize> = compiled.kernels.iter().map(|g| g.kernel.id()).collect();
    kernels.sort_unstable();
    kernels.dedup();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "; @{}: {} fusion group(s), {} kernel(s), {} refused",
        graph.name,
        compiled.kernels.len() + compiled.refused.len(),
        kernels.len(),
        compiled.refused.len()
    );
    for id in kernels {
        let users: Vec<&GroupKernel> = compiled.kernels.iter().filter(|g| g.kernel.id() == id).collect();
        let Some(first) = users.first() else { continue };
        let _ = writeln!(out, "\n; kernel {id}: {}", first.kernel.spec().describe());
        for user in &users {
            let group = &user.group;
            let inputs: Vec<String> = group.inputs.iter().map(|p| format!("%{}#{}", p.node.index(), p.port)).collect();
            let outputs: Vec<String> = group.outputs.iter().map(|n| format!("%{}", n.index())).collect();
            let _ = writeln!(
                out,
                "; fusion group {}: inputs {}; outputs {}",
                group.id,
                inputs.join(" "),
                outputs.join(" ")
            );
            for &index in &group.nodes {
                let node = &graph.nodes[index];
                let args: Vec<String> = (0..node.inputs.len())
                    .map(|port| match graph.input_edge(index, port as u16) {
                        Some((source, edge)) => format!("%{}#{}", source.index(), edge.from_port),
                        None => "_".to_string(),
                    })
                    .collect();
                let op = crate::Elementwise::of_op(&node.op).map_or(node.op.keyword(), |op| op.name());
                let _ = writeln!(out, ";   %{} = {op}({}) {:?}", index.index(), args.join(", "), node.label);
            }
        }
        for pass in [Pass::Forward, Pass::Backward] {
            let _ = writeln!(out, "{}", first.kernel.clif(pass));
        }
    }
    for refused in &compiled.refused {
        let _ = writeln!(out, "; refused: {refused}");
    }
    out
}
