//! The history of the exactly-once (consume-transform-produce) loop and the
//! rules it must satisfy.
//!
//! The loop reads the input topic at read_committed, and per batch writes
//! one output record per input record (its value names the input partition
//! and offset, the transaction and the input value, [`output_value`]) and
//! commits the input positions in the same transaction. An observer reads
//! the loop's committed offsets now and then and, right after each answer,
//! reads the output at read_committed. Pure bookkeeping, unit-tested
//! without madsim.
//!
//! Rules:
//! - offsets only after markers: when OffsetFetch answers a committed
//!   offset X for an input partition, a read_committed read of the output
//!   made after that answer already holds the output of every input record
//!   below X that the loop had read (the transactions that committed those
//!   offsets have their markers durable, so the last stable offset is past
//!   their records);
//! - committed offsets observed never go back;
//! - exactly once: in the final read_committed read of the output, each
//!   input record appears at most once, at its own partition, with its own
//!   value; once the loop drained, every input record below the final
//!   committed offset appears exactly once, none at or above it, and the
//!   final committed offset is the input's end;
//! - transactions: an acknowledged commit is wholly visible, an unknown
//!   one all or nothing, an aborted, fenced or abandoned one absent;
//! - what the observer read of the output is in the final read, at the
//!   same offset; what the loop read of the input is in the final input.

use crate::poll_history::Logs;
use crate::txn_history::TxnEnd;
use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};

/// The topic the loop reads, written by its own acks=all producer
/// (auto-created).
pub const EOS_INPUT_TOPIC: &str = "simeos-in";
/// The topic the loop writes (auto-created, as many partitions as the
/// input: input partition p is transformed into output partition p).
pub const EOS_OUTPUT_TOPIC: &str = "simeos";
/// The consumer group whose offsets the loop commits in its transactions.
pub const EOS_GROUP: &str = "sim-eos";
/// The loop's transactional id.
pub const EOS_TRANSACTIONAL_ID: &str = "eos-0";

/// Index of a transaction of the loop in the history.
pub type EosTxnIndex = usize;

/// The output record for input record `offset` of `partition`, written by
/// transaction `txn`: `<partition>@<offset>|x<txn>|<input value>`.
pub fn output_value(partition: i32, offset: i64, txn: EosTxnIndex, input: &Bytes) -> Bytes {
    let mut v = format!("{partition}@{offset}|x{txn}|").into_bytes();
    v.extend_from_slice(input);
    Bytes::from(v)
}

/// An output record taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    pub partition: i32,
    pub offset: i64,
    pub txn: EosTxnIndex,
    pub input: Bytes,
}

/// Parses what [`output_value`] wrote; `None` for anything else.
pub fn parse_output(value: &Bytes) -> Option<Output> {
    let text = std::str::from_utf8(value).ok()?;
    let mut parts = text.splitn(3, '|');
    let (partition, offset) = parts.next()?.split_once('@')?;
    let txn = parts.next()?.strip_prefix('x')?.parse().ok()?;
    let input = parts.next()?;
    Some(Output {
        partition: partition.parse().ok()?,
        offset: offset.parse().ok()?,
        txn,
        input: Bytes::copy_from_slice(input.as_bytes()),
    })
}

/// One transaction of the loop.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EosTxn {
    pub instance: u64,
    pub producer_id: i64,
    pub epoch: i16,
    /// Input records transformed: (partition, offset).
    pub inputs: Vec<(i32, i64)>,
    /// The positions its TxnOffsetCommit asked to commit.
    pub offsets: BTreeMap<i32, i64>,
    pub end: TxnEnd,
}

