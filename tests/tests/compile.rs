//! The whole compile pipeline — check, lower, optimise, verify, plan — on the examples and
//! on randomly generated well-typed programs; the IR text form and `.ampg` files
//! round-trip.

use amp_ir::verify::Verified;
use amp_ir::{ampg, text, verify, Graph};
use amp_sema::{check_source, Options};
use amp_tests::report_skip;
use proptest::prelude::*;

/// The hyperparameter overrides each example's snapshot is taken with: the MoE's 64
/// experts would repeat the same three nodes 64 times.
fn defines(name: &str) -> Vec<(String, i64)> {
    match name {
        "moe" => vec![("experts".to_string(), 4)],
        _ => Vec::new(),
    }
}

/// Checks, lowers, optimises and verifies; panics with the reason when any step fails.
fn compile(name: &str, source: &str) -> Verified {
    compile_with(name, source, Vec::new())
}

fn compile_with(name: &str, source: &str, defines: Vec<(String, i64)>) -> Verified {
    let options = Options { defines };
    let (map, checked) = check_source(&format!("{name}.amp"), source, &options);
    assert!(
        !checked.has_errors(),
        "{name}:\n{}\n{source}",
        amp_diagnostics::render_human(&map, &checked.diagnostics, false)
    );
    let mut graph = match amp_lower::lower_model(&checked.program, &map, checked.program.models[0]) {
        Ok(g) => g,
        Err(d) => panic!("{name}: {}\n{source}", amp_diagnostics::render_human(&map, &d, false)),
    };
    amp_lower::passes::optimize(&mut graph);
    match Verified::new(graph) {
        Ok(graph) => graph,
        Err(r) => {
            let list: Vec<String> = r.errors.iter().map(|e| e.to_string()).collect();
            panic!(
                "{name}: lowered graph fails verification:\n{}\n{}\n{source}",
                list.join("\n"),
                text::print(&r.graph)
            );
        }
    }
}

/// The planner on a graph, for 1 to 4 workers: every node placed once on a worker in
/// range, the nodes' shares of the work summing to 1, utilisations in [0, 1], and a plan
/// never predicted slower than the plan for half as many workers (its search starts there).
fn assert_plans(graph: &Verified) {
    let assumptions = amp_plan::Assumptions { update_every: 8.0, plain_sgd: true, ..Default::default() };
    let costs = amp_plan::estimate(graph, &assumptions, None).expect("the cost model takes a verified graph");
    let mut speedups = vec![0.0];
    for workers in 1..=4 {
        let plan = amp_plan::plan(graph, &costs, workers).expect("a verified graph plans");
        let placement = plan.placement(graph).expect("a plan places its own graph");
        assert!(placement.iter().all(|&w| w < workers));
        let shares: f64 = plan.nodes.iter().map(|n| n.predicted_load).sum();
        assert!((shares - 1.0).abs() < 1e-6, "{workers} workers: the shares sum to {shares}");
        assert!(plan.predicted_utilization.iter().all(|u| (0.0..=1.0 + 1e-9).contains(u)), "{plan:?}");
        let half = speedups[workers / 2];
        assert!(plan.predicted_speedup >= half - 1e-9, "{workers} workers: {} < {half}", plan.predicted_speedup);
        speedups.push(plan.predicted_speedup);
    }
}

fn assert_round_trips(graph: &Graph) {
    let printed = text::print(graph);
    let parsed = text::parse(&printed).unwrap_or_else(|e| panic!("{e}\n{printed}"));
    assert_eq!(text::print(&parsed), printed, "text form round-trips exactly");
    let (loaded, plan) = ampg::read(&ampg::write(graph, None)).expect("ampg loads");
    assert!(plan.is_none());
    assert_eq!(text::print(&loaded), printed, ".ampg round-trips");
    verify::verify(&loaded).expect("a loaded graph verifies");
}

#[test]
fn examples_verify_round_trip_and_match_their_snapshots() {
    for (name, source) in amp_tests::EXAMPLES {
        let defines = defines(name);
        let flags: Vec<String> = defines.iter().map(|(k, v)| format!("-D {k}={v}")).collect();
        let graph = compile_with(name, source, defines);
        assert_round_trips(&graph);
        assert_plans(&graph);
        insta::with_settings!({ snapshot_path => "snapshots/ir", prepend_module_to_snapshot => false, omit_expression => true }, {
            insta::assert_snapshot!(
                format!("ir_{name}"),
                format!("{source}\n---- ir {} ----\n{}", flags.join(" "), text::print(&graph))
            );
        });
    }
}

#[test]
fn examples_compile_with_their_default_hyperparameters() {
    for (name, source) in amp_tests::EXAMPLES {
        assert_round_trips(&compile(name, source));
    }
}

