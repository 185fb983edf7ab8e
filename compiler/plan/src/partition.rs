//! The planner: nodes onto `N` workers, minimising the busiest worker's predicted time per
//! instance.
//!
//! **Objective.** A worker's time per instance is the load of its nodes plus, for every
//! edge cut between it and another worker, the edge's cut cost (both ends pay it). Plans
//! compare lexicographically by (busiest worker, sum over workers, sum of squares): the
//! busiest worker bounds the pipeline's throughput; the sum counts the communication the
//! plan adds; the squares prefer balance among the others (which lets the search move off
//! a plateau). Everything is deterministic: fixed orders, ties to the lower index.
//!
//! With a profile that says how instances move, the instances in flight bound the
//! throughput too: no worker starts instances faster than an instance's latency over the
//! instances in flight (`cost.rs`), and every cut edge adds its wake-ups to that latency.
//! The search counts this bound as one more "worker" beside the real ones (never a
//! target of a move), whose time is the bound: a plan is as slow as its busiest worker or
//! its bound, whichever is larger, so a split of a model whose instances move in one wave
//! (each worker waiting for the other) predicts no gain and loses to one worker.
//!
//! With workers in several processes (`Assumptions::processes`), a cut between two
//! processes costs its workers the link's per-message cost instead of the in-process one,
//! adds the link's latency to the bound, and keeps each process's link busy for its bytes:
//! every link is one more "worker" of the search, never a target of a move, so a plan
//! crosses a slow link only where that pays (a plan for hosts differs from one for cores).
//!
//! The executor keeps a parameter group's nodes in its owner's process, so with several
//! processes every starting point puts a group split over processes on the worker of its
//! heaviest unit, and local search takes no move that would split one again; a group's
//! units move between processes together (one more kind of move, beside cycles).
//!
//! **Algorithm.** Four starting points (five from 3 workers on), each improved by local
//! search, the best kept (ties to the earlier):
//! 1. *Heavy Ppts isolated*: every Ppt whose load is at least an ideal share (total / N),
//!    heaviest first, up to N - 1 of them, gets a worker of its own; the rest fill the
//!    other workers contiguously (below).
//! 2. *One worker*: everything on worker 0 (no communication at all; local search then
//!    moves off what pays).
//! 3. *Contiguous*: the strongly connected components in topological order, each cycle
//!    (loop body, tree traversal) lighter than half a share kept whole as one item, other
//!    nodes one item each; worker `w` takes the items whose middle falls in the w-th
//!    equal part of the total (a pipeline cut into stages).
//! 4. *Greedy*: the same items in the same order, each onto the worker where it adds the
//!    least (its load plus the cuts to its placed neighbours).
//! 5. *Half as many workers*: the plan for `⌈N / 2⌉` workers (planned the same way), which
//!    local search may spread further; so a plan is never predicted slower than the plan
//!    for half as many workers, nor than the 2-worker plan (local search moves one item at
//!    a time, so every other start can end in a placement that a split over fewer workers
//!    beats).
//!
//! Local search then moves single nodes, and whole cycles, to the worker of a neighbour or
//! to the least loaded worker, taking the best strictly improving move, sweep after sweep
//! until none improves (at most 100 sweeps, fewer on graphs of more than ~500,000 nodes
//! and edges). A cut inside a loop is paid every iteration
//! (its edge's rate counts the iterations), so loops stay together exactly when splitting
//! them does not pay. Isolated Ppts and their workers are left alone.
//!
//! **Units.** The search places units (`topology.rs`): a fused group with the splits only
//! it reads is one item that moves as a whole, with its members' summed load and merged
//! neighbours, and every member ends on its representative's worker.

use crate::cost::Costs;
use crate::topology::Topology;
use amp_ir::placement::process_of;
use std::collections::BTreeMap;

const MAX_SWEEPS: usize = 100;
/// Node and edge visits the local search may spend, over all its sweeps (about a second).
const SWEEP_BUDGET: usize = 50_000_000;

