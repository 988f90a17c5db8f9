use super::*;
use crate::producer::{decode_snapshot, BatchIdentity, ProducerTable};
use proptest::prelude::*;

fn plain(records: i32) -> IncomingBatch {
    IncomingBatch {
        identity: None,
        last_offset_delta: records - 1,
        max_timestamp: 0,
    }
}

fn idempotent(pid: i64, epoch: i16, first_seq: i32, records: i32) -> IncomingBatch {
    IncomingBatch {
        identity: Some(BatchIdentity {
            producer_id: pid,
            epoch,
            first_seq,
            last_seq: first_seq + records - 1,
            is_transactional: false,
            offset_delta: records - 1,
        }),
        last_offset_delta: records - 1,
        max_timestamp: 0,
    }
}

fn fresh() -> PartitionState {
    PartitionState::recovered(Recovered {
        log_start_offset: 0,
        log_end_offset: 0,
        leader_epoch: 0,
        leader_epochs: Vec::new(),
        producers: ProducerTable::new(),
        snapshot_offset: None,
    })
}

#[test]
fn offsets_are_assigned_densely_from_the_log_end_in_decision_order() {
    let mut p = fresh();
    assert_eq!(
        p.append(&plain(3), 0),
        Ok(AppendDecision::Write {
            base_offset: 0,
            last_offset: 2
        })
    );
    assert_eq!(
        p.append(&plain(1), 0),
        Ok(AppendDecision::Write {
            base_offset: 3,
            last_offset: 3
        })
    );
    assert_eq!(p.log_end_offset(), 4);
}

#[test]
fn the_high_watermark_is_the_durable_end() {
    let mut p = fresh();
    p.append(&plain(5), 0).unwrap();
    assert_eq!(p.high_watermark(), 0, "nothing is visible before the fsync");
    let fx = p.durable_up_to(3);
    assert_eq!(fx.high_watermark, Some(3));
    assert_eq!(p.high_watermark(), 3);
    // Never past the log end, never back.
    assert_eq!(p.durable_up_to(99).high_watermark, Some(5));
    assert_eq!(p.durable_up_to(1).high_watermark, None);
    assert_eq!(p.high_watermark(), 5);
}

#[test]
fn the_last_stable_offset_stops_at_the_earliest_open_transaction() {
    assert_eq!(last_stable_offset(10, 0, None), 10);
    assert_eq!(last_stable_offset(10, 0, Some(4)), 4);
    assert_eq!(last_stable_offset(3, 0, Some(4)), 3);
    let mut p = fresh();
    p.append(&transactional(7, 0, 0, 1), 0).expect("appended"); // 0
    p.append(&transactional(8, 0, 0, 1), 0).expect("appended"); // 1
    p.durable_up_to(2);
    assert_eq!(p.last_stable_offset(), 0, "the earliest of the two");
}

#[test]
fn the_last_stable_offset_never_falls_below_the_log_start() {
    assert_eq!(last_stable_offset(10, 6, Some(4)), 6);
    assert_eq!(
        last_stable_offset(5, 6, Some(4)),
        5,
        "nor above the high watermark"
    );
    // Through the state: DeleteRecords past the open transaction's start.
    let mut p = fresh();
    p.append(&plain(2), 0).expect("appended");
    p.append(&transactional(7, 0, 0, 3), 0).expect("appended"); // 2..=4
    p.append(&plain(3), 0).expect("appended"); // 5..=7
    p.durable_up_to(8);
    assert_eq!(p.last_stable_offset(), 2);
    assert_eq!(p.may_delete_before(4), Ok(()));
    p.records_deleted(4);
    assert_eq!(p.last_stable_offset(), 4);
    p.append_marker(&marker(7, 0, 0, true), 0).expect("written");
    p.durable_up_to(9);
    assert_eq!(p.last_stable_offset(), 9);
}

#[test]
fn a_retry_is_answered_with_the_original_offsets_and_writes_nothing() {
    let mut p = fresh();
    let first = p.append(&idempotent(9, 0, 0, 2), 0).unwrap();
    p.append(&plain(1), 0).unwrap();
    let again = p.append(&idempotent(9, 0, 0, 2), 0).unwrap();
    assert_eq!(
        again,
        AppendDecision::Duplicate {
            base_offset: first.base_offset(),
            last_offset: 1
        }
    );
    assert_eq!(p.log_end_offset(), 3);
}

