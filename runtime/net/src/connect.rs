//! Connecting the processes of a run: listening, connecting, proving the shared key,
//! comparing fingerprints and measuring clock offsets (see the crate doc).

use crate::NetError;
use sha3::{Digest, Sha3_256};
use std::fmt;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How a process joins the others.
#[derive(Clone, Debug)]
pub struct NetSpec {
    /// This process's index.
    pub process: usize,
    /// `host:port` of every process, in process order (a hostfile's lines).
    pub addresses: Vec<String>,
    /// The shared secret every process must prove.
    pub key: Vec<u8>,
    /// What must be the same in every process, in named parts (the caller's binary,
    /// graph and settings), in the same order in every process: a part that differs is
    /// named in the refusal.
    pub fingerprint: Vec<(String, Vec<u8>)>,
    /// How long to wait for every peer to connect.
    pub connect_timeout: Duration,
}

/// Every peer connected and authenticated.
pub struct Connected {
    /// Per process, the socket to it (`None` at this process's index).
    pub sockets: Vec<Option<TcpStream>>,
    /// The instant this process began to connect: its clock's zero.
    pub base: Instant,
    /// Process 0's clock when this one's reads 0, in microseconds (0 on process 0).
    pub offset_us: i64,
}

/// Connects process `spec.process` to every other (see the crate doc). A stranger that
/// fails the handshake is refused and the wait goes on: `refused` hears why.
pub fn connect(spec: &NetSpec, refused: &mut dyn FnMut(&str)) -> Result<Connected, NetError> {
    let base = Instant::now();
    let (sockets, offset_us) = connect_all(spec, base, refused)?;
    Ok(Connected { sockets, base, offset_us })
}

/// The handshake's first words: "AMPH", the protocol's version.
const HELLO: u32 = 0x4850_4d41;
const VERSION: u32 = 3;

/// The most parts of a fingerprint.
pub const MAX_FINGERPRINT_PARTS: usize = 1024;

/// How long an accepted connection has to send its first byte: a connection that says
/// nothing is dropped after it, whatever else is pending.
pub const FIRST_BYTE: Duration = Duration::from_secs(2);

/// How long one handshake may take in all, once it began (the clock probe included).
pub const HANDSHAKE_LIMIT: Duration = Duration::from_secs(10);

/// The most handshakes in progress on a listener at once (a thread each); a connection
/// past them is closed at once.
pub const MAX_PENDING_HANDSHAKES: usize = 512;

/// How long the listener sleeps when nothing is pending, and the connecting side between
/// attempts.
const POLL: Duration = Duration::from_millis(10);
const RETRY: Duration = Duration::from_millis(100);

/// What an accepting handshake thread hands back: where the connection came from, and
/// how its handshake ended.
type Accepted = (String, Result<(usize, TcpStream, Option<i64>), Refusal>);

