//! The structural-recursion rule: a function that can reach itself through calls must,
//! at every call inside the cycle, pass a part of its input taken apart by `match` (or a
//! field of it). Such recursion follows the data and lowers to a static traversal graph;
//! anything else could loop forever and has no static graph.

use crate::body::Call;
use crate::collect::Checker;
use crate::typed::ComponentId;
use amp_diagnostics::{Code, Diagnostic};

pub(crate) fn check_recursion(ck: &mut Checker, comp: ComponentId, calls: &[Call]) {
    let n = ck.program.components[comp.0 as usize].fns.len();
    if n == 0 || calls.is_empty() {
        return;
    }
    // A call is part of a cycle when its callee can reach its caller again: both are in
    // one strongly connected component of the call graph. Components, not a reachability
    // matrix: linear in functions and calls (a model of thousands of functions).
    let component = strongly_connected(n, calls);
    for c in calls {
        let (caller, callee) = (c.caller as usize, c.callee as usize);
        if caller >= n || callee >= n || component[caller] != component[callee] {
            continue;
        }
        ck.program.components[comp.0 as usize].fns[caller].recursive = true;
        if !c.structural {
            let def = &ck.program.components[comp.0 as usize].fns[callee];
            let (name, def_span) = (def.name.clone(), def.span);
            ck.error(
                Diagnostic::new(Code::NonStructuralRecursion, c.span, format!("recursive call of `{name}` is not structural"))
                    .with_primary("no argument is a part of the caller's input")
                    .with_label(def_span, format!("`{name}` is defined here"))
                    .with_note("recursion must follow the data: pass a field bound by `match` on a recursive enum, e.g. `encode(left)`, or an element of one, e.g. `children.map(|c| encode(c))`")
                    .with_help("loops over a count are written `for i in 0..n { ... }`"),
            );
        }
    }
}

/// The strongly connected component of each of `n` functions under `calls` (Kosaraju,
/// iterative: no recursion depth grows with the input).
fn strongly_connected(n: usize, calls: &[Call]) -> Vec<usize> {
    let mut forward = vec![Vec::new(); n];
    let mut backward = vec![Vec::new(); n];
    for c in calls {
        let (a, b) = (c.caller as usize, c.callee as usize);
        if a < n && b < n {
            forward[a].push(b);
            backward[b].push(a);
        }
    }
    // First pass: functions in order of finishing.
    let mut finished = Vec::with_capacity(n);
    let mut visited = vec![false; n];
    for root in 0..n {
        if visited[root] {
            continue;
        }
        visited[root] = true;
        let mut stack = vec![(root, 0usize)];
        while let Some((node, next)) = stack.pop() {
            match forward[node].get(next) {
                Some(&child) => {
                    stack.push((node, next + 1));
                    if !visited[child] {
                        visited[child] = true;
                        stack.push((child, 0));
                    }
                }
                None => finished.push(node),
            }
        }
    }
    // Second pass, on the reversed graph in reverse finishing order.
    let mut component = vec![usize::MAX; n];
    for (id, &root) in finished.iter().rev().enumerate() {
        if component[root] != usize::MAX {
            continue;
        }
        component[root] = id;
        let mut stack = vec![root];
        while let Some(node) = stack.pop() {
            for &parent in &backward[node] {
                if component[parent] == usize::MAX {
                    component[parent] = id;
                    stack.push(parent);
                }
            }
        }
    }
    component
}
