use super::inbound::{check_reduction, check_replica_word, check_trace, RingShape};
use super::*;
use crate::protocol::{RemoteWord, ReplicaGrads};
use amp_net::connect::handshake;
use amp_net::NetSpec;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};

fn net_spec(process: usize, addresses: &[String], key: &[u8]) -> NetSpec {
    NetSpec {
        process,
        addresses: addresses.to_vec(),
        key: key.to_vec(),
        fingerprint: vec![("graph".into(), b"same".to_vec())],
        connect_timeout: Duration::from_secs(60),
    }
}

/// Process `process` of `addresses` over timely, as amprun joins one.
fn connect(process: usize, addresses: &[String], key: &[u8]) -> Cluster {
    let connected = amp_net::connect(&net_spec(process, addresses, key), &mut |_| {}).unwrap();
    let link = amp_net::timely::TimelyLink::start(connected.sockets, process).unwrap();
    let spec = ClusterSpec::new(process, addresses.to_vec());
    Cluster::start(Box::new(link), spec, connected.base, connected.offset_us).unwrap()
}

/// The tests that connect clusters run one at a time: a connection that breaks is
/// reported through a hook shared by the whole test binary (`amp_net::timely`).
static NETWORK: Mutex<()> = Mutex::new(());

fn free_addresses(n: usize) -> Vec<String> {
    let ports: Vec<u16> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap())
        .collect();
    ports.iter().map(|p| format!("127.0.0.1:{p}")).collect()
}

/// One timely frame holding `body`, from process `source` to process `target`.
fn frame(source: u64, target: u64, sequence: u64, body: &[u8]) -> Vec<u8> {
    let mut frame = Vec::new();
    // timely's header: channel, source, target range, length, sequence number.
    for word in [0u64, source, target, target + 1, body.len() as u64, sequence] {
        frame.extend_from_slice(&word.to_be_bytes());
    }
    frame.extend_from_slice(body);
    frame
}

