//! Who owns what: the one place that answers "which broker coordinates this
//! group / transactional id".
//!
//! Coordinator state is split into [`COORDINATOR_SLOTS`] slots; a key (a group
//! id or a transactional id) lives in slot `fnv1a(key) % 50`, and each slot
//! has exactly one owner, which is the only legal writer of that slot's state
//! file. Today one broker owns every slot. The multi-broker work (DESIGN.md
//! §6) replaces the body of [`slot_owner`] with a claim by exclusive create;
//! callers keep asking the same question. Its rules are already here:
//! [`membership`] (broker records, leases, liveness) and [`placement`]
//! (which live broker an item belongs on).

pub mod fences;
pub mod membership;
pub mod placement;

use crate::protocol::ErrorCode;
use std::hash::Hasher;

/// Number of coordinator slots (Kafka's default partition count of
/// `__consumer_offsets` and `__transaction_state`).
pub const COORDINATOR_SLOTS: u32 = 50;

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

/// Who holds an owned item (a partition, a coordinator slot) and at which
/// epoch: read from the item's newest epoch file on the volume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim {
    pub broker_id: i32,
    pub epoch: i32,
}

/// The epoch a broker claims for an item whose newest claim is `newest`:
/// its own newest claim is kept (a restart of a broker alone does not move
/// the item); anything else is taken over at the next epoch, which the broker
/// must then win by exclusive create.
pub fn next_claim(newest: Option<Claim>, broker_id: i32) -> Claim {
    match newest {
        Some(c) if c.broker_id == broker_id => c,
        Some(c) => Claim {
            broker_id,
            epoch: c.epoch.saturating_add(1),
        },
        None => Claim {
            broker_id,
            epoch: 0,
        },
    }
}

/// The broker id a release writes into the epoch after its owner's: the
/// item is held by nobody, so the broker it is placed on may claim the next
/// epoch at once, without waiting out the old owner's lease.
pub const RELEASED: i32 = -1;

/// What a broker does about one item after a heartbeat round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Hold on: it serves the item at its current epoch.
    Keep,
    /// Try to win this claim (an epoch file by exclusive create, or its
    /// own newest claim kept over a restart), then serve the item.
    Claim(Claim),
    /// It holds an item placed on another live broker: stop serving it
    /// (if it does), then write a release, so the other may take it over
    /// at once. Also for a claim of its own it does not serve (given up
    /// after a lease lapse, or left by its previous life): the broker the
    /// item is placed on would otherwise wait for it, live, for ever.
    Release,
    /// Another broker won a newer epoch: stop serving at once.
    Depose,
    /// Serve nothing; clients are sent to the newest claim's broker (or
    /// told the leader is not available while the holder is not live).
    Follow,
}

/// Where an item is and who holds it, as one broker reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Holding {
    /// The live broker placement puts the item on (`placement::owner_of`).
    pub placed: Option<i32>,
    /// The newest claim on the volume.
    pub newest: Option<Claim>,
    /// The claim this broker serves the item at, if it serves it.
    pub serving: Option<Claim>,
    /// Whether the newest claim's broker may be claimed from: not live as
    /// of the last read of its file (`membership::may_claim`).
    pub holder_gone: bool,
    /// This broker just started (its process lock proves its previous life
    /// is dead) alone on the volume, so its own newest claim may be served
    /// again unchanged (`membership::resumes_its_claims`).
    pub just_started: bool,
    /// Its lease is visible to every observer (`membership::lease_settled`):
    /// until then it claims nothing, its own items included.
    pub settled: bool,
}

