//! The state language: message state fields, the int expressions over a state and an
//! instance's data, and their evaluator.

use serde::{Deserialize, Serialize};

/// Index of a field of the message state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct FieldId(pub u16);

/// What a state field means; used for keys, documentation and the runtime's trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum FieldRole {
    /// Which instance a message belongs to; always field 0.
    Instance,
    /// A loop counter.
    Counter,
    /// An int read from the instance or computed from ints (a token, a label, a bound).
    Data,
    /// The index of a collection element.
    Element,
    /// The tree node inside structural recursion.
    TreeNode,
    /// The routing slot (expert choice).
    Slot,
}

impl FieldRole {
    pub fn as_str(self) -> &'static str {
        match self {
            FieldRole::Instance => "instance",
            FieldRole::Counter => "counter",
            FieldRole::Data => "data",
            FieldRole::Element => "element",
            FieldRole::TreeNode => "tree_node",
            FieldRole::Slot => "slot",
        }
    }

    pub fn parse(s: &str) -> Option<FieldRole> {
        [
            FieldRole::Instance,
            FieldRole::Counter,
            FieldRole::Data,
            FieldRole::Element,
            FieldRole::TreeNode,
            FieldRole::Slot,
        ]
        .into_iter()
        .find(|r| r.as_str() == s)
    }
}

/// One field of the state schema. Its name is unique in the graph (`inst`, `t0`, `tok`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateField {
    pub name: String,
    pub role: FieldRole,
}

/// Integer operations on state fields (predicates and state updates).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum IntOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    And,
    Or,
}

impl IntOp {
    pub fn symbol(self) -> &'static str {
        match self {
            IntOp::Add => "+",
            IntOp::Sub => "-",
            IntOp::Mul => "*",
            IntOp::Div => "/",
            IntOp::Rem => "%",
            IntOp::Eq => "==",
            IntOp::Ne => "!=",
            IntOp::Lt => "<",
            IntOp::Le => "<=",
            IntOp::Gt => ">",
            IntOp::Ge => ">=",
            IntOp::And => "&&",
            IntOp::Or => "||",
        }
    }
}

/// An integer expression over state fields and the instance's data, evaluated where it
/// is used (a predicate, an embedding index, a label). Ints are never payloads: they are
/// either state fields (loop counters) or read from the instance on demand, so all
/// messages of one dynamic context carry identical states. Booleans are 0 and 1.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum StateExpr {
    Field(FieldId),
    Const(i64),
    /// An int leaf of the instance's data, e.g. `x.tokens[t]`.
    Data(Vec<DataStep>),
    /// The length of a sequence of the instance's data, e.g. `len(x.tokens)`.
    Len(Vec<DataStep>),
    Not(Box<StateExpr>),
    Bin(IntOp, Box<StateExpr>, Box<StateExpr>),
}

/// Read access to the instance being processed, for evaluating [`StateExpr`]s.
pub trait InstanceData {
    /// The int at `path`, or `None` when the path does not lead to an int.
    fn int_at(&self, path: &[ResolvedStep]) -> Option<i64>;
    /// The length of the sequence at `path`.
    fn len_at(&self, path: &[ResolvedStep]) -> Option<i64>;
}

/// A data step with its index evaluated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResolvedStep<'a> {
    Field(&'a str),
    Index(i64),
    /// The enum value here is of this variant (see [`DataStep::Variant`]).
    Variant(u32),
}

impl StateExpr {
    pub fn bin(op: IntOp, a: StateExpr, b: StateExpr) -> StateExpr {
        StateExpr::Bin(op, Box::new(a), Box::new(b))
    }

    /// Every state field the expression reads (data paths included).
    pub fn fields(&self, out: &mut Vec<FieldId>) {
        match self {
            StateExpr::Field(f) => out.push(*f),
            StateExpr::Const(_) => {}
            StateExpr::Data(path) | StateExpr::Len(path) => {
                for step in path {
                    if let DataStep::Index(e) = step {
                        e.fields(out);
                    }
                }
            }
            StateExpr::Not(e) => e.fields(out),
            StateExpr::Bin(_, a, b) => {
                a.fields(out);
                b.fields(out);
            }
        }
    }

    /// Evaluates on a state and the instance's data. A missing field or datum, division by
    /// zero and overflow give `None`.
    pub fn eval(&self, state: &[i64], data: &dyn InstanceData) -> Option<i64> {
        Some(match self {
            StateExpr::Field(f) => *state.get(f.0 as usize)?,
            StateExpr::Const(c) => *c,
            StateExpr::Data(path) => with_resolved(path, state, data, |steps| data.int_at(steps))??,
            StateExpr::Len(path) => with_resolved(path, state, data, |steps| data.len_at(steps))??,
            StateExpr::Not(e) => i64::from(e.eval(state, data)? == 0),
            StateExpr::Bin(op, a, b) => {
                let (x, y) = (a.eval(state, data)?, b.eval(state, data)?);
                match op {
                    IntOp::Add => x.checked_add(y)?,
                    IntOp::Sub => x.checked_sub(y)?,
                    IntOp::Mul => x.checked_mul(y)?,
                    IntOp::Div => x.checked_div(y)?,
                    IntOp::Rem => x.checked_rem(y)?,
                    IntOp::Eq => i64::from(x == y),
                    IntOp::Ne => i64::from(x != y),
                    IntOp::Lt => i64::from(x < y),
                    IntOp::Le => i64::from(x <= y),
                    IntOp::Gt => i64::from(x > y),
                    IntOp::Ge => i64::from(x >= y),
                    IntOp::And => i64::from(x != 0 && y != 0),
                    IntOp::Or => i64::from(x != 0 || y != 0),
                }
            }
        })
    }
}