#[test]
fn producer_rule_violations_are_refused_with_their_code() {
    let mut p = fresh();
    p.append(&idempotent(9, 1, 0, 1), 0).unwrap();
    assert_eq!(
        p.append(&idempotent(9, 1, 5, 1), 0),
        Err(ErrorCode::OutOfOrderSequenceNumber)
    );
    assert_eq!(
        p.append(&idempotent(9, 0, 1, 1), 0),
        Err(ErrorCode::InvalidProducerEpoch)
    );
    assert_eq!(
        p.append(&idempotent(10, 0, 3, 1), 0),
        Err(ErrorCode::UnknownProducerId)
    );
    assert_eq!(p.log_end_offset(), 1, "refused batches take no offsets");
}

#[test]
fn a_snapshot_is_written_only_once_the_log_is_durable_up_to_its_offset() {
    assert!(snapshot_may_be_written(5, 5));
    assert!(!snapshot_may_be_written(6, 5));
    let mut p = fresh();
    p.append(&idempotent(9, 0, 0, 4), 0).unwrap();
    let at = p.segment_rolled();
    assert_eq!(at, 4);
    assert!(p.durable_up_to(3).snapshots.is_empty());
    let fx = p.durable_up_to(4);
    assert_eq!(fx.snapshots.len(), 1);
    let (table, offset) = decode_snapshot(&fx.snapshots[0].bytes).unwrap();
    assert_eq!(offset, 4);
    assert_eq!(table.get(9).map(|e| e.last_seq()), Some(3));
    assert!(p.durable_up_to(4).snapshots.is_empty(), "written once");
}

#[test]
fn a_newer_snapshot_supersedes_one_still_waiting() {
    let mut p = fresh();
    p.append(&plain(2), 0).unwrap();
    p.take_snapshot();
    p.append(&plain(2), 0).unwrap();
    p.take_snapshot();
    let fx = p.durable_up_to(4);
    assert_eq!(
        fx.snapshots.iter().map(|s| s.offset).collect::<Vec<_>>(),
        vec![4]
    );
}

/// The current epoch ends at the high watermark (nothing above it exists
/// for a client), not at the log end; older epochs at the checkpoint's
/// next start; the checkpoint is trimmed as the log start moves.
#[test]
fn the_current_epoch_ends_at_the_high_watermark_and_older_ones_at_the_next_start() {
    let mut p = fresh();
    p.append(&plain(4), 0).unwrap();
    assert_eq!(p.epoch_end_offset(0), Some((0, 0)), "nothing durable yet");
    p.durable_up_to(4);
    assert_eq!(p.epoch_end_offset(0), Some((0, 4)));
    assert_eq!(p.epoch_end_offset(1), None);
    assert_eq!(p.epoch_end_offset(-1), None);

    let mut p = PartitionState::recovered(Recovered {
        log_start_offset: 0,
        log_end_offset: 20,
        leader_epoch: 3,
        leader_epochs: vec![EpochEntry::new(0, 0), EpochEntry::new(3, 10)],
        producers: ProducerTable::new(),
        snapshot_offset: None,
    });
    assert_eq!(p.epoch_end_offset(3), Some((3, 20)));
    assert_eq!(p.epoch_end_offset(2), Some((0, 10)));
    assert_eq!(p.epoch_end_offset(0), Some((0, 10)));
    p.records_deleted(12);
    assert_eq!(p.leader_epochs(), &[EpochEntry::new(3, 12)]);
    assert_eq!(p.epoch_end_offset(0), Some((0, 12)));
}

#[test]
fn a_snapshot_ahead_of_the_recovered_log_is_not_trusted() {
    assert!(snapshot_is_trusted(10, 10));
    assert!(!snapshot_is_trusted(11, 10));
}

#[test]
fn records_may_be_deleted_up_to_the_high_watermark_only() {
    assert_eq!(may_delete_records_before(5, 5), Ok(()));
    assert_eq!(
        may_delete_records_before(6, 5),
        Err(ErrorCode::OffsetOutOfRange)
    );
    assert_eq!(
        may_delete_records_before(-2, 5),
        Err(ErrorCode::OffsetOutOfRange)
    );
    let mut p = fresh();
    p.append(&plain(4), 0).unwrap();
    p.durable_up_to(4);
    p.records_deleted(3);
    p.records_deleted(1);
    assert_eq!(p.log_start_offset(), 3, "the log start never moves back");
}

