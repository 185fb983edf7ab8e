//! Shared by the `amprun` tests: running the built binary, scratch folders, the examples,
//! compiled graphs and checkpoint comparisons.
#![allow(dead_code)]

use amp_ir::Graph;
use amp_params::checkpoint::Checkpoint;
use amp_params::{ParamSet, ParamSpec};
use std::path::Path;
use std::process::{Command, Output};

/// Runs `amprun` with `args` in `dir`.
pub fn amprun(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_amprun"))
        .args(args)
        .current_dir(dir)
        .env_remove("RUST_BACKTRACE")
        // One worker unless a test says `--workers`: most compare runs bit for bit, which
        // several workers keep only to rounding (the default is every core).
        .env("AMP_WORKERS", "1")
        .output()
        .expect("amprun runs")
}

/// Runs `amprun` and insists on exit code 0.
pub fn amprun_ok(dir: &Path, args: &[&str]) -> Output {
    let out = amprun(dir, args);
    assert_eq!(out.status.code(), Some(0), "amprun {args:?}\nstdout:\n{}\nstderr:\n{}", stdout(&out), stderr(&out));
    out
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A fresh scratch folder for one test, removed when the value is dropped (keep it bound
/// for the whole test: `let dir = scratch("x"); let dir = dir.path();`).
pub fn scratch(test: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(&format!("amprun-{test}-")).tempdir().expect("scratch folder")
}

/// The path of `examples/NAME` (or `examples/data/NAME`) as a string.
pub fn example(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples").join(name).display().to_string()
}

/// The path of `data/REL`, a file of a data set bundled in the repository
/// (`digits/digits.csv`, `molecules/solubility.test.sdf`).
pub fn bundled(rel: &str) -> String {
    let path = amp_data::catalog::bundled_dir().join(rel);
    assert!(path.is_file(), "{} is part of the repository", path.display());
    path.display().to_string()
}

/// The cache folder's SST (`amprun data get sst`), or `None` with the skip reported:
/// printed, and appended to the file `$AMP_SKIP_LOG` names (`.ci/run` counts its lines).
pub fn cached_sst(test: &str) -> Option<std::path::PathBuf> {
    use amp_data::catalog::{cache_dir, file_of, SST};
    match SST.splits.iter().find_map(|split| file_of(&SST, split, None).err()) {
        None => Some(SST.dir(&cache_dir().ok()?)),
        Some(error) => {
            skipped(test, &error.to_string());
            None
        }
    }
}

/// Reports a test (or a case of one) that could not run here.
pub fn skipped(test: &str, reason: &str) {
    amp_tests::report_skip(&format!("amprun {test}: {reason}"));
}

/// Compiles `examples/NAME.amp` with overrides, as `amprun` and `ampc compile` do.
pub fn compile_example(name: &str, defines: &[(&str, i64)]) -> amp_ir::verify::Verified {
    let text = std::fs::read_to_string(example(&format!("{name}.amp"))).expect("example source");
    let options = amp_sema::Options { defines: defines.iter().map(|(k, v)| (k.to_string(), *v)).collect() };
    let (map, checked) = amp_sema::check_source(&format!("{name}.amp"), &text, &options);
    assert!(!checked.has_errors(), "{name}.amp has errors");
    let model = checked.program.models[0];
    match amp_lower::compile_model(&checked.program, &map, model) {
        Ok((graph, _)) => graph,
        Err(e) => panic!("{name}.amp does not compile: {e:?}"),
    }
}

/// `amprun train` of list-reduce at hidden 16 on the shipped training file, validated on
/// the shipped validation file, with `extra` flags (`--limit`, `--epochs`, outputs);
/// insists on exit code 0.
pub fn train_list_reduce(dir: &Path, extra: &[&str]) -> Output {
    let (data, valid) = (example("data/list_reduce.train.jsonl"), example("data/list_reduce.valid.jsonl"));
    let model = example("list_reduce.amp");
    let args = ["train", &model, "-D", "hidden=16", "--data", &data, "--valid", &valid];
    amprun_ok(dir, &[&args[..], extra].concat())
}

/// A checkpoint file with its parameters read against `graph`.
pub fn checkpoint(path: &Path, graph: &Graph) -> Checkpoint {
    amp_params::load_checkpoint(path, &ParamSpec::of_graph(graph))
        .unwrap_or_else(|e| panic!("{} is not a checkpoint of the model: {e}", path.display()))
}

/// Every value of `a` within 1e-5 of `b`'s, relative to its magnitude or `floor` where
/// that is larger; `sides` name the two runs in the message (`("in one process", "in
/// two")`).
pub fn assert_params_agree(a: &ParamSet, b: &ParamSet, floor: f32, sides: (&str, &str)) {
    for (spec, values) in a.iter() {
        let other = b.get(&spec.name).expect("the same tensors");
        for (x, y) in values.iter().zip(other) {
            assert!((x - y).abs() <= 1e-5 * x.abs().max(floor), "`{}`: {x} {}, {y} {}", spec.name, sides.0, sides.1);
        }
    }
}

/// JSON objects, one per line.
pub fn json_lines(text: &str) -> Vec<serde_json::Value> {
    text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("`{l}` is not JSON: {e}"))).collect()
}
