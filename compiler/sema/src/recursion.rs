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
    // reach[a][b]: a can call b through some chain of calls.
    let mut reach = vec![vec![false; n]; n];
    for c in calls {
        if (c.caller as usize) < n && (c.callee as usize) < n {
            reach[c.caller as usize][c.callee as usize] = true;
        }
    }
    for k in 0..n {
        let via = reach[k].clone();
        for row in reach.iter_mut() {
            if row[k] {
                for (target, reachable) in row.iter_mut().zip(&via) {
                    *target |= *reachable;
                }
            }
        }
    }
    for c in calls {
        let (caller, callee) = (c.caller as usize, c.callee as usize);
        if caller >= n || callee >= n || !reach[callee][caller] {
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
                    .with_note("recursion must follow the data: pass a field bound by `match` on a recursive enum, e.g. `encode(left)`")
                    .with_help("loops over a count are written `for i in 0..n { ... }`"),
            );
        }
    }
}
