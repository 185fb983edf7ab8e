//! Run-time values of the evaluator, and the conversion of instance data into them.

use crate::error::ErrorKind;
use crate::params::{dim_value, Bound};
use crate::tape::{NodeId, Tape};
use amp_data::Value;
use amp_sema::{Program, Ty};
use std::rc::Rc;

/// Instance data may nest at most this deep (a tree of this depth).
pub(crate) const MAX_DATA_DEPTH: usize = 10_000;

/// A value during evaluation. Tensors live on the tape; compound values share their parts
/// (`Rc`) so that reading a local is cheap.
#[derive(Clone, Debug)]
pub(crate) enum Val<'r> {
    Int(i64),
    Bool(bool),
    Tensor(NodeId),
    Seq(Rc<[Val<'r>]>),
    /// Tuples; the empty tuple is the unit value.
    Tuple(Rc<[Val<'r>]>),
    Record(Rc<[Val<'r>]>),
    Variant(u32, Rc<[Val<'r>]>),
    /// A `param` instance (or an element of a parameter array).
    Instance(&'r Bound),
}

impl<'r> Val<'r> {
    pub(crate) fn unit() -> Val<'r> {
        Val::Tuple(Rc::from(Vec::new()))
    }

    /// What kind of value this is, for error messages.
    pub(crate) fn kind_name(&self) -> &'static str {
        match self {
            Val::Int(_) => "an int",
            Val::Bool(_) => "a bool",
            Val::Tensor(_) => "a tensor",
            Val::Seq(_) => "a sequence",
            Val::Tuple(_) => "a tuple",
            Val::Record(_) => "a record",
            Val::Variant(..) => "an enum value",
            Val::Instance(_) => "a parameter instance",
        }
    }

    pub(crate) fn int(&self) -> Result<i64, ErrorKind> {
        match self {
            Val::Int(v) => Ok(*v),
            other => Err(ErrorKind::Type { expected: "an int", found: other.kind_name() }),
        }
    }

    pub(crate) fn bool(&self) -> Result<bool, ErrorKind> {
        match self {
            Val::Bool(v) => Ok(*v),
            other => Err(ErrorKind::Type { expected: "a bool", found: other.kind_name() }),
        }
    }

    pub(crate) fn tensor(&self) -> Result<NodeId, ErrorKind> {
        match self {
            Val::Tensor(id) => Ok(*id),
            other => Err(ErrorKind::Type { expected: "a tensor", found: other.kind_name() }),
        }
    }

    pub(crate) fn seq(&self) -> Result<&Rc<[Val<'r>]>, ErrorKind> {
        match self {
            Val::Seq(items) => Ok(items),
            other => Err(ErrorKind::Type { expected: "a sequence", found: other.kind_name() }),
        }
    }
}

fn data_kind(v: &Value) -> &'static str {
    match v {
        Value::Int(_) => "an int",
        Value::Bool(_) => "a bool",
        Value::Tensor(_) => "a tensor",
        Value::Seq(_) => "a sequence",
        Value::Tuple(_) => "a tuple",
        Value::Record(_) => "a record",
        Value::Variant { .. } => "an enum variant",
    }
}

/// A bad-input error at the current position (the path is filled in on the way out).
fn bad(problem: String) -> ErrorKind {
    ErrorKind::BadInput { path: String::new(), problem }
}

/// Puts `segment` in front of the path of a bad-input error.
fn within(err: ErrorKind, segment: &str) -> ErrorKind {
    match err {
        ErrorKind::BadInput { path, problem } => {
            let path = match (path.is_empty(), path.starts_with('[')) {
                (true, _) => segment.to_string(),
                (false, true) => format!("{segment}{path}"),
                (false, false) => format!("{segment}.{path}"),
            };
            ErrorKind::BadInput { path, problem }
        }
        other => other,
    }
}

/// Converts instance data of type `ty` into a value, putting its tensors on the tape.
/// Everything is checked against the type: kinds, record and variant arity, variant tags
/// and tensor shapes; the error names the path to the offending part.
pub(crate) fn from_data<'r>(
    program: &Program,
    tape: &mut Tape,
    value: &Value,
    ty: &Ty,
    depth: usize,
) -> Result<Val<'r>, ErrorKind> {
    if depth > MAX_DATA_DEPTH {
        return Err(bad(format!("nested deeper than {MAX_DATA_DEPTH} levels")));
    }
    let mismatch = |expected: &str| bad(format!("expected {expected}, found {}", data_kind(value)));
    let fields = |values: &[Value], defs: &[amp_sema::FieldDef], tape: &mut Tape| {
        if values.len() != defs.len() {
            return Err(bad(format!("{} fields given, {} expected", values.len(), defs.len())));
        }
        values
            .iter()
            .zip(defs)
            .map(|(v, f)| from_data(program, tape, v, &f.ty, depth + 1).map_err(|e| within(e, &f.name)))
            .collect::<Result<Vec<_>, _>>()
    };
    match (ty, value) {
        (Ty::Int, Value::Int(v)) => Ok(Val::Int(*v)),
        (Ty::Bool, Value::Bool(v)) => Ok(Val::Bool(*v)),
        (Ty::Tensor(dims), Value::Tensor(t)) => {
            let shape = dims
                .iter()
                .map(|d| dim_value(d, &[]).and_then(|v| usize::try_from(v).ok()))
                .collect::<Option<Vec<usize>>>()
                .ok_or_else(|| bad("the input type has a dimension without a value".into()))?;
            if t.shape != shape {
                return Err(bad(format!("expected a tensor of shape {shape:?}, found shape {:?}", t.shape)));
            }
            tape.leaf(t.shape.clone(), t.data.clone()).map_err(|e| bad(e.to_string())).map(Val::Tensor)
        }
        (Ty::Seq(elem), Value::Seq(items)) => {
            let vals = items
                .iter()
                .enumerate()
                .map(|(i, v)| from_data(program, tape, v, elem, depth + 1).map_err(|e| within(e, &format!("[{i}]"))))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Val::Seq(vals.into()))
        }
        (Ty::Tuple(tys), Value::Tuple(items)) => {
            if tys.len() != items.len() {
                return Err(bad(format!("a tuple of {} values, {} expected", items.len(), tys.len())));
            }
            let vals = items
                .iter()
                .zip(tys)
                .enumerate()
                .map(|(i, (v, t))| from_data(program, tape, v, t, depth + 1).map_err(|e| within(e, &i.to_string())))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Val::Tuple(vals.into()))
        }
        (Ty::Record(id), Value::Record(values)) => {
            let def = program.records.get(id.0 as usize).ok_or_else(|| bad("unknown record type".into()))?;
            Ok(Val::Record(fields(values, &def.fields, tape)?.into()))
        }
        (Ty::Enum(id), Value::Variant { tag, fields: values }) => {
            let def = program.enums.get(id.0 as usize).ok_or_else(|| bad("unknown enum type".into()))?;
            let variant = def.variants.get(*tag as usize).ok_or_else(|| {
                bad(format!("variant tag {tag} is out of range: `{}` has {} variants", def.name, def.variants.len()))
            })?;
            let vals = fields(values, &variant.fields, tape).map_err(|e| within(e, &variant.name))?;
            Ok(Val::Variant(*tag, vals.into()))
        }
        (Ty::Int, _) => Err(mismatch("an int")),
        (Ty::Bool, _) => Err(mismatch("a bool")),
        (Ty::Tensor(_), _) => Err(mismatch("a tensor")),
        (Ty::Seq(_), _) => Err(mismatch("a sequence")),
        (Ty::Tuple(_), _) => Err(mismatch("a tuple")),
        (Ty::Record(_), _) => Err(mismatch("a record")),
        (Ty::Enum(_), _) => Err(mismatch("an enum variant")),
        (Ty::Instance(_) | Ty::Error, _) => Err(bad("this input type cannot come from data".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_input_paths_are_built_from_the_inside_out() {
        let err = within(within(within(bad("no".into()), "word"), "[2]"), "tokens");
        assert_eq!(err, ErrorKind::BadInput { path: "tokens[2].word".into(), problem: "no".into() });
        assert_eq!(within(ErrorKind::Overflow, "x"), ErrorKind::Overflow);
    }
}
