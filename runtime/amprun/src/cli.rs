//! The command line: subcommands and their flags (clap derive). Parsing only; every check
//! that needs the graph or the files happens in the commands.

use amp_exec::{Fault, NodeSelector};
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::time::Duration;

/// What `--help` says about exit codes (the crate header says the same).
const EXIT_CODES: &str = "\
Exit codes:
  0  success
  1  bad input: the model does not compile, the graph file is rejected, a data line is
     bad (file:line: field), a parameter file does not fit the model, an instance a node
     cannot process, or an op the executor cannot run yet
  2  usage: bad flags or values, a file that cannot be read or written
  3  a non-finite (NaN/Inf) loss: training stopped; with --save the last good
     parameters are in the checkpoint
  4  the executor failed: a worker panicked or stalled (the message names node and worker)
130  train: Ctrl-C stopped it after an epoch, whose checkpoint, metrics and report were
     written (a second Ctrl-C stops at once; the last checkpoint stays whole)";

#[derive(Parser, Debug)]
#[command(
    name = "amprun",
    version,
    about = "Train, evaluate, run and differentiate Amp models on asynchronous model-parallel workers",
    after_help = EXIT_CODES
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Train a model: shuffle, train and validate every epoch, checkpoint, report.
    #[command(after_help = EXIT_CODES)]
    Train(Box<TrainArgs>),
    /// Evaluate saved parameters on a data set: loss, accuracy, instances/s.
    #[command(after_help = EXIT_CODES)]
    Eval(EvalArgs),
    /// Run the forward pass: one JSON line per instance with the model's output.
    #[command(after_help = EXIT_CODES)]
    Infer(EvalArgs),
    /// Write the mean gradient over a data set as safetensors (and print the mean loss).
    #[command(after_help = EXIT_CODES)]
    Grad(GradArgs),
    /// Real data sets by name: download and verify SST, list what is present and where,
    /// print a file's path.
    Data(DataCommand),
    /// One self-contained HTML page of runs' `--metrics` files, on shared axes: learning
    /// curves, learning rate, throughput, staleness, accuracy per update step.
    Report(ReportArgs),
}

/// `amprun report RUN.jsonl... -o report.html`.
#[derive(Args, Debug, Clone)]
pub struct ReportArgs {
    /// The runs' `--metrics` files.
    #[arg(required = true, value_name = "RUN.jsonl")]
    pub runs: Vec<PathBuf>,
    /// The page to write.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: PathBuf,
    /// A run's Chrome trace (`train --trace`): each worker's busy share over time, beside
    /// the plan's prediction.
    #[arg(long, value_name = "TRACE.json")]
    pub trace: Vec<PathBuf>,
}

/// `amprun data ...`.
#[derive(Args, Debug)]
pub struct DataCommand {
    #[command(subcommand)]
    pub action: DataAction,
}

#[derive(Subcommand, Debug)]
pub enum DataAction {
    /// Download a data set (`sst`), verify every file (trees per split, every line a
    /// labelled tree, SHA-256) and store it in the cache folder ($AMP_DATA, else the
    /// platform's cache folder followed by `amp`).
    Get(GetArgs),
    /// List the data sets' names, whether each file is present, and where.
    List(CacheArgs),
    /// Print the file a name stands for (`sst:train`, `digits`, `molecules:test`).
    Path(PathArgs),
}

/// Which cache folder.
#[derive(Args, Debug)]
pub struct CacheArgs {
    /// The cache folder to use instead of $AMP_DATA or the platform's (the names given to
    /// `--data` are looked up in $AMP_DATA or the platform's folder only).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct GetArgs {
    /// The data set: `sst` (`digits` and `molecules` are in the repository already).
    #[arg(value_name = "NAME")]
    pub name: String,
    #[command(flatten)]
    pub cache: CacheArgs,
    /// Take the files from here instead of the canonical address: a mirror's `http://` or
    /// `https://` address of the zip archive, a local copy of the archive, or a folder
    /// holding `train.txt`, `dev.txt` and `test.txt` (or `trees/` with them).
    #[arg(long, value_name = "URL|FILE|DIR")]
    pub from: Option<String>,
    /// Give up on a download that has not finished after this many seconds (connecting,
    /// the answer and the whole body; a stalled server is given up on then).
    #[arg(long, value_name = "SECONDS", default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub timeout: u64,
}

