//! Seeded synthetic tasks for the examples that must run without downloaded data. The same
//! seed gives the same instances on every machine (ChaCha8, as `amp-params` uses).
//!
//! - **List reduction** (AMPNet's task, `examples/list_reduce.amp`, `record Example {
//!   tokens: [int], label: int }`, vocabulary 14): `tokens[0]` names an operation, the rest
//!   are digits 0–9, and the label is the result mod 10. Operations: 10 = sum, 11 = max,
//!   12 = min, 13 = first digit minus last digit (taken mod 10 into 0–9).
//! - **Routed prototypes** (`examples/moe.amp`, `record Sample { x: f32[256], label: int
//!   }`, 10 classes): each instance comes from one of 8 *domains*; a domain has a centre,
//!   and the 10 classes sit around 10 prototype offsets shared by all domains, but each
//!   domain assigns the prototypes to the classes in its own permutation. So the label
//!   depends on (domain, prototype): a gate can tell the domains apart (their centres are
//!   far apart), an expert per domain can read the class off the prototype, and no single
//!   linear classifier fits every domain's permutation. Coordinates are rounded to the
//!   integers -4..=4 (`centre + prototype + noise`, rounded and clamped: centred inputs of
//!   about unit scale, as a real pipeline would normalise them) to keep the files small.
//! - **Tree sentiment** (`examples/tutorial/tree_lstm.amp`, SST's shape at toy size):
//!   binary trees over a vocabulary of 20 words, every node labelled 0 (negative), 1
//!   (neutral) or 2 (positive). Words 0–5 are positive (+1), 6–11 negative (−1), 12–18
//!   neutral (0) and 19 is "not". A node's polarity is the sum of its children's, except
//!   that a node whose left child is "not" has the negation of its right child's. The
//!   label is the polarity's sign, so a model must compose the children, not count words.
//! - **Program execution** (`examples/module_network.amp`, the IEP module network's task
//!   at toy size): a program is a tree of operations on digits, `enum Prog { Digit { d },
//!   Unary { f, arg }, Binary { f, left, right } }`; the label is its value. Unary
//!   functions: 0 = add one, 1 = subtract one, 2 = double, 3 = negate; binary: 0 = add,
//!   1 = subtract, 2 = the larger, 3 = the smaller; all mod 10. Each node is a module the
//!   model picks by the node's function.
//! - **Dependency sentiment** (`examples/child_sum_tree_lstm.amp`): tree sentiment's
//!   vocabulary and labels on dependency-style trees, `enum Tree { Node { word, label,
//!   children: [Tree] } }`, where every node is a word and has any number of children. A
//!   node's polarity is its word's plus the sum of its children's, except that a "not"
//!   node has the negation of its children's sum.

use crate::Value;
use amp_ir::{DataTy, EnumSchema, FieldSchema, RecordSchema, Schema, VariantSchema};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};

/// List reduction: the sum of the digits (the first operation token; digits are below it).
pub const OP_SUM: i64 = 10;
/// List reduction: the largest digit.
pub const OP_MAX: i64 = 11;
/// List reduction: the smallest digit.
pub const OP_MIN: i64 = 12;
/// List reduction: the first digit minus the last.
pub const OP_FIRST_MINUS_LAST: i64 = 13;

/// The data files of `examples/data/`: file name, schema and instances. Seeds: list
/// reduction 1 (train) and 2 (valid), lengths 2–10; the routed-prototypes task 3, its
/// samples 4 (train) and 5 (valid); tree sentiment 6 (train) and 7 (valid), 1 to 8 words;
/// programs 8 (train) and 9 (valid), 1 to 6 operations; dependency sentiment 10 (train) and
/// 11 (valid), 1 to 12 words, at most 4 children per word.
pub fn example_files() -> Vec<(&'static str, Schema, Vec<Value>)> {
    let moe = MoeTask::new(3);
    vec![
        ("list_reduce.train.jsonl", list_reduce_schema(), list_reduce(1, 20000, 10)),
        ("list_reduce.valid.jsonl", list_reduce_schema(), list_reduce(2, 500, 10)),
        ("moe.train.jsonl", moe_schema(), moe.samples(4, 2000)),
        ("moe.valid.jsonl", moe_schema(), moe.samples(5, 500)),
        ("tree_sentiment.train.jsonl", tree_sentiment_schema(), tree_sentiment(6, 2000, 8)),
        ("tree_sentiment.valid.jsonl", tree_sentiment_schema(), tree_sentiment(7, 500, 8)),
        ("programs.train.jsonl", programs_schema(), programs(8, 10000, 6)),
        ("programs.valid.jsonl", programs_schema(), programs(9, 1000, 6)),
        ("dependency.train.jsonl", dependency_schema(), dependency_sentiment(10, 2000, 12, 4)),
        ("dependency.valid.jsonl", dependency_schema(), dependency_sentiment(11, 500, 12, 4)),
    ]
}