#[test]
fn segments_go_only_once_a_snapshot_past_them_is_written() {
    assert!(!snapshot_covers_deletion(None, 0));
    assert!(!snapshot_covers_deletion(Some(4), 5));
    assert!(snapshot_covers_deletion(Some(5), 5));
    let mut p = fresh();
    p.append(&plain(6), 0).unwrap();
    assert!(!p.deletion_is_covered(3));
    p.snapshot_written(6);
    p.snapshot_written(2);
    assert!(
        p.deletion_is_covered(6),
        "the newest written snapshot counts"
    );
}

#[test]
fn a_failed_partition_appends_and_acknowledges_nothing() {
    let mut p = fresh();
    p.append(&plain(2), 0).unwrap();
    p.segment_rolled();
    p.failed();
    assert_eq!(p.append(&plain(1), 0), Err(ErrorCode::KafkaStorageError));
    assert_eq!(p.durable_up_to(2), Effects::default());
    assert_eq!(p.high_watermark(), 0);
}

/// One step of a random history of a partition.
#[derive(Debug, Clone)]
enum Op {
    /// An idempotent batch: producer (0..3), records (1..4), and whether it
    /// is a retry of that producer's previous batch.
    Idempotent {
        producer: u8,
        records: u8,
        retry: bool,
    },
    Plain {
        records: u8,
    },
    /// The flusher's fsync covered the log up to this fraction (0..=8 of 8)
    /// of what is not durable yet.
    Durable {
        eighths: u8,
    },
    Roll,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..3, 1u8..4, any::<bool>()).prop_map(|(producer, records, retry)| Op::Idempotent {
            producer,
            records,
            retry
        }),
        (1u8..4).prop_map(|records| Op::Plain { records }),
        (0u8..=8).prop_map(|eighths| Op::Durable { eighths }),
        Just(Op::Roll),
    ]
}

proptest! {
    /// Against a model that keeps every decision: offsets are dense and
    /// never reused, a retry is answered with the offsets its original got,
    /// the high watermark never goes back nor past the log end, and every
    /// snapshot released is durable and covers exactly the batches below
    /// its offset.
    #[test]
    fn decisions_match_a_model_of_the_log(ops in proptest::collection::vec(op(), 1..200)) {
        let mut p = fresh();
        // Model: per producer, (next sequence, offsets of its last batch).
        let mut next_seq = [0i32; 3];
        let mut last_batch: [Option<(i32, i32, i64, i64)>; 3] = [None; 3];
        let mut log_end = 0i64;
        let mut hw = 0i64;
        for op in ops {
            match op {
                Op::Idempotent { producer, records, retry } => {
                    let i = producer as usize;
                    let pid = 100 + i64::from(producer);
                    match (retry, last_batch[i]) {
                        (true, Some((first, n, base, last))) => {
                            let d = p.append(&idempotent(pid, 0, first, n), 0).unwrap();
                            prop_assert_eq!(d, AppendDecision::Duplicate { base_offset: base, last_offset: last });
                        }
                        _ => {
                            let n = i32::from(records);
                            let d = p.append(&idempotent(pid, 0, next_seq[i], n), 0).unwrap();
                            let (base, last) = (log_end, log_end + i64::from(n) - 1);
                            prop_assert_eq!(d, AppendDecision::Write { base_offset: base, last_offset: last });
                            last_batch[i] = Some((next_seq[i], n, base, last));
                            next_seq[i] += n;
                            log_end = last + 1;
                        }
                    }
                }
                Op::Plain { records } => {
                    let d = p.append(&plain(i32::from(records)), 0).unwrap();
                    prop_assert_eq!(d.base_offset(), log_end);
                    log_end += i64::from(records);
                }
                Op::Durable { eighths } => {
                    let to = hw + (log_end - hw) * i64::from(eighths) / 8;
                    let fx = p.durable_up_to(to);
                    let new_hw = hw.max(to);
                    prop_assert_eq!(fx.high_watermark, (new_hw != hw).then_some(new_hw));
                    hw = new_hw;
                    for s in fx.snapshots {
                        prop_assert!(s.offset <= hw);
                        let (table, offset) = decode_snapshot(&s.bytes).unwrap();
                        prop_assert_eq!(offset, s.offset);
                        for (i, b) in last_batch.iter().enumerate() {
                            let pid = 100 + i as i64;
                            let covered = table.get(pid).and_then(|e| e.batches.back().map(|m| m.last_offset));
                            if let Some((_, _, _, last)) = b {
                                if *last < offset {
                                    prop_assert!(covered.is_some_and(|c| c <= *last && c < offset));
                                }
                            }
                            if let Some(c) = covered {
                                prop_assert!(c < offset, "snapshot at {} covers offset {}", offset, c);
                            }
                        }
                    }
                }
                Op::Roll => {
                    prop_assert_eq!(p.segment_rolled(), log_end);
                }
            }
            prop_assert_eq!(p.log_end_offset(), log_end);
            prop_assert_eq!(p.high_watermark(), hw);
            prop_assert!(p.last_stable_offset() <= p.high_watermark());
            prop_assert!(p.high_watermark() <= p.log_end_offset());
        }
    }
}

