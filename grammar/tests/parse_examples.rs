//! The canonical examples parse without any diagnostic.

use amp_grammar::{parse, FileId};

#[test]
fn canonical_examples_parse_cleanly() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples");
    let mut seen = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "amp") {
            let text = std::fs::read_to_string(&path).unwrap();
            let parsed = parse(FileId(0), &text);
            assert!(parsed.diagnostics.is_empty(), "{}: {:#?}", path.display(), parsed.diagnostics);
            assert!(!parsed.ast.items.is_empty());
            seen += 1;
        }
    }
    assert!(seen >= 5);
}
