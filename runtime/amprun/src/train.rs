//! `amprun train`: epochs of shuffled training, each followed by its validation (on the
//! training executor's workers), checkpoints after every epoch, resume, learning-rate
//! schedules (`crate::schedule`), pretrained embeddings and frozen groups
//! (`crate::embeddings`), metrics, traces, the partition plan (followed, and its predicted
//! utilization reported beside the measured one), and a clean stop (with the last good
//! parameters) on a non-finite loss.
//!
//! Determinism: the shuffle of epoch `e` depends on `(seed, e)` only, each epoch is one
//! run of the executor (the pipeline stays full from its first instance to its last; the
//! progress bar hears from the run as it goes), and checkpoints are written at epoch
//! ends, when no gradient is pending. So a resumed run computes exactly what an
//! uninterrupted one does.

use crate::cli::{OptimizerName, TrainArgs};
use crate::data::{DataSet, Loader};
use crate::failure::{Exit, Failure};
use crate::html_report;
use crate::memory::{Inputs, Trained};
use crate::model::{self, display_name};
use crate::placement::{self, Choice, Measure};
use crate::report::{self, Metrics, Progress, Report};
use crate::schedule::Schedule;
use crate::setup;
use crate::staleness;
use crate::start::{meta, starting_point, SavedBest};
use amp_exec::{EvalStats, ExecConfig, ExecError, Executor, NodeSelector, Observer, Placement, TraceEvent};
use amp_ir::Graph;
use amp_params::{OptimConfig, OptimState, ParamSet};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

mod settings;

use settings::{check_outputs, check_update_overrides, measuring, optimizer, tracing, train_config};

/// What hears of an epoch as it trains: the progress bar, and with `--profile`,
/// `--report-utilization` or `--trace` the trace events, folded into the measurements as
/// they come (an epoch's events are not all held at once) and kept for `--trace`.
struct Watch<'w> {
    progress: &'w Progress,
    start: Instant,
    measure: Option<&'w mut Measure>,
    keep: Option<&'w mut Vec<TraceEvent>>,
}

impl Observer for Watch<'_> {
    fn progress(&mut self, p: &amp_exec::Progress) {
        self.progress.update(p.done, self.start.elapsed().as_secs_f64(), p.loss(), p.accuracy());
    }

    fn takes_trace(&self) -> bool {
        self.measure.is_some() || self.keep.is_some()
    }

    fn trace(&mut self, events: &[TraceEvent]) {
        if let Some(measure) = self.measure.as_mut() {
            measure.record_events(events);
        }
        if let Some(keep) = self.keep.as_mut() {
            keep.extend_from_slice(events);
        }
    }
}

/// `amprun train`: Ctrl-C stops after the epoch in progress.
pub fn run(args: &TrainArgs) -> Result<(), Failure> {
    // Ctrl-C stops after the epoch in progress, a second one at once (a run split over
    // processes keeps the default: its processes must stop after the same epoch).
    if args.exec.processes.unwrap_or(1) <= 1 {
        // Without the handler (another one is set), Ctrl-C keeps its default.
        let _ = ctrlc::set_handler(on_interrupt);
    }
    let trained = train(args, Inputs { stop: Some(&INTERRUPTED), ..Inputs::default() })?;
    match trained.stopped_after {
        None => Ok(()),
        Some(epoch) => {
            let saved = args.save.as_ref().map_or(String::new(), |p| format!("; {} holds it", p.display()));
            eprintln!("amprun: stopped by Ctrl-C after epoch {epoch}{saved}");
            Err(Failure::printed(Exit::Interrupted))
        }
    }
}

