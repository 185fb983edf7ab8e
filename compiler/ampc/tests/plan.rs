//! `ampc compile --workers N`: the partition plan printed (`--emit plan`), shown (`-v`) and
//! stored in the `.ampg` file.

use std::path::Path;
use std::process::{Command, Output};

fn ampc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ampc")).args(args).output().expect("ampc runs")
}

fn example(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples").join(name).display().to_string()
}

/// A fresh temporary directory, removed when the value is dropped.
fn temp_dir(test: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(&format!("ampc-plan-{test}-")).tempdir().expect("temp dir")
}

fn ok(run: &Output) {
    assert_eq!(run.status.code(), Some(0), "{}", String::from_utf8_lossy(&run.stderr));
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6
}

#[test]
fn emit_plan_prints_the_plan_of_every_example() {
    for model in ["list_reduce", "mlp", "tree_lstm", "ggsnn", "moe"] {
        let graph = {
            let run = ampc(&["compile", &example(&format!("{model}.amp")), "--emit", "ir"]);
            ok(&run);
            let graph = amp_ir::text::parse(&String::from_utf8_lossy(&run.stdout)).expect("the IR parses");
            amp_ir::verify::verify(graph).expect("it verifies")
        };
        for workers in [1usize, 2, 4, 16] {
            let n = workers.to_string();
            let run = ampc(&["compile", &example(&format!("{model}.amp")), "--workers", &n, "--emit", "plan"]);
            ok(&run);
            let plan: serde_json::Value = serde_json::from_slice(&run.stdout).expect("the plan is JSON");
            let at = format!("{model} at {workers} workers");
            // The layout: copies of the graph, each placed over `stage` workers.
            let (copies, stage) = (
                plan["copies"].as_u64().expect("copies") as usize,
                plan["workers"].as_u64().expect("workers") as usize,
            );
            assert_eq!(copies * stage, workers, "{at}");
            let layouts = plan["layouts"].as_array().expect("the layouts weighed");
            assert!(layouts.iter().any(|o| o["copies"] == copies && o["stage_workers"] == stage), "{at}");
            let nodes = plan["nodes"].as_array().expect("nodes");
            assert_eq!(nodes.len(), graph.nodes.node_count(), "{at}: one entry per node");
            let mut ids = Vec::new();
            let mut total = 0.0;
            for node in nodes {
                for key in ["id", "name", "worker", "predicted_load"] {
                    assert!(node.get(key).is_some(), "{at}: no `{key}` in {node}");
                }
                ids.push(node["id"].as_u64().expect("id"));
                assert!(node["worker"].as_u64().expect("worker") < stage as u64, "{at}: {node}");
                total += node["predicted_load"].as_f64().expect("load");
            }
            assert!(close(total, 1.0), "{at}: loads sum to {total}");
            let expected: Vec<u64> = graph.nodes.node_indices().map(|i| i.index() as u64).collect();
            assert_eq!(ids, expected, "{at}: ids are the node indices, in order");
            for key in ["workers_load", "workers_comm", "predicted_utilization"] {
                assert_eq!(plan[key].as_array().map(Vec::len), Some(stage), "{at}: {key}");
            }
            let sum: f64 = plan["workers_load"].as_array().unwrap().iter().filter_map(|x| x.as_f64()).sum();
            assert!(close(sum, 1.0), "{at}: per-worker loads sum to {sum}");
            assert!(plan["replicas"].is_array(), "{at}");
            let cpu = plan["critical_path_utilization"].as_f64().expect("critical_path_utilization");
            assert!(cpu > 0.0 && cpu <= 1.0 + 1e-9, "{at}: {cpu}");
            // The plan is what the planner computes from the same graph for amprun's
            // default run, plain SGD with an update every 16 instances (JSON text keeps
            // floats to within a rounding).
            let setup =
                amp_plan::Assumptions { plain_sgd: true, update_every: 16.0, ..amp_plan::Assumptions::default() };
            let again = amp_plan::plan_workers(&graph, workers, &setup, None).unwrap();
            assert_eq!((again.copies, again.workers), (copies, stage), "{at}");
            let printed = amp_plan::Plan::from_json(&plan).unwrap();
            for (a, b) in printed.nodes.iter().zip(&again.nodes) {
                assert_eq!((a.id, a.worker), (b.id, b.worker), "{at}");
                assert!(close(a.predicted_load, b.predicted_load), "{at}");
            }
        }
    }
}

