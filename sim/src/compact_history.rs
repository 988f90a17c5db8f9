//! The history of the compacted-topic workload and the rules it must satisfy.
//!
//! A keyed producer reports every record a broker acknowledged (offset, key,
//! value, a null value being a tombstone); a reader reports full reads of
//! the partition, each from the log start it was given up to the end it
//! reached. The cleaner may remove records between reads, so a read is
//! allowed gaps — but only where compaction may make them. Pure
//! bookkeeping, unit-tested without madsim.
//!
//! Rules:
//! - offsets in a read strictly increase and lie inside the read's range;
//! - an offset never changes its contents: every read of offset O, and the
//!   acknowledgement of O, give the same key and value;
//! - a known record (acknowledged, or seen in any read) inside a read's
//!   range is absent from it only if it is a tombstone (which may vanish
//!   once `delete.retention.ms` passed) or a later record of the same key,
//!   known the same way, lies below the high watermark the read last saw —
//!   only superseded records may be cleaned, and only by a record the
//!   cleaner could see (it cleans below the high watermark, which only
//!   grows). A read cut short ends below that high watermark: a record of
//!   it may be gone for a later one past its end.
//!   So a key's latest acknowledged non-tombstone record is in every read
//!   that reaches it, and acknowledged data is never otherwise lost.

use bytes::Bytes;
use std::collections::BTreeMap;

/// The topic the compacted workload writes (created with
/// `cleanup.policy=compact` and the seed's cleaner configs).
pub const COMPACT_TOPIC: &str = "simcompact";

/// One record: its key and value (`None`: a tombstone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyedRecord {
    pub key: Bytes,
    pub value: Option<Bytes>,
}

/// One full read of the partition: the records returned, in order, from
/// `start` (the log start offset the read began at) up to `end` (the offset
/// after the last one the read covered, e.g. the high watermark).
#[derive(Debug, Clone, Default)]
pub struct FullRead {
    pub start: i64,
    pub end: i64,
    /// The highest high watermark the read's answers named: every cleaning
    /// whose result it read stopped below it.
    pub high_watermark: i64,
    pub records: Vec<(i64, KeyedRecord)>,
}

/// What the checker counted, for the seed summary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompactStats {
    pub acked: u64,
    pub reads: u64,
    /// Reads that missed at least one known record below their end: proof
    /// the cleaner ran (removal is the only way a gap is allowed).
    pub reads_with_gaps: u64,
    /// Known records absent from some read.
    pub removed: u64,
}

#[derive(Debug, Default)]
pub struct CompactHistory {
    acked: BTreeMap<i64, KeyedRecord>,
    reads: Vec<FullRead>,
    violations: Vec<String>,
}

impl CompactHistory {
    pub fn violation(&mut self, message: String) {
        self.violations.push(message);
    }

    pub fn violations(&self) -> &[String] {
        &self.violations
    }

    /// A broker acknowledged `record` at `offset` (acks=all).
    pub fn acked(&mut self, offset: i64, record: KeyedRecord) {
        if let Some(earlier) = self.acked.get(&offset) {
            if *earlier != record {
                let message = format!(
                    "compact: offset {offset} acknowledged twice, as {earlier:?} and {record:?}"
                );
                self.violation(message);
            }
            return;
        }
        self.acked.insert(offset, record);
    }

    /// A full read finished.
    pub fn read(&mut self, read: FullRead) {
        self.reads.push(read);
    }

