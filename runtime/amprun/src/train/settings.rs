//! A training run's settings from its flags, each checked before any work: the files it
//! writes, the optimizer, the executor's configuration, `--update-frequency`'s nodes.

use super::*;

/// The files the run will write, checked before any work (a directory that is missing
/// should not end a run after its first epoch) and refused when they exist and are not
/// regular files (a FIFO, a device, a symbolic link: see `amp_params::target`).
pub(super) fn check_outputs(args: &TrainArgs) -> Result<(), Failure> {
    let outputs = [
        ("--save", &args.save),
        ("--keep-best", &args.keep_best),
        ("--metrics", &args.metrics),
        ("--trace", &args.trace),
        ("--report", &args.report),
    ];
    for (flag, path) in outputs.into_iter().chain([("--profile", &args.profile)]) {
        if let Some(path) = path {
            setup::check_output(flag, path)?;
        }
    }
    Ok(())
}

/// Whether the run measures its workers' utilization (see `placement`).
pub(super) fn measuring(args: &TrainArgs) -> bool {
    args.report_utilization || tracing(args)
}

/// Whether the executor records trace events: for `--trace`, and for the profile.
pub(super) fn tracing(args: &TrainArgs) -> bool {
    args.profile.is_some() || args.trace.is_some()
}

/// The optimizer of `--optimizer`, `--lr`, `--momentum`, `--weight-decay` and
/// `--clip-norm`, each checked.
pub(super) fn optimizer(args: &TrainArgs) -> Result<OptimConfig, Failure> {
    // SGD's step on the mean gradient of M instances has about 1/√M of one instance's
    // noise, so √M times the rate keeps an epoch's progress near per-instance SGD's at 0.01
    // (M times, the linear rule, diverged on list-reduce and GGSNN at M = 16); Adam
    // normalises the gradient's scale itself.
    let default_lr = match args.optimizer {
        OptimizerName::Adam => 0.001,
        OptimizerName::Sgd | OptimizerName::Momentum => 0.01 * (args.update_size() as f32).sqrt(),
    };
    let lr = args.lr.unwrap_or(default_lr);
    if !(lr.is_finite() && lr >= 0.0) {
        return Err(Failure::usage(format!("--lr {lr} is not a finite, non-negative learning rate")));
    }
    let mut config = match args.optimizer {
        OptimizerName::Sgd => OptimConfig::sgd(lr),
        OptimizerName::Momentum => {
            if !(0.0..1.0).contains(&args.momentum) {
                return Err(Failure::usage(format!("--momentum {} is not in [0, 1)", args.momentum)));
            }
            OptimConfig::momentum(lr, args.momentum)
        }
        OptimizerName::Adam => OptimConfig::adam(lr),
    };
    if !(args.weight_decay.is_finite() && args.weight_decay >= 0.0) {
        return Err(Failure::usage(format!("--weight-decay {} is not a non-negative number", args.weight_decay)));
    }
    config = config.with_weight_decay(args.weight_decay);
    if let Some(max_norm) = args.clip_norm {
        if !(max_norm.is_finite() && max_norm > 0.0) {
            return Err(Failure::usage(format!("--clip-norm {max_norm} is not a positive number")));
        }
        config = config.with_clip_norm(max_norm);
    }
    Ok(config)
}

/// The executor's settings of a training run.
pub(super) fn train_config(args: &TrainArgs, optimizer: OptimConfig, placement: Placement) -> ExecConfig {
    ExecConfig {
        placement,
        min_update_frequency: args.update_size(),
        update_overrides: args.update_frequency.clone(),
        sync_updates: !args.asynchronous,
        flush_at_epoch_end: true,
        trace: tracing(args),
        ..staleness::apply(
            setup::exec_config(&args.exec, optimizer, args.update_size()),
            &args.max_staleness,
            args.staleness_schedule,
        )
    }
}

/// Every `--update-frequency NODE=M` must name a node with parameters (the executor would
/// ignore one that does not, and the user would never know).
pub(super) fn check_update_overrides(graph: &amp_ir::Graph, overrides: &[(NodeSelector, u64)]) -> Result<(), Failure> {
    crate::staleness::check_selectors(graph, "--update-frequency", overrides.iter().map(|(s, _)| s), false)
}
