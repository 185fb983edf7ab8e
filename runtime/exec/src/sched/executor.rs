//! The public face: an [`Executor`] owns a verified graph's executable form, the
//! parameters, their gradient accumulators and optimizer state, and runs epochs,
//! evaluations, inference and single-instance gradients through the workers.

use crate::cluster::Cluster;
use crate::config::ExecConfig;
use crate::error::ExecError;
use crate::instance::ExecInstance;
use crate::load::program::{GroupInfo, Program};
use crate::ops::replica_routes::Routes;
use crate::ops::train::{fold_replica_grads, live_groups, replica_stores, ParamAccess, StalenessStats};
use crate::ops::{RunMode, RunShared};
use crate::sched::controller::{self, AllReduce, Judgement, Observer, RunOutput};
use crate::trace::{write_chrome_trace, write_merged_trace, TraceEvent};
use amp_ir::verify::Verified;
use amp_params::{OptimConfig, OptimState, ParamSet};
use std::time::{Duration, Instant};

/// What a training epoch did.
#[derive(Clone, Debug, PartialEq)]
pub struct EpochStats {
    pub instances: usize,
    /// Mean loss over the instances.
    pub loss: f32,
    /// Each instance's loss, in input order.
    pub losses: Vec<f32>,
    /// Share of instances whose logits' argmax is the cross-entropy label, when the
    /// model's loss is a cross-entropy.
    pub accuracy: Option<f32>,
    /// Parameter-group updates applied (one per group per update).
    pub updates: u64,
    pub elapsed: Duration,
    pub instances_per_s: f64,
    /// Per worker, the time it waited for messages with nothing to do; `elapsed` minus
    /// it is the worker's busy time (its ops, routing, queues and updates).
    pub waited: Vec<Duration>,
    /// Per parameter group (its replicas' gradients included), the staleness of the
    /// gradients it applied in the epoch, in the groups' order (by first node).
    pub staleness: Vec<GroupStaleness>,
    /// Copies of the graph split over processes: the all-reduces of the epoch, as
    /// process 0 made them (zero otherwise).
    pub reduced: AllReduce,
}

/// The staleness a parameter group's updates applied in one epoch: per instance whose
/// gradient reached the group, the updates of the group between the version its forward
/// read and the one its gradient was applied to.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupStaleness {
    /// The group's parameter prefix (`encoder.cell`).
    pub group: String,
    /// Its bound (`ExecConfig::max_staleness`, overrides, schedule); `None`: unbounded.
    pub bound: Option<u64>,
    pub stats: StalenessStats,
}

/// What an evaluation measured (forward only, parameters unchanged).
#[derive(Clone, Debug, PartialEq)]
pub struct EvalStats {
    pub instances: usize,
    pub loss: f32,
    pub losses: Vec<f32>,
    pub accuracy: Option<f32>,
    pub elapsed: Duration,
    pub instances_per_s: f64,
    /// Per instance, in input order: every cross-entropy loss report, in the order they
    /// arrived (one per frame of a rolled-out network). Filled by
    /// [`Executor::evaluate`] only.
    pub judgements: Vec<Vec<Judgement>>,
}

/// Runs one graph: training (asynchronous model-parallel, AMPNet style), evaluation and
/// inference. Parameters live here between runs; during a run they are split among the
/// Ppt nodes' groups.
pub struct Executor {
    program: Program,
    params: ParamSet,
    /// Gradients accumulated since each group's last update (carried across epochs when
    /// not flushed).
    grads: ParamSet,
    optim: OptimState,
    /// Instances each group counted since its last update.
    pending: Vec<u64>,
    config: ExecConfig,
    /// The processes this run is split over (`None`: every worker here).
    cluster: Option<Cluster>,
    trace: Vec<TraceEvent>,
    origin: Instant,
    /// The epoch dropout's masks are drawn for: counts the training epochs run, unless
    /// set ([`Executor::set_epoch`]).
    epoch: u64,
}

impl Executor {
    /// Checks that `params` has the verified graph's parameters, names and shapes, and
    /// places the nodes on `config.workers` workers (a graph runs only once
    /// `amp_ir::verify::verify` accepted it).
    pub fn new(graph: &Verified, params: ParamSet, config: ExecConfig) -> Result<Executor, ExecError> {
        Executor::build(graph, params, config, None)
    }