fn field(name: &str, ty: DataTy) -> FieldSchema {
    FieldSchema { name: name.into(), ty }
}

fn record(name: &str, fields: Vec<(&str, DataTy)>) -> Schema {
    let fields = fields.into_iter().map(|(name, ty)| field(name, ty)).collect();
    Schema { records: vec![RecordSchema { name: name.into(), fields }], enums: Vec::new(), input: 0 }
}

/// `record Example { tokens: [int], label: int }`, as in `examples/list_reduce.amp`.
pub fn list_reduce_schema() -> Schema {
    record("Example", vec![("tokens", DataTy::Seq(Box::new(DataTy::Int))), ("label", DataTy::Int)])
}

/// `record Sample { x: f32[256], label: int }`, as in `examples/moe.amp`.
pub fn moe_schema() -> Schema {
    record("Sample", vec![("x", DataTy::F32(vec![MoeTask::DIM as u64])), ("label", DataTy::Int)])
}

/// `enum Tree { Leaf { word: int, label: int }, Node { left: Tree, right: Tree, label: int } }`
/// and `record Sentence { tree: Tree, label: int }`, as in `examples/tutorial/tree_lstm.amp`.
pub fn tree_sentiment_schema() -> Schema {
    let leaf =
        VariantSchema { name: "Leaf".into(), fields: vec![field("word", DataTy::Int), field("label", DataTy::Int)] };
    let node = VariantSchema {
        name: "Node".into(),
        fields: vec![field("left", DataTy::Enum(0)), field("right", DataTy::Enum(0)), field("label", DataTy::Int)],
    };
    let mut schema = record("Sentence", vec![("tree", DataTy::Enum(0)), ("label", DataTy::Int)]);
    schema.enums.push(EnumSchema { name: "Tree".into(), variants: vec![leaf, node] });
    schema
}

/// Tree sentiment: the word "not" (the others are 0–18).
pub const NOT: i64 = 19;

/// `count` tree-sentiment sentences of 1 to `max_words` words (counts uniform).
pub fn tree_sentiment(seed: u64, count: usize, max_words: usize) -> Vec<Value> {
    sized(seed, count, max_words, |rng, words| {
        let (tree, polarity) = sentiment_tree(rng, words);
        (tree, sentiment_label(polarity))
    })
}

/// `count` records `{ tree, label }` of `make(rng, size)`, each size uniform in 1 to
/// `max_size`, from one seeded generator.
fn sized(
    seed: u64,
    count: usize,
    max_size: usize,
    mut make: impl FnMut(&mut ChaCha8Rng, usize) -> (Value, i64),
) -> Vec<Value> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..count)
        .map(|_| {
            let size = rng.random_range(1..=max_size.max(1));
            let (tree, label) = make(&mut rng, size);
            Value::Record(vec![tree, Value::Int(label)])
        })
        .collect()
}

fn sentiment_label(polarity: i64) -> i64 {
    polarity.signum() + 1
}

/// A tree of `words` words (at least 1) and its polarity; recursive, at most `words` deep
/// (the callers keep that small).
fn sentiment_tree(rng: &mut ChaCha8Rng, words: usize) -> (Value, i64) {
    let leaf = |word: i64, polarity: i64| {
        let tree = Value::Variant { tag: 0, fields: vec![Value::Int(word), Value::Int(sentiment_label(polarity))] };
        (tree, polarity)
    };
    let node = |(left, pl): (Value, i64), (right, pr): (Value, i64), negated: bool| {
        let polarity = if negated { -pr } else { pl + pr };
        let tree = Value::Variant { tag: 1, fields: vec![left, right, Value::Int(sentiment_label(polarity))] };
        (tree, polarity)
    };
    if words <= 1 {
        // Positive words 0-5, negative 6-11, neutral 12-18.
        let (vocabulary, polarity) = match rng.random_range(0..10) {
            0..4 => (0..6, 1),
            4..8 => (6..12, -1),
            _ => (12..19, 0),
        };
        let word = rng.random_range(vocabulary);
        return leaf(word, polarity);
    }
    if rng.random_range(0..5) == 0 {
        let right = sentiment_tree(rng, words - 1);
        return node(leaf(NOT, 0), right, true);
    }
    let left_words = rng.random_range(1..words);
    let left = sentiment_tree(rng, left_words);
    let right = sentiment_tree(rng, words - left_words);
    node(left, right, false)
}

