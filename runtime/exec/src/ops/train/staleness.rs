//! The staleness of a group's gradients: the versions the instances in flight read, and
//! how many updates late each gradient is applied (invariant 21).

use crate::message::KeyMap;

/// The staleness of a group's gradients: for each instance, the number of updates of the
/// group between the version its forward messages read (the oldest, when they read
/// several) and the version its gradient is applied to. Versions count the updates that
/// moved the values in this run, so a gradient carried over to the next run (no flush at
/// the end of an epoch) is not measured. A replica reads at the version of its master it
/// was last given (`base`), and hands its gradients' versions to the master with the
/// gradients, so the master measures its replicas' gradients too.
#[derive(Default)]
pub(crate) struct Staleness {
    /// The master's version the group's values are: its own version for a master, the
    /// version of the last sync for a replica.
    pub base: u64,
    /// Instances that read the group and whose gradients did not all come back: the
    /// instance, the oldest version it read, and its reads still owed a gradient. (Fx
    /// hashing, as `KeyMap`: every read and gradient message looks its instance up, and
    /// std's SipHash was a visible share of an MLP step; nothing here depends on order.)
    pub(super) reads: KeyMap<usize, Read>,
    /// Instances whose gradients are in the accumulators, with the oldest version they
    /// read: measured at the next update.
    pub(super) applied: KeyMap<usize, u64>,
    pub stats: StalenessStats,
    /// The most staleness of the gradients the last update applied (`None`: none measured).
    pub last: Option<u64>,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Read {
    pub(super) version: u64,
    pub(super) owed: u64,
}

/// The staleness of the gradients a group applied in a run: how many instances' gradients
/// were measured (per update: an instance whose gradients two updates applied counts
/// twice, once at each), their total and their most.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StalenessStats {
    pub gradients: u64,
    pub total: u64,
    pub max: u64,
}

impl StalenessStats {
    /// The mean staleness (0 with nothing measured).
    pub fn mean(&self) -> f64 {
        if self.gradients == 0 {
            0.0
        } else {
            self.total as f64 / self.gradients as f64
        }
    }

    pub(super) fn add(&mut self, staleness: u64) {
        self.gradients += 1;
        self.total = self.total.saturating_add(staleness);
        self.max = self.max.max(staleness);
    }

    /// Adds another group's (a replica's) measures.
    pub fn merge(&mut self, other: &StalenessStats) {
        self.gradients += other.gradients;
        self.total = self.total.saturating_add(other.total);
        self.max = self.max.max(other.max);
    }
}

impl Staleness {
    /// A forward message of `instance` read the group's values.
    pub fn read(&mut self, instance: usize) {
        // Maps, not lists: this runs for every Ppt message, with many instances in flight.
        self.reads.entry(instance).or_insert(Read { version: self.base, owed: 0 }).owed += 1;
    }

    /// A gradient of `instance` reached the accumulators (one per read; a gradient with no
    /// read before it is not measured).
    pub fn gradient(&mut self, instance: usize) {
        let Some(read) = self.reads.get_mut(&instance) else { return };
        read.owed = read.owed.saturating_sub(1);
        let version = read.version;
        if read.owed == 0 {
            self.reads.remove(&instance);
        }
        self.note_applied(instance, version);
    }

    pub(super) fn note_applied(&mut self, instance: usize, version: u64) {
        let applied = self.applied.entry(instance).or_insert(version);
        *applied = (*applied).min(version);
    }

    /// The oldest version a read still owed a gradient used, among the instances `live`
    /// says are in flight; the reads of the others (ended with a read whose gradient never
    /// came, such as an output no loss depends on) are forgotten.
    pub fn oldest_owed(&mut self, live: impl Fn(usize) -> bool) -> Option<u64> {
        self.reads.retain(|&instance, _| live(instance));
        self.reads.values().map(|r| r.version).min()
    }

    /// A replica's gradients moved to its master: their versions go with them.
    pub(super) fn hand_over(&mut self, master: &mut Staleness) {
        for (instance, version) in self.applied.drain() {
            master.note_applied(instance, version);
        }
    }

    /// The gradients in the accumulators are applied to version `version`.
    pub(super) fn measure(&mut self, version: u64) {
        self.last = None;
        // Drained, not taken: the map keeps its room for the next update's instances.
        for (_, read) in self.applied.drain() {
            let staleness = version.saturating_sub(read);
            self.stats.add(staleness);
            self.last = Some(self.last.map_or(staleness, |m| m.max(staleness)));
        }
    }
}
