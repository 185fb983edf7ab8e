//! The agenda of a worker's waiting nodes (those whose op gains from batches, `linear`):
//! which of their queued messages to take next once no other work is queued.
//!
//! Work is kept per *lane*: a node, a direction and a port, the messages one call can take
//! together. The agenda serves the lane that cannot grow any more before the lanes that
//! it feeds, as DyNet's agenda (lowest depth first) and TensorFlow Fold's depth batching
//! do: forward lanes before backward ones, forward lanes of the nodes nearest the source
//! first, backward lanes of the nodes farthest from it first (a node's *depth*: its place
//! in a topological order from the source along consumer edges, where a loop or a
//! recursion, a strongly connected component, comes before what its exit feeds; computed
//! by the worker). A node served while a node before it still has work would get more of
//! it afterwards and be called again on a few rows. So a Tree-LSTM's classifier waits
//! while the cell takes each level of all trees in flight, runs once on all their roots,
//! and every tree's backward starts there together: the backward levels of different
//! trees then meet at the cell as the forward ones did (the frontier is what the other
//! nodes carried as far as it goes). Among lanes of one depth and direction, the one with
//! the most messages goes first.
//!
//! Starvation-free: a lane passed over `patience` times since it was last served (or
//! since it filled) goes first, the oldest of such lanes before the others, and a lane
//! served but not emptied counts again from that choice. So a lane with messages is
//! chosen within `patience + lanes` choices, whatever arrives meanwhile, and a choice is
//! made whenever any lane has messages (no deadlock); the proptests below check both on
//! random arrivals and batch limits. Within a lane, messages go in arrival order (the
//! worker takes them from the node's queue front to back).
//!
//! Deterministic: the choice depends only on the order of arrivals and choices, never on
//! time, so a run on one worker stays reproducible bit for bit.

use crate::message::Dir;

/// Choices a lane may be passed over before it goes first (see the module doc): more
/// than the levels of the deepest trees of a Tree-LSTM batch (each level a choice or two),
/// so that a backward lane waits out the forward work, yet a bound on how long an
/// instance's message waits.
pub(crate) const PATIENCE: u64 = 256;

/// One node's messages of one direction and port.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Lane {
    node: u32,
    dir: Dir,
    port: u16,
    /// The node's depth (see the module doc).
    depth: u64,
    /// Messages queued.
    count: usize,
    /// The choice count when the lane filled or was last served.
    since: u64,
}

/// The lanes with messages, and the number of choices made so far.
#[derive(Debug)]
pub(crate) struct Agenda {
    lanes: Vec<Lane>,
    clock: u64,
    patience: u64,
}

impl Default for Agenda {
    fn default() -> Agenda {
        Agenda::new(PATIENCE)
    }
}

impl Agenda {
    pub fn new(patience: u64) -> Agenda {
        Agenda { lanes: Vec::new(), clock: 0, patience }
    }

    /// One more message queued at `node`, of depth `depth`, on (`dir`, `port`).
    pub fn push(&mut self, node: u32, depth: u64, dir: Dir, port: u16) {
        // A worker's waiting nodes are few (its Linear nodes), and a lane lives only
        // while it has messages: a linear search is enough.
        match self.lanes.iter_mut().find(|l| l.node == node && l.dir == dir && l.port == port) {
            Some(lane) => lane.count += 1,
            None => self.lanes.push(Lane { node, dir, port, depth, count: 1, since: self.clock }),
        }
    }