    /// [`Executor::new`] for a run split over processes: this process runs its range of
    /// the workers (`amp_ir::placement::workers_of`), process 0 the controller, and every
    /// process makes the same calls in the same order (each training run, gather,
    /// evaluation is a step of the runs every process takes).
    pub fn in_cluster(
        graph: &Verified,
        params: ParamSet,
        config: ExecConfig,
        cluster: Cluster,
    ) -> Result<Executor, ExecError> {
        Executor::build(graph, params, config, Some(cluster))
    }

    fn build(
        graph: &Verified,
        params: ParamSet,
        config: ExecConfig,
        cluster: Option<Cluster>,
    ) -> Result<Executor, ExecError> {
        let mut program = Program::new(graph, &params, &config)?;
        if let Some(cluster) = &cluster {
            crate::load::copies::split_over_processes(&mut program, cluster.processes())
                .map_err(|message| ExecError::Config { message })?;
            check_split(&program, &config, cluster.processes())?;
        }
        check_ops(&program, &params)?;
        let grads = params.zeros_like();
        let optim = OptimState::new(&config.optimizer.kind, params.specs());
        let pending = vec![0; program.groups.len()];
        Ok(Executor {
            program,
            params,
            grads,
            optim,
            pending,
            config,
            cluster,
            trace: Vec::new(),
            origin: Instant::now(),
            epoch: 0,
        })
    }

    /// Continues from a saved optimizer state (`--resume`); it must be of the configured
    /// optimizer and fit the parameters.
    pub fn restore_optimizer(&mut self, state: OptimState) -> Result<(), ExecError> {
        state
            .check(&self.config.optimizer.kind, self.params.specs())
            .map_err(|e| ExecError::Params { message: e.to_string() })?;
        self.optim = state;
        Ok(())
    }

    /// Changes the learning rate and other settings of the same optimizer kind (schedules).
    pub fn set_optimizer(&mut self, optimizer: OptimConfig) -> Result<(), ExecError> {
        if optimizer.kind.name() != self.config.optimizer.kind.name() {
            let message = "the optimizer kind cannot change during training".to_string();
            return Err(ExecError::Config { message });
        }
        self.config.optimizer = optimizer;
        Ok(())
    }

    pub fn params(&self) -> &ParamSet {
        &self.params
    }

    /// The epoch the next training epoch (and `grads`) draws dropout's masks for (from 0;
    /// each training epoch moves it on by one). A run resumed at epoch `e` sets it, so
    /// that its masks are those of an uninterrupted run.
    pub fn set_epoch(&mut self, epoch: u64) {
        self.epoch = epoch;
    }

    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The masks of the current epoch.
    fn dropout_pass(&self) -> crate::ops::DropoutPass {
        crate::ops::DropoutPass { seed: self.config.dropout_seed, epoch: self.epoch }
    }

    /// Replaces the parameters (same names and shapes, e.g. loaded from a checkpoint).
    /// Gradients accumulated for the old ones are dropped.
    pub fn set_params(&mut self, params: ParamSet) -> Result<(), ExecError> {
        if !self.params.same_layout(&params) {
            return Err(ExecError::Params { message: "the new set has other names or shapes".to_string() });
        }
        self.params = params;
        self.grads.fill_zero();
        self.pending.iter_mut().for_each(|p| *p = 0);
        Ok(())
    }

    pub fn optimizer_state(&self) -> &OptimState {
        &self.optim
    }

    pub fn config(&self) -> &ExecConfig {
        &self.config
    }

    /// The processes this run is split over, if it is.
    pub fn cluster(&self) -> Option<&Cluster> {
        self.cluster.as_ref()
    }

    /// The worker of every node index (`None` for holes): the placement in use.
    pub fn placement(&self) -> Vec<Option<usize>> {
        self.program.nodes.iter().map(|n| n.as_ref().map(|n| n.worker)).collect()
    }

    /// The worker of every graph node: [`Executor::placement`] with the nodes a fused
    /// kernel, a routing chain or a linear's epilogue runs (holes of the placement) on
    /// that node's worker.
    pub fn graph_placement(&self) -> Vec<Option<usize>> {
        let mut placement = self.placement();
        for node in self.program.nodes.iter().flatten() {
            for m in node.graph_nodes() {
                if let Some(slot) = placement.get_mut(m as usize) {
                    *slot = slot.or(Some(node.worker));
                }
            }
        }
        placement
    }

