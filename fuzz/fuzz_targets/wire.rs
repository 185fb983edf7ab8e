//! The decoder of what crosses processes (`amp_exec::wire`) on arbitrary bytes: it must
//! return a packet or an error, never panic, read out of bounds or allocate more than the
//! bytes it was given can justify; a packet it reads encodes to bytes that read back
//! the same (nothing is lost or invented between the two).
//! Run: `cargo +nightly fuzz run wire -- -max_total_time=60` (see docs/testing.md).
#![no_main]

use amp_exec::wire::{decode, encode, Limits};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let limits = Limits { state: 64, values: 1 << 16, text: 1 << 12, events: 1 << 10 };
    if let Ok(packet) = decode(data, &limits) {
        let mut once = Vec::new();
        encode(packet.from, packet.run, &packet.items, &mut once);
        let again = decode(&once, &limits).expect("an encoded packet reads back");
        let mut twice = Vec::new();
        encode(again.from, again.run, &again.items, &mut twice);
        assert_eq!(once, twice);
    }
});
