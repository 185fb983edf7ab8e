//! Where the messages of replicated nodes go during a run (`ExecConfig::replicas`; the
//! copies themselves are made at load, `load::replicas`).
//!
//! A forward message for the node goes to the replica expected to finish it first: its
//! messages queued or running, plus this one, times its service time (an EWMA of its
//! measured time per message, a straggler's sleep included, kept by the worker that runs
//! it); ties broken in turn (so one worker with one instance in flight still alternates),
//! and every [`PROBE_EVERY`]-th message of a node goes in turn whatever the estimates, so a
//! copy that sped up is measured again (see [`pick`]). With steps of microseconds queues
//! are nearly always empty, so queue length alone cannot tell a slow copy from a fast one;
//! the service time can. The choice is remembered under the node's key, and the backward
//! messages of that key go to the same replica (it holds the cache). A node that caches
//! nothing (an Embedding: its key is empty, every message would share it) remembers its
//! choices per instance instead, and each copy gets as many of the instance's gradients as
//! it served its forward messages: the work of the backward spreads like the forward's,
//! and each read a copy noted is answered there (staleness is measured, and no read stays
//! owed).

use crate::load::program::{NodeInfo, Program};
use crate::message::{key_of, Key, KeyMap};
use amp_ir::FieldId;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// One forward message in this many of a replicated node is routed in turn, whatever the
/// estimates: a copy that got no work keeps its old service time, and a straggler that
/// recovered (`--slow-worker W=F@start..end`) would otherwise never be measured again.
pub(crate) const PROBE_EVERY: usize = 32;

/// Expected finish times closer than this share are a tie (see [`pick`]).
const TIE_MARGIN: f64 = 0.1;

/// The weight of a new measurement in a copy's service time (an EWMA): about the last 8
/// batches count, so the estimate follows a straggler that comes and goes within a few
/// steps and one slow step (a preemption) moves it by an eighth.
const SERVICE_WEIGHT: f64 = 0.125;

/// Per `(node, key)`, the replicas that served a forward message and the backward
/// messages each still awaits.
type Chosen = KeyMap<(u32, Key), Vec<(u32, usize)>>;

/// Where the messages of replicated nodes go, during one run.
#[derive(Default)]
pub(crate) struct Routes {
    /// Messages queued or running at each node that serves a replicated node.
    load: Vec<AtomicUsize>,
    /// Whether each node serves a replicated node (its load is counted).
    tracked: Vec<bool>,
    /// Per node with replicas, the replica that wins the next tie.
    turn: Vec<AtomicUsize>,
    /// Per node with replicas, forward messages routed (for the probes).
    routed: Vec<AtomicUsize>,
    /// Per node serving a replicated node, its service time per message in nanoseconds
    /// (an EWMA, as `f64` bits; 0 before its first measurement): written only by the
    /// worker that runs the node, read by every worker that routes to it.
    service: Vec<AtomicU64>,
    /// The replicas serving `(node, key)`, each with how many backward messages it still
    /// awaits (one replica under a node's key; one per copy that served a forward message
    /// of the instance under a keyless node's, see [`Routes::key`]).
    chosen: Mutex<Chosen>,
}

impl Routes {
    pub fn new(program: &Program) -> Routes {
        let n = program.nodes.len();
        let mut tracked = vec![false; n];
        for node in program.nodes.iter().flatten() {
            for &r in &node.replicas {
                if let Some(t) = tracked.get_mut(r as usize) {
                    *t = true;
                }
            }
        }
        Routes {
            tracked,
            load: (0..n).map(|_| AtomicUsize::new(0)).collect(),
            turn: (0..n).map(|_| AtomicUsize::new(0)).collect(),
            routed: (0..n).map(|_| AtomicUsize::new(0)).collect(),
            service: (0..n).map(|_| AtomicU64::new(0)).collect(),
            chosen: Mutex::new(KeyMap::default()),
        }
    }

    /// The replica of `node` (a node with replicas) that serves a forward message under
    /// `key`; remembers it for `backward` backward messages (none in inference).
    pub fn forward(&self, node: u32, replicas: &[u32], key: Key, backward: usize) -> u32 {
        let copies: Vec<(usize, f64)> = replicas.iter().map(|&r| (self.load_of(r), self.service_of(r))).collect();
        let start = self.turn.get(node as usize).map_or(0, |t| t.load(Ordering::Relaxed));
        let routed = self.routed.get(node as usize).map_or(0, |r| r.fetch_add(1, Ordering::Relaxed));
        let probe = routed % PROBE_EVERY == PROBE_EVERY - 1;
        let chosen = if probe { start % replicas.len().max(1) } else { pick(&copies, start) };
        if let Some(turn) = self.turn.get(node as usize) {
            turn.store(chosen + 1, Ordering::Relaxed);
        }
        let replica = replicas.get(chosen).copied().unwrap_or(node);
        if backward > 0 {
            let mut table = self.table();
            let serving = table.entry((node, key)).or_default();
            match serving.iter_mut().find(|(r, _)| *r == replica) {
                Some((_, owed)) => *owed += backward,
                None => serving.push((replica, backward)),
            }
        }
        replica
    }

