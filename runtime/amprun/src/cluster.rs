//! Runs split over processes (`--processes`, docs/distributed.md): the flags, the local
//! launcher, and joining the cluster once the graph is known.
//!
//! Every process runs the same command: it reads the same data, makes the same runs in
//! the same order (epochs, validations), and runs its range of the workers
//! (`amp_ir::placement::workers_of`); process 0 runs the controller, so it alone sees the losses
//! and writes metrics, checkpoints and traces. The others print nothing but errors.
//!
//! `--processes P` alone is the launcher: this process is process 0; it picks P free
//! loopback ports, writes them to a temporary hostfile, generates a key, and starts P - 1
//! children of the same binary with the same arguments plus `--process I --hostfile
//! FILE`, the key in their environment ([`KEY_ENV`]); their standard error comes out on
//! this one's, each line prefixed with `process I: `.

use crate::cli::ExecArgs;
use crate::failure::{Exit, Failure};
use amp_exec::{Cluster, ClusterSpec, ExecConfig};
use amp_ir::placement::MAX_RUN_PROCESSES;
use amp_ir::verify::Verified;
use amp_net::timely::TimelyLink;
use amp_net::NetSpec;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// The environment variable through which the launcher hands its children the cluster
/// key (hex).
pub const KEY_ENV: &str = "AMPRUN_CLUSTER_KEY";

/// The most bytes of a `--cluster-key` file.
const MAX_KEY_BYTES: u64 = 1 << 16;

/// The most lines of a hostfile.
const MAX_HOSTS: usize = 256;

/// The most bytes of a hostfile (its comments included).
const MAX_HOSTFILE_BYTES: u64 = 1 << 20;

enum State {
    /// One process (no `--processes`, or 1).
    Single,
    /// Split, not yet connected (the graph is not known yet).
    Pending {
        process: usize,
        addresses: Vec<String>,
        key: Vec<u8>,
        connect_timeout: Duration,
    },
    Joined(Cluster),
}

static STATE: Mutex<State> = Mutex::new(State::Single);
static CHILDREN: Mutex<Vec<(usize, Child)>> = Mutex::new(Vec::new());
static HOSTFILE: Mutex<Option<PathBuf>> = Mutex::new(None);
static FOLLOWER: AtomicBool = AtomicBool::new(false);

/// Whether this process is one of a split run's followers (not process 0): it writes and
/// prints nothing but errors.
pub fn follower() -> bool {
    FOLLOWER.load(Ordering::Relaxed)
}

/// Reads the cluster flags; as the launcher, starts the children.
pub fn prepare(args: &ExecArgs) -> Result<(), Failure> {
    let Some(processes) = args.processes.map(usize::from).filter(|&p| p > 1) else {
        return Ok(());
    };
    // Refused before any child starts (the executor's own limit, `Cluster::start`).
    if processes > MAX_RUN_PROCESSES {
        return Err(Failure::usage(format!(
            "--processes {processes}: at most {MAX_RUN_PROCESSES} processes are supported today \
             (docs/distributed.md, Limits today)"
        )));
    }
    if processes > args.workers() {
        return Err(Failure::usage(format!(
            "--processes {processes} needs at least as many --workers (there are {})",
            args.workers()
        )));
    }
    let connect_timeout = Duration::from_secs_f64(args.connect_timeout);
    let state = match (args.process, &args.hostfile) {
        (Some(process), Some(hostfile)) => {
            let process = usize::from(process);
            let addresses = read_hostfile(hostfile)?;
            if addresses.len() != processes {
                return Err(Failure::usage(format!(
                    "--processes {processes}, but `{}` lists {} host(s)",
                    hostfile.display(),
                    addresses.len()
                )));
            }
            if process >= processes {
                return Err(Failure::usage(format!("--process {process} is not below --processes {processes}")));
            }
            let key = read_key(args)?;
            FOLLOWER.store(process != 0, Ordering::Relaxed);
            State::Pending { process, addresses, key, connect_timeout }
        }
        _ => launch(processes, connect_timeout)?,
    };
    if let Ok(mut slot) = STATE.lock() {
        *slot = state;
    }
    Ok(())
}

