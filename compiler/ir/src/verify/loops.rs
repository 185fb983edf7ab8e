//! Loops: every cycle has a header, an exit and a step, and every node inside a loop that
//! keeps something under its key tells the loop's iterations apart.
//!
//! A loop is a non-trivial strongly connected component. It must contain a header that
//! admits the entry and the back edge, a `cond` or `switch` (the exit) and an `isu` (the
//! step); otherwise messages circulate forever or deadlock. The header is a `phi`, or a
//! `group` whose gate enters from outside the loop: a tree traversal joins a node's
//! children's results with the node's own control, and with one variant it has no `phi`.
//!
//! Loops nest: the inner loop of `for i { for j { .. } }` lies inside the outer loop's
//! component. To find it, remove the edges from inside the component into its headers
//! (the phis entered from outside) and take the components of what remains (the loop
//! nesting forest of Havlak and Ramalingam). Each loop has a *counter*: among the fields
//! its own `isu`s write (not those of inner loops), those with the `counter` role that an
//! `isu` steps from their own value (`t := t + 1`: a `for` or `while` iteration count);
//! when there are none (the traversal of a tree), those its exit tests; when no exit tests
//! one of them, those an `isu` steps from their own value (`n := parent(n)`); failing
//! that, every field its own `isu`s write. A node that needs a key needs, besides the
//! instance, the counter of its loop and of every loop around it. This differs on
//! purpose from "every field an `isu` in the component writes": the outer body's nodes
//! after an inner loop do not vary with the inner counter (the inner loop's entry and
//! exit `isu`s reset it), and the lowering keys them by the outer counters only.

use super::ops::{expr_fields, key_reason};
use super::structure::Adjacency;
use super::{Checker, FieldRef, LoopPart, VerifyErrorKind};
use crate::{FieldId, FieldRole, Op};
use petgraph::algo::kosaraju_scc;
use petgraph::graph::{DiGraph, NodeIndex as LocalIndex};
use petgraph::stable_graph::NodeIndex;

/// Loops nested deeper than this are refused: each level costs a pass over its loop.
pub use crate::limits::MAX_LOOP_DEPTH;

/// How many members a loop error lists.
const LISTED_MEMBERS: usize = 8;

/// A loop counter and one `isu` that steps it.
#[derive(Clone, Copy)]
struct Counter {
    field: FieldId,
    step: usize,
}

/// A loop still to check, with the counters of the loops around it.
struct Loop {
    members: Vec<usize>,
    depth: usize,
    outer_counters: Vec<Counter>,
}

/// Per-node and per-field marks, stamped with a fresh number per loop (or per node) so
/// that they never need clearing.
struct Marks {
    stamp: usize,
    member: Vec<usize>,
    header: Vec<usize>,
    nested: Vec<usize>,
    local: Vec<usize>,
    exit_field: Vec<usize>,
    counter_field: Vec<usize>,
    key_stamp: usize,
    key_field: Vec<usize>,
}

pub(super) fn check_loops(cx: &mut Checker, adjacency: &Adjacency) {
    let bound = cx.bound();
    let fields = cx.field_count();
    let mut marks = Marks {
        stamp: 1,
        member: vec![0; bound],
        header: vec![0; bound],
        nested: vec![0; bound],
        local: vec![0; bound],
        exit_field: vec![0; fields],
        counter_field: vec![0; fields],
        key_stamp: 0,
        key_field: vec![0; fields],
    };
    let all: Vec<usize> = cx.node_indices().map(|(i, _)| i).collect();
    for &i in &all {
        marks.member[i] = marks.stamp;
    }
    let mut work: Vec<Loop> = components(adjacency, &all, &mut marks)
        .into_iter()
        .filter(|c| c.len() > 1)
        .map(|members| Loop { members, depth: 1, outer_counters: Vec::new() })
        .collect();
    while let Some(lp) = work.pop() {
        work.extend(check_loop(cx, adjacency, &mut marks, lp));
    }
}