/// Counters for the report and the vacuity gates.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct EosStats {
    pub begun: u64,
    pub commits_acked: u64,
    pub commits_unknown: u64,
    pub aborts_acked: u64,
    pub fenced: u64,
    /// Instances that stopped mid-transaction (crashed, or paused as a
    /// zombie).
    pub stalls: u64,
    pub zombies: u64,
    pub inits: u64,
    /// Instances that resumed from a committed offset read back with
    /// OffsetFetch(require_stable) after another instance committed it.
    pub resumes: u64,
    /// UNSTABLE_OFFSET_COMMIT answers to a resuming instance.
    pub unstable: u64,
    pub records_transformed: u64,
    /// Observations (OffsetFetch answer, then a read_committed read of the
    /// output) of a committed offset above 0, and how many of them were
    /// taken while an EndTxn(commit) was in flight.
    pub observations: u64,
    pub observations_in_flight: u64,
    /// Input records acknowledged to the input producer.
    pub input_acked: u64,
    /// Records in the final read of the output.
    pub final_records: u64,
    /// Output records Produce acknowledged, whatever their transaction's
    /// end.
    pub outputs_acked: u64,
    /// Records in the final read_uncommitted read of the output, and of
    /// them those of transactions that did not commit.
    pub final_uncommitted_records: u64,
    pub final_uncommitted_not_committed: u64,
    /// Input records past the drained loop's committed offset that repeat
    /// an earlier input batch (a late copy of a given-up attempt).
    pub late_input_copies: u64,
}

#[derive(Debug, Default)]
pub struct EosHistory {
    txns: Vec<EosTxn>,
    /// (partition, offset) -> value, of every input record the loop read.
    input_read: BTreeMap<(i32, i64), Bytes>,
    /// Input records whose output the observer has seen committed.
    covered: BTreeSet<(i32, i64)>,
    /// Input records read by the loop whose output the observer has not
    /// seen yet.
    uncovered: BTreeSet<(i32, i64)>,
    /// (output partition, offset) -> value, from the observer's reads.
    output_seen: BTreeMap<(i32, i64), Bytes>,
    /// (output partition, offset) -> (transaction, value), of every output
    /// record Produce acknowledged.
    output_acked: BTreeMap<(i32, i64), (EosTxnIndex, Bytes)>,
    /// Per input partition, every OffsetFetch answer in the order they
    /// arrived: (when, the highest offset answered so far).
    answers: BTreeMap<i32, Vec<(u64, i64)>>,
    /// A logical clock ordering requests and answers.
    events: u64,
    /// Input records already reported missing below a committed offset
    /// (reported once, not at every later observation).
    reported_missing: BTreeSet<(i32, i64)>,
    violations: Vec<String>,
    pub stats: EosStats,
}

fn show(v: &Bytes) -> String {
    String::from_utf8_lossy(v).into_owned()
}

impl EosHistory {
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

    /// OffsetFetch, sent at `sent_at` (a [`tick`](Self::tick)), answered
    /// `committed` for input `partition`: never below an answer received
    /// before it was sent (answers to requests in flight together may come
    /// in either order).
    pub fn offset_read(&mut self, partition: i32, committed: i64, sent_at: u64) {
        let answered_at = self.tick();
        let answers = self.answers.entry(partition).or_default();
        let before = answers.partition_point(|&(at, _)| at < sent_at);
        if let Some(&(_, highest)) = before.checked_sub(1).and_then(|i| answers.get(i)) {
            if committed < highest {
                self.violations.push(format!(
                    "{EOS_GROUP}: the committed offset of input partition {partition} went back from {highest} to {committed}"
                ));
            }
        }
        let highest = answers.last().map_or(committed, |&(_, h)| h.max(committed));
        answers.push((answered_at, highest));
    }

    /// The loop read `records` of input `partition` at read_committed.
    pub fn input_read(&mut self, partition: i32, records: &[(i64, Bytes)]) {
        for (offset, value) in records {
            let key = (partition, *offset);
            if let Some(earlier) = self.input_read.insert(key, value.clone()) {
                if earlier != *value {
                    self.violations.push(format!(
                        "EOS input partition {partition} offset {offset}: read {} but earlier {}",
                        show(value),
                        show(&earlier)
                    ));
                }
            }
            if !self.covered.contains(&key) {
                self.uncovered.insert(key);
            }
        }
    }

