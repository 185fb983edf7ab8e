//! Lowers a [`KernelSpec`] to a Cranelift function, forward or backward.
//!
//! Both functions have the signature `fn(ports: *const *mut f32, strides: *const i64,
//! rows: i64)`: `ports` holds one pointer per buffer, in the order of
//! [`crate::Kernel::run`]'s buffer lists (inputs then outputs), and `strides` the bytes
//! from one row to the next of each input-side buffer (the kernel's inputs and, backward,
//! the output gradients: a vector input may be a column block of wider rows, read in
//! place). The code is a loop over rows; per row:
//!
//! 1. scalar values (one per row) are loaded and computed once, in `f32`;
//! 2. a loop over the row's `n` elements, four at a time, computes the vector values in
//!    `f32x4` (scalars splatted) and stores the vector outputs;
//! 3. a loop over the `n mod 4` remaining elements does the same in `f32` (`n` is a
//!    constant of the kernel, so both trip counts are constants).
//!
//! Memory safety rests on the addresses alone: port `p` is only ever accessed at
//! `ports[p] + strides[p]·row + 4·i` with `row < rows`, `i < n` for vector input-side
//! ports, at `ports[p] + 4·(row·n + i)` for vector outputs, at
//! `ports[p] + 4·row` for scalar ports and, in the saving functions, at
//! `ports[p] + 4·(row·k·n + j·n + i)` with `j < k` for the saved buffer of `k` values;
//! only output ports (the saving forward's saved buffer among them) are stored to.
//! Whatever the ops are, they cannot move an access outside those ranges, which the
//! methods of [`crate::Kernel`] check against the buffers' lengths and strides before the
//! call.
//!
//! The backward function recomputes the forward values from the inputs (the saving pair
//! of functions: all but the saved ones, which it loads), then runs reverse mode in the
//! same loops: vector adjoints stay in registers; the gradient that a broadcast scalar
//! receives from vector ops is accumulated in an
//! `f32x4` per scalar through the loop, summed across lanes, plus the tail's terms, and
//! then flows back through the scalar ops once per row. A value that no output depends on
//! gets no adjoint at all (a structural zero, as in the interpreter): its op is skipped
//! rather than multiplied by 0, so a NaN or infinity there does not leak into gradients.

use crate::interp::Pass;
use crate::math::Math;
use crate::spec::{Elementwise, KernelSpec, ValueId, Width};
use amp_ir::vocab::{GELU_C, GELU_K};
use amp_ir::{BinaryFn, UnaryFn};
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, Block, BlockArg, Function, InstBuilder, MemFlagsData, Type, Value};
use cranelift_codegen::isa::TargetFrontendConfig;
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};

/// Elements per SIMD vector: Cranelift has 128-bit vectors only on x86-64.
const LANES: usize = 4;
const VEC: Type = types::F32X4;

