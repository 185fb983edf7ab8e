//! Where `amprun data get` takes a set's files from: an HTTP(S) address (the canonical
//! release or a mirror), a local zip archive, or a local folder holding the files. Every
//! read of this untrusted input is bounded: the download by [`MAX_ARCHIVE`] bytes and the
//! `--timeout` budget, each file taken out of an archive by [`MAX_FILE`] bytes, whatever
//! the archive's headers claim. Only the wanted files are read; an archive's other entries
//! (paths with `..`, absolute paths, anything large) are never extracted nor written.

use crate::failure::Failure;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::{IsTerminal, Read};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The most bytes a download or a local archive may have (SST's PTB zip is 0.8 MB).
pub const MAX_ARCHIVE: u64 = 64 << 20;
/// The most bytes one wanted file may have, in an archive or a folder (SST's largest,
/// train.txt, is 2.1 MB).
pub const MAX_FILE: u64 = 16 << 20;

/// Where the files come from (`--from`, or the set's canonical address).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// An `http://` or `https://` address of a zip archive.
    Url(String),
    /// A zip archive on this machine.
    Zip(PathBuf),
    /// A folder holding the files (directly, or in a `trees/` folder as in the release).
    Folder(PathBuf),
}

impl Source {
    /// An address when `text` starts with `http://` or `https://`, else a local path: a
    /// folder when it is one, else an archive.
    pub fn parse(text: &str) -> Source {
        let lower = text.to_ascii_lowercase();
        if lower.starts_with("http://") || lower.starts_with("https://") {
            Source::Url(text.to_string())
        } else if Path::new(text).is_dir() {
            Source::Folder(PathBuf::from(text))
        } else {
            Source::Zip(PathBuf::from(text))
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Url(url) => f.write_str(url),
            Source::Zip(path) | Source::Folder(path) => write!(f, "{}", path.display()),
        }
    }
}

/// The bytes of each of `files` (names such as `train.txt`) from `source`, in order.
/// `timeout` bounds a download as a whole.
pub fn fetch(source: &Source, files: &[&str], timeout: Duration) -> Result<Vec<Vec<u8>>, Failure> {
    match source {
        Source::Url(url) => {
            let archive = download(url, timeout)?;
            extract(&archive, files, url)
        }
        Source::Zip(path) => {
            let archive = read_bounded(path, MAX_ARCHIVE)?;
            extract(&archive, files, &path.display().to_string())
        }
        Source::Folder(dir) => files.iter().map(|file| read_bounded(&folder_file(dir, file), MAX_FILE)).collect(),
    }
}

/// `DIR/FILE`, or `DIR/trees/FILE` when only that exists (the release's layout unzipped).
fn folder_file(dir: &Path, file: &str) -> PathBuf {
    let direct = dir.join(file);
    let nested = dir.join("trees").join(file);
    if !direct.exists() && nested.exists() {
        nested
    } else {
        direct
    }
}

/// A local file, refused past `limit` bytes without reading more than `limit + 1`.
fn read_bounded(path: &Path, limit: u64) -> Result<Vec<u8>, Failure> {
    let file = std::fs::File::open(path).map_err(|e| Failure::io("read", path, &e))?;
    let mut bytes = Vec::new();
    file.take(limit + 1).read_to_end(&mut bytes).map_err(|e| Failure::io("read", path, &e))?;
    if bytes.len() as u64 > limit {
        return Err(Failure::bad_input(format!("`{}` is larger than {} MiB", path.display(), limit >> 20)));
    }
    Ok(bytes)
}

/// The body of a GET of `url`: at most [`MAX_ARCHIVE`] bytes, within `timeout` in all
/// (connecting and the headers within `timeout` too), with progress on a terminal and a
/// line when done.
fn download(url: &str, timeout: Duration) -> Result<Vec<u8>, Failure> {
    let started = Instant::now();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .timeout_connect(Some(timeout))
        .timeout_recv_response(Some(timeout))
        .http_status_as_error(false)
        .build()
        .into();
    eprintln!("amprun: downloading {url}");
    let failed = |e: &dyn std::fmt::Display| Failure::usage(format!("cannot download {url}: {e}"));
    let response = agent.get(url).call().map_err(|e| failed(&e))?;
    let status = response.status();
    if !status.is_success() {
        return Err(failed(&format!("the server answered HTTP {status}")));
    }
    let length = response
        .headers()
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if let Some(length) = length.filter(|&n| n > MAX_ARCHIVE) {
        return Err(failed(&format!("it is {length} bytes, more than the {} MiB allowed", MAX_ARCHIVE >> 20)));
    }
    let bar = progress_bar(length);
    // The body's own limit is set past ours, so that ours names the problem.
    let mut reader = response.into_body().into_with_config().limit(MAX_ARCHIVE + 1).reader();
    let mut bytes: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        let n = match reader.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                let got = bytes.len();
                let of = length.map(|n| format!(" of {n}")).unwrap_or_default();
                let budget = if e.kind() == std::io::ErrorKind::TimedOut || e.to_string().contains("timeout") {
                    format!("; the download's budget is --timeout {} s", timeout.as_secs())
                } else {
                    String::new()
                };
                return Err(failed(&format!("{e} (after {got}{of} bytes{budget})")));
            }
        };
        bytes.extend_from_slice(chunk.get(..n).unwrap_or_default());
        if bytes.len() as u64 > MAX_ARCHIVE {
            return Err(failed(&format!("it is more than the {} MiB allowed", MAX_ARCHIVE >> 20)));
        }
        if let Some(bar) = &bar {
            bar.set_position(bytes.len() as u64);
        }
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    if let Some(length) = length.filter(|&n| n != bytes.len() as u64) {
        return Err(failed(&format!("the download ended after {} of {length} bytes", bytes.len())));
    }
    eprintln!("amprun: downloaded {} bytes in {:.1} s", bytes.len(), started.elapsed().as_secs_f64());
    Ok(bytes)
}