    /// The fused nodes (`ExecConfig::jit`): per node, its index and the graph nodes it
    /// runs as one kernel call. Fused nodes take indices past the graph's.
    pub fn fused_nodes(&self) -> Vec<(u32, Vec<u32>)> {
        self.composed_nodes(|op| match op {
            crate::load::program::ExecOp::Fused(group) => Some(group.members.clone()),
            _ => None,
        })
    }

    /// The chains of routing nodes (`ExecConfig::chain_routes`): per chain, its index
    /// (its first node's) and the graph nodes it runs, that one first.
    pub fn chained_nodes(&self) -> Vec<(u32, Vec<u32>)> {
        self.composed_nodes(|op| match op {
            crate::load::program::ExecOp::Chain(spec) => Some(spec.member_indices()),
            _ => None,
        })
    }

    /// The linears with an epilogue (`ExecConfig::linear_epilogues`): per linear, its index
    /// and the graph nodes it runs, itself and the activation.
    pub fn epilogue_nodes(&self) -> Vec<(u32, Vec<u32>)> {
        let nodes = self.program.nodes.iter().flatten();
        nodes.filter_map(|n| n.epilogue.map(|e| (n.index, vec![n.index, e.node]))).collect()
    }

    /// Per node whose op `members` gives graph nodes for: its index and those nodes.
    fn composed_nodes(
        &self,
        members: impl Fn(&crate::load::program::ExecOp) -> Option<Vec<u32>>,
    ) -> Vec<(u32, Vec<u32>)> {
        self.program.nodes.iter().flatten().filter_map(|n| members(&n.op).map(|m| (n.index, m))).collect()
    }

    /// The replicas (`ExecConfig::replicas`): per replica node, its index and the graph
    /// node it copies. Replicas take indices past the graph's.
    pub fn replica_nodes(&self) -> Vec<(u32, u32)> {
        self.program.nodes.iter().flatten().filter_map(|n| n.replica_of.map(|of| (n.index, of))).collect()
    }

    /// `op label (%N)` of a node, for traces and reports.
    pub fn node_name(&self, node: u32) -> String {
        self.program.node_name(node)
    }

    /// The trace events recorded so far (with `config.trace`), emptied.
    pub fn take_trace(&mut self) -> Vec<TraceEvent> {
        std::mem::take(&mut self.trace)
    }

    /// Writes trace events as Chrome trace JSON with this graph's node names; split over
    /// processes, with a process per process (`trace::write_merged_trace`).
    pub fn write_trace(&self, events: &[TraceEvent], out: &mut impl std::io::Write) -> std::io::Result<()> {
        let name = |n| self.program.node_name(n);
        let Some(cluster) = &self.cluster else { return write_chrome_trace(events, name, out) };
        let (processes, workers) = (cluster.processes(), self.program.workers);
        let process = |w: u32| amp_ir::placement::process_of(w as usize, processes, workers) as u32;
        let process_name = |p: u32| format!("process {p} ({})", cluster.address_of(p as usize));
        write_merged_trace(events, name, process, process_name, out)
    }

    /// One pass over `instances` (in order), updating parameters as configured. On a
    /// non-finite loss ([`ExecError::NonFiniteLoss`]) or any other error, training stops:
    /// the parameters are those of the last update, and the gradients accumulated since
    /// are dropped, so [`Executor::params`] is a sound checkpoint.
    pub fn train_epoch<I: ExecInstance + Sync>(&mut self, instances: &[I]) -> Result<EpochStats, ExecError> {
        self.run_epoch(instances, None)
    }

    /// [`Executor::train_epoch`], telling `observer` how far it is while it trains (about
    /// every 100 ms, and once at the end), and handing it the trace events as they come
    /// when it takes them: a whole epoch in one run keeps the pipeline full from its first
    /// instance to its last, where epochs fed in pieces would drain it at the end of every
    /// piece.
    pub fn train_epoch_observed<I: ExecInstance + Sync>(
        &mut self,
        instances: &[I],
        observer: &mut dyn Observer,
    ) -> Result<EpochStats, ExecError> {
        self.run_epoch(instances, Some(observer))
    }

