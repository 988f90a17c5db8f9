//! Which part of a compacted log may be cleaned now, and whether it is
//! worth it: Kafka's rules, one function each.

use std::ops::Range;

/// One segment of the log, as the cleaner plans with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentSummary {
    /// Offset the segment starts at (its file name).
    pub base_offset: i64,
    /// Bytes of the segment's log file.
    pub size_bytes: u64,
    /// Largest record timestamp in the segment (its time index's last).
    pub max_timestamp: i64,
    /// Max timestamp of its first batch: how old its oldest data is, for
    /// `max.compaction.lag.ms` (Kafka reads the same; <= 0 means unknown).
    pub first_batch_timestamp: i64,
}

/// The state of one partition's log the plan is made from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogExtent<'a> {
    /// The log start offset (records below it are deleted).
    pub log_start: i64,
    /// The log end offset (the next offset to assign).
    pub log_end: i64,
    /// The cleaner checkpoint: where the last round stopped (the first
    /// dirty offset). `None` if the log was never cleaned.
    pub checkpoint: Option<i64>,
    /// Nothing at or past it is cleaned: the first offset of the earliest
    /// open transaction, or the high watermark.
    pub last_stable_offset: i64,
    /// Base offset of the active segment, which is never cleaned.
    pub active_segment_base: i64,
    /// The sealed segments (every one but the active), oldest first.
    pub sealed: &'a [SegmentSummary],
}

/// The topic's compaction settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CompactionConfig {
    /// `min.compaction.lag.ms`: a record stays uncompacted at least this long.
    pub min_compaction_lag_ms: i64,
    /// `max.compaction.lag.ms`: a record is compacted within about this long.
    pub max_compaction_lag_ms: i64,
    /// `min.cleanable.dirty.ratio`.
    pub min_cleanable_dirty_ratio: f64,
}

/// What to clean: the dirty section `[first_dirty, end)`. `end` is a
/// segment base, so segments are cleaned whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleanRange {
    /// The first dirty offset: the checkpoint, made valid.
    pub first_dirty: i64,
    /// The first offset not cleaned this round: a segment base.
    pub end: i64,
    /// Bytes of the segments the dirty section touches.
    pub dirty_bytes: u64,
    /// Bytes of the segments before the first dirty offset.
    pub clean_bytes: u64,
}

impl CleanRange {
    /// The dirty section, as [`KeyMap::with_budget`](super::KeyMap::with_budget) takes it.
    pub fn dirty(&self) -> Range<i64> {
        self.first_dirty..self.end
    }
}

/// Why a log is cleaned now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CleanReason {
    /// Dirty bytes / all cleanable bytes is above `min.cleanable.dirty.ratio`.
    DirtyRatio {
        /// The dirty ratio found.
        ratio: f64,
    },
    /// A dirty segment's oldest data is older than `max.compaction.lag.ms`
    /// by `overdue_ms`.
    MaxCompactionLag {
        /// How far past `now - max.compaction.lag.ms` the oldest dirty data is.
        overdue_ms: i64,
    },
}

/// Why a log is not cleaned now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum WaitReason {
    /// Nothing dirty below the uncleanable bound.
    NothingCleanable,
    /// The dirty ratio is at or below `min.cleanable.dirty.ratio`, and no
    /// dirty data is older than `max.compaction.lag.ms`.
    DirtyRatioBelowMinimum {
        /// The dirty ratio found.
        ratio: f64,
    },
}

/// The plan for one log.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CleanPlan {
    /// Clean `range` now.
    Clean {
        /// The dirty section to clean.
        range: CleanRange,
        /// The rule that asked for it.
        reason: CleanReason,
    },
    /// Do not clean now.
    Wait(WaitReason),
}

/// Whether to clean `log` now, and which range.
pub fn plan_cleaning(log: &LogExtent<'_>, config: &CompactionConfig, now_ms: i64) -> CleanPlan {
    let first_dirty = first_dirty_offset(log.log_start, log.log_end, log.checkpoint);
    let bound = [
        Some(log.last_stable_offset),
        Some(log.active_segment_base),
        min_compaction_lag_bound(log, first_dirty, config.min_compaction_lag_ms, now_ms),
    ]
    .into_iter()
    .flatten()
    .min()
    .unwrap_or(log.active_segment_base);
    let end = round_down_to_segment_base(log, bound).max(first_dirty);
    let range = CleanRange {
        first_dirty,
        end,
        dirty_bytes: dirty_bytes(log, first_dirty, end),
        clean_bytes: clean_bytes(log, first_dirty),
    };
    if range.dirty_bytes == 0 {
        return CleanPlan::Wait(WaitReason::NothingCleanable);
    }
    let ratio = dirty_ratio(&range);
    if ratio > config.min_cleanable_dirty_ratio {
        return CleanPlan::Clean {
            range,
            reason: CleanReason::DirtyRatio { ratio },
        };
    }
    match max_compaction_lag_overdue(log, first_dirty, config.max_compaction_lag_ms, now_ms) {
        Some(overdue_ms) => CleanPlan::Clean {
            range,
            reason: CleanReason::MaxCompactionLag { overdue_ms },
        },
        None => CleanPlan::Wait(WaitReason::DirtyRatioBelowMinimum { ratio }),
    }
}