#[test]
fn the_ampg_file_keeps_the_plan_and_verbose_prints_the_table() {
    let dir = temp_dir("ampg");
    let dir = dir.path();
    let out = dir.join("lr.ampg");
    let run = ampc(&["compile", &example("list_reduce.amp"), "--workers", "2", "-o", out.to_str().unwrap(), "-v"]);
    ok(&run);
    let stderr = String::from_utf8_lossy(&run.stderr);
    // List-reduce gains nothing from a second stage: two copies of a one-worker plan.
    assert!(stderr.contains("layout: 2 copies × 1 stage on 2 workers"), "{stderr}");
    assert!(stderr.contains("plan for ListReduce on 1 worker"), "{stderr}");
    assert!(stderr.contains("linear cell") && stderr.contains("utilization"), "{stderr}");
    assert!(stderr.contains("plan: 2 copies × 1 stage on 2 workers"), "{stderr}");
    let (graph, plan) = amp_ir::ampg::read(&std::fs::read(&out).unwrap()).expect("it loads");
    let plan = amp_plan::Plan::from_json(&plan.expect("the file has a plan")).expect("a plan");
    assert_eq!((plan.copies, plan.workers), (2, 1));
    let bound = graph.nodes.node_indices().map(|i| i.index() + 1).max().unwrap_or(0);
    assert_eq!(plan.placement(&graph).expect("it fits").len(), bound);
    let printed = ampc(&["compile", &example("list_reduce.amp"), "--workers", "2", "--emit", "plan"]);
    let printed: serde_json::Value = serde_json::from_slice(&printed.stdout).unwrap();
    assert_eq!(plan.to_json(), printed, "the stored plan is the printed one");
    // Written back and read again, the plan is unchanged.
    let bytes = amp_ir::ampg::write(&graph, Some(&plan.to_json()));
    let (_, again) = amp_ir::ampg::read(&bytes).unwrap();
    assert_eq!(amp_plan::Plan::from_json(&again.unwrap()).unwrap(), plan);

    // The training setup the plan is for goes into its cost model's assumptions.
    let run = ampc(&[
        "compile",
        &example("list_reduce.amp"),
        "--workers",
        "2",
        "--min-update-frequency",
        "16",
        "--optimizer",
        "adam",
        "--emit",
        "plan",
    ]);
    ok(&run);
    let adam: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    let assumptions = &adam["cost_model"]["assumptions"];
    assert_eq!((assumptions["update_every"].as_f64(), assumptions["plain_sgd"].as_bool()), (Some(16.0), Some(false)));
    assert_eq!(printed["cost_model"]["assumptions"]["plain_sgd"], true, "amprun's default optimizer is sgd");
    let without = ampc(&["compile", &example("list_reduce.amp"), "--optimizer", "adam"]);
    assert_eq!(without.status.code(), Some(2), "the setup of a plan needs --workers");

    // The processes and the link between them go into the assumptions too; a plan for
    // more processes than workers, or a link with no bandwidth, is refused by name.
    let run = ampc(&[
        "compile",
        &example("tree_lstm.amp"),
        "--workers",
        "4",
        "--hosts",
        "2",
        "--link-latency-us",
        "200",
        "--link-bandwidth-mbps",
        "1000",
        "--max-active-keys",
        "16",
        "--emit",
        "plan",
    ]);
    ok(&run);
    let hosts: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    let assumptions = &hosts["cost_model"]["assumptions"];
    assert_eq!(assumptions["processes"], 2);
    assert_eq!(assumptions["link_latency_us"], 200.0);
    assert_eq!(assumptions["link_bandwidth_mbps"], 1000.0);
    assert_eq!(assumptions["in_flight"], 16.0);
    assert_eq!(hosts["cost_model"]["links_us"].as_array().map(Vec::len), Some(2));
    let defaults = &printed["cost_model"]["assumptions"];
    assert_eq!((defaults["processes"].as_u64(), defaults["link_latency_us"].as_f64()), (Some(1), Some(50.0)));
    let too_many =
        ampc(&["compile", &example("tree_lstm.amp"), "--workers", "2", "--processes", "3", "--emit", "plan"]);
    assert_eq!(too_many.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&too_many.stderr).contains("3 processes but 2 workers"));
    let no_bandwidth =
        ampc(&["compile", &example("tree_lstm.amp"), "--workers", "2", "--link-bandwidth-mbps", "0", "--emit", "plan"]);
    assert_eq!(no_bandwidth.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&no_bandwidth.stderr).contains("link_bandwidth_mbps"));
    let nonsense = ampc(&["compile", &example("tree_lstm.amp"), "--workers", "2", "--link-latency-us", "-1"]);
    assert_eq!(nonsense.status.code(), Some(2));

    // Without --workers nothing changes: no plan in the file.
    let plain = dir.join("plain.ampg");
    ok(&ampc(&["compile", &example("list_reduce.amp"), "-o", plain.to_str().unwrap()]));
    let (_, plan) = amp_ir::ampg::read(&std::fs::read(&plain).unwrap()).unwrap();
    assert_eq!(plan, None);
}

