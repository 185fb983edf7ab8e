//! The typed program: what the checker hands to lowering, the reference evaluator and the
//! language server. Names are resolved to ids, every expression carries its type, layers
//! are described once (symbolically) and instantiated by substitution.

use crate::shape::{Dim, Shape, Symbol};
use amp_diagnostics::Span;
use amp_grammar::ast::{BinOp, ComponentKind, UnOp};
use amp_ir::UnaryFn;
use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RecordId(pub u32);
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EnumId(pub u32);
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ComponentId(pub u32);
/// A local variable of one function (parameters, lets, vars, pattern and closure bindings).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LocalId(pub u32);

/// A function of a component: `(component, index into its fns)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FnId {
    pub component: ComponentId,
    pub index: u32,
}

/// What a `param` declaration creates, with dimensions in its component's symbols.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Instance {
    /// weight `[output, input]`, bias `[output]`.
    Linear { input: Dim, output: Dim },
    /// weight `[count, dim]`.
    Embedding { count: Dim, dim: Dim },
    /// weight `[dim]` (ones) and bias `[dim]` (zeros): `layer_norm(x) * weight + bias`.
    LayerNorm { dim: Dim },
    /// A `layer` with its hyperparameter arguments (one per hyperparameter, in order).
    Layer { layer: ComponentId, args: Vec<Dim> },
    /// `[elem; len]`, indexed at run time.
    Array { elem: Arc<Instance>, len: Dim },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ty {
    Int,
    Bool,
    /// A tensor of f32; rank 0 is the scalar `f32`.
    Tensor(Shape),
    /// `[T]`, a sequence whose length is known at run time.
    Seq(Box<Ty>),
    /// `(A, B)`; the empty tuple is the unit type.
    Tuple(Vec<Ty>),
    Record(RecordId),
    Enum(EnumId),
    /// A parameterized component (`param` binding), callable.
    Instance(Arc<Instance>),
    /// The type of an expression that already has an error; fits everything.
    Error,
}

impl Ty {
    pub fn unit() -> Ty {
        Ty::Tuple(Vec::new())
    }

    pub fn scalar() -> Ty {
        Ty::Tensor(Vec::new())
    }

    pub fn is_error(&self) -> bool {
        matches!(self, Ty::Error)
    }

    /// Whether a value of type `self` may stand where `expected` is wanted; `Error` fits
    /// everything so that one mistake is reported once.
    pub fn fits(&self, expected: &Ty) -> bool {
        match (self, expected) {
            (Ty::Error, _) | (_, Ty::Error) => true,
            (Ty::Tensor(a), Ty::Tensor(b)) => a == b,
            (Ty::Seq(a), Ty::Seq(b)) => a.fits(b),
            (Ty::Tuple(a), Ty::Tuple(b)) => a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.fits(y)),
            (a, b) => a == b,
        }
    }

    pub fn contains_error(&self) -> bool {
        match self {
            Ty::Error => true,
            Ty::Seq(t) => t.contains_error(),
            Ty::Tuple(ts) => ts.iter().any(Ty::contains_error),
            _ => false,
        }
    }
}