fn read_hostfile(path: &PathBuf) -> Result<Vec<String>, Failure> {
    // Read with a bound: an endless file (`/dev/zero`) is refused after its first
    // MAX_HOSTFILE_BYTES.
    let file = std::fs::File::open(path).map_err(|e| Failure::io("read the hostfile", path, &e))?;
    let mut bytes = Vec::new();
    std::io::Read::take(file, MAX_HOSTFILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Failure::io("read the hostfile", path, &e))?;
    if bytes.len() as u64 > MAX_HOSTFILE_BYTES {
        return Err(Failure::usage(format!(
            "the hostfile `{}` is longer than {MAX_HOSTFILE_BYTES} bytes",
            path.display()
        )));
    }
    let text = String::from_utf8(bytes)
        .map_err(|_| Failure::usage(format!("the hostfile `{}` is not UTF-8 text", path.display())))?;
    let mut hosts = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let port_ok = line.rsplit_once(':').is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
        if !port_ok {
            return Err(Failure::usage(format!("{}:{}: `{line}` is not host:port", path.display(), i + 1)));
        }
        if hosts.len() == MAX_HOSTS {
            return Err(Failure::usage(format!("{}: more than {MAX_HOSTS} hosts", path.display())));
        }
        hosts.push(line.to_string());
    }
    Ok(hosts)
}

fn read_key(args: &ExecArgs) -> Result<Vec<u8>, Failure> {
    if let Some(path) = &args.cluster_key {
        let file = std::fs::File::open(path).map_err(|e| Failure::io("read the cluster key", path, &e))?;
        let mut key = Vec::new();
        std::io::Read::take(file, MAX_KEY_BYTES + 1)
            .read_to_end(&mut key)
            .map_err(|e| Failure::io("read the cluster key", path, &e))?;
        if key.is_empty() || key.len() as u64 > MAX_KEY_BYTES {
            return Err(Failure::usage(format!(
                "the cluster key `{}` must hold 1 to {MAX_KEY_BYTES} bytes",
                path.display()
            )));
        }
        return Ok(key);
    }
    match std::env::var(KEY_ENV) {
        Ok(hex) => from_hex(&hex).ok_or_else(|| Failure::usage(format!("{KEY_ENV} is not a hex key"))),
        Err(_) => Err(Failure::usage(
            "a process of a split run needs the cluster's key: --cluster-key FILE (the same file on every host)",
        )),
    }
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn from_hex(text: &str) -> Option<Vec<u8>> {
    let text = text.trim();
    if text.is_empty() || !text.len().is_multiple_of(2) || text.len() > 2 * MAX_KEY_BYTES as usize {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| text.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok())).collect()
}

/// The launcher: free loopback ports, a hostfile, a key, and the children.
fn launch(processes: usize, connect_timeout: Duration) -> Result<State, Failure> {
    // Each port is held until all are chosen, so that no two are the same; another
    // program could still take one before its process listens (it then fails to start).
    let listeners: Vec<TcpListener> = (0..processes)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<_, _>>()
        .map_err(|e| Failure::usage(format!("cannot find a free loopback port: {e}")))?;
    let addresses: Vec<String> = listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.to_string()))
        .collect::<Result<_, _>>()
        .map_err(|e| Failure::usage(format!("cannot find a free loopback port: {e}")))?;
    drop(listeners);
    let mut key = [0u8; 32];
    getrandom::fill(&mut key).map_err(|e| Failure::usage(format!("cannot generate a cluster key: {e}")))?;
    let mut nonce = [0u8; 8];
    getrandom::fill(&mut nonce).map_err(|e| Failure::usage(format!("cannot generate a file name: {e}")))?;
    let hostfile = std::env::temp_dir().join(format!("amprun-hosts-{}-{}.txt", std::process::id(), to_hex(&nonce)));
    std::fs::write(&hostfile, addresses.join("\n") + "\n").map_err(|e| Failure::io("write", &hostfile, &e))?;
    if let Ok(mut slot) = HOSTFILE.lock() {
        *slot = Some(hostfile.clone());
    }
    let exe = std::env::current_exe().map_err(|e| Failure::usage(format!("cannot find this program's binary: {e}")))?;
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    for (process, address) in addresses.iter().enumerate().skip(1) {
        let mut child = Command::new(&exe)
            .args(&args)
            .arg("--process")
            .arg(process.to_string())
            .arg("--hostfile")
            .arg(&hostfile)
            .env(KEY_ENV, to_hex(&key))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| Failure::usage(format!("cannot start process {process}: {e}")))?;
        eprintln!("amprun: process {process} is pid {} on {address}", child.id());
        if let Some(stderr) = child.stderr.take() {
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    let mut err = std::io::stderr().lock();
                    let _ = writeln!(err, "process {process}: {line}");
                }
            });
        }
        if let Ok(mut children) = CHILDREN.lock() {
            children.push((process, child));
        }
    }
    Ok(State::Pending { process: 0, addresses, key: key.to_vec(), connect_timeout })
}

