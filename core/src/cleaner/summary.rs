//! Counts of one cleaning pass, for logs and metrics.

use super::fate::Fate;
use super::view::{BatchContent, BatchView};
use crate::record::BATCH_HEADER_LEN;

/// What one pass read, kept and removed. Records of compressed batches that
/// cannot be decompressed are not counted; their bytes are. A rewritten
/// compressed batch's output is counted by its records' uncompressed size.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CleanSummary {
    /// Batches given to the decision.
    pub batches_read: u64,
    /// [`Fate::KeepWhole`].
    pub batches_kept_whole: u64,
    /// [`Fate::Rewrite`].
    pub batches_rewritten: u64,
    /// Kept as a header with no records ([`Fate::KeepEmpty`]).
    pub batches_emptied: u64,
    /// [`Fate::Drop`].
    pub batches_dropped: u64,
    /// Records of readable batches, data and control.
    pub records_read: u64,
    /// Records written (data and markers).
    pub records_kept: u64,
    /// Removed because a later record has the same key.
    pub records_superseded: u64,
    /// Tombstones removed because their delete horizon had passed.
    pub tombstones_removed: u64,
    /// Records without a key, which a compacted log does not keep.
    pub keyless_removed: u64,
    /// Records of aborted transactions.
    pub aborted_removed: u64,
    /// Transaction markers removed.
    pub markers_removed: u64,
    /// Bytes of the batches read.
    pub bytes_read: u64,
    /// Bytes the output takes; exact but for rebased timestamp deltas,
    /// which may take a few bytes more or less than the originals.
    pub bytes_written: u64,
}

impl CleanSummary {
    /// Every record removed, for whatever reason.
    pub fn records_removed(&self) -> u64 {
        self.records_superseded
            + self.tombstones_removed
            + self.keyless_removed
            + self.aborted_removed
            + self.markers_removed
    }

    /// Accounts for the batch-level outcome of `fate` on `batch`; the
    /// per-record reasons are counted by the decision as it makes them.
    pub(crate) fn count_batch(&mut self, batch: &BatchView, fate: &Fate) {
        self.batches_read += 1;
        self.bytes_read += to_u64(batch.size);
        self.records_read += to_u64(batch.record_count().unwrap_or(0));
        let (kept_records, written) = match fate {
            Fate::KeepWhole => {
                self.batches_kept_whole += 1;
                (batch.record_count().unwrap_or(0), batch.size)
            }
            Fate::Drop => {
                self.batches_dropped += 1;
                (0, 0)
            }
            Fate::KeepEmpty => {
                self.batches_emptied += 1;
                (0, BATCH_HEADER_LEN)
            }
            Fate::Rewrite { keep, .. } => {
                self.batches_rewritten += 1;
                let kept = keep.iter().filter(|&&k| k).count();
                (kept, BATCH_HEADER_LEN + kept_bytes(batch, keep))
            }
        };
        self.records_kept += to_u64(kept_records);
        self.bytes_written += to_u64(written);
    }
}

fn kept_bytes(batch: &BatchView, keep: &[bool]) -> usize {
    match &batch.content {
        BatchContent::Data(records) => records
            .iter()
            .zip(keep)
            .filter(|(_, &k)| k)
            .map(|(r, _)| r.size)
            .sum(),
        BatchContent::Control { records_size, .. } => *records_size,
        BatchContent::Opaque { .. } => batch.size.saturating_sub(BATCH_HEADER_LEN),
    }
}

fn to_u64(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}