    fn run_epoch<I: ExecInstance + Sync>(
        &mut self,
        instances: &[I],
        observer: Option<&mut dyn Observer>,
    ) -> Result<EpochStats, ExecError> {
        let start = Instant::now();
        let list: Vec<&(dyn ExecInstance + Sync)> = instances.iter().map(|i| i as &(dyn ExecInstance + Sync)).collect();
        let dropout = Some(self.dropout_pass());
        let mut stores = replica_stores(&self.program.groups, &self.params);
        // The live groups end in this block: dropping them settles their accumulators.
        let (result, updates, pending, staleness) = {
            let groups = live_groups(
                &self.program.groups,
                &mut self.params,
                &mut self.grads,
                &mut self.optim.tensors,
                &mut stores,
                &self.pending,
                self.config.defer_weight_grads,
            );
            let shared = RunShared {
                instances: list,
                params: ParamAccess::live_run(groups),
                mode: RunMode::Train,
                routes: Routes::new(&self.program),
                dropout,
            };
            let result = controller::run(
                &self.program,
                &shared,
                &self.config,
                self.cluster.as_ref(),
                &self.pending,
                self.origin,
                observer,
            );
            let groups = shared.params.into_live_groups();
            let masters = self.program.groups.iter().map(|info| info.master.is_none());
            let updates: Vec<u64> =
                groups.iter().zip(masters).filter(|(_, master)| *master).map(|(g, _)| g.updates).collect();
            let pending: Vec<u64> = groups.iter().map(|g| g.pending).collect();
            let staleness: Vec<GroupStaleness> = self
                .program
                .groups
                .iter()
                .zip(&groups)
                .filter(|(info, _)| info.master.is_none())
                .map(|(info, g)| GroupStaleness {
                    group: info.prefix.clone(),
                    bound: info.max_staleness,
                    stats: g.staleness.stats,
                })
                .collect();
            (result, updates, pending, staleness)
        };
        fold_replica_grads(&self.program.groups, &stores, &mut self.grads);
        let mut output = match result {
            Ok(output) => output,
            Err(e) => {
                self.grads.fill_zero();
                self.pending.iter_mut().for_each(|p| *p = 0);
                return Err(e);
            }
        };
        self.pending = pending;
        self.epoch += 1;
        let (mut updates, mut staleness) = (updates, staleness);
        self.gather_group_stats(&mut updates, &mut staleness)?;
        let updates = updates.iter().sum();
        self.share_replica_values()?;
        let waited = std::mem::take(&mut output.waited);
        let reduced = output.reduced;
        let stats = self.summarize(output, start);
        Ok(EpochStats {
            instances: stats.instances,
            loss: stats.loss,
            losses: stats.losses,
            accuracy: stats.accuracy,
            updates,
            elapsed: stats.elapsed,
            instances_per_s: stats.instances_per_s,
            waited,
            staleness,
            reduced,
        })
    }

    /// A run split over processes: brings every parameter group's values and optimizer
    /// state to process 0, where the checkpoint is written (each process trained only the
    /// groups its workers own). Every process calls it at the same point of its runs;
    /// without a cluster it does nothing.
    pub fn gather(&mut self) -> Result<(), ExecError> {
        let Some(cluster) = self.cluster.clone() else { return Ok(()) };
        let slot = |t: usize| u32::try_from(t).map_err(|_| ExecError::Config { message: "too many tensors".into() });
        let (sent, received) = self.gathered_tensors(&cluster);
        let mut own = Vec::new();
        for t in sent {
            let state = self.optim.tensors.get(t).cloned().unwrap_or_default();
            own.push((slot(t)?, (self.params.data(t).to_vec(), state)));
        }
        let expected = received.into_iter().map(|(t, owner)| Ok((slot(t)?, owner))).collect::<Result<Vec<_>, _>>()?;
        for (t, (values, state)) in cluster.gather_values(own, &expected)? {
            let t = t as usize;
            let len = self.params.data(t).len();
            let fits = |v: &[f32]| v.is_empty() || v.len() == len;
            if values.len() != len || !fits(&state.m) || !fits(&state.v) {
                let name = &self.params.spec(t).name;
                return Err(ExecError::Cluster {
                    message: format!(
                        "the gathered `{name}` has {} values and moments of {} and {}",
                        values.len(),
                        state.m.len(),
                        state.v.len()
                    ),
                });
            }
            self.params.data_mut(t).copy_from_slice(&values);
            if let Some(own) = self.optim.tensors.get_mut(t) {
                *own = state;
            }
        }
        Ok(())
    }