/// Trains as `amprun train` does, with what `inputs` holds in place of the files the
/// flags name; a stop (`Inputs::stop`) ends the run after the epoch in progress.
pub fn train(args: &TrainArgs, inputs: Inputs) -> Result<Trained, Failure> {
    let started = Instant::now();
    // A follower of a split run trains its workers' part and writes nothing: process 0
    // writes the metrics, checkpoints and traces. Its workers still record what a trace or
    // profile asks for, and send it to process 0, which writes one trace of every process.
    // Whether to keep an epoch as the best, or stop, process 0 decides (`decide`).
    let traced = tracing(args);
    let follower;
    let args = if crate::cluster::follower() {
        let mut quiet = args.clone();
        quiet.metrics = None;
        quiet.trace = None;
        quiet.profile = None;
        quiet.keep_best = None;
        follower = quiet;
        &follower
    } else {
        args
    };
    check_outputs(args)?;
    let model = model::given_or_load(&args.model, inputs.model)?;
    let graph = &model.graph;
    let name = display_name(graph, &args.model.path);
    let optimizer = optimizer(args)?;
    let schedule = Schedule::from_args(args, optimizer.lr)?;
    check_update_overrides(graph, &args.update_frequency)?;
    staleness::check_nodes(graph, &args.max_staleness)?;
    let mut choice = choose_placement(args, &model)?;
    let mut config = train_config(args, optimizer, choice.placement.clone());
    config.replicas.extend(choice.replicas.iter().cloned());
    config.copies = choice.copies;
    config.trace |= traced;
    config.frozen = crate::embeddings::frozen_groups(graph, &args.freeze)?;
    let start = starting_point(args, graph, &name, &optimizer, inputs.params)?;
    config.dropout_seed = start.seed;
    let mut executor = setup::start(graph, start.params, config.clone())?;
    choice.predict(graph, &executor)?;
    // Process 0 speaks for a split run.
    if choice.workers() > 1 && args.exec.process.unwrap_or(0) == 0 {
        eprintln!("amprun: {}", choice.summary());
    }
    if let Some(state) = start.optim {
        executor.restore_optimizer(state).map_err(|e| Failure::exec(&e, &|_| String::new()))?;
    }

    let first = start.epochs_done + 1;
    let best = start.best.map_or_else(Best::default, |b| Best { epoch: Some(b.epoch), score: b.score, since: b.since });
    if let (Some(patience), Some(saved)) = (args.patience, start.best.filter(|_| first <= args.epochs)) {
        if saved.since >= patience {
            // An uninterrupted run would have stopped where the checkpoint was written.
            println!(
                "{name}: stopping early: {} epoch(s) without a better validation than epoch {} (--patience {patience}); \
                 nothing to train",
                saved.since, saved.epoch
            );
            return Ok(Trained { params: executor.params().clone(), metrics: Vec::new(), stopped_after: None });
        }
    }
    if first > args.epochs {
        match start.epochs_done {
            0 => println!("{name}: --epochs 0, nothing to train"),
            done => {
                println!("{name}: the checkpoint has {done} epoch(s); nothing to do for --epochs {}", args.epochs)
            }
        }
        return Ok(Trained { params: executor.params().clone(), metrics: Vec::new(), stopped_after: None });
    }

    // The files to read (not those given in memory), for their formats and a PTB vocabulary.
    let mut files = Vec::new();
    files.extend(inputs.data.is_none().then_some(args.data.as_path()));
    files.extend(args.valid.as_deref().filter(|_| inputs.valid.is_none()));
    let loader = Loader::new(graph, &args.data_args, &files, Some(&args.data))?.with_noise_seed(start.seed);
    let skip_bad = args.data_args.skip_bad_data;
    let train = crate::frames::check(graph, &loader, loader.load_from(&args.data, inputs.data.as_ref())?, skip_bad)?;
    if train.len() == 0 {
        return Err(Failure::bad_input(format!("`{}` has no instances to train on", args.data.display())));
    }
    if !args.init_embedding.is_empty() {
        let vocab = crate::embeddings::vocabulary(loader.vocab(), args.data_args.vocab.as_deref())?;
        let mut params = executor.params().clone();
        let lowercase = args.data_args.lowercase;
        crate::embeddings::init_embeddings(graph, &mut params, &args.init_embedding, vocab.as_ref(), lowercase)?;
        executor.set_params(params).map_err(|e| Failure::exec(&e, &|_| String::new()))?;
    }
    let valid = args.valid.as_deref().map(|v| loader.load_from(v, inputs.valid.as_ref())).transpose()?;
    let valid = valid.map(|v| crate::frames::check(graph, &loader, v, skip_bad)).transpose()?;
    if let Some(saved) = start.saved_instances.filter(|&s| s != train.len()) {
        eprintln!(
            "amprun: warning: the checkpoint was trained on {saved} instances per epoch, this run has {}: \
             the epochs are not those of an uninterrupted run",
            train.len()
        );
    }

    let measure = measuring(args).then(|| {
        let replicas = executor.replica_nodes().into_iter().map(|(replica, of)| (replica, vec![of]));
        let composed = executor.fused_nodes().into_iter().chain(executor.chained_nodes());
        Measure::new(config.workers, config.max_active_keys, composed.chain(replicas).collect())
    });
    let mut run = TrainRun {
        args,
        name,
        schedule,
        optimizer,
        loader: &loader,
        executor: &mut executor,
        train: &train,
        valid: valid.as_ref(),
        seed: start.seed,
        metrics: Metrics::open(args.metrics.as_deref(), args.resume)?
            .with_tensorboard(args.tensorboard.as_deref())?
            .keeping()
            .hearing(inputs.on_metrics),
        progress: Progress::new(),
        trace: Vec::new(),
        measure,
        choice,
        graph,
        started,
        last: (None, None),
        // A resumed run's checkpoint is the `--save` file itself.
        save_holds_start: args.resume,
        start_copy: None,
        best,
        stop: false,
    };
    run.metrics.write_json(&report::run_json(&run.name))?;
    let mut stopped_after = None;
    let result = (|| {
        for epoch in first..=args.epochs {
            if inputs.stop.is_some_and(|stop| stop.load(Ordering::SeqCst)) {
                stopped_after = Some(epoch - 1);
                break;
            }
            run.epoch(epoch)?;
            if run.out_of_patience() {
                break;
            }
        }
        Ok(())
    })();
    run.progress.clear();
    let traced = run.write_trace();
    let finished = result.and(traced).and_then(|()| run.report_placement());
    // The page is written however the run ended (a NaN loss, a failed worker too); a page
    // that cannot be written does not hide why the run stopped.
    if let Some(path) = &args.report {
        match (run.write_report(path), &finished) {
            (Err(e), Ok(())) => return Err(e),
            (Err(e), Err(_)) => eprintln!("amprun: the report was not written: {e}"),
            (Ok(()), _) => {}
        }
    }
    finished?;
    run.summary(first);
    let metrics = run.metrics.take_kept();
    Ok(Trained { params: run.executor.params().clone(), metrics, stopped_after })
}

