//! Bounded staleness and stragglers on the command line (`--max-staleness`,
//! `--staleness-schedule`, `--slow-worker`): the flags' values, the executor's settings
//! they make, and the per-group staleness each epoch reports (`--metrics` field
//! `staleness`, the summary's line).

use crate::failure::Failure;
use amp_exec::{ExecConfig, GroupStaleness, NodeSelector, SlowWorker};
use clap::ValueEnum;
use serde_json::{json, Value};

/// One `--max-staleness` value: `K` for every parameter group, `NODE=K` for one (a layer's
/// label, `%index`, or a parameter array's name).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StalenessBound {
    All(u64),
    Node(NodeSelector, u64),
}

/// How the bounds vary over the groups (`--staleness-schedule`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum StalenessSchedule {
    /// Every group gets `--max-staleness K`.
    Uniform,
    /// DSP: the group nearest the loss gets K, each group before it one more.
    Layerwise,
}

/// Parses `K` or `NODE=K` (K may be 0).
pub fn parse_bound(text: &str) -> Result<StalenessBound, String> {
    let number = |v: &str| v.trim().parse::<u64>().map_err(|_| format!("`{v}` is not a non-negative integer"));
    match text.rsplit_once('=') {
        None => Ok(StalenessBound::All(number(text)?)),
        Some((node, k)) => {
            let node = node.trim();
            if node.is_empty() {
                return Err(format!("no node named in `{text}`"));
            }
            Ok(StalenessBound::Node(NodeSelector::parse(node), number(k)?))
        }
    }
}

/// Parses `--slow-worker W=F` or `W=F@START..END` (seconds since the executor started).
/// The executor checks the worker against the run's workers.
pub fn parse_slow_worker(text: &str) -> Result<SlowWorker, String> {
    let (worker, rest) = text.split_once('=').ok_or_else(|| format!("expected W=F or W=F@START..END, got `{text}`"))?;
    let worker = worker.trim().parse::<usize>().map_err(|_| format!("`{worker}` is not a worker number"))?;
    let (factor, during) = match rest.split_once('@') {
        None => (rest, None),
        Some((factor, window)) => {
            let (start, end) =
                window.split_once("..").ok_or_else(|| format!("expected START..END seconds, got `{window}`"))?;
            let seconds = |v: &str| v.trim().parse::<f64>().map_err(|_| format!("`{v}` is not a number of seconds"));
            let (start, end) = (seconds(start)?, seconds(end)?);
            if !(start.is_finite() && end.is_finite() && 0.0 <= start && start < end) {
                return Err(format!("`{window}` is not an interval of seconds from 0"));
            }
            (factor, Some((start, end)))
        }
    };
    let factor = factor.trim().parse::<f64>().map_err(|_| format!("`{factor}` is not a number"))?;
    let max = amp_exec::config::MAX_SLOWDOWN;
    if !(1.0..=max).contains(&factor) {
        return Err(format!("a slowdown is 1 to {max}, not {factor}"));
    }
    Ok(SlowWorker { worker, factor, during })
}

/// Parses `--worker-speed W=S` (S positive, at most 1000).
pub fn parse_worker_speed(text: &str) -> Result<(usize, f64), String> {
    let (worker, speed) = text.split_once('=').ok_or_else(|| format!("expected W=S, got `{text}`"))?;
    let worker = worker.trim().parse::<usize>().map_err(|_| format!("`{worker}` is not a worker number"))?;
    let speed = speed.trim().parse::<f64>().map_err(|_| format!("`{speed}` is not a number"))?;
    if !(speed > 0.0 && speed <= 1000.0) {
        return Err(format!("a speed is above 0 and at most 1000, not {speed}"));
    }
    Ok((worker, speed))
}

/// The planner's assumptions with the workers' speeds of `--worker-speed` (a worker named
/// twice takes the last); a worker the run does not have is a usage error.
pub fn with_speeds(
    assumptions: amp_plan::Assumptions,
    speeds: &[(usize, f64)],
    workers: usize,
) -> Result<amp_plan::Assumptions, Failure> {
    if speeds.is_empty() {
        return Ok(assumptions);
    }
    let mut worker_speed = vec![1.0; workers];
    for &(w, speed) in speeds {
        let slot = worker_speed
            .get_mut(w)
            .ok_or_else(|| Failure::usage(format!("--worker-speed: worker {w} does not exist ({workers} workers)")))?;
        *slot = speed;
    }
    Ok(amp_plan::Assumptions { worker_speed, ..assumptions })
}

/// The executor's staleness settings from the flags. The last `K` for all groups wins;
/// a schedule without one starts from 0.
pub fn apply(config: ExecConfig, bounds: &[StalenessBound], schedule: StalenessSchedule) -> ExecConfig {
    let all = bounds.iter().rev().find_map(|b| match b {
        StalenessBound::All(k) => Some(*k),
        StalenessBound::Node(..) => None,
    });
    let overrides = bounds
        .iter()
        .filter_map(|b| match b {
            StalenessBound::Node(node, k) => Some((node.clone(), *k)),
            StalenessBound::All(_) => None,
        })
        .collect();
    ExecConfig {
        max_staleness: all,
        staleness_overrides: overrides,
        staleness_layerwise: schedule == StalenessSchedule::Layerwise,
        ..config
    }
}

