//! The history of a run and the rules it must satisfy.
//!
//! Workload actors report what they sent, what the broker acknowledged
//! (record -> partition, offset) and what fetches returned while faults
//! were running. At the end, the final read of every partition is checked
//! against all of it. Pure bookkeeping, so it is unit-tested without madsim.
//!
//! Rules (a plain, non-idempotent producer with acks=all):
//! - an acknowledged record is in the final log at exactly the offset its
//!   produce response reported;
//! - the final log's offsets are dense from 0: no holes, no offset twice;
//! - an offset never maps to two different records, whoever reported them
//!   (two acks, an ack and a fetch, two fetches, a fetch and the final log):
//!   fetches only return durable data, so what a consumer saw is never taken
//!   back;
//! - the high watermark never goes below what was already known durable
//!   (an acknowledged offset, or an earlier high watermark);
//! - every record in the log is one a producer sent.
//!
//! Records that were never acknowledged may be present or absent, and a
//! retried produce may be present more than once: both are allowed without
//! idempotence.

use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};

/// What the final read of one partition returned, offset order.
pub type PartitionLog = Vec<(i64, Bytes)>;

/// Counters for the report and the vacuity gates.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HistoryStats {
    pub batches_sent: u64,
    pub records_sent: u64,
    pub batches_acked: u64,
    pub records_acked: u64,
    pub produce_errors: u64,
    pub produce_retries: u64,
    pub batches_abandoned: u64,
    pub fetches: u64,
    pub records_fetched: u64,
    pub fetch_errors: u64,
}

/// Everything the workload observed.
#[derive(Debug, Default)]
pub struct History {
    sent: BTreeSet<Bytes>,
    /// (partition, offset) -> record, from produce acknowledgements.
    acked: BTreeMap<(i32, i64), Bytes>,
    /// (partition, offset) -> record, from fetches during the run.
    observed: BTreeMap<(i32, i64), Bytes>,
    /// Per partition, the highest offset known durable plus one.
    durable_end: BTreeMap<i32, i64>,
    violations: Vec<String>,
    pub stats: HistoryStats,
}

/// Why a value does not map to a record we sent.
fn show(value: &Bytes) -> String {
    String::from_utf8_lossy(value).into_owned()
}

impl History {
    pub fn new() -> History {
        History::default()
    }

    /// A rule broken while the run is going (reported at the end).
    pub fn violation(&mut self, message: String) {
        self.violations.push(message);
    }

    pub fn violations(&self) -> &[String] {
        &self.violations
    }

    /// A batch is about to be produced (first attempt).
    pub fn sent(&mut self, values: &[Bytes]) {
        self.stats.batches_sent += 1;
        self.stats.records_sent += values.len() as u64;
        self.sent.extend(values.iter().cloned());
    }

    /// Checks `value` at `(partition, offset)` against every earlier claim
    /// about that offset.
    fn claim(&mut self, partition: i32, offset: i64, value: &Bytes, source: &str) {
        let key = (partition, offset);
        for (what, map) in [("acknowledged", &self.acked), ("fetched", &self.observed)] {
            if let Some(earlier) = map.get(&key) {
                if earlier != value {
                    self.violations.push(format!(
                        "partition {partition} offset {offset}: {source} {} but earlier {what} {}",
                        show(value),
                        show(earlier)
                    ));
                }
            }
        }
        if !self.sent.contains(value) {
            self.violations.push(format!(
                "partition {partition} offset {offset}: {source} a record nobody sent: {:?}",
                show(value)
            ));
        }
    }

    fn raise_durable_end(&mut self, partition: i32, end: i64) {
        let e = self.durable_end.entry(partition).or_insert(0);
        *e = (*e).max(end);
    }

    /// The broker acknowledged `values` (one batch) at `base_offset`.
    pub fn acked(&mut self, partition: i32, base_offset: i64, values: &[Bytes]) {
        if base_offset < 0 {
            self.violations.push(format!(
                "partition {partition}: produce succeeded with base offset {base_offset}"
            ));
            return;
        }
        self.stats.batches_acked += 1;
        self.stats.records_acked += values.len() as u64;
        for (i, value) in values.iter().enumerate() {
            let offset = base_offset + i as i64;
            self.claim(partition, offset, value, "acknowledged");
            self.acked.insert((partition, offset), value.clone());
        }
        self.raise_durable_end(partition, base_offset + values.len() as i64);
    }

