//! One segment: a `.log` file of batches plus its sparse index.

use kaas_core::layout::SegmentId;
use kaas_core::partition::AbortedTxn;
use kaas_core::record::RecordBatch;
use std::io;
use std::sync::Arc;

use super::fail_stop::fail_stop;
use super::index::{self, IndexEntry, SegmentIndex};
use super::invalid_data;
use super::scan::{BatchReader, Step};
use crate::volume::{SegmentFile, Volume};

/// `max_timestamp` of a segment without batches.
pub(crate) const NO_MAX_TIMESTAMP: i64 = i64::MIN;

pub(crate) struct Segment {
    pub base_offset: i64,
    /// The leader epoch that created the file (part of its name).
    pub epoch: i32,
    pub file: Arc<dyn SegmentFile>,
    /// Set for a file of an older leader epoch: the bytes of it that belong
    /// to the log. The file may be longer (its deposed leader can still be
    /// appending) but nothing past this is read, and this leader never
    /// writes the file or its index: it keeps the index in memory.
    pub frozen_len: Option<u64>,
    pub index: SegmentIndex,
    /// The offset after the last batch (`base_offset` while empty).
    pub next_offset: i64,
    /// Largest batch max timestamp in the segment.
    pub max_timestamp: i64,
    /// Bytes appended since the last index entry (active segment only).
    bytes_since_index_entry: u64,
    /// The aborted-transactions index (`.txnindex`): created when the first
    /// abort marker lands in the segment, found again at recovery.
    pub txn_index: Option<Arc<dyn SegmentFile>>,
    /// Its entries, in marker order. Kept in memory (34 bytes per aborted
    /// transaction) so a read_committed fetch never reads the file.
    pub aborted: Vec<AbortedTxn>,
    /// Entries appended since the flusher last planned an fsync of the
    /// `.txnindex` (so an fsync is spent only on a file that changed).
    pub txn_index_unsynced: bool,
    /// Set when `file` is a cleaned copy (compaction), written by the
    /// leader at this epoch: the original's name is gone, and removing the
    /// segment removes the copy.
    pub cleaned_by: Option<i32>,
    /// The max timestamp of the first batch, once known (tracked as it is
    /// appended or scanned; read from the file when the segment was opened
    /// through its index): what `segment.ms` is judged from.
    pub first_batch_timestamp: Option<i64>,
    /// When this broker created the segment, or first appended to it after
    /// opening it (the clock's side of `segment.ms`).
    pub created_ms: Option<i64>,
}

/// What an appended batch contributes to the segment's bookkeeping.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BatchMeta {
    pub position: u64,
    pub size: u64,
    pub base_offset: i64,
    pub next_offset: i64,
    pub max_timestamp: i64,
}

impl BatchMeta {
    pub fn of(batch: &RecordBatch, position: u64) -> Self {
        BatchMeta {
            position,
            size: batch.size() as u64,
            base_offset: batch.base_offset(),
            next_offset: batch.next_offset(),
            max_timestamp: batch.max_timestamp(),
        }
    }
}

impl Segment {
    /// A segment with no batches indexed yet (new, or about to be scanned).
    /// Its file fails every sync after one failed (see `fail_stop`).
    pub fn empty(base_offset: i64, epoch: i32, file: Arc<dyn SegmentFile>) -> Self {
        Segment {
            base_offset,
            epoch,
            file: fail_stop(file),
            frozen_len: None,
            index: SegmentIndex::Memory(Vec::new()),
            next_offset: base_offset,
            max_timestamp: NO_MAX_TIMESTAMP,
            bytes_since_index_entry: 0,
            txn_index: None,
            aborted: Vec::new(),
            txn_index_unsynced: false,
            cleaned_by: None,
            first_batch_timestamp: None,
            created_ms: None,
        }
    }

    /// A sealed segment described by its index trailer.
    pub fn sealed(
        base_offset: i64,
        epoch: i32,
        file: Arc<dyn SegmentFile>,
        index_file: Arc<dyn SegmentFile>,
        trailer: IndexEntry,
        entries: u64,
    ) -> Self {
        Segment {
            base_offset,
            epoch,
            file: fail_stop(file),
            frozen_len: None,
            index: SegmentIndex::Sealed {
                file: index_file,
                entries,
            },
            next_offset: base_offset + i64::from(trailer.relative_offset),
            max_timestamp: trailer.max_timestamp_before,
            bytes_since_index_entry: 0,
            txn_index: None,
            aborted: Vec::new(),
            txn_index_unsynced: false,
            cleaned_by: None,
            first_batch_timestamp: None,
            created_ms: None,
        }
    }

    /// The same segment read through another handle on its file (after a
    /// rename, the one opened by the new name).
    pub fn with_file(mut self, file: Arc<dyn SegmentFile>) -> Self {
        self.file = fail_stop(file);
        self
    }

    /// The segment's name on the volume.
    pub fn id(&self) -> SegmentId {
        SegmentId::new(self.base_offset, self.epoch)
    }

    /// Bytes of the segment that belong to the log.
    pub fn size(&self) -> u64 {
        let len = self.file.len();
        self.frozen_len.map_or(len, |frozen| frozen.min(len))
    }

