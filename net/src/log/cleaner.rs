//! Compaction on the volume: one cleaning round of a partition's sealed
//! segments, driven by the rules in `kaas_core::cleaner`.
//!
//! A round reads; it never holds the log's lane. Under the lane the driver
//! takes a [`CleaningInput`] (handles on the sealed segments, memory only),
//! runs [`run_round`] outside it, and hands the copies back to
//! [`PartitionLog::install_cleaned`], which swaps them in under the lane.
//!
//! A segment is replaced by a *cleaned copy*: the same offsets with fewer
//! records, named for the segment and for the epoch of the leader that
//! wrote it (`kaas_core::layout::cleaned_segment_path`), since a leader
//! writes only files of its own epoch. The copy is written under a
//! temporary name, synced, and renamed into place: a copy under its final
//! name is always whole, and from then on it is the segment (recovery
//! prefers it and removes the original). Only then is its index written,
//! and the original removed. A crash at any point leaves either the
//! original or a whole copy; a leftover temporary is removed at the next
//! opening.
//!
//! Every copy keeps its segment's last batch (as a bare header if none of
//! its records stay), so a segment still ends where it did: the log stays
//! contiguous, and a copy read without its index ends at the right offset.

use bytes::BytesMut;
use kaas_core::cleaner::{
    plan_cleaning, ActiveProducers, BatchView, CleanPlan, CleanSummary, CompactionConfig, Decider,
    Fate, KeyMap, LogExtent, MapStep, PassTime, SegmentSummary,
};
use kaas_core::layout::{self, SegmentId};
use kaas_core::partition::AbortedTxn;
use kaas_core::record::RecordBatch;
use std::io;
use std::sync::Arc;

use super::invalid_data;
use super::partition_log::{DetachedSegment, PartitionLog};
use super::scan::{BatchReader, Step, RECOVERY_CHUNK};
use super::segment::{BatchMeta, Segment};
use crate::volume::{SegmentFile, Volume};

/// Bytes gathered before one append to a copy.
const WRITE_CHUNK: usize = 1 << 20;

/// One sealed segment as a round reads it.
struct SealedView {
    id: SegmentId,
    file: Arc<dyn SegmentFile>,
    size: u64,
    next_offset: i64,
    max_timestamp: i64,
}

/// What a round needs of the log, taken under its lane: handles, no data.
pub struct CleaningInput {
    volume: Arc<dyn Volume>,
    dir: String,
    /// The leader epoch writing the copies.
    epoch: i32,
    index_interval_bytes: u64,
    log_start: i64,
    log_end: i64,
    active_base: i64,
    sealed: Vec<SealedView>,
    aborted: Vec<AbortedTxn>,
}

/// The settings and state a round runs with.
#[derive(Debug, Clone)]
pub struct RoundSettings {
    pub now_ms: i64,
    /// `delete.retention.ms`.
    pub delete_retention_ms: i64,
    pub compaction: CompactionConfig,
    /// Where the last round stopped; `None`: never cleaned (since opening).
    pub checkpoint: Option<i64>,
    /// Nothing at or past it is cleaned: the last stable offset, which is
    /// never past the high watermark (what is durable).
    pub last_stable_offset: i64,
    /// The key map's byte budget: how much of the dirty section one round
    /// takes.
    pub key_map_bytes: usize,
    pub producers: ActiveProducers,
}

/// What a round did.
pub struct RoundOutcome {
    pub plan: CleanPlan,
    /// Where the next round starts, once `copies` are installed.
    pub checkpoint: Option<i64>,
    pub copies: Vec<CleanedCopy>,
    pub summary: CleanSummary,
    /// Bytes read from and written to the volume (the I/O budget's count).
    pub bytes_read: u64,
    pub bytes_written: u64,
}

/// A whole cleaned copy of one segment, durable under its final name.
pub struct CleanedCopy {
    id: SegmentId,
    /// The file the copy replaces: the swap happens only if the log still
    /// reads that one.
    replaces: Arc<dyn SegmentFile>,
    segment: Segment,
}

