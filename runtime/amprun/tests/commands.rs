//! `amprun eval`, `infer` and `grad` on saved parameters.

mod common;

use amp_params::{ParamSet, ParamSpec};
use common::*;

/// Seed-0 parameters of list_reduce (hidden 8) saved as a plain safetensors file, as
/// PyTorch would write them.
fn saved_params(dir: &std::path::Path) -> (amp_ir::verify::Verified, String) {
    let graph = compile_example("list_reduce", &[("hidden", 8)]);
    let params = ParamSet::init(&ParamSpec::of_graph(&graph), 3);
    let path = dir.join("p.safetensors");
    amp_params::save(&params, &path, &Default::default()).expect("save parameters");
    (graph, path.display().to_string())
}

fn first_lines(dir: &std::path::Path, n: usize) -> String {
    let text = std::fs::read_to_string(example("data/list_reduce.valid.jsonl")).expect("example data");
    let path = dir.join("few.jsonl");
    let lines: Vec<&str> = text.lines().take(n).collect();
    std::fs::write(&path, lines.join("\n") + "\n").expect("write data");
    path.display().to_string()
}

#[test]
fn infer_prints_one_json_line_per_instance() {
    let dir = scratch("infer");
    let dir = dir.path();
    let (_, params) = saved_params(dir);
    let data = first_lines(dir, 7);
    let out =
        amprun_ok(dir, &["infer", &example("list_reduce.amp"), "-D", "hidden=8", "--params", &params, "--data", &data]);
    let lines = json_lines(&stdout(&out));
    assert_eq!(lines.len(), 7);
    for (i, line) in lines.iter().enumerate() {
        assert_eq!(line["instance"], i);
        let output = line["output"].as_array().expect("output");
        assert_eq!(output.len(), 10, "ten class scores");
        assert!(line["argmax"].as_u64().is_some_and(|k| k < 10));
    }
}

#[test]
fn eval_prints_loss_accuracy_and_throughput() {
    let dir = scratch("eval");
    let dir = dir.path();
    let (_, params) = saved_params(dir);
    let data = first_lines(dir, 20);
    let out =
        amprun_ok(dir, &["eval", &example("list_reduce.amp"), "-D", "hidden=8", "--params", &params, "--data", &data]);
    let text = stdout(&out);
    for part in ["loss ", "accuracy ", "instances 20", "instances/s "] {
        assert!(text.contains(part), "`{part}` in {text}");
    }
}

#[test]
fn grad_writes_the_mean_gradient_of_every_parameter() {
    let dir = scratch("grad");
    let dir = dir.path();
    let (graph, params) = saved_params(dir);
    let data = first_lines(dir, 5);
    let model = example("list_reduce.amp");
    let out = amprun_ok(
        dir,
        &["grad", &model, "-D", "hidden=8", "--params", &params, "--data", &data, "--out", "g.safetensors"],
    );
    assert!(stdout(&out).contains("mean loss "), "{}", stdout(&out));
    let grads = checkpoint(&dir.join("g.safetensors"), &graph);
    assert_eq!(grads.params.len(), graph.params.len(), "every parameter has a gradient");
    assert!(grads.params.iter().any(|(_, g)| g.iter().any(|&x| x != 0.0)));
    assert!(grads.params.iter().all(|(_, g)| g.iter().all(|x| x.is_finite())));
    // The mean over instances: five single-instance gradients average to it.
    let mut sum = grads.params.zeros_like();
    for i in 0..5 {
        let one = dir.join(format!("one{i}.jsonl"));
        let line = std::fs::read_to_string(&data).unwrap().lines().nth(i).unwrap().to_string();
        std::fs::write(&one, line + "\n").unwrap();
        let name = format!("g{i}.safetensors");
        amprun_ok(
            dir,
            &["grad", &model, "-D", "hidden=8", "--params", &params, "--data", one.to_str().unwrap(), "--out", &name],
        );
        let single = checkpoint(&dir.join(&name), &graph);
        for t in 0..sum.len() {
            sum.data_mut(t).iter_mut().zip(single.params.data(t)).for_each(|(s, g)| *s += g / 5.0);
        }
    }
    for ((spec, mean), (_, expected)) in grads.params.iter().zip(sum.iter()) {
        for (a, b) in mean.iter().zip(expected) {
            assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "{}: {a} vs {b}", spec.name);
        }
    }
}

#[test]
fn parameters_that_do_not_fit_are_bad_input() {
    let dir = scratch("misfit");
    let dir = dir.path();
    let (_, params) = saved_params(dir);
    let data = first_lines(dir, 3);
    let out =
        amprun(dir, &["eval", &example("list_reduce.amp"), "-D", "hidden=16", "--params", &params, "--data", &data]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("cannot use") && stderr(&out).contains("embed"), "{}", stderr(&out));
}
