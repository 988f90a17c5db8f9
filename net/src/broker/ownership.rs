//! Ownership epochs on the volume: who holds a partition or a coordinator
//! slot, and at which epoch.
//!
//! Each owned item has a directory of epoch files (`kaas_core::layout`);
//! the newest names the owner. Taking an item means creating the file of
//! the next epoch with `Volume::create_exclusive`, which only one broker can
//! win. Whether and at which epoch to claim is the ownership rule,
//! `kaas_core::cluster::next_step` (applied by [`Decider`]): a broker takes
//! an item only where placement puts it, from nobody, from itself over a
//! restart (keeping its epoch), or from a holder that released it or is
//! gone (at the next epoch); and it hands its own claim on ([`release`])
//! where placement moved the item. With one broker that means: epoch 0 at
//! creation, kept for ever.

use crate::cluster::Membership;
use crate::volume::Volume;
use kaas_core::cluster::placement::{owner_of, Item};
use kaas_core::cluster::{next_step, Claim, Holding, Step, RELEASED};
use kaas_core::coverage::{self, Mark};
use kaas_core::deliberate_bugs::{planted, Bug};
use kaas_core::layout::latest_epoch;
use serde::{Deserialize, Serialize};
use std::io;

#[derive(Serialize, Deserialize)]
struct EpochFile {
    broker_id: i32,
}

/// The newest claim on the item whose epoch files live in `dir`.
pub fn newest(
    volume: &dyn Volume,
    dir: &str,
    file: &dyn Fn(i32) -> String,
) -> io::Result<Option<Claim>> {
    let names = volume.list(dir)?;
    let Some(mut epoch) = latest_epoch(names.iter().map(String::as_str)) else {
        return Ok(None);
    };
    let mut path = file(epoch);
    let Some(mut bytes) = volume.read(&path)? else {
        // Listed, then gone: only a deletion of the whole item does that.
        return Ok(None);
    };
    // A stale listing may hide the newest claims; claims are won one epoch
    // after another, so the next ones are looked up by name, exactly.
    // (Simulator seed 1222: a broker starting up resumed its claim at
    // epoch 3, hidden epoch 4 had written the log, and the opening refused
    // it, failing the broker's start.)
    while !planted(Bug::NewestClaimFromTheListing) {
        let Some(next) = volume.read(&file(epoch.saturating_add(1)))? else {
            break;
        };
        epoch = epoch.saturating_add(1);
        path = file(epoch);
        bytes = next;
    }
    let parsed: EpochFile = serde_json::from_slice(&bytes)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{path}: {e}")))?;
    Ok(Some(Claim {
        broker_id: parsed.broker_id,
        epoch,
    }))
}

/// What one ownership decision rests on: this broker's membership, the
/// live set it computed, its lease's state, and the time (its monotonic
/// clock).
pub struct Decider<'a> {
    pub membership: &'a Membership,
    /// The brokers items may be placed on (`Membership::placement_ids`).
    pub live: Vec<i32>,
    /// Its own newest claims may be served again at their epochs (its
    /// first round, alone on the volume: `Membership::resuming`,
    /// `next_step`'s `just_started`).
    pub resuming: bool,
    /// Its lease is visible to every other broker (`Membership::settled`).
    pub settled: bool,
    pub now: i64,
}

impl Decider<'_> {
    /// The decider of `membership` at `now` (its monotonic clock): the
    /// placement set and the lease's state computed once for every item
    /// decided with it.
    pub fn at(membership: &Membership, now: i64) -> Decider<'_> {
        Decider {
            membership,
            live: membership.placement_ids(now),
            resuming: membership.resuming(),
            settled: membership.settled(now),
            now,
        }
    }

    /// The ownership rule (`kaas_core::cluster::next_step`) for `item`,
    /// whose newest claim is `newest`, served here at `serving`. A holder
    /// named by the claim is watched from now on, so its silence is counted.
    pub fn step(&self, item: &Item<'_>, newest: Option<Claim>, serving: Option<Claim>) -> Step {
        let me = self.membership.broker_id();
        let holder_gone = match newest {
            Some(c) if c.broker_id != me && c.broker_id != RELEASED => {
                self.membership.watch(c.broker_id, self.now);
                self.membership.saw_claim(item_key(item), c, self.now);
                self.membership.may_claim_from(c.broker_id)
            }
            _ => false,
        };
        next_step(
            me,
            &Holding {
                placed: owner_of(item, &self.live),
                newest,
                serving,
                holder_gone,
                just_started: self.resuming,
                settled: self.settled,
            },
        )
    }
}

