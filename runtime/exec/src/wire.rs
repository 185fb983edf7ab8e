//! The binary form of what crosses processes (the bridge, `crate::cluster`): forward and backward
//! messages, the control words workers and the controller exchange, credits given back,
//! reports, process 0's decisions between runs, heartbeats. A packet is one run's items for one process, little-endian:
//!
//! ```text
//! packet  = magic:u32 from:u32 run:u64 count:u32 item*count
//! item    = tag:u8 fields...
//! payload = 0 | 1 len:u32 f32*len          state = len:u16 i64*len
//! ```
//!
//! Bytes from the network are untrusted like a graph file: [`decode`] checks every length
//! against the bytes that remain before it allocates anything of that length, and
//! against [`Limits`]; a malformed packet is a [`WireError`], never a panic or an
//! out-of-bounds read. Whether a worker or node index is one of the run's is for the
//! receiver to check (the bridge does).

use crate::message::{Dir, Msg, Payload};
use crate::trace::{TraceEvent, TraceKind};
use std::fmt;

/// The first four bytes of every packet ("AMPW").
pub const MAGIC: u32 = 0x5750_4d41;

/// One thing a process sends another.
#[derive(Clone, Debug, PartialEq)]
pub enum Item {
    /// A message for node `node` on worker `worker` (its instance's credit travels with it).
    Work {
        worker: u32,
        node: u32,
        port: u16,
        dir: Dir,
        msg: Msg,
    },
    /// Instance `instance` finished: the owner `worker` counts it (and forgets its reads
    /// owed a gradient, for a staleness bound).
    InstanceDone {
        worker: u32,
        instance: u64,
    },
    /// The controller asks owner `worker` to confirm its updates at a boundary.
    Confirm {
        worker: u32,
    },
    /// Worker `worker` ends its part of the run.
    Stop {
        worker: u32,
        flush: bool,
    },
    /// A credit of `instance` the receiver lent with a message comes back.
    Release {
        instance: u64,
    },
    /// To process 0, after a loss or output of `instance` that took a credit: give it back
    /// (a `Release`) now that the report before it arrived (`crate::cluster`).
    Receipt {
        instance: u64,
    },
    Loss {
        instance: i64,
        node: u32,
        value: f32,
        correct: Option<bool>,
        state: Option<Box<[i64]>>,
    },
    Output {
        instance: i64,
        node: u32,
        values: Vec<f32>,
    },
    Done {
        instance: u64,
    },
    Updated,
    Wake,
    Trace(Vec<TraceEvent>),
    /// A worker failed; the message says where and why.
    Failed {
        message: String,
    },
    Stopped {
        worker: u32,
        trace: Vec<TraceEvent>,
        held: Vec<(u32, u64)>,
    },
    /// Gathering a checkpoint: the values of tensor `tensor` of the parameter set.
    Tensor {
        tensor: u32,
        values: Vec<f32>,
    },
    /// From process 0 only, alone in its packet: what every process does next
    /// (`Cluster::agree`), at most [`MAX_DECISION_WORDS`] words.
    Decision {
        words: Vec<u64>,
    },
    /// To worker `worker`, which runs replica group `group` of a master owned in the
    /// sender's process: send the gradients accumulated since the last (a
    /// `ReplicaGrads`). Replica groups are numbered as the executor's parameter groups.
    ReplicaPull {
        worker: u32,
        group: u32,
    },
    /// To worker `worker`, the owner of replica group `group`'s master: the replica's
    /// gradients (`tensors` empty when it accumulated none; `rows`: the rows of tensor 0
    /// they reached, `(width, rows)`, when that is all they reached; `applied`: per
    /// instance, the master's version its read used). `last`: the replica's final word of
    /// the run (sent when the run stops with a flush).
    ReplicaGrads {
        worker: u32,
        group: u32,
        last: bool,
        tensors: Vec<Vec<f32>>,
        rows: Option<(u32, Vec<u32>)>,
        applied: Vec<(u64, u64)>,
    },
    /// To worker `worker`, which runs replica group `group`: its master's values, at the
    /// master's version `base`.
    ReplicaValues {
        worker: u32,
        group: u32,
        base: u64,
        tensors: Vec<Vec<f32>>,
    },
    /// To worker `worker`, the owner of replica group `group`'s master: the replica took
    /// the values sent.
    ReplicaSynced {
        worker: u32,
        group: u32,
    },
    /// To a process that routes messages to a copy of a replicated node (`node`) that
    /// runs in the sender's process: the copy served `count` messages in `nanos`
    /// nanoseconds (`load::replicas`: its queue and service time, as if it ran there).
    Served {
        node: u32,
        count: u32,
        nanos: u64,
    },
    /// To process 0, from an owner in another process: admissions hold while it defers an
    /// update for a staleness bound (`hold`), or it released its hold.
    Hold {
        hold: bool,
    },
    /// The sender is alive (sent when it has nothing else to send).
    Heartbeat,
    /// The sender leaves the cluster: it sends nothing more.
    Shutdown,
}

