//! A `network` block rolled out over a sequence of frames under a rollout pattern
//! (docs/rollouts.md, SPEC §6).
//!
//! The frames are a loop, built as `loops.rs` builds `for t in 0..n`: a counter field
//! `frame` (`isu frame := 0` on entry, a header `phi 2` per circulating value, `cond
//! [frame < n]`, `isu frame := frame + 1` on the back edge, `isu frame := -1` on exit),
//! and the body keyed by `(inst, frame)`. What circulates is the previous frame's value
//! of every node that some delayed edge reads (zeros on entry: the values before frame
//! 0), and the control. The body computes one frame: the nodes in an order of the
//! undelayed edges, each applying its layer (and activation) to the concatenation of its
//! sources in `from` order, a delayed source read from the circulating value, an
//! undelayed one from this frame's node. Under the streaming pattern every source is
//! delayed, so no node of a frame waits for another node of that frame. Each frame's
//! output adds its cross-entropy divided by the frame count to the instance's loss
//! (`loss cross_entropy [$.label] / [n]`): the loss is the mean over the frames.

use super::{loops::exit_count, Lowerer, Unsupported, R};
use crate::network::{
    Frames, FRAMES_FIELD, LABEL_FIELD, ROLLOUT_FACTOR_META, ROLLOUT_FRAMES_META, ROLLOUT_FRAME_FIELD_META,
    ROLLOUT_OUTPUT_STEP_META, ROLLOUT_PATTERN_META,
};
use crate::value::{ParamRef, Port, Value};
use amp_diagnostics::{Code, Diagnostic, SourceMap};
use amp_grammar::ast::NetStmtKind;
use amp_ir::{
    ConstValue, DataStep, DataTy, FieldRole, FieldSchema, Graph, IntOp, LossKind, Op, PayloadTy, RecordSchema, Schema,
    StateExpr,
};
use amp_sema::rollout::{analyse, frame_order, Pattern, RolloutGraph};
use amp_sema::{Builtin, ComponentId, Instance, InstanceCall, NetworkDef, Program};

/// What one network rollout is lowered from.
pub(crate) struct Rollout<'a> {
    pub def: &'a NetworkDef,
    pub graph: &'a RolloutGraph,
    pub pattern: &'a Pattern,
    pub frames: Frames,
}

impl<'p> Lowerer<'p> {
    /// A lowerer for network `network` of `program`, its parameters laid out as
    /// `Program::network_parameter_tensors` lists them.
    pub(crate) fn for_network(
        program: &'p Program,
        map: &'p SourceMap,
        network: usize,
    ) -> Result<Self, Vec<Diagnostic>> {
        let def = program.networks.get(network).ok_or_else(Vec::new)?;
        let tensors = program.network_parameter_tensors(network).ok_or_else(|| {
            vec![Diagnostic::new(Code::NotLowered, def.span, "the network's parameter shapes are not all known")
                .with_primary("check the network first")]
        })?;
        // No component is a network's model: no `forward` result is sunk by `call_fn`.
        let mut lowerer = Lowerer::base(program, map, ComponentId(u32::MAX), &def.name, tensors);
        for hp in &def.hyperparams {
            if let Some(v) = hp.value {
                lowerer.graph.meta.insert(format!("hyper.{}", hp.name), v.to_string());
            }
        }
        Ok(lowerer)
    }

    pub(crate) fn run_network(mut self, rollout: &Rollout<'_>) -> Result<Graph, Vec<Diagnostic>> {
        let _ = self.rollout(rollout);
        self.finish()
    }

