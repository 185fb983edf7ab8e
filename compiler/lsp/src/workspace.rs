//! The open documents and the projects they belong to.
//!
//! A document is checked with the modules it imports, read from the other open documents
//! first (their unsaved text) and from the disk otherwise. When a document changes, the
//! open documents that import it are checked again. A project is every `.amp` file under
//! a root: the nearest folder above the document with an `amp.toml` (whatever it holds),
//! else the client's workspace folder that holds it, else the document's own folder.
//! References, rename and workspace symbols check every file of the project, each as the
//! main file, at the time of the request.

use crate::documents::{name_of, Analysis, Document};
use amp_sema::{DiskFiles, Files};
use lsp_types::{TextDocumentContentChangeEvent, Uri};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The most `.amp` files a project may have, and how deep its folders are searched: a
/// request on a document under `/` must not read the whole disk.
pub const MAX_PROJECT_FILES: usize = 2000;
const MAX_PROJECT_DEPTH: usize = 12;

/// The name of the file that marks a project's root folder.
pub const PROJECT_MARKER: &str = "amp.toml";

#[derive(Debug, Default)]
pub struct Workspace {
    documents: HashMap<Uri, Document>,
    /// The client's workspace folders (`initialize`), each a project root.
    pub roots: Vec<PathBuf>,
}

/// The open documents by path, with the disk behind them.
struct OpenFiles<'w>(&'w HashMap<Uri, Document>);

/// The open document an analysis calls `name`.
fn named<'d>(mut documents: impl Iterator<Item = &'d Document>, name: &str) -> Option<&'d Document> {
    documents.find(|d| d.name() == name)
}

impl Files for OpenFiles<'_> {
    fn read(&self, path: &Path) -> std::io::Result<String> {
        match named(self.0.values(), &path.display().to_string()) {
            Some(document) => Ok(document.text.clone()),
            None => DiskFiles.read(path),
        }
    }
}

impl Workspace {
    pub fn get(&self, uri: &Uri) -> Option<&Document> {
        self.documents.get(uri)
    }

    pub fn open(&mut self, uri: Uri, version: i32, text: String) {
        let document = Document::open(uri.clone(), version, text, &OpenFiles(&self.documents));
        self.documents.insert(uri, document);
    }

    /// Applies one `didChange` (see [`Document::change`]); a `superseded` one only changes
    /// the text. `None` when the document is not open.
    pub fn change(
        &mut self,
        uri: &Uri,
        version: i32,
        changes: Vec<TextDocumentContentChangeEvent>,
        superseded: bool,
    ) -> Option<Result<(), String>> {
        let mut document = self.documents.remove(uri)?;
        let applied = if superseded {
            document.change_text(version, changes)
        } else {
            document.change(version, changes, &OpenFiles(&self.documents))
        };
        self.documents.insert(uri.clone(), document);
        Some(applied)
    }

    /// A save that carries the text; `false` when the document is not open.
    pub fn save(&mut self, uri: &Uri, text: Option<String>) -> bool {
        let Some(mut document) = self.documents.remove(uri) else {
            return false;
        };
        if let Some(text) = text.filter(|text| *text != document.text) {
            document.replace_text(text, &OpenFiles(&self.documents));
        }
        self.documents.insert(uri.clone(), document);
        true
    }

    pub fn close(&mut self, uri: &Uri) {
        self.documents.remove(uri);
    }

    /// Re-checks the open documents that import `uri` (it changed, opened or closed) and
    /// returns them: their diagnostics are to be published again.
    pub fn recheck_importers(&mut self, uri: &Uri) -> Vec<Uri> {
        let name = name_of(uri);
        let importers: Vec<Uri> = self
            .documents
            .values()
            .filter(|d| d.uri != *uri && d.analysis.reads(&name))
            .map(|d| d.uri.clone())
            .collect();
        for importer in &importers {
            if let Some(mut document) = self.documents.remove(importer) {
                document.recheck(&OpenFiles(&self.documents));
                self.documents.insert(importer.clone(), document);
            }
        }
        importers
    }

    /// The root folder of the project of the file at `path` (see the module's documentation).
    pub fn project_root(&self, path: &Path) -> PathBuf {
        let folder = path.parent().unwrap_or(Path::new("/"));
        if let Some(marked) = folder.ancestors().find(|dir| dir.join(PROJECT_MARKER).is_file()) {
            return marked.to_path_buf();
        }
        let workspace =
            self.roots.iter().filter(|root| folder.starts_with(root)).max_by_key(|root| root.as_os_str().len());
        workspace.cloned().unwrap_or_else(|| folder.to_path_buf())
    }

