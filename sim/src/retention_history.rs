//! What the main topic's deletions allow (issue 13 item 4): DeleteRecords
//! requests of `crate::retention`'s actor and the topic's `retention.ms`.
//!
//! The checker no longer assumes every partition starts at offset 0:
//!
//! - An acknowledged DeleteRecords(o) makes the log start at least o from
//!   then on, and a log start any answer showed (a fetch's
//!   `log_start_offset`, ListOffsets EARLIEST, a DeleteRecords low
//!   watermark) is durable before it is visible (the broker persists it
//!   first), so no answer sent after may show a lower one, restarts
//!   included: recovery must not resurrect deleted records. No fetch sent
//!   after may return a record below it either.
//! - A record known in the log (acknowledged or read) may be missing from
//!   the final log only if it lies below the final log's start and its
//!   deletion was allowed: below an offset some DeleteRecords asked for
//!   (whatever its answer: a lost or failed answer may still have applied),
//!   or, with `retention.ms`, its timestamp older than the final read's time
//!   minus `retention.ms` plus what a broker's clock may be ahead
//!   ([`CLOCK_ALLOWANCE_MS`]). Anything else missing is a lost write.
//!
//! Pure bookkeeping, unit-tested without madsim (with the rest of the
//! rules, in `checker`).

use crate::params::{CLOCK_SKEW_BOUND_MS, MAX_CLOCK_OFFSET_MS, MAX_DRIFT_PPM};
use bytes::Bytes;
use std::collections::BTreeMap;

/// How far ahead of true time a broker's clock may judge a record's age:
/// its offset, its drift over a run of at most 20 simulated minutes, and
/// the skew bound on top.
pub const CLOCK_ALLOWANCE_MS: i64 =
    MAX_CLOCK_OFFSET_MS + MAX_DRIFT_PPM * 1_200 / 1_000 + CLOCK_SKEW_BOUND_MS;

/// What became of one DeleteRecords request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteOutcome {
    /// Answered with this low watermark.
    Acked(i64),
    /// Answered with this error code (it may still have applied: the broker
    /// persists the new start before the steps that can fail after it).
    Refused(i16),
    /// No answer (a lost connection, a timeout).
    Unknown,
}

/// Why a record may be missing from the final log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deletion {
    /// Below an offset a DeleteRecords asked for.
    Requested,
    /// Older than `retention.ms` allows.
    Aged,
}

/// What the deletion rules compared, for the report and the gates.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetentionStats {
    pub deletes_sent: u64,
    pub deletes_acked: u64,
    pub deletes_refused: u64,
    pub deletes_unknown: u64,
    /// Log starts in answers compared with what was known before their
    /// request was sent.
    pub starts_checked: u64,
    /// Of those, above 0 (something had been deleted).
    pub starts_above_zero: u64,
    /// Fetches answered OFFSET_OUT_OF_RANGE below the log start, the
    /// reader reset to the earliest offset.
    pub resets: u64,
    /// Records known in the log and gone from the final log, allowed by a
    /// DeleteRecords request,
    pub deleted_by_request: u64,
    /// ... or by `retention.ms` alone.
    pub deleted_by_age: u64,
    /// Sum over the partitions of the final log's start.
    pub final_start_total: u64,
}

/// See the module documentation.
#[derive(Debug, Default)]
pub struct RetentionHistory {
    /// Records may be deleted this seed.
    deleting: bool,
    /// The topic's `retention.ms` (`None`: no time retention).
    retention_ms: Option<i64>,
    /// Per partition, the highest offset a DeleteRecords asked for.
    requested: BTreeMap<i32, i64>,
    /// ... an acknowledged one asked for.
    acked: BTreeMap<i32, i64>,
    /// ... the highest log start an answer showed.
    seen: BTreeMap<i32, i64>,
    /// Each record's timestamp (the first its producer gave it).
    stamps: BTreeMap<Bytes, i64>,
    /// Where the final read found each partition's log to start.
    final_starts: BTreeMap<i32, i64>,
    /// Client wall time when the final read ended.
    final_read_ms: i64,
    violations: Vec<String>,
    pub stats: RetentionStats,
}

impl RetentionHistory {
    /// The seed deletes from the topic: by DeleteRecords, and with
    /// `retention_ms` >= 0 by time too. Called before any workload starts.
    pub fn set_deleting(&mut self, retention_ms: i64) {
        self.deleting = true;
        self.retention_ms = (retention_ms >= 0).then_some(retention_ms);
    }

    /// Whether anything may delete records from the topic this seed.
    pub fn active(&self) -> bool {
        self.deleting
    }

    /// A producer gave `values` the timestamp `ts_ms`.
    pub fn stamp(&mut self, values: &[Bytes], ts_ms: i64) {
        for v in values {
            self.stamps.entry(v.clone()).or_insert(ts_ms);
        }
    }

