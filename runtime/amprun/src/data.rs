//! Data files to instances: the format from the extension or `--format`, the loader of
//! `amp-data` with the graph's input schema, `--skip-bad-data`, `--limit`, the PTB
//! vocabulary, `--frame-noise` (static instances shown for a network's frames), and finding the file line of an instance again when a run fails on it.

use crate::cli::{DataArgs, Format};
use crate::failure::Failure;
use crate::frames::FrameNoise;
use crate::model::hyper;
use amp_data::csv::CsvOptions;
use amp_data::jsonl::JsonlOptions;
use amp_data::lines::{Line, Lines};
use amp_data::ptb::PtbOptions;
use amp_data::ranges::{first_out_of_range, Range};
use amp_data::sdf::SdfOptions;
use amp_data::unlabeled::Unlabeled;
use amp_data::{DataError, Instance, Loaded, PreparedSchema, Vocab, VocabOptions};
use amp_exec::ExecInstance;
use amp_ir::{Graph, InstanceData, ResolvedStep, Schema};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The instances of one data file (or of JSON Lines text in memory, `path` its name).
pub struct DataSet {
    pub path: PathBuf,
    /// The text the instances were read from, when it was given in memory.
    text: Option<Arc<[u8]>>,
    pub format: Format,
    pub instances: Vec<Instance>,
    /// Bad instances skipped (`--skip-bad-data`).
    pub skipped: usize,
}

impl DataSet {
    pub fn len(&self) -> usize {
        self.instances.len()
    }

    /// The instances in `order` (indices into the set), borrowed.
    pub fn view(&self, order: &[usize]) -> Vec<InstanceRef<'_>> {
        order.iter().filter_map(|&i| self.instances.get(i).map(|x| InstanceRef(x, i as u64))).collect()
    }

    pub fn all(&self) -> Vec<InstanceRef<'_>> {
        self.instances.iter().enumerate().map(|(i, x)| InstanceRef(x, i as u64)).collect()
    }
}

/// An instance lent to the executor, so that a shuffled epoch costs a vector of
/// references rather than a copy of the data, with its index in the data set (what
/// dropout's masks hash, whatever the epoch's order).
#[derive(Clone, Copy)]
pub struct InstanceRef<'a>(pub &'a Instance, pub u64);

impl InstanceData for InstanceRef<'_> {
    fn int_at(&self, path: &[ResolvedStep]) -> Option<i64> {
        self.0.int_at(path)
    }

    fn len_at(&self, path: &[ResolvedStep]) -> Option<i64> {
        self.0.len_at(path)
    }
}

impl ExecInstance for InstanceRef<'_> {
    fn f32_at(&self, path: &[ResolvedStep]) -> Option<&[f32]> {
        self.0.f32_at(path)
    }

    fn data_index(&self) -> Option<u64> {
        Some(self.1)
    }

    fn work(&self) -> usize {
        self.0.work()
    }

    fn ints_along(&self, prefix: &[ResolvedStep], rows: usize, suffix: &[ResolvedStep]) -> Option<Vec<i64>> {
        self.0.ints_along(prefix, rows, suffix)
    }
}

/// Reads data files for one graph.
pub struct Loader {
    schema: Schema,
    prepared: Arc<PreparedSchema>,
    args: DataArgs,
    vocab: Option<Vocab>,
    node_kinds: usize,
    edge_kinds: usize,
    /// The ranges the model puts on ints of the data (`amp_data::ranges`).
    ranges: Vec<Range>,
    /// `--frame-noise`: files hold static instances (read with `schema`, the static
    /// schema), each turned into the network's frames.
    noise: Option<FrameNoise>,
    /// Inference: the labels may be absent and are ignored (`amp_data::unlabeled`).
    unlabeled: Option<Unlabeled>,
}