/// Connects process `spec.process` to every other: to those before it, accepts those
/// after it, authenticating each. The result has `None` at this process's index, and
/// process 0's clock when `base` is 0 here, in microseconds (0 on process 0).
///
/// Accepted connections are served concurrently, a thread each (at most
/// [`MAX_PENDING_HANDSHAKES`]), from the start, while this process still connects to the
/// ones before it; each must send its first byte within [`FIRST_BYTE`] and finish within
/// [`HANDSHAKE_LIMIT`]. A connection to a peer that fails on the way (refused, reset,
/// silent) is tried again until `spec.connect_timeout` is over; one that answers with
/// another key, version or fingerprint ends the connect at once.
fn connect_all(
    spec: &NetSpec,
    base: Instant,
    refused: &mut dyn FnMut(&str),
) -> Result<(Vec<Option<TcpStream>>, i64), NetError> {
    let me = spec.process;
    let processes = spec.addresses.len();
    let mut sockets: Vec<Option<TcpStream>> = (0..processes).map(|_| None).collect();
    let deadline = Instant::now() + spec.connect_timeout;
    let mut offset_us = 0;
    let (results, accepted) = std::sync::mpsc::channel::<Accepted>();
    let stop = Arc::new(AtomicBool::new(false));
    let acceptor = if me + 1 < processes {
        let address = &spec.addresses[me];
        let listener = listen(address)?;
        listener.set_nonblocking(true).map_err(|e| NetError(format!("listener on {address}: {e}")))?;
        let (spec, stop) = (spec.clone(), Arc::clone(&stop));
        let spawned = std::thread::Builder::new()
            .name("amp-net:accept".into())
            .spawn(move || accept_loop(&listener, &spec, base, &stop, &results));
        Some(spawned.map_err(|e| NetError(format!("cannot start the listener's thread: {e}")))?)
    } else {
        drop(results);
        None
    };
    // Whatever ends the connect stops the listener's thread.
    struct Stop(Arc<AtomicBool>, Option<std::thread::JoinHandle<()>>);
    impl Drop for Stop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
            if let Some(thread) = self.1.take() {
                let _ = thread.join();
            }
        }
    }
    let stopping = Stop(Arc::clone(&stop), acceptor);
    for (peer, address) in spec.addresses.iter().enumerate().take(me) {
        let (stream, offset) = connect_to(spec, peer, address, base, deadline)?;
        if peer == 0 {
            offset_us = offset.unwrap_or(0);
        }
        sockets[peer] = Some(stream);
    }
    while sockets.iter().enumerate().any(|(p, s)| p > me && s.is_none()) {
        let left = deadline.saturating_duration_since(Instant::now());
        match accepted.recv_timeout(left) {
            Ok((_, Ok((peer, stream, _)))) if peer > me && sockets[peer].is_none() => sockets[peer] = Some(stream),
            Ok((from, Ok((peer, _, _)))) => refused(&format!("refused {from}: process {peer} is connected already")),
            Ok((from, Err(Refusal::Fatal(e)))) => return Err(NetError(format!("{from}: {e}"))),
            Ok((from, Err(Refusal::Refused(e) | Refusal::Broken(e)))) => {
                refused(&format!("refused a connection from {from}: {e}"))
            }
            Err(_) => {
                let missing: Vec<String> = (me + 1..processes)
                    .filter(|&p| sockets[p].is_none())
                    .map(|p| format!("process {p} ({})", spec.addresses[p]))
                    .collect();
                return Err(NetError(format!(
                    "{} did not connect within {}s (--connect-timeout)",
                    missing.join(", "),
                    spec.connect_timeout.as_secs_f64()
                )));
            }
        }
    }
    drop(stopping);
    Ok((sockets, offset_us))
}

/// Listens on `address` (its first address that binds).
fn listen(address: &str) -> Result<TcpListener, NetError> {
    let resolved: Vec<SocketAddr> = address
        .to_socket_addrs()
        .map_err(|e| NetError(format!("cannot listen on {address}: cannot resolve it: {e}")))?
        .collect();
    let mut last = None;
    for a in &resolved {
        match TcpListener::bind(a) {
            Ok(listener) => return Ok(listener),
            Err(e) => last = Some(format!("{a}: {e}")),
        }
    }
    Err(NetError(format!("cannot listen on {address}: {}", last.unwrap_or_else(|| "it names no address".into()))))
}

/// The listener's thread: accepts until `stop`, and hands each connection to a thread of
/// its own for the handshake (at most [`MAX_PENDING_HANDSHAKES`] at once).
fn accept_loop(listener: &TcpListener, spec: &NetSpec, base: Instant, stop: &AtomicBool, results: &Sender<Accepted>) {
    let pending = Arc::new(AtomicUsize::new(0));
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((stream, from)) => {
                if pending.load(Ordering::Relaxed) >= MAX_PENDING_HANDSHAKES {
                    // Closed unread: too many handshakes are under way already.
                    drop(stream);
                    continue;
                }
                pending.fetch_add(1, Ordering::Relaxed);
                let (spec, results, count) = (spec.clone(), results.clone(), Arc::clone(&pending));
                let spawned = std::thread::Builder::new().name("amp-net:handshake".into()).spawn(move || {
                    let outcome = stream
                        .set_nonblocking(false)
                        .map_err(|e| Refusal::Broken(format!("handshake: {e}")))
                        .and_then(|()| handshake(stream, &spec, None, base));
                    count.fetch_sub(1, Ordering::Relaxed);
                    let _ = results.send((from.to_string(), outcome));
                });
                if spawned.is_err() {
                    pending.fetch_sub(1, Ordering::Relaxed);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(POLL),
            // A connection that went away before it was accepted, or a transient shortage
            // (file descriptors): the listener goes on after a pause.
            Err(_) => std::thread::sleep(POLL),
        }
    }
}