    /// The log start an answer to a request sent now must show at least:
    /// the highest acknowledged deletion or log start seen.
    pub fn start_floor(&self, partition: i32) -> i64 {
        let get = |m: &BTreeMap<i32, i64>| m.get(&partition).copied().unwrap_or(0);
        get(&self.acked).max(get(&self.seen))
    }

    /// The highest offset a DeleteRecords asked for on `partition`.
    pub fn requested(&self, partition: i32) -> i64 {
        self.requested.get(&partition).copied().unwrap_or(0)
    }

    pub fn violations(&self) -> &[String] {
        &self.violations
    }

    /// DeleteRecords(`offset`) is about to be sent.
    pub fn delete_sent(&mut self, partition: i32, offset: i64) {
        self.stats.deletes_sent += 1;
        let r = self.requested.entry(partition).or_insert(0);
        *r = (*r).max(offset);
    }

    /// What DeleteRecords(`offset`), sent when the start floor was
    /// `floor`, came to.
    pub fn delete_answered(
        &mut self,
        partition: i32,
        offset: i64,
        floor: i64,
        outcome: DeleteOutcome,
    ) {
        match outcome {
            DeleteOutcome::Acked(low) => {
                self.stats.deletes_acked += 1;
                if low < offset {
                    self.violations.push(format!(
                        "partition {partition}: DeleteRecords before {offset} acknowledged with low watermark {low}"
                    ));
                }
                self.start_seen(partition, floor, low, "a DeleteRecords answer");
                let a = self.acked.entry(partition).or_insert(0);
                *a = (*a).max(offset);
            }
            DeleteOutcome::Refused(_) => self.stats.deletes_refused += 1,
            DeleteOutcome::Unknown => self.stats.deletes_unknown += 1,
        }
    }

    /// An answer to a request sent when the start floor was `floor` showed
    /// the log start `start` (`what` names the answer).
    pub fn start_seen(&mut self, partition: i32, floor: i64, start: i64, what: &str) {
        self.stats.starts_checked += 1;
        self.stats.starts_above_zero += u64::from(start > 0);
        if start < floor {
            let acked = self.acked.get(&partition).copied().unwrap_or(0);
            let why = if acked >= floor {
                format!("a DeleteRecords before {acked} was acknowledged")
            } else {
                format!("an earlier answer showed the log start {floor}")
            };
            self.violations.push(format!(
                "partition {partition}: {what} showed the log start {start}, but before it was asked {why}: deleted records came back"
            ));
        }
        // Without time retention only DeleteRecords moves the start, never
        // past what one asked for (`requested` counts a request before it
        // is sent).
        if self.retention_ms.is_none() && start > self.requested(partition) {
            self.violations.push(format!(
                "partition {partition}: {what} showed the log start {start}, above every DeleteRecords offset asked for ({}), and no retention.ms applies",
                self.requested(partition)
            ));
        }
        let s = self.seen.entry(partition).or_insert(0);
        *s = (*s).max(start);
    }

    /// A fetch sent when the start floor was `floor` returned records from
    /// `first` on (and the log start `start`, -1 if the answer had none).
    pub fn fetched(&mut self, partition: i32, floor: i64, start: i64, first: Option<i64>) {
        if start >= 0 {
            self.start_seen(partition, floor, start, "a fetch");
        }
        if let Some(first) = first.filter(|&o| o < floor) {
            self.violations.push(format!(
                "partition {partition}: a fetch returned offset {first}, below the log start {floor} known before it was sent"
            ));
        }
    }

    /// A reader was answered OFFSET_OUT_OF_RANGE below the log start and
    /// moved to it.
    pub fn reset(&mut self) {
        self.stats.resets += 1;
    }

    /// The final read found `partition`'s log starting at `start` (the
    /// last time it had to move: retention may go on while it reads).
    pub fn final_start(&mut self, partition: i32, start: i64) {
        self.final_starts.insert(partition, start);
    }

    /// The final read ended at client wall time `ms`.
    pub fn final_read_at(&mut self, ms: i64) {
        self.final_read_ms = self.final_read_ms.max(ms);
    }

    /// Where the final log of `partition` starts.
    pub fn start_of(&self, partition: i32) -> i64 {
        self.final_starts.get(&partition).copied().unwrap_or(0)
    }

    /// Whether the record `value`, known at `offset` of `partition`, may
    /// have been deleted, and why.
    pub fn deletable(&self, partition: i32, offset: i64, value: &Bytes) -> Option<Deletion> {
        if offset < self.requested(partition) {
            return Some(Deletion::Requested);
        }
        let retention_ms = self.retention_ms?;
        let stamp = *self.stamps.get(value)?;
        (stamp < self.final_read_ms - retention_ms + CLOCK_ALLOWANCE_MS).then_some(Deletion::Aged)
    }

    /// For the determinism fingerprint.
    pub fn describe(&self) -> String {
        format!(
            "{:?} {:?} {:?} {:?} {:?}",
            self.requested, self.acked, self.seen, self.final_starts, self.stats
        )
    }
}
