//! Amp's eager reference evaluator: the correctness oracle that lowered graphs and JIT
//! kernels are tested against (loss and every gradient).
//!
//! In: a checked [`Program`] (`amp-sema`), one of its models, a [`ParamSet`] laid out as
//! [`param_specs`] says (`amp-params`), and one instance of input data as an
//! [`amp_data::Value`] (the entry point's input record as `Value::Record`, fields in
//! declaration order; enums as `Value::Variant` with the variant's index). Out: the output
//! of `forward` (flattened), the value of `loss`, and the gradient of the loss with
//! respect to every parameter (a `ParamSet` of the same layout), or a [`RefError`]
//! pointing at the source span where evaluation failed.
//!
//! How: the typed AST is interpreted directly (`eval/`), every tensor operation is
//! recorded on a [`tape::Tape`] of plain `f32` loops, and the loss is differentiated by
//! one reverse pass over the tape. Ints, bools and control flow are ordinary values
//! without gradients. Kept simple on purpose: no batching, no fusion, no cleverness.
//!
//! Conventions shared with the compiled runtime: `cross_entropy(logits, label)` is
//! `-log_softmax(logits)[label]`; `mse(a, b)` is `mean((a - b)^2)`; `softmax` and
//! `log_softmax` work over the last axis (the whole vector for rank 1) and subtract the
//! maximum; `Linear` is `W x + b` with `W` `[out, in]` along the last axis of `x`;
//! `top_k` orders largest first, the lower index first among equal values, and passes
//! gradient to its input only through the values; integer `/` and `%` truncate toward zero.
//!
//! Untrusted input never panics: data that does not fit the input type, indices and
//! labels out of range, runaway `while` loops and recursion deeper than a fixed limit are
//! errors. Evaluation runs on its own thread with a large stack, so deep trees do not
//! overflow the caller's stack.
//!
//! Depends on `amp-sema` (the typed program), `amp-grammar` (operators, spans),
//! `amp-data` (instance values), `amp-params` (parameter sets) and `amp-ir` (the
//! parameter initialisation kinds).

mod error;
mod eval;
mod network;
mod params;
pub mod tape;
mod value;

pub use amp_ir::dropout::DropoutRun;
pub use error::{ErrorKind, RefError};
pub use network::NetworkReference;
pub use params::param_specs;

use amp_data::Value;
use amp_grammar::Span;
use amp_params::{ParamSet, ParamSpec};
use amp_sema::{ComponentId, FnId, Program};
use eval::{unevaluable, At, Ctx, Evaluator};
use params::Bound;
use value::Val;

/// The stack of the evaluation thread (address space reserved; pages are committed as
/// used). An unoptimised build uses up to about 32 KiB per level of program recursion, so
/// the call-depth limit of 2,000 fits several times over.
pub(crate) const EVAL_STACK_BYTES: usize = 256 << 20;
/// What evaluation leaves unused of that stack: room for the deepest chain of frames
/// between two stack checks (one expression's operands) and for dropping values.
pub(crate) const EVAL_STACK_RESERVE: usize = 16 << 20;

/// The reference evaluator of one model of a checked program.
#[derive(Debug)]
pub struct Reference<'p> {
    program: &'p Program,
    model: ComponentId,
    specs: Vec<ParamSpec>,
    bound: Vec<Bound>,
    forward: FnId,
    loss: FnId,
    span: Span,
}

