//! Loading a slot for a claim: each coordinator epoch keeps its own files.
//!
//! A broker that wins epoch E of a slot reads the newest state an earlier
//! epoch left (its snapshot and journal, read only), writes it as epoch E's
//! snapshot, and from then on appends to epoch E's journal. A deposed
//! coordinator of an earlier epoch that is still running (its lease bounds
//! violated) can go on appending to its own journal, but no one reads that
//! file again, and it acknowledges nothing written after E was claimed
//! (`Journal::deposed`): the coordinator-slot form of issue 11's rule that a
//! new owner never writes into an older epoch's files.
//!
//! A crash between the claim and the new snapshot leaves no files of epoch
//! E: the next load (this broker's, keeping its claim, or a successor's)
//! finds the earlier epoch's files again and carries them forward. Files of
//! epochs older than the one loaded are removed once the new ones exist.

use super::journal::{load_fenced, read_state, Journal};
use super::CoordinatorSlot;
use crate::volume::Volume;
use kaas_core::cluster::Claim;
use kaas_core::layout::{slot_journal_path, slot_snapshot_path, slot_state_of_file};
use std::io;

/// A slot read from the volume for a claim this broker holds, ready to be
/// served.
pub struct Claimed<F> {
    pub claim: Claim,
    pub state: F,
    pub journal: Journal,
}

/// Loads slot `slot` for `claim`: its state at the claim's epoch (carried
/// forward from the newest earlier epoch with files, if the claim's epoch
/// has none yet), stamped with the claim's epoch as its coordinator epoch,
/// and the claim's epoch's journal to append to (a torn tail cut). Blocks on
/// the volume. A slot that does not decode is an error: serving it without
/// its state would forget what it holds.
pub fn load_claimed<F: CoordinatorSlot>(
    volume: &dyn Volume,
    slot: u32,
    claim: Claim,
) -> io::Result<Claimed<F>> {
    let dir = F::STATE_DIR;
    let decode = |bytes: &[u8]| F::decode_slot(bytes, slot);
    let epochs = epochs_with_files(volume, dir, slot)?;
    let older: Vec<i32> = epochs
        .iter()
        .copied()
        .filter(|&e| e < claim.epoch)
        .collect();
    let (snapshot, journal) = (
        slot_snapshot_path(dir, slot, claim.epoch),
        slot_journal_path(dir, slot, claim.epoch),
    );
    if !epochs.contains(&claim.epoch) {
        refuse_unlisted_epochs(
            volume,
            dir,
            slot,
            older.last().map_or(0, |e| e + 1),
            claim.epoch,
        )?;
        if let Some(&from) = older.last() {
            let carried = read_state(
                volume,
                &slot_snapshot_path(dir, slot, from),
                &slot_journal_path(dir, slot, from),
                decode,
            )?;
            if let Some(mut state) = carried {
                state.set_coordinator_epoch(claim.epoch);
                volume.write_atomic(&snapshot, &state.encode()?)?;
            }
        }
    }
    let successor = claim.epoch.checked_add(1).map(|e| F::claim_file(slot, e));
    let loaded = load_fenced(volume, &snapshot, &journal, successor, decode)?;
    for epoch in older {
        // Best effort: a file left here is never read again (a load takes
        // the newest epoch), and the next load tries again.
        for path in [
            slot_snapshot_path(dir, slot, epoch),
            slot_journal_path(dir, slot, epoch),
        ] {
            if let Err(e) = volume.remove(&path) {
                tracing::warn!(path, error = %e, "cannot remove an earlier epoch's slot file");
            }
        }
    }
    let mut state = loaded.state.unwrap_or_else(|| F::empty(slot, claim.epoch));
    state.set_coordinator_epoch(claim.epoch);
    Ok(Claimed {
        claim,
        state,
        journal: loaded.journal,
    })
}

