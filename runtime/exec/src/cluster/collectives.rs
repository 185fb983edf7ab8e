//! Typed collectives: what the executor moves between processes between runs (a
//! checkpoint's parameters and optimizer state gathered to process 0, the groups' counts
//! for the metrics, a master's values for its replicas elsewhere, gradients for `grad`),
//! each a value of its own type. A value crosses as the f32 words of one tensor item
//! ([`Words`]); what arrives is decoded and checked here, so each caller says only who
//! sends what.

use super::*;
use amp_params::TensorState;

/// A value a collective moves, written as f32 words (bit patterns where it is not an f32)
/// and read back only when the words are exactly one such value.
pub(crate) trait Words: Sized {
    /// What the value is, in errors.
    const WHAT: &'static str;
    fn put(&self, out: &mut Vec<f32>);
    fn take(words: &[f32]) -> Option<Self>;
}

fn put_u64(out: &mut Vec<f32>, x: u64) {
    out.extend([f32::from_bits(x as u32), f32::from_bits((x >> 32) as u32)]);
}

fn get_u64(words: &[f32]) -> Option<u64> {
    match words {
        [lo, hi] => Some(u64::from(lo.to_bits()) | (u64::from(hi.to_bits()) << 32)),
        _ => None,
    }
}

/// A tensor's values.
impl Words for Vec<f32> {
    const WHAT: &'static str = "tensor";

    fn put(&self, out: &mut Vec<f32>) {
        out.extend_from_slice(self);
    }

    fn take(words: &[f32]) -> Option<Self> {
        Some(words.to_vec())
    }
}

/// Counts, each as two words of its bits.
impl<const N: usize> Words for [u64; N] {
    const WHAT: &'static str = "set of counts";

    fn put(&self, out: &mut Vec<f32>) {
        self.iter().for_each(|&x| put_u64(out, x));
    }

    fn take(words: &[f32]) -> Option<Self> {
        if words.len() != 2 * N {
            return None;
        }
        let mut counts = [0; N];
        for (count, pair) in counts.iter_mut().zip(words.chunks_exact(2)) {
            *count = get_u64(pair)?;
        }
        Some(counts)
    }
}

/// A parameter tensor with its optimizer state: the values, the two moments (each
/// preceded by its length) and the step.
impl Words for (Vec<f32>, TensorState) {
    const WHAT: &'static str = "tensor with its optimizer state";

    fn put(&self, out: &mut Vec<f32>) {
        let (values, state) = self;
        for part in [values, &state.m, &state.v] {
            put_u64(out, part.len() as u64);
            out.extend_from_slice(part);
        }
        put_u64(out, state.step);
    }

    fn take(words: &[f32]) -> Option<Self> {
        let mut rest = words;
        let mut part = || -> Option<Vec<f32>> {
            let len = usize::try_from(get_u64(rest.get(..2)?)?).ok()?;
            let values = rest.get(2..2usize.checked_add(len)?)?.to_vec();
            rest = &rest[2 + len..];
            Some(values)
        };
        let (values, m, v) = (part()?, part()?, part()?);
        let step = get_u64(rest)?;
        Some((values, TensorState { step, m, v }))
    }
}

impl Cluster {
    /// Brings values to process 0: each other process sends its `own` (slot, value) pairs,
    /// process 0 receives every slot `expected` lists from its sender (`(slot, process)`)
    /// and returns them. Every process calls it at the same point of its runs.
    pub(crate) fn gather_values<T: Words>(
        &self,
        own: Vec<(u32, T)>,
        expected: &[(u32, usize)],
    ) -> Result<Vec<(u32, T)>, ExecError> {
        let own = own.into_iter().map(|(slot, value)| (slot, words(&value))).collect();
        self.gather(own, expected)?.into_iter().map(|(slot, w)| self.read(slot, &w, expected)).collect()
    }

    /// Moves values between any processes: this one sends each of `sends` (to process,
    /// slot, value) and returns the slots `expected` lists (slot, sender). Every process
    /// calls it at the same point of its runs.
    pub(crate) fn exchange_values<T: Words>(
        &self,
        sends: Vec<(usize, u32, T)>,
        expected: &[(u32, usize)],
    ) -> Result<Vec<(u32, T)>, ExecError> {
        let sends = sends.into_iter().map(|(to, slot, value)| (to, slot, words(&value))).collect();
        self.exchange(sends, expected)?.into_iter().map(|(slot, w)| self.read(slot, &w, expected)).collect()
    }

    /// Slot `slot`'s words as a `T`; an error naming the sender when they are not one.
    fn read<T: Words>(&self, slot: u32, words: &[f32], expected: &[(u32, usize)]) -> Result<(u32, T), ExecError> {
        T::take(words).map(|value| (slot, value)).ok_or_else(|| {
            let from = expected.iter().find(|&&(s, _)| s == slot).map_or(0, |&(_, p)| p);
            cluster_error(format!(
                "process {from} ({}) sent {} words for slot {slot}, which are no {}",
                self.address(from),
                words.len(),
                T::WHAT
            ))
        })
    }
}

fn words<T: Words>(value: &T) -> Vec<f32> {
    let mut out = Vec::new();
    value.put(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip<T: Words + PartialEq + std::fmt::Debug>(value: T) {
        assert_eq!(T::take(&words(&value)), Some(value));
    }

    /// Every value reads back as written; words of another shape are no value.
    #[test]
    fn values_read_back_and_other_words_are_refused() {
        round_trip(vec![1.5f32, -0.0, 3.0]);
        round_trip([0u64, 1, u64::MAX, 1 << 40]);
        let state = TensorState { step: (1 << 33) + 5, m: vec![0.5; 3], v: vec![] };
        round_trip((vec![1.0, 2.0, 3.0], state.clone()));
        assert_eq!(<[u64; 2]>::take(&[0.0; 3]), None);
        let mut cut = words(&(vec![1.0, 2.0, 3.0], state));
        cut.pop();
        assert_eq!(<(Vec<f32>, TensorState)>::take(&cut), None);
        // A length past the words.
        let mut long = Vec::new();
        put_u64(&mut long, u64::MAX);
        assert_eq!(<(Vec<f32>, TensorState)>::take(&long), None);
    }
}
