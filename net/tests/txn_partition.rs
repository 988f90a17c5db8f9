//! The partition side of transactions, driven through `Partition` directly
//! (no coordinator): transactional batches open a transaction, markers
//! close it, the last stable offset moves only once a marker is durable,
//! read_committed reads stop there with the aborted transactions of what
//! they return, and a restart rebuilds all of it from the volume.
#![cfg(not(madsim))]
// A test: an unwrap that fails is the test failing.
#![allow(clippy::unwrap_used)]

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
            0,
            None,
            Some(format!("{pid}-{seq}-{i}").as_bytes()),
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
