//! Per-worker trace events (forward, backward and update work, with start and duration)
//! and their Chrome / Perfetto trace JSON: `{"traceEvents": [{"name", "cat", "ph": "X",
//! "ts", "dur", "pid", "tid", "args": {"batch"}}]}`, one row (`tid`) per worker; `batch`
//! is how many messages the work took at once (dynamic batching; 0 for an update),
//! `rows` how many rows they carried (a message of a batched map's `f32[?, d]` carries
//! one per element, any other one) and `instances` how many instances they belong to; an update also has `staleness` (see
//! [`TraceEvent::staleness`]) when it applied a measured gradient.
//!
//! A run split over processes writes one trace on process 0 ([`write_merged_trace`]): a
//! process (`pid`, named `process I (host:port)`) per process and a row per worker in it,
//! every event on process 0's clock (`crate::cluster`, Clocks).

use serde_json::json;
use std::io::Write;

/// What the work was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceKind {
    Forward,
    Backward,
    /// A Ppt group's optimizer update (`node` is the group's first node).
    Update,
}

impl TraceKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TraceKind::Forward => "forward",
            TraceKind::Backward => "backward",
            TraceKind::Update => "update",
        }
    }
}

/// One piece of work on a worker, in microseconds since the run's executor started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceEvent {
    pub worker: u32,
    pub node: u32,
    pub kind: TraceKind,
    pub start_us: u64,
    /// Nanoseconds: most calls take a few microseconds, and whole ones would round the
    /// sums of a profile down by up to a microsecond a call.
    pub dur_ns: u64,
    /// Messages handled together (1 unbatched; 0 for an update).
    pub batch: u32,
    /// The rows of those messages: a batched payload's (`f32[?, d]`) rows, one for any
    /// other message (0 for an update).
    pub rows: u32,
    /// The distinct instances those messages belong to (0 for an update).
    pub instances: u32,
    /// For an update, the staleness of the stalest gradient it applied: how many updates
    /// of the group came between the version its forward read and this one (`None`: no
    /// gradient measured, or not an update).
    pub staleness: Option<u64>,
}

/// Writes events as Chrome trace JSON; `name` gives each node's display name.
pub fn write_chrome_trace(
    events: &[TraceEvent],
    name: impl Fn(u32) -> String,
    out: &mut impl Write,
) -> std::io::Result<()> {
    write_trace(events, name, None::<(fn(u32) -> u32, fn(u32) -> String)>, out)
}

/// Writes the events of a run split over processes as one Chrome trace: `process` gives
/// the process that ran each worker, `process_name` each process's label; process `p` is
/// `pid` p + 1 (some viewers treat 0 as no process).
pub fn write_merged_trace(
    events: &[TraceEvent],
    name: impl Fn(u32) -> String,
    process: impl Fn(u32) -> u32,
    process_name: impl Fn(u32) -> String,
    out: &mut impl Write,
) -> std::io::Result<()> {
    write_trace(events, name, Some((process, process_name)), out)
}