/// The chosen assignment and which Ppts have a worker of their own.
pub(crate) struct Partition {
    pub assign: Vec<usize>,
    pub isolated: Vec<usize>,
}

/// What the search needs: per-node loads and the merged cut cost of every neighbour pair,
/// over units (`topology.rs`): a fused unit's representative carries the load and the
/// neighbours of all its members, which have none of their own and follow it.
#[derive(Clone)]
pub(crate) struct Problem<'a> {
    pub workers: usize,
    pub topo: &'a Topology,
    /// Per representative, its unit's load (0 for the other members).
    pub load: Vec<f64>,
    /// Every node's own load, for the plan's table.
    pub own_load: Vec<f64>,
    /// Per node: (neighbour, what the pair costs when cut).
    pub adj: Vec<Vec<(usize, Cut)>>,
    /// Per node: (neighbour, µs per instance the pair adds to the latency bound when cut
    /// inside a process: its wake-ups over the instances in flight; and when cut between
    /// processes: the link's latency too); only pairs that add something.
    pub waits: Vec<Vec<(usize, f64, f64)>>,
    /// The latency bound of a plan without cuts: µs per instance (0 without one).
    pub latency: f64,
    pub ppt: Vec<bool>,
    pub total: f64,
    /// Per worker, its speed (`Assumptions::worker_speed`): its time is its work over it.
    pub speed: Vec<f64>,
    /// Per worker, its process (`Assumptions::processes`, `amp_ir::placement::process_of`).
    pub process: Vec<usize>,
    /// Processes: each one's link is a resource of the search (after the bound).
    pub processes: usize,
    /// With several processes, the units of each parameter group used by more than one
    /// (their leads): the executor runs a group's nodes in its owner's process, so the
    /// search keeps them in one process and moves them between processes together.
    pub groups: Vec<Vec<usize>>,
    /// Per node, its index in `groups` (none with one process).
    pub group_of: Vec<Option<usize>>,
}

/// What a pair of neighbours costs when cut: µs per instance each of the two workers pays
/// inside a process and between processes, and each of the two processes' links.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Cut {
    pub local: f64,
    pub remote: f64,
    pub link: f64,
}