    /// A replica that served a forward message of `key` at `node` and still awaits a
    /// backward one; `None` when none is on record (the message then goes to `node`
    /// itself, which reports the missing cache).
    pub fn backward(&self, node: u32, key: Key) -> Option<u32> {
        let mut table = self.table();
        let serving = table.get_mut(&(node, key.clone()))?;
        let (replica, owed) = serving.first_mut()?;
        let replica = *replica;
        *owed = owed.saturating_sub(1);
        if *owed == 0 {
            serving.swap_remove(0);
            if serving.is_empty() {
                table.remove(&(node, key));
            }
        }
        Some(replica)
    }

    /// The key `node`'s choices are remembered under for a message of `state`: the node's
    /// key, or for a node that caches nothing (an empty key, which every message would
    /// share) the message's instance.
    pub fn key(node: &NodeInfo, state: &[i64]) -> Key {
        if node.key.is_empty() {
            key_of(&[FieldId(0)], state)
        } else {
            key_of(&node.key, state)
        }
    }

    /// A message was queued for `node`.
    pub fn queued(&self, node: u32) {
        if !self.tracked.get(node as usize).copied().unwrap_or(false) {
            return;
        }
        if let Some(load) = self.load.get(node as usize) {
            load.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// `count` messages of `node` were processed.
    pub fn processed(&self, node: u32, count: usize) {
        if !self.tracked.get(node as usize).copied().unwrap_or(false) {
            return;
        }
        if let Some(load) = self.load.get(node as usize) {
            let _ = load.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |l| Some(l.saturating_sub(count)));
        }
    }

    /// Whether `node` serves a replicated node (its load and service time are kept).
    pub fn tracks(&self, node: u32) -> bool {
        self.tracked.get(node as usize).copied().unwrap_or(false)
    }

    /// `node` (one that [`Routes::tracks`]) took `elapsed` for `count` messages: its service
    /// time moves towards the time per message. Only the worker that runs the node calls
    /// this, so a load and a store suffice (no read-modify-write loop).
    pub fn served(&self, node: u32, count: usize, elapsed: Duration) {
        let Some(service) = self.service.get(node as usize).filter(|_| self.tracks(node) && count > 0) else {
            return;
        };
        let sample = elapsed.as_secs_f64() * 1e9 / count as f64;
        let old = f64::from_bits(service.load(Ordering::Relaxed));
        let new = if old > 0.0 { old + SERVICE_WEIGHT * (sample - old) } else { sample };
        service.store(new.to_bits(), Ordering::Relaxed);
    }

    fn load_of(&self, node: u32) -> usize {
        self.load.get(node as usize).map_or(0, |l| l.load(Ordering::Relaxed))
    }

    fn service_of(&self, node: u32) -> f64 {
        self.service.get(node as usize).map_or(0.0, |s| f64::from_bits(s.load(Ordering::Relaxed)))
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Chosen> {
        self.chosen.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The copy expected to finish a new message first, given each copy's messages queued or
/// running and its service time per message (0: not measured yet): the least
/// `(queued + 1) × service`, ties (all unmeasured, or within [`TIE_MARGIN`]) going to the
/// first from `start` on. A copy not yet measured is taken as fast as the fastest measured one, so
/// that it gets work and a measurement. With equal service times this is the copy with
/// the shortest queue, as before; a copy 4× slower gets a message only once the faster
/// one has 3 or more ahead of it, so under load it serves about a fifth of them, and with
/// idle queues none.
pub(crate) fn pick(copies: &[(usize, f64)], start: usize) -> usize {
    let fastest = copies.iter().map(|&(_, s)| s).filter(|&s| s > 0.0).fold(f64::INFINITY, f64::min);
    // Nothing measured: every copy costs its queue alone.
    let fastest = if fastest.is_finite() { fastest } else { 1.0 };
    let cost = |i: usize| {
        let (queued, service) = copies[i];
        (queued as f64 + 1.0) * if service > 0.0 { service } else { fastest }
    };
    let n = copies.len();
    let mut best: Option<(usize, f64)> = None;
    for i in (0..n).map(|k| (start + k) % n) {
        let c = cost(i);
        // Equal copies' measured times differ by noise: within the margin they tie, and
        // take turns.
        if best.is_none_or(|(_, b)| c < b * (1.0 - TIE_MARGIN)) {
            best = Some((i, c));
        }
    }
    best.map_or(0, |(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rule on given estimates: the least `(queued + 1) × service`; equal costs take
    /// turns from `start`; an unmeasured copy counts as the fastest measured one.
    #[test]
    fn a_message_goes_to_the_copy_expected_to_finish_it_first() {
        // Idle queues: the fast copy, wherever the turn is.
        assert_eq!(pick(&[(0, 1000.0), (0, 4000.0)], 0), 0);
        assert_eq!(pick(&[(0, 1000.0), (0, 4000.0)], 1), 0);
        assert_eq!(pick(&[(0, 4000.0), (0, 1000.0)], 0), 1);
        // Two ahead at the fast copy (3 µs) still beats the slow one's 4 µs; three ahead
        // (4 µs) ties with it, and the turn decides.
        assert_eq!(pick(&[(2, 1000.0), (0, 4000.0)], 1), 0);
        assert_eq!(pick(&[(3, 1000.0), (0, 4000.0)], 1), 1);
        assert_eq!(pick(&[(3, 1000.0), (0, 4000.0)], 0), 0);
        assert_eq!(pick(&[(5, 1000.0), (0, 4000.0)], 0), 1);
        // Equal copies: the shorter queue, as least-loaded routing did; equal queues and
        // times within the margin take turns.
        assert_eq!(pick(&[(1, 1000.0), (0, 1000.0)], 0), 1);
        assert_eq!(pick(&[(0, 1000.0), (0, 1050.0)], 1), 1);
        assert_eq!(pick(&[(0, 1050.0), (0, 1000.0)], 0), 0);
        // Nothing measured: queue lengths alone; one copy unmeasured: as fast as the other.
        assert_eq!(pick(&[(1, 0.0), (0, 0.0), (2, 0.0)], 0), 1);
        assert_eq!(pick(&[(0, 0.0), (0, 0.0)], 1), 1);
        assert_eq!(pick(&[(0, 1000.0), (0, 0.0)], 1), 1);
        assert_eq!(pick(&[(1, 1000.0), (0, 0.0)], 0), 1);
    }

    /// A queueing model of two copies, one 4× slower, messages routed by the rule given
    /// their service times, against routing by queue length alone (the rule given no
    /// times). At light load (queues mostly idle, as at the executor's grain) queue length
    /// sends the slow copy half the messages, each 4× longer; the rule sends it none. Near
    /// saturation (the fast copy alone cannot keep up) the slow copy takes about its share
    /// of the capacity (a fifth) and no queue grows. Equal copies share equally either way.
    #[test]
    fn a_copy_four_times_slower_gets_what_it_can_serve() {
        let light = 10;
        let by_time = simulate([4, 16], light, true);
        let by_queue = simulate([4, 16], light, false);
        assert!(by_time.slow_share < 0.05, "{by_time:?}");
        assert!((0.4..=0.6).contains(&by_queue.slow_share), "{by_queue:?}");
        assert!(by_time.mean_latency < by_queue.mean_latency, "{by_time:?} {by_queue:?}");
        // One message every 3.5 ticks on average: 0.29 per tick, of a capacity of 0.3125.
        let heavy = 3;
        let by_time = simulate([4, 16], heavy, true);
        assert!((0.1..=0.3).contains(&by_time.slow_share), "{by_time:?}");
        assert!(by_time.longest <= 16, "{by_time:?}");
        for by in [true, false] {
            let equal = simulate([4, 4], light, by);
            assert!((0.45..=0.55).contains(&equal.slow_share), "{equal:?}");
        }
    }

    #[derive(Debug)]
    struct Simulated {
        /// Share of the messages the second copy served.
        slow_share: f64,
        /// Mean ticks from a message's arrival to its end.
        mean_latency: f64,
        longest: usize,
    }

    /// Ticks of a queueing model: a message arrives every `gap` ticks (every `gap` and
    /// `gap + 1` in turn when `gap` is 3, to be near saturation) and is routed by [`pick`]
    /// given each copy's messages queued or in service and, when `by_time`, its service
    /// time; a copy serves its queue in order, each message taking its service time.
    fn simulate(service: [u64; 2], gap: u64, by_time: bool) -> Simulated {
        let mut queues: [std::collections::VecDeque<u64>; 2] = Default::default();
        let mut in_service: [Option<(u64, u64)>; 2] = [None, None];
        let (mut served, mut latency, mut turn, mut longest) = ([0u64; 2], 0u64, 0, 0);
        let mut next_arrival = 0;
        let mut arrivals = 0u64;
        for tick in 0..40_000u64 {
            for c in 0..2 {
                if let Some((arrived, done)) = in_service[c] {
                    if done <= tick {
                        served[c] += 1;
                        latency += tick - arrived;
                        in_service[c] = None;
                    }
                }
                if in_service[c].is_none() {
                    in_service[c] = queues[c].pop_front().map(|arrived| (arrived, tick + service[c]));
                }
            }
            if tick == next_arrival {
                arrivals += 1;
                next_arrival += if gap == 3 { 3 + arrivals % 2 } else { gap };
                let copies: Vec<(usize, f64)> = (0..2)
                    .map(|c| {
                        let load = queues[c].len() + usize::from(in_service[c].is_some());
                        (load, if by_time { service[c] as f64 } else { 0.0 })
                    })
                    .collect();
                let c = pick(&copies, turn);
                turn = c + 1;
                queues[c].push_back(tick);
                longest = longest.max(queues[c].len());
            }
        }
        let total = (served[0] + served[1]).max(1);
        Simulated { slow_share: served[1] as f64 / total as f64, mean_latency: latency as f64 / total as f64, longest }
    }
}
