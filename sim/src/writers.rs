//! "One writer per file and epoch": in a multi-broker seed, every file the
//! layout names per ownership epoch is written by one broker only.
//!
//! Ownership moves by epochs: a broker that takes a partition or a
//! coordinator slot over claims epoch E+1 (an exclusively created claim
//! file) and from then on writes files named for E+1 only, so a deposed
//! holder that still writes (a late IO after a volume partition heals,
//! say) writes into files of its own epoch, never into its successor's.
//! [`SimVolume`](crate::volume::SimVolume) records which broker changed
//! each file; this module keeps the one function that knows which paths
//! are per epoch ([`epoch_file`]) and checks the record against it.
//!
//! A truncation by another broker is not counted as writing: a successor
//! cutting a torn tail off its predecessor's last segment during recovery
//! is allowed (the predecessor is dead then, or its writes go nowhere
//! anyone reads); such truncations are counted for the report.

use crate::volume::FaultPoint;
use kaas_core::layout::{self, Entry};
use std::collections::{BTreeMap, BTreeSet};

/// What kind of per-epoch file a path is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EpochFile {
    /// A segment, its index or its aborted-transactions index, or a
    /// cleaned copy of a segment and its index.
    Segment,
    /// A partition's producer-state snapshot.
    ProducerSnapshot,
    /// A partition's log start, as its leader at that epoch persisted it.
    LogStart,
    /// A partition's leader-epoch checkpoint, written by the leader that
    /// took the partition over at that epoch.
    LeaderEpochCheckpoint,
    /// A claim file under `__cluster/epochs/` (partition or slot).
    Claim,
    /// A coordinator slot's snapshot or journal (`slot-N.json` /
    /// `slot-N.log` at epoch 0, `slot-N.eE.json` / `slot-N.eE.log` after).
    SlotState,
    /// A version of a topic's metadata (`<topic>.json`, `<topic>@N.json`),
    /// its version standing for the epoch: each is created once,
    /// exclusively, by the broker that made that change.
    TopicVersion,
}

/// The epoch a path belongs to, if the layout names it per epoch.
///
/// The one place that maps the layout's per-epoch names (each parsed by
/// `kaas_core::layout`) to their epoch.
pub fn epoch_file(path: &str) -> Option<(EpochFile, i32)> {
    let (dir, name) = path.rsplit_once('/').unwrap_or(("", path));
    if dir.starts_with(layout::PARTITIONS_DIR) {
        match layout::classify(name) {
            Entry::Segment(id) | Entry::Index(id) | Entry::TxnIndex(id) => {
                return Some((EpochFile::Segment, id.epoch))
            }
            // A cleaned copy is its cleaner's file, whatever it stands in for.
            Entry::CleanedSegment(_, by) | Entry::CleanedIndex(_, by) | Entry::Cleaning(_, by) => {
                return Some((EpochFile::Segment, by))
            }
            Entry::Other => {}
        }
        return layout::producer_snapshot_epoch(name)
            .map(|e| (EpochFile::ProducerSnapshot, e))
            .or_else(|| layout::log_start_epoch(name).map(|e| (EpochFile::LogStart, e)))
            .or_else(|| {
                layout::leader_epoch_checkpoint_epoch(name)
                    .map(|e| (EpochFile::LeaderEpochCheckpoint, e))
            });
    }
    if dir.starts_with(layout::EPOCHS_DIR) {
        return layout::parse_epoch_file(name).map(|e| (EpochFile::Claim, e));
    }
    if dir == layout::TXN_STATE_DIR || dir == layout::GROUP_STATE_DIR {
        return layout::slot_state_of_file(name).map(|(_, e)| (EpochFile::SlotState, e));
    }
    if dir == layout::TOPIC_FILES_DIR {
        return layout::topic_version_of_file(name)
            .and_then(|(_, version)| i32::try_from(version).ok())
            .map(|v| (EpochFile::TopicVersion, v));
    }
    None
}

/// Counters for the seed's report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriterStats {
    /// Per-epoch files that some broker wrote.
    pub epoch_files: u64,
    /// Of them, claim files.
    pub claims: u64,
    /// Truncations of a per-epoch file by a broker other than its writer.
    pub foreign_truncations: u64,
}

