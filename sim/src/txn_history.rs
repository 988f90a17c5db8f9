//! The history of the transactional workload and the rules it must satisfy.
//!
//! Transactional producers report every InitProducerId answer, every
//! transaction they begin (its batches, where Produce acknowledged them) and
//! how it ended; a read_committed consumer reports what it read while faults
//! ran; the final read_committed read of every partition of
//! [`TXN_TOPIC`] (aborted transactions dropped as a Kafka client drops them)
//! is checked against all of it. Pure bookkeeping, unit-tested without
//! madsim.
//!
//! Rules:
//! - read_committed never returns a record of a transaction that did not
//!   commit: not during the run, not in the final read. A transaction
//!   acknowledged aborted, fenced before its EndTxn(commit) was sent, or
//!   abandoned mid-way (the reaper's or a new instance's to abort) must be
//!   wholly absent;
//! - atomicity: a transaction whose EndTxn(commit) was acknowledged is
//!   wholly present (every batch, on every partition, at the offset Produce
//!   acknowledged); one whose commit answer never came (a crash, or a fence
//!   that overtook the retry) is all or nothing;
//! - what read_committed returned during the run is never taken back: it
//!   is in the final read at the same offset;
//! - every record read is one a transactional producer sent, at most once;
//! - at read_uncommitted (a consumer during the run, and a final read):
//!   what was returned is never taken back (it was below the high
//!   watermark, so durable, whether its transaction commits or not); every
//!   record is one a transactional producer sent to that partition, in the
//!   log at most once; every batch Produce acknowledged is there at the
//!   offsets it named, whatever its transaction's end (Kafka keeps aborted
//!   data in the log; only markers tell it apart); and the read_committed
//!   read is the read_uncommitted one less what did not commit, offset for
//!   offset;
//! - epochs: per transactional id one producer id for the whole run, never
//!   reused by another transactional id or handed to an idempotent
//!   producer; an InitProducerId answer received before another request
//!   was sent is never at a later epoch than that request's answer, and two
//!   instances are never granted the same epoch.

use crate::poll_history::Logs;
use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};

/// The topic the transactional workload writes (auto-created).
pub const TXN_TOPIC: &str = "simtx";

/// How a transaction ended, as its producer knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TxnEnd {
    /// Still running (or the producer is still trying to end it).
    Open,
    /// EndTxn(commit) answered success.
    CommitAcked,
    /// EndTxn(commit) was sent but no definite answer came (the producer
    /// was fenced, or gave up): all or nothing.
    CommitUnknown,
    /// EndTxn(abort) answered success.
    AbortAcked,
    /// Fenced (by a new instance, or the reaper) before any EndTxn(commit)
    /// was sent: the coordinator aborted it.
    Fenced,
    /// The producer stopped mid-transaction: the reaper or the next
    /// instance must abort it.
    Abandoned,
    /// EndTxn(abort) was sent but no definite answer came: it cannot
    /// commit, since the producer never asked for that.
    AbortUnknown,
}

