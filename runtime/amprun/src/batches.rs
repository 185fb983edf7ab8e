//! Batch sizes for `--profile`: rows per call by kind of node and direction, from the
//! executor's trace events (one event per call a worker timed).
//!
//! A call's rows are its messages' rows (`TraceEvent::rows`: a batched map's message
//! carries one per element, any other message one). The profile file gets, beside the
//! planner's per-node entries, a `batches` list with one object per kind and direction:
//!
//! ```json
//! {"kind": "linear", "work": "forward", "calls": 1200, "rows": 30000, "messages": 30000,
//!  "mean_rows": 25.0, "histogram": [{"rows": "1", "calls": 10}, {"rows": "2", ...},
//!  {"rows": "3-4", ...}, ..., {"rows": "129+", ...}]}
//! ```
//!
//! and the run's summary prints the mean and the median bucket per kind. A node's kind is
//! its op's keyword (`linear`, `embedding`, `phi`, ...), `fused` for a fused unit of
//! elementwise nodes run as one kernel, `chain` for a chain of routing nodes run as one
//! node; a replica counts as its node.
//!
//! The same events give the `time` object: where the workers' time went, every second of
//! it in one bucket. Each kind's calls (forward and backward) are a bucket; `updates` are
//! the parameter updates; `between nodes` is the rest of the time a worker was not waiting
//! (taking messages off its queues, keys, credits, sending, the agenda, and the tracing
//! itself: two clock reads a call); `waiting` is a worker's time with nothing to do. The
//! buckets add up to the workers times the training wall time:
//!
//! ```json
//! {"workers": 1, "wall_s": 0.31, "instances": 2000, "buckets": [{"bucket": "linear",
//!  "s": 0.09, "us_per_instance": 45.0, "share": 0.29}, ..., {"bucket": "between nodes",
//!  ...}, {"bucket": "updates", ...}, {"bucket": "waiting", ...}]}
//! ```

use amp_exec::{TraceEvent, TraceKind};
use amp_ir::Graph;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};

/// Histogram buckets: calls of 1, 2, 3–4, 5–8, ... rows; the last holds everything above.
const BUCKETS: usize = 9;

/// The bucket of a call of `rows` rows (0 rows, as a call of unit messages, counts as 1).
fn bucket(rows: u64) -> usize {
    let rows = rows.max(1);
    // 1 → 0, 2 → 1, 3..=4 → 2, 5..=8 → 3, ...
    let b = (u64::BITS - (rows - 1).leading_zeros()) as usize;
    b.min(BUCKETS - 1)
}