    /// The offset below which a fetch sent now must find everything: the
    /// high watermark in its response may not be lower.
    pub fn fetch_floor(&self, partition: i32) -> i64 {
        self.durable_end.get(&partition).copied().unwrap_or(0)
    }

    /// A fetch sent when `fetch_floor` was `floor` returned `high_watermark`
    /// and `records`.
    pub fn fetched(
        &mut self,
        partition: i32,
        floor: i64,
        high_watermark: i64,
        records: &[(i64, Bytes)],
    ) {
        self.stats.fetches += 1;
        self.stats.records_fetched += records.len() as u64;
        if high_watermark < floor {
            self.violations.push(format!(
                "partition {partition}: high watermark {high_watermark} below {floor}, which was already durable"
            ));
        }
        for (offset, value) in records {
            if *offset >= high_watermark {
                self.violations.push(format!(
                    "partition {partition} offset {offset}: fetched at or above the high watermark {high_watermark}"
                ));
            }
            self.claim(partition, *offset, value, "fetched");
            self.observed.insert((partition, *offset), value.clone());
        }
        self.raise_durable_end(partition, high_watermark);
    }

    /// Number of acknowledged records.
    pub fn acked_records(&self) -> usize {
        self.acked.len()
    }

    /// Checks the final read of every partition against the history.
    /// Returns every violation, those found during the run included.
    pub fn check_final(&self, partitions: i32, logs: &BTreeMap<i32, PartitionLog>) -> Vec<String> {
        let mut violations = self.violations.clone();
        let empty = PartitionLog::new();
        for partition in 0..partitions {
            let log = logs.get(&partition).unwrap_or(&empty);
            let mut by_offset = BTreeMap::new();
            for (expected, (offset, value)) in log.iter().enumerate() {
                if *offset != expected as i64 {
                    violations.push(format!(
                        "partition {partition}: record {expected} of the final log has offset {offset} (offsets must be dense from 0)"
                    ));
                    break;
                }
                by_offset.insert(*offset, value);
            }
            for (offset, value) in log {
                if !self.sent.contains(value) {
                    violations.push(format!(
                        "partition {partition} offset {offset}: final log holds a record nobody sent: {:?}",
                        show(value)
                    ));
                }
            }
            let end = self.durable_end.get(&partition).copied().unwrap_or(0);
            if (log.len() as i64) < end {
                violations.push(format!(
                    "partition {partition}: final log ends at {} but offsets up to {end} were durable",
                    log.len()
                ));
            }
            for (what, map) in [("acknowledged", &self.acked), ("fetched", &self.observed)] {
                for ((_, offset), value) in map.range((partition, i64::MIN)..=(partition, i64::MAX))
                {
                    match by_offset.get(offset) {
                        Some(found) if *found == value => {}
                        Some(found) => violations.push(format!(
                            "partition {partition} offset {offset}: {what} {} but the final log has {}",
                            show(value),
                            show(found)
                        )),
                        None => violations.push(format!(
                            "partition {partition} offset {offset}: {what} {} is missing from the final log",
                            show(value)
                        )),
                    }
                }
            }
        }
        // Keep failure output readable; the first few say what happened.
        if violations.len() > 20 {
            let more = violations.len() - 20;
            violations.truncate(20);
            violations.push(format!("... and {more} more"));
        }
        violations
    }

    /// A summary of the final logs: number of records, and how many were
    /// duplicates (the same record at two offsets).
    pub fn summarize(logs: &BTreeMap<i32, PartitionLog>) -> (usize, usize) {
        let mut seen = BTreeSet::new();
        let mut total = 0;
        let mut duplicates = 0;
        for log in logs.values() {
            for (_, value) in log {
                total += 1;
                if !seen.insert(value.clone()) {
                    duplicates += 1;
                }
            }
        }
        (total, duplicates)
    }

