//! What a run tells its user: a progress bar on a terminal (one plain line per epoch
//! otherwise), JSON-lines metrics, Chrome traces, and the lines of the summary.

use crate::failure::Failure;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::{json, Map, Value};
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};

/// One report: a training epoch or an evaluation.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// `train`, `valid` or `eval`.
    pub split: &'static str,
    /// The epoch (1-based) the report belongs to.
    pub epoch: u64,
    pub instances: usize,
    /// Mean loss per instance.
    pub loss: f32,
    /// Share of correctly classified instances, when the model classifies.
    pub accuracy: Option<f32>,
    pub instances_per_s: f64,
    /// Seconds since the run started.
    pub elapsed_s: f64,
    /// Parameter-group updates applied (training only).
    pub updates: Option<u64>,
    /// The epoch's learning rate (training only; `--lr-schedule`).
    pub lr: Option<f32>,
}

impl Report {
    /// The metrics object: `split`, `epoch`, `instances`, `loss`, `accuracy` (when the
    /// model classifies), `instances_per_s`, `elapsed_s`, and `updates` and `lr` for
    /// training.
    pub fn to_json(&self) -> Value {
        let mut object = Map::new();
        object.insert("split".into(), json!(self.split));
        object.insert("epoch".into(), json!(self.epoch));
        object.insert("instances".into(), json!(self.instances));
        object.insert("loss".into(), finite(f64::from(self.loss)));
        if let Some(accuracy) = self.accuracy {
            object.insert("accuracy".into(), finite(f64::from(accuracy)));
        }
        object.insert("instances_per_s".into(), finite(self.instances_per_s));
        object.insert("elapsed_s".into(), finite(self.elapsed_s));
        if let Some(updates) = self.updates {
            object.insert("updates".into(), json!(updates));
        }
        if let Some(lr) = self.lr {
            object.insert("lr".into(), finite(f64::from(lr)));
        }
        Value::Object(object)
    }

    /// `loss 1.2345 acc 56.7%`.
    pub fn scores(&self) -> String {
        match self.accuracy {
            Some(accuracy) => format!("loss {:.4} acc {:.1}%", self.loss, 100.0 * accuracy),
            None => format!("loss {:.4}", self.loss),
        }
    }
}

/// The metrics object that starts a run (`split: "run"`, before its epochs; a resumed run
/// adds its own): what ran, built from what, where. `amprun report` shows it.
pub fn run_json(model: &str) -> Value {
    json!({
        "split": "run",
        "model": model,
        "command": std::env::args().collect::<Vec<_>>(),
        "amprun": env!("CARGO_PKG_VERSION"),
        "commit": env!("AMP_COMMIT"),
        "host": hostname(),
        "os": std::env::consts::OS,
        "arch": std::env::consts::ARCH,
        "cores": std::thread::available_parallelism().map_or(1, |n| n.get()),
    })
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map_or_else(|_| "unknown".into(), |h| h.trim().into())
}

/// JSON has no NaN or infinity: those become `null`.
pub fn finite(x: f64) -> Value {
    serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number)
}

/// The `--metrics` file: one JSON object per line, flushed after each, so that a run
/// that stops still leaves every report so far; and the same reports' scalars in a
/// `--tensorboard` event file.
pub struct Metrics {
    out: Option<(PathBuf, BufWriter<File>)>,
    tensorboard: Option<crate::tensorboard::TensorBoard>,
    /// Every object written, for `--report`'s page.
    kept: Option<Vec<Value>>,
    /// Hears every object written (`memory::Inputs::on_metrics`).
    hear: Option<crate::memory::Listener>,
}

impl Metrics {
    /// Opens `path` (appending when resuming, else truncating); no file, no metrics.
    pub fn open(path: Option<&Path>, append: bool) -> Result<Metrics, Failure> {
        let Some(path) = path else { return Ok(Metrics { out: None, tensorboard: None, kept: None, hear: None }) };
        crate::setup::check_target("--metrics", path)?;
        let file = OpenOptions::new()
            .create(true)
            .write(true)
            .append(append)
            .truncate(!append)
            .open(path)
            .map_err(|e| Failure::io("write", path, &e))?;
        Ok(Metrics { out: Some((path.to_path_buf(), BufWriter::new(file))), tensorboard: None, kept: None, hear: None })
    }

    /// Also keeps every object written in memory (for `--report` without a `--metrics`
    /// file, and what `train` returns).
    pub fn keeping(mut self) -> Metrics {
        self.kept = Some(Vec::new());
        self
    }