/// The checkpoint, unless it cannot be right: below the log start (records
/// were deleted under it) it is clamped to the log start; past the log end
/// (the log was truncated) the whole log is taken as dirty again.
fn first_dirty_offset(log_start: i64, log_end: i64, checkpoint: Option<i64>) -> i64 {
    match checkpoint {
        Some(c) if c >= log_start && c <= log_end => c,
        _ => log_start,
    }
}

/// `min.compaction.lag.ms`: the base of the first sealed segment at or past
/// the first dirty offset whose newest record is younger than the lag;
/// neither it nor anything after it may be cleaned. `None` without a lag.
fn min_compaction_lag_bound(
    log: &LogExtent<'_>,
    first_dirty: i64,
    min_lag_ms: i64,
    now_ms: i64,
) -> Option<i64> {
    if min_lag_ms <= 0 {
        return None;
    }
    let newest_allowed = now_ms.saturating_sub(min_lag_ms);
    dirty_sealed(log, first_dirty)
        .find(|s| s.max_timestamp > newest_allowed)
        .map(|s| s.base_offset)
}

/// Segments are cleaned whole: the uncleanable bound moves down to the base
/// of the segment it falls in (the active segment's base at most).
fn round_down_to_segment_base(log: &LogExtent<'_>, bound: i64) -> i64 {
    if bound >= log.active_segment_base {
        return log.active_segment_base;
    }
    log.sealed
        .iter()
        .map(|s| s.base_offset)
        .filter(|&base| base <= bound)
        .max()
        .unwrap_or(log.log_start.min(bound))
}

/// Dirty bytes / (clean + dirty bytes), Kafka's cleanable ratio.
fn dirty_ratio(range: &CleanRange) -> f64 {
    let total = range.dirty_bytes.saturating_add(range.clean_bytes);
    if total == 0 {
        return 0.0;
    }
    range.dirty_bytes as f64 / total as f64
}

/// `max.compaction.lag.ms`: by how much the oldest dirty data (the earliest
/// first-batch timestamp of the sealed segments from the first dirty offset
/// on) is older than the lag allows; such a log is cleaned whatever its
/// dirty ratio. Unknown timestamps (<= 0) do not count.
fn max_compaction_lag_overdue(
    log: &LogExtent<'_>,
    first_dirty: i64,
    max_lag_ms: i64,
    now_ms: i64,
) -> Option<i64> {
    let clean_until = now_ms.saturating_sub(max_lag_ms.max(0));
    let earliest = dirty_sealed(log, first_dirty)
        .map(|s| s.first_batch_timestamp)
        .filter(|&ts| ts > 0)
        .min()?;
    (earliest < clean_until).then(|| clean_until - earliest)
}

/// Bytes of the sealed segments that overlap `[first_dirty, end)`.
fn dirty_bytes(log: &LogExtent<'_>, first_dirty: i64, end: i64) -> u64 {
    if end <= first_dirty {
        return 0;
    }
    with_ends(log)
        .filter(|(s, seg_end)| s.base_offset < end && *seg_end > first_dirty)
        .map(|(s, _)| s.size_bytes)
        .fold(0, u64::saturating_add)
}

/// Bytes of the sealed segments that begin before the first dirty offset.
fn clean_bytes(log: &LogExtent<'_>, first_dirty: i64) -> u64 {
    log.sealed
        .iter()
        .filter(|s| s.base_offset < first_dirty)
        .map(|s| s.size_bytes)
        .fold(0, u64::saturating_add)
}

/// The sealed segments that hold the first dirty offset or come after it.
fn dirty_sealed<'a>(
    log: &'a LogExtent<'_>,
    first_dirty: i64,
) -> impl Iterator<Item = &'a SegmentSummary> + 'a {
    with_ends(log)
        .filter(move |(_, end)| *end > first_dirty)
        .map(|(s, _)| s)
}