/// `enum Prog { Digit { d: int }, Unary { f: int, arg: Prog }, Binary { f: int, left: Prog,
/// right: Prog } }` and `record Example { prog: Prog, label: int }`, as in
/// `examples/module_network.amp`.
pub fn programs_schema() -> Schema {
    let variants = vec![
        VariantSchema { name: "Digit".into(), fields: vec![field("d", DataTy::Int)] },
        VariantSchema { name: "Unary".into(), fields: vec![field("f", DataTy::Int), field("arg", DataTy::Enum(0))] },
        VariantSchema {
            name: "Binary".into(),
            fields: vec![field("f", DataTy::Int), field("left", DataTy::Enum(0)), field("right", DataTy::Enum(0))],
        },
    ];
    let mut schema = record("Example", vec![("prog", DataTy::Enum(0)), ("label", DataTy::Int)]);
    schema.enums.push(EnumSchema { name: "Prog".into(), variants });
    schema
}

/// Program execution: a unary function's value (mod 10).
pub fn unary(f: i64, x: i64) -> i64 {
    let y = match f {
        0 => x + 1,
        1 => x - 1,
        2 => 2 * x,
        _ => -x,
    };
    y.rem_euclid(10)
}

/// Program execution: a binary function's value (mod 10).
pub fn binary(f: i64, a: i64, b: i64) -> i64 {
    let y = match f {
        0 => a + b,
        1 => a - b,
        2 => a.max(b),
        _ => a.min(b),
    };
    y.rem_euclid(10)
}

/// `count` programs of 1 to `max_ops` operations (counts uniform), labelled with their
/// values.
pub fn programs(seed: u64, count: usize, max_ops: usize) -> Vec<Value> {
    sized(seed, count, max_ops, program)
}

/// A program of `ops` operations and its value: a unary operation with probability 0.4,
/// else a binary one splitting the rest at a uniform point. Recursion depth is `ops`.
pub fn program(rng: &mut ChaCha8Rng, ops: usize) -> (Value, i64) {
    if ops == 0 {
        let d = rng.random_range(0..10);
        return (Value::Variant { tag: 0, fields: vec![Value::Int(d)] }, d);
    }
    let f = rng.random_range(0..4);
    if rng.random_range(0..5) < 2 {
        let (arg, x) = program(rng, ops - 1);
        return (Value::Variant { tag: 1, fields: vec![Value::Int(f), arg] }, unary(f, x));
    }
    let left_ops = rng.random_range(0..ops);
    let (left, a) = program(rng, left_ops);
    let (right, b) = program(rng, ops - 1 - left_ops);
    (Value::Variant { tag: 2, fields: vec![Value::Int(f), left, right] }, binary(f, a, b))
}

/// `enum Tree { Node { word: int, label: int, children: [Tree] } }` and `record Sentence {
/// tree: Tree, label: int }`, as in `examples/child_sum_tree_lstm.amp`.
pub fn dependency_schema() -> Schema {
    let children = DataTy::Seq(Box::new(DataTy::Enum(0)));
    let node = VariantSchema {
        name: "Node".into(),
        fields: vec![field("word", DataTy::Int), field("label", DataTy::Int), field("children", children)],
    };
    let mut schema = record("Sentence", vec![("tree", DataTy::Enum(0)), ("label", DataTy::Int)]);
    schema.enums.push(EnumSchema { name: "Tree".into(), variants: vec![node] });
    schema
}

/// `count` dependency-sentiment sentences of 1 to `max_words` words (counts uniform), each
/// word with at most `most_children` children.
pub fn dependency_sentiment(seed: u64, count: usize, max_words: usize, most_children: usize) -> Vec<Value> {
    sized(seed, count, max_words, |rng, words| {
        let (tree, polarity) = dependency_tree(rng, words, most_children);
        (tree, sentiment_label(polarity))
    })
}

/// A dependency tree of `words` words (at least 1) and its polarity: the head word is
/// "not" with probability 0.2 when it has dependents, else positive, negative or neutral
/// as a sentiment leaf is; its 1 to `most_children` dependents (uniform, none for a single
/// word) split the other words at uniform cut points. Recursion depth is `words`.
pub fn dependency_tree(rng: &mut ChaCha8Rng, words: usize, most_children: usize) -> (Value, i64) {
    let rest = words.saturating_sub(1);
    let negated = rest > 0 && rng.random_range(0..5) == 0;
    let (word, own) = if negated {
        (NOT, 0)
    } else {
        match rng.random_range(0..10) {
            0..4 => (rng.random_range(0..6), 1),
            4..8 => (rng.random_range(6..12), -1),
            _ => (rng.random_range(12..19), 0),
        }
    };
    let kids = if rest == 0 { 0 } else { rng.random_range(1..=rest.min(most_children.max(1))) };
    // `rest` words in `kids` non-empty parts: `kids - 1` distinct cut points in 1..rest.
    let mut cuts: Vec<usize> = (1..rest).collect();
    cuts.shuffle(rng);
    cuts.truncate(kids.saturating_sub(1));
    cuts.sort_unstable();
    let bounds: Vec<usize> = std::iter::once(0).chain(cuts).chain(std::iter::once(rest)).collect();
    let mut children = Vec::with_capacity(kids);
    let mut sum = 0;
    for w in bounds.windows(2).filter(|w| w[1] > w[0]) {
        let (child, polarity) = dependency_tree(rng, w[1] - w[0], most_children);
        children.push(child);
        sum += polarity;
    }
    let polarity = if negated { -sum } else { own + sum };
    let fields = vec![Value::Int(word), Value::Int(sentiment_label(polarity)), Value::Seq(children)];
    (Value::Variant { tag: 0, fields }, polarity)
}