    /// A run split over processes, after a training run: each master group's updates and
    /// staleness (per master, in the groups' order) come to process 0 from its owner's
    /// process, where the metrics are written (each process measured only the groups its
    /// workers own). A master of copies split over processes (`GroupInfo::ring`) is
    /// updated in every process, each measuring its own copies' gradients: process 0 adds
    /// the others' measures to its own. Every process calls it at the same point.
    fn gather_group_stats(&self, updates: &mut [u64], staleness: &mut [GroupStaleness]) -> Result<(), ExecError> {
        let Some(cluster) = self.cluster.clone() else { return Ok(()) };
        let (me, processes, workers) = (cluster.process(), cluster.processes(), self.program.workers);
        let masters: Vec<&GroupInfo> = self.program.groups.iter().filter(|g| g.master.is_none()).collect();
        let n = masters.len();
        // Slot `k` for master `k`'s owner's counts, `k + n·p` for process p's measures of a
        // ring master's copies.
        let slot = |k: usize, p: usize| {
            u32::try_from(k + n * p).map_err(|_| ExecError::Config { message: "too many groups".into() })
        };
        let mut own = Vec::new();
        let mut expected = Vec::new();
        for (k, info) in masters.iter().enumerate() {
            let owner = amp_ir::placement::process_of(info.owner, processes, workers);
            let s = &staleness[k].stats;
            let mine = [updates[k], s.gradients, s.total, s.max];
            if owner == me && me != 0 {
                own.push((slot(k, 0)?, mine));
            } else if owner != 0 && me == 0 {
                expected.push((slot(k, 0)?, owner));
            }
            if !info.ring.is_empty() && owner == 0 {
                if me != 0 {
                    own.push((slot(k, me)?, mine));
                } else {
                    for p in 1..processes {
                        expected.push((slot(k, p)?, p));
                    }
                }
            }
        }
        for (at, [u, gradients, total, max]) in cluster.gather_values::<[u64; 4]>(own, &expected)? {
            let (k, from) = (at as usize % n.max(1), at as usize / n.max(1));
            let (Some(updated), Some(s)) = (updates.get_mut(k), staleness.get_mut(k)) else {
                return Err(ExecError::Cluster { message: format!("the counts of group {k}, which is not one") });
            };
            let theirs = StalenessStats { gradients, total, max };
            if from == 0 {
                *updated = u;
                s.stats = theirs;
            } else {
                s.stats.merge(&theirs);
            }
        }
        Ok(())
    }

    /// A run split over processes, after a training run: the values of every master with
    /// a replica in another process go to that process, so that its next run's replicas
    /// (training, which copies them at its start, or evaluation, which reads them) start
    /// from the master's values, as in one process. Every process calls it at the same
    /// point (after each training run); nothing moves when no replica is away from its
    /// master.
    fn share_replica_values(&mut self) -> Result<(), ExecError> {
        let Some(cluster) = self.cluster.clone() else { return Ok(()) };
        let (me, processes, workers) = (cluster.process(), cluster.processes(), self.program.workers);
        let process = |worker: usize| amp_ir::placement::process_of(worker, processes, workers);
        // (tensor, from, to) once per pair of processes.
        let mut moves: Vec<(usize, usize, usize)> = Vec::new();
        for master in self.program.groups.iter().filter(|g| g.master.is_none()) {
            let from = process(master.owner);
            for replica in master.replica_groups.iter().filter_map(|&r| self.program.groups.get(r)) {
                let to = process(replica.owner);
                for &t in master.tensors.iter().filter(|_| to != from) {
                    if !moves.contains(&(t, from, to)) {
                        moves.push((t, from, to));
                    }
                }
            }
        }
        if moves.is_empty() {
            return Ok(());
        }
        let slot = |t: usize| u32::try_from(t).map_err(|_| ExecError::Config { message: "too many tensors".into() });
        let mut sends = Vec::new();
        let mut expected = Vec::new();
        for &(t, from, to) in &moves {
            if from == me {
                sends.push((to, slot(t)?, self.params.data(t).to_vec()));
            } else if to == me {
                expected.push((slot(t)?, from));
            }
        }
        for (slot, values) in cluster.exchange_values::<Vec<f32>>(sends, &expected)? {
            let t = slot as usize;
            if values.len() != self.params.data(t).len() {
                let message = format!("the values of `{}` came with {} values", self.params.spec(t).name, values.len());
                return Err(ExecError::Cluster { message });
            }
            self.params.data_mut(t).copy_from_slice(&values);
        }
        Ok(())
    }