/// Bounds on what one packet may hold, beyond the bytes it has.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// State fields per message.
    pub state: usize,
    /// Values per payload, output or tensor.
    pub values: usize,
    /// Bytes of a failure message.
    pub text: usize,
    /// Trace events per item (a worker hands its events over in pieces of 2^16).
    pub events: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { state: 1 << 12, values: 1 << 28, text: 1 << 16, events: 1 << 17 }
    }
}

/// A packet that could not be read: what was wrong, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WireError {
    pub offset: usize,
    pub what: String,
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed packet at byte {}: {}", self.offset, self.what)
    }
}

impl std::error::Error for WireError {}

const TAG_WORK: u8 = 1;
const TAG_INSTANCE_DONE: u8 = 2;
const TAG_CONFIRM: u8 = 3;
const TAG_STOP: u8 = 4;
const TAG_RELEASE: u8 = 5;
const TAG_LOSS: u8 = 6;
const TAG_OUTPUT: u8 = 7;
const TAG_DONE: u8 = 8;
const TAG_UPDATED: u8 = 9;
const TAG_WAKE: u8 = 10;
const TAG_TRACE: u8 = 11;
const TAG_FAILED: u8 = 12;
const TAG_STOPPED: u8 = 13;
const TAG_TENSOR: u8 = 14;
const TAG_HEARTBEAT: u8 = 15;
const TAG_SHUTDOWN: u8 = 16;
const TAG_RECEIPT: u8 = 17;
const TAG_DECISION: u8 = 18;
const TAG_REPLICA_PULL: u8 = 19;
const TAG_REPLICA_GRADS: u8 = 20;
const TAG_REPLICA_VALUES: u8 = 21;
const TAG_REPLICA_SYNCED: u8 = 22;
const TAG_SERVED: u8 = 23;
const TAG_HOLD: u8 = 24;

/// The most tensors of a parameter group a replica's message carries (a Linear's two, an
/// Embedding's one, a LayerNorm's two: far fewer).
pub const MAX_GROUP_TENSORS: usize = 64;

/// The most words of a decision (`Item::Decision`): a few flags and counts, never data.
pub const MAX_DECISION_WORDS: usize = 16;

/// Bytes of one encoded trace event.
const EVENT_BYTES: usize = 4 + 4 + 1 + 8 + 8 + 4 + 4 + 4 + 1 + 8;

/// One packet: the process that sent it, the run its items belong to (heartbeats and
/// shutdowns belong to none in particular), and the items.
#[derive(Clone, Debug, PartialEq)]
pub struct Packet {
    pub from: u32,
    pub run: u64,
    pub items: Vec<Item>,
}