    /// A fingerprint of the final logs and the history, equal between two
    /// runs of one seed iff they behaved the same (the determinism check).
    pub fn fingerprint(&self, logs: &BTreeMap<i32, PartitionLog>) -> u64 {
        // Fixed keys: the same in every run of one build.
        let mut h = std::hash::DefaultHasher::new();
        logs.hash(&mut h);
        self.acked.hash(&mut h);
        self.observed.hash(&mut h);
        format!("{:?}", self.stats).hash(&mut h);
        h.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    fn log(values: &[&str]) -> PartitionLog {
        values
            .iter()
            .enumerate()
            .map(|(i, v)| (i as i64, b(v)))
            .collect()
    }

    fn history_with(values: &[&str]) -> History {
        let mut h = History::new();
        h.sent(&values.iter().map(|v| b(v)).collect::<Vec<_>>());
        h
    }

    #[test]
    fn a_clean_run_passes_and_duplicates_of_unacked_retries_are_allowed() {
        let mut h = history_with(&["a", "b", "c"]);
        h.acked(0, 0, &[b("a"), b("b")]);
        h.fetched(0, 0, 2, &[(0, b("a")), (1, b("b"))]);
        // "c" was retried after a lost response: it is there twice.
        let logs = BTreeMap::from([(0, log(&["a", "b", "c", "c"]))]);
        assert_eq!(h.check_final(1, &logs), Vec::<String>::new());
        assert_eq!(History::summarize(&logs), (4, 1));
    }

    #[test]
    fn a_lost_acknowledged_record_fails() {
        let mut h = history_with(&["a", "b"]);
        h.acked(0, 0, &[b("a"), b("b")]);
        let v = h.check_final(1, &BTreeMap::from([(0, log(&["a"]))]));
        assert!(v.iter().any(|m| m.contains("missing")), "{v:?}");
    }

    #[test]
    fn an_acknowledged_record_at_another_offset_fails() {
        let mut h = history_with(&["a", "b"]);
        h.acked(0, 1, &[b("a")]);
        let v = h.check_final(1, &BTreeMap::from([(0, log(&["a", "b"]))]));
        assert!(
            v.iter()
                .any(|m| m.contains("offset 1: acknowledged a but the final log has b")),
            "{v:?}"
        );
    }

    #[test]
    fn holes_and_reused_offsets_fail() {
        let h = history_with(&["a", "b"]);
        let hole = BTreeMap::from([(0, vec![(0, b("a")), (2, b("b"))])]);
        assert!(h.check_final(1, &hole).iter().any(|m| m.contains("dense")));
        let twice = BTreeMap::from([(0, vec![(0, b("a")), (0, b("b"))])]);
        assert!(h.check_final(1, &twice).iter().any(|m| m.contains("dense")));
    }

    #[test]
    fn a_fetched_record_contradicted_later_fails() {
        let mut h = history_with(&["a", "b"]);
        h.fetched(0, 0, 1, &[(0, b("a"))]);
        h.fetched(0, 1, 1, &[(0, b("b"))]);
        assert!(h
            .violations()
            .iter()
            .any(|m| m.contains("earlier fetched a")));
        let mut h = history_with(&["a", "b"]);
        h.fetched(0, 0, 1, &[(0, b("a"))]);
        let v = h.check_final(1, &BTreeMap::from([(0, log(&["b"]))]));
        assert!(
            v.iter()
                .any(|m| m.contains("fetched a but the final log has b")),
            "{v:?}"
        );
    }

    #[test]
    fn two_acks_for_one_offset_fail() {
        let mut h = history_with(&["a", "b"]);
        h.acked(0, 0, &[b("a")]);
        h.acked(0, 0, &[b("b")]);
        assert!(h
            .violations()
            .iter()
            .any(|m| m.contains("earlier acknowledged a")));
    }

    #[test]
    fn high_watermark_going_back_fails() {
        let mut h = history_with(&["a", "b"]);
        h.acked(0, 0, &[b("a"), b("b")]);
        let floor = h.fetch_floor(0);
        assert_eq!(floor, 2);
        h.fetched(0, floor, 1, &[]);
        assert!(h
            .violations()
            .iter()
            .any(|m| m.contains("high watermark 1 below 2")));
    }

    #[test]
    fn records_nobody_sent_and_short_final_logs_fail() {
        let mut h = history_with(&["a"]);
        h.fetched(0, 0, 2, &[]);
        let v = h.check_final(1, &BTreeMap::from([(0, log(&["zz"]))]));
        assert!(v.iter().any(|m| m.contains("nobody sent")), "{v:?}");
        assert!(
            v.iter()
                .any(|m| m.contains("ends at 1 but offsets up to 2")),
            "{v:?}"
        );
    }

    #[test]
    fn fingerprint_depends_on_the_logs() {
        let h = history_with(&["a", "b"]);
        let one = BTreeMap::from([(0, log(&["a"]))]);
        let two = BTreeMap::from([(0, log(&["b"]))]);
        assert_eq!(h.fingerprint(&one), h.fingerprint(&one));
        assert_ne!(h.fingerprint(&one), h.fingerprint(&two));
    }
}
