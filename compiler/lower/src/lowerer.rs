//! The lowering walk over the typed program.

mod branch;
mod calls;
mod collections;
mod loops;
mod losses;
pub(crate) mod network;
mod recursion;
mod routing;

use crate::value::{ParamRef, Port, Value};
use amp_diagnostics::{Code, Diagnostic, FileId, SourceMap, Span};
use amp_grammar::ast::{BinOp, UnOp};
use amp_ir::{
    BinaryFn, ConstValue, DataStep, Edge, FieldId, FieldRole, Graph, IntOp, Loc, LossBase, Node, Op, Param, ParamInit,
    PayloadTy, ReduceFn, StateExpr, StateField, UnaryFn,
};
use amp_sema::{
    Block, Builtin, ComponentId, Dim, Expr, ExprKind, FnId, Instance, InstanceCall, LocalId, Pattern, Program, Stmt,
    Symbol, Ty,
};
use branch::{Routed, Selector};
use petgraph::stable_graph::NodeIndex;
use std::collections::{BTreeSet, HashMap};

/// Lowering stops at the first construct it cannot handle; the diagnostic is recorded.
pub(crate) struct Unsupported;
type R<T> = Result<T, Unsupported>;

struct Frame {
    comp: ComponentId,
    locals: Vec<Option<Value>>,
    /// Dotted parameter prefix of the layer instance being inlined (`""` for the model).
    prefix: String,
    /// Values of the layer's hyperparameter symbols for this instance.
    subst: Vec<(Symbol, Dim)>,
}

pub(crate) struct Lowerer<'p> {
    program: &'p Program,
    map: &'p SourceMap,
    model: ComponentId,
    graph: Graph,
    diags: Vec<Diagnostic>,
    files: HashMap<FileId, u32>,
    /// The state fields that identify the current dynamic context (instance, counters).
    context: Vec<FieldId>,
    /// The current context's control port (unit messages).
    ctrl: Port,
    frames: Vec<Frame>,
    loops: u32,
    counters: Counters,
    recursions: Vec<recursion::Recursion>,
    forward_sunk: bool,
    /// `graph.params` by name: a model with thousands of experts looks one up per Linear.
    param_index: HashMap<String, usize>,
    /// The node ranges of the arms of the branch being merged (`losses::merge_losses`).
    arm_ranges: Vec<(usize, usize)>,
    /// Nodes lowered and then made unnecessary (a loop's control that a data value's
    /// messages stand in for, `loops.rs`), removed once the whole graph is lowered: a
    /// node removed earlier would free its index for the next one, and the constructs
    /// find their nodes by index ranges.
    retired: Vec<NodeIndex>,
    /// The ports the forward function's result was sunk from.
    forward_ports: Vec<(NodeIndex, u16)>,
    /// Traversals already lowered, by function, tree, context and control: a second call
    /// (`forward` and `loss` both walking the tree) reuses the first one's result.
    traversals: HashMap<String, Value>,
    /// Inside a batched `map` body: the row field and the row count (`collections.rs`).
    rows: Option<collections::RowCtx>,
    /// Lower every `map` per element (`LowerOptions::per_element_maps`).
    per_element_maps: bool,
    /// Mask a batched parameter-array call's arms instead of partitioning its rows
    /// (`LowerOptions::masked_arms`).
    masked_arms_only: bool,
}

/// How many fields of each kind exist, for their names (`e0`, `n0`, `slot0`).
#[derive(Default)]
struct Counters {
    elements: u32,
    trees: u32,
    slots: u32,
}

fn int_op(op: BinOp) -> IntOp {
    match op {
        BinOp::Add => IntOp::Add,
        BinOp::Sub => IntOp::Sub,
        BinOp::Mul => IntOp::Mul,
        BinOp::Div => IntOp::Div,
        BinOp::Rem => IntOp::Rem,
        BinOp::Eq => IntOp::Eq,
        BinOp::Ne => IntOp::Ne,
        BinOp::Lt => IntOp::Lt,
        BinOp::Le => IntOp::Le,
        BinOp::Gt => IntOp::Gt,
        BinOp::Ge => IntOp::Ge,
        BinOp::And => IntOp::And,
        BinOp::Or => IntOp::Or,
    }
}

