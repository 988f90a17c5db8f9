//! A slot's files on the volume: its snapshot (`slot-<N>.json`) and its
//! journal (`slot-<N>.log`, framed by `kaas_core::slot_journal`).
//!
//! A round appends the slot's new state to the journal and syncs it: one
//! append and one `fdatasync`, where replacing the snapshot costs a
//! temporary, its fsync, a rename and a directory fsync. Once the journal
//! would pass [`COMPACT_AT`] bytes, the round writes a new snapshot instead
//! and empties the journal.
//!
//! Which state is current: the journal's last whole record if its version
//! is above the snapshot's, else the snapshot. A tie is a snapshot written
//! by compaction (or after a failed append) before the journal was emptied,
//! and the snapshot is the one known to be whole and current then.

use super::{Durability, SlotFile};
use crate::volume::{SegmentFile, Volume};
use kaas_core::slot_journal::{encode_record, scan, RECORD_HEADER_BYTES};
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Past this many bytes the journal is folded into a new snapshot. It also
/// bounds what a broker reads per slot when it takes the slot over.
pub const COMPACT_AT: u64 = 1 << 20;

/// A slot's journal, owned by the slot's single writer.
#[derive(Clone)]
pub struct Journal {
    inner: Arc<Inner>,
}

struct Inner {
    file: Arc<dyn SegmentFile>,
    snapshot_path: String,
    /// The claim file of the epoch after the one these files belong to:
    /// once it exists, a successor may have read the slot, so nothing
    /// written here may be acknowledged (see [`Journal::deposed`]).
    successor_claim: Option<String>,
    /// An append failed: what it left in the file may be a torn record that
    /// would hide every later one, so the next round writes a snapshot and
    /// empties the journal rather than appending after it.
    suspect: AtomicBool,
}

/// A slot as found on the volume.
pub struct Loaded<F> {
    /// The current state, or `None` for a slot never written.
    pub state: Option<F>,
    pub journal: Journal,
}

/// Reads slot `snapshot_path` and its journal `journal_path` and returns
/// the current state. A torn tail is cut from the journal here, before the
/// caller (the slot's new owner) appends to it. A snapshot or journal
/// record that does not decode is an error: starting without it would
/// forget what the slot holds.
pub fn load<F: SlotFile, E: std::fmt::Display>(
    volume: &dyn Volume,
    snapshot_path: &str,
    journal_path: &str,
    decode: impl Fn(&[u8]) -> Result<F, E>,
) -> io::Result<Loaded<F>> {
    load_fenced(volume, snapshot_path, journal_path, None, decode)
}

/// [`load`] for files of one coordinator epoch, fenced by the claim file
/// of the next epoch, `successor_claim` (`None`: no epoch can follow).
pub fn load_fenced<F: SlotFile, E: std::fmt::Display>(
    volume: &dyn Volume,
    snapshot_path: &str,
    journal_path: &str,
    successor_claim: Option<String>,
    decode: impl Fn(&[u8]) -> Result<F, E>,
) -> io::Result<Loaded<F>> {
    let snapshot = read_snapshot(volume, snapshot_path, &decode)?;
    let file = volume.open_segment(journal_path, true)?;
    let bytes = file.read_at(0, usize::try_from(file.len()).unwrap_or(usize::MAX))?;
    let found = scan(&bytes);
    let journaled = decode_last(found.last, journal_path, &decode)?;
    if (found.valid_len as u64) < file.len() {
        tracing::warn!(
            path = journal_path,
            whole_records = found.records,
            torn_bytes = file.len() - found.valid_len as u64,
            "cutting a torn tail from a slot journal"
        );
        kaas_core::coverage::hit(kaas_core::coverage::Mark::TornJournalTailCut);
        file.truncate(found.valid_len as u64)?;
    }
    crate::volume::sync_names_read_back(volume, crate::volume::parent_dir(journal_path))?;
    Ok(Loaded {
        state: current(snapshot, journaled),
        journal: Journal {
            inner: Arc::new(Inner {
                file,
                snapshot_path: snapshot_path.to_string(),
                successor_claim,
                suspect: AtomicBool::new(false),
            }),
        },
    })
}