/// The strongly connected components of the subgraph on `members` (those marked with the
/// current stamp), leaving out edges into the nodes marked as headers.
fn components(adjacency: &Adjacency, members: &[usize], marks: &mut Marks) -> Vec<Vec<usize>> {
    let stamp = marks.stamp;
    let mut sub: DiGraph<(), ()> = DiGraph::with_capacity(members.len(), 0);
    for (k, &m) in members.iter().enumerate() {
        sub.add_node(());
        if let Some(slot) = marks.local.get_mut(m) {
            *slot = k;
        }
    }
    let is_member = |marks: &Marks, n: usize| marks.member.get(n) == Some(&stamp);
    for (k, &m) in members.iter().enumerate() {
        for &s in adjacency.succs(m) {
            if is_member(marks, s) && marks.header.get(s) != Some(&stamp) {
                if let Some(&local) = marks.local.get(s) {
                    sub.add_edge(LocalIndex::new(k), LocalIndex::new(local), ());
                }
            }
        }
    }
    kosaraju_scc(&sub)
        .into_iter()
        .map(|c| c.into_iter().filter_map(|l| members.get(l.index()).copied()).collect())
        .collect()
}

fn op_at<'g>(cx: &Checker<'g>, n: usize) -> Option<&'g Op> {
    cx.node(n).map(|node| &node.op)
}

/// Whether `n` can head a loop: a `phi`, or a `group` whose gate (input 1) comes from
/// outside it.
fn is_join(cx: &Checker, n: usize, inside: impl Fn(usize) -> bool) -> bool {
    use petgraph::visit::EdgeRef;
    match op_at(cx, n) {
        Some(Op::Phi { .. }) => true,
        Some(Op::Group { .. }) => {
            let mut edges = cx.graph.nodes.edges_directed(NodeIndex::new(n), petgraph::Direction::Incoming);
            edges.find(|e| e.weight().to_port == 1).is_some_and(|e| !inside(e.source().index()))
        }
        _ => false,
    }
}