#[derive(Args, Debug)]
pub struct PathArgs {
    /// The name: `sst:train`, `digits`, `molecules:test`, ...
    #[arg(value_name = "NAME")]
    pub name: String,
    #[command(flatten)]
    pub cache: CacheArgs,
}

/// Which model, and how to compile it.
#[derive(Args, Debug, Clone)]
pub struct ModelArgs {
    /// The model: Amp source (`.amp`, compiled in-process) or a graph compiled by
    /// `ampc compile` (`.ampg`).
    #[arg(value_name = "MODEL")]
    pub path: PathBuf,
    /// Override a hyperparameter or constant of an `.amp` model: `-D hidden=16`.
    #[arg(short = 'D', value_name = "NAME=VALUE", value_parser = amp_sema::parse_define)]
    pub define: Vec<(String, i64)>,
    /// The model to run when the source defines several (default: the first).
    #[arg(long = "model", value_name = "NAME", conflicts_with = "network")]
    pub model_name: Option<String>,
    /// Run this network of an `.amp` source rolled out over frames instead of a model
    /// (docs/rollouts.md); instances are `{"frames": [[...], ...], "label": k}`.
    #[arg(long, value_name = "NAME")]
    pub network: Option<String>,
    /// The network's rollout pattern: `streaming`, `sequential` or the sequential pattern
    /// with edges overridden (`a->b=1,b->b=0`).
    #[arg(long, value_name = "streaming|sequential|EDGES", default_value = "sequential", requires = "network")]
    pub pattern: String,
    /// Frames per instance: every instance must have exactly F (default: as many as each
    /// has).
    #[arg(long, value_name = "F", requires = "network", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub frames: Option<u32>,
    /// Lower every `map` of an `.amp` model per element (one message per element) even
    /// where its body is row-wise and would run batched, one message per collection (to
    /// compare; results agree to rounding).
    #[arg(long)]
    pub per_element_maps: bool,
}

/// Data file formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// JSON Lines matching the model's input record.
    Jsonl,
    /// PTB bracket trees, one per line (SST), with a vocabulary.
    Ptb,
    /// CSV rows onto a fixed-size record.
    Csv,
    /// SDF (V2000) molecules as graphs.
    Sdf,
}

/// How data files are read.
#[derive(Args, Debug, Clone, Default)]
pub struct DataArgs {
    /// The data format (default: from the extension: .jsonl/.json, .txt/.ptb, .csv, .sdf).
    #[arg(long, value_enum)]
    pub format: Option<Format>,
    /// Skip bad instances (and report how many) instead of stopping at the first one.
    #[arg(long)]
    pub skip_bad_data: bool,
    /// Use only the first N instances of each data file (for quick runs); nothing after
    /// them is read.
    #[arg(long, value_name = "N")]
    pub limit: Option<usize>,
    /// A rolled-out network (`--frames F`): each instance is a static input (a CSV row, or
    /// `{"frame": [...], "label": k}`) shown for the F frames, each frame with fresh
    /// Gaussian noise of this standard deviation, seeded by `--seed` and the instance's
    /// index.
    #[arg(long, value_name = "S")]
    pub frame_noise: Option<f32>,
    /// CSV: multiply every f32 column by this (e.g. 0.0625 for 0-16 pixels).
    #[arg(long, default_value_t = 1.0)]
    pub scale: f32,
    /// PTB: the vocabulary file; read when it exists, else built from the training data
    /// and written there.
    #[arg(long, value_name = "FILE")]
    pub vocab: Option<PathBuf>,
    /// PTB: the most words (with `<unk>`) when building a vocabulary (default: the
    /// model's `vocab` hyperparameter).
    #[arg(long, value_name = "N")]
    pub vocab_size: Option<usize>,
    /// PTB: lowercase words (building and looking up the vocabulary).
    #[arg(long)]
    pub lowercase: bool,
    /// SDF: number of node kinds (default: the model's `kinds` hyperparameter, else 8).
    #[arg(long, value_name = "N")]
    pub node_kinds: Option<usize>,
    /// SDF: number of edge kinds (default: the model's `edge_kinds` hyperparameter, else 3).
    #[arg(long, value_name = "N")]
    pub edge_kinds: Option<usize>,
    /// SDF: the property holding the class label.
    #[arg(long, value_name = "NAME", default_value = "SOL_classification")]
    pub label_property: String,
}

