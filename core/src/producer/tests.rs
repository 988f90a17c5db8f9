use super::*;
use proptest::prelude::*;

fn batch(pid: i64, epoch: i16, first_seq: i32, count: i32) -> BatchIdentity {
    BatchIdentity {
        producer_id: pid,
        epoch,
        first_seq,
        last_seq: ((i64::from(first_seq) + i64::from(count) - 1) % (i64::from(i32::MAX) + 1))
            as i32,
        is_transactional: false,
        offset_delta: count - 1,
    }
}

fn table_with(b: &BatchIdentity, first_offset: i64) -> ProducerTable {
    let mut t = ProducerTable::new();
    t.record_append(b, first_offset, 0, 0);
    t
}

#[test]
fn fence_refuses_the_older_epoch_and_lets_the_new_one_start_at_sequence_0() {
    let old = batch(7, 3, 0, 3);
    let mut t = table_with(&old, 100);
    assert!(t.fence(7, 4));
    assert!(!t.fence(7, 4), "fencing twice changes nothing");
    assert!(!t.fence(7, 2), "never backwards");
    assert!(!t.fence(8, 4), "an unknown producer is left alone");
    // The zombie's next batch and even a retry of its last one are refused.
    assert_eq!(
        t.classify(&batch(7, 3, 3, 1)),
        Classification::Reject(ErrorCode::InvalidProducerEpoch)
    );
    assert_eq!(
        t.classify(&old),
        Classification::Reject(ErrorCode::InvalidProducerEpoch)
    );
    assert_eq!(t.classify(&batch(7, 4, 0, 1)), Classification::Append);
}

/// KIP-1228: under transaction version 2 the coordinator has bumped the
/// epoch before writing markers, so a marker at the producer's current
/// epoch is stale; versions 0 and 1 accept it; an older epoch is stale for
/// every version.
#[test]
fn a_transaction_version_2_marker_needs_an_epoch_above_the_producers() {
    for tv in [0, 1] {
        assert!(!marker_epoch_is_stale(tv, 5, 5));
        assert!(!marker_epoch_is_stale(tv, 6, 5));
        assert!(marker_epoch_is_stale(tv, 4, 5));
    }
    for tv in [2, 3] {
        assert!(marker_epoch_is_stale(tv, 5, 5));
        assert!(!marker_epoch_is_stale(tv, 6, 5));
        assert!(marker_epoch_is_stale(tv, 4, 5));
    }
    let table = table_with(&batch(7, 5, 0, 1), 0);
    let entry = table.get(7);
    assert_eq!(check_marker(entry, 5, 0, 1), Ok(()));
    assert_eq!(
        check_marker(entry, 5, 0, 2),
        Err(ErrorCode::InvalidProducerEpoch)
    );
    assert_eq!(check_marker(entry, 6, 0, 2), Ok(()));
    assert_eq!(
        check_marker(None, 0, 0, 2),
        Ok(()),
        "no producer state: nothing to be stale against"
    );
}

#[test]
fn retry_of_a_remembered_batch_is_a_duplicate_with_its_original_offsets() {
    let b = batch(7, 0, 0, 3);
    let t = table_with(&b, 100);
    assert_eq!(
        t.classify(&b),
        Classification::Duplicate {
            first_offset: 100,
            last_offset: 102
        }
    );
}

#[test]
fn only_the_last_five_batches_are_remembered() {
    let mut t = ProducerTable::new();
    for i in 0..6 {
        t.record_append(&batch(7, 0, i, 1), i64::from(i), 0, 0);
    }
    // The oldest fell out of the window: its retry is out of order, not a
    // silent duplicate with a stale offset.
    assert_eq!(
        t.classify(&batch(7, 0, 0, 1)),
        Classification::Reject(ErrorCode::OutOfOrderSequenceNumber)
    );
    assert!(matches!(
        t.classify(&batch(7, 0, 1, 1)),
        Classification::Duplicate { .. }
    ));
}

#[test]
fn sequence_gap_is_out_of_order_sequence_number() {
    let t = table_with(&batch(7, 0, 0, 2), 0);
    assert_eq!(
        t.classify(&batch(7, 0, 3, 1)),
        Classification::Reject(ErrorCode::OutOfOrderSequenceNumber)
    );
    assert_eq!(t.classify(&batch(7, 0, 2, 1)), Classification::Append);
}

#[test]
fn epoch_lower_than_stored_is_invalid_producer_epoch() {
    let t = table_with(&batch(7, 3, 0, 1), 0);
    assert_eq!(
        t.classify(&batch(7, 2, 1, 1)),
        Classification::Reject(ErrorCode::InvalidProducerEpoch)
    );
}

#[test]
fn new_epoch_must_start_at_sequence_zero() {
    let t = table_with(&batch(7, 0, 0, 5), 0);
    assert_eq!(
        t.classify(&batch(7, 1, 5, 1)),
        Classification::Reject(ErrorCode::OutOfOrderSequenceNumber)
    );
    assert_eq!(t.classify(&batch(7, 1, 0, 1)), Classification::Append);
}

