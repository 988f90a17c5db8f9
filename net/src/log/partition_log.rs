//! The partition log: appends, reads, offset lookups, durability tracking.

use bytes::{Bytes, BytesMut};
use kaas_core::layout::SegmentId;
use kaas_core::partition::leader_epochs::{trim_before_log_start, EpochEntry};
use kaas_core::partition::segment_roll::{
    roll_jitter_ms, roll_reason, ActiveSegment, IncomingBatch, RollSettings,
};
use kaas_core::partition::txn_index::{encode_entry, marker_confirms_entry};
use kaas_core::partition::{
    aborted_search_is_complete, aborted_transactions_in_range, txn_index_entry_is_trusted,
    AbortedTxn,
};
use kaas_core::record::{split_batches, Compression, RecordBatch, TimestampType};
use std::io;
use std::sync::Arc;

use super::fail_stop::fail_stop;
use super::recovery::{self, delete_cleaned_files, delete_segment_files};
use super::segment::{BatchMeta, Segment, NO_MAX_TIMESTAMP};
use super::{invalid_data, AppendInfo, LogConfig, ReadError, ReadResult};
use crate::volume::{SegmentFile, Volume};
use kaas_core::layout;

/// A lookup scans from an index entry to its batch: about one index
/// interval. Chunks of a couple of intervals make that a single read.
const MIN_READ_CHUNK: usize = 16 * 1024;

/// The log of one partition: files and the in-memory view of them. Not
/// internally synchronised: the driver holds it in its append lane and never
/// fsyncs under that lane. Durability is the flusher's: it takes a
/// [`SyncPlan`] (memory only), runs it outside the lane, and hands the
/// result back to [`finish_sync`](Self::finish_sync). Which offsets are
/// durable is a rule, kept by `kaas_core::partition`.
pub struct PartitionLog {
    pub(super) volume: Arc<dyn Volume>,
    pub(super) dir: String,
    pub(super) config: LogConfig,
    /// Sealed segments, oldest first.
    pub(super) sealed: Vec<Segment>,
    /// The segment appends go to; always after every sealed one.
    pub(super) active: Segment,
    pub(super) log_start_offset: i64,
    end_offset: i64,
    /// The epoch this log was opened at: written into every appended
    /// batch's partitionLeaderEpoch and into the names of the files it
    /// creates. Fixed for the life of the handle: a new epoch is a new
    /// open (a takeover), never a change in place.
    leader_epoch: i32,
    /// Where each leader epoch's log starts, as the checkpoint on the
    /// volume says (empty: one epoch only), trimmed in memory as the log
    /// start moves.
    leader_epochs: Vec<EpochEntry>,
    /// The seed of this partition's segment jitters (`segment.jitter.ms`):
    /// a hash of its directory, so partitions do not roll in step.
    jitter_seed: u64,
}

impl PartitionLog {
    /// Opens (creating if needed) the log in `dir` as leader epoch
    /// `leader_epoch`, recovering from a crash: a torn tail of this epoch's
    /// files is cut off, indexes are checked or rebuilt, and everything left
    /// is durable. If an older epoch wrote the directory last, this is a
    /// takeover: that epoch's files are only read, up to their last valid
    /// batch, where this epoch's log starts (recorded durably in the
    /// leader-epoch checkpoint before anything is appended). If a newer
    /// epoch did, the open fails: this leader was deposed.
    pub fn open(
        volume: Arc<dyn Volume>,
        dir: String,
        config: LogConfig,
        leader_epoch: i32,
    ) -> io::Result<Self> {
        let config = LogConfig {
            segment_bytes: config.segment_bytes.min(u64::from(u32::MAX)),
            ..config
        };
        let recovered = recovery::recover(volume.as_ref(), &dir, &config, leader_epoch)?;
        let end_offset = recovered.active.next_offset;
        Ok(PartitionLog {
            volume,
            config,
            sealed: recovered.sealed,
            active: recovered.active,
            log_start_offset: recovered.log_start_offset,
            end_offset,
            leader_epoch,
            leader_epochs: recovered.leader_epochs,
            jitter_seed: jitter_seed(&dir),
            dir,
        })
    }

    pub fn dir(&self) -> &str {
        &self.dir
    }

    pub fn config(&self) -> &LogConfig {
        &self.config
    }

    /// Applies a changed topic config (AlterConfigs) from the next append
    /// on: a smaller `segment.bytes` rolls the active segment at the next
    /// append that would pass it; written segments stay as they are.
    pub fn set_config(&mut self, config: LogConfig) {
        self.config = LogConfig {
            segment_bytes: config.segment_bytes.min(u64::from(u32::MAX)),
            ..config
        };
    }

