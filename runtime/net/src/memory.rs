//! The transport inside one process: the processes of a run as threads joined by
//! channels, for testing the distributed protocol without sockets. Faults are injected
//! as a test asks: frames held back for a seeded number of the receiver's rounds (which
//! reorders frames of different senders, never two of one sender), and a process cut
//! off, which its peers hear of as a lost connection: at once, or once the processes sent
//! a number of frames (a point in a run's progress, however fast the machine).

use crate::{Counters, Link, NetError, Transport};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::Thread;
use std::time::Duration;

/// What goes wrong on the wires, decided by a seed.
#[derive(Clone, Copy, Debug, Default)]
pub struct Faults {
    pub seed: u64,
    /// A frame waits up to this many of its receiver's rounds (`receive` calls) before it
    /// is handed over, after every earlier frame of its sender.
    pub max_delay: u64,
}

/// One process's inbox.
#[derive(Default)]
struct Inbox {
    /// Frames in the order they were sent: sender, bytes, the round they may be taken in.
    frames: Mutex<VecDeque<(usize, Vec<u8>, u64)>>,
    /// The receiver's rounds so far.
    round: AtomicU64,
    /// Per sender, the round its last frame may be taken in (frames of one sender stay in
    /// order).
    last: Mutex<Vec<u64>>,
    /// The thread that opened this process's link, woken by a frame.
    thread: Mutex<Option<Thread>>,
    /// Peers cut off, not yet reported.
    lost: Mutex<Vec<(usize, String)>>,
}

struct Shared {
    inboxes: Vec<Inbox>,
    cut: Vec<AtomicBool>,
    faults: Faults,
    rng: Mutex<u64>,
    /// Frames sent so far, by every process.
    sent: AtomicU64,
    /// The process to cut off once `sent` reaches this many frames.
    cut_after: OnceLock<(usize, u64)>,
}

impl Shared {
    fn delay(&self) -> u64 {
        if self.faults.max_delay == 0 {
            return 0;
        }
        let Ok(mut s) = self.rng.lock() else { return 0 };
        // xorshift64*: a fixed sequence per seed.
        *s ^= *s >> 12;
        *s ^= *s << 25;
        *s ^= *s >> 27;
        s.wrapping_mul(0x2545_f491_4f6c_dd1d) % (self.faults.max_delay + 1)
    }

    fn cut(&self, process: usize) {
        let Some(flag) = self.cut.get(process) else { return };
        if flag.swap(true, Ordering::AcqRel) {
            return;
        }
        for (p, inbox) in self.inboxes.iter().enumerate() {
            if p == process {
                continue;
            }
            if let Ok(mut lost) = inbox.lost.lock() {
                lost.push((process, "cut off".into()));
            }
            if let Some(t) = inbox.thread.lock().ok().and_then(|t| t.clone()) {
                t.unpark();
            }
        }
    }
}

/// The processes of one run joined in memory.
#[derive(Clone)]
pub struct MemoryNet {
    shared: Arc<Shared>,
}

impl MemoryNet {
    /// `processes` processes, each with a link to open on its own thread.
    pub fn mesh(processes: usize, faults: Faults) -> (MemoryNet, Vec<MemoryLink>) {
        let shared = Arc::new(Shared {
            inboxes: (0..processes)
                .map(|_| Inbox { last: Mutex::new(vec![0; processes]), ..Inbox::default() })
                .collect(),
            cut: (0..processes).map(|_| AtomicBool::new(false)).collect(),
            faults,
            rng: Mutex::new(faults.seed | 1),
            sent: AtomicU64::new(0),
            cut_after: OnceLock::new(),
        });
        let links = (0..processes).map(|process| MemoryLink { shared: Arc::clone(&shared), process }).collect();
        (MemoryNet { shared }, links)
    }

    /// Process `process` is cut off: what it sends and what is sent to it is dropped from
    /// now on, and every other process hears that its connection broke.
    pub fn cut(&self, process: usize) {
        self.shared.cut(process);
    }

    /// Process `process` is cut off (as by [`MemoryNet::cut`]) once the processes sent
    /// `frames` frames in all. Set once per net: a second call is ignored.
    pub fn cut_after_frames(&self, process: usize, frames: u64) {
        let _ = self.shared.cut_after.set((process, frames));
    }
}

/// One process's end of a [`MemoryNet`].
pub struct MemoryLink {
    shared: Arc<Shared>,
    process: usize,
}

impl Link for MemoryLink {
    fn open(self: Box<Self>) -> Box<dyn Transport> {
        if let Some(inbox) = self.shared.inboxes.get(self.process) {
            if let Ok(mut t) = inbox.thread.lock() {
                *t = Some(std::thread::current());
            }
        }
        Box::new(MemoryTransport { shared: self.shared, process: self.process, counters: Arc::default() })
    }
}

struct MemoryTransport {
    shared: Arc<Shared>,
    process: usize,
    counters: Arc<Counters>,
}

impl MemoryTransport {
    fn inbox(&self) -> Option<&Inbox> {
        self.shared.inboxes.get(self.process)
    }

    fn is_cut(&self, process: usize) -> bool {
        self.shared.cut.get(process).is_some_and(|c| c.load(Ordering::Acquire))
    }
}

impl Transport for MemoryTransport {
    fn process(&self) -> usize {
        self.process
    }

    fn processes(&self) -> usize {
        self.shared.inboxes.len()
    }