impl Loader {
    /// A loader for the graph's input schema. `files` are the data files the command will
    /// read; when one is PTB, the vocabulary is read from `--vocab` or built from
    /// `training` (and written to `--vocab` when given).
    pub fn new(graph: &Graph, args: &DataArgs, files: &[&Path], training: Option<&Path>) -> Result<Loader, Failure> {
        if !args.scale.is_finite() {
            // A flag's value, not the data's fault: every f32 cell times it would be bad.
            return Err(Failure::usage(format!("--scale {} is not a finite number", args.scale)));
        }
        let schema = graph.input.clone().ok_or_else(|| {
            Failure::bad_input(format!("the graph of `{}` has no input schema, so it reads no data", graph.name))
        })?;
        let prepared = Arc::new(PreparedSchema::new(schema.clone()).map_err(|e| Failure::data(&e))?);
        let mut needs_vocab = false;
        for file in files {
            needs_vocab |= format_of(file, args.format)? == Format::Ptb;
        }
        let vocab = if needs_vocab { Some(vocabulary(graph, args, training)?) } else { None };
        let node_kinds = args.node_kinds.or_else(|| hyper(graph, "kinds")).unwrap_or(8);
        let edge_kinds = args.edge_kinds.or_else(|| hyper(graph, "edge_kinds")).unwrap_or(3);
        let ranges = amp_data::ranges::model_ranges(graph);
        let noise = args.frame_noise.map(|sigma| FrameNoise::new(graph, sigma)).transpose()?;
        let schema = noise.as_ref().map_or(schema, |n| n.static_schema.clone());
        Ok(Loader {
            schema,
            prepared,
            args: args.clone(),
            vocab,
            node_kinds,
            edge_kinds,
            ranges,
            noise,
            unlabeled: None,
        })
    }

    /// A loader for `amprun infer`: the fields only the loss reads (the labels) may be
    /// absent, and are ignored when present (read as their type's zero). Data shown over a
    /// network's frames (`--frame-noise`) keeps its schema.
    pub fn unlabeled(mut self, graph: &Graph) -> Loader {
        if self.noise.is_none() {
            self.unlabeled = Unlabeled::of_graph(graph).filter(Unlabeled::has_labels);
        }
        self
    }

    /// The PTB vocabulary of the run, when its data is PTB.
    pub fn vocab(&self) -> Option<&Vocab> {
        self.vocab.as_ref()
    }

    /// The seed of `--frame-noise` (the run's `--seed`); nothing without it.
    pub fn with_noise_seed(mut self, seed: u64) -> Loader {
        self.noise = self.noise.map(|n| n.with_seed(seed));
        self
    }

    /// Reads `text` (JSON Lines in memory) when given, else the file `path`: the first bad
    /// instance is an error naming file (or `text`'s name), line and field, unless
    /// `--skip-bad-data` (then the count is reported on stderr).
    pub fn load_from(&self, path: &Path, text: Option<&crate::memory::Text>) -> Result<DataSet, Failure> {
        let (path, format, text) = match text {
            Some(text) => (Path::new(&text.name), Format::Jsonl, Some(Arc::from(&text.jsonl[..]))),
            None => (path, format_of(path, self.args.format)?, None),
        };
        let loaded = match &text {
            Some(text) => {
                self.parse(format, text, &path.display().to_string(), self.args.skip_bad_data, self.args.limit)
            }
            None => self.parse_file(format, path),
        };
        let loaded = loaded.map_err(|e| Failure::data(&e))?;
        let Loaded { instances, skipped, first_skipped } = loaded;
        if skipped > 0 {
            let first = first_skipped.map(|e| format!("; the first: {e}")).unwrap_or_default();
            eprintln!("amprun: skipped {skipped} bad instance(s) in {}{first}", path.display());
        }
        let instances = instances
            .into_iter()
            .enumerate()
            .map(|(i, value)| match &self.noise {
                Some(noise) => noise.expand(i, value),
                None => value,
            })
            .map(|value| Instance::with_prepared(&self.prepared, value))
            .collect::<Result<Vec<_>, DataError>>()
            .map_err(|e| Failure::data(&e.in_file(&path.display().to_string())))?;
        let mut set = DataSet { path: path.to_path_buf(), text, format, instances, skipped };
        self.check_ranges(&mut set)?;
        Ok(set)
    }

