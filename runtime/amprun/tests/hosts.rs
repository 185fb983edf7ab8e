//! Runs across hosts (docs/distributed.md): two `amprun` processes started by hand with a
//! hostfile, as on two machines. Over distinct loopback addresses (127.0.0.2 and
//! 127.0.0.3), over a hostname (`localhost`), and over two network namespaces joined by a
//! veth pair that the test makes and removes (10.231.7.1 and 10.231.7.2; as root only,
//! otherwise the test says it was skipped). The runs train as one process does; settings
//! that differ are refused by name; a cut link, a frozen peer and a peer with the wrong
//! key end every process within 30 s, naming the peer. Nothing here talks to any other
//! address, and every wait is bounded.

mod common;

use common::*;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

/// The most a test waits for a process to end.
const LIMIT: Duration = Duration::from_secs(120);

/// Two network namespaces joined by a veth pair, removed when dropped (removing a
/// namespace removes its end of the pair).
struct Namespaces {
    names: [String; 2],
    links: [String; 2],
}

impl Namespaces {
    const ADDRESSES: [&'static str; 2] = ["10.231.7.1", "10.231.7.2"];

    /// Makes them, or says why it cannot (not root, no `ip`).
    fn make(tag: &str) -> Option<Namespaces> {
        let id = std::process::id() % 100_000;
        let names = [format!("amp{id}{tag}a"), format!("amp{id}{tag}b")];
        let links = [format!("a{id}{tag}0"), format!("a{id}{tag}1")];
        let made = Namespaces { names, links };
        let ip =
            |args: &[&str]| Command::new("ip").args(args).stderr(Stdio::null()).status().is_ok_and(|s| s.success());
        let (a, b) = (&made.names[0], &made.names[1]);
        let (la, lb) = (&made.links[0], &made.links[1]);
        if !ip(&["netns", "add", a]) {
            skipped(&format!("hosts ({tag})"), "cannot make a network namespace (this needs root and `ip`)");
            return None;
        }
        let steps: [Vec<&str>; 9] = [
            vec!["netns", "add", b],
            vec!["link", "add", la, "type", "veth", "peer", "name", lb],
            vec!["link", "set", la, "netns", a],
            vec!["link", "set", lb, "netns", b],
            vec!["-n", a, "addr", "add", "10.231.7.1/24", "dev", la],
            vec!["-n", b, "addr", "add", "10.231.7.2/24", "dev", lb],
            vec!["-n", a, "link", "set", la, "up"],
            vec!["-n", b, "link", "set", lb, "up"],
            vec!["-n", a, "link", "set", "lo", "up"],
        ];
        for step in &steps {
            assert!(ip(step), "ip {step:?} failed");
        }
        Some(made)
    }

    /// Cuts the link (both ends down).
    fn cut(&self) {
        for (ns, link) in self.names.iter().zip(&self.links) {
            let down = Command::new("ip").args(["-n", ns, "link", "set", link, "down"]).status();
            assert!(down.is_ok_and(|s| s.success()), "the link goes down");
        }
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for name in &self.names {
            let _ = Command::new("ip").args(["netns", "del", name]).stderr(Stdio::null()).status();
        }
        let _ = Command::new("ip").args(["link", "del", &self.links[0]]).stderr(Stdio::null()).status();
    }
}

/// A free port on `address` (bound and released).
fn free_port(address: &str) -> u16 {
    let listener = std::net::TcpListener::bind((address, 0)).expect("a free port");
    listener.local_addr().expect("its address").port()
}

/// One process of a run, its standard error read line by line.
struct Process {
    child: Child,
    lines: Receiver<String>,
    seen: Vec<String>,
}

impl Process {
    /// Starts `amprun args` in `dir`, in namespace `ns` when given.
    fn start(dir: &Path, ns: Option<&str>, args: &[String]) -> Process {
        let binary = env!("CARGO_BIN_EXE_amprun");
        let mut command = match ns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, binary]);
                c
            }
            None => Command::new(binary),
        };
        let mut child = command
            .args(args)
            .current_dir(dir)
            .env_remove("RUST_BACKTRACE")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("amprun starts");
        let (send, lines) = channel();
        let stderr = child.stderr.take().expect("stderr");
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = send.send(line);
            }
        });
        Process { child, lines, seen: Vec::new() }
    }

    /// Waits (at most `limit`) for a line of standard error that starts with `prefix`.
    fn wait_for(&mut self, prefix: &str, limit: Duration) -> bool {
        let until = Instant::now() + limit;
        while let Ok(line) = self.lines.recv_timeout(until.saturating_duration_since(Instant::now())) {
            let found = line.starts_with(prefix);
            self.seen.push(line);
            if found {
                return true;
            }
        }
        false
    }

    /// Waits at most `limit` for the process to end (killed past it: a hang fails the
    /// test); its status, standard output and standard error, and how long it took.
    fn finish(mut self, limit: Duration) -> (ExitStatus, String, String, Duration) {
        let started = Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                break status;
            }
            if started.elapsed() > limit {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("the process did not end within {limit:?}:\n{}", self.seen.join("\n"));
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let took = started.elapsed();
        let mut out = String::new();
        if let Some(mut stdout) = self.child.stdout.take() {
            let _ = stdout.read_to_string(&mut out);
        }
        // The reader thread ends with the process's standard error.
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(5)) {
            self.seen.push(line);
        }
        (status, out, self.seen.join("\n"), took)
    }

    fn signal(&self, signal: &str) {
        let sent = Command::new("kill").args([signal, &self.child.id().to_string()]).status();
        assert!(sent.is_ok_and(|s| s.success()), "kill {signal}");
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// List-reduce's training command over two processes, a worker each (round-robin, so
/// every instance crosses), with `extra` flags.
fn command(process: usize, key: &str, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "train",
        &example("list_reduce.amp"),
        "-D",
        "hidden=16",
        "--data",
        &example("data/list_reduce.train.jsonl"),
        "--workers",
        "2",
        "--plan",
        "round-robin",
        "--optimizer",
        "adam",
        "--min-update-frequency",
        "4",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    let process = process.to_string();
    args.extend(
        ["--processes", "2", "--process", &process, "--hostfile", "hosts.txt", "--cluster-key", key].map(String::from),
    );
    args
}

/// Writes the hostfile and the keys.
fn prepare(dir: &Path, hosts: [String; 2]) {
    std::fs::write(dir.join("hosts.txt"), format!("{}\n{}\n", hosts[0], hosts[1])).expect("hostfile");
    std::fs::write(dir.join("a.key"), "the right key").expect("key");
    std::fs::write(dir.join("b.key"), "a wrong key").expect("key");
}

/// The per-epoch training losses in a metrics file.
fn losses(path: &Path) -> Vec<f64> {
    let text = std::fs::read_to_string(path).expect("metrics");
    json_lines(&text).iter().filter(|m| m["split"] == "train").map(|m| m["loss"].as_f64().expect("a loss")).collect()
}

/// Trains list-reduce over two processes at `hosts` (in namespaces `ns` when given) and
/// in one process, and checks that the losses and the checkpoint agree, and that process 1
/// prints nothing (issue 48, finding 10: it printed "train loss NaN" and a checkpoint it
/// never wrote).
fn trains_as_one_process(test: &str, hosts: [String; 2], ns: [Option<&str>; 2]) {
    let dir = scratch(test);
    let dir = dir.path();
    prepare(dir, hosts);
    let run = ["--limit", "24", "--epochs", "2"];
    let mut extra = run.to_vec();
    extra.extend(["--save", "two.safetensors", "--metrics", "two.jsonl"]);
    let zero = Process::start(dir, ns[0], &command(0, "a.key", &extra));
    let one = Process::start(dir, ns[1], &command(1, "a.key", &extra));
    let (s1, out1, err1, _) = one.finish(LIMIT);
    let (s0, out0, err0, _) = zero.finish(LIMIT);
    assert!(s0.success() && s1.success(), "process 0: {s0}\n{err0}\nprocess 1: {s1}\n{err1}");
    assert!(out0.contains("checkpoint  two.safetensors"), "{out0}");
    assert_eq!(out1, "", "process 1 prints no summary");
    assert_eq!(err1, "", "process 1 prints nothing but errors");
    let mut single: Vec<String> = command(0, "a.key", &run).into_iter().take_while(|a| a != "--processes").collect();
    single.extend(["--save", "one.safetensors", "--metrics", "one.jsonl"].map(String::from));
    let single: Vec<&str> = single.iter().map(String::as_str).collect();
    amprun_ok(dir, &single);
    let (a, b) = (losses(&dir.join("one.jsonl")), losses(&dir.join("two.jsonl")));
    assert_eq!(a.len(), 2);
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(&b) {
        assert!((x - y).abs() <= 1e-5 * x.abs().max(1.0), "losses {a:?} in one process, {b:?} in two");
    }
    let graph = compile_example("list_reduce", &[("hidden", 16)]);
    let (a, b) = (checkpoint(&dir.join("one.safetensors"), &graph), checkpoint(&dir.join("two.safetensors"), &graph));
    assert_eq!(a.metadata, b.metadata);
    assert_params_agree(&a.params, &b.params, 1.0, ("in one process", "in two"));
}

/// Issue 48, finding 1: a hostfile of 127.0.0.2 and 127.0.0.3 (reported to hang).
#[test]
fn two_processes_on_distinct_loopback_addresses_train_as_one() {
    let hosts = [format!("127.0.0.2:{}", free_port("127.0.0.2")), format!("127.0.0.3:{}", free_port("127.0.0.3"))];
    trains_as_one_process("hosts-loopback", hosts, [None, None]);
}

/// A hostname in the hostfile is resolved to listen and to connect.
#[test]
fn a_hostname_in_the_hostfile_is_resolved() {
    let hosts = [format!("localhost:{}", free_port("127.0.0.1")), format!("localhost:{}", free_port("127.0.0.1"))];
    trains_as_one_process("hosts-name", hosts, [None, None]);
}

/// Two namespaces, a veth pair between them: two hosts as far as the processes can tell.
#[test]
fn two_network_namespaces_train_as_one_process() {
    let Some(ns) = Namespaces::make("t") else { return };
    let hosts = Namespaces::ADDRESSES.map(|a| format!("{a}:7100"));
    trains_as_one_process("hosts-netns", hosts, [Some(&ns.names[0]), Some(&ns.names[1])]);
}

/// Issue 48, finding 3: processes whose settings differ ran together (`--lr`: each
/// trained at its own rate, without a word; `--save` on process 0 only: process 0 waited
/// for ever). Each process now refuses the other at connect, naming the setting.
#[test]
fn settings_that_differ_are_refused_by_name() {
    let dir = scratch("hosts-settings");
    let dir = dir.path();
    for (zero, one, named) in [
        (vec!["--lr", "0.1"], vec!["--lr", "0.2"], "runs with another --lr"),
        (vec!["--save", "c.safetensors"], vec![], "runs with another --save"),
        (vec!["--epochs", "3"], vec!["--epochs", "2"], "runs with another --epochs"),
    ] {
        prepare(
            dir,
            [format!("127.0.0.1:{}", free_port("127.0.0.1")), format!("127.0.0.1:{}", free_port("127.0.0.1"))],
        );
        let mut zero = [vec!["--limit", "8"], zero].concat();
        zero.extend(["--connect-timeout", "20"]);
        let zero = Process::start(dir, None, &command(0, "a.key", &zero));
        let one = Process::start(dir, None, &command(1, "a.key", &[vec!["--limit", "8"], one].concat()));
        let (s1, _, err1, _) = one.finish(LIMIT);
        let (s0, _, err0, _) = zero.finish(LIMIT);
        assert_eq!(s0.code(), Some(4), "{err0}");
        assert_eq!(s1.code(), Some(4), "{err1}");
        assert!(err0.contains("process 1 (127.0.0.1:") && err0.contains(named), "{err0}");
        assert!(err1.contains("process 0 (127.0.0.1:") && err1.contains(named), "{err1}");
        assert!(!dir.join("c.safetensors").exists());
    }
}

/// Starts a long run over the namespaces, with a checkpoint after every epoch, and waits
/// for process 0's first epoch.
fn long_run(ns: &Namespaces, dir: &Path) -> (Process, Process) {
    prepare(dir, Namespaces::ADDRESSES.map(|a| format!("{a}:7100")));
    let extra = ["--limit", "30", "--epochs", "1000", "--save", "c.safetensors"];
    let mut zero = Process::start(dir, Some(&ns.names[0]), &command(0, "a.key", &extra));
    let one = Process::start(dir, Some(&ns.names[1]), &command(1, "a.key", &extra));
    assert!(zero.wait_for("epoch 1/", LIMIT), "the run trains:\n{}", zero.seen.join("\n"));
    (zero, one)
}

/// Build item 2: the link cut mid-epoch ends both processes within 30 s, non-zero, each
/// naming the peer it lost, and the last checkpoint loads.
#[test]
fn a_cut_link_ends_both_processes_naming_the_peer() {
    let Some(ns) = Namespaces::make("c") else { return };
    let dir = scratch("hosts-cut");
    let dir = dir.path();
    let (zero, one) = long_run(&ns, dir);
    ns.cut();
    let bound = Duration::from_secs(30);
    let (s0, _, err0, t0) = zero.finish(LIMIT);
    let (s1, _, err1, t1) = one.finish(LIMIT);
    assert!(t0 < bound && t1 < bound, "ended after {t0:?} and {t1:?}");
    assert_eq!(s0.code(), Some(4), "{err0}");
    assert_eq!(s1.code(), Some(4), "{err1}");
    assert!(err0.contains("lost process 1 (10.231.7.2:7100)"), "{err0}");
    assert!(err1.contains("lost process 0 (10.231.7.1:7100)"), "{err1}");
    let graph = compile_example("list_reduce", &[("hidden", 16)]);
    let saved = checkpoint(&dir.join("c.safetensors"), &graph);
    assert!(
        saved.metadata.get("epoch").is_some_and(|e| e.parse::<u64>().is_ok_and(|e| e >= 1)),
        "{:?}",
        saved.metadata
    );
}

/// Build item 2: a peer frozen with SIGSTOP is lost through its silence: process 0 ends
/// within 30 s naming it; thawed, process 1 finds process 0 gone and ends too.
#[test]
fn a_frozen_peer_is_lost_through_its_silence() {
    let Some(ns) = Namespaces::make("s") else { return };
    let dir = scratch("hosts-stop");
    let dir = dir.path();
    let (zero, one) = long_run(&ns, dir);
    one.signal("-STOP");
    let (s0, _, err0, t0) = zero.finish(LIMIT);
    one.signal("-CONT");
    let (s1, _, err1, t1) = one.finish(LIMIT);
    assert!(t0 < Duration::from_secs(30) && t1 < Duration::from_secs(30), "ended after {t0:?} and {t1:?}");
    assert_eq!(s0.code(), Some(4), "{err0}");
    assert!(err0.contains("lost process 1 (10.231.7.2:7100)"), "{err0}");
    assert!(!s1.success(), "{err1}");
    assert!(err1.contains("process 0 (10.231.7.1:7100)"), "{err1}");
}

/// Build item 2: a peer restarted with a wrong key is refused by name at connect, and a
/// process 0 that never sees the right one ends after `--connect-timeout`, naming it.
#[test]
fn a_peer_with_a_wrong_key_is_refused_at_connect() {
    let Some(ns) = Namespaces::make("k") else { return };
    let dir = scratch("hosts-key");
    let dir = dir.path();
    prepare(dir, Namespaces::ADDRESSES.map(|a| format!("{a}:7100")));
    let zero =
        Process::start(dir, Some(&ns.names[0]), &command(0, "a.key", &["--limit", "8", "--connect-timeout", "5"]));
    let one = Process::start(dir, Some(&ns.names[1]), &command(1, "b.key", &["--limit", "8"]));
    let (s1, _, err1, t1) = one.finish(LIMIT);
    let (s0, _, err0, t0) = zero.finish(LIMIT);
    assert!(t0 < Duration::from_secs(30) && t1 < Duration::from_secs(30), "ended after {t0:?} and {t1:?}");
    assert_eq!(s1.code(), Some(4), "{err1}");
    assert!(err1.contains("process 0 at 10.231.7.1:7100: it did not prove the cluster key"), "{err1}");
    assert_eq!(s0.code(), Some(4), "{err0}");
    assert!(err0.contains("did not prove the cluster key"), "{err0}");
    assert!(err0.contains("process 1 (10.231.7.2:7100) did not connect within 5s"), "{err0}");
}