/// Connects to process `peer` at `address` and runs the handshake, trying again after a
/// refused, reset or silent connection until `deadline`.
fn connect_to(
    spec: &NetSpec,
    peer: usize,
    address: &str,
    base: Instant,
    deadline: Instant,
) -> Result<(TcpStream, Option<i64>), NetError> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let attempt = address
            .to_socket_addrs()
            .map_err(|e| format!("cannot resolve {address}: {e}"))
            .and_then(|mut a| a.next().ok_or_else(|| format!("{address} names no address")))
            .and_then(|a| {
                TcpStream::connect_timeout(&a, left.clamp(Duration::from_millis(1), Duration::from_secs(2)))
                    .map_err(|e| e.to_string())
            });
        let error = match attempt {
            Ok(stream) => match handshake(stream, spec, Some(peer), base) {
                Ok((_, stream, offset)) => return Ok((stream, offset)),
                Err(Refusal::Broken(e)) => e,
                Err(Refusal::Refused(e) | Refusal::Fatal(e)) => {
                    return Err(NetError(format!("process {peer} at {address}: {e}")))
                }
            },
            Err(e) => e,
        };
        if Instant::now() + RETRY >= deadline {
            return Err(NetError(format!(
                "cannot connect to process {peer} at {address} within {}s (--connect-timeout): {error}",
                spec.connect_timeout.as_secs_f64()
            )));
        }
        std::thread::sleep(RETRY);
    }
}

/// Why a handshake failed: a stranger (refused, the listener goes on), a connection that
/// broke or fell silent on the way (the connecting side tries again), or a peer that
/// proved the key but cannot run with this process (the run stops).
pub enum Refusal {
    Refused(String),
    Broken(String),
    Fatal(String),
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Refused(e) | Refusal::Broken(e) | Refusal::Fatal(e) => f.write_str(e),
        }
    }
}

pub fn proof(key: &[u8], prover: u32, their_nonce: &[u8; 16], own_nonce: &[u8; 16]) -> [u8; 32] {
    let mut h = Sha3_256::new();
    h.update(b"amp-cluster-proof-v1");
    h.update((key.len() as u64).to_le_bytes());
    h.update(key);
    h.update(prover.to_le_bytes());
    h.update(their_nonce);
    h.update(own_nonce);
    h.finalize().into()
}