    /// Forward passes only: mean loss and accuracy; parameters unchanged.
    pub fn evaluate<I: ExecInstance + Sync>(&self, instances: &[I]) -> Result<EvalStats, ExecError> {
        let start = Instant::now();
        let (output, _) = self.run_frozen(instances, RunMode::Eval)?;
        Ok(self.summarize_eval(output, start))
    }

    /// Forward passes only: the main sink's output (the sink named `forward`, else the
    /// first) of every instance, in input order (empty when it produced none).
    pub fn infer<I: ExecInstance + Sync>(&self, instances: &[I]) -> Result<Vec<Vec<f32>>, ExecError> {
        let (output, _) = self.run_frozen(instances, RunMode::Infer)?;
        Ok(output.outputs.into_iter().map(Option::unwrap_or_default).collect())
    }

    /// The loss of one instance and the gradient of every parameter (zero for unused
    /// ones); nothing is updated and nothing accumulated for training. Split over
    /// processes, each process has the gradients of the groups its workers own (the others
    /// zero; [`Executor::gather_grads`] brings them to process 0), and only process 0 the
    /// loss (NaN on the others).
    pub fn grads<I: ExecInstance + Sync>(&mut self, instance: &I) -> Result<(f32, ParamSet), ExecError> {
        let list: Vec<&(dyn ExecInstance + Sync)> = vec![instance as &(dyn ExecInstance + Sync)];
        let mut grads = self.params.zeros_like();
        let dropout = self.config.dropout_in_grads.then(|| self.dropout_pass());
        let mut scratch = self.optim.clone();
        let mut stores = replica_stores(&self.program.groups, &self.params);
        let groups = live_groups(
            &self.program.groups,
            &mut self.params,
            &mut grads,
            &mut scratch.tensors,
            &mut stores,
            &[],
            self.config.defer_weight_grads,
        );
        let shared = RunShared {
            instances: list,
            params: ParamAccess::live_run(groups),
            mode: RunMode::Grad,
            routes: Routes::new(&self.program),
            dropout,
        };
        let config = ExecConfig { max_active_keys: 1, ..self.config.clone() };
        let result = controller::run(&self.program, &shared, &config, self.cluster.as_ref(), &[], self.origin, None);
        drop(shared);
        fold_replica_grads(&self.program.groups, &stores, &mut grads);
        let output = result?;
        let follower = self.cluster.as_ref().is_some_and(|c| c.process() != 0);
        let loss = match output.losses.first().copied().flatten() {
            Some(loss) => loss,
            None if follower => f32::NAN,
            None => {
                return Err(ExecError::Config { message: "the graph computed no loss for this instance".to_string() })
            }
        };
        Ok((loss, grads))
    }