    /// The first offset that may be read (advanced by DeleteRecords and
    /// retention).
    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset
    }

    /// The next offset to assign (log end offset).
    pub fn end_offset(&self) -> i64 {
        self.end_offset
    }

    /// The leader epoch stamped on appended batches.
    pub fn leader_epoch(&self) -> i32 {
        self.leader_epoch
    }

    /// Where each leader epoch's log starts (the leader-epoch checkpoint;
    /// empty while the partition has had one epoch only).
    pub fn leader_epochs(&self) -> &[EpochEntry] {
        &self.leader_epochs
    }

    /// The segments' names on the volume, oldest first.
    pub fn segment_ids(&self) -> Vec<SegmentId> {
        self.segments().map(Segment::id).collect()
    }

    /// All segments, oldest first; the last is the active one.
    pub(super) fn segments(&self) -> impl Iterator<Item = &Segment> {
        self.sealed.iter().chain(std::iter::once(&self.active))
    }

    /// Total bytes in all segments.
    pub fn size_bytes(&self) -> u64 {
        self.segments().map(Segment::size).sum()
    }

    /// Number of segments, the active one included.
    pub fn segment_count(&self) -> usize {
        self.sealed.len() + 1
    }

    /// Base offsets of the segments, oldest first.
    pub fn segment_base_offsets(&self) -> Vec<i64> {
        self.segments().map(|s| s.base_offset).collect()
    }

    // ---------------------------------------------------------------- append

    /// Appends one batch with the clock stopped; see
    /// [`append`](Self::append).
    pub fn append_batch(&mut self, batch: &RecordBatch) -> io::Result<AppendInfo> {
        self.append(std::slice::from_ref(batch))
    }

    /// Appends one batch at `base_offset`, which the partition's rules
    /// assigned, at `now_ms` by the broker's clock; anything else means the
    /// log and the rules disagree about the log end, and nothing is
    /// written. What the driver calls.
    pub fn append_at(
        &mut self,
        base_offset: i64,
        batch: &RecordBatch,
        now_ms: i64,
    ) -> io::Result<AppendInfo> {
        if base_offset != self.end_offset {
            return Err(invalid_data(format!(
                "append at {base_offset} but the log ends at {}",
                self.end_offset
            )));
        }
        self.append_timed(std::slice::from_ref(batch), now_ms)
    }

    /// [`append_timed`](Self::append_timed) with the broker's clock left
    /// out (held at 0): `segment.ms` then rolls a segment only by its
    /// records' timestamps. For tests and tools that have no clock.
    pub fn append(&mut self, batches: &[RecordBatch]) -> io::Result<AppendInfo> {
        self.append_timed(batches, 0)
    }

    /// Appends already-validated batches, assigning offsets from the log end
    /// and stamping the leader epoch (both outside the CRC, so no
    /// recompute).
    /// Rolls to a new segment first where `kaas_core::partition::
    /// segment_roll` says so: the active one would exceed `segment_bytes`,
    /// has waited longer than `segment_ms` (by record timestamps, or by
    /// `now_ms` since it was created), or cannot index the offsets. Does
    /// not fsync; the data is readable at once below an explicit bound,
    /// and durable once the driver has synced.
    ///
    /// On an I/O error, batches written before it (into a segment that was
    /// then rolled) stay in the log; the caller should treat the partition
    /// as failed (KAFKA_STORAGE_ERROR) rather than retry blindly.
    pub fn append_timed(&mut self, batches: &[RecordBatch], now_ms: i64) -> io::Result<AppendInfo> {
        if batches.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "no batches to append",
            ));
        }
        if let Some(bad) = batches.iter().find(|b| b.last_offset_delta() < 0) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "batch with negative lastOffsetDelta {}",
                    bad.last_offset_delta()
                ),
            ));
        }
        let base_offset = self.end_offset;
        let leader_epoch = self.leader_epoch;
        let mut next = self.end_offset;
        let mut rolled = false;
        let mut pending = BytesMut::new();
        let mut metas: Vec<BatchMeta> = Vec::with_capacity(batches.len());
        for batch in batches {
            let size = batch.size() as u64;
            let last = next
                .checked_add(i64::from(batch.last_offset_delta()))
                .ok_or_else(|| invalid_data("offset overflow"))?;
            // The first batch of a segment still empty on the volume may be
            // pending in this append.
            let pending_first = metas.first().map(|m| m.max_timestamp);
            if self.must_roll_before(pending.len() as u64, pending_first, batch, last, now_ms)? {
                self.write_pending(&mut pending, &mut metas)?;
                self.roll(now_ms)?;
                rolled = true;
            }
            let position = self.active.size() + pending.len() as u64;
            batch.write_assigned(&mut pending, next, leader_epoch);
            metas.push(BatchMeta {
                position,
                size,
                base_offset: next,
                next_offset: last + 1,
                max_timestamp: batch.max_timestamp(),
            });
            next = last + 1;
        }
        self.write_pending(&mut pending, &mut metas)?;
        Ok(AppendInfo {
            base_offset,
            last_offset: next - 1,
            rolled,
        })
    }

    /// True if `batch`, ending at offset `last` and appended after
    /// `pending` bytes not yet written (the first of them stamped
    /// `pending_first`), needs a fresh segment: the rule of
    /// `kaas_core::partition::segment_roll`, which this only feeds.
    fn must_roll_before(
        &mut self,
        pending: u64,
        pending_first: Option<i64>,
        batch: &RecordBatch,
        last: i64,
        now_ms: i64,
    ) -> io::Result<bool> {
        // A segment this log did not create counts from its first append
        // after the opening.
        let created_ms = *self.active.created_ms.get_or_insert(now_ms);
        let size = self.active.size() + pending;
        if size == 0 {
            return Ok(false);
        }
        if self.active.first_batch_timestamp.is_none() && self.active.size() > 0 {
            // Opened through its index, so never scanned: read its first
            // batch once (Kafka loads it the same way).
            let first = self.active.find_batch(None, MIN_READ_CHUNK, |_| true)?;
            self.active.first_batch_timestamp = first.map(|(_, b)| b.max_timestamp());
        }
        let segment = ActiveSegment {
            size,
            // A batch of this append placed first in an empty segment.
            first_batch_timestamp: if self.active.size() == 0 {
                pending_first
            } else {
                self.active.first_batch_timestamp
            },
            created_ms,
            jitter_ms: roll_jitter_ms(
                self.jitter_seed,
                self.active.base_offset,
                self.config.segment_ms,
                self.config.segment_jitter_ms,
            ),
        };
        let incoming = IncomingBatch {
            size: batch.size() as u64,
            max_timestamp: batch.max_timestamp(),
            offsets_fit: self.active.relative(last.saturating_add(1)).is_some(),
        };
        let settings = RollSettings {
            segment_bytes: self.config.segment_bytes,
            segment_ms: self.config.segment_ms,
            segment_jitter_ms: self.config.segment_jitter_ms,
        };
        Ok(roll_reason(&segment, &incoming, &settings, now_ms).is_some())
    }

    fn write_pending(
        &mut self,
        pending: &mut BytesMut,
        metas: &mut Vec<BatchMeta>,
    ) -> io::Result<()> {
        if pending.is_empty() {
            return Ok(());
        }
        let interval = self.config.index_interval_bytes;
        let active = &mut self.active;
        let position = active.file.append(pending)?;
        if Some(position) != metas.first().map(|m| m.position) {
            // Positions were computed from the size before the write; a
            // concurrent writer would make the index lie.
            return Err(invalid_data("segment grew during append"));
        }
        for meta in metas.drain(..) {
            active.track(meta, interval)?;
        }
        self.end_offset = active.next_offset;
        pending.clear();
        Ok(())
    }

    /// Starts a new active segment at the log end. The old one joins the
    /// sealed segments with its index still in memory: the flusher fsyncs
    /// it and only then writes its index (an index on the volume promises a
    /// durable segment; recovery trusts it without a scan). Creating the
    /// new file is the only volume call here; no fsync of data.
    fn roll(&mut self, now_ms: i64) -> io::Result<()> {
        let new_base = self.end_offset;
        let epoch = self.leader_epoch;
        let file = self
            .volume
            .open_segment(&layout::segment_path(&self.dir, new_base, epoch), true)?;
        if !file.is_empty() {
            // Only possible if an earlier life left a file here; its bytes
            // are not part of this log.
            tracing::warn!(dir = self.dir, new_base, "discarding stale segment file");
            file.truncate(0)?;
        }
        tracing::debug!(dir = self.dir, new_base, "rolling the active segment");
        let mut active = Segment::empty(new_base, epoch, file);
        active.created_ms = Some(now_ms);
        let sealed = std::mem::replace(&mut self.active, active);
        self.sealed.push(sealed);
        Ok(())
    }

    // ------------------------------------------------------------ durability

    /// What the next fsync must cover: every segment rolled since the last
    /// one (with the index to write for it once it is durable), then the
    /// active segment. Memory only: call it under the lane, run it outside.
    ///
    /// A segment's `.txnindex`, if entries were appended since the last
    /// plan, is synced right after the segment. Any order would do for
    /// correctness: nothing counts as durable until the whole plan ran, and
    /// recovery trusts an entry only below the offset the producer replay
    /// starts from (`kaas_core::partition::txn_index_entry_is_trusted`),
    /// which a snapshot fixes only once this plan is done; above it the
    /// entries are rebuilt from the markers in the log. Log first is
    /// Kafka's order, and it means an entry never reaches the disk ahead of
    /// its segment's data in a plan that fails half-way.
    pub fn sync_plan(&mut self) -> io::Result<SyncPlan> {
        let mut files = Vec::new();
        let mut indexes = Vec::new();
        for segment in self.sealed.iter_mut().filter(|s| !s.is_indexed()) {
            files.push(segment.file.clone());
            files.extend(take_unsynced_txn_index(segment));
            let (bytes, entries) = segment.encode_index()?;
            indexes.push(PendingIndex {
                segment: segment.file.clone(),
                path: layout::index_path(&self.dir, segment.base_offset, segment.epoch),
                bytes,
                entries,
            });
        }
        files.push(self.active.file.clone());
        files.extend(take_unsynced_txn_index(&mut self.active));
        let syncs_txn_index = files.len() > indexes.len() + 1;
        Ok(SyncPlan {
            files,
            indexes,
            syncs_txn_index,
            end_offset: self.end_offset,
        })
    }

    // ------------------------------------------------------ aborted index

    /// Appends the aborted-index entry of an ABORT marker just written (so
    /// in the active segment) to that segment's `.txnindex`: a page-cache
    /// write under the lane, like the marker; the next sync plan fsyncs it
    /// with the segment.
    pub fn append_aborted(&mut self, entry: AbortedTxn) -> io::Result<()> {
        let active = &mut self.active;
        if entry.last_offset < active.base_offset || entry.last_offset >= active.next_offset {
            return Err(invalid_data(format!(
                "aborted-index entry for a marker at {} outside the active segment {}..{}",
                entry.last_offset, active.base_offset, active.next_offset
            )));
        }
        let file = match &active.txn_index {
            Some(file) => file.clone(),
            None => {
                let path = layout::txn_index_path(&self.dir, active.base_offset, active.epoch);
                let file = self.volume.open_segment(&path, true)?;
                if !file.is_empty() {
                    // Left by an earlier life at this base (recovery removes
                    // those of dropped segments; defence in depth).
                    tracing::warn!(dir = self.dir, path, "discarding stale aborted index");
                    file.truncate(0)?;
                }
                let file = fail_stop(file);
                active.txn_index = Some(file.clone());
                file
            }
        };
        file.append(&encode_entry(&entry))?;
        active.aborted.push(entry);
        active.txn_index_unsynced = true;
        Ok(())
    }

    /// read_committed Fetch: the aborted transactions, as (producer id,
    /// first offset), a consumer needs to drop the aborted records of
    /// `[fetch_offset, upper)`. An entry lives in the segment of its marker,
    /// which is at or after the fetch offset's segment, so the search starts
    /// there and stops as Kafka's does
    /// (`kaas_core::partition::aborted_search_is_complete`). Memory only.
    pub fn aborted_transactions(&self, fetch_offset: i64, upper: i64) -> Vec<(i64, i64)> {
        let mut candidates = Vec::new();
        for segment in self.segments_from(fetch_offset) {
            candidates.extend(
                segment
                    .aborted
                    .iter()
                    .filter(|a| a.last_offset >= fetch_offset),
            );
            if segment
                .aborted
                .iter()
                .any(|a| aborted_search_is_complete(a, upper))
            {
                break;
            }
        }
        aborted_transactions_in_range(&candidates, fetch_offset, upper)
    }

    /// Every aborted-index entry still in the log, oldest marker first
    /// (tests and recovery checks).
    pub fn aborted_index(&self) -> Vec<AbortedTxn> {
        self.segments()
            .flat_map(|s| s.aborted.iter().copied())
            .collect()
    }

    /// Recovery: makes the aborted index match the log. Entries read from
    /// the `.txnindex` files are kept only below `replay_from`
    /// (`kaas_core::partition::txn_index_entry_is_trusted`); from there on
    /// the index is `rebuilt`, the entries the producer replay derived from
    /// the markers it met, each in the segment of its marker. A segment
    /// whose entries changed gets its file rewritten atomically (or removed
    /// if it has none left), so what is on the volume is durable and exact
    /// before anything is served, and before a snapshot is written that
    /// would make a later start trust it.
    pub fn rebuild_aborted(&mut self, replay_from: i64, rebuilt: &[AbortedTxn]) -> io::Result<()> {
        let refuted = self.refuted_trusted_entries(replay_from);
        if !refuted.is_empty() {
            tracing::warn!(
                dir = self.dir,
                ?refuted,
                "aborted-index entries torn into plausible ones: dropped"
            );
        }
        let volume = self.volume.clone();
        let dir = self.dir.clone();
        let epoch = self.leader_epoch;
        let segments = self
            .sealed
            .iter_mut()
            .chain(std::iter::once(&mut self.active));
        for segment in segments {
            let (base, end) = (segment.base_offset, segment.next_offset);
            let mut want: Vec<AbortedTxn> = segment
                .aborted
                .iter()
                .filter(|a| txn_index_entry_is_trusted(a, replay_from) && !refuted.contains(a))
                .copied()
                .collect();
            want.extend(
                rebuilt
                    .iter()
                    .filter(|a| a.last_offset >= base && a.last_offset < end),
            );
            if want == segment.aborted {
                // Same entries, but those at or past the replay start may
                // sit only in the page cache (a process crash keeps them
                // there): make them durable now, as recovery does for the
                // segments, before a later snapshot makes them trusted.
                if let Some(file) = &segment.txn_index {
                    if want
                        .iter()
                        .any(|a| !txn_index_entry_is_trusted(a, replay_from))
                    {
                        file.sync()?;
                    }
                }
                continue;
            }
            // This epoch's own file, or, for an older epoch's segment, a file
            // named with this epoch that supersedes the older one (recovery
            // reads the newest): the older epoch's files are never written,
            // as their leader may still be appending to them. Written even
            // if empty then, so the older file's entries stop counting.
            let frozen = segment.frozen_len.is_some();
            let path = layout::txn_index_path(&dir, base, epoch);
            tracing::info!(
                dir,
                base,
                had = segment.aborted.len(),
                has = want.len(),
                "aborted index rebuilt from the log"
            );
            if want.is_empty() && !frozen {
                segment.txn_index = None;
                volume.remove(&path)?;
                // Durably: the entries it held are the ones found wrong,
                // and a power loss must not bring them back.
                volume.sync_dir(&dir)?;
            } else {
                let bytes: Vec<u8> = want.iter().flat_map(encode_entry).collect();
                volume.write_atomic(&path, &bytes)?;
                segment.txn_index = Some(fail_stop(volume.open_segment(&path, false)?));
            }
            segment.aborted = want;
            segment.txn_index_unsynced = false;
        }
        Ok(())
    }

    /// The trusted entries of the segment the replay starts in whose marker
    /// the log does not hold (`kaas_core::partition::txn_index::marker_confirms_entry`):
    /// torn by a crash into plausible ones. Only that segment can hold one,
    /// so only its entries are read against the log, one batch each.
    fn refuted_trusted_entries(&self, replay_from: i64) -> Vec<AbortedTxn> {
        let Some(segment) = self.segments_from(replay_from).next() else {
            return Vec::new();
        };
        segment
            .aborted
            .iter()
            .filter(|a| txn_index_entry_is_trusted(a, replay_from))
            .filter(|a| {
                let marker = self
                    .read(a.last_offset, 1, a.last_offset + 1)
                    .ok()
                    .and_then(|r| split_batches(r.records).next());
                !marker.is_some_and(|m| marker_confirms_entry(a, &m))
            })
            .copied()
            .collect()
    }

    /// Installs the index files a [`SyncPlan`] wrote. No deletion or
    /// cleaning takes a segment before this ([`settled_segments`](Self::settled_segments)),
    /// so each indexed segment is still here; one that were not would be
    /// skipped.
    pub fn finish_sync(&mut self, done: SyncDone) {
        for WrittenIndex {
            segment: indexed,
            file,
            entries,
        } in done.indexes
        {
            // By handle, not base offset: the index describes that file's
            // layout and no other (a cleaned copy has its own).
            if let Some(segment) = self
                .sealed
                .iter_mut()
                .find(|s| Arc::ptr_eq(&s.file, &indexed))
            {
                segment.install_index(file, entries);
            }
        }
    }

    /// Runs a whole sync in place: tests and recovery-like callers that
    /// need no lane. Returns the offset everything below which is durable.
    pub fn sync(&mut self) -> io::Result<i64> {
        let plan = self.sync_plan()?;
        let done = plan.run(self.volume.as_ref())?;
        let end = done.end_offset;
        self.finish_sync(done);
        Ok(end)
    }

    // ------------------------------------------------------------------ read

    fn check_range(&self, offset: i64) -> Result<(), ReadError> {
        if offset < self.log_start_offset || offset > self.end_offset {
            return Err(ReadError::OutOfRange);
        }
        Ok(())
    }

    /// The segments from the one that would hold `offset` on.
    fn segments_from(&self, offset: i64) -> impl Iterator<Item = &Segment> {
        let first = self
            .sealed
            .partition_point(|s| s.base_offset <= offset)
            .saturating_sub(1);
        self.sealed
            .get(first..)
            .unwrap_or(&[])
            .iter()
            .chain(std::iter::once(&self.active))
    }

    fn read_chunk(&self) -> usize {
        usize::try_from(self.config.index_interval_bytes)
            .unwrap_or(usize::MAX)
            .saturating_mul(2)
            .max(MIN_READ_CHUNK)
    }

    /// Whole batches from the one holding `offset` on, as stored.
    ///
    /// Kafka semantics: at most `max_bytes`, except that the first batch is
    /// returned whole even if larger, so a consumer always progresses; no
    /// batch starting at or after `max_offset` (the high watermark or last
    /// stable offset); the first batch may start before `offset` (the
    /// consumer skips records below it). Reads stay within one segment,
    /// moving to the next only if nothing is found in the first, or if all
    /// that was found are batches without records (what cleaning leaves of
    /// a segment whose records all went): a client given only empty
    /// batches advances past them but counts the answer as a record too
    /// large to fetch (librdkafka raises its fetch size, then fails).
    pub fn read(
        &self,
        offset: i64,
        max_bytes: usize,
        max_offset: i64,
    ) -> Result<ReadResult, ReadError> {
        self.check_range(offset)?;
        let mut result = ReadResult {
            records: Bytes::new(),
            next_offset: offset,
            log_start_offset: self.log_start_offset,
        };
        if offset >= max_offset || offset >= self.end_offset {
            return Ok(result);
        }
        // Batches without records read so far, to be sent ahead of what
        // the next segment has.
        let mut empty_batches = BytesMut::new();
        let mut from = offset;
        for segment in self.segments_from(offset) {
            let Some((bytes, next_offset, has_records)) = self.read_segment(
                segment,
                from,
                max_bytes.saturating_sub(empty_batches.len()),
                max_offset,
            )?
            else {
                continue;
            };
            if bytes.is_empty() {
                break;
            }
            result.next_offset = next_offset;
            if has_records || empty_batches.len() + bytes.len() >= max_bytes {
                result.records = if empty_batches.is_empty() {
                    bytes
                } else {
                    empty_batches.extend_from_slice(&bytes);
                    empty_batches.freeze()
                };
                return Ok(result);
            }
            empty_batches.extend_from_slice(&bytes);
            from = next_offset;
            if from >= max_offset || from >= self.end_offset {
                break;
            }
        }
        result.records = empty_batches.freeze();
        Ok(result)
    }

    /// [`read`](Self::read)'s part in one segment: the batches from the one
    /// holding `offset`, up to `max_bytes` (the first whole), none at or
    /// past `max_offset`; with the offset after them and whether any holds
    /// a record. `None`: the segment holds nothing at or after `offset`.
    fn read_segment(
        &self,
        segment: &Segment,
        offset: i64,
        max_bytes: usize,
        max_offset: i64,
    ) -> Result<Option<(Bytes, i64, bool)>, ReadError> {
        let floor = match segment.relative(offset) {
            Some(rel) => segment.index.floor_for_offset(rel)?,
            None => None,
        };
        let Some((position, first)) =
            segment.find_batch(floor, self.read_chunk(), |b| b.last_offset() >= offset)?
        else {
            if offset < segment.next_offset {
                // The segment claims the offset but no batch holds it: its
                // bytes are damaged. Serving the next segment would silently
                // skip records.
                return Err(ReadError::Io(super::invalid_data(format!(
                    "segment {} has no readable batch for offset {offset}",
                    segment.base_offset
                ))));
            }
            return Ok(None);
        };
        if first.base_offset() >= max_offset {
            return Ok(Some((Bytes::new(), offset, false)));
        }
        let available = segment.size().saturating_sub(position);
        let want = max_bytes.max(first.size());
        let want = usize::try_from(available).map_or(want, |a| a.min(want));
        let bytes = segment.file.read_at(position, want)?;
        let mut end = 0;
        let mut next_offset = offset;
        let mut has_records = false;
        for batch in split_batches(bytes.clone()) {
            if batch.base_offset() >= max_offset {
                break;
            }
            end += batch.size();
            next_offset = batch.next_offset();
            has_records |= batch.record_count() > 0;
        }
        Ok(Some((bytes.slice(..end), next_offset, has_records)))
    }

    // ------------------------------------------------------------ timestamps

    /// ListOffsets by timestamp: the first offset whose timestamp is `>=
    /// timestamp`, with that timestamp.
    ///
    /// Finds the first batch whose max timestamp is `>= timestamp`. For an
    /// uncompressed CreateTime batch the exact record is returned, as Kafka
    /// does; for compressed (not decompressed here) or LogAppendTime batches
    /// it is the batch's first offset and max timestamp. Offsets below the
    /// log start are skipped. Callers filter the answer against the high
    /// watermark / LSO, as Kafka's Partition does.
    pub fn offset_for_timestamp(&self, timestamp: i64) -> io::Result<Option<(i64, i64)>> {
        let start = self.log_start_offset;
        let chunk = self.read_chunk();
        for segment in self.segments() {
            if segment.max_timestamp < timestamp || segment.next_offset <= start {
                continue;
            }
            let floor = segment.index.floor_for_timestamp(timestamp)?;
            let found = segment.find_batch(floor, chunk, |b| {
                b.max_timestamp() >= timestamp && b.last_offset() >= start
            })?;
            if let Some((_, batch)) = found {
                return Ok(Some(first_record_at_or_after(&batch, timestamp, start)));
            }
        }
        Ok(None)
    }

    /// ListOffsets MAX_TIMESTAMP (-3): `(offset, timestamp)` of the record
    /// with the largest timestamp (the earliest on ties) among the records
    /// at or after the log start, resolved like
    /// [`offset_for_timestamp`](Self::offset_for_timestamp), whose tuple
    /// order it shares. `None` for an empty log.
    pub fn max_timestamp(&self) -> io::Result<Option<(i64, i64)>> {
        let start = self.log_start_offset;
        let mut best: Option<(i64, i64)> = None;
        // Segments in offset order, so a later one wins only with a strictly
        // larger timestamp: the earliest record wins ties.
        for segment in self.segments().filter(|s| s.next_offset > start) {
            if segment.max_timestamp == NO_MAX_TIMESTAMP
                || best.is_some_and(|(_, ts)| segment.max_timestamp <= ts)
            {
                continue;
            }
            let found = match self.segment_max_record(segment, start)? {
                Some(found) => Some(found),
                // The segment's maximum belongs to a record DeleteRecords
                // removed (Kafka answers with that deleted record; kaas with
                // the largest it still has, see docs/oracle.md).
                None => self.scan_max_record(segment, start)?,
            };
            if let Some(found) = found {
                if best.is_none_or(|(_, ts)| found.1 > ts) {
                    best = Some(found);
                }
            }
        }
        Ok(best)
    }

    /// The first record at or after `start` carrying `segment`'s maximum
    /// timestamp, found through the index; `None` if every record with it
    /// is below `start`.
    fn segment_max_record(&self, segment: &Segment, start: i64) -> io::Result<Option<(i64, i64)>> {
        let ts = segment.max_timestamp;
        let floor = segment.index.floor_for_timestamp(ts)?;
        let found = segment.find_batch(floor, self.read_chunk(), |b| {
            b.max_timestamp() >= ts && b.last_offset() >= start
        })?;
        Ok(found
            .map(|(_, batch)| first_record_at_or_after(&batch, ts, start))
            .filter(|&(_, found_ts)| found_ts >= ts))
    }

    /// The record with the largest timestamp at or after `start` in
    /// `segment`, read batch by batch from `start`: the slow path, taken
    /// only when the segment's own maximum was deleted.
    fn scan_max_record(&self, segment: &Segment, start: i64) -> io::Result<Option<(i64, i64)>> {
        let relative = u32::try_from(start.saturating_sub(segment.base_offset)).unwrap_or(0);
        let floor = segment.index.floor_for_offset(relative)?;
        let mut best: Option<(i64, i64)> = None;
        segment.find_batch(floor, self.read_chunk(), |b| {
            if b.last_offset() >= start && best.is_none_or(|(_, ts)| b.max_timestamp() > ts) {
                if let Some(found) = max_record_at_or_after(b, start) {
                    if best.is_none_or(|(_, ts)| found.1 > ts) {
                        best = Some(found);
                    }
                }
            }
            false
        })?;
        Ok(best)
    }

    // ---------------------------------------------------------------- delete

    /// Removes the partition directory and everything in it.
    pub fn delete(self) -> io::Result<()> {
        let PartitionLog {
            volume,
            dir,
            sealed,
            active,
            ..
        } = self;
        drop((sealed, active));
        volume.remove_dir_all(&dir)
    }

    /// How many of the oldest sealed segments the flusher is done with
    /// (their index is written): the only ones a deletion or the cleaner
    /// may take. A sync plan writes the index of every sealed segment it
    /// found unindexed, outside the lane; had the segment's files been
    /// removed meanwhile, that write would fail the partition on a missing
    /// file or leave an orphan index behind. Unindexed segments are the
    /// newest sealed ones, so this is a prefix, and the next flush settles
    /// the rest.
    pub(super) fn settled_segments(&self) -> usize {
        self.sealed.iter().take_while(|s| s.is_indexed()).count()
    }

    /// Takes the oldest segment (never the active one, nor one the flusher
    /// still has to index: [`settled_segments`](Self::settled_segments))
    /// out of the log and
    /// returns its name; the caller removes its files outside the lane
    /// ([`remove_segments`]). The log start moves to the next segment's
    /// base if it was below it.
    pub(super) fn detach_oldest_segment(&mut self) -> Option<DetachedSegment> {
        if self.settled_segments() == 0 {
            return None;
        }
        let oldest = self.sealed.remove(0);
        let first_base = self.sealed.first().unwrap_or(&self.active).base_offset;
        self.set_log_start_offset(self.log_start_offset.max(first_base));
        Some(DetachedSegment::of(&oldest))
    }

    /// Moves the log start, and trims the leader epochs below it
    /// (`trim_before_log_start`). The checkpoint on the volume is trimmed
    /// the same way at the next open, not now: only a leader opening the
    /// partition writes it, so a deposed one still running retention can
    /// never overwrite its successor's entry.
    pub(super) fn set_log_start_offset(&mut self, offset: i64) {
        self.log_start_offset = offset;
        trim_before_log_start(&mut self.leader_epochs, offset);
    }
}