impl<'p> Lowerer<'p> {
    pub(crate) fn new(program: &'p Program, map: &'p SourceMap, model: ComponentId) -> Result<Self, Vec<Diagnostic>> {
        let def = program.components.get(model.0 as usize).ok_or_else(Vec::new)?;
        let tensors = program.parameter_tensors(model).ok_or_else(|| {
            vec![Diagnostic::new(Code::NotLowered, def.span, "the model's parameter shapes are not all known")
                .with_primary("check the model first")]
        })?;
        let mut lowerer = Lowerer::base(program, map, model, &def.name, tensors);
        for hp in &def.hyperparams {
            if let Some(v) = hp.value {
                lowerer.graph.meta.insert(format!("hyper.{}", hp.name), v.to_string());
            }
        }
        Ok(lowerer)
    }

    /// A lowerer with an empty graph named `name` holding the parameter tensors `tensors`:
    /// the instance field and the source node. `model` is the component whose `forward`
    /// result is sunk (none such exists while a network is lowered).
    fn base(
        program: &'p Program,
        map: &'p SourceMap,
        model: ComponentId,
        name: &str,
        tensors: Vec<amp_sema::ParamTensor>,
    ) -> Self {
        let mut graph = Graph { name: name.to_string(), ..Graph::default() };
        graph.state.push(StateField { name: "inst".into(), role: FieldRole::Instance });
        graph.params = tensors
            .into_iter()
            .map(|t| Param {
                name: t.name,
                shape: t.shape.iter().map(|&d| d.max(0) as u64).collect(),
                init: match t.init {
                    amp_sema::ParamInit::Uniform { fan_in } => ParamInit::Uniform { fan_in: fan_in.max(0) as u64 },
                    amp_sema::ParamInit::Normal => ParamInit::Normal,
                    amp_sema::ParamInit::Ones => ParamInit::Ones,
                    amp_sema::ParamInit::Zeros => ParamInit::Zeros,
                },
            })
            .collect();
        let param_index = graph.params.iter().enumerate().map(|(i, p)| (p.name.clone(), i)).collect();
        let source = graph.nodes.add_node(Node {
            op: Op::Source,
            inputs: Vec::new(),
            outputs: vec![PayloadTy::Unit],
            reads: Vec::new(),
            writes: vec![FieldId(0)],
            key: Vec::new(),
            label: "instances".into(),
            loc: None,
            fusion: None,
        });
        Lowerer {
            program,
            map,
            model,
            graph,
            diags: Vec::new(),
            files: HashMap::new(),
            context: vec![FieldId(0)],
            ctrl: Port { node: source, port: 0, ty: PayloadTy::Unit },
            frames: Vec::new(),
            loops: 0,
            counters: Counters::default(),
            recursions: Vec::new(),
            forward_sunk: false,
            param_index,
            arm_ranges: Vec::new(),
            retired: Vec::new(),
            forward_ports: Vec::new(),
            traversals: HashMap::new(),
            rows: None,
            per_element_maps: false,
            masked_arms_only: false,
        }
    }

    /// Lowers every `map` per element, as before batched maps (for comparison).
    pub(crate) fn per_element_maps(mut self, on: bool) -> Self {
        self.per_element_maps = on;
        self
    }

    /// Masks a batched parameter-array call's arms instead of partitioning its rows.
    pub(crate) fn mask_arms(mut self, on: bool) -> Self {
        self.masked_arms_only = on;
        self
    }

