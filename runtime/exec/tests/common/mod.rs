//! Shared by the executor's tests: compiling Amp sources with the real compiler, building
//! instances, comparing parameter sets.
#![allow(dead_code)]

use amp_data::{Instance, Tensor, Value};
use amp_exec::{ExecConfig, Executor};
use amp_ir::Graph;
use amp_params::ParamSet;
use amp_sema::{check_source, Options};

/// Checks, lowers, optimises and verifies an Amp program (as `ampc compile` does).
pub fn compile_source(name: &str, text: &str, defines: &[(&str, i64)]) -> Graph {
    let options = Options { defines: defines.iter().map(|(k, v)| (k.to_string(), *v)).collect() };
    let (map, checked) = check_source(name, text, &options);
    assert!(!checked.has_errors(), "{}", amp_diagnostics::render_human(&map, &checked.diagnostics, false));
    let model = checked.program.models[0];
    let mut graph = match amp_lower::lower_model(&checked.program, &map, model) {
        Ok(g) => g,
        Err(d) => panic!("lowering failed: {}", amp_diagnostics::render_human(&map, &d, false)),
    };
    amp_lower::passes::optimize(&mut graph);
    if let Err(e) = amp_ir::verify::verify(&graph) {
        panic!("{e:?}\n{}", amp_ir::text::print(&graph));
    }
    graph
}

/// Compiles `examples/NAME.amp` with `-D` overrides.
pub fn compile_example(name: &str, defines: &[(&str, i64)]) -> Graph {
    let path = format!("{}/../../examples/{name}.amp", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    compile_source(&format!("{name}.amp"), &text, defines)
}

pub fn instance(graph: &Graph, value: Value) -> Instance {
    Instance::new(graph.input.as_ref().expect("the graph has an input schema"), value).expect("a valid instance")
}

/// A tiny deterministic generator (tests must not depend on a crate's RNG stream).
pub struct Lcg(pub u64);

impl Lcg {
    pub fn next_u32(&mut self) -> u32 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) as u32
    }

    /// Uniform in [-1, 1).
    pub fn unit(&mut self) -> f32 {
        self.next_u32() as f32 / (1u64 << 31) as f32 - 1.0
    }

    pub fn below(&mut self, n: u32) -> u32 {
        self.next_u32() % n
    }
}

/// `Digit { pixels: f32[64], label }` instances with random pixels.
pub fn digits(graph: &Graph, n: usize, seed: u64) -> Vec<Instance> {
    let mut rng = Lcg(seed);
    (0..n)
        .map(|_| {
            let pixels: Vec<f32> = (0..64).map(|_| rng.unit()).collect();
            // A learnable label: which quarter of the image is brightest.
            let sums: Vec<f32> = pixels.chunks(16).map(|c| c.iter().sum()).collect();
            let label = (0..4).max_by(|&a, &b| sums[a].total_cmp(&sums[b])).unwrap_or(0) as i64;
            let value = Value::Record(vec![Value::Tensor(Tensor::new(vec![64], pixels).unwrap()), Value::Int(label)]);
            instance(graph, value)
        })
        .collect()
}

/// `Example { tokens, label }` instances with `len` tokens below `vocab`.
pub fn token_lists(graph: &Graph, lens: &[usize], vocab: u32, seed: u64) -> Vec<Instance> {
    let mut rng = Lcg(seed);
    lens.iter()
        .map(|&len| {
            let tokens: Vec<i64> = (0..len).map(|_| i64::from(rng.below(vocab))).collect();
            // A learnable label: the first token mod 10 (0 for an empty list).
            let label = tokens.first().map_or(0, |t| t % 10);
            let value =
                Value::Record(vec![Value::Seq(tokens.into_iter().map(Value::Int).collect()), Value::Int(label)]);
            instance(graph, value)
        })
        .collect()
}

pub fn executor(graph: &Graph, seed: u64, config: ExecConfig) -> Executor {
    let params = ParamSet::init(&amp_params::ParamSpec::of_graph(graph), seed);
    Executor::new(graph, params, config).expect("the executor accepts the graph")
}

/// The largest difference between two parameter sets, relative to `1 + |b|`.
pub fn max_rel_diff(a: &ParamSet, b: &ParamSet) -> f32 {
    assert!(a.same_layout(b));
    a.iter()
        .zip(b.iter())
        .flat_map(|((_, x), (_, y))| x.iter().zip(y).map(|(p, q)| (p - q).abs() / (1.0 + q.abs())))
        .fold(0.0, f32::max)
}
