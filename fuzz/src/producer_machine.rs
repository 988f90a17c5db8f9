//! (e) The idempotent-producer table driven by random operations and
//! checked against a small model written from Kafka's rules (KIP-98 and
//! KIP-360), independently of `kaas_core::producer`.
//!
//! Invariants:
//! - every classification equals the model's: a duplicate always names the
//!   offsets of a batch previously recorded for that producer, epoch and
//!   sequence range (one of its last five); a fenced epoch is
//!   INVALID_PRODUCER_EPOCH; a gap is OUT_OF_ORDER_SEQUENCE_NUMBER; an
//!   unknown producer must start at sequence 0;
//! - a snapshot round trip gives an equal table, hence identical
//!   classifications;
//! - replaying the log (crash recovery without a snapshot) rebuilds the
//!   same state as the live table, except the idle clock;
//! - expiry removes exactly the producers idle for the expiration time with
//!   no open transaction.

use arbitrary::Arbitrary;
use kaas_core::partition::txn_index::{decode_index, encode_entry};
use kaas_core::partition::{
    aborted_index_entry, AbortedTxn, AppendDecision, IncomingBatch, IncomingMarker, PartitionState,
    Recovered,
};
use kaas_core::producer::{
    decode_snapshot, encode_snapshot, BatchIdentity, BatchMeta, Classification, ProducerTable,
    MAX_CACHED_BATCHES,
};
use kaas_core::protocol::ErrorCode;
use kaas_core::record::{
    build_control_batch, BatchBuilder, ControlType, EndTxnMarker, RecordBatch,
};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

const PIDS: [i64; 4] = [0, 1, 1 << 40, i64::MAX];
const EPOCHS: [i16; 5] = [0, 1, 2, 3, i16::MAX];

#[derive(Arbitrary, Debug, Clone)]
pub enum Seq {
    /// The sequence the model expects next.
    Next,
    Zero,
    /// The first sequence of the producer's newest remembered batch.
    Last,
    /// Close to the wrap at i32::MAX.
    NearWrap(u8),
    Raw(i32),
}

#[derive(Arbitrary, Debug, Clone)]
pub enum ProducerOp {
    /// A Produce of `1 + count % 8` records.
    Produce {
        pid: u8,
        epoch: u8,
        seq: Seq,
        count: u8,
        transactional: bool,
        advance_ms: u16,
    },
    /// Resends one of the batches appended earlier, unchanged.
    Retry {
        back: u8,
    },
    /// A COMMIT/ABORT marker for `pid`, found in the log.
    Marker {
        pid: u8,
        epoch: u8,
        commit: bool,
    },
    Expire {
        advance_ms: u32,
        expiration_ms: u32,
    },
    /// Snapshot and load the table back.
    Snapshot,
    /// Rebuild the table from the log and compare.
    Recover,
}

/// The model of one producer's state.
#[derive(Debug, Clone, PartialEq)]
struct Entry {
    epoch: i16,
    batches: VecDeque<BatchMeta>,
    last_update_ms: i64,
    txn_first_offset: Option<i64>,
}

fn next_seq(last: i32) -> i32 {
    if last == i32::MAX {
        0
    } else {
        last + 1
    }
}

/// The decision Kafka's rules call for.
fn expected(model: Option<&Entry>, b: &BatchIdentity) -> Classification {
    let Some(e) = model else {
        return if b.first_seq == 0 {
            Classification::Append
        } else {
            Classification::Reject(ErrorCode::UnknownProducerId)
        };
    };
    if b.epoch == e.epoch {
        if let Some(m) = e
            .batches
            .iter()
            .find(|m| m.first_seq == b.first_seq && m.last_seq == b.last_seq)
        {
            return Classification::Duplicate {
                first_offset: m.first_offset,
                last_offset: m.last_offset,
            };
        }
    }
    if b.epoch < e.epoch {
        return Classification::Reject(ErrorCode::InvalidProducerEpoch);
    }
    let want = if b.epoch > e.epoch {
        0
    } else {
        e.batches.back().map_or(0, |m| next_seq(m.last_seq))
    };
    if b.first_seq == want {
        Classification::Append
    } else {
        Classification::Reject(ErrorCode::OutOfOrderSequenceNumber)
    }
}