/// Which worker runs which node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PlanChoice {
    /// The partition plan: the `.ampg` file's when it was made for this many workers,
    /// else planned in-process from the cost model (`--plan-profile` refines it).
    Auto,
    /// The executor's default: contiguous ranges of nodes in index order.
    Naive,
    /// Node i (counting existing nodes in index order) on worker i mod N.
    RoundRobin,
}

/// How the executor runs (every subcommand).
#[derive(Args, Debug, Clone)]
pub struct ExecArgs {
    /// Worker threads (default: the machine's available cores, whose use the plan decides;
    /// 1 with `--deterministic`; one per process with `--processes`).
    #[arg(long = "workers", env = "AMP_WORKERS", value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub workers_flag: Option<u16>,
    /// How nodes are placed on the workers.
    #[arg(long, value_enum, default_value = "auto")]
    pub plan: PlanChoice,
    /// Copies of the whole graph, each on WORKERS / K workers and placed like the others
    /// (data parallelism inside the model; their gradients are added up before every
    /// update). Default: the plan's choice with `--plan auto`, else 1.
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub copies: Option<u16>,
    /// Plan in-process with a profile written by `amprun train --profile` refining the
    /// cost model (instead of following the plan in an `.ampg` file).
    #[arg(long, value_name = "FILE")]
    pub plan_profile: Option<PathBuf>,
    /// Also run the replicas the plan proposes (`--plan auto`): each Ppt it names as copies
    /// on the workers it names. Off by default: on two workers no replica measured faster
    /// (docs/PERFORMANCE.md, "Replicas").
    #[arg(long)]
    pub plan_replicas: bool,
    /// At most this many instances in flight (default: training, the update size
    /// `--min-update-frequency`; eval, infer and grad, 16).
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_active_keys: Option<u64>,
    /// One instance in flight and, in training without `--min-update-frequency`, an
    /// update after every instance at SGD's rate 0.01: per-instance SGD, the defaults
    /// before (the defaults now train a minibatch of 16 at once, for speed; docs/amprun.md,
    /// Defaults).
    #[arg(long, conflicts_with = "max_active_keys")]
    pub deterministic: bool,
    /// Dynamic batching: a Linear node or fused kernel takes up to this many waiting
    /// messages as one call (1 turns batching off).
    #[arg(long, default_value_t = 64, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_batch: u64,
    /// Add each backward batch's weight-gradient product to the gradient at once (a
    /// rank-one update per message with `--max-batch 1`) instead of keeping the rows for
    /// one GEMM: with `--max-batch 1`, nothing is batched (to measure what batching gains).
    #[arg(long)]
    pub no_deferred_grads: bool,
    /// Run every elementwise node by itself instead of one Cranelift kernel per fusion
    /// group (to compare; results agree to rounding).
    #[arg(long)]
    pub no_jit: bool,
    /// Run every routing node (`phi`, `cond`, `switch`, `isu`) by itself instead of each
    /// chain of them as one node (to compare; results are the same).
    #[arg(long)]
    pub no_chains: bool,
    /// Run an activation that alone reads a Linear's output as a node of its own instead
    /// of inside the Linear's step (to compare; results are the same).
    #[arg(long)]
    pub no_epilogues: bool,
    /// Run a Linear or Embedding node (a label or `%index`) as R copies on consecutive
    /// workers, each message going to the copy expected to finish it first: `--replicate cell=2`.
    #[arg(long, value_name = "NODE=R", value_parser = parse_replicas)]
    pub replicate: Vec<(NodeSelector, u64)>,
    /// Replicas take the trained values after every this many updates (1: training is
    /// exactly that without replicas).
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub replica_sync: u64,
    /// End the run when no message was processed for this many seconds while instances
    /// are in flight.
    #[arg(long, default_value_t = 60.0, value_name = "SECONDS", value_parser = parse_positive)]
    pub stall_timeout: f64,
    /// End the run when one loop makes more than this many trips in one instance (a
    /// `while` whose condition never turns false).
    #[arg(long, default_value_t = amp_ir::limits::DEFAULT_MAX_TRIPS, value_name = "N")]
    pub max_trips: u64,
    /// A straggler: worker W takes F times as long for each step (it sleeps F - 1 times
    /// the step's measured time after it); `W=F@START..END` only between those seconds
    /// since the executor started. Repeatable.
    #[arg(long, value_name = "W=F[@START..END]", value_parser = crate::staleness::parse_slow_worker)]
    pub slow_worker: Vec<amp_exec::SlowWorker>,
    /// Tells the planner that worker W runs at speed S relative to the others (`1=0.33`:
    /// three times slower), so the plan moves load away from it. Repeatable.
    #[arg(long, value_name = "W=S", value_parser = crate::staleness::parse_worker_speed)]
    pub worker_speed: Vec<(usize, f64)>,
    /// Inject a fault (testing): `panic:NODE:N` or `delay:NODE:N:MILLIS`.
    #[arg(long, hide = true, value_parser = parse_fault)]
    pub fault: Option<Fault>,
    /// Split the workers over P processes (docs/distributed.md). Alone, runs P processes
    /// on this machine over loopback (this one is process 0); with `--process` and
    /// `--hostfile`, this is one process of a run across hosts.
    #[arg(long, value_name = "P", value_parser = clap::value_parser!(u16).range(1..=256))]
    pub processes: Option<u16>,
    /// This process's index in the hostfile (0 reads the data's results, writes metrics
    /// and checkpoints).
    #[arg(long, value_name = "I", requires_all = ["processes", "hostfile"])]
    pub process: Option<u16>,
    /// One `host:port` per line, process 0 first: where each process listens.
    #[arg(long, value_name = "FILE", requires = "process")]
    pub hostfile: Option<PathBuf>,
    /// The shared secret every process of the run must prove (any bytes; the same file
    /// on every host). `--processes P` alone generates one for its processes.
    #[arg(long, value_name = "FILE", requires = "process")]
    pub cluster_key: Option<PathBuf>,
    /// How long, in seconds, a process of a split run waits for the others to connect and
    /// prove the key (default 60); a peer not there by then is named in the error.
    #[arg(long, value_name = "SECONDS", default_value_t = 60.0, value_parser = parse_connect_timeout)]
    pub connect_timeout: f64,
    /// The planner's one-way latency of the link between processes, in µs (default 50:
    /// TCP over 10 Gb/s Ethernet); `--plan auto` keeps what crosses it to what pays.
    #[arg(long, value_name = "US", value_parser = parse_link_value)]
    pub link_latency_us: Option<f64>,
    /// The planner's bandwidth of each process's link, in megabits per second each way
    /// (default 10000: 10 Gb/s Ethernet).
    #[arg(long, value_name = "MBPS", value_parser = parse_link_value)]
    pub link_bandwidth_mbps: Option<f64>,
}