    /// Ints outside the model's ranges are bad data, found before any work: the first is
    /// an error naming file:line:field, or with `--skip-bad-data` every such instance is
    /// left out and counted.
    fn check_ranges(&self, set: &mut DataSet) -> Result<(), Failure> {
        let mut bad: Vec<usize> = Vec::new();
        let mut first: Option<DataError> = None;
        for (i, instance) in set.instances.iter().enumerate() {
            let Some((field, value, range)) = first_out_of_range(instance, &self.ranges) else { continue };
            bad.push(i);
            if first.is_some() {
                continue; // only the first is reported (finding a line reads the file again)
            }
            let mut error = DataError::invalid(format!(
                "{value} is out of range for {}: expected 0 to {}",
                range.what,
                range.limit - 1
            ))
            .in_file(&set.path.display().to_string())
            .in_field(field);
            if let Some(line) = self.line_of(set, i) {
                error = error.at_line(line);
            }
            if !self.args.skip_bad_data {
                return Err(Failure::data(&error));
            }
            first = Some(error);
        }
        if let Some(first) = first {
            eprintln!(
                "amprun: skipped {} instance(s) with values out of the model's ranges in {}; the first: {first}",
                bad.len(),
                set.path.display()
            );
            let mut index = 0;
            set.instances.retain(|_| {
                index += 1;
                bad.binary_search(&(index - 1)).is_err()
            });
            set.skipped += bad.len();
        }
        Ok(())
    }

    /// Reads a data file line by line: with `--limit`, nothing after its instances is
    /// read (an endless input too); a line over the line limit ends the load.
    fn parse_file(&self, format: Format, path: &Path) -> Result<Loaded, DataError> {
        let lines = amp_data::lines::open(path)?;
        self.read(format, Box::new(lines), &path.display().to_string(), self.args.skip_bad_data, self.args.limit)
    }

    /// Parses `text` as [`Loader::read`] does.
    fn parse(
        &self,
        format: Format,
        text: &[u8],
        file: &str,
        skip_bad: bool,
        limit: Option<usize>,
    ) -> Result<Loaded, DataError> {
        self.read(format, Box::new(Lines::of_bytes(text)), file, skip_bad, limit)
    }

    /// Reads `lines`; with `limit`, the loaders stop after that many instances and never
    /// look at the rest (`--limit`: a bad line after them does not matter).
    fn read(
        &self,
        format: Format,
        lines: Box<dyn Iterator<Item = Line> + '_>,
        file: &str,
        skip_bad: bool,
        limit: Option<usize>,
    ) -> Result<Loaded, DataError> {
        let Some(unlabeled) = &self.unlabeled else {
            return self.parse_with(&self.schema, format, lines, file, skip_bad, limit);
        };
        // CSV rows are positional: a file whose rows have the label columns is read with
        // them, and the labels are then cleared; other formats name their fields (or, for
        // PTB trees, the labels are syntax the reduced schema just does not store).
        let (with_labels, lines) = if format == Format::Csv {
            let (head, lines) = csv_head(lines);
            let with_labels = csv_row_width(&head) == Some(columns(&self.schema)?);
            let lines: Box<dyn Iterator<Item = Line> + '_> = Box::new(head.into_iter().chain(lines));
            (with_labels, lines)
        } else {
            (false, lines)
        };
        let schema = if with_labels { &self.schema } else { unlabeled.reduced() };
        let mut loaded = self.parse_with(schema, format, lines, file, skip_bad, limit)?;
        let complete = |value| if with_labels { unlabeled.clear(value) } else { unlabeled.fill(value) };
        loaded.instances =
            loaded.instances.into_iter().map(complete).collect::<Result<_, _>>().map_err(|e| e.in_file(file))?;
        Ok(loaded)
    }

    fn parse_with(
        &self,
        schema: &Schema,
        format: Format,
        lines: Box<dyn Iterator<Item = Line> + '_>,
        file: &str,
        skip_bad: bool,
        limit: Option<usize>,
    ) -> Result<Loaded, DataError> {
        let ignored = self.unlabeled.as_ref().map(Unlabeled::field_names).unwrap_or_default();
        match format {
            Format::Jsonl => {
                let options = JsonlOptions { skip_bad, threads: 0, limit };
                amp_data::jsonl::read(schema, lines, file, &options, &ignored)
            }
            Format::Csv => {
                let options = CsvOptions { skip_bad, scale: self.args.scale, limit, ..CsvOptions::default() };
                amp_data::csv::read(schema, lines, file, &options)
            }
            Format::Ptb => {
                let options = PtbOptions { skip_bad, lowercase: self.args.lowercase, limit };
                let empty = Vocab::from_words([], &VocabOptions::default());
                amp_data::ptb::read(schema, lines, file, self.vocab.as_ref().unwrap_or(&empty), &options)
            }
            Format::Sdf => {
                let options = SdfOptions {
                    skip_bad,
                    node_kinds: self.node_kinds,
                    edge_kinds: self.edge_kinds,
                    label_property: self.args.label_property.clone(),
                    limit,
                };
                amp_data::sdf::read(schema, lines, file, &options)
            }
        }
    }