/// Appends the packet of `items` from process `from` for run `run` to `out`.
pub fn encode(from: u32, run: u64, items: &[Item], out: &mut Vec<u8>) {
    out.extend_from_slice(&MAGIC.to_le_bytes());
    out.extend_from_slice(&from.to_le_bytes());
    out.extend_from_slice(&run.to_le_bytes());
    out.extend_from_slice(&u32::try_from(items.len()).unwrap_or(u32::MAX).to_le_bytes());
    for item in items.iter().take(u32::MAX as usize) {
        encode_item(item, out);
    }
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// A length as written: lengths past `u32::MAX` cannot occur (limits bound every vector
/// far below), and are written saturated so that the reader refuses them.
fn put_len(out: &mut Vec<u8>, len: usize) {
    put_u32(out, u32::try_from(len).unwrap_or(u32::MAX));
}

fn put_f32s(out: &mut Vec<u8>, values: &[f32]) {
    put_len(out, values.len());
    out.reserve(values.len() * 4);
    for v in values {
        out.extend_from_slice(&v.to_le_bytes());
    }
}

fn put_state(out: &mut Vec<u8>, state: &[i64]) {
    out.extend_from_slice(&u16::try_from(state.len()).unwrap_or(u16::MAX).to_le_bytes());
    for v in state {
        out.extend_from_slice(&v.to_le_bytes());
    }
}

fn put_events(out: &mut Vec<u8>, events: &[TraceEvent]) {
    put_len(out, events.len());
    for e in events {
        put_u32(out, e.worker);
        put_u32(out, e.node);
        out.push(match e.kind {
            TraceKind::Forward => 0,
            TraceKind::Backward => 1,
            TraceKind::Update => 2,
        });
        put_u64(out, e.start_us);
        put_u64(out, e.dur_us);
        put_u32(out, e.batch);
        put_u32(out, e.rows);
        put_u32(out, e.instances);
        out.push(u8::from(e.staleness.is_some()));
        put_u64(out, e.staleness.unwrap_or(0));
    }
}

fn put_tensors(out: &mut Vec<u8>, tensors: &[Vec<f32>]) {
    put_len(out, tensors.len());
    for t in tensors {
        put_f32s(out, t);
    }
}

fn encode_item(item: &Item, out: &mut Vec<u8>) {
    match item {
        Item::Work { worker, node, port, dir, msg } => {
            out.push(TAG_WORK);
            put_u32(out, *worker);
            put_u32(out, *node);
            out.extend_from_slice(&port.to_le_bytes());
            out.push(match dir {
                Dir::Forward => 0,
                Dir::Backward => 1,
            });
            put_state(out, &msg.state);
            match &msg.payload {
                Payload::Unit => out.push(0),
                Payload::F32(values) => {
                    out.push(1);
                    put_f32s(out, values);
                }
            }
        }
        Item::InstanceDone { worker, instance } => {
            out.push(TAG_INSTANCE_DONE);
            put_u32(out, *worker);
            put_u64(out, *instance);
        }
        Item::Confirm { worker } => {
            out.push(TAG_CONFIRM);
            put_u32(out, *worker);
        }
        Item::Stop { worker, flush } => {
            out.push(TAG_STOP);
            put_u32(out, *worker);
            out.push(u8::from(*flush));
        }
        Item::Release { instance } => {
            out.push(TAG_RELEASE);
            put_u64(out, *instance);
        }
        Item::Receipt { instance } => {
            out.push(TAG_RECEIPT);
            put_u64(out, *instance);
        }
        Item::Loss { instance, node, value, correct, state } => {
            out.push(TAG_LOSS);
            out.extend_from_slice(&instance.to_le_bytes());
            put_u32(out, *node);
            out.extend_from_slice(&value.to_le_bytes());
            out.push(match correct {
                None => 0,
                Some(false) => 1,
                Some(true) => 2,
            });
            match state {
                None => out.push(0),
                Some(state) => {
                    out.push(1);
                    put_state(out, state);
                }
            }
        }
        Item::Output { instance, node, values } => {
            out.push(TAG_OUTPUT);
            out.extend_from_slice(&instance.to_le_bytes());
            put_u32(out, *node);
            put_f32s(out, values);
        }
        Item::Done { instance } => {
            out.push(TAG_DONE);
            put_u64(out, *instance);
        }
        Item::Updated => out.push(TAG_UPDATED),
        Item::Wake => out.push(TAG_WAKE),
        Item::Trace(events) => {
            out.push(TAG_TRACE);
            put_events(out, events);
        }
        Item::Failed { message } => {
            out.push(TAG_FAILED);
            put_len(out, message.len());
            out.extend_from_slice(message.as_bytes());
        }
        Item::Stopped { worker, trace, held } => {
            out.push(TAG_STOPPED);
            put_u32(out, *worker);
            put_events(out, trace);
            put_len(out, held.len());
            for (node, count) in held {
                put_u32(out, *node);
                put_u64(out, *count);
            }
        }
        Item::Tensor { tensor, values } => {
            out.push(TAG_TENSOR);
            put_u32(out, *tensor);
            put_f32s(out, values);
        }
        Item::Decision { words } => {
            out.push(TAG_DECISION);
            put_len(out, words.len());
            for &word in words {
                put_u64(out, word);
            }
        }
        Item::ReplicaPull { worker, group } => {
            out.push(TAG_REPLICA_PULL);
            put_u32(out, *worker);
            put_u32(out, *group);
        }
        Item::ReplicaGrads { worker, group, last, tensors, rows, applied } => {
            out.push(TAG_REPLICA_GRADS);
            put_u32(out, *worker);
            put_u32(out, *group);
            out.push(u8::from(*last));
            put_tensors(out, tensors);
            match rows {
                None => out.push(0),
                Some((width, rows)) => {
                    out.push(1);
                    put_u32(out, *width);
                    put_len(out, rows.len());
                    rows.iter().for_each(|&r| put_u32(out, r));
                }
            }
            put_len(out, applied.len());
            for &(instance, version) in applied {
                put_u64(out, instance);
                put_u64(out, version);
            }
        }
        Item::ReplicaValues { worker, group, base, tensors } => {
            out.push(TAG_REPLICA_VALUES);
            put_u32(out, *worker);
            put_u32(out, *group);
            put_u64(out, *base);
            put_tensors(out, tensors);
        }
        Item::ReplicaSynced { worker, group } => {
            out.push(TAG_REPLICA_SYNCED);
            put_u32(out, *worker);
            put_u32(out, *group);
        }
        Item::Served { node, count, nanos } => {
            out.push(TAG_SERVED);
            put_u32(out, *node);
            put_u32(out, *count);
            put_u64(out, *nanos);
        }
        Item::Hold { hold } => {
            out.push(TAG_HOLD);
            out.push(u8::from(*hold));
        }
        Item::Heartbeat => out.push(TAG_HEARTBEAT),
        Item::Shutdown => out.push(TAG_SHUTDOWN),
    }
}

/// Reads one packet. Every length is checked against the bytes left and against
/// `limits` before anything of that length is allocated.
pub fn decode(bytes: &[u8], limits: &Limits) -> Result<Packet, WireError> {
    let mut r = Reader { bytes, at: 0 };
    let magic = r.u32()?;
    if magic != MAGIC {
        return Err(r.error(format!("not an Amp packet (magic {magic:#010x})")));
    }
    let from = r.u32()?;
    let run = r.u64()?;
    let count = r.u32()? as usize;
    // Every item takes at least its tag's byte.
    if count > r.left() {
        return Err(r.error(format!("{count} items announced, {} bytes left", r.left())));
    }
    let mut items = Vec::with_capacity(count);
    for _ in 0..count {
        items.push(r.item(limits)?);
    }
    if r.left() > 0 {
        return Err(r.error(format!("{} bytes after the last item", r.left())));
    }
    Ok(Packet { from, run, items })
}

struct Reader<'b> {
    bytes: &'b [u8],
    at: usize,
}

