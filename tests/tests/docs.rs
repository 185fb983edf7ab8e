//! Every diagnostic code has its documentation page, titled as in the code table, and
//! listed in the index; `docs/amprun.md` is `amprun`'s crate documentation.

use amp_diagnostics::Code;
use std::path::Path;

#[test]
fn every_code_has_a_page_and_an_index_entry() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/errors");
    let index = std::fs::read_to_string(dir.join("README.md")).expect("docs/errors/README.md");
    let mut missing = Vec::new();
    for code in Code::ALL {
        let page = dir.join(format!("{code}.md"));
        match std::fs::read_to_string(&page) {
            Ok(text) => {
                let heading = format!("# {code}: {}", code.title());
                if text.lines().next() != Some(heading.as_str()) {
                    missing.push(format!("{code}: first line should be `{heading}`"));
                }
            }
            Err(_) => missing.push(format!("{code}: no page {}", page.display())),
        }
        if !index.contains(&format!("[{code}]({code}.md)")) {
            missing.push(format!("{code}: not in docs/errors/README.md"));
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

#[test]
fn codes_are_unique_and_parse_back() {
    let mut seen = std::collections::HashSet::new();
    for code in Code::ALL {
        assert!(seen.insert(code.as_str()), "{code} is listed twice");
        assert_eq!(Code::parse(code.as_str()), Some(*code));
        let prefix = if code.severity() == amp_diagnostics::Severity::Error { 'E' } else { 'W' };
        assert!(code.as_str().starts_with(prefix), "{code} has the wrong letter for its severity");
    }
}

/// `docs/amprun.md` says it is the crate documentation of `runtime/amprun/src/main.rs`:
/// after its title and first paragraph, line for line.
#[test]
fn the_amprun_page_is_the_crate_documentation() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let page = std::fs::read_to_string(root.join("docs/amprun.md")).expect("docs/amprun.md");
    let main = std::fs::read_to_string(root.join("runtime/amprun/src/main.rs")).expect("amprun's main.rs");
    let doc: Vec<&str> =
        main.lines().map_while(|l| l.strip_prefix("//!")).map(|l| l.strip_prefix(' ').unwrap_or(l)).collect();
    let body: Vec<&str> = page.lines().skip(4).collect();
    let body = &body[..body.iter().rposition(|l| !l.is_empty()).map_or(0, |i| i + 1)];
    for (i, (d, b)) in doc.iter().zip(body).enumerate() {
        assert_eq!(d, b, "line {} of docs/amprun.md differs from main.rs's documentation", i + 5);
    }
    assert_eq!(doc.len(), body.len(), "docs/amprun.md and main.rs's documentation differ in length");
}