impl<'a> Problem<'a> {
    pub fn new(costs: &Costs, topo: &'a Topology, workers: usize) -> Problem<'a> {
        let n = topo.bound;
        let own_load: Vec<f64> = (0..n).map(|i| costs.node(i).map_or(0.0, |c| c.load_us)).collect();
        let mut load = vec![0.0; n];
        for v in topo.nodes() {
            load[topo.unit_of[v]] += own_load[v];
        }
        let ppt: Vec<bool> = (0..n).map(|i| topo.leads(i) && costs.node(i).is_some_and(|c| c.ppt)).collect();
        // Instances in flight bound the throughput only when a profile said how many.
        let in_flight = if costs.in_flight >= 1.0 { costs.in_flight } else { f64::INFINITY };
        let assumed = &costs.assumptions;
        let wake_us = assumed.wake_us / in_flight;
        // A message crossing processes adds the link's latency to its instance's time:
        // with a profile, at each step that waits for what crossed (as the wake-ups);
        // without, at every message each way, hidden by the run's instances in flight.
        let remote_wait = |waits: f64, messages: f64| {
            if in_flight.is_finite() {
                waits * (assumed.wake_us + assumed.link_latency_us) / in_flight
            } else {
                2.0 * messages * assumed.link_latency_us / assumed.in_flight
            }
        };
        let mut pairs: Vec<BTreeMap<usize, (Cut, f64, f64)>> = vec![BTreeMap::new(); n];
        for e in &costs.edges {
            let (a, b) = (e.from as usize, e.to as usize);
            if a >= n || b >= n || !topo.present[a] || !topo.present[b] {
                continue;
            }
            let (a, b) = (topo.unit_of[a], topo.unit_of[b]);
            if a == b {
                continue;
            }
            for (x, y) in [(a, b), (b, a)] {
                let pair = pairs[x].entry(y).or_default();
                pair.0.local += e.cut_us;
                pair.0.remote += e.remote_cut_us;
                pair.0.link += e.link_us;
                pair.1 += e.waits * wake_us;
                pair.2 += remote_wait(e.waits, e.messages);
            }
        }
        let adj = pairs.iter().map(|m| m.iter().map(|(&u, &(cut, _, _))| (u, cut)).collect()).collect();
        let waits = pairs
            .iter()
            .map(|m| {
                m.iter()
                    .filter(|(_, &(_, local, remote))| local > 0.0 || remote > 0.0)
                    .map(|(&u, &(_, local, remote))| (u, local, remote))
                    .collect()
            })
            .collect();
        let latency = topo.nodes().filter_map(|v| costs.node(v)).map(|c| c.latency_us).sum::<f64>() / in_flight;
        let latency = if latency.is_finite() { latency } else { 0.0 };
        let total = load.iter().sum();
        let speed = (0..workers).map(|w| assumed.speed(w)).collect();
        let processes = assumed.processes.clamp(1, workers.max(1));
        let process = (0..workers).map(|w| process_of(w, processes, workers)).collect();
        let mut by_name: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        if processes > 1 {
            for v in topo.nodes() {
                if let Some(group) = costs.node(v).and_then(|c| c.group.as_deref()) {
                    by_name.entry(group).or_default().push(topo.unit_of[v]);
                }
            }
        }
        let mut groups = Vec::new();
        let mut group_of = vec![None; n];
        for mut leads in by_name.into_values() {
            leads.sort_unstable();
            leads.dedup();
            if leads.len() > 1 {
                for &v in &leads {
                    group_of[v] = Some(groups.len());
                }
                groups.push(leads);
            }
        }
        Problem {
            workers,
            topo,
            load,
            own_load,
            adj,
            waits,
            latency,
            ppt,
            total,
            speed,
            process,
            processes,
            groups,
            group_of,
        }
    }

    /// Whether moving the units of `set` (marked in `moving`) to worker `to` keeps every
    /// parameter group in one process.
    fn keeps_groups(&self, assign: &[usize], set: &[usize], moving: &[bool], to: usize) -> bool {
        set.iter()
            .filter_map(|&v| self.group_of[v])
            .all(|g| self.groups[g].iter().all(|&u| moving[u] || self.process[assign[u]] == self.process[to]))
    }

    /// Puts each parameter group split over processes on the worker of its heaviest unit.
    fn join_groups(&self, assign: &mut [usize]) {
        for leads in &self.groups {
            let Some(&heaviest) = leads.iter().max_by(|&&a, &&b| self.load[a].total_cmp(&self.load[b]).then(b.cmp(&a)))
            else {
                continue;
            };
            let home = self.process[assign[heaviest]];
            if leads.iter().any(|&u| self.process[assign[u]] != home) {
                for &u in leads {
                    if self.process[assign[u]] != home {
                        assign[u] = assign[heaviest];
                    }
                }
            }
        }
    }

    /// The same problem on the first `workers` workers (each in the process it has here).
    fn first(&self, workers: usize) -> Problem<'a> {
        Problem { workers, process: self.process[..workers].to_vec(), ..self.clone() }
    }

    /// What a cut pair costs each of its workers when they are `a` and `b` (different).
    pub(crate) fn cut(&self, c: &Cut, a: usize, b: usize) -> f64 {
        if self.process[a] == self.process[b] {
            c.local
        } else {
            c.remote
        }
    }

    /// The index of process `p`'s link among the search's times.
    fn link_index(&self, p: usize) -> usize {
        self.workers + 1 + p
    }