#[derive(Clone, Debug)]
pub struct FieldDef {
    pub name: String,
    pub ty: Ty,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub struct RecordDef {
    pub name: String,
    pub fields: Vec<FieldDef>,
    pub span: Span,
    pub doc: Option<String>,
}

#[derive(Clone, Debug)]
pub struct VariantDef {
    pub name: String,
    pub fields: Vec<FieldDef>,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub struct EnumDef {
    pub name: String,
    pub variants: Vec<VariantDef>,
    pub span: Span,
    pub doc: Option<String>,
    /// Whether some variant contains this enum again (a tree).
    pub recursive: bool,
}

#[derive(Clone, Debug)]
pub struct HyperParamDef {
    pub name: String,
    pub symbol: Symbol,
    /// The value a model is compiled with (default or `-D`); `None` inside layers.
    pub value: Option<i64>,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub struct ParamDef {
    pub name: String,
    pub instance: Arc<Instance>,
    pub span: Span,
    pub doc: Option<String>,
}

#[derive(Clone, Debug)]
pub struct LocalDef {
    pub name: String,
    pub ty: Ty,
    pub span: Span,
    pub mutable: bool,
}

#[derive(Clone, Debug)]
pub struct FnDef {
    pub name: String,
    pub params: Vec<LocalId>,
    pub ret: Ty,
    pub body: Block,
    pub locals: Vec<LocalDef>,
    pub span: Span,
    pub doc: Option<String>,
    /// Part of a recursive cycle (structural recursion over a tree).
    pub recursive: bool,
}

#[derive(Clone, Debug)]
pub struct ComponentDef {
    pub kind: ComponentKind,
    pub name: String,
    pub hyperparams: Vec<HyperParamDef>,
    pub params: Vec<ParamDef>,
    pub fns: Vec<FnDef>,
    pub span: Span,
    pub doc: Option<String>,
}

impl ComponentDef {
    pub fn fn_named(&self, name: &str) -> Option<usize> {
        self.fns.iter().position(|f| f.name == name)
    }
}

#[derive(Clone, Debug)]
pub struct NetworkNode {
    pub name: String,
    pub kind: amp_grammar::ast::NetStmtKind,
    /// For nodes and outputs: the layer applied to the concatenation of the sources.
    pub instance: Option<Arc<Instance>>,
    pub activation: Option<Builtin>,
    pub width: Option<Dim>,
    /// Indices of source nodes in `NetworkDef::nodes`.
    pub sources: Vec<usize>,
    /// Where each source is named in the node's `from` clause, parallel to `sources`:
    /// the rollout analysis points at an edge there.
    pub source_spans: Vec<Span>,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub struct NetworkDef {
    pub name: String,
    pub hyperparams: Vec<HyperParamDef>,
    pub nodes: Vec<NetworkNode>,
    pub span: Span,
}

/// The built-in functions. Parameterized primitives (`Linear`, `Embedding`, `LayerNorm`) are
/// [`Instance`]s, not built-ins.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Builtin {
    /// A function of the IR's vocabulary (`amp_ir::vocab`), by its name there: `relu`,
    /// `softmax`, `layer_norm`, ... (all but `neg`, which is the operator `-x`).
    Unary(UnaryFn),
    Dropout,
    Dot,
    Concat,
    Split,
    Zeros,
    Ones,
    TopK,
    Argmax,
    Sum,
    Mean,
    CrossEntropy,
    Mse,
    Len,
    Zip,
    Range,
    ScatterSum,
}

impl Builtin {
    /// The built-ins that are not the vocabulary's unary functions.
    const OTHERS: [Builtin; 16] = [
        Builtin::Dropout,
        Builtin::Dot,
        Builtin::Concat,
        Builtin::Split,
        Builtin::Zeros,
        Builtin::Ones,
        Builtin::TopK,
        Builtin::Argmax,
        Builtin::Sum,
        Builtin::Mean,
        Builtin::CrossEntropy,
        Builtin::Mse,
        Builtin::Len,
        Builtin::Zip,
        Builtin::Range,
        Builtin::ScatterSum,
    ];

    /// Every built-in: the vocabulary's unary functions first, in its order.
    pub fn all() -> impl Iterator<Item = Builtin> {
        UnaryFn::all().filter(|&f| f != UnaryFn::Neg).map(Builtin::Unary).chain(Builtin::OTHERS)
    }

    pub fn name(self) -> &'static str {
        match self {
            Builtin::Unary(f) => f.name(),
            Builtin::Dropout => "dropout",
            Builtin::Dot => "dot",
            Builtin::Concat => "concat",
            Builtin::Split => "split",
            Builtin::Zeros => "zeros",
            Builtin::Ones => "ones",
            Builtin::TopK => "top_k",
            Builtin::Argmax => "argmax",
            Builtin::Sum => "sum",
            Builtin::Mean => "mean",
            Builtin::CrossEntropy => "cross_entropy",
            Builtin::Mse => "mse",
            Builtin::Len => "len",
            Builtin::Zip => "zip",
            Builtin::Range => "range",
            Builtin::ScatterSum => "scatter_sum",
        }
    }

    pub fn from_name(name: &str) -> Option<Builtin> {
        Builtin::all().find(|b| b.name() == name)
    }

    /// Elementwise functions that keep the shape.
    pub fn is_elementwise(self) -> bool {
        matches!(self, Builtin::Unary(f) if f.is_elementwise())
    }

    /// A function of the vocabulary over rows of the last dimension (`softmax`,
    /// `log_softmax`, `layer_norm`).
    pub fn is_rowwise(self) -> bool {
        matches!(self, Builtin::Unary(f) if !f.is_elementwise())
    }

