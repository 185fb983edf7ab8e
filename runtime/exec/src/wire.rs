//! The binary form of what crosses processes (the bridge, `crate::cluster`): forward and backward
//! messages, the control words workers and the controller exchange, credits given back,
//! reports, process 0's decisions between runs, heartbeats. A packet is one run's items for one process, little-endian:
//!
//! ```text
//! packet  = magic:u32 from:u32 run:u64 count:u32 item*count
//! item    = 1 worker:u32 word | 2 word | 3 report | 4 instance:u64 (receipt)
//!         | 5 slot:u32 f32s (tensor) | 6 len:u32 u64*len (decision) | 7 (heartbeat) | 8 (shutdown)
//! word    = tag:u8 fields...                report = tag:u8 fields...
//! payload = 0 | 1 len:u32 f32*len          state = len:u16 i64*len
//! ```
//!
//! The items are `crate::protocol`'s: the messages of a run are one set of types in
//! memory and here, addressed to a worker ([`Item::Worker`]), to a process
//! ([`Item::Process`]) or to process 0's controller ([`Item::Controller`]).
//!
//! Bytes from the network are untrusted like a graph file: [`decode`] checks every length
//! against the bytes that remain before it allocates anything of that length, and
//! against [`Limits`]; a malformed packet is a [`WireError`], never a panic or an
//! out-of-bounds read. Whether a worker or node index is one of the run's is for the
//! receiver to check (`crate::cluster`'s `inbound`).

use crate::error::ExecError;
use crate::message::{Dir, Envelope, Msg, Payload};
pub use crate::protocol::Item;
use crate::protocol::{RemoteWord, ReplicaGrads, Report, ToWorker};
use crate::trace::{TraceEvent, TraceKind};
use std::fmt;

/// The first four bytes of every packet ("AMPW").
pub const MAGIC: u32 = 0x5750_4d41;

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

// Items: what a packet carries, by address.
const ITEM_WORKER: u8 = 1;
const ITEM_PROCESS: u8 = 2;
const ITEM_CONTROLLER: u8 = 3;
const ITEM_RECEIPT: u8 = 4;
const ITEM_TENSOR: u8 = 5;
const ITEM_DECISION: u8 = 6;
const ITEM_HEARTBEAT: u8 = 7;
const ITEM_SHUTDOWN: u8 = 8;

// Words for a worker (`ToWorker`, `RemoteWord`).
const WORD_WORK: u8 = 1;
const WORD_INSTANCE_DONE: u8 = 2;
const WORD_CONFIRM: u8 = 3;
const WORD_STOP: u8 = 4;
const WORD_RELEASE: u8 = 5;
const WORD_PULL: u8 = 6;
const WORD_GRADS: u8 = 7;
const WORD_VALUES: u8 = 8;
const WORD_SYNCED: u8 = 9;
const WORD_SERVED: u8 = 10;
const WORD_HOLD: u8 = 11;
const WORD_REDUCE: u8 = 12;

// Reports for the controller (`Report`).
const REPORT_LOSS: u8 = 1;
const REPORT_OUTPUT: u8 = 2;
const REPORT_DONE: u8 = 3;
const REPORT_UPDATED: u8 = 4;
const REPORT_WAKE: u8 = 5;
const REPORT_TRACE: u8 = 6;
const REPORT_FAILED: u8 = 7;
const REPORT_STOPPED: u8 = 8;

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
        put_u64(out, e.dur_ns);
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

/// A count or index as the wire's 32 bits: past `u32::MAX` it is written saturated, and
/// the receiver's checks refuse it.
fn put_index(out: &mut Vec<u8>, v: usize) {
    put_u32(out, u32::try_from(v).unwrap_or(u32::MAX));
}

fn encode_item(item: &Item, out: &mut Vec<u8>) {
    match item {
        Item::Worker { worker, word } => {
            out.push(ITEM_WORKER);
            put_u32(out, *worker);
            encode_word(word, out);
        }
        Item::Process(word) => {
            out.push(ITEM_PROCESS);
            encode_word(word, out);
        }
        Item::Controller(report) => {
            out.push(ITEM_CONTROLLER);
            encode_report(report, out);
        }
        Item::Receipt { instance } => {
            out.push(ITEM_RECEIPT);
            put_u64(out, *instance);
        }
        Item::Tensor { tensor, values } => {
            out.push(ITEM_TENSOR);
            put_u32(out, *tensor);
            put_f32s(out, values);
        }
        Item::Decision { words } => {
            out.push(ITEM_DECISION);
            put_len(out, words.len());
            for &word in words {
                put_u64(out, word);
            }
        }
        Item::Heartbeat => out.push(ITEM_HEARTBEAT),
        Item::Shutdown => out.push(ITEM_SHUTDOWN),
    }
}