impl CleanedCopy {
    /// The copy's own files, for removal when it is not installed.
    pub fn files(&self) -> DetachedSegment {
        DetachedSegment {
            id: self.id,
            cleaned_by: self.segment.cleaned_by,
        }
    }
}

impl PartitionLog {
    /// The handles a cleaning round reads (memory only, under the lane).
    pub fn cleaning_input(&self) -> CleaningInput {
        CleaningInput {
            volume: self.volume.clone(),
            dir: self.dir.clone(),
            epoch: self.leader_epoch(),
            index_interval_bytes: self.config.index_interval_bytes,
            log_start: self.log_start_offset,
            log_end: self.end_offset(),
            active_base: self.active.base_offset,
            sealed: self
                .sealed
                .iter()
                .map(|s| SealedView {
                    id: s.id(),
                    file: s.file.clone(),
                    size: s.size(),
                    next_offset: s.next_offset,
                    max_timestamp: s.max_timestamp,
                })
                .collect(),
            // The active segment's too: an aborted transaction's marker may
            // be there while its data is in the sealed ones.
            aborted: self
                .sealed
                .iter()
                .chain(std::iter::once(&self.active))
                .flat_map(|s| s.aborted.iter().copied())
                .collect(),
        }
    }

    /// Swaps cleaned copies in for the segments they replace (memory only,
    /// under the lane; the copies are durable already). A copy whose
    /// segment is gone or changed since the round read it (retention took
    /// it) is not installed. Returns the files to remove outside the lane
    /// ([`remove_replaced`]): what each installed copy replaced, and each
    /// copy not installed.
    pub fn install_cleaned(&mut self, copies: Vec<CleanedCopy>) -> Vec<DetachedSegment> {
        let mut remove = Vec::new();
        for copy in copies {
            let Some(old) = self
                .sealed
                .iter_mut()
                .find(|s| s.id() == copy.id && Arc::ptr_eq(&s.file, &copy.replaces))
            else {
                remove.push(copy.files());
                continue;
            };
            let mut segment = copy.segment;
            // The aborted index stays the segment's: its file is named for
            // the segment, not for the copy.
            segment.txn_index = old.txn_index.take();
            segment.aborted = std::mem::take(&mut old.aborted);
            segment.txn_index_unsynced = old.txn_index_unsynced;
            let by = segment.cleaned_by;
            let replaced = std::mem::replace(old, segment);
            // A copy by this same epoch was replaced by the rename itself.
            if replaced.cleaned_by != by {
                remove.push(DetachedSegment::of(&replaced));
            }
        }
        remove
    }
}

/// Removes what a swap replaced: an original's log and index (its aborted
/// index stays: the copy uses it), or an older epoch's copy.
pub fn remove_replaced(
    volume: &dyn Volume,
    dir: &str,
    replaced: &[DetachedSegment],
) -> io::Result<()> {
    for r in replaced {
        match r.cleaned_by {
            Some(by) => {
                volume.remove(&layout::cleaned_segment_path(dir, r.id, by))?;
                volume.remove(&layout::cleaned_index_path(dir, r.id, by))?;
            }
            None => {
                volume.remove(&layout::segment_path(dir, r.id.base_offset, r.id.epoch))?;
                volume.remove(&layout::index_path(dir, r.id.base_offset, r.id.epoch))?;
            }
        }
    }
    Ok(())
}