/// Both sides: hello (magic, version, index, processes, nonce), then the proof of the key
/// over the other's nonce, checked before anything else is read; then the fingerprints;
/// then the clocks ([`probe_clock`]). `expect`: the peer this side connected to (`None`:
/// an accepted connection, any later process). Returns the peer, the stream and, on the
/// side that connected, the peer's clock minus this one's in microseconds (clocks read
/// against `base`).
pub fn handshake(
    mut stream: TcpStream,
    spec: &NetSpec,
    expect: Option<usize>,
    base: Instant,
) -> Result<(usize, TcpStream, Option<i64>), Refusal> {
    let io = |e: std::io::Error| Refusal::Broken(format!("handshake: {e}"));
    let deadline = Instant::now() + HANDSHAKE_LIMIT;
    stream.set_nodelay(true).map_err(io)?;
    stream.set_write_timeout(Some(HANDSHAKE_LIMIT)).map_err(io)?;
    let mut nonce = [0u8; 16];
    getrandom::fill(&mut nonce).map_err(|e| Refusal::Fatal(format!("no random nonce: {e}")))?;
    let me = spec.process as u32;
    let processes = spec.addresses.len() as u32;
    let mut hello = Vec::with_capacity(32);
    hello.extend_from_slice(&HELLO.to_le_bytes());
    hello.extend_from_slice(&VERSION.to_le_bytes());
    hello.extend_from_slice(&me.to_le_bytes());
    hello.extend_from_slice(&processes.to_le_bytes());
    hello.extend_from_slice(&nonce);
    stream.write_all(&hello).map_err(io)?;
    let mut theirs = [0u8; 32];
    // The first byte within FIRST_BYTE: a connection that says nothing goes at once.
    read_by(&mut stream, &mut theirs[..1], deadline.min(Instant::now() + FIRST_BYTE)).map_err(io)?;
    read_by(&mut stream, &mut theirs[1..], deadline).map_err(io)?;
    let word = |i: usize| u32::from_le_bytes([theirs[i], theirs[i + 1], theirs[i + 2], theirs[i + 3]]);
    if word(0) != HELLO {
        return Err(Refusal::Refused("not an Amp cluster process".into()));
    }
    if word(4) != VERSION {
        return Err(Refusal::Refused(format!("cluster protocol version {} (this is {VERSION})", word(4))));
    }
    let peer = word(8);
    let mut their_nonce = [0u8; 16];
    their_nonce.copy_from_slice(&theirs[16..32]);
    stream.write_all(&proof(&spec.key, me, &their_nonce, &nonce)).map_err(io)?;
    let mut their_proof = [0u8; 32];
    read_by(&mut stream, &mut their_proof, deadline).map_err(io)?;
    let expected = proof(&spec.key, peer, &nonce, &their_nonce);
    // Compared in full whatever differs first: how long a refusal takes says nothing.
    let differs = their_proof.iter().zip(&expected).fold(0u8, |acc, (a, b)| acc | (a ^ b));
    if differs != 0 {
        return Err(Refusal::Refused("it did not prove the cluster key".into()));
    }
    // Authenticated: from here on a mismatch is the run's error.
    if word(12) != processes {
        return Err(Refusal::Fatal(format!("it runs with {} processes, this one with {processes}", word(12))));
    }
    let peer = peer as usize;
    if expect.is_some_and(|e| e != peer) || peer >= spec.addresses.len() || peer == spec.process {
        return Err(Refusal::Fatal(format!("it says it is process {peer}")));
    }
    // The fingerprint: the number of parts, then each part's SHA3-256.
    let mine: Vec<[u8; 32]> = spec.fingerprint.iter().map(|(_, part)| Sha3_256::digest(part).into()).collect();
    let mut print = Vec::with_capacity(4 + 32 * mine.len());
    print.extend_from_slice(&(mine.len() as u32).to_le_bytes());
    mine.iter().for_each(|h| print.extend_from_slice(h));
    stream.write_all(&print).map_err(io)?;
    let mut count = [0u8; 4];
    read_by(&mut stream, &mut count, deadline).map_err(io)?;
    let count = u32::from_le_bytes(count) as usize;
    let peer_name = format!("process {peer} ({})", spec.addresses.get(peer).map_or("?", String::as_str));
    if count > MAX_FINGERPRINT_PARTS {
        return Err(Refusal::Fatal(format!("{peer_name} sent a fingerprint of {count} parts")));
    }
    let mut theirs = vec![[0u8; 32]; count];
    for part in &mut theirs {
        read_by(&mut stream, part, deadline).map_err(io)?;
    }
    if count != mine.len() {
        return Err(Refusal::Fatal(format!(
            "{peer_name} runs another amprun build (its fingerprint has {count} parts, this one's {}); \
             every process must run the same amprun build on the same model and flags",
            mine.len()
        )));
    }
    let differ: Vec<&str> = spec
        .fingerprint
        .iter()
        .zip(mine.iter().zip(&theirs))
        .filter(|(_, (a, b))| a != b)
        .map(|((name, _), _)| name.as_str())
        .collect();
    if !differ.is_empty() {
        return Err(Refusal::Fatal(format!(
            "{peer_name} runs with another {}; every process must run the same amprun build on the same model \
             and flags",
            differ.join(", ")
        )));
    }
    let offset = probe_clock(&mut stream, base, expect.is_some(), deadline).map_err(io)?;
    stream.set_read_timeout(None).map_err(io)?;
    stream.set_write_timeout(None).map_err(io)?;
    Ok((peer, stream, offset))
}

/// Fills `buf` from `stream` by `deadline` (a timeout error past it).
fn read_by(stream: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> std::io::Result<()> {
    let mut filled = 0;
    while filled < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "no answer in time"));
        }
        stream.set_read_timeout(Some(left))?;
        match stream.read(&mut buf[filled..]) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "no answer in time"));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Round trips measured per connection to estimate the offset between two clocks.