/// Checks one loop; returns the loops nested in it.
fn check_loop(cx: &mut Checker, adjacency: &Adjacency, marks: &mut Marks, lp: Loop) -> Vec<Loop> {
    marks.stamp += 1;
    let stamp = marks.stamp;
    for &m in &lp.members {
        marks.member[m] = stamp;
    }
    let first = lp.members.iter().copied().min().unwrap_or(0);
    let is_member = |marks: &Marks, n: usize| marks.member.get(n) == Some(&stamp);

    // A header, an exit and a step.
    let has = |pred: &dyn Fn(&Op) -> bool| lp.members.iter().any(|&m| op_at(cx, m).is_some_and(pred));
    let joins: Vec<usize> = lp.members.iter().copied().filter(|&m| is_join(cx, m, |g| is_member(marks, g))).collect();
    let missing: Vec<LoopPart> = [
        (LoopPart::Header, !joins.is_empty()),
        (LoopPart::Exit, has(&|o| matches!(o, Op::Cond { .. } | Op::Switch { .. }))),
        (LoopPart::Step, has(&|o| matches!(o, Op::Isu { .. }))),
    ]
    .into_iter()
    .filter(|&(_, present)| !present)
    .map(|(part, _)| part)
    .collect();
    if !missing.is_empty() {
        let mut listed = lp.members.clone();
        listed.sort_unstable();
        listed.truncate(LISTED_MEMBERS);
        let listed: Vec<NodeIndex> = listed.into_iter().map(NodeIndex::new).collect();
        for part in missing {
            let kind = VerifyErrorKind::LoopMissing { part, size: lp.members.len(), members: listed.clone() };
            cx.report(first, kind);
        }
    }

    // Headers: the joins entered from outside; failing those, any node entered from
    // outside; failing those (a loop nothing enters), its phis.
    let entered = |marks: &Marks, n: usize| adjacency.preds(n).iter().any(|&p| !is_member(marks, p));
    let is_phi = |n: usize| matches!(op_at(cx, n), Some(Op::Phi { .. }));
    let mut headers: Vec<usize> = joins.into_iter().filter(|&m| entered(marks, m)).collect();
    if headers.is_empty() {
        headers = lp.members.iter().copied().filter(|&m| entered(marks, m)).collect();
    }
    if headers.is_empty() {
        headers = lp.members.iter().copied().filter(|&m| is_phi(m)).collect();
    }
    for &h in &headers {
        marks.header[h] = stamp;
    }
    let nested: Vec<Vec<usize>> = if headers.is_empty() {
        Vec::new()
    } else {
        components(adjacency, &lp.members, marks).into_iter().filter(|c| c.len() > 1).collect()
    };
    for &n in nested.iter().flatten() {
        marks.nested[n] = stamp;
    }
    let own = |marks: &Marks, n: usize| marks.nested.get(n) != Some(&stamp);

    // The loop's counter: fields its own isus write that its own exits test.
    let mut exit_fields = Vec::new();
    for &m in &lp.members {
        let tested = match op_at(cx, m) {
            Some(Op::Cond { pred }) => pred,
            Some(Op::Switch { index, .. }) => index,
            _ => continue,
        };
        if own(marks, m) && adjacency.succs(m).iter().any(|&s| !is_member(marks, s)) {
            expr_fields(&mut vec![tested], &mut exit_fields);
        }
    }
    for f in &exit_fields {
        if let Some(mark) = marks.exit_field.get_mut(usize::from(f.0)) {
            *mark = stamp;
        }
    }
    let steps: Vec<Counter> = lp
        .members
        .iter()
        .filter(|&&m| own(marks, m))
        .filter_map(|&m| match op_at(cx, m) {
            Some(Op::Isu { field, .. }) if usize::from(field.0) < cx.field_count() => {
                Some(Counter { field: *field, step: m })
            }
            _ => None,
        })
        .collect();
    // Steps proper: isus whose new value reads the field they write (`t := t + 1`,
    // `n := parent(n)`), not the entry and exit isus of inner loops (`t := 0`, `t := -1`).
    let graph = cx.graph;
    let stepping = |c: &Counter| match op_at(cx, c.step) {
        Some(Op::Isu { value, .. }) => {
            let mut read = Vec::new();
            expr_fields(&mut vec![value], &mut read);
            read.contains(&c.field)
        }
        _ => false,
    };
    let counting: Vec<Counter> = steps
        .iter()
        .copied()
        .filter(|c| stepping(c) && graph.field(c.field).is_some_and(|f| f.role == FieldRole::Counter))
        .collect();
    let tested: Vec<Counter> =
        steps.iter().copied().filter(|c| marks.exit_field.get(usize::from(c.field.0)) == Some(&stamp)).collect();
    // A traversal whose results all leave through other nodes (a result used only by the
    // loss, none returned at the root) has no exit testing its node field: its steps
    // proper (`n := parent(n)`) still tell its iterations apart, not the call-site field
    // set on the way.
    let stepped: Vec<Counter> = steps.iter().copied().filter(|c| stepping(c)).collect();
    let own_counters = if !counting.is_empty() {
        counting
    } else if !tested.is_empty() {
        tested
    } else if !stepped.is_empty() {
        stepped
    } else {
        steps
    };
    let mut counters = lp.outer_counters;
    for c in &counters {
        marks.counter_field[usize::from(c.field.0)] = stamp;
    }
    for c in own_counters {
        let mark = &mut marks.counter_field[usize::from(c.field.0)];
        if *mark != stamp {
            *mark = stamp;
            counters.push(c);
        }
    }

    // Every own node that needs a key has every counter in it.
    for &m in &lp.members {
        let Some(node) = cx.node(m) else { continue };
        if !own(marks, m) {
            continue;
        }
        let Some(reason) = key_reason(node, adjacency.fans_out(m)) else { continue };
        marks.key_stamp += 1;
        let mut present = 0;
        for f in &node.key {
            if let Some(seen) = marks.key_field.get_mut(usize::from(f.0)) {
                if *seen != marks.key_stamp {
                    *seen = marks.key_stamp;
                    present += usize::from(marks.counter_field[usize::from(f.0)] == stamp);
                }
            }
        }
        if present < counters.len() {
            // At most `present` counters are in the key, so one of the first `present + 1` is not.
            let absent = counters.iter().find(|c| marks.key_field[usize::from(c.field.0)] != marks.key_stamp);
            if let Some(absent) = absent {
                let key: Vec<FieldRef> = node.key.iter().map(|&f| cx.field_ref(f)).collect();
                let kind = VerifyErrorKind::KeyMissingCounter {
                    reason,
                    key,
                    counter: cx.field_ref(absent.field),
                    step: NodeIndex::new(absent.step),
                    more: counters.len() - present - 1,
                };
                cx.report(m, kind);
            }
        }
    }

    if nested.is_empty() {
        return Vec::new();
    }
    if lp.depth >= MAX_LOOP_DEPTH {
        cx.report(first, VerifyErrorKind::LoopTooDeep { limit: MAX_LOOP_DEPTH });
        return Vec::new();
    }
    nested.into_iter().map(|members| Loop { members, depth: lp.depth + 1, outer_counters: counters.clone() }).collect()
}
