//! The oracle of rolled-out networks (docs/rollouts.md): a `network` block under a rollout
//! pattern, evaluated eagerly frame by frame on the tape, with the loss and every
//! parameter's gradient, as the lowered graph (`amp_lower::compile_network`) must give
//! them.
//!
//! Written from the definitions, not from the lowering: frame i computes each node, in an
//! order of the undelayed edges, as its layer (and activation) applied to the
//! concatenation of its sources in `from` order; a source over an undelayed edge gives its
//! value of frame i, over a delayed edge its value of frame i − 1 (zeros before frame 0).
//! The loss is the mean over the frames of the output's cross-entropy against the label.
//!
//! An instance is `Value::Record([Seq(frames), Int(label)])`, each frame a vector of the
//! input's width: the record `{frames, label}` the lowered graph reads.

use crate::error::{ErrorKind, RefError};
use crate::eval::{unevaluable, At, Ctx, Evaluator};
use crate::params::{bind, Bound};
use crate::tape::NodeId;
use crate::value::Val;
use crate::{on_large_stack, EVAL_STACK_BYTES, EVAL_STACK_RESERVE};
use amp_data::Value;
use amp_grammar::ast::NetStmtKind;
use amp_grammar::Span;
use amp_params::{ParamSet, ParamSpec};
use amp_sema::rollout::{frame_order, Pattern, RolloutGraph};
use amp_sema::{Builtin, FnId, NetworkDef, Program};

/// The reference evaluator of one network under one rollout pattern.
#[derive(Debug)]
pub struct NetworkReference<'p> {
    program: &'p Program,
    def: &'p NetworkDef,
    graph: RolloutGraph,
    pattern: Pattern,
    order: Vec<usize>,
    /// `Some(n)`: every instance has exactly n frames; `None`: as many as it has.
    frames: Option<usize>,
    specs: Vec<ParamSpec>,
    /// Each node's layer bound to its tensors in the parameter set (`None` for inputs).
    bound: Vec<Option<Bound>>,
    input: usize,
    output: usize,
}

/// What one instance's rollout gives.
struct Rolled {
    loss: NodeId,
    /// Each frame's output (the logits), in frame order.
    outputs: Vec<NodeId>,
}

