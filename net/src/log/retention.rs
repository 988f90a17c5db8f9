//! Removing old data: DeleteRecords and retention by size and time.

use std::io;

use super::partition_log::{DetachedSegment, PartitionLog};
use super::ReadError;
use crate::volume::Volume;
use kaas_core::deliberate_bugs::{planted, Bug};
use kaas_core::layout::LogStart;

/// What a retention pass did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetentionOutcome {
    /// Base offsets of the segments taken out; their files are the
    /// caller's to remove.
    pub deleted_segments: Vec<DetachedSegment>,
    pub log_start_offset: i64,
}

/// Persists a new log start and the segment that will be first, in the
/// file of the leader at `epoch`, atomically and durably: before any
/// deletion removes a file, so that an opening can tell a deleted first
/// segment from one a stale directory listing hides (`recovery`).
pub fn persist_log_start(
    volume: &dyn Volume,
    dir: &str,
    epoch: i32,
    start: &LogStart,
) -> io::Result<()> {
    super::recovery::write_log_start(volume, dir, epoch, start)
}

impl PartitionLog {
    /// What DeleteRecords up to `offset` leaves as the log start, for the
    /// caller to persist ([`persist_log_start`]) before
    /// [`delete_records_before`](Self::delete_records_before): `offset`,
    /// and the segment holding it, which will be first.
    pub fn log_start_after_deleting_before(&self, offset: i64) -> LogStart {
        let mut segments = self.sealed.iter().chain(std::iter::once(&self.active));
        let mut first = segments.next().unwrap_or(&self.active);
        for later in segments.take_while(|s| s.base_offset <= offset) {
            first = later;
        }
        LogStart {
            offset: offset.max(self.log_start_offset),
            first_segment: Some(first.id()),
        }
    }

    /// What retention of the `count` oldest sealed segments leaves as the
    /// log start, for the caller to persist before
    /// [`apply_retention`](Self::apply_retention): the first remaining
    /// segment and where it starts.
    pub fn log_start_after_retention(&self, count: usize) -> LogStart {
        let first = self.sealed.get(count).unwrap_or(&self.active);
        LogStart {
            offset: first.base_offset.max(self.log_start_offset),
            first_segment: Some(first.id()),
        }
    }

    /// DeleteRecords: makes `offset` the new log start and takes the
    /// segments entirely below it out of the log. Memory only: the caller
    /// persists the new start first ([`persist_log_start`], so a
    /// crash cannot resurrect records) and removes the detached segments'
    /// files afterwards, both outside the lane. Returns the new log start
    /// (the low watermark) and the detached segments' names. The leader
    /// epochs below the new start are trimmed (`set_log_start_offset`).
    ///
    /// Offsets at or below the current start change nothing. Above the log
    /// end is out of range; the partition's rules check the stricter
    /// high-watermark bound before.
    pub fn delete_records_before(
        &mut self,
        offset: i64,
    ) -> Result<(i64, Vec<DetachedSegment>), ReadError> {
        if offset > self.end_offset() {
            return Err(ReadError::OutOfRange);
        }
        if offset <= self.log_start_offset {
            return Ok((self.log_start_offset, Vec::new()));
        }
        self.set_log_start_offset(offset);
        // A segment is entirely below the start when its successor begins
        // at or before it; the active segment always stays, and so does
        // one the flusher has still to index (retention takes it later).
        let mut detached = Vec::new();
        while self
            .second_segment_base()
            .is_some_and(|base| base <= offset)
        {
            let Some(segment) = self.detach_oldest_segment() else {
                break;
            };
            detached.push(segment);
        }
        Ok((self.log_start_offset, detached))
    }

    /// The oldest sealed segments retention would delete (never the active
    /// one, nor one still to be indexed: `settled_segments`): first those
    /// entirely below the log start (DeleteRecords moved it past them
    /// while they were still the flusher's), then while the log would
    /// still hold at least `retention_bytes` without them, then while
    /// their newest timestamp is more than `retention_ms` before `now_ms`.
    /// `-1` disables either limit. Kafka's semantics; only whole segments
    /// go, and only from the front, so the log stays contiguous. Returns
    /// how many, and the log start after them (what the producer state
    /// must be snapshotted past first).
    pub fn retention_plan(
        &self,
        now_ms: i64,
        retention_bytes: i64,
        retention_ms: i64,
    ) -> (usize, i64) {
        let settled = &self.sealed[..self.settled_segments()];
        let mut count = self
            .sealed
            .iter()
            .skip(1)
            .chain(std::iter::once(&self.active))
            .take_while(|next| next.base_offset <= self.log_start_offset)
            .count()
            .min(settled.len());
        if let Ok(limit) = u64::try_from(retention_bytes) {
            let mut size = settled[..count]
                .iter()
                .fold(self.size_bytes(), |size, s| size.saturating_sub(s.size()));
            for oldest in settled.iter().skip(count) {
                if size.saturating_sub(oldest.size()) < limit {
                    break;
                }
                size -= oldest.size();
                count += 1;
            }
        }
        if retention_ms >= 0 {
            let cutoff = now_ms.saturating_sub(retention_ms);
            for oldest in settled.iter().skip(count) {
                if oldest.max_timestamp >= cutoff && !planted(Bug::RetentionIgnoresSegmentAge) {
                    break;
                }
                count += 1;
            }
        }
        let new_start = self
            .sealed
            .get(count)
            .unwrap_or(&self.active)
            .base_offset
            .max(self.log_start_offset);
        (count, new_start)
    }

    /// Takes the `count` oldest sealed segments out of the log (memory
    /// only; see [`retention_plan`](Self::retention_plan)). The log start
    /// moves with the first remaining segment; the caller persists it
    /// first ([`log_start_after_retention`](Self::log_start_after_retention)).
    pub fn apply_retention(&mut self, count: usize) -> RetentionOutcome {
        let mut detached = Vec::with_capacity(count);
        for _ in 0..count {
            detached.extend(self.detach_oldest_segment());
        }
        RetentionOutcome {
            deleted_segments: detached,
            log_start_offset: self.log_start_offset,
        }
    }

    /// Base of the segment after the oldest one, if there are two.
    fn second_segment_base(&self) -> Option<i64> {
        match self.sealed.len() {
            0 => None,
            1 => Some(self.active.base_offset),
            _ => self.sealed.get(1).map(|s| s.base_offset),
        }
    }
}