/// One round: plan, map the dirty section, decide every batch from the log
/// start to the map's end, and write a copy of each segment that changes.
/// Blocking IO; no lane held.
pub fn run_round(input: &CleaningInput, settings: &RoundSettings) -> io::Result<RoundOutcome> {
    let mut outcome = RoundOutcome {
        plan: CleanPlan::Wait(kaas_core::cleaner::WaitReason::NothingCleanable),
        checkpoint: settings.checkpoint,
        copies: Vec::new(),
        summary: CleanSummary::default(),
        bytes_read: 0,
        bytes_written: 0,
    };
    let summaries = summaries(input, settings.checkpoint)?;
    let extent = LogExtent {
        log_start: input.log_start,
        log_end: input.log_end,
        checkpoint: settings.checkpoint,
        last_stable_offset: settings.last_stable_offset,
        active_segment_base: input.active_base,
        sealed: &summaries,
    };
    outcome.plan = plan_cleaning(&extent, &settings.compaction, settings.now_ms);
    let CleanPlan::Clean { range, .. } = outcome.plan else {
        return Ok(outcome);
    };

    // Pass 1: the key map of the dirty section.
    let mut map = KeyMap::with_budget(settings.key_map_bytes, range.dirty(), &input.aborted);
    'mapping: for segment in input
        .sealed
        .iter()
        .filter(|s| s.next_offset > range.first_dirty && s.id.base_offset < range.end)
    {
        let mut reader = BatchReader::new(segment.file.as_ref(), 0, segment.size, RECOVERY_CHUNK);
        while let Some(batch) = next_batch(&mut reader, segment)? {
            outcome.bytes_read += batch.size() as u64;
            if map.add(&view(&batch, segment)?) == MapStep::Full {
                break 'mapping;
            }
        }
    }
    let end = map.end();
    if end <= input.log_start {
        return Ok(outcome);
    }

    // Pass 2: every batch's fate, segment by segment; a copy of each
    // segment that changes.
    let time = PassTime {
        now_ms: settings.now_ms,
        delete_retention_ms: settings.delete_retention_ms,
    };
    let mut decider = Decider::new(&map, &input.aborted, &settings.producers, time);
    for segment in input.sealed.iter().filter(|s| s.id.base_offset < end) {
        let fates = decide_segment(&mut decider, segment, &mut outcome.bytes_read)?;
        if fates.iter().all(|f| matches!(f, Fate::KeepWhole)) {
            continue;
        }
        let copy = write_copy(input, segment, &fates, &mut outcome)?;
        outcome.copies.push(copy);
    }
    outcome.summary = decider.summary().clone();
    outcome.checkpoint = Some(end);
    Ok(outcome)
}

/// The plan's view of the sealed segments. The first batch's timestamp
/// (for `max.compaction.lag.ms`) is read only for segments with dirty
/// data: one small read each.
fn summaries(input: &CleaningInput, checkpoint: Option<i64>) -> io::Result<Vec<SegmentSummary>> {
    let first_dirty = checkpoint.unwrap_or(input.log_start);
    let mut out = Vec::with_capacity(input.sealed.len());
    for s in &input.sealed {
        let first_batch_timestamp = if s.next_offset > first_dirty {
            let mut reader = BatchReader::new(s.file.as_ref(), 0, s.size, 4096);
            match reader.next_step()? {
                Step::Batch { batch, .. } => batch.max_timestamp(),
                _ => -1,
            }
        } else {
            -1
        };
        out.push(SegmentSummary {
            base_offset: s.id.base_offset,
            size_bytes: s.size,
            max_timestamp: s.max_timestamp,
            first_batch_timestamp,
        });
    }
    Ok(out)
}

/// The next batch of a sealed segment. A sealed segment was validated
/// when it was written or recovered; anything but whole batches up to its
/// size is damage, and the round stops rather than clean around it.
fn next_batch(
    reader: &mut BatchReader<'_>,
    segment: &SealedView,
) -> io::Result<Option<RecordBatch>> {
    match reader.next_step()? {
        Step::Batch { batch, .. } => Ok(Some(batch)),
        Step::End => Ok(None),
        Step::Partial { position } | Step::Corrupt { position, .. } => Err(invalid_data(format!(
            "segment {:?}: no whole batch at position {position} of {}; not cleaning it",
            segment.id, segment.size
        ))),
    }
}

