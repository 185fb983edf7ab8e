//! Imports across files, with the files in memory: hostile layouts (deep chains, cycles
//! of every length, files importing each other at random) end with diagnostics, never a
//! panic or an endless load, and every file is read and checked at most once.

use amp_diagnostics::{Code, SourceMap};
use amp_sema::{check_program, Checked, Files, Options, MAX_IMPORT_DEPTH};
use proptest::prelude::*;
use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Files in memory, counting the reads of each.
#[derive(Default)]
struct Memory {
    files: HashMap<PathBuf, String>,
    reads: RefCell<HashMap<PathBuf, usize>>,
}

impl Files for Memory {
    fn read(&self, path: &Path) -> std::io::Result<String> {
        *self.reads.borrow_mut().entry(path.to_path_buf()).or_default() += 1;
        self.files.get(path).cloned().ok_or_else(|| std::io::ErrorKind::NotFound.into())
    }
}

fn check(main: &str, files: &Memory) -> (SourceMap, Checked) {
    let mut map = SourceMap::new();
    let id = map.add("main.amp", main);
    let checked = check_program(&mut map, id, &Options::default(), files);
    (map, checked)
}

fn codes(checked: &Checked) -> Vec<Code> {
    checked.diagnostics.iter().map(|d| d.code).collect()
}

/// `m{i}.amp` defines `pub const C{i}` from the next file's constant.
fn chain(len: usize) -> Memory {
    let mut files = Memory::default();
    for i in 0..len {
        let text = if i + 1 < len {
            format!("use m{}::C{};\npub const C{i}: int = C{} + 1;\n", i + 1, i + 1, i + 1)
        } else {
            format!("pub const C{i}: int = 1;\n")
        };
        files.files.insert(PathBuf::from(format!("m{i}.amp")), text);
    }
    files
}

#[test]
fn a_chain_of_imports_evaluates_its_constants_in_order() {
    let files = chain(10);
    let (_, checked) = check("use m0::C0;\nconst TOP: int = C0 * 2;\n", &files);
    assert_eq!(codes(&checked), Vec::<Code>::new());
}

#[test]
fn a_chain_deeper_than_the_limit_is_refused_where_it_gets_too_deep() {
    let files = chain(MAX_IMPORT_DEPTH * 3);
    let (map, checked) = check("use m0::C0;\nconst TOP: int = C0;\n", &files);
    let deep: Vec<_> = checked.diagnostics.iter().filter(|d| d.message.contains("imported too deeply")).collect();
    assert_eq!(deep.len(), 1, "{:?}", checked.diagnostics);
    // Counting main, the limit's worth of files is loaded and no more.
    assert_eq!(
        map.get(deep[0].span.file).map(|f| f.name.as_str()),
        Some(format!("m{}.amp", MAX_IMPORT_DEPTH - 2).as_str())
    );
    assert!(files.reads.borrow().len() <= MAX_IMPORT_DEPTH + 1);
    // The constants that could not be computed are not reported again at every use.
    assert_eq!(codes(&checked), vec![Code::UnknownImport]);
}

#[test]
fn a_file_imported_by_many_is_read_once() {
    let mut files = Memory::default();
    files.files.insert("common.amp".into(), "pub const K: int = 3;\n".into());
    let mut main = String::new();
    for i in 0..20 {
        files.files.insert(format!("user{i}.amp").into(), format!("use common::K;\npub const U{i}: int = K + {i};\n"));
        main.push_str(&format!("use user{i}::U{i};\nconst V{i}: int = U{i};\n"));
    }
    let (map, checked) = check(&main, &files);
    assert_eq!(codes(&checked), Vec::<Code>::new());
    assert_eq!(files.reads.borrow().get(Path::new("common.amp")), Some(&1));
    assert_eq!(map.files().filter(|(_, f)| f.name == "common.amp").count(), 1);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Up to 8 files, each importing up to 4 of the others (itself and `main` included)
    /// and defining a constant from what it imports: the check ends, each file is read at
    /// most once, and a cycle is reported exactly where an import closes one.
    #[test]
    fn random_import_graphs_end_and_read_each_file_once(
        edges in proptest::collection::vec(proptest::collection::vec(0usize..9, 0..4), 1..8),
    ) {
        let n = edges.len();
        let name = |j: usize| if j == n { "main".to_string() } else { format!("f{}", j % n) };
        let mut files = Memory::default();
        let text = |i: usize, targets: &[usize]| {
            let mut text = String::new();
            let mut sum = String::from("1");
            for &t in targets {
                text.push_str(&format!("use {}::C{};\n", name(t.min(n)), t.min(n)));
                sum.push_str(&format!(" + C{}", t.min(n)));
            }
            text.push_str(&format!("pub const C{i}: int = {sum};\n"));
            text
        };
        for (i, targets) in edges.iter().enumerate() {
            files.files.insert(format!("f{i}.amp").into(), text(i, targets));
        }
        let main = text(n, &edges[0]);
        let (_, checked) = check(&main, &files);
        for (path, count) in files.reads.borrow().iter() {
            prop_assert!(*count <= 1, "{} read {count} times", path.display());
        }
        // Internal errors would show as other codes: only these may appear.
        for d in &checked.diagnostics {
            prop_assert!(
                matches!(d.code, Code::ImportCycle | Code::UnusedImport | Code::DuplicateDefinition | Code::UnknownImport),
                "{d:?}"
            );
        }
    }
}