    /// The units' representatives, in index order: what the search places.
    pub(crate) fn leads(&self) -> impl Iterator<Item = usize> + '_ {
        self.topo.nodes().filter(|&v| self.topo.leads(v))
    }

    /// Every member of a unit on its representative's worker.
    pub fn follow(&self, assign: &mut [usize]) {
        for v in self.topo.nodes() {
            assign[v] = assign[self.topo.unit_of[v]];
        }
    }

    /// Every worker's time per instance under `assign`: its nodes' loads plus the cuts it
    /// takes part in.
    pub fn worker_times(&self, assign: &[usize]) -> Vec<f64> {
        let mut times = vec![0.0; self.workers];
        for v in self.topo.nodes() {
            times[assign[v]] += self.load[v];
            for (a, b, c) in self.cuts_at(v, assign) {
                let cost = self.cut(c, a, b);
                times[a] += cost;
                times[b] += cost;
            }
        }
        times.iter_mut().enumerate().for_each(|(w, t)| *t /= self.speed_of(w));
        times
    }

    /// Worker `w`'s speed (1 past the list).
    pub(crate) fn speed_of(&self, w: usize) -> f64 {
        self.speed.get(w).copied().unwrap_or(1.0)
    }

    /// The latency bound under `assign`: no worker starts instances faster than one every
    /// this many µs (0 without a profile that says how instances move).
    pub fn bound(&self, assign: &[usize]) -> f64 {
        let mut bound = self.latency;
        for v in self.topo.nodes() {
            for &(u, local, remote) in &self.waits[v] {
                let (a, b) = (assign[u], assign[v]);
                if u > v && a != b {
                    bound += if self.process[a] == self.process[b] { local } else { remote };
                }
            }
        }
        bound
    }

    /// Every process's link time per instance under `assign`: the bytes of the edges cut
    /// between it and another process, over the bandwidth (empty with one process).
    pub fn link_times(&self, assign: &[usize]) -> Vec<f64> {
        if self.processes <= 1 {
            return Vec::new();
        }
        let mut links = vec![0.0; self.processes];
        for v in self.topo.nodes() {
            for (a, b, c) in self.cuts_at(v, assign) {
                let (p, q) = (self.process[a], self.process[b]);
                if p != q {
                    links[p] += c.link;
                    links[q] += c.link;
                }
            }
        }
        links
    }

    /// What the search compares: every worker's time, the latency bound, then every
    /// process's link.
    pub(crate) fn search_times(&self, assign: &[usize]) -> Vec<f64> {
        let mut times = self.worker_times(assign);
        times.push(self.bound(assign));
        times.extend(self.link_times(assign));
        times
    }

    /// The time each worker spends on cuts alone.
    pub fn worker_comm(&self, assign: &[usize]) -> Vec<f64> {
        let mut comm = vec![0.0; self.workers];
        for v in self.topo.nodes() {
            for (a, b, c) in self.cuts_at(v, assign) {
                let cost = self.cut(c, a, b);
                comm[a] += cost;
                comm[b] += cost;
            }
        }
        comm
    }

    /// The edges cut under `assign` between `v` and its later-numbered neighbours (so that
    /// walking every node counts each cut pair once): the neighbour's worker, `v`'s worker
    /// and what the pair costs.
    fn cuts_at<'s>(&'s self, v: usize, assign: &'s [usize]) -> impl Iterator<Item = (usize, usize, &'s Cut)> + 's {
        self.adj[v]
            .iter()
            .filter(move |(u, _)| *u > v && assign[*u] != assign[v])
            .map(move |(u, c)| (assign[*u], assign[v], c))
    }

    pub(crate) fn eps(&self) -> f64 {
        1e-9 * (self.total + 1.0)
    }
}

/// A candidate move: its score, the target worker, and each worker's change of time.
type Move = (Score, usize, Vec<(usize, f64)>);

/// (busiest worker, sum, sum of squares): smaller is better.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Score(pub f64, pub f64, pub f64);

impl Score {
    pub(crate) fn of(times: &[f64]) -> Score {
        let max = times.iter().copied().fold(0.0, f64::max);
        Score(max, times.iter().sum(), times.iter().map(|t| t * t).sum())
    }

    pub(crate) fn better_than(&self, other: &Score, eps: f64) -> bool {
        if self.0 < other.0 - eps {
            return true;
        }
        if self.0 > other.0 + eps {
            return false;
        }
        if self.1 < other.1 - eps {
            return true;
        }
        if self.1 > other.1 + eps {
            return false;
        }
        self.2 < other.2 - eps * (other.0 + 1.0)
    }
}

