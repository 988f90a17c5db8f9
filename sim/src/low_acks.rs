//! Plain producers at acks=1 and acks=0 beside acks=all (issue 13 item 4),
//! and what each level promises.
//!
//! kaas appends an acks=1 batch and answers at once, before the fsync; an
//! acks=0 batch gets no answer at all. Consumers read only up to the high
//! watermark, the durable end, whatever the producer's acks. So:
//!
//! - acks=1: an acknowledged record may be lost, but only by a power loss
//!   (a crash that drops unsynced data, or the failed fsync before one)
//!   after it was sent; a process kill keeps the page cache and loses
//!   nothing. With several brokers a takeover of a live leader (its lease
//!   lapsed) drops its unsynced appends with no fault the driver counts, so
//!   there losses are counted, not attributed.
//! - acks=0: never acknowledged; a record sent may be there or not.
//! - Every level: a record is in the log at most as often as its producer
//!   wrote it to a connection (a retry after a lost answer may append it
//!   again; nothing else may). What a consumer read is never taken back,
//!   and nothing nobody sent appears: `checker::History` checks both for
//!   every record, these included.
//!
//! Pure bookkeeping, unit-tested without madsim.

use crate::checker::PartitionLog;
use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet};

/// A plain producer's acks level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acks {
    /// acks=-1: answered once durable.
    All,
    /// acks=1: answered once appended, before the fsync.
    Leader,
    /// acks=0: never answered.
    None,
}

impl Acks {
    /// The value a Produce request carries.
    pub fn wire(self) -> i16 {
        match self {
            Acks::All => -1,
            Acks::Leader => 1,
            Acks::None => 0,
        }
    }
}

/// One acks=1 acknowledgement.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct LeaderAck {
    partition: i32,
    offset: i64,
    value: Bytes,
    /// Power losses counted before the acknowledged attempt was sent: one
    /// counted since may have taken the record back.
    losses_at_send: u64,
}

/// What the low-acks rules compared, for the report and the gates.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LowAcksStats {
    /// acks=1 acknowledgements checked against the final log.
    pub leader_acked: u64,
    /// Of those, the record found at its acknowledged offset.
    pub leader_kept: u64,
    /// Of those, lost after a power loss (allowed).
    pub leader_lost: u64,
    /// Of those, deleted (DeleteRecords or retention, allowed).
    pub leader_deleted: u64,
    /// acks=1 records a consumer read during the run (never to vanish).
    pub leader_read: u64,
    /// acks=0 records sent.
    pub unacknowledged_sent: u64,
    /// Of those, found in the final log.
    pub unacknowledged_found: u64,
    /// acks=0 records a consumer read during the run.
    pub unacknowledged_read: u64,
    /// Records of plain producers found in the final log, each compared
    /// with how often it was sent.
    pub sends_compared: u64,
}

/// What plain producers sent at each acks level, and what acks=1 answered.
#[derive(Debug, Default)]
pub struct LowAcksHistory {
    /// How many times each plain producer's record was written to a
    /// connection (attempts that never reached one are not counted).
    sends: BTreeMap<Bytes, u32>,
    leader_records: BTreeSet<Bytes>,
    unacknowledged: BTreeSet<Bytes>,
    leader_acks: Vec<LeaderAck>,
    /// Power losses (crashes that drop unsynced data) so far.
    power_losses: u64,
    /// Several brokers: a loss cannot be tied to a counted fault.
    losses_unattributed: bool,
}

impl LowAcksHistory {
    /// A plain producer made a batch at `acks` (before its first attempt).
    pub fn sent(&mut self, acks: Acks, values: &[Bytes]) {
        let set = match acks {
            Acks::All => return,
            Acks::Leader => &mut self.leader_records,
            Acks::None => &mut self.unacknowledged,
        };
        set.extend(values.iter().cloned());
    }

    /// A plain producer is writing the batch to a connection (once per
    /// attempt): each write may append it once.
    pub fn attempted(&mut self, values: &[Bytes]) {
        for v in values {
            *self.sends.entry(v.clone()).or_default() += 1;
        }
    }

    /// The fault driver is about to drop unsynced data (a power loss).
    pub fn power_lost(&mut self) {
        self.power_losses += 1;
    }

    pub fn power_losses(&self) -> u64 {
        self.power_losses
    }