/// Instances in flight in eval, infer and grad without `--max-active-keys`: enough that
/// Linear nodes and fused kernels see batches (forward only, so no update boundary
/// limits it).
pub const DEFAULT_IN_FLIGHT: u64 = 16;

/// The update size (`--min-update-frequency`) of training without one: an update per
/// minibatch of 16, each in flight together (see the crate doc, Defaults).
pub const DEFAULT_UPDATE_SIZE: u64 = 16;

impl ExecArgs {
    /// Worker threads: `--workers`, else 1 with `--deterministic` (one instance in flight
    /// keeps one worker busy), else one per process of a split run (every process must
    /// count the same, whatever its host's cores), else the cores this process may use.
    pub fn workers(&self) -> usize {
        match (self.workers_flag, self.deterministic, self.processes) {
            (Some(n), _, _) => usize::from(n),
            (None, true, _) => 1,
            (None, false, Some(p)) => usize::from(p),
            (None, false, None) => std::thread::available_parallelism().map_or(1, |n| n.get().min(1024)),
        }
    }

    pub fn stall_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.stall_timeout)
    }

    /// Instances in flight: `--max-active-keys`, 1 with `--deterministic`, else
    /// `default`.
    pub fn in_flight(&self, default: u64) -> u64 {
        match (self.max_active_keys, self.deterministic) {
            (Some(k), _) => k,
            (None, true) => 1,
            (None, false) => default,
        }
    }
}

/// Optimizers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OptimizerName {
    Sgd,
    Momentum,
    Adam,
}

/// Learning-rate schedules (`crate::schedule`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ScheduleName {
    Constant,
    Step,
    Cosine,
}

impl ScheduleName {
    pub fn name(self) -> &'static str {
        match self {
            ScheduleName::Constant => "constant",
            ScheduleName::Step => "step",
            ScheduleName::Cosine => "cosine",
        }
    }
}