/// A byte counter on stderr when it is a terminal.
fn progress_bar(length: Option<u64>) -> Option<ProgressBar> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = ProgressBar::with_draw_target(length, ProgressDrawTarget::stderr());
    let template = if length.is_some() {
        "  [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}"
    } else {
        "  {bytes} {bytes_per_sec}"
    };
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style.progress_chars("=> "));
    }
    Some(bar)
}

/// The wanted files of a zip archive, found by name: `FILE` or `DIR/FILE` one folder deep
/// (the release has `trees/train.txt`), never a name with `..`, a backslash or a leading
/// `/`. A file found twice, or not at all, is an error; each is read through a limit of
/// [`MAX_FILE`] bytes, so an entry whose header understates its size cannot make the read
/// grow past it.
fn extract(archive: &[u8], files: &[&str], what: &str) -> Result<Vec<Vec<u8>>, Failure> {
    let bad = |e: &dyn std::fmt::Display| {
        Failure::bad_input(format!("{what} is not a zip archive the data can come from: {e}"))
    };
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(archive)).map_err(|e| bad(&e))?;
    // Entries whose names do not decode are not any wanted file's.
    let names: Vec<(usize, String)> =
        zip.file_names().enumerate().filter_map(|(i, name)| Some((i, name.ok()?.into_owned()))).collect();
    let mut out = Vec::with_capacity(files.len());
    for &file in files {
        let matches: Vec<&(usize, String)> = names.iter().filter(|(_, name)| entry_is(name, file)).collect();
        let (index, name) = match matches.as_slice() {
            [one] => *one,
            [] => return Err(bad(&format!("it has no `{file}`"))),
            several => {
                let list = several.iter().map(|(_, n)| format!("`{n}`")).collect::<Vec<_>>().join(", ");
                return Err(bad(&format!("it has `{file}` more than once: {list}")));
            }
        };
        let entry = zip.by_index(*index).map_err(|e| bad(&format!("`{name}`: {e}")))?;
        let mut bytes = Vec::new();
        entry.take(MAX_FILE + 1).read_to_end(&mut bytes).map_err(|e| bad(&format!("`{name}`: {e}")))?;
        if bytes.len() as u64 > MAX_FILE {
            return Err(Failure::bad_input(format!(
                "{what}: `{name}` is larger than {} MiB, far more than the data set's file",
                MAX_FILE >> 20
            )));
        }
        out.push(bytes);
    }
    Ok(out)
}

/// Whether the archive entry `name` is the file `file`: `file` itself or in one folder,
/// and nothing that could point elsewhere.
fn entry_is(name: &str, file: &str) -> bool {
    if name.starts_with('/') || name.contains('\\') || name.split('/').any(|part| part == ".." || part == ".") {
        return false;
    }
    match name.rsplit_once('/') {
        None => name == file,
        Some((folder, last)) => last == file && !folder.is_empty() && !folder.contains('/'),
    }
}

#[cfg(test)]
mod tests {
    use super::entry_is;

    #[test]
    fn only_the_file_itself_or_one_folder_deep_is_taken() {
        assert!(entry_is("trees/train.txt", "train.txt"));
        assert!(entry_is("train.txt", "train.txt"));
        for name in [
            "../train.txt",
            "trees/../train.txt",
            "/train.txt",
            "a/b/train.txt",
            "trees\\train.txt",
            "./train.txt",
            "/trees/train.txt",
            "trees/train.txt.bak",
            "xtrain.txt",
        ] {
            assert!(!entry_is(name, "train.txt"), "{name}");
        }
    }
}
