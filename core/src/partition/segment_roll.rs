//! When the active segment of a partition log rolls: the rule Kafka applies
//! before every append (its `LogSegment.shouldRoll`), as a pure function of
//! the segment, the incoming batch, the topic's settings and the time.
//!
//! A non-empty active segment is sealed and a new one started before an
//! append when any of these holds:
//!
//! - **size**: the batch would take the segment past `segment.bytes`;
//! - **time**: the segment has waited longer than `segment.ms` less its
//!   jitter. How long it has waited is judged by record timestamps when
//!   the segment's first batch has one (the incoming batch's max timestamp
//!   minus the first batch's), else by the broker's clock (now minus when
//!   the segment was created);
//! - **offsets**: the batch's last offset is past what the segment index's
//!   32-bit relative offsets can address.
//!
//! An empty segment never rolls: an oversized batch still lands somewhere,
//! and a segment holds at least one batch.
//!
//! Kafka draws each segment's jitter at random in
//! `[0, min(segment.jitter.ms, segment.ms))` when it creates the segment.
//! Here there is no randomness that is not passed in: the jitter is a fixed
//! hash of a seed the caller gives (the driver uses the partition's
//! directory name) and the segment's base offset ([`roll_jitter_ms`]), so
//! it is the same at every check of a segment, differs from segment to
//! segment and from partition to partition, and replays exactly in the
//! simulator.

/// The topic settings the rule reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RollSettings {
    /// `segment.bytes`.
    pub segment_bytes: u64,
    /// `segment.ms` (Kafka's broker default `log.roll.ms`, 7 days).
    pub segment_ms: i64,
    /// `segment.jitter.ms` (0 by default: no jitter).
    pub segment_jitter_ms: i64,
}

impl Default for RollSettings {
    fn default() -> Self {
        RollSettings {
            segment_bytes: 1 << 30,
            segment_ms: DEFAULT_SEGMENT_MS,
            segment_jitter_ms: 0,
        }
    }
}

/// Kafka's `segment.ms` default (`log.roll.hours` = 168).
pub const DEFAULT_SEGMENT_MS: i64 = 7 * 24 * 60 * 60 * 1000;

/// What the rule needs to know of the active segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActiveSegment {
    /// Bytes in it (written, plus any the same append placed before this
    /// batch).
    pub size: u64,
    /// The max timestamp of its first batch, if it has one.
    pub first_batch_timestamp: Option<i64>,
    /// When the broker created (or opened) it, by the broker's clock.
    pub created_ms: i64,
    /// Its jitter ([`roll_jitter_ms`]).
    pub jitter_ms: i64,
}

/// What the rule needs to know of the incoming batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IncomingBatch {
    pub size: u64,
    /// The batch's max timestamp (-1 when it carries none).
    pub max_timestamp: i64,
    /// Whether its last offset still fits the segment's index.
    pub offsets_fit: bool,
}

/// Why a segment rolls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RollReason {
    Size,
    Time,
    Offsets,
}

/// Whether `segment` must roll before `batch` is appended, and why; `None`
/// when the batch goes into it.
pub fn roll_reason(
    segment: &ActiveSegment,
    batch: &IncomingBatch,
    settings: &RollSettings,
    now_ms: i64,
) -> Option<RollReason> {
    if segment.size == 0 {
        return None;
    }
    if segment.size.saturating_add(batch.size) > settings.segment_bytes {
        return Some(RollReason::Size);
    }
    let waited = time_waited_for_roll(segment, batch.max_timestamp, now_ms);
    if waited > settings.segment_ms.saturating_sub(segment.jitter_ms) {
        return Some(RollReason::Time);
    }
    if !batch.offsets_fit {
        return Some(RollReason::Offsets);
    }
    None
}

/// How long `segment` has waited to roll, as Kafka judges it: by record
/// timestamps when its first batch carries one (`>= 0`), so a log replayed
/// or produced with old timestamps rolls as its records' times say; else by
/// the broker's clock since the segment was created.
pub fn time_waited_for_roll(
    segment: &ActiveSegment,
    incoming_max_timestamp: i64,
    now_ms: i64,
) -> i64 {
    match segment.first_batch_timestamp {
        Some(first) if first >= 0 => incoming_max_timestamp.saturating_sub(first),
        _ => now_ms.saturating_sub(segment.created_ms),
    }
}