    /// Calls `f` with the analysis of every file of `uri`'s project (just the document's
    /// own when it is not a file): the open documents' cached ones, the others' made now.
    pub fn with_project<T>(&self, uri: &Uri, f: impl FnOnce(&[&Analysis]) -> T) -> Option<T> {
        let document = self.documents.get(uri)?;
        let Some(path) = crate::convert::file_path(uri) else {
            return Some(f(&[&document.analysis]));
        };
        let root = self.project_root(&path);
        Some(self.with_files(&project_files(&root), Some(document), f))
    }

    /// Calls `f` with the analysis of every file of every workspace folder (without any,
    /// of the open documents' projects), and of every open document.
    pub fn with_everything<T>(&self, f: impl FnOnce(&[&Analysis]) -> T) -> T {
        let mut roots = self.roots.clone();
        if roots.is_empty() {
            let paths = self.documents.keys().filter_map(crate::convert::file_path);
            roots = paths.map(|path| self.project_root(&path)).collect();
            roots.sort();
            roots.dedup();
        }
        let mut paths: Vec<PathBuf> = roots.iter().flat_map(|root| project_files(root)).collect();
        paths.sort();
        paths.dedup();
        paths.truncate(MAX_PROJECT_FILES);
        self.with_files(&paths, None, f)
    }

    fn with_files<T>(&self, paths: &[PathBuf], first: Option<&Document>, f: impl FnOnce(&[&Analysis]) -> T) -> T {
        let files = OpenFiles(&self.documents);
        let open: std::collections::HashSet<&str> = self.documents.values().map(Document::name).collect();
        let unopened: Vec<Analysis> = paths
            .iter()
            .filter(|p| !open.contains(p.display().to_string().as_str()))
            .filter_map(|p| Some(Analysis::of(&p.display().to_string(), &files.read(p).ok()?, &files)))
            .collect();
        let mut all: Vec<&Analysis> = first.map(|d| &d.analysis).into_iter().collect();
        let others = self.documents.values().filter(|d| first.is_none_or(|f| f.uri != d.uri)).map(|d| &d.analysis);
        all.extend(others);
        all.extend(unopened.iter());
        f(&all)
    }

    /// The URI of the file an analysis names `name`: an open document's own URI, else the
    /// file's (see [`crate::documents::uri_of_name`]).
    pub fn uri_of_name(&self, name: &str, stdlib: &crate::stdlib_files::StdlibFiles) -> Option<Uri> {
        match named(self.documents.values(), name) {
            Some(document) => Some(document.uri.clone()),
            None => crate::documents::uri_of_name(name, stdlib),
        }
    }
}

/// The client's workspace folders from `initialize`'s parameters (`workspaceFolders`,
/// else `rootUri`), those that are local folders.
pub fn roots(params: &serde_json::Value) -> Vec<PathBuf> {
    let folders = params["workspaceFolders"].as_array().into_iter().flatten().map(|f| &f["uri"]);
    let uris: Vec<&serde_json::Value> = folders.chain(std::iter::once(&params["rootUri"])).collect();
    let mut roots: Vec<PathBuf> = uris
        .into_iter()
        .filter_map(|uri| uri.as_str()?.parse::<Uri>().ok())
        .filter_map(|uri| crate::convert::file_path(&uri))
        .collect();
    roots.dedup();
    roots
}

/// Every `.amp` file under `root`, sorted: hidden folders and `target` are skipped, at most
/// [`MAX_PROJECT_FILES`] files, [`MAX_PROJECT_DEPTH`] folders deep, symbolic links not
/// followed.
pub fn project_files(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut folders = vec![(root.to_path_buf(), 0)];
    while let Some((folder, depth)) = folders.pop() {
        let Ok(entries) = std::fs::read_dir(&folder) else { continue };
        for entry in entries.flatten() {
            let (path, Ok(kind)) = (entry.path(), entry.file_type()) else { continue };
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if kind.is_dir() && depth < MAX_PROJECT_DEPTH && !name.starts_with('.') && name != "target" {
                folders.push((path, depth + 1));
            } else if kind.is_file() && name.ends_with(".amp") {
                found.push(path);
                if found.len() >= MAX_PROJECT_FILES {
                    found.sort();
                    return found;
                }
            }
        }
    }
    found.sort();
    found
}