/// Each sealed segment with the offset it ends at: the next one's base.
fn with_ends<'a>(log: &'a LogExtent<'_>) -> impl Iterator<Item = (&'a SegmentSummary, i64)> + 'a {
    let next_bases = log
        .sealed
        .iter()
        .skip(1)
        .map(|s| s.base_offset)
        .chain(std::iter::once(log.active_segment_base));
    log.sealed.iter().zip(next_bases)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_000_000;

    /// Four sealed segments of 100 offsets and 1000 bytes each, then the
    /// active one at 400; segment i's records are stamped 1000 * (i + 1).
    fn segments() -> Vec<SegmentSummary> {
        (0..4)
            .map(|i| SegmentSummary {
                base_offset: i * 100,
                size_bytes: 1_000,
                max_timestamp: 1_000 * (i + 1) + 999,
                first_batch_timestamp: 1_000 * (i + 1),
            })
            .collect()
    }

    fn log(sealed: &[SegmentSummary]) -> LogExtent<'_> {
        LogExtent {
            log_start: 0,
            log_end: 450,
            checkpoint: None,
            last_stable_offset: 450,
            active_segment_base: 400,
            sealed,
        }
    }

    fn config() -> CompactionConfig {
        CompactionConfig {
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
            min_cleanable_dirty_ratio: 0.5,
        }
    }

    fn range_of(plan: CleanPlan) -> CleanRange {
        match plan {
            CleanPlan::Clean { range, .. } => range,
            CleanPlan::Wait(w) => panic!("expected a clean, got {w:?}"),
        }
    }

    #[test]
    fn a_never_cleaned_log_is_dirty_from_its_start() {
        let s = segments();
        let r = range_of(plan_cleaning(&log(&s), &config(), NOW));
        assert_eq!((r.first_dirty, r.end), (0, 400));
        assert_eq!((r.dirty_bytes, r.clean_bytes), (4_000, 0));
    }

    #[test]
    fn a_checkpoint_below_the_log_start_is_clamped_to_it() {
        assert_eq!(first_dirty_offset(50, 450, Some(10)), 50);
        assert_eq!(first_dirty_offset(50, 450, Some(120)), 120);
        assert_eq!(first_dirty_offset(50, 450, None), 50);
    }

    #[test]
    fn a_checkpoint_past_the_log_end_makes_the_whole_log_dirty() {
        assert_eq!(first_dirty_offset(50, 450, Some(451)), 50);
        assert_eq!(first_dirty_offset(50, 450, Some(450)), 450);
    }

    #[test]
    fn active_segment_is_never_cleaned() {
        let s = segments();
        let mut l = log(&s);
        l.last_stable_offset = 1_000;
        l.log_end = 1_000;
        let r = range_of(plan_cleaning(&l, &config(), NOW));
        assert_eq!(r.end, 400);
        // Only the active segment is dirty: nothing to do.
        l.checkpoint = Some(400);
        assert_eq!(
            plan_cleaning(&l, &config(), NOW),
            CleanPlan::Wait(WaitReason::NothingCleanable)
        );
    }

    #[test]
    fn open_transaction_bounds_the_cleanable_range() {
        let s = segments();
        let mut l = log(&s);
        l.last_stable_offset = 250;
        let r = range_of(plan_cleaning(&l, &config(), NOW));
        assert_eq!(
            r.end, 200,
            "rounded down to the base of the segment holding the LSO"
        );
        assert_eq!(r.dirty_bytes, 2_000);
    }

    #[test]
    fn the_uncleanable_bound_is_rounded_down_to_a_segment_base() {
        let s = segments();
        let l = log(&s);
        assert_eq!(round_down_to_segment_base(&l, 399), 300);
        assert_eq!(round_down_to_segment_base(&l, 300), 300);
        assert_eq!(round_down_to_segment_base(&l, 401), 400);
        assert_eq!(round_down_to_segment_base(&l, 0), 0);
    }

    #[test]
    fn an_lso_inside_the_first_dirty_segment_leaves_nothing_to_clean() {
        let s = segments();
        let mut l = log(&s);
        l.checkpoint = Some(150);
        l.last_stable_offset = 180;
        assert_eq!(
            plan_cleaning(&l, &config(), NOW),
            CleanPlan::Wait(WaitReason::NothingCleanable)
        );
    }

    #[test]
    fn min_compaction_lag_holds_back_recent_segments() {
        let s = segments();
        let l = log(&s);
        let mut c = config();
        // At 4500 with a lag of 1000, a segment whose newest record is
        // after 3500 is too young: segment 2 (newest 3999) and after.
        c.min_compaction_lag_ms = 1_000;
        assert_eq!(min_compaction_lag_bound(&l, 0, 1_000, 4_500), Some(200));
        let r = range_of(plan_cleaning(&l, &c, 4_500));
        assert_eq!(r.end, 200);
        // No lag, no bound.
        assert_eq!(min_compaction_lag_bound(&l, 0, 0, 4_500), None);
    }

    #[test]
    fn min_compaction_lag_looks_only_from_the_first_dirty_segment() {
        let mut s = segments();
        s[0].max_timestamp = NOW; // young, but already clean
        let l = log(&s);
        assert_eq!(min_compaction_lag_bound(&l, 100, 1_000, NOW), None);
        assert_eq!(min_compaction_lag_bound(&l, 0, 1_000, NOW), Some(0));
    }

    #[test]
    fn dirty_ratio_below_minimum_waits() {
        let s = segments();
        let mut l = log(&s);
        l.checkpoint = Some(300); // 3000 clean, 1000 dirty: 0.25
        assert_eq!(
            plan_cleaning(&l, &config(), NOW),
            CleanPlan::Wait(WaitReason::DirtyRatioBelowMinimum { ratio: 0.25 })
        );
    }

    #[test]
    fn dirty_ratio_must_exceed_the_minimum_not_just_reach_it() {
        let s = segments();
        let mut l = log(&s);
        l.checkpoint = Some(200); // 2000 clean, 2000 dirty: exactly 0.5
        assert_eq!(
            plan_cleaning(&l, &config(), NOW),
            CleanPlan::Wait(WaitReason::DirtyRatioBelowMinimum { ratio: 0.5 })
        );
        l.checkpoint = Some(100);
        assert_eq!(
            plan_cleaning(&l, &config(), NOW),
            CleanPlan::Clean {
                range: CleanRange {
                    first_dirty: 100,
                    end: 400,
                    dirty_bytes: 3_000,
                    clean_bytes: 1_000
                },
                reason: CleanReason::DirtyRatio { ratio: 0.75 }
            }
        );
    }

    #[test]
    fn a_first_dirty_offset_inside_a_segment_counts_it_as_dirty() {
        let s = segments();
        let mut l = log(&s);
        l.checkpoint = Some(150);
        let r = range_of(plan_cleaning(&l, &config(), NOW));
        assert_eq!((r.first_dirty, r.end), (150, 400));
        assert_eq!(r.dirty_bytes, 3_000);
        assert_eq!(
            r.clean_bytes, 2_000,
            "Kafka counts the straddled segment in both"
        );
    }

    #[test]
    fn max_compaction_lag_forces_cleaning() {
        let s = segments();
        let mut l = log(&s);
        l.checkpoint = Some(300); // ratio 0.25: would wait
        let mut c = config();
        c.max_compaction_lag_ms = 10_000;
        // Segment 3's first batch is at 4000; now - lag = 15000 - 10000.
        assert_eq!(
            plan_cleaning(&l, &c, 15_000),
            CleanPlan::Clean {
                range: CleanRange {
                    first_dirty: 300,
                    end: 400,
                    dirty_bytes: 1_000,
                    clean_bytes: 3_000
                },
                reason: CleanReason::MaxCompactionLag { overdue_ms: 1_000 }
            }
        );
        // Not yet overdue.
        assert!(matches!(
            plan_cleaning(&l, &c, 14_000),
            CleanPlan::Wait(WaitReason::DirtyRatioBelowMinimum { .. })
        ));
    }

    #[test]
    fn max_compaction_lag_ignores_unknown_timestamps_and_clean_segments() {
        let mut s = segments();
        s[3].first_batch_timestamp = -1;
        let l = log(&s);
        assert_eq!(max_compaction_lag_overdue(&l, 300, 1, NOW), None);
        assert_eq!(
            max_compaction_lag_overdue(&l, 200, 1, NOW),
            Some(NOW - 1 - 3_000)
        );
    }

    #[test]
    fn max_compaction_lag_does_not_clean_what_min_lag_holds_back() {
        let s = segments();
        let mut l = log(&s);
        l.checkpoint = Some(300);
        let c = CompactionConfig {
            min_compaction_lag_ms: 1_000_000,
            max_compaction_lag_ms: 1,
            min_cleanable_dirty_ratio: 0.5,
        };
        assert_eq!(
            plan_cleaning(&l, &c, 10_000),
            CleanPlan::Wait(WaitReason::NothingCleanable)
        );
    }

    #[test]
    fn an_empty_log_has_nothing_to_clean() {
        let l = LogExtent {
            log_start: 0,
            log_end: 0,
            checkpoint: None,
            last_stable_offset: 0,
            active_segment_base: 0,
            sealed: &[],
        };
        assert_eq!(
            plan_cleaning(&l, &config(), NOW),
            CleanPlan::Wait(WaitReason::NothingCleanable)
        );
    }
}
