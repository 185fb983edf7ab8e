//! Every loader on the real data sets (the bundled ones always, SST when `amprun data get
//! sst` put it in the cache folder; the test says when it is skipped), on the example
//! data, and on bad input: errors name file, line and field; `skip_bad` skips and counts.

mod common;

use amp_data::csv::{self, CsvOptions};
use amp_data::generate::{self, MoeTask};
use amp_data::jsonl::{self, JsonlOptions};
use amp_data::ptb::{self, PtbOptions};
use amp_data::sdf::{self, SdfOptions};
use amp_data::{DataErrorKind, Instance, Loaded, PreparedSchema, Value, Vocab, VocabOptions, VocabOrder};
use amp_ir::{InstanceData, ResolvedStep::Field as F, ResolvedStep::Index as I};
use std::sync::Arc;

fn ints(value: &Value) -> Vec<i64> {
    match value {
        Value::Seq(items) => items.iter().filter_map(|v| if let Value::Int(i) = v { Some(*i) } else { None }).collect(),
        _ => Vec::new(),
    }
}

fn field(value: &Value, index: usize) -> &Value {
    match value {
        Value::Record(fields) => &fields[index],
        _ => panic!("not a record: {value:?}"),
    }
}

fn error_text(result: Result<Loaded, amp_data::DataError>) -> String {
    result.expect_err("bad data").to_string()
}

const SKIP: JsonlOptions = JsonlOptions { skip_bad: true, threads: 0, limit: None };

// ---------------------------------------------------------------- JSON Lines

#[test]
fn jsonl_reports_file_line_and_field() {
    let schema = generate::list_reduce_schema();
    let text = "{\"tokens\": [10, 1], \"label\": 1}\n\n{\"tokens\": [10, 1, 2, \"x\"], \"label\": 3}\n";
    let error = jsonl::parse(&schema, text.as_bytes(), "data/train.jsonl", &JsonlOptions::default());
    assert_eq!(error_text(error), "data/train.jsonl:3: field `tokens[3]`: expected an int, found \"x\"");

    let cases = [
        ("{\"tokens\": [1]}", "data.jsonl:1: field `label`: missing"),
        (
            "{\"tokens\": [1], \"label\": 2, \"lable\": 2}",
            "data.jsonl:1: field `lable`: not a field of Example (its fields: tokens, label)",
        ),
        ("{\"tokens\": 3, \"label\": 2}", "data.jsonl:1: field `tokens`: expected a value of type [int], found 3"),
        ("{\"tokens\": [], \"label\": 2.5}", "data.jsonl:1: field `label`: expected an int, found 2.5"),
        ("[1, 2]", "data.jsonl:1: expected an object with the fields of Example, found an array of 2"),
    ];
    for (line, expected) in cases {
        let error = jsonl::parse(&schema, line.as_bytes(), "data.jsonl", &JsonlOptions::default());
        assert_eq!(error_text(error), expected);
    }
    let error = jsonl::parse(&schema, b"{\"tokens\": [1,", "data.jsonl", &JsonlOptions::default());
    assert!(error_text(error).starts_with("data.jsonl:1: invalid JSON: "));
    let error = jsonl::parse(&schema, b"{}\n\xff\xfe\n", "data.jsonl", &SKIP).expect("skipped");
    assert_eq!(error.skipped, 2);
    assert_eq!(error.first_skipped.map(|e| e.to_string()), Some("data.jsonl:1: field `tokens`: missing".into()));
}