pub(crate) fn partition(problem: &Problem) -> Partition {
    let n = problem.topo.bound;
    let workers = problem.workers;
    if workers <= 1 {
        return Partition { assign: vec![0; n], isolated: Vec::new() };
    }
    let mut candidates = candidates(problem);
    for c in &mut candidates {
        problem.follow(&mut c.assign);
    }
    let eps = problem.eps();
    let mut best = 0;
    let mut best_score = Score::of(&problem.search_times(&candidates[0].assign));
    for (k, c) in candidates.iter().enumerate().skip(1) {
        let score = Score::of(&problem.search_times(&c.assign));
        if score.better_than(&best_score, eps) {
            best = k;
            best_score = score;
        }
    }
    candidates.swap_remove(best)
}

/// The four starting points of the header, each improved by local search.
fn candidates(problem: &Problem) -> Vec<Partition> {
    let n = problem.topo.bound;
    let workers = problem.workers;
    let mut candidates: Vec<Partition> = Vec::new();
    // 1. Heavy Ppts on workers of their own.
    let share = problem.total / workers as f64;
    let mut heavy: Vec<usize> =
        problem.leads().filter(|&v| problem.ppt[v] && problem.load[v] > 0.0 && problem.load[v] >= share).collect();
    heavy.sort_by(|&a, &b| problem.load[b].total_cmp(&problem.load[a]).then(a.cmp(&b)));
    heavy.truncate(workers - 1);
    if !heavy.is_empty() {
        let rest = workers - heavy.len();
        let mut fixed = vec![false; n];
        let mut assign = contiguous(problem, rest, &heavy);
        for (k, &v) in heavy.iter().enumerate() {
            assign[v] = rest + k;
            fixed[v] = true;
        }
        problem.join_groups(&mut assign);
        improve(problem, &mut assign, &fixed, rest);
        candidates.push(Partition { assign, isolated: heavy });
    }
    // 2. Everything on one worker, the rest taking what pays (communication can make
    //    any split slower than none).
    let mut assign = vec![0; n];
    improve(problem, &mut assign, &vec![false; n], workers);
    candidates.push(Partition { assign, isolated: Vec::new() });
    // 3. Contiguous stages.
    let mut assign = contiguous(problem, workers, &[]);
    problem.join_groups(&mut assign);
    improve(problem, &mut assign, &vec![false; n], workers);
    candidates.push(Partition { assign, isolated: Vec::new() });
    // 4. Greedy.
    let mut assign = greedy(problem);
    problem.join_groups(&mut assign);
    improve(problem, &mut assign, &vec![false; n], workers);
    candidates.push(Partition { assign, isolated: Vec::new() });
    // 5. Half as many workers.
    if workers >= 3 {
        let half = problem.first(workers.div_ceil(2));
        let mut assign = partition(&half).assign;
        problem.join_groups(&mut assign);
        improve(problem, &mut assign, &vec![false; n], workers);
        candidates.push(Partition { assign, isolated: Vec::new() });
    }
    candidates
}

/// Items in topological order: a cycle lighter than half a share as one item, every
/// other node on its own.
fn items(problem: &Problem, workers: usize, skip: &[usize]) -> Vec<Vec<usize>> {
    let topo = problem.topo;
    let rest: f64 = problem.total - skip.iter().map(|&v| problem.load[v]).sum::<f64>();
    let half_share = 0.5 * rest / workers.max(1) as f64;
    let mut items = Vec::new();
    for (s, component) in topo.sccs.iter().enumerate() {
        let nodes: Vec<usize> = component.iter().copied().filter(|&v| topo.leads(v) && !skip.contains(&v)).collect();
        if nodes.is_empty() {
            continue;
        }
        let load: f64 = nodes.iter().map(|&v| problem.load[v]).sum();
        if topo.cyclic[s] && load <= half_share {
            items.push(nodes);
        } else {
            items.extend(nodes.into_iter().map(|v| vec![v]));
        }
    }
    items
}