/// The ownership rule: a broker serves an item only at the newest epoch,
/// takes an item only where placement puts it, and takes it from another
/// broker only once that broker released it or is gone. A claim of its own
/// is kept over a restart alone on the volume; otherwise (a restart among
/// others, a lapse) it must win a new epoch, since others may have counted
/// it gone meanwhile and be about to create the next one.
/// A broker claims nothing before its lease has settled.
pub fn next_step(me: i32, h: &Holding) -> Step {
    if let Some(serving) = h.serving {
        if h.newest != Some(serving) {
            return Step::Depose;
        }
        return if h.placed.is_some_and(|b| b != me) {
            Step::Release
        } else {
            Step::Keep
        };
    }
    if h.placed != Some(me) {
        // Its own newest claim, not served (a lapse closed it, or it
        // restarted): nobody may take it while this broker is live, so it
        // must be handed on, or the item would wait for ever.
        return match h.newest {
            Some(c) if c.broker_id == me => Step::Release,
            _ => Step::Follow,
        };
    }
    if !h.settled {
        // An observer may still be counting it gone and claiming.
        return Step::Follow;
    }
    match h.newest {
        None => Step::Claim(next_claim(None, me)),
        Some(c) if c.broker_id == me && h.just_started => Step::Claim(c),
        Some(c) if c.broker_id == me || c.broker_id == RELEASED || h.holder_gone => {
            Step::Claim(Claim {
                broker_id: me,
                epoch: c.epoch.saturating_add(1),
            })
        }
        Some(_) => Step::Follow,
    }
}

/// The ownership gate's answer for a partition request: served only by its
/// leader (NOT_LEADER_OR_FOLLOWER otherwise, so the client refreshes its
/// metadata), and only if the client's view of the leader epoch is not
/// stale (FENCED_LEADER_EPOCH) or ahead of ours (UNKNOWN_LEADER_EPOCH).
/// A requested epoch of -1 means the client does not check.
pub fn check_partition_access(
    view: &ClusterView,
    leader: Claim,
    requested_epoch: i32,
) -> Result<(), ErrorCode> {
    if leader.broker_id != view.self_id {
        return Err(ErrorCode::NotLeaderOrFollower);
    }
    check_leader_epoch(leader.epoch, requested_epoch)
}

/// KIP-320: a client that knows of a newer leader epoch than ours is ahead
/// of us (UNKNOWN_LEADER_EPOCH); one that knows an older one is stale
/// (FENCED_LEADER_EPOCH). -1 means the client does not check.
pub fn check_leader_epoch(ours: i32, requested: i32) -> Result<(), ErrorCode> {
    use std::cmp::Ordering::*;
    if requested < 0 {
        return Ok(());
    }
    match requested.cmp(&ours) {
        Equal => Ok(()),
        Greater => Err(ErrorCode::UnknownLeaderEpoch),
        Less => Err(ErrorCode::FencedLeaderEpoch),
    }
}

