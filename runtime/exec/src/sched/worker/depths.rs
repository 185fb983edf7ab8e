//! Static analysis of the program for the agenda: each node's depth.

use crate::load::program::Program;

/// Each node's depth, which orders the agenda (see `sched::agenda`): first the place of
/// its strongly connected component in a topological order of the components (a loop or
/// a recursion is one component, before every node its exit feeds: a loop's cell before
/// the classifier after it), then, within a component, its place in the reverse
/// postorder of a depth-first search from the source (every node after the nodes that
/// feed it but for a cycle's edge back). `u64::MAX` for a node the program does not have;
/// a replica has its node's.
pub(super) fn depths(program: &Program) -> Vec<u64> {
    let consumers = |i: usize| -> Vec<usize> {
        let node = program.nodes.get(i).and_then(Option::as_ref);
        node.map(|node| node.consumers.iter().flatten().map(|&(c, _)| c as usize).collect()).unwrap_or_default()
    };
    let components = components(program.nodes.len(), program.source() as usize, &consumers);
    let order = reverse_postorder(program.nodes.len(), program.source() as usize, &consumers);
    let mut depth: Vec<u64> = components
        .iter()
        .zip(&order)
        .map(|(&c, &o)| if c == u32::MAX { u64::MAX } else { (u64::from(c) << 32) | u64::from(o) })
        .collect();
    for (i, node) in program.nodes.iter().enumerate() {
        if let Some(master) = node.as_ref().and_then(|n| n.replica_of) {
            depth[i] = depth.get(master as usize).copied().unwrap_or(u64::MAX);
        }
    }
    depth
}

/// The place of each of `n` nodes' strongly connected component in a topological order of
/// the components (Tarjan's algorithm, iterative for graphs deeper than a thread's stack;
/// searched from `source` first, then from every node it does not reach).
fn components(n: usize, source: usize, consumers: &dyn Fn(usize) -> Vec<usize>) -> Vec<u32> {
    const NONE: u32 = u32::MAX;
    let (mut index, mut low, mut component) = (vec![NONE; n], vec![0u32; n], vec![NONE; n]);
    let (mut on_stack, mut stack) = (vec![false; n], Vec::new());
    let (mut next, mut found) = (0u32, 0u32);
    // Each entry: a node, its consumers and how many of them it has visited.
    let mut work: Vec<(usize, Vec<usize>, usize)> = Vec::new();
    for root in std::iter::once(source).chain(0..n).filter(|&r| r < n) {
        if index[root] != NONE {
            continue;
        }
        index[root] = next;
        low[root] = next;
        next += 1;
        stack.push(root);
        on_stack[root] = true;
        work.push((root, consumers(root), 0));
        while let Some(top) = work.last_mut() {
            let v = top.0;
            let w = top.1.get(top.2).copied();
            top.2 += 1;
            match w {
                Some(w) if w >= n => {}
                Some(w) if index[w] == NONE => {
                    index[w] = next;
                    low[w] = next;
                    next += 1;
                    stack.push(w);
                    on_stack[w] = true;
                    work.push((w, consumers(w), 0));
                }
                Some(w) => {
                    if on_stack[w] {
                        low[v] = low[v].min(index[w]);
                    }
                }
                None => {
                    work.pop();
                    if let Some(parent) = work.last() {
                        low[parent.0] = low[parent.0].min(low[v]);
                    }
                    if low[v] == index[v] {
                        while let Some(w) = stack.pop() {
                            on_stack[w] = false;
                            component[w] = found;
                            if w == v {
                                break;
                            }
                        }
                        found += 1;
                    }
                }
            }
        }
    }
    // Tarjan completes a component after every component it reaches: reversed, a
    // component comes before those it feeds.
    component.iter().map(|&c| if c == NONE { NONE } else { found - 1 - c }).collect()
}

/// Each of `n` nodes' place in the reverse postorder of a depth-first search from
/// `source` (then from every node it does not reach), iterative.
fn reverse_postorder(n: usize, source: usize, consumers: &dyn Fn(usize) -> Vec<usize>) -> Vec<u32> {
    let mut seen = vec![false; n];
    let mut postorder = Vec::with_capacity(n);
    let mut work: Vec<(usize, Vec<usize>, usize)> = Vec::new();
    for root in std::iter::once(source).chain(0..n).filter(|&r| r < n) {
        if seen[root] {
            continue;
        }
        seen[root] = true;
        work.push((root, consumers(root), 0));
        while let Some(top) = work.last_mut() {
            let w = top.1.get(top.2).copied();
            top.2 += 1;
            match w {
                Some(w) if w < n && !seen[w] => {
                    seen[w] = true;
                    work.push((w, consumers(w), 0));
                }
                Some(_) => {}
                None => {
                    postorder.push(top.0);
                    work.pop();
                }
            }
        }
    }
    let mut order = vec![u32::MAX; n];
    for (rank, &node) in postorder.iter().rev().enumerate() {
        order[node] = u32::try_from(rank).unwrap_or(u32::MAX);
    }
    order
}

#[cfg(test)]
mod tests {
    use super::{components, reverse_postorder};

    /// A loop (phi 1, cell 2 back to phi) whose exit (3) feeds a classifier (4), with the
    /// search visiting the exit before the loop's body or after it.
    #[test]
    fn a_loop_comes_before_what_its_exit_feeds() {
        for body_first in [false, true] {
            let edges = |i: usize| -> Vec<usize> {
                match i {
                    0 => vec![1],
                    1 if body_first => vec![2, 3],
                    1 => vec![3, 2],
                    2 => vec![1],
                    3 => vec![4],
                    _ => vec![],
                }
            };
            let c = components(5, 0, &edges);
            assert_eq!(c[1], c[2], "the loop is one component");
            assert!(c[0] < c[1] && c[2] < c[3] && c[3] < c[4], "{c:?}");
            let order = reverse_postorder(5, 0, &edges);
            assert!(order[1] < order[2] && order[1] < order[3] && order[3] < order[4], "{order:?}");
        }
    }

    /// Nodes the source does not reach still get a place, and a consumer past the
    /// graph is ignored.
    #[test]
    fn every_node_gets_a_place() {
        let edges = |i: usize| -> Vec<usize> {
            match i {
                0 => vec![1, 9],
                2 => vec![1],
                _ => vec![],
            }
        };
        let c = components(3, 0, &edges);
        assert!(c.iter().all(|&c| c < 3), "{c:?}");
        assert!(c[2] < c[1] && c[0] < c[1]);
        let order = reverse_postorder(3, 0, &edges);
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, [0, 1, 2]);
    }
}
