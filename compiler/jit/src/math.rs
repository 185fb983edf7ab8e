//! `exp`, `log`, `tanh` and `sigmoid` as Cranelift IR, for `f32` and `f32x4` alike: no
//! calls, so the vector loop stays vectorized. All four are Cephes-style (range reduction,
//! a short polynomial, reconstruction by integer ops on the exponent bits), with the
//! special values of IEEE functions.
//!
//! Relative error against the exact result, over **every** `f32` (every positive one for
//! `log`) whose exact result is a normal `f32`, measured by `tests/jit/approx.rs`
//! (`cargo test -p amp-jit --release --test jit -- --ignored exhaustive --nocapture`, 7
//! minutes; the default test sweeps 2^20 points per function). [`max_rel_error`] holds
//! the documented bounds, which the tests enforce:
//!
//! | function | measured max (with `fma` / without) | bound | method |
//! |---|---|---|---|
//! | `exp` | 8.5e-8 / 8.2e-8 | 1.5e-7 | `x = k ln2 + r` (k rounded by a magic-number add), degree-5 polynomial for `e^r - 1`, `r ∈ [-ln2/2, ln2/2]`, `2^k` as two exponent-field products so that `k = 128` and gradual underflow work |
//! | `log` | 8.2e-8 / 8.1e-8 | 1.5e-7 | `x = m 2^e`, `m ∈ [√½, √2)`, degree-9 polynomial in `m - 1`; subnormals rescaled first |
//! | `tanh` | 1.76e-7 / 1.80e-7 | 2.5e-7 | `m/(m+2)` with `m = e^{2|x|} - 1 = 2^k (e^r - 1) + (2^k - 1)` from `exp`'s reduction (no cancellation), then `x`'s sign bit |
//! | `sigmoid` | 1.48e-7 / 1.48e-7 | 2e-7 | `1/(1+e^{-x})` |
//!
//! Where the exact result is subnormal (`exp` and `sigmoid` below -87.3) the absolute
//! error is at most 1.1e-45 (`exp`) and 2.9e-39 (`sigmoid`, which returns 0 once `e^{-x}`
//! overflows). Special values: `exp(+∞) = +∞`, `exp(-∞) = 0`, `exp(x > 88.73) = +∞`;
//! `log(±0) = -∞`, `log(x < 0) = NaN`, `log(+∞) = +∞`; `tanh(±∞) = ±1`, `tanh(-0) = -0`;
//! every function maps NaN to NaN (the range clamps are compare-and-select, which let NaN
//! through, not IEEE `fmin`/`fmax`).
//!
//! `a * b + c` becomes one `fma` when the ISA has it (`cranelift_native` sets `has_fma` on
//! this machine), two instructions otherwise; the error bounds hold either way.

use cranelift_codegen::ir::condcodes::FloatCC;
use cranelift_codegen::ir::{types, InstBuilder, MemFlagsData, Type, Value};
use cranelift_frontend::FunctionBuilder;

/// The documented bounds on the relative error of the approximations (see the module
/// documentation for the ranges), enforced by the tests.
pub mod max_rel_error {
    pub const EXP: f64 = 1.5e-7;
    pub const LOG: f64 = 1.5e-7;
    pub const TANH: f64 = 2.5e-7;
    pub const SIGMOID: f64 = 2e-7;
}

// The coefficients as Cephes prints them (more digits than an f32 holds).
/// `e^r = 1 + r + r² P(r)` (Cephes `expf`), highest degree first.
#[allow(clippy::excessive_precision)]
const EXP_POLY: [f32; 6] =
    [1.9875691500E-4, 1.3981999507E-3, 8.3334519073E-3, 4.1665795894E-2, 1.6666665459E-1, 5.0000001201E-1];