pub struct Machine {
    table: ProducerTable,
    model: BTreeMap<i64, Entry>,
    /// Everything appended, with offsets assigned: what recovery replays.
    log: Vec<RecordBatch>,
    /// Identities of appended data batches, for retries.
    sent: Vec<BatchIdentity>,
    end_offset: i64,
    now_ms: i64,
    /// Producers expiry removed at some point: replaying the whole log
    /// brings back their old batches (recovery starts from a snapshot taken
    /// after the expiry instead), so `recover` does not compare them.
    expired: BTreeSet<i64>,
    /// The aborted index as the model computes it, in marker order.
    aborted: Vec<AbortedTxn>,
    /// The partition's rules, fed the same batches and markers.
    state: PartitionState,
}

impl Default for Machine {
    fn default() -> Self {
        Machine::new()
    }
}

impl Machine {
    pub fn new() -> Machine {
        Machine {
            table: ProducerTable::new(),
            model: BTreeMap::new(),
            log: Vec::new(),
            sent: Vec::new(),
            end_offset: 0,
            now_ms: 1_000,
            expired: BTreeSet::new(),
            aborted: Vec::new(),
            state: PartitionState::recovered(Recovered {
                log_start_offset: 0,
                log_end_offset: 0,
                leader_epoch: 0,
                leader_epochs: Vec::new(),
                producers: ProducerTable::new(),
                snapshot_offset: None,
            }),
        }
    }

    /// The model's last stable offset once everything is durable: the
    /// first offset of the earliest open transaction, else the log end.
    fn expected_lso(&self) -> i64 {
        self.model
            .values()
            .filter_map(|e| e.txn_first_offset)
            .min()
            .unwrap_or(self.end_offset)
    }

    /// Makes everything durable in the rules and checks the LSO.
    fn check_stable(&mut self) {
        self.state.durable_up_to(self.end_offset);
        assert_eq!(self.state.high_watermark(), self.end_offset);
        assert_eq!(
            self.state.last_stable_offset(),
            self.expected_lso(),
            "last stable offset"
        );
    }

    fn seq_for(&self, pid: i64, seq: &Seq) -> i32 {
        let newest = self.model.get(&pid).and_then(|e| e.batches.back());
        match seq {
            Seq::Next => newest.map_or(0, |m| next_seq(m.last_seq)),
            Seq::Zero => 0,
            Seq::Last => newest.map_or(0, |m| m.first_seq),
            Seq::NearWrap(k) => i32::MAX - i32::from(k % 8),
            Seq::Raw(s) => *s,
        }
    }

