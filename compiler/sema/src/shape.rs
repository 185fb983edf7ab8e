//! Shapes as an algebra: a dimension is a polynomial with integer coefficients over
//! hyperparameter symbols, plus its value when every symbol has one.
//!
//! Two dimensions are equal when their values are known and equal (a model is checked
//! for the hyperparameters it will be compiled with), or else when their normalised
//! polynomials are equal (a layer body is checked for every instantiation at once).
//! Diagnostics print the polynomial (`2 * hidden`) and the value (`= 256`).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// A hyperparameter or constant (identified by `id`), or an opaque term such as
/// `(d / heads)` that the polynomial algebra cannot normalise (identified by its
/// operation and operands, so that the same term written twice is the same symbol).
#[derive(Clone, Debug)]
pub struct Symbol {
    pub id: u32,
    pub name: Arc<str>,
    /// The value this compilation gives the symbol: a model hyperparameter's default or
    /// override, a constant's value; `None` for a layer's hyperparameters. Not part of
    /// the symbol's identity.
    pub value: Option<i64>,
    pub opaque: Option<Arc<Opaque>>,
}

/// `lhs / rhs` or `lhs % rhs` with symbolic operands.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Opaque {
    pub op: char,
    pub lhs: Poly,
    pub rhs: Poly,
}

impl Symbol {
    /// An opaque `lhs op rhs` term (`op` is `/` or `%`).
    pub fn opaque(op: char, lhs: Poly, rhs: Poly, value: Option<i64>) -> Symbol {
        Symbol {
            id: u32::MAX,
            name: format!("({lhs} {op} {rhs})").into(),
            value,
            opaque: Some(Arc::new(Opaque { op, lhs, rhs })),
        }
    }

    fn key(&self) -> (u32, Option<&Opaque>) {
        (self.id, self.opaque.as_deref())
    }
}

impl PartialEq for Symbol {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}
impl Eq for Symbol {}
impl PartialOrd for Symbol {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Symbol {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key().cmp(&other.key())
    }
}
impl std::hash::Hash for Symbol {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.key().hash(state)
    }
}

/// Integer division or remainder of two dimensions, exact when both are known.
pub fn divide_dims(op: char, x: &Dim, y: &Dim) -> Dim {
    let value = match (x.value, y.value) {
        (Some(a), Some(b)) if b != 0 => {
            if op == '/' {
                a.checked_div(b)
            } else {
                a.checked_rem(b)
            }
        }
        _ => None,
    };
    match (x.poly.as_constant(), y.poly.as_constant(), value) {
        (Some(_), Some(_), Some(v)) => Dim::constant(v),
        _ => Dim { poly: Poly::symbol(Symbol::opaque(op, x.poly.clone(), y.poly.clone(), value)), value },
    }
}

/// A normalised polynomial: monomial (sorted symbols, with repetition) -> coefficient;
/// the empty monomial is the constant term. No zero coefficients are stored.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Poly {
    terms: BTreeMap<Vec<Symbol>, i64>,
}

impl Poly {
    pub fn constant(c: i64) -> Self {
        let mut p = Poly::default();
        p.add_term(Vec::new(), c);
        p
    }

    pub fn symbol(s: Symbol) -> Self {
        let mut p = Poly::default();
        p.add_term(vec![s], 1);
        p
    }

    fn add_term(&mut self, mono: Vec<Symbol>, coeff: i64) {
        if coeff == 0 {
            return;
        }
        let entry = self.terms.entry(mono).or_insert(0);
        *entry = entry.wrapping_add(coeff);
        self.terms.retain(|_, c| *c != 0);
    }

    pub fn as_constant(&self) -> Option<i64> {
        match self.terms.len() {
            0 => Some(0),
            1 => self.terms.get(&Vec::new()).copied(),
            _ => None,
        }
    }

    pub fn add(&self, other: &Poly) -> Poly {
        let mut p = self.clone();
        for (m, c) in &other.terms {
            p.add_term(m.clone(), *c);
        }
        p
    }

    pub fn neg(&self) -> Poly {
        Poly { terms: self.terms.iter().map(|(m, c)| (m.clone(), c.wrapping_neg())).collect() }
    }

