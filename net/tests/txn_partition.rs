//! The partition side of transactions, driven through `Partition` directly
//! (no coordinator): transactional batches open a transaction, markers
//! close it, the last stable offset moves only once a marker is durable,
//! read_committed reads stop there with the aborted transactions of what
//! they return, and a restart rebuilds all of it from the volume.
#![cfg(not(madsim))]
// A test: an unwrap that fails is the test failing.
#![allow(clippy::unwrap_used)]

mod support;

use kaas_core::cluster::Claim;
use kaas_core::partition::IncomingMarker;
use kaas_core::protocol::ErrorCode;
use kaas_core::record::{
    parse_end_txn_marker, split_batches, BatchBuilder, ControlType, NewRecord, RecordBatch,
};
use kaas_net::broker::{Isolation, OpenPartition, Partition};
use kaas_net::env::Env;
use kaas_net::log::LogConfig;
use kaas_net::volume::{LocalVolume, Volume};
use std::sync::Arc;
use tokio::sync::watch;

fn open(volume: &Arc<dyn Volume>, segment_bytes: u64) -> Arc<Partition> {
    let config = LogConfig {
        segment_bytes,
        ..LogConfig::default()
    };
    let p = Partition::open(
        volume.clone(),
        Env::system(),
        Arc::new(watch::Sender::new(0)),
        OpenPartition {
            topic: "t",
            index: 0,
            config,
            // Files are named with this epoch (`kaas_core::layout`):
            // `00000000000000000000_0000000003.log` and so on.
            leader: Claim {
                broker_id: 0,
                epoch: 3,
            },
        },
    )
    .unwrap();
    let p = Arc::new(p);
    tokio::spawn(p.clone().run_flusher());
    p
}

fn txn_batch(pid: i64, epoch: i16, seq: i32, n: usize) -> RecordBatch {
    let mut b = BatchBuilder::transactional(pid, epoch, seq);
    for i in 0..n {
        b.push(NewRecord::new(
            support::now_ms(),
            None,
            Some(format!("{pid}-{seq}-{i}").as_bytes()),
        ));
    }
    b.build()
}

