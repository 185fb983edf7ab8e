//! A straggler's sleeps (`ExecConfig::slow_workers`): a slow worker, simulated.

use super::Worker;
use std::time::{Duration, Instant};

/// A straggler sleeps what it owes once it owes this much (see `Worker::straggle`).
const STRAGGLE_SLICE: Duration = Duration::from_millis(1);

impl Worker<'_, '_> {
    /// A straggler owes a sleep after a step begun at `step`, so that the step takes
    /// `factor` times its measured time; the sleep counts as busy time (a slow device
    /// works). Steps take microseconds and a sleep overshoots by tens of them, so the
    /// owed time is summed and slept once it reaches [`STRAGGLE_SLICE`], with what the
    /// sleep overshot taken off the next.
    pub(super) fn straggle(&mut self, step: Instant) {
        let Some(slow) = &self.setup.slow else { return };
        let pause = slow.pause(step.elapsed(), step.saturating_duration_since(self.setup.origin));
        self.owed_sleep += pause.as_secs_f64();
        if self.owed_sleep >= STRAGGLE_SLICE.as_secs_f64() {
            let start = Instant::now();
            std::thread::sleep(Duration::from_secs_f64(self.owed_sleep));
            self.owed_sleep -= start.elapsed().as_secs_f64();
        }
    }
}
