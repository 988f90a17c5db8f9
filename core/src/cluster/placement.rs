//! Where each item lives among the live brokers: rendezvous
//! (highest-random-weight) hashing. Every broker computes, for an item and
//! each live broker, a weight from the pair alone; the heaviest broker is the
//! item's place. Because a weight never depends on the other brokers, a
//! broker leaving moves only its own items (each to its runner-up), and a
//! broker joining takes only the items it now outweighs; nothing else moves.
//!
//! Every broker must compute the same placement from the same live set, in
//! every version: the weights use only FNV-1a and fixed arithmetic, never
//! std's randomly seeded hasher, and a test pins some values.
//!
//! Placement says where an item *should* be; owning it still takes winning
//! its next epoch by exclusive create, after its previous owner's lease (see
//! [`super::membership`]).

use super::fnv1a;
use std::cmp::Reverse;

/// Something one broker owns at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Item<'a> {
    Partition { topic: &'a str, partition: i32 },
    GroupSlot(u32),
    TxnSlot(u32),
}

impl Item<'_> {
    /// The name the item is hashed by. Two items with one key (a topic
    /// named `group-slot` with partition 3, say) are merely placed
    /// together; their ownership epochs are separate files.
    pub fn key(&self) -> String {
        match self {
            Item::Partition { topic, partition } => format!("{topic}-{partition}"),
            Item::GroupSlot(slot) => format!("group-slot-{slot}"),
            Item::TxnSlot(slot) => format!("txn-slot-{slot}"),
        }
    }
}

/// A 64-bit finalizer (the splitmix64 output function): FNV-1a's last
/// bytes barely reach its high bits, and a broker id is short, so weights
/// taken straight from FNV would favour some brokers.
fn mix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The weight of `broker` for the item whose key hashes to `item_hash`.
fn weight(item_hash: u64, broker: i32) -> u64 {
    mix(item_hash ^ mix(u64::from(broker as u32)))
}

/// The live broker an item belongs on: the one of highest weight (the
/// lower id on a tie), whatever the order of `live` or repeats in it;
/// `None` when no broker is live.
pub fn owner_of(item: &Item<'_>, live: &[i32]) -> Option<i32> {
    let h = fnv1a(item.key().as_bytes());
    live.iter()
        .copied()
        .max_by_key(|&b| (weight(h, b), Reverse(b)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    /// 600 items of every kind: 500 partitions over 5 topics, 50 group
    /// slots and 50 transaction slots.
    fn items() -> Vec<Item<'static>> {
        let mut v = Vec::new();
        for topic in ["orders", "payments", "clicks", "a", "logs-eu-west-1"] {
            for partition in 0..100 {
                v.push(Item::Partition { topic, partition });
            }
        }
        v.extend((0..50).map(Item::GroupSlot));
        v.extend((0..50).map(Item::TxnSlot));
        v
    }

    #[test]
    fn item_keys_name_partitions_and_slots_apart() {
        let p = Item::Partition {
            topic: "orders",
            partition: 7,
        };
        assert_eq!(p.key(), "orders-7");
        assert_eq!(Item::GroupSlot(3).key(), "group-slot-3");
        assert_eq!(Item::TxnSlot(3).key(), "txn-slot-3");
    }

    #[test]
    fn placement_is_pinned_across_versions_and_platforms() {
        // Changing these moves items between brokers on upgrade, with
        // brokers of two versions disagreeing: never change them. The
        // values were computed by a separate implementation (Python).
        assert_eq!(mix(0), 0);
        assert_eq!(mix(1), 0x5692_161d_100b_05e5);
        let placed: Vec<Option<i32>> = items()
            .iter()
            .step_by(60)
            .map(|i| owner_of(i, &[1, 2, 3]))
            .collect();
        assert_eq!(placed, PINNED.map(Some).to_vec());
    }

    /// The owners among brokers 1, 2 and 3 of every 60th of [`items`],
    /// computed once by a separate implementation of the same arithmetic.
    const PINNED: [i32; 10] = [2, 2, 2, 1, 1, 2, 2, 2, 3, 2];

    #[test]
    fn no_live_broker_places_nothing() {
        assert_eq!(owner_of(&Item::GroupSlot(0), &[]), None);
        assert_eq!(owner_of(&Item::GroupSlot(0), &[4]), Some(4));
    }

    #[test]
    fn placement_spreads_items_evenly() {
        for live in [[0, 1, 2], [1, 2, 3], [5, 17, 42], [100, 200, 300]] {
            let mut count: BTreeMap<i32, usize> = BTreeMap::new();
            for item in items() {
                *count.entry(owner_of(&item, &live).unwrap()).or_default() += 1;
            }
            for b in live {
                let share = count.get(&b).copied().unwrap_or(0);
                assert!(
                    (150..=252).contains(&share),
                    "broker {b} of {live:?} got {share} of 600: {count:?}"
                );
            }
        }
    }

    fn live_set() -> impl Strategy<Value = Vec<i32>> {
        proptest::collection::btree_set(0i32..64, 1..8).prop_map(|s| s.into_iter().collect())
    }

    proptest! {
        #[test]
        fn placement_ignores_the_order_and_repeats_of_the_live_list(
            live in live_set(),
            shuffled in live_set().prop_flat_map(|v| Just(v).prop_shuffle()),
        ) {
            let mut listed = live.clone();
            listed.reverse();
            listed.extend(live.iter().take(2));
            for item in items().iter().step_by(7) {
                prop_assert_eq!(owner_of(item, &live), owner_of(item, &listed));
                let mut sorted = shuffled.clone();
                sorted.sort();
                prop_assert_eq!(owner_of(item, &shuffled), owner_of(item, &sorted));
            }
        }

        #[test]
        fn a_leaving_broker_moves_only_its_own_items(live in live_set(), pick in any::<usize>()) {
            let leaver = live[pick % live.len()];
            let rest: Vec<i32> = live.iter().copied().filter(|&b| b != leaver).collect();
            for item in items().iter().step_by(3) {
                let before = owner_of(item, &live);
                let after = owner_of(item, &rest);
                if before != Some(leaver) {
                    prop_assert_eq!(before, after);
                } else {
                    prop_assert_ne!(after, Some(leaver));
                }
            }
        }

        #[test]
        fn a_joining_broker_takes_items_and_nothing_else_moves(
            live in live_set(),
            joiner in 64i32..128,
        ) {
            let mut grown = live.clone();
            grown.push(joiner);
            let mut moved = 0;
            for item in items().iter().step_by(3) {
                let before = owner_of(item, &live);
                let after = owner_of(item, &grown);
                if after != before {
                    prop_assert_eq!(after, Some(joiner));
                    moved += 1;
                }
            }
            // A joiner gets a share, not nothing (200 items, at most 8
            // brokers: it would get 25 on average).
            prop_assert!(moved > 0);
        }
    }
}