/// FNV-1a of a partition's directory name: the seed of its segment
/// jitters, the same at every opening and on every broker.
fn jitter_seed(dir: &str) -> u64 {
    dir.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// What the flusher must do to make the log durable up to `end_offset`.
pub struct SyncPlan {
    files: Vec<Arc<dyn SegmentFile>>,
    indexes: Vec<PendingIndex>,
    /// It syncs a `.txnindex` (whose mark it took): it must run.
    syncs_txn_index: bool,
    pub end_offset: i64,
}

struct PendingIndex {
    /// The segment it indexes, matched by handle when installed.
    segment: Arc<dyn SegmentFile>,
    path: String,
    bytes: Vec<u8>,
    entries: u64,
}

/// An index a plan wrote: for which segment file, its handle, its entries.
struct WrittenIndex {
    segment: Arc<dyn SegmentFile>,
    file: Arc<dyn SegmentFile>,
    entries: u64,
}

/// A plan that ran: the index handles to install.
pub struct SyncDone {
    pub end_offset: i64,
    indexes: Vec<WrittenIndex>,
}

impl SyncPlan {
    /// Whether there is anything not yet synced up to `durable_end`.
    pub fn covers_more_than(&self, durable_end: i64) -> bool {
        self.end_offset > durable_end || !self.indexes.is_empty() || self.syncs_txn_index
    }

    /// fsyncs every file, oldest first, then writes the indexes of the
    /// rolled segments. Blocks: run it on the IO runner, outside the lane.
    pub fn run(self, volume: &dyn Volume) -> io::Result<SyncDone> {
        for file in &self.files {
            file.sync()?;
        }
        let mut indexes = Vec::with_capacity(self.indexes.len());
        for pending in self.indexes {
            volume.write_atomic(&pending.path, &pending.bytes)?;
            let file = volume.open_segment(&pending.path, false)?;
            indexes.push(WrittenIndex {
                segment: pending.segment,
                file,
                entries: pending.entries,
            });
        }
        Ok(SyncDone {
            end_offset: self.end_offset,
            indexes,
        })
    }
}

/// The segment's `.txnindex` handle if entries were appended since the last
/// plan took it. Taking it clears the mark: if the plan's fsync then fails,
/// the partition fails with it (and its files stay failed, see
/// `fail_stop`), so no later plan has to retry it.
fn take_unsynced_txn_index(segment: &mut Segment) -> Option<Arc<dyn SegmentFile>> {
    if !std::mem::take(&mut segment.txn_index_unsynced) {
        return None;
    }
    segment.txn_index.clone()
}

/// A segment taken out of the log, for its files to be removed
/// ([`remove_segments`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DetachedSegment {
    pub id: SegmentId,
    /// The epoch whose cleaned copy the log used for it, if any.
    pub cleaned_by: Option<i32>,
    /// Its log file's size when it was detached: what its removal frees.
    pub bytes: u64,
}