    pub fn apply(&mut self, op: &ProducerOp) {
        match op {
            ProducerOp::Produce {
                pid,
                epoch,
                seq,
                count,
                transactional,
                advance_ms,
            } => {
                self.now_ms += i64::from(*advance_ms);
                let pid = PIDS[usize::from(*pid) % PIDS.len()];
                let epoch = EPOCHS[usize::from(*epoch) % EPOCHS.len()];
                let first_seq = self.seq_for(pid, seq);
                let mut builder = if *transactional {
                    BatchBuilder::transactional(pid, epoch, first_seq)
                } else {
                    BatchBuilder::idempotent(pid, epoch, first_seq)
                };
                for i in 0..=(count % 8) {
                    builder.push(kaas_core::record::NewRecord::new(
                        self.now_ms,
                        None,
                        Some(&[i]),
                    ));
                }
                let batch = builder.build();
                let id = BatchIdentity::of(&batch).expect("an idempotent batch has an identity");
                assert_eq!(
                    (id.producer_id, id.epoch, id.first_seq),
                    (pid, epoch, first_seq)
                );
                self.produce(batch, id);
            }
            ProducerOp::Retry { back } => {
                let Some(i) = self.sent.len().checked_sub(1 + usize::from(*back) % 8) else {
                    return;
                };
                let id = self.sent[i];
                // Only the identity matters to the rules; rebuild a batch
                // with the same header for the log.
                let mut builder = if id.is_transactional {
                    BatchBuilder::transactional(id.producer_id, id.epoch, id.first_seq)
                } else {
                    BatchBuilder::idempotent(id.producer_id, id.epoch, id.first_seq)
                };
                for _ in 0..=id.offset_delta {
                    builder.push(kaas_core::record::NewRecord::new(self.now_ms, None, None));
                }
                self.produce(builder.build(), id);
            }
            ProducerOp::Marker { pid, epoch, commit } => {
                let pid = PIDS[usize::from(*pid) % PIDS.len()];
                let epoch = EPOCHS[usize::from(*epoch) % EPOCHS.len()];
                // The coordinator only writes markers for producers with
                // an open transaction, at their current or a bumped epoch
                // (KIP-360 aborts of timed-out transactions bump it).
                let Some(entry) = self.model.get_mut(&pid) else {
                    return;
                };
                if entry.txn_first_offset.is_none() || epoch < entry.epoch {
                    return;
                }
                let marker = EndTxnMarker {
                    control_type: if *commit {
                        ControlType::Commit
                    } else {
                        ControlType::Abort
                    },
                    coordinator_epoch: 0,
                };
                let batch = build_control_batch(pid, epoch, self.now_ms, marker)
                    .with_assigned(self.end_offset, 0);
                self.end_offset += 1;
                // Kafka: a marker ends the transaction; a new epoch forgets
                // the old epoch's batches, as for data batches.
                let first_offset = entry.txn_first_offset.take();
                if epoch != entry.epoch {
                    entry.epoch = epoch;
                    entry.batches.clear();
                }
                let marker_offset = self.end_offset - 1;
                // The model's entry: the LSO when it completed is the first
                // offset of the earliest transaction still open, else the
                // offset after the marker.
                let want = (!*commit).then(|| AbortedTxn {
                    producer_id: pid,
                    first_offset: first_offset.unwrap_or(marker_offset),
                    last_offset: marker_offset,
                    last_stable_offset: self
                        .model
                        .values()
                        .filter_map(|e| e.txn_first_offset)
                        .min()
                        .unwrap_or(marker_offset + 1),
                });
                let completed = self
                    .table
                    .replay(&batch, self.now_ms)
                    .expect("a marker closes a transaction");
                let got = aborted_index_entry(&completed, self.table.first_open_offset());
                assert_eq!(
                    got, want,
                    "aborted-index entry of the marker at {marker_offset}"
                );
                let written = self
                    .state
                    .append_marker(
                        &IncomingMarker {
                            producer_id: pid,
                            producer_epoch: epoch,
                            coordinator_epoch: 0,
                            commit: *commit,
                            transaction_version: 0,
                        },
                        self.now_ms,
                    )
                    .expect("the rules write the marker");
                assert_eq!(written.offset, marker_offset);
                assert_eq!(written.aborted, want, "the rules' aborted entry");
                // Not durable yet: the transaction still holds the LSO.
                assert!(
                    self.state.last_stable_offset() <= first_offset.unwrap_or(marker_offset),
                    "the LSO passed a transaction whose marker is not durable"
                );
                self.aborted.extend(want);
                self.log.push(batch);
                self.check_entries();
                self.check_stable();
            }
            ProducerOp::Expire {
                advance_ms,
                expiration_ms,
            } => {
                self.now_ms += i64::from(*advance_ms);
                let expiration = i64::from(*expiration_ms);
                let now = self.now_ms;
                let removed = self.table.expire(now, expiration);
                assert_eq!(self.state.expire_producers(now, expiration), removed);
                let mut expired_now = Vec::new();
                self.model.retain(|pid, e| {
                    let keep = e.txn_first_offset.is_some() || now - e.last_update_ms < expiration;
                    if !keep {
                        expired_now.push(*pid);
                    }
                    keep
                });
                let mut removed = removed;
                removed.sort_unstable();
                expired_now.sort_unstable();
                assert_eq!(removed, expired_now, "expired the wrong producers");
                self.expired.extend(expired_now);
                self.check_entries();
            }
            ProducerOp::Snapshot => {
                let bytes = encode_snapshot(&self.table, self.end_offset);
                let (table, offset) = decode_snapshot(&bytes).expect("our own snapshot parses");
                assert_eq!(offset, self.end_offset);
                assert_eq!(table, self.table, "snapshot round trip changed the table");
                for id in self.probes() {
                    assert_eq!(table.classify(&id), self.table.classify(&id));
                }
                self.table = table;
            }
            ProducerOp::Recover => self.recover(),
        }
    }