/// The current state of a slot's files, read only: nothing is created or
/// cut. For an earlier epoch's files, which their deposed writer may still
/// be appending to (what it appends after this read was never
/// acknowledged, see [`Journal::deposed`]).
pub fn read_state<F: SlotFile, E: std::fmt::Display>(
    volume: &dyn Volume,
    snapshot_path: &str,
    journal_path: &str,
    decode: impl Fn(&[u8]) -> Result<F, E>,
) -> io::Result<Option<F>> {
    let snapshot = read_snapshot(volume, snapshot_path, &decode)?;
    let journaled = match volume.read(journal_path)? {
        Some(bytes) => decode_last(scan(&bytes).last, journal_path, &decode)?,
        None => None,
    };
    Ok(current(snapshot, journaled))
}

fn invalid(path: &str, e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("{path}: {e}"))
}

fn read_snapshot<F, E: std::fmt::Display>(
    volume: &dyn Volume,
    path: &str,
    decode: &impl Fn(&[u8]) -> Result<F, E>,
) -> io::Result<Option<F>> {
    match volume.read(path)? {
        Some(bytes) => decode(&bytes).map(Some).map_err(|e| invalid(path, e)),
        None => Ok(None),
    }
}

fn decode_last<F, E: std::fmt::Display>(
    last: Option<&[u8]>,
    path: &str,
    decode: &impl Fn(&[u8]) -> Result<F, E>,
) -> io::Result<Option<F>> {
    last.map(|payload| decode(payload).map_err(|e| invalid(path, e)))
        .transpose()
}

/// The journal's last whole record if it is newer than the snapshot, else
/// the snapshot (see the module docs for the tie).
fn current<F: SlotFile>(snapshot: Option<F>, journaled: Option<F>) -> Option<F> {
    match (snapshot, journaled) {
        (Some(s), Some(j)) if j.version() > s.version() => Some(j),
        (Some(s), _) => Some(s),
        (None, j) => j,
    }
}

impl Journal {
    /// Whether the epoch after this journal's has been claimed: a
    /// successor may have read the slot before a write that has just
    /// become durable, so that write must not be acknowledged. Asked after
    /// the write's sync, as a partition leader asks before acknowledging.
    pub fn deposed(&self, volume: &dyn Volume) -> io::Result<bool> {
        match &self.inner.successor_claim {
            Some(path) => Ok(volume.read(path)?.is_some()),
            None => Ok(false),
        }
    }

    /// Whether a round of `len` bytes would be appended (rather than
    /// written as a snapshot: the journal is full, or suspect after a
    /// failed append). A deferred round that appends can run in place;
    /// one that writes a snapshot waits on the disk.
    pub fn would_append(&self, len: usize) -> bool {
        let inner = &self.inner;
        let record = (RECORD_HEADER_BYTES + len) as u64;
        !inner.suspect.load(Ordering::Acquire) && inner.file.len() + record <= COMPACT_AT
    }