fn write_trace<P: Fn(u32) -> u32, N: Fn(u32) -> String>(
    events: &[TraceEvent],
    name: impl Fn(u32) -> String,
    processes: Option<(P, N)>,
    out: &mut impl Write,
) -> std::io::Result<()> {
    let pid = |worker: u32| processes.as_ref().map_or(1, |(process, _)| u64::from(process(worker)) + 1);
    out.write_all(b"{\"traceEvents\":[\n")?;
    let mut workers: Vec<u32> = events.iter().map(|e| e.worker).collect();
    workers.sort_unstable();
    workers.dedup();
    let mut first = true;
    let mut separate = |out: &mut dyn Write| -> std::io::Result<()> {
        if !first {
            out.write_all(b",\n")?;
        }
        first = false;
        Ok(())
    };
    if let Some((process, process_name)) = &processes {
        let mut seen: Vec<u32> = workers.iter().map(|&w| process(w)).collect();
        seen.sort_unstable();
        seen.dedup();
        for p in seen {
            let meta =
                json!({"name": "process_name", "ph": "M", "pid": u64::from(p) + 1, "args": {"name": process_name(p)}});
            separate(out)?;
            serde_json::to_writer(&mut *out, &meta)?;
        }
    }
    for &w in &workers {
        let meta =
            json!({"name": "thread_name", "ph": "M", "pid": pid(w), "tid": w, "args": {"name": format!("worker {w}")}});
        separate(out)?;
        serde_json::to_writer(&mut *out, &meta)?;
    }
    for e in events {
        let mut event = json!({
            "name": name(e.node),
            "cat": e.kind.as_str(),
            "ph": "X",
            "ts": e.start_us,
            "dur": e.dur_ns as f64 / 1000.0,
            "pid": pid(e.worker),
            "tid": e.worker,
            "args": {"batch": e.batch, "rows": e.rows, "instances": e.instances},
        });
        if let Some(staleness) = e.staleness {
            event["args"]["staleness"] = json!(staleness);
        }
        separate(out)?;
        serde_json::to_writer(&mut *out, &event)?;
    }
    out.write_all(b"\n]}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chrome_trace_is_json_with_one_row_per_worker() {
        let events = vec![
            TraceEvent {
                worker: 0,
                node: 3,
                kind: TraceKind::Forward,
                start_us: 5,
                dur_ns: 2000,
                batch: 7,
                rows: 9,
                instances: 3,
                staleness: None,
            },
            TraceEvent {
                worker: 1,
                node: 4,
                kind: TraceKind::Update,
                start_us: 9,
                dur_ns: 1000,
                batch: 0,
                rows: 0,
                instances: 0,
                staleness: Some(2),
            },
        ];
        let mut out = Vec::new();
        write_chrome_trace(&events, |n| format!("node \"{n}\""), &mut out).unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let list = doc["traceEvents"].as_array().unwrap();
        assert_eq!(list.len(), 4);
        assert_eq!(list[2]["name"], "node \"3\"");
        assert_eq!(list[3]["cat"], "update");
        assert_eq!(list[3]["tid"], 1);
        assert_eq!(list[2]["ph"], "X");
        assert_eq!(list[2]["args"]["batch"], 7);
        assert_eq!(list[2]["args"]["instances"], 3);
        assert_eq!(list[2]["args"]["rows"], 9);
        assert!(list[2]["args"].get("staleness").is_none());
        assert_eq!(list[3]["args"]["staleness"], 2);
    }

    /// Split over processes: a named process per process, each worker's row and events in
    /// its own process.
    #[test]
    fn a_merged_trace_has_a_process_per_process_and_a_row_per_worker() {
        let event = |worker| TraceEvent {
            worker,
            node: 1,
            kind: TraceKind::Backward,
            start_us: 3,
            dur_ns: 1000,
            batch: 1,
            rows: 1,
            instances: 1,
            staleness: None,
        };
        let events = vec![event(0), event(2), event(1)];
        let mut out = Vec::new();
        write_merged_trace(&events, |n| n.to_string(), |w| u32::from(w >= 2), |p| format!("process {p}"), &mut out)
            .unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let list = doc["traceEvents"].as_array().unwrap();
        let named: Vec<_> = list
            .iter()
            .filter(|e| e["name"] == "process_name")
            .map(|e| (e["pid"].clone(), e["args"]["name"].clone()))
            .collect();
        assert_eq!(named, [(json!(1), json!("process 0")), (json!(2), json!("process 1"))]);
        let work: Vec<_> =
            list.iter().filter(|e| e["ph"] == "X").map(|e| (e["pid"].clone(), e["tid"].clone())).collect();
        assert_eq!(work, [(json!(1), json!(0)), (json!(2), json!(2)), (json!(1), json!(1))]);
        let rows = list.iter().filter(|e| e["name"] == "thread_name").count();
        assert_eq!(rows, 3);
    }
}