/// Fails the load if an epoch in `from..to` has slot files the listing did
/// not show. The state to carry forward is the newest earlier epoch's, and
/// the predecessor's files are the newest of all, written moments before
/// this claim: a stale listing (an NFS client's cached directory, older
/// than `--volume-staleness-bound-ms` allows) would hide exactly them, and
/// carrying an older epoch's state forward would forget what the
/// predecessor acknowledged. Lookups by name are exact, so each epoch in
/// between is looked up; refusing leaves the slot unserved until the
/// ownership round loads it again.
fn refuse_unlisted_epochs(
    volume: &dyn Volume,
    dir: &str,
    slot: u32,
    from: i32,
    to: i32,
) -> io::Result<()> {
    for epoch in from..to {
        for path in [
            slot_snapshot_path(dir, slot, epoch),
            slot_journal_path(dir, slot, epoch),
        ] {
            if volume.read(&path)?.is_some() {
                kaas_core::coverage::hit(kaas_core::coverage::Mark::StaleListingRefused);
                return Err(io::Error::other(format!(
                    "{path} exists but the listing of {dir} did not show it (a stale directory \
                     listing: is the volume's directory cache longer than \
                     --volume-staleness-bound-ms?); not loading slot {slot} on it"
                )));
            }
        }
    }
    Ok(())
}

