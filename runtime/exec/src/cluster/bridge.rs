//! The bridge thread: the process's only user of the transport. It packs what local
//! workers and the controller send other processes into one packet per peer per round,
//! sends heartbeats, notices lost peers, and hands each packet that arrives to
//! `inbound` (or keeps it for a run not begun here yet).

use super::*;

pub(super) struct Bridge {
    pub(super) process: usize,
    pub(super) addresses: Vec<String>,
    pub(super) outgoing: Receiver<Outgoing>,
    pub(super) controls: Receiver<Control>,
    pub(super) tensors: Sender<Tensor>,
    pub(super) decisions: Sender<(u64, Vec<u64>)>,
    pub(super) failure: Arc<Mutex<Option<String>>>,
    pub(super) heartbeat: Duration,
    pub(super) timeout: Duration,
    pub(super) limits: Limits,
    pub(super) run: Option<Box<RunPort>>,
    /// The last run that ended here: packets of it or before are dropped.
    pub(super) ended: u64,
    /// Packets of runs that have not begun here yet.
    pub(super) early: VecDeque<Packet>,
    /// Per peer, items waiting to be sent, and their run.
    pub(super) buffers: Vec<(u64, Vec<Item>)>,
    pub(super) last_heard: Vec<Instant>,
    pub(super) last_sent: Vec<Instant>,
    pub(super) shutdown_sent: bool,
    pub(super) shutdown_heard: Vec<bool>,
    /// Packets of an earlier run queued before the buffer moved to another run.
    pub(super) pending_packets: Vec<(usize, u64, Vec<Item>)>,
    pub(super) scratch: Vec<u8>,
    pub(super) traffic: Arc<Counters>,
}

/// At most this many items of runs not begun are kept (a peer far ahead is a fault).
const MAX_EARLY_ITEMS: usize = 1 << 24;

/// The most decisions a process holds before it asks for them: process 0 runs ahead of
/// the others by a few runs at most (a run needs every process's workers, except one whose
/// plan uses only process 0's), so more is a misbehaving peer, not a slow one.
const MAX_PENDING_DECISIONS: usize = 1 << 10;

impl Bridge {
    pub(super) fn run(mut self, link: Box<dyn Link>, ready: std::sync::mpsc::Sender<Arc<Counters>>) {
        let mut transport = link.open();
        self.traffic = transport.counters();
        let _ = ready.send(Arc::clone(&self.traffic));
        let mut shutting_down: Option<Instant> = None;
        loop {
            let mut busy = false;
            if !self.failed() {
                let received = transport.receive(&mut |bytes| {
                    busy = true;
                    if let Err(message) = self.on_frame(bytes) {
                        self.fail(message);
                    }
                });
                if let Err(e) = received {
                    self.network_failed(transport.as_mut(), e);
                }
            }
            while let Ok(control) = self.controls.try_recv() {
                busy = true;
                match control {
                    Control::Begin(port) => self.begin(port),
                    Control::End(run) => {
                        if self.run.as_ref().is_some_and(|r| r.run == run) {
                            self.run = None;
                        }
                        self.ended = self.ended.max(run);
                    }
                    Control::Shutdown => {
                        shutting_down.get_or_insert_with(Instant::now);
                    }
                }
            }
            while let Ok(out) = self.outgoing.try_recv() {
                busy = true;
                self.queue(out.process, out.run, out.item);
            }
            self.check_lost(transport.as_mut());
            let failed = self.failed();
            if shutting_down.is_some() && !self.shutdown_sent && !failed {
                for peer in 0..self.addresses.len() {
                    if peer != self.process {
                        self.queue(peer, 0, Item::Shutdown);
                    }
                }
                self.shutdown_sent = true;
            }
            if !failed {
                let sent = self.flush(transport.as_mut()).and_then(|()| self.beat(transport.as_mut()));
                if let Err(e) = sent.and_then(|()| transport.flush()) {
                    self.network_failed(transport.as_mut(), e);
                }
            }
            let everyone_left = (0..self.addresses.len()).all(|p| p == self.process || self.shutdown_heard[p]);
            if let Some(since) = shutting_down {
                if failed || everyone_left {
                    break;
                }
                if since.elapsed() > self.timeout * 2 {
                    let waiting: Vec<String> = (0..self.addresses.len())
                        .filter(|&p| p != self.process && !self.shutdown_heard[p])
                        .map(|p| self.peer(p))
                        .collect();
                    self.fail(format!("{} did not leave the cluster", waiting.join(", ")));
                    break;
                }
            }
            if !busy {
                transport.wait(self.heartbeat / 2);
            }
        }
        let failed = self.failed();
        transport.close(failed);
    }

