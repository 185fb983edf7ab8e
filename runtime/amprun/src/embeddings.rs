//! `--init-embedding NAME=FILE` (pretrained word vectors into an Embedding's rows through
//! the run's vocabulary) and `--freeze NAME` (parameter groups training leaves as they are).

use crate::failure::Failure;
use amp_data::vectors::{self, VectorsOptions};
use amp_data::Vocab;
use amp_ir::Graph;
use amp_params::ParamSet;
use std::path::{Path, PathBuf};

/// The parameter groups of `graph` (the prefixes the executor updates together): each
/// with whether it is an Embedding's.
fn groups(graph: &Graph) -> Vec<(String, bool)> {
    let mut out: Vec<(String, bool)> = Vec::new();
    for node in graph.nodes.node_weights() {
        let Some(prefix) = node.op.param() else { continue };
        if !out.iter().any(|(p, _)| p == prefix) {
            out.push((prefix.to_string(), node.op.is_lookup()));
        }
    }
    out.sort();
    out
}

fn names(groups: &[(String, bool)], which: impl Fn(bool) -> bool) -> String {
    let list: Vec<&str> = groups.iter().filter(|(_, e)| which(*e)).map(|(p, _)| p.as_str()).collect();
    if list.is_empty() {
        "none".to_string()
    } else {
        list.join(", ")
    }
}

/// The groups `--freeze` names, as the executor's prefixes: `NAME` itself, or every group
/// under it (`msg` for the array `msg.0`, `msg.1`, ...). A tensor name (`cell.weight`) or a
/// name that is no group is a usage error listing the groups.
pub fn frozen_groups(graph: &Graph, requested: &[String]) -> Result<Vec<String>, Failure> {
    let all = groups(graph);
    let mut out: Vec<String> = Vec::new();
    for name in requested {
        let under = format!("{name}.");
        let matching: Vec<&String> =
            all.iter().map(|(p, _)| p).filter(|p| *p == name || p.starts_with(&under)).collect();
        if matching.is_empty() {
            let hint = all
                .iter()
                .find(|(p, _)| name.strip_prefix(p.as_str()).is_some_and(|rest| rest.starts_with('.')))
                .map(|(p, _)| format!(" (`{name}` is a tensor of `{p}`, whose tensors update together: --freeze {p})"))
                .unwrap_or_default();
            return Err(Failure::usage(format!(
                "--freeze: `{name}` is not a parameter group of the model{hint}; its groups: {}",
                names(&all, |_| true)
            )));
        }
        for prefix in matching {
            if !out.contains(prefix) {
                out.push(prefix.clone());
            }
        }
    }
    Ok(out)
}

/// The vocabulary that gives each Embedding row its word: the PTB run's, else `--vocab
/// FILE` when given.
pub fn vocabulary(loaded: Option<&Vocab>, vocab_flag: Option<&Path>) -> Result<Option<Vocab>, Failure> {
    if let Some(vocab) = loaded {
        return Ok(Some(vocab.clone()));
    }
    match vocab_flag {
        Some(path) if path.exists() => Vocab::load(path).map(Some).map_err(|e| Failure::data(&e)),
        Some(path) => Err(Failure::usage(format!(
            "--init-embedding: the vocabulary `{}` does not exist (one word per line, `<unk>` first: row i's word on line i + 1)",
            path.display()
        ))),
        None => Ok(None),
    }
}

/// Writes the vectors of each `--init-embedding NAME=FILE` into the rows of `NAME.weight`
/// whose vocabulary words the file has, and reports how many it found; the other rows keep
/// their values.
pub fn init_embeddings(
    graph: &Graph,
    params: &mut ParamSet,
    requested: &[(String, PathBuf)],
    vocab: Option<&Vocab>,
    lowercase: bool,
) -> Result<(), Failure> {
    if requested.is_empty() {
        return Ok(());
    }
    let all = groups(graph);
    for (name, file) in requested {
        let name = name.strip_suffix(".weight").unwrap_or(name);
        match all.iter().find(|(p, _)| p == name) {
            Some((_, true)) => {}
            Some((_, false)) => {
                return Err(Failure::usage(format!(
                    "--init-embedding: `{name}` is a Linear layer, not an Embedding (embeddings: {})",
                    names(&all, |e| e)
                )))
            }
            None => {
                return Err(Failure::usage(format!(
                    "--init-embedding: the model has no Embedding `{name}` (embeddings: {})",
                    names(&all, |e| e)
                )))
            }
        }
        let Some(vocab) = vocab else {
            return Err(Failure::usage(format!(
                "--init-embedding {name}=...: the run has no vocabulary to align the vectors with \
                 (PTB data has one; for other data give --vocab FILE, one word per line for rows 0, 1, ...)"
            )));
        };
        let tensor = format!("{name}.weight");
        let index =
            params.index(&tensor).ok_or_else(|| Failure::bad_input(format!("the parameters have no `{tensor}`")))?;
        let (rows, dim) = match params.specs()[index].shape[..] {
            [rows, dim] => (rows, dim),
            _ => return Err(Failure::bad_input(format!("`{tensor}` is not a table of rows"))),
        };
        let aligned = vectors::load(file, vocab, &VectorsOptions { dim, lowercase }).map_err(|e| {
            let mut failure = Failure::data(&e);
            failure.message = format!("--init-embedding {name}: {}", failure.message);
            failure
        })?;
        let table = params.data_mut(index);
        let mut found = 0usize;
        for (row, vector) in aligned.rows {
            if row < rows {
                table[row * dim..(row + 1) * dim].copy_from_slice(&vector);
                found += 1;
            }
        }
        let words = vocab.len().min(rows);
        eprintln!(
            "amprun: --init-embedding {name}: {found} of {words} vocabulary words found among {} vectors in {} ({:.1}%); \
             the other rows keep their initialisation",
            aligned.lines,
            file.display(),
            100.0 * found as f64 / words.max(1) as f64
        );
    }
    Ok(())
}
