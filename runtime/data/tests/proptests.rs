//! Properties: no input makes a loader or the instance view panic; JSON Lines written from
//! any value of a schema read back as the same value; flattening loses nothing.

mod common;

use amp_data::csv::{self, CsvOptions};
use amp_data::jsonl::{self, JsonlOptions};
use amp_data::ptb::{self, PtbOptions};
use amp_data::sdf::{self, SdfOptions};
use amp_data::{generate, Instance, Loaded, Tensor, Value, Vocab, VocabOptions};
use amp_ir::{DataTy, InstanceData, ResolvedStep, Schema};
use proptest::prelude::*;
use proptest::strategy::Union;
use std::sync::Arc;

fn schemas() -> Vec<Schema> {
    vec![
        generate::list_reduce_schema(),
        generate::moe_schema(),
        common::tree_schema(),
        common::digit_schema(),
        common::graph_schema(),
        common::mixed_schema(),
    ]
}

/// Steps that appear in real paths, and some that do not.
fn step() -> impl Strategy<Value = ResolvedStep<'static>> {
    const NAMES: &[&str] = &[
        "tree", "label", "word", "left", "right", "$tag", "$parent", "$site", "$child", "flag", "scale", "grid",
        "pair", "shape", "side", "forest", "points", "x", "y", "value", "lhs", "rhs", "inner", "nodes", "edges", "src",
        "dst", "kind", "tokens", "pixels", "",
    ];
    prop_oneof![
        proptest::sample::select(NAMES).prop_map(ResolvedStep::Field),
        (-2i64..12).prop_map(ResolvedStep::Index),
        prop_oneof![Just(i64::MIN), Just(i64::MAX), Just(1i64 << 40)].prop_map(ResolvedStep::Index),
    ]
}

/// Loads `bytes` with every loader and evaluates some paths on whatever loaded.
fn load_everything(bytes: &[u8], paths: &[Vec<ResolvedStep>]) {
    let vocab = Vocab::from_words(["a", "b", "The"], &VocabOptions::default());
    for skip_bad in [false, true] {
        let mut results: Vec<(Schema, Result<Loaded, amp_data::DataError>)> = Vec::new();
        for schema in schemas() {
            results.push((
                schema.clone(),
                jsonl::parse(&schema, bytes, "f", &JsonlOptions { skip_bad, threads: 0, limit: None }),
            ));
            let csv = CsvOptions { skip_bad, scale: 0.5, ..Default::default() };
            results.push((schema.clone(), csv::parse(&schema, bytes, "f", &csv)));
            let ptb = PtbOptions { skip_bad, lowercase: skip_bad, limit: None };
            results.push((schema.clone(), ptb::parse(&schema, bytes, "f", &vocab, &ptb)));
            let sdf = SdfOptions { skip_bad, ..Default::default() };
            results.push((schema.clone(), sdf::parse(&schema, bytes, "f", &sdf)));
        }
        let _ = ptb::build_vocab(
            bytes,
            "f",
            &PtbOptions { skip_bad, lowercase: true, limit: None },
            &VocabOptions::default(),
        );
        let _ = Vocab::parse(bytes, "f");
        for (schema, result) in results {
            match result {
                Ok(loaded) => {
                    for value in loaded.instances {
                        let instance = Instance::new(&schema, value).expect("loaders produce checked values");
                        for path in paths {
                            let _ = (instance.int_at(path), instance.len_at(path), instance.tensor_at(path));
                        }
                    }
                }
                Err(error) => {
                    let _ = error.to_string();
                }
            }
        }
    }
}

/// Valid inputs of every format, to mutate.
fn seeds() -> Vec<String> {
    let sample = |schema: &Schema, values: Vec<Value>| jsonl::write(schema, &values).expect("fits");
    let mut seeds = vec![
        sample(&generate::list_reduce_schema(), generate::list_reduce(1, 3, 6)),
        r#"{"tree": {"Node": {"left": {"Leaf": {"word": 3, "label": 2}}, "right": {"Leaf": {"word": 4, "label": 1}}, "label": 3}}, "label": 3}"#.into(),
        r#"{"flag": true, "scale": 0.25, "grid": [[1, 2, 3], [4, 5, 6.5]], "pair": [-3, false], "shape": "Empty", "forest": [{"Add": {"lhs": {"Num": {"value": 1}}, "rhs": {"Neg": {"flag": true, "inner": {"Num": {"value": -2}}}}}}], "points": [{"x": 1, "y": 2}]}"#.into(),
        "(3 (2 (2 The) (2 Rock)) (4 (2 is) (1 a)))\n(1 (0 b) (2 c))\n".into(),
        format!("{},3\n", (0..64).map(|i| (i % 17).to_string()).collect::<Vec<_>>().join(",")),
    ];
    seeds.push(
        "m\n  x\n\n  3  2  0  0  0  0  0  0  0  0999 V2000\n    0.2606    0.1503    0.0000 C   0  0\n    \
         1.3000    0.7500    0.0000 O   0  0\n    2.6000    0.0000    0.0000 N   0  0\n  1  2  2  0\n  \
         2  3  1  0\nM  END\n> <SOL_classification>\n(C) high\n\n$$$$\n"
            .into(),
    );
    seeds
}

