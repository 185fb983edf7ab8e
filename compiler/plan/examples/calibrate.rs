//! Compares the cost model's defaults with a measured profile, by kind of op: what the
//! model predicts and what the profile measured, µs per training instance, the op's own
//! work only (no per-message routing; parameter updates on lines of their own), and the
//! routing time the profile leaves over.
//!
//! ```sh
//! ampc compile examples/tree_lstm.amp -o /tmp/t.ampg
//! amprun train examples/tree_lstm.amp ... --workers 1 --profile /tmp/t.json
//! cargo run --release -p amp-plan --example calibrate -- /tmp/t.ampg /tmp/t.json 8 sgd
//! ```
//!
//! `benches/calibrate.py` runs this on the five canonical models.

use amp_plan::{estimate, Assumptions, Profile};
use std::collections::BTreeMap;

fn main() {
    if let Err(e) = run() {
        eprintln!("calibrate: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [graph_path, profile_path, update_every, optimizer] = args.as_slice() else {
        return Err("usage: calibrate GRAPH.ampg PROFILE.json UPDATE_EVERY sgd|momentum|adam".into());
    };
    let bytes = std::fs::read(graph_path).map_err(|e| format!("{graph_path}: {e}"))?;
    let (graph, _) = amp_ir::ampg::read(&bytes).map_err(|e| format!("{graph_path}: {e}"))?;
    let text = std::fs::read_to_string(profile_path).map_err(|e| format!("{profile_path}: {e}"))?;
    let profile = Profile::from_json(&text).map_err(|e| format!("{profile_path}: {e}"))?;
    let update_every: f64 = update_every.parse().map_err(|_| format!("{update_every}: not a number"))?;
    let a = Assumptions { update_every, plain_sgd: optimizer == "sgd", ..Assumptions::default() };
    let modelled = estimate(&graph, &a, None).map_err(|e| e.to_string())?;
    let measured = estimate(&graph, &a, Some(&profile)).map_err(|e| e.to_string())?;
    // Per kind: (modelled work, measured work, modelled messages, measured events), µs or
    // counts per instance.
    let mut kinds: BTreeMap<String, [f64; 4]> = BTreeMap::new();
    // Measured events that took a worker step of their own (a chain member's are its
    // root's, a fused unit's its first node's), and the messages they took.
    let (mut steps, mut taken) = (0.0, 0.0);
    for (m, p) in modelled.nodes.iter().zip(&measured.nodes) {
        let (Some(m), Some(p)) = (m, p) else { continue };
        if !m.chained && m.unit == m.id {
            steps += p.forward_messages + p.backward_messages;
            taken += p.arrivals + p.backward_arrivals;
        }
        let fused = m.unit != m.id || m.routing_us > 0.0;
        let kind = m.name.split(' ').next().unwrap_or("").to_string();
        let kind = if fused { format!("{kind} (fused)") } else { kind };
        let work = |c: &amp_plan::NodeCost, routing: f64| {
            c.forward_messages * (c.forward_us - routing) + c.backward_messages * (c.backward_us - routing)
        };
        // A fused unit's members and a chain member pay no per-message cost of their own.
        let routing = if fused || m.chained { 0.0 } else { a.message_us };
        if m.update_us > 0.0 || p.update_us > 0.0 {
            let entry = kinds.entry(format!("{kind} updates")).or_default();
            entry[0] += m.update_us;
            entry[1] += p.update_us;
        }
        let entry = kinds.entry(kind).or_default();
        entry[0] += work(m, routing);
        entry[1] += work(p, routing);
        entry[2] += m.forward_messages + m.backward_messages;
        entry[3] += p.forward_messages + p.backward_messages;
    }
    let wall_us = profile.wall_s * 1e6 / profile.instances.max(1) as f64;
    let (mut model_total, mut measured_total) = (0.0, 0.0);
    println!(
        "{}: {} instances, {wall_us:.1} µs per instance on {} worker(s)",
        graph.name, profile.instances, profile.workers
    );
    println!(
        "{:<24} {:>12} {:>12} {:>8} {:>10} {:>10}",
        "op", "model µs", "measured µs", "ratio", "model msgs", "events"
    );
    for (kind, [m, p, mm, pe]) in &kinds {
        let ratio = if *m > 0.0 { p / m } else { 0.0 };
        println!("{kind:<24} {m:>12.2} {p:>12.2} {ratio:>8.2} {mm:>10.1} {pe:>10.1}");
        model_total += m;
        measured_total += p;
    }
    let left = wall_us * profile.workers as f64 - measured_total;
    println!("{:<24} {model_total:>12.2} {measured_total:>12.2}", "all ops");
    println!(
        "left over for routing: {left:.1} µs per instance, {:.3} µs per worker step ({steps:.1} steps taking \
         {taken:.1} messages per instance)",
        left / steps.max(1.0)
    );
    Ok(())
}
