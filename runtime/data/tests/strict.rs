//! What the loaders stop at and refuse: with a limit nothing after the N-th instance is
//! read (a bad line there does not matter), a JSON object that repeats a key is bad data,
//! a non-finite CSV scale is a bad option, and an overflowing value names its own line.

mod common;

use amp_data::csv::{self, CsvOptions};
use amp_data::generate;
use amp_data::jsonl::{self, JsonlOptions};
use amp_data::ptb::{self, PtbOptions};
use amp_data::{DataErrorKind, Loaded, Vocab, VocabOptions};

const GOOD: &str = "{\"tokens\": [10, 1, 2], \"label\": 1}\n";
const BAD: &str = "{\"tokens\": [10, \"x\"], \"label\": 1}\n";

fn jsonl_with_bad_line(lines: usize, bad: usize) -> String {
    (1..=lines).map(|n| if n == bad { BAD } else { GOOD }).collect()
}

fn parse_jsonl(
    text: &str,
    limit: Option<usize>,
    skip_bad: bool,
    threads: usize,
) -> Result<Loaded, amp_data::DataError> {
    let options = JsonlOptions { skip_bad, threads, limit };
    jsonl::parse(&generate::list_reduce_schema(), text.as_bytes(), "d.jsonl", &options)
}

#[test]
fn jsonl_limit_reads_nothing_after_the_limit() {
    let text = jsonl_with_bad_line(8, 5);
    let loaded = parse_jsonl(&text, Some(4), false, 0).expect("the bad line is after the limit");
    assert_eq!(loaded.instances.len(), 4);
    let error = parse_jsonl(&text, Some(5), false, 0).expect_err("the bad line is within the limit");
    assert!(error.to_string().starts_with("d.jsonl:5: "), "{error}");
    // Skipped lines do not count: the limit is of instances kept.
    let loaded = parse_jsonl(&text, Some(5), true, 0).expect("skipping");
    assert_eq!((loaded.instances.len(), loaded.skipped), (5, 1));
    assert_eq!(parse_jsonl(&text, Some(0), false, 0).expect("none wanted").instances.len(), 0);
    // Blank lines and a limit past the end.
    let blanks = format!("\n{GOOD}\n\n{GOOD}");
    assert_eq!(parse_jsonl(&blanks, Some(10), false, 0).expect("short file").instances.len(), 2);
}

#[test]
fn jsonl_limit_holds_on_several_threads() {
    // Big enough for several threads in one round; bad lines after the limit in later shares.
    let text = jsonl_with_bad_line(9_000, 8_500);
    for threads in [1, 2, 4] {
        let loaded = parse_jsonl(&text, Some(8_000), false, threads).expect("the bad line is after the limit");
        assert_eq!(loaded.instances.len(), 8_000, "{threads} threads");
        let error = parse_jsonl(&text, Some(8_500), false, threads).expect_err("the bad line is the 8,500th");
        assert!(error.to_string().starts_with("d.jsonl:8500: "), "{error}");
        let loaded = parse_jsonl(&text, Some(8_999), true, threads).expect("skipping");
        assert_eq!((loaded.instances.len(), loaded.skipped), (8_999, 1));
        assert_eq!(parse_jsonl(&text, None, true, threads), parse_jsonl(&text, Some(20_000), true, threads));
    }
}

#[test]
fn csv_and_ptb_limits_read_nothing_after_the_limit() {
    let schema = common::digit_schema();
    let row = |x: &str| format!("{},{}\n", vec![x; 64].join(","), 3);
    let text = format!("{}{}{}", row("1"), row("2"), row("oops"));
    let limited = CsvOptions { limit: Some(2), ..Default::default() };
    assert_eq!(csv::parse(&schema, text.as_bytes(), "d.csv", &limited).expect("limited").instances.len(), 2);
    assert!(csv::parse(&schema, text.as_bytes(), "d.csv", &CsvOptions::default()).is_err());

    let schema = common::tree_schema();
    let vocab = Vocab::from_words(["a", "b"], &VocabOptions::default());
    let text = "(1 (2 a) (3 b))\n(1 (2 a) (3 b))\n(1 (2 a)\n";
    let limited = PtbOptions { limit: Some(2), ..Default::default() };
    let loaded = ptb::parse(&schema, text.as_bytes(), "t.txt", &vocab, &limited).expect("limited");
    assert_eq!(loaded.instances.len(), 2);
    assert!(ptb::build_vocab(text.as_bytes(), "t.txt", &limited, &VocabOptions::default()).is_ok());
    assert!(ptb::build_vocab(text.as_bytes(), "t.txt", &PtbOptions::default(), &VocabOptions::default()).is_err());
}

#[test]
fn a_repeated_json_key_is_bad_data_naming_line_and_key() {
    let text = format!("{GOOD}{{\"tokens\": [1], \"label\": 2, \"label\": 3}}\n");
    let error = parse_jsonl(&text, None, false, 0).expect_err("a repeated key");
    let message = error.to_string();
    assert!(message.starts_with("d.jsonl:2: ") && message.contains("duplicate key `label`"), "{message}");
    let nested = "{\"tree\": {\"Leaf\": {\"word\": 1, \"word\": 2, \"label\": 0}}, \"label\": 1}\n";
    let vocab_schema = common::tree_schema();
    let error = jsonl::parse(&vocab_schema, nested.as_bytes(), "t.jsonl", &JsonlOptions::default())
        .expect_err("a repeated key inside");
    assert!(error.to_string().contains("duplicate key `word`"), "{error}");
    let loaded = parse_jsonl(&text, None, true, 0).expect("skipped as bad data");
    assert_eq!((loaded.instances.len(), loaded.skipped), (1, 1));
}

#[test]
fn a_non_finite_csv_scale_is_a_bad_option_not_bad_data() {
    let schema = common::digit_schema();
    let text = format!("{},3\n", vec!["1"; 64].join(","));
    for scale in [f32::NAN, f32::INFINITY] {
        let options = CsvOptions { scale, ..Default::default() };
        let error = csv::parse(&schema, text.as_bytes(), "d.csv", &options).expect_err("bad scale");
        assert!(matches!(error.kind(), DataErrorKind::Options(_)), "{error}");
        assert_eq!(error.line(), None, "no line is to blame: {error}");
    }
}

#[test]
fn an_overflowing_csv_value_names_its_own_line() {
    let schema = common::digit_schema();
    let row = |x: &str| format!("{},3\n", vec![x; 64].join(","));
    let header = (0..64).map(|i| format!("p{i},")).collect::<String>() + "label\n";
    // Line 4 overflows f32 in both files: with a header (then line 4 is the third row) and
    // without one.
    for text in
        [header + &row("1") + &row("2") + &row("1e39") + &row("1"), row("1").repeat(3) + &row("-4e38") + &row("1")]
    {
        let error = csv::parse(&schema, text.as_bytes(), "d.csv", &CsvOptions::default()).expect_err("overflow");
        assert!(error.to_string().starts_with("d.csv:4: field `pixels[0]`: expected a finite number"), "{error}");
        let skip = CsvOptions { skip_bad: true, ..Default::default() };
        let loaded = csv::parse(&schema, text.as_bytes(), "d.csv", &skip).expect("skipped");
        let first = loaded.first_skipped.map(|e| e.to_string()).unwrap_or_default();
        assert!(first.starts_with("d.csv:4: "), "{first}");
    }
}
