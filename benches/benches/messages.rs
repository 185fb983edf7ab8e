//! What one message costs the executor end to end, per node kind, on payloads of 4 floats
//! (so the op's arithmetic is small and the per-message overhead dominates): allocation
//! of payloads and states, keys and their hashing, queueing, credits, routing and, for
//! the joins, fan-out and fan-in.
//!
//! Each kind is a model whose forward repeats one construct `K` times between an input
//! and a small head (a straight line of `tanh`, of `h * h`, of Linear calls, of
//! `split`/`concat`; a loop of `K` trips of `tanh`; JIT-fused `tanh` between Linears);
//! the same model with `K = 0` is run alternately with it, and the cost per message is
//! the difference of their epoch times over the difference of their messages (counted
//! once from a traced epoch: forward and backward messages handled by nodes). One worker,
//! 16 instances in flight, asynchronous SGD every 8 instances, as `benches/end_to_end.py`
//! trains. Times are the process's CPU time (all threads), medians over alternating
//! repetitions: on a shared machine wall time also counts other processes' turns on the
//! cores (the last column, the same difference in wall time, shows how much).
//!
//! The baseline, measured in the same run, is a loop doing what any message passing must
//! do per message on one thread: allocate a payload of 4 floats and a state of 4 ints,
//! queue and dequeue the message, and insert and remove it in a hash map under a key of
//! two ints. The ratio column is the executor's cost over that floor.
//!
//! Run: `cargo bench -p amp-benches --bench messages` (add `-- quick` for fewer
//! repetitions and instances, and parts of kinds' names to run only those: `-- quick
//! unary loop`).

use amp_data::{Instance, Tensor, Value};
use amp_exec::{ExecConfig, Executor, TraceKind};
use amp_ir::verify::Verified;
use amp_params::{OptimConfig, ParamSet, ParamSpec};
use amp_sema::{check_source, Options};
use std::collections::VecDeque;
use std::time::Instant;

// `amprun`'s allocator: allocation is a large part of a message's cost, and glibc's
// malloc costs more than the one users run with.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// One kind of node, as the construct a model repeats.
struct Kind {
    name: &'static str,
    /// The forward's body for `K` repetitions.
    body: fn(usize) -> String,
    jit: bool,
}

fn repeat(k: usize, line: &str) -> String {
    (0..k).map(|_| format!("        {line}\n")).collect()
}

const KINDS: &[Kind] = &[
    Kind { name: "unary (tanh)", body: |k| repeat(k, "h = tanh(h);"), jit: false },
    Kind { name: "binary (h * h)", body: |k| repeat(k, "h = h * h;"), jit: false },
    Kind { name: "linear (4x4)", body: |k| repeat(k, "h = lin(h);"), jit: false },
    Kind { name: "split + concat", body: |k| repeat(k, "let p = split(h, 2); h = concat(p.1, p.0);"), jit: false },
    Kind { name: "loop trip (tanh)", body: |k| format!("        for _ in 0..{k} {{ h = tanh(h); }}\n"), jit: false },
    Kind { name: "linear + fused tanh", body: |k| repeat(k, "h = tanh(lin(h));"), jit: true },
];

fn source(body: &str) -> String {
    format!(
        "record R {{ v: f32[4], label: int }}\n\
         model M() {{\n    param lin = Linear(4, 4);\n    param head = Linear(4, 2);\n\
         \x20   fn forward(x: R) -> f32[2] {{\n        var h: f32[4] = x.v;\n{body}        head(h)\n    }}\n\
         \x20   fn loss(x: R) -> f32 {{ cross_entropy(forward(x), x.label) }}\n}}\n"
    )
}

fn compile(text: &str) -> Verified {
    let (map, checked) = check_source("bench.amp", text, &Options::default());
    assert!(!checked.has_errors(), "{}", amp_diagnostics::render_human(&map, &checked.diagnostics, false));
    let mut graph = match amp_lower::lower_model(&checked.program, &map, checked.program.models[0]) {
        Ok(graph) => graph,
        Err(d) => panic!("lowering failed: {}", amp_diagnostics::render_human(&map, &d, false)),
    };
    amp_lower::passes::optimize(&mut graph);
    match Verified::new(graph) {
        Ok(graph) => graph,
        Err(r) => panic!("{:?}", r.errors),
    }
}

fn instances(graph: &Verified, n: usize) -> Vec<Instance> {
    let schema = graph.input.as_ref().expect("an input schema");
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut unit = move || {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    };
    (0..n)
        .map(|i| {
            let v: Vec<f32> = (0..4).map(|_| unit()).collect();
            let tensor = Tensor::new(vec![4], v).expect("a tensor of 4");
            let value = Value::Record(vec![Value::Tensor(tensor), Value::Int((i % 2) as i64)]);
            Instance::new(schema, value).expect("a valid instance")
        })
        .collect()
}

fn config(jit: bool, trace: bool) -> ExecConfig {
    ExecConfig {
        workers: 1,
        max_active_keys: 16,
        min_update_frequency: 8,
        sync_updates: false,
        optimizer: OptimConfig::sgd(0.01),
        jit,
        trace,
        ..ExecConfig::default()
    }
}