#[test]
fn new_epoch_forgets_the_old_epochs_batches() {
    let mut t = table_with(&batch(7, 0, 0, 1), 0);
    t.record_append(&batch(7, 1, 0, 1), 1, 0, 0);
    // The old epoch's batch 0 is not a duplicate of anything any more.
    assert_eq!(
        t.classify(&batch(7, 0, 0, 1)),
        Classification::Reject(ErrorCode::InvalidProducerEpoch)
    );
    assert_eq!(t.get(7).unwrap().batches.len(), 1);
}

/// Found by the `state_machines` fuzz target: recovery replayed a marker
/// at a bumped epoch by raising the epoch but keeping the old epoch's
/// batches, so the producer's first batch of the new epoch (sequence 0
/// again) was answered as a duplicate of an old batch and never written.
#[test]
fn marker_at_a_bumped_epoch_forgets_the_old_epochs_batches_on_replay() {
    use crate::record::{build_control_batch, BatchBuilder, ControlType, EndTxnMarker};
    let mut t = ProducerTable::new();
    let data = BatchBuilder::transactional(7, 0, 0)
        .record(1, None, Some(b"v"))
        .build();
    t.replay(&data, 0);
    let marker = EndTxnMarker {
        control_type: ControlType::Abort,
        coordinator_epoch: 0,
    };
    t.replay(&build_control_batch(7, 1, 2, marker).with_assigned(1, 0), 0);
    let entry = t.get(7).unwrap();
    assert_eq!(entry.epoch, 1);
    assert!(entry.batches.is_empty());
    assert_eq!(entry.current_txn_first_offset, None);
    // The new epoch's first batch is new data.
    assert_eq!(t.classify(&batch(7, 1, 0, 1)), Classification::Append);
}

#[test]
fn sequence_wraps_from_i32_max_to_zero() {
    assert!(in_sequence(i32::MAX, 0));
    assert!(!in_sequence(i32::MAX, i32::MIN));
    let t = table_with(&batch(7, 0, i32::MAX - 1, 2), 0);
    assert_eq!(t.get(7).unwrap().last_seq(), i32::MAX);
    assert_eq!(t.classify(&batch(7, 0, 0, 1)), Classification::Append);
}

#[test]
fn unknown_producer_with_nonzero_sequence_is_unknown_producer_id() {
    let t = ProducerTable::new();
    assert_eq!(
        t.classify(&batch(9, 4, 42, 1)),
        Classification::Reject(ErrorCode::UnknownProducerId)
    );
    assert_eq!(t.classify(&batch(9, 4, 0, 1)), Classification::Append);
}

#[test]
fn producer_state_outlives_the_log_until_expiration() {
    let mut t = ProducerTable::new();
    t.record_append(&batch(7, 0, 0, 1), 0, 0, 1_000);
    assert_eq!(
        t.expire(
            1_000 + DEFAULT_PRODUCER_ID_EXPIRATION_MS - 1,
            DEFAULT_PRODUCER_ID_EXPIRATION_MS
        ),
        Vec::<i64>::new()
    );
    assert_eq!(
        t.expire(
            1_000 + DEFAULT_PRODUCER_ID_EXPIRATION_MS,
            DEFAULT_PRODUCER_ID_EXPIRATION_MS
        ),
        vec![7]
    );
    assert!(t.is_empty());
}

#[test]
fn snapshot_round_trips_and_garbage_is_an_error() {
    let mut t = ProducerTable::new();
    for i in 0..7 {
        t.record_append(&batch(7, 2, i * 2, 2), i64::from(i) * 2, 5, 9);
    }
    t.record_append(&batch(8, 0, 0, 1), 20, 5, 9);
    let bytes = encode_snapshot(&t, 21);
    assert_eq!(decode_snapshot(&bytes).unwrap(), (t, 21));
    assert!(decode_snapshot(b"{not json").is_err());
    assert!(decode_snapshot(b"{\"version\":9,\"offset\":0,\"producers\":[]}").is_err());
}

/// A restart rebuilds the last stable offset from the snapshot: the first
/// offset of an open transaction is in it, and a snapshot written before
/// transactions existed (no such field) reads as "none open".
#[test]
fn a_snapshot_carries_the_open_transaction_and_older_ones_read_without_it() {
    let mut t = ProducerTable::new();
    let mut txn = batch(7, 1, 0, 2);
    txn.is_transactional = true;
    t.record_append(&txn, 40, 5, 9);
    let (back, _) = decode_snapshot(&encode_snapshot(&t, 42)).unwrap();
    assert_eq!(back.get(7).unwrap().current_txn_first_offset, Some(40));
    assert_eq!(back.first_open_offset(), Some(40));
    let old = br#"{"version":1,"offset":3,"producers":[{"producer_id":7,"epoch":0,
        "batches":[{"first_seq":0,"last_seq":2,"first_offset":0,"last_offset":2}],
        "last_update_ms":1,"last_timestamp":1,"coordinator_epoch":-1}]}"#;
    let (old, offset) = decode_snapshot(old).unwrap();
    assert_eq!(offset, 3);
    assert_eq!(old.get(7).unwrap().current_txn_first_offset, None);
}

