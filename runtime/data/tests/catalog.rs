//! The data sets by name (`amp_data::catalog`): names resolve to the bundled files or the
//! cache folder's, wrong names say which exist, the bundled files are the published bytes,
//! and `ptb::count_trees` (what `amprun data get` checks every line with) refuses anything
//! but labelled trees, naming the line.

mod common;

use amp_data::catalog::{self, lookup, resolve, NameError, Origin, DIGITS, MOLECULES, SETS, SST};
use amp_data::ptb::count_trees;
use sha2::{Digest, Sha256};

#[test]
fn bundled_files_are_the_published_bytes() {
    for set in SETS.iter().filter(|s| s.origin == Origin::Bundled) {
        for split in set.splits {
            let path = common::bundled(set).join(split.file);
            let bytes = std::fs::read(&path).expect("bundled file");
            let digest: String = Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(digest, split.sha256, "{}", path.display());
        }
    }
}

#[test]
fn names_resolve_to_bundled_files_and_the_cache() {
    let cache = tempfile::tempdir().expect("scratch");
    let digits = resolve("digits", Some(cache.path())).expect("a name").expect("bundled");
    assert_eq!(digits, catalog::bundled_dir().join("digits").join("digits.csv"));
    let test = resolve("molecules:test", Some(cache.path())).expect("a name").expect("bundled");
    assert!(test.ends_with("data/molecules/solubility.test.sdf"), "{}", test.display());

    // SST is looked up in the cache folder given, and named as missing until it is there.
    let missing = resolve("sst:dev", Some(cache.path())).expect("a name").expect_err("not downloaded");
    assert!(matches!(&missing, NameError::NotDownloaded { path, .. } if path == &cache.path().join("sst/dev.txt")));
    assert!(missing.to_string().contains("`amprun data get sst`"), "{missing}");
    std::fs::create_dir(cache.path().join("sst")).expect("folder");
    std::fs::write(cache.path().join("sst/dev.txt"), "(2 (2 a) (2 b))\n").expect("file");
    assert_eq!(resolve("sst:dev", Some(cache.path())).expect("a name"), Ok(cache.path().join("sst/dev.txt")));

    // Paths are not names; wrong splits and a set of several files without one are errors.
    for path in ["train.txt", "data/digits/digits.csv", "./digits", "sst.txt", "C:/data/x.txt"] {
        assert!(lookup(path).is_none(), "{path}");
    }
    let no_split = lookup("molecules:valid").expect("a set").expect_err("no such split");
    assert_eq!(
        no_split.to_string(),
        "the data set `molecules` has no split `valid`: its names are molecules:train, molecules:test"
    );
    let several = lookup("sst").expect("a set").expect_err("several files");
    assert_eq!(several.to_string(), "the data set `sst` has several files: name one of sst:train, sst:dev, sst:test");
    assert!(lookup("digits:train").expect("a set").is_err());
    assert_eq!(lookup("digits"), Some(Ok((DIGITS, DIGITS.splits[0]))));
    assert_eq!(lookup("molecules:train"), Some(Ok((MOLECULES, MOLECULES.splits[0]))));
    assert_eq!(lookup("sst:test"), Some(Ok((SST, SST.splits[2]))));
}

#[test]
fn every_line_must_be_a_labelled_tree() {
    assert_eq!(count_trees(b"(3 (2 a) (4 b))\n(1 (1 c) (0 d))\n", "t.txt"), Ok(2));
    assert_eq!(count_trees(b"(3 (2 a) (4 b))", "t.txt"), Ok(1));
    assert_eq!(count_trees(b"", "t.txt"), Ok(0));
    let cases: [(&[u8], &str); 5] = [
        (b"(3 (2 a) (4 b))\n\n(1 (1 c) (0 d))\n", "t.txt:2: a blank line, not a tree"),
        (b"(3 (2 a) (4 b))\n(x (1 c) (0 d))\n", "t.txt:2: expected a label (an int), found `x` at column 1"),
        (b"(3 (2 a) (4 b)\n", "t.txt:1: unbalanced brackets: 1 `(` not closed"),
        (b"a b c\n", "t.txt:1: a word outside brackets at column 1"),
        (b"(3 (2 a) (4 b))\n(1 \xff)\n", "t.txt:2: the line is not UTF-8 (byte 4)"),
    ];
    for (text, expected) in cases {
        assert_eq!(count_trees(text, "t.txt").map_err(|e| e.to_string()), Err(expected.to_string()));
    }
}

#[test]
fn the_cache_folder_is_amp_data_when_set() {
    // Read-only check of the rule on this process's environment: AMP_DATA wins when set.
    match std::env::var_os(catalog::CACHE_ENV).filter(|v| !v.is_empty()) {
        Some(dir) => assert_eq!(catalog::cache_dir(), Ok(std::path::PathBuf::from(dir))),
        None => {
            if let Ok(dir) = catalog::cache_dir() {
                assert!(dir.ends_with("amp"), "{}", dir.display());
            }
        }
    }
}
