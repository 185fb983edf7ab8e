//! Payload types, parameters and constants.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The payload type of a port: nothing (a control message) or an f32 tensor.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PayloadTy {
    Unit,
    /// Concrete dimensions; `[]` is a scalar.
    F32(Vec<u64>),
    /// A batch of a collection's elements: `f32[?, dims...]`, one row per element, the
    /// number of rows known only at run time (from the instance's data).
    Batch(Vec<u64>),
}

impl PayloadTy {
    /// Elements of the payload; of one row for a batch. Saturates at `u64::MAX`: a type
    /// read from an untrusted graph can have dimensions whose product overflows, which the
    /// checks that compare it against a limit or another type then refuse.
    pub fn elements(&self) -> u64 {
        match self {
            PayloadTy::Unit => 0,
            PayloadTy::F32(dims) | PayloadTy::Batch(dims) if dims.contains(&0) => 0,
            PayloadTy::F32(dims) | PayloadTy::Batch(dims) => {
                dims.iter().try_fold(1u64, |n, &d| n.checked_mul(d)).unwrap_or(u64::MAX)
            }
        }
    }
}

impl fmt::Display for PayloadTy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PayloadTy::Unit => f.write_str("unit"),
            PayloadTy::F32(dims) if dims.is_empty() => f.write_str("f32"),
            PayloadTy::F32(dims) => {
                let parts: Vec<String> = dims.iter().map(u64::to_string).collect();
                write!(f, "f32[{}]", parts.join(", "))
            }
            PayloadTy::Batch(dims) => {
                let parts: Vec<String> =
                    std::iter::once("?".to_string()).chain(dims.iter().map(u64::to_string)).collect();
                write!(f, "f32[{}]", parts.join(", "))
            }
        }
    }
}

/// A parameter tensor, named as in PyTorch's `state_dict` (`cell.weight`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Param {
    pub name: String,
    pub shape: Vec<u64>,
    pub init: ParamInit,
}

/// How a parameter is initialised (as PyTorch initialises `nn.Linear`, `nn.Embedding` and
/// `nn.LayerNorm`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ParamInit {
    /// `U(-1/sqrt(fan_in), 1/sqrt(fan_in))`.
    Uniform { fan_in: u64 },
    /// `N(0, 1)`.
    Normal,
    /// All ones (a LayerNorm's weight).
    Ones,
    /// All zeros (a LayerNorm's bias).
    Zeros,
}

impl fmt::Display for ParamInit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParamInit::Uniform { fan_in } => write!(f, "uniform({fan_in})"),
            ParamInit::Normal => f.write_str("normal"),
            ParamInit::Ones => f.write_str("ones"),
            ParamInit::Zeros => f.write_str("zeros"),
        }
    }
}

/// The value a `const` node fills its output with.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum ConstValue {
    Zeros,
    Ones,
    /// Serialised as `{"ScalarBits": u32}`, its `f32::to_bits`: JSON has no NaN or
    /// infinity, and bits are exact.
    #[serde(rename = "ScalarBits", with = "f32_bits")]
    Scalar(f32),
}

/// An f32 as its bits, for [`ConstValue::Scalar`].
pub(crate) mod f32_bits {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(x: &f32, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u32(x.to_bits())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f32, D::Error> {
        u32::deserialize(d).map(f32::from_bits)
    }
}
