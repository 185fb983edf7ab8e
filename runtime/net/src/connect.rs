//! Connecting the processes of a run: listening, connecting, proving the shared key,
//! comparing fingerprints and measuring clock offsets (see the crate doc).

use crate::NetError;
use sha3::{Digest, Sha3_256};
use std::fmt;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
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
    /// What must be the same in every process (the caller hashes its binary and graph).
    pub fingerprint: Vec<u8>,
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
const VERSION: u32 = 2;

/// Connects process `spec.process` to every other: to those before it, accepts those
/// after it, authenticating each. The result has `None` at this process's index, and
/// process 0's clock when `base` is 0 here, in microseconds (0 on process 0).
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
    let listener = if me + 1 < processes {
        let address = &spec.addresses[me];
        Some(TcpListener::bind(address).map_err(|e| NetError(format!("cannot listen on {address}: {e}")))?)
    } else {
        None
    };
    for (peer, address) in spec.addresses.iter().enumerate().take(me) {
        let stream = loop {
            let attempt = address
                .to_socket_addrs()
                .ok()
                .and_then(|mut a| a.next())
                .ok_or_else(|| format!("cannot resolve {address}"))
                .and_then(|a| TcpStream::connect_timeout(&a, Duration::from_secs(2)).map_err(|e| e.to_string()));
            match attempt {
                Ok(stream) => break stream,
                Err(e) if Instant::now() >= deadline => {
                    return Err(NetError(format!("cannot connect to process {peer} at {address}: {e}")));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        };
        let (_, stream, offset) = handshake(stream, spec, Some(peer), base)
            .map_err(|e| NetError(format!("process {peer} at {address}: {e}")))?;
        if peer == 0 {
            offset_us = offset.unwrap_or(0);
        }
        sockets[peer] = Some(stream);
    }
    if let Some(listener) = listener {
        listener.set_nonblocking(true).map_err(|e| NetError(format!("listener: {e}")))?;
        while sockets.iter().enumerate().any(|(p, s)| p > me && s.is_none()) {
            match listener.accept() {
                Ok((stream, from)) => {
                    let _ = stream.set_nonblocking(false);
                    match handshake(stream, spec, None, base) {
                        Ok((peer, stream, _)) if peer > me && sockets[peer].is_none() => sockets[peer] = Some(stream),
                        Ok((peer, _, _)) => refused(&format!("refused {from}: process {peer} is connected already")),
                        Err(Refusal::Fatal(e)) => return Err(NetError(format!("{from}: {e}"))),
                        Err(Refusal::Refused(e)) => refused(&format!("refused a connection from {from}: {e}")),
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if Instant::now() >= deadline {
                        let missing: Vec<String> = (me + 1..processes)
                            .filter(|&p| sockets[p].is_none())
                            .map(|p| format!("process {p} ({})", spec.addresses[p]))
                            .collect();
                        return Err(NetError(format!(
                            "{} did not connect within {}s",
                            missing.join(", "),
                            spec.connect_timeout.as_secs()
                        )));
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => return Err(NetError(format!("accepting on {}: {e}", spec.addresses[me]))),
            }
        }
    }
    Ok((sockets, offset_us))
}

/// Why a handshake failed: a stranger (refused, the listener goes on) or a peer that
/// proved the key but cannot run with this process (the run stops).
pub enum Refusal {
    Refused(String),
    Fatal(String),
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Refused(e) | Refusal::Fatal(e) => f.write_str(e),
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
    let io = |e: std::io::Error| Refusal::Refused(format!("handshake: {e}"));
    stream.set_nodelay(true).map_err(io)?;
    stream.set_read_timeout(Some(Duration::from_secs(10))).map_err(io)?;
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
    stream.read_exact(&mut theirs).map_err(io)?;
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
    stream.read_exact(&mut their_proof).map_err(io)?;
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
    let mine: [u8; 32] = Sha3_256::digest(&spec.fingerprint).into();
    stream.write_all(&mine).map_err(io)?;
    let mut their_print = [0u8; 32];
    stream.read_exact(&mut their_print).map_err(io)?;
    if their_print != mine {
        return Err(Refusal::Fatal(format!(
            "process {peer} ({}) runs another binary or graph (fingerprint {} here, {} there); \
             every process must run the same amprun build on the same model and flags",
            spec.addresses.get(peer).map_or("?", String::as_str),
            hex(&mine[..6]),
            hex(&their_print[..6])
        )));
    }
    let offset = probe_clock(&mut stream, base, expect.is_some()).map_err(io)?;
    stream.set_read_timeout(None).map_err(io)?;
    Ok((peer, stream, offset))
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
pub fn probe_clock(stream: &mut TcpStream, base: Instant, connecting: bool) -> std::io::Result<Option<i64>> {
    let mut word = [0u8; 8];
    if !connecting {
        for _ in 0..CLOCK_PROBES {
            stream.read_exact(&mut word)?;
            stream.write_all(&clock_now(base).to_le_bytes())?;
        }
        return Ok(None);
    }
    let mut best: Option<(u64, i64)> = None;
    for _ in 0..CLOCK_PROBES {
        let sent = clock_now(base);
        stream.write_all(&sent.to_le_bytes())?;
        stream.read_exact(&mut word)?;
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

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
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
            probe_clock(&mut stream, earlier, false).unwrap()
        });
        let mut stream = TcpStream::connect(address).unwrap();
        let offset = probe_clock(&mut stream, now, true).unwrap().expect("the connecting side measures");
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

    fn spec(process: usize, addresses: &[String], key: &[u8], fingerprint: &[u8]) -> NetSpec {
        NetSpec {
            process,
            addresses: addresses.to_vec(),
            key: key.to_vec(),
            fingerprint: fingerprint.to_vec(),
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
        assert!(error.contains("runs another binary or graph"), "{error}");
        assert!(other.join().unwrap().is_some());
    }
}