    pub fn sub(&self, other: &Poly) -> Poly {
        self.add(&other.neg())
    }

    pub fn mul(&self, other: &Poly) -> Poly {
        let mut p = Poly::default();
        for (ma, ca) in &self.terms {
            for (mb, cb) in &other.terms {
                let mut m: Vec<Symbol> = ma.iter().chain(mb).cloned().collect();
                m.sort();
                p.add_term(m, ca.wrapping_mul(*cb));
            }
        }
        p
    }

    /// Replaces symbols by dimensions; symbols the map does not know stay.
    pub fn substitute(&self, map: &dyn Fn(&Symbol) -> Option<Dim>) -> Dim {
        let mut total = Dim::constant(0);
        for (mono, coeff) in &self.terms {
            let mut term = Dim::constant(*coeff);
            for s in mono {
                let d = match (&s.opaque, map(s)) {
                    (_, Some(d)) => d,
                    (Some(o), None) => divide_dims(o.op, &o.lhs.substitute(map), &o.rhs.substitute(map)),
                    (None, None) => Dim::symbol(s.clone(), s.value),
                };
                term = term.mul(&d);
            }
            total = total.add(&term);
        }
        total
    }

    /// The monomials and their coefficients.
    pub fn terms(&self) -> impl Iterator<Item = (&Vec<Symbol>, i64)> {
        self.terms.iter().map(|(m, c)| (m, *c))
    }

    pub fn symbols(&self) -> impl Iterator<Item = &Symbol> {
        self.terms.keys().flatten()
    }
}

impl fmt::Display for Poly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.terms.is_empty() {
            return f.write_str("0");
        }
        // Highest-degree terms first, constant last: `2 * hidden + 1`.
        let mut terms: Vec<_> = self.terms.iter().collect();
        terms.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.0.cmp(b.0)));
        for (i, (mono, coeff)) in terms.into_iter().enumerate() {
            let (sign, mag) = if *coeff < 0 { ("-", coeff.unsigned_abs()) } else { ("+", coeff.unsigned_abs()) };
            if i == 0 {
                if sign == "-" {
                    f.write_str("-")?;
                }
            } else {
                write!(f, " {sign} ")?;
            }
            let names: Vec<&str> = mono.iter().map(|s| &*s.name).collect();
            match (mag, names.is_empty()) {
                (_, true) => write!(f, "{mag}")?,
                (1, false) => f.write_str(&names.join(" * "))?,
                (_, false) => write!(f, "{mag} * {}", names.join(" * "))?,
            }
        }
        Ok(())
    }
}

/// One dimension of a tensor shape. Deliberately not `Hash`: equality is by value when
/// known, which no hash of the polynomial could respect.
#[derive(Clone, Debug, Eq)]
pub struct Dim {
    pub poly: Poly,
    /// Known when every symbol of `poly` has a value (always, inside a model).
    pub value: Option<i64>,
}

impl PartialEq for Dim {
    fn eq(&self, other: &Self) -> bool {
        match (self.value, other.value) {
            (Some(a), Some(b)) => a == b,
            _ => self.poly == other.poly,
        }
    }
}

impl Dim {
    pub fn constant(c: i64) -> Self {
        Dim { poly: Poly::constant(c), value: Some(c) }
    }

    pub fn symbol(s: Symbol, value: Option<i64>) -> Self {
        Dim { poly: Poly::symbol(s), value }
    }

    fn combine(&self, other: &Dim, poly: Poly, op: fn(i64, i64) -> Option<i64>) -> Dim {
        let value = match (self.value, other.value) {
            (Some(a), Some(b)) => op(a, b),
            _ => None,
        };
        let value = value.or_else(|| poly.as_constant());
        Dim { poly, value }
    }

    pub fn add(&self, other: &Dim) -> Dim {
        self.combine(other, self.poly.add(&other.poly), i64::checked_add)
    }

    pub fn sub(&self, other: &Dim) -> Dim {
        self.combine(other, self.poly.sub(&other.poly), i64::checked_sub)
    }

    pub fn mul(&self, other: &Dim) -> Dim {
        self.combine(other, self.poly.mul(&other.poly), i64::checked_mul)
    }

