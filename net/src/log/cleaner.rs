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
    /// Where the round stops: the active segment's base, or that of the
    /// first sealed one still to be indexed.
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

#[cfg(test)]
impl CleanedCopy {
    /// The segment the copy replaces.
    pub fn id(&self) -> SegmentId {
        self.id
    }
}

#[cfg(test)]
impl CleaningInput {
    /// How many sealed segments the round may read.
    pub fn sealed_count(&self) -> usize {
        self.sealed.len()
    }
}

impl CleanedCopy {
    /// The copy's own files, for removal when it is not installed.
    pub fn files(&self) -> DetachedSegment {
        DetachedSegment {
            id: self.id,
            cleaned_by: self.segment.cleaned_by,
            bytes: self.segment.size(),
        }
    }
}

impl PartitionLog {
    /// The handles a cleaning round reads (memory only, under the lane).
    pub fn cleaning_input(&self) -> CleaningInput {
        // The segments the flusher has yet to index are left alone, like
        // the active one: the round ends where they begin.
        let settled = &self.sealed[..self.settled_segments()];
        let unsettled_base = self
            .sealed
            .get(settled.len())
            .unwrap_or(&self.active)
            .base_offset;
        CleaningInput {
            volume: self.volume.clone(),
            dir: self.dir.clone(),
            epoch: self.leader_epoch(),
            index_interval_bytes: self.config.index_interval_bytes,
            log_start: self.log_start_offset,
            log_end: self.end_offset(),
            active_base: unsettled_base,
            sealed: settled
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

    /// Which of a round's copies, not to be installed, may be removed: only
    /// those whose segment the log no longer has (retention took it). The
    /// others stay where the round renamed them. Each is a valid cleaning
    /// of its segment, which the next opening uses (or removes for a newer
    /// one), and a copy by the epoch of an earlier copy replaced that one by
    /// its rename: it may be the very file the log reads, the segment's
    /// only durable version. (The simulator found this: a round of a
    /// partition that moved before the swap removed its copies, and with
    /// them the log's data below the copies' end.)
    pub fn abandon_cleaned(&self, copies: &[CleanedCopy]) -> Vec<DetachedSegment> {
        copies
            .iter()
            .filter(|c| !self.sealed.iter().any(|s| s.id() == c.id))
            .map(CleanedCopy::files)
            .collect()
    }

    /// Swaps cleaned copies in for the segments they replace (memory only,
    /// under the lane; the copies are durable already). A copy whose
    /// segment is gone or changed since the round read it (retention took
    /// it) is not installed. Returns the files to remove outside the lane
    /// ([`remove_replaced`]): what each installed copy replaced, and the
    /// copies not installed that [`abandon_cleaned`](Self::abandon_cleaned)
    /// lets go.
    pub fn install_cleaned(&mut self, copies: Vec<CleanedCopy>) -> Vec<DetachedSegment> {
        let mut remove = Vec::new();
        for copy in copies {
            let Some(old) = self
                .sealed
                .iter_mut()
                .find(|s| s.id() == copy.id && Arc::ptr_eq(&s.file, &copy.replaces))
            else {
                remove.extend(self.abandon_cleaned(std::slice::from_ref(&copy)));
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
            kaas_core::coverage::hit(kaas_core::coverage::Mark::CleanedCopySwappedIn);
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
        volume.remove(&r.log_path(dir))?;
        match r.cleaned_by {
            Some(by) => volume.remove(&layout::cleaned_index_path(dir, r.id, by))?,
            None => volume.remove(&layout::index_path(dir, r.id.base_offset, r.id.epoch))?,
        }
    }
    Ok(())
}

/// One round to its end, without pauses (tests, and callers without an
/// I/O budget): [`Round::start`], then [`Round::step`] until done.
pub fn run_round(input: CleaningInput, settings: RoundSettings) -> io::Result<RoundOutcome> {
    let mut round = Round::start(input, settings)?;
    while !round.step(u64::MAX)? {}
    Ok(round.finish())
}

/// A cleaning round taken a step at a time: each [`step`](Self::step)
/// reads about a given number of bytes and returns, so the driver can pause
/// between steps and keep the round under its I/O budget (a round over a
/// large log would otherwise read it at full speed, and produce and fetch
/// latency would feel it). Blocking IO; no lane held. The phases:
/// plan (at [`start`](Self::start)), map the dirty section, then clean
/// from the log start to the map's end segment by segment, deciding each
/// batch and writing it into a copy of each segment that changes in one
/// pass.
pub struct Round {
    input: CleaningInput,
    time: PassTime,
    producers: Option<ActiveProducers>,
    phase: Phase,
    outcome: RoundOutcome,
}

enum Phase {
    /// Building the key map: the next batch to add is in sealed segment
    /// `segment` at `position`.
    Map {
        map: KeyMap,
        range_end: i64,
        segment: usize,
        position: u64,
    },
    /// Cleaning segment `segment`, deciding each batch and writing it in
    /// the same pass: the next batch to read is at `position`.
    Clean {
        /// Boxed: the largest part of the phase, moved at every step.
        decider: Box<Decider>,
        segment: usize,
        position: u64,
        /// The batch read last and its fate, written once the next batch
        /// shows it is not the segment's last (a last batch never goes).
        held: Option<Held>,
        /// The segment's copy, opened at the first batch that does not
        /// stay whole: a segment whose batches all stay is not copied.
        copy: Option<Box<CopyInProgress>>,
    },
    Done,
}

/// A batch read and decided, not yet written (see [`Phase::Clean`]).
struct Held {
    /// Its position in the original.
    at: u64,
    batch: RecordBatch,
    fate: Fate,
}

/// A copy being written under its temporary name.
struct CopyInProgress {
    file: Arc<dyn SegmentFile>,
    temporary: String,
    /// The copy's bookkeeping (index entries, end offset) as it grows.
    segment: Segment,
    /// Bytes appended to the copy so far.
    written: u64,
    /// Batches gathered for the next append.
    pending: BytesMut,
}

impl Round {
    /// Plans the round (reading only the first batch of each dirty
    /// segment): nothing more to do if the plan says wait.
    pub fn start(input: CleaningInput, settings: RoundSettings) -> io::Result<Round> {
        let summaries = summaries(&input, settings.checkpoint)?;
        let extent = LogExtent {
            log_start: input.log_start,
            log_end: input.log_end,
            checkpoint: settings.checkpoint,
            last_stable_offset: settings.last_stable_offset,
            active_segment_base: input.active_base,
            sealed: &summaries,
        };
        let plan = plan_cleaning(&extent, &settings.compaction, settings.now_ms);
        let phase = match plan {
            CleanPlan::Clean { range, .. } => Phase::Map {
                map: KeyMap::with_budget(settings.key_map_bytes, range.dirty(), &input.aborted),
                range_end: range.end,
                segment: input
                    .sealed
                    .iter()
                    .position(|s| s.next_offset > range.first_dirty)
                    .unwrap_or(input.sealed.len()),
                position: 0,
            },
            CleanPlan::Wait(_) => Phase::Done,
        };
        Ok(Round {
            time: PassTime {
                now_ms: settings.now_ms,
                delete_retention_ms: settings.delete_retention_ms,
            },
            producers: Some(settings.producers),
            phase,
            outcome: RoundOutcome {
                plan,
                checkpoint: settings.checkpoint,
                copies: Vec::new(),
                summary: CleanSummary::default(),
                bytes_read: 0,
                bytes_written: 0,
            },
            input,
        })
    }

    /// Reads (and writes) about `bytes` more, at least one batch, and says
    /// whether the round is done.
    pub fn step(&mut self, bytes: u64) -> io::Result<bool> {
        let goal = self
            .outcome
            .bytes_read
            .saturating_add(self.outcome.bytes_written)
            .saturating_add(bytes);
        while !matches!(self.phase, Phase::Done) {
            if self.outcome.bytes_read + self.outcome.bytes_written >= goal {
                return Ok(false);
            }
            let phase = std::mem::replace(&mut self.phase, Phase::Done);
            self.phase = match phase {
                Phase::Map {
                    map,
                    range_end,
                    segment,
                    position,
                } => self.map_some(map, range_end, segment, position, goal)?,
                Phase::Clean {
                    decider,
                    segment,
                    position,
                    held,
                    copy,
                } => self.clean_some(decider, segment, position, held, copy, goal)?,
                Phase::Done => Phase::Done,
            };
        }
        Ok(true)
    }

    /// Bytes read and written so far.
    pub fn io_bytes(&self) -> u64 {
        self.outcome.bytes_read + self.outcome.bytes_written
    }

    /// What the round did; call once [`step`](Self::step) said done.
    pub fn finish(self) -> RoundOutcome {
        self.outcome
    }

    fn map_some(
        &mut self,
        mut map: KeyMap,
        range_end: i64,
        segment: usize,
        mut position: u64,
        goal: u64,
    ) -> io::Result<Phase> {
        let Some(s) = self
            .input
            .sealed
            .get(segment)
            .filter(|s| s.id.base_offset < range_end)
        else {
            return Ok(self.decide_from(map));
        };
        let mut reader = BatchReader::new(s.file.as_ref(), position, s.size, RECOVERY_CHUNK);
        while let Some((at, batch)) = next_batch(&mut reader, s)? {
            self.outcome.bytes_read += batch.size() as u64;
            if map.add(&view(&batch, s)?) == MapStep::Full {
                return Ok(self.decide_from(map));
            }
            position = at + batch.size() as u64;
            if self.outcome.bytes_read + self.outcome.bytes_written >= goal {
                return Ok(Phase::Map {
                    map,
                    range_end,
                    segment,
                    position,
                });
            }
        }
        Ok(Phase::Map {
            map,
            range_end,
            segment: segment + 1,
            position: 0,
        })
    }

    /// The map is built: decide from the log start up to its end.
    fn decide_from(&mut self, map: KeyMap) -> Phase {
        let end = map.end();
        self.outcome.checkpoint = Some(end);
        if end <= self.input.log_start {
            return Phase::Done;
        }
        let producers = self.producers.take().unwrap_or_default();
        Phase::Clean {
            decider: Box::new(Decider::new(map, &self.input.aborted, producers, self.time)),
            segment: 0,
            position: 0,
            held: None,
            copy: None,
        }
    }

    /// Decides and writes the next part of segment `segment`. The decider
    /// sees every batch once, in order; a batch's fate is applied as soon as
    /// the next batch is read (so the segment's last is known), into a copy
    /// opened at the first batch that changes. At the segment's end the copy
    /// is synced, renamed into place and indexed. (One pass, as Kafka's
    /// cleaner makes: deciding a whole segment first and then reading it
    /// again to write the copy cost a third more reading and decoding.)
    fn clean_some(
        &mut self,
        mut decider: Box<Decider>,
        segment: usize,
        mut position: u64,
        mut held: Option<Held>,
        mut copy: Option<Box<CopyInProgress>>,
        goal: u64,
    ) -> io::Result<Phase> {
        let end = decider.map().end();
        let Some(s) = self
            .input
            .sealed
            .get(segment)
            .filter(|s| s.id.base_offset < end)
        else {
            self.outcome.summary = decider.summary().clone();
            return Ok(Phase::Done);
        };
        let mut reader = BatchReader::new(s.file.as_ref(), position, s.size, RECOVERY_CHUNK);
        while let Some((at, batch)) = next_batch(&mut reader, s)? {
            self.outcome.bytes_read += batch.size() as u64;
            let fate = decider.next(&view(&batch, s)?);
            position = at + batch.size() as u64;
            if let Some(before) = held.replace(Held { at, batch, fate }) {
                emit(&self.input, &mut self.outcome, s, &mut copy, before)?;
            }
            if self.outcome.bytes_read + self.outcome.bytes_written >= goal {
                if let Some(c) = copy.as_deref_mut() {
                    flush_pending(c)?;
                }
                return Ok(Phase::Clean {
                    decider,
                    segment,
                    position,
                    held,
                    copy,
                });
            }
        }
        // The segment's last batch stays (as a bare header if it would
        // go), so the segment, and the log, still end where they did.
        if let Some(mut last) = held {
            if matches!(last.fate, Fate::Drop) {
                last.fate = Fate::KeepEmpty;
            }
            emit(&self.input, &mut self.outcome, s, &mut copy, last)?;
        }
        if let Some(mut copy) = copy {
            flush_pending(&mut copy)?;
            let installed = self.finish_copy(s, *copy)?;
            self.outcome.copies.push(installed);
        }
        Ok(Phase::Clean {
            decider,
            segment: segment + 1,
            position: 0,
            held: None,
            copy: None,
        })
    }

    /// The copy is whole: synced, renamed into place (from then on it is
    /// the segment), reopened by its name, indexed.
    fn finish_copy(&self, original: &SealedView, copy: CopyInProgress) -> io::Result<CleanedCopy> {
        let (volume, dir, id, by) = (
            self.input.volume.as_ref(),
            &self.input.dir,
            original.id,
            self.input.epoch,
        );
        if copy.segment.next_offset != original.next_offset {
            volume.remove(&copy.temporary)?;
            return Err(invalid_data(format!(
                "the cleaned copy of segment {id:?} would end at {}, not {}",
                copy.segment.next_offset, original.next_offset
            )));
        }
        copy.file.sync()?;
        let path = layout::cleaned_segment_path(dir, id, by);
        volume.rename(&copy.temporary, &path)?;
        // The copy's name is durable before the originals it replaces can
        // be removed (a rename is not durable until its directory is).
        volume.sync_dir(dir)?;
        // From here on the handle is the one opened by the final name.
        let mut segment = copy.segment.with_file(volume.open_segment(&path, false)?);
        segment.seal(volume, &layout::cleaned_index_path(dir, id, by))?;
        segment.cleaned_by = Some(by);
        segment.freeze(copy.written);
        Ok(CleanedCopy {
            id,
            replaces: original.file.clone(),
            segment,
        })
    }
}

/// Writes a batch of segment `s` as its fate says. Until a batch
/// changes, nothing is written: the first one that does opens the copy,
/// which then starts with the batches before it, whole.
fn emit(
    input: &CleaningInput,
    outcome: &mut RoundOutcome,
    s: &SealedView,
    copy: &mut Option<Box<CopyInProgress>>,
    Held { at, batch, fate }: Held,
) -> io::Result<()> {
    let c = match copy {
        Some(c) => c,
        None if matches!(fate, Fate::KeepWhole) => return Ok(()),
        None => {
            let mut opened = Box::new(open_copy(input, s)?);
            copy_whole_prefix(input, outcome, s, at, &mut opened)?;
            copy.insert(opened)
        }
    };
    let out = match fate.apply(&batch) {
        Ok(out) => out,
        // Writing the batch as it was is always safe: it was in the log.
        Err(e) => {
            tracing::warn!(segment = ?s.id, offset = batch.base_offset(), error = %e, "keeping a batch the cleaner cannot rewrite");
            Some(batch)
        }
    };
    if let Some(out) = out {
        append_to_copy(input, outcome, c, &out)?;
    }
    Ok(())
}

/// Copies segment `s`'s batches before position `end`, every one of
/// which stays whole, into a copy just opened.
fn copy_whole_prefix(
    input: &CleaningInput,
    outcome: &mut RoundOutcome,
    s: &SealedView,
    end: u64,
    copy: &mut CopyInProgress,
) -> io::Result<()> {
    let mut reader = BatchReader::new(s.file.as_ref(), 0, end, RECOVERY_CHUNK);
    while let Some((_, batch)) = next_batch(&mut reader, s)? {
        outcome.bytes_read += batch.size() as u64;
        append_to_copy(input, outcome, copy, &batch)?;
    }
    Ok(())
}

/// Adds `out` to the copy's bookkeeping and to its next append.
fn append_to_copy(
    input: &CleaningInput,
    outcome: &mut RoundOutcome,
    copy: &mut CopyInProgress,
    out: &RecordBatch,
) -> io::Result<()> {
    let position = copy.written + copy.pending.len() as u64;
    copy.segment
        .track(BatchMeta::of(out, position), input.index_interval_bytes)?;
    copy.pending.extend_from_slice(out.as_bytes());
    outcome.bytes_written += out.size() as u64;
    if copy.pending.len() >= WRITE_CHUNK {
        flush_pending(copy)?;
    }
    Ok(())
}

/// The copy of `segment`, empty, under its temporary name.
fn open_copy(input: &CleaningInput, segment: &SealedView) -> io::Result<CopyInProgress> {
    let (volume, id) = (input.volume.as_ref(), segment.id);
    let temporary = layout::cleaning_path(&input.dir, id, input.epoch);
    let file = volume.open_segment(&temporary, true)?;
    if !file.is_empty() {
        file.truncate(0)?;
    }
    Ok(CopyInProgress {
        segment: Segment::empty(id.base_offset, id.epoch, file.clone()),
        file,
        temporary,
        written: 0,
        pending: BytesMut::new(),
    })
}

/// Appends the batches gathered for a copy as one chunk and starts it on
/// its way to the disk: the copy's sync at its end then finds little left
/// to flush, so an acks=all produce whose fdatasync lands meanwhile waits
/// behind one chunk of the cleaner's writes, not behind a whole copy
/// (docs/performance.md, "The log cleaner").
fn flush_pending(copy: &mut CopyInProgress) -> io::Result<()> {
    if copy.pending.is_empty() {
        return Ok(());
    }
    let at = copy.file.append(&copy.pending)?;
    copy.file.start_write_back(at, copy.pending.len() as u64);
    copy.written += copy.pending.len() as u64;
    copy.pending.clear();
    Ok(())
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

/// The next batch of a sealed segment, with its position. A sealed segment
/// was validated when it was written or recovered; anything but whole
/// batches up to its size is damage, and the round stops rather than clean
/// around it.
fn next_batch(
    reader: &mut BatchReader<'_>,
    segment: &SealedView,
) -> io::Result<Option<(u64, RecordBatch)>> {
    match reader.next_step()? {
        Step::Batch { position, batch } => Ok(Some((position, batch))),
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
