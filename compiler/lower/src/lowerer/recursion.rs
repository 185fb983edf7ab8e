//! `match` and structural recursion over trees.
//!
//! `match` is a `switch` on the variant tag (`$tag` of the matched value) with one arm per
//! variant. A recursive function called on a tree from the instance's data becomes a
//! *traversal subgraph*: a `flatmap` over the tree's nodes (numbered in pre-order by the
//! runtime, field `%n`) runs the body once per node, all nodes at once; a recursive call on
//! a child (`encode(left)`) becomes an input of the arm, fed by the child's result, which
//! travels up: `cond` on "is the root" — the root's result returns to the caller with
//! `%n := -1`; any other node's result gets `%site := $site(n)` (the field it hangs from)
//! and `%n := $parent(n)` and a `switch` on `%site` delivers it to that call site in the
//! parent's arm, where joins match it by `(…, %n)`. Independent subtrees proceed in
//! parallel; an arm waits only for its own children. See `docs/IR.md`.

use super::branch::{Routed, Selector};
use super::{Frame, Lowerer, R};
use crate::value::{LossVal, Port, Term, TermKind, Value};
use amp_diagnostics::Span;
use amp_ir::{DataStep, FieldId, FieldRole, IntOp, Op, PayloadTy, StateExpr};
use amp_sema::{EnumId, Expr, FnId, LocalId, MatchArm, Ty};
use petgraph::stable_graph::NodeIndex;
use std::collections::{BTreeSet, HashMap};

/// The recursion being lowered: one per traversal subgraph.
pub(super) struct Recursion {
    function: FnId,
    enum_id: EnumId,
    /// The call-site field.
    site: FieldId,
    /// A child's position in its parent's collection field, when the enum has one.
    index: Option<FieldId>,
    /// The function's result type, for the call sites' input ports.
    ret: Ty,
    /// For each call site used, the nodes that receive the child's result (one per
    /// result port, in `Value::ports` order), wired once the body is lowered.
    sites: HashMap<u32, Vec<(petgraph::stable_graph::NodeIndex, PayloadTy)>>,
    /// The value a call on that site gives (ports of the nodes above).
    site_values: HashMap<u32, Value>,
    /// The tree-node field, and "this node is the root" over it.
    pub(super) node: FieldId,
    pub(super) is_root: StateExpr,
    /// The receivers of scalar result leaves: (call site, leaf), a child's loss when added
    /// to a loss.
    pub(super) scalar_leaves: HashMap<NodeIndex, (u32, u32)>,
    /// The result leaves used as children's losses.
    pub(super) loss_leaves: BTreeSet<u32>,
}