    /// The objects written so far, when kept.
    pub fn kept(&self) -> &[Value] {
        self.kept.as_deref().unwrap_or_default()
    }

    /// The objects written so far, when kept, taken out.
    pub fn take_kept(&mut self) -> Vec<Value> {
        self.kept.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// Also calls `hear` with each object written.
    pub fn hearing(mut self, hear: Option<crate::memory::Listener>) -> Metrics {
        self.hear = hear;
        self
    }

    /// Also writes each report's scalars as TensorBoard events into `dir`.
    pub fn with_tensorboard(mut self, dir: Option<&Path>) -> Result<Metrics, Failure> {
        if let Some(dir) = dir {
            self.tensorboard = Some(crate::tensorboard::TensorBoard::create(dir)?);
        }
        Ok(self)
    }

    pub fn write(&mut self, report: &Report) -> Result<(), Failure> {
        self.write_json(&report.to_json())
    }

    /// Any other report object (the placement's: `split: "plan"`).
    pub fn write_json(&mut self, value: &Value) -> Result<(), Failure> {
        if let Some(board) = &mut self.tensorboard {
            board.report(value)?;
        }
        if let Some(kept) = &mut self.kept {
            kept.push(value.clone());
        }
        if let Some(hear) = &mut self.hear {
            hear(value);
        }
        let Some((path, out)) = &mut self.out else { return Ok(()) };
        let line = value.to_string();
        writeln!(out, "{line}").and_then(|()| out.flush()).map_err(|e| Failure::io("write", path, &e))
    }
}

/// Progress within an epoch: a bar when stderr is a terminal, nothing otherwise (the
/// caller prints one line per epoch either way).
pub struct Progress {
    terminal: bool,
    bar: Option<ProgressBar>,
}

impl Progress {
    pub fn new() -> Progress {
        Progress { terminal: std::io::stderr().is_terminal(), bar: None }
    }

    pub fn start(&mut self, prefix: String, total: usize) {
        if !self.terminal {
            return;
        }
        let bar = ProgressBar::with_draw_target(Some(total as u64), ProgressDrawTarget::stderr());
        if let Ok(style) = ProgressStyle::with_template("{prefix} [{bar:25}] {pos}/{len} {msg} eta {eta}") {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_prefix(prefix);
        self.bar = Some(bar);
    }

    /// `done` instances of the epoch so far in `seconds`, with the running loss and
    /// accuracy.
    pub fn update(&self, done: usize, seconds: f64, loss: f32, accuracy: Option<f32>) {
        if let Some(bar) = &self.bar {
            let rate = done as f64 / seconds.max(1e-9);
            bar.set_message(match accuracy {
                Some(a) => format!("loss {loss:.4} acc {:.1}% {rate:.0}/s", 100.0 * a),
                None => format!("loss {loss:.4} {rate:.0}/s"),
            });
            // After the message: setting the position is what redraws.
            bar.set_position(done as u64);
        }
    }

    /// Removes the bar and prints `line` on stderr.
    pub fn line(&mut self, line: &str) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
        // A split run's followers see no losses: process 0 reports.
        if crate::cluster::follower() {
            return;
        }
        eprintln!("{line}");
    }

    pub fn clear(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}

/// Writes trace events as Chrome trace JSON (`chrome://tracing`, Perfetto).
pub fn write_trace(
    path: &Path,
    write: impl FnOnce(&mut BufWriter<File>) -> std::io::Result<()>,
) -> Result<(), Failure> {
    crate::setup::check_target("--trace", path)?;
    let file = File::create(path).map_err(|e| Failure::io("write", path, &e))?;
    let mut out = BufWriter::new(file);
    write(&mut out).and_then(|()| out.flush()).map_err(|e| Failure::io("write", path, &e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_objects_have_the_documented_fields() {
        let report = Report {
            split: "train",
            epoch: 2,
            instances: 10,
            loss: 0.5,
            accuracy: Some(0.25),
            instances_per_s: 100.0,
            elapsed_s: 1.5,
            updates: Some(30),
            lr: Some(0.01),
        };
        let json = report.to_json();
        for key in ["split", "epoch", "instances", "loss", "accuracy", "instances_per_s", "elapsed_s", "updates", "lr"]
        {
            assert!(json.get(key).is_some(), "{key} in {json}");
        }
        let nan = Report { loss: f32::NAN, accuracy: None, ..report };
        assert_eq!(nan.to_json()["loss"], Value::Null);
        assert!(nan.to_json().get("accuracy").is_none());
        assert_eq!(nan.scores(), "loss NaN");
    }
}