fn transactional(pid: i64, epoch: i16, first_seq: i32, records: i32) -> IncomingBatch {
    let mut b = idempotent(pid, epoch, first_seq, records);
    if let Some(id) = b.identity.as_mut() {
        id.is_transactional = true;
    }
    b
}

fn marker(pid: i64, epoch: i16, coordinator_epoch: i32, commit: bool) -> IncomingMarker {
    IncomingMarker {
        producer_id: pid,
        producer_epoch: epoch,
        coordinator_epoch,
        commit,
        transaction_version: 0,
    }
}

#[test]
fn a_marker_closes_the_open_transaction_and_the_last_stable_offset_moves_past_it() {
    let mut p = fresh();
    p.append(&plain(2), 0).expect("appended");
    p.append(&transactional(7, 0, 0, 3), 0).expect("appended"); // 2..=4
    p.append(&plain(1), 0).expect("appended"); // 5
    p.durable_up_to(6);
    assert_eq!(p.last_stable_offset(), 2, "stops at the open transaction");
    let written = p.append_marker(&marker(7, 0, 0, true), 0).expect("written");
    assert_eq!(
        written,
        MarkerWritten {
            offset: 6,
            aborted: None
        }
    );
    assert_eq!(p.log_end_offset(), 7);
    assert_eq!(
        p.last_stable_offset(),
        2,
        "held at the transaction until the marker is durable: a crash can take the marker back"
    );
    p.durable_up_to(7);
    assert_eq!(p.last_stable_offset(), 7);
}

#[test]
fn an_abort_marker_is_recorded_for_the_aborted_index() {
    let mut p = fresh();
    p.append(&transactional(7, 0, 0, 2), 0).expect("appended"); // 0..=1
    p.append(&transactional(8, 0, 0, 1), 0).expect("appended"); // 2
    let written = p
        .append_marker(&marker(7, 0, 0, false), 0)
        .expect("written");
    assert_eq!(
        written.aborted,
        Some(AbortedTxn {
            producer_id: 7,
            first_offset: 0,
            last_offset: 3,
            last_stable_offset: 2,
        }),
        "the other producer's transaction is still open at 2"
    );
    // A producer with nothing open here: the marker is written but closes
    // and indexes nothing (Kafka, seen in txn/write-txn-markers).
    let written = p
        .append_marker(&marker(9, 0, 0, false), 0)
        .expect("written");
    assert_eq!((written.offset, written.aborted), (4, None));
    let again = p
        .append_marker(&marker(7, 0, 0, false), 0)
        .expect("written");
    assert_eq!((again.offset, again.aborted), (5, None), "already closed");
}

/// The producer's last timestamp after a marker is the marker's, as
/// DescribeProducers shows it in Kafka.
#[test]
fn a_marker_sets_the_producers_last_timestamp() {
    let mut p = fresh();
    p.append(&transactional(7, 0, 0, 2), 0).expect("appended");
    p.append_marker(&marker(7, 0, 0, true), 12_345)
        .expect("written");
    assert_eq!(p.producers().get(7).map(|e| e.last_timestamp), Some(12_345));
}