    /// The 1-based line where instance `index` of `set` starts, found by reading the file
    /// again record by record, as far as that instance (only done when a run fails on it).
    pub fn line_of(&self, set: &DataSet, index: usize) -> Option<usize> {
        let lines = match &set.text {
            Some(text) => Box::new(Lines::of_bytes(text)) as Box<dyn Iterator<Item = Line>>,
            None => Box::new(amp_data::lines::open(&set.path).ok()?),
        };
        let mut seen = 0;
        for (line, record) in Records::new(set.format, lines) {
            let count = self.parse(set.format, record.as_bytes(), "", false, None).map_or(0, |l| l.instances.len());
            if index < seen + count {
                return Some(line);
            }
            seen += count;
        }
        None
    }

    /// `instance 17 (train.jsonl:18)`: an instance for messages.
    pub fn describe(&self, set: &DataSet, index: usize) -> String {
        match self.line_of(set, index) {
            Some(line) => format!("instance {index} ({}:{line})", set.path.display()),
            None => format!("instance {index} of {}", set.path.display()),
        }
    }
}

/// The format of a data file: `--format`, else its extension.
pub fn format_of(path: &Path, explicit: Option<Format>) -> Result<Format, Failure> {
    if let Some(format) = explicit {
        return Ok(format);
    }
    let extension = path.extension().map(|e| e.to_string_lossy().to_ascii_lowercase());
    match extension.as_deref() {
        Some("jsonl" | "json" | "ndjson") => Ok(Format::Jsonl),
        Some("txt" | "ptb") => Ok(Format::Ptb),
        Some("csv") => Ok(Format::Csv),
        Some("sdf") => Ok(Format::Sdf),
        _ => Err(Failure::usage(format!(
            "cannot tell the format of `{}` from its extension; use --format jsonl|ptb|csv|sdf",
            path.display()
        ))),
    }
}

/// The columns of a CSV schema's rows.
fn columns(schema: &Schema) -> Result<usize, DataError> {
    amp_data::csv::columns(schema)
}

/// The first lines of a CSV file, up to its second non-blank one (a header and a row, or
/// two rows), and the lines after them.
fn csv_head<'a>(mut lines: Box<dyn Iterator<Item = Line> + 'a>) -> (Vec<Line>, Box<dyn Iterator<Item = Line> + 'a>) {
    let mut head = Vec::new();
    let mut rows = 0;
    while rows < 2 {
        let Some(line) = lines.next() else { break };
        match &line.1 {
            Ok(text) if text.trim().is_empty() => {}
            Ok(_) => rows += 1,
            Err(_) => rows = 2,
        }
        head.push(line);
    }
    (head, lines)
}

/// The cells of the first data row of a CSV file's first lines (after a header of names),
/// if any.
fn csv_row_width(head: &[Line]) -> Option<usize> {
    let rows = head.iter().filter_map(|(_, line)| line.as_ref().ok()).map(|l| l.trim());
    let rows = rows.filter(|l| !l.is_empty());
    for (i, row) in rows.take(2).enumerate() {
        let cells: Vec<&str> = row.split(',').map(str::trim).collect();
        let header = i == 0 && !cells.iter().any(|c| c.parse::<f64>().is_ok());
        if !header {
            return Some(cells.len());
        }
    }
    None
}