/// `log(1+f) = f - f²/2 + f³ P(f)` (Cephes `logf`), highest degree first.
#[allow(clippy::excessive_precision)]
const LOG_POLY: [f32; 9] = [
    7.0376836292E-2,
    -1.1514610310E-1,
    1.1676998740E-1,
    -1.2420140846E-1,
    1.4249322787E-1,
    -1.6668057665E-1,
    2.0000714765E-1,
    -2.4999993993E-1,
    3.3333331174E-1,
];
/// `1.5 · 2^23`: adding it rounds an f32 below 2^22 in magnitude to an integer.
const ROUND_MAGIC: f32 = 12_582_912.0;
/// `ln 2 = LN2_HI + LN2_LO`, split so that `k * LN2_HI` is exact for `|k| < 2^15`.
#[allow(clippy::excessive_precision)] // the exact value: 355/512
const LN2_HI: f32 = 0.693_359_375;
#[allow(clippy::excessive_precision)]
const LN2_LO: f32 = -2.12194440E-4;

/// Emits float math on `f32` (`ty = F32`) or `f32x4` (`ty = F32X4`) values.
pub(crate) struct Math<'a, 'f> {
    pub b: &'a mut FunctionBuilder<'f>,
    /// Whether `a * b + c` may use the `fma` instruction.
    pub fma: bool,
}

/// The integer type with `ty`'s lanes.
fn int_type(ty: Type) -> Type {
    if ty.is_vector() {
        types::I32X4
    } else {
        types::I32
    }
}

impl Math<'_, '_> {
    pub fn fconst(&mut self, ty: Type, x: f32) -> Value {
        let c = self.b.ins().f32const(x);
        if ty.is_vector() {
            self.b.ins().splat(ty, c)
        } else {
            c
        }
    }

    fn iconst(&mut self, ty: Type, x: i32) -> Value {
        let c = self.b.ins().iconst(types::I32, i64::from(x));
        if ty.is_vector() {
            self.b.ins().splat(int_type(ty), c)
        } else {
            c
        }
    }

    /// `if cond { a } else { b }`, lane by lane; `cond` is an `fcmp` of two `ty` values.
    pub fn select(&mut self, ty: Type, cond: Value, a: Value, b: Value) -> Value {
        if ty.is_vector() {
            let mask = self.b.ins().bitcast(ty, MemFlagsData::new(), cond);
            self.b.ins().bitselect(mask, a, b)
        } else {
            self.b.ins().select(cond, a, b)
        }
    }

    /// `if lhs cc rhs { a } else { b }`.
    pub fn select_cmp(&mut self, ty: Type, cc: FloatCC, lhs: Value, rhs: Value, a: Value, b: Value) -> Value {
        let cond = self.b.ins().fcmp(cc, lhs, rhs);
        self.select(ty, cond, a, b)
    }

    /// `a * b + c`.
    pub fn mul_add(&mut self, a: Value, b: Value, c: Value) -> Value {
        if self.fma {
            self.b.ins().fma(a, b, c)
        } else {
            let p = self.b.ins().fmul(a, b);
            self.b.ins().fadd(p, c)
        }
    }

    fn mul_add_const(&mut self, ty: Type, a: Value, b: f32, c: Value) -> Value {
        let b = self.fconst(ty, b);
        self.mul_add(a, b, c)
    }

    /// Horner's rule over `coeffs`, highest degree first.
    fn poly(&mut self, ty: Type, x: Value, coeffs: &[f32]) -> Value {
        let mut acc = self.fconst(ty, coeffs[0]);
        for &c in &coeffs[1..] {
            let c = self.fconst(ty, c);
            acc = self.mul_add(acc, x, c);
        }
        acc
    }

    /// `2^k` from `k << 23` (an int of `ty`'s lanes), for `k` in [-126, 127]: `k` added to
    /// the exponent field of 1.0.
    fn pow2(&mut self, ty: Type, k_shifted: Value, one: Value) -> Value {
        let one_bits = self.b.ins().bitcast(int_type(ty), MemFlagsData::new(), one);
        let bits = self.b.ins().iadd(k_shifted, one_bits);
        self.b.ins().bitcast(ty, MemFlagsData::new(), bits)
    }