    /// A run split over processes: brings to process 0 the gradients in `grads` (shaped
    /// as the parameters, e.g. what [`Executor::grads`] returns, or a sum of those) of the
    /// groups other processes own, each from its owner's `grads`. Every process calls it
    /// at the same point; without a cluster it does nothing.
    ///
    /// A replica in another process than its master leaves its part of the gradients in
    /// its own process's `grads` (at the master's tensors): those come too, and process 0
    /// adds up every process's part.
    pub fn gather_grads(&self, grads: &mut ParamSet) -> Result<(), ExecError> {
        let Some(cluster) = self.cluster.clone() else { return Ok(()) };
        let (me, processes, workers) = (cluster.process(), cluster.processes(), self.program.workers);
        let process = |worker: usize| amp_ir::placement::process_of(worker, processes, workers);
        // A slot per tensor and sending process.
        let slot = |t: usize, from: usize| {
            u32::try_from(t * processes + from).map_err(|_| ExecError::Config { message: "too many tensors".into() })
        };
        let (mut own, mut expected) = (Vec::new(), Vec::new());
        for master in self.program.groups.iter().filter(|g| g.master.is_none()) {
            let mut holders = vec![process(master.owner)];
            holders.extend(
                master.replica_groups.iter().filter_map(|&r| self.program.groups.get(r)).map(|r| process(r.owner)),
            );
            holders.sort_unstable();
            holders.dedup();
            for &t in &master.tensors {
                for &from in holders.iter().filter(|&&p| p != 0) {
                    if from == me {
                        own.push((slot(t, from)?, grads.data(t).to_vec()));
                    } else if me == 0 {
                        expected.push((slot(t, from)?, from));
                    }
                }
            }
        }
        for (slot, values) in cluster.gather_values::<Vec<f32>>(own, &expected)? {
            let t = slot as usize / processes;
            let target = grads.data_mut(t);
            if values.len() != target.len() {
                let name = &self.params.spec(t).name;
                let message =
                    format!("the gathered gradient of `{name}` has {} values, not {}", values.len(), target.len());
                return Err(ExecError::Cluster { message });
            }
            // Process 0's own part is zero unless it runs the group or a replica of it.
            target.iter_mut().zip(&values).for_each(|(g, v)| *g += v);
        }
        Ok(())
    }

    /// What a gather to process 0 moves, by parameter tensor (replicas' masters only):
    /// the tensors this process sends (those its workers own, unless it is process 0),
    /// and on process 0 the tensors it receives with their owning process.
    fn gathered_tensors(&self, cluster: &Cluster) -> (Vec<usize>, Vec<(usize, usize)>) {
        let (me, processes, workers) = (cluster.process(), cluster.processes(), self.program.workers);
        let (mut sent, mut received) = (Vec::new(), Vec::new());
        for group in self.program.groups.iter().filter(|g| g.master.is_none()) {
            let owner = amp_ir::placement::process_of(group.owner, processes, workers);
            if owner == me && me != 0 {
                sent.extend(group.tensors.iter().copied());
            } else if owner != 0 && me == 0 {
                received.extend(group.tensors.iter().map(|&t| (t, owner)));
            }
        }
        (sent, received)
    }

    fn run_frozen<I: ExecInstance + Sync>(
        &self,
        instances: &[I],
        mode: RunMode,
    ) -> Result<(RunOutput, Duration), ExecError> {
        let start = Instant::now();
        let list: Vec<&(dyn ExecInstance + Sync)> = instances.iter().map(|i| i as &(dyn ExecInstance + Sync)).collect();
        let shared = RunShared {
            instances: list,
            params: ParamAccess::Frozen { params: &self.params, groups: &self.program.groups },
            mode,
            routes: Routes::new(&self.program),
            dropout: None,
        };
        let output =
            controller::run(&self.program, &shared, &self.config, self.cluster.as_ref(), &[], self.origin, None)?;
        Ok((output, start.elapsed()))
    }

    fn summarize(&mut self, output: RunOutput, start: Instant) -> EvalStats {
        let RunOutput { losses, correct, trace, .. } = output;
        if self.config.trace {
            self.trace.extend(trace);
        }
        stats(losses, correct, Vec::new(), start)
    }

    fn summarize_eval(&self, output: RunOutput, start: Instant) -> EvalStats {
        stats(output.losses, output.correct, output.judgements, start)
    }
}

fn stats(
    losses: Vec<Option<f32>>,
    correct: Vec<Option<bool>>,
    judgements: Vec<Vec<Judgement>>,
    start: Instant,
) -> EvalStats {
    let elapsed = start.elapsed();
    let instances = losses.len();
    let known: Vec<f32> = losses.iter().flatten().copied().collect();
    let loss = if known.is_empty() { f32::NAN } else { known.iter().sum::<f32>() / known.len() as f32 };
    let judged: Vec<bool> = correct.into_iter().flatten().collect();
    let accuracy = (!judged.is_empty()).then(|| judged.iter().filter(|&&c| c).count() as f32 / judged.len() as f32);
    let instances_per_s = instances as f64 / elapsed.as_secs_f64().max(1e-9);
    EvalStats {
        instances,
        loss,
        losses: losses.into_iter().map(|l| l.unwrap_or(f32::NAN)).collect(),
        accuracy,
        elapsed,
        instances_per_s,
        judgements,
    }
}

