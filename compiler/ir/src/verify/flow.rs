//! Reachability and defined-before-use.
//!
//! Every node is reachable from the source; every node reaches a loss or a sink (else it
//! is dead). A node that reaches a sink and no loss (a prediction the loss does not use)
//! is forward-only: the executor runs it without a cache or a backward pass, and answers
//! its loss-reaching producers with a zero gradient (`Graph::reaches_loss`). Every field a
//! node reads is written on every path from the source to it.

use super::ops::attribute_write;
use super::structure::Adjacency;
use super::{Checker, VerifyErrorKind};
use crate::{FieldId, Op};
use petgraph::stable_graph::NodeIndex;

/// Marks every node reachable from `starts` through `next`.
fn reach<'a>(bound: usize, starts: impl Iterator<Item = usize>, next: impl Fn(usize) -> &'a [usize]) -> Vec<bool> {
    let mut seen = vec![false; bound];
    let mut stack: Vec<usize> = Vec::new();
    for s in starts {
        if let Some(mark) = seen.get_mut(s) {
            if !*mark {
                *mark = true;
                stack.push(s);
            }
        }
    }
    while let Some(n) = stack.pop() {
        for &m in next(n) {
            if let Some(mark) = seen.get_mut(m) {
                if !*mark {
                    *mark = true;
                    stack.push(m);
                }
            }
        }
    }
    seen
}

pub(super) fn check_reachability(cx: &mut Checker, adjacency: &Adjacency, source: Option<usize>) {
    let bound = cx.bound();
    let from_source = source.map(|s| reach(bound, std::iter::once(s), |n| adjacency.succs(n)));
    let is_end = |op: &Op| matches!(op, Op::Loss(_) | Op::Sink { .. });
    let ends: Vec<usize> = cx.node_indices().filter(|(_, n)| is_end(&n.op)).map(|(i, _)| i).collect();
    let to_end = reach(bound, ends.into_iter(), |n| adjacency.preds(n));
    for i in 0..bound {
        let Some(node) = cx.node(i) else { continue };
        let is_source = matches!(node.op, Op::Source);
        if let Some(from_source) = &from_source {
            if !is_source && !from_source[i] {
                cx.report(i, VerifyErrorKind::UnreachableFromSource);
            }
        }
        if is_source || is_end(&node.op) {
            continue;
        }
        if !to_end[i] {
            cx.report(i, VerifyErrorKind::Dead);
        }
    }
}

/// Up to 64 of the fields some node reads, so that one `u64` per node holds the group's
/// dataflow facts.
struct FieldGroup {
    /// Bit b stands for `fields[b]`.
    fields: Vec<FieldId>,
    /// The (node, bit) pairs that read one of them, in node order.
    readers: Vec<(usize, u32)>,
}

fn group_reads(cx: &Checker) -> Vec<FieldGroup> {
    let fields = cx.field_count();
    // Position of each read field in the list of read fields, in order of first reader.
    let mut position: Vec<Option<usize>> = vec![None; fields];
    let mut read_fields: Vec<FieldId> = Vec::new();
    let mut uses: Vec<(usize, usize)> = Vec::new();
    for (i, node) in cx.node_indices() {
        for &f in &node.reads {
            let Some(slot) = position.get_mut(usize::from(f.0)) else { continue };
            let pos = *slot.get_or_insert_with(|| {
                read_fields.push(f);
                read_fields.len() - 1
            });
            uses.push((i, pos));
        }
    }
    let mut groups: Vec<FieldGroup> =
        read_fields.chunks(64).map(|chunk| FieldGroup { fields: chunk.to_vec(), readers: Vec::new() }).collect();
    for (node, pos) in uses {
        if let Some(group) = groups.get_mut(pos / 64) {
            group.readers.push((node, (pos % 64) as u32));
        }
    }
    groups
}

