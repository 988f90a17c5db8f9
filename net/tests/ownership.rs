//! Leader epochs are stored on the volume, not constants: a partition whose
//! newest epoch file names another broker is taken over at the next epoch
//! once that broker is gone (silent for the lease and its bounds),
//! and that epoch is what Metadata answers, what batches are stamped with
//! and what the ownership gate checks clients against.
#![cfg(not(madsim))]
// A test: an unwrap that fails is the test failing.
#![allow(clippy::unwrap_used)]

mod support;

use kaas_core::layout::{partition_epoch_file, partition_epochs_dir};
use kaas_core::protocol::messages::*;
use kaas_core::protocol::{ErrorCode, RequestBody, ResponseBody};
use kaas_core::record::{split_batches, BatchBuilder, NewRecord};
use kaas_net::client::{single_partition_fetch, single_partition_produce, Connection};
use kaas_net::volume::{LocalVolume, Volume};
use std::collections::BTreeMap;

#[tokio::test]
async fn a_partition_taken_over_is_served_at_its_new_epoch() {
    let tb = support::start_broker(|_| {}).await;
    tb.broker
        .create_topic("t", 1, 1, BTreeMap::new())
        .await
        .expect("create");
    assert_eq!(tb.broker.partition("t", 0, -1).unwrap().leader_epoch(), 0);
    // The first broker stops serving the partition (a crash, a move).
    let support::TestBroker {
        _dir: dir, broker, ..
    } = tb;
    broker.partition("t", 0, -1).unwrap().close();

    // Another broker (id 7) took the partition at epoch 1 meanwhile.
    let volume = LocalVolume::new(dir.path()).unwrap();
    volume
        .create_exclusive(&partition_epoch_file("t", 0, 1), br#"{"broker_id":7}"#)
        .unwrap();
    drop(volume);

    // Broker 7 never heartbeats: broker 0 may take the partition back only
    // once it has watched broker 7 silent for lease + skew + staleness.
    let tb = support::start_broker_in(dir, |c| {
        c.lease = kaas_core::cluster::membership::LeaseBounds {
            lease_ms: 300,
            clock_skew_ms: 50,
            volume_staleness_ms: 100,
        }
    })
    .await;
    assert_eq!(
        tb.broker.partition("t", 0, -1).err(),
        Some(ErrorCode::NotLeaderOrFollower),
        "broker 7 is not known to be gone yet"
    );
    let mut p = None;
    for _ in 0..100 {
        p = tb.broker.partition("t", 0, -1).ok();
        if p.is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let p = p.expect("broker 0 takes the partition back once broker 7 is gone");
    assert_eq!(
        p.leader_epoch(),
        2,
        "broker 0 takes it back at the next epoch"
    );
    let volume = LocalVolume::new(tb._dir.path()).unwrap();
    assert_eq!(volume.list(&partition_epochs_dir("t", 0)).unwrap().len(), 3);

    let mut conn = Connection::connect(tb.addr).await.unwrap();
    let mut b = BatchBuilder::new();
    b.push(NewRecord::new(1, None, Some(b"v")));
    let req = single_partition_produce("t", 0, b.build().as_bytes().clone(), -1, 5_000);
    conn.send(produce_request::API_KEY, 9, &req).await.unwrap();

    let md = RequestBody::Metadata(MetadataRequest {
        topics: Some(vec![metadata_request::MetadataRequestTopic {
            name: Some("t".into()),
            ..Default::default()
        }]),
        ..Default::default()
    });
    match conn.send(metadata_request::API_KEY, 9, &md).await.unwrap() {
        ResponseBody::Metadata(r) => assert_eq!(r.topics[0].partitions[0].leader_epoch, 2),
        other => panic!("unexpected {other:?}"),
    }
    for (asked, code) in [
        (0, ErrorCode::FencedLeaderEpoch),
        (3, ErrorCode::UnknownLeaderEpoch),
        (2, ErrorCode::None),
    ] {
        match conn
            .send(
                fetch_request::API_KEY,
                12,
                &single_partition_fetch("t", 0, 0, asked, 0),
            )
            .await
            .unwrap()
        {
            ResponseBody::Fetch(r) => {
                let part = &r.responses[0].partitions[0];
                assert_eq!(part.error_code, code.code(), "epoch {asked}");
                if code == ErrorCode::None {
                    let batch = split_batches(part.records.clone().unwrap()).next().unwrap();
                    assert_eq!(batch.partition_leader_epoch(), 2);
                }
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}
