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
//! - the final log's offsets are dense from its log start (0 unless
//!   records were deleted, `crate::retention_history`): no holes, no offset
//!   twice;
//! - an offset never maps to two different records, whoever reported them
//!   (two acks, an ack and a fetch, two fetches, a fetch and the final log):
//!   fetches only return durable data, so what a consumer saw is never taken
//!   back;
//! - the high watermark never goes below what was already known durable
//!   (an acknowledged offset, or an earlier high watermark);
//! - every record in the log is one a producer sent.
//!
//! A record acknowledged or read may be missing from the final log only
//! below its log start, and only if its deletion was allowed (a
//! DeleteRecords asked for it, or `retention.ms` let it age out); no
//! answer may show a log start below one acknowledged or shown before
//! (`crate::retention_history`).
//!
//! Records that were never acknowledged may be present or absent, and a
//! retried produce may be present more than once (as often as it was sent):
//! both are allowed without idempotence. Plain producers at acks=1 and
//! acks=0 are held to what those levels promise (`crate::low_acks`): their
//! records count as sent and, once fetched, as read, like every other, but an
//! acks=1 acknowledgement is no claim that the offset is durable.
//!
//! Idempotent producers (every batch retried with the same bytes until
//! acknowledged) are held to more:
//! - every record of an idempotent batch is in the final log at most once,
//!   and an acknowledged one exactly once (at its acknowledged offset, by
//!   the rules above);
//! - a batch is whole or absent, its records at consecutive offsets;
//! - within one producer session (producer id and epoch) and partition, the
//!   batches in the log are a prefix of those sent, in sequence order, at
//!   increasing offsets: the broker never appends past a sequence gap;
//! - a producer id is never handed out twice, whatever restarts happened
//!   (every InitProducerId answer is recorded), always at epoch 0 and from
//!   this broker's slice of the id space.

use crate::expiries::forgot_between;
use crate::low_acks::{LowAcksHistory, LowAcksStats};
use crate::retention_history::{Deletion, RetentionHistory, RetentionStats};
use bytes::Bytes;
use kaas_core::coverage::ProducerExpiry;
use kaas_core::producer::{local_pid_range, pid_for, PID_BLOCK_SIZE};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::hash::{BuildHasherDefault, DefaultHasher, Hash, Hasher};

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
    /// Produce requests sent with batches for more than one partition.
    pub multi_partition_requests: u64,
    /// Produce requests sent with batches for both [`TOPIC`] and
    /// [`TWIN_TOPIC`] (counted in the main topic's history).
    pub multi_topic_requests: u64,
    pub batches_abandoned: u64,
    pub fetches: u64,
    pub records_fetched: u64,
    pub fetch_errors: u64,
}

/// Counters of the idempotent producers, for the report and the gates.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IdempotenceStats {
    pub batches_sent: u64,
    pub batches_acked: u64,
    /// Requests sent again with the same bytes.
    pub resends: u64,
    /// Successful answers the producer treated as lost.
    pub answers_lost: u64,
    /// Retries the broker demonstrably answered as duplicates: the answer
    /// named the offset an earlier (lost) answer had, or an offset that was
    /// already known durable when the retry was sent.
    pub duplicates_confirmed: u64,
    /// OUT_OF_ORDER_SEQUENCE_NUMBER / UNKNOWN_PRODUCER_ID answers for a
    /// batch behind an unacknowledged one (retried in order later).
    pub sequence_errors: u64,
    pub resets: u64,
    pub epoch_bumps: u64,
    /// Late copies of an older epoch's first batch refused with
    /// INVALID_PRODUCER_EPOCH after a newer epoch wrote there.
    pub stale_epochs_refused: u64,
    /// Unacknowledged batches given up at a reset.
    pub batches_abandoned: u64,
    pub pids_granted: u64,
    /// Successful InitProducerId answers the producer treated as lost and
    /// asked again; their ids count as handed out.
    pub inits_lost: u64,
    /// InitProducerId requests sent and never answered.
    pub inits_unknown: u64,
    /// Retries appended a second time because their partition forgot the
    /// producer in between (`producer.id.expiration.ms`), as in Kafka.
    pub appended_again_after_expiry: u64,
    /// UNKNOWN_PRODUCER_ID for a producer's first unacknowledged batch on a
    /// partition that forgot it, or OUT_OF_ORDER_SEQUENCE_NUMBER once a
    /// late old-epoch copy re-created its state there: the producer starts
    /// over with a new id.
    pub sequence_errors_after_expiry: u64,
}

/// How a plain acks=all batch ended when no answer acknowledged it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GaveUp {
    /// Some attempt had a connection to a broker: the batch may be in the
    /// log, once or more often (Jepsen's "info": indeterminate).
    Unknown,
    /// No attempt ever had a connection: the batch cannot be anywhere
    /// (Jepsen's "fail"), and a read showing one of its records is a
    /// record nobody sent.
    NeverSent,
}

/// The indeterminate and the failed acks=all batches, and what the final
/// log made of the indeterminate ones.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OutcomeStats {
    pub batches_unknown: u64,
    /// Records of those batches found in the final log.
    pub unknown_found: u64,
    pub batches_never_sent: u64,
}

/// One idempotent batch as its producer built it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdempotentBatch {
    /// The producer actor (its index).
    pub producer: usize,
    pub pid: i64,
    pub epoch: i16,
    pub partition: i32,
    pub base_sequence: i32,
    pub values: Vec<Bytes>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct IdempotentEntry {
    batch: IdempotentBatch,
    /// The offset a successful answer named (lost or not).
    answered: Option<i64>,
    /// A successful answer reached the producer.
    acked: bool,
}

/// (producer id, epoch, partition): within one, sequences are consecutive.
type Session = (i64, i16, i32);

/// Index of a batch in [`History::idempotent_batch`]'s order.
pub type BatchIndex = usize;

