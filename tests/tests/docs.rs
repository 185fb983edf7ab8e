//! Every diagnostic code has its documentation page, titled as in the code table, and
//! listed in the index.

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
