//! Who owns what: the one place that answers "which broker coordinates this
//! group / transactional id".
//!
//! Coordinator state is split into [`COORDINATOR_SLOTS`] slots; a key (a group
//! id or a transactional id) lives in slot `fnv1a(key) % 50`, and each slot
//! has exactly one owner, which is the only legal writer of that slot's state
//! file. Today one broker owns every slot. The multi-broker work (DESIGN.md
//! §6) replaces the body of [`slot_owner`] with a claim by exclusive create;
//! callers keep asking the same question.

use std::hash::Hasher;

/// Number of coordinator slots (Kafka's default partition count of
/// `__consumer_offsets` and `__transaction_state`).
pub const COORDINATOR_SLOTS: u32 = 50;

/// The epoch of every coordinator slot. One broker has owned every slot
/// since the cluster was created; taking a slot over will bump it.
pub const COORDINATOR_EPOCH: i32 = 0;

/// 64-bit FNV-1a of `bytes`.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h = fnv::FnvHasher::default();
    h.write(bytes);
    h.finish()
}

/// The slot a group id or transactional id lives in.
pub fn coordinator_slot(key: &str) -> u32 {
    (fnv1a(key.as_bytes()) % COORDINATOR_SLOTS as u64) as u32
}

/// What this broker knows about the cluster when it decides ownership.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterView {
    /// The broker asking.
    pub self_id: i32,
}

impl ClusterView {
    /// The view of a broker that is alone in its cluster.
    pub fn single(broker_id: i32) -> ClusterView {
        ClusterView { self_id: broker_id }
    }

    /// Whether this broker owns `slot` right now.
    pub fn owns_slot(&self, slot: u32) -> bool {
        slot_owner(self, slot) == Some(self.self_id)
    }
}

/// The broker that owns coordinator slot `slot`, or `None` if nobody does
/// (an out-of-range slot).
pub fn slot_owner(view: &ClusterView, slot: u32) -> Option<i32> {
    // A single broker owns every slot; see the module comment.
    (slot < COORDINATOR_SLOTS).then_some(view.self_id)
}

/// Where the coordinator of `key` is: its slot and the owning broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CoordinatorLocation {
    pub slot: u32,
    pub broker_id: Option<i32>,
}

/// Locates the coordinator of a group id or transactional id.
pub fn coordinator_for(view: &ClusterView, key: &str) -> CoordinatorLocation {
    let slot = coordinator_slot(key);
    CoordinatorLocation {
        slot,
        broker_id: slot_owner(view, slot),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_is_fnv1a_of_the_key_mod_50() {
        // FNV-1a 64 of the empty input is the offset basis.
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(coordinator_slot(""), (0xcbf2_9ce4_8422_2325u64 % 50) as u32);
        assert_eq!(
            coordinator_slot("a"),
            (0xaf63_dc4c_8601_ec8cu64 % 50) as u32
        );
        for key in ["", "a", "my-group", "txn-1", "\u{e6}\u{2211}"] {
            assert!(coordinator_slot(key) < COORDINATOR_SLOTS);
        }
    }

    #[test]
    fn a_single_broker_owns_every_slot() {
        let view = ClusterView::single(7);
        for slot in 0..COORDINATOR_SLOTS {
            assert_eq!(slot_owner(&view, slot), Some(7));
            assert!(view.owns_slot(slot));
        }
        assert_eq!(slot_owner(&view, COORDINATOR_SLOTS), None);
        let loc = coordinator_for(&view, "my-group");
        assert_eq!(loc.broker_id, Some(7));
        assert_eq!(loc.slot, coordinator_slot("my-group"));
    }
}
