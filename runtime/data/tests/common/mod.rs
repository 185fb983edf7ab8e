//! Schemas of the canonical examples (built by hand; `example_schemas.rs` checks them
//! against what the compiler derives from `examples/*.amp`), the bundled data sets and SST
//! in the cache folder.

#![allow(dead_code)] // each test binary uses a part

use amp_ir::{DataTy, EnumSchema, FieldSchema, RecordSchema, Schema, VariantSchema};
use std::path::PathBuf;

pub fn field(name: &str, ty: DataTy) -> FieldSchema {
    FieldSchema { name: name.into(), ty }
}

pub fn seq(ty: DataTy) -> DataTy {
    DataTy::Seq(Box::new(ty))
}

/// `examples/tree_lstm.amp`: `record Sentence { tree: Tree, label: int }`.
pub fn tree_schema() -> Schema {
    Schema {
        records: vec![RecordSchema {
            name: "Sentence".into(),
            fields: vec![field("tree", DataTy::Enum(0)), field("label", DataTy::Int)],
        }],
        enums: vec![EnumSchema {
            name: "Tree".into(),
            variants: vec![
                VariantSchema {
                    name: "Leaf".into(),
                    fields: vec![field("word", DataTy::Int), field("label", DataTy::Int)],
                },
                VariantSchema {
                    name: "Node".into(),
                    fields: vec![
                        field("left", DataTy::Enum(0)),
                        field("right", DataTy::Enum(0)),
                        field("label", DataTy::Int),
                    ],
                },
            ],
        }],
        input: 0,
    }
}

/// `examples/mlp.amp`: `record Digit { pixels: f32[64], label: int }`.
pub fn digit_schema() -> Schema {
    Schema {
        records: vec![RecordSchema {
            name: "Digit".into(),
            fields: vec![field("pixels", DataTy::F32(vec![64])), field("label", DataTy::Int)],
        }],
        enums: Vec::new(),
        input: 0,
    }
}

/// `examples/ggsnn.amp`: `record Graph { nodes: [int], edges: [Edge], label: int }`.
pub fn graph_schema() -> Schema {
    Schema {
        records: vec![
            RecordSchema {
                name: "Graph".into(),
                fields: vec![
                    field("nodes", seq(DataTy::Int)),
                    field("edges", seq(DataTy::Record(1))),
                    field("label", DataTy::Int),
                ],
            },
            RecordSchema {
                name: "Edge".into(),
                fields: vec![field("src", DataTy::Int), field("dst", DataTy::Int), field("kind", DataTy::Int)],
            },
        ],
        enums: Vec::new(),
        input: 0,
    }
}

/// A schema with every kind of type: scalars, bools, tuples, matrices, a non-recursive
/// enum, and a tree inside a sequence.
pub fn mixed_schema() -> Schema {
    Schema {
        records: vec![
            RecordSchema {
                name: "Mixed".into(),
                fields: vec![
                    field("flag", DataTy::Bool),
                    field("scale", DataTy::F32(Vec::new())),
                    field("grid", DataTy::F32(vec![2, 3])),
                    field("pair", DataTy::Tuple(vec![DataTy::Int, DataTy::Bool])),
                    field("shape", DataTy::Enum(0)),
                    field("forest", seq(DataTy::Enum(1))),
                    field("points", seq(DataTy::Record(1))),
                ],
            },
            RecordSchema { name: "Point".into(), fields: vec![field("x", DataTy::Int), field("y", DataTy::Int)] },
        ],
        enums: vec![
            EnumSchema {
                name: "Shape".into(),
                variants: vec![
                    VariantSchema { name: "Empty".into(), fields: Vec::new() },
                    VariantSchema { name: "Square".into(), fields: vec![field("side", DataTy::Int)] },
                ],
            },
            EnumSchema {
                name: "Expr".into(),
                variants: vec![
                    VariantSchema { name: "Num".into(), fields: vec![field("value", DataTy::Int)] },
                    VariantSchema {
                        name: "Add".into(),
                        fields: vec![field("lhs", DataTy::Enum(1)), field("rhs", DataTy::Enum(1))],
                    },
                    VariantSchema {
                        name: "Neg".into(),
                        fields: vec![field("flag", DataTy::Bool), field("inner", DataTy::Enum(1))],
                    },
                ],
            },
        ],
        input: 0,
    }
}

/// The folder of a data set bundled in the repository (`data/digits`, `data/molecules`).
pub fn bundled(set: &amp_data::catalog::DataSet) -> PathBuf {
    let dir = set.dir(std::path::Path::new(""));
    assert!(dir.is_dir(), "{} is part of the repository", dir.display());
    dir
}

/// The cache folder's SST (`amprun data get sst`, which verified it), or `None` with the
/// skip reported: printed, and appended to the file `$AMP_SKIP_LOG` names (`.ci/run`
/// counts its lines).
pub fn cached_sst(test: &str) -> Option<PathBuf> {
    use amp_data::catalog::{file_of, SST};
    let missing = SST.splits.iter().find_map(|split| file_of(&SST, split, None).err());
    let Some(error) = missing else {
        return Some(SST.dir(&amp_data::catalog::cache_dir().ok()?));
    };
    skipped(test, &error.to_string());
    None
}

/// Reports a test that could not run here.
pub fn skipped(test: &str, reason: &str) {
    amp_tests::report_skip(&format!("amp-data {test}: {reason}"));
}

/// The workspace's `examples/` folder.
pub fn examples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

/// One molecule in SDF (3 atoms, 2 bonds) with its solubility class.
pub const PENTANE: &str = "n-pentane
     RDKit          2D

  3  2  0  0  0  0  0  0  0  0999 V2000
    0.2606    0.1503    0.0000 C   0  0  0  0  0  0  0  0  0  0  0  0
    1.3000    0.7500    0.0000 O   0  0  0  0  0  0  0  0  0  0  0  0
    2.6000    0.0000    0.0000 Xe  0  0  0  0  0  0  0  0  0  0  0  0
  1  2  2  0
  2  3  1  0
M  END
>  <SOL_classification>  (1) 
(B) medium

$$$$
";