#[derive(Args, Debug, Clone)]
pub struct TrainArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The training data: a file, or a data set's name (`sst:train`, `digits`,
    /// `molecules:train`; `amprun data list`).
    #[arg(long, value_name = "FILE|NAME")]
    pub data: PathBuf,
    /// Validation data, evaluated after every epoch (reported under its training line): a
    /// file or a data set's name (`sst:dev`).
    #[arg(long, value_name = "FILE|NAME")]
    pub valid: Option<PathBuf>,
    #[command(flatten)]
    pub data_args: DataArgs,
    /// Epochs to have trained in total (a resumed run continues up to this many).
    #[arg(long, default_value_t = 1)]
    pub epochs: u64,
    #[command(flatten)]
    pub exec: ExecArgs,
    /// A parameter updates after this many finished instances, with their mean gradient
    /// (the minibatch size; default 16, 1 with `--deterministic`).
    #[arg(long, value_name = "M", value_parser = clap::value_parser!(u64).range(1..))]
    pub min_update_frequency: Option<u64>,
    /// Per-node minibatch size: `--update-frequency cell=8` (a node label or `%index`).
    #[arg(long, value_name = "NODE=M", value_parser = parse_update_frequency)]
    pub update_frequency: Vec<(NodeSelector, u64)>,
    /// Asynchronous updates (AMPNet): instances keep flowing past update boundaries.
    #[arg(long = "async")]
    pub asynchronous: bool,
    /// Bounded staleness (DSP): no gradient is applied more than K updates of its group
    /// after the version its forward read; `K` for every group, `NODE=K` for one (a
    /// layer's label, `%index` or a parameter array); repeatable.
    #[arg(long, value_name = "K|NODE=K", value_parser = crate::staleness::parse_bound)]
    pub max_staleness: Vec<crate::staleness::StalenessBound>,
    /// `layerwise`: bounds that grow towards the input (DSP), from `--max-staleness K`
    /// (0 without) at the group nearest the loss, one more per group before it.
    #[arg(long, value_enum, default_value = "uniform")]
    pub staleness_schedule: crate::staleness::StalenessSchedule,
    #[arg(long, value_enum, default_value = "sgd")]
    pub optimizer: OptimizerName,
    /// Learning rate (default: 0.01 · √M for sgd and momentum with an update every M
    /// instances, 0.04 at the default M = 16; 0.001 for adam).
    #[arg(long, value_name = "X")]
    pub lr: Option<f32>,
    /// Momentum of `--optimizer momentum`.
    #[arg(long, default_value_t = 0.9, value_name = "X")]
    pub momentum: f32,
    /// L2 penalty added to the gradient (PyTorch's weight_decay).
    #[arg(long, default_value_t = 0.0, value_name = "X")]
    pub weight_decay: f32,
    /// Clip each parameter group's gradient norm to this before the update.
    #[arg(long, value_name = "X")]
    pub clip_norm: Option<f32>,
    /// How the learning rate changes from epoch to epoch (after `--warmup`): `constant`,
    /// `step` (times `--gamma` every `--step-size` epochs, PyTorch's StepLR) or `cosine`
    /// (down to `--min-lr` over the epochs after warmup, CosineAnnealingLR).
    #[arg(long, value_enum, default_value = "constant")]
    pub lr_schedule: ScheduleName,
    /// Warm up over the first N epochs: epoch e <= N trains at lr * e / (N + 1).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub warmup: u64,
    /// `--lr-schedule step`: epochs between two multiplications by `--gamma`.
    #[arg(long, value_name = "N")]
    pub step_size: Option<u64>,
    /// `--lr-schedule step`: the factor applied every `--step-size` epochs.
    /// (default 0.1).
    #[arg(long, value_name = "X")]
    pub gamma: Option<f32>,
    /// `--lr-schedule cosine`: the rate it anneals to (PyTorch's eta_min; default 0).
    #[arg(long, value_name = "X")]
    pub min_lr: Option<f32>,
    /// Seed of the initialisation, of the shuffles, of `dropout`'s masks and of
    /// `--frame-noise` (default 0).
    #[arg(long, value_name = "S")]
    pub seed: Option<u64>,
    /// Keep the data in file order (no shuffle per epoch).
    #[arg(long)]
    pub no_shuffle: bool,
    /// Write a checkpoint here after every epoch (atomically): parameters, optimizer
    /// state, and what resuming needs.
    #[arg(long, value_name = "FILE")]
    pub save: Option<PathBuf>,
    /// Write the parameters of the epoch with the best validation accuracy here (needs
    /// `--valid`), each time an epoch beats the best so far.
    #[arg(long, value_name = "FILE", requires = "valid")]
    pub keep_best: Option<PathBuf>,
    /// Stop after N epochs in a row without a better validation accuracy (needs `--valid`).
    #[arg(long, value_name = "N", requires = "valid", value_parser = clap::value_parser!(u64).range(1..))]
    pub patience: Option<u64>,
    /// Continue from the `--save` checkpoint exactly (parameters, optimizer state, next
    /// epoch).
    #[arg(long, requires = "save", conflicts_with = "init")]
    pub resume: bool,
    /// Initial parameters from a safetensors file (e.g. written by PyTorch).
    #[arg(long, value_name = "FILE")]
    pub init: Option<PathBuf>,
    /// Start the Embedding NAME from pretrained word vectors (GloVe / word2vec text), row
    /// by row through the run's vocabulary (PTB `--vocab`; for other data `--vocab FILE`
    /// names the word of each index); words the file lacks keep their initialisation.
    #[arg(long, value_name = "NAME=FILE", value_parser = parse_init_embedding, conflicts_with = "resume")]
    pub init_embedding: Vec<(String, PathBuf)>,
    /// Keep the parameter group NAME (a `param`: `emb`, `cell`, or an array's `msg`) as it
    /// starts: it is never updated and no gradient is accumulated for it.
    #[arg(long, value_name = "NAME")]
    pub freeze: Vec<String>,
    /// Write one JSON object per report (train and valid, every epoch) to this file
    /// (appended to with --resume).
    #[arg(long, value_name = "FILE")]
    pub metrics: Option<PathBuf>,
    /// Write an HTML page of the run (`amprun report`'s, with the command line and the
    /// machine) when it ends, also when it stops on a NaN loss, a failure or Ctrl-C.
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// Write the reports' scalars (losses, accuracy, throughput, learning rate, staleness,
    /// per epoch) as a TensorBoard event file in this folder (`tensorboard --logdir DIR`).
    #[arg(long, value_name = "DIR")]
    pub tensorboard: Option<PathBuf>,
    /// Write a Chrome/Perfetto trace of every worker's forward, backward and update work.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Write a profile for the planner: per node, messages per instance and mean µs of its
    /// forward and backward work (`ampc compile --workers N --profile FILE`).
    #[arg(long, value_name = "FILE")]
    pub profile: Option<PathBuf>,
    /// Measure each worker's utilization (the time it was not waiting for messages, over
    /// wall time) and report it beside the plan's prediction. Also on with --trace and
    /// --profile.
    #[arg(long)]
    pub report_utilization: bool,
}