    /// Whether no lane has messages.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.lanes.is_empty()
    }

    /// The lane to serve next and its messages: the oldest lane passed over `patience`
    /// times or more, else the first of forward lanes by rising depth, then backward
    /// lanes by falling depth (the most messages first among equals, then the oldest, then
    /// the lowest node). The caller takes up to its batch limit of them and says how many
    /// with [`Agenda::taken`].
    pub fn choose(&mut self) -> Option<(u32, Dir, u16, usize)> {
        let clock = self.clock;
        let overdue = self
            .lanes
            .iter()
            .filter(|l| clock - l.since >= self.patience)
            .min_by_key(|l| (l.since, l.node, l.dir == Dir::Backward, l.port));
        let lane = overdue.or_else(|| {
            self.lanes.iter().min_by_key(|l| {
                let order = match l.dir {
                    Dir::Forward => (false, l.depth),
                    Dir::Backward => (true, u64::MAX - l.depth),
                };
                (order, std::cmp::Reverse(l.count), l.since, l.node, l.port)
            })
        })?;
        let chosen = (lane.node, lane.dir, lane.port, lane.count);
        self.clock += 1;
        Some(chosen)
    }

    /// `n` messages of the lane were taken: an emptied lane leaves the agenda, one with
    /// messages left counts its patience from now.
    pub fn taken(&mut self, node: u32, dir: Dir, port: u16, n: usize) {
        let Some(at) = self.lanes.iter().position(|l| l.node == node && l.dir == dir && l.port == port) else {
            return;
        };
        let lane = &mut self.lanes[at];
        lane.count = lane.count.saturating_sub(n);
        lane.since = self.clock;
        if lane.count == 0 {
            self.lanes.swap_remove(at);
        }
    }

    /// Messages queued in all lanes.
    #[cfg(test)]
    fn queued(&self) -> usize {
        self.lanes.iter().map(|l| l.count).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::{HashMap, VecDeque};

    fn dir(backward: bool) -> Dir {
        if backward {
            Dir::Backward
        } else {
            Dir::Forward
        }
    }

    /// A Tree-LSTM's cell (node 3, depth 4) and classifier (node 9, depth 8).
    const CELL: (u32, u64) = (3, 4);
    const HEAD: (u32, u64) = (9, 8);

    #[test]
    fn the_classifier_waits_for_every_level_of_the_cell_and_its_backward_goes_first() {
        let mut agenda = Agenda::new(PATIENCE);
        // One tree finished: its root waits at the classifier while the cell has a level
        // of the other trees, however small.
        agenda.push(HEAD.0, HEAD.1, Dir::Forward, 0);
        (0..5).for_each(|_| agenda.push(CELL.0, CELL.1, Dir::Forward, 0));
        assert_eq!(agenda.choose(), Some((3, Dir::Forward, 0, 5)));
        agenda.taken(3, Dir::Forward, 0, 5);
        agenda.push(CELL.0, CELL.1, Dir::Forward, 0);
        (0..2).for_each(|_| agenda.push(HEAD.0, HEAD.1, Dir::Forward, 0));
        assert_eq!(agenda.choose(), Some((3, Dir::Forward, 0, 1)));
        agenda.taken(3, Dir::Forward, 0, 1);
        agenda.push(HEAD.0, HEAD.1, Dir::Forward, 0);
        // Every root at once.
        assert_eq!(agenda.choose(), Some((9, Dir::Forward, 0, 4)));
        agenda.taken(9, Dir::Forward, 0, 4);
        // Backward: the classifier's first, then the cell's, whatever their sizes; any
        // forward work before both.
        (0..4).for_each(|_| agenda.push(HEAD.0, HEAD.1, Dir::Backward, 0));
        (0..6).for_each(|_| agenda.push(CELL.0, CELL.1, Dir::Backward, 0));
        agenda.push(CELL.0, CELL.1, Dir::Forward, 0);
        assert_eq!(agenda.choose(), Some((3, Dir::Forward, 0, 1)));
        agenda.taken(3, Dir::Forward, 0, 1);
        assert_eq!(agenda.choose(), Some((9, Dir::Backward, 0, 4)));
        agenda.taken(9, Dir::Backward, 0, 4);
        assert_eq!(agenda.choose(), Some((3, Dir::Backward, 0, 6)));
        agenda.taken(3, Dir::Backward, 0, 6);
        assert!(agenda.is_empty());
        assert_eq!(agenda.choose(), None);
    }

    #[test]
    fn among_lanes_of_one_depth_the_largest_goes_first() {
        let mut agenda = Agenda::new(PATIENCE);
        agenda.push(3, 4, Dir::Forward, 0);
        agenda.push(5, 4, Dir::Forward, 1);
        agenda.push(5, 4, Dir::Forward, 1);
        assert_eq!(agenda.choose(), Some((5, Dir::Forward, 1, 2)));
        agenda.taken(5, Dir::Forward, 1, 2);
        // Directions and ports of one node are separate lanes.
        agenda.push(3, 4, Dir::Backward, 0);
        assert_eq!(agenda.choose(), Some((3, Dir::Forward, 0, 1)));
        agenda.taken(3, Dir::Forward, 0, 1);
        assert_eq!(agenda.queued(), 1);
    }

    #[test]
    fn a_lane_passed_over_patience_times_goes_first() {
        let mut agenda = Agenda::new(4);
        agenda.push(HEAD.0, HEAD.1, Dir::Backward, 0);
        for round in 0..4 {
            (0..10).for_each(|_| agenda.push(CELL.0, CELL.1, Dir::Forward, 0));
            assert_eq!(agenda.choose().map(|c| c.0), Some(3), "round {round}");
            agenda.taken(3, Dir::Forward, 0, 10);
        }
        (0..10).for_each(|_| agenda.push(CELL.0, CELL.1, Dir::Forward, 0));
        assert_eq!(agenda.choose(), Some((9, Dir::Backward, 0, 1)));
    }

    /// What a worker does, on a model: messages arrive at random lanes, each choice takes
    /// up to `limit` of the chosen lane's messages from the front of its queue.
    #[derive(Debug, Clone)]
    enum Step {
        Arrive { node: u32, backward: bool, port: u16, n: usize },
        Serve { limit: usize },
    }

    fn steps() -> impl Strategy<Value = Vec<Step>> {
        let arrive = (0u32..5, any::<bool>(), 0u16..2, 1usize..20).prop_map(|(node, backward, port, n)| Step::Arrive {
            node,
            backward,
            port,
            n,
        });
        let serve = (1usize..8).prop_map(|limit| Step::Serve { limit });
        proptest::collection::vec(prop_oneof![arrive, serve], 0..400)
    }

    /// The model's state: each lane's queue of message ids, and when each lane with
    /// messages filled or was last served (in choices).
    #[derive(Default)]
    struct Model {
        queues: HashMap<(u32, bool, u16), VecDeque<u64>>,
        waiting_since: HashMap<(u32, bool, u16), u64>,
        next_id: u64,
        choices: u64,
        served: Vec<u64>,
    }

    /// Lanes of the model: 5 nodes, 2 directions, 2 ports.
    const LANES: u64 = 5 * 2 * 2;

    impl Model {
        fn arrive(&mut self, agenda: &mut Agenda, node: u32, backward: bool, port: u16, n: usize) {
            let lane = (node, backward, port);
            for _ in 0..n {
                // Depths that do not follow the node numbers.
                agenda.push(node, u64::from((node * 7) % 5), dir(backward), port);
                self.queues.entry(lane).or_default().push_back(self.next_id);
                self.next_id += 1;
            }
            self.waiting_since.entry(lane).or_insert(self.choices);
        }

        /// One choice, taking up to `limit`; false when there was nothing to choose.
        fn serve(&mut self, agenda: &mut Agenda, limit: usize, patience: u64) -> Result<bool, TestCaseError> {
            let queued: usize = self.queues.values().map(VecDeque::len).sum();
            prop_assert_eq!(agenda.queued(), queued);
            let Some((node, d, port, count)) = agenda.choose() else {
                prop_assert_eq!(queued, 0, "no choice while messages are queued");
                return Ok(false);
            };
            for (lane, since) in &self.waiting_since {
                let waited = self.choices - since;
                prop_assert!(waited <= patience + LANES, "lane {:?} waited {} choices", lane, waited);
            }
            let lane = (node, d == Dir::Backward, port);
            let queue = self.queues.entry(lane).or_default();
            prop_assert_eq!(count, queue.len());
            prop_assert!(count > 0);
            self.choices += 1;
            let n = limit.min(queue.len());
            self.served.extend(queue.drain(..n));
            agenda.taken(node, d, port, n);
            if queue.is_empty() {
                self.waiting_since.remove(&lane);
            } else {
                self.waiting_since.insert(lane, self.choices);
            }
            Ok(true)
        }
    }

    proptest! {
        /// Every message is served exactly once; a choice is made whenever a message is
        /// queued (no deadlock); and a lane with messages is chosen within `patience +
        /// lanes` choices of filling or of its last service, whatever keeps arriving
        /// elsewhere (no starvation).
        #[test]
        fn every_message_is_served_and_no_lane_waits_past_its_bound(
            steps in steps(),
            patience in 0u64..10,
            last_limit in 1usize..8,
        ) {
            let mut agenda = Agenda::new(patience);
            let mut model = Model::default();
            for step in steps {
                match step {
                    Step::Arrive { node, backward, port, n } => model.arrive(&mut agenda, node, backward, port, n),
                    Step::Serve { limit } => {
                        model.serve(&mut agenda, limit, patience)?;
                    }
                }
            }
            while model.serve(&mut agenda, last_limit, patience)? {}
            prop_assert!(agenda.is_empty());
            let mut all = model.served.clone();
            all.sort_unstable();
            prop_assert_eq!(all, (0..model.next_id).collect::<Vec<_>>());
        }
    }
}
