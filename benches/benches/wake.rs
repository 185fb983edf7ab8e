//! What waking an idle worker costs: the latency the planner's `Assumptions::wake_us`
//! stands for (an instance whose messages cross to a worker blocked on its channel waits
//! for that worker's thread to be woken and scheduled).
//!
//! Two threads pass a message back and forth over crossbeam channels, as the executor's
//! workers do. The sender waits for the answer by spinning on its channel; the receiver
//! either blocks in `recv` between messages (as an idle worker does: `blocked`) or spins
//! too (`spinning`, the baseline: the hand-off between two running threads, measured in
//! the same run). The difference of the round trips is the wake-up. The sender pauses
//! between messages (0 µs, 50 µs, 1 ms, 10 ms), during which the blocked receiver sleeps
//! deeper: on a virtual machine an idle vCPU may be descheduled, and waking it costs more.
//! Medians and 90th percentiles over many round trips; the ratios compare the two in the
//! same run.
//!
//! Run: `cargo bench -p amp-benches --bench wake` (add `-- quick` for fewer round trips).

use crossbeam_channel::{bounded, Receiver, Sender};
use std::thread;
use std::time::{Duration, Instant};

/// Round trips, in µs, after pausing `pause` before each, with the receiver blocking or
/// spinning between messages.
fn round_trips(blocking: bool, pause: Duration, count: usize) -> Vec<f64> {
    let (to_receiver, inbox): (Sender<u64>, Receiver<u64>) = bounded(1);
    let (to_sender, answers): (Sender<u64>, Receiver<u64>) = bounded(1);
    let receiver = thread::spawn(move || loop {
        let message = if blocking {
            inbox.recv().ok()
        } else {
            loop {
                match inbox.try_recv() {
                    Ok(m) => break Some(m),
                    Err(crossbeam_channel::TryRecvError::Empty) => std::hint::spin_loop(),
                    Err(crossbeam_channel::TryRecvError::Disconnected) => break None,
                }
            }
        };
        match message {
            Some(m) if to_sender.send(m + 1).is_ok() => {}
            _ => return,
        }
    });
    let mut times = Vec::with_capacity(count);
    for i in 0..count as u64 {
        if !pause.is_zero() {
            thread::sleep(pause);
        }
        let start = Instant::now();
        if to_receiver.send(i).is_err() {
            break;
        }
        let answer = loop {
            match answers.try_recv() {
                Ok(a) => break a,
                Err(crossbeam_channel::TryRecvError::Empty) => std::hint::spin_loop(),
                Err(crossbeam_channel::TryRecvError::Disconnected) => panic!("the receiver stopped"),
            }
        };
        times.push(start.elapsed().as_secs_f64() * 1e6);
        assert_eq!(answer, i + 1, "the answer to message {i}");
    }
    drop(to_receiver);
    receiver.join().expect("the receiver thread");
    times
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn main() {
    let quick = std::env::args().any(|a| a == "quick");
    println!("Waking a worker blocked on its channel: round trips between two threads, µs");
    println!("(the sender spins for the answer; the receiver blocks or spins between messages)\n");
    println!(
        "{:>10} {:>8} | {:>10} {:>10} | {:>10} {:>10} | {:>10} {:>9}",
        "pause", "trips", "spin p50", "spin p90", "block p50", "block p90", "wake p50", "block/spin"
    );
    for (pause, trips) in [
        (Duration::ZERO, 20_000),
        (Duration::from_micros(50), 4_000),
        (Duration::from_millis(1), 1_000),
        (Duration::from_millis(10), 200),
    ] {
        let trips = if quick { trips / 10 } else { trips };
        // Alternating halves, so that a slow stretch of the machine slows both alike.
        let (mut spin, mut block) = (Vec::new(), Vec::new());
        for _ in 0..2 {
            spin.extend(round_trips(false, pause, trips / 2));
            block.extend(round_trips(true, pause, trips / 2));
        }
        spin.sort_by(f64::total_cmp);
        block.sort_by(f64::total_cmp);
        let (s50, s90, b50, b90) =
            (quantile(&spin, 0.5), quantile(&spin, 0.9), quantile(&block, 0.5), quantile(&block, 0.9));
        println!(
            "{:>10} {:>8} | {:>10.1} {:>10.1} | {:>10.1} {:>10.1} | {:>10.1} {:>8.1}x",
            format!("{pause:?}"),
            trips,
            s50,
            s90,
            b50,
            b90,
            b50 - s50,
            b50 / s50
        );
    }
}