    pub(crate) fn run(mut self) -> Result<Graph, Vec<Diagnostic>> {
        let def = &self.program.components[self.model.0 as usize];
        let (loss, forward) = (def.fn_named("loss"), def.fn_named("forward"));
        let span = def.span;
        if let (Some(loss), Some(forward)) = (loss, forward) {
            let loss_def = &def.fns[loss];
            let record = loss_def.params.first().and_then(|p| match loss_def.locals.get(p.0 as usize).map(|l| &l.ty) {
                Some(Ty::Record(r)) => Some(*r),
                _ => None,
            });
            match record.and_then(|r| crate::schema::input_schema(self.program, r)) {
                Some(schema) => self.graph.input = Some(schema),
                None => {
                    self.unsupported(span, "an entry point whose input is not a record of data");
                }
            }
            let input = Value::Data(Vec::new());
            let result =
                self.call_fn(FnId { component: self.model, index: loss as u32 }, vec![input.clone()], span, "", &[]);
            if let Ok(value) = result {
                let forward_ok = self.forward_sunk
                    || self
                        .call_fn(FnId { component: self.model, index: forward as u32 }, vec![input], span, "", &[])
                        .is_ok();
                if forward_ok {
                    let _ = self.finish_loss(value, loss_def.span);
                }
            }
        }
        self.finish()
    }

    /// The lowered graph, without the retired nodes; or the diagnostics.
    fn finish(mut self) -> Result<Graph, Vec<Diagnostic>> {
        if !self.diags.is_empty() {
            return Err(self.diags);
        }
        for n in std::mem::take(&mut self.retired) {
            self.graph.nodes.remove_node(n);
        }
        Ok(self.graph)
    }

    fn unsupported(&mut self, span: Span, what: &str) -> Unsupported {
        if self.diags.is_empty() {
            self.diags.push(
                Diagnostic::new(Code::NotLowered, span, format!("{what} is not lowered to the dataflow graph yet"))
                    .with_primary("not supported by `ampc compile` yet")
                    .with_note("`ampc check` accepts it; see docs/IR.md for what the lowering handles today"),
            );
        }
        Unsupported
    }

    /// E0310: the graph outgrew `limits::MAX_NODES`; lowering stops at once instead of
    /// growing without bound.
    fn too_many_nodes(&mut self, span: Span) -> Unsupported {
        let limit = amp_ir::limits::MAX_NODES;
        self.diags.push(
            Diagnostic::new(Code::TooLarge, span, format!("the model lowers to more than {limit} nodes"))
                .with_primary("lowering stopped here")
                .with_note("the limits are in docs/limits.md"),
        );
        Unsupported
    }

    fn frame(&self) -> &Frame {
        // Lowering always runs inside a function frame.
        &self.frames[self.frames.len() - 1]
    }

    fn frame_mut(&mut self) -> &mut Frame {
        let last = self.frames.len() - 1;
        &mut self.frames[last]
    }

    // ------------------------------------------------------------ graph building

    fn loc(&mut self, span: Span) -> Option<Loc> {
        let file = self.map.get(span.file)?;
        let next = self.files.len() as u32;
        let index = *self.files.entry(span.file).or_insert(next);
        if index == next {
            self.graph.files.push(file.name.clone());
        }
        let (line, col) = file.line_col(span.start as usize);
        Some(Loc { file: index, start: span.start, end: span.end, line: line as u32 + 1, col: col as u32 + 1 })
    }

    /// Adds a node fed by `inputs` (in port order) and returns its index.
    fn node(&mut self, op: Op, inputs: &[Port], outputs: Vec<PayloadTy>, label: &str, span: Span) -> NodeIndex {
        let in_types = inputs.iter().map(|p| p.ty.clone()).collect();
        let idx = self.raw_node(op, in_types, outputs, label, span);
        for (i, p) in inputs.iter().enumerate() {
            self.connect(p, idx, i as u16);
        }
        idx
    }

    fn raw_node(
        &mut self,
        op: Op,
        inputs: Vec<PayloadTy>,
        outputs: Vec<PayloadTy>,
        label: &str,
        span: Span,
    ) -> NodeIndex {
        let (reads, writes) = op.state_fields();
        let loc = self.loc(span);
        self.graph.nodes.add_node(Node {
            op,
            inputs,
            outputs,
            reads,
            writes,
            // The full dynamic context; `passes::minimize_keys` keeps it only where needed.
            key: self.context.clone(),
            label: label.to_string(),
            loc,
            fusion: None,
        })
    }

    /// One past the highest node index: nodes are only added while lowering, so the nodes a
    /// construct emitted are those between its bounds before and after.
    fn node_bound(&self) -> usize {
        petgraph::visit::NodeIndexable::node_bound(&self.graph.nodes)
    }