/// Fills `func` (whose signature the caller set to `(pointer, pointer, i64)`) with the
/// kernel.
/// With `saving`, the forward also stores the spec's [`KernelSpec::saved`] values into
/// one more buffer, after the outputs, and the backward loads them from that buffer,
/// between the output gradients and the input gradients, instead of computing them.
pub(crate) fn build(
    spec: &KernelSpec,
    pass: Pass,
    saving: bool,
    func: &mut Function,
    fctx: &mut FunctionBuilderContext,
    config: TargetFrontendConfig,
    fma: bool,
) {
    let mut b = FunctionBuilder::new(func, fctx);
    let entry = b.create_block();
    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    let params = b.block_params(entry);
    let (ptrs, strides, rows) = (params[0], params[1], params[2]);
    let mut port_widths = port_widths(spec, pass);
    let saved = if saving { spec.saved() } else { Vec::new() };
    // The saved buffer's place: after the outputs (forward) or the output gradients
    // (backward), where `port_widths` has it as one more vector port (its row stride is
    // set apart, in `row_pointers`).
    let saved_port = saving.then_some(spec.inputs().len() + spec.outputs().len());
    if let Some(port) = saved_port {
        port_widths.insert(port, Width::Vector);
    }
    let mut saved_index = vec![None; spec.value_count()];
    for (j, v) in saved.iter().enumerate() {
        saved_index[v.index()] = Some(j);
    }
    let ptr_ty = config.pointer_type();
    let bases = (0..port_widths.len())
        .map(|p| {
            let offset = i32::try_from(p * usize::from(config.pointer_bytes())).unwrap_or(i32::MAX);
            b.ins().load(ptr_ty, MemFlagsData::trusted(), ptrs, offset)
        })
        .collect();
    // The row strides of the vector input-side buffers (scalar ones are always packed).
    let input_side = spec.inputs().len() + if pass == Pass::Backward { spec.outputs().len() } else { 0 };
    let strides = (0..input_side)
        .map(|p| {
            let vector = port_widths[p] == Width::Vector;
            vector.then(|| b.ins().load(types::I64, MemFlagsData::trusted(), strides, (p * 8) as i32))
        })
        .collect();
    let has_adjoint = if pass == Pass::Backward { has_adjoint(spec) } else { Vec::new() };
    let first_input_grad = spec.inputs().len() + spec.outputs().len() + usize::from(saving);
    let mut gen = Gen {
        b,
        spec,
        fma,
        port_widths,
        bases,
        strides,
        row_ptrs: Vec::new(),
        has_adjoint,
        saved,
        saved_index,
        saved_port,
        first_input_grad,
    };

    let row_head = gen.b.create_block();
    let row = gen.b.append_block_param(row_head, types::I64);
    let row_body = gen.b.create_block();
    let exit = gen.b.create_block();
    let zero = gen.b.ins().iconst(types::I64, 0);
    gen.b.ins().jump(row_head, &[BlockArg::Value(zero)]);
    gen.b.switch_to_block(row_head);
    let more = gen.b.ins().icmp(IntCC::SignedLessThan, row, rows);
    gen.b.ins().brif(more, row_body, &[], exit, &[]);
    gen.b.switch_to_block(row_body);
    gen.row_pointers(row);
    match pass {
        Pass::Forward => gen.forward_row(),
        Pass::Backward => gen.backward_row(),
    }
    let next = gen.b.ins().iadd_imm_s(row, 1);
    gen.b.ins().jump(row_head, &[BlockArg::Value(next)]);
    gen.b.switch_to_block(exit);
    gen.b.ins().return_(&[]);
    gen.b.seal_all_blocks();
    gen.b.finalize(config);
}

/// The width of every buffer of a call, in pointer-array order.
fn port_widths(spec: &KernelSpec, pass: Pass) -> Vec<Width> {
    let mut widths: Vec<Width> = spec.inputs().to_vec();
    widths.extend(spec.output_widths());
    if pass == Pass::Backward {
        widths.extend(spec.inputs().iter().copied());
    }
    widths
}

/// Whether a gradient flows into each value: it is an output, or an op with a gradient
/// reads it. The others are structural zeros.
pub(crate) fn has_adjoint(spec: &KernelSpec) -> Vec<bool> {
    let mut has = vec![false; spec.value_count()];
    for &v in spec.outputs() {
        has[v.index()] = true;
    }
    for i in (0..spec.ops().len()).rev() {
        if has[spec.op_value(i).index()] {
            for &arg in &spec.ops()[i].args {
                has[arg.index()] = true;
            }
        }
    }
    has
}

/// Where the current element (`ty = f32`) or four (`ty = f32x4`) of each vector port
/// are: `offset` bytes into the row, a parameter of the loop block.
#[derive(Clone, Copy)]
struct At {
    ty: Type,
    offset: Value,
}

struct Gen<'s, 'f> {
    b: FunctionBuilder<'f>,
    spec: &'s KernelSpec,
    fma: bool,
    port_widths: Vec<Width>,
    /// The buffers' base pointers.
    bases: Vec<Value>,
    /// Per input-side buffer, its row stride in bytes when it is a vector.
    strides: Vec<Option<Value>>,
    /// The current row's first element of each buffer.
    row_ptrs: Vec<Value>,
    has_adjoint: Vec<bool>,
    /// The values kept in the saved buffer (empty when not saving), and each value's
    /// place among them.
    saved: Vec<ValueId>,
    saved_index: Vec<Option<usize>>,
    saved_port: Option<usize>,
    /// The port of the first input gradient (backward).
    first_input_grad: usize,
}