/// Workers `0..workers` take consecutive items, each about an equal part of the load.
fn contiguous(problem: &Problem, workers: usize, skip: &[usize]) -> Vec<usize> {
    let mut assign = vec![0; problem.topo.bound];
    let items = items(problem, workers, skip);
    let total: f64 = items.iter().flatten().map(|&v| problem.load[v]).sum();
    let mut before = 0.0;
    for item in items {
        let load: f64 = item.iter().map(|&v| problem.load[v]).sum();
        let middle = before + load / 2.0;
        let w = if total > 0.0 { ((middle / total * workers as f64) as usize).min(workers - 1) } else { 0 };
        for v in item {
            assign[v] = w;
        }
        before += load;
    }
    assign
}

/// Each item onto the worker where its load plus its cuts to placed neighbours is least.
fn greedy(problem: &Problem) -> Vec<usize> {
    const UNPLACED: usize = usize::MAX;
    let workers = problem.workers;
    let mut assign = vec![UNPLACED; problem.topo.bound];
    let mut times = vec![0.0; workers];
    for item in items(problem, workers, &[]) {
        let load: f64 = item.iter().map(|&v| problem.load[v]).sum();
        // The cut to worker w's placed neighbours: those on other workers, each at the
        // cost of its link (inside w's process or across).
        let placed: Vec<(usize, Cut)> = item
            .iter()
            .flat_map(|&v| &problem.adj[v])
            .filter(|(u, _)| assign[*u] != UNPLACED)
            .map(|&(u, c)| (assign[u], c))
            .collect();
        let mut best = (f64::INFINITY, 0);
        for (w, time) in times.iter().enumerate() {
            let cuts: f64 = placed.iter().filter(|(o, _)| *o != w).map(|(o, c)| problem.cut(c, w, *o)).sum();
            let score = (time + load + cuts) / problem.speed_of(w);
            if score < best.0 {
                best = (score, w);
            }
        }
        let w = best.1;
        for &v in &item {
            assign[v] = w;
        }
        for &v in &item {
            times[w] += problem.load[v];
            for (u, c) in &problem.adj[v] {
                let other = assign[*u];
                if other != UNPLACED && other != w {
                    let cost = problem.cut(c, w, other);
                    times[w] += cost;
                    times[other] += cost;
                }
            }
        }
    }
    assign.iter_mut().for_each(|w| {
        if *w == UNPLACED {
            *w = 0;
        }
    });
    assign
}

/// Local search: single nodes and whole cycles move to a neighbour's worker or to the
/// least loaded one (among workers `0..open`), best strict improvement first.
fn improve(problem: &Problem, assign: &mut [usize], fixed: &[bool], open: usize) {
    let topo = problem.topo;
    let eps = problem.eps();
    let cycles: Vec<Vec<usize>> = topo
        .sccs
        .iter()
        .zip(&topo.cyclic)
        .filter(|(_, &cyclic)| cyclic)
        .map(|(c, _)| c.iter().copied().filter(|&v| topo.leads(v) && !fixed[v]).collect::<Vec<_>>())
        .filter(|c: &Vec<usize>| c.len() > 1)
        .collect();
    let mut moving = vec![false; topo.bound];
    // A sweep visits every node and edge a few times; huge graphs get fewer sweeps.
    let size = topo.bound + problem.adj.iter().map(Vec::len).sum::<usize>();
    let sweeps = (SWEEP_BUDGET / size.max(1)).clamp(1, MAX_SWEEPS);
    for _ in 0..sweeps {
        let mut improved = false;
        // Recomputed every sweep, updated by each move's deltas within it (the bound last).
        let mut times = problem.search_times(assign);
        let singles = problem.leads().filter(|&v| !fixed[v]).map(|v| vec![v]);
        let groups = problem.groups.iter().map(|g| g.iter().copied().filter(|&v| !fixed[v]).collect::<Vec<_>>());
        for set in singles.chain(cycles.iter().cloned()).chain(groups.filter(|g| g.len() > 1)) {
            let current = Score::of(&times);
            let least = (0..open).min_by(|&a, &b| times[a].total_cmp(&times[b]).then(a.cmp(&b))).unwrap_or(0);
            let mut targets: Vec<usize> = set
                .iter()
                .flat_map(|&v| std::iter::once(assign[v]).chain(problem.adj[v].iter().map(|&(u, _)| assign[u])))
                .chain(std::iter::once(least))
                .filter(|&w| w < open)
                .collect();
            targets.sort_unstable();
            targets.dedup();
            for &v in &set {
                moving[v] = true;
            }
            let mut best: Option<Move> = None;
            for t in targets {
                if set.iter().all(|&v| assign[v] == t) || !problem.keeps_groups(assign, &set, &moving, t) {
                    continue;
                }
                let deltas = move_deltas(problem, assign, &set, &moving, t);
                let mut trial = times.clone();
                for &(w, d) in &deltas {
                    trial[w] += d;
                }
                let score = Score::of(&trial);
                let bar = best.as_ref().map_or(current, |b| b.0);
                if score.better_than(&bar, eps) {
                    best = Some((score, t, deltas));
                }
            }
            for &v in &set {
                moving[v] = false;
            }
            if let Some((_, t, deltas)) = best {
                for &v in &set {
                    assign[v] = t;
                }
                for (w, d) in deltas {
                    times[w] += d;
                }
                improved = true;
            }
        }
        if !improved {
            break;
        }
    }
}

