//! The transport between the processes of a run: what moves bytes, and nothing of what
//! the bytes mean.
//!
//! - [`connect`]: process `p` listens on its own address, connects to the processes
//!   before it and accepts the ones after it; each connection proves the shared key
//!   (challenge–response over SHA3-256, a nonce from each side) before anything else is
//!   read, then compares fingerprints (the caller's hash of what must be equal in every
//!   process), then measures the offset between the two clocks.
//! - [`Transport`]: frames to and from peers, in order per pair of processes, with the
//!   peers whose connection broke named. Two implementations: [`timely::TimelyLink`]
//!   (timely_communication's TCP allocator over the sockets [`connect`] made; one
//!   network thread pair per peer) and [`memory::MemoryNet`] (channels inside one
//!   process, with delays and lost peers injected for tests).
//! - [`Traffic`]: what crossed, counted.
//!
//! The crate prints nothing: a refused stranger is handed to the caller's callback, and
//! every failure is a value.

pub mod connect;
pub mod memory;
pub mod timely;
mod traffic;

pub use connect::{connect, Connected, NetSpec, CLOCK_PROBES};
pub use traffic::{Counters, Traffic};

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// The transport failed: a peer is lost, or the network layer broke.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetError(pub String);

impl fmt::Display for NetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NetError {}

/// A transport not yet bound to the thread that will use it: [`Link::open`] runs on that
/// thread (timely wakes the thread that built its allocator).
pub trait Link: Send {
    fn open(self: Box<Self>) -> Box<dyn Transport>;
}

/// Frames between this process and its peers, on the one thread that opened it.
///
/// Frames from one peer arrive whole and in the order that peer sent them; frames from
/// different peers may interleave in any order. Once a call returns an error the
/// transport is failed: the caller stops using it and calls [`Transport::abandon`].
pub trait Transport {
    /// This process's index.
    fn process(&self) -> usize;
    /// Processes in the run, this one included.
    fn processes(&self) -> usize;
    /// Hands every frame that arrived since the last call to `on_frame`.
    fn receive(&mut self, on_frame: &mut dyn FnMut(&[u8])) -> Result<(), NetError>;
    /// Queues `frame` for `peer` (a frame to this process itself, or past the last, is
    /// dropped).
    fn send(&mut self, peer: usize, frame: Vec<u8>) -> Result<(), NetError>;
    /// Pushes the queued frames out.
    fn flush(&mut self) -> Result<(), NetError>;
    /// Blocks until a frame may have arrived, the thread is unparked, or `timeout` passed.
    fn wait(&mut self, timeout: Duration);
    /// The peers whose connection broke since the last call, each with why.
    fn take_lost(&mut self) -> Vec<(usize, String)>;
    /// What crossed so far: packets and bytes counted here, messages by the caller.
    fn counters(&self) -> Arc<Counters>;
    /// Ends the transport. After a failure timely's queues panic when dropped, so a
    /// failed transport is given up without dropping them.
    fn close(self: Box<Self>, failed: bool);
}