    /// Every rule over everything reported; returns what was counted.
    pub fn check(&mut self) -> CompactStats {
        let mut stats = CompactStats {
            acked: self.acked.len() as u64,
            reads: self.reads.len() as u64,
            ..CompactStats::default()
        };
        let mut problems = Vec::new();
        // Every record known by offset: the acks first, then what reads
        // returned, each checked against what was already known there.
        let mut known = self.acked.clone();
        for (i, read) in self.reads.iter().enumerate() {
            let mut previous: Option<i64> = None;
            for (offset, record) in &read.records {
                if previous.is_some_and(|p| *offset <= p) {
                    problems.push(format!(
                        "compact: read {i} goes from offset {} to {offset}",
                        previous.unwrap_or_default()
                    ));
                }
                previous = Some(*offset);
                if *offset < read.start || *offset >= read.end {
                    problems.push(format!(
                        "compact: read {i} returned offset {offset} outside [{}, {})",
                        read.start, read.end
                    ));
                }
                match known.get(offset) {
                    Some(k) if k != record => problems.push(format!(
                        "compact: offset {offset} changed: known as {k:?}, read {i} gave {record:?}"
                    )),
                    Some(_) => {}
                    None => {
                        known.insert(*offset, record.clone());
                    }
                }
            }
        }
        // Per key, the offsets of its known records, ascending.
        let mut by_key: BTreeMap<&Bytes, Vec<i64>> = BTreeMap::new();
        for (offset, record) in &known {
            by_key.entry(&record.key).or_default().push(*offset);
        }
        for (i, read) in self.reads.iter().enumerate() {
            let present: std::collections::BTreeSet<i64> =
                read.records.iter().map(|(o, _)| *o).collect();
            let mut gap = false;
            for (offset, record) in known.range(read.start..read.end) {
                if present.contains(offset) {
                    continue;
                }
                gap = true;
                stats.removed += 1;
                if record.value.is_none() {
                    continue;
                }
                let bound = read.high_watermark.max(read.end);
                let superseded = by_key
                    .get(&record.key)
                    .is_some_and(|offsets| offsets.iter().any(|o| o > offset && *o < bound));
                if !superseded {
                    problems.push(format!(
                        "compact: read {i} of [{}, {}) (high watermark {bound}) lost offset {offset} ({record:?}), \
                         the latest record of its key below that high watermark",
                        read.start, read.end
                    ));
                }
            }
            if gap {
                stats.reads_with_gaps += 1;
            }
        }
        self.violations.extend(problems);
        stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(key: &str, value: Option<&str>) -> KeyedRecord {
        KeyedRecord {
            key: Bytes::copy_from_slice(key.as_bytes()),
            value: value.map(|v| Bytes::copy_from_slice(v.as_bytes())),
        }
    }

    fn read(start: i64, end: i64, records: &[(i64, KeyedRecord)]) -> FullRead {
        FullRead {
            start,
            end,
            high_watermark: end,
            records: records.to_vec(),
        }
    }

    /// a@0, b@1, a@2, b@3 (tombstone), c@4: the history every test varies.
    fn history() -> CompactHistory {
        let mut h = CompactHistory::default();
        h.acked(0, rec("a", Some("a0")));
        h.acked(1, rec("b", Some("b1")));
        h.acked(2, rec("a", Some("a2")));
        h.acked(3, rec("b", None));
        h.acked(4, rec("c", Some("c4")));
        h
    }

    #[test]
    fn a_cleaned_read_and_a_full_read_pass() {
        let mut h = history();
        h.read(read(
            0,
            5,
            &[
                (0, rec("a", Some("a0"))),
                (1, rec("b", Some("b1"))),
                (2, rec("a", Some("a2"))),
                (3, rec("b", None)),
                (4, rec("c", Some("c4"))),
            ],
        ));
        // Cleaned: a@0 and b@1 superseded, the tombstone b@3 past retention.
        h.read(read(
            0,
            5,
            &[(2, rec("a", Some("a2"))), (4, rec("c", Some("c4")))],
        ));
        let stats = h.check();
        assert!(h.violations().is_empty(), "{:?}", h.violations());
        assert_eq!(stats.reads, 2);
        assert_eq!(stats.reads_with_gaps, 1);
        assert_eq!(stats.removed, 3);
    }

    #[test]
    fn the_latest_record_of_a_key_never_vanishes() {
        let mut h = history();
        h.read(read(
            0,
            5,
            &[(2, rec("a", Some("a2"))), (3, rec("b", None))],
        ));
        h.check();
        assert_eq!(h.violations().len(), 1, "{:?}", h.violations());
        assert!(h.violations()[0].contains("lost offset 4"));
    }

    #[test]
    fn a_record_is_removed_only_for_a_later_one_below_the_high_watermark() {
        let mut h = history();
        // a@2 supersedes a@0, but this read ends at the high watermark 2:
        // the cleaner could not have seen a@2, so a@0 must still be there.
        h.read(read(0, 2, &[(1, rec("b", Some("b1")))]));
        h.check();
        assert_eq!(h.violations().len(), 1, "{:?}", h.violations());
        assert!(h.violations()[0].contains("lost offset 0"));
    }

    /// Found by the simulator: a read cut short at offset 20 missed a@0,
    /// rightly, since a later record of its key lay past 20 but below the
    /// high watermark the cleaner had cleaned up to.
    #[test]
    fn a_read_cut_short_may_miss_a_record_superseded_past_its_end() {
        let mut h = history();
        let mut cut = read(0, 2, &[(1, rec("b", Some("b1")))]);
        cut.high_watermark = 5;
        h.read(cut);
        let stats = h.check();
        assert!(h.violations().is_empty(), "{:?}", h.violations());
        assert_eq!(stats.removed, 1);
        // Past the high watermark it saw, a later record excuses nothing.
        let mut h = history();
        let mut cut = read(0, 2, &[(1, rec("b", Some("b1")))]);
        cut.high_watermark = 2;
        h.read(cut);
        h.check();
        assert_eq!(h.violations().len(), 1, "{:?}", h.violations());
    }

    #[test]
    fn an_offset_never_changes_its_contents() {
        let mut h = history();
        h.read(read(4, 5, &[(4, rec("c", Some("other")))]));
        h.check();
        assert_eq!(h.violations().len(), 1, "{:?}", h.violations());
        assert!(h.violations()[0].contains("offset 4 changed"));
    }

    #[test]
    fn reads_agree_with_each_other_on_unacknowledged_records() {
        let mut h = CompactHistory::default();
        h.read(read(0, 1, &[(0, rec("x", Some("x0")))]));
        h.read(read(0, 1, &[(0, rec("x", Some("x1")))]));
        h.check();
        assert_eq!(h.violations().len(), 1, "{:?}", h.violations());
        // And a seen-but-unacknowledged latest record must not vanish.
        let mut h = CompactHistory::default();
        h.read(read(0, 1, &[(0, rec("x", Some("x0")))]));
        h.read(read(0, 1, &[]));
        h.check();
        assert_eq!(h.violations().len(), 1, "{:?}", h.violations());
    }

    #[test]
    fn offsets_in_a_read_strictly_increase() {
        let mut h = history();
        h.read(read(
            0,
            5,
            &[
                (2, rec("a", Some("a2"))),
                (4, rec("c", Some("c4"))),
                (4, rec("c", Some("c4"))),
            ],
        ));
        h.check();
        assert!(
            h.violations()
                .iter()
                .any(|v| v.contains("from offset 4 to 4")),
            "{:?}",
            h.violations()
        );
    }

    #[test]
    fn a_read_stays_inside_its_range() {
        let mut h = history();
        h.read(read(
            0,
            3,
            &[(2, rec("a", Some("a2"))), (4, rec("c", Some("c4")))],
        ));
        h.check();
        assert!(
            h.violations().iter().any(|v| v.contains("outside [0, 3)")),
            "{:?}",
            h.violations()
        );
    }

    #[test]
    fn an_offset_acknowledged_twice_differently_is_caught() {
        let mut h = history();
        h.acked(4, rec("c", Some("c5")));
        assert_eq!(h.violations().len(), 1, "{:?}", h.violations());
    }
}
