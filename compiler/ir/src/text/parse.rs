//! The text-form parser: text in, [`Graph`] or the first [`ParseError`] out.
//!
//! One pass over the lines: the header, then `file`, `meta`, `state`, `param` and node
//! lines in that order (names must be declared before nodes use them), then `}`. Edges may
//! point forward (a loop's back edge names a later node), so they are collected and checked
//! once every node is known. Limits that keep hostile input cheap: node indices below
//! [`MAX_NODES`] (holes cost memory although the text does not spell them), at most
//! [`MAX_PORTS`] ports a node, and expressions at most [`super::MAX_EXPR_DEPTH`] deep
//! (see `expr.rs`).

use super::cursor::{Cursor, PResult, ParseError};
use super::REDUCE_NAMES;
use crate::ampg::{graph_from_slots, MAX_NODES, MAX_PORTS};
use crate::{
    BinaryFn, ConstValue, FieldId, FieldRole, Graph, Loc, LossBase, LossKind, Node, Op, Param, ParamInit, PayloadInt,
    PayloadTy, StateField, UnaryFn,
};
use std::collections::{BTreeMap, HashMap};

/// Parses the text form (see the module docs of [`crate::text`]).
pub fn parse(text: &str) -> Result<Graph, ParseError> {
    let mut parser = Parser::default();
    let mut stage = Stage::BeforeHeader;
    let mut last_line = 0;
    for (i, raw) in text.split('\n').enumerate() {
        last_line = i + 1;
        // Tolerate CRLF files: the printer never writes `\r` outside a string's escapes.
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with("//") {
            continue;
        }
        let mut c = Cursor::new(i + 1, line);
        match stage {
            Stage::BeforeHeader => {
                parser.header(&mut c)?;
                stage = Stage::Body;
            }
            Stage::Body => {
                if c.eat("}") {
                    c.finish()?;
                    stage = Stage::Closed;
                } else {
                    parser.body_line(&mut c)?;
                }
            }
            Stage::Closed => {
                c.skip_spaces();
                return Err(c.error("unexpected text after the graph's closing `}`"));
            }
        }
    }
    match stage {
        Stage::Closed => parser.finish(),
        Stage::BeforeHeader => {
            Err(ParseError { line: last_line.max(1), col: 1, message: "expected `amp.graph @NAME {`".into() })
        }
        Stage::Body => Err(ParseError { line: last_line + 1, col: 1, message: "missing the closing `}`".into() }),
    }
}

enum Stage {
    BeforeHeader,
    Body,
    Closed,
}

/// Header sections in the order they must appear.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
enum Section {
    #[default]
    File,
    Meta,
    State,
    Types,
    Param,
    Nodes,
}

impl Section {
    fn keyword(self) -> &'static str {
        match self {
            Section::File => "`file`",
            Section::Meta => "`meta`",
            Section::Types => "`record`, `enum` and `input`",
            Section::State => "`state`",
            Section::Param => "`param`",
            Section::Nodes => "node",
        }
    }
}

/// An edge as written, resolved once all nodes are known.
struct PendingEdge {
    src: u32,
    from_port: u16,
    dst: u32,
    to_port: u16,
    line: usize,
    col: usize,
}

#[derive(Default)]
pub(super) struct Parser {
    graph: Graph,
    section: Section,
    /// Set once the `state` line is read, to reject a second one.
    has_state: bool,
    field_ids: HashMap<String, FieldId>,
    nodes: BTreeMap<u32, Node>,
    edges: Vec<PendingEdge>,
    types: super::schema_text::TypesParser,
}

impl Parser {
    fn header(&mut self, c: &mut Cursor) -> PResult<()> {
        c.expect("amp.graph")?;
        c.expect("@")?;
        self.graph.name = c.symbol()?;
        c.expect("{")?;
        c.finish()
    }

    fn body_line(&mut self, c: &mut Cursor) -> PResult<()> {
        let start = c.pos();
        let section = if c.eat_word("file") {
            Section::File
        } else if c.eat_word("meta") {
            Section::Meta
        } else if c.eat_word("state") {
            Section::State
        } else if c.eat_word("record") || c.eat_word("enum") || c.eat_word("input") {
            c.reset(start);
            Section::Types
        } else if c.eat_word("param") {
            Section::Param
        } else if c.peek() == Some('%') {
            Section::Nodes
        } else {
            return Err(
                c.expected("`file`, `meta`, `state`, `record`, `enum`, `input`, `param`, a node `%N = ...` or `}`")
            );
        };
        if section < self.section {
            return Err(c.error_at(
                start,
                format!("{} lines must come before {} lines", section.keyword(), self.section.keyword()),
            ));
        }
        self.section = section;
        match section {
            Section::File => self.file_line(c),
            Section::Meta => self.meta_line(c),
            Section::State => self.state_line(c, start),
            Section::Types => self.types.line(c),
            Section::Param => self.param_line(c),
            Section::Nodes => self.node_line(c),
        }?;
        c.finish()
    }