/// A set of record values with fixed hash keys: a `RandomState` would draw
/// its keys from the seed's random stream (madsim makes `getrandom`
/// deterministic), so building one would change the run the seed names.
type ValueSet = HashSet<Bytes, BuildHasherDefault<DefaultHasher>>;

/// Everything the workload observed.
#[derive(Debug, Default)]
pub struct History {
    /// Hashed, not sorted: only ever asked whether it holds a value, once
    /// per record claimed, and values share long prefixes.
    sent: ValueSet,
    /// (partition, offset) -> record, from produce acknowledgements.
    acked: BTreeMap<(i32, i64), Bytes>,
    /// (partition, offset) -> record, from fetches during the run.
    observed: BTreeMap<(i32, i64), Bytes>,
    /// Per partition, the highest offset known durable plus one.
    durable_end: BTreeMap<i32, i64>,
    violations: Vec<String>,
    pub stats: HistoryStats,
    /// Every idempotent batch sent, with what the broker answered.
    idempotent: Vec<IdempotentEntry>,
    /// Every producer id an InitProducerId answer handed out.
    pids: BTreeSet<i64>,
    pub idem: IdempotenceStats,
    /// Brokers whose slices of the producer id space are allowed (0 and 1
    /// both mean broker 0 alone).
    brokers: i32,
    /// What plain producers sent at acks=1 and acks=0, and acks=1's answers.
    pub low_acks: LowAcksHistory,
    /// What DeleteRecords and retention.ms allow to go from the topic.
    pub retention: RetentionHistory,
    /// Records of acks=all batches given up with an indeterminate outcome.
    unknown: ValueSet,
    /// Records of acks=all batches no attempt of which reached a broker.
    never_sent: ValueSet,
    outcomes: OutcomeStats,
    /// The partitions' producer expiries, when a test gives them; else
    /// the brokers' record (`kaas_core::coverage::producer_expiries`).
    pub expiries_given: Option<Vec<ProducerExpiry>>,
}

/// The main topic, which this checker watches: every plain and idempotent
/// producer, consumer and group member uses it; auto-created by the first
/// Produce.
pub const TOPIC: &str = "sim";

/// The main topic's twin, in seeds that draw it (`SimParams::twin_topic`):
/// the plain producers' requests carry batches for it beside [`TOPIC`]'s,
/// as a client's request to a broker carries every topic that broker
/// leads for it, and a [`History`] of its own holds it to the same rules.
/// Auto-created by the first Produce with the broker's defaults, so it
/// has [`TOPIC`]'s partition count and nothing is deleted from it.
pub const TWIN_TOPIC: &str = "simtwin";

/// Why a value does not map to a record we sent.
fn show(value: &Bytes) -> String {
    String::from_utf8_lossy(value).into_owned()
}

impl History {
    pub fn new() -> History {
        History::default()
    }

    /// Every time a partition of the main topic forgot a producer so far.
    pub fn expiries(&self) -> Vec<ProducerExpiry> {
        self.expiries_given
            .clone()
            .unwrap_or_else(kaas_core::coverage::producer_expiries)
    }

    /// A rule broken while the run is going (reported at the end).
    pub fn violation(&mut self, message: String) {
        self.violations.push(message);
    }

    pub fn violations(&self) -> &[String] {
        &self.violations
    }

    /// A fetch sent when the log start floor was `start_floor` answered
    /// the log start `log_start` and `records`: see
    /// [`RetentionHistory::fetched`].
    pub fn fetched_start(
        &mut self,
        partition: i32,
        start_floor: i64,
        log_start: i64,
        records: &[(i64, Bytes)],
    ) {
        let first = records.first().map(|(o, _)| *o);
        self.retention
            .fetched(partition, start_floor, log_start, first);
    }

    /// A batch is about to be produced (first attempt).
    pub fn sent(&mut self, values: &[Bytes]) {
        self.stats.batches_sent += 1;
        self.stats.records_sent += values.len() as u64;
        self.sent.extend(values.iter().cloned());
    }

    /// A plain acks=all producer gave `values` (one batch) up, unacknowledged.
    pub fn gave_up(&mut self, values: &[Bytes], how: GaveUp) {
        let set = match how {
            GaveUp::Unknown => {
                self.outcomes.batches_unknown += 1;
                &mut self.unknown
            }
            GaveUp::NeverSent => {
                self.outcomes.batches_never_sent += 1;
                &mut self.never_sent
            }
        };
        set.extend(values.iter().cloned());
    }

