//! The rollout analysis (`amp_sema::rollout`) against tableaux computed by hand, and
//! against the definitions applied literally (update steps simulated one by one, every
//! one of the 2^|E| patterns checked for a cycle) on random small networks.

use amp_sema::rollout::{
    analyse, enumerate_valid, inference_factor, Pattern, RolloutError, RolloutGraph, MAX_ENUMERATED_EDGES, MAX_WINDOW,
};
use amp_sema::{check_source, Options};
use proptest::prelude::*;

/// The graph of the only network of `text`, which must check cleanly.
fn graph(text: &str) -> (amp_diagnostics::SourceMap, RolloutGraph) {
    let (map, checked) = check_source("net.amp", text, &Options::default());
    let errors: Vec<String> = checked.diagnostics.iter().map(|d| format!("{}: {}", d.code, d.message)).collect();
    assert!(!checked.has_errors(), "{text}\n{errors:?}");
    let def = checked.program.networks.first().expect("a network");
    (map, RolloutGraph::of_network(def))
}

/// A feed-forward chain x -> h1 -> ... -> h(d-1) -> y: d layers.
fn chain(depth: usize) -> String {
    let mut text = String::from("network Chain {\n    input x: f32[4];\n");
    let mut previous = "x".to_string();
    for k in 1..depth {
        text.push_str(&format!("    node h{k} = Linear(4, 4) from {previous};\n"));
        previous = format!("h{k}");
    }
    text.push_str(&format!("    output y = Linear(4, 2) from {previous};\n}}\n"));
    text
}

fn rows(graph: &RolloutGraph, pattern: &Pattern, window: usize) -> Vec<(String, Vec<usize>)> {
    let analysis = analyse(graph, pattern, window).expect("valid");
    graph.nodes.iter().enumerate().map(|(v, n)| (n.name.clone(), analysis.tableau.row(v).to_vec())).collect()
}

fn expect_rows(expected: &[(&str, &[usize])]) -> Vec<(String, Vec<usize>)> {
    expected.iter().map(|(n, r)| (n.to_string(), r.to_vec())).collect()
}

#[test]
fn chains_of_depth_one_to_five_stream_in_one_step_and_run_sequentially_in_d() {
    for depth in 1..=5 {
        let (_, g) = graph(&chain(depth));
        assert_eq!(g.edges.len(), depth);
        let streaming = Pattern::streaming(&g);
        let sequential = Pattern::sequential(&g);
        assert_eq!(sequential.delays(), vec![0; depth].as_slice(), "a chain has no recurrent edge");
        assert_eq!(inference_factor(&g, &streaming), Ok(1), "depth {depth}");
        assert_eq!(inference_factor(&g, &sequential), Ok(depth), "depth {depth}");
        // Layer k (1-based) of frame i: k steps sequentially in every frame after 0; min(i, k)
        // streamed, as frame i's input reaches it through i - 1 delayed edges.
        let window = 6;
        let seq = analyse(&g, &sequential, window).expect("valid").tableau;
        let stream = analyse(&g, &streaming, window).expect("valid").tableau;
        for k in 1..=depth {
            for i in 0..=window {
                let sequential_step = if i == 0 { 0 } else { k };
                assert_eq!(seq.step(k, i), sequential_step, "depth {depth}, layer {k}, frame {i}");
                assert_eq!(stream.step(k, i), i.min(k), "depth {depth}, layer {k}, frame {i}");
            }
        }
    }
}

#[test]
fn the_depth_three_tableaux_written_out() {
    let (_, g) = graph(&chain(3));
    let streaming =
        expect_rows(&[("x", &[0, 0, 0, 0]), ("h1", &[0, 1, 1, 1]), ("h2", &[0, 1, 2, 2]), ("y", &[0, 1, 2, 3])]);
    assert_eq!(rows(&g, &Pattern::streaming(&g), 3), streaming);
    let sequential =
        expect_rows(&[("x", &[0, 0, 0, 0]), ("h1", &[0, 1, 1, 1]), ("h2", &[0, 2, 2, 2]), ("y", &[0, 3, 3, 3])]);
    assert_eq!(rows(&g, &Pattern::sequential(&g), 3), sequential);
}

const SKIP: &str = "network Skip {
    input x: f32[4];
    node a = Linear(4, 4) from x;
    node b = Linear(4, 4) from a;
    output y = Linear(8, 2) from b, a;
}
";