/// The jitter of the segment at `base_offset` in `[0, min(jitter_ms,
/// segment_ms))`, 0 when `jitter_ms` is 0: a fixed hash of `seed` (the
/// partition's) and the base offset, standing in for Kafka's random draw.
pub fn roll_jitter_ms(seed: u64, base_offset: i64, segment_ms: i64, jitter_ms: i64) -> i64 {
    let bound = jitter_ms.min(segment_ms);
    if bound <= 0 {
        return 0;
    }
    // splitmix64's finaliser: every bit of the inputs moves the result.
    let mut x = seed ^ (base_offset as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 31;
    (x % bound as u64) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: i64 = 3_600_000;
    /// A realistic clock: 2026-01-01.
    const NOW: i64 = 1_767_225_600_000;

    fn settings(segment_ms: i64) -> RollSettings {
        RollSettings {
            segment_bytes: 1000,
            segment_ms,
            segment_jitter_ms: 0,
        }
    }

    fn segment(size: u64, first: Option<i64>, created_ms: i64) -> ActiveSegment {
        ActiveSegment {
            size,
            first_batch_timestamp: first,
            created_ms,
            jitter_ms: 0,
        }
    }

    fn batch(size: u64, max_timestamp: i64) -> IncomingBatch {
        IncomingBatch {
            size,
            max_timestamp,
            offsets_fit: true,
        }
    }

    #[test]
    fn an_empty_segment_never_rolls() {
        let s = segment(0, None, 0);
        let huge = IncomingBatch {
            size: 1 << 40,
            max_timestamp: NOW + 100 * HOUR,
            offsets_fit: false,
        };
        assert_eq!(roll_reason(&s, &huge, &settings(1), NOW + 100 * HOUR), None);
    }

    #[test]
    fn a_batch_that_would_pass_segment_bytes_rolls_the_segment() {
        let s = segment(900, Some(NOW), NOW);
        assert_eq!(
            roll_reason(&s, &batch(100, NOW), &settings(HOUR), NOW),
            None,
            "exactly full"
        );
        assert_eq!(
            roll_reason(&s, &batch(101, NOW), &settings(HOUR), NOW),
            Some(RollReason::Size)
        );
    }

    #[test]
    fn time_is_judged_by_record_timestamps_when_the_first_batch_has_one() {
        let s = segment(10, Some(NOW), NOW);
        let cfg = settings(HOUR);
        // The broker's clock is far ahead, but the records say an hour
        // exactly has passed: not more than segment.ms, no roll.
        assert_eq!(
            roll_reason(&s, &batch(10, NOW + HOUR), &cfg, NOW + 10 * HOUR),
            None
        );
        assert_eq!(
            roll_reason(&s, &batch(10, NOW + HOUR + 1), &cfg, NOW),
            Some(RollReason::Time),
            "the records' times roll it even though the clock has not moved"
        );
    }

    #[test]
    fn a_batch_stamped_long_after_old_records_rolls_the_segment() {
        // What took the first attempt back: test records stamped at 1970
        // (1000 ms), then a marker stamped with the broker's clock. Kafka
        // rolls here too; tests must use realistic timestamps.
        let s = segment(10, Some(1000), NOW);
        assert_eq!(
            roll_reason(&s, &batch(10, NOW), &RollSettings::default(), NOW),
            Some(RollReason::Time)
        );
    }

    #[test]
    fn time_is_judged_by_the_clock_when_the_first_batch_has_no_timestamp() {
        let cfg = settings(HOUR);
        for first in [None, Some(-1)] {
            let s = segment(10, first, NOW);
            assert_eq!(
                roll_reason(&s, &batch(10, NOW + 5 * HOUR), &cfg, NOW + HOUR),
                None
            );
            assert_eq!(
                roll_reason(&s, &batch(10, -1), &cfg, NOW + HOUR + 1),
                Some(RollReason::Time)
            );
        }
    }

    #[test]
    fn a_batch_older_than_the_first_never_rolls_by_time() {
        let s = segment(10, Some(NOW), NOW);
        assert_eq!(
            roll_reason(&s, &batch(10, NOW - 10 * HOUR), &settings(1), NOW),
            None
        );
        assert_eq!(roll_reason(&s, &batch(10, -1), &settings(1), NOW), None);
    }

    #[test]
    fn jitter_shortens_the_wait() {
        let mut s = segment(10, Some(NOW), NOW);
        s.jitter_ms = 600_000;
        let cfg = settings(HOUR);
        assert_eq!(
            roll_reason(&s, &batch(10, NOW + HOUR - 600_000), &cfg, NOW),
            None
        );
        assert_eq!(
            roll_reason(&s, &batch(10, NOW + HOUR - 599_999), &cfg, NOW),
            Some(RollReason::Time)
        );
    }

    #[test]
    fn offsets_the_index_cannot_address_roll_the_segment() {
        let s = segment(10, Some(NOW), NOW);
        let b = IncomingBatch {
            size: 10,
            max_timestamp: NOW,
            offsets_fit: false,
        };
        assert_eq!(
            roll_reason(&s, &b, &settings(HOUR), NOW),
            Some(RollReason::Offsets)
        );
    }

    #[test]
    fn jitter_is_below_both_bounds_fixed_per_segment_and_varies() {
        assert_eq!(roll_jitter_ms(7, 0, HOUR, 0), 0, "no jitter configured");
        let mut seen = std::collections::BTreeSet::new();
        for base in 0..200 {
            let j = roll_jitter_ms(7, base * 1000, HOUR, 60_000);
            assert!((0..60_000).contains(&j), "{j}");
            assert_eq!(
                j,
                roll_jitter_ms(7, base * 1000, HOUR, 60_000),
                "deterministic"
            );
            seen.insert(j);
            let capped = roll_jitter_ms(7, base * 1000, 100, 60_000);
            assert!(
                (0..100).contains(&capped),
                "bounded by segment.ms too: {capped}"
            );
        }
        assert!(
            seen.len() > 150,
            "segments draw different jitters: {}",
            seen.len()
        );
        assert_ne!(
            roll_jitter_ms(1, 0, HOUR, 60_000),
            roll_jitter_ms(2, 0, HOUR, 60_000),
            "partitions with the same base offset differ"
        );
    }
}