fn view(batch: &RecordBatch, segment: &SealedView) -> io::Result<BatchView> {
    BatchView::of(batch).map_err(|e| {
        invalid_data(format!(
            "segment {:?}: batch at offset {} cannot be cleaned: {e}",
            segment.id,
            batch.base_offset()
        ))
    })
}

/// The fate of each batch of one segment, in order. The segment's last
/// batch stays (as a bare header if it would go), so the segment, and the
/// log, still end where they did.
fn decide_segment(
    decider: &mut Decider<'_>,
    segment: &SealedView,
    bytes_read: &mut u64,
) -> io::Result<Vec<Fate>> {
    let mut fates = Vec::new();
    let mut reader = BatchReader::new(segment.file.as_ref(), 0, segment.size, RECOVERY_CHUNK);
    while let Some(batch) = next_batch(&mut reader, segment)? {
        *bytes_read += batch.size() as u64;
        fates.push(decider.next(&view(&batch, segment)?));
    }
    if let Some(last) = fates.last_mut() {
        if matches!(last, Fate::Drop) {
            *last = Fate::KeepEmpty;
        }
    }
    Ok(fates)
}

/// Writes the copy of `segment` the `fates` describe: under its temporary
/// name, synced, renamed into place, then its index. Reads the segment
/// again (from the page cache, usually) to apply each fate.
fn write_copy(
    input: &CleaningInput,
    segment: &SealedView,
    fates: &[Fate],
    outcome: &mut RoundOutcome,
) -> io::Result<CleanedCopy> {
    let (volume, dir, id, by) = (input.volume.as_ref(), &input.dir, segment.id, input.epoch);
    let temporary = layout::cleaning_path(dir, id, by);
    let file = volume.open_segment(&temporary, true)?;
    if !file.is_empty() {
        file.truncate(0)?;
    }
    let mut copy = Segment::empty(id.base_offset, id.epoch, file.clone());
    let mut pending = BytesMut::new();
    let mut position = 0u64;
    let mut reader = BatchReader::new(segment.file.as_ref(), 0, segment.size, RECOVERY_CHUNK);
    let mut fates = fates.iter();
    while let Some(batch) = next_batch(&mut reader, segment)? {
        let fate = fates.next().ok_or_else(|| {
            invalid_data(format!("segment {id:?} grew while it was being cleaned"))
        })?;
        let out = match fate.apply(&batch) {
            Ok(out) => out,
            // Writing the batch as it was is always safe: it was in the log.
            Err(e) => {
                tracing::warn!(segment = ?id, offset = batch.base_offset(), error = %e, "keeping a batch the cleaner cannot rewrite");
                Some(batch)
            }
        };
        let Some(out) = out else { continue };
        copy.track(BatchMeta::of(&out, position), input.index_interval_bytes)?;
        position += out.size() as u64;
        pending.extend_from_slice(out.as_bytes());
        if pending.len() >= WRITE_CHUNK {
            file.append(&pending)?;
            pending.clear();
        }
    }
    if !pending.is_empty() {
        file.append(&pending)?;
    }
    if copy.next_offset != segment.next_offset {
        volume.remove(&temporary)?;
        return Err(invalid_data(format!(
            "the cleaned copy of segment {id:?} would end at {}, not {}",
            copy.next_offset, segment.next_offset
        )));
    }
    file.sync()?;
    let path = layout::cleaned_segment_path(dir, id, by);
    volume.rename(&temporary, &path)?;
    outcome.bytes_written += position;
    // From here on the handle is the one opened by the final name.
    let mut copy = copy.with_file(volume.open_segment(&path, false)?);
    copy.seal(volume, &layout::cleaned_index_path(dir, id, by))?;
    copy.cleaned_by = Some(by);
    copy.freeze(position);
    Ok(CleanedCopy {
        id,
        replaces: segment.file.clone(),
        segment: copy,
    })
}