    pub fn begin(&mut self, txn: EosTxn) -> EosTxnIndex {
        self.stats.begun += 1;
        self.stats.records_transformed += txn.inputs.len() as u64;
        self.txns.push(txn);
        self.txns.len() - 1
    }

    pub fn end(&mut self, txn: EosTxnIndex, end: TxnEnd) {
        let Some(t) = self.txns.get_mut(txn) else {
            return;
        };
        t.end = end;
        match end {
            TxnEnd::CommitAcked => self.stats.commits_acked += 1,
            TxnEnd::CommitUnknown => self.stats.commits_unknown += 1,
            TxnEnd::AbortAcked => self.stats.aborts_acked += 1,
            TxnEnd::Fenced => self.stats.fenced += 1,
            TxnEnd::Abandoned | TxnEnd::AbortUnknown | TxnEnd::Open => {}
        }
    }

    /// Produce acknowledged `values` of transaction `txn` on output
    /// `partition` at `base_offset` onwards.
    pub fn output_acked(
        &mut self,
        txn: EosTxnIndex,
        partition: i32,
        base_offset: i64,
        values: &[Bytes],
    ) {
        self.stats.outputs_acked += values.len() as u64;
        for (i, value) in values.iter().enumerate() {
            let at = (partition, base_offset + i as i64);
            if let Some((other, _)) = self.output_acked.insert(at, (txn, value.clone())) {
                if other != txn {
                    self.violations.push(format!(
                        "{EOS_OUTPUT_TOPIC} partition {partition} offset {}: Produce acknowledged records of EOS transactions {other} and {txn} there",
                        at.1
                    ));
                }
            }
        }
    }

    /// Checks the final read_uncommitted read of the output (`uncommitted`)
    /// against the read_committed one (`committed`, already checked by
    /// [`check_final`](Self::check_final)): every acknowledged output record
    /// is there at the offset Produce named, whatever its transaction's end
    /// (Kafka removes aborted data only by retention or compaction, and the
    /// output has neither); every record is one the loop wrote; and the
    /// read_committed read is the read_uncommitted one less the records of
    /// transactions that did not commit, offset for offset. A commit with
    /// no definite answer took the end the read_committed read shows.
    pub fn check_uncommitted(&mut self, committed: &Logs, uncommitted: &Logs) -> Vec<String> {
        let mut v = Vec::new();
        let at = |logs: &Logs| -> BTreeMap<(i32, i64), Bytes> {
            logs.iter()
                .flat_map(|(&p, log)| log.iter().map(move |(o, b)| ((p, *o), b.clone())))
                .collect()
        };
        let (committed_at, uncommitted_at) = (at(committed), at(uncommitted));
        for (&(p, offset), (txn, value)) in &self.output_acked {
            if uncommitted_at.get(&(p, offset)) != Some(value) {
                v.push(format!(
                    "{EOS_OUTPUT_TOPIC} partition {p} offset {offset}: EOS transaction {txn}'s output {} was acknowledged there, but read_uncommitted finds {:?}: a lost write",
                    show(value),
                    uncommitted_at.get(&(p, offset)).map(show)
                ));
            }
        }
        let seen_committed: BTreeSet<EosTxnIndex> = committed_at
            .values()
            .filter_map(parse_output)
            .map(|o| o.txn)
            .collect();
        let visible = |txn: EosTxnIndex| match self.txns.get(txn).map(|t| t.end) {
            Some(TxnEnd::CommitAcked) => true,
            Some(TxnEnd::CommitUnknown) => seen_committed.contains(&txn),
            _ => false,
        };
        let mut not_committed = 0;
        let mut expected: BTreeMap<(i32, i64), &Bytes> = BTreeMap::new();
        for (&(p, offset), value) in &uncommitted_at {
            match parse_output(value) {
                Some(o) if visible(o.txn) => {
                    expected.insert((p, offset), value);
                }
                Some(_) => not_committed += 1,
                None => v.push(format!(
                    "{EOS_OUTPUT_TOPIC} partition {p} offset {offset}: read_uncommitted returned a record the loop never wrote: {}",
                    show(value)
                )),
            }
        }
        let differs = expected
            .keys()
            .chain(committed_at.keys())
            .find(|k| expected.get(k).copied() != committed_at.get(k));
        if let Some(&(p, offset)) = differs {
            v.push(format!(
                "{EOS_OUTPUT_TOPIC} partition {p} offset {offset}: read_committed delivered {:?}, but read_uncommitted less what did not commit has {:?}",
                committed_at.get(&(p, offset)).map(show),
                expected.get(&(p, offset)).map(|b| show(b))
            ));
        }
        self.stats.final_uncommitted_records = uncommitted_at.len() as u64;
        self.stats.final_uncommitted_not_committed = not_committed;
        v
    }

