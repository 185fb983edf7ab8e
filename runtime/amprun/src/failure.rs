//! How a run ends when it cannot finish: a message and the exit code that classifies it
//! (the table is in the crate header and in `--help`).

use amp_data::{DataError, DataErrorKind};
use amp_exec::{ExecError, OpError};
use amp_params::ParamsError;
use std::fmt;
use std::process::ExitCode;

/// The exit codes of `amprun`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// The model, graph, data or a parameter file is bad.
    BadInput = 1,
    /// Bad flags or values; a file that cannot be read or written.
    Usage = 2,
    /// A NaN or infinite loss stopped training.
    NonFiniteLoss = 3,
    /// A worker panicked or stalled.
    Executor = 4,
    /// Ctrl-C stopped training after an epoch (128 + SIGINT, as shells report it).
    Interrupted = 130,
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> ExitCode {
        ExitCode::from(exit as u8)
    }
}

/// Why a command stopped. `message` is empty when everything was printed already (compile
/// diagnostics).
#[derive(Debug)]
pub struct Failure {
    pub exit: Exit,
    pub message: String,
    /// The bad instance's error, when a data instance is why (its file, line and field).
    pub data: Option<Box<DataError>>,
}

impl Failure {
    pub fn new(exit: Exit, message: impl Into<String>) -> Failure {
        Failure { exit, message: message.into(), data: None }
    }

    pub fn usage(message: impl Into<String>) -> Failure {
        Failure::new(Exit::Usage, message)
    }

    pub fn bad_input(message: impl Into<String>) -> Failure {
        Failure::new(Exit::BadInput, message)
    }

    /// An exit whose reasons are already on the terminal.
    pub fn printed(exit: Exit) -> Failure {
        Failure::new(exit, String::new())
    }

    /// A file that cannot be read or written.
    pub fn io(action: &str, path: &std::path::Path, error: &std::io::Error) -> Failure {
        Failure::usage(format!("cannot {action} `{}`: {error}", path.display()))
    }

    /// A data error: unreadable files are usage errors, bad content is bad input.
    pub fn data(error: &DataError) -> Failure {
        match error.kind() {
            DataErrorKind::Io(_) | DataErrorKind::Options(_) => Failure::usage(error.to_string()),
            _ => Failure { data: Some(Box::new(error.clone())), ..Failure::bad_input(error.to_string()) },
        }
    }

    /// A parameter or checkpoint file error, `what` saying which file it was for.
    pub fn params(what: &str, error: &ParamsError) -> Failure {
        let message = format!("{what}: {error}");
        match error.root() {
            ParamsError::Io { .. } | ParamsError::Target { .. } => Failure::usage(message),
            _ => Failure::bad_input(message),
        }
    }

    /// An executor error; `locate` turns a run's instance index into `instance N (file:line)`.
    pub fn exec(error: &ExecError, locate: &dyn Fn(i64) -> String) -> Failure {
        match error {
            ExecError::NonFiniteLoss { instance, loss, node } => Failure::new(
                Exit::NonFiniteLoss,
                format!("loss of {} is {loss} (node %{node})", locate(*instance as i64)),
            ),
            ExecError::Node { error: OpError::Unsupported { op }, node, label, .. } => Failure::bad_input(format!(
                "the executor cannot run this model yet: node %{node} `{label}` uses op `{op}`, which it does not support"
            )),
            ExecError::Node { instance, .. } if *instance >= 0 => {
                Failure::bad_input(error.node_failure(&locate(*instance)).unwrap_or_else(|| error.to_string()))
            }
            ExecError::Node { .. } | ExecError::Unverified { .. } | ExecError::Params { .. } => {
                Failure::bad_input(error.to_string())
            }
            ExecError::Config { .. } => Failure::usage(error.to_string()),
            ExecError::WorkerPanic { .. } | ExecError::Stalled { .. } | ExecError::Leaked { .. } => {
                Failure::new(Exit::Executor, error.to_string())
            }
            // The executor is still growing: a failure it learns to report later ends the
            // run as an executor failure until it gets a code of its own.
            #[allow(unreachable_patterns)]
            _ => Failure::new(Exit::Executor, error.to_string()),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn executor_errors_map_to_their_exit_codes() {
        let locate = |i: i64| format!("instance {i} (train.jsonl:{})", i + 1);
        let unsupported = ExecError::Node {
            worker: 0,
            node: 7,
            label: "xs".into(),
            op: "flatmap",
            source: "".into(),
            instance: -1,
            error: OpError::Unsupported { op: "flatmap" },
        };
        let failure = Failure::exec(&unsupported, &locate);
        assert_eq!(failure.exit, Exit::BadInput);
        assert!(failure.message.contains("cannot run this model yet") && failure.message.contains("`flatmap`"));
        let out_of_range = ExecError::Node {
            worker: 1,
            node: 3,
            label: "embed".into(),
            op: "embedding",
            source: "list_reduce.amp:9:17".into(),
            instance: 4,
            error: OpError::OutOfRange { what: "embedding row", index: 99, len: 14 },
        };
        let failure = Failure::exec(&out_of_range, &locate);
        assert_eq!(failure.exit, Exit::BadInput);
        assert!(failure.message.contains("instance 4 (train.jsonl:5)"), "{}", failure.message);
        assert!(
            failure.message.contains("`embed` (embedding) at list_reduce.amp:9:17 on worker 1"),
            "{}",
            failure.message
        );
        let nan = ExecError::NonFiniteLoss { instance: 2, loss: f32::NAN, node: 9 };
        assert_eq!(Failure::exec(&nan, &locate).exit, Exit::NonFiniteLoss);
        let panic = ExecError::WorkerPanic { worker: 1, node: 3, label: "cell".into(), message: "boom".into() };
        let failure = Failure::exec(&panic, &locate);
        assert_eq!(failure.exit, Exit::Executor);
        assert!(failure.message.contains("worker 1") && failure.message.contains("%3"));
        let leaked = ExecError::Leaked { worker: 2, node: 5, label: "join".into(), held: 3 };
        let failure = Failure::exec(&leaked, &locate);
        assert_eq!(failure.exit, Exit::Executor);
        assert!(failure.message.contains("%5 `join` on worker 2"), "{}", failure.message);
        let config = ExecError::Config { message: "workers must be at least 1".into() };
        assert_eq!(Failure::exec(&config, &locate).exit, Exit::Usage);
    }
}