pub const CLOCK_PROBES: usize = 8;

/// Microseconds since `base`, as a probe carries them.
fn clock_now(base: Instant) -> u64 {
    u64::try_from(base.elapsed().as_micros()).unwrap_or(u64::MAX)
}

/// The handshake's last step (both sides authenticated): the connecting side sends its
/// clock [`CLOCK_PROBES`] times, the other answers each with its own; the probe with the
/// shortest round trip gives the offset, the answer against the midpoint of its send and
/// receipt (off by at most half that round trip). The connecting side returns the peer's
/// clock minus its own, in microseconds; the other `None`.
pub fn probe_clock(
    stream: &mut TcpStream,
    base: Instant,
    connecting: bool,
    deadline: Instant,
) -> std::io::Result<Option<i64>> {
    let mut word = [0u8; 8];
    if !connecting {
        for _ in 0..CLOCK_PROBES {
            read_by(stream, &mut word, deadline)?;
            stream.write_all(&clock_now(base).to_le_bytes())?;
        }
        return Ok(None);
    }
    let mut best: Option<(u64, i64)> = None;
    for _ in 0..CLOCK_PROBES {
        let sent = clock_now(base);
        stream.write_all(&sent.to_le_bytes())?;
        read_by(stream, &mut word, deadline)?;
        let received = clock_now(base);
        // The peer's answer is a number from an authenticated peer: any value is an offset.
        let theirs = i128::from(u64::from_le_bytes(word));
        let midpoint = (i128::from(sent) + i128::from(received)) / 2;
        let offset = i64::try_from(theirs - midpoint).unwrap_or(if theirs > midpoint { i64::MAX } else { i64::MIN });
        let round_trip = received.saturating_sub(sent);
        if best.is_none_or(|(rt, _)| round_trip < rt) {
            best = Some((round_trip, offset));
        }
    }
    Ok(best.map(|(_, offset)| offset))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two clocks a second apart (bases one second apart in one process): the probe finds
    /// the second, to within the loopback round trip.
    #[test]
    fn the_clock_probe_finds_the_offset_between_two_bases() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let now = Instant::now();
        let Some(earlier) = now.checked_sub(Duration::from_secs(1)) else { return };
        let answering = std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            probe_clock(&mut stream, earlier, false, Instant::now() + HANDSHAKE_LIMIT).unwrap()
        });
        let mut stream = TcpStream::connect(address).unwrap();
        let offset = probe_clock(&mut stream, now, true, Instant::now() + HANDSHAKE_LIMIT)
            .unwrap()
            .expect("the connecting side measures");
        assert_eq!(answering.join().unwrap(), None);
        // The answering side's clock started a second earlier: it reads a second more.
        assert!((offset - 1_000_000).abs() < 50_000, "offset {offset} us");
    }

    #[test]
    fn the_proof_depends_on_the_key_the_prover_and_both_nonces() {
        let (a, b) = ([1u8; 16], [2u8; 16]);
        let p = proof(b"key", 0, &a, &b);
        assert_ne!(p, proof(b"kez", 0, &a, &b));
        assert_ne!(p, proof(b"key", 1, &a, &b));
        assert_ne!(p, proof(b"key", 0, &b, &a));
        assert_eq!(p, proof(b"key", 0, &a, &b));
    }

    fn spec(process: usize, addresses: &[String], key: &[u8], graph: &[u8]) -> NetSpec {
        NetSpec {
            process,
            addresses: addresses.to_vec(),
            key: key.to_vec(),
            fingerprint: vec![("binary".into(), b"b".to_vec()), ("graph".into(), graph.to_vec())],
            connect_timeout: Duration::from_secs(20),
        }
    }

    fn free_addresses(n: usize) -> Vec<String> {
        let ports: Vec<u16> = (0..n)
            .map(|_| TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap())
            .collect();
        ports.iter().map(|p| format!("127.0.0.1:{p}")).collect()
    }

    /// Three processes connect, each to each; a stranger with the wrong key is refused
    /// (heard through the callback) while the listener goes on; a peer with another
    /// fingerprint ends the connect with an error naming it.
    #[test]
    fn processes_connect_refuse_strangers_and_name_a_mismatch() {
        let addresses = free_addresses(3);
        let run = |process: usize, fingerprint: &'static [u8]| {
            let addresses = addresses.clone();
            std::thread::spawn(move || {
                let mut refusals = Vec::new();
                let connected =
                    connect(&spec(process, &addresses, b"key", fingerprint), &mut |r| refusals.push(r.to_string()));
                (connected.map(|c| c.sockets.iter().filter(|s| s.is_some()).count()), refusals)
            })
        };
        let zero = run(0, b"same");
        // A stranger first: it knows nothing of the key.
        let first = addresses[0].clone();
        let stranger = std::thread::spawn(move || loop {
            if let Ok(stream) = TcpStream::connect(&first) {
                let bad = spec(2, &[String::new(), String::new(), String::new()], b"wrong", b"same");
                return handshake(stream, &bad, Some(0), Instant::now()).is_err();
            }
            std::thread::sleep(Duration::from_millis(20));
        });
        assert!(stranger.join().unwrap(), "the stranger was refused");
        let (one, two) = (run(1, b"same"), run(2, b"same"));
        let (zero, one, two) = (zero.join().unwrap(), one.join().unwrap(), two.join().unwrap());
        assert_eq!([zero.0, one.0, two.0], [Ok(2), Ok(2), Ok(2)]);
        assert!(zero.1.iter().any(|r| r.contains("did not prove the cluster key")), "{:?}", zero.1);
        // Another fingerprint: both sides say which process differs.
        let addresses = free_addresses(2);
        let other = {
            let addresses = addresses.clone();
            std::thread::spawn(move || connect(&spec(1, &addresses, b"key", b"other"), &mut |_| {}).err())
        };
        let here = connect(&spec(0, &addresses, b"key", b"same"), &mut |_| {}).err();
        let error = here.expect("refused").0;
        assert!(error.contains("process 1 (127.0.0.1:") && error.contains("runs with another graph;"), "{error}");
        assert!(other.join().unwrap().is_some());
    }

    /// A hundred connections that say nothing, made to process 0's port before process 1
    /// connects, do not keep the two from connecting: each is served by a thread of its
    /// own and dropped after its first-byte deadline (served one at a time, with a 10 s
    /// read timeout each, they held the listener past the connect timeout).
    #[test]
    fn idle_connections_do_not_keep_a_run_from_forming() {
        let addresses = free_addresses(2);
        let zero = {
            let addresses = addresses.clone();
            std::thread::spawn(move || {
                let mut refusals = 0;
                let connected = connect(&spec(0, &addresses, b"key", b"same"), &mut |_| refusals += 1);
                (connected.map(|c| c.sockets.iter().filter(|s| s.is_some()).count()), refusals)
            })
        };
        let mut idle = Vec::new();
        let until = Instant::now() + Duration::from_secs(10);
        while idle.len() < 100 && Instant::now() < until {
            match TcpStream::connect(&addresses[0]) {
                Ok(stream) => idle.push(stream),
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        assert_eq!(idle.len(), 100, "process 0 listens");
        let one = connect(&spec(1, &addresses, b"key", b"same"), &mut |_| {});
        assert_eq!(one.map(|c| c.sockets.iter().filter(|s| s.is_some()).count()), Ok(1));
        let (zero, _) = zero.join().unwrap();
        assert_eq!(zero, Ok(1));
        drop(idle);
    }

    /// A peer that never comes is named once the connect timeout is over, on the side that
    /// listens and on the side that connects (which tries again until then).
    #[test]
    fn a_peer_that_never_comes_is_named_after_the_connect_timeout() {
        let addresses = free_addresses(3);
        let short = |process| NetSpec {
            connect_timeout: Duration::from_millis(600),
            ..spec(process, &addresses, b"key", b"same")
        };
        let listening = connect(&short(0), &mut |_| {}).err().expect("nobody came").0;
        assert!(listening.contains("process 1 (127.0.0.1:") && listening.contains("process 2 ("), "{listening}");
        assert!(listening.contains("did not connect within 0.6s"), "{listening}");
        let connecting = connect(&short(2), &mut |_| {}).err().expect("nobody listens").0;
        assert!(connecting.contains("cannot connect to process 0 at 127.0.0.1:"), "{connecting}");
    }
}