/// The label of a list-reduction instance: `None` unless `tokens` is an operation followed
/// by at least one digit.
pub fn list_reduce_label(tokens: &[i64]) -> Option<i64> {
    let (&op, digits) = tokens.split_first()?;
    let (&first, &last) = (digits.first()?, digits.last()?);
    if !digits.iter().all(|d| (0..10).contains(d)) {
        return None;
    }
    let result = match op {
        OP_SUM => digits.iter().sum(),
        OP_MAX => *digits.iter().max()?,
        OP_MIN => *digits.iter().min()?,
        OP_FIRST_MINUS_LAST => first - last,
        _ => return None,
    };
    Some(result.rem_euclid(10))
}

/// `count` list-reduction instances of 2 to `max_len` tokens (lengths uniform).
pub fn list_reduce(seed: u64, count: usize, max_len: usize) -> Vec<Value> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let max_len = max_len.max(2);
    (0..count)
        .map(|_| {
            let len = rng.random_range(2..=max_len);
            let mut tokens = vec![rng.random_range(OP_SUM..=OP_FIRST_MINUS_LAST)];
            tokens.extend((1..len).map(|_| rng.random_range(0..10)));
            let label = list_reduce_label(&tokens).unwrap_or(0);
            Value::Record(vec![Value::Seq(tokens.into_iter().map(Value::Int).collect()), Value::Int(label)])
        })
        .collect()
}

/// The routed-prototypes task: its domains' centres, the shared prototypes and each
/// domain's assignment of prototypes to classes. Draw train and validation samples from
/// one task with different seeds.
#[derive(Clone, Debug)]
pub struct MoeTask {
    centres: Vec<Vec<f32>>,
    prototypes: Vec<Vec<f32>>,
    /// `assignment[domain][class]`: the prototype of `class` in `domain`.
    assignment: Vec<Vec<usize>>,
}

impl MoeTask {
    /// The length of `x`.
    pub const DIM: usize = 256;
    /// The number of classes (labels `0..10`).
    pub const CLASSES: usize = 10;
    /// The number of domains (clusters a gate can route by).
    pub const DOMAINS: usize = 8;
    const CENTRE_STD: f32 = 1.5;
    const PROTOTYPE_STD: f32 = 0.5;
    const NOISE_STD: f32 = 1.0;

    /// A task drawn from `seed`: centres, prototypes and assignments.
    pub fn new(seed: u64) -> MoeTask {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut vectors = |count: usize, std: f32| -> Vec<Vec<f32>> {
            (0..count).map(|_| (0..Self::DIM).map(|_| std * normal(&mut rng)).collect()).collect()
        };
        let centres = vectors(Self::DOMAINS, Self::CENTRE_STD);
        let prototypes = vectors(Self::CLASSES, Self::PROTOTYPE_STD);
        let assignment = (0..Self::DOMAINS)
            .map(|_| {
                let mut order: Vec<usize> = (0..Self::CLASSES).collect();
                order.shuffle(&mut rng);
                order
            })
            .collect();
        MoeTask { centres, prototypes, assignment }
    }

    /// `count` samples (domains and classes uniform).
    pub fn samples(&self, seed: u64, count: usize) -> Vec<Value> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (0..count)
            .map(|_| {
                let domain = rng.random_range(0..Self::DOMAINS);
                let class = rng.random_range(0..Self::CLASSES);
                let (centre, prototype) = (&self.centres[domain], &self.prototypes[self.assignment[domain][class]]);
                let x: Vec<f32> = centre
                    .iter()
                    .zip(prototype)
                    .map(|(c, p)| (c + p + Self::NOISE_STD * normal(&mut rng)).round().clamp(-4.0, 4.0))
                    .collect();
                let x = crate::Tensor { shape: vec![Self::DIM], data: x };
                Value::Record(vec![Value::Tensor(x), Value::Int(class as i64)])
            })
            .collect()
    }
}

fn normal(rng: &mut ChaCha8Rng) -> f32 {
    StandardNormal.sample(rng)
}
