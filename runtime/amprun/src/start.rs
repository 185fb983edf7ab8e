//! Where training starts: fresh parameters from `--seed`, parameters from `--init`, or
//! the `--save` checkpoint with `--resume`; and the metadata amprun writes into its
//! checkpoints so that a resumed run knows where it is.

use crate::cli::TrainArgs;
use crate::failure::Failure;
use crate::setup;
use amp_params::{OptimConfig, OptimState, ParamSet, ParamSpec};
use std::path::Path;

/// Checkpoint metadata keys written by `amprun train` (besides the parameters and the
/// optimizer state, which `amp-params` stores itself).
pub mod meta {
    /// The model's name.
    pub const MODEL: &str = "model";
    /// Epochs finished when the parameters were saved.
    pub const EPOCH: &str = "epoch";
    /// The seed of the initialisation and of the shuffles.
    pub const SEED: &str = "seed";
    /// The epoch whose shuffle comes next (`epoch + 1`).
    pub const SHUFFLE_EPOCH: &str = "shuffle_epoch";
    /// Instances of that epoch already trained on (0: checkpoints are taken at epoch ends).
    pub const DATA_POSITION: &str = "data_position";
    /// Training instances per epoch (a resumed run warns when its data differs).
    pub const INSTANCES: &str = "instances";
    /// `complete`, or why training stopped (`non-finite loss in epoch N`).
    pub const STATUS: &str = "status";
    pub const OPTIMIZER: &str = "optimizer";
    /// The epoch with the best validation so far (`--keep-best`, `--patience`), when the
    /// run validated: with the two keys below, what a resumed run continues from.
    pub const BEST_EPOCH: &str = "best_epoch";
    /// Its score: the accuracy, or minus the loss for a model without one (Rust's shortest
    /// text that reads back as the same f64).
    pub const BEST_SCORE: &str = "best_score";
    /// Validations since the best that did not beat it (`--patience` counts them).
    pub const SINCE_BEST: &str = "since_best";
}

/// The best validation a checkpoint records: its epoch, its score, and the validations
/// since that did not beat it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SavedBest {
    pub epoch: u64,
    pub score: f64,
    pub since: u64,
}

/// Where training starts: parameters, optimizer state, epochs already done, the seed.
pub struct Start {
    pub params: ParamSet,
    pub optim: Option<OptimState>,
    pub epochs_done: u64,
    pub seed: u64,
    /// Training instances per epoch of the resumed run.
    pub saved_instances: Option<usize>,
    /// The resumed run's best validation so far (none: a fresh run, or a checkpoint of a
    /// run without `--valid`).
    pub best: Option<SavedBest>,
}

/// Fresh parameters (`--seed`, `--init FILE`, or `given` in memory), or the `--save`
/// checkpoint (`--resume`).
pub fn starting_point(
    args: &TrainArgs,
    graph: &amp_ir::Graph,
    name: &str,
    optimizer: &OptimConfig,
    given: Option<&ParamSet>,
) -> Result<Start, Failure> {
    let specs = ParamSpec::of_graph(graph);
    let seed = args.seed.unwrap_or(0);
    let fresh = |params| Start { params, optim: None, epochs_done: 0, seed, saved_instances: None, best: None };
    if let (Some(path), true) = (&args.save, args.resume) {
        return resume(path, &specs, args.seed, name, optimizer);
    }
    if let Some(params) = given {
        return Ok(fresh(setup::given_params(params, graph)?));
    }
    match &args.init {
        Some(init) => Ok(fresh(setup::load_params(init, graph)?)),
        None => Ok(fresh(ParamSet::init(&specs, seed))),
    }
}

fn resume(
    path: &Path,
    specs: &[ParamSpec],
    seed: Option<u64>,
    name: &str,
    optimizer: &OptimConfig,
) -> Result<Start, Failure> {
    let shown = path.display();
    if !path.exists() {
        return Err(Failure::usage(format!("--resume: there is no checkpoint `{shown}` to resume from")));
    }
    let checkpoint = amp_params::load_checkpoint(path, specs)
        .map_err(|e| Failure::params(&format!("cannot resume from `{shown}`"), &e))?;
    checkpoint.params.check_finite().map_err(|e| Failure::params(&format!("cannot resume from `{shown}`"), &e))?;
    let metadata = &checkpoint.metadata;
    let number = |key: &str| -> Result<u64, Failure> {
        match metadata.get(key) {
            Some(value) => value.parse().map_err(|_| {
                // Metadata is untrusted text: shown escaped and cut short.
                let mut excerpt: String = value.chars().take(40).collect::<String>().escape_debug().collect();
                if value.chars().nth(40).is_some() {
                    excerpt.push('…');
                }
                Failure::bad_input(format!(
                    "cannot resume from `{shown}`: its `{key}` is malformed: `{excerpt}` is not a whole number"
                ))
            }),
            None => Err(Failure::bad_input(format!(
                "cannot resume from `{shown}`: it has no `{key}` (not an amprun checkpoint?)"
            ))),
        }
    };
    let epochs_done = number(meta::EPOCH)?;
    let saved_seed = number(meta::SEED)?;
    if let Some(saved) = metadata.get(meta::MODEL).filter(|m| *m != name) {
        return Err(Failure::bad_input(format!("`{shown}` is a checkpoint of model `{saved}`, not `{name}`")));
    }
    if number(meta::DATA_POSITION).unwrap_or(0) != 0 {
        return Err(Failure::bad_input(format!("`{shown}` was saved within an epoch; amprun resumes at epoch ends")));
    }
    if seed.is_some_and(|s| s != saved_seed) {
        eprintln!("amprun: warning: resuming with the checkpoint's seed {saved_seed}, not --seed");
    }
    if let Some(status) = metadata.get(meta::STATUS).filter(|s| s.starts_with("stopped")) {
        eprintln!("amprun: warning: `{shown}` was written when training {status}; resuming after epoch {epochs_done}");
    }
    let wanted = optimizer.kind.name();
    let optim = match checkpoint.optim {
        Some(state) if state.kind != wanted => {
            return Err(Failure::usage(format!(
                "`{shown}` was trained with --optimizer {}; resume with the same optimizer (not {wanted})",
                state.kind
            )))
        }
        Some(state) => Some(state),
        None => {
            eprintln!("amprun: warning: `{shown}` has no optimizer state; the optimizer starts afresh");
            None
        }
    };
    let saved_instances = metadata.get(meta::INSTANCES).and_then(|v| v.parse().ok());
    let best = match metadata.get(meta::BEST_EPOCH) {
        None => None,
        Some(_) => {
            let score = metadata.get(meta::BEST_SCORE).and_then(|v| v.parse::<f64>().ok()).filter(|s| s.is_finite());
            let Some(score) = score else {
                return Err(Failure::bad_input(format!(
                    "cannot resume from `{shown}`: its `{}` is missing or not a finite number",
                    meta::BEST_SCORE
                )));
            };
            Some(SavedBest { epoch: number(meta::BEST_EPOCH)?, score, since: number(meta::SINCE_BEST)? })
        }
    };
    Ok(Start { params: checkpoint.params, optim, epochs_done, seed: saved_seed, saved_instances, best })
}
