//! What an instance's end asks of the worker that ends it (`sched::admission`'s
//! `Courier`).

use super::*;

impl Courier for Worker<'_, '_> {
    fn id(&self) -> usize {
        self.setup.id
    }

    fn tell_owners(&mut self, instance: usize) {
        if self.setup.shared.mode != RunMode::Train {
            return;
        }
        // By index: counting borrows the worker whole.
        for i in 0..self.owners.len() {
            let owner = self.owners[i];
            if owner == self.setup.id {
                self.count_instance(instance);
            } else {
                self.setup.peers.send(owner, ToWorker::InstanceDone(instance));
            }
        }
    }

    fn admit(&mut self, to: usize, env: Envelope) {
        if to == self.setup.id {
            // Joins the queues when they run dry, where the controller's admissions would.
            self.admitted.push(env);
        } else {
            self.setup.peers.send(to, ToWorker::Work(env));
        }
    }

    fn report_done(&mut self, instance: usize) {
        // On the results channel, which wakes nobody: a wake-up of the controller's thread
        // per instance would cost a context switch per instance.
        self.setup.results.send(Report::Done { instance });
    }

    fn wake_controller(&mut self) {
        self.setup.reports.send(Report::Wake);
    }
}
