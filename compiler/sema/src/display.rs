//! How types and instances are written in diagnostics and hover.

use crate::shape::{shape_with_values, Dim};
use crate::typed::{Instance, Program, Ty};

pub(crate) fn ty_to_string(program: &Program, ty: &Ty) -> String {
    match ty {
        Ty::Int => "int".into(),
        Ty::Bool => "bool".into(),
        Ty::Tensor(shape) => shape_with_values(shape),
        Ty::Seq(t) => format!("[{}]", ty_to_string(program, t)),
        Ty::Tuple(ts) if ts.is_empty() => "()".into(),
        Ty::Tuple(ts) => {
            let parts: Vec<String> = ts.iter().map(|t| ty_to_string(program, t)).collect();
            format!("({})", parts.join(", "))
        }
        Ty::Record(id) => program.records.get(id.0 as usize).map_or("?".into(), |r| r.name.clone()),
        Ty::Enum(id) => program.enums.get(id.0 as usize).map_or("?".into(), |e| e.name.clone()),
        Ty::Instance(inst) => instance_to_string(program, inst),
        Ty::Error => "{unknown}".into(),
    }
}

fn dims(ds: &[&Dim]) -> String {
    ds.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")
}

pub(crate) fn instance_to_string(program: &Program, inst: &Instance) -> String {
    match inst {
        Instance::Linear { input, output } => format!("Linear({})", dims(&[input, output])),
        Instance::Embedding { count, dim } => format!("Embedding({})", dims(&[count, dim])),
        Instance::LayerNorm { dim } => format!("LayerNorm({})", dims(&[dim])),
        Instance::Layer { layer, args } => {
            let name = program.components.get(layer.0 as usize).map_or("?", |c| c.name.as_str());
            format!("{name}({})", dims(&args.iter().collect::<Vec<_>>()))
        }
        Instance::Array { elem, len } => format!("[{}; {len}]", instance_to_string(program, elem)),
    }
}
