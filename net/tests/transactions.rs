//! Transactions through the whole broker: a transaction whose end was
//! decided (its Prepare* entry durable) when the broker stopped, before its
//! markers were written, is completed by the marker reconcile at the next
//! start: markers written, the last stable offset moved past it, and the
//! entry completed. A producer whose transaction the reaper aborted is
//! fenced on every partition, including one it never wrote to.
#![cfg(not(madsim))]
// A test: an unwrap that fails is the test failing.
#![allow(clippy::unwrap_used)]

mod support;

use kaas_core::cluster::coordinator_slot;
use kaas_core::layout::{txn_slot_file, txn_slot_journal};
use kaas_core::protocol::messages::*;
use kaas_core::protocol::{ErrorCode, RequestBody, ResponseBody};
use kaas_core::record::{BatchBuilder, NewRecord, RecordBatch};
use kaas_core::txn::{TxnEntry, TxnSlotState, TxnState};
use kaas_net::broker::Isolation;
use kaas_net::client::Connection;
use kaas_net::slot_store;
use kaas_net::volume::{LocalVolume, Volume};
use std::collections::BTreeMap;
use std::time::Duration;

const TXN_ID: &str = "tx-restart";

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

async fn init(conn: &mut Connection, timeout_ms: i32) -> (i64, i16) {
    let req = RequestBody::InitProducerId(InitProducerIdRequest {
        transactional_id: Some(TXN_ID.into()),
        transaction_timeout_ms: timeout_ms,
        producer_id: -1,
        producer_epoch: -1,
        ..Default::default()
    });
    match conn
        .send(init_producer_id_request::API_KEY, 4, &req)
        .await
        .unwrap()
    {
        ResponseBody::InitProducerId(r) => {
            assert_eq!(r.error_code, 0);
            (r.producer_id, r.producer_epoch)
        }
        other => panic!("unexpected {other:?}"),
    }
}

async fn add_partition(conn: &mut Connection, pid: i64, epoch: i16, topic: &str, partition: i32) {
    let req = RequestBody::AddPartitionsToTxn(AddPartitionsToTxnRequest {
        v3_and_below_transactional_id: TXN_ID.into(),
        v3_and_below_producer_id: pid,
        v3_and_below_producer_epoch: epoch,
        v3_and_below_topics: vec![add_partitions_to_txn_request::AddPartitionsToTxnTopic {
            name: topic.into(),
            partitions: vec![partition],
            ..Default::default()
        }],
        ..Default::default()
    });
    match conn
        .send(add_partitions_to_txn_request::API_KEY, 3, &req)
        .await
        .unwrap()
    {
        ResponseBody::AddPartitionsToTxn(r) => {
            let code =
                r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code;
            assert_eq!(code, 0);
        }
        other => panic!("unexpected {other:?}"),
    }
}

fn txn_batch(pid: i64, epoch: i16, seq: i32, values: &[&str]) -> RecordBatch {
    let mut b = BatchBuilder::transactional(pid, epoch, seq);
    for v in values {
        b.push(NewRecord::new(support::now_ms(), None, Some(v.as_bytes())));
    }
    b.build()
}

/// The error code of an acks=all transactional produce.
async fn produce(conn: &mut Connection, topic: &str, partition: i32, b: &RecordBatch) -> i16 {
    let mut req = kaas_net::client::single_partition_produce(
        topic,
        partition,
        b.as_bytes().clone(),
        -1,
        5_000,
    );
    if let RequestBody::Produce(p) = &mut req {
        p.transactional_id = Some(TXN_ID.into());
    }
    match conn.send(produce_request::API_KEY, 9, &req).await.unwrap() {
        ResponseBody::Produce(r) => r.responses[0].partition_responses[0].error_code,
        other => panic!("unexpected {other:?}"),
    }
}