/// Checks that no per-epoch file was written by two brokers. `writers`:
/// per path, the brokers that changed it and how
/// ([`SimVolume::writers`](crate::volume::SimVolume::writers)).
pub fn check_one_writer_per_epoch(
    writers: &BTreeMap<String, BTreeSet<(usize, FaultPoint)>>,
) -> (Vec<String>, WriterStats) {
    let mut violations = Vec::new();
    let mut stats = WriterStats::default();
    for (path, ops) in writers {
        let Some((kind, epoch)) = epoch_file(path) else {
            continue;
        };
        let wrote: BTreeSet<usize> = ops
            .iter()
            .filter(|(_, op)| {
                !matches!(
                    op,
                    FaultPoint::Truncate | FaultPoint::Remove | FaultPoint::RemoveDirAll
                )
            })
            .map(|&(broker, _)| broker)
            .collect();
        if wrote.is_empty() {
            continue;
        }
        stats.epoch_files += 1;
        stats.claims += u64::from(kind == EpochFile::Claim);
        stats.foreign_truncations += ops
            .iter()
            .filter(|(b, op)| *op == FaultPoint::Truncate && !wrote.contains(b))
            .count() as u64;
        if wrote.len() > 1 {
            let how: Vec<String> = ops.iter().map(|(b, op)| format!("{b}:{op:?}")).collect();
            violations.push(format!(
                "one writer per file and epoch: brokers {wrote:?} all wrote {path} ({kind:?} of epoch {epoch}; {})",
                how.join(", ")
            ));
        }
    }
    (violations, stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_epoch_paths_parse_to_their_epoch() {
        let dir = layout::partition_dir("sim", 1);
        assert_eq!(
            epoch_file(&layout::segment_path(&dir, 40, 3)),
            Some((EpochFile::Segment, 3))
        );
        assert_eq!(
            epoch_file(&layout::index_path(&dir, 0, 0)),
            Some((EpochFile::Segment, 0))
        );
        assert_eq!(
            epoch_file(&layout::producer_snapshot_path(&dir, 7)),
            Some((EpochFile::ProducerSnapshot, 7))
        );
        assert_eq!(
            epoch_file(&layout::log_start_offset_path(&dir, 5)),
            Some((EpochFile::LogStart, 5))
        );
        assert_eq!(
            epoch_file(&layout::partition_epoch_file("sim", 1, 12)),
            Some((EpochFile::Claim, 12))
        );
        assert_eq!(
            epoch_file(&layout::txn_slot_epoch_file(3, 2)),
            Some((EpochFile::Claim, 2))
        );
        assert_eq!(
            epoch_file(&layout::topic_version_file("sim", 4)),
            Some((EpochFile::TopicVersion, 4))
        );
        assert_eq!(
            epoch_file(&layout::topic_file("sim")),
            Some((EpochFile::TopicVersion, 0))
        );
        assert_eq!(
            epoch_file(&format!("{}/slot-3.e5.log", layout::TXN_STATE_DIR)),
            Some((EpochFile::SlotState, 5))
        );
        // Epoch 0's slot files keep the epoch-less names.
        assert_eq!(
            epoch_file(&layout::txn_slot_journal(3, 0)),
            Some((EpochFile::SlotState, 0))
        );
        assert_eq!(
            epoch_file("__cluster/group_state/slot-3.json"),
            Some((EpochFile::SlotState, 0))
        );
        // Not per epoch: the broker files.
        assert_eq!(epoch_file("__cluster/txn_state/slot-3.log.tmp"), None);
        assert_eq!(
            epoch_file("__cluster/group_state/slot-3.e12.json"),
            Some((EpochFile::SlotState, 12))
        );
        assert_eq!(
            epoch_file(&layout::leader_epoch_checkpoint_path(&dir, 4)),
            Some((EpochFile::LeaderEpochCheckpoint, 4))
        );
        assert_eq!(epoch_file(&layout::broker_file(0)), None);
    }

    #[test]
    fn a_second_broker_writing_an_epochs_file_is_a_violation() {
        let seg = layout::segment_path(&layout::partition_dir("sim", 0), 0, 2);
        let mut w: BTreeMap<String, BTreeSet<(usize, FaultPoint)>> = BTreeMap::new();
        w.entry(seg.clone())
            .or_default()
            .extend([(0, FaultPoint::OpenSegment), (0, FaultPoint::Append)]);
        let (v, stats) = check_one_writer_per_epoch(&w);
        assert!(v.is_empty(), "{v:?}");
        assert_eq!(stats.epoch_files, 1);
        // A successor truncating the tail is allowed, and counted.
        w.entry(seg.clone())
            .or_default()
            .insert((1, FaultPoint::Truncate));
        let (v, stats) = check_one_writer_per_epoch(&w);
        assert!(v.is_empty(), "{v:?}");
        assert_eq!(stats.foreign_truncations, 1);
        // Appending is not.
        w.entry(seg).or_default().insert((1, FaultPoint::Append));
        let (v, _) = check_one_writer_per_epoch(&w);
        assert_eq!(v.len(), 1, "{v:?}");
        // Nor two brokers creating one claim file.
        let claim = layout::group_slot_epoch_file(4, 9);
        let mut w: BTreeMap<String, BTreeSet<(usize, FaultPoint)>> = BTreeMap::new();
        w.entry(claim)
            .or_default()
            .extend([(0, FaultPoint::Link), (2, FaultPoint::Link)]);
        assert_eq!(check_one_writer_per_epoch(&w).0.len(), 1);
    }
}