    fn connect(&mut self, from: &Port, to: NodeIndex, to_port: u16) {
        self.graph.nodes.add_edge(from.node, to, Edge { from_port: from.port, to_port });
    }

    fn out(node: NodeIndex, port: u16, ty: PayloadTy) -> Port {
        Port { node, port, ty }
    }

    fn param_shape(&mut self, name: &str, span: Span) -> R<Vec<u64>> {
        match self.param_index.get(name).and_then(|&i| self.graph.params.get(i)) {
            Some(p) => Ok(p.shape.clone()),
            None => Err(self.unsupported(span, &format!("parameter `{name}` (internal: no such tensor)"))),
        }
    }

    fn dim_value(&mut self, dim: &Dim, span: Span) -> R<u64> {
        let subst = &self.frame().subst;
        let v = dim.substitute(&|s| subst.iter().find(|(x, _)| x == s).map(|(_, d)| d.clone())).value;
        match v {
            Some(v) if v >= 0 => Ok(v as u64),
            _ => Err(self.unsupported(span, "a dimension without a known value")),
        }
    }

    fn shape_of(&mut self, ty: &Ty, span: Span) -> R<Vec<u64>> {
        match ty {
            Ty::Tensor(dims) => dims.iter().map(|d| self.dim_value(d, span)).collect(),
            _ => Err(self.unsupported(span, "a non-tensor value where a tensor was expected")),
        }
    }

    fn constant(&mut self, value: ConstValue, shape: Vec<u64>, span: Span) -> Value {
        let ctrl = self.ctrl.clone();
        let ty = PayloadTy::F32(shape);
        let n = self.node(Op::Const { value }, &[ctrl], vec![ty.clone()], "const", span);
        Value::Tensor(Self::out(n, 0, ty))
    }

    fn new_field(&mut self, name: String, role: FieldRole, span: Span) -> R<FieldId> {
        if self.graph.state.len() >= u16::MAX as usize {
            return Err(self.unsupported(span, "a model with more than 65535 state fields"));
        }
        self.graph.state.push(StateField { name, role });
        Ok(FieldId(self.graph.state.len() as u16 - 1))
    }

    // ------------------------------------------------------------ functions and blocks

    fn call_fn(&mut self, f: FnId, args: Vec<Value>, span: Span, prefix: &str, subst: &[(Symbol, Dim)]) -> R<Value> {
        let def = &self.program.components[f.component.0 as usize].fns[f.index as usize];
        // A call on a child's result (`kids.map(|k| encode(k))`) is the batch of results
        // itself; any other recursive call starts a traversal, not a row-wise form.
        if def.recursive && self.rows.is_some() && !matches!(args.as_slice(), [Value::ChildResult(_)]) {
            return Err(self.not_row_wise());
        }
        if def.recursive {
            return self.recursive_call(f, args, span);
        }
        if self.frames.len() > 64 {
            return Err(self.unsupported(span, "calls nested more than 64 deep"));
        }
        let mut locals = vec![None; def.locals.len()];
        for (p, a) in def.params.iter().zip(args) {
            if let Some(slot) = locals.get_mut(p.0 as usize) {
                *slot = Some(a);
            }
        }
        self.frames.push(Frame { comp: f.component, locals, prefix: prefix.to_string(), subst: subst.to_vec() });
        let result = self.block(&def.body);
        self.frames.pop();
        let result = result?;
        let is_forward = f.component == self.model && def.name == "forward";
        if is_forward && !self.forward_sunk {
            self.forward_sunk = true;
            for port in result.ports() {
                self.forward_ports.push((port.node, port.port));
                self.node(Op::Sink { name: "forward".into() }, &[port], Vec::new(), "forward", def.span);
            }
        }
        Ok(result)
    }

    fn block(&mut self, block: &Block) -> R<Value> {
        for stmt in &block.stmts {
            self.stmt(stmt)?;
        }
        match &block.tail {
            Some(e) => self.expr(e),
            None => Ok(Value::Unit),
        }
    }