impl StateExpr {
    /// Why [`StateExpr::eval`] gives `None` on this state and data, for error messages:
    /// the innermost part that fails (a field not set, an index past the end of the data,
    /// a division by zero, an overflow). Recurses as deep as the expression, which the
    /// verifier bounds.
    pub fn eval_failure(&self, state: &[i64], data: &dyn InstanceData) -> String {
        match self {
            StateExpr::Field(f) => format!("state field #{} is not set", f.0),
            StateExpr::Const(_) => "a constant cannot fail (internal)".to_string(),
            StateExpr::Data(path) | StateExpr::Len(path) => {
                for step in path {
                    if let DataStep::Index(e) = step {
                        if e.eval(state, data).is_none() {
                            return e.eval_failure(state, data);
                        }
                    }
                }
                path_failure(path, state, data, matches!(self, StateExpr::Len(_)))
            }
            StateExpr::Not(e) => e.eval_failure(state, data),
            StateExpr::Bin(op, a, b) => match (a.eval(state, data), b.eval(state, data)) {
                (None, _) => a.eval_failure(state, data),
                (_, None) => b.eval_failure(state, data),
                (Some(_), Some(0)) if matches!(op, IntOp::Div | IntOp::Rem) => "division by zero".to_string(),
                (Some(x), Some(y)) => format!("{x} {} {y} overflows a 64-bit int", op.symbol()),
            },
        }
    }
}

/// Where a resolved data path stops leading anywhere: the longest prefix that does.
fn path_failure(path: &[DataStep], state: &[i64], data: &dyn InstanceData, wants_sequence: bool) -> String {
    let Some(resolved) = resolve_path(path, state, data) else {
        return "an index of the data path cannot be evaluated".to_string();
    };
    let spell = |steps: &[ResolvedStep]| {
        let mut out = String::new();
        for step in steps {
            match step {
                ResolvedStep::Field(name) if out.is_empty() => out.push_str(name),
                ResolvedStep::Field(name) => out.push_str(&format!(".{name}")),
                ResolvedStep::Index(i) => out.push_str(&format!("[{i}]")),
                ResolvedStep::Variant(v) => out.push_str(&format!("{{{v}}}")),
            }
        }
        out
    };
    for k in (0..resolved.len()).rev() {
        let prefix = &resolved[..k];
        if let (Some(len), Some(ResolvedStep::Index(i))) = (data.len_at(prefix), resolved.get(k)) {
            if *i < 0 || *i >= len {
                return format!("index {i} is outside `{}`, which has {len} elements", spell(prefix));
            }
        }
    }
    let want = if wants_sequence { "sequence" } else { "int" };
    format!("the instance has no {want} at `{}`", spell(&resolved))
}

/// Evaluates the indices of a data path.
pub fn resolve_path<'a>(path: &'a [DataStep], state: &[i64], data: &dyn InstanceData) -> Option<Vec<ResolvedStep<'a>>> {
    path.iter().map(|step| resolve_step(step, state, data)).collect()
}

fn resolve_step<'a>(step: &'a DataStep, state: &[i64], data: &dyn InstanceData) -> Option<ResolvedStep<'a>> {
    Some(match step {
        DataStep::Field(name) => ResolvedStep::Field(name),
        DataStep::Index(e) => ResolvedStep::Index(e.eval(state, data)?),
        DataStep::Variant(v) => ResolvedStep::Variant(*v),
    })
}

/// Calls `f` on `path` resolved (see [`resolve_path`]), on the stack for a path of up to
/// [`SHORT_PATH`] steps: routing nodes evaluate a data path for every message, and a
/// vector per evaluation was an allocation per message.
fn with_resolved<R>(
    path: &[DataStep],
    state: &[i64],
    data: &dyn InstanceData,
    f: impl FnOnce(&[ResolvedStep]) -> R,
) -> Option<R> {
    if path.len() > SHORT_PATH {
        return resolve_path(path, state, data).map(|steps| f(&steps));
    }
    let mut steps = [ResolvedStep::Index(0); SHORT_PATH];
    for (slot, step) in steps.iter_mut().zip(path) {
        *slot = resolve_step(step, state, data)?;
    }
    Some(f(&steps[..path.len()]))
}

/// The longest path [`with_resolved`] resolves on the stack.
const SHORT_PATH: usize = 8;

/// One step of a path into the instance's data, from the instance record.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DataStep {
    /// A record field, by name.
    Field(String),
    /// A sequence element at an index computed from the state (and data).
    Index(Box<StateExpr>),
    /// The enum value (or tree node) here is of variant `k` (its index in the enum): the
    /// path leads nowhere on a value of another variant. The lowering puts it before a
    /// field that a `match` arm binds, so that a variant's field is told from another
    /// variant's field of the same name (each may have its own range, `amp_data::ranges`).
    /// Text form `{k}`: `$.prog[%i]{1}.op`.
    Variant(u32),
}

/// How a reduction combines the rows of a batch (or the elements of a tensor).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ReduceFn {
    Sum,
    Mean,
}
