//! The `.ampg` file `ampc compile` writes: never over one of its inputs (`-o m.amp` would
//! replace the source with the graph), never over anything but a regular file (renaming
//! over a symbolic link, a FIFO or a device such as `/dev/null` replaces it with a
//! regular file), and atomically.

use std::fs::Permissions;
use std::io::Write;
use std::path::Path;

/// Refuses `output` when it is one of `inputs` (the same file, however named: a
/// symbolic link or a hard link to it included) or exists and is not a regular file.
/// Checked before compiling, so nothing is done for a write that would be refused.
pub(crate) fn check(output: &Path, inputs: &[(&str, &Path)]) -> Result<(), String> {
    for (what, input) in inputs {
        if same_file(output, input) {
            return Err(format!(
                "the output `{}` is the {what} `{}`: writing the graph there would destroy it (choose another -o)",
                output.display(),
                input.display()
            ));
        }
    }
    check_regular(output)
}

/// Refuses a target that exists and is not a regular file (never following a link).
fn check_regular(output: &Path) -> Result<(), String> {
    match std::fs::symlink_metadata(output) {
        Ok(meta) if meta.file_type().is_file() => Ok(()),
        Ok(meta) => {
            let kind = if meta.file_type().is_symlink() {
                "a symbolic link"
            } else if meta.is_dir() {
                "a directory"
            } else {
                "a special file (a FIFO, a device or a socket)"
            };
            Err(format!(
                "cannot write `{}`: it is {kind}, not a regular file (only a regular file is replaced)",
                output.display()
            ))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("cannot write `{}`: {e}", output.display())),
    }
}

/// Whether `a` and `b` name the same existing file.
fn same_file(a: &Path, b: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        if let (Ok(x), Ok(y)) = (std::fs::metadata(a), std::fs::metadata(b)) {
            return x.dev() == y.dev() && x.ino() == y.ino();
        }
    }
    matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y)
}

/// Writes the graph to `path` with [`replace_file`]. The target is checked again just
/// before: compiling may have taken a while.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), String> {
    check_regular(path)?;
    replace_file(path, bytes, None).map_err(|e| format!("cannot write `{}`: {e}", path.display()))
}

/// Replaces `path` with `bytes` so that a reader (or a crash) sees the old file or the new
/// one, never a part: a temporary file beside it, created new (never one that exists),
/// synced, then renamed over it; with `permissions` (`ampc fmt` keeps the source's), the
/// new file gets them.
pub(crate) fn replace_file(path: &Path, bytes: &[u8], permissions: Option<Permissions>) -> std::io::Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().map_or_else(|| "out".into(), |n| n.to_string_lossy().into_owned());
    let temp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let written = (|| {
        let mut file = std::fs::OpenOptions::new().write(true).create_new(true).open(&temp)?;
        file.write_all(bytes)?;
        if let Some(permissions) = permissions {
            file.set_permissions(permissions)?;
        }
        file.sync_all()?;
        std::fs::rename(&temp, path)
    })();
    if written.is_err() {
        // Best effort: the error that matters is the one returned.
        let _ = std::fs::remove_file(&temp);
    }
    written
}