    /// The transport failed: the peer it names is lost (or, if none is named, the
    /// transport's own error ends the run).
    pub(super) fn network_failed(&mut self, transport: &mut dyn Transport, error: amp_net::NetError) {
        self.check_lost(transport);
        self.fail(error.0);
    }

    pub(super) fn peer(&self, process: usize) -> String {
        format!("process {process} ({})", self.addresses.get(process).map_or("?", String::as_str))
    }

    pub(super) fn failed(&self) -> bool {
        self.failure.lock().map_or(true, |f| f.is_some())
    }

    /// The first failure ends every run: the controller (process 0) hears of it, and this
    /// process's workers stop.
    pub(super) fn fail(&mut self, message: String) {
        if let Ok(mut failure) = self.failure.lock() {
            if failure.is_some() {
                return;
            }
            *failure = Some(message.clone());
        }
        if let Some(run) = self.run.take() {
            run.sink.fail(&message);
        }
    }

    /// A peer whose connection broke, or that was silent for too long, is lost.
    pub(super) fn check_lost(&mut self, transport: &mut dyn Transport) {
        for (peer, what) in transport.take_lost() {
            if !self.shutdown_heard.get(peer).copied().unwrap_or(true) {
                let message = format!("lost {}: its connection broke ({what})", self.peer(peer));
                self.fail(message);
            }
        }
        for peer in 0..self.addresses.len() {
            if peer != self.process && !self.shutdown_heard[peer] && self.last_heard[peer].elapsed() > self.timeout {
                let silent = self.last_heard[peer].elapsed().as_secs_f64();
                self.fail(format!("lost {}: nothing heard from it for {silent:.1}s", self.peer(peer)));
            }
        }
    }

    pub(super) fn queue(&mut self, process: usize, run: u64, item: Item) {
        let Some((buffered_run, items)) = self.buffers.get_mut(process) else { return };
        if !items.is_empty() && *buffered_run != run {
            // One packet holds one run's items: what was queued for the last run goes first.
            let (old_run, old) = (*buffered_run, std::mem::take(items));
            self.pending_packets.push((process, old_run, old));
        }
        let (buffered_run, items) = &mut self.buffers[process];
        if items.is_empty() {
            *buffered_run = run;
        }
        items.push(item);
    }

    pub(super) fn send_packet(
        &mut self,
        transport: &mut dyn Transport,
        process: usize,
        run: u64,
        items: &[Item],
    ) -> Result<(), amp_net::NetError> {
        self.scratch.clear();
        wire::encode(self.process as u32, run, items, &mut self.scratch);
        let messages = items.iter().filter(|i| matches!(i, Item::Worker { word: ToWorker::Work(_), .. })).count();
        self.traffic.messages(messages, 0);
        self.last_sent[process] = Instant::now();
        transport.send(process, std::mem::take(&mut self.scratch))
    }

    pub(super) fn flush(&mut self, transport: &mut dyn Transport) -> Result<(), amp_net::NetError> {
        for (process, run, items) in std::mem::take(&mut self.pending_packets) {
            self.send_packet(transport, process, run, &items)?;
        }
        for process in 0..self.buffers.len() {
            if self.buffers[process].1.is_empty() {
                continue;
            }
            let (run, items) = std::mem::take(&mut self.buffers[process]);
            self.send_packet(transport, process, run, &items)?;
        }
        Ok(())
    }

