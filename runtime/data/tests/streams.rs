//! Issue 48: the loaders read their lines as a stream. A byte-order mark at the start of a
//! file is not data (finding 11); with a limit nothing after the N-th instance is read,
//! even when what follows never ends (findings 7, 8); a line past the line limit ends the
//! load after that many bytes (finding 7). (A JSON array past the collection limit,
//! refused while it is parsed, finding 6, is tested where the parser counts:
//! `strict_json`'s unit tests.)

mod common;

use amp_data::csv::{self, CsvOptions};
use amp_data::generate;
use amp_data::jsonl::{self, JsonlOptions};
use amp_data::lines::Lines;
use amp_data::ptb::{self, PtbOptions};
use amp_data::sdf::{self, SdfOptions};
use amp_data::{DataErrorKind, Vocab, VocabOptions};
use std::io::{BufReader, Read};

const BOM: &str = "\u{FEFF}";

#[test]
fn a_byte_order_mark_is_not_data_in_any_loader() {
    let schema = generate::list_reduce_schema();
    let text = format!("{BOM}{{\"tokens\": [10, 1, 2], \"label\": 1}}\n");
    let loaded = jsonl::parse(&schema, text.as_bytes(), "d.jsonl", &JsonlOptions::default()).expect("JSON Lines");
    assert_eq!(loaded.instances.len(), 1);

    let digits = common::digit_schema();
    let row = (0..64).map(|i| (i % 17).to_string()).collect::<Vec<_>>().join(",");
    for text in [format!("{BOM}{row},3\n"), format!("{BOM}{},label\n{row},3\n", vec!["p"; 64].join(","))] {
        let loaded = csv::parse(&digits, text.as_bytes(), "d.csv", &CsvOptions::default()).expect("CSV");
        assert_eq!(loaded.instances.len(), 1, "{text}");
    }

    let tree = common::tree_schema();
    let vocab = Vocab::from_words(["a", "b"], &VocabOptions::default());
    let text = format!("{BOM}(1 (2 a) (0 b))\n");
    let loaded = ptb::parse(&tree, text.as_bytes(), "t.txt", &vocab, &PtbOptions::default()).expect("PTB");
    assert_eq!(loaded.instances.len(), 1);
    let built = ptb::build_vocab(text.as_bytes(), "t.txt", &PtbOptions::default(), &VocabOptions::default());
    assert!(built.expect("a vocabulary").get("a").is_some_and(|i| i > 0));

    let words = format!("{BOM}<unk>\na\n");
    assert_eq!(Vocab::parse(words.as_bytes(), "v.txt").expect("a vocabulary file").len(), 2);
}

/// An endless input after `head`: what a loader reads of it is what `read` says.
struct Endless {
    head: std::io::Cursor<Vec<u8>>,
    tail: std::io::Take<std::io::Repeat>,
}

impl Endless {
    fn new(head: &str, byte: u8) -> Endless {
        Endless { head: std::io::Cursor::new(head.as_bytes().to_vec()), tail: std::io::repeat(byte).take(u64::MAX) }
    }

    /// Bytes of the endless part read so far.
    fn tail_read(&self) -> u64 {
        u64::MAX - self.tail.limit()
    }
}

impl Read for &mut Endless {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self.head.read(buf)? {
            0 => self.tail.read(buf),
            n => Ok(n),
        }
    }
}

/// At most a buffer of the reader past what the loader asked for.
const READ_AHEAD: u64 = 8192;

#[test]
fn a_limit_reads_nothing_after_its_instances_even_when_the_input_never_ends() {
    let schema = generate::list_reduce_schema();
    let good = "{\"tokens\": [10, 1, 2], \"label\": 1}\n".repeat(5);
    let mut input = Endless::new(&good, 0);
    let options = JsonlOptions { limit: Some(5), ..Default::default() };
    let loaded = jsonl::read(&schema, Lines::new(BufReader::new(&mut input)), "zero", &options, &[]).expect("5");
    assert_eq!(loaded.instances.len(), 5);
    assert!(input.tail_read() <= READ_AHEAD, "read {} bytes of the endless part", input.tail_read());

    let digits = common::digit_schema();
    let row = format!("{},3\n", vec!["1"; 64].join(","));
    let mut input = Endless::new(&row.repeat(5), b'7');
    let options = CsvOptions { limit: Some(5), ..Default::default() };
    let loaded = csv::read(&digits, Lines::new(BufReader::new(&mut input)), "zero", &options).expect("5 rows");
    assert_eq!(loaded.instances.len(), 5);
    assert!(input.tail_read() <= READ_AHEAD, "read {} bytes", input.tail_read());

    let tree = common::tree_schema();
    let vocab = Vocab::from_words(["a", "b"], &VocabOptions::default());
    let mut input = Endless::new(&"(1 (2 a) (0 b))\n".repeat(5), b'(');
    let options = PtbOptions { limit: Some(5), ..Default::default() };
    let loaded = ptb::read(&tree, Lines::new(BufReader::new(&mut input)), "zero", &vocab, &options).expect("5 trees");
    assert_eq!(loaded.instances.len(), 5);
    assert!(input.tail_read() <= READ_AHEAD, "read {} bytes", input.tail_read());

    let graph = common::graph_schema();
    let mut input = Endless::new(&common::PENTANE.repeat(2), b'C');
    let options = SdfOptions { limit: Some(2), ..Default::default() };
    let loaded = sdf::read(&graph, Lines::new(BufReader::new(&mut input)), "zero", &options).expect("2 molecules");
    assert_eq!(loaded.instances.len(), 2);
    assert!(input.tail_read() <= READ_AHEAD, "read {} bytes", input.tail_read());
}

#[test]
fn an_endless_line_ends_the_load_after_the_line_limit_whatever_skip_bad() {
    let schema = generate::list_reduce_schema();
    let good = "{\"tokens\": [10, 1, 2], \"label\": 1}\n";
    for skip_bad in [false, true] {
        let mut input = Endless::new(good, 0);
        let lines = Lines::with_max_line(BufReader::new(&mut input), 1 << 16);
        let options = JsonlOptions { skip_bad, ..Default::default() };
        let error = jsonl::read(&schema, lines, "/dev/zero", &options, &[]).expect_err("an endless line");
        assert!(matches!(error.kind(), DataErrorKind::TooLarge(_)), "{error}");
        assert_eq!(error.to_string(), "/dev/zero:2: the line is longer than 65536 bytes (the limit of a data line)");
        assert!(input.tail_read() <= (1 << 16) + READ_AHEAD, "read {} bytes", input.tail_read());
    }
    assert_eq!(amp_data::lines::MAX_LINE_BYTES, 1 << 28);
}