impl<'b> Reader<'b> {
    fn error(&self, what: String) -> WireError {
        WireError { offset: self.at, what }
    }

    fn left(&self) -> usize {
        self.bytes.len().saturating_sub(self.at)
    }

    fn take(&mut self, n: usize) -> Result<&'b [u8], WireError> {
        let end = self.at.checked_add(n).filter(|&end| end <= self.bytes.len());
        match end.and_then(|end| self.bytes.get(self.at..end)) {
            Some(slice) => {
                self.at += n;
                Ok(slice)
            }
            None => Err(self.error(format!("{n} bytes wanted, {} left", self.left()))),
        }
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        let slice = self.take(N)?;
        let mut out = [0u8; N];
        out.copy_from_slice(slice);
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.array::<1>()?[0])
    }

    fn u16(&mut self) -> Result<u16, WireError> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    fn u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    fn i64(&mut self) -> Result<i64, WireError> {
        Ok(i64::from_le_bytes(self.array()?))
    }

    fn f32(&mut self) -> Result<f32, WireError> {
        Ok(f32::from_le_bytes(self.array()?))
    }

    fn flag(&mut self, what: &str) -> Result<bool, WireError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(self.error(format!("{what} is {other}, not 0 or 1"))),
        }
    }

    /// A count of things of `size` bytes each, at most `limit`: refused when the bytes
    /// left cannot hold them, before anything is allocated.
    fn count(&mut self, size: usize, limit: usize, what: &str) -> Result<usize, WireError> {
        let n = self.u32()? as usize;
        self.check_count(n, size, limit, what)
    }

    fn check_count(&self, n: usize, size: usize, limit: usize, what: &str) -> Result<usize, WireError> {
        if n > limit {
            return Err(self.error(format!("{n} {what}, over the limit of {limit}")));
        }
        if n.saturating_mul(size) > self.left() {
            return Err(self.error(format!("{n} {what} announced, {} bytes left", self.left())));
        }
        Ok(n)
    }

    fn f32s(&mut self, limits: &Limits) -> Result<Vec<f32>, WireError> {
        let n = self.count(4, limits.values, "values")?;
        let bytes = self.take(n * 4)?;
        Ok(bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
    }

    /// A group's tensors: at most [`MAX_GROUP_TENSORS`], each at most `limits.values`.
    fn tensors(&mut self, limits: &Limits) -> Result<Vec<Vec<f32>>, WireError> {
        // Each tensor takes at least its length's 4 bytes.
        let n = self.count(4, MAX_GROUP_TENSORS, "tensors")?;
        let mut tensors = Vec::with_capacity(n);
        for _ in 0..n {
            tensors.push(self.f32s(limits)?);
        }
        Ok(tensors)
    }

    fn state(&mut self, limits: &Limits) -> Result<Box<[i64]>, WireError> {
        let n = usize::from(self.u16()?);
        let n = self.check_count(n, 8, limits.state, "state fields")?;
        let bytes = self.take(n * 8)?;
        Ok(bytes
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
            .collect())
    }

    fn events(&mut self, limits: &Limits) -> Result<Vec<TraceEvent>, WireError> {
        let n = self.count(EVENT_BYTES, limits.events, "trace events")?;
        let mut events = Vec::with_capacity(n);
        for _ in 0..n {
            let worker = self.u32()?;
            let node = self.u32()?;
            let kind = match self.u8()? {
                0 => TraceKind::Forward,
                1 => TraceKind::Backward,
                2 => TraceKind::Update,
                other => return Err(self.error(format!("trace event kind {other}"))),
            };
            let start_us = self.u64()?;
            let dur_us = self.u64()?;
            let batch = self.u32()?;
            let rows = self.u32()?;
            let instances = self.u32()?;
            let has_staleness = self.flag("a trace event's staleness flag")?;
            let staleness = self.u64()?;
            let staleness = has_staleness.then_some(staleness);
            events.push(TraceEvent { worker, node, kind, start_us, dur_us, batch, rows, instances, staleness });
        }
        Ok(events)
    }

    fn item(&mut self, limits: &Limits) -> Result<Item, WireError> {
        let tag = self.u8()?;
        Ok(match tag {
            TAG_WORK => {
                let worker = self.u32()?;
                let node = self.u32()?;
                let port = self.u16()?;
                let dir = if self.flag("a message's direction")? { Dir::Backward } else { Dir::Forward };
                let state = self.state(limits)?;
                let payload =
                    if self.flag("a payload's kind")? { Payload::from_vec(self.f32s(limits)?) } else { Payload::Unit };
                Item::Work { worker, node, port, dir, msg: Msg::new(payload, state) }
            }
            TAG_INSTANCE_DONE => Item::InstanceDone { worker: self.u32()?, instance: self.u64()? },
            TAG_CONFIRM => Item::Confirm { worker: self.u32()? },
            TAG_STOP => Item::Stop { worker: self.u32()?, flush: self.flag("a stop's flush")? },
            TAG_RELEASE => Item::Release { instance: self.u64()? },
            TAG_RECEIPT => Item::Receipt { instance: self.u64()? },
            TAG_LOSS => {
                let instance = self.i64()?;
                let node = self.u32()?;
                let value = self.f32()?;
                let correct = match self.u8()? {
                    0 => None,
                    1 => Some(false),
                    2 => Some(true),
                    other => return Err(self.error(format!("a loss's judgement is {other}"))),
                };
                let state = if self.flag("a loss's state flag")? { Some(self.state(limits)?) } else { None };
                Item::Loss { instance, node, value, correct, state }
            }
            TAG_OUTPUT => {
                let instance = self.i64()?;
                let node = self.u32()?;
                Item::Output { instance, node, values: self.f32s(limits)? }
            }
            TAG_DONE => Item::Done { instance: self.u64()? },
            TAG_UPDATED => Item::Updated,
            TAG_WAKE => Item::Wake,
            TAG_TRACE => Item::Trace(self.events(limits)?),
            TAG_FAILED => {
                let n = self.count(1, limits.text, "bytes of text")?;
                let bytes = self.take(n)?;
                let message = String::from_utf8_lossy(bytes).into_owned();
                Item::Failed { message }
            }
            TAG_STOPPED => {
                let worker = self.u32()?;
                let trace = self.events(limits)?;
                let n = self.count(12, usize::MAX, "held counts")?;
                let mut held = Vec::with_capacity(n);
                for _ in 0..n {
                    held.push((self.u32()?, self.u64()?));
                }
                Item::Stopped { worker, trace, held }
            }
            TAG_TENSOR => {
                let tensor = self.u32()?;
                Item::Tensor { tensor, values: self.f32s(limits)? }
            }
            TAG_DECISION => {
                let n = self.count(8, MAX_DECISION_WORDS, "decision words")?;
                let mut words = Vec::with_capacity(n);
                for _ in 0..n {
                    words.push(self.u64()?);
                }
                Item::Decision { words }
            }
            TAG_REPLICA_PULL => Item::ReplicaPull { worker: self.u32()?, group: self.u32()? },
            TAG_REPLICA_GRADS => {
                let worker = self.u32()?;
                let group = self.u32()?;
                let last = self.flag("a replica's last flag")?;
                let tensors = self.tensors(limits)?;
                let rows = if self.flag("a replica's row flag")? {
                    let width = self.u32()?;
                    let n = self.count(4, limits.values, "rows")?;
                    let mut rows = Vec::with_capacity(n);
                    for _ in 0..n {
                        rows.push(self.u32()?);
                    }
                    Some((width, rows))
                } else {
                    None
                };
                let n = self.count(16, limits.values, "read versions")?;
                let mut applied = Vec::with_capacity(n);
                for _ in 0..n {
                    applied.push((self.u64()?, self.u64()?));
                }
                Item::ReplicaGrads { worker, group, last, tensors, rows, applied }
            }
            TAG_REPLICA_VALUES => {
                let worker = self.u32()?;
                let group = self.u32()?;
                let base = self.u64()?;
                Item::ReplicaValues { worker, group, base, tensors: self.tensors(limits)? }
            }
            TAG_REPLICA_SYNCED => Item::ReplicaSynced { worker: self.u32()?, group: self.u32()? },
            TAG_SERVED => Item::Served { node: self.u32()?, count: self.u32()?, nanos: self.u64()? },
            TAG_HOLD => Item::Hold { hold: self.flag("a hold's flag")? },
            TAG_HEARTBEAT => Item::Heartbeat,
            TAG_SHUTDOWN => Item::Shutdown,
            other => return Err(WireError { offset: self.at - 1, what: format!("unknown item tag {other}") }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<Item> {
        let event = TraceEvent {
            worker: 3,
            node: 7,
            kind: TraceKind::Update,
            start_us: 12,
            dur_us: 5,
            batch: 0,
            rows: 0,
            instances: 0,
            staleness: Some(2),
        };
        vec![
            Item::Work {
                worker: 1,
                node: 42,
                port: 2,
                dir: Dir::Backward,
                msg: Msg::new(Payload::from_vec(vec![1.5, -0.25, f32::MIN_POSITIVE]), vec![9, -1, 3].into()),
            },
            Item::Work { worker: 0, node: 0, port: 0, dir: Dir::Forward, msg: Msg::new(Payload::Unit, vec![0].into()) },
            Item::InstanceDone { worker: 2, instance: 31 },
            Item::Hold { hold: true },
            Item::Hold { hold: false },
            Item::Confirm { worker: 5 },
            Item::Stop { worker: 1, flush: true },
            Item::Release { instance: 77 },
            Item::Receipt { instance: 78 },
            Item::Loss { instance: 4, node: 9, value: 0.5, correct: Some(true), state: Some(vec![4, 1].into()) },
            Item::Loss { instance: 5, node: 9, value: f32::INFINITY, correct: None, state: None },
            Item::Output { instance: 6, node: 2, values: vec![0.0, 1.0] },
            Item::Done { instance: 8 },
            Item::Updated,
            Item::Wake,
            Item::Trace(vec![event.clone()]),
            Item::Failed { message: "worker 3 failed: ünïcode".into() },
            Item::Stopped { worker: 3, trace: vec![event], held: vec![(4, 2)] },
            Item::Tensor { tensor: 1, values: vec![3.0; 5] },
            Item::Decision { words: vec![1, 0, u64::MAX] },
            Item::Decision { words: vec![] },
            Item::ReplicaPull { worker: 1, group: 4 },
            Item::ReplicaGrads {
                worker: 0,
                group: 4,
                last: false,
                tensors: vec![vec![0.5, -1.0], vec![2.0]],
                rows: None,
                applied: vec![(3, 1), (9, 2)],
            },
            Item::ReplicaGrads {
                worker: 0,
                group: 5,
                last: true,
                tensors: vec![vec![0.0; 6]],
                rows: Some((3, vec![1, 0, 1])),
                applied: vec![],
            },
            Item::ReplicaGrads { worker: 2, group: 5, last: true, tensors: vec![], rows: None, applied: vec![] },
            Item::ReplicaValues { worker: 1, group: 4, base: 7, tensors: vec![vec![1.0, 2.0], vec![3.0]] },
            Item::ReplicaSynced { worker: 0, group: 4 },
            Item::Served { node: 12, count: 3, nanos: 4500 },
            Item::Heartbeat,
            Item::Shutdown,
        ]
    }

    #[test]
    fn every_item_reads_back_as_written() {
        let items = sample();
        let mut bytes = Vec::new();
        encode(3, 11, &items, &mut bytes);
        let packet = decode(&bytes, &Limits::default()).unwrap();
        assert_eq!(packet, Packet { from: 3, run: 11, items });
    }

    /// The planner charges a crossing message `amp_ir::placement::MESSAGE_HEADER_BYTES`
    /// beyond its payload and state: exactly what a `Work` item takes in a packet.
    #[test]
    fn a_message_costs_the_header_the_planner_charges() {
        let packet = |items: &[Item]| {
            let mut bytes = Vec::new();
            encode(0, 1, items, &mut bytes);
            bytes.len()
        };
        let empty = packet(&[]);
        for (floats, fields) in [(0, 0), (3, 1), (64, 5)] {
            let payload = if floats == 0 { Payload::Unit } else { Payload::from_vec(vec![0.5; floats]) };
            let msg = Msg::new(payload, vec![7; fields].into());
            let work = Item::Work { worker: 1, node: 2, port: 0, dir: Dir::Forward, msg };
            let bytes = packet(&[work]) - empty;
            let unit_payload = if floats == 0 { 4 } else { 0 };
            assert_eq!(
                bytes + unit_payload,
                amp_ir::placement::MESSAGE_HEADER_BYTES + 4 * floats + 8 * fields,
                "{floats} floats, {fields} state fields"
            );
        }
    }

    #[test]
    fn every_truncation_is_an_error() {
        let mut bytes = Vec::new();
        encode(0, 1, &sample(), &mut bytes);
        for len in 0..bytes.len() {
            assert!(decode(&bytes[..len], &Limits::default()).is_err(), "a packet cut at {len} bytes was accepted");
        }
    }

    #[test]
    fn an_oversized_length_is_refused_before_allocating() {
        // A payload announcing 2^31 values in a packet of a few bytes.
        let mut bytes = Vec::new();
        encode(0, 0, &[Item::Output { instance: 0, node: 0, values: vec![] }], &mut bytes);
        let len_at = bytes.len() - 4;
        bytes[len_at..].copy_from_slice(&(1u32 << 31).to_le_bytes());
        let error = decode(&bytes, &Limits::default()).unwrap_err();
        assert!(error.what.contains("values"), "{error}");
        // And past the limit even when the bytes are there.
        let limits = Limits { values: 2, ..Limits::default() };
        let mut bytes = Vec::new();
        encode(0, 0, &[Item::Output { instance: 0, node: 0, values: vec![1.0; 3] }], &mut bytes);
        assert!(decode(&bytes, &limits).unwrap_err().what.contains("over the limit"));
        // Trace events too, in a piece or with a worker's end.
        let events = sample().into_iter().find_map(|i| if let Item::Trace(e) = i { Some(e) } else { None });
        let three: Vec<TraceEvent> = events.expect("a trace piece").iter().cycle().take(3).cloned().collect();
        let limits = Limits { events: 2, ..Limits::default() };
        for item in [Item::Trace(three.clone()), Item::Stopped { worker: 0, trace: three, held: vec![] }] {
            let mut bytes = Vec::new();
            encode(0, 0, &[item], &mut bytes);
            let error = decode(&bytes, &limits).unwrap_err();
            assert!(error.what.contains("3 trace events, over the limit of 2"), "{error}");
        }
    }

    #[test]
    fn a_decision_longer_than_its_limit_or_its_bytes_is_refused() {
        let mut bytes = Vec::new();
        encode(0, 4, &[Item::Decision { words: vec![7; MAX_DECISION_WORDS + 1] }], &mut bytes);
        let error = decode(&bytes, &Limits::default()).unwrap_err();
        assert!(error.what.contains("17 decision words, over the limit of 16"), "{error}");
        // A count within the limit that the bytes cannot hold, before allocating.
        let mut bytes = Vec::new();
        encode(0, 4, &[Item::Decision { words: vec![7; 2] }], &mut bytes);
        let count_at = bytes.len() - 2 * 8 - 4;
        bytes[count_at..count_at + 4].copy_from_slice(&3u32.to_le_bytes());
        let error = decode(&bytes, &Limits::default()).unwrap_err();
        assert!(error.what.contains("3 decision words announced, 16 bytes left"), "{error}");
        let mut bytes = Vec::new();
        encode(0, 4, &[Item::Decision { words: vec![7; MAX_DECISION_WORDS] }], &mut bytes);
        assert_eq!(decode(&bytes, &Limits::default()).unwrap().items, [Item::Decision { words: vec![7; 16] }]);
    }

    /// Every seed of the fuzz target (`fuzz/seeds_wire/`) is a packet the decoder reads
    /// whole, so the fuzzer starts from valid forms (a format change must update them).
    #[test]
    fn every_fuzz_seed_is_a_valid_packet() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds_wire");
        let mut seeds = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let bytes = std::fs::read(&path).unwrap();
            let read = decode(&bytes, &Limits::default());
            assert!(read.is_ok(), "{}: {:?}", path.display(), read.err());
            seeds += 1;
        }
        assert!(seeds >= 5, "{seeds} seeds in {}", dir.display());
        let packet = decode(include_bytes!("../../../fuzz/seeds_wire/replicas"), &Limits::default()).unwrap();
        assert_eq!(packet.items.len(), 6);
        assert!(matches!(packet.items[2], Item::ReplicaGrads { last: true, rows: Some((3, _)), .. }));
    }

    /// A replica's tensors, rows and read versions are bounded like every other length:
    /// more tensors than a group has, or counts the bytes cannot hold, are refused before
    /// anything of their size is allocated.
    #[test]
    fn a_replicas_counts_are_refused_past_their_limits_or_bytes() {
        let grads = |tensors: Vec<Vec<f32>>| Item::ReplicaGrads {
            worker: 0,
            group: 1,
            last: false,
            tensors,
            rows: Some((2, vec![0])),
            applied: vec![(0, 0)],
        };
        let mut bytes = Vec::new();
        encode(1, 2, &[grads(vec![vec![]; MAX_GROUP_TENSORS + 1])], &mut bytes);
        let error = decode(&bytes, &Limits::default()).unwrap_err();
        assert!(error.what.contains("65 tensors, over the limit of 64"), "{error}");
        // The last item's read versions: one (16 bytes) announced as 2^30.
        let mut bytes = Vec::new();
        encode(1, 2, &[grads(vec![vec![1.0]])], &mut bytes);
        let count_at = bytes.len() - 16 - 4;
        bytes[count_at..count_at + 4].copy_from_slice(&(1u32 << 30).to_le_bytes());
        let error = decode(&bytes, &Limits::default()).unwrap_err();
        assert!(error.what.contains("read versions"), "{error}");
        // Values of a tensor past the limit, though the bytes are there.
        let limits = Limits { values: 2, ..Limits::default() };
        let mut bytes = Vec::new();
        let values = Item::ReplicaValues { worker: 0, group: 1, base: 0, tensors: vec![vec![1.0; 3]] };
        encode(1, 2, &[values], &mut bytes);
        assert!(decode(&bytes, &limits).unwrap_err().what.contains("3 values, over the limit of 2"));
    }

    #[test]
    fn wrong_magic_unknown_tags_and_trailing_bytes_are_refused() {
        let mut bytes = Vec::new();
        encode(0, 0, &[Item::Wake], &mut bytes);
        let mut bad = bytes.clone();
        bad[0] ^= 1;
        assert!(decode(&bad, &Limits::default()).unwrap_err().what.contains("magic"));
        let mut bad = bytes.clone();
        *bad.last_mut().unwrap() = 200;
        assert!(decode(&bad, &Limits::default()).unwrap_err().what.contains("unknown item tag 200"));
        let mut bad = bytes;
        bad.push(0);
        assert!(decode(&bad, &Limits::default()).unwrap_err().what.contains("after the last item"));
    }
}