    fn bind(&mut self, pattern: &Pattern, value: Value, span: Span) -> R<()> {
        match (pattern, value) {
            (Pattern::Bind(id), v) => {
                if let Some(slot) = self.frame_mut().locals.get_mut(id.0 as usize) {
                    *slot = Some(v);
                }
                Ok(())
            }
            (Pattern::Wildcard, _) => Ok(()),
            (Pattern::Tuple(ps), Value::Tuple(vs)) if ps.len() == vs.len() => {
                for (p, v) in ps.iter().zip(vs) {
                    self.bind(p, v, span)?;
                }
                Ok(())
            }
            _ => Err(self.unsupported(span, "destructuring of this value")),
        }
    }

    fn stmt(&mut self, stmt: &Stmt) -> R<()> {
        match stmt {
            Stmt::Let(p, e) => {
                let v = self.expr(e)?;
                self.bind(p, v, e.span)
            }
            Stmt::Var(id, e) | Stmt::Assign(id, e) => {
                let v = self.expr(e)?;
                self.bind(&Pattern::Bind(*id), v, e.span)
            }
            Stmt::For(..) | Stmt::While(..) if self.rows.is_some() => Err(self.not_row_wise()),
            Stmt::For(p, iter, body) => self.lower_loop(loops::Loop::For(p, iter), body),
            Stmt::While(c, body) => self.lower_loop(loops::Loop::While(c), body),
            Stmt::Expr(e) => self.expr(e).map(|_| ()),
        }
    }

    // ------------------------------------------------------------ expressions

    fn expr(&mut self, e: &Expr) -> R<Value> {
        let span = e.span;
        if self.graph.nodes.node_count() > amp_ir::limits::MAX_NODES {
            return Err(self.too_many_nodes(span));
        }
        if self.rows.is_some() && !self.row_wise_expr(e) {
            return Err(self.not_row_wise());
        }
        match &e.kind {
            ExprKind::Int(v) => Ok(Value::Int(StateExpr::Const(*v))),
            ExprKind::Bool(b) => Ok(Value::Bool(StateExpr::Const(i64::from(*b)))),
            ExprKind::Float(v) => Ok(self.constant(ConstValue::Scalar(*v as f32), Vec::new(), span)),
            ExprKind::Local(id) => match self.frame().locals.get(id.0 as usize).cloned().flatten() {
                Some(Value::LoopInt) => {
                    Err(self.unsupported(span, "an int variable used after the loop that updates it"))
                }
                Some(v) => Ok(v),
                None => Err(self.unsupported(span, "a variable used before it has a value (internal)")),
            },
            ExprKind::Hyper(dim) => {
                let v = self.dim_value(dim, span)?;
                Ok(Value::Int(StateExpr::Const(v as i64)))
            }
            ExprKind::Param(p) => {
                let frame = self.frame();
                let param = &self.program.components[frame.comp.0 as usize].params[*p as usize];
                let prefix = if frame.prefix.is_empty() {
                    param.name.clone()
                } else {
                    format!("{}.{}", frame.prefix, param.name)
                };
                Ok(Value::Param(ParamRef { prefix, instance: param.instance.clone(), subst: frame.subst.clone() }))
            }
            ExprKind::Unary(op, x) => {
                let x = self.expr(x)?;
                match (op, x) {
                    (UnOp::Neg, Value::Tensor(p)) => Ok(self.unary(UnaryFn::Neg, p, "neg", span)),
                    (UnOp::Neg, Value::Loss(l)) => Ok(self.loss_neg(l)),
                    (UnOp::Neg, Value::Int(x)) => Ok(Value::Int(StateExpr::bin(IntOp::Sub, StateExpr::Const(0), x))),
                    (UnOp::Not, Value::Bool(x)) => Ok(Value::Bool(StateExpr::Not(Box::new(x)))),
                    _ => Err(self.unsupported(span, "this unary operation")),
                }
            }
            ExprKind::Binary(op, a, b) => {
                let (x, y) = (self.expr(a)?, self.expr(b)?);
                self.binary(*op, x, y, span)
            }
            ExprKind::Range(a, b) => match (self.expr(a)?, self.expr(b)?) {
                (Value::Int(a), Value::Int(b)) => Ok(Value::Range(a, b)),
                _ => Err(self.unsupported(span, "this range")),
            },
            ExprKind::Builtin(b, args) => self.builtin(*b, args, e),
            ExprKind::CallFn(f, args) => {
                let args = args.iter().map(|a| self.expr(a)).collect::<R<Vec<_>>>()?;
                let (prefix, subst) = (self.frame().prefix.clone(), self.frame().subst.clone());
                self.call_fn(*f, args, span, &prefix, &subst)
            }
            ExprKind::CallInstance { callee, call, args } => {
                let callee = self.expr(callee)?;
                let args = args.iter().map(|a| self.expr(a)).collect::<R<Vec<_>>>()?;
                match callee {
                    Value::Param(param) => self.call_instance(param, call, args, span),
                    Value::ParamElem(array, index) => self.call_element(array, *index, call, args, span),
                    _ => Err(self.unsupported(span, "a call of this value")),
                }
            }
            ExprKind::Field(obj, i) => {
                let obj_value = self.expr(obj)?;
                match (obj_value, &obj.ty) {
                    (Value::Data(mut path), Ty::Record(r)) => {
                        let field = &self.program.records[r.0 as usize].fields[*i as usize];
                        path.push(DataStep::Field(field.name.clone()));
                        self.data_leaf(path, &e.ty, span)
                    }
                    _ => Err(self.unsupported(span, "this field access")),
                }
            }
            ExprKind::TupleField(obj, i) => match self.expr(obj)? {
                Value::Tuple(mut vs) if (*i as usize) < vs.len() => Ok(vs.swap_remove(*i as usize)),
                _ => Err(self.unsupported(span, "this tuple access")),
            },
            ExprKind::Index(obj, index) => {
                let (o, i) = (self.expr(obj)?, self.expr(index)?);
                match (o, i) {
                    (Value::Data(mut path), Value::Int(i)) => {
                        path.push(DataStep::Index(Box::new(i)));
                        self.data_leaf(path, &e.ty, span)
                    }
                    (Value::Param(array), index) => self.param_element(array, index, span),
                    (obj, index) => self.index_value(obj, index, span),
                }
            }
            ExprKind::Tuple(items) => Ok(Value::Tuple(items.iter().map(|x| self.expr(x)).collect::<R<Vec<_>>>()?)),
            ExprKind::List(_) => Err(self.unsupported(span, "a list literal")),
            ExprKind::Map { seq, param, body } => self.map_expr(seq, param, body, span),
            ExprKind::Match(scrutinee, arms) => self.match_expr(scrutinee, arms, span),
            ExprKind::If(c, then, els) => self.if_else(c, then, els.as_deref(), span),
            ExprKind::Block(b) => self.block(b),
            ExprKind::Error => Err(self.unsupported(span, "an expression with errors")),
        }
    }