/// Connects this process to the others (once), before its executor starts: the
/// fingerprint is the hash of this binary and of the graph, so processes that differ in
/// either refuse to run together.
pub fn join(config: &ExecConfig, graph: &Verified) -> Result<Option<Cluster>, Failure> {
    let mut state = STATE.lock().map_err(|_| Failure::new(Exit::Executor, "the cluster state is poisoned"))?;
    let cluster = match &*state {
        State::Single => return Ok(None),
        State::Joined(cluster) => cluster.clone(),
        State::Pending { process, addresses, key, connect_timeout } => {
            let exe = std::env::current_exe().and_then(std::fs::read);
            let exe = exe.map_err(|e| Failure::usage(format!("cannot read this program's binary to hash it: {e}")))?;
            // The binary (tens of MB) through SipHash: a fingerprint catches mismatched
            // builds, not adversaries (the key keeps those out), and SHA3 in software took
            // seconds per process.
            let mut sip = std::hash::DefaultHasher::new();
            std::hash::Hasher::write(&mut sip, &exe);
            let mut binary = (exe.len() as u64).to_le_bytes().to_vec();
            binary.extend_from_slice(&std::hash::Hasher::finish(&sip).to_le_bytes());
            let mut fingerprint = vec![
                ("binary".to_string(), binary),
                ("graph".to_string(), amp_ir::ampg::write(graph, None)),
                ("--workers".to_string(), config.workers.to_le_bytes().to_vec()),
            ];
            fingerprint.extend(settings(std::env::args_os()));
            let spec = NetSpec {
                process: *process,
                addresses: addresses.clone(),
                key: key.clone(),
                fingerprint,
                connect_timeout: *connect_timeout,
            };
            let failed = |e: String| Failure::new(Exit::Executor, e);
            let connected =
                amp_net::connect(&spec, &mut |refusal| eprintln!("amp cluster: {refusal}")).map_err(|e| failed(e.0))?;
            let link = TimelyLink::start(connected.sockets, *process).map_err(|e| failed(e.0))?;
            let bridge = ClusterSpec::new(*process, addresses.clone());
            let cluster = Cluster::start(Box::new(link), bridge, connected.base, connected.offset_us)
                .map_err(|e| Failure::new(Exit::Executor, e.to_string()))?;
            *state = State::Joined(cluster.clone());
            cluster
        }
    };
    Ok(Some(cluster))
}

/// Flags that may differ between the processes of a run: where this process is and how
/// it joins (the model's path too: its graph is compared).
const LOCAL_FLAGS: [&str; 6] = ["path", "process", "hostfile", "cluster_key", "connect_timeout", "help"];

/// Files only process 0 writes: whether each is given changes what every process does
/// (`--save` gathers the parameters), the path does not.
const OUTPUT_FLAGS: [&str; 7] = ["save", "keep_best", "metrics", "trace", "profile", "output", "out"];

/// Files every process reads: the same paths on every host; their sizes are compared (a
/// different file of another size is caught, one of the same size is not).
const INPUT_FLAGS: [&str; 7] = ["data", "valid", "vocab", "plan_profile", "init", "init_embedding", "params"];

/// The settings of the command line `args` (this program's name first) that must be the
/// same in every process, each a named part of the fingerprint: the command, then every
/// flag of its subcommand in their declared order, given or not (its values as given, or
/// its default), so two processes list the same parts and a mismatch names the flag.
/// Flags that locate this process ([`LOCAL_FLAGS`]) are left out; output files count by
/// whether they are given, input files by their sizes.
pub fn settings(args: impl IntoIterator<Item = std::ffi::OsString>) -> Vec<(String, Vec<u8>)> {
    use clap::CommandFactory;
    let command = crate::cli::Cli::command();
    let Ok(matches) = command.clone().try_get_matches_from(args) else { return Vec::new() };
    let Some((name, sub)) = matches.subcommand() else { return Vec::new() };
    let mut parts = vec![("command".to_string(), name.as_bytes().to_vec())];
    let Some(definition) = command.find_subcommand(name) else { return parts };
    for arg in definition.get_arguments() {
        let id = arg.get_id().as_str();
        if LOCAL_FLAGS.contains(&id) {
            continue;
        }
        let flag = match (arg.get_long(), arg.get_short()) {
            (Some(long), _) => format!("--{long}"),
            (None, Some(short)) => format!("-{short}"),
            (None, None) => id.to_string(),
        };
        let values: Vec<std::ffi::OsString> = sub
            .try_get_raw(id)
            .ok()
            .flatten()
            .map(|v| v.map(std::ffi::OsStr::to_os_string).collect())
            .unwrap_or_default();
        let given = sub.value_source(id).is_some_and(|s| s == clap::parser::ValueSource::CommandLine);
        let mut part = Vec::new();
        if OUTPUT_FLAGS.contains(&id) {
            part.push(u8::from(given));
        } else if INPUT_FLAGS.contains(&id) {
            for value in &values {
                // `NAME=FILE` (`--init-embedding`): the name as given, the file's size.
                let text = value.to_string_lossy();
                let (name, file) = text.split_once('=').filter(|_| id == "init_embedding").unwrap_or(("", &text));
                let size = std::fs::metadata(file).map_or(u64::MAX, |m| m.len());
                part.extend_from_slice(name.as_bytes());
                part.push(0);
                part.extend_from_slice(&size.to_le_bytes());
            }
        } else {
            // A flag without a value (`--async`) counts by whether it is given.
            part.push(u8::from(given));
            for value in &values {
                part.extend_from_slice(value.as_encoded_bytes());
                part.push(0);
            }
        }
        parts.push((flag, part));
    }
    parts
}