impl TrainArgs {
    /// The update size: `--min-update-frequency`, 1 with `--deterministic`, else
    /// [`DEFAULT_UPDATE_SIZE`].
    pub fn update_size(&self) -> u64 {
        match (self.min_update_frequency, self.exec.deterministic) {
            (Some(m), _) => m,
            (None, true) => 1,
            (None, false) => DEFAULT_UPDATE_SIZE,
        }
    }
}

#[derive(Args, Debug)]
pub struct EvalArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The parameters (a checkpoint or any safetensors file with the model's tensors).
    #[arg(long, value_name = "FILE")]
    pub params: PathBuf,
    /// The data: a file, or a data set's name (`sst:test`, `molecules:test`; `amprun data
    /// list`).
    #[arg(long, value_name = "FILE|NAME")]
    pub data: PathBuf,
    #[command(flatten)]
    pub data_args: DataArgs,
    /// `eval`: write the evaluation as JSON lines to this file: `{"split": "valid",
    /// "instances", "loss", "accuracy"}`, and for a rolled-out network one row per update
    /// step, `{"split": "valid", "update_step": U, "accuracy": A}`.
    #[arg(long, value_name = "FILE")]
    pub metrics: Option<std::path::PathBuf>,
    /// `infer`: write the JSON lines to this file instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Seed of the `--frame-noise` noise (default 0).
    #[arg(long, value_name = "S")]
    pub seed: Option<u64>,
    #[command(flatten)]
    pub exec: ExecArgs,
}