fn encode_word(word: &ToWorker, out: &mut Vec<u8>) {
    match word {
        ToWorker::Work(Envelope { node, port, dir, msg }) => {
            out.push(WORD_WORK);
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
        ToWorker::InstanceDone(instance) => {
            out.push(WORD_INSTANCE_DONE);
            put_u64(out, *instance as u64);
        }
        ToWorker::Confirm => out.push(WORD_CONFIRM),
        ToWorker::Stop { flush } => {
            out.push(WORD_STOP);
            out.push(u8::from(*flush));
        }
        ToWorker::Release(instance) => {
            out.push(WORD_RELEASE);
            put_u64(out, *instance as u64);
        }
        ToWorker::Remote(RemoteWord::Pull { group }) => {
            out.push(WORD_PULL);
            put_index(out, *group);
        }
        ToWorker::Remote(RemoteWord::Grads { group, last, grads }) => {
            out.push(WORD_GRADS);
            put_index(out, *group);
            out.push(u8::from(*last));
            put_tensors(out, &grads.tensors);
            match &grads.rows {
                None => out.push(0),
                Some((width, rows)) => {
                    out.push(1);
                    put_index(out, *width);
                    put_len(out, rows.len());
                    rows.iter().for_each(|&r| put_index(out, r));
                }
            }
            put_len(out, grads.applied.len());
            for &(instance, version) in &grads.applied {
                put_u64(out, instance as u64);
                put_u64(out, version);
            }
        }
        ToWorker::Remote(RemoteWord::Values { group, base, tensors }) => {
            out.push(WORD_VALUES);
            put_index(out, *group);
            put_u64(out, *base);
            put_tensors(out, tensors);
        }
        ToWorker::Remote(RemoteWord::Synced { group }) => {
            out.push(WORD_SYNCED);
            put_index(out, *group);
        }
        ToWorker::Remote(RemoteWord::Served { node, count, elapsed }) => {
            out.push(WORD_SERVED);
            put_u32(out, *node);
            put_index(out, *count);
            put_u64(out, u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX));
        }
        ToWorker::Remote(RemoteWord::Hold(hold)) => {
            out.push(WORD_HOLD);
            out.push(u8::from(*hold));
        }
        ToWorker::Remote(RemoteWord::Reduce { group, step, count, flush, values }) => {
            out.push(WORD_REDUCE);
            put_index(out, *group);
            put_u32(out, *step);
            put_u64(out, *count);
            out.push(u8::from(*flush));
            put_f32s(out, values);
        }
    }
}