impl<'p> NetworkReference<'p> {
    /// Prepares to evaluate network `network` (an index into `program.networks`) under
    /// `pattern`. Fails when the pattern is not valid or not the network's, or the network
    /// has no single input and output or has errors.
    pub fn new(
        program: &'p Program,
        network: usize,
        pattern: &Pattern,
        frames: Option<usize>,
    ) -> Result<NetworkReference<'p>, RefError> {
        let Some(def) = program.networks.get(network) else {
            return Err(unevaluable(Span::default(), &format!("network #{network} (there is no such network)")));
        };
        let span = def.span;
        let graph = RolloutGraph::of_network(def);
        if pattern.delays().len() != graph.edges.len() {
            return Err(unevaluable(span, "a rollout pattern of another network"));
        }
        let order = frame_order(&graph, pattern)
            .map_err(|_| unevaluable(span, "an invalid rollout pattern (its undelayed edges form a cycle)"))?;
        let one = |kind: NetStmtKind, what: &str| -> Result<usize, RefError> {
            let found: Vec<usize> = (0..def.nodes.len()).filter(|&v| def.nodes[v].kind == kind).collect();
            match found[..] {
                [v] => Ok(v),
                _ => Err(unevaluable(span, &format!("a network without exactly one {what}"))),
            }
        };
        let (input, output) = (one(NetStmtKind::Input, "input")?, one(NetStmtKind::Output, "output")?);
        let no_params =
            || unevaluable(span, &format!("the parameters of network `{}` (a shape has no value)", def.name));
        let tensors = program.network_parameter_tensors(network).ok_or_else(no_params)?;
        let specs = crate::params::specs_of(tensors).ok_or_else(no_params)?;
        let mut next = 0;
        let mut bound = Vec::with_capacity(def.nodes.len());
        for node in &def.nodes {
            bound.push(match &node.instance {
                Some(instance) => Some(bind(program, instance, &[], &mut next, 0).ok_or_else(no_params)?),
                None => None,
            });
        }
        if next != specs.len() {
            return Err(unevaluable(span, "the parameters of this network (they could not be laid out)"));
        }
        Ok(NetworkReference {
            program,
            def,
            graph,
            pattern: pattern.clone(),
            order,
            frames,
            specs,
            bound,
            input,
            output,
        })
    }

    /// The network's parameter tensors: each node's layer named after the node.
    pub fn specs(&self) -> &[ParamSpec] {
        &self.specs
    }

    /// The loss on `input`: the mean over its frames of the output's cross-entropy.
    pub fn loss(&self, params: &ParamSet, input: &Value) -> Result<f32, RefError> {
        self.run(params, input, |ev, rolled| Ok(ev.tape.value(rolled.loss)[0]))
    }

    /// Each frame's output (the logits) on `input`, in frame order: what per-frame
    /// accuracy judges.
    pub fn frame_outputs(&self, params: &ParamSet, input: &Value) -> Result<Vec<Vec<f32>>, RefError> {
        self.run(params, input, |ev, rolled| Ok(rolled.outputs.iter().map(|&o| ev.tape.value(o).to_vec()).collect()))
    }

    /// The loss on `input` and its gradient with respect to every parameter.
    pub fn loss_and_grads(&self, params: &ParamSet, input: &Value) -> Result<(f32, ParamSet), RefError> {
        self.run(params, input, |ev, rolled| {
            let mut grads = ParamSet::zeros(&self.specs);
            ev.tape.backward(rolled.loss, &[1.0], params, &mut grads).at(self.def.span)?;
            Ok((ev.tape.value(rolled.loss)[0], grads))
        })
    }

    fn run<T: Send>(
        &self,
        params: &ParamSet,
        input: &Value,
        finish: impl FnOnce(&mut Evaluator<'_>, Rolled) -> Result<T, RefError> + Send,
    ) -> Result<T, RefError> {
        self.check_params(params)?;
        on_large_stack(self.def.span, || {
            let mut ev = Evaluator::new(self.program, params, EVAL_STACK_BYTES - EVAL_STACK_RESERVE);
            let rolled = self.roll_out(&mut ev, input)?;
            finish(&mut ev, rolled)
        })
    }

    /// Every frame of `input`, then the mean of the frames' losses.
    fn roll_out<'e>(&'e self, ev: &mut Evaluator<'e>, input: &Value) -> Result<Rolled, RefError> {
        let span = self.def.span;
        let (frames, label) = self.instance(input)?;
        let widths = self.widths()?;
        let n = self.def.nodes.len();
        let mut previous = Vec::with_capacity(n);
        for &w in &widths {
            previous.push(ev.tape.fill(vec![w], 0.0).at(span)?);
        }
        let mut losses = Vec::with_capacity(frames.len());
        let mut outputs = Vec::with_capacity(frames.len());
        for frame in frames {
            let mut current: Vec<Option<NodeId>> = vec![None; n];
            for &v in &self.order {
                let node = &self.def.nodes[v];
                if v == self.input {
                    current[v] = Some(ev.tape.leaf(vec![frame.len()], frame.to_vec()).at(node.span)?);
                    continue;
                }
                let mut parts = Vec::with_capacity(node.sources.len());
                for &s in &node.sources {
                    let delayed = self.graph.edge_between(s, v).is_none_or(|e| self.pattern.delay(e) == 1);
                    let part = if delayed { Some(previous[s]) } else { current[s] };
                    parts.push(part.ok_or_else(|| unevaluable(node.span, "a source read before its value"))?);
                }
                current[v] = Some(self.node(ev, v, &parts)?);
            }
            let logits = current[self.output].ok_or_else(|| unevaluable(span, "the output of a frame"))?;
            losses.push(ev.tape.cross_entropy(logits, label).at(self.def.nodes[self.output].span)?);
            outputs.push(logits);
            for (v, value) in current.into_iter().enumerate() {
                if let Some(value) = value {
                    previous[v] = value;
                }
            }
        }
        let total = ev.tape.add_n(&losses, Vec::new()).at(span)?;
        Ok(Rolled { loss: ev.tape.scale(total, 1.0 / losses.len() as f32), outputs })
    }

    /// One frame's value of node `v` from the values of its sources, in `from` order.
    fn node<'e>(&'e self, ev: &mut Evaluator<'e>, v: usize, parts: &[NodeId]) -> Result<NodeId, RefError> {
        let node = &self.def.nodes[v];
        let span = node.span;
        let x = match parts {
            [] => return Err(unevaluable(span, "a network node without sources")),
            [x] => *x,
            _ => ev.tape.concat(parts).at(span)?,
        };
        let y = match self.bound.get(v).and_then(Option::as_ref) {
            Some(Bound::Linear { weight, bias }) => ev.tape.linear(ev.params, x, *weight, *bias).at(span)?,
            Some(Bound::Layer { component, hyper, params }) => {
                let def = &self.program.components[component.0 as usize];
                let Some(apply) = def.fn_named("apply") else {
                    return Err(unevaluable(span, "a network layer without `apply`"));
                };
                let ctx = Ctx { component: *component, params, hyper };
                let id = FnId { component: *component, index: apply as u32 };
                ev.call_fn(ctx, id, vec![Val::Tensor(x)], span)?.tensor().at(span)?
            }
            _ => return Err(unevaluable(span, "a network node whose layer is not `Linear` or a layer's `apply`")),
        };
        let f = match node.activation {
            None => return Ok(y),
            Some(Builtin::Unary(f)) if f.is_elementwise() => f,
            Some(_) => return Err(unevaluable(span, "a network activation that is not elementwise")),
        };
        ev.tape.unary(f, y).at(span)
    }

    /// Every node's width.
    fn widths(&self) -> Result<Vec<usize>, RefError> {
        self.def
            .nodes
            .iter()
            .map(|node| {
                node.width
                    .as_ref()
                    .and_then(|w| w.value)
                    .and_then(|w| usize::try_from(w).ok())
                    .ok_or_else(|| unevaluable(node.span, "a network node whose width has no value"))
            })
            .collect()
    }

    /// The frames (each of the input's width) and the label of an instance.
    fn instance<'v>(&self, input: &'v Value) -> Result<(Vec<&'v [f32]>, i64), RefError> {
        let span = self.def.span;
        let bad = |path: &str, problem: String| RefError::new(span, ErrorKind::BadInput { path: path.into(), problem });
        let Value::Record(fields) = input else {
            return Err(bad("", "expected the record {frames, label}".into()));
        };
        let [Value::Seq(frames), Value::Int(label)] = &fields[..] else {
            return Err(bad("", "expected the fields `frames` (a sequence) and `label` (an int)".into()));
        };
        if frames.is_empty() {
            return Err(bad("frames", "the sequence of frames is empty".into()));
        }
        if let Some(n) = self.frames.filter(|&n| n != frames.len()) {
            return Err(bad("frames", format!("{} frames, the rollout has {n}", frames.len())));
        }
        let width = self.def.nodes[self.input].width.as_ref().and_then(|w| w.value);
        let mut out = Vec::with_capacity(frames.len());
        for (i, frame) in frames.iter().enumerate() {
            match frame {
                Value::Tensor(t) if t.shape.len() == 1 && Some(t.data.len() as i64) == width => out.push(&t.data[..]),
                _ => return Err(bad(&format!("frames[{i}]"), format!("expected a vector of {width:?} values"))),
            }
        }
        Ok((out, *label))
    }

    /// Refuses a parameter set with other names or shapes than the network's.
    fn check_params(&self, params: &ParamSet) -> Result<(), RefError> {
        let mismatch = |detail: String| RefError::new(self.def.span, ErrorKind::ParamMismatch { detail });
        if params.len() != self.specs.len() {
            return Err(mismatch(format!("{} tensors given, the network has {}", params.len(), self.specs.len())));
        }
        for (i, (spec, values)) in params.iter().enumerate() {
            let want = &self.specs[i];
            if spec.name != want.name || spec.shape != want.shape || values.len() != want.elements() {
                return Err(mismatch(format!("tensor #{i} is `{}`, the network's is `{}`", spec.name, want.name)));
            }
        }
        Ok(())
    }
}