/// Builds every node's op once, so that a graph with an op this executor cannot run yet
/// is refused when the executor is made rather than in the middle of a run. Done here,
/// not in `Program::new`: the program (`load/`) knows nothing of the ops built on it.
fn check_ops(program: &Program, params: &ParamSet) -> Result<(), ExecError> {
    let access = ParamAccess::Frozen { params, groups: &program.groups };
    for node in program.nodes.iter().flatten() {
        crate::ops::build(node, &access).map_err(|error| ExecError::at_node(node, crate::message::UNSET, error))?;
    }
    Ok(())
}

/// What a run split over processes cannot do yet (besides what copies of the graph
/// cannot, `load::copies::split_over_processes`): parameters live with their owner's
/// process, so a group's nodes must all run there (a replica is a group of its own, and
/// may run elsewhere: `sched::worker`'s remote replicas); a replicated node's messages are
/// routed where its producers and consumers run, which must be one process (it keeps the
/// table that sends a key's backward messages to the copy that served its forward); a
/// replica away from its master hands its gradients over at a flush, which training
/// without one (`flush_at_epoch_end` off) would lose; and a bounded group's owner reads
/// the reads owed by its replicas in memory, so those run in its process.
fn check_split(program: &Program, config: &ExecConfig, processes: usize) -> Result<(), ExecError> {
    let refuse = |message: String| Err(ExecError::Config { message });
    if program.workers < processes {
        return refuse(format!("{} workers cannot be split over {processes} processes", program.workers));
    }
    let process = |worker: usize| amp_ir::placement::process_of(worker, processes, program.workers);
    // A master reduced over processes (`GroupInfo::ring`) bounds each process's reads there.
    let bounded =
        program.groups.iter().filter(|g| g.master.is_none() && g.max_staleness.is_some() && g.ring.is_empty());
    for master in bounded {
        let away = master.replica_groups.iter().filter_map(|&r| program.groups.get(r));
        if let Some(replica) = away.into_iter().find(|r| process(r.owner) != process(master.owner)) {
            return refuse(format!(
                "parameter `{}` has a staleness bound and a replica on worker {} (process {}), away from its owner's \
                 process {}: split over processes, a bounded group's replicas must run in its owner's process",
                master.prefix,
                replica.owner,
                process(replica.owner),
                process(master.owner)
            ));
        }
    }
    for node in program.nodes.iter().flatten().filter(|n| n.replicas.len() > 1) {
        let neighbours = node.producers.iter().map(|&(p, _)| p).chain(node.consumers.iter().flatten().map(|&(c, _)| c));
        let mut routers: Vec<usize> = neighbours.filter_map(|n| program.node(n)).map(|n| process(n.worker)).collect();
        routers.sort_unstable();
        routers.dedup();
        if routers.len() > 1 {
            let list: Vec<String> = routers.iter().map(|p| p.to_string()).collect();
            return refuse(format!(
                "%{} ({}) is replicated, and its producers and consumers run in processes {}: split over \
                 processes, a replicated node's neighbours must run in one process, which routes its messages \
                 (place them on workers of one process)",
                node.index,
                node.label,
                list.join(", ")
            ));
        }
        let away =
            node.replicas.iter().filter_map(|&r| program.node(r)).any(|r| process(r.worker) != process(node.worker));
        if away && !config.flush_at_epoch_end {
            return refuse(format!(
                "%{} ({}) has a replica in another process than its master, which hands its gradients over at \
                 the end of each epoch: training without a flush at the end of an epoch would lose them",
                node.index, node.label
            ));
        }
    }
    for group in &program.groups {
        let owner = process(group.owner);
        for &node in &group.nodes {
            let Some(info) = program.node(node) else { continue };
            if process(info.worker) != owner {
                return refuse(format!(
                    "parameter `{}` is used on worker {} (process {}) and owned by worker {} (process {owner}); \
                     its nodes must run in one process (place them on workers of one process)",
                    group.prefix,
                    info.worker,
                    process(info.worker),
                    group.owner
                ));
            }
        }
    }
    Ok(())
}