    /// `softmax` or `log_softmax`, which also take a sequence of scalars.
    pub fn is_softmax(self) -> bool {
        matches!(self, Builtin::Unary(UnaryFn::Softmax | UnaryFn::LogSoftmax))
    }
}

#[derive(Clone, Debug)]
pub struct Expr {
    pub kind: ExprKind,
    pub ty: Ty,
    pub span: Span,
}

/// What an instance call invokes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InstanceCall {
    /// `Linear`, `Embedding` or `LayerNorm` applied to its input.
    Primitive,
    /// A function of the layer (`apply` for a plain call).
    LayerFn(u32),
}

#[derive(Clone, Debug)]
pub enum ExprKind {
    Int(i64),
    Float(f64),
    Bool(bool),
    Local(LocalId),
    /// An int-valued hyperparameter or constant used as a value.
    Hyper(Dim),
    /// A `param` of the enclosing component.
    Param(u32),
    Unary(UnOp, Box<Expr>),
    Binary(BinOp, Box<Expr>, Box<Expr>),
    /// `a..b` as a sequence of ints.
    Range(Box<Expr>, Box<Expr>),
    Builtin(Builtin, Vec<Expr>),
    /// A call of a function of the same component (possibly recursive).
    CallFn(FnId, Vec<Expr>),
    /// `cell(x)`, `expert[i](x)`, `tree.leaf(x)`.
    CallInstance {
        callee: Box<Expr>,
        call: InstanceCall,
        args: Vec<Expr>,
    },
    /// `x.tokens`: field index of the record.
    Field(Box<Expr>, u32),
    TupleField(Box<Expr>, u32),
    /// `xs[i]` (gather), `v[i]` (tensor element), `experts[i]` (array element).
    Index(Box<Expr>, Box<Expr>),
    Tuple(Vec<Expr>),
    List(Vec<Expr>),
    /// `xs.map(|x| body)`.
    Map {
        seq: Box<Expr>,
        param: Pattern,
        body: Box<Expr>,
    },
    If(Box<Expr>, Block, Option<Box<Expr>>),
    Match(Box<Expr>, Vec<MatchArm>),
    Block(Block),
    Error,
}

#[derive(Clone, Debug)]
pub struct Block {
    pub stmts: Vec<Stmt>,
    pub tail: Option<Box<Expr>>,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub enum Stmt {
    Let(Pattern, Expr),
    Var(LocalId, Expr),
    Assign(LocalId, Expr),
    For(Pattern, Expr, Block),
    While(Expr, Block),
    Expr(Expr),
}

#[derive(Clone, Debug)]
pub enum Pattern {
    Bind(LocalId),
    Wildcard,
    Tuple(Vec<Pattern>),
}

#[derive(Clone, Debug)]
pub struct MatchArm {
    /// `None` for a wildcard arm.
    pub variant: Option<u32>,
    /// (field index, pattern) for each bound field.
    pub bindings: Vec<(u32, Pattern)>,
    pub body: Expr,
    pub span: Span,
}

/// Where a name is used and what it refers to: for go-to-definition and hover.
#[derive(Clone, Debug)]
pub struct Reference {
    pub use_span: Span,
    pub def_span: Span,
    /// What hover shows, e.g. `h: f32[hidden] (= f32[128])`.
    pub hover: String,
}

/// Where a local (parameter, `let`, `var`, pattern or closure binding) can be named:
/// from its binding to the end of the block, closure, arm or loop that holds it.
#[derive(Clone, Copy, Debug)]
pub struct LocalScope {
    pub def_span: Span,
    pub scope: Span,
}

/// A local whose type the checker inferred (no type written at its binding): a `let` or
/// `var` without annotation, a closure parameter, a `for` or destructured binding. For
/// the editor's inlay hints.
#[derive(Clone, Debug)]
pub struct InferredBinding {
    /// The bound name.
    pub name_span: Span,
    /// The type as hover shows it, e.g. `f32[hidden] (= f32[128])`.
    pub ty: String,
}

/// A named definition in the file, for document symbols.
#[derive(Clone, Debug)]
pub struct SymbolInfo {
    pub name: String,
    pub kind: SymbolKind,
    pub span: Span,
    pub name_span: Span,
    pub container: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SymbolKind {
    Record,
    Enum,
    Variant,
    Field,
    Layer,
    Model,
    Network,
    Function,
    Param,
    HyperParam,
    Const,
}

/// Everything the checker found out about a program.
#[derive(Clone, Debug, Default)]
pub struct Program {
    pub records: Vec<RecordDef>,
    pub enums: Vec<EnumDef>,
    pub components: Vec<ComponentDef>,
    pub networks: Vec<NetworkDef>,
    /// The models of the main file, in order.
    pub models: Vec<ComponentId>,
    /// Uses of names, with their definitions and hover text.
    pub references: Vec<Reference>,
    /// The type of every expression, in evaluation order, for hover.
    pub expr_types: Vec<(Span, String)>,
    /// The scope of every local, in the order the checker bound them.
    pub local_scopes: Vec<LocalScope>,
    /// The locals without a written type, in the order the checker bound them; those of
    /// the unknown type (after an error) are left out.
    pub inferred_bindings: Vec<InferredBinding>,
    /// Named definitions of the main file.
    pub symbols: Vec<SymbolInfo>,
}