    fn file_line(&mut self, c: &mut Cursor) -> PResult<()> {
        let at = c.pos();
        let index: usize = c.number("a file index")?;
        if index != self.graph.files.len() {
            return Err(c.error_at(at, format!("expected file {} here, found file {index}", self.graph.files.len())));
        }
        let name = c.string()?;
        self.graph.files.push(name);
        Ok(())
    }

    fn meta_line(&mut self, c: &mut Cursor) -> PResult<()> {
        c.skip_spaces();
        let at = c.pos();
        let key = c.string()?;
        c.expect("=")?;
        let value = c.string()?;
        if self.graph.meta.contains_key(&key) {
            return Err(c.error_at(at, format!("duplicate meta key {}", super::quote(&key))));
        }
        self.graph.meta.insert(key, value);
        Ok(())
    }

    fn state_line(&mut self, c: &mut Cursor, start: usize) -> PResult<()> {
        if self.has_state {
            return Err(c.error_at(start, "duplicate `state` line"));
        }
        self.has_state = true;
        if c.peek().is_none() {
            return Ok(());
        }
        loop {
            c.skip_spaces();
            let at = c.pos();
            c.expect("%")?;
            let name = c.name("a state field name")?;
            c.expect(":")?;
            let role_at = c.pos();
            let role = c.identifier().and_then(|r| FieldRole::parse(&r)).ok_or_else(|| {
                c.error_at(role_at, "expected a field role (instance, counter, data, element, tree_node, slot)")
            })?;
            let id =
                u16::try_from(self.graph.state.len()).map_err(|_| c.error_at(at, "more than 65536 state fields"))?;
            if self.field_ids.insert(name.clone(), FieldId(id)).is_some() {
                return Err(c.error_at(at, format!("duplicate state field `%{name}`")));
            }
            self.graph.state.push(StateField { name, role });
            if !c.eat(",") {
                return Ok(());
            }
        }
    }

    fn param_line(&mut self, c: &mut Cursor) -> PResult<()> {
        let name = c.symbol()?;
        c.expect(":")?;
        c.skip_spaces();
        let at = c.pos();
        let PayloadTy::F32(shape) = payload_ty(c)? else {
            return Err(c.error_at(at, "a parameter is an f32 tensor of fixed shape (not `unit`, not a batch)"));
        };
        c.skip_spaces();
        let init = if c.eat_word("normal") {
            ParamInit::Normal
        } else if c.eat_word("ones") {
            ParamInit::Ones
        } else if c.eat_word("zeros") {
            ParamInit::Zeros
        } else if c.eat_word("uniform") {
            c.expect("(")?;
            let fan_in = c.number("a fan-in")?;
            c.expect(")")?;
            ParamInit::Uniform { fan_in }
        } else {
            return Err(c.expected("an initialisation `uniform(FAN_IN)` or `normal`, `ones` or `zeros`"));
        };
        self.graph.params.push(Param { name, shape, init });
        Ok(())
    }

    fn node_line(&mut self, c: &mut Cursor) -> PResult<()> {
        c.skip_spaces();
        let at = c.pos();
        c.expect("%")?;
        let index: u32 = c.number("a node index")?;
        if index as usize >= MAX_NODES {
            return Err(c.error_at(at, format!("node index %{index} is over the limit of {MAX_NODES} nodes")));
        }
        if self.nodes.contains_key(&index) {
            return Err(c.error_at(at, format!("duplicate node %{index}")));
        }
        c.expect("=")?;
        let op = self.op(c)?;
        c.expect("(")?;
        let mut inputs = Vec::new();
        if !c.eat(")") {
            loop {
                self.input(c, index, &mut inputs)?;
                if !c.eat(",") {
                    c.expect(")")?;
                    break;
                }
            }
        }
        c.expect("->")?;
        let mut outputs = Vec::new();
        if c.eat("(") {
            c.expect(")")?;
        } else {
            loop {
                if outputs.len() >= MAX_PORTS {
                    return Err(c.error(format!("more than {MAX_PORTS} output ports")));
                }
                outputs.push(payload_ty(c)?);
                if !c.eat(",") {
                    break;
                }
            }
        }
        let clause = |c: &mut Cursor, word: &str| -> PResult<Vec<FieldId>> {
            if c.eat_word(word) {
                self.field_list(c)
            } else {
                Ok(Vec::new())
            }
        };
        let reads = clause(c, "reads")?;
        let writes = clause(c, "writes")?;
        let key = clause(c, "key")?;
        let label = c.string()?;
        let fusion = if c.eat_word("fusion") {
            c.expect("(")?;
            let group = c.number("a fusion group")?;
            c.expect(")")?;
            Some(group)
        } else {
            None
        };
        let loc = if c.eat_word("loc") { Some(self.loc(c)?) } else { None };
        self.nodes.insert(index, Node { op, inputs, outputs, reads, writes, key, label, loc, fusion });
        Ok(())
    }