fn data_flags() -> MemFlagsData {
    MemFlagsData::new().with_notrap()
}

impl<'f> Gen<'_, 'f> {
    fn math(&mut self) -> Math<'_, 'f> {
        Math { b: &mut self.b, fma: self.fma }
    }

    fn n(&self) -> usize {
        self.spec.n()
    }

    fn chunks(&self) -> usize {
        self.n() / LANES
    }

    fn input_count(&self) -> usize {
        self.spec.inputs().len()
    }

    fn row_pointers(&mut self, row: Value) {
        let row_bytes = (self.n() * 4) as i64;
        let vector_offset = self.b.ins().imul_imm_s(row, row_bytes);
        let scalar_offset = self.b.ins().ishl_imm_u(row, 2);
        // A row of the saved buffer holds every saved value's `n` elements.
        let saved_offset = self.b.ins().imul_imm_s(row, row_bytes * self.saved.len() as i64);
        self.row_ptrs = (0..self.bases.len())
            .map(|p| {
                let offset = if Some(p) == self.saved_port {
                    saved_offset
                } else if let Some(stride) = self.strides.get(p).copied().flatten() {
                    self.b.ins().imul(row, stride)
                } else if self.port_widths[p] == Width::Vector {
                    vector_offset
                } else {
                    scalar_offset
                };
                self.b.ins().iadd(self.bases[p], offset)
            })
            .collect();
    }

    /// Where saved value `j`'s elements at `at` are in the saved buffer's row.
    fn saved_at(&mut self, j: usize, at: At) -> At {
        let bytes = (j * self.n() * 4) as i64;
        let offset = self.b.ins().iadd_imm_s(at.offset, bytes);
        At { ty: at.ty, offset }
    }

    /// Loads from an input port (never written during the call).
    fn load(&mut self, port: usize, at: At) -> Value {
        let addr = self.b.ins().iadd(self.row_ptrs[port], at.offset);
        self.b.ins().load(at.ty, data_flags(), addr, 0)
    }

    fn store(&mut self, port: usize, at: At, value: Value) {
        let addr = self.b.ins().iadd(self.row_ptrs[port], at.offset);
        self.b.ins().store(data_flags(), value, addr, 0);
    }

    fn load_scalar(&mut self, port: usize) -> Value {
        self.b.ins().load(types::F32, data_flags(), self.row_ptrs[port], 0)
    }

    fn store_scalar(&mut self, port: usize, value: Value) {
        self.b.ins().store(data_flags(), value, self.row_ptrs[port], 0);
    }

    /// The scalar values of the row: scalar inputs loaded, scalar ops computed.
    fn scalar_values(&mut self) -> Vec<Option<Value>> {
        let spec = self.spec;
        let mut env = vec![None; spec.value_count()];
        for (p, &w) in spec.inputs().iter().enumerate() {
            if w == Width::Scalar {
                env[p] = Some(self.load_scalar(p));
            }
        }
        self.eval_ops(types::F32, Width::Scalar, &mut env, None);
        env
    }

    /// The scalar values as `f32x4`, for the ops of the vector loop.
    fn splat_scalars(&mut self, scalars: &[Option<Value>]) -> Vec<Option<Value>> {
        scalars.iter().map(|s| s.map(|s| self.b.ins().splat(VEC, s))).collect()
    }

    /// Loads the vector inputs at `at` into `env`.
    fn load_vector_inputs(&mut self, env: &mut [Option<Value>], at: At) {
        for (p, &width) in self.spec.inputs().iter().enumerate() {
            if width == Width::Vector {
                env[p] = Some(self.load(p, at));
            }
        }
    }

    /// Computes every op of the given width, in order, into `env`; with `saved_at`, loads
    /// the saved values there from the saved buffer instead.
    fn eval_ops(&mut self, ty: Type, width: Width, env: &mut [Option<Value>], saved_at: Option<At>) {
        let spec = self.spec;
        for (i, op) in spec.ops().iter().enumerate() {
            let v = spec.op_value(i);
            if spec.width(v) != width {
                continue;
            }
            if let (Some(at), Some(j), Some(port)) = (saved_at, self.saved_index[v.index()], self.saved_port) {
                let place = self.saved_at(j, at);
                env[v.index()] = Some(self.load(port, place));
                continue;
            }
            let a = self.value(env, op.args[0]);
            let b = op.args.get(1).map(|&arg| self.value(env, arg));
            env[v.index()] = Some(self.eval_op(ty, op.op, a, b));
        }
    }

    /// A value the spec guarantees is defined before its use; a zero if it were not,
    /// which [`KernelSpec::new`] rules out.
    fn value(&mut self, env: &[Option<Value>], v: ValueId) -> Value {
        match env[v.index()] {
            Some(value) => value,
            None => self.b.ins().f32const(0.0),
        }
    }

    fn eval_op(&mut self, ty: Type, op: Elementwise, a: Value, b: Option<Value>) -> Value {
        let b = b.unwrap_or(a);
        match op {
            Elementwise::Unary(UnaryFn::Relu) => self.math().relu(ty, a),
            Elementwise::Unary(UnaryFn::Sigmoid) => self.math().sigmoid(ty, a),
            Elementwise::Unary(UnaryFn::Tanh) => self.math().tanh(ty, a),
            Elementwise::Unary(UnaryFn::Exp) => self.math().exp(ty, a),
            Elementwise::Unary(UnaryFn::Log) => self.math().log(ty, a),
            Elementwise::Unary(UnaryFn::Neg) => self.b.ins().fneg(a),
            Elementwise::Unary(UnaryFn::Gelu) => {
                let t = self.gelu_tanh(ty, a);
                let (half, one) = (self.math().fconst(ty, 0.5), self.math().fconst(ty, 1.0));
                let hx = self.b.ins().fmul(half, a);
                let s = self.b.ins().fadd(one, t);
                self.b.ins().fmul(hx, s)
            }
            Elementwise::Binary(BinaryFn::Add) => self.b.ins().fadd(a, b),
            Elementwise::Binary(BinaryFn::Sub) => self.b.ins().fsub(a, b),
            Elementwise::Binary(BinaryFn::Mul) => self.b.ins().fmul(a, b),
            Elementwise::Binary(BinaryFn::Div) => self.b.ins().fdiv(a, b),
            Elementwise::Unary(UnaryFn::Softmax | UnaryFn::LogSoftmax | UnaryFn::LayerNorm) => {
                unreachable!("KernelSpec::new refuses row-wise functions")
            }
        }
    }

    /// Opens a loop over the row's elements `[first, end)` (in bytes) with one element of
    /// type `ty` (`f32x4` or `f32`) per iteration: jumps to a loop block with parameters
    /// `offset` and one value per `carried`, and switches to it.
    fn open_loop(&mut self, ty: Type, first: usize, carried: &[Value]) -> (Block, At, Vec<Value>) {
        let body = self.b.create_block();
        let offset = self.b.append_block_param(body, types::I64);
        let params: Vec<Value> = carried
            .iter()
            .map(|&c| {
                let c_ty = self.b.func.dfg.value_type(c);
                self.b.append_block_param(body, c_ty)
            })
            .collect();
        let start = self.b.ins().iconst(types::I64, first as i64);
        let args: Vec<BlockArg> = std::iter::once(start).chain(carried.iter().copied()).map(BlockArg::Value).collect();
        self.b.ins().jump(body, &args);
        self.b.switch_to_block(body);
        (body, At { ty, offset }, params)
    }

    /// Closes a loop opened by [`Gen::open_loop`]: loops while `offset + step < end`, then
    /// continues in a new block whose parameters are the carried values' final values.
    fn close_loop(&mut self, body: Block, at: At, end: usize, carried: &[Value]) -> Vec<Value> {
        let after = self.b.create_block();
        let results: Vec<Value> = carried
            .iter()
            .map(|&c| {
                let c_ty = self.b.func.dfg.value_type(c);
                self.b.append_block_param(after, c_ty)
            })
            .collect();
        let step = if at.ty.is_vector() { LANES * 4 } else { 4 };
        let next = self.b.ins().iadd_imm_s(at.offset, step as i64);
        let more = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, next, end as i64);
        let again: Vec<BlockArg> = std::iter::once(next).chain(carried.iter().copied()).map(BlockArg::Value).collect();
        let done: Vec<BlockArg> = carried.iter().copied().map(BlockArg::Value).collect();
        self.b.ins().brif(more, body, &again, after, &done);
        self.b.switch_to_block(after);
        results
    }

    /// Runs `element` over the row: the vector loop, then the scalar tail loop, each only
    /// if it has elements. `carried` are loop-carried `f32` sums: splatted into `f32x4`
    /// for the vector loop, summed across lanes after it, carried through the tail.
    fn for_each_element(
        &mut self,
        scalars: &[Option<Value>],
        carried: Vec<Value>,
        mut element: impl FnMut(&mut Self, Vec<Option<Value>>, At, &mut [Value]),
    ) -> Vec<Value> {
        let chunked = self.chunks() * LANES * 4;
        let end = self.n() * 4;
        let mut carried = carried;
        if chunked > 0 {
            let splats = self.splat_scalars(scalars);
            // Vector sums start from zero; the incoming values are added back after.
            let zero = self.math().fconst(VEC, 0.0);
            let zeros = vec![zero; carried.len()];
            let (body, at, mut sums) = self.open_loop(VEC, 0, &zeros);
            element(self, splats, at, &mut sums);
            let sums = self.close_loop(body, at, chunked, &sums);
            for (c, sum) in carried.iter_mut().zip(sums) {
                let lanes: Vec<Value> = (0..LANES).map(|l| self.b.ins().extractlane(sum, l as u8)).collect();
                let low = self.b.ins().fadd(lanes[0], lanes[1]);
                let high = self.b.ins().fadd(lanes[2], lanes[3]);
                let total = self.b.ins().fadd(low, high);
                *c = self.b.ins().fadd(*c, total);
            }
        }
        if end > chunked {
            let (body, at, mut sums) = self.open_loop(types::F32, chunked, &carried);
            element(self, scalars.to_vec(), at, &mut sums);
            carried = self.close_loop(body, at, end, &sums);
        }
        carried
    }

    fn forward_row(&mut self) {
        let spec = self.spec;
        let scalars = self.scalar_values();
        let first_output = self.input_count();
        for (j, &v) in spec.outputs().iter().enumerate() {
            if spec.width(v) == Width::Scalar {
                let value = self.value(&scalars, v);
                self.store_scalar(first_output + j, value);
            }
        }
        self.for_each_element(&scalars, Vec::new(), |gen, env, at, _| gen.forward_elements(env, at));
    }

    /// Forward over the vector values at `at`, storing the vector outputs.
    fn forward_elements(&mut self, mut env: Vec<Option<Value>>, at: At) {
        let spec = self.spec;
        self.load_vector_inputs(&mut env, at);
        self.eval_ops(at.ty, Width::Vector, &mut env, None);
        let first_output = self.input_count();
        for (j, &v) in spec.outputs().iter().enumerate() {
            if spec.width(v) == Width::Vector {
                let value = self.value(&env, v);
                self.store(first_output + j, at, value);
            }
        }
        if let Some(port) = self.saved_port {
            for j in 0..self.saved.len() {
                let value = self.value(&env, self.saved[j]);
                let place = self.saved_at(j, at);
                self.store(port, place, value);
            }
        }
    }

    fn backward_row(&mut self) {
        let spec = self.spec;
        let scalars = self.scalar_values();
        // The scalars that vector ops with a gradient read: their gradient terms are summed
        // over the row's elements.
        let mut sink_of = vec![None; spec.value_count()];
        let mut sinks = Vec::new();
        for (i, op) in spec.ops().iter().enumerate() {
            let v = spec.op_value(i);
            if spec.width(v) != Width::Vector || !self.has_adjoint[v.index()] {
                continue;
            }
            for &arg in &op.args {
                if spec.width(arg) == Width::Scalar && sink_of[arg.index()].is_none() {
                    sink_of[arg.index()] = Some(sinks.len());
                    sinks.push(arg);
                }
            }
        }
        let zero = self.b.ins().f32const(0.0);
        let totals = self.for_each_element(&scalars, vec![zero; sinks.len()], |gen, env, at, sums| {
            gen.backward_elements(env, at, &sink_of, sums)
        });
        // Scalar reverse mode, once per row.
        let mut adjoints: Vec<Option<Value>> = vec![None; spec.value_count()];
        let first_grad = self.input_count();
        for (j, &v) in spec.outputs().iter().enumerate() {
            if spec.width(v) == Width::Scalar {
                adjoints[v.index()] = Some(self.load_scalar(first_grad + j));
            }
        }
        for (&s, &total) in sinks.iter().zip(&totals) {
            self.accumulate(&mut adjoints, s, total);
        }
        self.reverse_ops(types::F32, Width::Scalar, &scalars, &mut adjoints, &sink_of, &mut []);
        let first_input_grad = self.first_input_grad;
        for (p, &width) in spec.inputs().iter().enumerate() {
            if width == Width::Scalar {
                let g = match adjoints[p] {
                    Some(g) => g,
                    None => self.b.ins().f32const(0.0),
                };
                self.store_scalar(first_input_grad + p, g);
            }
        }
    }

    /// Forward and reverse over the vector values at `at`: stores the vector inputs'
    /// gradients and adds the terms for broadcast scalars into `sums` (by sink index).
    fn backward_elements(
        &mut self,
        mut env: Vec<Option<Value>>,
        at: At,
        sink_of: &[Option<usize>],
        sums: &mut [Value],
    ) {
        let spec = self.spec;
        self.load_vector_inputs(&mut env, at);
        self.eval_ops(at.ty, Width::Vector, &mut env, self.saved_port.map(|_| at));
        let mut adjoints: Vec<Option<Value>> = vec![None; spec.value_count()];
        let first_grad = self.input_count();
        for (j, &v) in spec.outputs().iter().enumerate() {
            if spec.width(v) == Width::Vector {
                adjoints[v.index()] = Some(self.load(first_grad + j, at));
            }
        }
        self.reverse_ops(at.ty, Width::Vector, &env, &mut adjoints, sink_of, sums);
        let first_input_grad = self.first_input_grad;
        for (p, &width) in spec.inputs().iter().enumerate() {
            if width == Width::Vector {
                let g = match adjoints[p] {
                    Some(g) => g,
                    None => self.math().fconst(at.ty, 0.0),
                };
                self.store(first_input_grad + p, at, g);
            }
        }
    }

    fn accumulate(&mut self, adjoints: &mut [Option<Value>], v: ValueId, term: Value) {
        adjoints[v.index()] = Some(match adjoints[v.index()] {
            Some(acc) => self.b.ins().fadd(acc, term),
            None => term,
        });
    }

    /// Reverse mode over the ops of one width, last op first. Terms for values of the
    /// same width go into `adjoints`; terms from vector ops for scalars go into `sums`.
    fn reverse_ops(
        &mut self,
        ty: Type,
        width: Width,
        env: &[Option<Value>],
        adjoints: &mut [Option<Value>],
        sink_of: &[Option<usize>],
        sums: &mut [Value],
    ) {
        let spec = self.spec;
        for i in (0..spec.ops().len()).rev() {
            let v = spec.op_value(i);
            if spec.width(v) != width {
                continue;
            }
            let Some(g) = adjoints[v.index()] else { continue };
            let op = &spec.ops()[i];
            let a = self.value(env, op.args[0]);
            let b = op.args.get(1).map(|&arg| self.value(env, arg));
            let y = self.value(env, v);
            let terms = self.op_gradients(ty, op.op, g, a, b, y);
            for (&arg, term) in op.args.iter().zip(terms) {
                match (spec.width(arg), sink_of[arg.index()]) {
                    (Width::Scalar, Some(k)) if width == Width::Vector => {
                        sums[k] = self.b.ins().fadd(sums[k], term);
                    }
                    _ => self.accumulate(adjoints, arg, term),
                }
            }
        }
    }

    /// `tanh(c·(x + k·x²·x))`, GELU's inner term, as the interpreter's `gelu_tanh`.
    fn gelu_tanh(&mut self, ty: Type, x: Value) -> Value {
        let (c, k) = (self.math().fconst(ty, GELU_C), self.math().fconst(ty, GELU_K));
        let x2 = self.b.ins().fmul(x, x);
        let x3 = self.b.ins().fmul(x2, x);
        let kx3 = self.b.ins().fmul(k, x3);
        let sum = self.b.ins().fadd(x, kx3);
        let u = self.b.ins().fmul(c, sum);
        self.math().tanh(ty, u)
    }

    /// The gradient terms of an op's operands; the interpreter's `binary_grads` and
    /// backward match these expression for expression.
    fn op_gradients(
        &mut self,
        ty: Type,
        op: Elementwise,
        g: Value,
        a: Value,
        b: Option<Value>,
        y: Value,
    ) -> Vec<Value> {
        let b = b.unwrap_or(a);
        match op {
            Elementwise::Unary(UnaryFn::Relu) => {
                let zero = self.math().fconst(ty, 0.0);
                vec![self.math().select_cmp(ty, FloatCC::LessThanOrEqual, a, zero, zero, g)]
            }
            Elementwise::Unary(UnaryFn::Neg) => vec![self.b.ins().fneg(g)],
            Elementwise::Unary(UnaryFn::Gelu) => {
                // ½(1 + t) + ½x·((1 - t²)·c(1 + 3k x²)), as the interpreter's `gelu_grad`.
                let t = self.gelu_tanh(ty, a);
                let (half, one) = (self.math().fconst(ty, 0.5), self.math().fconst(ty, 1.0));
                let (c, k3) = (self.math().fconst(ty, GELU_C), self.math().fconst(ty, 3.0 * GELU_K));
                let s = self.b.ins().fadd(one, t);
                let left = self.b.ins().fmul(half, s);
                let t2 = self.b.ins().fmul(t, t);
                let dt = self.b.ins().fsub(one, t2);
                let x2 = self.b.ins().fmul(a, a);
                let k3x2 = self.b.ins().fmul(k3, x2);
                let p = self.b.ins().fadd(one, k3x2);
                let du = self.b.ins().fmul(c, p);
                let inner = self.b.ins().fmul(dt, du);
                let hx = self.b.ins().fmul(half, a);
                let right = self.b.ins().fmul(hx, inner);
                let d = self.b.ins().fadd(left, right);
                vec![self.b.ins().fmul(g, d)]
            }
            Elementwise::Unary(UnaryFn::Exp) => vec![self.b.ins().fmul(g, y)],
            Elementwise::Unary(UnaryFn::Log) => vec![self.b.ins().fdiv(g, a)],
            Elementwise::Unary(UnaryFn::Tanh) => {
                let one = self.math().fconst(ty, 1.0);
                let y2 = self.b.ins().fmul(y, y);
                let d = self.b.ins().fsub(one, y2);
                vec![self.b.ins().fmul(g, d)]
            }
            Elementwise::Unary(UnaryFn::Sigmoid) => {
                let one = self.math().fconst(ty, 1.0);
                let c = self.b.ins().fsub(one, y);
                let d = self.b.ins().fmul(y, c);
                vec![self.b.ins().fmul(g, d)]
            }
            Elementwise::Binary(BinaryFn::Add) => vec![g, g],
            Elementwise::Binary(BinaryFn::Sub) => vec![g, self.b.ins().fneg(g)],
            Elementwise::Binary(BinaryFn::Mul) => vec![self.b.ins().fmul(g, b), self.b.ins().fmul(g, a)],
            Elementwise::Binary(BinaryFn::Div) => {
                let ga = self.b.ins().fdiv(g, b);
                let t = self.b.ins().fmul(ga, y);
                vec![ga, self.b.ins().fneg(t)]
            }
            Elementwise::Unary(UnaryFn::Softmax | UnaryFn::LogSoftmax | UnaryFn::LayerNorm) => {
                unreachable!("KernelSpec::new refuses row-wise functions")
            }
        }
    }
}