/// Changes TXN_ID's durable entry while the broker is stopped: a newer
/// snapshot is what the next start reads (its version beats the journal's
/// last record).
fn edit_entry(dir: &std::path::Path, edit: impl FnOnce(&mut TxnEntry)) {
    let volume = LocalVolume::new(dir).unwrap();
    let n = coordinator_slot(TXN_ID);
    let mut slot = slot_store::load(
        &volume,
        &txn_slot_file(n, 0),
        &txn_slot_journal(n, 0),
        |bytes| TxnSlotState::decode(bytes, n),
    )
    .unwrap()
    .state
    .unwrap();
    edit(slot.entries.get_mut(TXN_ID).unwrap());
    slot.version += 1;
    volume
        .write_atomic(&txn_slot_file(n, 0), &slot.encode().unwrap())
        .unwrap();
}

/// EndTxn v5 (transaction version 2): the error and the identity the
/// producer continues with.
async fn end_txn_v5(conn: &mut Connection, pid: i64, epoch: i16, commit: bool) -> (i16, i64, i16) {
    let req = RequestBody::EndTxn(EndTxnRequest {
        transactional_id: TXN_ID.into(),
        producer_id: pid,
        producer_epoch: epoch,
        committed: commit,
        ..Default::default()
    });
    match conn.send(end_txn_request::API_KEY, 5, &req).await.unwrap() {
        ResponseBody::EndTxn(r) => (r.error_code, r.producer_id, r.producer_epoch),
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn a_transaction_prepared_before_a_crash_is_completed_by_the_reconcile_after_it() {
    let first = runtime();
    let (dir, pid, epoch) = first.block_on(async {
        let tb = support::start_broker(|_| {}).await;
        tb.broker
            .create_topic("t", 1, 1, BTreeMap::new())
            .await
            .unwrap();
        let mut conn = Connection::connect(tb.addr).await.unwrap();
        let (pid, epoch) = init(&mut conn, 60_000).await;
        add_partition(&mut conn, pid, epoch, "t", 0).await;
        assert_eq!(
            produce(&mut conn, "t", 0, &txn_batch(pid, epoch, 0, &["a", "b"])).await,
            0
        );
        let p = tb.broker.partition("t", 0, -1).unwrap();
        assert_eq!(p.last_stable_offset(), 0, "the transaction is open");
        (tb._dir, pid, epoch)
    });
    // The broker stops dead: no task runs on.
    drop(first);
    // As if it had stopped right after EndTxn(commit) made PrepareCommit
    // durable: the slot file says the transaction is prepared.
    edit_entry(dir.path(), |entry| {
        assert_eq!(entry.state, TxnState::Ongoing);
        entry.state = TxnState::PrepareCommit;
    });

    let second = runtime();
    second.block_on(async {
        let tb = support::start_broker_in(dir, |_| {}).await;
        let c = tb.broker.txn_coordinator(TXN_ID).unwrap().clone();
        let mut completed = false;
        for _ in 0..100 {
            if c.entry(TXN_ID)
                .is_some_and(|e| e.state == TxnState::CompleteCommit)
            {
                completed = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            completed,
            "the reconcile completes the prepared transaction at start"
        );
        let p = tb.broker.partition("t", 0, -1).unwrap();
        assert_eq!(p.high_watermark(), 3, "two records and the COMMIT marker");
        assert_eq!(p.last_stable_offset(), 3);
        let read = p.read(0, 1 << 20, Isolation::ReadCommitted).await.unwrap();
        assert_eq!(read.aborted_transactions, Some(vec![]));
        let batches: Vec<_> = kaas_core::record::split_batches(read.records).collect();
        assert_eq!(batches.len(), 2);
        assert!(batches[1].is_control());
        assert_eq!(
            (batches[1].producer_id(), batches[1].producer_epoch()),
            (pid, epoch)
        );
    });
}

#[test]
fn the_reaper_fences_a_stalled_producer_on_every_partition() {
    runtime().block_on(async {
        let tb = support::start_broker(|c| {
            c.txn.abort_timed_out_interval_ms = 50;
        })
        .await;
        tb.broker
            .create_topic("t", 2, 1, BTreeMap::new())
            .await
            .unwrap();
        let mut conn = Connection::connect(tb.addr).await.unwrap();
        let (pid, epoch) = init(&mut conn, 200).await;
        add_partition(&mut conn, pid, epoch, "t", 0).await;
        assert_eq!(
            produce(&mut conn, "t", 0, &txn_batch(pid, epoch, 0, &["lost"])).await,
            0
        );
        let c = tb.broker.txn_coordinator(TXN_ID).unwrap().clone();
        let mut aborted = false;
        for _ in 0..100 {
            if c.entry(TXN_ID)
                .is_some_and(|e| e.state == TxnState::CompleteAbort)
            {
                aborted = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            aborted,
            "the reaper aborts the transaction past its timeout"
        );
        let p0 = tb.broker.partition("t", 0, -1).unwrap();
        assert_eq!(p0.last_stable_offset(), p0.high_watermark());
        let read = p0.read(0, 1 << 20, Isolation::ReadCommitted).await.unwrap();
        assert_eq!(read.aborted_transactions, Some(vec![(pid, 0)]));
        // The stalled producer comes back: fenced where it wrote, and
        // refused where it never wrote.
        assert_eq!(
            produce(&mut conn, "t", 0, &txn_batch(pid, epoch, 1, &["zombie"])).await,
            ErrorCode::InvalidProducerEpoch.code()
        );
        assert_eq!(
            produce(&mut conn, "t", 1, &txn_batch(pid, epoch, 0, &["zombie"])).await,
            ErrorCode::InvalidProducerEpoch.code()
        );
        assert_eq!(tb.broker.partition("t", 1, -1).unwrap().high_watermark(), 0);
    });
}

/// KIP-664: an operator aborts a hanging transaction with WriteTxnMarkers,
/// naming the producer, its epoch and the coordinator epoch; the last
/// stable offset moves on and read_committed drops the records. A marker
/// from an older producer epoch is refused and writes nothing, and so is a
/// WriteTxnMarkers v2 marker of transaction version 2 at the producer's
/// current epoch (KIP-1228).
#[test]
fn an_operator_aborts_a_hanging_transaction_with_write_txn_markers() {
    runtime().block_on(async {
        let tb = support::start_broker(|_| {}).await;
        tb.broker
            .create_topic("t", 1, 1, BTreeMap::new())
            .await
            .unwrap();
        let mut conn = Connection::connect(tb.addr).await.unwrap();
        // A second InitProducerId: epoch 1, so an older one exists.
        init(&mut conn, 60_000).await;
        let (pid, epoch) = init(&mut conn, 60_000).await;
        assert_eq!(epoch, 1);
        add_partition(&mut conn, pid, epoch, "t", 0).await;
        assert_eq!(
            produce(&mut conn, "t", 0, &txn_batch(pid, epoch, 0, &["hanging"])).await,
            0
        );
        let p = tb.broker.partition("t", 0, -1).unwrap();
        assert_eq!(p.last_stable_offset(), 0);
        let abort_as = |transaction_version: i8, producer_epoch: i16, partition: i32| {
            RequestBody::WriteTxnMarkers(WriteTxnMarkersRequest {
                markers: vec![write_txn_markers_request::WritableTxnMarker {
                    producer_id: pid,
                    producer_epoch,
                    transaction_result: false,
                    topics: vec![write_txn_markers_request::WritableTxnMarkerTopic {
                        name: "t".into(),
                        partition_indexes: vec![partition],
                        ..Default::default()
                    }],
                    coordinator_epoch: 0,
                    transaction_version,
                    ..Default::default()
                }],
                ..Default::default()
            })
        };
        let abort = |producer_epoch: i16, partition: i32| abort_as(0, producer_epoch, partition);
        let code = |resp: ResponseBody| match resp {
            ResponseBody::WriteTxnMarkers(r) => r.markers[0].topics[0].partitions[0].error_code,
            other => panic!("unexpected {other:?}"),
        };
        let api = write_txn_markers_request::API_KEY;
        assert_eq!(
            code(conn.send(api, 1, &abort(epoch, 7)).await.unwrap()),
            ErrorCode::UnknownTopicOrPartition.code()
        );
        // KIP-1228: a version-2 marker at the producer's epoch is stale.
        assert_eq!(
            code(conn.send(api, 2, &abort_as(2, epoch, 0)).await.unwrap()),
            ErrorCode::InvalidProducerEpoch.code()
        );
        assert_eq!(p.high_watermark(), 1, "the stale marker wrote nothing");
        assert_eq!(code(conn.send(api, 1, &abort(epoch, 0)).await.unwrap()), 0);
        assert_eq!(p.high_watermark(), 2);
        assert_eq!(
            p.last_stable_offset(),
            2,
            "the hanging transaction is closed"
        );
        let read = p.read(0, 1 << 20, Isolation::ReadCommitted).await.unwrap();
        assert_eq!(read.aborted_transactions, Some(vec![(pid, 0)]));
        // A marker of an older producer epoch is refused.
        let older = epoch - 1;
        assert_eq!(
            code(conn.send(api, 1, &abort(older, 0)).await.unwrap()),
            ErrorCode::InvalidProducerEpoch.code()
        );
        assert_eq!(p.high_watermark(), 2);
        // A version-2 marker at a bumped epoch is written (it closes
        // nothing: no transaction is open).
        assert_eq!(
            code(conn.send(api, 2, &abort_as(2, epoch + 1, 0)).await.unwrap()),
            0
        );
        assert_eq!(p.high_watermark(), 3);
    });
}

/// KIP-890: EndTxn v5 at an exhausted epoch cannot bump again, so the
/// transaction's markers carry i16::MAX and the producer is answered a
/// fresh producer id at epoch 0, with which it carries on; the old
/// identity is refused.
#[test]
fn end_txn_v5_at_an_exhausted_epoch_moves_the_producer_to_a_fresh_id() {
    let first = runtime();
    let (dir, pid) = first.block_on(async {
        let tb = support::start_broker(|_| {}).await;
        tb.broker
            .create_topic("t", 1, 1, BTreeMap::new())
            .await
            .unwrap();
        let mut conn = Connection::connect(tb.addr).await.unwrap();
        let (pid, _) = init(&mut conn, 60_000).await;
        (tb._dir, pid)
    });
    drop(first);
    let exhausted = i16::MAX - 1;
    edit_entry(dir.path(), |entry| entry.producer_epoch = exhausted);

    runtime().block_on(async {
        let tb = support::start_broker_in(dir, |_| {}).await;
        let mut conn = Connection::connect(tb.addr).await.unwrap();
        add_partition(&mut conn, pid, exhausted, "t", 0).await;
        let batch = txn_batch(pid, exhausted, 0, &["last"]);
        assert_eq!(produce(&mut conn, "t", 0, &batch).await, 0);
        let (error, new_pid, new_epoch) = end_txn_v5(&mut conn, pid, exhausted, true).await;
        assert_eq!(error, 0);
        assert_ne!(new_pid, pid, "a fresh producer id");
        assert_eq!(new_epoch, 0);
        // The lost answer's retry gets the same identity back.
        assert_eq!(
            end_txn_v5(&mut conn, pid, exhausted, true).await,
            (0, new_pid, 0)
        );
        let p = tb.broker.partition("t", 0, -1).unwrap();
        assert_eq!((p.high_watermark(), p.last_stable_offset()), (2, 2));
        let read = p.read(0, 1 << 20, Isolation::ReadCommitted).await.unwrap();
        let batches: Vec<_> = kaas_core::record::split_batches(read.records).collect();
        assert!(batches[1].is_control());
        assert_eq!(
            (batches[1].producer_id(), batches[1].producer_epoch()),
            (pid, i16::MAX),
            "the marker fences the exhausted epoch"
        );
        // The old identity is no longer this transactional id's.
        let stale = txn_batch(pid, exhausted, 1, &["zombie"]);
        assert_ne!(produce(&mut conn, "t", 0, &stale).await, 0);
        // The new one carries on from epoch 0.
        add_partition(&mut conn, new_pid, 0, "t", 0).await;
        assert_eq!(
            produce(&mut conn, "t", 0, &txn_batch(new_pid, 0, 0, &["next"])).await,
            0
        );
        assert_eq!(
            end_txn_v5(&mut conn, new_pid, 0, true).await,
            (0, new_pid, 1)
        );
    });
}

/// Transaction version 1 never rotates on EndTxn (the next InitProducerId
/// does): a commit at the exhausted epoch is prepared and completed at that
/// epoch, not turned away as if a fresh producer id were missing.
#[test]
fn end_txn_v1_at_an_exhausted_epoch_commits_at_that_epoch() {
    let first = runtime();
    let (dir, pid) = first.block_on(async {
        let tb = support::start_broker(|_| {}).await;
        tb.broker
            .create_topic("t", 1, 1, BTreeMap::new())
            .await
            .unwrap();
        let mut conn = Connection::connect(tb.addr).await.unwrap();
        let (pid, _) = init(&mut conn, 60_000).await;
        (tb._dir, pid)
    });
    drop(first);
    let exhausted = i16::MAX - 1;
    edit_entry(dir.path(), |entry| entry.producer_epoch = exhausted);

    runtime().block_on(async {
        let tb = support::start_broker_in(dir, |_| {}).await;
        let mut conn = Connection::connect(tb.addr).await.unwrap();
        add_partition(&mut conn, pid, exhausted, "t", 0).await;
        let batch = txn_batch(pid, exhausted, 0, &["last"]);
        assert_eq!(produce(&mut conn, "t", 0, &batch).await, 0);
        let req = RequestBody::EndTxn(EndTxnRequest {
            transactional_id: TXN_ID.into(),
            producer_id: pid,
            producer_epoch: exhausted,
            committed: true,
            ..Default::default()
        });
        match conn.send(end_txn_request::API_KEY, 4, &req).await.unwrap() {
            ResponseBody::EndTxn(r) => assert_eq!(r.error_code, 0),
            other => panic!("unexpected {other:?}"),
        }
        let p = tb.broker.partition("t", 0, -1).unwrap();
        assert_eq!((p.high_watermark(), p.last_stable_offset()), (2, 2));
    });
}

/// The records in TXN_ID's slot journal: one per durable decision round.
fn journal_records(dir: &std::path::Path) -> usize {
    let path = dir.join(txn_slot_journal(coordinator_slot(TXN_ID), 0));
    let bytes = std::fs::read(path).unwrap_or_default();
    kaas_core::slot_journal::scan(&bytes).records
}

/// KIP-890 part 2: a Produce v12 whose transactional batches go to three
/// partitions adds all three to the transaction in one decision, one
/// journal write, as Kafka's broker adds them in one call to its
/// coordinator (not one write, and one wait, per partition).
#[test]
fn a_produce_v12_adds_all_its_partitions_in_one_decision() {
    runtime().block_on(async {
        let tb = support::start_broker(|_| {}).await;
        tb.broker
            .create_topic("t", 3, 1, BTreeMap::new())
            .await
            .unwrap();
        let mut conn = Connection::connect(tb.addr).await.unwrap();
        let (pid, epoch) = init(&mut conn, 60_000).await;
        let before = journal_records(tb._dir.path());
        assert!(before >= 1, "InitProducerId was journaled");
        let partitions = (0..3)
            .map(|index| produce_request::PartitionProduceData {
                index,
                records: Some(txn_batch(pid, epoch, 0, &["v"]).as_bytes().clone()),
                ..Default::default()
            })
            .collect();
        let req = RequestBody::Produce(ProduceRequest {
            transactional_id: Some(TXN_ID.into()),
            acks: -1,
            timeout_ms: 5_000,
            topic_data: vec![produce_request::TopicProduceData {
                name: "t".into(),
                partition_data: partitions,
                ..Default::default()
            }],
            ..Default::default()
        });
        let codes: Vec<i16> = match conn.send(produce_request::API_KEY, 12, &req).await.unwrap() {
            ResponseBody::Produce(r) => r.responses[0]
                .partition_responses
                .iter()
                .map(|p| p.error_code)
                .collect(),
            other => panic!("unexpected {other:?}"),
        };
        assert_eq!(codes, vec![0, 0, 0]);
        assert_eq!(journal_records(tb._dir.path()), before + 1);
        let entry = tb.broker.transactions.entry(TXN_ID).unwrap();
        assert_eq!(entry.state, TxnState::Ongoing);
        assert_eq!(entry.partitions.len(), 3);
    });
}