    /// Several brokers share the volume: see the module docs.
    pub fn set_losses_unattributed(&mut self, unattributed: bool) {
        self.losses_unattributed = unattributed;
    }

    /// acks=1 answered `values` at `base_offset`; the attempt was sent when
    /// `losses_at_send` power losses had been counted.
    pub fn leader_acked(
        &mut self,
        partition: i32,
        base_offset: i64,
        values: &[Bytes],
        losses_at_send: u64,
    ) {
        self.leader_acks
            .extend(values.iter().enumerate().map(|(i, v)| LeaderAck {
                partition,
                offset: base_offset + i as i64,
                value: v.clone(),
                losses_at_send,
            }));
    }

    /// Every low-acks rule against the final logs; `observed` is what
    /// consumers read during the run (for the counts only: that it stays is
    /// `History`'s rule).
    pub fn check(
        &self,
        logs: &BTreeMap<i32, PartitionLog>,
        observed: &BTreeMap<(i32, i64), Bytes>,
    ) -> (Vec<String>, LowAcksStats) {
        self.check_with(logs, observed, &|_, _, _| false)
    }

    /// [`check`](Self::check) where `deleted(partition, offset, value)`
    /// says an acknowledged record may be gone because its deletion was
    /// allowed (`crate::retention_history`).
    pub fn check_with(
        &self,
        logs: &BTreeMap<i32, PartitionLog>,
        observed: &BTreeMap<(i32, i64), Bytes>,
        deleted: &dyn Fn(i32, i64, &Bytes) -> bool,
    ) -> (Vec<String>, LowAcksStats) {
        let mut stats = LowAcksStats {
            unacknowledged_sent: self.unacknowledged.len() as u64,
            ..Default::default()
        };
        let mut violations = self.check_sends_bound(logs, &mut stats);
        violations.extend(self.check_leader_acks(logs, deleted, &mut stats));
        let in_final: BTreeSet<&Bytes> = logs.values().flatten().map(|(_, v)| v).collect();
        stats.unacknowledged_found = self
            .unacknowledged
            .iter()
            .filter(|v| in_final.contains(v))
            .count() as u64;
        for value in observed.values() {
            stats.leader_read += u64::from(self.leader_records.contains(value));
            stats.unacknowledged_read += u64::from(self.unacknowledged.contains(value));
        }
        (violations, stats)
    }

    /// A record is in the final log at most as often as it was sent.
    fn check_sends_bound(
        &self,
        logs: &BTreeMap<i32, PartitionLog>,
        stats: &mut LowAcksStats,
    ) -> Vec<String> {
        let mut found: BTreeMap<&Bytes, Vec<(i32, i64)>> = BTreeMap::new();
        for (&partition, log) in logs {
            for (offset, value) in log {
                if self.sends.contains_key(value) {
                    found.entry(value).or_default().push((partition, *offset));
                }
            }
        }
        stats.sends_compared = found.len() as u64;
        found
            .into_iter()
            .filter_map(|(value, places)| {
                let sends = self.sends.get(value).copied().unwrap_or(0);
                (places.len() > sends as usize).then(|| {
                    format!(
                        "record {} is in the final log {} times ({places:?}) but was sent {sends} times",
                        String::from_utf8_lossy(value),
                        places.len()
                    )
                })
            })
            .collect()
    }

    /// An acks=1 record is at its acknowledged offset, unless a power loss
    /// came after it was sent.
    fn check_leader_acks(
        &self,
        logs: &BTreeMap<i32, PartitionLog>,
        deleted: &dyn Fn(i32, i64, &Bytes) -> bool,
        stats: &mut LowAcksStats,
    ) -> Vec<String> {
        let mut violations = Vec::new();
        for ack in &self.leader_acks {
            stats.leader_acked += 1;
            // By offset: a final log starts at its log start, not always 0.
            let at = logs.get(&ack.partition).and_then(|log| {
                log.binary_search_by_key(&ack.offset, |(o, _)| *o)
                    .ok()
                    .and_then(|i| log.get(i))
            });
            if at.is_some_and(|(_, v)| *v == ack.value) {
                stats.leader_kept += 1;
                continue;
            }
            if at.is_none() && deleted(ack.partition, ack.offset, &ack.value) {
                stats.leader_deleted += 1;
                continue;
            }
            if self.losses_unattributed || self.power_losses > ack.losses_at_send {
                stats.leader_lost += 1;
                continue;
            }
            let found = match at {
                Some((_, v)) => format!("holds {}", String::from_utf8_lossy(v)),
                None if logs
                    .get(&ack.partition)
                    .and_then(|l| l.first())
                    .is_some_and(|(first, _)| ack.offset < *first) =>
                {
                    "starts after it, and its deletion was not allowed".to_string()
                }
                None => "is past the end".to_string(),
            };
            violations.push(format!(
                "partition {} offset {}: acks=1 acknowledged {} there, the final log {found}, and no power loss came after it was sent",
                ack.partition,
                ack.offset,
                String::from_utf8_lossy(&ack.value)
            ));
        }
        violations
    }