/// Process 0 runs for real; process 1, by hand, proves the key and sends one frame of
/// `body`. What process 0's cluster failed with, and the addresses.
fn failure_when_process_1_sends(body: Vec<u8>) -> (String, Vec<String>) {
    let addresses = free_addresses(2);
    let key = b"test key".to_vec();
    let peer_spec = net_spec(1, &addresses, &key);
    let first = addresses[0].clone();
    let peer = std::thread::spawn(move || {
        let stream = loop {
            match TcpStream::connect(&first) {
                Ok(stream) => break stream,
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        let Ok((_, mut stream, _)) = handshake(stream, &peer_spec, Some(0), Instant::now()) else {
            panic!("the handshake fails")
        };
        stream.write_all(&frame(1, 0, 0, &body)).unwrap();
        // Held open until the other side gave up on it.
        let mut rest = Vec::new();
        let _ = stream.read_to_end(&mut rest);
    });
    let cluster = connect(0, &addresses, &key);
    let mut failure = None;
    for _ in 0..500 {
        failure = cluster.failure();
        if failure.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(cluster);
    drop(peer);
    (failure.expect("the cluster failed"), addresses)
}

/// A sink that takes nothing (the replica checks run before any delivery).
struct Nowhere;

impl RunSink for Nowhere {
    fn worker(&self, _: usize, _: ToWorker) {}
    fn controller(&self, _: Report) -> bool {
        false
    }
    fn arrive(&self, _: usize, _: usize) -> bool {
        false
    }
    fn fail(&self, _: &str) {}
}

/// A replica's messages must fit the run: the group is a replica's, each side sends
/// only its own words (the replica's worker gradients and acknowledgements, the
/// master's owner pulls and values), and sizes, rows and instances are the run's.
/// (The bridge names the sender in the error that ends the run.)
#[test]
fn a_replicas_message_must_fit_the_run() {
    // Two processes of one worker each; group 1 is a replica on worker 1 of a master
    // owned by worker 0, with tensors of 6 and 2 values; 4 instances.
    let port_of = |replicas: Vec<Option<ReplicaShape>>| RunPort {
        run: 1,
        local: 0..1,
        sink: Box::new(Nowhere),
        instances: 4,
        nodes: 3,
        state_len: 1,
        workers: 2,
        trace_shift: 0,
        replicas,
        rings: Vec::new(),
        node_workers: vec![0, 0, 1],
    };
    let port = port_of(vec![None, Some(ReplicaShape { worker: 1, owner: 0, lens: vec![6, 2] })]);
    // (the worker it is for, the word)
    let check = |(worker, word): (usize, RemoteWord), from: usize| check_replica_word(worker, &word, &port, from, 2);
    let grads = |tensors: Vec<Vec<f32>>, rows: Option<(usize, Vec<usize>)>, applied: Vec<(usize, u64)>| {
        (0, RemoteWord::Grads { group: 1, last: false, grads: ReplicaGrads { tensors, rows, applied } })
    };
    assert_eq!(check(grads(vec![vec![0.0; 6], vec![0.0; 2]], Some((3, vec![0, 1])), vec![(3, 0)]), 1), Ok(()));
    assert_eq!(check(grads(vec![], None, vec![]), 1), Ok(()));
    assert_eq!(check((1, RemoteWord::Pull { group: 1 }), 0), Ok(()));
    assert_eq!(check((0, RemoteWord::Synced { group: 1 }), 1), Ok(()));
    let values = |lens: [usize; 2]| {
        (1, RemoteWord::Values { group: 1, base: 3, tensors: lens.iter().map(|&n| vec![1.0; n]).collect() })
    };
    assert_eq!(check(values([6, 2]), 0), Ok(()));
    // A table of 4 rows of 3 (group 2): two rows' values, or rows past its end.
    let table = port_of(vec![None, None, Some(ReplicaShape { worker: 1, owner: 0, lens: vec![12] })]);
    let rows = |values: usize, rows: Vec<usize>| RemoteWord::Grads {
        group: 2,
        last: true,
        grads: ReplicaGrads { tensors: vec![vec![0.5; values]], rows: Some((3, rows)), applied: vec![] },
    };
    assert_eq!(check_replica_word(0, &rows(6, vec![1, 3]), &table, 1, 2), Ok(()));
    assert!(check_replica_word(0, &rows(9, vec![1, 3]), &table, 1, 2).is_err());
    assert!(check_replica_word(0, &rows(6, vec![1, 4]), &table, 1, 2).unwrap_err().contains("rows past"));
    let refused = |word: (usize, RemoteWord), from: usize, what: &str| {
        let error = check(word, from).expect_err("refused");
        assert!(error.contains(what), "{error}");
    };
    refused(grads(vec![vec![0.0; 5], vec![0.0; 2]], None, vec![]), 1, "gradients of other sizes");
    // A table's rows alone only for a group of one tensor.
    refused(grads(vec![vec![0.0; 6]], Some((3, vec![0, 1])), vec![]), 1, "gradients of other sizes");
    refused(grads(vec![vec![0.0; 6], vec![0.0; 2]], Some((3, vec![2])), vec![]), 1, "rows past");
    refused(grads(vec![vec![0.0; 6], vec![0.0; 2]], Some((0, vec![0])), vec![]), 1, "rows past");
    refused(grads(vec![], None, vec![(4, 0)]), 1, "unknown instance");
    refused(values([6, 3]), 0, "values of other sizes");
    // The wrong side: gradients from the master's process, a pull from the replica's.
    refused(grads(vec![], None, vec![]), 0, "not from its worker");
    refused((1, RemoteWord::Pull { group: 1 }), 1, "not from its owner");
    refused((1, RemoteWord::Synced { group: 1 }), 1, "not from its worker");
    // No replica group 0, nor 7.
    refused((1, RemoteWord::Pull { group: 0 }), 0, "a message");
    refused((0, RemoteWord::Synced { group: 7 }), 1, "a message");
}

/// A reduction's step reaches an updater of the master's ring only from the updater
/// before it, within the reduction's steps and one chunk long: a ring of workers 0, 2
/// and 5 (one per process of three) over 10 values, here at worker 2 (chunks of 4, 3 and
/// 3; it receives chunks 0, 2, 1, 0 at steps 0 to 3, worker 0 chunk 2 at step 0).
#[test]
fn a_reductions_step_must_fit_the_ring() {
    let ring = Some(RingShape { workers: vec![0, 2, 5], len: 10 });
    let from = |process: usize| move |w: usize| amp_ir::placement::process_of(w, 3, 6) == process;
    assert_eq!(check_reduction(2, 0, 4, Some(&ring), &from(0)), Ok(()));
    assert_eq!(check_reduction(2, 1, 3, Some(&ring), &from(0)), Ok(()));
    assert_eq!(check_reduction(2, 3, 4, Some(&ring), &from(0)), Ok(()));
    assert_eq!(check_reduction(0, 0, 3, Some(&ring), &from(2)), Ok(()));
    let refused = |worker: usize, step: u32, len: usize, process: usize, what: &str| {
        let error = check_reduction(worker, step, len, Some(&ring), &from(process)).expect_err("refused");
        assert!(error.contains(what), "{error}");
    };
    refused(2, 0, 3, 0, "with 3 values, not 4");
    refused(2, 4, 3, 0, "past the last");
    refused(2, 0, 4, 2, "not from the worker before it");
    refused(1, 0, 4, 0, "outside the ring");
    assert!(check_reduction(2, 0, 4, Some(&None), &from(0)).is_err());
    assert!(check_reduction(2, 0, 4, None, &from(0)).is_err());
}

/// A peer that proves the key and then sends bytes that are no packet ends the
/// cluster with an error naming it, without a panic.
#[test]
fn a_malformed_packet_ends_the_cluster_naming_its_sender() {
    let _one = NETWORK.lock().unwrap_or_else(|e| e.into_inner());
    let mut body = Vec::new();
    body.extend_from_slice(&wire::MAGIC.to_le_bytes());
    body.extend_from_slice(&1u32.to_le_bytes());
    body.extend_from_slice(&1u64.to_le_bytes());
    body.extend_from_slice(&1000u32.to_le_bytes());
    let (failure, addresses) = failure_when_process_1_sends(body);
    assert!(failure.contains(&format!("process 1 ({})", addresses[1])), "{failure}");
    assert!(failure.contains("1000 items announced"), "{failure}");
}

/// Only process 0 decides: a decision from process 1 ends the cluster naming it.
#[test]
fn a_decision_from_another_process_than_0_ends_the_cluster() {
    let _one = NETWORK.lock().unwrap_or_else(|e| e.into_inner());
    let mut body = Vec::new();
    wire::encode(1, 1, &[Item::Decision { words: vec![1, 0] }], &mut body);
    let (failure, addresses) = failure_when_process_1_sends(body);
    assert!(failure.contains(&format!("process 1 ({})", addresses[1])), "{failure}");
    assert!(failure.contains("only process 0 sends them"), "{failure}");
}

/// Process 1 runs for real, process 0 by hand: a decision process 0 sent is what
/// `agree` returns at that step; one of another length, or for another step, ends the
/// cluster with an error naming process 0; so does one mixed with other items.
#[test]
fn a_follower_agrees_to_process_0s_decision_and_refuses_a_wrong_one() {
    let _one = NETWORK.lock().unwrap_or_else(|e| e.into_inner());
    let decision = |run: u64, items: &[Item]| {
        let mut body = Vec::new();
        wire::encode(0, run, items, &mut body);
        body
    };
    let two_words = |run| decision(run, &[Item::Decision { words: vec![7, 9] }]);
    let cases: Vec<(Vec<Vec<u8>>, Option<&str>)> = vec![
        (vec![two_words(1), two_words(2)], None),
        (vec![decision(1, &[Item::Decision { words: vec![7] }])], Some("a decision of 1 words, not 2")),
        (vec![two_words(2)], Some("a decision for step 2 of its runs at step 1 of this one's")),
        (vec![decision(1, &[Item::Decision { words: vec![7, 9] }, Item::Heartbeat])], Some("among other items")),
    ];
    for (packets, wrong) in cases {
        let addresses = free_addresses(2);
        let key = b"test key".to_vec();
        let zero = net_spec(0, &addresses, &key);
        let listener = TcpListener::bind(&addresses[0]).unwrap();
        let sent = packets.len();
        let peer = std::thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let Ok((_, mut stream, _)) = handshake(stream, &zero, None, Instant::now()) else {
                panic!("the handshake fails")
            };
            for (sequence, body) in packets.iter().enumerate() {
                stream.write_all(&frame(0, 1, sequence as u64, body)).unwrap();
            }
            let mut rest = Vec::new();
            let _ = stream.read_to_end(&mut rest);
        });
        let cluster = connect(1, &addresses, &key);
        match wrong {
            None => {
                for _ in 0..sent {
                    assert_eq!(cluster.agree(&[0, 0]).unwrap(), [7, 9]);
                }
            }
            Some(what) => {
                let error = cluster.agree(&[0, 0]).unwrap_err().to_string();
                assert!(error.contains(&format!("process 0 ({})", addresses[0])), "{error}");
                assert!(error.contains(what), "{error}");
                // The cluster stays failed: the next step refuses at once.
                assert!(cluster.agree(&[0, 0]).is_err());
            }
        }
        drop(cluster);
        drop(peer);
    }
}

/// A peer's trace names only its own workers (process 1 of 2 over 5 workers runs 3 and
/// 4); its events move by the shift, none before 0.
#[test]
fn a_peer_trace_names_its_own_workers_and_moves_onto_the_clock() {
    let event = |worker, start_us| TraceEvent {
        worker,
        node: 0,
        kind: crate::trace::TraceKind::Forward,
        start_us,
        dur_ns: 1000,
        batch: 1,
        rows: 1,
        instances: 1,
        staleness: None,
    };
    assert!(check_trace(&[event(3, 0), event(4, 0)], 1, 2, 5).is_ok());
    let error = check_trace(&[event(3, 0), event(2, 0)], 1, 2, 5).unwrap_err();
    assert!(error.contains("worker 2, not one of its own"), "{error}");
    let mut events = vec![event(3, 10), event(3, 1_000)];
    shift_events(&mut events, -100);
    assert_eq!(events.iter().map(|e| e.start_us).collect::<Vec<_>>(), [0, 900]);
    shift_events(&mut events, 50);
    assert_eq!(events.iter().map(|e| e.start_us).collect::<Vec<_>>(), [50, 950]);
}