    /// One entry of the input list: `%SRC#PORT: TYPE` or `_: TYPE`.
    fn input(&mut self, c: &mut Cursor, dst: u32, inputs: &mut Vec<PayloadTy>) -> PResult<()> {
        c.skip_spaces();
        let at = c.pos();
        let to_port = u16::try_from(inputs.len())
            .ok()
            .filter(|p| usize::from(*p) < MAX_PORTS)
            .ok_or_else(|| c.error_at(at, format!("more than {MAX_PORTS} input ports")))?;
        if !c.eat_word("_") {
            c.expect("%")?;
            let src: u32 = c.number("a node index")?;
            c.expect("#")?;
            let from_port: u16 = c.number("an output port")?;
            self.edges.push(PendingEdge { src, from_port, dst, to_port, line: c.line(), col: at + 1 });
        }
        c.expect(":")?;
        inputs.push(payload_ty(c)?);
        Ok(())
    }

    fn op(&mut self, c: &mut Cursor) -> PResult<Op> {
        c.skip_spaces();
        let at = c.pos();
        let keyword = c.identifier().ok_or_else(|| c.expected("an op"))?;
        Ok(match keyword.as_str() {
            "source" => Op::Source,
            "concat" => Op::Concat,
            "forget" => Op::Forget,
            "read" => Op::Read { path: self.data_path(c)? },
            "const" => Op::Const { value: const_value(c)? },
            "linear" => {
                c.expect("@")?;
                Op::Linear { param: c.symbol()? }
            }
            "affine" => {
                c.expect("@")?;
                Op::Affine { param: c.symbol()? }
            }
            "embedding" => {
                c.expect("@")?;
                let param = c.symbol()?;
                Op::Embedding { param, index: self.bracketed_expr(c)? }
            }
            "embedding_rows" => {
                c.expect("@")?;
                let param = c.symbol()?;
                let field = self.field(c)?;
                let index = self.bracketed_expr(c)?;
                Op::EmbeddingRows { param, field, index, count: self.bracketed_expr(c)? }
            }
            "unary" => Op::Unary(named(c, UnaryFn::from_name, "a unary function")?),
            "binary" => Op::Binary(named(c, BinaryFn::from_name, "a binary function")?),
            "split" => Op::Split { parts: c.number("a part count")? },
            "phi" => Op::Phi { arms: c.number("an arm count")? },
            "cond" => Op::Cond { pred: self.bracketed_expr(c)? },
            "switch" => {
                let index = self.bracketed_expr(c)?;
                Op::Switch { index, arms: c.number("an arm count")? }
            }
            "isu" => {
                let field = self.field(c)?;
                c.expect(":=")?;
                let value = self.expr(c)?;
                let inverse = if c.eat_word("inverse") { Some(self.expr(c)?) } else { None };
                Op::Isu { field, value, inverse }
            }
            "loss" => {
                if c.eat_word("cross_entropy") {
                    let label = self.bracketed_expr(c)?;
                    if c.eat("/") {
                        Op::Loss(LossKind::CrossEntropyMean { label, count: self.bracketed_expr(c)? })
                    } else {
                        Op::Loss(LossKind::CrossEntropy { label })
                    }
                } else if c.eat_word("mse") {
                    Op::Loss(LossKind::Mse)
                } else if c.eat_word("term") {
                    let base = if c.eat_word("cross_entropy") {
                        LossBase::CrossEntropy { label: self.bracketed_expr(c)? }
                    } else if c.eat_word("mse") {
                        LossBase::Mse
                    } else if c.eat_word("scalar") {
                        LossBase::Scalar
                    } else {
                        return Err(c.expected("`cross_entropy`, `mse` or `scalar`"));
                    };
                    c.expect("*")?;
                    let weight = match const_value(c)? {
                        ConstValue::Scalar(w) => w,
                        _ => return Err(c.expected("a weight (a number or `bits(0x...)`)")),
                    };
                    let count = if c.eat("/") { Some(self.bracketed_expr(c)?) } else { None };
                    let judge = if c.eat_word("judged") { Some(self.bracketed_expr(c)?) } else { None };
                    Op::Loss(LossKind::Term { base, weight, count, judge })
                } else {
                    return Err(c.expected("`cross_entropy`, `mse` or `term`"));
                }
            }
            "sink" => Op::Sink { name: c.string()? },
            "flatmap" | "group" => {
                let field = self.field(c)?;
                let count = self.bracketed_expr(c)?;
                if keyword == "flatmap" {
                    Op::Flatmap { field, count }
                } else {
                    Op::Group { field, count }
                }
            }
            "ungroup" => Op::Ungroup { field: self.field(c)? },
            "gather" => Op::Gather { index: self.bracketed_expr(c)? },
            "scatter_sum" => {
                let field = self.field(c)?;
                let index = self.bracketed_expr(c)?;
                Op::ScatterSum { field, index, count: self.bracketed_expr(c)? }
            }
            "gather_rows" => {
                let field = self.field(c)?;
                let index = self.bracketed_expr(c)?;
                Op::GatherRows { field, index, count: self.bracketed_expr(c)? }
            }
            "mask_rows" => {
                let field = self.field(c)?;
                Op::MaskRows { field, pred: self.bracketed_expr(c)? }
            }
            "partition_rows" | "merge_rows" => {
                let field = self.field(c)?;
                let index = self.bracketed_expr(c)?;
                let arms = c.number("an arm count")?;
                if keyword == "partition_rows" {
                    Op::PartitionRows { field, index, arms }
                } else {
                    Op::MergeRows { field, index, arms }
                }
            }
            "reduce" => Op::Reduce(lookup(c, &REDUCE_NAMES, "`sum` or `mean`")?),
            "top_k" => Op::TopK { k: c.number("k")? },
            "state_from_payload" => {
                let field = self.field(c)?;
                c.expect(":=")?;
                let int = if c.eat_word("argmax") {
                    PayloadInt::Argmax
                } else if c.eat_word("top_k") {
                    let k = c.number("k")?;
                    PayloadInt::TopK { k, slot: self.bracketed_expr(c)? }
                } else {
                    return Err(c.expected("`argmax` or `top_k`"));
                };
                Op::StateFromPayload { field, int }
            }
            "dropout" => {
                let rate = match const_value(c)? {
                    ConstValue::Scalar(rate) => rate,
                    _ => return Err(c.expected("a rate (a number or `bits(0x...)`)")),
                };
                if !c.eat_word("site") {
                    return Err(c.expected("`site`"));
                }
                let site = c.number("a site")?;
                if !c.eat_word("over") {
                    return Err(c.expected("`over`"));
                }
                Op::Dropout { rate, site, context: self.field_list(c)? }
            }
            other => return Err(c.error_at(at, format!("unknown op `{other}`"))),
        })
    }