#[derive(Args, Debug)]
pub struct GradArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The parameters to differentiate at.
    #[arg(long, value_name = "FILE")]
    pub params: PathBuf,
    /// The data (a file or a data set's name); the gradient is the mean over its
    /// instances.
    #[arg(long, value_name = "FILE|NAME")]
    pub data: PathBuf,
    /// Where to write the gradients (safetensors, one tensor per parameter).
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    #[command(flatten)]
    pub data_args: DataArgs,
    /// Seed of the `--frame-noise` noise (default 0).
    #[arg(long, value_name = "S")]
    pub seed: Option<u64>,
    #[command(flatten)]
    pub exec: ExecArgs,
}

fn parse_update_frequency(text: &str) -> Result<(NodeSelector, u64), String> {
    let (node, value) = text.rsplit_once('=').ok_or_else(|| format!("expected NODE=M, got `{text}`"))?;
    let node = node.trim();
    if node.is_empty() {
        return Err(format!("no node named in `{text}`"));
    }
    match value.trim().parse::<u64>() {
        Ok(m) if m >= 1 => Ok((NodeSelector::parse(node), m)),
        _ => Err(format!("`{value}` is not a positive integer")),
    }
}

fn parse_init_embedding(text: &str) -> Result<(String, PathBuf), String> {
    let (name, file) = text.split_once('=').ok_or_else(|| format!("expected NAME=FILE, got `{text}`"))?;
    if name.trim().is_empty() || file.is_empty() {
        return Err(format!("expected NAME=FILE, got `{text}`"));
    }
    Ok((name.trim().to_string(), PathBuf::from(file)))
}

fn parse_replicas(text: &str) -> Result<(NodeSelector, u64), String> {
    let (node, r) = parse_update_frequency(text).map_err(|e| e.replace("NODE=M", "NODE=R"))?;
    let max = amp_exec::config::MAX_REPLICAS as u64;
    if r > max {
        return Err(format!("at most {max} replicas"));
    }
    Ok((node, r))
}

fn parse_positive(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 && x < 1e9 => Ok(x),
        _ => Err(format!("`{text}` is not a positive number of seconds")),
    }
}

/// A link's latency or bandwidth: finite, not negative (the planner refuses a bandwidth
/// of 0 by name).
fn parse_link_value(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
        _ => Err(format!("`{text}` is not a finite number of at least 0")),
    }
}

fn parse_fault(text: &str) -> Result<Fault, String> {
    let parts: Vec<&str> = text.split(':').collect();
    let number = |s: &str| s.trim_start_matches('%').parse::<u64>().map_err(|_| format!("`{s}` is not a number"));
    let node = |s: &str| u32::try_from(number(s)?).map_err(|_| format!("node `{s}` is out of range"));
    match parts.as_slice() {
        ["panic", n, after] => Ok(Fault::PanicAt { node: node(n)?, after: number(after)? }),
        ["delay", n, after, ms] => {
            Ok(Fault::DelayAt { node: node(n)?, after: number(after)?, delay: Duration::from_millis(number(ms)?) })
        }
        _ => Err(format!("expected panic:NODE:N or delay:NODE:N:MILLIS, got `{text}`")),
    }
}

/// `--connect-timeout`: a positive number of seconds, at most a day.
fn parse_connect_timeout(text: &str) -> Result<f64, String> {
    let seconds: f64 = text.parse().map_err(|_| format!("`{text}` is not a number of seconds"))?;
    if !(seconds > 0.0 && seconds <= 86_400.0) {
        return Err(format!("{text}: the connect timeout must be above 0 and at most 86400 seconds"));
    }
    Ok(seconds)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn flags_parse() {
        assert_eq!(amp_sema::parse_define("hidden=16"), Ok(("hidden".into(), 16)));
        assert!(amp_sema::parse_define("hidden").is_err());
        assert_eq!(parse_update_frequency("cell=8"), Ok((NodeSelector::Label("cell".into()), 8)));
        assert_eq!(parse_update_frequency("%3=2"), Ok((NodeSelector::Id(3), 2)));
        assert!(parse_update_frequency("cell=0").is_err());
        assert_eq!(parse_fault("panic:%4:2"), Ok(Fault::PanicAt { node: 4, after: 2 }));
        assert!(parse_fault("explode").is_err());
        assert!(parse_positive("0").is_err());
    }
}