    /// Makes `state` (encoded as `bytes`) the slot's durable state, or with
    /// [`Durability::Deferred`] its state once the next synced write is
    /// done. Blocks: run it on the IO runner.
    pub fn write(
        &self,
        volume: &dyn Volume,
        bytes: &[u8],
        durability: Durability,
    ) -> io::Result<()> {
        let inner = &self.inner;
        let record = encode_record(bytes);
        let fits = record
            .as_ref()
            .is_some_and(|r| inner.file.len() + r.len() as u64 <= COMPACT_AT);
        match record {
            Some(record) if fits && !inner.suspect.load(Ordering::Acquire) => {
                let before = inner.file.len();
                let appended = inner.file.append(&record).and_then(|_| match durability {
                    Durability::Synced => inner.file.sync(),
                    Durability::Deferred => Ok(()),
                });
                if appended.is_err() {
                    // Best effort: take the record back now; if that fails
                    // too, the next round replaces rather than appends.
                    if inner.file.truncate(before).is_err() {
                        inner.suspect.store(true, Ordering::Release);
                    }
                    if durability == Durability::Synced {
                        // A failed sync may also have lost deferred records
                        // appended before this one, which stay in the file
                        // (Linux marks the pages of a failed fsync clean:
                        // "fsyncgate"). A later sync would not write them
                        // again, and a crash could leave garbage there that
                        // hides every record synced after it. The next
                        // round writes a snapshot and empties the journal
                        // instead.
                        inner.suspect.store(true, Ordering::Release);
                    }
                }
                appended
            }
            _ => {
                // Until the journal is empty, its last record may tie with
                // a snapshot this round wrote (even one whose write then
                // reported a failure), and the tie goes to the snapshot: so
                // no round may append before the journal is emptied.
                inner.suspect.store(true, Ordering::Release);
                volume.write_atomic(&inner.snapshot_path, bytes)?;
                inner.file.truncate(0)?;
                inner.suspect.store(false, Ordering::Release);
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::volume::hooked::{DiskWait, HookedVolume};
    use crate::volume::LocalVolume;
    use std::sync::atomic::AtomicUsize;

    /// A slot state small enough to read at a glance.
    #[derive(Clone, Debug, PartialEq)]
    struct Counter {
        version: u64,
        value: String,
    }

    impl SlotFile for Counter {
        type Op = String;
        fn apply(&mut self, op: &String) -> bool {
            self.value = op.clone();
            true
        }
        fn bump_version(&mut self) {
            self.version += 1;
        }
        fn version(&self) -> u64 {
            self.version
        }
        fn encode(&self) -> io::Result<Vec<u8>> {
            Ok(format!("{} {}", self.version, self.value).into_bytes())
        }
    }

    fn decode(bytes: &[u8]) -> Result<Counter, String> {
        let text = std::str::from_utf8(bytes).map_err(|e| e.to_string())?;
        let (version, value) = text.split_once(' ').ok_or("no space")?;
        Ok(Counter {
            version: version.parse().map_err(|_| "bad version")?,
            value: value.to_string(),
        })
    }

    const SNAPSHOT: &str = "s/slot-0.json";
    const JOURNAL: &str = "s/slot-0.log";

    fn open(volume: &dyn Volume) -> Loaded<Counter> {
        volume.create_dir_all("s").unwrap();
        load(volume, SNAPSHOT, JOURNAL, decode).unwrap()
    }

    fn state(version: u64, value: &str) -> Counter {
        Counter {
            version,
            value: value.to_string(),
        }
    }

    fn write(journal: &Journal, volume: &dyn Volume, s: &Counter) -> io::Result<()> {
        journal.write(volume, &s.encode().unwrap(), Durability::Synced)
    }

    #[test]
    fn rounds_append_to_the_journal_and_the_last_one_is_loaded() {
        let dir = tempfile::tempdir().unwrap();
        let volume = LocalVolume::new(dir.path()).unwrap();
        let loaded = open(&volume);
        assert_eq!(loaded.state, None);
        for v in 1..=3 {
            write(&loaded.journal, &volume, &state(v, &format!("v{v}"))).unwrap();
        }
        assert_eq!(volume.read(SNAPSHOT).unwrap(), None, "no replace per round");
        assert_eq!(open(&volume).state, Some(state(3, "v3")));
    }

    /// A journal found on the volume may have been created by a process
    /// killed before its first sync: its name is then in the page cache
    /// only, and this handle did not create it, so no sync of it would
    /// make the name durable. Loading syncs the directory, every time.
    #[test]
    fn loading_a_journal_makes_the_name_it_read_back_durable() {
        let dir = tempfile::tempdir().unwrap();
        let synced_dirs = Arc::new(AtomicUsize::new(0));
        let seen = synced_dirs.clone();
        let volume = HookedVolume::new(LocalVolume::new(dir.path()).unwrap(), move |wait| {
            if wait == DiskWait::SyncDir("s") {
                seen.fetch_add(1, Ordering::SeqCst);
            }
            Ok(())
        });
        let loaded = open(&volume);
        write(&loaded.journal, &volume, &state(1, "one")).unwrap();
        assert_eq!(synced_dirs.load(Ordering::SeqCst), 1);
        assert_eq!(open(&volume).state, Some(state(1, "one")));
        assert_eq!(synced_dirs.load(Ordering::SeqCst), 2, "at each load");
    }

    #[test]
    fn a_full_journal_is_folded_into_a_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let volume = LocalVolume::new(dir.path()).unwrap();
        let loaded = open(&volume);
        let big = "x".repeat(100_000);
        let rounds = COMPACT_AT / 100_000 + 2;
        for v in 1..=rounds {
            write(&loaded.journal, &volume, &state(v, &format!("{v}{big}"))).unwrap();
        }
        assert!(volume.read(SNAPSHOT).unwrap().is_some(), "folded");
        assert!(loaded.journal.inner.file.len() < COMPACT_AT);
        let reloaded = open(&volume).state.unwrap();
        assert_eq!(reloaded.version, rounds);
        assert!(reloaded.value.starts_with(&rounds.to_string()));
    }

    /// A crash mid-append leaves a torn record; the next owner cuts it off
    /// before appending, so what it writes next is not hidden behind it.
    #[test]
    fn a_torn_tail_is_cut_before_the_next_append() {
        let dir = tempfile::tempdir().unwrap();
        let volume = LocalVolume::new(dir.path()).unwrap();
        let loaded = open(&volume);
        write(&loaded.journal, &volume, &state(1, "one")).unwrap();
        let torn = encode_record(b"2 two").unwrap();
        loaded
            .journal
            .inner
            .file
            .append(&torn[..torn.len() - 1])
            .unwrap();
        drop(loaded);
        let reopened = open(&volume);
        assert_eq!(reopened.state, Some(state(1, "one")));
        write(&reopened.journal, &volume, &state(2, "two again")).unwrap();
        assert_eq!(open(&volume).state, Some(state(2, "two again")));
    }

    /// Compaction writes the snapshot, then empties the journal: a crash
    /// in between leaves both at the same version, and the snapshot wins.
    #[test]
    fn a_tie_goes_to_the_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let volume = LocalVolume::new(dir.path()).unwrap();
        let loaded = open(&volume);
        write(&loaded.journal, &volume, &state(4, "journal")).unwrap();
        volume.write_atomic(SNAPSHOT, b"4 snapshot").unwrap();
        assert_eq!(open(&volume).state, Some(state(4, "snapshot")));
        volume.write_atomic(SNAPSHOT, b"3 older").unwrap();
        assert_eq!(open(&volume).state, Some(state(4, "journal")));
    }

    /// After a failed sync whose record could not be taken back, the next
    /// round must not append behind it: it writes a snapshot instead.
    #[test]
    fn a_failed_append_is_taken_back_or_the_next_round_replaces() {
        let dir = tempfile::tempdir().unwrap();
        let fail = Arc::new(AtomicUsize::new(0));
        let failing = fail.clone();
        let volume = HookedVolume::new(LocalVolume::new(dir.path()).unwrap(), move |wait| {
            if matches!(wait, DiskWait::Sync(_)) && failing.load(Ordering::SeqCst) > 0 {
                failing.fetch_sub(1, Ordering::SeqCst);
                return Err(io::Error::other("injected"));
            }
            Ok(())
        });
        let loaded = open(&volume);
        write(&loaded.journal, &volume, &state(1, "one")).unwrap();
        fail.store(1, Ordering::SeqCst);
        assert!(write(&loaded.journal, &volume, &state(2, "refused")).is_err());
        // The truncate took the record back (the hook fails syncs only).
        assert_eq!(open(&volume).state, Some(state(1, "one")));
        loaded.journal.inner.suspect.store(true, Ordering::SeqCst);
        write(&loaded.journal, &volume, &state(2, "two")).unwrap();
        assert_eq!(
            volume.read(SNAPSHOT).unwrap().as_deref(),
            Some(&b"2 two"[..])
        );
        assert_eq!(loaded.journal.inner.file.len(), 0);
        assert_eq!(open(&volume).state, Some(state(2, "two")));
    }

    /// A deferred round appends without a sync; the next synced round's
    /// sync is the one that makes both durable.
    #[test]
    fn a_deferred_write_waits_for_the_next_synced_one() {
        let dir = tempfile::tempdir().unwrap();
        let syncs = Arc::new(AtomicUsize::new(0));
        let seen = syncs.clone();
        let volume = HookedVolume::new(LocalVolume::new(dir.path()).unwrap(), move |wait| {
            if matches!(wait, DiskWait::Sync(_)) {
                seen.fetch_add(1, Ordering::SeqCst);
            }
            Ok(())
        });
        let loaded = open(&volume);
        let deferred = state(1, "complete");
        let bytes = deferred.encode().unwrap();
        loaded
            .journal
            .write(&volume, &bytes, Durability::Deferred)
            .unwrap();
        assert_eq!(syncs.load(Ordering::SeqCst), 0, "appended, not synced");
        assert_eq!(open(&volume).state, Some(deferred), "but written");
        write(&loaded.journal, &volume, &state(2, "next")).unwrap();
        assert_eq!(syncs.load(Ordering::SeqCst), 1);
        assert_eq!(open(&volume).state, Some(state(2, "next")));
    }

    /// A failed sync can lose a deferred record appended before the failed
    /// one, which the truncate leaves in the file: Linux marks the failed
    /// pages clean, so no later sync writes them, and what a crash leaves
    /// there could hide every record synced after it. So the next round
    /// replaces (snapshot, empty journal) rather than appends behind it.
    #[test]
    fn after_a_failed_sync_behind_a_deferred_write_the_next_round_replaces() {
        let dir = tempfile::tempdir().unwrap();
        let fail = Arc::new(AtomicUsize::new(0));
        let failing = fail.clone();
        let volume = HookedVolume::new(LocalVolume::new(dir.path()).unwrap(), move |wait| {
            if matches!(wait, DiskWait::Sync(_)) && failing.load(Ordering::SeqCst) > 0 {
                failing.fetch_sub(1, Ordering::SeqCst);
                return Err(io::Error::other("injected"));
            }
            Ok(())
        });
        let loaded = open(&volume);
        write(&loaded.journal, &volume, &state(1, "prepare")).unwrap();
        let complete = state(2, "complete").encode().unwrap();
        loaded
            .journal
            .write(&volume, &complete, Durability::Deferred)
            .unwrap();
        fail.store(1, Ordering::SeqCst);
        assert!(loaded.journal.would_append(10));
        assert!(write(&loaded.journal, &volume, &state(3, "refused")).is_err());
        assert_eq!(volume.read(SNAPSHOT).unwrap(), None);
        assert!(!loaded.journal.would_append(10), "the next round replaces");
        write(&loaded.journal, &volume, &state(3, "next")).unwrap();
        assert_eq!(
            volume.read(SNAPSHOT).unwrap().as_deref(),
            Some(&b"3 next"[..]),
            "replaced, not appended behind the record whose sync failed"
        );
        assert_eq!(loaded.journal.inner.file.len(), 0, "journal emptied");
        assert_eq!(open(&volume).state, Some(state(3, "next")));
    }

    #[test]
    fn a_record_that_does_not_decode_stops_the_load() {
        let dir = tempfile::tempdir().unwrap();
        let volume = LocalVolume::new(dir.path()).unwrap();
        let loaded = open(&volume);
        loaded
            .journal
            .write(&volume, b"garbage", Durability::Synced)
            .unwrap();
        let err = load(&volume, SNAPSHOT, JOURNAL, decode).err().unwrap();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    }
}
