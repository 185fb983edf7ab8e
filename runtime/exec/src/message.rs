//! Messages: a payload (nothing, or f32 values shared between consumers) and a state (one
//! i64 per state field, `-1` for unset), and the envelopes that carry them between nodes.

use amp_ir::FieldId;
use std::sync::Arc;

/// The value a state field holds when nothing has written it.
pub const UNSET: i64 = -1;

/// What a message carries: nothing (a control message, or the gradient of one) or f32
/// values in row-major order. The values are shared: a node that fans out sends the same
/// allocation to every consumer, and caches hold on to it without copying.
#[derive(Clone, Debug, PartialEq)]
pub enum Payload {
    Unit,
    F32(Arc<Vec<f32>>),
}

impl Payload {
    pub fn from_vec(values: Vec<f32>) -> Payload {
        Payload::F32(Arc::new(values))
    }

    /// The values; empty for `Unit`.
    pub fn values(&self) -> &[f32] {
        match self {
            Payload::Unit => &[],
            Payload::F32(v) => v,
        }
    }

    /// The values as an owned vector (copied only when shared).
    pub fn into_vec(self) -> Vec<f32> {
        match self {
            Payload::Unit => Vec::new(),
            Payload::F32(v) => Arc::unwrap_or_clone(v),
        }
    }

    pub fn is_unit(&self) -> bool {
        matches!(self, Payload::Unit)
    }
}

/// One message: payload and state. A forward message and its backward message (the
/// gradient) carry the same state.
#[derive(Clone, Debug, PartialEq)]
pub struct Msg {
    pub payload: Payload,
    pub state: Box<[i64]>,
}

impl Msg {
    pub fn new(payload: Payload, state: Box<[i64]>) -> Msg {
        Msg { payload, state }
    }

    /// The instance the message belongs to (state field 0).
    pub fn instance(&self) -> i64 {
        self.state.first().copied().unwrap_or(UNSET)
    }

    /// The same state with another payload (the state moves: no allocation).
    pub fn with_payload(self, payload: Payload) -> Msg {
        Msg { payload, state: self.state }
    }

    /// A copy of the state with another payload, for a message that goes on being used.
    pub fn sibling(&self, payload: Payload) -> Msg {
        Msg { payload, state: self.state.clone() }
    }
}

/// Key fields kept inline in a [`Key`]; longer keys (deep nesting) go to the heap.
const KEY_INLINE: usize = 4;

/// The values of a node's key fields in a state: what its caches and joins are indexed by.
/// Most keys are a few fields (the instance, a loop counter, an element), so they are
/// kept inline: every keyed op makes one per message in each direction, and a boxed
/// slice cost an allocation and a free each time. Compares and hashes as its slice of
/// fields, whichever way it is stored.
#[derive(Clone)]
pub enum Key {
    Inline { len: u8, fields: [i64; KEY_INLINE] },
    Heap(Box<[i64]>),
}

impl Key {
    pub fn as_slice(&self) -> &[i64] {
        match self {
            Key::Inline { len, fields } => &fields[..usize::from(*len)],
            Key::Heap(fields) => fields,
        }
    }
}

impl std::ops::Deref for Key {
    type Target = [i64];
    fn deref(&self) -> &[i64] {
        self.as_slice()
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Key {}

impl std::hash::Hash for Key {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state);
    }
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.as_slice().fmt(f)
    }
}

impl From<&[i64]> for Key {
    fn from(values: &[i64]) -> Key {
        if values.len() <= KEY_INLINE {
            let mut fields = [0; KEY_INLINE];
            fields[..values.len()].copy_from_slice(values);
            Key::Inline { len: values.len() as u8, fields }
        } else {
            Key::Heap(values.into())
        }
    }
}

impl FromIterator<i64> for Key {
    fn from_iter<I: IntoIterator<Item = i64>>(values: I) -> Key {
        let mut fields = [0; KEY_INLINE];
        let mut len = 0;
        let mut values = values.into_iter();
        for v in values.by_ref() {
            if len == KEY_INLINE {
                // Longer than the inline room: the rest joins what was read, on the heap.
                let mut all = fields.to_vec();
                all.push(v);
                all.extend(values);
                return Key::Heap(all.into_boxed_slice());
            }
            fields[len] = v;
            len += 1;
        }
        Key::Inline { len: len as u8, fields }
    }
}

/// The hash maps keyed by [`Key`]s (and ports): Fx hashing, as the keys are a few small
/// ints hashed several times per message, where SipHash would cost more than the lookups
/// themselves. Its keys are not chosen by an
/// adversary: instance numbers and positions the run derives itself, as many at a time as
/// there are messages in flight.
pub type KeyMap<K, V> = rustc_hash::FxHashMap<K, V>;

/// The key of `state` for the fields `fields` (a field beyond the state reads as unset;
/// the verifier rules that out).
pub fn key_of(fields: &[FieldId], state: &[i64]) -> Key {
    fields.iter().map(|f| state.get(usize::from(f.0)).copied().unwrap_or(UNSET)).collect()
}

/// Which way a message travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    Forward,
    Backward,
}

/// A message on its way to a node: forward messages name the node's input port,
/// backward messages the node's output port they answer.
#[derive(Clone, Debug)]
pub(crate) struct Envelope {
    pub node: u32,
    pub port: u16,
    pub dir: Dir,
    pub msg: Msg,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_their_fields_however_long() {
        for len in 0..9 {
            let fields: Vec<i64> = (0..len).map(|i| i * 7 - 3).collect();
            let collected: Key = fields.iter().copied().collect();
            let copied = Key::from(fields.as_slice());
            assert_eq!(&*collected, fields.as_slice(), "{len} fields");
            assert_eq!(collected, copied);
            assert_eq!(matches!(collected, Key::Inline { .. }), len <= KEY_INLINE as i64, "{len} fields");
            // A key made either way finds the other's entry.
            let mut map: KeyMap<Key, usize> = KeyMap::default();
            map.insert(collected, 1);
            assert_eq!(map.get(&copied), Some(&1));
            // One more or one less field is another key (the length counts, not only
            // the fields the shorter one has).
            let longer: Key = fields.iter().copied().chain([0]).collect();
            assert_ne!(longer, copied);
            assert!(!map.contains_key(&longer));
        }
    }

    #[test]
    fn key_of_reads_fields_and_unset_past_the_state() {
        let state = [4, 9, 2, 7, 5, 1];
        let fields: Vec<FieldId> = [5, 0, 3, 1, 2, 9].into_iter().map(FieldId).collect();
        assert_eq!(&*key_of(&fields, &state), &[1, 4, 7, 9, 2, UNSET]);
        assert_eq!(&*key_of(&fields[..2], &state), &[1, 4]);
    }
}
