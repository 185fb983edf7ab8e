//! The untyped syntax tree. Every node carries a [`Span`]; nodes that failed to parse are
//! `Error` variants so that a tree always exists (the checker skips them quietly: the
//! parser already reported them).

pub use amp_diagnostics::Span;

/// A name with its location.
#[derive(Clone, Debug, PartialEq)]
pub struct Ident {
    pub name: String,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct SourceFileAst {
    pub items: Vec<Item>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Item {
    pub kind: ItemKind,
    pub span: Span,
    /// The `///` comment lines directly above the item.
    pub doc: Option<String>,
    /// The `pub` keyword, when the item is visible to files that import its module.
    pub public: Option<Span>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ItemKind {
    Use(UseItem),
    Const(ConstItem),
    Record(RecordItem),
    Enum(EnumItem),
    Component(ComponentItem),
    Network(NetworkItem),
    /// A record, enum, layer, model or network whose name was read but whose rest could
    /// not be (the syntax error is reported): the name is kept so that its uses are not
    /// reported again as unknown.
    Broken(Ident),
    Error,
}

/// `use std::nn::{GruCell, LstmCell};`
#[derive(Clone, Debug, PartialEq)]
pub struct UseItem {
    /// The module path, e.g. `std::nn`.
    pub path: Vec<Ident>,
    /// The imported names.
    pub names: Vec<Ident>,
    /// A `{...}` group somewhere other than at the end, or a path with no name.
    pub malformed: Option<Span>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ConstItem {
    pub name: Ident,
    pub ty: TypeExpr,
    pub value: Expr,
}

#[derive(Clone, Debug, PartialEq)]
pub struct FieldDecl {
    pub name: Ident,
    pub ty: TypeExpr,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct RecordItem {
    pub name: Ident,
    pub fields: Vec<FieldDecl>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct VariantDecl {
    pub name: Ident,
    pub fields: Vec<FieldDecl>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct EnumItem {
    pub name: Ident,
    pub variants: Vec<VariantDecl>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ComponentKind {
    Layer,
    Model,
}

/// `hidden: int = 128` in `model M(hidden: int = 128)`.
#[derive(Clone, Debug, PartialEq)]
pub struct HyperParam {
    pub name: Ident,
    pub ty: TypeExpr,
    pub default: Option<Expr>,
    pub span: Span,
}

/// A `layer` or a `model`: hyperparameters, parameters and functions.
#[derive(Clone, Debug, PartialEq)]
pub struct ComponentItem {
    pub kind: ComponentKind,
    pub name: Ident,
    pub hyperparams: Vec<HyperParam>,
    pub members: Vec<Member>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Member {
    pub kind: MemberKind,
    pub span: Span,
    pub doc: Option<String>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum MemberKind {
    /// `param cell = Linear(2 * hidden, hidden);`
    Param {
        name: Ident,
        init: Expr,
    },
    Const(ConstItem),
    Fn(FnDecl),
    Error,
}

#[derive(Clone, Debug, PartialEq)]
pub struct FnParam {
    pub name: Ident,
    pub ty: TypeExpr,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct FnDecl {
    pub name: Ident,
    pub params: Vec<FnParam>,
    pub ret: Option<TypeExpr>,
    pub body: Block,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NetStmtKind {
    Input,
    Node,
    Output,
}

/// One line of a `network` block: `input x: f32[64];` or
/// `node h = Linear(64 + 32, 32) from x, h;`.
#[derive(Clone, Debug, PartialEq)]
pub struct NetStmt {
    pub kind: NetStmtKind,
    pub keyword: Ident,
    pub name: Ident,
    pub ty: Option<TypeExpr>,
    pub layer: Option<Expr>,
    pub sources: Vec<Ident>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct NetworkItem {
    pub name: Ident,
    pub hyperparams: Vec<HyperParam>,
    pub stmts: Vec<NetStmt>,
    /// Lines that did not start with `input`, `node` or `output`.
    pub bad_keywords: Vec<Ident>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct TypeExpr {
    pub kind: TypeExprKind,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum TypeExprKind {
    /// `int`, `bool`, `f32`, a record or an enum.
    Named(Ident),
    /// `f32[d1, d2]`.
    Tensor(Ident, Vec<Expr>),
    /// `[T]`.
    Seq(Box<TypeExpr>),
    /// `(A, B)`; `()` is the unit type.
    Tuple(Vec<TypeExpr>),
    Error,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnOp {
    Neg,
    Not,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinOp {
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

impl BinOp {
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Rem => "%",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::And => "&&",
            BinOp::Or => "||",
        }
    }

    pub fn is_comparison(self) -> bool {
        matches!(self, BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge)
    }

    pub fn is_logical(self) -> bool {
        matches!(self, BinOp::And | BinOp::Or)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ExprKind {
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(String),
    Name(Ident),
    Unary(UnOp, Box<Expr>),
    Binary(BinOp, Box<Expr>, Box<Expr>),
    /// `a..b`
    Range(Box<Expr>, Box<Expr>),
    Call(Box<Expr>, Vec<Expr>),
    /// `x.f`
    Field(Box<Expr>, Ident),
    /// `t.0`
    TupleField(Box<Expr>, u32, Span),
    /// `xs[i]`
    Index(Box<Expr>, Box<Expr>),
    /// `(a, b)`; `()` is unit.
    Tuple(Vec<Expr>),
    /// `(a)`: kept so spans and printing stay faithful.
    Paren(Box<Expr>),
    /// `[a, b, c]`
    List(Vec<Expr>),
    /// `[Mlp(d, d, d); n]`
    Repeat(Box<Expr>, Box<Expr>),
    /// `|x| body`, `|(a, b)| body`
    Closure(Vec<Pattern>, Box<Expr>),
    If(Box<Expr>, Block, Option<Box<Expr>>),
    Match(Box<Expr>, Vec<MatchArm>),
    Block(Block),
    Error,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Block {
    pub stmts: Vec<Stmt>,
    pub tail: Option<Box<Expr>>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Stmt {
    pub kind: StmtKind,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum StmtKind {
    Let(Pattern, Option<TypeExpr>, Expr),
    Var(Ident, Option<TypeExpr>, Expr),
    Assign(Expr, Expr),
    For(Pattern, Expr, Block),
    While(Expr, Block),
    Expr(Expr),
}

#[derive(Clone, Debug, PartialEq)]
pub struct MatchArm {
    pub pattern: Pattern,
    pub body: Expr,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Pattern {
    pub kind: PatternKind,
    pub span: Span,
}

/// `field` or `field: pattern` inside a variant pattern.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldPattern {
    pub field: Ident,
    pub pattern: Option<Pattern>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum PatternKind {
    Bind(Ident),
    Wildcard,
    Tuple(Vec<Pattern>),
    /// `[a, b, c]`, for the parts of `split`.
    Array(Vec<Pattern>),
    /// `Leaf { word, .. }`
    Variant {
        name: Ident,
        fields: Vec<FieldPattern>,
        rest: bool,
    },
}