    /// The observer read `records` of output `partition` at read_committed.
    pub fn output_read(&mut self, partition: i32, records: &[(i64, Bytes)]) {
        for (offset, value) in records {
            if let Some(earlier) = self.output_seen.insert((partition, *offset), value.clone()) {
                if earlier != *value {
                    self.violations.push(format!(
                        "{EOS_OUTPUT_TOPIC} partition {partition} offset {offset}: read_committed returned {} but earlier {}",
                        show(value),
                        show(&earlier)
                    ));
                }
            }
            match parse_output(value) {
                Some(o) => {
                    let key = (o.partition, o.offset);
                    self.covered.insert(key);
                    self.uncovered.remove(&key);
                }
                None => self.violations.push(format!(
                    "{EOS_OUTPUT_TOPIC} partition {partition} offset {offset}: a record the loop never wrote: {}",
                    show(value)
                )),
            }
        }
    }

    /// OffsetFetch (sent at `sent_at`) answered `committed` for input
    /// `partition` ([`offset_read`](Self::offset_read)), and the observer
    /// has since read the output at read_committed up to its last
    /// stable offset (`output_read`). `in_flight`: an EndTxn(commit) of
    /// the loop was in flight when the answer came.
    pub fn committed_observed(
        &mut self,
        partition: i32,
        committed: i64,
        sent_at: u64,
        in_flight: bool,
    ) {
        self.offset_read(partition, committed, sent_at);
        if committed <= 0 {
            return;
        }
        self.stats.observations += 1;
        self.stats.observations_in_flight += u64::from(in_flight);
        let missing: Vec<i64> = self
            .uncovered
            .range((partition, 0)..(partition, committed))
            .map(|&(_, o)| o)
            .take(5)
            .collect();
        if missing
            .first()
            .is_some_and(|&o| self.reported_missing.insert((partition, o)))
        {
            self.violations.push(format!(
                "{EOS_GROUP}: OffsetFetch answered committed offset {committed} for input partition {partition}{}, but a read_committed read of {EOS_OUTPUT_TOPIC} made after it lacks the output of input offsets {missing:?}: the offsets are visible before the markers of the transaction that committed them are durable (or that output is lost)",
                if in_flight { " while an EndTxn(commit) was in flight" } else { "" }
            ));
        }
    }