impl<'p> Reference<'p> {
    /// Prepares to evaluate `model`. Fails when the model does not exist, lacks a
    /// one-argument `forward` or `loss`, or has a parameter shape without a value (the
    /// program has errors).
    pub fn new(program: &'p Program, model: ComponentId) -> Result<Reference<'p>, RefError> {
        let Some(def) = program.components.get(model.0 as usize) else {
            return Err(unevaluable(Span::default(), &format!("model #{} (there is no such component)", model.0)));
        };
        let span = def.span;
        let entry = |name: &str| -> Result<FnId, RefError> {
            match def.fn_named(name) {
                Some(i) if def.fns[i].params.len() == 1 => Ok(FnId { component: model, index: i as u32 }),
                _ => Err(unevaluable(span, &format!("model `{}`: it has no one-argument `{name}`", def.name))),
            }
        };
        let (forward, loss) = (entry("forward")?, entry("loss")?);
        let no_params = || unevaluable(span, &format!("the parameters of model `{}` (a shape has no value)", def.name));
        let specs = param_specs(program, model).ok_or_else(no_params)?;
        let (bound, count) = params::bind_model(program, model).ok_or_else(no_params)?;
        if count != specs.len() {
            return Err(unevaluable(span, "the parameters of this model (they could not be laid out)"));
        }
        Ok(Reference { program, model, specs, bound, forward, loss, span })
    }

    /// The model this evaluator runs.
    pub fn model(&self) -> ComponentId {
        self.model
    }

    /// The model's parameter tensors, as [`param_specs`] lists them.
    pub fn specs(&self) -> &[ParamSpec] {
        &self.specs
    }

    /// The output of `forward` on `input`, flattened: every tensor element in order
    /// (through tuples, sequences and records), ints and bools as `f32`.
    pub fn forward(&self, params: &ParamSet, input: &Value) -> Result<Vec<f32>, RefError> {
        self.run(params, input, self.forward, None, |ev, out| {
            let mut flat = Vec::new();
            flatten(ev, &out, &mut flat).at(self.span)?;
            Ok(flat)
        })
    }

    /// The value of `loss` on `input` (dropout is the identity, as in evaluation).
    pub fn loss(&self, params: &ParamSet, input: &Value) -> Result<f32, RefError> {
        self.loss_with(params, input, None)
    }

    /// The value of `loss` on `input`, with the masks of `dropout` (training's) when
    /// given: those the executor applies to the same instance of the same run and epoch.
    pub fn loss_with(&self, params: &ParamSet, input: &Value, dropout: Option<DropoutRun>) -> Result<f32, RefError> {
        self.run(params, input, self.loss, dropout, |ev, out| {
            let root = self.scalar_loss(ev, &out)?;
            Ok(ev.tape.value(root)[0])
        })
    }

    /// The value of `loss` on `input` and its gradient with respect to every parameter
    /// (same names, shapes and order as `params`; zero where the loss does not depend on
    /// a parameter, e.g. experts that were not routed to). Dropout is the identity.
    pub fn loss_and_grads(&self, params: &ParamSet, input: &Value) -> Result<(f32, ParamSet), RefError> {
        self.loss_and_grads_with(params, input, None)
    }

    /// [`Reference::loss_and_grads`] with the masks of `dropout` when given (see
    /// [`Reference::loss_with`]): the gradient given those masks.
    pub fn loss_and_grads_with(
        &self,
        params: &ParamSet,
        input: &Value,
        dropout: Option<DropoutRun>,
    ) -> Result<(f32, ParamSet), RefError> {
        self.run(params, input, self.loss, dropout, |ev, out| {
            let root = self.scalar_loss(ev, &out)?;
            let mut grads = ParamSet::zeros(&self.specs);
            ev.tape.backward(root, &[1.0], params, &mut grads).at(self.span)?;
            Ok((ev.tape.value(root)[0], grads))
        })
    }

    fn scalar_loss(&self, ev: &Evaluator<'_>, out: &Val<'_>) -> Result<tape::NodeId, RefError> {
        let span = self.entry_span(self.loss);
        let root = out.tensor().at(span)?;
        if ev.tape.value(root).len() != 1 {
            let detail = format!("`loss` must return a scalar, found shape {:?}", ev.tape.shape(root));
            return Err(RefError::new(span, ErrorKind::Shape { op: "loss", detail }));
        }
        Ok(root)
    }

    fn entry_span(&self, id: FnId) -> Span {
        self.program.components[id.component.0 as usize].fns[id.index as usize].span
    }

    /// Converts `input`, calls entry point `entry` on it and hands the result to `finish`,
    /// all on the evaluation thread.
    fn run<T: Send>(
        &self,
        params: &ParamSet,
        input: &Value,
        entry: FnId,
        dropout: Option<DropoutRun>,
        finish: impl FnOnce(&mut Evaluator<'_>, Val<'_>) -> Result<T, RefError> + Send,
    ) -> Result<T, RefError> {
        self.check_params(params)?;
        on_large_stack(self.span, || {
            let program = self.program;
            let def = &program.components[entry.component.0 as usize].fns[entry.index as usize];
            let Some(input_local) = def.params.first().and_then(|p| def.locals.get(p.0 as usize)) else {
                return Err(unevaluable(def.span, "an entry point without its input parameter"));
            };
            let mut ev = Evaluator::new(program, params, EVAL_STACK_BYTES - EVAL_STACK_RESERVE);
            ev.dropout = dropout;
            let arg = value::from_data(program, &mut ev.tape, input, &input_local.ty, 0)
                .map_err(|kind| RefError::new(input_local.span, kind))?;
            let ctx = Ctx { component: self.model, params: &self.bound, hyper: &[] };
            let out = ev.call_fn(ctx, entry, vec![arg], def.span)?;
            finish(&mut ev, out)
        })
    }

    /// Refuses a parameter set with other names or shapes than the model's.
    fn check_params(&self, params: &ParamSet) -> Result<(), RefError> {
        let mismatch = |detail: String| RefError::new(self.span, ErrorKind::ParamMismatch { detail });
        if params.len() != self.specs.len() {
            return Err(mismatch(format!("{} tensors given, the model has {}", params.len(), self.specs.len())));
        }
        for (i, (spec, values)) in params.iter().enumerate() {
            let want = &self.specs[i];
            if spec.name != want.name || spec.shape != want.shape || values.len() != want.elements() {
                return Err(mismatch(format!(
                    "tensor #{i} is `{}` {:?}, the model's is `{}` {:?}",
                    spec.name, spec.shape, want.name, want.shape
                )));
            }
        }
        Ok(())
    }
}

/// Appends every number of `v` to `out` (tensors element by element, ints and bools as
/// `f32`).
fn flatten(ev: &Evaluator<'_>, v: &Val<'_>, out: &mut Vec<f32>) -> Result<(), ErrorKind> {
    match v {
        Val::Int(i) => out.push(*i as f32),
        Val::Bool(b) => out.push(if *b { 1.0 } else { 0.0 }),
        Val::Tensor(t) => out.extend_from_slice(ev.tape.value(*t)),
        Val::Seq(items) | Val::Tuple(items) | Val::Record(items) | Val::Variant(_, items) => {
            for item in items.iter() {
                flatten(ev, item, out)?;
            }
        }
        Val::Instance(_) => return Err(ErrorKind::Type { expected: "data", found: "a parameter instance" }),
    }
    Ok(())
}

/// Runs `work` on a fresh thread with an [`EVAL_STACK_BYTES`] stack and waits for it. A
/// panic there (an evaluator bug) comes back as [`ErrorKind::Internal`] at `span`.
pub(crate) fn on_large_stack<T: Send>(
    span: Span,
    work: impl FnOnce() -> Result<T, RefError> + Send,
) -> Result<T, RefError> {
    std::thread::scope(|scope| {
        let handle = std::thread::Builder::new()
            .name("amp-reference".into())
            .stack_size(EVAL_STACK_BYTES)
            .spawn_scoped(scope, work)
            .map_err(|e| RefError::new(span, ErrorKind::Internal { detail: format!("cannot start a thread: {e}") }))?;
        handle.join().unwrap_or_else(|panic| {
            let detail = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            Err(RefError::new(span, ErrorKind::Internal { detail }))
        })
    })
}