    /// A value of the instance's data at `path`, by its type.
    fn data_leaf(&mut self, path: Vec<DataStep>, ty: &Ty, span: Span) -> R<Value> {
        match ty {
            Ty::Int => Ok(Value::Int(StateExpr::Data(path))),
            Ty::Bool => Ok(Value::Bool(StateExpr::Data(path))),
            // A batched map's rows have no per-row data reads yet.
            Ty::Tensor(_) if self.rows.is_some() => Err(self.not_row_wise()),
            Ty::Tensor(_) => {
                let shape = self.shape_of(ty, span)?;
                let ctrl = self.ctrl.clone();
                let out = PayloadTy::F32(shape);
                let n = self.node(Op::Read { path }, &[ctrl], vec![out.clone()], "read", span);
                Ok(Value::Tensor(Self::out(n, 0, out)))
            }
            Ty::Seq(_) | Ty::Record(_) | Ty::Enum(_) => Ok(Value::Data(path)),
            _ => Err(self.unsupported(span, "data of this type")),
        }
    }

    fn unary(&mut self, f: UnaryFn, x: Port, label: &str, span: Span) -> Value {
        let ty = x.ty.clone();
        let n = self.node(Op::Unary(f), &[x], vec![ty.clone()], label, span);
        Value::Tensor(Self::out(n, 0, ty))
    }