    /// Checks the final read_committed read of the output (`output`) against
    /// the final read of the input (`input`, every record of every
    /// partition, offset order) and the group's final committed offsets
    /// (`committed`, -1 for none). Returns every violation, those found
    /// during the run too.
    pub fn check_final(
        &mut self,
        input: &BTreeMap<i32, Vec<(i64, Bytes)>>,
        output: &BTreeMap<i32, Vec<(i64, Bytes)>>,
        committed: &BTreeMap<i32, i64>,
    ) -> Vec<String> {
        let mut v = self.violations.clone();
        let input_at: BTreeMap<(i32, i64), &Bytes> = input
            .iter()
            .flat_map(|(&p, log)| log.iter().map(move |(o, value)| ((p, *o), value)))
            .collect();
        // Where each input record's output is, and how many of each
        // transaction's outputs are visible.
        let mut found: BTreeMap<(i32, i64), Vec<(i32, i64)>> = BTreeMap::new();
        let mut per_txn: BTreeMap<EosTxnIndex, usize> = BTreeMap::new();
        let mut final_at: BTreeMap<(i32, i64), &Bytes> = BTreeMap::new();
        for (&p, log) in output {
            for (offset, value) in log {
                final_at.insert((p, *offset), value);
                let Some(o) = parse_output(value) else {
                    v.push(format!(
                        "{EOS_OUTPUT_TOPIC} partition {p} offset {offset}: a record the loop never wrote: {}",
                        show(value)
                    ));
                    continue;
                };
                if o.partition != p {
                    v.push(format!(
                        "{EOS_OUTPUT_TOPIC} partition {p} offset {offset}: the output of input partition {} is on partition {p}",
                        o.partition
                    ));
                }
                match input_at.get(&(o.partition, o.offset)) {
                    Some(&value) if *value == o.input => {}
                    other => v.push(format!(
                        "{EOS_OUTPUT_TOPIC} partition {p} offset {offset}: transformed input {}@{} as {}, but the input there is {:?}",
                        o.partition,
                        o.offset,
                        show(&o.input),
                        other.map(|b| show(b))
                    )),
                }
                found
                    .entry((o.partition, o.offset))
                    .or_default()
                    .push((p, *offset));
                *per_txn.entry(o.txn).or_default() += 1;
            }
        }
        for (&(ip, io), at) in &found {
            if at.len() > 1 {
                v.push(format!(
                    "exactly once: input {ip}@{io} is in the committed output {} times, at {at:?}",
                    at.len()
                ));
            }
        }
        for (&p, log) in input {
            let c = committed.get(&p).copied().unwrap_or(-1).max(0);
            let end = log.last().map_or(0, |(o, _)| o + 1);
            // The input producer is not idempotent: an attempt it gave up
            // on (held in a clogged link, or queued behind a slow request on
            // a connection it dropped) may be appended after it stopped,
            // and after the loop drained. Such a late copy repeats a batch
            // already in the input; anything else past the committed offset
            // is input the loop left unprocessed.
            let earlier: BTreeSet<&Bytes> =
                log.iter().filter(|(o, _)| *o < c).map(|(_, b)| b).collect();
            let unprocessed: Vec<i64> = log
                .iter()
                .filter(|(o, b)| *o >= c && !earlier.contains(b))
                .map(|(o, _)| *o)
                .collect();
            self.stats.late_input_copies +=
                ((end - c).max(0) as u64).saturating_sub(unprocessed.len() as u64);
            if c > end || !unprocessed.is_empty() {
                v.push(format!(
                    "liveness: the loop drained, yet the committed offset of input partition {p} is {c}, the input ends at {end} (unprocessed: {:?})",
                    &unprocessed[..unprocessed.len().min(5)]
                ));
            }
            let missing: Vec<i64> = log
                .iter()
                .map(|(o, _)| *o)
                .filter(|o| *o < c && !found.contains_key(&(p, *o)))
                .take(5)
                .collect();
            if !missing.is_empty() {
                v.push(format!(
                    "exactly once: input partition {p} is committed up to {c}, but the output lacks input offsets {missing:?}"
                ));
            }
        }
        let beyond: Vec<(i32, i64)> = found
            .keys()
            .filter(|(p, o)| *o >= committed.get(p).copied().unwrap_or(-1).max(0))
            .take(5)
            .copied()
            .collect();
        if !beyond.is_empty() {
            v.push(format!(
                "exactly once: the output holds inputs {beyond:?}, at or above their partition's committed offset (output committed without its offsets)"
            ));
        }
        for (i, t) in self.txns.iter().enumerate() {
            let present = per_txn.remove(&i).unwrap_or(0);
            let total = t.inputs.len();
            let name = || {
                format!(
                    "EOS transaction {i} (instance {}, pid {} epoch {}, {:?})",
                    t.instance, t.producer_id, t.epoch, t.end
                )
            };
            if present > 0 && (t.end.must_be_absent() || t.end == TxnEnd::Open) {
                v.push(format!(
                    "{}: {present} of its {total} outputs are committed, but it did not commit",
                    name()
                ));
            } else if t.end == TxnEnd::CommitAcked && present < total {
                v.push(format!(
                    "{}: only {present} of its {total} outputs are visible after its commit was acknowledged",
                    name()
                ));
            } else if t.end == TxnEnd::CommitUnknown && present > 0 && present < total {
                v.push(format!(
                    "{}: {present} of its {total} outputs are visible (all or none)",
                    name()
                ));
            }
        }
        for (txn, n) in per_txn {
            v.push(format!(
                "{EOS_OUTPUT_TOPIC}: {n} records of EOS transaction {txn}, which the loop never began"
            ));
        }
        for (&(p, offset), value) in &self.output_seen {
            if final_at.get(&(p, offset)) != Some(&value) {
                v.push(format!(
                    "{EOS_OUTPUT_TOPIC} partition {p} offset {offset}: read_committed returned {} during the run, the final read has {:?}",
                    show(value),
                    final_at.get(&(p, offset)).map(|b| show(b))
                ));
            }
        }
        for (&(p, offset), value) in &self.input_read {
            if input_at.get(&(p, offset)) != Some(&value) {
                v.push(format!(
                    "EOS input partition {p} offset {offset}: the loop read {}, the final read has {:?}",
                    show(value),
                    input_at.get(&(p, offset)).map(|b| show(b))
                ));
            }
        }
        self.stats.final_records = output.values().map(|l| l.len() as u64).sum();
        if v.len() > 20 {
            let more = v.len() - 20;
            v.truncate(20);
            v.push(format!("... and {more} more"));
        }
        v
    }

