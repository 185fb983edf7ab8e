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
use crate::value::{Port, Value};
use amp_diagnostics::Span;
use amp_ir::{DataStep, FieldId, FieldRole, IntOp, Op, PayloadTy, StateExpr};
use amp_sema::{EnumId, Expr, FnId, LocalId, MatchArm, Ty};
use std::collections::{BTreeSet, HashMap};

/// The recursion being lowered: one per traversal subgraph.
pub(super) struct Recursion {
    function: FnId,
    enum_id: EnumId,
    /// The call-site field.
    site: FieldId,
    /// The function's result type, for the call sites' input ports.
    ret: Ty,
    /// For each call site used, the nodes that receive the child's result (one per
    /// result port, in `Value::ports` order), wired once the body is lowered.
    sites: HashMap<u32, Vec<(petgraph::stable_graph::NodeIndex, PayloadTy)>>,
    /// The value a call on that site gives (ports of the nodes above).
    site_values: HashMap<u32, Value>,
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
        if in_traversal && f.ty == Ty::Enum(enum_id) {
            let before: usize = def.variants[..variant as usize].iter().map(|v| v.fields.len()).sum();
            return Ok(Value::Subtree { site: (before + field as usize) as u32 });
        }
        let (name, ty) = (f.name.clone(), f.ty.clone());
        let mut path = path.to_vec();
        path.push(DataStep::Field(name));
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
        let (ret, site_field) = (rec.ret.clone(), rec.site);
        let shape = self.result_shape(&ret, span)?;
        let mut nodes = Vec::new();
        let mut ports = Vec::new();
        for ty in shape {
            let op = Op::Isu {
                field: site_field,
                value: StateExpr::Const(-1),
                inverse: Some(StateExpr::Const(i64::from(site))),
            };
            let n = self.raw_node(op, vec![ty.clone()], vec![ty.clone()], "from child", span);
            nodes.push((n, ty.clone()));
            ports.push(Self::out(n, 0, ty));
        }
        let value = self.value_of(&ret, &mut ports.into_iter(), span)?;
        if let Some(rec) = self.recursions.last_mut() {
            rec.sites.insert(site, nodes);
            rec.site_values.insert(site, value.clone());
        }
        Ok(value)
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
        let Some(Ty::Enum(enum_id)) = def.locals.get(param.0 as usize).map(|l| l.ty.clone()) else {
            return Err(self.unsupported(span, "recursion over something other than an enum"));
        };
        if self.recursions.len() >= 8 {
            return Err(self.unsupported(span, "traversals nested more than 8 deep"));
        }
        let ret = def.ret.clone();
        let k = self.counters.trees;
        self.counters.trees += 1;
        let node = self.new_field(format!("n{k}"), FieldRole::TreeNode, span)?;
        let site = self.new_field(format!("site{k}"), FieldRole::Data, span)?;
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
        self.recursions.push(Recursion {
            function: f,
            enum_id,
            site,
            ret: ret.clone(),
            sites: HashMap::new(),
            site_values: HashMap::new(),
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
        // Route each result port: the root's back to the caller, the others up to the parent.
        let is_root = StateExpr::bin(IntOp::Eq, attr("$parent"), StateExpr::Const(-1));
        let sites = self.schema_sites(enum_id);
        let mut at_root = Vec::new();
        for (j, port) in result.ports().into_iter().enumerate() {
            let ty = port.ty.clone();
            let cond = self.node(Op::Cond { pred: is_root.clone() }, &[port], vec![ty.clone(); 2], "is root", span);
            let up_site = Op::Isu { field: site, value: attr("$site"), inverse: Some(StateExpr::Const(-1)) };
            let up_site = self.node(up_site, &[Self::out(cond, 1, ty.clone())], vec![ty.clone()], "to parent", span);
            let mut child = here.clone();
            child.push(DataStep::Field("$child".into()));
            child.push(DataStep::Index(Box::new(StateExpr::Field(site))));
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
        Ok(result.with_ports(&mut at_root.into_iter()))
    }

    /// The number of call sites of an enum: the fields of all its variants.
    fn schema_sites(&self, enum_id: EnumId) -> u32 {
        self.program.enums.get(enum_id.0 as usize).map_or(0, |e| e.variants.iter().map(|v| v.fields.len() as u32).sum())
    }
}