/// The epochs slot `slot` has files of in `dir`, ascending.
fn epochs_with_files(volume: &dyn Volume, dir: &str, slot: u32) -> io::Result<Vec<i32>> {
    let mut epochs: Vec<i32> = volume
        .list(dir)?
        .iter()
        .filter_map(|name| slot_state_of_file(name))
        .filter(|&(s, _)| s == slot)
        .map(|(_, epoch)| epoch)
        .collect();
    epochs.sort_unstable();
    epochs.dedup();
    Ok(epochs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slot_store::SlotFile;
    use crate::volume::LocalVolume;

    /// A slot whose state is a list of words, at a coordinator epoch.
    #[derive(Clone, Debug, PartialEq)]
    struct Words {
        version: u64,
        epoch: i32,
        words: Vec<String>,
    }

    impl SlotFile for Words {
        type Op = String;
        fn apply(&mut self, op: &String) -> bool {
            self.words.push(op.clone());
            true
        }
        fn bump_version(&mut self) {
            self.version += 1;
        }
        fn version(&self) -> u64 {
            self.version
        }
        fn encode(&self) -> io::Result<Vec<u8>> {
            Ok(format!("{} {} {}", self.version, self.epoch, self.words.join(",")).into_bytes())
        }
    }

    impl CoordinatorSlot for Words {
        const STATE_DIR: &'static str = "words";
        fn claim_file(slot: u32, epoch: i32) -> String {
            format!("claims/{slot}/{epoch}")
        }
        fn decode_slot(bytes: &[u8], _slot: u32) -> Result<Words, String> {
            let text = std::str::from_utf8(bytes).map_err(|e| e.to_string())?;
            let mut parts = text.splitn(3, ' ');
            let mut next = || parts.next().ok_or("short");
            let version = next()?.parse().map_err(|_| "version")?;
            let epoch = next()?.parse().map_err(|_| "epoch")?;
            let words = next()?;
            Ok(Words {
                version,
                epoch,
                words: words
                    .split(',')
                    .filter(|w| !w.is_empty())
                    .map(String::from)
                    .collect(),
            })
        }
        fn empty(_slot: u32, epoch: i32) -> Words {
            Words {
                version: 0,
                epoch,
                words: Vec::new(),
            }
        }
        fn set_coordinator_epoch(&mut self, epoch: i32) {
            self.epoch = epoch;
        }
    }

    const SLOT: u32 = 4;

    fn volume(dir: &tempfile::TempDir) -> LocalVolume {
        let v = LocalVolume::new(dir.path()).unwrap();
        v.create_dir_all(Words::STATE_DIR).unwrap();
        v.create_dir_all(&format!("claims/{SLOT}")).unwrap();
        v
    }

    fn claim(broker_id: i32, epoch: i32) -> Claim {
        Claim { broker_id, epoch }
    }

    /// Claims `epoch` on the volume (as `ownership::win` does) and loads it.
    fn take(volume: &dyn Volume, broker_id: i32, epoch: i32) -> Claimed<Words> {
        volume
            .write_atomic(&Words::claim_file(SLOT, epoch), b"{}")
            .unwrap();
        load_claimed(volume, SLOT, claim(broker_id, epoch)).unwrap()
    }

    /// One round, as `run_writer` makes it; whether it may be acknowledged.
    fn add(volume: &dyn Volume, slot: &mut Claimed<Words>, word: &str) -> bool {
        let mut next = slot.state.clone();
        next.apply(&word.to_string());
        next.bump_version();
        slot.journal
            .write(
                volume,
                &next.encode().unwrap(),
                crate::slot_store::Durability::Synced,
            )
            .unwrap();
        slot.state = next;
        !slot.journal.deposed(volume).unwrap()
    }

    fn files(volume: &dyn Volume) -> Vec<String> {
        volume.list(Words::STATE_DIR).unwrap()
    }

    #[test]
    fn a_new_coordinator_epoch_carries_the_slot_into_files_of_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let v = volume(&dir);
        let mut first = take(&v, 0, 0);
        assert!(add(&v, &mut first, "a"));
        assert!(add(&v, &mut first, "b"));
        assert_eq!(files(&v), ["slot-4.log"]);

        let mut second = take(&v, 1, 3);
        assert_eq!(second.state.words, ["a", "b"]);
        assert_eq!(second.state.epoch, 3, "stamped with the new epoch");
        assert_eq!(
            files(&v),
            ["slot-4.e3.json", "slot-4.e3.log"],
            "the earlier epoch's files are gone once the new ones exist"
        );
        assert!(add(&v, &mut second, "c"));
        let reloaded = load_claimed::<Words>(&v, SLOT, claim(1, 3)).unwrap();
        assert_eq!(reloaded.state.words, ["a", "b", "c"]);
    }

    /// A listing staler than the staleness bound misses the predecessor's
    /// files, the newest there are: the load refuses rather than carry an
    /// older epoch's state forward, and succeeds once the listing is whole.
    #[test]
    fn a_listing_that_misses_the_predecessors_files_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let v = volume(&dir);
        let mut first = take(&v, 0, 0);
        assert!(add(&v, &mut first, "a"));
        let mut second = take(&v, 1, 2);
        assert!(add(&v, &mut second, "b"));
        assert_eq!(files(&v), ["slot-4.e2.json", "slot-4.e2.log"]);

        let stale = crate::volume::hooked::HookedVolume::new(volume(&dir), |_| Ok(()))
            .hiding_from_listings(|name| name.starts_with("slot-4.e2."));
        stale
            .write_atomic(&Words::claim_file(SLOT, 5), b"{}")
            .unwrap();
        assert!(load_claimed::<Words>(&stale, SLOT, claim(2, 5)).is_err());
        let third = load_claimed::<Words>(&v, SLOT, claim(2, 5)).unwrap();
        assert_eq!(
            third.state.words,
            ["a", "b"],
            "nothing the predecessor wrote is lost"
        );
    }

    /// Lease bounds violated: the holder of epoch 1 goes on writing after
    /// epoch 2 was won. Its late write lands in its own journal, which the
    /// successor never reads, and it is not acknowledged.
    #[test]
    fn a_deposed_coordinators_late_write_is_neither_acknowledged_nor_read() {
        let dir = tempfile::tempdir().unwrap();
        let v = volume(&dir);
        let mut zombie = take(&v, 0, 1);
        assert!(add(&v, &mut zombie, "acked"));

        let mut successor = take(&v, 1, 2);
        assert!(
            !add(&v, &mut zombie, "late"),
            "a write after the claim is refused"
        );
        assert!(add(&v, &mut successor, "next"));
        let reloaded = load_claimed::<Words>(&v, SLOT, claim(1, 2)).unwrap();
        assert_eq!(reloaded.state.words, ["acked", "next"]);
        assert!(!files(&v).iter().any(|f| f.contains(".e1.")));
    }

    /// A broker that won epoch 2 and died before writing its snapshot
    /// leaves no files of epoch 2: the next epoch's owner carries epoch 1's
    /// state forward, and a restart keeping epoch 2 does too.
    #[test]
    fn an_epoch_that_wrote_nothing_is_passed_over() {
        let dir = tempfile::tempdir().unwrap();
        let v = volume(&dir);
        let mut first = take(&v, 0, 1);
        assert!(add(&v, &mut first, "kept"));
        v.write_atomic(&Words::claim_file(SLOT, 2), b"{}").unwrap();
        let kept = load_claimed::<Words>(&v, SLOT, claim(1, 2)).unwrap();
        assert_eq!(kept.state.words, ["kept"]);
        let third = take(&v, 2, 3);
        assert_eq!(third.state.words, ["kept"]);
    }

    #[test]
    fn a_slot_never_written_loads_empty_at_its_epoch() {
        let dir = tempfile::tempdir().unwrap();
        let v = volume(&dir);
        let slot = take(&v, 0, 5);
        assert_eq!(slot.state, Words::empty(SLOT, 5));
        assert_eq!(files(&v), ["slot-4.e5.log"]);
    }
}
