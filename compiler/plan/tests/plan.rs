//! The cost model on small hand-written graphs (known FLOPs and message counts), the
//! planner's invariants, and the checks on plans and profiles read from files.

use amp_plan::{
    estimate, evaluate, evaluate_layout, plan, plan_graph, plan_workers, Assumptions, Event, Plan, PlanError, Profile,
    ProfileCounter, Work,
};
use petgraph::visit::NodeIndexable;

fn graph(text: &str) -> amp_ir::verify::Verified {
    let graph = amp_ir::text::parse(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    amp_ir::verify::verify(graph).unwrap_or_else(|e| panic!("{e:?}\n{text}"))
}

/// source → read → linear [8 ← 4] → relu → linear [3 ← 8] → loss: one message per node.
const CHAIN: &str = r#"amp.graph @Chain {
  state %inst: instance
  param a.weight: f32[8, 4] uniform(4)
  param a.bias: f32[8] uniform(4)
  param b.weight: f32[3, 8] uniform(8)
  param b.bias: f32[3] uniform(8)
  %0 = source() -> unit writes(%inst) "instances"
  %1 = read $.x (%0#0: unit) -> f32[4] "read"
  %2 = linear @a (%1#0: f32[4]) -> f32[8] key(%inst) "a"
  %3 = unary relu (%2#0: f32[8]) -> f32[8] key(%inst) "relu"
  %4 = linear @b (%3#0: f32[8]) -> f32[3] key(%inst) "b"
  %5 = loss cross_entropy [$.label] (%4#0: f32[3]) -> () key(%inst) "loss"
}
"#;

/// An embedding summed over a loop of `len($.tokens)` iterations (list-reduce's shape),
/// followed by a linear head.
const LOOP: &str = r#"amp.graph @Loop {
  state %inst: instance, %t0: counter
  param embed.weight: f32[14, 16] normal
  param cell.weight: f32[16, 32] uniform(32)
  param cell.bias: f32[16] uniform(32)
  param head.weight: f32[10, 16] uniform(16)
  param head.bias: f32[10] uniform(16)
  %0 = source() -> unit writes(%inst) "instances"
  %1 = const zeros (%0#0: unit) -> f32[16] "const"
  %2 = isu %t0 := 0 inverse -1 (%1#0: f32[16]) -> f32[16] writes(%t0) "loop entry"
  %3 = isu %t0 := 0 inverse -1 (%0#0: unit) -> unit writes(%t0) "loop entry"
  %4 = phi 2 (%2#0: f32[16], %14#0: f32[16]) -> f32[16] key(%inst, %t0) "loop"
  %5 = cond [%t0 < len($.tokens)] (%4#0: f32[16]) -> f32[16], f32[16] reads(%t0) "loop test"
  %6 = isu %t0 := -1 inverse len($.tokens) (%5#1: f32[16]) -> f32[16] writes(%t0) "loop exit"
  %7 = phi 2 (%3#0: unit, %15#0: unit) -> unit key(%inst, %t0) "loop"
  %8 = cond [%t0 < len($.tokens)] (%7#0: unit) -> unit, unit reads(%t0) key(%inst, %t0) "loop test"
  %10 = embedding @embed[$.tokens[%t0]] (%8#0: unit) -> f32[16] reads(%t0) "embed"
  %11 = concat(%10#0: f32[16], %5#0: f32[16]) -> f32[32] key(%inst, %t0) "concat"
  %12 = linear @cell (%11#0: f32[32]) -> f32[16] key(%inst, %t0) "cell"
  %13 = unary relu (%12#0: f32[16]) -> f32[16] key(%inst, %t0) "relu"
  %14 = isu %t0 := %t0 + 1 inverse %t0 - 1 (%13#0: f32[16]) -> f32[16] reads(%t0) writes(%t0) "loop step"
  %15 = isu %t0 := %t0 + 1 inverse %t0 - 1 (%8#0: unit) -> unit reads(%t0) writes(%t0) "loop step"
  %16 = linear @head (%6#0: f32[16]) -> f32[10] key(%inst) "head"
  %17 = loss cross_entropy [$.label] (%16#0: f32[10]) -> () key(%inst) "loss"
}
"#;

/// Heavy work before and after a light loop of 3 iterations: a cut inside the loop would
/// be paid every iteration, so the loop belongs on one worker.
const HEAVY_AROUND_LIGHT_LOOP: &str = r#"amp.graph @Around {
  state %inst: instance, %t0: counter
  param pre.weight: f32[256, 256] uniform(256)
  param pre.bias: f32[256] uniform(256)
  param post.weight: f32[256, 256] uniform(256)
  param post.bias: f32[256] uniform(256)
  %0 = source() -> unit writes(%inst) "instances"
  %1 = read $.x (%0#0: unit) -> f32[256] "read"
  %2 = linear @pre (%1#0: f32[256]) -> f32[256] key(%inst) "pre"
  %3 = isu %t0 := 0 inverse -1 (%2#0: f32[256]) -> f32[256] writes(%t0) "loop entry"
  %4 = phi 2 (%3#0: f32[256], %7#0: f32[256]) -> f32[256] key(%inst, %t0) "loop"
  %5 = cond [%t0 < 3] (%4#0: f32[256]) -> f32[256], f32[256] reads(%t0) key(%inst, %t0) "loop test"
  %6 = unary tanh (%5#0: f32[256]) -> f32[256] key(%inst, %t0) "tanh"
  %7 = isu %t0 := %t0 + 1 inverse %t0 - 1 (%6#0: f32[256]) -> f32[256] reads(%t0) writes(%t0) "loop step"
  %8 = isu %t0 := -1 inverse 3 (%5#1: f32[256]) -> f32[256] writes(%t0) "loop exit"
  %9 = linear @post (%8#0: f32[256]) -> f32[256] key(%inst) "post"
  %10 = loss mse (%9#0: f32[256], %2#0: f32[256]) -> () key(%inst) "loss"
}
"#;

/// A chain with one Ppt far heavier than everything else.
const ONE_HEAVY: &str = r#"amp.graph @OneHeavy {
  state %inst: instance
  param small.weight: f32[32, 32] uniform(32)
  param small.bias: f32[32] uniform(32)
  param big.weight: f32[512, 32] uniform(32)
  param big.bias: f32[512] uniform(32)
  param head.weight: f32[4, 512] uniform(512)
  param head.bias: f32[4] uniform(512)
  %0 = source() -> unit writes(%inst) "instances"
  %1 = read $.x (%0#0: unit) -> f32[32] "read"
  %2 = linear @small (%1#0: f32[32]) -> f32[32] key(%inst) "small"
  %3 = unary relu (%2#0: f32[32]) -> f32[32] key(%inst) "relu"
  %4 = linear @big (%3#0: f32[32]) -> f32[512] key(%inst) "big"
  %5 = unary tanh (%4#0: f32[512]) -> f32[512] key(%inst) "tanh"
  %6 = linear @head (%5#0: f32[512]) -> f32[4] key(%inst) "head"
  %7 = loss cross_entropy [$.label] (%6#0: f32[4]) -> () key(%inst) "loss"
}
"#;

/// A collection: one message per element of `$.items` (a flatmap), grouped back into a
/// batch and summed.
const MAP: &str = r#"amp.graph @Map {
  state %inst: instance, %e0: element
  param emb.weight: f32[10, 6] normal
  param head.weight: f32[2, 6] uniform(6)
  param head.bias: f32[2] uniform(6)
  %0 = source() -> unit writes(%inst) "instances"
  %1 = flatmap %e0 [len($.items)] (%0#0: unit) -> unit writes(%e0) key(%inst) "flatmap"
  %2 = embedding @emb[$.items[%e0]] (%1#0: unit) -> f32[6] reads(%e0) "emb"
  %3 = group %e0 [len($.items)] (%2#0: f32[6], %0#0: unit) -> f32[?, 6] writes(%e0) key(%inst) "group"
  %4 = reduce sum (%3#0: f32[?, 6]) -> f32[6] key(%inst) "sum"
  %5 = linear @head (%4#0: f32[6]) -> f32[2] key(%inst) "head"
  %6 = loss cross_entropy [$.label] (%5#0: f32[2]) -> () key(%inst) "loss"
}
"#;

/// A gate chain the NPPT fusion pass grouped (`fusion(0)`), fed by a split only the
/// group reads: the executor runs %3..%7 as one node.
const FUSED: &str = r#"amp.graph @Fused {
  state %inst: instance
  param a.weight: f32[192, 64] uniform(64)
  param a.bias: f32[192] uniform(64)
  param b.weight: f32[4, 64] uniform(64)
  param b.bias: f32[4] uniform(64)
  %0 = source() -> unit writes(%inst) "instances"
  %1 = read $.x (%0#0: unit) -> f32[64] "read"
  %2 = linear @a (%1#0: f32[64]) -> f32[192] key(%inst) "a"
  %3 = split 3 (%2#0: f32[192]) -> f32[64], f32[64], f32[64] key(%inst) "split"
  %4 = unary sigmoid (%3#0: f32[64]) -> f32[64] key(%inst) "sigmoid" fusion(0)
  %5 = unary tanh (%3#1: f32[64]) -> f32[64] key(%inst) "tanh" fusion(0)
  %6 = binary mul (%4#0: f32[64], %5#0: f32[64]) -> f32[64] key(%inst) "*" fusion(0)
  %7 = binary add (%6#0: f32[64], %3#2: f32[64]) -> f32[64] key(%inst) "+" fusion(0)
  %8 = linear @b (%7#0: f32[64]) -> f32[4] key(%inst) "b"
  %9 = loss cross_entropy [$.label] (%8#0: f32[4]) -> () key(%inst) "loss"
}
"#;

/// Mixture-of-experts routing: each instance goes to one of four experts.
const ROUTED: &str = r#"amp.graph @Routed {
  state %inst: instance
  param e0.weight: f32[8, 8] uniform(8)
  param e0.bias: f32[8] uniform(8)
  param e1.weight: f32[8, 8] uniform(8)
  param e1.bias: f32[8] uniform(8)
  param e2.weight: f32[8, 8] uniform(8)
  param e2.bias: f32[8] uniform(8)
  param e3.weight: f32[8, 8] uniform(8)
  param e3.bias: f32[8] uniform(8)
  %0 = source() -> unit writes(%inst) "instances"
  %1 = read $.x (%0#0: unit) -> f32[8] "read"
  %2 = switch [$.k] 4 (%1#0: f32[8]) -> f32[8], f32[8], f32[8], f32[8] "route"
  %3 = linear @e0 (%2#0: f32[8]) -> f32[8] key(%inst) "e0"
  %4 = linear @e1 (%2#1: f32[8]) -> f32[8] key(%inst) "e1"
  %5 = linear @e2 (%2#2: f32[8]) -> f32[8] key(%inst) "e2"
  %6 = linear @e3 (%2#3: f32[8]) -> f32[8] key(%inst) "e3"
  %7 = phi 4 (%3#0: f32[8], %4#0: f32[8], %5#0: f32[8], %6#0: f32[8]) -> f32[8] key(%inst) "merge"
  %8 = loss cross_entropy [$.label] (%7#0: f32[8]) -> () key(%inst) "loss"
}
"#;

/// A routing chain: `isu` (its root: a linear feeds it) then `switch`, the only consumer
/// of the `isu`'s port; the `phi` after the switch has two inputs and stands alone.
const ROUTING_CHAIN: &str = r#"amp.graph @RoutingChain {
  state %inst: instance, %f: counter
  param a.weight: f32[8, 8] uniform(8)
  param a.bias: f32[8] uniform(8)
  param b.weight: f32[3, 8] uniform(8)
  param b.bias: f32[3] uniform(8)
  %0 = source() -> unit writes(%inst) "instances"
  %1 = read $.x (%0#0: unit) -> f32[8] "read"
  %2 = linear @a (%1#0: f32[8]) -> f32[8] key(%inst) "a"
  %3 = isu %f := 1 inverse 0 (%2#0: f32[8]) -> f32[8] writes(%f) "isu"
  %4 = switch [%f] 2 (%3#0: f32[8]) -> f32[8], f32[8] reads(%f) "route"
  %5 = phi 2 (%4#0: f32[8], %4#1: f32[8]) -> f32[8] key(%inst) "merge"
  %6 = linear @b (%5#0: f32[8]) -> f32[3] key(%inst) "b"
  %7 = loss cross_entropy [$.label] (%6#0: f32[3]) -> () key(%inst) "loss"
}
"#;

const ALL: [&str; 8] = [CHAIN, LOOP, HEAVY_AROUND_LIGHT_LOOP, ONE_HEAVY, MAP, FUSED, ROUTED, ROUTING_CHAIN];

fn node(costs: &amp_plan::Costs, id: usize) -> &amp_plan::NodeCost {
    costs.node(id).unwrap_or_else(|| panic!("no cost for %{id}"))
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * (1.0 + a.abs().max(b.abs()))
}

/// The first layer reads data: its backward computes the weight gradient only (the
/// executor skips an input gradient that reaches no parameter).
#[test]
fn linear_flops_are_two_in_out_forward_and_twice_that_backward() {
    let g = graph(CHAIN);
    let costs = estimate(&g, &Assumptions::default(), None).unwrap();
    let a = node(&costs, 2);
    assert_eq!((a.forward_work, a.backward_work), (2.0 * 4.0 * 8.0, 2.0 * 4.0 * 8.0));
    assert_eq!((a.forward_messages, a.backward_messages), (1.0, 1.0));
    assert!(a.ppt);
    let b = node(&costs, 4);
    assert_eq!((b.forward_work, b.backward_work), (2.0 * 8.0 * 3.0, 4.0 * 8.0 * 3.0));
    // Elementwise: n per op forward, 2n backward.
    let relu = node(&costs, 3);
    assert_eq!((relu.forward_work, relu.backward_work), (8.0, 16.0));
    // Nothing but the per-message cost at the source, which sends one message.
    let source = node(&costs, 0);
    assert_eq!(source.forward_work, 0.0);
    assert_eq!(source.forward_messages, 1.0);
    // The load adds up: messages × µs per message, plus the updates of a Ppt (forward and
    // the weight gradient: 4 FLOPs per weight).
    let x = Assumptions::default();
    let expected =
        x.message_us * 2.0 + (8.0 * 4.0 * 4.0) / x.flops_per_us + (8.0 * 4.0 + 8.0) / x.update_elements_per_us;
    assert!(close(a.load_us, expected), "{} vs {expected}", a.load_us);
    // A cut edge carries the payload and the state, both ways.
    let edge = costs.edges.iter().find(|e| e.from == 3 && e.to == 4).expect("the edge relu → b");
    assert_eq!(edge.bytes, 8.0 * 4.0 + 8.0);
    assert!(close(edge.cut_us, 2.0 * (x.cross_us + edge.bytes / x.bytes_per_us) + 2.0 * x.hop_us));
    // The relu is a's epilogue: cut from a, it also pays its own messages' steps.
    assert!(relu.chained);
    let edge = costs.edges.iter().find(|e| e.from == 2 && e.to == 3).expect("the edge a → relu");
    let own = x.message_us * (relu.forward_messages + relu.backward_messages) / 2.0;
    assert!(close(edge.cut_us, 2.0 * (x.cross_us + edge.bytes / x.bytes_per_us) + 2.0 * x.hop_us + own));
}

/// A chain member handles its messages in its producer's worker step: no per-message cost
/// of its own while the two share a worker, that cost on the edge between them when cut.
#[test]
fn routing_chain_members_cost_only_when_cut_from_their_producer() {
    let g = graph(ROUTING_CHAIN);
    let a = Assumptions::default();
    let costs = estimate(&g, &a, None).unwrap();
    let (isu, switch, phi) = (node(&costs, 3), node(&costs, 4), node(&costs, 5));
    assert!(close(isu.load_us, 2.0 * a.message_us), "the root pays its messages: {}", isu.load_us);
    assert_eq!(switch.load_us, 0.0, "the member pays none of its own");
    assert!(close(phi.load_us, 2.0 * a.message_us), "two inputs: a node of its own ({})", phi.load_us);
    let edge = |from: u32, to: u32| costs.edges.iter().find(|e| e.from == from && e.to == to).unwrap().cut_us;
    let crossing = 2.0 * (a.cross_us + a.hop_us + (4.0 * 8.0 + 16.0) / a.bytes_per_us);
    assert!(close(edge(2, 3), crossing), "the root's input edge is a plain one");
    assert!(close(edge(3, 4), crossing + a.message_us), "cut, the member's 2 messages cost a step each");
    let chosen = plan(&g, &costs, 2).unwrap();
    let worker = |id: u32| chosen.nodes.iter().find(|n| n.id == id).unwrap().worker;
    assert_eq!(worker(3), worker(4), "the plan keeps the chain on one worker");
}

#[test]
fn loop_bodies_run_the_expected_trip_count() {
    let g = graph(LOOP);
    for elements in [8.0, 5.0] {
        let assumptions = Assumptions { elements, ..Assumptions::default() };
        let costs = estimate(&g, &assumptions, None).unwrap();
        let cell = node(&costs, 12);
        assert!(close(cell.forward_messages, elements), "cell runs len(tokens) times: {}", cell.forward_messages);
        assert_eq!(cell.forward_work, 2.0 * 32.0 * 16.0);
        // The header sees the entry and every back edge; the exit and the head run once.
        assert!(close(node(&costs, 4).forward_messages, elements + 1.0));
        assert!(close(node(&costs, 6).forward_messages, 1.0));
        assert!(close(node(&costs, 16).forward_messages, 1.0));
        // A join handles both inputs' messages.
        assert!(close(node(&costs, 11).forward_messages, 2.0 * elements));
        // The embedding row: d elements.
        assert_eq!(node(&costs, 10).forward_work, 16.0);
    }
}

/// A loop of ten million turns: its rates are a geometric series the solver adds up at
/// once (iterating, its budget of sweeps ran out far short of the sum).
#[test]
fn a_long_loop_runs_its_whole_trip_count() {
    let text = HEAVY_AROUND_LIGHT_LOOP.replace("%t0 < 3", "%t0 < 10000000").replace("inverse 3 ", "inverse 10000000 ");
    let costs = estimate(&graph(&text), &Assumptions::default(), None).unwrap();
    let turns = node(&costs, 6).forward_messages;
    assert!((turns - 1e7).abs() <= 1e-6 * 1e7, "`%t0 < 10000000` runs ten million times: {turns}");
}

/// A verified loop whose exit port also leads back to its header: every turn sends as many
/// messages back as came around, so they never end; the cost model says so rather than
/// returning whatever rates its sweeps had reached.
#[test]
fn a_cycle_that_never_lets_its_messages_go_is_refused() {
    let text = HEAVY_AROUND_LIGHT_LOOP.replace(
        "%4 = phi 2 (%3#0: f32[256], %7#0: f32[256])",
        "%4 = phi 3 (%3#0: f32[256], %7#0: f32[256], %5#1: f32[256])",
    );
    let g = graph(&text);
    // `graph` verified it: the loop has a header, an exit and a step.
    let error = estimate(&g, &Assumptions::default(), None).unwrap_err();
    assert_eq!(error, PlanError::Unbounded { node: 4 });
    assert!(error.to_string().contains("%4"), "{error}");
}

#[test]
fn constant_loop_bounds_and_collections_are_counted() {
    let costs = estimate(&graph(HEAVY_AROUND_LIGHT_LOOP), &Assumptions::default(), None).unwrap();
    assert!(close(node(&costs, 6).forward_messages, 3.0), "`%t0 < 3` runs three times");
    let a = Assumptions { elements: 6.0, ..Assumptions::default() };
    let costs = estimate(&graph(MAP), &a, None).unwrap();
    assert!(close(node(&costs, 2).forward_messages, 6.0), "one embedding per element");
    // The group joins 6 element messages and the context's control into one batch of 6 rows.
    assert!(close(node(&costs, 3).forward_messages, 7.0));
    assert!(close(node(&costs, 4).forward_messages, 1.0));
    assert_eq!(node(&costs, 4).forward_work, 6.0 * 6.0, "the reduction reads every row");
    let edge = costs.edges.iter().find(|e| e.from == 3).expect("the batch edge");
    assert_eq!(edge.bytes, 4.0 * 6.0 * 6.0 + 2.0 * 8.0);
}

#[test]
fn plans_place_every_node_once_with_shares_summing_to_one() {
    for text in ALL {
        let g = graph(text);
        for workers in [1, 2, 3, 4, 7, 16] {
            let p = plan_graph(&g, workers, &Assumptions::default(), None).unwrap();
            assert_eq!(p.workers, workers);
            assert_eq!(p.nodes.len(), g.nodes.node_count());
            let placement = p.placement(&g).expect("the planner's own plan fits its graph");
            assert!(placement.iter().all(|&w| w < workers));
            let total: f64 = p.nodes.iter().map(|n| n.predicted_load).sum();
            assert!(close(total, 1.0), "{} at {workers}: node shares sum to {total}", g.name);
            assert!(close(p.workers_load.iter().sum(), 1.0));
            assert_eq!(p.predicted_utilization.len(), workers);
            assert!(p.predicted_utilization.iter().all(|u| (0.0..=1.0 + 1e-9).contains(u)));
            assert!(p.predicted_utilization.iter().any(|&u| close(u, 1.0)), "the busiest worker is saturated");
            assert!(p.critical_path_utilization > 0.0 && p.critical_path_utilization <= 1.0 + 1e-9);
            assert!(p.predicted_speedup >= 1.0 - 1e-9 || workers == 1);
            // Deterministic: the same plan every time, and through JSON.
            assert_eq!(plan_graph(&g, workers, &Assumptions::default(), None).unwrap(), p);
            assert_eq!(Plan::from_json(&p.to_json()).unwrap(), p);
            assert!(p.table(&g.name).contains(&format!("on {workers} worker")));
        }
    }
}

/// The layouts weighed for N workers are every `copies × stages = N`, each with its
/// predicted speedup; the plan returned is the best one's (fewer copies on a near tie),
/// for its stages' workers, and comes back through JSON. Copies help where stages cannot:
/// the chain's one heavy product keeps a second stage idle, so on 4 workers some copies
/// are predicted faster than stages alone, and so they are split over processes. Each
/// instance's end on another copy costs the owner a message.
#[test]
fn layouts_weigh_copies_against_stages() {
    for text in ALL {
        let g = graph(text);
        for workers in [1, 2, 4, 6] {
            let p = plan_workers(&g, workers, &Assumptions::default(), None).unwrap();
            let weighed: Vec<(usize, usize)> = p.layouts.iter().map(|o| (o.copies, o.stage_workers)).collect();
            let expected: Vec<(usize, usize)> =
                (1..=workers).filter(|k| workers % k == 0).map(|k| (k, workers / k)).collect();
            assert_eq!(weighed, expected, "{} on {workers}", g.name);
            assert_eq!(p.copies * p.workers, workers);
            let best = p.layouts.iter().map(|o| o.predicted_speedup).fold(0.0, f64::max);
            assert!(p.speedup() >= best / 1.02 - 1e-9, "{}: chose {} of {:?}", g.name, p.summary(), p.layouts);
            assert!(p
                .layouts
                .iter()
                .all(|o| o.predicted_speedup > 0.0 && o.predicted_speedup <= workers as f64 + 1e-9));
            assert_eq!(Plan::from_json(&p.to_json()).unwrap(), p);
            assert!(p.table(&g.name).starts_with("layout: "), "{}", p.table(&g.name));
        }
    }
    let chain = graph(CHAIN);
    let asynchronous = Assumptions { synchronous: false, ..Assumptions::default() };
    let four = plan_workers(&chain, 4, &asynchronous, None).unwrap();
    let stages = four.layouts.iter().find(|o| o.copies == 1).unwrap().predicted_speedup;
    assert!(four.copies > 1 && four.speedup() > stages, "{:?}", four.layouts);
    // Split over two processes: stages over both, or copies in each (2 × 2, 4 × 1), never
    // a copy across the two. With an update every 256 instances the all-reduce costs less
    // than the chain's idle stage; after every instance, its wait for the link does not.
    let hosts = Assumptions { processes: 2, update_every: 256.0, ..Assumptions::default() };
    let split = plan_workers(&chain, 4, &hosts, None).unwrap();
    let weighed: Vec<(usize, usize)> = split.layouts.iter().map(|o| (o.copies, o.stage_workers)).collect();
    assert_eq!(weighed, [(1, 4), (2, 2), (4, 1)]);
    assert!(split.copies > 1 && split.copies.is_multiple_of(2), "{:?}", split.layouts);
    let every = Assumptions { processes: 2, ..Assumptions::default() };
    assert_eq!(plan_workers(&chain, 4, &every, None).unwrap().copies, 1);
    // Over a slow link, the bytes of each update's all-reduce bound the copies.
    let slow = Assumptions { link_bandwidth_mbps: 0.01, ..hosts };
    let over_slow = plan_workers(&chain, 4, &slow, None).unwrap();
    let speedup = |p: &Plan, k: usize| p.layouts.iter().find(|o| o.copies == k).unwrap().predicted_speedup;
    assert!(speedup(&over_slow, 4) < speedup(&split, 4), "{:?}", over_slow.layouts);
    // Each instance that ends on one of the other 3 copies tells the owner (a crossing):
    // 3/4 of a crossing per instance more on the one owner's worker.
    let four_copies = |a: &Assumptions| amp_plan::plan_copies(&chain, 4, 4, a, None).unwrap().layouts[0].clone();
    let dear = Assumptions { cross_us: Assumptions::default().cross_us + 10.0, ..Assumptions::default() };
    let more =
        four_copies(&dear).bottleneck_us_per_instance - four_copies(&Assumptions::default()).bottleneck_us_per_instance;
    assert!((more - 7.5).abs() < 1e-6, "{more}");
}

/// A placement given with copies of the graph (`amprun --plan round-robin --copies K`) is
/// predicted as the planner predicts its own layouts: evaluating the plan's placement for
/// each layout it weighed gives that layout's speedup, in one process and split over two
/// (where its stages are planned without links), not the one-copy prediction.
#[test]
fn a_given_placement_with_copies_is_predicted_as_a_layout() {
    let chain = graph(CHAIN);
    let hosts = Assumptions { processes: 2, update_every: 256.0, ..Assumptions::default() };
    for assumptions in [Assumptions { synchronous: false, ..Assumptions::default() }, hosts] {
        let costs = estimate(&chain, &assumptions, None).unwrap();
        let weighed = plan_workers(&chain, 4, &assumptions, None).unwrap().layouts;
        for option in weighed.iter().filter(|o| o.copies > 1) {
            let stage = amp_plan::plan_copies(&chain, 4, option.copies, &assumptions, None).unwrap();
            let placement = stage.placement(&chain).unwrap();
            let given = evaluate_layout(&chain, &costs, 4, option.copies, &placement).unwrap();
            assert_eq!((given.copies, given.workers), (option.copies, option.stage_workers));
            assert!(close(given.speedup(), option.predicted_speedup), "{:?} vs {option:?}", given.layouts);
        }
        let copies = weighed.iter().find(|o| o.copies == 4).unwrap();
        assert!(copies.predicted_speedup > 1.3, "{copies:?}");
    }
}

#[test]
fn one_worker_plans_put_everything_on_worker_zero() {
    let g = graph(LOOP);
    let p = plan_graph(&g, 1, &Assumptions::default(), None).unwrap();
    assert!(p.nodes.iter().all(|n| n.worker == 0));
    assert_eq!(p.predicted_utilization, vec![1.0]);
    assert!(close(p.critical_path_utilization, 1.0));
    assert!(p.replicas.is_empty() && p.isolated.is_empty());
}

/// The one-line summary counts as stages the workers that have nodes, and names those
/// left idle: a placement of everything on one of 4 workers is one stage, not four.
#[test]
fn the_summary_counts_the_stages_in_use() {
    let g = graph(HEAVY_AROUND_LIGHT_LOOP);
    let costs = estimate(&g, &Assumptions::default(), None).unwrap();
    let bound = g.nodes.node_bound();
    let one = evaluate(&g, &costs, 4, &vec![0; bound]).unwrap();
    assert!(one.summary().starts_with("1 copy × 1 stage on 4 workers, 3 idle (predicted "), "{}", one.summary());
    let spread: Vec<usize> = (0..bound).map(|i| i % 4).collect();
    let four = evaluate(&g, &costs, 4, &spread).unwrap();
    assert!(four.summary().starts_with("1 copy × 4 stages on 4 workers (predicted "), "{}", four.summary());
    let copies = evaluate_layout(&g, &costs, 4, 2, &vec![0; bound]).unwrap();
    assert!(copies.summary().starts_with("2 copies × 1 stage on 4 workers, 2 idle"), "{}", copies.summary());
}

#[test]
fn a_cheap_loop_stays_on_one_worker() {
    let g = graph(HEAVY_AROUND_LIGHT_LOOP);
    for workers in [2, 3, 4] {
        let p = plan_graph(&g, workers, &Assumptions::default(), None).unwrap();
        let worker_of = |id: u32| p.nodes.iter().find(|n| n.id == id).map(|n| n.worker);
        let body: Vec<Option<usize>> = [4, 5, 6, 7].iter().map(|&id| worker_of(id)).collect();
        assert!(
            body.iter().all(|w| *w == body[0]),
            "loop body split at {workers} workers: {body:?}\n{}",
            p.table("Around")
        );
        // The two heavy products are worth separating.
        assert_ne!(worker_of(2), worker_of(9), "{}", p.table("Around"));
    }
}

/// Cheap messages between workers (with the default 4 µs each, the cheap nodes after
/// the big product of `ONE_HEAVY` rather join it than pay for the cut), slow products and
/// rare plain SGD updates, so that the big product's load is its per-message work, which
/// copies share.
fn cheap_messages() -> Assumptions {
    Assumptions {
        hop_us: 0.5,
        cross_us: 0.5,
        flops_per_us: 10.0,
        update_every: 64.0,
        plain_sgd: true,
        ..Assumptions::default()
    }
}

#[test]
fn a_heavy_ppt_gets_its_own_worker_and_a_replica_proposal() {
    let g = graph(ONE_HEAVY);
    let cheap = cheap_messages();
    let costs = estimate(&g, &cheap, None).unwrap();
    let share = node(&costs, 4).load_us / costs.total_us();
    assert!(share > 0.34, "the big Ppt is a third of the work at least ({share})");
    for workers in [3, 4, 8] {
        let p = plan(&g, &costs, workers).unwrap();
        let big = p.nodes.iter().find(|n| n.id == 4).unwrap().worker;
        let sharing: Vec<u32> = p.nodes.iter().filter(|n| n.worker == big && n.id != 4).map(|n| n.id).collect();
        assert!(
            sharing.is_empty(),
            "at {workers} workers %4 shares worker {big} with {sharing:?}\n{}",
            p.table("OneHeavy")
        );
        assert_eq!(p.isolated, vec![4]);
        // It is the bottleneck, and its copies on the next workers take their share of
        // its messages for less than they save: proposed, where the executor puts them.
        let proposal = p.replicas.iter().find(|r| r.id == 4).expect("a replica proposal for %4");
        assert!(proposal.replicas >= 2);
        assert!(close(proposal.predicted_load, share));
        let expected: Vec<usize> = (0..proposal.replicas as usize).map(|r| (big + r) % workers).collect();
        assert_eq!(proposal.workers, expected);
        assert!(p.replica_speedup > p.predicted_speedup * 1.05, "{}", p.table("OneHeavy"));
        // With the copies, the busiest worker is at 100% and the copies' workers busier.
        assert_eq!(p.replica_utilization.len(), workers);
        assert!(p.replica_utilization.iter().any(|&u| close(u, 1.0)));
        for &w in &proposal.workers[1..] {
            assert!(p.replica_utilization[w] > p.predicted_utilization[w], "{}", p.table("OneHeavy"));
        }
        let placement = p.placement(&g).unwrap();
        let proposed: Vec<(u32, usize)> = p.replicas.iter().map(|r| (r.id, r.replicas as usize)).collect();
        assert_eq!(p.replica_nodes(&g, &placement).unwrap(), proposed);
        assert!(p.table("OneHeavy").contains("--plan-replicas"));
    }
}

/// What a copy saves its node's worker must pay for the messages it makes cross: with
/// the default per-message cost, a chain of small products stays unreplicated (as
/// measured on the MLP: replicas of its products on a second worker ran it at 0.5-0.8x),
/// and so does a product whose load is mostly its Adam updates, which stay with the
/// master (and each copy adds a gather and a copy of the values per update).
#[test]
fn replicas_are_proposed_only_where_predicted_to_pay() {
    for (text, workers) in [(CHAIN, 2), (CHAIN, 4), (ONE_HEAVY, 2), (ONE_HEAVY, 4), (LOOP, 4)] {
        let g = graph(text);
        let p = plan_graph(&g, workers, &Assumptions::default(), None).unwrap();
        assert!(p.replicas.is_empty(), "{}", p.table(&g.name));
        assert_eq!(p.replica_speedup, p.predicted_speedup);
        assert!(p.replica_utilization.is_empty());
        assert!(p.table(&g.name).contains("replicas: none predicted to pay"));
    }
}

/// A stored plan's replicas are untrusted: each must name a parameterised node once, with
/// 2 to 64 copies where the executor puts them.
#[test]
fn replica_proposals_read_from_a_file_are_checked() {
    let g = graph(ONE_HEAVY);
    let cheap = cheap_messages();
    let good = plan(&g, &estimate(&g, &cheap, None).unwrap(), 4).unwrap();
    let placement = good.placement(&g).unwrap();
    assert!(good.replica_nodes(&g, &placement).is_ok());
    let edit = |f: &dyn Fn(&mut Plan)| {
        let mut p = Plan::from_json(&good.to_json()).unwrap();
        f(&mut p);
        p.replica_nodes(&g, &placement).unwrap_err().to_string()
    };
    assert!(edit(&|p| p.replicas[0].id = 3).contains("no parameters"), "{}", edit(&|p| p.replicas[0].id = 3));
    assert!(edit(&|p| p.replicas[0].id = 99).contains("no such node"));
    assert!(edit(&|p| {
        let again = p.replicas[0].clone();
        p.replicas.push(again)
    })
    .contains("twice"));
    assert!(edit(&|p| {
        p.replicas[0].replicas = 65;
        p.replicas[0].workers.clear()
    })
    .contains("2 to 64"));
    assert!(edit(&|p| p.replicas[0].workers.reverse()).contains("not where the executor puts them"));
    // Plans written before the workers were listed leave them to the executor's rule.
    let mut older = good.clone();
    older.replicas[0].workers.clear();
    assert!(older.replica_nodes(&g, &placement).is_ok());
}

#[test]
fn evaluate_predicts_any_placement_and_the_plan_is_no_worse_than_naive_ones() {
    for text in ALL {
        let g = graph(text);
        let costs = estimate(&g, &Assumptions::default(), None).unwrap();
        let bound = g.nodes.node_bound();
        for workers in [2, 4] {
            let planned = plan(&g, &costs, workers).unwrap();
            let round_robin: Vec<usize> = (0..bound).map(|i| i % workers).collect();
            let stages: Vec<usize> = (0..bound).map(|i| i * workers / bound).collect();
            for placement in [round_robin, stages] {
                let other = evaluate(&g, &costs, workers, &placement).unwrap();
                let busiest = |p: &Plan| p.cost_model.as_ref().unwrap().bottleneck_us_per_instance;
                assert!(busiest(&planned) <= busiest(&other) * (1.0 + 1e-9), "{} at {workers}", g.name);
                // Each node where the placement put it, or a fused group's member where
                // its first node is (as the executor runs it).
                for node in &other.nodes {
                    let unit = costs.node(node.id as usize).unwrap().unit;
                    assert_eq!(node.worker, placement[unit as usize]);
                }
            }
        }
    }
    let g = graph(CHAIN);
    let costs = estimate(&g, &Assumptions::default(), None).unwrap();
    assert_eq!(
        evaluate(&g, &costs, 2, &[0, 1, 2]),
        Err(PlanError::WorkerOutOfRange { node: 2, worker: 2, workers: 2 })
    );
    assert_eq!(evaluate(&g, &costs, 2, &[0]), Err(PlanError::Length { placed: 1, nodes: 6 }));
    assert_eq!(plan(&g, &costs, 0), Err(PlanError::Workers { workers: 0 }));
    assert_eq!(plan(&g, &costs, 1025), Err(PlanError::Workers { workers: 1025 }));
    let other = estimate(&graph(LOOP), &Assumptions::default(), None).unwrap();
    assert_eq!(plan(&g, &other, 2), Err(PlanError::Costs));
}

#[test]
fn plans_that_do_not_fit_the_graph_are_refused() {
    let g = graph(CHAIN);
    let good = plan_graph(&g, 2, &Assumptions::default(), None).unwrap().to_json();
    let refused = |edit: &dyn Fn(&mut serde_json::Value)| -> PlanError {
        let mut value = good.clone();
        edit(&mut value);
        match Plan::from_json(&value) {
            Err(e) => e,
            Ok(p) => p.placement(&g).expect_err("this plan does not fit"),
        }
    };
    assert_eq!(
        refused(&|v| v["nodes"][1]["worker"] = 7.into()),
        PlanError::WorkerOutOfRange { node: 1, worker: 7, workers: 2 }
    );
    assert_eq!(
        refused(&|v| {
            v["nodes"].as_array_mut().unwrap().pop();
        }),
        PlanError::Length { placed: 5, nodes: 6 }
    );
    assert_eq!(refused(&|v| v["nodes"][1]["id"] = 0.into()), PlanError::DuplicateNode { node: 0 });
    assert_eq!(refused(&|v| v["nodes"][1]["id"] = 99.into()), PlanError::UnknownNode { node: 99 });
    assert_eq!(refused(&|v| v["workers"] = 0.into()), PlanError::Workers { workers: 0 });
    assert_eq!(
        refused(&|v| v["predicted_utilization"] = serde_json::json!([1.0])),
        PlanError::FieldLength { field: "predicted_utilization", len: 1, workers: 2 }
    );
    for bad in [serde_json::json!(null), serde_json::json!("plan"), serde_json::json!({"workers": -1, "nodes": []})] {
        assert!(matches!(Plan::from_json(&bad), Err(PlanError::Json { .. })), "{bad}");
    }
    let message = PlanError::WorkerOutOfRange { node: 1, worker: 7, workers: 2 }.to_string();
    assert!(message.contains("%1") && message.contains("worker 7"), "{message}");
}

/// The cell took its 3 messages per instance in one batch: it costs one event per
/// instance, but cut from its input it still costs a crossing per message, and a wake-up
/// per step it took them in. (A profile written before messages were counted has its
/// events alone, and they stand in.)
#[test]
fn a_cut_edge_carries_the_messages_a_profile_counted_and_wakes_its_target_per_step() {
    let g = graph(LOOP);
    let mut counter = ProfileCounter::default();
    for _ in 0..10 {
        counter.add(Event { node: 12, work: Work::Forward, dur_ns: 60_000, messages: 3, instances: 1, rows: 0 });
        counter.add(Event { node: 12, work: Work::Backward, dur_ns: 120_000, messages: 3, instances: 1, rows: 0 });
    }
    counter.add_instances(10, 0.01);
    let profile = counter.finish(&g, 1, 1);
    let mut old = profile.clone();
    old.nodes.iter_mut().for_each(|n| (n.forward_messages_per_instance, n.backward_messages_per_instance) = (0.0, 0.0));
    let into_cell = |profile: &Profile| {
        let read = Profile::from_json(&profile.to_json().to_string()).unwrap();
        let costs = estimate(&g, &Assumptions::default(), Some(&read)).unwrap();
        let cell = node(&costs, 12);
        assert!(close(cell.forward_messages, 1.0), "one event per instance");
        let edges: Vec<_> = costs.edges.iter().filter(|e| e.to == 12).collect();
        assert!(!edges.is_empty() && edges.iter().all(|e| e.cut_us > 0.0));
        let a = Assumptions::default();
        for e in &edges {
            // Forward, the cell's steps per message (one step for three); backward, the
            // producers', which the profile saw take nothing: one each, as in the model.
            let steps = cell.forward_messages / cell.arrivals + 1.0;
            let expected = e.messages * (2.0 * (a.cross_us + e.bytes / a.bytes_per_us) + steps * a.hop_us);
            assert!(close(e.cut_us, expected), "{} vs {expected}", e.cut_us);
        }
        (cell.arrivals, edges.iter().map(|e| e.messages).sum::<f64>())
    };
    let (arrivals, messages) = into_cell(&profile);
    assert!(close(arrivals, 3.0) && close(messages, 3.0), "{arrivals} {messages}");
    let (arrivals, messages) = into_cell(&old);
    assert!(close(arrivals, 1.0) && close(messages, 1.0), "{arrivals} {messages}");
}

/// The chain's two layers, equally heavy, split well over two workers when its instances
/// spread out; when all 16 in flight go through every node together (each step serves
/// them all), one worker waits while the other works and the wake-ups come on top: the
/// latency bound keeps the chain on one worker, as do measured MLPs.
#[test]
fn instances_that_move_together_keep_a_chain_on_one_worker() {
    let g = graph(CHAIN);
    let in_flight = 16;
    let profile = |together: u64| {
        let mut counter = ProfileCounter::default();
        for _ in 0..in_flight / together {
            for (node, forward, backward) in [(1, 1, 0), (2, 50, 100), (3, 1, 1), (4, 50, 100), (5, 1, 0)] {
                for (work, us) in [(Work::Forward, forward), (Work::Backward, backward)] {
                    let (dur_ns, messages, instances) = (us * together * 1000, together, together);
                    counter.add(Event { node, work, dur_ns, messages, instances, rows: 0 });
                }
            }
        }
        counter.add_instances(in_flight, 0.01);
        counter.finish(&g, 1, in_flight)
    };
    let a = Assumptions::default();
    let planned = |profile: &Profile| {
        let read = Profile::from_json(&profile.to_json().to_string()).unwrap();
        let costs = estimate(&g, &a, Some(&read)).unwrap();
        let p = plan(&g, &costs, 2).unwrap();
        let summary = p.cost_model.clone().unwrap();
        (p, summary.latency_us_per_instance, costs.total_us())
    };

    // One instance per step: the layers go to two workers.
    let (spread, latency, total) = planned(&profile(1));
    assert!(spread.predicted_speedup > 1.5, "{spread:?}");
    assert!(latency > 0.0 && latency < total / 4.0, "{latency} of {total}");
    let worker = |p: &Plan, id: u32| p.nodes.iter().find(|n| n.id == id).unwrap().worker;
    assert_ne!(worker(&spread, 2), worker(&spread, 4));

    // All 16 per step: an instance spends the whole work in its steps; any cut only adds.
    let (together, latency, total) = planned(&profile(16));
    assert!(latency >= 0.9 * total, "{latency} of {total}");
    assert!(together.nodes.iter().all(|n| n.worker == 0), "{together:?}");
    assert!(close(together.predicted_speedup, 1.0), "{}", together.predicted_speedup);
    // Forced apart, the prediction counts the bound and each cut's wake-ups.
    let costs = estimate(&g, &a, Some(&profile(16))).unwrap();
    let split = evaluate(&g, &costs, 2, &[0, 0, 0, 0, 1, 1]).unwrap();
    let bound = split.cost_model.as_ref().unwrap().latency_us_per_instance;
    assert!(bound > latency + a.wake_us / in_flight as f64, "{bound} vs {latency}");
    assert!(split.predicted_speedup < 1.0, "{}", split.predicted_speedup);
    assert!(split.predicted_utilization.iter().all(|&u| u < 1.0), "the bound, not a worker, limits it");

    // A profile that does not say how many were in flight bounds nothing.
    let mut unknown = profile(16);
    unknown.in_flight = 0;
    let (old, latency, _) = planned(&unknown);
    assert_eq!(latency, 0.0);
    assert!(old.predicted_speedup > 1.5, "{old:?}");
}

/// A step's time that does not shrink with its rows (a Linear's call on few rows) is paid
/// again at every step that copies of the graph add: each of k copies holds 1/k of the
/// instances in flight, so its steps serve fewer rows and there are more of them. The
/// profile fits that part through steps of different sizes; the same mean times, all of
/// them per row, predict copies faster.
#[test]
fn copies_pay_the_fixed_part_of_every_step_they_add() {
    let g = graph(CHAIN);
    let in_flight = 16;
    // Steps of 4 and 12 instances (a row each) at every node; the layers' steps take
    // `fixed` µs plus `per_row` a row, forward and backward alike.
    let profile = |fixed: f64, per_row: f64, sizes: [u64; 2]| {
        let mut counter = ProfileCounter::default();
        for _ in 0..8 {
            for size in sizes {
                for node in 1..=5 {
                    let us = if node == 2 || node == 4 { fixed + per_row * size as f64 } else { 0.5 * size as f64 };
                    for work in [Work::Forward, Work::Backward] {
                        let dur_ns = (us * 1000.0) as u64;
                        counter.add(Event { node, work, dur_ns, messages: size, instances: size, rows: size });
                    }
                }
            }
        }
        counter.add_instances(8 * sizes.iter().sum::<u64>(), 0.01);
        counter.finish(&g, 1, in_flight)
    };
    let fixed = profile(20.0, 1.0, [4, 12]);
    let layer = fixed.nodes.iter().find(|n| n.id == 2).unwrap();
    let fit = layer.forward_fixed_us.unwrap();
    assert!((fit - 20.0).abs() < 1e-3, "{fit}");
    assert!(fixed.nodes.iter().find(|n| n.id == 3).unwrap().forward_fixed_us.unwrap() < 1e-3);
    // The same mean step (28 µs for 8 rows), all of it per row.
    let per_row = profile(0.0, 3.5, [4, 12]);
    assert!(close(layer.forward_us, per_row.nodes.iter().find(|n| n.id == 2).unwrap().forward_us));
    let a = Assumptions { update_every: 16.0, in_flight: 16.0, synchronous: false, ..Assumptions::default() };
    let read = |p: &Profile| Profile::from_json(&p.to_json().to_string()).unwrap();
    let two_copies = |p: &Profile| amp_plan::plan_copies(&g, 2, 2, &a, Some(&read(p))).unwrap().layouts[0].clone();
    let (with_fixed, without) = (two_copies(&fixed), two_copies(&per_row));
    assert!(without.predicted_speedup > 1.5, "{without:?}");
    assert!(with_fixed.predicted_speedup < without.predicted_speedup - 0.1, "{with_fixed:?} against {without:?}");
    // Steps of 8 instances become two of 4: each layer's 20 µs once more per 8 instances,
    // both ways, two layers, shared by the two copies' workers: 5 µs per instance.
    let more = with_fixed.bottleneck_us_per_instance - without.bottleneck_us_per_instance;
    assert!((more - 5.0).abs() < 0.01, "{more}");
    // Steps of one size fit no line: the fixed part is what a step took beyond the model's
    // work for its rows (a layer's 8 rows: 2 · 4 · 8 FLOPs each).
    let even = profile(20.0, 1.0, [8, 8]);
    assert!(even.nodes.iter().all(|n| n.forward_fixed_us.is_none()), "{even:?}");
    let costs = estimate(&g, &a, Some(&read(&even))).unwrap();
    let expected = 28.0 - 8.0 * 64.0 / a.flops_per_us;
    assert!(close(node(&costs, 2).forward_fixed_us, expected), "{}", node(&costs, 2).forward_fixed_us);
}

/// Synchronous training (amprun's default) holds every instance at an update boundary
/// until the update: copies of the graph then wait for each other, the owner for the last
/// end on another copy and the copies for the window it opens, a wake-up each per update.
/// Asynchronous copies do not wait; with an update after every instance, synchronous
/// copies cost more than they gain.
#[test]
fn synchronous_copies_wait_for_each_other_at_every_update() {
    let chain = graph(CHAIN);
    let every = |synchronous: bool, update_every: f64| Assumptions { synchronous, update_every, ..Default::default() };
    let bottleneck = |a: &Assumptions, k: usize| {
        amp_plan::plan_copies(&chain, k, k, a, None).unwrap().layouts[0].bottleneck_us_per_instance
    };
    let (waits, flows) = (every(true, 16.0), every(false, 16.0));
    let stall = bottleneck(&waits, 2) - bottleneck(&flows, 2);
    assert!(close(stall, 2.0 * waits.wake_us / 16.0), "{stall}");
    // One copy waits for no other.
    assert!(close(bottleneck(&waits, 1), bottleneck(&flows, 1)));
    let after_each = plan_workers(&chain, 4, &every(true, 1.0), None).unwrap();
    assert_eq!(after_each.copies, 1, "{:?}", after_each.layouts);
    assert!(plan_workers(&chain, 4, &every(false, 1.0), None).unwrap().copies > 1);
}

#[test]
fn a_profile_replaces_counts_and_times() {
    let g = graph(LOOP);
    let mut counter = ProfileCounter::default();
    // 10 instances of 3 iterations each: the cell ran 30 times forward at 20 µs.
    for _ in 0..30 {
        counter.add(Event { node: 12, work: Work::Forward, dur_ns: 20_000, messages: 1, instances: 1, rows: 0 });
        counter.add(Event { node: 12, work: Work::Backward, dur_ns: 40_000, messages: 1, instances: 1, rows: 0 });
    }
    counter.add(Event { node: 12, work: Work::Update, dur_ns: 100_000, messages: 0, instances: 0, rows: 0 });
    counter.add_instances(10, 0.01);
    let profile = counter.finish(&g, 1, 1);
    assert_eq!(profile.nodes.len(), g.nodes.node_count());
    let text = profile.to_json().to_string();
    let read = Profile::from_json(&text).unwrap();
    assert_eq!(read, profile);
    let a = Assumptions::default();
    let costs = estimate(&g, &a, Some(&read)).unwrap();
    assert!(costs.profiled);
    let cell = node(&costs, 12);
    assert!(cell.measured);
    assert!(close(cell.forward_messages, 3.0));
    assert!(close(cell.forward_us, a.message_us + 20.0));
    assert!(close(cell.load_us, 3.0 * (a.message_us + 20.0) + 3.0 * (a.message_us + 40.0) + 0.1 * 100.0));
    assert!(close(cell.arrivals, 3.0));
    // A node that never ran costs nothing.
    assert_eq!(node(&costs, 16).load_us, 0.0);
    let p = plan(&g, &costs, 2).unwrap();
    assert_eq!(p.cost_model.as_ref().unwrap().source, "profile");

    // A profile of another graph is refused.
    let other = graph(CHAIN);
    assert!(matches!(estimate(&other, &a, Some(&read)), Err(PlanError::Profile { .. })));
    let mut renamed = read.clone();
    renamed.model.clear();
    renamed.nodes[2].op = "linear".into();
    assert!(matches!(estimate(&g, &a, Some(&renamed)), Err(PlanError::Profile { .. })));
    let mut negative = read.clone();
    negative.nodes[0].forward_us = -1.0;
    assert!(matches!(estimate(&g, &a, Some(&negative)), Err(PlanError::Profile { .. })));
    assert!(matches!(Profile::from_json("{\"version\": 9}"), Err(PlanError::Profile { .. })));
    assert!(matches!(Profile::from_json("not json"), Err(PlanError::Profile { .. })));
}

#[test]
fn assumptions_must_be_finite_and_in_range() {
    let g = graph(CHAIN);
    for bad in [
        Assumptions { flops_per_us: 0.0, ..Assumptions::default() },
        Assumptions { elements: f64::NAN, ..Assumptions::default() },
        Assumptions { hop_us: -1.0, ..Assumptions::default() },
        Assumptions { update_every: f64::INFINITY, ..Assumptions::default() },
    ] {
        assert!(matches!(estimate(&g, &bad, None), Err(PlanError::Assumption { .. })));
    }
}

#[test]
fn a_fused_group_and_its_split_cost_one_node_and_share_a_worker() {
    let g = graph(FUSED);
    let a = Assumptions::default();
    let costs = estimate(&g, &a, None).unwrap();
    // %4 (the group's first node) stands for the unit; the split joins it.
    for v in 3..=7 {
        assert_eq!(node(&costs, v).unit, 4, "%{v}");
    }
    for v in [0, 1, 2, 8, 9] {
        assert_eq!(node(&costs, v).unit, v as u32, "%{v}");
    }
    // Inside the unit a message costs nothing; the work runs at the fused rate.
    let sigmoid = node(&costs, 4);
    assert!(close(sigmoid.forward_us, 4.0 * 64.0 / a.fused_elements_per_us));
    assert!(close(node(&costs, 3).forward_us, 192.0 / a.fused_elements_per_us));
    // One message enters (from %2) and one leaves (to %8), each way: four per instance.
    assert!(close(sigmoid.routing_us, 4.0 * a.message_us), "{}", sigmoid.routing_us);
    assert!((3..=7).filter(|&v| v != 4).all(|v| node(&costs, v).routing_us == 0.0));
    // Standing alone, the tanh would have paid a message each way.
    assert!(node(&costs, 5).load_us < 2.0 * a.message_us);

    for workers in 2..=4 {
        let p = plan(&g, &costs, workers).unwrap();
        let worker = |v: u32| p.nodes.iter().find(|n| n.id == v).map(|n| n.worker);
        assert!((3..=7).all(|v| worker(v) == worker(4)), "{workers} workers: {:?}", p.nodes);
    }
    // A placement that tears the group apart is predicted as the executor runs it: on the
    // worker of its first node.
    let torn = [0, 0, 1, 0, 1, 0, 1, 0, 0, 0];
    let p = evaluate(&g, &costs, 2, &torn).unwrap();
    let workers: Vec<usize> = p.nodes.iter().map(|n| n.worker).collect();
    assert_eq!(workers, [0, 0, 1, 1, 1, 1, 1, 1, 0, 0]);
}

#[test]
fn plain_sgd_updates_only_what_instances_used() {
    // An embedding of 10 rows of 6, 8 lookups per instance, an update every instance:
    // Adam updates the whole table, plain SGD the 8 rows it looked up (48 of 60 values),
    // reading and writing each once.
    let g = graph(MAP);
    let adam = Assumptions::default();
    let sgd = Assumptions { plain_sgd: true, ..Assumptions::default() };
    let dense = node(&estimate(&g, &adam, None).unwrap(), 2).update_us;
    let sparse = node(&estimate(&g, &sgd, None).unwrap(), 2).update_us;
    assert!(close(dense, 60.0 / adam.update_elements_per_us));
    assert!(close(sparse, 48.0 / (4.0 * adam.update_elements_per_us)));
    // Updated every 4 instances, the lookups cover the table: no more than all of it.
    let every4 = Assumptions { update_every: 4.0, ..sgd.clone() };
    assert!(close(node(&estimate(&g, &every4, None).unwrap(), 2).update_us, 60.0 / (4.0 * 600.0) / 4.0));

    // An expert reached by a quarter of the instances, updated every 4 instances: under
    // plain SGD only the updates after which it had work (1 - 0.75^4 of them) touch it.
    let g = graph(ROUTED);
    let routed = Assumptions { update_every: 4.0, ..sgd };
    let costs = estimate(&g, &routed, None).unwrap();
    let expert = node(&costs, 3);
    assert!(close(expert.forward_messages, 0.25));
    let reached = 1.0 - 0.75f64.powi(4);
    assert!(close(expert.update_us, reached * 72.0 / (4.0 * 600.0) / 4.0), "{}", expert.update_us);
    let costs = estimate(&g, &Assumptions { update_every: 4.0, ..adam }, None).unwrap();
    assert!(close(node(&costs, 3).update_us, 72.0 / 600.0 / 4.0));
}

/// A worker three times slower (`worker_speed`) gets less of the work: the plan's
/// predicted share of the slow worker's load falls, each worker's time is its work over
/// its speed, and a speed that is not positive is refused.
#[test]
fn a_slow_worker_is_given_less_work() {
    let g = graph(LOOP);
    let cheap = Assumptions { hop_us: 0.5, cross_us: 0.5, ..Assumptions::default() };
    let even = plan(&g, &estimate(&g, &cheap, None).unwrap(), 2).unwrap();
    let slow_setup = Assumptions { worker_speed: vec![1.0, 0.33], ..cheap.clone() };
    let slow = plan(&g, &estimate(&g, &slow_setup, None).unwrap(), 2).unwrap();
    assert!(
        slow.workers_load[1] < even.workers_load[1],
        "worker 1's share {} with speed 0.33, {} at equal speeds\n{}",
        slow.workers_load[1],
        even.workers_load[1],
        slow.table("Loop")
    );
    // The slow worker's predicted time is its load over its speed.
    let model = slow.cost_model.as_ref().unwrap();
    let on_one: f64 =
        slow.nodes.iter().filter(|n| n.worker == 1).map(|n| n.predicted_load * model.total_us_per_instance).sum();
    assert!(model.workers_us[1] >= on_one / 0.33 - 1e-6, "{:?} vs {on_one}", model.workers_us);
    for bad in [0.0, -1.0, f64::NAN] {
        let setup = Assumptions { worker_speed: vec![1.0, bad], ..Assumptions::default() };
        assert!(estimate(&g, &setup, None).is_err() || plan_graph(&g, 2, &setup, None).is_err(), "speed {bad}");
    }
}

/// A batched map's body (`x.edges.map(|e| tanh(lin(h[e.src])))` masked by the edge's
/// kind, then summed): one message per collection at every node, and the work of all
/// its rows (`gather_rows` yields `len($.edges)` rows).
const BATCHED_MAP: &str = r#"amp.graph @BatchedMap {
  state %inst: instance, %e0: element, %e1: element
  param emb.weight: f32[10, 4] normal
  param lin.weight: f32[8, 4] uniform(4)
  param lin.bias: f32[8] uniform(4)
  param head.weight: f32[3, 8] uniform(8)
  param head.bias: f32[3] uniform(8)
  %0 = source() -> unit writes(%inst) "instances"
  %1 = flatmap %e0 [len($.nodes)] (%0#0: unit) -> unit writes(%e0) key(%inst) "nodes"
  %2 = embedding @emb[$.nodes[%e0]] (%1#0: unit) -> f32[4] reads(%e0) "emb"
  %3 = group %e0 [len($.nodes)] (%2#0: f32[4], %0#0: unit) -> f32[?, 4] writes(%e0) key(%inst) "h"
  %4 = gather_rows %e1 [$.edges[%e1].src] [len($.edges)] (%3#0: f32[?, 4]) -> f32[?, 4] key(%inst) "rows"
  %5 = linear @lin (%4#0: f32[?, 4]) -> f32[?, 8] key(%inst) "lin"
  %6 = unary tanh (%5#0: f32[?, 8]) -> f32[?, 8] key(%inst) "tanh"
  %7 = mask_rows %e1 [$.edges[%e1].kind == 0] (%6#0: f32[?, 8]) -> f32[?, 8] "route"
  %8 = reduce sum (%7#0: f32[?, 8]) -> f32[8] key(%inst) "sum"
  %9 = linear @head (%8#0: f32[8]) -> f32[3] key(%inst) "head"
  %10 = loss cross_entropy [$.label] (%9#0: f32[3]) -> () key(%inst) "loss"
}
"#;

#[test]
fn a_batched_map_is_one_message_per_collection_and_the_work_of_its_rows() {
    let a = Assumptions { elements: 6.0, ..Assumptions::default() };
    let costs = estimate(&graph(BATCHED_MAP), &a, None).unwrap();
    for id in [4, 5, 6, 7, 8] {
        assert!(close(node(&costs, id).forward_messages, 1.0), "%{id}: one message per instance");
    }
    assert_eq!(node(&costs, 5).forward_work, 6.0 * 2.0 * 4.0 * 8.0, "one GEMM over the 6 rows");
    assert_eq!(node(&costs, 6).forward_work, 6.0 * 8.0 * amp_ir::UnaryFn::Tanh.spec().flops);
    assert_eq!(node(&costs, 7).forward_work, 6.0 * 8.0);
    let edge = costs.edges.iter().find(|e| e.from == 4).expect("the gathered rows' edge");
    assert_eq!(edge.bytes, 4.0 * 6.0 * 4.0 + 3.0 * 8.0);
    // The ops that evaluate an index or an arm per row (`gather_rows`, `mask_rows`) pay
    // `row_us` for each of the 6 rows, each direction, besides their elements; the
    // product and the elementwise node do not.
    let free = Assumptions { row_us: 0.0, ..a.clone() };
    let without = estimate(&graph(BATCHED_MAP), &free, None).unwrap();
    for (id, per_row) in [(4, true), (5, false), (6, false), (7, true)] {
        let extra = node(&costs, id).load_us - node(&without, id).load_us;
        let expected = if per_row { 2.0 * 6.0 * a.row_us } else { 0.0 };
        assert!(close(extra, expected), "%{id}: {extra} µs for its rows, expected {expected}");
    }
}

/// A chatty loop: 8 iterations whose body is two 1024-wide products; split between them,
/// every iteration sends a 4 KiB message each way across the cut, twice.
const CHATTY: &str = r#"amp.graph @Chatty {
  state %inst: instance, %t0: counter
  param a.weight: f32[1024, 1024] uniform(1024)
  param a.bias: f32[1024] uniform(1024)
  param b.weight: f32[1024, 1024] uniform(1024)
  param b.bias: f32[1024] uniform(1024)
  %0 = source() -> unit writes(%inst) "instances"
  %1 = read $.x (%0#0: unit) -> f32[1024] key(%inst) "read"
  %2 = isu %t0 := 0 inverse -1 (%1#0: f32[1024]) -> f32[1024] writes(%t0) "loop entry"
  %3 = phi 2 (%2#0: f32[1024], %8#0: f32[1024]) -> f32[1024] key(%inst, %t0) "loop"
  %4 = cond [%t0 < 8] (%3#0: f32[1024]) -> f32[1024], f32[1024] reads(%t0) key(%inst, %t0) "loop test"
  %5 = linear @a (%4#0: f32[1024]) -> f32[1024] key(%inst, %t0) "a"
  %6 = unary tanh (%5#0: f32[1024]) -> f32[1024] key(%inst, %t0) "tanh"
  %7 = linear @b (%6#0: f32[1024]) -> f32[1024] key(%inst, %t0) "b"
  %8 = isu %t0 := %t0 + 1 inverse %t0 - 1 (%7#0: f32[1024]) -> f32[1024] reads(%t0) writes(%t0) "loop step"
  %9 = isu %t0 := -1 inverse 8 (%4#1: f32[1024]) -> f32[1024] writes(%t0) "loop exit"
  %10 = loss mse (%9#0: f32[1024], %1#0: f32[1024]) -> () key(%inst) "loss"
}
"#;

/// The pairs of workers between which `plan` cuts an edge of `g`.
fn cut_pairs(g: &amp_ir::verify::Verified, p: &Plan) -> Vec<(usize, usize)> {
    let worker: std::collections::BTreeMap<u32, usize> = p.nodes.iter().map(|n| (n.id, n.worker)).collect();
    let mut pairs: Vec<(usize, usize)> = g
        .nodes
        .edge_indices()
        .filter_map(|e| g.nodes.edge_endpoints(e))
        .map(|(a, b)| (worker[&(a.index() as u32)], worker[&(b.index() as u32)]))
        .filter(|(a, b)| a != b)
        .map(|(a, b)| (a.min(b), a.max(b)))
        .collect();
    pairs.sort_unstable();
    pairs.dedup();
    pairs
}

#[test]
fn a_slow_link_keeps_a_chatty_models_cuts_inside_a_host_and_a_fast_one_cuts_across() {
    let g = graph(CHATTY);
    let slow = Assumptions {
        processes: 2,
        link_latency_us: 500.0,
        link_bandwidth_mbps: 1_000.0,
        link_message_us: 5.0,
        ..Assumptions::default()
    };
    let fast = Assumptions {
        processes: 2,
        link_latency_us: 0.0,
        link_bandwidth_mbps: 1e6,
        link_message_us: 1.0,
        ..Assumptions::default()
    };
    // On the cores of one machine the two products are worth separating.
    let cores = plan_graph(&g, 2, &Assumptions::default(), None).unwrap();
    assert_eq!(cut_pairs(&g, &cores), [(0, 1)], "{}", cores.table("Chatty"));
    // One worker per host: a slow link is not worth crossing, a fast one is.
    let hosts_slow = plan_graph(&g, 2, &slow, None).unwrap();
    assert_eq!(cut_pairs(&g, &hosts_slow), [], "{}", hosts_slow.table("Chatty"));
    let hosts_fast = plan_graph(&g, 2, &fast, None).unwrap();
    assert_eq!(cut_pairs(&g, &hosts_fast), [(0, 1)], "{}", hosts_fast.table("Chatty"));
    // Two hosts of two cores (workers 0, 1 and 2, 3): over a slow link the cut stays
    // between the cores of one host.
    let four = plan_graph(&g, 4, &slow, None).unwrap();
    let pairs = cut_pairs(&g, &four);
    assert!(!pairs.is_empty(), "{}", four.table("Chatty"));
    for (a, b) in pairs {
        assert_eq!(
            amp_ir::placement::process_of(a, 2, 4),
            amp_ir::placement::process_of(b, 2, 4),
            "{}",
            four.table("Chatty")
        );
    }
    // The plan says which link it assumed, and predicts the link's time when crossed.
    let model = hosts_fast.cost_model.as_ref().unwrap();
    assert_eq!(model.assumptions, fast);
    assert_eq!(model.links_us.len(), 2);
    assert!(model.links_us.iter().all(|&us| us > 0.0), "{:?}", model.links_us);
    let json = hosts_fast.to_json();
    assert_eq!(json["cost_model"]["assumptions"]["link_latency_us"], 0.0);
    assert_eq!(json["cost_model"]["assumptions"]["processes"], 2);
    assert!(hosts_slow.cost_model.as_ref().unwrap().links_us.iter().all(|&us| us == 0.0));
    assert!(cores.to_json()["cost_model"].get("links_us").is_none());
}

#[test]
fn processes_follow_the_executors_blocks_and_bad_link_assumptions_are_refused() {
    // 10 workers over 4 processes: 3, 3, 2, 2.
    let of: Vec<usize> = (0..10).map(|w| amp_ir::placement::process_of(w, 4, 10)).collect();
    assert_eq!(of, [0, 0, 0, 1, 1, 1, 2, 2, 3, 3]);
    assert_eq!((0..4).map(|w| amp_ir::placement::process_of(w, 1, 4)).collect::<Vec<_>>(), [0, 0, 0, 0]);
    let g = graph(CHAIN);
    for bad in [
        Assumptions { processes: 0, ..Assumptions::default() },
        Assumptions { processes: 100_000, ..Assumptions::default() },
        Assumptions { link_latency_us: -1.0, ..Assumptions::default() },
        Assumptions { link_bandwidth_mbps: 0.0, ..Assumptions::default() },
        Assumptions { link_message_us: f64::NAN, ..Assumptions::default() },
        Assumptions { in_flight: 0.0, ..Assumptions::default() },
    ] {
        assert!(matches!(estimate(&g, &bad, None), Err(PlanError::Assumption { .. })), "{bad:?}");
    }
    let three = Assumptions { processes: 3, ..Assumptions::default() };
    assert_eq!(plan_graph(&g, 2, &three, None), Err(PlanError::Processes { processes: 3, workers: 2 }));
    // A stored plan's link assumptions are untrusted like the rest of it.
    let good = plan_graph(&g, 2, &Assumptions { processes: 2, ..Assumptions::default() }, None).unwrap();
    assert!(good.placement(&g).is_ok());
    for (field, value) in [
        ("link_bandwidth_mbps", serde_json::json!(-5.0)),
        ("processes", serde_json::json!(3)),
        ("link_latency_us", serde_json::json!("slow")),
    ] {
        let mut json = good.to_json();
        json["cost_model"]["assumptions"][field] = value;
        let refused = Plan::from_json(&json).and_then(|p| p.placement(&g));
        assert!(refused.is_err(), "{field}");
        assert!(!refused.unwrap_err().to_string().is_empty());
    }
}

#[test]
fn plans_for_hosts_are_no_worse_than_one_worker_or_naive_placements() {
    let links = [
        Assumptions { processes: 2, ..Assumptions::default() },
        Assumptions { processes: 3, link_latency_us: 1_000.0, link_bandwidth_mbps: 100.0, ..Assumptions::default() },
    ];
    for text in ALL.iter().chain([&CHATTY]) {
        let g = graph(text);
        let bound = g.nodes.node_bound();
        for link in &links {
            let costs = estimate(&g, link, None).unwrap();
            for workers in [3, 4, 8] {
                let planned = plan(&g, &costs, workers).unwrap();
                let busiest = |p: &Plan| p.cost_model.as_ref().unwrap().bottleneck_us_per_instance;
                // The link times are part of the bottleneck a plan reports.
                let model = planned.cost_model.as_ref().unwrap();
                assert_eq!(model.links_us.len(), link.processes);
                assert!(model.links_us.iter().all(|&us| us <= busiest(&planned) + 1e-9));
                let one = vec![0; bound];
                let round_robin: Vec<usize> = (0..bound).map(|i| i % workers).collect();
                let stages: Vec<usize> = (0..bound).map(|i| i * workers / bound).collect();
                for placement in [one, round_robin, stages] {
                    let other = evaluate(&g, &costs, workers, &placement).unwrap();
                    assert!(
                        busiest(&planned) <= busiest(&other) * (1.0 + 1e-9) + 1e-9,
                        "{} at {workers} workers over {} processes: {} against {}",
                        g.name,
                        link.processes,
                        busiest(&planned),
                        busiest(&other)
                    );
                }
            }
        }
    }
}

/// One 1024-wide product applied twice (one parameter group, two nodes): on two cores
/// worth separating, but the executor runs a group's nodes in one process.
const SHARED_PARAMS: &str = r#"amp.graph @Shared {
  state %inst: instance
  param a.weight: f32[1024, 1024] uniform(1024)
  param a.bias: f32[1024] uniform(1024)
  %0 = source() -> unit writes(%inst) "instances"
  %1 = read $.x (%0#0: unit) -> f32[1024] key(%inst) "read"
  %2 = linear @a (%1#0: f32[1024]) -> f32[1024] key(%inst) "first"
  %3 = unary tanh (%2#0: f32[1024]) -> f32[1024] key(%inst) "tanh"
  %4 = linear @a (%3#0: f32[1024]) -> f32[1024] key(%inst) "second"
  %5 = loss mse (%4#0: f32[1024], %1#0: f32[1024]) -> () key(%inst) "loss"
}
"#;

#[test]
fn a_parameter_groups_nodes_stay_in_one_process() {
    let g = graph(SHARED_PARAMS);
    let worker_of = |p: &Plan, id: u32| p.nodes.iter().find(|n| n.id == id).unwrap().worker;
    let cores = plan_graph(&g, 2, &Assumptions::default(), None).unwrap();
    assert_ne!(worker_of(&cores, 2), worker_of(&cores, 4), "{}", cores.table("Shared"));
    let fast = Assumptions { processes: 2, link_latency_us: 0.0, link_bandwidth_mbps: 1e6, ..Assumptions::default() };
    for workers in [2, 3, 4, 8] {
        let hosts = plan_graph(&g, workers, &fast, None).unwrap();
        let (first, second) = (worker_of(&hosts, 2), worker_of(&hosts, 4));
        assert_eq!(
            amp_ir::placement::process_of(first, 2, workers),
            amp_ir::placement::process_of(second, 2, workers),
            "{workers} workers\n{}",
            hosts.table("Shared")
        );
    }
}

/// One embedding table looked up by two batched lookups (`embedding_rows`, as a batched
/// `map` lowers `emb(t)`): one parameter group, which a plan over processes keeps in one
/// process like any other (the executor refuses a group split over processes).
const SHARED_TABLE: &str = r#"amp.graph @Table {
  state %inst: instance, %r0: element, %r1: element
  param emb.weight: f32[1000, 256] normal
  param l.weight: f32[1024, 256] uniform(256)
  param l.bias: f32[1024] uniform(256)
  param r.weight: f32[1024, 256] uniform(256)
  param r.bias: f32[1024] uniform(256)
  %0 = source() -> unit writes(%inst) "instances"
  %1 = embedding_rows @emb %r0 [$.a[%r0]] [len($.a)] (%0#0: unit) -> f32[?, 256] "left"
  %2 = embedding_rows @emb %r1 [$.b[%r1]] [len($.b)] (%0#0: unit) -> f32[?, 256] "right"
  %3 = linear @l (%1#0: f32[?, 256]) -> f32[?, 1024] key(%inst) "l"
  %4 = linear @r (%2#0: f32[?, 256]) -> f32[?, 1024] key(%inst) "r"
  %5 = reduce sum (%3#0: f32[?, 1024]) -> f32[1024] key(%inst) "ls"
  %6 = reduce sum (%4#0: f32[?, 1024]) -> f32[1024] key(%inst) "rs"
  %7 = loss mse (%5#0: f32[1024], %6#0: f32[1024]) -> () key(%inst) "loss"
}
"#;

#[test]
fn an_embedding_tables_batched_lookups_stay_in_one_process() {
    let g = graph(SHARED_TABLE);
    let worker_of = |p: &Plan, id: u32| p.nodes.iter().find(|n| n.id == id).unwrap().worker;
    let cores = plan_graph(&g, 2, &Assumptions::default(), None).unwrap();
    assert_ne!(worker_of(&cores, 1), worker_of(&cores, 2), "{}", cores.table("Table"));
    let fast = Assumptions { processes: 2, link_latency_us: 0.0, link_bandwidth_mbps: 1e6, ..Assumptions::default() };
    for workers in [2, 4] {
        let hosts = plan_graph(&g, workers, &fast, None).unwrap();
        let (left, right) = (worker_of(&hosts, 1), worker_of(&hosts, 2));
        assert_eq!(
            amp_ir::placement::process_of(left, 2, workers),
            amp_ir::placement::process_of(right, 2, workers),
            "{workers} workers\n{}",
            hosts.table("Table")
        );
    }
}
