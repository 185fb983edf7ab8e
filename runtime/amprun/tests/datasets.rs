//! `amprun data get|list|path` end to end, against an HTTP server each test starts on
//! 127.0.0.1 (the canonical address is never contacted), and data sets by name in
//! `train`. The served zip holds SST from the cache folder when `amprun data get sst` put
//! it there (CI fills it through `--from`), else generated trees with the official split
//! sizes, whose digests then differ: the cases that need the real files say so when they
//! are skipped.

mod common;

use amp_data::catalog::SST;
use common::*;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use zip::write::SimpleFileOptions;

/// What the test server does with the one request it takes.
#[derive(Clone)]
enum Answer {
    /// 200 with the body.
    Body(Vec<u8>),
    /// 200 with the body's full `Content-Length`, then only its first `sent` bytes.
    Truncated(Vec<u8>, usize),
    /// 200 with a `Content-Length`, a few bytes, then nothing until the client gives up.
    Stall,
    /// This status and no body.
    Status(u16),
}

/// A server on 127.0.0.1 answering one connection; it gives up waiting for it, and a
/// stall ends, after at most a minute, so no test can hang on it.
struct Server {
    url: String,
    done: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    fn start(answer: Answer) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        listener.set_nonblocking(true).expect("nonblocking accept");
        let url = format!("http://{}/sentiment/trainDevTestTrees_PTB.zip", listener.local_addr().expect("address"));
        let done = Arc::new(AtomicBool::new(false));
        let stop = done.clone();
        let thread = std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(60);
            while Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => return serve(stream, &answer, &stop, deadline),
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        Server { url, done, thread: Some(thread) }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn serve(mut stream: TcpStream, answer: &Answer, stop: &AtomicBool, deadline: Instant) {
    stream.set_nonblocking(false).expect("blocking stream");
    stream.set_read_timeout(Some(Duration::from_millis(100))).expect("read timeout");
    // The request's head (bounded), then the answer.
    let mut head = Vec::new();
    let mut byte = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 64 << 10 && Instant::now() < deadline {
        match stream.read(&mut byte) {
            Ok(0) => return,
            Ok(n) => head.extend_from_slice(&byte[..n]),
            Err(_) => continue,
        }
    }
    let header = |status: &str, length: usize| {
        format!("HTTP/1.1 {status}\r\nContent-Type: application/zip\r\nContent-Length: {length}\r\nConnection: close\r\n\r\n")
    };
    let _ = match answer {
        Answer::Body(body) => {
            stream.write_all(header("200 OK", body.len()).as_bytes()).and_then(|()| stream.write_all(body))
        }
        Answer::Truncated(body, sent) => {
            stream.write_all(header("200 OK", body.len()).as_bytes()).and_then(|()| stream.write_all(&body[..*sent]))
        }
        Answer::Stall => {
            let _ =
                stream.write_all(header("200 OK", 1 << 20).as_bytes()).and_then(|()| stream.write_all(b"PK\x03\x04"));
            // Hold the connection until the client closes it (or the test ends).
            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                match stream.read(&mut byte) {
                    Ok(0) => break,
                    _ => continue,
                }
            }
            Ok(())
        }
        Answer::Status(code) => stream.write_all(header(&format!("{code} Nope"), 0).as_bytes()),
    };
    let _ = stream.flush();
}

/// The three files the served release holds, and whether they are the real ones.
struct Trees {
    files: Vec<(&'static str, Vec<u8>)>,
    real: bool,
}

/// SST from the cache folder, else generated trees with the official split sizes (whose
/// digests differ from the release's).
fn trees() -> Trees {
    use amp_data::catalog::file_of;
    let cached = SST.splits.iter().map(|split| file_of(&SST, split, None)).collect::<Result<Vec<_>, _>>();
    if let Ok(paths) = cached {
        let files =
            SST.splits.iter().zip(paths).map(|(s, path)| (s.file, std::fs::read(path).expect("cached file"))).collect();
        return Trees { files, real: true };
    }
    Trees::generated()
}

impl Trees {
    fn generated() -> Trees {
        let files = SST
            .splits
            .iter()
            .map(|split| {
                let text: String = (0..split.instances)
                    .map(|i| format!("({} ({} w{i}) (2 {}))\n", i % 5, (i + 1) % 5, split.file))
                    .collect();
                (split.file, text.into_bytes())
            })
            .collect();
        Trees { files, real: false }
    }
}

/// A zip of `entries` (name, bytes), deflated.
fn zip_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    for (name, bytes) in entries {
        zip.start_file(*name, options).expect("entry");
        zip.write_all(bytes).expect("entry bytes");
    }
    zip.finish().expect("zip").into_inner()
}