    /// For the determinism fingerprint.
    pub fn describe(&self) -> String {
        format!(
            "{:?} {} {}",
            self.leader_acks, self.power_losses, self.losses_unattributed
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    fn logs(values: &[&str]) -> BTreeMap<i32, PartitionLog> {
        let log = values
            .iter()
            .enumerate()
            .map(|(i, v)| (i as i64, b(v)))
            .collect();
        BTreeMap::from([(0, log)])
    }

    #[test]
    fn a_record_in_the_log_more_often_than_it_was_sent_fails() {
        let mut h = LowAcksHistory::default();
        h.sent(Acks::None, &[b("a")]);
        h.attempted(&[b("a")]);
        let (v, s) = h.check(&logs(&["a"]), &BTreeMap::new());
        assert!(v.is_empty(), "{v:?}");
        assert_eq!((s.sends_compared, s.unacknowledged_found), (1, 1));
        let (v, _) = h.check(&logs(&["a", "a"]), &BTreeMap::new());
        assert!(
            v.iter()
                .any(|m| m.contains("2 times") && m.contains("sent 1 times")),
            "{v:?}"
        );
        // Sent twice (a retry after a lost answer): twice is allowed.
        h.attempted(&[b("a")]);
        assert!(h.check(&logs(&["a", "a"]), &BTreeMap::new()).0.is_empty());
    }

    #[test]
    fn an_acks_one_record_lost_without_a_power_loss_after_its_send_fails() {
        let mut h = LowAcksHistory::default();
        h.sent(Acks::Leader, &[b("a"), b("b")]);
        h.power_lost();
        // Sent after that power loss: none came since.
        h.leader_acked(0, 0, &[b("a"), b("b")], h.power_losses());
        let (v, s) = h.check(&logs(&["a", "x"]), &BTreeMap::new());
        assert!(
            v.iter()
                .any(|m| m.contains("offset 1: acks=1 acknowledged b there, the final log holds x")),
            "{v:?}"
        );
        assert_eq!((s.leader_acked, s.leader_kept, s.leader_lost), (2, 1, 0));
        let (v, _) = h.check(&logs(&["a"]), &BTreeMap::new());
        assert!(v.iter().any(|m| m.contains("past the end")), "{v:?}");
    }

    #[test]
    fn an_acks_one_record_lost_by_a_later_power_loss_passes() {
        let mut h = LowAcksHistory::default();
        h.sent(Acks::Leader, &[b("a")]);
        h.leader_acked(0, 0, &[b("a")], h.power_losses());
        h.power_lost();
        let (v, s) = h.check(&logs(&["x"]), &BTreeMap::new());
        assert!(v.is_empty(), "{v:?}");
        assert_eq!((s.leader_acked, s.leader_lost), (1, 1));
        // With several brokers, any loss is allowed (and counted).
        let mut h = LowAcksHistory::default();
        h.set_losses_unattributed(true);
        h.leader_acked(0, 0, &[b("a")], 0);
        assert_eq!(h.check(&logs(&[]), &BTreeMap::new()).1.leader_lost, 1);
    }

    #[test]
    fn records_read_during_the_run_are_counted_per_level() {
        let mut h = LowAcksHistory::default();
        h.sent(Acks::Leader, &[b("l")]);
        h.sent(Acks::None, &[b("n")]);
        h.sent(Acks::All, &[b("x")]);
        let observed = BTreeMap::from([((0, 0), b("l")), ((0, 1), b("n")), ((0, 2), b("x"))]);
        let s = h.check(&logs(&["l", "n", "x"]), &observed).1;
        assert_eq!(
            (s.leader_read, s.unacknowledged_read, s.unacknowledged_sent),
            (1, 1, 1)
        );
    }
}