    pub(super) fn beat(&mut self, transport: &mut dyn Transport) -> Result<(), amp_net::NetError> {
        for process in 0..self.addresses.len() {
            if process != self.process && self.last_sent[process].elapsed() >= self.heartbeat {
                self.send_packet(transport, process, 0, &[Item::Heartbeat])?;
            }
        }
        Ok(())
    }

    pub(super) fn begin(&mut self, port: Box<RunPort>) {
        if self.failed() {
            let failure = self.failure.lock().ok().and_then(|f| f.clone()).unwrap_or_default();
            port.sink.fail(&failure);
            return;
        }
        let run = port.run;
        self.run = Some(port);
        let early = std::mem::take(&mut self.early);
        for packet in early {
            if packet.run == run {
                if let Err(message) = self.deliver(packet) {
                    self.fail(message);
                }
            } else if packet.run > run {
                self.early.push_back(packet);
            }
        }
    }

    pub(super) fn on_frame(&mut self, bytes: &[u8]) -> Result<(), String> {
        let packet = match wire::decode(bytes, &self.limits) {
            Ok(packet) => packet,
            // Which peer sent it is in the packet itself; a packet that cannot be read
            // names it when its header could be read.
            Err(error) => {
                let from = bytes.get(4..8).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize);
                let who = from.filter(|&p| p < self.addresses.len()).map_or("a peer".to_string(), |p| self.peer(p));
                return Err(format!("{who} sent a packet that cannot be read: {error}"));
            }
        };
        let from = packet.from as usize;
        if from >= self.addresses.len() || from == self.process {
            return Err(format!("a packet names process {from} as its sender"));
        }
        let messages =
            packet.items.iter().filter(|i| matches!(i, Item::Worker { word: ToWorker::Work(_), .. })).count();
        self.traffic.messages(0, messages);
        self.last_heard[from] = Instant::now();
        if packet.items.iter().any(|i| matches!(i, Item::Decision { .. })) {
            return self.decision(packet);
        }
        let run = packet.run;
        if run == 0 || run <= self.ended {
            // Heartbeats and shutdowns (run 0), and what a finished run left behind.
            for item in &packet.items {
                match item {
                    Item::Shutdown => self.shutdown_heard[from] = true,
                    Item::Tensor { tensor, values } => {
                        let _ = self.tensors.send((from, run, *tensor, values.clone()));
                    }
                    _ => {}
                }
            }
            return Ok(());
        }
        if self.run.as_ref().is_some_and(|r| r.run == run) {
            return self.deliver(packet);
        }
        if packet.items.iter().all(|i| matches!(i, Item::Tensor { .. })) {
            for item in packet.items {
                if let Item::Tensor { tensor, values } = item {
                    let _ = self.tensors.send((from, run, tensor, values));
                }
            }
            return Ok(());
        }
        let early: usize = self.early.iter().map(|p| p.items.len()).sum();
        if early + packet.items.len() > MAX_EARLY_ITEMS {
            return Err(format!("{} sent more than {MAX_EARLY_ITEMS} items ahead of this process", self.peer(from)));
        }
        self.early.push_back(packet);
        Ok(())
    }

    /// A decision of process 0 (`Cluster::agree`) waits for the follower to ask for it.
    /// Only process 0 sends them, each alone in its packet, and never more than a run's
    /// worth ahead: a peer that does otherwise is misbehaving.
    pub(super) fn decision(&mut self, packet: Packet) -> Result<(), String> {
        let who = self.peer(packet.from as usize);
        if packet.from != 0 || self.process == 0 {
            return Err(format!("{who} sent a decision; only process 0 sends them, to the others"));
        }
        let [Item::Decision { words }] = &packet.items[..] else {
            return Err(format!("{who} sent a decision among other items"));
        };
        if packet.run == 0 || self.decisions.len() >= MAX_PENDING_DECISIONS {
            return Err(format!(
                "{who} sent a decision for step {} of its runs, which this process cannot take",
                packet.run
            ));
        }
        let _ = self.decisions.send((packet.run, words.clone()));
        Ok(())
    }
}