/// The rows bucket `b` stands for, as printed.
fn bucket_label(b: usize) -> String {
    match b {
        0 => "1".to_string(),
        1 => "2".to_string(),
        b if b == BUCKETS - 1 => format!("{}+", (1u64 << (b - 1)) + 1),
        b => format!("{}-{}", (1u64 << (b - 1)) + 1, 1u64 << b),
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Tally {
    calls: u64,
    /// The calls' time.
    ns: u64,
    rows: u64,
    messages: u64,
    histogram: [u64; BUCKETS],
}

impl Tally {
    fn add(&mut self, rows: u64, messages: u64, ns: u64) {
        self.calls += 1;
        self.ns = self.ns.saturating_add(ns);
        self.rows = self.rows.saturating_add(rows);
        self.messages = self.messages.saturating_add(messages);
        self.histogram[bucket(rows)] += 1;
    }

    fn merge(&mut self, other: &Tally) {
        self.calls += other.calls;
        self.ns = self.ns.saturating_add(other.ns);
        self.rows = self.rows.saturating_add(other.rows);
        self.messages = self.messages.saturating_add(other.messages);
        self.histogram.iter_mut().zip(other.histogram).for_each(|(a, b)| *a += b);
    }

    fn mean(&self) -> f64 {
        if self.calls == 0 {
            0.0
        } else {
            self.rows as f64 / self.calls as f64
        }
    }

    /// The bucket holding the median call.
    fn median_bucket(&self) -> usize {
        let half = self.calls.div_ceil(2);
        let mut seen = 0;
        for (b, &n) in self.histogram.iter().enumerate() {
            seen += n;
            if seen >= half && n > 0 {
                return b;
            }
        }
        0
    }
}

/// One bucket of the `time` object: its seconds over all workers, per instance, and its
/// share of the whole.
struct Bucket {
    name: String,
    s: f64,
    us_per_instance: f64,
    share: f64,
}

/// Calls by executor node and direction, resolved to kinds at the end.
#[derive(Debug, Default)]
pub struct BatchSizes {
    per_node: HashMap<(u32, bool), Tally>,
    /// The parameter updates' time.
    update_ns: u64,
}

impl BatchSizes {
    /// Counts the forward and backward calls among `events` (updates are not calls).
    pub fn record(&mut self, events: &[TraceEvent]) {
        for e in events {
            let backward = match e.kind {
                TraceKind::Forward => false,
                TraceKind::Backward => true,
                TraceKind::Update => {
                    self.update_ns = self.update_ns.saturating_add(e.dur_ns);
                    continue;
                }
            };
            // A call always handles one message or more; an event from a build that did
            // not count rows has 0, and its messages stand in.
            let rows = if e.rows == 0 { e.batch } else { e.rows };
            self.per_node.entry((e.node, backward)).or_default().add(u64::from(rows), u64::from(e.batch), e.dur_ns);
        }
    }

    /// Tallies by (kind, backward), in kind order; `units` gives the graph nodes a fused
    /// unit or a replica (an executor node past the graph's) stands for.
    fn by_kind(&self, graph: &Graph, units: &HashMap<u32, Vec<u32>>) -> BTreeMap<(String, bool), Tally> {
        let ops: HashMap<u32, &str> = graph
            .nodes
            .node_indices()
            .filter_map(|i| graph.nodes.node_weight(i).map(|n| (i.index() as u32, n.op.keyword())))
            .collect();
        let op_of = |node: u32| ops.get(&node).map(|op| op.to_string());
        let mut kinds: BTreeMap<(String, bool), Tally> = BTreeMap::new();
        for (&(node, backward), tally) in &self.per_node {
            let kind = match units.get(&node).map(Vec::as_slice) {
                Some([one]) => op_of(*one),
                // A chain keeps its first member's index, a graph node's; a fused node
                // takes one past the graph's.
                Some([_, _, ..]) if ops.contains_key(&node) => Some("chain".to_string()),
                Some([_, _, ..]) => Some("fused".to_string()),
                _ => op_of(node),
            };
            let kind = kind.unwrap_or_else(|| "other".to_string());
            kinds.entry((kind, backward)).or_default().merge(tally);
        }
        kinds
    }

    /// The profile file's `batches` list (see the module doc).
    pub fn to_json(&self, graph: &Graph, units: &HashMap<u32, Vec<u32>>) -> Value {
        let list: Vec<Value> = self
            .by_kind(graph, units)
            .into_iter()
            .map(|((kind, backward), t)| {
                let histogram: Vec<Value> =
                    (0..BUCKETS).map(|b| json!({"rows": bucket_label(b), "calls": t.histogram[b]})).collect();
                json!({
                    "kind": kind,
                    "work": if backward { "backward" } else { "forward" },
                    "calls": t.calls,
                    "rows": t.rows,
                    "messages": t.messages,
                    "mean_rows": t.mean(),
                    "histogram": histogram,
                })
            })
            .collect();
        Value::Array(list)
    }

    /// Where the time of `instances` instances trained over `wall_s` went (the `time`
    /// object, see the module doc), from each worker's busy time: every bucket, the kinds'
    /// largest first, then `between nodes`, `updates` and `waiting`.
    fn time_buckets(
        &self,
        graph: &Graph,
        units: &HashMap<u32, Vec<u32>>,
        (instances, wall_s): (u64, f64),
        busy_s: &[f64],
    ) -> Vec<Bucket> {
        let mut kinds: BTreeMap<String, u64> = BTreeMap::new();
        for ((kind, _), t) in self.by_kind(graph, units) {
            *kinds.entry(kind).or_default() += t.ns;
        }
        let mut seconds: Vec<(String, f64)> = kinds.into_iter().map(|(k, ns)| (k, ns as f64 * 1e-9)).collect();
        seconds.sort_by(|a, b| b.1.total_cmp(&a.1));
        let nodes: f64 = seconds.iter().map(|b| b.1).sum();
        let updates = self.update_ns as f64 * 1e-9;
        let busy: f64 = busy_s.iter().sum();
        // The calls are timed inside the busy time; a rounding can leave them a hair over.
        seconds.push(("between nodes".to_string(), (busy - nodes - updates).max(0.0)));
        seconds.push(("updates".to_string(), updates));
        seconds.push(("waiting".to_string(), (wall_s * busy_s.len() as f64 - busy).max(0.0)));
        let total: f64 = seconds.iter().map(|b| b.1).sum();
        seconds
            .into_iter()
            .map(|(name, s)| Bucket {
                name,
                s,
                us_per_instance: if instances == 0 { 0.0 } else { s * 1e6 / instances as f64 },
                share: if total > 0.0 { s / total } else { 0.0 },
            })
            .collect()
    }

    /// The profile file's `time` object (see the module doc).
    pub fn time_json(
        &self,
        graph: &Graph,
        units: &HashMap<u32, Vec<u32>>,
        (instances, wall_s): (u64, f64),
        busy_s: &[f64],
    ) -> Value {
        let list: Vec<Value> = self
            .time_buckets(graph, units, (instances, wall_s), busy_s)
            .into_iter()
            .map(|b| json!({"bucket": b.name, "s": b.s, "us_per_instance": b.us_per_instance, "share": b.share}))
            .collect();
        json!({"workers": busy_s.len(), "wall_s": wall_s, "instances": instances, "buckets": list})
    }

    /// The summary's line of the `time` object: each bucket's µs per instance and share,
    /// kinds under 1% of the time left out.
    pub fn time_line(&self, graph: &Graph, units: &HashMap<u32, Vec<u32>>, run: (u64, f64), busy_s: &[f64]) -> String {
        let buckets = self.time_buckets(graph, units, run, busy_s);
        let fixed = buckets.len().saturating_sub(3);
        let parts: Vec<String> = buckets
            .iter()
            .enumerate()
            .filter(|&(i, b)| i >= fixed || b.share >= 0.01)
            .map(|(_, b)| format!("{} {:.1} µs ({:.0}%)", b.name, b.us_per_instance, 100.0 * b.share))
            .collect();
        format!("per instance: {}", parts.join(", "))
    }

    /// One summary line per kind and direction that batches (a mean above one row), or
    /// of every one when none does: `linear forward: 23.1 rows/call (median 17-32), 1200 calls`.
    pub fn summary_lines(&self, graph: &Graph, units: &HashMap<u32, Vec<u32>>) -> Vec<String> {
        let kinds = self.by_kind(graph, units);
        let batched = kinds.values().any(|t| t.mean() > 1.0);
        kinds
            .into_iter()
            .filter(|(_, t)| !batched || t.mean() > 1.0)
            .map(|((kind, backward), t)| {
                format!(
                    "{kind} {}: {:.1} rows/call (median {}), {} calls",
                    if backward { "backward" } else { "forward" },
                    t.mean(),
                    bucket_label(t.median_bucket()),
                    t.calls
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_double() {
        let labels: Vec<String> = (0..BUCKETS).map(bucket_label).collect();
        assert_eq!(labels, ["1", "2", "3-4", "5-8", "9-16", "17-32", "33-64", "65-128", "129+"]);
        for (rows, b) in
            [(0, 0), (1, 0), (2, 1), (3, 2), (4, 2), (5, 3), (64, 6), (65, 7), (128, 7), (129, 8), (10_000, 8)]
        {
            assert_eq!(bucket(rows), b, "{rows} rows");
        }
    }

    #[test]
    fn the_median_bucket_holds_the_middle_call() {
        let mut t = Tally::default();
        [1, 1, 30, 40, 50].iter().for_each(|&r| t.add(r, r, 1000));
        assert_eq!(bucket_label(t.median_bucket()), "17-32");
        assert!((t.mean() - 122.0 / 5.0).abs() < 1e-9);
    }
}
