//! Resource limits: the one table of how big a model, a graph and an instance may be.
//!
//! `ampc check` (the checker), `ampc compile` (the lowering), the graph loaders (`.ampg`
//! and text), the verifier and `amprun` (parameters, data, the executor) all read these
//! constants, so a model one of them accepts is one the others accept too, and every size
//! is computed with checked arithmetic against them before anything is allocated.
//! docs/limits.md lists them for users.

use std::fmt;

/// Most elements of one tensor (a parameter, a payload, a row of a batch): 2^30 f32
/// values, 4 GiB. Past it an element count is more likely a typo or an overflow than a
/// model; it also keeps every count exact in f64 and every byte count within `usize`.
pub const MAX_TENSOR_ELEMENTS: u64 = 1 << 30;
/// Most parameter elements of a model, all tensors together: 2^30 (4 GiB of f32; training
/// keeps a gradient beside each, and Adam two moments more).
pub const MAX_PARAMETERS: u64 = 1 << 30;
/// Most parameter tensors of a model (parameter arrays count each element's tensors).
/// Each tensor is read by a node, so this also bounds the graph a model lowers to.
pub const MAX_PARAM_TENSORS: u64 = 50_000;
/// Most node slots (nodes and holes) of a graph: what the lowering may build and a graph
/// file may hold.
pub const MAX_NODES: usize = 200_000;
/// Most input or output ports of one node (port numbers are u16).
pub const MAX_PORTS: usize = u16::MAX as usize;
/// Most state fields (field ids are u16).
pub const MAX_FIELDS: usize = u16::MAX as usize + 1;
/// Deepest state expression (nested operators) in a graph, after inlining. Printing,
/// evaluating and reading one recurse this deep.
pub const MAX_EXPR_DEPTH: usize = 128;
/// Deepest nesting of loops in a graph.
pub const MAX_LOOP_DEPTH: usize = 64;
/// Most elements of one collection of one instance (a `flatmap`'s count, a batch's rows).
pub const MAX_COLLECTION_ELEMENTS: u64 = 1 << 24;
/// Most trips of one loop in one instance, unless the run sets `--max-trips`. A `while`
/// whose condition never turns false would otherwise train forever while messages flow.
pub const DEFAULT_MAX_TRIPS: u64 = 1 << 20;
/// Most bytes of a source file (`.amp`) that `ampc` and `amprun` read: 32 MiB, what the
/// language server takes in one message. A longer input (an endless one such as
/// `/dev/zero`) is refused after that many bytes.
pub const MAX_SOURCE_BYTES: u64 = 1 << 25;
/// Most bytes of a graph file (`.ampg`) or a profile (`--plan-profile`) that `ampc` and
/// `amprun` read: 256 MiB, several times what a graph at [`MAX_NODES`] takes.
pub const MAX_GRAPH_BYTES: u64 = 1 << 28;

/// A size over its limit, or one whose computation overflowed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitError {
    /// What was too big, for the message: "a tensor", "the model's parameters".
    pub what: &'static str,
    /// The size asked for; `None` when computing it overflowed 128 bits.
    pub count: Option<u128>,
    pub limit: u64,
}

impl fmt::Display for LimitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.count {
            Some(count) => write!(f, "{} of {count} elements is over the limit of {}", self.what, self.limit),
            None => write!(f, "{} has more elements than can be counted (the limit is {})", self.what, self.limit),
        }
    }
}

impl std::error::Error for LimitError {}

/// The element count of a tensor of `dims`, refused past [`MAX_TENSOR_ELEMENTS`].
pub fn tensor_elements(dims: &[u64]) -> Result<u64, LimitError> {
    within(product(dims.iter().map(|&d| u128::from(d))), MAX_TENSOR_ELEMENTS, "a tensor")
}

/// The product of `factors`, `None` on 128-bit overflow.
pub fn product(factors: impl IntoIterator<Item = u128>) -> Option<u128> {
    factors.into_iter().try_fold(1u128, |n, d| n.checked_mul(d))
}

/// `count` when it is known and at most `limit`.
pub fn within(count: Option<u128>, limit: u64, what: &'static str) -> Result<u64, LimitError> {
    match count {
        Some(c) if c <= u128::from(limit) => Ok(c as u64),
        _ => Err(LimitError { what, count, limit }),
    }
}

/// The bytes of the file at `path`, at most `limit` of them (one of the byte limits above):
/// a longer file, or an endless input such as `/dev/zero`, is an error after `limit + 1`
/// bytes were read, before more is allocated.
pub fn read_bounded(path: &std::path::Path, limit: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path)?.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(std::io::Error::other(format!("it is longer than {limit} bytes, the most read of such a file")));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn element_counts_are_checked_and_never_wrap() {
        assert_eq!(tensor_elements(&[]), Ok(1));
        assert_eq!(tensor_elements(&[3, 0]), Ok(0));
        assert_eq!(tensor_elements(&[1 << 15, 1 << 15]), Ok(1 << 30));
        // 3037000500² · 4 wraps u64 to 581,896,768 when multiplied naively.
        let wrapping = tensor_elements(&[3_037_000_500, 3_037_000_500, 4]).unwrap_err();
        assert_eq!(wrapping.count, Some(3_037_000_500u128 * 3_037_000_500 * 4));
        assert_eq!(tensor_elements(&[u64::MAX, u64::MAX, 2]).unwrap_err().count, None);
        assert!(tensor_elements(&[(1 << 30) + 1]).is_err());
    }
}