fn plain_batch(n: usize) -> RecordBatch {
    let mut b = BatchBuilder::new();
    for i in 0..n {
        b.push(NewRecord::new(
            support::now_ms(),
            None,
            Some(format!("plain-{i}").as_bytes()),
        ));
    }
    b.build()
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

/// Appends and waits until durable (acks=all); returns the base offset.
async fn append(p: &Partition, batch: RecordBatch) -> i64 {
    let d = p.append(batch).await.unwrap();
    p.wait_durable(d.end_offset()).await.unwrap();
    d.base_offset()
}

/// Writes a marker and waits until durable, as the coordinator does.
async fn end_txn(p: &Partition, m: IncomingMarker) -> i64 {
    let offset = p.write_marker(m).await.unwrap();
    p.wait_durable(offset + 1).await.unwrap();
    offset
}

fn volume() -> (tempfile::TempDir, Arc<dyn Volume>) {
    let dir = tempfile::tempdir().unwrap();
    let volume: Arc<dyn Volume> = Arc::new(LocalVolume::new(dir.path()).unwrap());
    (dir, volume)
}

#[tokio::test]
async fn a_commit_marker_is_a_control_batch_at_the_next_offset_and_frees_the_lso() {
    let (_dir, volume) = volume();
    let p = open(&volume, 1 << 20);
    assert_eq!(append(&p, txn_batch(9, 2, 0, 3)).await, 0);
    assert_eq!(p.last_stable_offset(), 0, "the open transaction holds it");
    assert_eq!(p.high_watermark(), 3);
    let offset = end_txn(&p, marker(9, 2, 5, true)).await;
    assert_eq!(offset, 3);
    assert_eq!(p.high_watermark(), 4);
    assert_eq!(p.last_stable_offset(), 4);

    let read = p
        .read(3, 1 << 20, Isolation::ReadUncommitted)
        .await
        .unwrap();
    let batches: Vec<_> = split_batches(read.records).collect();
    assert_eq!(batches.len(), 1);
    let b = &batches[0];
    assert!(b.is_control() && b.is_transactional());
    assert_eq!(
        (b.base_offset(), b.producer_id(), b.producer_epoch()),
        (3, 9, 2)
    );
    assert_eq!(b.partition_leader_epoch(), 3, "stamped like any append");
    let m = parse_end_txn_marker(b).unwrap().unwrap();
    assert_eq!(m.control_type, ControlType::Commit);
    assert_eq!(m.coordinator_epoch, 5);
}

#[tokio::test]
async fn a_marker_from_an_older_coordinator_epoch_is_fenced_and_writes_nothing() {
    let (_dir, volume) = volume();
    let p = open(&volume, 1 << 20);
    append(&p, txn_batch(9, 1, 0, 1)).await;
    end_txn(&p, marker(9, 1, 5, true)).await;
    append(&p, txn_batch(9, 1, 1, 1)).await;
    let end = p.high_watermark();
    assert_eq!(
        p.write_marker(marker(9, 1, 4, false)).await.unwrap_err(),
        ErrorCode::TransactionCoordinatorFenced
    );
    assert_eq!(
        p.write_marker(marker(9, 0, 5, false)).await.unwrap_err(),
        ErrorCode::InvalidProducerEpoch
    );
    let again = p.write_marker(marker(9, 1, 5, false)).await.unwrap();
    assert_eq!(again, end, "the refused markers took no offset");
}

/// A partition without its flusher: durability happens only when the test
/// calls `flush`, so what is visible before and after it can be checked.
fn open_without_flusher(volume: &Arc<dyn Volume>) -> Arc<Partition> {
    let p = Partition::open(
        volume.clone(),
        Env::system(),
        Arc::new(watch::Sender::new(0)),
        OpenPartition {
            topic: "t",
            index: 0,
            config: LogConfig::default(),
            leader: Claim {
                broker_id: 0,
                epoch: 0,
            },
        },
    )
    .unwrap();
    Arc::new(p)
}

async fn read_committed(p: &Partition, offset: i64) -> (Vec<(i64, i64)>, Vec<(i64, i64)>) {
    let data = p
        .read(offset, 1 << 20, Isolation::ReadCommitted)
        .await
        .unwrap();
    let batches = split_batches(data.records)
        .map(|b| (b.base_offset(), b.last_offset()))
        .collect();
    (batches, data.aborted_transactions.unwrap())
}

async fn aborted_index(p: &Partition) -> Vec<kaas_core::partition::AbortedTxn> {
    p.with_log(|log| Ok(log.aborted_index())).await.unwrap()
}

#[tokio::test]
async fn the_last_stable_offset_moves_past_a_transaction_only_once_its_marker_is_durable() {
    let (_dir, volume) = volume();
    let p = open_without_flusher(&volume);
    p.append(txn_batch(9, 0, 0, 2)).await.unwrap(); // 0..=1
    p.flush().await.unwrap();
    assert_eq!((p.high_watermark(), p.last_stable_offset()), (2, 0));
    let offset = p.write_marker(marker(9, 0, 0, false)).await.unwrap();
    assert_eq!(offset, 2);
    assert_eq!(
        (p.high_watermark(), p.last_stable_offset()),
        (2, 0),
        "written, not durable: nothing moves"
    );
    let (batches, aborted) = read_committed(&p, 0).await;
    assert!(batches.is_empty() && aborted.is_empty());
    p.flush().await.unwrap();
    assert_eq!((p.high_watermark(), p.last_stable_offset()), (3, 3));
    let (batches, aborted) = read_committed(&p, 0).await;
    assert_eq!(batches, vec![(0, 1), (2, 2)]);
    assert_eq!(aborted, vec![(9, 0)]);
}

#[tokio::test]
async fn read_committed_stops_at_the_lso_and_lists_the_aborted_transactions_it_returns() {
    let (_dir, volume) = volume();
    let p = open(&volume, 1 << 20);
    append(&p, txn_batch(1, 0, 0, 3)).await; // 0..=2
    append(&p, txn_batch(2, 0, 0, 2)).await; // 3..=4
    end_txn(&p, marker(2, 0, 0, false)).await; // 5
                                               // Producer 1 is still open at 0: nothing is stable yet.
    assert_eq!(p.last_stable_offset(), 0);
    let (batches, aborted) = read_committed(&p, 0).await;
    assert!(batches.is_empty() && aborted.is_empty());
    append(&p, plain_batch(2)).await; // 6..=7
    end_txn(&p, marker(1, 0, 0, true)).await; // 8
    append(&p, txn_batch(3, 0, 0, 1)).await; // 9, left open
    assert_eq!(p.last_stable_offset(), 9);
    let (batches, aborted) = read_committed(&p, 0).await;
    assert_eq!(batches, vec![(0, 2), (3, 4), (5, 5), (6, 7), (8, 8)]);
    assert_eq!(
        aborted,
        vec![(2, 3)],
        "only the aborted one, not the commit"
    );
    // A fetch after the aborted transaction ended does not list it.
    let (batches, aborted) = read_committed(&p, 6).await;
    assert_eq!(batches, vec![(6, 7), (8, 8)]);
    assert!(aborted.is_empty());
    // read_uncommitted sees up to the high watermark and gets no list.
    let data = p
        .read(0, 1 << 20, Isolation::ReadUncommitted)
        .await
        .unwrap();
    assert_eq!(data.aborted_transactions, None);
    assert_eq!(split_batches(data.records).count(), 6);
    assert_eq!((data.high_watermark, data.last_stable_offset), (10, 9));
}

/// The state a restart must rebuild exactly.
async fn txn_view(p: &Partition) -> (i64, i64, Vec<kaas_core::partition::AbortedTxn>) {
    (
        p.high_watermark(),
        p.last_stable_offset(),
        aborted_index(p).await,
    )
}

/// Transactions across several small segments (rolls take snapshots),
/// ending with one left open.
async fn mixed_transactions(p: &Partition) {
    for round in 0..6i64 {
        let pid = 100 + round % 3;
        let seq = i32::try_from(round / 3).unwrap() * 2;
        append(p, txn_batch(pid, 0, seq, 2)).await;
        append(p, plain_batch(1)).await;
        end_txn(p, marker(pid, 0, 0, round % 2 == 0)).await;
    }
    append(p, txn_batch(200, 0, 0, 2)).await;
    append(p, txn_batch(201, 0, 0, 1)).await;
    end_txn(p, marker(201, 0, 0, false)).await;
}

#[tokio::test]
async fn a_restart_rebuilds_the_lso_and_the_aborted_index_exactly() {
    let (_dir, volume) = volume();
    let p = open(&volume, 400);
    mixed_transactions(&p).await;
    let before = txn_view(&p).await;
    assert_eq!(before.2.len(), 4, "three aborted rounds and producer 201");
    assert!(before.1 < before.0, "producer 200 is open");
    assert!(p.with_log(|l| Ok(l.segment_count())).await.unwrap() > 2);
    let rc_before = read_committed(&p, 0).await;

    // A crash (no clean shutdown): the snapshot of the last roll plus the
    // replay rebuild it.
    p.close();
    drop(p);
    let p = open(&volume, 400);
    assert_eq!(txn_view(&p).await, before);
    assert_eq!(read_committed(&p, 0).await, rc_before);

    // A clean shutdown: the snapshot at the log end, nothing replayed.
    p.shut_down().await.unwrap();
    p.close();
    drop(p);
    let p = open(&volume, 400);
    assert_eq!(txn_view(&p).await, before);
    // The open transaction can still be closed.
    end_txn(&p, marker(200, 0, 0, true)).await;
    assert_eq!(p.last_stable_offset(), p.high_watermark());
}

fn file_len(dir: &tempfile::TempDir, name: &str) -> u64 {
    std::fs::metadata(dir.path().join("topics/t-0").join(name))
        .unwrap()
        .len()
}

#[tokio::test]
async fn an_aborted_entry_whose_marker_a_torn_tail_took_back_does_not_survive() {
    let (dir, volume) = volume();
    let p = open(&volume, 1 << 20);
    append(&p, txn_batch(1, 0, 0, 2)).await; // 0..=1
    end_txn(&p, marker(1, 0, 0, false)).await; // 2
                                               // A snapshot at 3 (as a clean shutdown or a roll writes it): the entry
                                               // above is below the replay start from now on.
    p.shut_down().await.unwrap();
    append(&p, txn_batch(2, 0, 0, 2)).await; // 3..=4
    end_txn(&p, marker(2, 0, 0, false)).await; // 5
    assert_eq!(aborted_index(&p).await.len(), 2);
    p.close();
    drop(p);
    // The crash tore the last marker off the log; its .txnindex entry made
    // it to the disk.
    let seg = "00000000000000000000_0000000003.log";
    let marker_size = kaas_core::record::build_control_batch(
        2,
        0,
        0,
        kaas_core::record::EndTxnMarker {
            control_type: ControlType::Abort,
            coordinator_epoch: 0,
        },
    )
    .size() as u64;
    let torn = file_len(&dir, seg) - marker_size + 7;
    std::fs::OpenOptions::new()
        .write(true)
        .open(dir.path().join("topics/t-0").join(seg))
        .unwrap()
        .set_len(torn)
        .unwrap();
    assert_eq!(
        file_len(&dir, "00000000000000000000_0000000003.txnindex"),
        68
    );

    let p = open(&volume, 1 << 20);
    assert_eq!(p.high_watermark(), 5);
    assert_eq!(
        p.last_stable_offset(),
        3,
        "producer 2's transaction is open again"
    );
    let index = aborted_index(&p).await;
    assert_eq!(
        index
            .iter()
            .map(|a| (a.producer_id, a.first_offset, a.last_offset))
            .collect::<Vec<_>>(),
        vec![(1, 0, 2)]
    );
    assert_eq!(
        file_len(&dir, "00000000000000000000_0000000003.txnindex"),
        34
    );
    // The coordinator writes the marker again; the index gets it back.
    assert_eq!(end_txn(&p, marker(2, 0, 0, false)).await, 5);
    assert_eq!(aborted_index(&p).await.len(), 2);
}

#[tokio::test]
async fn a_lost_aborted_index_is_rebuilt_from_the_markers_in_the_log() {
    let (dir, volume) = volume();
    let p = open(&volume, 1 << 20);
    append(&p, txn_batch(1, 0, 0, 2)).await;
    append(&p, txn_batch(2, 0, 0, 1)).await;
    end_txn(&p, marker(1, 0, 0, false)).await;
    end_txn(&p, marker(2, 0, 0, false)).await;
    let before = txn_view(&p).await;
    p.close();
    drop(p);
    std::fs::remove_file(
        dir.path()
            .join("topics/t-0/00000000000000000000_0000000003.txnindex"),
    )
    .unwrap();
    let p = open(&volume, 1 << 20);
    assert_eq!(txn_view(&p).await, before);
    assert_eq!(
        file_len(&dir, "00000000000000000000_0000000003.txnindex"),
        68
    );
}

#[tokio::test]
async fn the_last_stable_offset_never_falls_below_the_log_start() {
    let (_dir, volume) = volume();
    let p = open(&volume, 1 << 20);
    append(&p, plain_batch(2)).await; // 0..=1
    append(&p, txn_batch(1, 0, 0, 2)).await; // 2..=3
    append(&p, plain_batch(2)).await; // 4..=5
    assert_eq!(p.last_stable_offset(), 2);
    // DeleteRecords is bounded by the high watermark, not the LSO (Kafka).
    assert_eq!(p.delete_records_before(5).await.unwrap(), 5);
    assert_eq!(p.last_stable_offset(), 5);
    let (batches, _) = read_committed(&p, 5).await;
    assert!(batches.is_empty(), "offset 5 is not stable yet");
    end_txn(&p, marker(1, 0, 0, false)).await; // 6
    assert_eq!(p.last_stable_offset(), 7);
    let (batches, aborted) = read_committed(&p, 5).await;
    assert_eq!(batches, vec![(4, 5), (6, 6)]);
    assert_eq!(
        aborted,
        vec![(1, 2)],
        "its records before the start are gone"
    );
}

#[tokio::test]
async fn retention_removes_a_segments_aborted_index_with_it() {
    let (dir, volume) = volume();
    let p = open(&volume, 300);
    for seq in 0..6 {
        append(&p, txn_batch(1, 0, seq * 2, 2)).await;
        end_txn(&p, marker(1, 0, 0, false)).await;
    }
    let files = |dir: &tempfile::TempDir| {
        let mut names: Vec<String> = std::fs::read_dir(dir.path().join("topics/t-0"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(".txnindex"))
            .collect();
        names.sort();
        names
    };
    let before = files(&dir);
    assert!(before.len() > 2, "{before:?}");
    let count = aborted_index(&p).await.len();
    p.apply_retention(p.high_watermark(), 1, -1, i64::MAX)
        .await
        .unwrap();
    let after = files(&dir);
    assert!(after.len() < before.len(), "{after:?}");
    let start = p.log_start_offset();
    let left = aborted_index(&p).await;
    assert!(left.len() < count);
    assert!(left.iter().all(|a| a.last_offset >= start));
    // And a restart agrees.
    p.close();
    drop(p);
    let p = open(&volume, 300);
    assert_eq!(aborted_index(&p).await, left);
}

/// Over the wire: Fetch at read_committed carries the aborted list and the
/// LSO, read_uncommitted a null list; ListOffsets LATEST at read_committed
/// answers the LSO.
#[tokio::test]
async fn fetch_and_list_offsets_answer_read_committed_with_the_lso_and_aborted_list() {
    use kaas_core::protocol::messages::*;
    use kaas_core::protocol::{RequestBody, ResponseBody};
    use kaas_net::client::{single_partition_fetch, Connection};

    let tb = support::start_broker(|_| {}).await;
    tb.broker
        .create_topic("t", 1, 1, std::collections::BTreeMap::new())
        .await
        .unwrap();
    let p = tb.broker.partition("t", 0, -1).unwrap();
    append(&p, txn_batch(5, 0, 0, 2)).await; // 0..=1
    end_txn(&p, marker(5, 0, 0, false)).await; // 2
    append(&p, txn_batch(6, 0, 0, 1)).await; // 3, open

    let mut conn = Connection::connect(tb.addr).await.unwrap();
    for (isolation, aborted) in [(1i8, Some(vec![(5i64, 0i64)])), (0, None)] {
        let mut req = single_partition_fetch("t", 0, 0, -1, 0);
        if let RequestBody::Fetch(f) = &mut req {
            f.isolation_level = isolation;
        }
        match conn.send(fetch_request::API_KEY, 12, &req).await.unwrap() {
            ResponseBody::Fetch(r) => {
                let part = &r.responses[0].partitions[0];
                assert_eq!(part.error_code, 0);
                assert_eq!((part.high_watermark, part.last_stable_offset), (4, 3));
                let got = part
                    .aborted_transactions
                    .as_ref()
                    .map(|l| l.iter().map(|a| (a.producer_id, a.first_offset)).collect());
                assert_eq!(got, aborted, "isolation {isolation}");
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    for (isolation, latest) in [(1i8, 3i64), (0, 4)] {
        let req = RequestBody::ListOffsets(ListOffsetsRequest {
            replica_id: -1,
            isolation_level: isolation,
            topics: vec![list_offsets_request::ListOffsetsTopic {
                name: "t".into(),
                partitions: vec![list_offsets_request::ListOffsetsPartition {
                    partition_index: 0,
                    current_leader_epoch: -1,
                    timestamp: -1,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        });
        match conn
            .send(list_offsets_request::API_KEY, 7, &req)
            .await
            .unwrap()
        {
            ResponseBody::ListOffsets(r) => {
                assert_eq!(
                    r.topics[0].partitions[0].offset, latest,
                    "isolation {isolation}"
                );
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}