/// An item's name among all items (`Item::key` is shared by a partition
/// and a slot whose names collide, as it only places them).
fn item_key(item: &Item<'_>) -> String {
    match item {
        Item::Partition { .. } => format!("p:{}", item.key()),
        Item::GroupSlot(slot) => format!("g:{slot}"),
        Item::TxnSlot(slot) => format!("t:{slot}"),
    }
}

/// An attempt to take an item: the claim in force after it, and this
/// broker's claim if the rule let it claim and it won (or kept) one. Only
/// `won` may be served: the newest claim may be this broker's own and
/// still not be its to serve (its lease has not settled, simulator seed
/// 74, or the item is placed elsewhere).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Taken {
    pub after: Option<Claim>,
    pub won: Option<Claim>,
}

/// Takes `item` if the ownership rule says so (it is not served here yet),
/// or hands on its own claim on it if the item is placed elsewhere.
/// Blocks on the volume.
pub fn take(
    volume: &dyn Volume,
    dir: &str,
    file: &dyn Fn(i32) -> String,
    decider: &Decider<'_>,
    item: &Item<'_>,
) -> io::Result<Taken> {
    let before = newest(volume, dir, file)?;
    let (after, won) = match decider.step(item, before, None) {
        Step::Claim(wanted) => match win(volume, dir, file, wanted, before)? {
            Ok(won) => (Some(won), Some(won)),
            Err(newer) => (newer, None),
        },
        Step::Release => match before {
            // Its own claim, not served, placed elsewhere: handed on.
            Some(held) => {
                release(volume, dir, file, held)?;
                (newest(volume, dir, file)?, None)
            }
            None => (None, None),
        },
        _ => (before, None),
    };
    Ok(Taken { after, won })
}