    /// The range reduction shared by `exp` and `tanh`: `y = k ln2 + r` with `|r| ≤ ln2/2`;
    /// returns `e^r - 1` (accurate relative to itself, no cancellation near 0) and `k << 23`
    /// as an int. `y` must be within ±151.
    fn exp_reduce(&mut self, ty: Type, y: Value) -> (Value, Value) {
        let log2e = self.fconst(ty, std::f32::consts::LOG2_E);
        let t = self.b.ins().fmul(y, log2e);
        // k = round(t) by adding 1.5·2^23: the sum's low mantissa bits hold k as an
        // integer; its bits shifted left by 23 are exactly `k << 23`, as the constant's
        // low 9 bits are zero. No round or float-to-int conversion instruction needed.
        let magic = self.fconst(ty, ROUND_MAGIC);
        let shifted = self.b.ins().fadd(t, magic);
        let k = self.b.ins().fsub(shifted, magic);
        let r = self.mul_add_const(ty, k, -LN2_HI, y);
        let r = self.mul_add_const(ty, k, -LN2_LO, r);
        let z = self.b.ins().fmul(r, r);
        let p = self.poly(ty, r, &EXP_POLY);
        let q = self.mul_add(p, z, r);
        let bits = self.b.ins().bitcast(int_type(ty), MemFlagsData::new(), shifted);
        let k_shifted = self.b.ins().ishl_imm_u(bits, 23);
        (q, k_shifted)
    }

    pub fn relu(&mut self, ty: Type, x: Value) -> Value {
        let zero = self.fconst(ty, 0.0);
        self.select_cmp(ty, FloatCC::LessThan, x, zero, zero, x)
    }

    pub fn exp(&mut self, ty: Type, x: Value) -> Value {
        // Clamping keeps k in [-150, 129]; beyond, the result is 0 or +inf anyway. The
        // compare-and-select form lets NaN through (both compares are false); NaN then
        // stays NaN through `q`, whatever k becomes.
        let lo = self.fconst(ty, -104.0);
        let hi = self.fconst(ty, 89.0);
        let x = self.select_cmp(ty, FloatCC::LessThan, x, lo, lo, x);
        let x = self.select_cmp(ty, FloatCC::GreaterThan, x, hi, hi, x);
        let (q, k_shifted) = self.exp_reduce(ty, x);
        let one = self.fconst(ty, 1.0);
        let p = self.b.ins().fadd(q, one);
        // 2^k = 2^(k>>1) · 2^(k - (k>>1)): each factor is a normal f32 even for k = 129
        // or k = -150, and the second product rounds once into the subnormals.
        let half = self.b.ins().sshr_imm_u(k_shifted, 24);
        let k1 = self.b.ins().ishl_imm_u(half, 23);
        let k2 = self.b.ins().isub(k_shifted, k1);
        let s1 = self.pow2(ty, k1, one);
        let s2 = self.pow2(ty, k2, one);
        let p = self.b.ins().fmul(p, s1);
        self.b.ins().fmul(p, s2)
    }