impl DetachedSegment {
    pub(super) fn of(segment: &Segment) -> Self {
        DetachedSegment {
            id: segment.id(),
            cleaned_by: segment.cleaned_by,
            bytes: segment.size(),
        }
    }

    /// Its log file in the partition directory `dir`: the cleaned copy the
    /// log read it from, or the original.
    pub fn log_path(&self, dir: &str) -> String {
        match self.cleaned_by {
            Some(by) => layout::cleaned_segment_path(dir, self.id, by),
            None => layout::segment_path(dir, self.id.base_offset, self.id.epoch),
        }
    }
}

/// Removes the files of segments a deletion (or a cleaning's swap)
/// detached from the log.
pub fn remove_segments(
    volume: &dyn Volume,
    dir: &str,
    segments: &[DetachedSegment],
) -> io::Result<()> {
    for segment in segments {
        match segment.cleaned_by {
            Some(by) => delete_cleaned_files(volume, dir, segment.id, by)?,
            None => delete_segment_files(volume, dir, segment.id)?,
        }
    }
    Ok(())
}

/// `(offset, timestamp)` of the first record at or after `min_offset` whose
/// timestamp is `>= timestamp`, in a batch whose max timestamp qualifies.
/// `(offset, timestamp)` of the earliest record of `batch` with the largest
/// timestamp among those at or after `min_offset`. A batch whose records
/// cannot be read one by one (compressed, or stamped at append) answers
/// with its own maximum, as the index does.
fn max_record_at_or_after(batch: &RecordBatch, min_offset: i64) -> Option<(i64, i64)> {
    let fallback = Some((batch.base_offset().max(min_offset), batch.max_timestamp()));
    if batch.compression() != Compression::None
        || batch.timestamp_type() == TimestampType::LogAppendTime
    {
        return fallback;
    }
    let mut best: Option<(i64, i64)> = None;
    for record in batch.records() {
        match record {
            Ok(r) if r.offset >= min_offset && best.is_none_or(|(_, ts)| r.timestamp > ts) => {
                best = Some((r.offset, r.timestamp));
            }
            Ok(_) => {}
            Err(_) => return fallback,
        }
    }
    best
}

fn first_record_at_or_after(batch: &RecordBatch, timestamp: i64, min_offset: i64) -> (i64, i64) {
    let fallback = (batch.base_offset().max(min_offset), batch.max_timestamp());
    if batch.compression() != Compression::None
        || batch.timestamp_type() == TimestampType::LogAppendTime
    {
        return fallback;
    }
    for record in batch.records() {
        match record {
            Ok(r) if r.offset >= min_offset && r.timestamp >= timestamp => {
                return (r.offset, r.timestamp)
            }
            Ok(_) => {}
            Err(_) => return fallback,
        }
    }
    fallback
}