/// Tries to make `wanted` the claim in force: kept as it is if it already
/// is the newest (`current`), won by exclusive create of its epoch file
/// otherwise. `Err` carries the newest claim when another broker won that
/// epoch first. Blocks on the volume.
pub fn win(
    volume: &dyn Volume,
    dir: &str,
    file: &dyn Fn(i32) -> String,
    wanted: Claim,
    current: Option<Claim>,
) -> io::Result<Result<Claim, Option<Claim>>> {
    if Some(wanted) == current {
        // Kept, not won: the claim read when this was decided may have
        // been superseded since (the slot round decides every slot before
        // it applies any), so it is read again right before the caller
        // loads and serves it; `newest` looks the next epochs up by name,
        // exactly (simulator seed 130: another broker won epoch 1 between
        // the decision and the keep).
        let now = newest(volume, dir, file)?;
        return Ok(if now == Some(wanted) {
            Ok(wanted)
        } else {
            Err(now)
        });
    }
    volume.create_dir_all(dir)?;
    let json = serde_json::to_vec(&EpochFile {
        broker_id: wanted.broker_id,
    })
    .map_err(io::Error::other)?;
    match volume.create_exclusive(&file(wanted.epoch), &json) {
        Ok(()) => {
            // Taken over, not handed over: the holder neither released it
            // nor is it this broker (whose restart claims a new epoch too).
            let taken_over = wanted.broker_id != RELEASED
                && current
                    .is_some_and(|c| c.broker_id != RELEASED && c.broker_id != wanted.broker_id);
            if taken_over {
                coverage::hit(Mark::ItemTakenFromABrokerWhoseLeaseLapsed);
            }
            Ok(Ok(wanted))
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(Err(newest(volume, dir, file)?)),
        Err(e) => Err(e),
    }
}

/// Gives up `held` (whose holder has already stopped serving it): the next
/// epoch is written as held by nobody (`kaas_core::cluster::RELEASED`), so
/// the broker the item is placed on claims the one after at once instead of
/// waiting out a lease. Losing the race to a claimant is as good.
pub fn release(
    volume: &dyn Volume,
    dir: &str,
    file: &dyn Fn(i32) -> String,
    held: Claim,
) -> io::Result<()> {
    let released = Claim {
        broker_id: kaas_core::cluster::RELEASED,
        epoch: held.epoch.saturating_add(1),
    };
    win(volume, dir, file, released, Some(held)).map(|_| ())
}

#[cfg(test)]
#[cfg(not(madsim))]
mod tests {
    use super::*;
    use crate::volume::LocalVolume;
    use kaas_core::cluster::next_claim;
    use kaas_core::layout::{partition_epoch_file, partition_epochs_dir};

    fn file(epoch: i32) -> String {
        partition_epoch_file("t", 0, epoch)
    }

    /// One attempt to claim the item as `next_claim` says, from the newest
    /// claim read: the claim in force afterwards.
    fn claim(v: &LocalVolume, d: &str, broker: i32) -> Claim {
        let current = newest(v, d, &file).unwrap();
        match win(v, d, &file, next_claim(current, broker), current).unwrap() {
            Ok(won) => won,
            Err(newer) => newer.unwrap(),
        }
    }

    #[test]
    fn a_first_claim_is_epoch_0_and_a_restarted_owner_keeps_its_epoch() {
        let dir = tempfile::tempdir().unwrap();
        let v = LocalVolume::new(dir.path()).unwrap();
        let d = partition_epochs_dir("t", 0);
        let first = claim(&v, &d, 4);
        assert_eq!(
            first,
            Claim {
                broker_id: 4,
                epoch: 0
            }
        );
        assert_eq!(claim(&v, &d, 4), first);
        assert_eq!(v.list(&d).unwrap().len(), 1);
    }

    #[test]
    fn another_broker_takes_the_next_epoch_and_the_old_owner_then_sees_it() {
        let dir = tempfile::tempdir().unwrap();
        let v = LocalVolume::new(dir.path()).unwrap();
        let d = partition_epochs_dir("t", 0);
        claim(&v, &d, 1);
        assert_eq!(
            claim(&v, &d, 2),
            Claim {
                broker_id: 2,
                epoch: 1
            }
        );
        assert_eq!(
            newest(&v, &d, &file).unwrap(),
            Some(Claim {
                broker_id: 2,
                epoch: 1
            })
        );
    }

    #[test]
    fn a_release_hands_the_next_epoch_to_nobody_and_a_lost_race_reports_the_winner() {
        let dir = tempfile::tempdir().unwrap();
        let v = LocalVolume::new(dir.path()).unwrap();
        let d = partition_epochs_dir("t", 0);
        let mine = Claim {
            broker_id: 1,
            epoch: 0,
        };
        assert_eq!(win(&v, &d, &file, mine, None).unwrap(), Ok(mine));
        release(&v, &d, &file, mine).unwrap();
        let released = newest(&v, &d, &file).unwrap();
        assert_eq!(
            released,
            Some(Claim {
                broker_id: kaas_core::cluster::RELEASED,
                epoch: 1
            })
        );
        let taker = Claim {
            broker_id: 2,
            epoch: 2,
        };
        assert_eq!(win(&v, &d, &file, taker, released).unwrap(), Ok(taker));
        let late = Claim {
            broker_id: 3,
            epoch: 2,
        };
        assert_eq!(
            win(&v, &d, &file, late, released).unwrap(),
            Err(Some(taker))
        );
    }

    #[test]
    fn of_two_brokers_racing_for_an_epoch_exactly_one_wins() {
        let dir = tempfile::tempdir().unwrap();
        let v = std::sync::Arc::new(LocalVolume::new(dir.path()).unwrap());
        let d = partition_epochs_dir("t", 0);
        let claims: Vec<Claim> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|b| {
                    let (v, d) = (v.clone(), d.clone());
                    s.spawn(move || claim(v.as_ref(), &d, b))
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        // Every broker ends up agreeing on one owner per epoch it saw, and
        // the newest file names a broker that believes it won.
        let newest = newest(v.as_ref(), &d, &file).unwrap().unwrap();
        assert!(claims.contains(&newest));
        for c in &claims {
            let same_epoch: Vec<_> = claims.iter().filter(|o| o.epoch == c.epoch).collect();
            assert!(
                same_epoch.iter().all(|o| o.broker_id == c.broker_id),
                "{claims:?}"
            );
        }
    }
}