/// For each group of read fields, a forward dataflow over the bits "possibly not yet
/// written" (the complement of "definitely written", so the lattice starts empty for
/// nodes no message has reached): the source starts with every field unwritten but the
/// one it writes; a node's input is the union over its predecessors' outputs; its output
/// clears the field it writes. A bit only ever turns on, so a worklist reaches the
/// fixpoint after at most 64 changes per node: O(64 * edges) per group.
pub(super) fn check_defined_before_use(cx: &mut Checker, adjacency: &Adjacency, source: usize) {
    let bound = cx.bound();
    let fields = cx.field_count();
    let writes: Vec<Option<FieldId>> =
        (0..bound).map(|i| cx.node(i).and_then(|n| attribute_write(&n.op)).map(|(f, _)| f)).collect();
    let mut bit_of: Vec<Option<u32>> = vec![None; fields];
    let mut unset_in = vec![0u64; bound];
    let mut unset_out = vec![0u64; bound];
    let mut queued = vec![false; bound];
    let mut worklist: Vec<usize> = Vec::new();
    for FieldGroup { fields: group, readers } in group_reads(cx) {
        for (b, f) in group.iter().enumerate() {
            bit_of[usize::from(f.0)] = Some(b as u32);
        }
        let kill = |n: usize| -> u64 {
            match writes.get(n).copied().flatten().and_then(|f| bit_of.get(usize::from(f.0)).copied().flatten()) {
                Some(b) => 1u64 << b,
                None => 0,
            }
        };
        unset_in.iter_mut().for_each(|w| *w = 0);
        unset_out.iter_mut().for_each(|w| *w = 0);
        let all = if group.len() >= 64 { u64::MAX } else { (1u64 << group.len()) - 1 };
        unset_in[source] = all;
        unset_out[source] = all & !kill(source);
        worklist.push(source);
        queued[source] = true;
        while let Some(n) = worklist.pop() {
            queued[n] = false;
            let out = unset_out[n];
            for &s in adjacency.succs(n) {
                if s == source {
                    continue;
                }
                let grown = unset_in[s] | out;
                if grown != unset_in[s] {
                    unset_in[s] = grown;
                    let next = grown & !kill(s);
                    if next != unset_out[s] {
                        unset_out[s] = next;
                        if !queued[s] {
                            queued[s] = true;
                            worklist.push(s);
                        }
                    }
                }
            }
        }
        report_unwritten(cx, adjacency, &group, &readers, &unset_in, &unset_out);
        for f in &group {
            bit_of[usize::from(f.0)] = None;
        }
    }
}

/// One error per (node, field) read before it is written, naming a predecessor on whose
/// path the field is missing.
fn report_unwritten(
    cx: &mut Checker,
    adjacency: &Adjacency,
    group: &[FieldId],
    readers: &[(usize, u32)],
    unset_in: &[u64],
    unset_out: &[u64],
) {
    // Readers are grouped by node (collected node by node), so each node's bits are
    // gathered first and its predecessors scanned once.
    let mut k = 0;
    while k < readers.len() {
        let node = readers[k].0;
        let mut read_bits = 0u64;
        while k < readers.len() && readers[k].0 == node {
            read_bits |= 1u64 << readers[k].1;
            k += 1;
        }
        let missing = read_bits & unset_in.get(node).copied().unwrap_or(0);
        if missing == 0 {
            continue;
        }
        let mut via: [Option<usize>; 64] = [None; 64];
        let mut unexplained = missing;
        for &p in adjacency.preds(node) {
            let explained = unexplained & unset_out.get(p).copied().unwrap_or(0);
            let mut bits = explained;
            while bits != 0 {
                let b = bits.trailing_zeros() as usize;
                via[b] = Some(p);
                bits &= bits - 1;
            }
            unexplained &= !explained;
            if unexplained == 0 {
                break;
            }
        }
        let mut bits = missing;
        while bits != 0 {
            let b = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            let Some(&field) = group.get(b) else { continue };
            let field = cx.field_ref(field);
            cx.report(node, VerifyErrorKind::ReadBeforeWrite { field, via: via[b].map(NodeIndex::new) });
        }
    }
}
