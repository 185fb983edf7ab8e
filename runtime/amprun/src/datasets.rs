//! `amprun data get|list|path` and data sets by name (`amp_data::catalog`): a name such as
//! `sst:train`, `digits` or `molecules:test` given to `--data`/`--valid` stands for the
//! bundled or cached file.
//!
//! `get` takes a downloaded set's files from its canonical address or `--from`
//! (`download`), verifies each (its number of trees, every line a labelled tree, its
//! SHA-256 against the catalog's) and only then stores them: written into a temporary
//! folder beside the set's, synced, and renamed into place, with `SHA256SUMS` (the
//! digests, in `sha256sum`'s format) and `SOURCE` (where they came from) beside them. An
//! interrupted `get` leaves the cache as it was (at most a temporary folder, which the next
//! `get` removes once its process is gone).

use crate::cli::{Command, DataAction, DataCommand, GetArgs};
use crate::download::{self, Source};
use crate::failure::Failure;
use amp_data::catalog::{self, DataSet, NameError, Origin, Split, SETS};
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where SST's PTB release is published (Socher et al. 2013).
pub const SST_URL: &str = "https://nlp.stanford.edu/sentiment/trainDevTestTrees_PTB.zip";

/// The canonical address of a downloaded set.
fn canonical_url(set: &DataSet) -> Option<&'static str> {
    (set.name == catalog::SST.name).then_some(SST_URL)
}

/// Runs `amprun data ...`.
pub fn run(command: &DataCommand) -> Result<(), Failure> {
    match &command.action {
        DataAction::Get(args) => get(args),
        DataAction::List(args) => list(&cache_of(args.dir.as_deref())?),
        DataAction::Path(args) => {
            let cache = cache_of(args.cache.dir.as_deref())?;
            let path = catalog::resolve(&args.name, Some(&cache)).ok_or_else(|| unknown(&args.name))?;
            println!("{}", path.map_err(|e| name_failure(&e))?.display());
            Ok(())
        }
    }
}

/// `--dir`, or the cache folder.
fn cache_of(dir: Option<&Path>) -> Result<PathBuf, Failure> {
    match dir {
        Some(dir) => Ok(dir.to_path_buf()),
        None => catalog::cache_dir().map_err(|e| Failure::usage(e.to_string())),
    }
}

fn unknown(name: &str) -> Failure {
    let known = SETS.iter().map(|s| s.names()).collect::<Vec<_>>().join(", ");
    Failure::usage(format!("`{name}` is no data set Amp knows: the names are {known}"))
}

fn name_failure(error: &NameError) -> Failure {
    Failure::usage(error.to_string())
}

/// Replaces every data set name among the run's `--data`/`--valid` by its file.
pub fn resolve_names(command: &mut Command) -> Result<(), Failure> {
    match command {
        Command::Train(args) => {
            resolve(&mut args.data)?;
            if let Some(valid) = &mut args.valid {
                resolve(valid)?;
            }
        }
        Command::Eval(args) | Command::Infer(args) => resolve(&mut args.data)?,
        Command::Grad(args) => resolve(&mut args.data)?,
        Command::Data(_) | Command::Report(_) => {}
    }
    Ok(())
}

/// A data argument that names a set becomes the set's file; any other is a path.
fn resolve(data: &mut PathBuf) -> Result<(), Failure> {
    let Some(text) = data.to_str() else { return Ok(()) };
    if let Some(found) = catalog::resolve(text, None) {
        *data = found.map_err(|e| name_failure(&e))?;
    }
    Ok(())
}

/// `amprun data get NAME [--dir DIR] [--from URL|FILE|DIR] [--timeout S]`.
fn get(args: &GetArgs) -> Result<(), Failure> {
    let set = *SETS.iter().find(|s| s.name == args.name).ok_or_else(|| unknown(&args.name))?;
    if set.origin == Origin::Bundled {
        println!(
            "{} is in the repository ({}): nothing to download; its names are {}",
            set.name,
            set.dir(Path::new("")).display(),
            set.names()
        );
        return Ok(());
    }
    let cache = cache_of(args.cache.dir.as_deref())?;
    let target = set.dir(&cache);
    if present_and_verified(&set, &target) {
        println!("{} is present and verified in {}", set.name, target.display());
        return Ok(());
    }
    let source = match (&args.from, canonical_url(&set)) {
        (Some(from), _) => Source::parse(from),
        (None, Some(url)) => Source::Url(url.to_string()),
        (None, None) => {
            return Err(Failure::usage(format!("{} has no address to download from: give --from", set.name)))
        }
    };
    let names: Vec<&str> = set.splits.iter().map(|s| s.file).collect();
    let files = download::fetch(&source, &names, Duration::from_secs(args.timeout))?;
    let problems: Vec<String> =
        set.splits.iter().zip(&files).filter_map(|(split, bytes)| verify(split, bytes).err()).collect();
    if !problems.is_empty() {
        return Err(Failure::bad_input(format!(
            "{} from {source} failed verification; nothing was stored:\n  {}",
            set.name,
            problems.join("\n  ")
        )));
    }
    store(&cache, &set, &files, &source)?;
    println!("{} verified and stored in {}", set.name, target.display());
    for (split, bytes) in set.splits.iter().zip(&files) {
        println!(
            "  {:<12} {:>6} trees  {} bytes  sha256 {}",
            set.split_name(split),
            split.instances,
            bytes.len(),
            split.sha256
        );
    }
    Ok(())
}