#[test]
fn dot_output_renders_when_graphviz_is_installed() {
    let Ok(status) = std::process::Command::new("dot").arg("-V").output() else {
        report_skip(
            "amp-tests dot_output_renders_when_graphviz_is_installed: the `dot` program (graphviz) is not installed",
        );
        return;
    };
    assert!(status.status.success());
    for (name, source) in amp_tests::EXAMPLES {
        let dot = amp_ir::dot::to_dot(&compile_with(name, source, defines(name)));
        let mut child = std::process::Command::new("dot")
            .arg("-Tsvg")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("dot starts");
        use std::io::Write;
        child.stdin.take().expect("stdin").write_all(dot.as_bytes()).expect("write dot");
        let out = child.wait_with_output().expect("dot finishes");
        assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains("<svg"), "{name}");
    }
}

// ------------------------------------------------------------ random well-typed programs

/// One statement of a generated `forward` body. Every tensor is `f32[D]` so that any
/// operand fits any other; `v{i}` names the i-th value defined so far.
#[derive(Clone, Debug)]
enum Gen {
    Unary(&'static str, usize),
    Add(usize, usize),
    Mul(usize, usize),
    Scale(usize),
    Cell(usize, usize),
    Embed,
    Loop {
        acc: usize,
        body_uses: usize,
    },
    Range {
        acc: usize,
    },
    If {
        then_from: usize,
        threshold: i64,
    },
    Split(usize),
    /// `sum(r.xs.map(|k| ..))` of embeddings mixed with an outside value.
    MapSum(usize),
    /// A `while` with two int variables updated together.
    While {
        acc: usize,
        limit: i64,
    },
    /// A call into a parameter array chosen by the data.
    Route(usize),
    /// A map over a computed sequence, then a gather from it.
    Gather(usize),
}

fn gen_stmt() -> impl Strategy<Value = Gen> {
    prop_oneof![
        (prop_oneof![Just("relu"), Just("tanh"), Just("sigmoid"), Just("exp")], any::<usize>())
            .prop_map(|(f, a)| Gen::Unary(f, a)),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Gen::Add(a, b)),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Gen::Mul(a, b)),
        any::<usize>().prop_map(Gen::Scale),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Gen::Cell(a, b)),
        Just(Gen::Embed),
        (any::<usize>(), any::<usize>()).prop_map(|(acc, body_uses)| Gen::Loop { acc, body_uses }),
        any::<usize>().prop_map(|acc| Gen::Range { acc }),
        (any::<usize>(), 0i64..10).prop_map(|(then_from, threshold)| Gen::If { then_from, threshold }),
        any::<usize>().prop_map(Gen::Split),
        any::<usize>().prop_map(Gen::MapSum),
        (any::<usize>(), 0i64..6).prop_map(|(acc, limit)| Gen::While { acc, limit }),
        any::<usize>().prop_map(Gen::Route),
        any::<usize>().prop_map(Gen::Gather),
    ]
}

/// How a generated model's `forward` and `loss` use the generated values `(a, b)`: `a`
/// is the last value, `b` one chosen before it. Values the loss never uses are
/// predictions only, and must compile as such.
#[derive(Clone, Copy, Debug)]
enum Ends {
    /// The loss is the cross-entropy of `forward`: `head(a)`.
    Forward,
    /// The loss reads only `aux(b)`: `forward`'s `head(a)` reaches no loss.
    AuxOnly,
    /// Both heads, weighted.
    Both,
}

fn gen_ends() -> impl Strategy<Value = (Ends, usize)> {
    (prop_oneof![Just(Ends::Forward), Just(Ends::AuxOnly), Just(Ends::Both)], any::<usize>())
}