/// The PTB vocabulary: `--vocab` when the file exists, else built from the training file
/// (cut to `--vocab-size`, default the model's `vocab`) and written to `--vocab`.
fn vocabulary(graph: &Graph, args: &DataArgs, training: Option<&Path>) -> Result<Vocab, Failure> {
    let model_size = hyper(graph, "vocab");
    if let Some(path) = args.vocab.as_deref().filter(|p| p.exists()) {
        let vocab = Vocab::load(path).map_err(|e| Failure::data(&e))?;
        if let Some(size) = model_size.filter(|&s| vocab.len() > s) {
            eprintln!(
                "amprun: warning: the vocabulary `{}` has {} words but the model embeds {size}",
                path.display(),
                vocab.len()
            );
        }
        return Ok(vocab);
    }
    let Some(training) = training.filter(|t| format_of(t, args.format).ok() == Some(Format::Ptb)) else {
        return Err(Failure::usage(match &args.vocab {
            Some(path) => {
                format!("the vocabulary `{}` does not exist (`amprun train --vocab` writes it)", path.display())
            }
            None => "PTB data needs the training run's vocabulary: --vocab FILE (written by `amprun train --vocab`)"
                .to_string(),
        }));
    };
    // With --limit the vocabulary comes from the trees trained on, and a bad line after
    // them is not read here either.
    let options = PtbOptions { skip_bad: args.skip_bad_data, lowercase: args.lowercase, limit: args.limit };
    let vocab_options = VocabOptions { max_size: args.vocab_size.or(model_size), ..VocabOptions::default() };
    let vocab = amp_data::ptb::build_vocab_file(training, &options, &vocab_options).map_err(|e| Failure::data(&e))?;
    match &args.vocab {
        Some(path) => {
            vocab.save(path).map_err(|e| Failure::data(&e))?;
            eprintln!("amprun: wrote a vocabulary of {} words to {}", vocab.len(), path.display());
        }
        None => eprintln!(
            "amprun: built a vocabulary of {} words from {} (keep it with --vocab FILE for eval and infer)",
            vocab.len(),
            training.display()
        ),
    }
    Ok(vocab)
}

/// The records of a file with the line each starts on, read as they are taken: lines for
/// the line formats, molecules (up to and including `$$$$`) for SDF. A line that cannot
/// be read ends them.
struct Records<I> {
    format: Format,
    lines: I,
}

impl<I: Iterator<Item = Line>> Records<I> {
    fn new(format: Format, lines: I) -> Records<I> {
        Records { format, lines }
    }
}

impl<I: Iterator<Item = Line>> Iterator for Records<I> {
    type Item = (usize, String);

    fn next(&mut self) -> Option<(usize, String)> {
        let mut molecule: Option<(usize, String)> = None;
        loop {
            let Some((number, Ok(line))) = self.lines.next() else { return molecule };
            match self.format {
                Format::Sdf => {
                    let (_, text) = molecule.get_or_insert_with(|| (number, String::new()));
                    text.push_str(&line);
                    text.push('\n');
                    if line.trim_ascii() == "$$$$" {
                        return molecule;
                    }
                }
                _ if line.trim_ascii().is_empty() => {}
                _ => return Some((number, line)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_lines_or_molecules() {
        let records = |format, text: &'static [u8]| Records::new(format, Lines::of_bytes(text)).collect::<Vec<_>>();
        let lines = records(Format::Jsonl, b"{}\n\n{\"a\":1}\r\n");
        assert_eq!(lines, vec![(1, "{}".to_string()), (3, "{\"a\":1}".to_string())]);
        let sdf = records(Format::Sdf, b"m1\nx\n$$$$\nm2\n$$$$\n");
        assert_eq!(sdf.iter().map(|r| r.0).collect::<Vec<_>>(), vec![1, 4]);
        assert_eq!(sdf[1].1, "m2\n$$$$\n");
        // A last molecule without `$$$$`.
        assert_eq!(records(Format::Sdf, b"m1\n$$$$\nm2\n")[1], (3, "m2\n".to_string()));
    }

    #[test]
    fn formats_come_from_extensions() {
        assert_eq!(format_of(Path::new("a/b.JSONL"), None).ok(), Some(Format::Jsonl));
        assert_eq!(format_of(Path::new("train.txt"), None).ok(), Some(Format::Ptb));
        assert_eq!(format_of(Path::new("x.bin"), Some(Format::Csv)).ok(), Some(Format::Csv));
        assert!(format_of(Path::new("x.bin"), None).is_err());
    }
}
