//! Where the checker finds the files a program imports (`use encoders::Encoder;` reads
//! `encoders.amp` beside the importing file). The checker never opens a file itself: it
//! asks a [`Files`], so the language server can answer with the open buffers before the
//! disk, and tests and fuzzers with nothing at all.

use std::io;
use std::path::Path;

/// A source of module files.
pub trait Files {
    /// The text of the file at `path`; an error of kind `NotFound` when there is none.
    fn read(&self, path: &Path) -> io::Result<String>;
}

/// No files: a program may import only the standard library.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoFiles;

impl Files for NoFiles {
    fn read(&self, _: &Path) -> io::Result<String> {
        Err(io::ErrorKind::NotFound.into())
    }
}

/// The file system, as `ampc` and `amprun` read the main file: at most
/// [`amp_ir::limits::MAX_SOURCE_BYTES`] per file, invalid UTF-8 replaced (the lexer
/// reports it).
#[derive(Clone, Copy, Debug, Default)]
pub struct DiskFiles;

impl Files for DiskFiles {
    fn read(&self, path: &Path) -> io::Result<String> {
        if path.is_dir() {
            // A folder named like the module is not the module (`mod.amp` inside it may be).
            return Err(io::ErrorKind::NotFound.into());
        }
        let bytes = amp_ir::limits::read_bounded(path, amp_ir::limits::MAX_SOURCE_BYTES)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }
}
