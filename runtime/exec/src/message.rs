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
    F32(Values),
}

/// A message's f32 values: a range of a buffer that several messages may share. A node
/// that runs a batch (a GEMM, a kernel call) writes every message's rows into one buffer
/// and gives each message its range of it ([`Payload::pieces`]) instead of a copy of its
/// own; the next node that takes those messages together in the same order reads the
/// range they span in place ([`Payload::contiguous`]): the batch survives from node to
/// node as one buffer while each instance keeps its own message, key and credit.
#[derive(Clone)]
pub struct Values {
    buffer: Arc<Vec<f32>>,
    /// The range in the buffer; `end` [`WHOLE`]: all of it. `u32`s keep a payload two
    /// words, as a plain `Arc` and a length would be: every message moves its payload
    /// through queues several times (a batch's buffer longer than `u32` ranges reach is
    /// cut into copies instead, see [`Payload::pieces`]).
    start: u32,
    end: u32,
}

/// The `end` of values that are their whole buffer.
const WHOLE: u32 = u32::MAX;

// Two words: what a message costs to move (see `Values`).
const _: () = assert!(std::mem::size_of::<Payload>() == 16);

impl Values {
    fn whole(values: Vec<f32>) -> Values {
        Values { buffer: Arc::new(values), start: 0, end: WHOLE }
    }

    /// Whether these values are their buffer's all (so an owner of the only reference
    /// can take or change the buffer itself).
    fn is_whole(&self) -> bool {
        self.end == WHOLE
    }

    /// The range of the buffer these values are.
    fn range(&self) -> (usize, usize) {
        if self.end == WHOLE {
            (0, self.buffer.len())
        } else {
            (self.start as usize, self.end as usize)
        }
    }
}

impl std::ops::Deref for Values {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        if self.end == WHOLE {
            &self.buffer
        } else {
            &self.buffer[self.start as usize..self.end as usize]
        }
    }
}

impl PartialEq for Values {
    fn eq(&self, other: &Values) -> bool {
        **self == **other
    }
}

impl std::fmt::Debug for Values {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

impl Payload {
    pub fn from_vec(values: Vec<f32>) -> Payload {
        Payload::F32(Values::whole(values))
    }

    /// One payload per length of `lens`, each the next `lens[i]` values of `values`, all
    /// sharing its allocation (no copy; `lens` must not sum past `values.len()`, extra
    /// values are nobody's). One length makes a payload of its own buffer.
    pub fn pieces(values: Vec<f32>, lens: &[usize]) -> Vec<Payload> {
        if let [len] = lens {
            let mut values = values;
            values.truncate(*len);
            return vec![Payload::from_vec(values)];
        }
        let mut start = 0;
        if values.len() >= WHOLE as usize {
            // Past what a piece's range can say: a copy each.
            return lens
                .iter()
                .map(|&len| {
                    let end = (start + len).min(values.len());
                    let piece = Payload::from_vec(values[start.min(end)..end].to_vec());
                    start = end;
                    piece
                })
                .collect();
        }
        let buffer = Arc::new(values);
        let len = buffer.len();
        lens.iter()
            .map(|&n| {
                let end = (start + n).min(len);
                // Both below `WHOLE`: the buffer is shorter.
                let piece = Values { buffer: Arc::clone(&buffer), start: start.min(end) as u32, end: end as u32 };
                start = end;
                Payload::F32(piece)
            })
            .collect()
    }

    /// The values of `payloads` one after the other, read in place when they are
    /// consecutive ranges of one buffer (the pieces of one batch taken in their order,
    /// see [`Payload::pieces`]); `None` otherwise (or for a unit payload among them).
    pub fn contiguous<'p>(payloads: impl IntoIterator<Item = &'p Payload>) -> Option<&'p [f32]> {
        let mut payloads = payloads.into_iter();
        let Some(Payload::F32(first)) = payloads.next() else { return None };
        let (start, mut end) = first.range();
        for p in payloads {
            match p {
                Payload::F32(v) if Arc::ptr_eq(&v.buffer, &first.buffer) && v.range().0 == end => end = v.range().1,
                _ => return None,
            }
        }
        first.buffer.get(start..end)
    }

    /// The values; empty for `Unit`.
    pub fn values(&self) -> &[f32] {
        match self {
            Payload::Unit => &[],
            Payload::F32(v) => v,
        }
    }

    /// The values as an owned vector (copied only when shared, or a piece of a batch).
    pub fn into_vec(self) -> Vec<f32> {
        match self {
            Payload::Unit => Vec::new(),
            Payload::F32(v) if v.is_whole() => Arc::unwrap_or_clone(v.buffer),
            Payload::F32(v) => v.to_vec(),
        }
    }

    /// The values to change in place: this payload's own buffer, made first when the
    /// values are shared or a piece of a batch (empty for `Unit`).
    pub fn values_mut(&mut self) -> &mut [f32] {
        match self {
            Payload::Unit => &mut [],
            Payload::F32(v) => {
                if !v.is_whole() {
                    *v = Values::whole(v.to_vec());
                }
                Arc::make_mut(&mut v.buffer).as_mut_slice()
            }
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
#[derive(Clone, Debug, PartialEq)]
pub struct Envelope {
    pub node: u32,
    pub port: u16,
    pub dir: Dir,
    pub msg: Msg,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_share_one_buffer_and_read_back_in_place_in_order() {
        let pieces = Payload::pieces((0..10).map(|v| v as f32).collect(), &[3, 0, 4, 3]);
        let values: Vec<Vec<f32>> = pieces.iter().map(|p| p.values().to_vec()).collect();
        assert_eq!(values, [vec![0.0, 1.0, 2.0], vec![], vec![3.0, 4.0, 5.0, 6.0], vec![7.0, 8.0, 9.0]]);
        // In their order they are one range of the buffer; out of order, or a copy among
        // them, they are not.
        let all = Payload::contiguous(&pieces).map(<[f32]>::to_vec);
        assert_eq!(all, Some((0..10).map(|v| v as f32).collect::<Vec<_>>()));
        assert_eq!(Payload::contiguous(&pieces[2..]), Some(&[3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0][..]));
        assert_eq!(Payload::contiguous([&pieces[2], &pieces[0]]), None);
        assert_eq!(Payload::contiguous([&pieces[0], &pieces[3]]), None);
        let copy = Payload::from_vec(pieces[2].values().to_vec());
        assert_eq!(copy, pieces[2], "payloads compare by their values");
        assert_eq!(Payload::contiguous([&pieces[0], &copy]), None);
        assert_eq!(Payload::contiguous([&Payload::Unit]), None);
        // Changing a piece changes its own copy, never its neighbours'.
        let mut piece = pieces[2].clone();
        piece.values_mut()[0] = 40.0;
        assert_eq!(piece.values(), [40.0, 4.0, 5.0, 6.0]);
        assert_eq!(pieces[2].values(), [3.0, 4.0, 5.0, 6.0]);
        assert_eq!(pieces[3].clone().into_vec(), [7.0, 8.0, 9.0]);
        // One piece is its buffer, truncated: owned again without a copy.
        let one = Payload::pieces(vec![1.0, 2.0, 3.0], &[2]);
        assert_eq!(one[0].values(), [1.0, 2.0]);
        let mut whole = one.into_iter().next().unwrap_or(Payload::Unit);
        whole.values_mut()[1] = 5.0;
        assert_eq!(whole.into_vec(), [1.0, 5.0]);
    }

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