/// Every `--max-staleness NODE=K` must name a node with parameters (by label or index) or
/// a parameter prefix: the executor would ignore another, and the user would never know.
pub fn check_nodes(graph: &amp_ir::Graph, bounds: &[StalenessBound]) -> Result<(), Failure> {
    let selectors = bounds.iter().filter_map(|b| match b {
        StalenessBound::Node(selector, _) => Some(selector),
        StalenessBound::All(_) => None,
    });
    check_selectors(graph, "--max-staleness", selectors, true)
}

/// Every selector of `flag` must name a node with parameters: by index or label, or with
/// `by_param` also by its parameter prefix. The error lists those nodes (and their
/// parameters with `by_param`).
pub fn check_selectors<'s>(
    graph: &amp_ir::Graph,
    flag: &str,
    selectors: impl IntoIterator<Item = &'s NodeSelector>,
    by_param: bool,
) -> Result<(), Failure> {
    let ppts: Vec<(u32, &str, &str)> = graph
        .nodes
        .node_indices()
        .filter_map(|i| graph.nodes.node_weight(i).map(|n| (i.index() as u32, n)))
        .filter_map(|(i, n)| Some((i, n.label.as_str(), n.op.param()?)))
        .collect();
    for selector in selectors {
        let found = ppts.iter().any(|&(i, label, param)| match selector {
            NodeSelector::Id(id) => *id == i,
            NodeSelector::Label(name) => name == label || (by_param && name == param),
        });
        if !found {
            let name = |&(i, l, p): &(u32, &str, &str)| {
                if by_param {
                    format!("{l} (%{i}, {p})")
                } else {
                    format!("{l} (%{i})")
                }
            };
            let mut names: Vec<String> = ppts.iter().map(name).collect();
            names.dedup();
            let shown = match selector {
                NodeSelector::Id(id) => format!("%{id}"),
                NodeSelector::Label(name) => name.clone(),
            };
            return Err(Failure::usage(format!(
                "{flag}: `{shown}` is not a node with parameters (those are: {})",
                names.join(", ")
            )));
        }
    }
    Ok(())
}

/// The metrics' `staleness` field: one object per parameter group, `{"group", "mean",
/// "max", "gradients", "bound"}` (`bound` null when unbounded).
pub fn to_json(groups: &[GroupStaleness]) -> Value {
    Value::Array(
        groups
            .iter()
            .map(|g| {
                json!({
                    "group": g.group,
                    "mean": crate::report::finite(g.stats.mean()),
                    "max": g.stats.max,
                    "gradients": g.stats.gradients,
                    "bound": g.bound,
                })
            })
            .collect(),
    )
}

/// `staleness: embed 0.50 (max 2, ≤ 3), cell 0.25 (max 1)`: for the summary line of an
/// epoch that measured any.
pub fn line(groups: &[GroupStaleness]) -> Option<String> {
    if groups.iter().all(|g| g.stats.max == 0) {
        return None;
    }
    let parts: Vec<String> = groups
        .iter()
        .map(|g| {
            let bound = g.bound.map(|k| format!(", bound {k}")).unwrap_or_default();
            format!("{} {:.2} (max {}{bound})", g.group, g.stats.mean(), g.stats.max)
        })
        .collect();
    Some(format!("staleness: {}", parts.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_parse_for_all_groups_or_one_node() {
        assert_eq!(parse_bound("0"), Ok(StalenessBound::All(0)));
        assert_eq!(parse_bound("cell=3"), Ok(StalenessBound::Node(NodeSelector::Label("cell".into()), 3)));
        assert_eq!(parse_bound("%4=1"), Ok(StalenessBound::Node(NodeSelector::Id(4), 1)));
        assert!(parse_bound("-1").is_err());
        assert!(parse_bound("=2").is_err());
        assert!(parse_bound("cell=x").is_err());
    }

    #[test]
    fn slow_workers_parse_with_and_without_a_window() {
        assert_eq!(parse_slow_worker("1=4"), Ok(SlowWorker { worker: 1, factor: 4.0, during: None }));
        assert_eq!(
            parse_slow_worker("0=2.5@10..20.5"),
            Ok(SlowWorker { worker: 0, factor: 2.5, during: Some((10.0, 20.5)) })
        );
        for bad in ["1", "x=2", "1=0.5", "1=NaN", "1=2@5", "1=2@5..3", "1=2@-1..3"] {
            assert!(parse_slow_worker(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn worker_speeds_parse_and_fill_the_planners_assumptions() {
        assert_eq!(parse_worker_speed("1=0.33"), Ok((1, 0.33)));
        for bad in ["1", "1=0", "1=-2", "x=1", "1=inf"] {
            assert!(parse_worker_speed(bad).is_err(), "{bad}");
        }
        let a = with_speeds(amp_plan::Assumptions::default(), &[(1, 0.5), (1, 0.25)], 3).unwrap();
        assert_eq!(a.worker_speed, [1.0, 0.25, 1.0]);
        assert!(with_speeds(amp_plan::Assumptions::default(), &[(3, 0.5)], 3).is_err());
    }

    #[test]
    fn the_last_global_bound_wins_and_nodes_override() {
        let bounds = [
            StalenessBound::All(4),
            StalenessBound::Node(NodeSelector::Label("embed".into()), 1),
            StalenessBound::All(2),
        ];
        let config = apply(ExecConfig::default(), &bounds, StalenessSchedule::Layerwise);
        assert_eq!(config.max_staleness, Some(2));
        assert_eq!(config.staleness_overrides, vec![(NodeSelector::Label("embed".into()), 1)]);
        assert!(config.staleness_layerwise);
        let none = apply(ExecConfig::default(), &[], StalenessSchedule::Uniform);
        assert_eq!((none.max_staleness, none.staleness_layerwise), (None, false));
    }
}