    /// Replaces symbols by dimensions (layer instantiation).
    pub fn substitute(&self, map: &dyn Fn(&Symbol) -> Option<Dim>) -> Dim {
        let d = self.poly.substitute(map);
        Dim { value: d.value.or(self.value.filter(|_| self.poly.symbols().next().is_none())), poly: d.poly }
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.poly)
    }
}

/// A tensor shape; rank 0 is a scalar `f32`.
pub type Shape = Vec<Dim>;

/// Renders a shape as a type: `f32`, `f32[2 * hidden]`.
pub fn shape_to_string(shape: &[Dim]) -> String {
    if shape.is_empty() {
        return "f32".to_string();
    }
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    format!("f32[{}]", dims.join(", "))
}

/// Like [`shape_to_string`] plus the values where a dimension is symbolic:
/// `f32[2 * hidden] (= f32[256])`.
pub fn shape_with_values(shape: &[Dim]) -> String {
    let symbolic = shape_to_string(shape);
    let any_symbolic = shape.iter().any(|d| d.poly.as_constant().is_none());
    let all_known = shape.iter().all(|d| d.value.is_some());
    if any_symbolic && all_known {
        let values: Vec<String> = shape.iter().map(|d| d.value.unwrap_or_default().to_string()).collect();
        format!("{symbolic} (= f32[{}])", values.join(", "))
    } else {
        symbolic
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sym(id: u32, name: &str) -> Symbol {
        Symbol { id, name: name.into(), value: None, opaque: None }
    }

    #[test]
    fn substitution_keeps_the_values_of_untouched_symbols() {
        let hidden = Symbol { id: 7, name: "hidden".into(), value: Some(128), opaque: None };
        let d = Dim::constant(2).mul(&Dim::symbol(hidden.clone(), hidden.value));
        assert_eq!(d.substitute(&|_| None).value, Some(256));
    }

    #[test]
    fn opaque_division_is_equal_to_itself_and_substitutes() {
        let d = sym(1, "d");
        let heads = sym(2, "heads");
        let a = divide_dims('/', &Dim::symbol(d.clone(), None), &Dim::symbol(heads.clone(), None));
        let b = divide_dims('/', &Dim::symbol(d.clone(), None), &Dim::symbol(heads.clone(), None));
        assert_eq!(a, b);
        assert_eq!(a.to_string(), "(d / heads)");
        let out = a.substitute(&|s| match &*s.name {
            "d" => Some(Dim::constant(256)),
            "heads" => Some(Dim::constant(4)),
            _ => None,
        });
        assert_eq!(out.value, Some(64));
    }

    #[test]
    fn polynomials_normalise() {
        let h = Poly::symbol(sym(0, "hidden"));
        let two_h = Poly::constant(2).mul(&h);
        assert_eq!(h.add(&h), two_h);
        assert_eq!(two_h.sub(&h).sub(&h).as_constant(), Some(0));
        assert_eq!(two_h.add(&Poly::constant(1)).to_string(), "2 * hidden + 1");
        assert_eq!(Poly::constant(3).sub(&h).to_string(), "-hidden + 3");
    }

    #[test]
    fn dims_compare_by_value_when_known_else_symbolically() {
        let a = Dim::symbol(sym(0, "embed"), Some(300));
        let b = Dim::symbol(sym(1, "hidden"), Some(300));
        assert_eq!(a, b);
        let x = Dim::symbol(sym(2, "input"), None);
        let y = Dim::symbol(sym(3, "hidden"), None);
        assert_ne!(x, y);
        assert_eq!(x.add(&x), Dim::constant(2).mul(&x));
    }

    #[test]
    fn substitution_instantiates_layers() {
        let input = sym(0, "input");
        let d = Dim::constant(3).mul(&Dim::symbol(input.clone(), None));
        let hidden = Dim::symbol(sym(9, "hidden"), Some(32));
        let out = d.substitute(&|s| (s == &input).then(|| hidden.clone()));
        assert_eq!(out.value, Some(96));
        assert_eq!(out.to_string(), "3 * hidden");
    }
}