/// The placement training with `args` follows: the stored plan or the planner's, for the
/// run's workers, update size, optimizer and worker speeds.
pub fn choose_placement(args: &TrainArgs, model: &model::Model) -> Result<Choice, Failure> {
    let assumptions = placement::assumptions(args.update_size(), Some(&optimizer(args)?), !args.asynchronous);
    let assumptions = staleness::with_speeds(assumptions, &args.exec.worker_speed, args.exec.workers())?;
    placement::choose(&model.graph, model.plan.as_ref(), &args.exec, &args.model.path, assumptions)
}

/// Set by the first Ctrl-C of a training run.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// The first Ctrl-C asks the run to stop after its epoch; the second stops the process:
/// the checkpoint of the last finished epoch stays whole (it is replaced by a rename).
fn on_interrupt() {
    if INTERRUPTED.swap(true, Ordering::SeqCst) {
        std::process::exit(Exit::Interrupted as i32);
    }
    eprintln!("\namprun: Ctrl-C: stopping after this epoch (Ctrl-C again to stop now)");
}

struct TrainRun<'a> {
    args: &'a TrainArgs,
    name: String,
    /// The learning rate of each epoch (`--lr-schedule`, `--warmup`).
    schedule: Schedule,
    /// The optimizer settings the schedule's rate goes into.
    optimizer: OptimConfig,
    loader: &'a Loader,
    executor: &'a mut Executor,
    train: &'a DataSet,
    valid: Option<&'a DataSet>,
    seed: u64,
    metrics: Metrics,
    progress: Progress,
    trace: Vec<TraceEvent>,
    /// Busy time per worker and the profile, when measuring.
    measure: Option<Measure>,
    choice: Choice,
    graph: &'a Graph,
    started: Instant,
    /// The last train and valid reports, for the summary.
    last: (Option<Report>, Option<Report>),
    /// Whether the `--save` file holds the parameters and optimizer state of the start
    /// of the current epoch (this run wrote it after the previous epoch, or resumed from
    /// it): then a stop on a non-finite loss leaves it as it is.
    save_holds_start: bool,
    /// Otherwise, with `--save`, a copy of the parameters and optimizer state at the start
    /// of the current epoch: what a stop on a non-finite loss writes (the executor's own
    /// have been updated by then, with the gradients that blew up among them).
    start_copy: Option<(ParamSet, OptimState)>,
    /// The best validation so far, for `--keep-best` and `--patience`.
    best: Best,
    /// Whether the last validation ran out of `--patience` (decided by process 0 in a
    /// split run).
    stop: bool,
}