impl Lowerer<'_> {
    /// `match scrutinee { arms }`.
    pub(super) fn match_expr(&mut self, scrutinee: &Expr, arms: &[MatchArm], span: Span) -> R<Value> {
        let Ty::Enum(enum_id) = scrutinee.ty else {
            return Err(self.unsupported(span, "`match` on this value"));
        };
        let Value::Data(path) = self.expr(scrutinee)? else {
            return Err(self.unsupported(span, "`match` on a value that is not instance data"));
        };
        let Some(def) = self.program.enums.get(enum_id.0 as usize) else {
            return Err(self.unsupported(span, "`match` on an unknown enum (internal)"));
        };
        let variants = def.variants.len();
        let mut reads = BTreeSet::new();
        let mut writes = BTreeSet::new();
        for arm in arms {
            crate::uses::walk_expr(&arm.body, &mut reads, &mut writes);
        }
        let routed = self.tensor_locals(&reads.union(&writes).copied().collect());
        let writes: Vec<LocalId> = writes.into_iter().collect();
        let mut tag = path.clone();
        tag.push(DataStep::Field("$tag".into()));
        let sel = Selector::Switch(StateExpr::Data(tag), variants);
        let routing = Routed { locals: &routed, values: Vec::new(), writes: &writes };
        self.branch(&sel, routing, span, "match", |this, variant, _| {
            let arm = arms
                .iter()
                .find(|a| a.variant == Some(variant as u32))
                .or_else(|| arms.iter().find(|a| a.variant.is_none()));
            let Some(arm) = arm else { return Ok(Value::Unit) };
            for (field, pattern) in &arm.bindings {
                let value = this.variant_field(enum_id, variant as u32, *field, &path, arm.span)?;
                this.bind(pattern, value, arm.span)?;
            }
            this.expr(&arm.body)
        })
    }

    /// Field `field` of variant `variant` of the value at `path`: instance data, or inside
    /// a traversal of this enum, a subtree (a recursive call site).
    fn variant_field(&mut self, enum_id: EnumId, variant: u32, field: u32, path: &[DataStep], span: Span) -> R<Value> {
        let def = &self.program.enums[enum_id.0 as usize];
        let Some(f) = def.variants.get(variant as usize).and_then(|v| v.fields.get(field as usize)) else {
            return Err(self.unsupported(span, "a variant field that does not exist (internal)"));
        };
        let in_traversal = self.recursions.last().is_some_and(|r| r.enum_id == enum_id);
        let before: usize = def.variants[..variant as usize].iter().map(|v| v.fields.len()).sum();
        let site = (before + field as usize) as u32;
        if in_traversal && f.ty == Ty::Enum(enum_id) {
            return Ok(Value::Subtree { site });
        }
        let (name, ty) = (f.name.clone(), f.ty.clone());
        let mut path = path.to_vec();
        // The arm's variant, so that the field is this variant's even where another
        // variant has a field of the same name (its own range, `amp_data::ranges`).
        path.push(DataStep::Variant(variant));
        path.push(DataStep::Field(name));
        if in_traversal && is_collection_of(&ty, enum_id) {
            return Ok(Value::Subtrees { site, path });
        }
        self.data_leaf(path, &ty, span)
    }

    /// A call of a recursive function: a traversal from outside, or a call on a child.
    pub(super) fn recursive_call(&mut self, f: FnId, args: Vec<Value>, span: Span) -> R<Value> {
        match args.as_slice() {
            [Value::Subtree { site }] => {
                if self.recursions.last().is_none_or(|r| r.function != f) {
                    return Err(self.unsupported(span, "mutual recursion"));
                }
                self.call_site(*site, span)
            }
            [Value::ChildResult(result)] => {
                if self.recursions.last().is_none_or(|r| r.function != f) {
                    return Err(self.unsupported(span, "mutual recursion"));
                }
                Ok((**result).clone())
            }
            [Value::Data(path)] => self.traversal(f, path.clone(), span),
            _ => Err(self.unsupported(span, "recursion with arguments besides the tree")),
        }
    }

    /// The value the call on `site` of the current node gives: new input ports of the arm.
    fn call_site(&mut self, site: u32, span: Span) -> R<Value> {
        let Some(rec) = self.recursions.last() else { return Err(self.unsupported(span, "recursion (internal)")) };
        if let Some(v) = rec.site_values.get(&site) {
            return Ok(v.clone());
        }
        let (ret, site_field, index) = (rec.ret.clone(), rec.site, rec.index);
        let shape = self.result_shape(&ret, span)?;
        let mut nodes = Vec::new();
        let mut ports = Vec::new();
        let mut scalars = Vec::new();
        for (leaf, ty) in shape.into_iter().enumerate() {
            let op = Op::Isu {
                field: site_field,
                value: StateExpr::Const(-1),
                inverse: Some(StateExpr::Const(i64::from(site))),
            };
            let n = self.raw_node(op, vec![ty.clone()], vec![ty.clone()], "from child", span);
            if ty == PayloadTy::F32(Vec::new()) {
                scalars.push((n, (site, leaf as u32)));
            }
            nodes.push((n, ty.clone()));
            let mut port = Self::out(n, 0, ty.clone());
            // A plain recursive field's child is at position 0 of its site.
            if let Some(e) = index {
                let op = Op::Isu { field: e, value: StateExpr::Const(-1), inverse: Some(StateExpr::Const(0)) };
                let n = self.node(op, &[port], vec![ty.clone()], "from child", span);
                port = Self::out(n, 0, ty);
            }
            ports.push(port);
        }
        let value = self.value_of(&ret, &mut ports.into_iter(), span)?;
        if let Some(rec) = self.recursions.last_mut() {
            rec.sites.insert(site, nodes);
            rec.scalar_leaves.extend(scalars);
            rec.site_values.insert(site, value.clone());
        }
        Ok(value)
    }

    /// The results of the recursive calls on every child in the collection at `site` of the
    /// current node (`children.map(|c| encode(c))`), as the `map` over the children sees
    /// them: per result leaf, a batch with a row per child, in order, grouped by the
    /// children's positions (`%index`); a tuple result is a zip of such batches.
    pub(super) fn collection_site(&mut self, site: u32, path: &[DataStep], span: Span) -> R<Value> {
        let Some(rec) = self.recursions.last() else { return Err(self.unsupported(span, "recursion (internal)")) };
        if let Some(v) = rec.site_values.get(&site) {
            return Ok(v.clone());
        }
        let (ret, Some(index)) = (rec.ret.clone(), rec.index) else {
            return Err(self.unsupported(span, "a collection of subtrees (internal)"));
        };
        let flat = |t: &Ty| matches!(t, Ty::Tensor(_));
        if !(flat(&ret) || matches!(&ret, Ty::Tuple(parts) if parts.iter().all(flat))) {
            return Err(self.unsupported(span, "a collection of subtrees whose result nests tuples"));
        }
        let count = StateExpr::Len(path.to_vec());
        let mut nodes = Vec::new();
        let mut batches = Vec::new();
        for ty in self.result_shape(&ret, span)? {
            let PayloadTy::F32(dims) = ty.clone() else {
                return Err(self.unsupported(span, "a recursive function returning something other than tensors"));
            };
            let batch = PayloadTy::Batch(dims);
            let op = Op::Group { field: index, count: count.clone() };
            let n = self.raw_node(op, vec![ty.clone(), PayloadTy::Unit], vec![batch.clone()], "children", span);
            // The gate: this node's own control, so that a node without children gets a
            // zero-row batch.
            let ctrl = self.ctrl.clone();
            self.connect(&ctrl, n, 1);
            nodes.push((n, ty));
            batches.push(Value::Batch { port: Self::out(n, 0, batch), len: count.clone() });
        }
        let value = match ret {
            Ty::Tuple(_) => Value::Zip(batches),
            _ => batches.pop().ok_or_else(|| self.unsupported(span, "a result (internal)"))?,
        };
        if let Some(rec) = self.recursions.last_mut() {
            rec.sites.insert(site, nodes);
            rec.site_values.insert(site, value.clone());
        }
        Ok(value)
    }

    /// Whether the data at `path` lies inside a tree (the path passes through a value of a
    /// recursive enum and goes on): the runtime numbers the nodes of a whole tree, so a
    /// traversal must start at one's root.
    fn inside_a_tree(&self, path: &[DataStep]) -> bool {
        use amp_ir::DataTy;
        let Some(schema) = self.graph.input.as_ref() else { return false };
        let mut ty = DataTy::Record(schema.input);
        let mut variant: Option<u32> = None;
        for step in path {
            if let DataTy::Enum(e) = ty {
                if schema.is_recursive(e) {
                    return true;
                }
            }
            let next = match (step, &ty) {
                (DataStep::Variant(k), DataTy::Enum(_)) => {
                    variant = Some(*k);
                    continue;
                }
                (DataStep::Field(name), DataTy::Record(r)) => {
                    schema.records.get(*r as usize).and_then(|r| r.fields.iter().find(|f| f.name == *name))
                }
                (DataStep::Field(name), DataTy::Enum(e)) => schema
                    .enums
                    .get(*e as usize)
                    .and_then(|e| e.variants.get(variant? as usize))
                    .and_then(|v| v.fields.iter().find(|f| f.name == *name)),
                (DataStep::Index(_), DataTy::Seq(item)) => {
                    ty = (**item).clone();
                    variant = None;
                    continue;
                }
                _ => return false,
            };
            let Some(field) = next else { return false };
            ty = field.ty.clone();
            variant = None;
        }
        false
    }

    /// The result type of the recursive function being lowered.
    pub(super) fn recursion_result(&self) -> Option<Ty> {
        self.recursions.last().map(|r| r.ret.clone())
    }

    /// The payload types of a function result made of tensors and tuples, in port order.
    fn result_shape(&mut self, ty: &Ty, span: Span) -> R<Vec<PayloadTy>> {
        match ty {
            Ty::Tensor(_) => Ok(vec![PayloadTy::F32(self.shape_of(ty, span)?)]),
            Ty::Tuple(parts) => {
                let mut out = Vec::new();
                for p in parts {
                    out.extend(self.result_shape(p, span)?);
                }
                Ok(out)
            }
            _ => Err(self.unsupported(span, "a recursive function returning something other than tensors")),
        }
    }

    fn value_of(&mut self, ty: &Ty, ports: &mut impl Iterator<Item = Port>, span: Span) -> R<Value> {
        match ty {
            Ty::Tensor(_) => {
                ports.next().map(Value::Tensor).ok_or_else(|| self.unsupported(span, "a result (internal)"))
            }
            Ty::Tuple(parts) => {
                Ok(Value::Tuple(parts.iter().map(|p| self.value_of(p, ports, span)).collect::<R<Vec<_>>>()?))
            }
            _ => Err(self.unsupported(span, "a recursive function returning something other than tensors")),
        }
    }

    /// The traversal subgraph of `f` over the tree at `path`; returns the root's result in
    /// the caller's context.
    fn traversal(&mut self, f: FnId, path: Vec<DataStep>, span: Span) -> R<Value> {
        let def = &self.program.components[f.component.0 as usize].fns[f.index as usize];
        let (Some(&param), 1) = (def.params.first(), def.params.len()) else {
            return Err(self.unsupported(span, "recursion with arguments besides the tree"));
        };
        let enum_id = match def.locals.get(param.0 as usize).map(|l| &l.ty) {
            Some(Ty::Enum(e)) => *e,
            Some(Ty::Record(_)) => {
                let what = "recursion over a record (declare the tree as an enum of one variant, \
                            `enum Tree { Node { word: int, children: [Tree] } }`, and `match` on it)";
                return Err(self.unsupported(span, what));
            }
            _ => return Err(self.unsupported(span, "recursion over something other than an enum")),
        };
        if self.recursions.len() >= 8 {
            return Err(self.unsupported(span, "traversals nested more than 8 deep"));
        }
        if self.inside_a_tree(&path) {
            let what = "a traversal of a subtree of a tree (a field of a `match`ed tree node outside a recursive \
                        function over that tree): recurse from the tree's root";
            return Err(self.unsupported(span, what));
        }
        let memo = format!("{f:?} {path:?} {:?} {:?} {}", self.context, self.ctrl, self.frame().prefix);
        if let Some(v) = self.traversals.get(&memo) {
            return Ok(v.clone());
        }
        let ret = def.ret.clone();
        let k = self.counters.trees;
        self.counters.trees += 1;
        let node = self.new_field(format!("n{k}"), FieldRole::TreeNode, span)?;
        let site = self.new_field(format!("site{k}"), FieldRole::Data, span)?;
        let index = if self.sites_of(enum_id, |ty| is_collection_of(ty, enum_id)).is_empty() {
            None
        } else {
            Some(self.new_field(format!("index{k}"), FieldRole::Element, span)?)
        };
        let here: Vec<DataStep> =
            path.iter().cloned().chain([DataStep::Index(Box::new(StateExpr::Field(node)))]).collect();
        let attr = |name: &str| {
            let mut p = here.clone();
            p.push(DataStep::Field(name.into()));
            StateExpr::Data(p)
        };
        let outer_ctrl = self.ctrl.clone();
        let count = StateExpr::Len(path.clone());
        let ctrl = self.node(
            Op::Flatmap { field: node, count },
            std::slice::from_ref(&outer_ctrl),
            vec![PayloadTy::Unit],
            "tree nodes",
            span,
        );
        let outer_context = self.context.clone();
        self.context.push(node);
        self.ctrl = Self::out(ctrl, 0, PayloadTy::Unit);
        let is_root = StateExpr::bin(IntOp::Eq, attr("$parent"), StateExpr::Const(-1));
        self.recursions.push(Recursion {
            function: f,
            enum_id,
            site,
            index,
            ret: ret.clone(),
            sites: HashMap::new(),
            site_values: HashMap::new(),
            node,
            is_root: is_root.clone(),
            scalar_leaves: HashMap::new(),
            loss_leaves: BTreeSet::new(),
        });
        let mut locals = vec![None; def.locals.len()];
        locals[param.0 as usize] = Some(Value::Data(here.clone()));
        let (prefix, subst) = (self.frame().prefix.clone(), self.frame().subst.clone());
        self.frames.push(Frame { comp: f.component, locals, prefix, subst });
        let body = self.block(&def.body);
        self.frames.pop();
        let rec = self.recursions.pop();
        let result = body?;
        let Some(rec) = rec else { return Err(self.unsupported(span, "recursion (internal)")) };
        let leaves = flatten(result.clone());
        let result = self.tree_losses(&rec, enum_id, result, &leaves, span)?;
        // Route each result port: the root's back to the caller, the others up to the parent.
        let sites = self.schema_sites(enum_id);
        let mut at_root = Vec::new();
        let ports = leaves.iter().enumerate().filter_map(|(j, v)| match v {
            Value::Tensor(p) => Some((j, p.clone())),
            _ => None,
        });
        for (j, port) in ports {
            let ty = port.ty.clone();
            let cond = self.node(Op::Cond { pred: is_root.clone() }, &[port], vec![ty.clone(); 2], "is root", span);
            let up_site = Op::Isu { field: site, value: attr("$site"), inverse: Some(StateExpr::Const(-1)) };
            let mut up_site =
                self.node(up_site, &[Self::out(cond, 1, ty.clone())], vec![ty.clone()], "to parent", span);
            let mut child = here.clone();
            child.push(DataStep::Field("$child".into()));
            child.push(DataStep::Index(Box::new(StateExpr::Field(site))));
            // Where the enum has collections, a child also carries its position there: the
            // group at a collection site orders by it, and the way back finds the child by
            // site and position.
            if let Some(e) = index {
                let op = Op::Isu { field: e, value: attr("$index"), inverse: Some(StateExpr::Const(-1)) };
                up_site = self.node(op, &[Self::out(up_site, 0, ty.clone())], vec![ty.clone()], "to parent", span);
                child.push(DataStep::Index(Box::new(StateExpr::Field(e))));
            }
            let up = Op::Isu { field: node, value: attr("$parent"), inverse: Some(StateExpr::Data(child)) };
            let up = self.node(up, &[Self::out(up_site, 0, ty.clone())], vec![ty.clone()], "to parent", span);
            let switch = Op::Switch { index: StateExpr::Field(site), arms: sites };
            let switch =
                self.node(switch, &[Self::out(up, 0, ty.clone())], vec![ty.clone(); sites as usize], "call site", span);
            for (&s, receivers) in &rec.sites {
                if let Some((receiver, _)) = receivers.get(j) {
                    self.connect(&Self::out(switch, s as u16, ty.clone()), *receiver, 0);
                }
            }
            self.context = outer_context.clone();
            let root = Op::Isu { field: node, value: StateExpr::Const(-1), inverse: Some(StateExpr::Const(0)) };
            let root = self.node(root, &[Self::out(cond, 0, ty.clone())], vec![ty.clone()], "root", span);
            self.context.push(node);
            at_root.push(Self::out(root, 0, ty));
        }
        self.context = outer_context;
        self.ctrl = outer_ctrl;
        let value = result.with_ports(&mut at_root.into_iter());
        self.traversals.insert(memo, value.clone());
        Ok(value)
    }

    /// Checks the losses of a traversal's result and returns the result with each loss as
    /// the caller sees it. A result leaf that is a loss is the sum of the node's own terms
    /// and its children's losses: its own terms are emitted at every node of the tree, so
    /// the root's loss is the sum over the tree exactly when every child's loss is added
    /// once and unscaled; the children's terms then drop out.
    fn tree_losses(
        &mut self,
        rec: &Recursion,
        enum_id: EnumId,
        result: Value,
        leaves: &[Value],
        span: Span,
    ) -> R<Value> {
        let recursive_sites = self.sites_of(enum_id, |ty| *ty == Ty::Enum(enum_id));
        let collection_sites = self.sites_of(enum_id, |ty| is_collection_of(ty, enum_id));
        for (j, leaf) in leaves.iter().enumerate() {
            let j = j as u32;
            let grouped = collection_sites.iter().any(|s| rec.sites.get(s).is_some_and(|r| r.len() > j as usize));
            if matches!(leaf, Value::Loss(_)) && grouped {
                let what = "a loss over a tree whose children are in a collection (sum the losses at the root instead)";
                return Err(self.loss_error(span, what));
            }
            let Value::Loss(l) = leaf else {
                if rec.loss_leaves.contains(&j) {
                    return Err(
                        self.loss_error(span, "a child's result added to a loss where the node's result is not a loss")
                    );
                }
                continue;
            };
            for &site in &recursive_sites {
                let terms: Vec<&Term> =
                    l.terms.iter().filter(|t| matches!(t.kind, TermKind::Child { site: s, .. } if s == site)).collect();
                let once = matches!(terms.as_slice(), [t] if t.kind == (TermKind::Child { site, leaf: j }) && t.weight == 1.0 && t.count.is_none());
                if !once {
                    let what = "a loss over a tree that does not add each child's loss exactly once, unscaled";
                    return Err(self.loss_error(span, what));
                }
            }
            // A child's loss used as a tensor besides (in a term of its own, an output)
            // would need its value, which the children do not send.
            let receivers: Vec<NodeIndex> =
                rec.sites.values().filter_map(|r| r.get(j as usize).map(|(n, _)| *n)).collect();
            if receivers.into_iter().any(|n| self.reaches_end(n)) {
                return Err(self.loss_error(span, "a child's loss used other than added to the node's loss"));
            }
        }
        let strip = |v: Value| match v {
            Value::Loss(l) => {
                Value::Loss(LossVal { terms: l.terms.into_iter().filter(|t| t.kind == TermKind::Node).collect() })
            }
            other => other,
        };
        Ok(map_leaves(result, &strip))
    }

    /// Whether a loss or sink node is downstream of `n`.
    fn reaches_end(&self, n: NodeIndex) -> bool {
        let mut seen = BTreeSet::new();
        let mut stack = vec![n];
        while let Some(x) = stack.pop() {
            if !seen.insert(x) {
                continue;
            }
            if x != n && matches!(self.graph.nodes[x].op, Op::Loss(_) | Op::Sink { .. }) {
                return true;
            }
            stack.extend(self.graph.nodes.neighbors_directed(x, petgraph::Direction::Outgoing));
        }
        false
    }

    /// The call sites of an enum whose field type passes `holds`: those that hold a subtree
    /// (the enum's own type) or children (a collection of it).
    fn sites_of(&self, enum_id: EnumId, holds: impl Fn(&Ty) -> bool) -> Vec<u32> {
        let Some(def) = self.program.enums.get(enum_id.0 as usize) else { return Vec::new() };
        let fields = def.variants.iter().flat_map(|v| v.fields.iter());
        fields.enumerate().filter(|(_, f)| holds(&f.ty)).map(|(i, _)| i as u32).collect()
    }

    /// The number of call sites of an enum: the fields of all its variants.
    fn schema_sites(&self, enum_id: EnumId) -> u32 {
        self.program.enums.get(enum_id.0 as usize).map_or(0, |e| e.variants.iter().map(|v| v.fields.len() as u32).sum())
    }
}

/// Whether `ty` is `[E]`: a collection field of `enum_id`'s trees.
fn is_collection_of(ty: &Ty, enum_id: EnumId) -> bool {
    matches!(ty, Ty::Seq(item) if **item == Ty::Enum(enum_id))
}

/// The leaves of a result (tuples flattened), in the order of the function's result type.
fn flatten(v: Value) -> Vec<Value> {
    match v {
        Value::Tuple(vs) => vs.into_iter().flat_map(flatten).collect(),
        other => vec![other],
    }
}

fn map_leaves(v: Value, f: &impl Fn(Value) -> Value) -> Value {
    match v {
        Value::Tuple(vs) => Value::Tuple(vs.into_iter().map(|x| map_leaves(x, f)).collect()),
        other => f(other),
    }
}
