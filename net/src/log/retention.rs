//! Removing old data: DeleteRecords and retention by size and time.

use std::io;

use super::layout;
use super::partition_log::PartitionLog;
use super::ReadError;

/// What a retention pass did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionOutcome {
    pub deleted_segments: usize,
    pub log_start_offset: i64,
}

impl PartitionLog {
    /// DeleteRecords: makes `offset` the new log start (persisted first,
    /// so a crash cannot resurrect records) and deletes the segments
    /// entirely below it. Returns the new log start (the low watermark).
    ///
    /// Offsets at or below the current start change nothing. Above the log
    /// end is out of range; the broker checks the stricter high-watermark
    /// bound before calling.
    pub fn delete_records_before(&mut self, offset: i64) -> Result<i64, ReadError> {
        if offset > self.end_offset() {
            return Err(ReadError::OutOfRange);
        }
        if offset <= self.log_start_offset {
            return Ok(self.log_start_offset);
        }
        self.volume.write_atomic(
            &layout::log_start_offset_path(&self.dir),
            &layout::encode_log_start_offset(offset),
        )?;
        self.log_start_offset = offset;
        // A segment is entirely below the start when its successor begins
        // at or before it; the active segment always stays.
        while self
            .second_segment_base()
            .is_some_and(|base| base <= offset)
        {
            self.delete_oldest_segment()?;
        }
        Ok(self.log_start_offset)
    }

    /// Deletes the oldest sealed segments (never the active one) while the
    /// log would still hold at least `retention_bytes` without them, then
    /// while their newest timestamp is more than `retention_ms` before
    /// `now_ms`. `-1` disables either rule. Kafka's semantics; only whole
    /// segments go, and only from the front, so the log stays contiguous.
    ///
    /// The log start moves with the first remaining segment. It is not
    /// persisted here: on reopen it is at least the first segment's base.
    pub fn apply_retention(
        &mut self,
        now_ms: i64,
        retention_bytes: i64,
        retention_ms: i64,
    ) -> io::Result<RetentionOutcome> {
        let mut deleted = 0;
        if let Ok(limit) = u64::try_from(retention_bytes) {
            let mut size = self.size_bytes();
            while let Some(oldest) = self.oldest_sealed() {
                let oldest_size = oldest.size();
                if size.saturating_sub(oldest_size) < limit {
                    break;
                }
                self.delete_oldest_segment()?;
                size -= oldest_size;
                deleted += 1;
            }
        }
        if retention_ms >= 0 {
            let cutoff = now_ms.saturating_sub(retention_ms);
            while let Some(oldest) = self.oldest_sealed() {
                if oldest.max_timestamp >= cutoff {
                    break;
                }
                self.delete_oldest_segment()?;
                deleted += 1;
            }
        }
        Ok(RetentionOutcome {
            deleted_segments: deleted,
            log_start_offset: self.log_start_offset,
        })
    }

    fn oldest_sealed(&self) -> Option<&super::segment::Segment> {
        self.sealed.first()
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