    fn binary(&mut self, op: BinOp, x: Value, y: Value, span: Span) -> R<Value> {
        match (x, y) {
            (Value::Tensor(a), Value::Tensor(b)) => {
                let f = match op {
                    BinOp::Add => BinaryFn::Add,
                    BinOp::Sub => BinaryFn::Sub,
                    BinOp::Mul => BinaryFn::Mul,
                    BinOp::Div => BinaryFn::Div,
                    _ => return Err(self.unsupported(span, "this operation on tensors")),
                };
                // Rows pair with rows or a scalar; a vector would need repeating per row.
                let scalar = PayloadTy::F32(Vec::new());
                let batch = |t: &PayloadTy| matches!(t, PayloadTy::Batch(_));
                if (batch(&a.ty) || batch(&b.ty)) && a.ty != b.ty && a.ty != scalar && b.ty != scalar {
                    return Err(self.not_row_wise());
                }
                let ty = if a.ty == PayloadTy::F32(Vec::new()) { b.ty.clone() } else { a.ty.clone() };
                let n = self.node(Op::Binary(f), &[a, b], vec![ty.clone()], op.symbol(), span);
                Ok(Value::Tensor(Self::out(n, 0, ty)))
            }
            (Value::Int(a), Value::Int(b)) => {
                let e = StateExpr::bin(int_op(op), a, b);
                Ok(if op.is_comparison() { Value::Bool(e) } else { Value::Int(e) })
            }
            (Value::Bool(a), Value::Bool(b)) if matches!(op, BinOp::And | BinOp::Or | BinOp::Eq | BinOp::Ne) => {
                Ok(Value::Bool(StateExpr::bin(int_op(op), a, b)))
            }
            (x @ Value::Loss(_), y) | (x, y @ Value::Loss(_)) => self.loss_binary(op, x, y, span),
            _ => Err(self.unsupported(span, "this binary operation")),
        }
    }

    fn tensor(&mut self, v: Value, span: Span) -> R<Port> {
        match v {
            Value::Tensor(p) => Ok(p),
            _ => Err(self.unsupported(span, "a non-tensor argument where a tensor was expected")),
        }
    }

    /// Locals of the current frame that a block reads or assigns.
    fn used_locals(block: &Block) -> (BTreeSet<LocalId>, BTreeSet<LocalId>) {
        let mut reads = BTreeSet::new();
        let mut writes = BTreeSet::new();
        crate::uses::walk_block(block, &mut reads, &mut writes);
        (reads, writes)
    }

    /// The locals among `ids` whose current value holds tensor ports.
    fn tensor_locals(&self, ids: &BTreeSet<LocalId>) -> Vec<LocalId> {
        ids.iter()
            .copied()
            .filter(|id| {
                self.frame().locals.get(id.0 as usize).cloned().flatten().is_some_and(|v| !v.ports().is_empty())
            })
            .collect()
    }

    fn local(&self, id: LocalId) -> Option<Value> {
        self.frame().locals.get(id.0 as usize).cloned().flatten()
    }

    fn set_local(&mut self, id: LocalId, v: Value) {
        if let Some(slot) = self.frame_mut().locals.get_mut(id.0 as usize) {
            *slot = Some(v);
        }
    }

    fn if_else(&mut self, cond: &Expr, then: &Block, els: Option<&Expr>, span: Span) -> R<Value> {
        let pred = match self.expr(cond)? {
            Value::Bool(p) | Value::Int(p) => p,
            _ => return Err(self.unsupported(cond.span, "this condition")),
        };
        let (mut reads, mut writes) = Self::used_locals(then);
        if let Some(e) = els {
            crate::uses::walk_expr(e, &mut reads, &mut writes);
        }
        let routed = self.tensor_locals(&reads.union(&writes).copied().collect());
        let writes: Vec<LocalId> = writes.into_iter().collect();
        let sel = Selector::Cond(pred);
        let routing = Routed { locals: &routed, values: Vec::new(), writes: &writes };
        self.branch(&sel, routing, span, "if", |this, arm, _| match (arm, els) {
            (0, _) => this.block(then),
            (_, Some(e)) => this.expr(e),
            (_, None) => Ok(Value::Unit),
        })
    }
}