#[test]
fn jsonl_tensors_enums_and_trees() {
    let digits = common::digit_schema();
    let pixels: Vec<String> = (0..64).map(|i| i.to_string()).collect();
    let line = format!("{{\"pixels\": [{}], \"label\": 7}}", pixels.join(","));
    let loaded = jsonl::parse(&digits, line.as_bytes(), "d.jsonl", &JsonlOptions::default()).expect("valid");
    assert!(matches!(field(&loaded.instances[0], 0), Value::Tensor(t) if t.data[63] == 63.0));
    let short = format!("{{\"pixels\": [{}], \"label\": 7}}", pixels[..63].join(","));
    let error = jsonl::parse(&digits, short.as_bytes(), "d.jsonl", &JsonlOptions::default());
    assert_eq!(error_text(error), "d.jsonl:1: field `pixels`: expected an array of 64, found an array of 63");
    // A bad element is named by its index, even deep in a tensor.
    let mut bad = pixels.clone();
    bad[41] = "\"x\"".to_string();
    let line = format!("{{\"pixels\": [{}], \"label\": 7}}", bad.join(","));
    let error = jsonl::parse(&digits, line.as_bytes(), "d.jsonl", &JsonlOptions::default());
    assert_eq!(error_text(error), "d.jsonl:1: field `pixels[41]`: expected a number in the f32 range, found \"x\"");
    let schema = common::mixed_schema();
    let grid = r#"{"flag": true, "scale": 0.25, "grid": [[1, 2, 3], [4, 1e39, 6]], "pair": [-3, false], "shape": "Empty", "forest": [], "points": []}"#;
    let error = jsonl::parse(&schema, grid.as_bytes(), "m.jsonl", &JsonlOptions::default());
    assert_eq!(error_text(error), "m.jsonl:1: field `grid[1][1]`: expected a number in the f32 range, found 1e+39");

    let schema = common::tree_schema();
    let line = r#"{"tree": {"Node": {"left": {"Leaf": {"word": 3, "label": 2}}, "right": {"Leaf": {"word": 4, "label": 1}}, "label": 3}}, "label": 3}"#;
    let loaded = jsonl::parse(&schema, line.as_bytes(), "t.jsonl", &JsonlOptions::default()).expect("valid");
    let tree = Instance::new(&schema, loaded.instances[0].clone()).expect("checked");
    assert_eq!(tree.len_at(&[F("tree")]), Some(3));
    assert_eq!(tree.int_at(&[F("tree"), I(2), F("word")]), Some(4));
    let bad = r#"{"tree": {"Node": {"left": {"Leaf": {"word": 3, "label": 2}}, "right": {"Twig": {}}, "label": 3}}, "label": 3}"#;
    let error = jsonl::parse(&schema, bad.as_bytes(), "t.jsonl", &JsonlOptions::default());
    assert_eq!(
        error_text(error),
        "t.jsonl:1: field `tree.right`: `Twig` is not a variant of Tree (its variants: Leaf, Node)"
    );
    let bad = r#"{"tree": {"Leaf": {"word": 3}}, "label": 3}"#;
    let error = jsonl::parse(&schema, bad.as_bytes(), "t.jsonl", &JsonlOptions::default());
    assert_eq!(error_text(error), "t.jsonl:1: field `tree.label`: missing");
    assert_eq!(
        jsonl::write_line(&schema, &loaded.instances[0]).expect("fits"),
        line.replace(": ", ":").replace(", ", ",")
    );
}

/// A file large enough to be parsed in shares on several threads gives what one thread
/// gives: the same instances, the first bad line in the file as the error (whichever
/// share it is in), the same skipped count and first skipped line.
#[test]
fn jsonl_parsed_on_several_threads_is_parsed_as_on_one() {
    let schema = generate::list_reduce_schema();
    let text = |bad: &[usize]| -> String {
        (1..=9_000)
            .map(|n| {
                if bad.contains(&n) {
                    "{\"tokens\": [10, 1, 2, \"x\"], \"label\": 3}\n".to_string()
                } else if n % 1000 == 0 {
                    "\n".to_string()
                } else {
                    format!("{{\"tokens\": [10, {}, 2], \"label\": {}}}\n", n % 7, n % 5)
                }
            })
            .collect()
    };
    let parse = |text: &str, skip_bad: bool, threads: usize| {
        jsonl::parse(&schema, text.as_bytes(), "big.jsonl", &JsonlOptions { skip_bad, threads, limit: None })
    };
    for bad in [&[][..], &[100, 5_001, 8_002][..], &[5_001, 8_002][..], &[8_999][..]] {
        let text = text(bad);
        for skip_bad in [false, true] {
            let one = parse(&text, skip_bad, 1);
            for threads in [2, 4, 7] {
                assert_eq!(
                    parse(&text, skip_bad, threads),
                    one,
                    "bad lines {bad:?}, skip {skip_bad}, {threads} threads"
                );
            }
            match (&one, bad.first(), skip_bad) {
                (Ok(loaded), None, _) => assert_eq!(loaded.instances.len(), 9_000 - 9),
                (Ok(loaded), Some(first), true) => {
                    assert_eq!((loaded.skipped, loaded.instances.len()), (bad.len(), 9_000 - 9 - bad.len()));
                    let skipped = loaded.first_skipped.as_ref().map(ToString::to_string).unwrap_or_default();
                    assert!(skipped.starts_with(&format!("big.jsonl:{first}: ")), "{skipped}");
                }
                (Err(error), Some(first), false) => {
                    assert!(error.to_string().starts_with(&format!("big.jsonl:{first}: ")), "{error}")
                }
                (outcome, _, _) => panic!("bad lines {bad:?}, skip {skip_bad}: {outcome:?}"),
            }
        }
    }
}