/// After the command: leaves the cluster, and as the launcher waits for the children
/// (ended at once when this process failed). A failure of the cluster or of a child
/// becomes the run's when the command itself succeeded.
pub fn finish(result: Result<(), Failure>) -> Result<(), Failure> {
    let joined = STATE.lock().ok().and_then(|mut s| match std::mem::replace(&mut *s, State::Single) {
        State::Joined(cluster) => Some(cluster),
        _ => None,
    });
    let mut result = result;
    if let Some(cluster) = joined {
        // A failed process leaves at once: the others see it lost.
        if result.is_ok() {
            if let Err(e) = cluster.shutdown() {
                result = Err(Failure::new(Exit::Executor, e.to_string()));
            }
        }
    }
    let children = CHILDREN.lock().map(|mut c| std::mem::take(&mut *c)).unwrap_or_default();
    for (process, mut child) in children {
        if result.is_err() {
            let _ = child.kill();
        }
        let status = child.wait();
        let failed = status.as_ref().map_or(true, |s| !s.success());
        if failed && result.is_ok() {
            let how = status.map_or_else(|e| e.to_string(), |s| s.to_string());
            result = Err(Failure::new(Exit::Executor, format!("process {process} failed ({how})")));
        }
    }
    // Its children read the hostfile when they started.
    if let Some(path) = HOSTFILE.lock().ok().and_then(|mut h| h.take()) {
        let _ = std::fs::remove_file(path);
    }
    // The children's output threads print what is left.
    std::thread::sleep(Duration::from_millis(20));
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(line: &str) -> Vec<(String, Vec<u8>)> {
        settings(line.split_whitespace().map(std::ffi::OsString::from))
    }

    /// Issue 48, finding 3: only the binary, the graph and `--workers` were compared, so
    /// processes that differed in `--save`, `--lr`, `--seed`, `--limit`, `--epochs` or
    /// `--async` ran together. Each is a part of the fingerprint now, named when it
    /// differs; where this process is, and how it joins, is not.
    #[test]
    fn the_fingerprint_covers_every_setting_and_names_it() {
        let base = "amprun train m.amp --data /dev/null --workers 2 --processes 2";
        let differing = |a: &str, b: &str| -> Vec<String> {
            let (a, b) = (parts(&format!("{base} {a}")), parts(&format!("{base} {b}")));
            assert_eq!(a.len(), b.len(), "every process lists the same parts");
            a.iter().zip(&b).filter(|(x, y)| x.1 != y.1).map(|(x, _)| x.0.clone()).collect()
        };
        assert_eq!(differing("--save c.st", ""), ["--save"]);
        assert_eq!(differing("--save c.st", "--save other/c.st"), Vec::<String>::new());
        assert_eq!(differing("--lr 0.1", "--lr 0.2"), ["--lr"]);
        assert_eq!(differing("--seed 1", ""), ["--seed"]);
        assert_eq!(differing("--limit 5", "--limit 6"), ["--limit"]);
        assert_eq!(differing("--epochs 3", ""), ["--epochs"]);
        assert_eq!(differing("--async", ""), ["--async"]);
        assert_eq!(differing("--lr 0.1 --async", "--lr 0.2"), ["--async", "--lr"]);
        // Where this process is, and how it joins, may differ.
        let here = "--process 0 --hostfile a.txt --cluster-key a.key --connect-timeout 5";
        let there = "--process 1 --hostfile b.txt --cluster-key b.key";
        assert_eq!(differing(here, there), Vec::<String>::new());
        assert!(parts("amprun train").is_empty(), "a command line that does not parse lists nothing");
    }

    #[test]
    fn keys_cross_the_environment_as_hex() {
        let key = [0u8, 1, 0xab, 0xff];
        assert_eq!(from_hex(&to_hex(&key)).as_deref(), Some(&key[..]));
        assert_eq!(from_hex("abc"), None);
        assert_eq!(from_hex("zz"), None);
        assert_eq!(from_hex(""), None);
    }
}
