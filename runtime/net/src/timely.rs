//! The transport over timely_communication: its TCP allocator on the sockets
//! [`crate::connect`] made, one channel of frames, and a panic hook that turns a network
//! thread's death (timely ends a broken connection with a panic in its `timely:recv-N`
//! or `timely:send-N` thread) into a lost peer.

use crate::{Counters, Link, NetError, Transport};
use std::io::Write;
use std::net::TcpStream;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::Thread;
use std::time::Duration;
use timely_communication::allocator::zero_copy::allocator::TcpBuilder;
use timely_communication::allocator::zero_copy::initialize::{initialize_networking_from_sockets, CommsGuard};
use timely_communication::allocator::ProcessBuilder;
use timely_communication::{Allocator, Bytesable, Hooks, Pull, Push};

/// A frame on timely's channel: ours to send, or bytes received.
enum Frame {
    Out(Vec<u8>),
    In(timely_bytes::arc::Bytes),
}

impl Bytesable for Frame {
    fn from_bytes(bytes: timely_bytes::arc::Bytes) -> Frame {
        Frame::In(bytes)
    }

    fn length_in_bytes(&self) -> usize {
        self.bytes().len()
    }

    fn into_bytes<W: Write>(&self, writer: &mut W) {
        // Writing into timely's in-memory buffer does not fail.
        let _ = writer.write_all(self.bytes());
    }
}

impl Frame {
    fn bytes(&self) -> &[u8] {
        match self {
            Frame::Out(v) => v,
            Frame::In(b) => b,
        }
    }
}

/// Timely's network threads started on the sockets; the allocator is built by the thread
/// that [`Link::open`]s it.
pub struct TimelyLink {
    builder: TcpBuilder,
    guard: CommsGuard,
    process: usize,
    processes: usize,
}

impl TimelyLink {
    /// Starts timely's network threads on `sockets` (per process, `None` at `process`'s
    /// own index), as process `process`.
    pub fn start(sockets: Vec<Option<TcpStream>>, process: usize) -> Result<TimelyLink, NetError> {
        let processes = sockets.len();
        let builders = ProcessBuilder::new_typed_vector(1, Hooks::default().refill, None);
        let (mut tcp, guard) = initialize_networking_from_sockets(builders, sockets, process, 1, Hooks::default())
            .map_err(|e| NetError(format!("cannot start the network threads: {e}")))?;
        let builder = tcp.pop().ok_or_else(|| NetError("no network allocator".into()))?;
        Ok(TimelyLink { builder, guard, process, processes })
    }
}

impl Link for TimelyLink {
    fn open(self: Box<Self>) -> Box<dyn Transport> {
        let TimelyLink { builder, guard, process, processes } = *self;
        watch_network_threads(std::thread::current());
        let mut allocator = Allocator::Tcp(builder.build());
        let (pushers, puller) = allocator.allocate::<Frame>(0);
        Box::new(TimelyTransport {
            allocator,
            pushers,
            puller,
            guard,
            process,
            processes,
            counters: Arc::default(),
            frames: Vec::new(),
        })
    }
}

struct TimelyTransport {
    allocator: Allocator,
    pushers: Vec<Box<dyn Push<Frame>>>,
    puller: Box<dyn Pull<Frame>>,
    guard: CommsGuard,
    process: usize,
    processes: usize,
    counters: Arc<Counters>,
    frames: Vec<Frame>,
}

/// Timely's queues panic once a network thread died (its peer is gone).
fn broken() -> NetError {
    NetError("lost the connection to a peer (a network thread failed)".into())
}

impl Transport for TimelyTransport {
    fn process(&self) -> usize {
        self.process
    }

    fn processes(&self) -> usize {
        self.processes
    }

    fn receive(&mut self, on_frame: &mut dyn FnMut(&[u8])) -> Result<(), NetError> {
        let (allocator, puller, frames) = (&mut self.allocator, &mut self.puller, &mut self.frames);
        catch_unwind(AssertUnwindSafe(|| {
            allocator.receive();
            while let Some(frame) = puller.recv() {
                frames.push(frame);
            }
            // Timely counts events per channel; nobody else reads them here.
            allocator.events().borrow_mut().clear();
        }))
        .map_err(|_| broken())?;
        for frame in self.frames.drain(..) {
            self.counters.received(frame.bytes().len());
            on_frame(frame.bytes());
        }
        Ok(())
    }

    fn send(&mut self, peer: usize, frame: Vec<u8>) -> Result<(), NetError> {
        if peer == self.process {
            return Ok(());
        }
        let Some(pusher) = self.pushers.get_mut(peer) else { return Ok(()) };
        self.counters.sent(frame.len());
        catch_unwind(AssertUnwindSafe(|| {
            pusher.send(Frame::Out(frame));
            pusher.done();
        }))
        .map_err(|_| broken())
    }

    fn flush(&mut self) -> Result<(), NetError> {
        let allocator = &mut self.allocator;
        catch_unwind(AssertUnwindSafe(|| allocator.release())).map_err(|_| broken())
    }

    fn wait(&mut self, timeout: Duration) {
        self.allocator.await_events(Some(timeout));
    }

    fn take_lost(&mut self) -> Vec<(usize, String)> {
        LOST.get().and_then(|l| l.lock().ok().map(|mut l| std::mem::take(&mut l.0))).unwrap_or_default()
    }

    fn counters(&self) -> Arc<Counters> {
        Arc::clone(&self.counters)
    }

    fn close(self: Box<Self>, failed: bool) {
        let TimelyTransport { allocator, pushers, puller, guard, .. } = *self;
        if failed {
            // A broken connection's network thread panicked, and timely's queues with it:
            // dropping them, or joining the thread, would panic again.
            std::mem::forget(pushers);
            std::mem::forget(puller);
            std::mem::forget(allocator);
            std::mem::forget(guard);
        } else {
            drop(pushers);
            drop(puller);
            drop(allocator);
            drop(guard);
        }
    }
}

/// Network threads that panicked: the peer, and the thread to wake.
static LOST: OnceLock<Mutex<Lost>> = OnceLock::new();

/// The peers whose network threads broke (and why), and the thread to wake.
type Lost = (Vec<(usize, String)>, Option<Thread>);

/// Installs, once, a panic hook that turns a timely network thread's panic into a lost
/// peer for `user` (quietly: the run's error names the peer), and leaves every other
/// panic to the previous hook. Timely's network threads report through it; one process
/// holds one cluster at a time, so one thread is woken.
fn watch_network_threads(user: Thread) {
    let lost = LOST.get_or_init(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let name = std::thread::current().name().map(str::to_string).unwrap_or_default();
            let peer = name.strip_prefix("timely:recv-").or_else(|| name.strip_prefix("timely:send-"));
            let what = info
                .payload()
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| info.payload().downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            // The transport's thread meets a dead network thread's queues as a panic it
            // catches.
            let user = LOST.get().and_then(|l| l.lock().ok().and_then(|l| l.1.clone()));
            let is_user = user.is_some_and(|t| t.id() == std::thread::current().id());
            if is_user && what.contains("poisoned") {
                return;
            }
            match peer.and_then(|p| p.parse::<usize>().ok()) {
                Some(peer) => {
                    if let Some(lost) = LOST.get() {
                        if let Ok(mut lost) = lost.lock() {
                            lost.0.push((peer, what));
                            if let Some(user) = &lost.1 {
                                user.unpark();
                            }
                        }
                    }
                }
                None => previous(info),
            }
        }));
        Mutex::new((Vec::new(), None))
    });
    if let Ok(mut lost) = lost.lock() {
        lost.0.clear();
        lost.1 = Some(user);
    }
}