#[test]
fn a_profile_refines_the_plan_and_a_bad_one_is_refused() {
    let dir = temp_dir("profile");
    let dir = dir.path();
    let run = ampc(&["compile", &example("mlp.amp"), "--emit", "ir"]);
    let graph = amp_ir::text::parse(&String::from_utf8_lossy(&run.stdout)).unwrap();
    let mut counter = amp_plan::ProfileCounter::default();
    // Pretend the first layer is ten times as slow as the others together.
    let event = |node, dur_ns| amp_plan::Event {
        node,
        work: amp_plan::Work::Forward,
        dur_ns,
        messages: 1,
        instances: 1,
        rows: 1,
    };
    counter.add(event(2, 500_000));
    counter.add(event(4, 10_000));
    counter.add_instances(1, 0.001);
    let profile = dir.join("prof.json");
    std::fs::write(&profile, counter.finish(&graph, 1, 1).to_json().to_string()).unwrap();
    let args = ["compile", &example("mlp.amp"), "--workers", "2", "--profile", profile.to_str().unwrap()];
    let run = ampc(&[&args[..], &["--emit", "plan"]].concat());
    ok(&run);
    let plan: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(plan["cost_model"]["source"], "profile");
    let l1 = plan["nodes"].as_array().unwrap().iter().find(|n| n["id"] == 2).unwrap();
    assert!(l1["predicted_load"].as_f64().unwrap() > 0.8, "{l1}");

    // A profile of another model, a file that is no profile, a missing file.
    let other =
        ampc(&["compile", &example("list_reduce.amp"), "--workers", "2", "--profile", profile.to_str().unwrap()]);
    assert_eq!(other.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&other.stderr).contains("profile does not fit"));
    let junk = dir.join("junk.json");
    std::fs::write(&junk, "[1, 2").unwrap();
    let run = ampc(&["compile", &example("mlp.amp"), "--workers", "2", "--profile", junk.to_str().unwrap()]);
    assert_eq!(run.status.code(), Some(1), "{}", String::from_utf8_lossy(&run.stderr));
    let run = ampc(&["compile", &example("mlp.amp"), "--workers", "2", "--profile", "/nonexistent/p.json"]);
    assert_eq!(run.status.code(), Some(2));
}

#[test]
fn plan_flags_are_checked() {
    let run = ampc(&["compile", &example("mlp.amp"), "--emit", "plan"]);
    assert_eq!(run.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&run.stderr).contains("--workers"));
    for bad in ["0", "1025", "two"] {
        let run = ampc(&["compile", &example("mlp.amp"), "--workers", bad, "--emit", "plan"]);
        assert_eq!(run.status.code(), Some(2), "--workers {bad}");
    }
    let run = ampc(&["compile", &example("mlp.amp"), "--profile", "p.json", "--emit", "ir"]);
    assert_eq!(run.status.code(), Some(2), "--profile needs --workers");
}

/// A plan for more workers is never predicted slower than the plan for half as many
/// (rounded up): on GGSNN the search for 4 workers had found nothing better than one
/// worker, on 2 a split.
#[test]
fn more_workers_never_plan_slower_than_half_as_many() {
    let setup = amp_plan::Assumptions { update_every: 8.0, plain_sgd: true, ..amp_plan::Assumptions::default() };
    for model in ["list_reduce", "mlp", "tree_lstm", "ggsnn", "moe"] {
        let run = ampc(&["compile", &example(&format!("{model}.amp")), "--emit", "ir"]);
        ok(&run);
        let graph = amp_ir::text::parse(&String::from_utf8_lossy(&run.stdout)).expect("the IR parses");
        let graph = amp_ir::verify::verify(graph).expect("it verifies");
        let costs = amp_plan::estimate(&graph, &setup, None).unwrap();
        let busiest = |workers: usize| {
            let plan = amp_plan::plan(&graph, &costs, workers).unwrap();
            plan.cost_model.as_ref().unwrap().bottleneck_us_per_instance
        };
        for workers in 2..=9 {
            let (more, fewer) = (busiest(workers), busiest(workers.div_ceil(2)));
            assert!(more <= fewer * (1.0 + 1e-9), "{model} at {workers}: {more} vs {fewer}");
        }
    }
}