    pub fn log(&mut self, ty: Type, x: Value) -> Value {
        let ity = int_type(ty);
        // Subnormals: scale by 2^23 first so the exponent field is meaningful.
        let min_normal = self.fconst(ty, f32::MIN_POSITIVE);
        let small = self.b.ins().fcmp(FloatCC::LessThan, x, min_normal);
        let two23 = self.fconst(ty, 8_388_608.0);
        let scaled = self.b.ins().fmul(x, two23);
        let xs = self.select(ty, small, scaled, x);
        let minus23 = self.fconst(ty, -23.0);
        let zero = self.fconst(ty, 0.0);
        let e_adjust = self.select(ty, small, minus23, zero);
        // x = m · 2^e with m in [0.5, 1).
        let bits = self.b.ins().bitcast(ity, MemFlagsData::new(), xs);
        let exponent = self.b.ins().ushr_imm_u(bits, 23);
        let bias = self.iconst(ty, 126);
        let e = self.b.ins().isub(exponent, bias);
        let mantissa_mask = self.iconst(ty, 0x007f_ffff);
        let half_bits = self.iconst(ty, 0x3f00_0000);
        let m = self.b.ins().band(bits, mantissa_mask);
        let m = self.b.ins().bor(m, half_bits);
        let m = self.b.ins().bitcast(ty, MemFlagsData::new(), m);
        let e = self.b.ins().fcvt_from_sint(ty, e);
        let e = self.b.ins().fadd(e, e_adjust);
        // m < √½: use 2m - 1 and e - 1, so that f = m' - 1 is in [√½ - 1, √2 - 1).
        let sqrt_half = self.fconst(ty, std::f32::consts::FRAC_1_SQRT_2);
        let below = self.b.ins().fcmp(FloatCC::LessThan, m, sqrt_half);
        let one = self.fconst(ty, 1.0);
        let e_step = self.select(ty, below, one, zero);
        let e = self.b.ins().fsub(e, e_step);
        let doubled = self.b.ins().fadd(m, m);
        let m = self.select(ty, below, doubled, m);
        let f = self.b.ins().fsub(m, one);
        let z = self.b.ins().fmul(f, f);
        let p = self.poly(ty, f, &LOG_POLY);
        let y = self.b.ins().fmul(p, f);
        let y = self.b.ins().fmul(y, z);
        let y = self.mul_add_const(ty, e, LN2_LO, y);
        let y = self.mul_add_const(ty, z, -0.5, y);
        let r = self.b.ins().fadd(f, y);
        let r = self.mul_add_const(ty, e, LN2_HI, r);
        // Special values, last test first in priority: NaN, x < 0, ±0, +inf.
        let inf = self.fconst(ty, f32::INFINITY);
        let r = self.select_cmp(ty, FloatCC::Equal, x, inf, inf, r);
        let neg_inf = self.fconst(ty, f32::NEG_INFINITY);
        let r = self.select_cmp(ty, FloatCC::Equal, x, zero, neg_inf, r);
        let nan = self.fconst(ty, f32::NAN);
        let r = self.select_cmp(ty, FloatCC::LessThan, x, zero, nan, r);
        self.select_cmp(ty, FloatCC::Unordered, x, x, x, r)
    }

    pub fn tanh(&mut self, ty: Type, x: Value) -> Value {
        // tanh|x| = m / (m + 2) with m = e^{2|x|} - 1 computed without cancellation:
        // m = 2^k q + (2^k - 1) where q = e^r - 1 (for k = 0, m = q exactly as accurate
        // as q). Then x's sign bit: odd, exact at ±0 and subnormals, NaN stays NaN.
        // Beyond |x| = 10, tanh rounds to 1: clamping there keeps 2^k a normal f32.
        let ax = self.b.ins().fabs(x);
        let y = self.b.ins().fadd(ax, ax);
        let limit = self.fconst(ty, 20.0);
        let y = self.select_cmp(ty, FloatCC::GreaterThan, y, limit, limit, y);
        let (q, k_shifted) = self.exp_reduce(ty, y);
        let one = self.fconst(ty, 1.0);
        let scale = self.pow2(ty, k_shifted, one);
        let scale_minus_one = self.b.ins().fsub(scale, one);
        let m = self.mul_add(scale, q, scale_minus_one);
        let two = self.fconst(ty, 2.0);
        let d = self.b.ins().fadd(m, two);
        let magnitude = self.b.ins().fdiv(m, d);
        let sign_mask = self.fconst(ty, -0.0);
        let sign = self.b.ins().band(x, sign_mask);
        self.b.ins().bor(magnitude, sign)
    }

    pub fn sigmoid(&mut self, ty: Type, x: Value) -> Value {
        // 0 - x rather than fneg: one instruction with a hoisted zero, where a vector
        // fneg rebuilds its sign mask every time; e^{±0} = 1 either way.
        let zero = self.fconst(ty, 0.0);
        let minus_x = self.b.ins().fsub(zero, x);
        let e = self.exp(ty, minus_x);
        let one = self.fconst(ty, 1.0);
        let d = self.b.ins().fadd(one, e);
        self.b.ins().fdiv(one, d)
    }
}