#[derive(Clone, Debug)]
enum Mutation {
    Delete(usize),
    Insert(usize, u8),
    Replace(usize, u8),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let byte = prop_oneof![proptest::sample::select(b"{}[]()\",:-.0123456789 \n$<>eE\\".to_vec()), any::<u8>(),];
    prop_oneof![
        any::<usize>().prop_map(Mutation::Delete),
        (any::<usize>(), byte.clone()).prop_map(|(i, b)| Mutation::Insert(i, b)),
        (any::<usize>(), byte).prop_map(|(i, b)| Mutation::Replace(i, b)),
    ]
}

fn mutate(mut bytes: Vec<u8>, mutations: &[Mutation]) -> Vec<u8> {
    for m in mutations {
        let len = bytes.len();
        match *m {
            Mutation::Delete(i) if len > 0 => {
                bytes.remove(i % len);
            }
            Mutation::Insert(i, b) => bytes.insert(i % (len + 1), b),
            Mutation::Replace(i, b) if len > 0 => bytes[i % len] = b,
            _ => {}
        }
    }
    bytes
}

/// Any value of type `ty`; `depth` bounds sequences and recursion.
fn arb_value(schema: Arc<Schema>, ty: DataTy, depth: u32) -> BoxedStrategy<Value> {
    match ty {
        DataTy::Int => prop_oneof![any::<i64>(), -3i64..20].prop_map(Value::Int).boxed(),
        DataTy::Bool => any::<bool>().prop_map(Value::Bool).boxed(),
        DataTy::F32(dims) => {
            let shape: Vec<usize> = dims.iter().map(|&d| d as usize).collect();
            let count = shape.iter().product::<usize>();
            let number = prop_oneof![
                any::<f32>().prop_filter("finite", |x| x.is_finite()),
                (-100i32..100).prop_map(|x| x as f32 / 8.0),
            ];
            proptest::collection::vec(number, count)
                .prop_map(move |data| Value::Tensor(Tensor { shape: shape.clone(), data }))
                .boxed()
        }
        DataTy::Seq(item) => {
            let len = if depth == 0 { 0..1 } else { 0..4 };
            proptest::collection::vec(arb_value(schema, *item, depth.saturating_sub(1)), len)
                .prop_map(Value::Seq)
                .boxed()
        }
        DataTy::Tuple(tys) => {
            let parts: Vec<_> = tys.into_iter().map(|t| arb_value(schema.clone(), t, depth)).collect();
            parts.prop_map(Value::Tuple).boxed()
        }
        DataTy::Record(r) => {
            let fields: Vec<_> = schema.records[r as usize]
                .fields
                .iter()
                .map(|f| arb_value(schema.clone(), f.ty.clone(), depth))
                .collect();
            fields.prop_map(Value::Record).boxed()
        }
        DataTy::Enum(e) => {
            let mut variants = Vec::new();
            for (tag, variant) in schema.enums[e as usize].variants.iter().enumerate() {
                let recursive = variant.fields.iter().any(|f| f.ty == DataTy::Enum(e));
                if depth == 0 && recursive {
                    continue;
                }
                let fields: Vec<_> = variant
                    .fields
                    .iter()
                    .map(|f| arb_value(schema.clone(), f.ty.clone(), depth.saturating_sub(1)))
                    .collect();
                variants.push(fields.prop_map(move |fields| Value::Variant { tag: tag as u32, fields }).boxed());
            }
            Union::new(variants).boxed()
        }
    }
}

fn arb_instance() -> impl Strategy<Value = (Schema, Value)> {
    proptest::sample::select(schemas()).prop_flat_map(|schema| {
        let shared = Arc::new(schema.clone());
        arb_value(shared, DataTy::Record(schema.input), 4).prop_map(move |v| (schema.clone(), v))
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic_a_loader(
        bytes in proptest::collection::vec(any::<u8>(), 0..300),
        paths in proptest::collection::vec(proptest::collection::vec(step(), 0..5), 0..6),
    ) {
        load_everything(&bytes, &paths);
    }

    #[test]
    fn mutated_valid_inputs_never_panic_a_loader(
        seed in proptest::sample::select(seeds()),
        mutations in proptest::collection::vec(mutation(), 1..6),
        paths in proptest::collection::vec(proptest::collection::vec(step(), 0..5), 0..6),
    ) {
        load_everything(&mutate(seed.into_bytes(), &mutations), &paths);
    }

    #[test]
    fn jsonl_round_trips_any_value((schema, value) in arb_instance()) {
        let line = jsonl::write_line(&schema, &value).expect("a value of the schema");
        prop_assert!(!line.contains('\n'));
        let read = jsonl::parse_line(&schema, &line).map_err(|e| TestCaseError::fail(format!("{e}\n{line}")))?;
        prop_assert_eq!(&read, &value);
        let instance = Instance::new(&schema, value.clone()).expect("a value of the schema");
        prop_assert_eq!(instance.to_value(), value);
    }

    #[test]
    fn any_path_on_any_instance_is_safe(
        (schema, value) in arb_instance(),
        paths in proptest::collection::vec(proptest::collection::vec(step(), 0..6), 1..20),
    ) {
        let instance = Instance::new(&schema, value).expect("a value of the schema");
        for path in &paths {
            let _ = (instance.int_at(path), instance.len_at(path), instance.tensor_at(path));
        }
    }
}
