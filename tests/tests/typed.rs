//! What the checker hands to later stages, on the canonical examples: parameter tensors
//! with PyTorch-style names and concrete shapes, and the type of every binding.

use amp_sema::{check_source, Options};
use amp_tests::EXAMPLES;

fn params(name: &str, defines: &[(&str, i64)]) -> Vec<(String, Vec<i64>)> {
    let text = amp_tests::example(name).expect("example");
    let options = Options { defines: defines.iter().map(|(k, v)| (k.to_string(), *v)).collect() };
    let (_, checked) = check_source(name, text, &options);
    assert!(!checked.has_errors());
    let model = checked.program.models[0];
    checked.program.parameter_tensors(model).expect("all dims known").into_iter().map(|p| (p.name, p.shape)).collect()
}

#[test]
fn parameter_names_and_shapes_follow_pytorch() {
    let lr = params("list_reduce", &[]);
    assert_eq!(
        lr,
        vec![
            ("embed.weight".into(), vec![14, 128]),
            ("cell.weight".into(), vec![128, 256]),
            ("cell.bias".into(), vec![128]),
            ("head.weight".into(), vec![10, 128]),
            ("head.bias".into(), vec![10]),
        ]
    );
    let g = params("ggsnn", &[("hidden", 16)]);
    assert!(g.contains(&("msg.1.weight".into(), vec![16, 16])));
    assert!(g.contains(&("gru.ih.weight".into(), vec![48, 16])));
    assert!(g.contains(&("gru.hh.bias".into(), vec![48])));
    let m = params("moe", &[("experts", 4)]);
    assert!(m.contains(&("expert.3.l1.weight".into(), vec![256, 256])));
    assert!(!m.iter().any(|p| p.0.starts_with("expert.4.")));
    assert_eq!(m.len(), 2 + 4 * 4 + 2);
}

/// The type of every binding and parameter use, by line: a reviewer reads these to see
/// that shapes flow as the model intends.
#[test]
fn binding_types_of_the_examples() {
    for (name, text) in EXAMPLES {
        let (map, checked) = check_source(&format!("{name}.amp"), text, &Options::default());
        let file = map.get(amp_diagnostics::FileId(0)).expect("main file");
        let mut lines: Vec<(usize, usize, String)> = checked
            .program
            .references
            .iter()
            .filter(|r| r.use_span.file.0 == 0 && r.use_span == r.def_span)
            .map(|r| {
                let (l, c) = file.line_col(r.use_span.start as usize);
                (l + 1, c + 1, r.hover.clone())
            })
            .collect();
        lines.sort();
        lines.dedup();
        let listing: Vec<String> = lines.into_iter().map(|(l, c, h)| format!("{l:>3}:{c:<3} {h}")).collect();
        insta::with_settings!({ snapshot_path => "snapshots/typed", prepend_module_to_snapshot => false, omit_expression => true }, {
            insta::assert_snapshot!(format!("bindings_{name}"), format!("{text}\n---- bindings ----\n{}", listing.join("\n")));
        });
    }
}