fn encode_report(report: &Report, out: &mut Vec<u8>) {
    match report {
        Report::Loss { instance, node, value, correct, state } => {
            out.push(REPORT_LOSS);
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
        Report::Output { instance, node, values } => {
            out.push(REPORT_OUTPUT);
            out.extend_from_slice(&instance.to_le_bytes());
            put_u32(out, *node);
            put_f32s(out, values);
        }
        Report::Done { instance } => {
            out.push(REPORT_DONE);
            put_u64(out, *instance as u64);
        }
        Report::Updated => out.push(REPORT_UPDATED),
        Report::Wake => out.push(REPORT_WAKE),
        Report::Trace(events) => {
            out.push(REPORT_TRACE);
            put_events(out, events);
        }
        Report::Failed(error) => {
            // An error crosses as its message.
            let message = error.to_string();
            out.push(REPORT_FAILED);
            put_len(out, message.len());
            out.extend_from_slice(message.as_bytes());
        }
        Report::Stopped { worker, trace, held } => {
            out.push(REPORT_STOPPED);
            put_index(out, *worker);
            put_events(out, trace);
            put_len(out, held.len());
            for &(node, count) in held {
                put_u32(out, node);
                put_u64(out, count as u64);
            }
        }
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
            let dur_ns = self.u64()?;
            let batch = self.u32()?;
            let rows = self.u32()?;
            let instances = self.u32()?;
            let has_staleness = self.flag("a trace event's staleness flag")?;
            let staleness = self.u64()?;
            let staleness = has_staleness.then_some(staleness);
            events.push(TraceEvent { worker, node, kind, start_us, dur_ns, batch, rows, instances, staleness });
        }
        Ok(events)
    }

    /// A count or index written as 32 bits.
    fn index(&mut self) -> Result<usize, WireError> {
        Ok(self.u32()? as usize)
    }

    /// An instance's index written as 64 bits.
    fn instance(&mut self) -> Result<usize, WireError> {
        let v = self.u64()?;
        usize::try_from(v).map_err(|_| self.error(format!("instance {v} past this machine's indices")))
    }

    fn item(&mut self, limits: &Limits) -> Result<Item, WireError> {
        let tag = self.u8()?;
        Ok(match tag {
            ITEM_WORKER => {
                let worker = self.u32()?;
                Item::Worker { worker, word: self.word(limits)? }
            }
            ITEM_PROCESS => Item::Process(self.word(limits)?),
            ITEM_CONTROLLER => Item::Controller(self.report(limits)?),
            ITEM_RECEIPT => Item::Receipt { instance: self.u64()? },
            ITEM_TENSOR => {
                let tensor = self.u32()?;
                Item::Tensor { tensor, values: self.f32s(limits)? }
            }
            ITEM_DECISION => {
                let n = self.count(8, MAX_DECISION_WORDS, "decision words")?;
                let mut words = Vec::with_capacity(n);
                for _ in 0..n {
                    words.push(self.u64()?);
                }
                Item::Decision { words }
            }
            ITEM_HEARTBEAT => Item::Heartbeat,
            ITEM_SHUTDOWN => Item::Shutdown,
            other => return Err(WireError { offset: self.at - 1, what: format!("unknown item tag {other}") }),
        })
    }

    fn word(&mut self, limits: &Limits) -> Result<ToWorker, WireError> {
        let tag = self.u8()?;
        Ok(match tag {
            WORD_WORK => {
                let node = self.u32()?;
                let port = self.u16()?;
                let dir = if self.flag("a message's direction")? { Dir::Backward } else { Dir::Forward };
                let state = self.state(limits)?;
                let payload =
                    if self.flag("a payload's kind")? { Payload::from_vec(self.f32s(limits)?) } else { Payload::Unit };
                ToWorker::Work(Envelope { node, port, dir, msg: Msg::new(payload, state) })
            }
            WORD_INSTANCE_DONE => ToWorker::InstanceDone(self.instance()?),
            WORD_CONFIRM => ToWorker::Confirm,
            WORD_STOP => ToWorker::Stop { flush: self.flag("a stop's flush")? },
            WORD_RELEASE => ToWorker::Release(self.instance()?),
            WORD_PULL => ToWorker::Remote(RemoteWord::Pull { group: self.index()? }),
            WORD_GRADS => {
                let group = self.index()?;
                let last = self.flag("a replica's last flag")?;
                let tensors = self.tensors(limits)?;
                let rows = if self.flag("a replica's row flag")? {
                    let width = self.index()?;
                    let n = self.count(4, limits.values, "rows")?;
                    let mut rows = Vec::with_capacity(n);
                    for _ in 0..n {
                        rows.push(self.index()?);
                    }
                    Some((width, rows))
                } else {
                    None
                };
                let n = self.count(16, limits.values, "read versions")?;
                let mut applied = Vec::with_capacity(n);
                for _ in 0..n {
                    applied.push((self.instance()?, self.u64()?));
                }
                ToWorker::Remote(RemoteWord::Grads { group, last, grads: ReplicaGrads { tensors, rows, applied } })
            }
            WORD_VALUES => {
                let group = self.index()?;
                let base = self.u64()?;
                ToWorker::Remote(RemoteWord::Values { group, base, tensors: self.tensors(limits)? })
            }
            WORD_SYNCED => ToWorker::Remote(RemoteWord::Synced { group: self.index()? }),
            WORD_SERVED => {
                let node = self.u32()?;
                let count = self.index()?;
                let elapsed = std::time::Duration::from_nanos(self.u64()?);
                ToWorker::Remote(RemoteWord::Served { node, count, elapsed })
            }
            WORD_HOLD => ToWorker::Remote(RemoteWord::Hold(self.flag("a hold's flag")?)),
            WORD_REDUCE => {
                let group = self.index()?;
                let step = self.u32()?;
                let count = self.u64()?;
                let flush = self.flag("a reduction's flush")?;
                ToWorker::Remote(RemoteWord::Reduce { group, step, count, flush, values: self.f32s(limits)? })
            }
            other => return Err(WireError { offset: self.at - 1, what: format!("unknown word tag {other}") }),
        })
    }

    fn report(&mut self, limits: &Limits) -> Result<Report, WireError> {
        let tag = self.u8()?;
        Ok(match tag {
            REPORT_LOSS => {
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
                Report::Loss { instance, node, value, correct, state }
            }
            REPORT_OUTPUT => {
                let instance = self.i64()?;
                let node = self.u32()?;
                Report::Output { instance, node, values: self.f32s(limits)? }
            }
            REPORT_DONE => Report::Done { instance: self.instance()? },
            REPORT_UPDATED => Report::Updated,
            REPORT_WAKE => Report::Wake,
            REPORT_TRACE => Report::Trace(self.events(limits)?),
            REPORT_FAILED => {
                let n = self.count(1, limits.text, "bytes of text")?;
                let bytes = self.take(n)?;
                let message = String::from_utf8_lossy(bytes).into_owned();
                Report::Failed(ExecError::Cluster { message })
            }
            REPORT_STOPPED => {
                let worker = self.index()?;
                let trace = self.events(limits)?;
                let n = self.count(12, usize::MAX, "held counts")?;
                let mut held = Vec::with_capacity(n);
                for _ in 0..n {
                    held.push((self.u32()?, self.instance()?));
                }
                Report::Stopped { worker, trace, held }
            }
            other => return Err(WireError { offset: self.at - 1, what: format!("unknown report tag {other}") }),
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
            dur_ns: 5,
            batch: 0,
            rows: 0,
            instances: 0,
            staleness: Some(2),
        };
        let work = |node, port, dir, msg| ToWorker::Work(Envelope { node, port, dir, msg });
        let to = |worker, word| Item::Worker { worker, word };
        let remote = |worker, word| Item::Worker { worker, word: ToWorker::Remote(word) };
        let grads = |tensors, rows, applied| ReplicaGrads { tensors, rows, applied };
        vec![
            to(
                1,
                work(
                    42,
                    2,
                    Dir::Backward,
                    Msg::new(Payload::from_vec(vec![1.5, -0.25, f32::MIN_POSITIVE]), vec![9, -1, 3].into()),
                ),
            ),
            to(0, work(0, 0, Dir::Forward, Msg::new(Payload::Unit, vec![0].into()))),
            to(2, ToWorker::InstanceDone(31)),
            Item::Process(ToWorker::Remote(RemoteWord::Hold(true))),
            Item::Process(ToWorker::Remote(RemoteWord::Hold(false))),
            to(5, ToWorker::Confirm),
            to(1, ToWorker::Stop { flush: true }),
            Item::Process(ToWorker::Release(77)),
            Item::Receipt { instance: 78 },
            Item::Controller(Report::Loss {
                instance: 4,
                node: 9,
                value: 0.5,
                correct: Some(true),
                state: Some(vec![4, 1].into()),
            }),
            Item::Controller(Report::Loss { instance: 5, node: 9, value: f32::INFINITY, correct: None, state: None }),
            Item::Controller(Report::Output { instance: 6, node: 2, values: vec![0.0, 1.0] }),
            Item::Controller(Report::Done { instance: 8 }),
            Item::Controller(Report::Updated),
            Item::Controller(Report::Wake),
            Item::Controller(Report::Trace(vec![event.clone()])),
            Item::Controller(Report::Failed(ExecError::Cluster { message: "worker 3 failed: ünïcode".into() })),
            Item::Controller(Report::Stopped { worker: 3, trace: vec![event], held: vec![(4, 2)] }),
            Item::Tensor { tensor: 1, values: vec![3.0; 5] },
            Item::Decision { words: vec![1, 0, u64::MAX] },
            Item::Decision { words: vec![] },
            remote(1, RemoteWord::Pull { group: 4 }),
            remote(
                0,
                RemoteWord::Grads {
                    group: 4,
                    last: false,
                    grads: grads(vec![vec![0.5, -1.0], vec![2.0]], None, vec![(3, 1), (9, 2)]),
                },
            ),
            remote(
                0,
                RemoteWord::Grads {
                    group: 5,
                    last: true,
                    grads: grads(vec![vec![0.0; 6]], Some((3, vec![1, 0, 1])), vec![]),
                },
            ),
            remote(2, RemoteWord::Grads { group: 5, last: true, grads: grads(vec![], None, vec![]) }),
            remote(1, RemoteWord::Values { group: 4, base: 7, tensors: vec![vec![1.0, 2.0], vec![3.0]] }),
            remote(0, RemoteWord::Synced { group: 4 }),
            remote(1, RemoteWord::Reduce { group: 3, step: 2, count: 9, flush: true, values: vec![0.5, -1.0] }),
            Item::Process(ToWorker::Remote(RemoteWord::Served {
                node: 12,
                count: 3,
                elapsed: std::time::Duration::from_nanos(4500),
            })),
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
            let work =
                Item::Worker { worker: 1, word: ToWorker::Work(Envelope { node: 2, port: 0, dir: Dir::Forward, msg }) };
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
        let output = |values| Item::Controller(Report::Output { instance: 0, node: 0, values });
        encode(0, 0, &[output(vec![])], &mut bytes);
        let len_at = bytes.len() - 4;
        bytes[len_at..].copy_from_slice(&(1u32 << 31).to_le_bytes());
        let error = decode(&bytes, &Limits::default()).unwrap_err();
        assert!(error.what.contains("values"), "{error}");
        // And past the limit even when the bytes are there.
        let limits = Limits { values: 2, ..Limits::default() };
        let mut bytes = Vec::new();
        encode(0, 0, &[output(vec![1.0; 3])], &mut bytes);
        assert!(decode(&bytes, &limits).unwrap_err().what.contains("over the limit"));
        // Trace events too, in a piece or with a worker's end.
        let events =
            sample().into_iter().find_map(|i| if let Item::Controller(Report::Trace(e)) = i { Some(e) } else { None });
        let three: Vec<TraceEvent> = events.expect("a trace piece").iter().cycle().take(3).cloned().collect();
        let limits = Limits { events: 2, ..Limits::default() };
        let reports = [Report::Trace(three.clone()), Report::Stopped { worker: 0, trace: three, held: vec![] }];
        for item in reports.map(Item::Controller) {
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

    /// The seeds of the fuzz target (`fuzz/seeds_wire/`), each a packet of `sample`'s
    /// items, so that the fuzzer starts from valid forms of every item.
    fn seeds() -> Vec<(&'static str, Vec<Item>)> {
        let items = sample();
        let replicas =
            items.iter().filter(|i| matches!(i, Item::Worker { word: ToWorker::Remote(_), .. })).cloned().collect();
        let first = |pick: &dyn Fn(&Item) -> bool| items.iter().filter(|i| pick(i)).cloned().collect::<Vec<_>>();
        vec![
            ("work", first(&|i| matches!(i, Item::Worker { word: ToWorker::Work(_), .. }))),
            ("wake", vec![Item::Controller(Report::Wake)]),
            ("decision", vec![Item::Decision { words: vec![1, 0, 1] }]),
            ("replicas", replicas),
            ("mixed", items.clone()),
        ]
    }

    /// Every seed of the fuzz target is the encoding of its packet, and reads back whole:
    /// a format change updates them with `AMP_UPDATE_WIRE_SEEDS=1 cargo test -p amp-exec
    /// --lib wire`.
    #[test]
    fn every_fuzz_seed_is_its_packet() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds_wire");
        for (name, items) in seeds() {
            let mut bytes = Vec::new();
            encode(1, 3, &items, &mut bytes);
            let path = dir.join(name);
            if std::env::var_os("AMP_UPDATE_WIRE_SEEDS").is_some() {
                std::fs::write(&path, &bytes).unwrap();
            }
            let stored = std::fs::read(&path).unwrap();
            assert_eq!(stored, bytes, "{} is not the encoding of its packet", path.display());
            assert_eq!(decode(&stored, &Limits::default()).unwrap().items, items);
        }
        let seeds = std::fs::read_dir(&dir).unwrap().count();
        assert_eq!(seeds, 5, "{seeds} seeds in {}", dir.display());
    }

    /// A replica's tensors, rows and read versions are bounded like every other length:
    /// more tensors than a group has, or counts the bytes cannot hold, are refused before
    /// anything of their size is allocated.
    #[test]
    fn a_replicas_counts_are_refused_past_their_limits_or_bytes() {
        let grads = |tensors: Vec<Vec<f32>>| Item::Worker {
            worker: 0,
            word: ToWorker::Remote(RemoteWord::Grads {
                group: 1,
                last: false,
                grads: ReplicaGrads { tensors, rows: Some((2, vec![0])), applied: vec![(0, 0)] },
            }),
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
        let values = Item::Worker {
            worker: 0,
            word: ToWorker::Remote(RemoteWord::Values { group: 1, base: 0, tensors: vec![vec![1.0; 3]] }),
        };
        encode(1, 2, &[values], &mut bytes);
        assert!(decode(&bytes, &limits).unwrap_err().what.contains("3 values, over the limit of 2"));
    }

    #[test]
    fn wrong_magic_unknown_tags_and_trailing_bytes_are_refused() {
        let mut bytes = Vec::new();
        encode(0, 0, &[Item::Heartbeat], &mut bytes);
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