    /// `%name`, which must name a field of the state line.
    pub(super) fn field(&self, c: &mut Cursor) -> PResult<FieldId> {
        c.skip_spaces();
        let at = c.pos();
        c.expect("%")?;
        let name = c.name("a state field name")?;
        self.field_ids.get(&name).copied().ok_or_else(|| c.error_at(at, format!("unknown state field `%{name}`")))
    }

    /// `(%a, %b)` after `reads`, `writes` or `key`.
    fn field_list(&self, c: &mut Cursor) -> PResult<Vec<FieldId>> {
        c.expect("(")?;
        let mut fields = Vec::new();
        if c.eat(")") {
            return Ok(fields);
        }
        loop {
            fields.push(self.field(c)?);
            if !c.eat(",") {
                c.expect(")")?;
                return Ok(fields);
            }
        }
    }

    /// `(FILE:START..END @LINE:COL)` after `loc`.
    fn loc(&self, c: &mut Cursor) -> PResult<Loc> {
        c.expect("(")?;
        c.skip_spaces();
        let at = c.pos();
        let file = c.number("a file index")?;
        if file as usize >= self.graph.files.len() {
            return Err(c.error_at(at, format!("no file {file} (declare it with a `file` line)")));
        }
        c.expect(":")?;
        let start = c.number("a byte offset")?;
        c.expect("..")?;
        let end = c.number("a byte offset")?;
        c.expect("@")?;
        let line = c.number("a line number")?;
        c.expect(":")?;
        let col = c.number("a column number")?;
        c.expect(")")?;
        Ok(Loc { file, start, end, line, col })
    }