#[test]
fn a_skip_network() {
    let (_, g) = graph(SKIP);
    let names: Vec<String> = (0..g.edges.len()).map(|e| g.edge_name(e)).collect();
    assert_eq!(names, ["x->a", "a->b", "b->y", "a->y"]);
    assert_eq!(inference_factor(&g, &Pattern::sequential(&g)), Ok(3));
    assert_eq!(inference_factor(&g, &Pattern::streaming(&g)), Ok(1));
    // Streamed, y's frame i waits for b's frame i - 1 (the longer path), not a's.
    let streaming =
        expect_rows(&[("x", &[0, 0, 0, 0]), ("a", &[0, 1, 1, 1]), ("b", &[0, 1, 2, 2]), ("y", &[0, 1, 2, 3])]);
    assert_eq!(rows(&g, &Pattern::streaming(&g), 3), streaming);
    // Delaying b->y only: y reads a of its own frame (step 1) and b of the previous one.
    let hybrid = Pattern::with_overrides(&g, "b->y=1").expect("an edge of Skip");
    assert_eq!(hybrid.delays(), [0, 0, 1, 0]);
    let expected = expect_rows(&[("x", &[0, 0, 0]), ("a", &[0, 1, 1]), ("b", &[0, 2, 2]), ("y", &[0, 2, 3])]);
    assert_eq!(rows(&g, &hybrid, 2), expected);
    assert_eq!(inference_factor(&g, &hybrid), Ok(2));
}

const RECURRENT: &str = "network Rnn {
    input x: f32[4];
    node h = Linear(8, 4) from x, h;
    output y = Linear(4, 2) from h;
}
";

#[test]
fn a_recurrent_network() {
    let (_, g) = graph(RECURRENT);
    assert!(g.is_recurrent(1) && !g.is_recurrent(0) && !g.is_recurrent(2));
    let sequential = Pattern::sequential(&g);
    assert_eq!(sequential.delays(), [0, 1, 0]);
    // h of frame i waits for h of frame i - 1: one more step per frame.
    let expected = expect_rows(&[("x", &[0, 0, 0, 0]), ("h", &[0, 1, 2, 3]), ("y", &[0, 2, 3, 4])]);
    assert_eq!(rows(&g, &sequential, 3), expected);
    assert_eq!(inference_factor(&g, &sequential), Ok(2));
    let expected = expect_rows(&[("x", &[0, 0, 0, 0]), ("h", &[0, 1, 2, 3]), ("y", &[0, 1, 2, 3])]);
    assert_eq!(rows(&g, &Pattern::streaming(&g), 3), expected);
    assert_eq!(inference_factor(&g, &Pattern::streaming(&g)), Ok(1));
    // The recurrent edge must stay delayed; the two others are free.
    let all = enumerate_valid(&g).expect("three edges");
    let listed: Vec<(Vec<u8>, usize)> = all.iter().map(|e| (e.pattern.delays().to_vec(), e.inference_factor)).collect();
    assert_eq!(listed, [(vec![0, 1, 0], 2), (vec![0, 1, 1], 1), (vec![1, 1, 0], 2), (vec![1, 1, 1], 1)]);
}

#[test]
fn an_undelayed_self_loop_is_refused_at_its_from_clause() {
    let (map, g) = graph(RECURRENT);
    let pattern = Pattern::with_overrides(&g, "h->h=0").expect("an edge");
    let Err(RolloutError::Invalid(cycle)) = analyse(&g, &pattern, 1) else { panic!("h->h undelayed is a cycle") };
    assert_eq!(cycle.edges, [1]);
    let d = RolloutError::Invalid(cycle).to_diagnostic(&g);
    assert_eq!(d.code.as_str(), "E0700");
    assert!(d.message.contains("h -> h has no delay"), "{}", d.message);
    let file = map.get(d.span.file).expect("the file");
    assert_eq!(file.slice(d.span), "h");
    assert_eq!(d.span.start as usize, RECURRENT.find("x, h;").expect("the from clause") + 3);
}

#[test]
fn a_cycle_through_two_nodes_is_named_with_both_from_clauses() {
    let text = "network Loop {
    input x: f32[4];
    node a = Linear(8, 4) from x, b;
    node b = Linear(4, 4) from a;
    output y = Linear(4, 2) from b;
}
";
    let (_, g) = graph(text);
    let pattern = Pattern::with_overrides(&g, "b->a=0").expect("an edge");
    let Err(error) = analyse(&g, &pattern, 2) else { panic!("a -> b -> a undelayed") };
    let RolloutError::Invalid(cycle) = &error else { panic!("{error:?}") };
    let names: Vec<String> = cycle.edges.iter().map(|&e| g.edge_name(e)).collect();
    assert_eq!(names, ["b->a", "a->b"]);
    let d = error.to_diagnostic(&g);
    assert!(d.message.contains("b -> a -> b has no delay"), "{}", d.message);
    assert_eq!(d.span.start as usize, text.find("x, b;").expect("a's sources") + 3);
    assert_eq!(d.labels.len(), 1);
    assert_eq!(d.labels[0].span.start as usize, text.find("from a;").expect("b's sources") + 5);
    assert!(d.help.as_deref().is_some_and(|h| h.contains("--pattern b->a=1")), "{:?}", d.help);
    // Delaying either edge of the cycle makes the pattern valid.
    assert!(analyse(&g, &Pattern::with_overrides(&g, "b->a=0,a->b=1").expect("edges"), 2).is_ok());
}

