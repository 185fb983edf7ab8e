//! Where files are written: atomic writes that replace only regular files, the checks a
//! command makes before it starts work, and the cleanup of temporary files that a killed
//! writer left behind.
//!
//! An atomic write renames a complete temporary file over its target. Renaming replaces
//! whatever the name points at, so a target that is not a regular file (a symbolic link,
//! a FIFO, a device such as `/dev/null` or `/dev/full`, a directory) is refused before
//! anything is written: replacing `/dev/null` with a regular file would break the system,
//! and replacing a symbolic link would leave the file it points at unchanged while the
//! user believes it was written.
//!
//! Temporary files are named `.NAME.PID.N.tmp` (NAME the target's file name, PID the
//! writer's process id, N a counter within the process). A writer killed between creating
//! and renaming its temporary file leaves it behind; the next write to the same target
//! removes those of exactly that pattern whose PID is no live process (Linux: no
//! `/proc/PID`; elsewhere they are left alone) and nothing else.

use crate::ParamsError;
use std::fs::FileType;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Refuses a target that exists and is not a regular file. A missing target is fine (it
/// will be created); the target is never followed if it is a symbolic link.
pub fn check_target(path: &Path) -> Result<(), ParamsError> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_file() => Ok(()),
        Ok(meta) => Err(ParamsError::Target {
            path: path.to_path_buf(),
            problem: format!(
                "it is {}, not a regular file (only a regular file is replaced; give another path)",
                describe(meta.file_type())
            ),
        }),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(source) => Err(ParamsError::Io { path: path.to_path_buf(), action: "inspect", source }),
    }
}

/// What a command checks before it starts work on a file it will write atomically: the
/// target is a regular file or absent ([`check_target`]), and its directory exists and
/// lets us create a file (tried with a temporary file of our own pattern, removed at
/// once), so that a run does not fail only after hours of work.
pub fn check_writable(path: &Path) -> Result<(), ParamsError> {
    let dir = directory(path);
    match std::fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => {
            let problem = format!("`{}` is not a directory", dir.display());
            return Err(ParamsError::Target { path: path.to_path_buf(), problem });
        }
        Err(e) if e.kind() == ErrorKind::NotFound => {
            let problem = format!("the directory `{}` does not exist", dir.display());
            return Err(ParamsError::Target { path: path.to_path_buf(), problem });
        }
        Err(source) => return Err(ParamsError::Io { path: dir.to_path_buf(), action: "inspect", source }),
    }
    check_target(path)?;
    match create_temp(path) {
        Ok((probe, file)) => {
            drop(file);
            let _ = std::fs::remove_file(&probe);
            Ok(())
        }
        Err((probe, source)) => Err(ParamsError::Io { path: probe, action: "create a file like", source }),
    }
}

/// Writes a file so that `path` holds either its old content or the complete new one,
/// whatever happens: `fill` writes into a temporary file beside `path`, which is synced
/// and renamed over `path`; on any error the temporary file is removed and `path` is left
/// as it was. A `path` that exists and is not a regular file is refused before anything
/// is written; stale temporary files of earlier writers of `path` are removed first.
pub fn write_atomically(
    path: &Path,
    fill: impl FnOnce(&mut std::fs::File) -> std::io::Result<()>,
) -> Result<(), ParamsError> {
    check_target(path)?;
    remove_stale_temps(path);
    let dir = directory(path);
    let (temp, mut file) =
        create_temp(path).map_err(|(temp, source)| ParamsError::Io { path: temp, action: "create", source })?;
    let io = |action: &'static str, p: &Path| {
        let p = p.to_path_buf();
        move |source| ParamsError::Io { path: p, action, source }
    };
    let result = (|| {
        fill(&mut file).map_err(io("write", &temp))?;
        file.sync_all().map_err(io("sync", &temp))?;
        drop(file);
        // Checked again just before the rename: the write may have taken long enough for
        // something else to appear at `path`.
        check_target(path)?;
        std::fs::rename(&temp, path).map_err(io("rename into", path))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temp);
        return result;
    }
    // Make the rename itself durable; not every platform can open a directory, and the
    // file is complete either way.
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// The directory a file `path` is written into.
fn directory(path: &Path) -> &Path {
    path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."))
}