// ---------------------------------------------------------------------------
// Property: an idempotent producer with retries, reordering within its
// in-flight window, lost responses and broker restarts (snapshot + log
// replay) gets every acknowledged batch into the log exactly once, at the
// offset it was told.

#[derive(Debug, Clone)]
enum Op {
    /// Send the next new batch (if the in-flight window allows).
    SendNew { records: i32 },
    /// The broker processes in-flight request `i % n`; `lose_response`
    /// drops the answer so the producer will retry.
    Deliver { i: usize, lose_response: bool },
    /// The producer re-sends every unacknowledged batch (a retry round).
    RetryAll,
    /// The broker restarts: producer state is rebuilt from the snapshot at
    /// `at % (log len + 1)` plus a replay of the log after it.
    Restart { at: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (1..4i32).prop_map(|records| Op::SendNew { records }),
        5 => (any::<usize>(), any::<bool>()).prop_map(|(i, lose_response)| Op::Deliver { i, lose_response }),
        1 => Just(Op::RetryAll),
        1 => any::<usize>().prop_map(|at| Op::Restart { at }),
    ]
}

struct Broker {
    /// (first_offset, batch) per appended batch.
    log: Vec<(i64, BatchIdentity)>,
    next_offset: i64,
    table: ProducerTable,
}

impl Broker {
    fn produce(&mut self, b: &BatchIdentity) -> Option<i64> {
        match self.table.classify(b) {
            Classification::Append => {
                let offset = self.next_offset;
                self.log.push((offset, *b));
                self.next_offset += i64::from(b.offset_delta) + 1;
                self.table.record_append(b, offset, 0, 0);
                Some(offset)
            }
            Classification::Duplicate { first_offset, .. } => Some(first_offset),
            Classification::Reject(_) => None,
        }
    }

    fn restart(&mut self, at: usize) {
        // A snapshot taken when the log held its first `at` batches.
        let at = at % (self.log.len() + 1);
        let mut t = ProducerTable::new();
        for (offset, b) in &self.log[..at] {
            t.record_append(b, *offset, 0, 0);
        }
        let snap_offset = self.log.get(at).map_or(self.next_offset, |(o, _)| *o);
        let (mut t, offset) = decode_snapshot(&encode_snapshot(&t, snap_offset)).unwrap();
        for (o, b) in self.log.iter().filter(|(o, _)| *o >= offset) {
            t.record_append(b, *o, 0, 0);
        }
        self.table = t;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]
    #[test]
    fn every_acknowledged_batch_is_in_the_log_exactly_once_at_its_offset(ops in prop::collection::vec(op(), 1..120)) {
        let mut broker = Broker { log: Vec::new(), next_offset: 0, table: ProducerTable::new() };
        let mut batches: Vec<BatchIdentity> = Vec::new();
        let mut acked: Vec<Option<i64>> = Vec::new();
        let mut in_flight: Vec<usize> = Vec::new();
        let mut next_seq = 0i32;
        for op in ops {
            match op {
                Op::SendNew { records } => {
                    let first_unacked = acked.iter().position(Option::is_none).unwrap_or(acked.len());
                    if batches.len() < first_unacked + MAX_CACHED_BATCHES {
                        batches.push(batch(1, 0, next_seq, records));
                        acked.push(None);
                        in_flight.push(batches.len() - 1);
                        next_seq += records;
                    }
                }
                Op::Deliver { i, lose_response } => {
                    if !in_flight.is_empty() {
                        let idx = in_flight.remove(i % in_flight.len());
                        if let Some(offset) = broker.produce(&batches[idx]) {
                            if !lose_response {
                                prop_assert!(acked[idx].is_none_or(|o| o == offset), "a batch was told two offsets");
                                acked[idx] = Some(offset);
                            }
                        }
                    }
                }
                Op::RetryAll => {
                    in_flight = (0..batches.len()).filter(|i| acked[*i].is_none()).collect();
                }
                Op::Restart { at } => broker.restart(at),
            }
        }
        // Drain: retry in order until everything is acknowledged.
        for idx in 0..batches.len() {
            if acked[idx].is_none() {
                let offset = broker.produce(&batches[idx]);
                prop_assert!(offset.is_some(), "in-order retry of batch {} rejected", idx);
                acked[idx] = offset;
            }
        }
        // Exactly once, in order, at the told offset.
        prop_assert_eq!(broker.log.len(), batches.len());
        for (idx, b) in batches.iter().enumerate() {
            let (offset, logged) = broker.log[idx];
            prop_assert_eq!(logged, *b);
            prop_assert_eq!(Some(offset), acked[idx]);
        }
    }
}
