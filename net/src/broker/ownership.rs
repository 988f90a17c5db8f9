//! Ownership epochs on the volume: who holds a partition or a coordinator
//! slot, and at which epoch.
//!
//! Each owned item has a directory of epoch files (`kaas_core::layout`);
//! the newest names the owner. Taking an item means creating the file of
//! the next epoch with `Volume::create_exclusive`, which only one broker can
//! win. The rule for which epoch to claim is `kaas_core::cluster::next_claim`:
//! an owner that restarts keeps its epoch; anyone else takes the next one.
//! With one broker that means: epoch 0 at creation, kept for ever. The many
//! brokers of DESIGN.md §6 add leases and take-overs on top of this same
//! primitive.

use crate::volume::Volume;
use kaas_core::cluster::{next_claim, Claim};
use kaas_core::layout::latest_epoch;
use serde::{Deserialize, Serialize};
use std::io;

#[derive(Serialize, Deserialize)]
struct EpochFile {
    broker_id: i32,
}

/// A claim lost twice in a row to other brokers means the item is
/// contended; the newest owner is reported instead of trying for ever.
const CLAIM_ATTEMPTS: usize = 3;

/// The newest claim on the item whose epoch files live in `dir`.
pub fn newest(
    volume: &dyn Volume,
    dir: &str,
    file: &dyn Fn(i32) -> String,
) -> io::Result<Option<Claim>> {
    let names = volume.list(dir)?;
    let Some(epoch) = latest_epoch(names.iter().map(String::as_str)) else {
        return Ok(None);
    };
    let path = file(epoch);
    let Some(bytes) = volume.read(&path)? else {
        // Listed, then gone: only a deletion of the whole item does that.
        return Ok(None);
    };
    let parsed: EpochFile = serde_json::from_slice(&bytes)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{path}: {e}")))?;
    Ok(Some(Claim {
        broker_id: parsed.broker_id,
        epoch,
    }))
}

/// Claims the item for `broker_id`: keeps its own newest claim, or wins the
/// next epoch by exclusive create. Returns the claim now in force, which is
/// another broker's if that broker won the race (the ownership gate then
/// answers NOT_LEADER_OR_FOLLOWER / NOT_COORDINATOR). Blocks on the volume.
pub fn claim(
    volume: &dyn Volume,
    dir: &str,
    file: &dyn Fn(i32) -> String,
    broker_id: i32,
) -> io::Result<Claim> {
    let mut current = newest(volume, dir, file)?;
    for _ in 0..CLAIM_ATTEMPTS {
        let wanted = next_claim(current, broker_id);
        if Some(wanted) == current {
            return Ok(wanted);
        }
        volume.create_dir_all(dir)?;
        let json = serde_json::to_vec(&EpochFile { broker_id }).map_err(io::Error::other)?;
        match volume.create_exclusive(&file(wanted.epoch), &json) {
            Ok(()) => return Ok(wanted),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                current = newest(volume, dir, file)?;
            }
            Err(e) => return Err(e),
        }
    }
    current
        .ok_or_else(|| io::Error::other(format!("{dir}: no claim after {CLAIM_ATTEMPTS} attempts")))
}

#[cfg(test)]
#[cfg(not(madsim))]
mod tests {
    use super::*;
    use crate::volume::LocalVolume;
    use kaas_core::layout::{partition_epoch_file, partition_epochs_dir};

    fn file(epoch: i32) -> String {
        partition_epoch_file("t", 0, epoch)
    }

    #[test]
    fn a_first_claim_is_epoch_0_and_a_restarted_owner_keeps_its_epoch() {
        let dir = tempfile::tempdir().unwrap();
        let v = LocalVolume::new(dir.path()).unwrap();
        let d = partition_epochs_dir("t", 0);
        let first = claim(&v, &d, &file, 4).unwrap();
        assert_eq!(
            first,
            Claim {
                broker_id: 4,
                epoch: 0
            }
        );
        assert_eq!(claim(&v, &d, &file, 4).unwrap(), first);
        assert_eq!(v.list(&d).unwrap().len(), 1);
    }

    #[test]
    fn another_broker_takes_the_next_epoch_and_the_old_owner_then_sees_it() {
        let dir = tempfile::tempdir().unwrap();
        let v = LocalVolume::new(dir.path()).unwrap();
        let d = partition_epochs_dir("t", 0);
        claim(&v, &d, &file, 1).unwrap();
        assert_eq!(
            claim(&v, &d, &file, 2).unwrap(),
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
    fn of_two_brokers_racing_for_an_epoch_exactly_one_wins() {
        let dir = tempfile::tempdir().unwrap();
        let v = std::sync::Arc::new(LocalVolume::new(dir.path()).unwrap());
        let d = partition_epochs_dir("t", 0);
        let claims: Vec<Claim> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|b| {
                    let (v, d) = (v.clone(), d.clone());
                    s.spawn(move || claim(v.as_ref(), &d, &file, b).unwrap())
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
