//! The fixes diagnostics carry are right: applied to the source, the mistake is gone and
//! no new error appears.

use amp_diagnostics::Code;
use amp_sema::{check_source, Options};

/// `text` with the fix of its first `code` diagnostic applied.
fn fixed(text: &str, code: Code) -> String {
    let (_, checked) = check_source("m.amp", text, &Options::default());
    let d = checked.diagnostics.iter().find(|d| d.code == code).unwrap_or_else(|| panic!("{code}: {checked:?}"));
    let replacement = d.replacement.as_deref().unwrap_or_else(|| panic!("a fix: {d:?}"));
    let at = d.replacement_span.unwrap_or(d.span);
    let mut out = text.to_string();
    out.replace_range(at.range(), replacement);
    out
}

/// No errors (a case may leave a `param` unused, a warning).
fn clean(text: &str) {
    let (_, checked) = check_source("m.amp", text, &Options::default());
    assert!(!checked.has_errors(), "{text}\n{:?}", checked.diagnostics);
}

const TREE: &str = "enum Tree {\n    Leaf { word: int },\n    Pair { left: Tree, right: Tree },\n    Empty,\n}\nrecord S { tree: Tree, label: int }\n";

fn model(encode: &str) -> String {
    format!(
        "{TREE}model M {{\n    param emb = Embedding(10, 4);\n    param head = Linear(4, 2);\n{encode}\n    \
         fn forward(s: S) -> f32[2] {{ head(encode(s.tree)) }}\n    \
         fn loss(s: S) -> f32 {{ cross_entropy(forward(s), s.label) }}\n}}\n"
    )
}

/// Arms written with and without a last comma, with a block last, and a tuple type: the
/// missing arms are added after the last, and the file then checks cleanly.
#[test]
fn missing_match_arms_are_filled_in() {
    let cases = [
        "    fn encode(t: Tree) -> f32[4] {\n        match t {\n            Leaf { word } => emb(word),\n        }\n    }",
        "    fn encode(t: Tree) -> f32[4] {\n        match t {\n            Leaf { word } => emb(word)\n        }\n    }",
        "    fn encode(t: Tree) -> f32[4] {\n        match t {\n            Pair { left, right } => {\n                encode(left) + encode(right)\n            }\n        }\n    }",
        "    fn encode(t: Tree) -> f32[4] { let (a, _) = pair(t); a }\n    fn pair(t: Tree) -> (f32[4], int) {\n        match t {\n            Empty => (zeros(), 1),\n        }\n    }",
    ];
    for encode in cases {
        let text = model(encode);
        let after = fixed(&text, Code::NonExhaustiveMatch);
        clean(&after);
        // One arm per variant, the new ones with a placeholder value.
        let arms = after.lines().filter(|l| l.contains(" => ")).count();
        assert_eq!(arms, 3, "{after}");
        assert!(after.contains("{ .. } => ") || after.contains("Empty => "), "{after}");
    }
}