fn executor(graph: &Verified, config: ExecConfig) -> Executor {
    let params = ParamSet::init(&ParamSpec::of_graph(graph), 1);
    Executor::new(graph, params, config).expect("the executor accepts the graph")
}

/// Messages the nodes handle in one epoch (forward and backward), from a traced epoch.
fn messages(graph: &Verified, jit: bool, data: &[Instance]) -> u64 {
    let mut exec = executor(graph, config(jit, true));
    exec.train_epoch(data).expect("a traced epoch");
    exec.take_trace()
        .iter()
        .filter(|e| matches!(e.kind, TraceKind::Forward | TraceKind::Backward))
        .map(|e| u64::from(e.batch))
        .sum()
}

/// CPU time of the whole process (every thread, those that ended included), in seconds.
/// The machine this runs on is shared: CPU time is what the executor spent, where wall
/// time also counts the time other processes held the cores. std has no process CPU
/// clock, hence the one `unsafe` call.
#[allow(unsafe_code)]
fn cpu_seconds() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid timespec the call writes; the clock id is a constant.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_PROCESS_CPUTIME_ID)");
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// One untraced epoch's CPU time and wall time, in seconds.
fn epoch(exec: &mut Executor, data: &[Instance]) -> (f64, f64) {
    let (cpu, start) = (cpu_seconds(), Instant::now());
    exec.train_epoch(data).expect("an epoch");
    (cpu_seconds() - cpu, start.elapsed().as_secs_f64())
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// The floor: per message, a payload and a state allocated, queued, dequeued, and kept
/// under a two-int key in an Fx hash map until taken back. ns per message.
fn floor(count: usize) -> f64 {
    type Msg = (std::sync::Arc<Vec<f32>>, Box<[i64]>);
    let mut queue: VecDeque<Msg> = VecDeque::new();
    let mut held: rustc_hash::FxHashMap<Box<[i64]>, Msg> = Default::default();
    let start = cpu_seconds();
    let mut sum = 0.0f32;
    for i in 0..count {
        let x = i as f32;
        queue.push_back((std::sync::Arc::new(vec![x, x, x, x]), vec![i as i64 % 16, 0, -1, -1].into_boxed_slice()));
        let Some(msg) = queue.pop_front() else { continue };
        let key: Box<[i64]> = msg.1[..2].into();
        held.insert(key.clone(), msg);
        if let Some(msg) = held.remove(&key) {
            sum += msg.0[3];
        }
    }
    let ns = (cpu_seconds() - start) * 1e9 / count as f64;
    std::hint::black_box(sum);
    ns
}

fn main() {
    let quick = std::env::args().any(|a| a == "quick");
    let (n, reps, k) = if quick { (2000, 5, 16) } else { (8000, 9, 32) };
    println!("Per-message cost of the executor, by node kind (payloads of 4 floats, 1 worker, 16 in flight)");
    println!("{n} instances per epoch, K = {k} repetitions of the construct against K = 0, medians of {reps} alternating epochs\n");
    let floors: Vec<f64> = (0..reps).map(|_| floor(1 << 20)).collect();
    let floor_ns = median(floors);
    println!("baseline (allocate, queue, key and hash one message): {floor_ns:.1} ns\n");
    println!(
        "{:<22} {:>9} {:>9} {:>10} {:>10} {:>10} {:>9} {:>10}",
        "kind", "msgs/inst", "base/inst", "cpu ms", "base ms", "ns/msg", "×floor", "wall ns"
    );
    // Other arguments (but cargo's `--bench`) pick kinds by a part of their name.
    let only: Vec<String> = std::env::args().skip(1).filter(|a| a != "quick" && !a.starts_with("--")).collect();
    for kind in KINDS.iter().filter(|k| only.is_empty() || only.iter().any(|o| k.name.contains(o.as_str()))) {
        let with = compile(&source(&(kind.body)(k)));
        let without = compile(&source(&(kind.body)(0)));
        let data = instances(&with, n);
        let (m_with, m_without) = (messages(&with, kind.jit, &data), messages(&without, kind.jit, &data));
        let extra = m_with.saturating_sub(m_without).max(1);
        let mut a = executor(&with, config(kind.jit, false));
        let mut b = executor(&without, config(kind.jit, false));
        // One epoch each to warm up (kernels compiled, caches and maps grown).
        epoch(&mut a, &data);
        epoch(&mut b, &data);
        let (mut diffs, mut wall_diffs, mut times, mut base_times) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..reps {
            let (ca, wa) = epoch(&mut a, &data);
            let (cb, wb) = epoch(&mut b, &data);
            diffs.push((ca - cb) * 1e9 / extra as f64);
            wall_diffs.push((wa - wb) * 1e9 / extra as f64);
            times.push(ca * 1e3);
            base_times.push(cb * 1e3);
        }
        let ns = median(diffs);
        println!(
            "{:<22} {:>9.1} {:>9.1} {:>10.1} {:>10.1} {:>10.1} {:>9.1} {:>10.1}",
            kind.name,
            extra as f64 / n as f64,
            m_without as f64 / n as f64,
            median(times),
            median(base_times),
            ns,
            ns / floor_ns,
            median(wall_diffs),
        );
    }
}
