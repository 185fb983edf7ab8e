//! The gradients of a fanned-out port, summed before its node's backward runs once on
//! their sum.

use super::*;

/// Adds a gradient of a port with `consumers` consumers to its sum under the node's
/// fan-in key; the message with the whole sum once the last one arrived.
pub(super) fn sum_fan_in(slot: &mut Slot, node: &NodeInfo, port: u16, consumers: usize, msg: Msg) -> Option<Msg> {
    let Msg { payload, state } = msg;
    if consumers <= 1 {
        return Some(Msg::new(payload, state));
    }
    let key = key_of(&node.fan_in_key, &state);
    // The key moves into the map (no copy of it per message).
    let mut entry = match slot.fan_in.entry((port, key)) {
        std::collections::hash_map::Entry::Occupied(e) => e,
        std::collections::hash_map::Entry::Vacant(e) => {
            e.insert((payload, 1));
            return None;
        }
    };
    let (sum, count) = entry.get_mut();
    *sum = add_payloads(std::mem::replace(sum, Payload::Unit), payload);
    *count += 1;
    if *count < consumers {
        return None;
    }
    let (sum, _) = entry.remove();
    Some(Msg::new(sum, state))
}

/// `acc + x` (a unit payload stays unit).
fn add_payloads(acc: Payload, x: Payload) -> Payload {
    match (acc, x) {
        (mut sum @ Payload::F32(_), Payload::F32(x)) => {
            // In place, unless another message shares the values or they are a piece of
            // a batch (`values_mut` copies them then).
            for (s, v) in sum.values_mut().iter_mut().zip(x.iter()) {
                *s += v;
            }
            sum
        }
        (acc, _) => acc,
    }
}