impl TxnEnd {
    /// The transaction may never be visible.
    pub(crate) fn must_be_absent(self) -> bool {
        matches!(
            self,
            TxnEnd::AbortAcked | TxnEnd::Fenced | TxnEnd::Abandoned | TxnEnd::AbortUnknown
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TxnBatch {
    pub partition: i32,
    pub values: Vec<Bytes>,
    /// Base offset a successful Produce answer named.
    pub acked_at: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Txn {
    pub transactional_id: String,
    pub instance: u64,
    pub producer_id: i64,
    pub epoch: i16,
    pub batches: Vec<TxnBatch>,
    pub end: TxnEnd,
}

/// Index of a transaction in the history.
pub type TxnIndex = usize;

/// One InitProducerId answer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Grant {
    transactional_id: String,
    instance: u64,
    producer_id: i64,
    epoch: i16,
    /// Index, in the order of events, of the request and of its answer.
    sent_at: u64,
    answered_at: u64,
}

/// Counters for the report and the vacuity gates.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct TxnStats {
    pub begun: u64,
    pub commits_acked: u64,
    pub commits_unknown: u64,
    pub aborts_acked: u64,
    /// Transactions fenced before their commit was asked for.
    pub fenced: u64,
    /// Fences any request of a producer ran into (zombies, the reaper).
    pub fences_seen: u64,
    pub abandoned: u64,
    pub zombies: u64,
    pub inits: u64,
    pub batches_acked: u64,
    pub produce_retries: u64,
    /// Produce refusals that made the producer abort (neither retriable
    /// nor a fence).
    pub produce_refusals: u64,
    pub end_retries: u64,
    /// Transactions ended under transaction version 2 (EndTxn v5), each
    /// with an epoch bump.
    pub v2_ends: u64,
    pub records_read_during_run: u64,
    /// Records read at read_uncommitted during the run, and of them those
    /// at or above their answer's last stable offset (open transactions'
    /// data, which read_committed holds back).
    pub uncommitted_read_during_run: u64,
    pub uncommitted_read_past_the_lso: u64,
    /// Records of committed transactions in the final read.
    pub final_records: u64,
    /// Records in the final read_uncommitted read, and of them those of
    /// transactions that did not commit.
    pub final_uncommitted_records: u64,
    pub final_uncommitted_not_committed: u64,
    /// Acknowledged records of transactions that did not commit, absent
    /// from the final read_uncommitted read of a compacted topic: cleaned.
    pub uncommitted_cleaned_away: u64,
    /// Transactions whose commit answer was lost, found committed.
    pub unknown_found_committed: u64,
    /// Batches of aborted transactions the read_committed consumer
    /// dropped (by the aborted list) during the run, and in the final read.
    pub aborted_batches_dropped: u64,
    pub final_aborted_batches_dropped: u64,
    /// read_committed answers during the run whose last stable offset was
    /// below their high watermark: open transactions' data held back.
    pub open_data_hidden: u64,
    /// Pairs of grants to one transactional id and producer id, the
    /// second asked for after the first was answered, whose epochs the
    /// epoch rules compared.
    pub grant_pairs_compared: u64,
    /// After the producers stopped, how long until no transaction was open.
    pub settled_ms: u64,
    /// Transactions still Ongoing when the producers had stopped (a
    /// stalled instance's, left to the reaper), and of them those found
    /// aborted once nothing was open (CompleteAbort).
    pub left_to_reaper: u64,
    pub reaped_after_stop: u64,
}

#[derive(Debug, Default)]
pub struct TxnHistory {
    /// Idle transactional ids expire this seed (`SimParams::txn_id_expiration_ms`):
    /// an id may move to a fresh producer id.
    ids_expire: bool,
    txns: Vec<Txn>,
    grants: Vec<Grant>,
    /// (partition, offset) -> record, from read_committed fetches during
    /// the run.
    observed: BTreeMap<(i32, i64), Bytes>,
    /// The same from read_uncommitted fetches.
    observed_uncommitted: BTreeMap<(i32, i64), Bytes>,
    events: u64,
    violations: Vec<String>,
    pub stats: TxnStats,
}

fn show(v: &Bytes) -> String {
    String::from_utf8_lossy(v).into_owned()
}

impl TxnHistory {
    /// Idle transactional ids expire in this seed.
    pub fn set_ids_expire(&mut self, expire: bool) {
        self.ids_expire = expire;
    }

    pub fn violation(&mut self, message: String) {
        self.violations.push(message);
    }

    pub fn violations(&self) -> &[String] {
        &self.violations
    }

    /// A logical clock for ordering requests and answers.
    pub fn tick(&mut self) -> u64 {
        self.events += 1;
        self.events
    }

    /// InitProducerId sent at `sent_at` (a [`tick`](Self::tick)) answered
    /// `producer_id` / `epoch`.
    pub fn granted(
        &mut self,
        transactional_id: &str,
        instance: u64,
        producer_id: i64,
        epoch: i16,
        sent_at: u64,
    ) {
        let answered_at = self.tick();
        self.stats.inits += 1;
        self.grants.push(Grant {
            transactional_id: transactional_id.to_string(),
            instance,
            producer_id,
            epoch,
            sent_at,
            answered_at,
        });
    }

    pub fn begin(&mut self, txn: Txn) -> TxnIndex {
        self.stats.begun += 1;
        self.txns.push(txn);
        self.txns.len() - 1
    }

    /// A batch of transaction `txn` is about to be produced; returns its
    /// index within the transaction.
    pub fn add_batch(&mut self, txn: TxnIndex, partition: i32, values: Vec<Bytes>) -> usize {
        let Some(t) = self.txns.get_mut(txn) else {
            return 0;
        };
        t.batches.push(TxnBatch {
            partition,
            values,
            acked_at: None,
        });
        t.batches.len() - 1
    }

    pub fn batch_acked(&mut self, txn: TxnIndex, batch: usize, base_offset: i64) {
        self.stats.batches_acked += 1;
        let Some(b) = self
            .txns
            .get_mut(txn)
            .and_then(|t| t.batches.get_mut(batch))
        else {
            return;
        };
        if let Some(earlier) = b.acked_at.replace(base_offset) {
            if earlier != base_offset {
                self.violations.push(format!(
                    "transaction {txn}: a batch on partition {} was acknowledged at {base_offset}, earlier at {earlier}",
                    b.partition
                ));
            }
        }
    }

    pub fn end(&mut self, txn: TxnIndex, end: TxnEnd) {
        let Some(t) = self.txns.get_mut(txn) else {
            return;
        };
        t.end = end;
        match end {
            TxnEnd::CommitAcked => self.stats.commits_acked += 1,
            TxnEnd::CommitUnknown => self.stats.commits_unknown += 1,
            TxnEnd::AbortAcked => self.stats.aborts_acked += 1,
            TxnEnd::Fenced => self.stats.fenced += 1,
            TxnEnd::Abandoned => self.stats.abandoned += 1,
            TxnEnd::AbortUnknown | TxnEnd::Open => {}
        }
    }

    /// Transactions that ended in an abort of any kind.
    pub fn aborted(&self) -> u64 {
        self.stats.aborts_acked + self.stats.fenced + self.stats.abandoned
    }

    /// read_committed returned `records` of `partition` during the run.
    pub fn read_committed(&mut self, partition: i32, records: &[(i64, Bytes)]) {
        self.stats.records_read_during_run += records.len() as u64;
        observe(
            &mut self.observed,
            &mut self.violations,
            "read_committed",
            partition,
            records,
        );
    }

    /// read_uncommitted returned `records` of `partition` during the run,
    /// in an answer that named `last_stable_offset`.
    pub fn read_uncommitted(
        &mut self,
        partition: i32,
        records: &[(i64, Bytes)],
        last_stable_offset: i64,
    ) {
        self.stats.uncommitted_read_during_run += records.len() as u64;
        self.stats.uncommitted_read_past_the_lso += records
            .iter()
            .filter(|(offset, _)| *offset >= last_stable_offset)
            .count() as u64;
        observe(
            &mut self.observed_uncommitted,
            &mut self.violations,
            "read_uncommitted",
            partition,
            records,
        );
    }

    /// The read_uncommitted rules (module docs) over the final reads at
    /// both isolation levels (`logs`: read_committed). On a `compacted`
    /// topic the cleaner removes the records of transactions that did not
    /// commit (as Kafka's does), so those may be absent; nothing else may,
    /// and nothing may move.
    pub fn check_uncommitted(
        &mut self,
        logs: &Logs,
        uncommitted: &Logs,
        compacted: bool,
    ) -> Vec<String> {
        let mut v = Vec::new();
        let found = places(uncommitted, "read_uncommitted", &mut v);
        let by_offset: BTreeMap<(i32, i64), &Bytes> = uncommitted
            .iter()
            .flat_map(|(&p, log)| log.iter().map(move |(o, value)| ((p, *o), value)))
            .collect();
        let at = |p: i32, offset: i64| by_offset.get(&(p, offset)).copied();
        // What the final read_committed read holds: the outcome of a
        // commit with no definite answer (all or nothing is `check`'s).
        let read_committed: BTreeSet<&Bytes> = logs.values().flatten().map(|(_, v)| v).collect();
        let mut ours: BTreeMap<&Bytes, (i32, bool)> = BTreeMap::new();
        let (mut cleaned, mut not_committed) = (0, 0);
        for (i, t) in self.txns.iter().enumerate() {
            for b in &t.batches {
                for (k, value) in b.values.iter().enumerate() {
                    let committed = match t.end {
                        TxnEnd::CommitAcked => true,
                        TxnEnd::CommitUnknown => read_committed.contains(value),
                        _ => false,
                    };
                    ours.insert(value, (b.partition, committed));
                    let Some(base) = b.acked_at else { continue };
                    let offset = base + k as i64;
                    let there = at(b.partition, offset);
                    if there.is_none() && compacted && !committed {
                        cleaned += 1;
                        continue;
                    }
                    if there != Some(value) {
                        v.push(format!(
                            "transaction {i} of {} ({:?}): record {} acknowledged at ({}, {offset}) is not there at read_uncommitted (found at {:?}): a lost write",
                            t.transactional_id,
                            t.end,
                            show(value),
                            b.partition,
                            found.get(value)
                        ));
                    }
                }
            }
        }
        for (value, places) in &found {
            match ours.get(value) {
                None => v.push(format!(
                    "{TXN_TOPIC}: read_uncommitted returned a record nobody sent transactionally: {} at {places:?}",
                    show(value)
                )),
                Some(&(partition, committed)) => {
                    if places.len() > 1 || places[0].0 != partition {
                        v.push(format!(
                            "{TXN_TOPIC}: record {} sent to partition {partition} is in the log at {places:?}",
                            show(value)
                        ));
                    }
                    if !committed {
                        not_committed += 1;
                    }
                }
            }
        }
        for (&(p, offset), value) in &self.observed_uncommitted {
            let may_be_cleaned = compacted && ours.get(value).is_some_and(|&(_, c)| !c);
            if at(p, offset).is_none() && may_be_cleaned {
                continue;
            }
            if at(p, offset) != Some(value) {
                v.push(format!(
                    "{TXN_TOPIC} partition {p} offset {offset}: read_uncommitted returned {} during the run, the final read_uncommitted read has {:?} there: a record read was taken back",
                    show(value),
                    at(p, offset).map(show)
                ));
            }
        }
        for (&p, log) in logs {
            for (offset, value) in log {
                if at(p, *offset) != Some(value) {
                    v.push(format!(
                        "{TXN_TOPIC} partition {p} offset {offset}: read_committed delivered {}, read_uncommitted {:?}",
                        show(value),
                        at(p, *offset).map(show)
                    ));
                }
            }
        }
        self.stats.final_uncommitted_records = uncommitted.values().map(|l| l.len() as u64).sum();
        self.stats.uncommitted_cleaned_away = cleaned;
        self.stats.final_uncommitted_not_committed = not_committed;
        v
    }

    /// Every producer id granted to a transactional id.
    pub fn producer_ids(&self) -> BTreeSet<i64> {
        self.grants.iter().map(|g| g.producer_id).collect()
    }

    /// The epoch rules (module docs); `idempotent_pids`: the ids handed to
    /// idempotent producers. Returns the violations and how many ordered
    /// pairs of grants of one producer id the epoch rule compared.
    fn check_grants(&self, idempotent_pids: &BTreeSet<i64>) -> (Vec<String>, u64) {
        let mut v = Vec::new();
        let mut ordered_pairs = 0;
        let mut pid_owner: BTreeMap<i64, &str> = BTreeMap::new();
        for g in &self.grants {
            match pid_owner.insert(g.producer_id, &g.transactional_id) {
                Some(other) if other != g.transactional_id => v.push(format!(
                    "producer id {} granted to transactional ids {other} and {}",
                    g.producer_id, g.transactional_id
                )),
                _ => {}
            }
            if idempotent_pids.contains(&g.producer_id) {
                v.push(format!(
                    "producer id {} granted to transactional id {} was also handed to an idempotent producer",
                    g.producer_id, g.transactional_id
                ));
            }
        }
        let mut by_id: BTreeMap<&str, Vec<&Grant>> = BTreeMap::new();
        for g in &self.grants {
            by_id.entry(&g.transactional_id).or_default().push(g);
        }
        for (id, grants) in by_id {
            let pids: BTreeSet<i64> = grants.iter().map(|g| g.producer_id).collect();
            if pids.len() > 1 && !self.ids_expire {
                v.push(format!(
                    "transactional id {id} was granted several producer ids {pids:?} (no epoch was exhausted)"
                ));
            }
            // An id that expired comes back with a fresh producer id; the
            // identity it had is gone for good: once a grant of another id
            // was answered, a grant asked for after it never names an id
            // answered before that grant was asked for.
            let mut first_answer: BTreeMap<i64, u64> = BTreeMap::new();
            for g in &grants {
                let e = first_answer.entry(g.producer_id).or_insert(u64::MAX);
                *e = (*e).min(g.answered_at);
            }
            for q in &grants {
                for c in &grants {
                    if c.producer_id != q.producer_id
                        && q.answered_at < c.sent_at
                        && first_answer[&c.producer_id] < q.sent_at
                    {
                        v.push(format!(
                            "transactional id {id}: producer id {} came back: instance {} was granted it after instance {} had been granted {}",
                            c.producer_id, c.instance, q.instance, q.producer_id
                        ));
                    }
                }
            }
            for a in &grants {
                for b in grants.iter().filter(|b| b.producer_id == a.producer_id) {
                    ordered_pairs += u64::from(a.answered_at < b.sent_at);
                    if a.answered_at < b.sent_at && b.epoch < a.epoch {
                        v.push(format!(
                            "transactional id {id}: epoch went back: instance {} was granted epoch {} before instance {} asked and was granted {}",
                            a.instance, a.epoch, b.instance, b.epoch
                        ));
                    }
                    if a.instance < b.instance && a.epoch == b.epoch {
                        v.push(format!(
                            "transactional id {id}: instances {} and {} were both granted epoch {}",
                            a.instance, b.instance, a.epoch
                        ));
                    }
                }
            }
        }
        (v, ordered_pairs)
    }

    /// Checks the final read_committed read of every partition of the
    /// topic (`logs`: the records a Kafka client would deliver, offset
    /// order; `None` when the final read failed, which the seed already
    /// reports: then only what the run itself showed is checked, rather
    /// than every acknowledged record called lost). Returns every
    /// violation, those found during the run too.
    pub fn check_final(
        &mut self,
        logs: Option<&Logs>,
        idempotent_pids: &BTreeSet<i64>,
    ) -> Vec<String> {
        let mut v = self.violations.clone();
        let (grant_violations, grant_pairs) = self.check_grants(idempotent_pids);
        v.extend(grant_violations);
        self.stats.grant_pairs_compared = grant_pairs;
        if let Some(logs) = logs {
            self.check_committed_log(logs, &mut v);
        }
        if v.len() > 20 {
            let more = v.len() - 20;
            v.truncate(20);
            v.push(format!("... and {more} more"));
        }
        v
    }

    /// The final read_committed log against every transaction's outcome
    /// and what read_committed consumers were given during the run.
    fn check_committed_log(&mut self, logs: &Logs, v: &mut Vec<String>) {
        let found = places(logs, "read_committed", v);
        let mut ours: BTreeSet<&Bytes> = BTreeSet::new();
        for (i, t) in self.txns.iter().enumerate() {
            let name = || {
                format!(
                    "transaction {i} of {} (instance {}, pid {} epoch {}, {:?})",
                    t.transactional_id, t.instance, t.producer_id, t.epoch, t.end
                )
            };
            let mut present = 0;
            let mut total = 0;
            // (partition, where Produce acknowledged it) of each record
            // not read: what a partial commit lost.
            let mut missing = Vec::new();
            for b in &t.batches {
                for (k, value) in b.values.iter().enumerate() {
                    ours.insert(value);
                    total += 1;
                    let Some(at) = found.get(value) else {
                        missing.push((b.partition, b.acked_at.map(|base| base + k as i64)));
                        continue;
                    };
                    present += 1;
                    if at.len() > 1 {
                        v.push(format!(
                            "{}: record {} read {} times: {at:?}",
                            name(),
                            show(value),
                            at.len()
                        ));
                    }
                    let expected = b.acked_at.map(|base| (b.partition, base + k as i64));
                    if let Some(expected) = expected {
                        if at[0] != expected {
                            v.push(format!(
                                "{}: record {} read at {:?}, acknowledged at {expected:?}",
                                name(),
                                show(value),
                                at[0]
                            ));
                        }
                    } else if at[0].0 != b.partition {
                        v.push(format!(
                            "{}: record {} read on partition {}, produced to {}",
                            name(),
                            show(value),
                            at[0].0,
                            b.partition
                        ));
                    }
                }
            }
            if present > 0 && t.end.must_be_absent() {
                v.push(format!(
                    "{}: read_committed returned {present} of its {total} records, but it did not commit",
                    name()
                ));
            } else if t.end == TxnEnd::Open && present > 0 {
                v.push(format!(
                    "{}: read_committed returned {present} of its {total} records of a transaction that never ended",
                    name()
                ));
            } else if t.end == TxnEnd::CommitAcked && present < total {
                v.push(format!(
                    "{}: only {present} of its {total} records are visible after its commit was acknowledged (missing, as (partition, acknowledged offset): {missing:?})",
                    name()
                ));
            } else if t.end == TxnEnd::CommitUnknown && present > 0 && present < total {
                v.push(format!(
                    "{}: {present} of its {total} records are visible (all or none)",
                    name()
                ));
            }
            if t.end == TxnEnd::CommitUnknown && present == total && total > 0 {
                self.stats.unknown_found_committed += 1;
            }
        }
        for (&(p, offset), value) in &self.observed {
            let at = found.get(value).and_then(|a| a.first());
            if at != Some(&(p, offset)) {
                v.push(format!(
                    "{TXN_TOPIC} partition {p} offset {offset}: read_committed returned {} during the run, the final read has it at {at:?}",
                    show(value)
                ));
            }
        }
        for (value, at) in &found {
            if !ours.contains(value) {
                v.push(format!(
                    "{TXN_TOPIC}: read_committed returned a record nobody sent transactionally: {} at {at:?}",
                    show(value)
                ));
            }
        }
        self.stats.final_records = logs.values().map(|l| l.len() as u64).sum();
    }

    /// A fingerprint of everything observed (the determinism check).
    pub fn fingerprint(&self, logs: &Logs, uncommitted: &Logs) -> u64 {
        let mut h = std::hash::DefaultHasher::new();
        logs.hash(&mut h);
        uncommitted.hash(&mut h);
        self.observed_uncommitted.hash(&mut h);
        self.txns.hash(&mut h);
        self.grants.hash(&mut h);
        self.observed.hash(&mut h);
        self.stats.hash(&mut h);
        h.finish()
    }
}

/// Records `records` of `partition`, read at `level` during the run, in
/// `observed`: a value other than the one read earlier at the same offset
/// is a violation.
fn observe(
    observed: &mut BTreeMap<(i32, i64), Bytes>,
    violations: &mut Vec<String>,
    level: &str,
    partition: i32,
    records: &[(i64, Bytes)],
) {
    for (offset, value) in records {
        let earlier = observed.insert((partition, *offset), value.clone());
        if let Some(earlier) = earlier.filter(|e| e != value) {
            violations.push(format!(
                "{TXN_TOPIC} partition {partition} offset {offset}: {level} returned {} but earlier {}",
                show(value),
                show(&earlier)
            ));
        }
    }
}

/// Where each value sits in a final read at `level`; offsets that do not
/// increase within a partition are violations.
fn places<'a>(
    logs: &'a Logs,
    level: &str,
    v: &mut Vec<String>,
) -> BTreeMap<&'a Bytes, Vec<(i32, i64)>> {
    let mut found: BTreeMap<&Bytes, Vec<(i32, i64)>> = BTreeMap::new();
    for (&p, log) in logs {
        let mut last = -1;
        for (offset, value) in log {
            if *offset <= last {
                v.push(format!(
                    "{TXN_TOPIC} partition {p}: the final {level} read went back from offset {last} to {offset}"
                ));
            }
            last = *offset;
            found.entry(value).or_default().push((p, *offset));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    fn txn(h: &mut TxnHistory, end: TxnEnd, parts: &[(i32, &[&str], Option<i64>)]) -> TxnIndex {
        let i = h.begin(Txn {
            transactional_id: "t".into(),
            instance: 0,
            producer_id: 5,
            epoch: 0,
            batches: vec![],
            end: TxnEnd::Open,
        });
        for (p, values, at) in parts {
            let k = h.add_batch(i, *p, values.iter().map(|v| b(v)).collect());
            if let Some(at) = at {
                h.batch_acked(i, k, *at);
            }
        }
        h.end(i, end);
        i
    }

    #[test]
    fn committed_visible_and_aborted_absent_pass() {
        let mut h = TxnHistory::default();
        txn(
            &mut h,
            TxnEnd::CommitAcked,
            &[(0, &["a", "b"], Some(0)), (1, &["c"], Some(0))],
        );
        txn(&mut h, TxnEnd::AbortAcked, &[(0, &["x"], Some(3))]);
        txn(&mut h, TxnEnd::CommitUnknown, &[(1, &["u"], Some(2))]);
        h.read_committed(0, &[(0, b("a"))]);
        let logs = BTreeMap::from([(0, vec![(0, b("a")), (1, b("b"))]), (1, vec![(0, b("c"))])]);
        assert_eq!(
            h.check_final(Some(&logs), &BTreeSet::new()),
            Vec::<String>::new()
        );
    }

    #[test]
    fn an_aborted_record_or_a_partial_commit_fails() {
        let mut h = TxnHistory::default();
        txn(
            &mut h,
            TxnEnd::CommitAcked,
            &[(0, &["a"], Some(0)), (1, &["c"], Some(0))],
        );
        txn(&mut h, TxnEnd::Fenced, &[(0, &["x"], Some(2))]);
        let logs = BTreeMap::from([(0, vec![(0, b("a")), (2, b("x"))])]);
        let v = h.check_final(Some(&logs), &BTreeSet::new());
        assert!(v.iter().any(|m| m.contains("did not commit")), "{v:?}");
        assert!(v.iter().any(|m| m.contains("only 1 of its 2")), "{v:?}");
    }

    #[test]
    fn an_unknown_commit_half_visible_fails() {
        let mut h = TxnHistory::default();
        txn(
            &mut h,
            TxnEnd::CommitUnknown,
            &[(0, &["a"], Some(0)), (1, &["c"], Some(0))],
        );
        let logs = BTreeMap::from([(0, vec![(0, b("a"))])]);
        let v = h.check_final(Some(&logs), &BTreeSet::new());
        assert!(v.iter().any(|m| m.contains("all or none")), "{v:?}");
    }

    #[test]
    fn a_record_read_during_the_run_then_gone_fails() {
        let mut h = TxnHistory::default();
        txn(&mut h, TxnEnd::CommitUnknown, &[(0, &["a"], None)]);
        h.read_committed(0, &[(0, b("a"))]);
        let v = h.check_final(Some(&BTreeMap::new()), &BTreeSet::new());
        assert!(v.iter().any(|m| m.contains("during the run")), "{v:?}");
    }

    #[test]
    fn a_failed_final_read_calls_no_record_lost_but_still_checks_the_grants() {
        let mut h = TxnHistory::default();
        txn(&mut h, TxnEnd::CommitAcked, &[(0, &["a"], Some(0))]);
        h.read_committed(0, &[(0, b("a"))]);
        let s = h.tick();
        h.granted("t", 0, 7, 3, s);
        let s = h.tick();
        h.granted("t", 1, 7, 2, s);
        let v = h.check_final(None, &BTreeSet::new());
        assert!(v.iter().any(|m| m.contains("epoch went back")), "{v:?}");
        assert!(
            !v.iter()
                .any(|m| m.contains("visible") || m.contains("during the run")),
            "{v:?}"
        );
        // The same history against an empty final read is a lost commit.
        let v = h.check_final(Some(&BTreeMap::new()), &BTreeSet::new());
        assert!(v.iter().any(|m| m.contains("only 0 of its 1")), "{v:?}");
    }

    #[test]
    fn epochs_going_back_or_shared_pids_fail() {
        let mut h = TxnHistory::default();
        let s = h.tick();
        h.granted("t", 0, 7, 3, s);
        let s = h.tick();
        h.granted("t", 1, 7, 2, s);
        let s = h.tick();
        h.granted("u", 2, 7, 0, s);
        let v = h.check_final(Some(&BTreeMap::new()), &BTreeSet::from([7]));
        assert!(v.iter().any(|m| m.contains("epoch went back")), "{v:?}");
        assert!(
            v.iter().any(|m| m.contains("transactional ids t and u")),
            "{v:?}"
        );
        assert!(v.iter().any(|m| m.contains("idempotent")), "{v:?}");
    }

    #[test]
    fn an_expired_id_moves_to_a_fresh_producer_id_and_never_back() {
        let mut h = TxnHistory::default();
        h.set_ids_expire(true);
        let s = h.tick();
        h.granted("t", 0, 7, 3, s);
        // Expired while idle: the next instance gets producer id 8 at 0.
        let s = h.tick();
        h.granted("t", 1, 8, 0, s);
        let s = h.tick();
        h.granted("t", 2, 8, 1, s);
        assert_eq!(
            h.check_final(Some(&BTreeMap::new()), &BTreeSet::new()),
            Vec::<String>::new()
        );
        // The old identity coming back is not an expiry.
        let s = h.tick();
        h.granted("t", 3, 7, 4, s);
        let v = h.check_final(Some(&BTreeMap::new()), &BTreeSet::new());
        assert!(
            v.iter().any(|m| m.contains("producer id 7 came back")),
            "{v:?}"
        );
        // Without expiry, a second producer id is a violation at once.
        let mut h = TxnHistory::default();
        let s = h.tick();
        h.granted("t", 0, 7, 3, s);
        let s = h.tick();
        h.granted("t", 1, 8, 0, s);
        let v = h.check_final(Some(&BTreeMap::new()), &BTreeSet::new());
        assert!(
            v.iter().any(|m| m.contains("several producer ids")),
            "{v:?}"
        );
    }

    #[test]
    fn concurrent_grants_in_any_order_pass() {
        let mut h = TxnHistory::default();
        let s0 = h.tick();
        let s1 = h.tick();
        h.granted("t", 1, 7, 2, s1);
        h.granted("t", 0, 7, 1, s0);
        assert_eq!(
            h.check_final(Some(&BTreeMap::new()), &BTreeSet::new()),
            Vec::<String>::new()
        );
    }

    /// Final logs holding (partition, offset, value).
    fn read(records: &[(i32, i64, &str)]) -> Logs {
        let mut logs = Logs::new();
        for &(p, offset, value) in records {
            logs.entry(p).or_default().push((offset, b(value)));
        }
        logs
    }

    #[test]
    fn read_uncommitted_shows_every_acknowledged_batch_whatever_its_end() {
        let mut h = TxnHistory::default();
        txn(&mut h, TxnEnd::CommitAcked, &[(0, &["a", "b"], Some(0))]);
        txn(&mut h, TxnEnd::AbortAcked, &[(0, &["x"], Some(3))]);
        // Never acknowledged: in the log once, or not at all.
        txn(&mut h, TxnEnd::Fenced, &[(1, &["y"], None)]);
        let committed = read(&[(0, 0, "a"), (0, 1, "b")]);
        let uncommitted = read(&[(0, 0, "a"), (0, 1, "b"), (0, 3, "x"), (1, 0, "y")]);
        h.read_uncommitted(0, &[(3, b("x"))], 3);
        assert_eq!(h.stats.uncommitted_read_past_the_lso, 1);
        assert_eq!(
            h.check_uncommitted(&committed, &uncommitted, false),
            Vec::<String>::new()
        );
        assert_eq!(h.stats.final_uncommitted_records, 4);
        assert_eq!(h.stats.final_uncommitted_not_committed, 2);
        // The aborted transaction's acknowledged record lost.
        let lost = read(&[(0, 0, "a"), (0, 1, "b")]);
        let v = h.check_uncommitted(&committed, &lost, false);
        assert!(v.iter().any(|m| m.contains("a lost write")), "{v:?}");
        assert!(v.iter().any(|m| m.contains("taken back")), "{v:?}");
        // On a compacted topic the cleaner removes aborted data: allowed.
        assert_eq!(
            h.check_uncommitted(&committed, &lost, true),
            Vec::<String>::new()
        );
        assert_eq!(h.stats.uncommitted_cleaned_away, 1);
        // But never a committed record.
        let v = h.check_uncommitted(&committed, &read(&[(0, 0, "a"), (0, 3, "x")]), true);
        assert!(
            v.iter()
                .any(|m| m.contains("record b acknowledged at (0, 1) is not there")),
            "{v:?}"
        );
    }

    #[test]
    fn an_unknown_commit_is_judged_by_the_committed_read() {
        let mut h = TxnHistory::default();
        txn(&mut h, TxnEnd::CommitUnknown, &[(0, &["u"], Some(0))]);
        h.read_uncommitted(0, &[(0, b("u"))], 0);
        let cleaned = read(&[]);
        // It aborted (read_committed does not show it): the cleaner of a
        // compacted topic may take its records.
        assert_eq!(
            h.check_uncommitted(&read(&[]), &cleaned, true),
            Vec::<String>::new()
        );
        assert_eq!(h.stats.uncommitted_cleaned_away, 1);
        // It committed: its record may not go, compacted or not.
        let v = h.check_uncommitted(&read(&[(0, 0, "u")]), &cleaned, true);
        assert!(v.iter().any(|m| m.contains("a lost write")), "{v:?}");
        // Not compacted, even an aborted one stays at read_uncommitted.
        let v = h.check_uncommitted(&read(&[]), &cleaned, false);
        assert!(v.iter().any(|m| m.contains("taken back")), "{v:?}");
    }

    #[test]
    fn read_uncommitted_anomalies_fail() {
        let mut h = TxnHistory::default();
        txn(&mut h, TxnEnd::CommitAcked, &[(0, &["a"], Some(0))]);
        txn(&mut h, TxnEnd::Abandoned, &[(0, &["x"], None)]);
        let committed = read(&[(0, 0, "a")]);
        // Twice in the log, on another partition, unknown, the two
        // isolation levels disagreeing on an offset, or out of order.
        for (uncommitted, what) in [
            (
                read(&[(0, 0, "a"), (0, 1, "x"), (0, 2, "x")]),
                "is in the log at",
            ),
            (read(&[(0, 0, "a"), (1, 0, "x")]), "is in the log at"),
            (read(&[(0, 0, "a"), (0, 1, "z")]), "nobody sent"),
            (read(&[(0, 1, "a")]), "read_committed delivered"),
            (
                read(&[(0, 1, "x"), (0, 0, "a")]),
                "final read_uncommitted read went back",
            ),
        ] {
            let v = h.check_uncommitted(&committed, &uncommitted, false);
            assert!(v.iter().any(|m| m.contains(what)), "{what}: {v:?}");
        }
        // A record read during the run, then another at its offset.
        h.read_uncommitted(0, &[(1, b("x"))], 0);
        h.read_uncommitted(0, &[(1, b("a"))], 0);
        assert!(h.violations().iter().any(|m| m.contains("but earlier")));
    }
}