/// The epoch with the best validation score (accuracy, or minus the loss for a model
/// without one) and how many validations since did not beat it.
#[derive(Default)]
struct Best {
    epoch: Option<u64>,
    score: f64,
    since: u64,
}

impl Best {
    /// Records `epoch`'s validation; whether it is the best so far.
    fn record(&mut self, epoch: u64, stats: &EvalStats) -> bool {
        let score = stats.accuracy.map_or(-f64::from(stats.loss), f64::from);
        let improved = self.epoch.is_none() || score > self.score;
        self.follow(epoch, improved, score);
        improved
    }

    /// What a checkpoint records of it (none before the first validation).
    fn saved(&self) -> Option<SavedBest> {
        self.epoch.map(|epoch| SavedBest { epoch, score: self.score, since: self.since })
    }

    /// Records `epoch`'s validation as judged elsewhere (a split run's follower sees no
    /// losses: process 0 tells it whether the epoch improved).
    fn follow(&mut self, epoch: u64, improved: bool, score: f64) {
        if improved {
            (self.epoch, self.score, self.since) = (Some(epoch), score, 0);
        } else {
            self.since += 1;
        }
    }
}

impl TrainRun<'_> {
    /// With `--patience N`: whether the last N validations did not beat the best (as
    /// process 0 decided, in a split run).
    fn out_of_patience(&mut self) -> bool {
        if !self.stop {
            return false;
        }
        self.progress.line(&format!(
            "stopping early: {} epoch(s) without a better validation than epoch {} (--patience {})",
            self.best.since,
            self.best.epoch.unwrap_or(0),
            self.args.patience.unwrap_or(0)
        ));
        true
    }

    /// After `epoch`'s validation: whether it improved on the best, whether its
    /// parameters are kept (`--keep-best`) and whether the run stops here (`--patience`).
    /// Only process 0 sees the validation's losses; in a split run it tells the others
    /// (`Cluster::agree`), which then take its path: the same gather for the best
    /// checkpoint, a stop after the same epoch.
    fn decide(&mut self, epoch: u64, stats: &EvalStats) -> Result<(bool, bool), Failure> {
        let cluster = self.executor.cluster().cloned();
        let Some(cluster) = cluster else {
            let improved = self.best.record(epoch, stats);
            return Ok((improved && self.args.keep_best.is_some(), self.patience_ran_out()));
        };
        let exec = |e: &ExecError| Failure::exec(e, &|_| String::new());
        if crate::cluster::follower() {
            let words = cluster.agree(&[0; 3]).map_err(|e| exec(&e))?;
            // Flags only: anything else is a misbehaving process 0.
            if let Some(other) = words.iter().find(|&&w| w > 1) {
                let message = format!("process 0 sent a decision word of {other}, not 0 or 1");
                return Err(exec(&ExecError::Cluster { message }));
            }
            let (improved, keep, stop) = (words[0] == 1, words[1] == 1, words[2] == 1);
            self.best.follow(epoch, improved, 0.0);
            return Ok((keep, stop));
        }
        let improved = self.best.record(epoch, stats);
        let keep = improved && self.args.keep_best.is_some();
        let stop = self.patience_ran_out();
        cluster.agree(&[u64::from(improved), u64::from(keep), u64::from(stop)]).map_err(|e| exec(&e))?;
        Ok((keep, stop))
    }

    /// With `--patience N`, whether the last N validations did not beat the best.
    fn patience_ran_out(&self) -> bool {
        self.args.patience.is_some_and(|patience| self.best.since >= patience)
    }

    fn epoch(&mut self, epoch: u64) -> Result<(), Failure> {
        let n = self.train.len();
        if self.args.save.is_some() && !self.save_holds_start && self.start_copy.is_none() {
            let state = (self.executor.params().clone(), self.executor.optimizer_state().clone());
            self.start_copy = Some(state);
        }
        let lr = self.schedule.lr(epoch);
        if self.schedule.varies() {
            let optimizer = OptimConfig { lr, ..self.optimizer };
            self.executor.set_optimizer(optimizer).map_err(|e| Failure::exec(&e, &|_| String::new()))?;
        }
        let order = if self.args.no_shuffle { (0..n).collect() } else { shuffled(n, self.seed, epoch) };
        self.progress.start(format!("epoch {epoch}/{}", self.args.epochs), n);
        let epoch_start = Instant::now();
        let traffic = self.executor.cluster().map(amp_exec::Cluster::traffic);
        let batch = self.train.view(&order);
        // Dropout's masks are those of this epoch, whatever ran before (a resumed run).
        self.executor.set_epoch(epoch);
        let keep = self.args.trace.is_some().then_some(&mut self.trace);
        let mut watch = Watch { progress: &self.progress, start: epoch_start, measure: self.measure.as_mut(), keep };
        let result = self.executor.train_epoch_observed(&batch, &mut watch);
        let wall = epoch_start.elapsed().as_secs_f64();
        if let Some(measure) = &mut self.measure {
            let waited = result.as_ref().map_or(&[][..], |stats| &stats.waited[..]);
            measure.record_run(n, wall, waited);
        }
        let stats = result.map_err(|error| self.stop(epoch, &order, &error))?;
        let seconds = epoch_start.elapsed().as_secs_f64();
        let report = Report {
            split: "train",
            epoch,
            instances: n,
            loss: stats.loss,
            accuracy: stats.accuracy,
            instances_per_s: n as f64 / seconds.max(1e-9),
            elapsed_s: self.started.elapsed().as_secs_f64(),
            updates: Some(stats.updates),
            lr: Some(lr),
        };
        let mut object = report.to_json();
        object["staleness"] = staleness::to_json(&stats.staleness);
        if let (Some(before), Some(cluster)) = (traffic, self.executor.cluster()) {
            object["network"] = network_json(&cluster.traffic().since(&before));
        }
        if stats.reduced.updates > 0 {
            object["allreduce"] = serde_json::json!({
                "updates": stats.reduced.updates,
                "bytes_sent": stats.reduced.bytes,
                "bytes_per_update": stats.reduced.bytes_per_update,
            });
        }
        self.metrics.write_json(&object)?;
        let mut line = format!(
            "epoch {epoch}/{}: train {} ({n} instances, {:.0}/s)",
            self.args.epochs,
            report.scores(),
            report.instances_per_s
        );
        if self.schedule.varies() {
            line.push_str(&format!(" lr {lr:.3e}"));
        }
        self.last.0 = Some(report);
        line.push_str(&format!(" [{:.1}s]", self.started.elapsed().as_secs_f64()));
        self.progress.line(&line);
        if let Some(staleness) = staleness::line(&stats.staleness) {
            self.progress.line(&format!("  {staleness}"));
        }
        // Validation first, so that the checkpoint holds its verdict (the best score and
        // the patience count) and a resumed run continues from it.
        self.validate(epoch)?;
        if let Some(path) = &self.args.save {
            // Split over processes, every group's values come to process 0 first.
            self.executor.gather().map_err(|e| Failure::exec(&e, &|_| String::new()))?;
            let (params, optim) = (self.executor.params(), self.executor.optimizer_state());
            self.save(path, params, optim, epoch, "complete")?;
            self.save_holds_start = true;
            self.start_copy = None;
        }
        Ok(())
    }

    /// Evaluates this epoch's parameters on `--valid` (forward only, on the training
    /// executor's workers: nothing is pending at an epoch's end) and prints the report
    /// right under the epoch's training line; with `--keep-best`, writes the parameters
    /// when they beat the best so far.
    fn validate(&mut self, epoch: u64) -> Result<(), Failure> {
        let Some(valid) = self.valid else { return Ok(()) };
        let result = self.executor.evaluate(&valid.all());
        let stats = result.map_err(|e| Failure::exec(&e, &|i| describe(self.loader, valid, None, i)))?;
        let report = self.valid_report(epoch, &stats)?;
        let (keep, stop) = self.decide(epoch, &stats)?;
        self.stop = stop;
        let mut kept = String::new();
        if keep {
            // Split over processes, every group's values come to process 0 first (every
            // process gathers: process 0 said so).
            self.executor.gather().map_err(|e| Failure::exec(&e, &|_| String::new()))?;
        }
        if let (true, Some(path)) = (keep, &self.args.keep_best) {
            let metadata: BTreeMap<String, String> = [
                (meta::MODEL, self.name.clone()),
                (meta::EPOCH, epoch.to_string()),
                (meta::SEED, self.seed.to_string()),
                (meta::STATUS, format!("best validation: {}", report.scores())),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
            amp_params::save(self.executor.params(), path, &metadata).map_err(|e| {
                Failure::params(&format!("cannot write the best parameters to `{}`", path.display()), &e)
            })?;
            kept = format!(", the best so far: {}", path.display());
        }
        self.progress.line(&format!(
            "epoch {epoch}/{}: valid {} ({} instances, {:.0}/s) [{:.1}s]{kept}",
            self.args.epochs,
            report.scores(),
            report.instances,
            report.instances_per_s,
            self.started.elapsed().as_secs_f64()
        ));
        self.last.1 = Some(report);
        Ok(())
    }

    fn valid_report(&mut self, epoch: u64, stats: &EvalStats) -> Result<Report, Failure> {
        let report = Report {
            split: "valid",
            epoch,
            instances: stats.instances,
            loss: stats.loss,
            accuracy: stats.accuracy,
            instances_per_s: stats.instances_per_s,
            elapsed_s: self.started.elapsed().as_secs_f64(),
            updates: None,
            lr: None,
        };
        self.metrics.write(&report)?;
        Ok(report)
    }

    /// Saves parameters and optimizer state as those after `epochs_done` epochs.
    fn save(
        &self,
        path: &Path,
        params: &ParamSet,
        optim: &OptimState,
        epochs_done: u64,
        status: &str,
    ) -> Result<(), Failure> {
        if crate::cluster::follower() {
            return Ok(());
        }
        let metadata: BTreeMap<String, String> = [
            (meta::MODEL, self.name.clone()),
            (meta::EPOCH, epochs_done.to_string()),
            (meta::SEED, self.seed.to_string()),
            (meta::SHUFFLE_EPOCH, (epochs_done + 1).to_string()),
            (meta::DATA_POSITION, "0".to_string()),
            (meta::INSTANCES, self.train.len().to_string()),
            (meta::STATUS, status.to_string()),
            (meta::OPTIMIZER, optim.kind.clone()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let mut metadata = metadata;
        if let Some(best) = self.best.saved() {
            metadata.insert(meta::BEST_EPOCH.to_string(), best.epoch.to_string());
            metadata.insert(meta::BEST_SCORE.to_string(), best.score.to_string());
            metadata.insert(meta::SINCE_BEST.to_string(), best.since.to_string());
        }
        amp_params::save_checkpoint(path, params, Some(optim), &metadata)
            .map_err(|e| Failure::params(&format!("cannot write the checkpoint `{}`", path.display()), &e))
    }

    /// Ends training on an executor error in `epoch`, whose instances `order` lists (the
    /// error's instance index is a position in it).
    /// On a non-finite loss, the `--save` file ends up with the last good parameters, those
    /// of the start of the epoch: it holds them already when this run wrote it (or resumed
    /// from it), and is then left untouched; otherwise they are written from the copy
    /// taken at the start of the epoch. The parameters the executor holds now were updated
    /// with the gradients that blew up and are never written.
    fn stop(&mut self, epoch: u64, order: &[usize], error: &ExecError) -> Failure {
        self.progress.clear();
        let locate = |i| describe(self.loader, self.train, Some(order), i);
        let mut failure = Failure::exec(error, &locate);
        if let ExecError::NonFiniteLoss { instance, loss, node } = error {
            failure.message = format!(
                "loss of {} is {loss} at node {}; training stopped in epoch {epoch}",
                locate(*instance as i64),
                self.executor.node_name(*node)
            );
            let good = epoch - 1;
            let note = match (&self.args.save, self.start_copy.take()) {
                (None, _) => "; no checkpoint written (no --save)".to_string(),
                (Some(path), _) if self.save_holds_start => format!(
                    "; `{}` already holds the last good parameters (those after epoch {good}) and was left as it was",
                    path.display()
                ),
                // No epoch of this run finished: its starting parameters do not replace a
                // checkpoint that is already there (a trained one, most likely).
                (Some(path), _) if epoch == 1 && path.exists() => {
                    format!("; no epoch finished, so `{}` was left as it was", path.display())
                }
                (Some(path), Some((params, optim))) => {
                    let status = format!("stopped: non-finite loss in epoch {epoch}");
                    match self.save(path, &params, &optim, good, &status) {
                        Ok(()) => format!(
                            "; the last good parameters (those at the start of epoch {epoch}) are in `{}`",
                            path.display()
                        ),
                        Err(e) => format!("; and the checkpoint failed: {e}"),
                    }
                }
                // Not reached: the copy is taken before every epoch that needs it.
                (Some(_), None) => "; no checkpoint written (the last good parameters were not kept)".to_string(),
            };
            failure.message.push_str(&note);
        }
        failure
    }

    fn write_trace(&mut self) -> Result<(), Failure> {
        let Some(path) = &self.args.trace else { return Ok(()) };
        let events = std::mem::take(&mut self.trace);
        let executor = &*self.executor;
        report::write_trace(path, |out| executor.write_trace(&events, out))
    }

    /// `--report`: the page of this run's metrics (a resumed run's metrics file has the
    /// epochs before it too), its trace, its command line and its graph drawn with the
    /// placement.
    fn write_report(&self, path: &Path) -> Result<(), Failure> {
        let times = self.measure.as_ref().map(|m| m.profile(self.graph));
        let graph = html_report::graph_svg(self.graph, &self.executor.graph_placement(), times.as_ref());
        // The metrics file, when there is one, has every epoch (a resumed run's earlier
        // ones too); otherwise the run kept its reports.
        let rows = match self.args.metrics.as_deref() {
            Some(file) => html_report::Run::read(file)?.rows,
            None => self.metrics.kept().to_vec(),
        };
        let run = html_report::Run { name: self.name.clone(), rows };
        let traces = self.args.trace.as_deref().map(html_report::Busy::read).transpose()?;
        html_report::write(path, &[run], traces.as_slice(), graph.as_deref())
    }

    /// Whether the summary and the metrics report the placement: with several workers,
    /// or when measuring.
    fn reports_placement(&self) -> bool {
        self.choice.workers() > 1 || self.measure.is_some()
    }

    /// After training: the placement's metrics object (`split: "plan"`) and the profile.
    fn report_placement(&mut self) -> Result<(), Failure> {
        if self.reports_placement() {
            let epoch = self.last.0.as_ref().map_or(0, |r| r.epoch);
            let value = placement::report_json(
                &self.choice,
                self.measure.as_ref(),
                epoch,
                self.started.elapsed().as_secs_f64(),
            );
            self.metrics.write_json(&value)?;
        }
        if let (Some(path), Some(measure)) = (&self.args.profile, &self.measure) {
            let text = format!("{:#}\n", measure.profile_json(self.graph));
            setup::check_target("--profile", path)?;
            std::fs::write(path, text).map_err(|e| Failure::io("write", path, &e))?;
        }
        Ok(())
    }

    fn summary(&self, first: u64) {
        // A split run's followers see no losses and write no files: process 0 reports
        // (issue 48, finding 10: they printed "train loss NaN" and a checkpoint they
        // never wrote).
        if crate::cluster::follower() {
            return;
        }
        // The last epoch trained: `--epochs`, or where `--patience` stopped.
        let last = self.last.0.as_ref().map_or(self.args.epochs, |r| r.epoch);
        let epochs = last + 1 - first;
        let seconds = self.started.elapsed().as_secs_f64();
        let instances = self.train.len() as u64 * epochs;
        println!(
            "{}: trained epochs {first}..{last} ({epochs} this run) in {seconds:.2}s, {instances} instances, {:.0} instances/s",
            self.name,
            instances as f64 / seconds.max(1e-9)
        );
        if let (Some(epoch), Some(path)) = (self.best.epoch, &self.args.keep_best) {
            println!("  best   epoch {epoch}: {}", path.display());
        }
        if let Some(report) = &self.last.0 {
            println!("  train  {}", report.scores());
        }
        if let Some(report) = &self.last.1 {
            println!("  valid  {}", report.scores());
        }
        for set in std::iter::once(self.train).chain(self.valid).filter(|s| s.skipped > 0) {
            println!("  skipped     {} bad instance(s) in {}", set.skipped, set.path.display());
        }
        if let Some(path) = &self.args.save {
            println!("  checkpoint  {}", path.display());
        }
        if let Some(path) = &self.args.metrics {
            println!("  metrics     {}", path.display());
        }
        if let Some(path) = &self.args.trace {
            println!("  trace       {}", path.display());
        }
        if let Some(path) = &self.args.profile {
            println!("  profile     {}", path.display());
            for line in self.measure.iter().flat_map(|m| m.batch_lines(self.graph)) {
                println!("  batches     {line}");
            }
            if let Some(measure) = &self.measure {
                println!("  time        {}", measure.time_line(self.graph));
            }
        }
        if self.reports_placement() {
            for line in placement::summary_lines(&self.choice, self.measure.as_ref()) {
                println!("  {line}");
            }
        }
    }
}

/// `instance 17 (train.jsonl:18)` for the `i`-th instance of a run over `order` (or over
/// the whole set in file order).
fn describe(loader: &Loader, set: &DataSet, order: Option<&[usize]>, i: i64) -> String {
    let index = usize::try_from(i).ok().and_then(|i| match order {
        Some(order) => order.get(i).copied(),
        None => Some(i),
    });
    match index {
        Some(index) => loader.describe(set, index),
        None => format!("instance {i} of {}", set.path.display()),
    }
}

/// What process 0 exchanged with the other processes during an epoch's training (the
/// metrics' `network`).
fn network_json(t: &amp_exec::Traffic) -> serde_json::Value {
    serde_json::json!({
        "messages_sent": t.messages_sent,
        "messages_received": t.messages_received,
        "packets_sent": t.packets_sent,
        "packets_received": t.packets_received,
        "bytes_sent": t.bytes_sent,
        "bytes_received": t.bytes_received,
    })
}

/// The order of epoch `epoch`'s instances: a Fisher–Yates shuffle driven by SplitMix64
/// seeded from `(seed, epoch)` only, so any epoch's order can be recomputed on resume.
pub fn shuffled(n: usize, seed: u64, epoch: u64) -> Vec<usize> {
    let mut state = seed ^ epoch.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5851_F42D_4C95_7F2D;
    let mut next = move || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let j = (next() % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shuffles_are_permutations_fixed_by_seed_and_epoch() {
        let a = shuffled(100, 7, 1);
        let mut sorted = a.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..100).collect::<Vec<_>>());
        assert_eq!(a, shuffled(100, 7, 1));
        assert_ne!(a, shuffled(100, 7, 2));
        assert_ne!(a, shuffled(100, 8, 1));
        assert!(shuffled(0, 1, 1).is_empty());
    }
}