#[test]
fn a_marker_from_an_older_coordinator_epoch_is_transaction_coordinator_fenced() {
    let mut p = fresh();
    p.append(&transactional(7, 0, 0, 1), 0).expect("appended");
    p.append_marker(&marker(7, 0, 3, true), 0).expect("written");
    p.append(&transactional(7, 0, 1, 1), 0).expect("appended");
    assert_eq!(
        p.append_marker(&marker(7, 0, 2, true), 0),
        Err(ErrorCode::TransactionCoordinatorFenced)
    );
    assert_eq!(p.log_end_offset(), 3, "nothing written");
    assert!(p.append_marker(&marker(7, 0, 3, true), 0).is_ok());
}

#[test]
fn a_marker_with_an_older_producer_epoch_is_invalid_producer_epoch() {
    let mut p = fresh();
    p.append(&transactional(7, 2, 0, 1), 0).expect("appended");
    assert_eq!(
        p.append_marker(&marker(7, 1, 0, false), 0),
        Err(ErrorCode::InvalidProducerEpoch)
    );
    // A marker at a bumped epoch (a coordinator abort, KIP-360) is written
    // and starts that epoch: the old epoch's batches are fenced.
    assert!(p.append_marker(&marker(7, 3, 0, false), 0).is_ok());
    assert_eq!(
        p.append(&transactional(7, 2, 1, 1), 0),
        Err(ErrorCode::InvalidProducerEpoch)
    );
}

#[test]
fn aborted_transactions_in_range_are_those_overlapping_the_fetch() {
    let a = |pid, first, last| AbortedTxn {
        producer_id: pid,
        first_offset: first,
        last_offset: last,
        last_stable_offset: last + 1,
    };
    let index = [a(1, 0, 4), a(2, 10, 12), a(3, 3, 20)];
    assert_eq!(
        aborted_transactions_in_range(&index, 5, 11),
        vec![(3, 3), (2, 10)]
    );
    assert_eq!(aborted_transactions_in_range(&index, 0, 3), vec![(1, 0)]);
    assert_eq!(aborted_transactions_in_range(&index, 21, 30), vec![]);
    assert_eq!(
        aborted_transactions_in_range(&index, 4, 10),
        vec![(1, 0), (3, 3)]
    );
}

#[test]
fn opens_transaction_only_for_a_new_transactional_batch_without_an_open_transaction() {
    let mut p = fresh();
    let txn = |first_seq| {
        let mut b = idempotent(9, 2, first_seq, 2);
        if let Some(id) = b.identity.as_mut() {
            id.is_transactional = true;
        }
        b
    };
    let first = txn(0);
    let Some(first_id) = first.identity else {
        panic!("transactional batch has an identity")
    };
    assert!(p.opens_transaction(&first_id));
    assert!(!p.opens_transaction(&idempotent(9, 2, 0, 2).identity.expect("idempotent")));
    // Out of sequence too: verified first, so a batch after a refused one
    // gets the verification's retriable answer.
    let Some(ahead) = txn(4).identity else {
        panic!("transactional batch has an identity")
    };
    assert!(p.opens_transaction(&ahead));
    p.append(&first, 0).expect("appended");
    // A retry, and the next batch of the same transaction, open nothing.
    assert!(!p.opens_transaction(&first_id));
    let Some(next) = txn(2).identity else {
        panic!("transactional batch has an identity")
    };
    assert!(!p.opens_transaction(&next));
    p.append_marker(
        &IncomingMarker {
            producer_id: 9,
            producer_epoch: 2,
            coordinator_epoch: 0,
            commit: true,
            transaction_version: 0,
        },
        0,
    )
    .expect("marker");
    // After the marker the next transaction opens again.
    assert!(p.opens_transaction(&next));
}

#[test]
fn deletion_is_bounded_by_the_high_watermark_not_the_last_stable_offset() {
    // Kafka's DeleteRecords and retention check the high watermark only: an
    // open transaction does not hold the log start back.
    let mut p = fresh();
    p.append(&transactional(7, 0, 0, 3), 0).expect("appended"); // 0..=2
    p.append(&plain(2), 0).expect("appended"); // 3..=4
    p.durable_up_to(5);
    assert_eq!(p.last_stable_offset(), 0);
    assert_eq!(p.may_delete_before(5), Ok(()));
    assert_eq!(p.may_delete_before(6), Err(ErrorCode::OffsetOutOfRange));
}