#[test]
fn bad_edge_lists_are_refused() {
    let (_, g) = graph(RECURRENT);
    match Pattern::with_overrides(&g, "h->x=1") {
        Err(RolloutError::UnknownEdge { edge, edges }) => {
            assert_eq!(edge, "h->x");
            assert_eq!(edges, ["x->h", "h->h", "h->y"]);
        }
        other => panic!("{other:?}"),
    }
    let d = Pattern::with_overrides(&g, "q->h=1").expect_err("no node q").to_diagnostic(&g);
    assert_eq!(d.code.as_str(), "E0701");
    assert!(d.notes.iter().any(|n| n.contains("x->h, h->h, h->y")), "{:?}", d.notes);
    for bad in ["h->h", "h->h=2", "h-h=1", "", "h->h=1,"] {
        assert!(matches!(Pattern::with_overrides(&g, bad), Err(RolloutError::PatternSyntax { .. })), "{bad:?}");
    }
    assert!(matches!(
        Pattern::with_overrides(&g, "h->y=1, h->y=0"),
        Err(RolloutError::RepeatedEdge { edge }) if edge == "h->y"
    ));
    assert_eq!(Pattern::with_overrides(&g, " x -> h = 1 ").map(|p| p.delays().to_vec()), Ok(vec![1, 1, 0]));
}

#[test]
fn limits_are_coded_errors() {
    let mut text = String::from("network Wide {\n    input x: f32[1];\n");
    let many = MAX_ENUMERATED_EDGES + 1;
    for k in 0..many {
        text.push_str(&format!("    node a{k} = Linear(1, 1) from x;\n"));
    }
    text.push_str("    output y = Linear(1, 1) from x;\n}\n");
    let (_, g) = graph(&text);
    assert_eq!(g.edges.len(), many + 1);
    let error = enumerate_valid(&g).expect_err("too many edges");
    assert_eq!(error, RolloutError::TooManyEdges { edges: many + 1, limit: MAX_ENUMERATED_EDGES });
    let d = error.to_diagnostic(&g);
    assert_eq!(d.code.as_str(), "E0702");
    assert!(d.message.contains(&format!("{} edges", many + 1)), "{}", d.message);
    let window = analyse(&g, &Pattern::streaming(&g), MAX_WINDOW + 1);
    assert!(matches!(window, Err(RolloutError::WindowTooLarge { .. })));
    assert!(analyse(&g, &Pattern::streaming(&g), MAX_WINDOW).is_ok());
}

#[test]
fn a_source_named_twice_is_one_edge() {
    let (_, g) = graph("network Twice {\n    input x: f32[2];\n    output y = Linear(4, 1) from x, x;\n}\n");
    assert_eq!(g.edges.len(), 1);
    assert_eq!(inference_factor(&g, &Pattern::sequential(&g)), Ok(1));
}

// ---------------------------------------------------------------- the definitions, literally

/// Whether the undelayed edges of `mask` (bit e set = edge e delayed) have a cycle,
/// by depth-first search with three colours.
fn has_undelayed_cycle(nodes: usize, edges: &[(usize, usize)], mask: u32) -> bool {
    fn visit(v: usize, adjacency: &[Vec<usize>], colour: &mut [u8]) -> bool {
        colour[v] = 1;
        for &w in &adjacency[v] {
            if colour[w] == 1 || (colour[w] == 0 && visit(w, adjacency, colour)) {
                return true;
            }
        }
        colour[v] = 2;
        false
    }
    let mut adjacency = vec![Vec::new(); nodes];
    for (e, &(u, v)) in edges.iter().enumerate() {
        if mask & (1 << e) == 0 {
            adjacency[u].push(v);
        }
    }
    let mut colour = vec![0u8; nodes];
    (0..nodes).any(|v| colour[v] == 0 && visit(v, &adjacency, &mut colour))
}