#[test]
fn jsonl_round_trips_every_kind_of_value() {
    let schema = common::mixed_schema();
    let text = r#"{"flag": true, "scale": 0.25, "grid": [[1, 2, 3], [4, 5, 6.5]], "pair": [-3, false], "shape": "Empty", "forest": [{"Add": {"lhs": {"Num": {"value": 1}}, "rhs": {"Neg": {"flag": true, "inner": {"Num": {"value": -2}}}}}}], "points": [{"x": 1, "y": 2}]}"#;
    let loaded = jsonl::parse(&schema, text.as_bytes(), "m.jsonl", &JsonlOptions::default()).expect("valid");
    let written = jsonl::write(&schema, &loaded.instances).expect("fits");
    let again = jsonl::parse(&schema, written.as_bytes(), "m.jsonl", &JsonlOptions::default()).expect("valid");
    assert_eq!(again.instances, loaded.instances);
    assert!(written.contains(r#""shape":{"Empty":{}}"#), "{written}");
    // A value that does not fit the schema is refused by the writer too.
    let error = jsonl::write_line(&schema, &Value::Int(3)).expect_err("not a record");
    assert!(matches!(error.kind(), DataErrorKind::Mismatch { .. }));
}

// ---------------------------------------------------------------- generated examples

#[test]
fn example_data_files_are_up_to_date() {
    for (name, schema, values) in generate::example_files() {
        let path = common::examples_dir().join("data").join(name);
        let on_disk = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let fresh = jsonl::write(&schema, &values).expect("generated values fit their schema");
        assert!(on_disk == fresh, "{name} differs from the generator: run `cargo run -p amp-data --example generate`");
        let loaded = jsonl::load(&schema, &path, &JsonlOptions::default()).expect("loads");
        assert_eq!(loaded.instances, values, "{name}");
    }
}

#[test]
fn list_reduction_labels_follow_the_operations() {
    assert_eq!(generate::list_reduce_label(&[10, 9, 8, 7]), Some(4));
    assert_eq!(generate::list_reduce_label(&[11, 3, 9, 1]), Some(9));
    assert_eq!(generate::list_reduce_label(&[12, 3, 9, 1]), Some(1));
    assert_eq!(generate::list_reduce_label(&[13, 2, 9, 7]), Some(5));
    assert_eq!(generate::list_reduce_label(&[13, 4]), Some(0));
    assert_eq!(generate::list_reduce_label(&[13]), None);
    assert_eq!(generate::list_reduce_label(&[9, 1]), None);
    let values = generate::list_reduce(7, 300, 10);
    assert_eq!(values, generate::list_reduce(7, 300, 10), "seeded");
    let prepared = Arc::new(PreparedSchema::new(generate::list_reduce_schema()).expect("valid schema"));
    for value in &values {
        let tokens = ints(field(value, 0));
        assert!((2..=10).contains(&tokens.len()));
        assert_eq!(Some(field(value, 1).clone()), generate::list_reduce_label(&tokens).map(Value::Int));
        Instance::with_prepared(&prepared, value.clone()).expect("fits the schema");
    }
    let lengths: std::collections::BTreeSet<usize> = values.iter().map(|v| ints(field(v, 0)).len()).collect();
    assert_eq!(lengths.len(), 9, "every length 2..=10 occurs");
}

#[test]
fn moe_samples_are_seeded_and_cover_every_class() {
    let task = MoeTask::new(3);
    let samples = task.samples(9, 400);
    assert_eq!(samples, MoeTask::new(3).samples(9, 400));
    let mut classes = [0usize; MoeTask::CLASSES];
    for s in &samples {
        Instance::new(&generate::moe_schema(), s.clone()).expect("fits the schema");
        if let Value::Int(label) = field(s, 1) {
            classes[*label as usize] += 1;
        }
        assert!(
            matches!(field(s, 0), Value::Tensor(t) if t.data.iter().all(|x| (-4.0..=4.0).contains(x) && x.fract() == 0.0))
        );
    }
    assert!(classes.iter().all(|&n| n > 20), "{classes:?}");
}

// ---------------------------------------------------------------- PTB trees

fn vocab_of(words: &str) -> Vocab {
    Vocab::from_words(
        words.split_whitespace(),
        &VocabOptions { order: VocabOrder::FirstAppearance, ..Default::default() },
    )
}

#[test]
fn ptb_trees_become_flattenable_instances() {
    let schema = common::tree_schema();
    let text = "(3 (2 (2 The) (2 Rock)) (4 (2 is) (1 the)))\n";
    let vocab =
        ptb::build_vocab(text.as_bytes(), "t.txt", &PtbOptions::default(), &VocabOptions::default()).expect("vocab");
    assert_eq!(vocab.words(), ["<unk>", "The", "Rock", "is", "the"], "equally frequent: by first appearance");
    let loaded = ptb::parse(&schema, text.as_bytes(), "t.txt", &vocab, &PtbOptions::default()).expect("valid");
    let s = Instance::new(&schema, loaded.instances[0].clone()).expect("checked");
    assert_eq!(s.int_at(&[F("label")]), Some(3));
    assert_eq!(s.len_at(&[F("tree")]), Some(7));
    let words: Vec<_> = (0..7).filter_map(|n| s.int_at(&[F("tree"), I(n), F("word")])).collect();
    assert_eq!(words, [1, 2, 3, 4]);
    let labels: Vec<_> = (0..7).filter_map(|n| s.int_at(&[F("tree"), I(n), F("label")])).collect();
    assert_eq!(labels, [3, 2, 2, 2, 4, 2, 1]);

    let lower = PtbOptions { lowercase: true, ..Default::default() };
    let vocab = vocab_of("<unk> the rock");
    let loaded = ptb::parse(&schema, text.as_bytes(), "t.txt", &vocab, &lower).expect("valid");
    let s = Instance::new(&schema, loaded.instances[0].clone()).expect("checked");
    let words: Vec<_> = (0..7).filter_map(|n| s.int_at(&[F("tree"), I(n), F("word")])).collect();
    assert_eq!(words, [1, 2, 0, 1], "lowercased; `is` is unknown");
}

#[test]
fn ptb_errors_name_the_line_and_the_problem() {
    let schema = common::tree_schema();
    let vocab = vocab_of("a b c");
    let parse = |text: &str, skip_bad| {
        ptb::parse(
            &schema,
            text.as_bytes(),
            "sst/train.txt",
            &vocab,
            &PtbOptions { skip_bad, lowercase: false, limit: None },
        )
    };
    let cases = [
        ("(1 (2 a) (3 b) (1 c))", "sst/train.txt:2: the node ending at column 21 has 3 subtrees: only binary trees fit (a leaf is `(label word)`)"),
        ("(1 (2 a))", "sst/train.txt:2: the node ending at column 9 has 1 subtree: only binary trees fit (a leaf is `(label word)`)"),
        ("(1 (2 a) (2 b)", "sst/train.txt:2: unbalanced brackets: 1 `(` not closed"),
        ("(1 (2 a) (2 b)))", "sst/train.txt:2: unbalanced `)` at column 16"),
        ("(x (2 a) (2 b))", "sst/train.txt:2: expected a label (an int), found `x` at column 1"),
        ("(1 (2 a) (2 b)) (1 c)", "sst/train.txt:2: text after the tree at column 17"),
        ("(1 a b)", "sst/train.txt:2: unexpected word `b` at column 6 (a leaf is `(label word)`)"),
        ("(1 a (2 b))", "sst/train.txt:2: a subtree after a word at column 6"),
        ("()", "sst/train.txt:2: expected a label after `(` at column 1"),
    ];
    for (line, expected) in cases {
        assert_eq!(error_text(parse(&format!("(1 (1 a) (2 b))\n{line}\n"), false)), expected, "{line}");
    }
    let text = "(1 (2 a) (3 b) (1 c))\n(1 (1 a) (2 b))\n(1 (2 a))\n\n(0 c)\n";
    let loaded = parse(text, true).expect("skipping");
    assert_eq!((loaded.instances.len(), loaded.skipped), (2, 2));
    assert_eq!(loaded.first_skipped.and_then(|e| e.line()), Some(1));

    let deep = "(1 ".repeat(ptb::MAX_DEPTH + 1);
    assert!(error_text(parse(&deep, false)).contains("nested deeper than"));
    let error = ptb::parse(&common::digit_schema(), b"(1 a)", "x.txt", &vocab, &PtbOptions::default());
    assert!(error_text(error)
        .starts_with("x.txt: the input schema does not fit this format: record Digit needs exactly one"));
}

#[test]
fn vocabularies_are_cut_saved_and_loaded() {
    let words = "c b a b c c <unk> d";
    let by_count = Vocab::from_words(words.split(' '), &VocabOptions::default());
    assert_eq!(by_count.words(), ["<unk>", "c", "b", "a", "d"]);
    let cut = Vocab::from_words(words.split(' '), &VocabOptions { max_size: Some(3), ..Default::default() });
    assert_eq!(cut.words(), ["<unk>", "c", "b"]);
    let common = Vocab::from_words(words.split(' '), &VocabOptions { min_count: 2, ..Default::default() });
    assert_eq!(common.words(), ["<unk>", "c", "b"]);
    assert_eq!((common.index("b"), common.index("a"), common.get("a")), (2, 0, None));

    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("vocab.txt");
    by_count.save(&path).expect("saved");
    assert_eq!(Vocab::load(&path).expect("loaded"), by_count);
    assert_eq!(
        Vocab::parse(b"<unk>\na\nb\na\n", "v.txt").expect_err("duplicate").to_string(),
        "v.txt:4: `a` is also on line 2"
    );
    assert_eq!(
        Vocab::parse(b"a\n", "v.txt").expect_err("no unk").to_string(),
        "v.txt:1: the first word must be `<unk>`"
    );
    assert!(Vocab::load(std::path::Path::new("/nonexistent/vocab.txt")).is_err());
}

#[test]
fn sst_splits_load_completely() {
    let Some(dir) = common::cached_sst("sst_splits_load_completely") else { return };
    let schema = common::tree_schema();
    let options = PtbOptions::default();
    let vocab = ptb::build_vocab_file(&dir.join("train.txt"), &options, &VocabOptions::default()).expect("vocab");
    assert!(vocab.len() > 10_000, "{}", vocab.len());
    let prepared = Arc::new(PreparedSchema::new(schema.clone()).expect("schema"));
    for (split, count) in [("train.txt", 8544), ("dev.txt", 1101), ("test.txt", 2210)] {
        let loaded = ptb::load(&schema, &dir.join(split), &vocab, &options).expect(split);
        assert_eq!((loaded.instances.len(), loaded.skipped), (count, 0), "{split}");
        for value in &loaded.instances {
            let s = Instance::with_prepared(&prepared, value.clone()).expect("checked");
            let nodes = s.len_at(&[F("tree")]).expect("a tree");
            let leaves = (0..nodes).filter(|&n| s.int_at(&[F("tree"), I(n), F("$tag")]) == Some(0)).count() as i64;
            assert_eq!(nodes, 2 * leaves - 1, "binary");
            assert!((0..=4).contains(&s.int_at(&[F("label")]).expect("label")));
        }
    }
    let small = ptb::build_vocab_file(
        &dir.join("train.txt"),
        &PtbOptions { lowercase: true, ..options },
        &VocabOptions { max_size: Some(5000), ..Default::default() },
    )
    .expect("vocab");
    assert_eq!(
        (small.len(), small.word(0), small.word(1), small.get("the")),
        (5000, Some("<unk>"), Some("."), Some(2))
    );
    assert!(vocab.get("8\u{a0}1\\/2").is_some(), "a word with a no-break space is one word");
}

// ---------------------------------------------------------------- CSV

#[test]
fn digits_load_with_scaled_pixels() {
    let dir = common::bundled(&amp_data::catalog::DIGITS);
    let options = CsvOptions { scale: 1.0 / 16.0, ..Default::default() };
    let loaded = csv::load(&common::digit_schema(), &dir.join("digits.csv"), &options).expect("digits");
    assert_eq!((loaded.instances.len(), loaded.skipped), (1797, 0));
    let mut labels = [0usize; 10];
    for value in &loaded.instances {
        assert!(
            matches!(field(value, 0), Value::Tensor(t) if t.data.len() == 64 && t.data.iter().all(|x| (0.0..=1.0).contains(x)))
        );
        if let Value::Int(label) = field(value, 1) {
            labels[*label as usize] += 1;
        }
    }
    assert!(labels.iter().all(|&n| n > 150), "{labels:?}");
}

#[test]
fn csv_headers_errors_and_skipping() {
    let schema = amp_ir::Schema {
        records: vec![amp_ir::RecordSchema {
            name: "Row".into(),
            fields: vec![
                common::field("x", amp_ir::DataTy::F32(vec![2, 2])),
                common::field("ok", amp_ir::DataTy::Bool),
                common::field("label", amp_ir::DataTy::Int),
            ],
        }],
        enums: Vec::new(),
        input: 0,
    };
    let options = CsvOptions::default();
    let text = "a,b,c,d,ok,label\n1,2,3,4,1,0\n\n5,6,7,8,false,1\r\n";
    let loaded = csv::parse(&schema, text.as_bytes(), "rows.csv", &options).expect("valid");
    assert_eq!(loaded.instances.len(), 2);
    assert!(
        matches!(field(&loaded.instances[1], 0), Value::Tensor(t) if t.shape == [2, 2] && t.data == [5.0, 6.0, 7.0, 8.0])
    );
    assert_eq!(field(&loaded.instances[1], 1), &Value::Bool(false));

    let cases = [
        ("1,2,3,4,1,0\n1,2,x,4,1,0", "rows.csv:2: field `x[1][0]`: expected a finite number, found \"x\""),
        ("1,2,3,4,1,0\n1,2,3,4,1", "rows.csv:2: expected 6 columns, found 5"),
        ("1,2,3,4,2,0", "rows.csv:1: field `ok`: expected a bool (0, 1, true or false), found \"2\""),
        ("1,2,3,4,1,0.5", "rows.csv:1: field `label`: expected an int, found \"0.5\""),
        ("1,2,3,4,1,label", "rows.csv:1: field `label`: expected an int, found \"label\""),
    ];
    for (text, expected) in cases {
        assert_eq!(error_text(csv::parse(&schema, text.as_bytes(), "rows.csv", &options)), expected);
    }
    let skip = CsvOptions { skip_bad: true, ..Default::default() };
    let loaded =
        csv::parse(&schema, b"1,2,3,4,1,0\n1,2\n1,2,3,4,1,1\n1e40,2,3,4,1,1\n", "rows.csv", &skip).expect("skip");
    assert_eq!((loaded.instances.len(), loaded.skipped), (2, 2));
    let error = csv::parse(&generate::list_reduce_schema(), b"1,2", "rows.csv", &options);
    assert_eq!(
        error_text(error),
        "rows.csv: the input schema does not fit this format: field `tokens` is a [int]: CSV rows have a fixed number of columns"
    );
}

// ---------------------------------------------------------------- SDF

#[test]
fn solubility_molecules_load_as_graphs() {
    let dir = common::bundled(&amp_data::catalog::MOLECULES);
    let schema = common::graph_schema();
    let options = SdfOptions::default();
    let prepared = Arc::new(PreparedSchema::new(schema.clone()).expect("schema"));
    for (file, count) in [("solubility.train.sdf", 1025), ("solubility.test.sdf", 257)] {
        let loaded = sdf::load(&schema, &dir.join(file), &options).expect(file);
        assert_eq!((loaded.instances.len(), loaded.skipped), (count, 0), "{file}");
        let mut classes = [0usize; 3];
        for value in &loaded.instances {
            let g = Instance::with_prepared(&prepared, value.clone()).expect("checked");
            let (nodes, edges) = (g.len_at(&[F("nodes")]).expect("nodes"), g.len_at(&[F("edges")]).expect("edges"));
            assert!(nodes > 0 && edges % 2 == 0);
            for e in (0..edges).step_by(2) {
                let get = |e: i64, f| g.int_at(&[F("edges"), I(e), F(f)]).expect("edge field");
                assert_eq!(
                    (get(e, "src"), get(e, "dst"), get(e, "kind")),
                    (get(e + 1, "dst"), get(e + 1, "src"), get(e + 1, "kind"))
                );
                assert!((0..nodes).contains(&get(e, "src")) && (0..3).contains(&get(e, "kind")));
            }
            assert!((0..nodes).all(|n| (0..8).contains(&g.int_at(&[F("nodes"), I(n)]).expect("kind"))));
            classes[g.int_at(&[F("label")]).expect("label") as usize] += 1;
        }
        assert!(classes.iter().all(|&n| n > 0), "{file}: {classes:?}");
    }
}

#[test]
fn sdf_atoms_bonds_and_labels() {
    let schema = common::graph_schema();
    let loaded = sdf::parse(&schema, common::PENTANE.as_bytes(), "m.sdf", &SdfOptions::default()).expect("valid");
    let g = &loaded.instances[0];
    assert_eq!(ints(field(g, 0)), [0, 1, 7]);
    let edge = |s, d, k| Value::Record(vec![Value::Int(s), Value::Int(d), Value::Int(k)]);
    assert_eq!(field(g, 1), &Value::Seq(vec![edge(0, 1, 1), edge(1, 0, 1), edge(1, 2, 0), edge(2, 1, 0)]));
    assert_eq!(field(g, 2), &Value::Int(1));
    let narrow = SdfOptions { node_kinds: 2, edge_kinds: 1, ..Default::default() };
    let loaded = sdf::parse(&schema, common::PENTANE.as_bytes(), "m.sdf", &narrow).expect("valid");
    assert_eq!(ints(field(&loaded.instances[0], 0)), [0, 1, 1]);
    assert_eq!(
        field(&loaded.instances[0], 1),
        &Value::Seq(vec![edge(0, 1, 0), edge(1, 0, 0), edge(1, 2, 0), edge(2, 1, 0)])
    );
}

#[test]
fn sdf_errors_name_the_line() {
    let schema = common::graph_schema();
    let two = format!("{}{}", common::PENTANE, common::PENTANE.replace("  2  3  1  0", "  2  4  1  0"));
    let error = sdf::parse(&schema, two.as_bytes(), "mols.sdf", &SdfOptions::default());
    assert_eq!(error_text(error), "mols.sdf:23: expected an atom number 1-3 (columns 4-6), found \"4\"");
    let loaded = sdf::parse(&schema, two.as_bytes(), "mols.sdf", &SdfOptions { skip_bad: true, ..Default::default() })
        .expect("skipping");
    assert_eq!((loaded.instances.len(), loaded.skipped), (1, 1));
    // With a limit, the molecules after it are not read.
    let loaded = sdf::parse(&schema, two.as_bytes(), "mols.sdf", &SdfOptions { limit: Some(1), ..Default::default() })
        .expect("the bad molecule is after the limit");
    assert_eq!(loaded.instances.len(), 1);

    let unlabelled = common::PENTANE.replace("SOL_classification", "SOL");
    let error = sdf::parse(&schema, unlabelled.as_bytes(), "mols.sdf", &SdfOptions::default());
    assert_eq!(error_text(error), "mols.sdf:1: field `<SOL_classification>`: missing");
    let by_value = SdfOptions { label_property: "sol".into(), ..Default::default() };
    let error = sdf::parse(&schema, unlabelled.replace("(B) medium", "-3.18").as_bytes(), "mols.sdf", &by_value);
    assert_eq!(
        error_text(error),
        "mols.sdf:12: field `<sol>`: expected a class: `(A) ...`, `(B) ...`, ... or an int, found \"-3.18\""
    );
    let truncated: String = common::PENTANE.lines().take(6).map(|l| format!("{l}\n")).collect();
    let error = sdf::parse(&schema, truncated.as_bytes(), "mols.sdf", &SdfOptions::default());
    assert_eq!(error_text(error), "mols.sdf:1: the molecule ends at line 6, before its atoms");
    let error =
        sdf::parse(&schema, common::PENTANE.as_bytes(), "m.sdf", &SdfOptions { node_kinds: 0, ..Default::default() });
    assert!(error_text(error).contains("invalid loader option"));
    let error = sdf::parse(&common::tree_schema(), common::PENTANE.as_bytes(), "m.sdf", &SdfOptions::default());
    assert!(error_text(error).starts_with("m.sdf: the input schema does not fit this format"));
}