    fn rollout(&mut self, r: &Rollout<'_>) -> R<()> {
        let (def, span) = (r.def, r.def.span);
        let order = match frame_order(r.graph, r.pattern) {
            Ok(order) => order,
            Err(e) => {
                self.diags.push(e.to_diagnostic(r.graph));
                return Err(Unsupported);
            }
        };
        let of_kind = |kind: NetStmtKind| (0..def.nodes.len()).filter(|&v| def.nodes[v].kind == kind).collect();
        let (inputs, outputs): (Vec<usize>, Vec<usize>) = (of_kind(NetStmtKind::Input), of_kind(NetStmtKind::Output));
        let [input] = inputs[..] else {
            return Err(self.unsupported(span, "a network without exactly one input (each frame is one vector)"));
        };
        let [output] = outputs[..] else {
            return Err(self.unsupported(span, "a network without exactly one output (the loss classifies it)"));
        };
        let mut widths = Vec::with_capacity(def.nodes.len());
        for node in &def.nodes {
            match node.width.as_ref().and_then(|w| w.value).and_then(|w| u64::try_from(w).ok()) {
                Some(w) => widths.push(w),
                None => return Err(self.unsupported(node.span, "a network node whose width has no value")),
            }
        }
        self.graph.input = Some(frames_schema(&def.name, widths[input]));
        // What the runtime checks instances against, and what a reader of the graph sees.
        let pattern: Vec<String> =
            (0..r.graph.edges.len()).map(|e| format!("{}={}", r.graph.edge_name(e), r.pattern.delay(e))).collect();
        self.graph.meta.insert(ROLLOUT_PATTERN_META.into(), pattern.join(","));
        let frames_meta = match r.frames {
            Frames::Fixed(n) => n.to_string(),
            Frames::FromData => "data".into(),
        };
        self.graph.meta.insert(ROLLOUT_FRAMES_META.into(), frames_meta);
        let frames_path = vec![DataStep::Field(FRAMES_FIELD.into())];
        let count = match r.frames {
            Frames::Fixed(n) => StateExpr::Const(i64::from(n)),
            Frames::FromData => StateExpr::Len(frames_path.clone()),
        };
        // Only what the output depends on, over any number of frames, is computed: a
        // node that reaches no loss would circulate forever through the loop header.
        let live = reaches(r.graph, output);
        let carried: Vec<usize> = (0..def.nodes.len())
            .filter(|&v| {
                live[v] && r.graph.edges.iter().enumerate().any(|(e, x)| x.source == v && r.pattern.delay(e) == 1)
            })
            .collect();

        // Entry: zeros for the values before frame 0, and the counter's first value.
        let mut entries = Vec::with_capacity(carried.len() + 1);
        for &v in &carried {
            if let Value::Tensor(p) = self.constant(ConstValue::Zeros, vec![widths[v]], def.nodes[v].span) {
                entries.push(p);
            }
        }
        entries.push(self.ctrl.clone());
        let k = self.loops;
        self.loops += 1;
        let name = if k == 0 { "frame".to_string() } else { format!("frame{k}") };
        self.graph.meta.insert(ROLLOUT_FRAME_FIELD_META.into(), name.clone());
        // When each frame's output exists in update steps (docs/rollouts.md): the runtime
        // reports accuracy per update step from these.
        if let Ok(analysis) = analyse(r.graph, r.pattern, 1) {
            self.graph.meta.insert(ROLLOUT_FACTOR_META.into(), analysis.inference_factor.to_string());
            self.graph.meta.insert(ROLLOUT_OUTPUT_STEP_META.into(), analysis.tableau.step(output, 1).to_string());
        }
        let t = self.new_field(name, FieldRole::Counter, span)?;
        let counter = StateExpr::Field(t);
        let pred = StateExpr::bin(IntOp::Lt, counter.clone(), count.clone());
        let exit_value = exit_count(&StateExpr::Const(0), &count);
        let outer = self.context.clone();
        let (mut phis, mut body_in) = (Vec::new(), Vec::new());
        for entry in entries {
            let ty = entry.ty.clone();
            let entry = self.isu(entry, t, StateExpr::Const(0), Some(StateExpr::Const(-1)), "frames entry", span);
            self.context.push(t);
            let phi = self.raw_node(Op::Phi { arms: 2 }, vec![ty.clone(); 2], vec![ty.clone()], "frames", span);
            self.connect(&entry, phi, 0);
            let test = Op::Cond { pred: pred.clone() };
            let cond = self.node(test, &[Self::out(phi, 0, ty.clone())], vec![ty.clone(); 2], "frames test", span);
            self.context = outer.clone();
            // Nothing reads the values after the last frame; the exit restores the state.
            let exit = Self::out(cond, 1, ty.clone());
            self.isu(exit, t, StateExpr::Const(-1), Some(exit_value.clone()), "frames exit", span);
            phis.push(phi);
            body_in.push(Self::out(cond, 0, ty));
        }

        // One frame.
        self.context.push(t);
        let mut inside = body_in.into_iter();
        let mut previous: Vec<Option<Port>> = vec![None; def.nodes.len()];
        for &v in &carried {
            previous[v] = inside.next();
        }
        self.ctrl = inside.next().ok_or(Unsupported)?;
        let mut current: Vec<Option<Port>> = vec![None; def.nodes.len()];
        for &v in order.iter().filter(|&&v| live[v]) {
            let node = &def.nodes[v];
            if node.kind == NetStmtKind::Input {
                let mut path = frames_path.clone();
                path.push(DataStep::Index(Box::new(counter.clone())));
                let ty = PayloadTy::F32(vec![widths[v]]);
                let ctrl = self.ctrl.clone();
                let read = self.node(Op::Read { path }, &[ctrl], vec![ty.clone()], &node.name, node.span);
                current[v] = Some(Self::out(read, 0, ty));
                continue;
            }
            let mut parts = Vec::with_capacity(node.sources.len());
            for &s in &node.sources {
                let delayed = r.graph.edge_between(s, v).is_none_or(|e| r.pattern.delay(e) == 1);
                let part = if delayed { previous[s].clone() } else { current[s].clone() };
                parts.push(part.ok_or_else(|| self.unsupported(node.span, "a source without a value (internal)"))?);
            }
            current[v] = Some(self.network_node(node, parts)?);
        }
        let logits = current[output].clone().ok_or(Unsupported)?;
        let label = StateExpr::Data(vec![DataStep::Field(LABEL_FIELD.into())]);
        let out_span = def.nodes[output].span;
        let loss = Op::Loss(LossKind::CrossEntropyMean { label, count });
        self.node(loss, std::slice::from_ref(&logits), Vec::new(), "loss", out_span);
        self.node(Op::Sink { name: "forward".into() }, &[logits], Vec::new(), "forward", out_span);

        // The back edge: this frame's values, and the counter's step.
        let mut ends: Vec<Port> = Vec::with_capacity(phis.len());
        for &v in &carried {
            ends.push(current[v].clone().ok_or_else(|| self.unsupported(span, "a node without a value (internal)"))?);
        }
        ends.push(self.ctrl.clone());
        for (end, &phi) in ends.into_iter().zip(&phis) {
            let step = StateExpr::bin(IntOp::Add, counter.clone(), StateExpr::Const(1));
            let back = StateExpr::bin(IntOp::Sub, counter.clone(), StateExpr::Const(1));
            let port = self.isu(end, t, step, Some(back), "frames step", span);
            self.connect(&port, phi, 1);
        }
        self.context = outer;
        Ok(())
    }