#[test]
fn a_producer_with_an_open_transaction_never_expires() {
    let mut p = fresh();
    p.append(&transactional(7, 0, 0, 1), 0).expect("appended");
    p.append(&idempotent(8, 0, 0, 1), 0).expect("appended");
    assert_eq!(
        p.expire_producers(1_000_000, 10),
        vec![8],
        "only the idle idempotent one"
    );
    assert!(p.producers().get(7).is_some());
    assert_eq!(
        p.last_stable_offset(),
        0,
        "its transaction still holds the LSO"
    );
    p.append_marker(&marker(7, 0, 0, false), 0)
        .expect("written");
    assert_eq!(
        p.expire_producers(1_000_000, 10),
        vec![7],
        "closed: now it may go"
    );
}

#[test]
fn an_aborted_index_search_stops_at_an_entry_whose_stable_offset_reaches_the_bound() {
    let a = |first, last, lso| AbortedTxn {
        producer_id: 1,
        first_offset: first,
        last_offset: last,
        last_stable_offset: lso,
    };
    assert!(!aborted_search_is_complete(&a(0, 5, 3), 4));
    assert!(aborted_search_is_complete(&a(0, 5, 4), 4));
    assert!(aborted_search_is_complete(&a(0, 5, 6), 4));
}

#[test]
fn a_txn_index_entry_is_trusted_at_recovery_only_below_the_replay_start() {
    let a = |last| AbortedTxn {
        producer_id: 1,
        first_offset: 0,
        last_offset: last,
        last_stable_offset: last + 1,
    };
    assert!(txn_index_entry_is_trusted(&a(9), 10));
    assert!(
        !txn_index_entry_is_trusted(&a(10), 10),
        "rebuilt by the replay"
    );
    assert!(
        !txn_index_entry_is_trusted(&a(50), 10),
        "its marker may be gone"
    );
}

#[test]
fn the_aborted_entry_of_the_replay_is_the_one_the_marker_wrote() {
    use crate::record::{build_control_batch, BatchBuilder, ControlType, EndTxnMarker, NewRecord};
    // Live: two open transactions, one aborted.
    let mut p = fresh();
    p.append(&transactional(7, 0, 0, 2), 0).expect("appended"); // 0..=1
    p.append(&transactional(8, 0, 0, 1), 0).expect("appended"); // 2
    let live = p
        .append_marker(&marker(7, 0, 4, false), 0)
        .expect("written");
    // Replay of the same log.
    let mut table = ProducerTable::new();
    let batch = |pid, seq, n: usize| {
        let mut b = BatchBuilder::transactional(pid, 0, seq);
        for _ in 0..n {
            b.push(NewRecord::new(0, None, Some(b"v")));
        }
        b.build()
    };
    table.replay(&batch(7, 0, 2).with_assigned(0, 0), 0);
    table.replay(&batch(8, 0, 1).with_assigned(2, 0), 0);
    let control = build_control_batch(
        7,
        0,
        0,
        EndTxnMarker {
            control_type: ControlType::Abort,
            coordinator_epoch: 4,
        },
    )
    .with_assigned(3, 0);
    let completed = table.replay(&control, 0).expect("a marker");
    assert_eq!(
        aborted_index_entry(&completed, table.first_open_offset()),
        live.aborted
    );
}

#[test]
fn a_snapshot_is_trusted_only_within_its_epochs_log() {
    use super::leader_epochs::EpochEntry;
    let entries = [EpochEntry::new(0, 0), EpochEntry::new(2, 10)];
    // Epoch 0's log ends where epoch 2 starts.
    assert!(epoch_snapshot_is_trusted(&entries, 0, 10, 50));
    assert!(
        !epoch_snapshot_is_trusted(&entries, 0, 11, 50),
        "a deposed leader's late snapshot"
    );
    // The newest epoch reaches the log end.
    assert!(epoch_snapshot_is_trusted(&entries, 2, 50, 50));
    assert!(!epoch_snapshot_is_trusted(&entries, 2, 51, 50));
    // An epoch the checkpoint does not list wrote nothing: its snapshot
    // holds up to where the next listed epoch starts.
    assert!(epoch_snapshot_is_trusted(&entries, 1, 10, 50));
    assert!(!epoch_snapshot_is_trusted(&entries, 1, 11, 50));
    // No checkpoint: one epoch only, up to the log end.
    assert!(epoch_snapshot_is_trusted(&[], 0, 7, 7));
}