    /// Freezes the segment at its current end: from now on it is an older
    /// epoch's file, read up to here and never written.
    pub fn freeze(&mut self, len: u64) {
        self.frozen_len = Some(len);
    }

    /// Offset relative to the segment base, if it fits an index entry.
    pub fn relative(&self, offset: i64) -> Option<u32> {
        u32::try_from(offset.checked_sub(self.base_offset)?).ok()
    }

    /// Records a batch written at `meta.position`: index entry every
    /// `interval` bytes, timestamps, end offset. Startup recovery feeds
    /// scanned batches through this same function, so a rebuilt index is
    /// identical to the one built while appending.
    pub fn track(&mut self, meta: BatchMeta, interval: u64) -> io::Result<()> {
        if meta.position > 0 && self.bytes_since_index_entry >= interval {
            let entry = IndexEntry {
                relative_offset: self
                    .relative(meta.base_offset)
                    .ok_or_else(|| invalid_data("batch offset does not fit the segment index"))?,
                position: u32::try_from(meta.position)
                    .map_err(|_| invalid_data("segment position does not fit the index"))?,
                max_timestamp_before: self.max_timestamp,
            };
            if let SegmentIndex::Memory(entries) = &mut self.index {
                entries.push(entry);
            }
            self.bytes_since_index_entry = 0;
        }
        self.bytes_since_index_entry += meta.size;
        if meta.position == 0 {
            self.first_batch_timestamp = Some(meta.max_timestamp);
        }
        self.max_timestamp = self.max_timestamp.max(meta.max_timestamp);
        self.next_offset = meta.next_offset;
        Ok(())
    }

    /// Whether the segment needs no index written: it is on the volume
    /// (the segment was sealed durably), or the segment is an older
    /// epoch's, whose files this leader never writes.
    pub fn is_indexed(&self) -> bool {
        self.frozen_len.is_some() || matches!(self.index, SegmentIndex::Sealed { .. })
    }

    /// The `.index` file's bytes (entries plus trailer) and entry count.
    pub fn encode_index(&self) -> io::Result<(Vec<u8>, u64)> {
        let SegmentIndex::Memory(entries) = &self.index else {
            return Err(invalid_data("segment index is already on the volume"));
        };
        let trailer = IndexEntry {
            relative_offset: self
                .relative(self.next_offset)
                .ok_or_else(|| invalid_data("segment end offset does not fit the index"))?,
            position: u32::try_from(self.size())
                .map_err(|_| invalid_data("segment size does not fit the index"))?,
            max_timestamp_before: self.max_timestamp,
        };
        Ok((index::encode(entries, trailer), (entries.len() + 1) as u64))
    }

    /// Switches lookups to the written index file.
    pub fn install_index(&mut self, file: Arc<dyn SegmentFile>, entries: u64) {
        self.index = SegmentIndex::Sealed { file, entries };
    }

    /// Writes the index with its trailer and switches lookups to the file.
    /// The caller has synced the segment itself.
    pub fn seal(&mut self, volume: &dyn Volume, index_path: &str) -> io::Result<()> {
        if self.is_indexed() {
            return Ok(());
        }
        let (bytes, entries) = self.encode_index()?;
        volume.write_atomic(index_path, &bytes)?;
        let file = volume.open_segment(index_path, false)?;
        self.install_index(file, entries);
        Ok(())
    }

    /// The first batch from `start` on for which `wanted` holds, with its
    /// position. `start` comes from an index lookup; if the batch found
    /// there is not the one the entry names (a damaged index), the scan
    /// falls back to the start of the segment.
    pub fn find_batch(
        &self,
        start: Option<IndexEntry>,
        chunk: usize,
        mut wanted: impl FnMut(&RecordBatch) -> bool,
    ) -> io::Result<Option<(u64, RecordBatch)>> {
        let mut from = start;
        loop {
            let position = from.map_or(0, |e| u64::from(e.position));
            let expected_base = from.map(|e| self.base_offset + i64::from(e.relative_offset));
            if position >= self.size() {
                // A sealed index's trailer points at the end: no batch from
                // here on can match. Any other entry there is damage.
                let at_trailer = expected_base == Some(self.next_offset);
                if at_trailer || from.is_none() {
                    return Ok(None);
                }
                from = None;
                continue;
            }
            let mut reader = BatchReader::new(self.file.as_ref(), position, self.size(), chunk);
            let mut first = true;
            let mut restart = false;
            loop {
                match reader.next_step()? {
                    Step::Batch { position, batch } => {
                        if first && expected_base.is_some_and(|b| b != batch.base_offset()) {
                            restart = true;
                            break;
                        }
                        first = false;
                        if wanted(&batch) {
                            return Ok(Some((position, batch)));
                        }
                    }
                    Step::End | Step::Partial { .. } | Step::Corrupt { .. } => {
                        if first && from.is_some() {
                            restart = true;
                        }
                        break;
                    }
                }
            }
            if !restart {
                return Ok(None);
            }
            tracing::warn!(
                segment = self.base_offset,
                "index entry does not point at a batch; scanning from the segment start"
            );
            from = None;
        }
    }
}