    /// The record was never on the wire, or nobody wrote it at all.
    fn never_written(&self, value: &Bytes) -> Option<&'static str> {
        if !self.sent.contains(value) {
            Some("a record nobody sent")
        } else if self.never_sent.contains(value) {
            Some("a record of a batch no attempt of which reached a broker")
        } else {
            None
        }
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
        if let Some(what) = self.never_written(value) {
            self.violations.push(format!(
                "partition {partition} offset {offset}: {source} {what}: {:?}",
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

    /// An InitProducerId answer handed out `pid` at `epoch`.
    pub fn pid_granted(&mut self, producer: usize, pid: i64, epoch: i16) {
        self.idem.pids_granted += 1;
        if !self.pids.insert(pid) {
            self.violations.push(format!(
                "producer {producer}: InitProducerId handed out producer id {pid}, which it had handed out before"
            ));
        }
        if epoch != 0 {
            self.violations.push(format!(
                "producer {producer}: InitProducerId gave a fresh producer id {pid} at epoch {epoch}, not 0"
            ));
        }
        let slice = |broker| {
            pid_for(broker, local_pid_range().start)..pid_for(broker, local_pid_range().end)
        };
        if !(0..self.brokers.max(1)).any(|b| slice(b).contains(&pid)) {
            self.violations.push(format!(
                "producer {producer}: producer id {pid} is outside the slices of brokers 0..{} (broker 0's is {:?})",
                self.brokers.max(1),
                slice(0)
            ));
        }
    }

    /// Several brokers hand out producer ids, each from its own slice, and
    /// a takeover may drop a live leader's unsynced appends.
    pub fn set_brokers(&mut self, brokers: i32) {
        self.brokers = brokers;
        self.low_acks.set_losses_unattributed(brokers > 1);
    }

    /// Every producer id handed to an idempotent producer.
    pub fn granted_pids(&self) -> &BTreeSet<i64> {
        &self.pids
    }

    /// How many distinct allocator blocks the handed-out ids come from: more
    /// than one means ids were drawn by more than one broker incarnation.
    pub fn pid_blocks(&self) -> usize {
        self.pids
            .iter()
            .map(|pid| (pid - pid_for(0, 0)).div_euclid(PID_BLOCK_SIZE))
            .collect::<BTreeSet<_>>()
            .len()
    }

    /// An idempotent batch is about to be produced (first attempt).
    pub fn idempotent_batch(&mut self, batch: IdempotentBatch) -> BatchIndex {
        self.sent(&batch.values);
        self.idem.batches_sent += 1;
        self.idempotent.push(IdempotentEntry {
            batch,
            answered: None,
            acked: false,
        });
        self.idempotent.len() - 1
    }

    /// The broker answered idempotent batch `index` with success at
    /// `base_offset`. With `lost` the producer treats the answer as lost and
    /// retries the batch; the answer is a claim about the log all the same.
    /// Returns whether an earlier answer named the same offset: then this
    /// answer is to a retry the broker recognised as a duplicate.
    pub fn idempotent_answered(&mut self, index: BatchIndex, base_offset: i64, lost: bool) -> bool {
        let expiries = self.expiries();
        let Some(entry) = self.idempotent.get_mut(index) else {
            return false;
        };
        let earlier = entry.answered.replace(base_offset);
        let b = &entry.batch;
        let appended_again = earlier.is_some_and(|e| {
            e < base_offset && forgot_between(&expiries, TOPIC, b.partition, b.pid, e, base_offset)
        });
        if appended_again {
            // The partition forgot the producer between the two: the retry
            // was new to it, as in Kafka.
            self.idem.appended_again_after_expiry += 1;
        } else if let Some(earlier) = earlier.filter(|&e| e != base_offset) {
            self.violations.push(format!(
                "producer {} (pid {} epoch {}) batch of sequence {} on partition {}: a retry was acknowledged at offset {base_offset}, an earlier answer said {earlier}",
                b.producer, b.pid, b.epoch, b.base_sequence, b.partition
            ));
        }
        let newly_acked = !lost && !entry.acked;
        entry.acked |= !lost;
        let (partition, values) = (entry.batch.partition, entry.batch.values.clone());
        if lost {
            self.idem.answers_lost += 1;
        }
        if newly_acked {
            self.idem.batches_acked += 1;
            self.stats.batches_acked += 1;
            self.stats.records_acked += values.len() as u64;
        }
        self.claim_batch(partition, base_offset, &values, "acknowledged");
        earlier == Some(base_offset)
    }

    /// Checks and records a broker claim that `values` are at `base_offset`
    /// without counting an acknowledgement.
    fn claim_batch(&mut self, partition: i32, base_offset: i64, values: &[Bytes], source: &str) {
        for (i, value) in values.iter().enumerate() {
            let offset = base_offset + i as i64;
            self.claim(partition, offset, value, source);
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
    pub fn check_final(
        &self,
        partitions: i32,
        logs: Option<&BTreeMap<i32, PartitionLog>>,
    ) -> Vec<String> {
        let mut violations = self.violations.clone();
        violations.extend(self.retention.violations().iter().cloned());
        // `None`: the final read failed (reported as such), so there is no
        // final log to hold the acknowledgements against.
        if let Some(logs) = logs {
            violations.extend(self.check_logs(partitions, logs).0);
            violations.extend(self.check_idempotent(logs));
            violations.extend(self.low_acks_check(logs).0);
        }
        // Keep failure output readable; the first few say what happened.
        if violations.len() > 20 {
            let more = violations.len() - 20;
            violations.truncate(20);
            violations.push(format!("... and {more} more"));
        }
        violations
    }

    /// The final logs against the acknowledgements and reads (module
    /// docs); returns the violations and what the deletion rules compared.
    fn check_logs(
        &self,
        partitions: i32,
        logs: &BTreeMap<i32, PartitionLog>,
    ) -> (Vec<String>, RetentionStats) {
        let mut violations = Vec::new();
        let mut stats = self.retention.stats;
        let empty = PartitionLog::new();
        for partition in 0..partitions {
            let log = logs.get(&partition).unwrap_or(&empty);
            let start = self.retention.start_of(partition);
            stats.final_start_total += u64::try_from(start).unwrap_or(0);
            // Each of the final read's fetches was checked against the
            // log start known when it was sent (`fetched_start`).
            let mut by_offset = BTreeMap::new();
            for (i, (offset, value)) in log.iter().enumerate() {
                let expected = start + i as i64;
                if *offset != expected {
                    violations.push(format!(
                        "partition {partition}: record {i} of the final log has offset {offset} (offsets must be dense from the log start {start})"
                    ));
                    break;
                }
                by_offset.insert(*offset, value);
            }
            for (offset, value) in log {
                if let Some(what) = self.never_written(value) {
                    violations.push(format!(
                        "partition {partition} offset {offset}: final log holds {what}: {:?}",
                        show(value)
                    ));
                }
            }
            let durable = self.durable_end.get(&partition).copied().unwrap_or(0);
            let end = start + log.len() as i64;
            if end < durable {
                violations.push(format!(
                    "partition {partition}: final log ends at {end} but offsets up to {durable} were durable"
                ));
            }
            // A record read and acknowledged is counted once.
            let mut counted = BTreeSet::new();
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
                        None if *offset < start => {
                            match self.retention.deletable(partition, *offset, value) {
                                Some(why) => {
                                    if counted.insert(*offset) {
                                        match why {
                                            Deletion::Requested => stats.deleted_by_request += 1,
                                            Deletion::Aged => stats.deleted_by_age += 1,
                                        }
                                    }
                                }
                                None => violations.push(format!(
                                    "partition {partition} offset {offset}: {what} {} is missing from the final log, which starts at {start}, but no DeleteRecords asked to delete it (the highest asked for {}) and retention.ms did not allow it: a lost write",
                                    show(value),
                                    self.retention.requested(partition)
                                )),
                            }
                        }
                        None => violations.push(format!(
                            "partition {partition} offset {offset}: {what} {} is missing from the final log",
                            show(value)
                        )),
                    }
                }
            }
        }
        (violations, stats)
    }

    /// What the deletion rules compared against the final logs.
    pub fn retention_stats(
        &self,
        partitions: i32,
        logs: &BTreeMap<i32, PartitionLog>,
    ) -> RetentionStats {
        self.check_logs(partitions, logs).1
    }

    /// The low-acks rules, with the deletions this history allows.
    fn low_acks_check(&self, logs: &BTreeMap<i32, PartitionLog>) -> (Vec<String>, LowAcksStats) {
        let retention = &self.retention;
        let deleted = |partition: i32, offset: i64, value: &Bytes| {
            offset < retention.start_of(partition)
                && retention.deletable(partition, offset, value).is_some()
        };
        self.low_acks.check_with(logs, &self.observed, &deleted)
    }

    /// The idempotence rules (module docs) against the final logs.
    fn check_idempotent(&self, logs: &BTreeMap<i32, PartitionLog>) -> Vec<String> {
        let mut violations = Vec::new();
        if self.idempotent.is_empty() {
            return violations;
        }
        let expiries = self.expiries();
        let ours: BTreeSet<&Bytes> = self
            .idempotent
            .iter()
            .flat_map(|e| e.batch.values.iter())
            .collect();
        let mut found: BTreeMap<&Bytes, Vec<(i32, i64)>> = BTreeMap::new();
        for (&partition, log) in logs {
            for (offset, value) in log {
                if ours.contains(value) {
                    found.entry(value).or_default().push((partition, *offset));
                }
            }
        }
        // Per (pid, epoch, partition): (sequence, where the batch is, where
        // an answer said it was).
        type Placed = (i32, Option<i64>, Option<i64>);
        let mut sessions: BTreeMap<Session, Vec<Placed>> = BTreeMap::new();
        for IdempotentEntry {
            batch, answered, ..
        } in &self.idempotent
        {
            let start = self.retention.start_of(batch.partition);
            let name = || {
                format!(
                    "producer {} (pid {} epoch {}) batch of sequence {} on partition {}",
                    batch.producer, batch.pid, batch.epoch, batch.base_sequence, batch.partition
                )
            };
            let places: Vec<Option<&Vec<(i32, i64)>>> =
                batch.values.iter().map(|v| found.get(v)).collect();
            // A record in the log twice is a duplicate unless its partition
            // forgot the producer between the copies (a retry appended
            // again, as in Kafka); the rules below then look at the first.
            let copied_after_expiry = |copies: &Vec<(i32, i64)>| {
                copies.windows(2).all(|w| {
                    w[0].0 == batch.partition
                        && w[1].0 == batch.partition
                        && forgot_between(
                            &expiries,
                            TOPIC,
                            batch.partition,
                            batch.pid,
                            w[0].1,
                            w[1].1,
                        )
                })
            };
            if let Some(v) = batch
                .values
                .iter()
                .zip(&places)
                .find(|(_, p)| p.is_some_and(|p| p.len() > 1 && !copied_after_expiry(p)))
            {
                violations.push(format!(
                    "{}: record {} is in the final log {} times: {:?}",
                    name(),
                    show(v.0),
                    v.1.map_or(0, |p| p.len()),
                    v.1
                ));
                continue;
            }
            let present = places.iter().filter(|p| p.is_some()).count();
            let missing = batch.values.len() - present;
            // A batch the log start cuts (DeleteRecords to an offset inside
            // it): its first records gone, the rest from the start on.
            let cut = missing > 0
                && places[..missing].iter().all(Option::is_none)
                && places[missing..]
                    .iter()
                    .flatten()
                    .enumerate()
                    .all(|(i, p)| p[0] == (batch.partition, start + i as i64));
            let position = if present == 0 {
                None
            } else if cut {
                Some(start - missing as i64)
            } else if present < batch.values.len() {
                violations.push(format!(
                    "{}: only {present} of its {} records are in the final log",
                    name(),
                    batch.values.len()
                ));
                continue;
            } else {
                let at: Vec<(i32, i64)> = places.iter().flatten().map(|p| p[0]).collect();
                let Some(&(_, base)) = at.first() else {
                    continue;
                };
                let whole = at
                    .iter()
                    .enumerate()
                    .all(|(i, &(p, o))| p == batch.partition && o == base + i as i64);
                if !whole {
                    violations.push(format!(
                        "{}: its records are not at consecutive offsets of its partition: {at:?}",
                        name()
                    ));
                    continue;
                }
                Some(base)
            };
            sessions
                .entry((batch.pid, batch.epoch, batch.partition))
                .or_default()
                .push((batch.base_sequence, position, *answered));
        }
        for ((pid, epoch, partition), mut batches) in sessions {
            batches.sort_unstable();
            // Present batches must be a prefix of the sent ones, in order;
            // with records deleted, a suffix of such a prefix: the batches
            // before the first present one may be below the log start
            // (unless an answer put them above it).
            let start = self.retention.start_of(partition);
            let mut gap_at = None;
            let mut last_offset = -1;
            for (seq, position, answered) in batches {
                let deleted = start > 0 && last_offset < 0 && answered.is_none_or(|o| o < start);
                match (position, gap_at) {
                    (None, None) if deleted => {}
                    (None, None) => gap_at = Some(seq),
                    (None, Some(_)) => {}
                    (Some(offset), Some(missing)) => {
                        violations.push(format!(
                            "pid {pid} epoch {epoch} partition {partition}: the batch of sequence {seq} is in the log (offset {offset}) but the earlier one of sequence {missing} is not"
                        ));
                        break;
                    }
                    (Some(offset), None) => {
                        if offset <= last_offset {
                            violations.push(format!(
                                "pid {pid} epoch {epoch} partition {partition}: the batch of sequence {seq} is at offset {offset}, before an earlier batch of the same producer (at {last_offset})"
                            ));
                            break;
                        }
                        last_offset = offset;
                    }
                }
            }
        }
        violations
    }

    /// The given-up batches, and how many records of the indeterminate
    /// ones the final log holds.
    pub fn outcome_stats(&self, logs: &BTreeMap<i32, PartitionLog>) -> OutcomeStats {
        let found: BTreeSet<&Bytes> = logs
            .values()
            .flatten()
            .map(|(_, v)| v)
            .filter(|v| self.unknown.contains(*v))
            .collect();
        OutcomeStats {
            unknown_found: found.len() as u64,
            ..self.outcomes
        }
    }

    /// What the low-acks rules compared against the final logs.
    pub fn low_acks_stats(&self, logs: &BTreeMap<i32, PartitionLog>) -> LowAcksStats {
        self.low_acks_check(logs).1
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
    /// `extra`: whatever else the run observed (the group history).
    pub fn fingerprint(&self, logs: &BTreeMap<i32, PartitionLog>, extra: &str) -> u64 {
        // Fixed keys: the same in every run of one build.
        let mut h = DefaultHasher::new();
        logs.hash(&mut h);
        self.acked.hash(&mut h);
        self.observed.hash(&mut h);
        self.idempotent.hash(&mut h);
        self.pids.hash(&mut h);
        self.low_acks.describe().hash(&mut h);
        if self.retention.active() {
            // Only then: other seeds' fingerprints stay as they were.
            self.retention.describe().hash(&mut h);
        }
        format!("{:?} {:?}", self.stats, self.idem).hash(&mut h);
        extra.hash(&mut h);
        h.finish()
    }
}

/// On a topic no transaction writes, every fetch answer's last stable
/// offset is its high watermark: read_committed must deliver what
/// read_uncommitted does there (issue 13 item 9, "every acknowledged record
/// is readable by read_committed"). `Err` says where it was not.
pub fn lso_is_the_high_watermark(
    topic: &str,
    partition: i32,
    last_stable_offset: i64,
    high_watermark: i64,
) -> Result<(), String> {
    if last_stable_offset == high_watermark {
        return Ok(());
    }
    Err(format!(
        "{topic} partition {partition}: last stable offset {last_stable_offset} but high watermark {high_watermark}, and no transaction writes the topic"
    ))
}

/// One partition of a fetch answer, as [`starved_partitions`] sees it.
#[derive(Debug, Clone, Copy)]
pub struct AnsweredPartition {
    pub error_code: i16,
    /// The offset the fetch asked for.
    pub requested: i64,
    /// The isolation level's bound the answer named: its last stable
    /// offset at read_committed, its high watermark at read_uncommitted.
    pub bound: i64,
    /// How many batches it returned, control and aborted ones included.
    pub batches: usize,
}

/// Which partitions one fetch answer starved. Kafka returns at least the
/// first batch of the first partition that has one below its bound,
/// whatever `max_bytes` says (KIP-74), so an answer holding no batch at
/// all, where a partition asked below its bound without error, withheld
/// data it had to give (a read_uncommitted fetch stopped at the last
/// stable offset, say). Only an answer with no batch anywhere is judged:
/// the response's byte limit may rightly leave any other partition empty.
/// On a compacted topic the cleaner may have removed every record between
/// a position and the bound; its readers do not apply the rule.
pub fn starved_partitions(answer: &[AnsweredPartition]) -> Vec<bool> {
    let any_batch = answer.iter().any(|p| p.batches > 0);
    answer
        .iter()
        .map(|p| !any_batch && p.error_code == 0 && p.requested < p.bound)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retention_history::DeleteOutcome;

    #[test]
    fn a_fetch_answer_with_no_batch_starves_the_partitions_asked_below_their_bound() {
        let part = |error_code, requested, bound, batches| AnsweredPartition {
            error_code,
            requested,
            bound,
            batches,
        };
        // Nothing at all, though partition 0 asked below its bound.
        assert_eq!(
            starved_partitions(&[part(0, 5, 8, 0), part(0, 8, 8, 0), part(6, 0, 9, 0)]),
            vec![true, false, false]
        );
        // One batch anywhere: the byte limit may have left the rest empty.
        assert_eq!(
            starved_partitions(&[part(0, 5, 8, 0), part(0, 0, 9, 1)]),
            vec![false, false]
        );
    }

    #[test]
    fn a_topic_without_transactions_answers_its_high_watermark_as_its_last_stable_offset() {
        assert_eq!(lso_is_the_high_watermark("sim", 0, 42, 42), Ok(()));
        assert_eq!(
            lso_is_the_high_watermark("sim", 1, 41, 42),
            Err("sim partition 1: last stable offset 41 but high watermark 42, and no transaction writes the topic".to_string())
        );
    }

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

    /// Jepsen's "fail": a batch none of whose attempts had a connection
    /// to a broker cannot be in any read; one whose outcome is unknown may
    /// be, and the final log says how many of its records made it.
    #[test]
    fn a_batch_that_never_reached_a_broker_is_nowhere_and_an_unknown_one_may_be_anywhere() {
        let mut h = history_with(&["a", "u", "n"]);
        h.acked(0, 0, &[b("a")]);
        h.gave_up(&[b("u")], GaveUp::Unknown);
        h.gave_up(&[b("n")], GaveUp::NeverSent);
        let with_unknown = BTreeMap::from([(0, log(&["a", "u"]))]);
        assert_eq!(h.check_final(1, Some(&with_unknown)), Vec::<String>::new());
        let stats = h.outcome_stats(&with_unknown);
        assert_eq!(
            (
                stats.batches_unknown,
                stats.unknown_found,
                stats.batches_never_sent
            ),
            (1, 1, 1)
        );
        assert_eq!(
            h.outcome_stats(&BTreeMap::from([(0, log(&["a"]))]))
                .unknown_found,
            0
        );

        let with_never_sent = BTreeMap::from([(0, log(&["a", "n"]))]);
        let v = h.check_final(1, Some(&with_never_sent));
        assert!(
            v.iter()
                .any(|m| m.contains("offset 1: final log holds a record of a batch no attempt")),
            "{v:?}"
        );
        h.fetched(0, 0, 2, &[(1, b("n"))]);
        assert!(
            h.violations()
                .iter()
                .any(|m| m.contains("offset 1: fetched a record of a batch no attempt")),
            "{:?}",
            h.violations()
        );
    }

    #[test]
    fn a_clean_run_passes_and_duplicates_of_unacked_retries_are_allowed() {
        let mut h = history_with(&["a", "b", "c"]);
        h.acked(0, 0, &[b("a"), b("b")]);
        h.fetched(0, 0, 2, &[(0, b("a")), (1, b("b"))]);
        // "c" was retried after a lost response: it is there twice.
        let logs = BTreeMap::from([(0, log(&["a", "b", "c", "c"]))]);
        assert_eq!(h.check_final(1, Some(&logs)), Vec::<String>::new());
        assert_eq!(History::summarize(&logs), (4, 1));
    }

    #[test]
    fn a_lost_acknowledged_record_fails() {
        let mut h = history_with(&["a", "b"]);
        h.acked(0, 0, &[b("a"), b("b")]);
        let v = h.check_final(1, Some(&BTreeMap::from([(0, log(&["a"]))])));
        assert!(v.iter().any(|m| m.contains("missing")), "{v:?}");
    }

    #[test]
    fn a_failed_final_read_reports_no_acknowledged_record_lost() {
        let mut h = history_with(&["a", "b"]);
        h.acked(0, 0, &[b("a"), b("b")]);
        assert_eq!(h.check_final(1, None), Vec::<String>::new());
        let v = h.check_final(1, Some(&BTreeMap::new()));
        assert!(v.iter().any(|m| m.contains("missing")), "{v:?}");
    }

    #[test]
    fn an_acknowledged_record_at_another_offset_fails() {
        let mut h = history_with(&["a", "b"]);
        h.acked(0, 1, &[b("a")]);
        let v = h.check_final(1, Some(&BTreeMap::from([(0, log(&["a", "b"]))])));
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
        assert!(h
            .check_final(1, Some(&hole))
            .iter()
            .any(|m| m.contains("dense")));
        let twice = BTreeMap::from([(0, vec![(0, b("a")), (0, b("b"))])]);
        assert!(h
            .check_final(1, Some(&twice))
            .iter()
            .any(|m| m.contains("dense")));
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
        let v = h.check_final(1, Some(&BTreeMap::from([(0, log(&["b"]))])));
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
        let v = h.check_final(1, Some(&BTreeMap::from([(0, log(&["zz"]))])));
        assert!(v.iter().any(|m| m.contains("nobody sent")), "{v:?}");
        assert!(
            v.iter()
                .any(|m| m.contains("ends at 1 but offsets up to 2")),
            "{v:?}"
        );
    }

    fn idem(seq: i32, values: &[&str]) -> IdempotentBatch {
        IdempotentBatch {
            producer: 0,
            pid: pid_for(0, 0),
            epoch: 0,
            partition: 0,
            base_sequence: seq,
            values: values.iter().map(|v| b(v)).collect(),
        }
    }

    #[test]
    fn idempotent_batches_present_once_in_order_pass() {
        let mut h = History::new();
        let a = h.idempotent_batch(idem(0, &["a0", "a1"]));
        let _b = h.idempotent_batch(idem(2, &["b0"]));
        let _c = h.idempotent_batch(idem(3, &["c0"]));
        // The answer to `a` was lost, its retry answered the same offset.
        assert!(!h.idempotent_answered(a, 0, true));
        assert!(h.idempotent_answered(a, 0, false));
        // `b` was appended but never acknowledged; `c` never made it.
        let logs = BTreeMap::from([(0, log(&["a0", "a1", "b0"]))]);
        assert_eq!(h.check_final(1, Some(&logs)), Vec::<String>::new());
        assert_eq!((h.idem.batches_acked, h.idem.answers_lost), (1, 1));
        assert_eq!(h.acked_records(), 2);
    }

    #[test]
    fn an_idempotent_record_twice_fails_even_unacknowledged() {
        let mut h = History::new();
        h.idempotent_batch(idem(0, &["a0"]));
        let v = h.check_final(1, Some(&BTreeMap::from([(0, log(&["a0", "a0"]))])));
        assert!(v.iter().any(|m| m.contains("2 times")), "{v:?}");
    }

    /// A partition that forgot the producer (`producer.id.expiration.ms`)
    /// takes its retry as new, as Kafka does: the second copy, and the
    /// retry's answer at another offset, are allowed only with an expiry
    /// between the two copies.
    #[test]
    fn a_retry_appended_again_is_allowed_only_past_an_expiry_between_the_copies() {
        let expiry = |log_end| ProducerExpiry {
            topic: TOPIC.into(),
            partition: 0,
            producer_id: pid_for(0, 0),
            log_end,
        };
        for (expiries, allowed) in [
            (vec![expiry(1)], true),
            (vec![expiry(3)], false),
            (vec![], false),
        ] {
            let mut h = History::new();
            h.expiries_given = Some(expiries.clone());
            h.sent(&[b("x")]);
            let a = h.idempotent_batch(idem(0, &["a0"]));
            assert!(!h.idempotent_answered(a, 0, true));
            h.idempotent_answered(a, 2, false);
            let at_the_end =
                h.check_final(1, Some(&BTreeMap::from([(0, log(&["a0", "x", "a0"]))])));
            let all: Vec<&String> = h.violations().iter().chain(&at_the_end).collect();
            assert_eq!(all.is_empty(), allowed, "{expiries:?}: {all:?}");
            assert_eq!(h.idem.appended_again_after_expiry, u64::from(allowed));
        }
    }

    #[test]
    fn an_idempotent_batch_split_or_partly_present_fails() {
        let mut h = History::new();
        h.sent(&[b("x")]);
        h.idempotent_batch(idem(0, &["a0", "a1"]));
        let v = h.check_final(1, Some(&BTreeMap::from([(0, log(&["a0"]))])));
        assert!(v.iter().any(|m| m.contains("only 1 of its 2")), "{v:?}");
        let v = h.check_final(1, Some(&BTreeMap::from([(0, log(&["a0", "x", "a1"]))])));
        assert!(v.iter().any(|m| m.contains("consecutive")), "{v:?}");
    }

    #[test]
    fn an_idempotent_batch_past_a_sequence_gap_or_out_of_order_fails() {
        let mut h = History::new();
        h.idempotent_batch(idem(0, &["a0"]));
        h.idempotent_batch(idem(1, &["b0"]));
        h.idempotent_batch(idem(2, &["c0"]));
        let v = h.check_final(1, Some(&BTreeMap::from([(0, log(&["a0", "c0"]))])));
        assert!(
            v.iter().any(|m| m.contains(
                "sequence 2 is in the log (offset 1) but the earlier one of sequence 1 is not"
            )),
            "{v:?}"
        );
        let v = h.check_final(1, Some(&BTreeMap::from([(0, log(&["b0", "a0", "c0"]))])));
        assert!(
            v.iter().any(|m| m.contains("before an earlier batch")),
            "{v:?}"
        );
        // Another session (a new epoch) is ordered on its own.
        let mut h = History::new();
        h.idempotent_batch(idem(0, &["a0"]));
        h.idempotent_batch(IdempotentBatch {
            epoch: 1,
            ..idem(0, &["n0"])
        });
        let logs = BTreeMap::from([(0, log(&["n0", "a0"]))]);
        assert_eq!(h.check_final(1, Some(&logs)), Vec::<String>::new());
    }

    #[test]
    fn a_retry_answered_at_another_offset_fails() {
        let mut h = History::new();
        h.sent(&[b("x")]);
        let a = h.idempotent_batch(idem(0, &["a0"]));
        h.idempotent_answered(a, 0, true);
        h.idempotent_answered(a, 1, false);
        assert!(
            h.violations()
                .iter()
                .any(|m| m.contains("acknowledged at offset 1, an earlier answer said 0")),
            "{:?}",
            h.violations()
        );
    }

    #[test]
    fn a_pid_handed_out_twice_or_outside_the_slice_fails() {
        let mut h = History::new();
        h.pid_granted(0, pid_for(0, 5), 0);
        h.pid_granted(1, pid_for(0, 1005), 0);
        assert!(h.violations().is_empty());
        assert_eq!(h.pid_blocks(), 2);
        h.pid_granted(2, pid_for(0, 5), 0);
        assert!(h
            .violations()
            .iter()
            .any(|m| m.contains("handed out before")));
        h.pid_granted(2, pid_for(1, 0), 0);
        assert!(h.violations().iter().any(|m| m.contains("outside")));
        h.pid_granted(2, pid_for(0, 7), 3);
        assert!(h.violations().iter().any(|m| m.contains("epoch 3")));
    }

    fn log_from(start: i64, values: &[&str]) -> PartitionLog {
        values
            .iter()
            .enumerate()
            .map(|(i, v)| (start + i as i64, b(v)))
            .collect()
    }

    #[test]
    fn records_below_a_requested_deletion_may_go_and_the_log_is_dense_from_its_start() {
        let mut h = history_with(&["a", "b", "c", "d"]);
        h.acked(0, 0, &[b("a"), b("b"), b("c"), b("d")]);
        h.fetched(0, 0, 4, &[(0, b("a")), (1, b("b"))]);
        h.retention.delete_sent(0, 2);
        let floor = h.retention.start_floor(0);
        h.retention
            .delete_answered(0, 2, floor, DeleteOutcome::Acked(2));
        h.retention.final_start(0, 2);
        let logs = BTreeMap::from([(0, log_from(2, &["c", "d"]))]);
        assert_eq!(h.check_final(1, Some(&logs)), Vec::<String>::new());
        let stats = h.retention_stats(1, &logs);
        assert_eq!((stats.deleted_by_request, stats.final_start_total), (2, 2));
        // Dense from the start, not from 0.
        let holed = BTreeMap::from([(0, vec![(2, b("c")), (4, b("d"))])]);
        assert!(h
            .check_final(1, Some(&holed))
            .iter()
            .any(|m| m.contains("dense from the log start 2")));
    }

    #[test]
    fn a_record_gone_above_every_requested_deletion_and_within_retention_is_a_lost_write() {
        let mut h = history_with(&["a", "b", "c"]);
        h.acked(0, 0, &[b("a"), b("b"), b("c")]);
        h.retention.set_deleting(20_000);
        h.retention.stamp(&[b("a")], 0);
        h.retention.stamp(&[b("b"), b("c")], 100_000);
        // An unknown outcome counts as asked for: it may have applied.
        h.retention.delete_sent(0, 1);
        h.retention.delete_answered(0, 1, 0, DeleteOutcome::Unknown);
        h.retention.final_read_at(100_500);
        h.retention.final_start(0, 2);
        let logs = BTreeMap::from([(0, log_from(2, &["c"]))]);
        let v = h.check_final(1, Some(&logs));
        assert!(
            v.iter()
                .any(|m| m.contains("offset 1: acknowledged b is missing")
                    && m.contains("a lost write")),
            "{v:?}"
        );
        assert_eq!(v.len(), 1, "{v:?}");
        // Had it been old enough, time retention could have taken it.
        h.retention.final_read_at(200_000);
        assert_eq!(h.check_final(1, Some(&logs)), Vec::<String>::new());
        let stats = h.retention_stats(1, &logs);
        assert_eq!((stats.deleted_by_request, stats.deleted_by_age), (1, 1));
    }

    #[test]
    fn a_log_start_going_backwards_fails() {
        let mut h = history_with(&["a", "b", "c"]);
        h.acked(0, 0, &[b("a"), b("b"), b("c")]);
        h.retention.delete_sent(0, 2);
        h.retention
            .delete_answered(0, 2, 0, DeleteOutcome::Acked(2));
        // After a restart, ListOffsets EARLIEST shows the old start.
        let floor = h.retention.start_floor(0);
        h.retention.start_seen(0, floor, 0, "ListOffsets EARLIEST");
        assert!(
            h.retention.violations().iter().any(|m| m.contains(
                "ListOffsets EARLIEST showed the log start 0, but before it was asked a DeleteRecords before 2 was acknowledged"
            )),
            "{:?}",
            h.retention.violations()
        );
        // A fetch returning deleted records fails, as does one whose log
        // start went back from what an answer showed.
        let mut h = history_with(&["a", "b", "c"]);
        h.fetched_start(0, 0, 3, &[]);
        h.fetched_start(0, h.retention.start_floor(0), 1, &[(1, b("b"))]);
        let v = h.check_final(1, Some(&BTreeMap::new()));
        assert!(
            v.iter()
                .any(|m| m.contains("a fetch showed the log start 1")
                    && m.contains("showed the log start 3")),
            "{v:?}"
        );
        assert!(
            v.iter()
                .any(|m| m.contains("returned offset 1, below the log start 3")),
            "{v:?}"
        );
        // Nothing asked to delete and no retention.ms: the start moved
        // on its own.
        assert!(
            v.iter()
                .any(|m| m.contains("above every DeleteRecords offset asked for (0)")),
            "{v:?}"
        );
        // A DeleteRecords acknowledged below what it asked for fails.
        let mut h = History::new();
        h.retention
            .delete_answered(0, 5, 0, DeleteOutcome::Acked(4));
        assert!(h.retention.violations()[0].contains("low watermark 4"));
    }

    #[test]
    fn idempotent_batches_cut_or_deleted_by_the_log_start_pass_but_gaps_after_it_fail() {
        let mut h = History::new();
        let a = h.idempotent_batch(idem(0, &["a0", "a1"]));
        let c = h.idempotent_batch(idem(2, &["c0", "c1"]));
        h.idempotent_batch(idem(4, &["d0"]));
        h.idempotent_batch(idem(5, &["e0"]));
        h.idempotent_answered(a, 0, false);
        h.idempotent_answered(c, 2, false);
        h.retention.delete_sent(0, 3);
        h.retention.final_start(0, 3);
        // a0 a1 deleted, c0 deleted (c cut), c1 d0 e0 kept.
        let logs = BTreeMap::from([(0, log_from(3, &["c1", "d0", "e0"]))]);
        assert_eq!(h.check_final(1, Some(&logs)), Vec::<String>::new());
        // d missing between c and e is a gap whatever was deleted.
        let logs = BTreeMap::from([(0, log_from(3, &["c1", "e0"]))]);
        let v = h.check_final(1, Some(&logs));
        assert!(
            v.iter().any(|m| m.contains("sequence 5 is in the log")),
            "{v:?}"
        );
    }

    #[test]
    fn an_acks_one_record_deleted_as_asked_passes() {
        let mut h = history_with(&["a", "b"]);
        h.low_acks
            .sent(crate::low_acks::Acks::Leader, &[b("a"), b("b")]);
        h.low_acks.leader_acked(0, 0, &[b("a"), b("b")], 0);
        h.retention.delete_sent(0, 1);
        h.retention.final_start(0, 1);
        let logs = BTreeMap::from([(0, log_from(1, &["b"]))]);
        assert_eq!(h.check_final(1, Some(&logs)), Vec::<String>::new());
        let l = h.low_acks_stats(&logs);
        assert_eq!((l.leader_kept, l.leader_deleted), (1, 1));
        // Not asked for: a loss with no power loss to explain it.
        let mut h = history_with(&["a", "b"]);
        h.low_acks.leader_acked(0, 0, &[b("a"), b("b")], 0);
        h.retention.final_start(0, 1);
        let v = h.check_final(1, Some(&logs));
        assert!(v.iter().any(|m| m.contains("starts after it")), "{v:?}");
    }

    #[test]
    fn fingerprint_depends_on_the_logs() {
        let h = history_with(&["a", "b"]);
        let one = BTreeMap::from([(0, log(&["a"]))]);
        let two = BTreeMap::from([(0, log(&["b"]))]);
        assert_eq!(h.fingerprint(&one, ""), h.fingerprint(&one, ""));
        assert_ne!(h.fingerprint(&one, ""), h.fingerprint(&two, ""));
        assert_ne!(h.fingerprint(&one, "a"), h.fingerprint(&one, "b"));
    }
}