    /// Checks the collected edges against the nodes and builds the graph, recreating holes.
    fn finish(self) -> PResult<Graph> {
        let Parser { mut graph, nodes, edges, types, .. } = self;
        graph.input = types.finish()?;
        let mut wired = Vec::with_capacity(edges.len());
        for edge in &edges {
            let fail = |message: String| ParseError { line: edge.line, col: edge.col, message };
            let Some(src) = nodes.get(&edge.src) else {
                return Err(fail(format!("no node %{} to take input from", edge.src)));
            };
            if usize::from(edge.from_port) >= src.outputs.len() {
                return Err(fail(format!(
                    "node %{} has {} output ports, no port #{}",
                    edge.src,
                    src.outputs.len(),
                    edge.from_port
                )));
            }
            wired.push((edge.src, edge.from_port, edge.dst, edge.to_port));
        }
        let slots = match nodes.keys().next_back() {
            Some(&last) => {
                let mut slots: Vec<Option<Node>> = Vec::new();
                slots.resize_with(last as usize + 1, || None);
                for (index, node) in nodes {
                    if let Some(slot) = slots.get_mut(index as usize) {
                        *slot = Some(node);
                    }
                }
                slots
            }
            None => Vec::new(),
        };
        graph.nodes = graph_from_slots(slots, &wired);
        Ok(graph)
    }
}

fn lookup<T: Copy>(c: &mut Cursor, table: &[(T, &str)], what: &str) -> PResult<T> {
    named(c, |name| table.iter().find(|(_, n)| *n == name).map(|(f, _)| *f), what)
}

/// An identifier that `find` knows.
fn named<T>(c: &mut Cursor, find: impl Fn(&str) -> Option<T>, what: &str) -> PResult<T> {
    c.skip_spaces();
    let at = c.pos();
    let name = c.identifier().ok_or_else(|| c.expected(what))?;
    find(&name).ok_or_else(|| c.error_at(at, format!("unknown {what} `{name}`")))
}

/// `zeros`, `ones`, `bits(0xHEX)` or a decimal f32 (including `inf`).
fn const_value(c: &mut Cursor) -> PResult<ConstValue> {
    if c.eat_word("zeros") {
        return Ok(ConstValue::Zeros);
    }
    if c.eat_word("ones") {
        return Ok(ConstValue::Ones);
    }
    if c.eat_word("bits") {
        c.expect("(")?;
        c.expect("0x")?;
        let at = c.pos();
        let hex = c.take_while(|d| d.is_ascii_hexdigit());
        let bits = u32::from_str_radix(&hex, 16).map_err(|_| c.error_at(at, "expected 1 to 8 hex digits"))?;
        c.expect(")")?;
        return Ok(ConstValue::Scalar(f32::from_bits(bits)));
    }
    c.skip_spaces();
    let at = c.pos();
    let text = c.take_while(|d| d.is_ascii_alphanumeric() || matches!(d, '.' | '+' | '-'));
    if text.is_empty() {
        return Err(c.expected("`zeros`, `ones`, `bits(0x...)` or a number"));
    }
    text.parse().map(ConstValue::Scalar).map_err(|_| c.error_at(at, format!("bad number `{text}`")))
}

/// `unit`, `f32` or `f32[d, ...]`; rejects shapes whose element count overflows u64 (the
/// rest of the compiler multiplies dimensions without checking).
pub(super) fn payload_ty(c: &mut Cursor) -> PResult<PayloadTy> {
    c.skip_spaces();
    let at = c.pos();
    if c.eat_word("unit") {
        return Ok(PayloadTy::Unit);
    }
    if !c.eat_word("f32") {
        return Err(c.expected("a type (`unit` or `f32[...]`)"));
    }
    let mut dims = Vec::new();
    let mut batch = false;
    if c.eat("[") && !c.eat("]") {
        if c.eat("?") {
            batch = true;
            if !c.eat(",") {
                c.expect("]")?;
                return Ok(PayloadTy::Batch(dims));
            }
        }
        loop {
            dims.push(c.number::<u64>("a dimension")?);
            if !c.eat(",") {
                c.expect("]")?;
                break;
            }
        }
    }
    if dims.iter().try_fold(1u64, |n, d| n.checked_mul(*d)).is_none() {
        return Err(c.error_at(at, "the shape has more elements than fit in 64 bits"));
    }
    Ok(if batch { PayloadTy::Batch(dims) } else { PayloadTy::F32(dims) })
}