/// T by update steps, as defined: known at first iff an input or frame 0; each step makes
/// known whatever had all its predecessors known before it. `None` where never known.
fn simulated_tableau(g: &RolloutGraph, delays: &[u8], window: usize) -> Vec<Vec<Option<usize>>> {
    let frames = window + 1;
    let mut known: Vec<Vec<Option<usize>>> =
        g.nodes.iter().map(|n| (0..frames).map(|i| (n.is_input || i == 0).then_some(0)).collect()).collect();
    for step in 1.. {
        let before = known.clone();
        let mut changed = false;
        for v in 0..g.nodes.len() {
            for i in 0..frames {
                if before[v][i].is_some() {
                    continue;
                }
                let ready = g.edges.iter().zip(delays).filter(|(e, _)| e.target == v).all(|(e, &d)| {
                    let d = usize::from(d);
                    i < d || before[e.source][i - d].is_some()
                });
                if ready {
                    known[v][i] = Some(step);
                    changed = true;
                }
            }
        }
        if !changed {
            break;
        }
    }
    known
}

/// A random network: `inputs` inputs, then nodes whose sources are any of the names
/// (itself and later ones included), the last one the output. Widths are all 1.
fn random_network(inputs: usize, sources: &[Vec<usize>]) -> String {
    let total = inputs + sources.len();
    let name = |i: usize| if i < inputs { format!("i{i}") } else { format!("n{i}") };
    let mut text = String::from("network R {\n");
    for i in 0..inputs {
        text.push_str(&format!("    input {}: f32[1];\n", name(i)));
    }
    for (k, from) in sources.iter().enumerate() {
        let keyword = if k + 1 == sources.len() { "output" } else { "node" };
        let names: Vec<String> = from.iter().map(|&s| name(s % total)).collect();
        text.push_str(&format!(
            "    {keyword} {} = Linear({}, 1) from {};\n",
            name(inputs + k),
            names.len(),
            names.join(", ")
        ));
    }
    text.push_str("}\n");
    text
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn enumeration_counts_what_brute_force_finds(
        inputs in 1usize..3,
        sources in proptest::collection::vec(proptest::collection::vec(0usize..8, 1..4), 1..7),
    ) {
        let (_, g) = graph(&random_network(inputs, &sources));
        let edges: Vec<(usize, usize)> = g.edges.iter().map(|e| (e.source, e.target)).collect();
        prop_assume!(edges.len() <= 12);
        let enumerated = enumerate_valid(&g).expect("few edges");
        let brute: Vec<Vec<u8>> = (0u32..1 << edges.len())
            .filter(|&mask| !has_undelayed_cycle(g.nodes.len(), &edges, mask))
            .map(|mask| (0..edges.len()).map(|e| u8::from(mask & (1 << e) != 0)).collect())
            .collect();
        prop_assert_eq!(enumerated.len(), brute.len());
        let mut listed: Vec<Vec<u8>> = enumerated.iter().map(|e| e.pattern.delays().to_vec()).collect();
        let mut brute_sorted = brute.clone();
        listed.sort();
        brute_sorted.sort();
        prop_assert_eq!(&listed, &brute_sorted);
        // Each pattern's F and tableau are those of the update steps simulated literally.
        for found in &enumerated {
            let window = 3;
            let simulated = simulated_tableau(&g, found.pattern.delays(), window);
            let f = (0..g.nodes.len()).filter_map(|v| simulated[v][1]).max().unwrap_or(0);
            prop_assert_eq!(found.inference_factor, f);
            let analysis = analyse(&g, &found.pattern, window).expect("valid");
            for (v, row) in simulated.iter().enumerate() {
                let row: Vec<usize> = row.iter().map(|t| t.expect("a valid window is all known")).collect();
                prop_assert_eq!(analysis.tableau.row(v), row.as_slice());
            }
        }
        // Every pattern left out has a cycle, and the analysis names one of undelayed edges.
        for mask in (0u32..1 << edges.len()).filter(|&m| has_undelayed_cycle(g.nodes.len(), &edges, m)).take(8) {
            let delays: Vec<u8> = (0..edges.len()).map(|e| u8::from(mask & (1 << e) != 0)).collect();
            let pattern = Pattern::from_delays(&g, &delays).expect("one delay per edge");
            let Err(RolloutError::Invalid(cycle)) = analyse(&g, &pattern, 1) else {
                return Err(TestCaseError::fail("an invalid pattern was accepted"));
            };
            prop_assert!(!cycle.edges.is_empty());
            for (k, &e) in cycle.edges.iter().enumerate() {
                prop_assert_eq!(delays[e], 0);
                let next = cycle.edges[(k + 1) % cycle.edges.len()];
                prop_assert_eq!(g.edges[e].target, g.edges[next].source);
            }
        }
    }
}