    fn produce(&mut self, batch: RecordBatch, id: BatchIdentity) {
        let got = self.table.classify(&id);
        let want = expected(self.model.get(&id.producer_id), &id);
        assert_eq!(got, want, "classification of {id:?}");
        let decided = self.state.append(
            &IncomingBatch {
                identity: Some(id),
                last_offset_delta: id.offset_delta,
                max_timestamp: batch.max_timestamp(),
            },
            self.now_ms,
        );
        let rules_want = match got {
            Classification::Append => Ok(AppendDecision::Write {
                base_offset: self.end_offset,
                last_offset: self.end_offset + i64::from(id.offset_delta),
            }),
            Classification::Duplicate {
                first_offset,
                last_offset,
            } => Ok(AppendDecision::Duplicate {
                base_offset: first_offset,
                last_offset,
            }),
            Classification::Reject(code) => Err(code),
        };
        assert_eq!(decided, rules_want, "the rules' decision for {id:?}");
        if got != Classification::Append {
            return;
        }
        let first_offset = self.end_offset;
        self.table
            .record_append(&id, first_offset, batch.max_timestamp(), self.now_ms);
        let entry = self.model.entry(id.producer_id).or_insert(Entry {
            epoch: id.epoch,
            batches: VecDeque::new(),
            last_update_ms: self.now_ms,
            txn_first_offset: None,
        });
        if entry.epoch != id.epoch {
            entry.epoch = id.epoch;
            entry.batches.clear();
        }
        entry.batches.push_back(BatchMeta {
            first_seq: id.first_seq,
            last_seq: id.last_seq,
            first_offset,
            last_offset: first_offset + i64::from(id.offset_delta),
        });
        while entry.batches.len() > MAX_CACHED_BATCHES {
            entry.batches.pop_front();
        }
        entry.last_update_ms = self.now_ms;
        if id.is_transactional && entry.txn_first_offset.is_none() {
            entry.txn_first_offset = Some(first_offset);
        }
        self.log.push(batch.with_assigned(first_offset, 0));
        self.sent.push(id);
        self.end_offset = first_offset + i64::from(id.offset_delta) + 1;
        self.check_entries();
        self.check_stable();
    }

    /// The table holds exactly the model's producers, with the same epoch,
    /// batches and open transaction.
    fn check_entries(&self) {
        let table: Vec<_> = self
            .table
            .entries()
            .map(|e| {
                (
                    e.producer_id,
                    e.epoch,
                    e.batches.clone(),
                    e.current_txn_first_offset,
                )
            })
            .collect();
        let model: Vec<_> = self
            .model
            .iter()
            .map(|(pid, e)| (*pid, e.epoch, e.batches.clone(), e.txn_first_offset))
            .collect();
        assert_eq!(table, model, "producer table differs from the model");
        assert_eq!(
            self.state.producers(),
            &self.table,
            "the rules' producer table differs"
        );
    }

    /// Identities worth classifying: each producer's next batch, and a
    /// retry of each remembered batch, at each epoch.
    fn probes(&self) -> Vec<BatchIdentity> {
        let mut out = Vec::new();
        for (pid, e) in &self.model {
            for epoch in EPOCHS {
                let next = e.batches.back().map_or(0, |m| next_seq(m.last_seq));
                let base = BatchIdentity {
                    producer_id: *pid,
                    epoch,
                    first_seq: next,
                    last_seq: next,
                    is_transactional: false,
                    offset_delta: 0,
                };
                out.push(base);
                for m in &e.batches {
                    out.push(BatchIdentity {
                        first_seq: m.first_seq,
                        last_seq: m.last_seq,
                        ..base
                    });
                }
            }
        }
        out
    }

    /// Crash recovery without a snapshot: replaying the whole log gives
    /// the live table's producers (those not expired since) in the same
    /// state, apart from the idle clock.
    fn recover(&mut self) {
        let mut rebuilt = ProducerTable::new();
        let mut aborted = Vec::new();
        for batch in &self.log {
            if let Some(completed) = rebuilt.replay(batch, self.now_ms) {
                aborted.extend(aborted_index_entry(&completed, rebuilt.first_open_offset()));
            }
        }
        assert_eq!(
            aborted, self.aborted,
            "recovery rebuilt another aborted index"
        );
        let bytes: Vec<u8> = aborted.iter().flat_map(encode_entry).collect();
        assert_eq!(
            decode_index(&bytes),
            Ok((aborted, 0)),
            "the .txnindex encoding changed the aborted index"
        );
        for live in self.table.entries() {
            if self.expired.contains(&live.producer_id) {
                continue;
            }
            let back = rebuilt
                .get(live.producer_id)
                .unwrap_or_else(|| panic!("producer {} lost in recovery", live.producer_id));
            assert_eq!(
                (
                    back.epoch,
                    &back.batches,
                    back.current_txn_first_offset,
                    back.last_timestamp
                ),
                (
                    live.epoch,
                    &live.batches,
                    live.current_txn_first_offset,
                    live.last_timestamp
                ),
                "recovery rebuilt producer {} differently",
                live.producer_id
            );
        }
    }
}

pub fn run(ops: &[ProducerOp]) {
    let mut m = Machine::new();
    for op in ops {
        m.apply(op);
    }
    m.recover();
}