    fn receive(&mut self, on_frame: &mut dyn FnMut(&[u8])) -> Result<(), NetError> {
        if self.is_cut(self.process) {
            return Err(NetError("this process was cut off".into()));
        }
        let Some(inbox) = self.inbox() else { return Ok(()) };
        let round = inbox.round.fetch_add(1, Ordering::AcqRel) + 1;
        let ready: Vec<(usize, Vec<u8>)> = {
            let Ok(mut frames) = inbox.frames.lock() else { return Err(NetError("inbox poisoned".into())) };
            let mut ready = Vec::new();
            let mut kept = VecDeque::with_capacity(frames.len());
            for (from, bytes, at) in frames.drain(..) {
                if at <= round {
                    ready.push((from, bytes));
                } else {
                    kept.push_back((from, bytes, at));
                }
            }
            *frames = kept;
            ready
        };
        for (from, bytes) in ready {
            if !self.is_cut(from) {
                self.counters.received(bytes.len());
                on_frame(&bytes);
            }
        }
        Ok(())
    }

    fn send(&mut self, peer: usize, frame: Vec<u8>) -> Result<(), NetError> {
        if let Some(&(process, frames)) = self.shared.cut_after.get().filter(|_| peer != self.process) {
            if self.shared.sent.fetch_add(1, Ordering::AcqRel) + 1 == frames {
                self.shared.cut(process);
            }
        }
        if peer == self.process || self.is_cut(peer) {
            return Ok(());
        }
        if self.is_cut(self.process) {
            return Err(NetError("this process was cut off".into()));
        }
        let Some(inbox) = self.shared.inboxes.get(peer) else { return Ok(()) };
        self.counters.sent(frame.len());
        let delay = self.shared.delay();
        let at = {
            let Ok(mut last) = inbox.last.lock() else { return Err(NetError("inbox poisoned".into())) };
            let at = (inbox.round.load(Ordering::Acquire) + delay).max(last[self.process]);
            last[self.process] = at;
            at
        };
        if let Ok(mut frames) = inbox.frames.lock() {
            frames.push_back((self.process, frame, at));
        }
        if let Some(t) = inbox.thread.lock().ok().and_then(|t| t.clone()) {
            t.unpark();
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), NetError> {
        Ok(())
    }

    fn wait(&mut self, timeout: Duration) {
        // Frames held back are taken on a later round: come back soon for them.
        let held = self.inbox().and_then(|i| i.frames.lock().ok().map(|f| !f.is_empty())).unwrap_or(false);
        std::thread::park_timeout(if held { timeout.min(Duration::from_millis(1)) } else { timeout });
    }

    fn take_lost(&mut self) -> Vec<(usize, String)> {
        self.inbox().and_then(|i| i.lost.lock().ok().map(|mut l| std::mem::take(&mut *l))).unwrap_or_default()
    }

    fn counters(&self) -> Arc<Counters> {
        Arc::clone(&self.counters)
    }

    fn close(self: Box<Self>, _failed: bool) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opened(links: Vec<MemoryLink>) -> Vec<Box<dyn Transport>> {
        links.into_iter().map(|l| Box::new(l).open()).collect()
    }

    fn drain(t: &mut Box<dyn Transport>, rounds: usize) -> Vec<Vec<u8>> {
        let mut got = Vec::new();
        for _ in 0..rounds {
            t.receive(&mut |b| got.push(b.to_vec())).unwrap();
        }
        got
    }

    /// Held back or not, frames of one sender arrive in the order it sent them, each
    /// once; frames of two senders may interleave.
    #[test]
    fn delayed_frames_keep_each_senders_order() {
        for seed in 0..20 {
            let (_net, links) = MemoryNet::mesh(3, Faults { seed, max_delay: 5 });
            let mut t = opened(links);
            for i in 0..50u8 {
                t[1].send(0, vec![1, i]).unwrap();
                t[2].send(0, vec![2, i]).unwrap();
            }
            let got = drain(&mut t[0], 300);
            assert_eq!(got.len(), 100, "seed {seed}");
            for sender in [1u8, 2] {
                let order: Vec<u8> = got.iter().filter(|f| f[0] == sender).map(|f| f[1]).collect();
                assert_eq!(order, (0..50).collect::<Vec<u8>>(), "seed {seed}");
            }
        }
    }

    /// A cut process is reported lost to the others, and nothing crosses to or from it.
    #[test]
    fn a_cut_process_is_lost_to_its_peers() {
        let (net, links) = MemoryNet::mesh(3, Faults::default());
        let mut t = opened(links);
        t[1].send(0, vec![9]).unwrap();
        net.cut(1);
        assert!(drain(&mut t[0], 2).is_empty(), "a frame of a cut process is dropped");
        assert_eq!(t[0].take_lost(), [(1, "cut off".to_string())]);
        assert_eq!(t[2].take_lost().len(), 1);
        assert!(t[0].take_lost().is_empty(), "reported once");
        assert!(t[1].receive(&mut |_| {}).is_err());
        t[0].send(1, vec![1]).unwrap();
        t[0].send(2, vec![2]).unwrap();
        assert_eq!(drain(&mut t[2], 1), [vec![2]]);
        let counted = t[0].counters().read();
        assert_eq!((counted.packets_sent, counted.bytes_sent), (1, 1));
    }

    /// A cut set for the third frame: the first two cross, the third and later ones to or
    /// from the cut process do not, and its peers hear of it then, not before.
    #[test]
    fn a_cut_after_frames_comes_at_that_frame() {
        let (net, links) = MemoryNet::mesh(2, Faults::default());
        net.cut_after_frames(1, 3);
        let mut t = opened(links);
        t[1].send(0, vec![1]).unwrap();
        t[0].send(1, vec![2]).unwrap();
        assert!(t[0].take_lost().is_empty(), "not cut yet");
        assert_eq!(drain(&mut t[0], 1), [vec![1]]);
        assert!(t[1].send(0, vec![3]).is_err(), "the third frame cuts its sender off");
        assert_eq!(t[0].take_lost(), [(1, "cut off".to_string())]);
        assert!(drain(&mut t[0], 2).is_empty());
    }
}