/// The ownership gate's answer for a coordinator request (group or
/// transaction): only the slot's owner serves it, NOT_COORDINATOR
/// otherwise, so the client looks the coordinator up again.
pub fn check_slot_access(view: &ClusterView, slot: u32, owner: Claim) -> Result<i32, ErrorCode> {
    if slot >= COORDINATOR_SLOTS || owner.broker_id != view.self_id {
        return Err(ErrorCode::NotCoordinator);
    }
    Ok(owner.epoch)
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
    fn an_owner_keeps_its_epoch_and_a_successor_takes_the_next() {
        assert_eq!(
            next_claim(None, 3),
            Claim {
                broker_id: 3,
                epoch: 0
            }
        );
        let mine = Claim {
            broker_id: 3,
            epoch: 4,
        };
        assert_eq!(next_claim(Some(mine), 3), mine);
        assert_eq!(
            next_claim(Some(mine), 5),
            Claim {
                broker_id: 5,
                epoch: 5
            }
        );
    }

    #[test]
    fn only_the_leader_serves_a_partition_at_its_current_epoch() {
        let view = ClusterView::single(1);
        let leader = Claim {
            broker_id: 1,
            epoch: 3,
        };
        assert_eq!(check_partition_access(&view, leader, -1), Ok(()));
        assert_eq!(check_partition_access(&view, leader, 3), Ok(()));
        assert_eq!(
            check_partition_access(&view, leader, 2),
            Err(ErrorCode::FencedLeaderEpoch)
        );
        assert_eq!(
            check_partition_access(&view, leader, 4),
            Err(ErrorCode::UnknownLeaderEpoch)
        );
        let other = Claim {
            broker_id: 2,
            epoch: 3,
        };
        assert_eq!(
            check_partition_access(&view, other, 3),
            Err(ErrorCode::NotLeaderOrFollower)
        );
    }

    #[test]
    fn only_the_owner_of_a_slot_coordinates_it() {
        let view = ClusterView::single(1);
        assert_eq!(
            check_slot_access(
                &view,
                7,
                Claim {
                    broker_id: 1,
                    epoch: 2
                }
            ),
            Ok(2)
        );
        assert_eq!(
            check_slot_access(
                &view,
                7,
                Claim {
                    broker_id: 2,
                    epoch: 2
                }
            ),
            Err(ErrorCode::NotCoordinator)
        );
        assert_eq!(
            check_slot_access(
                &view,
                COORDINATOR_SLOTS,
                Claim {
                    broker_id: 1,
                    epoch: 0
                }
            ),
            Err(ErrorCode::NotCoordinator)
        );
    }

    fn holding(placed: i32, newest: Option<(i32, i32)>, serving: Option<(i32, i32)>) -> Holding {
        let claim = |(broker_id, epoch)| Claim { broker_id, epoch };
        Holding {
            placed: Some(placed),
            newest: newest.map(claim),
            serving: serving.map(claim),
            holder_gone: false,
            just_started: false,
            settled: true,
        }
    }

    fn claim(broker_id: i32, epoch: i32) -> Step {
        Step::Claim(Claim { broker_id, epoch })
    }

    #[test]
    fn a_broker_serves_only_at_the_newest_epoch() {
        assert_eq!(
            next_step(1, &holding(1, Some((1, 3)), Some((1, 3)))),
            Step::Keep
        );
        assert_eq!(
            next_step(1, &holding(1, Some((2, 4)), Some((1, 3)))),
            Step::Depose
        );
        let released = holding(1, Some((RELEASED, 4)), Some((1, 3)));
        assert_eq!(next_step(1, &released), Step::Depose);
    }

    #[test]
    fn a_broker_releases_what_placement_moved_to_another() {
        assert_eq!(
            next_step(1, &holding(2, Some((1, 3)), Some((1, 3)))),
            Step::Release
        );
    }

    #[test]
    fn a_claim_of_its_own_that_it_does_not_serve_is_released_where_placed_elsewhere() {
        assert_eq!(next_step(1, &holding(2, Some((1, 3)), None)), Step::Release);
        let restarted = Holding {
            just_started: true,
            ..holding(2, Some((1, 3)), None)
        };
        assert_eq!(next_step(1, &restarted), Step::Release);
    }

    #[test]
    fn a_broker_takes_only_what_is_placed_on_it() {
        assert_eq!(next_step(1, &holding(2, None, None)), Step::Follow);
        assert_eq!(next_step(1, &holding(2, Some((3, 0)), None)), Step::Follow);
        assert_eq!(next_step(1, &holding(1, None, None)), claim(1, 0));
    }

    #[test]
    fn a_broker_takes_from_another_only_once_released_or_gone() {
        let held = holding(1, Some((2, 5)), None);
        assert_eq!(next_step(1, &held), Step::Follow);
        assert_eq!(
            next_step(
                1,
                &Holding {
                    holder_gone: true,
                    ..held
                }
            ),
            claim(1, 6)
        );
        assert_eq!(
            next_step(1, &holding(1, Some((RELEASED, 6)), None)),
            claim(1, 7)
        );
    }

    #[test]
    fn a_claim_of_its_own_is_kept_over_a_restart_and_renewed_after_a_lapse() {
        let own = holding(1, Some((1, 5)), None);
        assert_eq!(
            next_step(
                1,
                &Holding {
                    just_started: true,
                    ..own
                }
            ),
            claim(1, 5)
        );
        assert_eq!(next_step(1, &own), claim(1, 6));
    }

    #[test]
    fn a_broker_claims_nothing_before_its_lease_settles() {
        let unsettled = |h: Holding| Holding {
            settled: false,
            ..h
        };
        let own = holding(1, Some((1, 5)), None);
        for h in [
            own,
            Holding {
                just_started: true,
                ..own
            },
            holding(1, None, None),
            holding(1, Some((RELEASED, 6)), None),
            Holding {
                holder_gone: true,
                ..holding(1, Some((2, 5)), None)
            },
        ] {
            assert_eq!(next_step(1, &unsettled(h)), Step::Follow, "{h:?}");
        }
        // What it may still do: hand on its own claim placed elsewhere, and
        // stop serving what another won.
        assert_eq!(
            next_step(1, &unsettled(holding(2, Some((1, 3)), None))),
            Step::Release
        );
        assert_eq!(
            next_step(1, &unsettled(holding(1, Some((2, 4)), Some((1, 3))))),
            Step::Depose
        );
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