fn program(stmts: &[Gen], (ends, aux): (Ends, usize)) -> String {
    let mut body = String::from("        let v0 = r.x;\n");
    let mut n = 1;
    for s in stmts {
        let pick = |i: usize| format!("v{}", i % n);
        let line = match s {
            Gen::Unary(f, a) => format!("let v{n} = {f}({});", pick(*a)),
            Gen::Add(a, b) => format!("let v{n} = {} + {};", pick(*a), pick(*b)),
            Gen::Mul(a, b) => format!("let v{n} = {} * {};", pick(*a), pick(*b)),
            Gen::Scale(a) => format!("let v{n} = 0.5 * {} - 1.0;", pick(*a)),
            Gen::Cell(a, b) => format!("let v{n} = cell(concat({}, {}));", pick(*a), pick(*b)),
            Gen::Embed => format!("let v{n} = emb(r.label);"),
            Gen::Loop { acc, body_uses } => format!(
                "var v{n} = {};\n        for tok in r.xs {{ v{n} = tanh(cell(concat(v{n} + {}, emb(tok)))); }}",
                pick(*acc),
                pick(*body_uses)
            ),
            Gen::Range { acc } => format!(
                "var v{n} = {};\n        for i in 0..len(r.xs) {{ if i > 1 {{ v{n} = relu(v{n}); }} }}",
                pick(*acc)
            ),
            Gen::If { then_from, threshold } => format!(
                "let v{n} = if r.label > {threshold} {{ sigmoid({}) }} else {{ {} }};",
                pick(*then_from),
                pick(then_from + 1)
            ),
            Gen::Split(a) => format!(
                "let [p{n}, q{n}] = split(cell(concat({}, {})), 2);\n        let v{n} = concat(p{n}, q{n});",
                pick(*a),
                pick(a + 1)
            ),
            Gen::MapSum(a) => format!("let v{n} = sum(r.xs.map(|k| emb(k) * {}));", pick(*a)),
            Gen::While { acc, limit } => format!(
                "var v{n} = {};\n        var a{n} = 0;\n        var b{n} = 1;\n        \
                 while a{n} < {limit} && a{n} < len(r.xs) {{ v{n} = relu(v{n}); a{n} = b{n}; b{n} = a{n} + b{n}; }}",
                pick(*acc)
            ),
            Gen::Route(a) => format!("let v{n} = experts[r.label % 2]({});", pick(*a)),
            Gen::Gather(a) => format!(
                "let h{n} = r.xs.map(|k| tanh(emb(k) + {}));\n        let v{n} = if len(r.xs) > 0 {{ h{n}[0] }} else {{ {} }};",
                pick(*a),
                pick(*a)
            ),
        };
        body.push_str("        ");
        body.push_str(&line);
        body.push('\n');
        n += 1;
    }
    let loss = match ends {
        Ends::Forward => "cross_entropy(forward(r), r.label)",
        Ends::AuxOnly => "let (_a, b) = feats(r);\n        cross_entropy(aux(b), r.label)",
        Ends::Both => "let (_a, b) = feats(r);\n        0.5 * cross_entropy(forward(r), r.label) + 0.5 * cross_entropy(aux(b), r.label)",
    };
    format!(
        "record R {{ x: f32[4], xs: [int], label: int }}\n\
         model Gen {{\n    param emb = Embedding(10, 4);\n    param cell = Linear(8, 4);\n    param head = Linear(4, 3);\n\
         \n    param aux = Linear(4, 3);\n    param experts = [Linear(4, 4); 2];\n\
         \n    fn feats(r: R) -> (f32[4], f32[4]) {{\n{body}        (v{last}, v{chosen})\n    }}\n\
         \n    fn forward(r: R) -> f32[3] {{\n        let (a, _b) = feats(r);\n        head(a)\n    }}\n\
         \n    fn loss(r: R) -> f32 {{\n        {loss}\n    }}\n}}\n",
        last = n - 1,
        chosen = aux % n
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// Every program of the generator checks without errors, lowers, and the optimised
    /// graph verifies, round-trips and plans, whichever values its loss leaves unused.
    #[test]
    fn generated_programs_lower_to_verified_graphs(
        stmts in proptest::collection::vec(gen_stmt(), 0..8),
        ends in gen_ends(),
    ) {
        let source = program(&stmts, ends);
        let graph = compile("gen", &source);
        assert_round_trips(&graph);
        assert_plans(&graph);
    }
}

/// The child-sum Tree-LSTM's tree has one variant, so no `phi` joins its arms: the
/// `group`s that stack a node's children's results, gated by the node's own control from
/// outside the cycle, head the traversal's loop. Gated from inside the cycle instead, a
/// group cannot admit the loop's entry, and the verifier refuses the cycle.
#[test]
fn a_traversal_without_a_phi_is_headed_by_its_gated_groups() {
    let source = amp_tests::example("child_sum_tree_lstm").expect("example");
    let mut graph = compile("child_sum_tree_lstm", source).into_inner();
    let groups: Vec<_> = graph
        .nodes
        .node_indices()
        .filter(|&i| matches!(graph.nodes[i].op, amp_ir::Op::Group { .. }) && graph.nodes[i].label == "children")
        .collect();
    assert_eq!(groups.len(), 2, "h and c");
    assert!(!graph.nodes.node_weights().any(|n| matches!(n.op, amp_ir::Op::Phi { .. })));
    for group in groups {
        let into = |e| graph.nodes.edge_endpoints(e).is_some_and(|(_, to)| to == group);
        let gate = graph.nodes.edge_indices().find(|&e| into(e) && graph.nodes[e].to_port == 1).expect("a gate");
        graph.nodes.remove_edge(gate);
        // `forget` of the group's own output: a unit inside the cycle.
        let mut forget = graph.nodes[group].clone();
        forget.op = amp_ir::Op::Forget;
        (forget.inputs, forget.outputs) = (graph.nodes[group].outputs.clone(), vec![amp_ir::PayloadTy::Unit]);
        (forget.reads, forget.writes, forget.key) = (Vec::new(), Vec::new(), Vec::new());
        let forget = graph.nodes.add_node(forget);
        graph.nodes.add_edge(group, forget, amp_ir::Edge { from_port: 0, to_port: 0 });
        graph.nodes.add_edge(forget, group, amp_ir::Edge { from_port: 0, to_port: 1 });
    }
    let errors = verify::verify(&graph).expect_err("refused");
    let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
    assert!(text.iter().any(|e| e.contains("without a phi or a gated group (the loop header)")), "{text:?}");
}