    /// A fingerprint of everything observed (the determinism check).
    pub fn fingerprint(&self, output: Option<&BTreeMap<i32, Vec<(i64, Bytes)>>>) -> u64 {
        let mut h = std::hash::DefaultHasher::new();
        output.hash(&mut h);
        self.txns.hash(&mut h);
        self.output_seen.hash(&mut h);
        self.output_acked.hash(&mut h);
        self.answers.hash(&mut h);
        self.stats.hash(&mut h);
        h.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    fn input(n: i64) -> BTreeMap<i32, Vec<(i64, Bytes)>> {
        BTreeMap::from([(0, (0..n).map(|o| (o, b(&format!("v{o}")))).collect())])
    }

    /// A transaction of the loop transforming input offsets `from..to` of
    /// partition 0; returns it and its output records.
    fn txn(h: &mut EosHistory, from: i64, to: i64, end: TxnEnd) -> Vec<Bytes> {
        let records: Vec<(i64, Bytes)> = (from..to).map(|o| (o, b(&format!("v{o}")))).collect();
        h.input_read(0, &records);
        let i = h.begin(EosTxn {
            instance: 0,
            producer_id: 9,
            epoch: 0,
            inputs: (from..to).map(|o| (0, o)).collect(),
            offsets: BTreeMap::from([(0, to)]),
            end: TxnEnd::Open,
        });
        h.end(i, end);
        records
            .iter()
            .map(|(o, v)| output_value(0, *o, i, v))
            .collect()
    }

    fn log(values: &[Bytes]) -> Vec<(i64, Bytes)> {
        values
            .iter()
            .enumerate()
            .map(|(i, v)| (i as i64, v.clone()))
            .collect()
    }

    #[test]
    fn read_uncommitted_holds_every_acknowledged_output_and_committed_is_it_less_the_aborted() {
        let mut h = EosHistory::default();
        let aborted = txn(&mut h, 0, 2, TxnEnd::AbortAcked);
        let committed = txn(&mut h, 2, 4, TxnEnd::CommitAcked);
        h.output_acked(0, 0, 0, &aborted);
        h.output_acked(1, 0, 3, &committed);
        // Offset 2 holds the abort marker, which no client delivers.
        let uncommitted = BTreeMap::from([(
            0,
            vec![
                (0, aborted[0].clone()),
                (1, aborted[1].clone()),
                (3, committed[0].clone()),
                (4, committed[1].clone()),
            ],
        )]);
        let read_committed = BTreeMap::from([(
            0,
            vec![(3, committed[0].clone()), (4, committed[1].clone())],
        )]);
        assert_eq!(
            h.check_uncommitted(&read_committed, &uncommitted),
            Vec::<String>::new()
        );
        assert_eq!(
            (
                h.stats.final_uncommitted_records,
                h.stats.final_uncommitted_not_committed
            ),
            (4, 2)
        );
    }

    #[test]
    fn an_acknowledged_output_missing_at_read_uncommitted_or_an_aborted_one_committed_fails() {
        let mut h = EosHistory::default();
        let aborted = txn(&mut h, 0, 2, TxnEnd::AbortAcked);
        h.output_acked(0, 0, 0, &aborted);
        // The aborted transaction's second record is gone.
        let uncommitted = BTreeMap::from([(0, vec![(0, aborted[0].clone())])]);
        let v = h.check_uncommitted(&BTreeMap::new(), &uncommitted);
        assert!(
            v.iter()
                .any(|m| m.contains("offset 1") && m.contains("a lost write")),
            "{v:?}"
        );
        // Delivered at read_committed, though its transaction aborted.
        let uncommitted = BTreeMap::from([(0, log(&aborted))]);
        let v = h.check_uncommitted(&uncommitted, &uncommitted);
        assert!(
            v.iter()
                .any(|m| m.contains("read_uncommitted less what did not commit has None")),
            "{v:?}"
        );
    }

    #[test]
    fn output_values_round_trip() {
        let v = output_value(2, 17, 4, &b("p1-b2|r3"));
        let o = parse_output(&v).expect("parses");
        assert_eq!((o.partition, o.offset, o.txn), (2, 17, 4));
        assert_eq!(o.input, b("p1-b2|r3"));
        assert_eq!(parse_output(&b("p0-b1-r1")), None);
    }

    #[test]
    fn exactly_once_output_with_offsets_after_markers_passes() {
        let mut h = EosHistory::default();
        let mut out = txn(&mut h, 0, 3, TxnEnd::CommitAcked);
        // Offset 3 is visible and so are the outputs below it.
        h.output_read(0, &log(&out));
        let t = h.tick();
        h.committed_observed(0, 3, t, true);
        txn(&mut h, 3, 5, TxnEnd::AbortAcked);
        out.extend(txn(&mut h, 3, 5, TxnEnd::CommitAcked));
        let v = h.check_final(
            &input(5),
            &BTreeMap::from([(0, log(&out))]),
            &BTreeMap::from([(0, 5)]),
        );
        assert_eq!(v, Vec::<String>::new());
        assert_eq!(h.stats.observations_in_flight, 1);
    }

    #[test]
    fn an_offset_visible_before_its_outputs_fails() {
        let mut h = EosHistory::default();
        let out = txn(&mut h, 0, 3, TxnEnd::CommitAcked);
        // The read after the OffsetFetch answer saw only the first output.
        h.output_read(0, &log(&out[..1]));
        let t = h.tick();
        h.committed_observed(0, 3, t, true);
        assert!(
            h.violations()
                .iter()
                .any(|m| m.contains("lacks the output of input offsets [1, 2]")),
            "{:?}",
            h.violations()
        );
    }

    #[test]
    fn committed_offsets_going_back_fail() {
        let mut h = EosHistory::default();
        // Sent together, answered in either order: fine.
        let (s1, s2) = (h.tick(), h.tick());
        h.offset_read(0, 5, s2);
        h.offset_read(0, 3, s1);
        assert_eq!(h.violations(), &[] as &[String]);
        // Sent after an answer of 5: 4 went back.
        let s3 = h.tick();
        h.offset_read(0, 4, s3);
        assert!(h
            .violations()
            .iter()
            .any(|m| m.contains("went back from 5 to 4")));
    }

    #[test]
    fn a_duplicate_or_a_missing_output_fails() {
        let mut h = EosHistory::default();
        let a = txn(&mut h, 0, 2, TxnEnd::CommitAcked);
        let b2 = txn(&mut h, 1, 3, TxnEnd::CommitAcked);
        let out = vec![a[0].clone(), a[1].clone(), b2[0].clone()];
        let v = h.check_final(
            &input(4),
            &BTreeMap::from([(0, log(&out))]),
            &BTreeMap::from([(0, 4)]),
        );
        assert!(
            v.iter()
                .any(|m| m.contains("input 0@1 is in the committed output 2 times")),
            "{v:?}"
        );
        assert!(
            v.iter().any(|m| m.contains("lacks input offsets [2, 3]")),
            "{v:?}"
        );
        assert!(
            v.iter().any(|m| m.contains("only 1 of its 2 outputs")),
            "{v:?}"
        );
    }

    #[test]
    fn output_of_an_aborted_transaction_or_beyond_the_offsets_fails() {
        let mut h = EosHistory::default();
        let a = txn(&mut h, 0, 2, TxnEnd::Fenced);
        let v = h.check_final(&input(2), &BTreeMap::from([(0, log(&a))]), &BTreeMap::new());
        assert!(v.iter().any(|m| m.contains("did not commit")), "{v:?}");
        assert!(v.iter().any(|m| m.contains("without its offsets")), "{v:?}");
        assert!(v.iter().any(|m| m.contains("input ends at 2")), "{v:?}");
    }

    #[test]
    fn input_past_the_drained_loop_is_allowed_only_as_a_late_copy() {
        let mut h = EosHistory::default();
        let out = txn(&mut h, 0, 3, TxnEnd::CommitAcked);
        let output = BTreeMap::from([(0, log(&out))]);
        let committed = BTreeMap::from([(0, 3)]);
        // Offset 3 repeats offset 2's record: a given-up attempt appended
        // after the loop drained.
        let mut late = input(3);
        late.get_mut(&0).unwrap().push((3, b("v2")));
        assert_eq!(
            h.check_final(&late, &output, &committed),
            Vec::<String>::new()
        );
        assert_eq!(h.stats.late_input_copies, 1);
        // A record never seen before is input the loop left behind.
        let mut h = EosHistory::default();
        let out = txn(&mut h, 0, 3, TxnEnd::CommitAcked);
        let v = h.check_final(&input(4), &BTreeMap::from([(0, log(&out))]), &committed);
        assert!(v.iter().any(|m| m.contains("unprocessed: [3]")), "{v:?}");
    }

    #[test]
    fn a_transformed_value_that_is_not_the_input_fails() {
        let mut h = EosHistory::default();
        txn(&mut h, 0, 1, TxnEnd::CommitAcked);
        let forged = output_value(0, 0, 0, &b("other"));
        let v = h.check_final(
            &input(1),
            &BTreeMap::from([(0, log(&[forged]))]),
            &BTreeMap::from([(0, 1)]),
        );
        assert!(
            v.iter().any(|m| m.contains("but the input there is")),
            "{v:?}"
        );
    }
}