/// The release's layout: `trees/train.txt`, `trees/dev.txt`, `trees/test.txt`.
fn release(trees: &Trees) -> Vec<u8> {
    let names: Vec<String> = trees.files.iter().map(|(f, _)| format!("trees/{f}")).collect();
    let entries: Vec<(&str, &[u8])> =
        names.iter().zip(&trees.files).map(|(n, (_, b))| (n.as_str(), b.as_slice())).collect();
    zip_of(&entries)
}

fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// `amprun data get sst --dir CACHE --from FROM [more]`, without proxies from the
/// environment (the server is on loopback).
fn get(dir: &Path, cache: &Path, from: &str, more: &[&str]) -> std::process::Output {
    let mut args = vec!["data", "get", "sst", "--dir", cache.to_str().expect("UTF-8 path"), "--from", from];
    args.extend(more);
    std::process::Command::new(env!("CARGO_BIN_EXE_amprun"))
        .args(&args)
        .current_dir(dir)
        .env_remove("http_proxy")
        .env_remove("HTTP_PROXY")
        .env_remove("https_proxy")
        .env_remove("HTTPS_PROXY")
        .env_remove("ALL_PROXY")
        .env_remove("all_proxy")
        .output()
        .expect("amprun runs")
}

/// Every path under `dir`, relative to it, sorted.
fn tree_of(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    if !dir.exists() {
        return out;
    }
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("readable folder").flatten() {
            let path = entry.path();
            out.push(path.strip_prefix(dir).expect("under dir").display().to_string());
            if path.is_dir() {
                stack.push(path);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn the_release_from_a_mirror_is_verified_stored_and_found_by_name() {
    // The stored files must be the published ones: without them the case cannot run.
    if cached_sst("the_release_from_a_mirror_is_verified_stored_and_found_by_name").is_none() {
        return;
    }
    let trees = trees();
    let scratch = scratch("data-get");
    let dir = scratch.path();
    let cache = dir.join("cache");
    let server = Server::start(Answer::Body(release(&trees)));
    let out = get(dir, &cache, &server.url, &[]);
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("sst verified and stored in"), "{}", stdout(&out));
    assert!(stderr(&out).contains(&format!("downloading {}", server.url)), "{}", stderr(&out));
    assert_eq!(
        tree_of(&cache),
        ["sst", "sst/SHA256SUMS", "sst/SOURCE", "sst/dev.txt", "sst/test.txt", "sst/train.txt"]
    );
    for (file, bytes) in &trees.files {
        assert_eq!(&std::fs::read(cache.join("sst").join(file)).unwrap(), bytes, "{file}");
    }
    let sums = std::fs::read_to_string(cache.join("sst/SHA256SUMS")).unwrap();
    for split in SST.splits {
        assert!(sums.contains(&format!("{}  {}\n", split.sha256, split.file)), "{sums}");
    }
    assert_eq!(std::fs::read_to_string(cache.join("sst/SOURCE")).unwrap(), format!("{}\n", server.url));
    drop(server);

    // Present and verified: nothing is downloaded again (no server is listening).
    let again = get(dir, &cache, "http://127.0.0.1:9/gone.zip", &[]);
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    assert!(stdout(&again).contains("sst is present and verified in"), "{}", stdout(&again));

    // `list` and `path` see it; a run finds `sst:train` and `sst:dev` through $AMP_DATA.
    let list = amprun_ok(dir, &["data", "list", "--dir", cache.to_str().unwrap()]);
    assert!(stdout(&list).lines().any(|l| l.starts_with("sst:train") && l.contains("cached")), "{}", stdout(&list));
    let path = amprun_ok(dir, &["data", "path", "sst:test", "--dir", cache.to_str().unwrap()]);
    assert_eq!(stdout(&path).trim(), cache.join("sst/test.txt").display().to_string());
    let model = example("tree_lstm.amp");
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_amprun"))
        .args(["train", &model, "-D", "embed=8", "-D", "hidden=8", "--data", "sst:train", "--valid", "sst:dev"])
        .args(["--limit", "16", "--epochs", "1", "--vocab", "sst.vocab"])
        .current_dir(dir)
        .env("AMP_DATA", &cache)
        .output()
        .expect("amprun runs");
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    assert!(stdout(&run).contains("valid"), "{}", stdout(&run));

    // A local folder holding the files is a mirror too.
    let copy = dir.join("copy");
    let from_folder = get(dir, &copy, cache.join("sst").to_str().unwrap(), &[]);
    assert_eq!(from_folder.status.code(), Some(0), "{}", stderr(&from_folder));
    assert_eq!(std::fs::read(copy.join("sst/train.txt")).unwrap(), trees.files[0].1);
}

#[test]
fn files_that_differ_from_the_release_are_named_with_both_digests_and_nothing_is_stored() {
    let mut trees = trees();
    // One byte changed in dev.txt: still 1,101 trees that parse, but another digest.
    let dev = &mut trees.files[1].1;
    let at = dev.iter().position(|&b| b.is_ascii_lowercase()).expect("a word");
    dev[at] = if dev[at] == b'z' { b'y' } else { dev[at] + 1 };
    let scratch = scratch("data-digest");
    let dir = scratch.path();
    let cache = dir.join("cache");
    let server = Server::start(Answer::Body(release(&trees)));
    let out = get(dir, &cache, &server.url, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    let dev_expected = SST.splits[1].sha256;
    assert!(err.contains(&format!("dev.txt: SHA-256 {}, expected {dev_expected}", sha256(&trees.files[1].1))), "{err}");
    assert!(err.contains("nothing was stored"), "{err}");
    for (file, bytes) in &trees.files {
        let named = err.contains(&format!("{file}: SHA-256 {}", sha256(bytes)));
        assert_eq!(named, !trees.real || *file == "dev.txt", "{file}: {err}");
    }
    assert_eq!(tree_of(&cache), Vec::<String>::new(), "only the cache folder itself may exist");

    // A split with a tree too few, and a line that is no tree, are named by count and line.
    let mut short = trees.files.clone();
    let train = &mut short[0].1;
    let last_line = train[..train.len() - 1].iter().rposition(|&b| b == b'\n').expect("lines") + 1;
    train.truncate(last_line);
    short[2].1.splice(0..0, b"(2 not a tree\n".iter().copied());
    let server = Server::start(Answer::Body(release(&Trees { files: short, real: false })));
    let out = get(dir, &cache, &server.url, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("train.txt: 8543 trees, expected 8544 (the official split)"), "{}", stderr(&out));
    assert!(stderr(&out).contains("test.txt:1: unexpected word `a` at column 8"), "{}", stderr(&out));
    assert!(!cache.join("sst").exists());
}

#[test]
fn a_truncated_download_or_an_http_error_stores_nothing() {
    let trees = trees();
    let body = release(&trees);
    let scratch = scratch("data-truncated");
    let dir = scratch.path();
    let cache = dir.join("cache");
    let half = body.len() / 2;
    let server = Server::start(Answer::Truncated(body.clone(), half));
    let out = get(dir, &cache, &server.url, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains(&format!("cannot download {}", server.url)), "{}", stderr(&out));
    assert!(stderr(&out).contains(&format!("of {} bytes", body.len())), "{}", stderr(&out));
    assert!(!cache.exists() || tree_of(&cache).is_empty());

    let server = Server::start(Answer::Status(404));
    let out = get(dir, &cache, &server.url, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("the server answered HTTP 404"), "{}", stderr(&out));

    // The same truncated bytes as a local archive: not a zip to take data from.
    std::fs::write(dir.join("half.zip"), &body[..half]).unwrap();
    let out = get(dir, &cache, "half.zip", &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("half.zip is not a zip archive the data can come from"), "{}", stderr(&out));
    assert!(!cache.exists() || tree_of(&cache).is_empty());
}

#[test]
fn a_stalled_server_is_given_up_on_after_the_timeout() {
    let scratch = scratch("data-stall");
    let dir = scratch.path();
    let cache = dir.join("cache");
    let server = Server::start(Answer::Stall);
    let out = get(dir, &cache, &server.url, &["--timeout", "2"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains(&format!("cannot download {}", server.url)) && err.contains("imeout"), "{err}");
    assert!(!cache.exists() || tree_of(&cache).is_empty());
}

#[test]
fn hostile_entries_are_never_extracted_and_huge_ones_never_read_whole() {
    let trees = trees();
    let scratch = scratch("data-hostile");
    let root = scratch.path();
    let dir = root.join("work");
    let cache = dir.join("cache");
    std::fs::create_dir_all(&dir).unwrap();
    let mut entries: Vec<(String, &[u8])> = vec![
        ("../escape.txt".into(), b"out"),
        ("../../escape.txt".into(), b"out"),
        ("/abs.txt".into(), b"out"),
        ("trees/../../up.txt".into(), b"out"),
        ("../train.txt".into(), b"(0 (0 evil) (0 tree))\n"),
        ("a/b/train.txt".into(), b"(0 (0 evil) (0 tree))\n"),
    ];
    entries.extend(trees.files.iter().map(|(f, b)| (format!("trees/{f}"), b.as_slice())));
    let entries: Vec<(&str, &[u8])> = entries.iter().map(|(n, b)| (n.as_str(), *b)).collect();
    std::fs::write(dir.join("hostile.zip"), zip_of(&entries)).unwrap();
    let server = Server::start(Answer::Body(zip_of(&entries)));
    for from in [server.url.as_str(), "hostile.zip"] {
        let out = get(&dir, &cache, from, &[]);
        let expected = if trees.real { 0 } else { 1 };
        assert_eq!(out.status.code(), Some(expected), "{from}: {}", stderr(&out));
        let stored = if trees.real {
            vec!["sst", "sst/SHA256SUMS", "sst/SOURCE", "sst/dev.txt", "sst/test.txt", "sst/train.txt"]
        } else {
            vec![]
        };
        assert_eq!(tree_of(&cache), stored, "{from}");
        let _ = std::fs::remove_dir_all(&cache);
    }
    drop(server);
    assert_eq!(tree_of(root), ["work", "work/hostile.zip"], "nothing outside the cache folder");

    // The same file twice (at the root and in trees/) is ambiguous.
    let mut twice: Vec<(&str, &[u8])> = entries.clone();
    twice.push(("test.txt", b"(1 (1 a) (1 b))\n"));
    std::fs::write(dir.join("twice.zip"), zip_of(&twice)).unwrap();
    let out = get(&dir, &cache, "twice.zip", &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("it has `test.txt` more than once: `trees/test.txt`, `test.txt`"),
        "{}",
        stderr(&out)
    );

    // train.txt inflating to 17 MiB (from a few KiB): refused at the per-file limit.
    let zeros = vec![b' '; 17 << 20];
    let huge = zip_of(&[
        ("trees/train.txt", &zeros),
        ("trees/dev.txt", &trees.files[1].1),
        ("trees/test.txt", &trees.files[2].1),
    ]);
    assert!(huge.len() < 1 << 20, "the archive is small: {}", huge.len());
    let server = Server::start(Answer::Body(huge));
    let out = get(&dir, &cache, &server.url, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("`trees/train.txt` is larger than 16 MiB"), "{}", stderr(&out));
    assert!(!cache.join("sst").exists());
}

#[test]
fn names_stand_for_bundled_files_and_a_missing_download_says_how_to_get_it() {
    let scratch = scratch("data-names");
    let dir = scratch.path();
    let model = example("mlp.amp");
    let run = |data: &str, cache: &Path| {
        std::process::Command::new(env!("CARGO_BIN_EXE_amprun"))
            .args(["train", &model, "-D", "hidden=8", "--data", data, "--scale", "0.0625", "--limit", "32"])
            .args(["--epochs", "1"])
            .current_dir(dir)
            .env("AMP_DATA", cache)
            .output()
            .expect("amprun runs")
    };
    let empty = dir.join("empty-cache");
    let out = run("digits", &empty);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("trained epochs 1..1") && stdout(&out).contains(", 32 instances,"),
        "{}",
        stdout(&out)
    );

    let out = run("sst:train", &empty);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let expected = format!(
        "amprun: error: the data set `sst` is not downloaded ({} is absent): `amprun data get sst` fetches and verifies it",
        empty.join("sst/train.txt").display()
    );
    assert!(stderr(&out).contains(&expected), "{}", stderr(&out));
    let out = run("molecules:valid", &empty);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("has no split `valid`: its names are molecules:train, molecules:test"),
        "{}",
        stderr(&out)
    );

    // Bundled sets need no download; an unknown one lists the names.
    let out = amprun_ok(dir, &["data", "get", "digits"]);
    assert!(stdout(&out).contains("digits is in the repository"), "{}", stdout(&out));
    let out = amprun(dir, &["data", "get", "imagenet"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("`imagenet` is no data set Amp knows: the names are digits, molecules:train"),
        "{}",
        stderr(&out)
    );
    let path = amprun_ok(dir, &["data", "path", "molecules:test"]);
    assert_eq!(stdout(&path).trim(), bundled("molecules/solubility.test.sdf"));
}
