//! Go-to-definition: from any resolved name (local, parameter, hyperparameter, `param`,
//! layer, record, field, enum variant, function) to the name in its declaration, in the
//! document or in a materialised standard module.

use super::{final_definition, reference_at};
use crate::convert::{location_of, offset_of};
use crate::documents::Document;
use crate::stdlib_files::StdlibFiles;
use amp_diagnostics::FileId;
use lsp_types::{Location, Position};

pub fn definition(document: &Document, stdlib: &StdlibFiles, position: Position) -> Option<Location> {
    let analysis = &document.analysis;
    let offset = offset_of(analysis.main_file()?, position);
    let reference = reference_at(analysis, offset)?;
    let target = final_definition(analysis.program(), reference);
    let uri_of = |file: FileId| document.uri_of(file, stdlib);
    location_of(&analysis.map, target, &uri_of)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handlers::test_support::position_at;

    use crate::handlers::test_support::example_document as open;

    #[test]
    fn a_local_goes_to_its_binding() {
        let doc = open("list_reduce.amp");
        let at_use = position_at(&doc.analysis, "head(h)", 0, 5);
        let location = definition(&doc, &StdlibFiles::none(), at_use).expect("h is bound");
        assert_eq!(location.uri, doc.uri);
        assert_eq!(location.range.start, position_at(&doc.analysis, "var h", 0, 4));
    }

    #[test]
    fn a_record_field_and_a_variant_go_to_their_declarations() {
        let doc = open("tree_lstm.amp");
        let at_field = position_at(&doc.analysis, "s.label", 0, 2);
        let field = definition(&doc, &StdlibFiles::none(), at_field).expect("a field");
        assert_eq!(field.range.start, position_at(&doc.analysis, "label: int }\n", 0, 0));
        let at_variant = position_at(&doc.analysis, "Leaf { word, .. }", 0, 1);
        let variant = definition(&doc, &StdlibFiles::none(), at_variant).expect("a variant");
        assert_eq!(variant.range.start, position_at(&doc.analysis, "Leaf {", 0, 0));
    }

    #[test]
    fn a_stdlib_layer_goes_through_the_import_to_the_materialised_file() {
        let temp = tempfile::tempdir().expect("temp dir");
        let stdlib = StdlibFiles::materialise(temp.path()).expect("temp dir is writable");
        let doc = open("ggsnn.amp");
        let nn = stdlib.uri_of("<std>/nn.amp").expect("materialised");
        for nth in 0..2 {
            // Both the `use std::nn::GruCell` and the `GruCell(hidden, hidden)` call.
            let at = position_at(&doc.analysis, "GruCell", nth, 1);
            let location = definition(&doc, &stdlib, at).expect("resolved");
            assert_eq!(location.uri, nn);
            let source = amp_stdlib::module(&["nn"]).map(|m| m.source).unwrap_or_default();
            let line = source.lines().nth(location.range.start.line as usize);
            assert!(line.is_some_and(|l| l.starts_with("layer GruCell")), "{line:?}");
        }
        // Without a materialised library there is nowhere to go, and no panic.
        let at = position_at(&doc.analysis, "GruCell", 1, 1);
        assert_eq!(definition(&doc, &StdlibFiles::none(), at), None);
    }
}