    /// One frame's value of `node`: its layer applied to the concatenation of `parts`, then its
    /// activation.
    fn network_node(&mut self, node: &amp_sema::NetworkNode, mut parts: Vec<Port>) -> R<Port> {
        let span = node.span;
        let x = match parts.len() {
            0 => return Err(self.unsupported(span, "a network node without sources")),
            1 => parts.remove(0),
            _ => {
                let total =
                    parts.iter().map(|p| if let PayloadTy::F32(d) = &p.ty { d.iter().product() } else { 0 }).sum();
                let ty = PayloadTy::F32(vec![total]);
                let n = self.node(Op::Concat, &parts, vec![ty.clone()], "concat", span);
                Self::out(n, 0, ty)
            }
        };
        let Some(instance) = node.instance.clone() else {
            return Err(self.unsupported(span, "a network node without a layer"));
        };
        let call = match &*instance {
            Instance::Linear { .. } => InstanceCall::Primitive,
            Instance::Layer { layer, .. } => match self.program.components[layer.0 as usize].fn_named("apply") {
                Some(i) => InstanceCall::LayerFn(i as u32),
                None => return Err(self.unsupported(span, "a network layer without `apply`")),
            },
            _ => return Err(self.unsupported(span, "this network layer")),
        };
        let param = ParamRef { prefix: node.name.clone(), instance, subst: Vec::new() };
        let y = match self.call_instance(param, &call, vec![Value::Tensor(x)], span)? {
            Value::Tensor(p) => p,
            _ => return Err(self.unsupported(span, "a network layer that does not return a vector")),
        };
        let f = match node.activation {
            None => return Ok(y),
            Some(Builtin::Unary(f)) if f.is_elementwise() => f,
            Some(b) => return Err(self.unsupported(span, &format!("the activation `{}`", b.name()))),
        };
        match self.unary(f, y, &node.name, span) {
            Value::Tensor(p) => Ok(p),
            _ => Err(Unsupported),
        }
    }
}

/// The input record of a rolled-out network: `{frames: [f32[width]], label: int}`.
fn frames_schema(network: &str, width: u64) -> Schema {
    let fields = vec![
        FieldSchema { name: FRAMES_FIELD.into(), ty: DataTy::Seq(Box::new(DataTy::F32(vec![width]))) },
        FieldSchema { name: LABEL_FIELD.into(), ty: DataTy::Int },
    ];
    Schema { records: vec![RecordSchema { name: format!("{network}Frames"), fields }], enums: Vec::new(), input: 0 }
}

/// Which nodes `target` depends on through any edges (itself included).
fn reaches(graph: &RolloutGraph, target: usize) -> Vec<bool> {
    let mut live = vec![false; graph.nodes.len()];
    let mut stack = vec![target];
    while let Some(v) = stack.pop() {
        if v >= live.len() || live[v] {
            continue;
        }
        live[v] = true;
        stack.extend(graph.edges.iter().filter(|e| e.target == v).map(|e| e.source));
    }
    live
}