/// The target's file name as it appears in its temporary files.
fn target_name(path: &Path) -> String {
    path.file_name().map_or_else(|| "checkpoint".into(), |n| n.to_string_lossy().into_owned())
}

/// A fresh temporary file name beside `path`: `.NAME.PID.N.tmp`.
fn temp_path(path: &Path) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let unique = COUNTER.fetch_add(1, Ordering::Relaxed);
    directory(path).join(format!(".{}.{}.{unique}.tmp", target_name(path), std::process::id()))
}

/// Creates a new temporary file beside `path`, never opening one that exists (nor
/// following a link there): a name that is taken (a file left by a dead process that had
/// our PID) is passed over for the next.
fn create_temp(path: &Path) -> Result<(PathBuf, std::fs::File), (PathBuf, std::io::Error)> {
    let mut tries = 0;
    loop {
        let temp = temp_path(path);
        match std::fs::OpenOptions::new().write(true).create_new(true).open(&temp) {
            Ok(file) => return Ok((temp, file)),
            Err(e) if e.kind() == ErrorKind::AlreadyExists && tries < 16 => tries += 1,
            Err(e) => return Err((temp, e)),
        }
    }
}

/// The process id in `file_name` when it is a temporary file of ours for the target named
/// `name` (`.NAME.PID.N.tmp`, PID and N decimal), else `None`.
pub fn temp_owner(file_name: &str, name: &str) -> Option<u32> {
    let middle = file_name.strip_prefix('.')?.strip_prefix(name)?.strip_prefix('.')?.strip_suffix(".tmp")?;
    let (pid, counter) = middle.split_once('.')?;
    let decimal = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !(decimal(pid) && decimal(counter)) {
        return None;
    }
    pid.parse().ok()
}

/// Whether process `pid` is alive; `None` when this platform cannot tell.
fn process_alive(pid: u32) -> Option<bool> {
    if cfg!(target_os = "linux") && Path::new("/proc/self").exists() {
        Some(Path::new("/proc").join(pid.to_string()).exists())
    } else {
        None
    }
}

/// Removes the temporary files of writers of `path` that died before renaming them:
/// regular files named exactly `.NAME.PID.N.tmp` whose PID is no live process. Best
/// effort: a file that cannot be listed or removed stays, and the write goes on.
///
/// A process in another PID namespace writing into the same directory looks dead from
/// here; its rename would then fail and leave its target as it was (never torn).
fn remove_stale_temps(path: &Path) {
    let name = target_name(path);
    let own = std::process::id();
    let Ok(entries) = std::fs::read_dir(directory(path)) else { return };
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(pid) = file_name.to_str().and_then(|f| temp_owner(f, &name)) else { continue };
        if pid == own || process_alive(pid) != Some(false) {
            continue;
        }
        if entry.file_type().is_ok_and(|t| t.is_file()) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// `a symbolic link`, `a FIFO`...: what a file type is, for messages.
fn describe(kind: FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_fifo() {
            return "a FIFO";
        }
        if kind.is_char_device() {
            return "a character device";
        }
        if kind.is_block_device() {
            return "a block device";
        }
        if kind.is_socket() {
            return "a socket";
        }
    }
    if kind.is_symlink() {
        "a symbolic link"
    } else if kind.is_dir() {
        "a directory"
    } else {
        "a special file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_our_exact_pattern_names_an_owner() {
        assert_eq!(temp_owner(".ckpt.safetensors.123.0.tmp", "ckpt.safetensors"), Some(123));
        assert_eq!(temp_owner(".ckpt.safetensors.123.45.tmp", "ckpt.safetensors"), Some(123));
        for other in [
            "ckpt.safetensors.123.0.tmp",
            ".ckpt.safetensors.123.tmp",
            ".ckpt.safetensors.123.0.1.tmp",
            ".ckpt.safetensors.12a.0.tmp",
            ".ckpt.safetensors..0.tmp",
            ".ckpt.safetensors.123.0.tmp.bak",
            ".other.123.0.tmp",
            ".ckpt.safetensors.x.123.0.tmp",
        ] {
            assert_eq!(temp_owner(other, "ckpt.safetensors"), None, "{other}");
        }
        // The temporary files of a target `a.7` are not those of `a`.
        assert_eq!(temp_owner(".a.7.123.0.tmp", "a"), None);
    }
}
