//! What crossed between processes, counted as it goes.

use std::sync::atomic::{AtomicU64, Ordering};

/// What this process sent to and received from the others since it connected (every peer
/// together; heartbeats and control words included in packets and bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Packets (one per peer per round of the bridge that had something for it).
    pub packets_sent: u64,
    pub packets_received: u64,
    /// Forward and backward messages between workers.
    pub messages_sent: u64,
    pub messages_received: u64,
    /// Bytes of Amp's packets, without the transport's own framing.
    pub bytes_sent: u64,
    pub bytes_received: u64,
}

impl Traffic {
    /// What moved between `earlier` and this reading.
    pub fn since(&self, earlier: &Traffic) -> Traffic {
        Traffic {
            packets_sent: self.packets_sent.saturating_sub(earlier.packets_sent),
            packets_received: self.packets_received.saturating_sub(earlier.packets_received),
            messages_sent: self.messages_sent.saturating_sub(earlier.messages_sent),
            messages_received: self.messages_received.saturating_sub(earlier.messages_received),
            bytes_sent: self.bytes_sent.saturating_sub(earlier.bytes_sent),
            bytes_received: self.bytes_received.saturating_sub(earlier.bytes_received),
        }
    }
}

/// The counters behind [`Traffic`], shared by the transport (packets, bytes) and its user
/// (messages, which only it can tell apart).
#[derive(Debug, Default)]
pub struct Counters {
    packets_sent: AtomicU64,
    packets_received: AtomicU64,
    messages_sent: AtomicU64,
    messages_received: AtomicU64,
    bytes_sent: AtomicU64,
    bytes_received: AtomicU64,
}

impl Counters {
    /// A packet of `bytes` bytes left.
    pub fn sent(&self, bytes: usize) {
        self.packets_sent.fetch_add(1, Ordering::Relaxed);
        self.bytes_sent.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// A packet of `bytes` bytes arrived.
    pub fn received(&self, bytes: usize) {
        self.packets_received.fetch_add(1, Ordering::Relaxed);
        self.bytes_received.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// `sent` messages left and `received` arrived.
    pub fn messages(&self, sent: usize, received: usize) {
        self.messages_sent.fetch_add(sent as u64, Ordering::Relaxed);
        self.messages_received.fetch_add(received as u64, Ordering::Relaxed);
    }

    pub fn read(&self) -> Traffic {
        let c = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Traffic {
            packets_sent: c(&self.packets_sent),
            packets_received: c(&self.packets_received),
            messages_sent: c(&self.messages_sent),
            messages_received: c(&self.messages_received),
            bytes_sent: c(&self.bytes_sent),
            bytes_received: c(&self.bytes_received),
        }
    }
}