/// Whether every file of the set is in `dir` and verifies.
fn present_and_verified(set: &DataSet, dir: &Path) -> bool {
    set.splits.iter().all(|split| {
        let path = dir.join(split.file);
        // A cached file larger than any the set has is not read whole.
        let small = std::fs::metadata(&path).is_ok_and(|m| m.is_file() && m.len() <= download::MAX_FILE);
        small && std::fs::read(&path).is_ok_and(|bytes| verify(split, &bytes).is_ok())
    })
}

/// The SHA-256 of `bytes`, lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// Checks one file against its split: every line a labelled tree, the number of trees and
/// the SHA-256. The error names the file and what differs.
fn verify(split: &Split, bytes: &[u8]) -> Result<(), String> {
    let file = split.file;
    let trees = amp_data::ptb::count_trees(bytes, file).map_err(|e| format!("{e}"))?;
    if trees != split.instances {
        return Err(format!("{file}: {trees} trees, expected {} (the official split)", split.instances));
    }
    let digest = sha256_hex(bytes);
    if digest != split.sha256 {
        return Err(format!(
            "{file}: SHA-256 {digest}, expected {} (the published file's); its {trees} trees parse, but their \
             bytes differ",
            split.sha256
        ));
    }
    Ok(())
}

/// Writes the verified files into a fresh temporary folder in `cache`, syncs them, and
/// renames the folder to the set's; a previous folder of the set is moved aside first and
/// removed after.
fn store(cache: &Path, set: &DataSet, files: &[Vec<u8>], source: &Source) -> Result<(), Failure> {
    std::fs::create_dir_all(cache).map_err(|e| Failure::io("create the folder", cache, &e))?;
    remove_stale_temporaries(cache, set);
    let pid = std::process::id();
    let temporary = cache.join(format!(".{}.tmp-{pid}", set.folder));
    let aside = cache.join(format!(".{}.old-{pid}", set.folder));
    let target = set.dir(cache);
    let _ = std::fs::remove_dir_all(&temporary);
    std::fs::create_dir(&temporary).map_err(|e| Failure::io("create the folder", &temporary, &e))?;
    if let Err(failure) = fill_and_swap(&temporary, &target, &aside, set, files, source) {
        let _ = std::fs::remove_dir_all(&temporary);
        return Err(failure);
    }
    let _ = std::fs::remove_dir_all(&aside);
    sync_folder(cache);
    Ok(())
}

/// Writes the files, `SHA256SUMS` and `SOURCE` into `temporary`, then puts it in
/// `target`'s place (a previous `target` moved to `aside`).
fn fill_and_swap(
    temporary: &Path,
    target: &Path,
    aside: &Path,
    set: &DataSet,
    files: &[Vec<u8>],
    source: &Source,
) -> Result<(), Failure> {
    let mut sums = String::new();
    for (split, bytes) in set.splits.iter().zip(files) {
        write_synced(&temporary.join(split.file), bytes)?;
        sums.push_str(&format!("{}  {}\n", split.sha256, split.file));
    }
    write_synced(&temporary.join("SHA256SUMS"), sums.as_bytes())?;
    write_synced(&temporary.join("SOURCE"), format!("{source}\n").as_bytes())?;
    if target.exists() {
        std::fs::rename(target, aside).map_err(|e| Failure::io("move aside", target, &e))?;
    }
    std::fs::rename(temporary, target).map_err(|e| Failure::io("rename into place", temporary, &e))
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), Failure> {
    let mut file = std::fs::File::create(path).map_err(|e| Failure::io("write", path, &e))?;
    file.write_all(bytes).and_then(|()| file.sync_all()).map_err(|e| Failure::io("write", path, &e))
}

/// Makes the rename durable where the platform lets a folder be synced.
fn sync_folder(dir: &Path) {
    if let Ok(folder) = std::fs::File::open(dir) {
        let _ = folder.sync_all();
    }
}

/// Removes the temporary and set-aside folders of `get`s of this set whose process is gone
/// (on Linux, where `/proc` tells; elsewhere they stay).
fn remove_stale_temporaries(cache: &Path, set: &DataSet) {
    let Ok(entries) = std::fs::read_dir(cache) else { return };
    let prefixes = [format!(".{}.tmp-", set.folder), format!(".{}.old-", set.folder)];
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(pid) = prefixes.iter().find_map(|p| name.strip_prefix(p.as_str())) else { continue };
        let Ok(pid) = pid.parse::<u32>() else { continue };
        let gone = Path::new("/proc/self").exists() && !Path::new("/proc").join(pid.to_string()).exists();
        if gone {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// `amprun data list`: every name, whether its file is there, and where.
fn list(cache: &Path) -> Result<(), Failure> {
    let env = std::env::var_os(catalog::CACHE_ENV).is_some_and(|v| !v.is_empty());
    println!("cache folder: {} ({})", cache.display(), if env { "$AMP_DATA" } else { "the platform's, or --dir" });
    println!("bundled sets: {}", catalog::bundled_dir().display());
    println!();
    println!("{:<16} {:<10} {:>6}  path", "name", "status", "count");
    for set in SETS {
        for split in set.splits {
            let path = set.dir(cache).join(split.file);
            let status = match (set.origin, path.is_file()) {
                (Origin::Bundled, true) => "bundled",
                (Origin::Downloaded, true) => "cached",
                (Origin::Bundled, false) => "absent",
                (Origin::Downloaded, false) => "missing",
            };
            println!("{:<16} {:<10} {:>6}  {}", set.split_name(split), status, split.instances, path.display());
        }
    }
    println!();
    for set in SETS {
        println!("{}: {}", set.name, set.about);
    }
    Ok(())
}