/// How each worker's time (the bound, index `workers`, and each process's link after it)
/// changes when the nodes of `set` (marked in `moving`) move to worker `to`.
fn move_deltas(problem: &Problem, assign: &[usize], set: &[usize], moving: &[bool], to: usize) -> Vec<(usize, f64)> {
    let mut deltas: BTreeMap<usize, f64> = BTreeMap::new();
    let bound = problem.workers;
    let same = |a: usize, b: usize| problem.process[a] == problem.process[b];
    // Adds `sign` times the pair (a, b)'s cut (a != b): to both workers, and to both
    // processes' links when it crosses them.
    let pair = |deltas: &mut BTreeMap<usize, f64>, c: &Cut, a: usize, b: usize, sign: f64| {
        let cost = sign * problem.cut(c, a, b);
        *deltas.entry(a).or_default() += cost;
        *deltas.entry(b).or_default() += cost;
        if !same(a, b) {
            *deltas.entry(problem.link_index(problem.process[a])).or_default() += sign * c.link;
            *deltas.entry(problem.link_index(problem.process[b])).or_default() += sign * c.link;
        }
    };
    for &v in set {
        let from = assign[v];
        *deltas.entry(from).or_default() -= problem.load[v];
        *deltas.entry(to).or_default() += problem.load[v];
        for &(u, local, remote) in &problem.waits[v] {
            let wait = |a: usize, b: usize| if same(a, b) { local } else { remote };
            let other = assign[u];
            // Both ends move: the pair ends up together (counted once).
            if moving[u] {
                if u > v && other != from {
                    *deltas.entry(bound).or_default() -= wait(from, other);
                }
                continue;
            }
            if other != from {
                *deltas.entry(bound).or_default() -= wait(from, other);
            }
            if other != to {
                *deltas.entry(bound).or_default() += wait(to, other);
            }
        }
        for (u, c) in &problem.adj[v] {
            let other = assign[*u];
            if moving[*u] {
                // Both ends move: the pair ends up together. Count the pair once.
                if *u > v && other != from {
                    pair(&mut deltas, c, from, other, -1.0);
                }
                continue;
            }
            if other != from {
                pair(&mut deltas, c, from, other, -1.0);
            }
            if other != to {
                pair(&mut deltas, c, to, other, 1.0);
            }
        }
    }
    // A worker's time is its work over its speed (the bound, past the workers, is not).
    deltas.into_iter().map(|(w, d)| (w, if w < bound { d / problem.speed_of(w) } else { d })).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::{estimate, Assumptions};

    /// A loop whose body is two products (an edge inside the loop) and one after it.
    const GRAPH: &str = r#"amp.graph @Loop {
  state %inst: instance, %t0: counter
  param a.weight: f32[64, 64] uniform(64)
  param a.bias: f32[64] uniform(64)
  param b.weight: f32[64, 64] uniform(64)
  param b.bias: f32[64] uniform(64)
  param c.weight: f32[64, 64] uniform(64)
  param c.bias: f32[64] uniform(64)
  %0 = source() -> unit writes(%inst) "instances"
  %1 = read $.x (%0#0: unit) -> f32[64] key(%inst) "read"
  %2 = isu %t0 := 0 inverse -1 (%1#0: f32[64]) -> f32[64] writes(%t0) "loop entry"
  %3 = phi 2 (%2#0: f32[64], %8#0: f32[64]) -> f32[64] key(%inst, %t0) "loop"
  %4 = cond [%t0 < 4] (%3#0: f32[64]) -> f32[64], f32[64] reads(%t0) key(%inst, %t0) "loop test"
  %5 = linear @a (%4#0: f32[64]) -> f32[64] key(%inst, %t0) "a"
  %6 = unary tanh (%5#0: f32[64]) -> f32[64] key(%inst, %t0) "tanh"
  %7 = linear @b (%6#0: f32[64]) -> f32[64] key(%inst, %t0) "b"
  %8 = isu %t0 := %t0 + 1 inverse %t0 - 1 (%7#0: f32[64]) -> f32[64] reads(%t0) writes(%t0) "loop step"
  %9 = isu %t0 := -1 inverse 4 (%4#1: f32[64]) -> f32[64] writes(%t0) "loop exit"
  %10 = linear @c (%9#0: f32[64]) -> f32[64] key(%inst) "c"
  %11 = loss mse (%10#0: f32[64], %1#0: f32[64]) -> () key(%inst) "loss"
}
"#;

    /// The search's incremental times (each move's deltas added) stay the times computed
    /// afresh, workers, bound and links, over many moves of single nodes and pairs
    /// between workers of one process and of different ones.
    #[test]
    fn move_deltas_keep_the_times_computed_afresh() {
        let graph = amp_ir::verify::verify(amp_ir::text::parse(GRAPH).unwrap()).unwrap();
        let topo = Topology::new(&graph);
        for processes in [1, 2, 3] {
            let a = Assumptions { processes, link_latency_us: 80.0, link_bandwidth_mbps: 800.0, ..Default::default() };
            let costs = estimate(&graph, &a, None).unwrap();
            let problem = Problem::new(&costs, &topo, 5);
            let nodes: Vec<usize> = problem.leads().collect();
            let mut assign = vec![0; topo.bound];
            let mut times = problem.search_times(&assign);
            let mut moving = vec![false; topo.bound];
            let mut crossed = false;
            // A fixed pseudo-random walk (a linear congruential generator).
            let mut state: u64 = 12345;
            let mut next = |n: usize| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (state >> 33) as usize % n
            };
            for step in 0..400 {
                let first = nodes[next(nodes.len())];
                let mut set = vec![first];
                if step % 3 == 0 {
                    let second = nodes[next(nodes.len())];
                    if second != first {
                        set.push(second);
                    }
                }
                let to = next(problem.workers);
                for &v in &set {
                    moving[v] = true;
                }
                let deltas = move_deltas(&problem, &assign, &set, &moving, to);
                for &v in &set {
                    moving[v] = false;
                    assign[v] = to;
                }
                for (w, d) in deltas {
                    times[w] += d;
                }
                let fresh = problem.search_times(&assign);
                crossed |= fresh[problem.workers + 1..].iter().any(|&t| t > 0.0);
                assert_eq!(times.len(), fresh.len());
                for (k, (got, want)) in times.iter().zip(&fresh).enumerate() {
                    assert!(
                        (got - want).abs() <= 1e-6 * (1.0 + want.abs()),
                        "{processes} processes, step {step}, time {k}: {got} incrementally, {want} afresh"
                    );
                }
            }
            // With several processes the walk cut edges between them (links busy).
            assert_eq!(crossed, processes > 1, "{processes} processes");
        }
    }
}
