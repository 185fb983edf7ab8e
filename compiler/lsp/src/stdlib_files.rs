//! The standard library on disk, so that a definition in `std::nn` has a URI to go to.
//!
//! The checker reads the standard modules from `amp_stdlib::MODULES` and names them
//! `<std>/nn.amp`, which no editor can open. At start-up the server writes each module
//! once under `temp_dir()/amp-stdlib/<version>-<hash>/` (the hash of the sources, so two
//! builds of the same version with different libraries never share a folder) and maps
//! `<std>/nn.amp` to that file's URI. If the folder cannot be written, locations in the
//! standard library are left out and everything else works.

use crate::convert::file_uri;
use lsp_types::Uri;
use std::io;
use std::path::{Path, PathBuf};

/// The URI of each materialised standard module, by its display name in the SourceMap.
#[derive(Clone, Debug, Default)]
pub struct StdlibFiles {
    uris: Vec<(&'static str, Uri)>,
}

impl StdlibFiles {
    /// No files: standard-library locations are left out.
    pub fn none() -> StdlibFiles {
        StdlibFiles::default()
    }

    /// The cache folder for this build's standard library.
    pub fn default_dir() -> PathBuf {
        std::env::temp_dir().join("amp-stdlib").join(format!("{}-{:016x}", env!("CARGO_PKG_VERSION"), sources_hash()))
    }

    /// Writes every standard module under `dir` (unless an identical copy is already
    /// there) and remembers their URIs.
    pub fn materialise(dir: &Path) -> io::Result<StdlibFiles> {
        let mut uris = Vec::new();
        for module in amp_stdlib::MODULES {
            let mut path = dir.to_path_buf();
            for segment in module.path {
                path.push(segment);
            }
            path.set_extension("amp");
            write_once(&path, module.source)?;
            if let Some(uri) = file_uri(&path) {
                uris.push((module.file_name, uri));
            }
        }
        Ok(StdlibFiles { uris })
    }

    /// The URI of the module the SourceMap calls `file_name` (e.g. `<std>/nn.amp`).
    pub fn uri_of(&self, file_name: &str) -> Option<Uri> {
        self.uris.iter().find(|(name, _)| *name == file_name).map(|(_, uri)| uri.clone())
    }
}

/// FNV-1a over every module's path and text: stable across runs and Rust versions.
fn sources_hash() -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for module in amp_stdlib::MODULES {
        for byte in module.file_name.bytes().chain(module.source.bytes()) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    hash
}

/// Writes `contents` to `path` unless the file already holds exactly that. Writes to a
/// temporary name first and renames, so two servers starting at once never see half a
/// file.
fn write_once(path: &Path, contents: &str) -> io::Result<()> {
    if std::fs::read(path).is_ok_and(|existing| existing == contents.as_bytes()) {
        return Ok(());
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let temporary = path.with_extension(format!("amp.{}.tmp", std::process::id()));
    std::fs::write(&temporary, contents)?;
    std::fs::rename(&temporary, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn materialises_each_module_once_and_maps_its_name() {
        let temp = tempfile::tempdir().expect("temp dir");
        let dir = temp.path().join("stdlib");
        let files = StdlibFiles::materialise(&dir).expect("temp dir is writable");
        let uri = files.uri_of("<std>/nn.amp").expect("nn is a standard module");
        assert!(uri.as_str().starts_with("file:///"));
        assert!(uri.as_str().ends_with("/nn.amp"));
        let written = std::fs::read_to_string(dir.join("nn.amp")).expect("written");
        assert_eq!(Some(written.as_str()), amp_stdlib::module(&["nn"]).map(|m| m.source));
        // A second start finds the file in place and leaves it alone.
        let again = StdlibFiles::materialise(&dir).expect("still writable");
        assert_eq!(again.uri_of("<std>/nn.amp"), Some(uri));
        assert_eq!(files.uri_of("<std>/missing.amp"), None);
    }
}
