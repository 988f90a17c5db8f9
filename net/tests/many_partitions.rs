//! More partitions than the process may open files: the broker must not
//! need a descriptor per segment.
//!
//! The test lowers its own soft `RLIMIT_NOFILE` to 256 (this file is its own
//! test binary, so nothing else shares the limit), then creates 600
//! partitions, produces one record to each with acks=all, fetches every
//! one back, restarts the broker on the same directory and fetches them
//! again. With one descriptor per open segment, topic creation fails with
//! "Too many open files"; with `LocalVolume`'s bounded descriptor cache it
//! must all work.
#![cfg(not(madsim))]

use bytes::Bytes;
use kaas_core::protocol::messages::*;
use kaas_core::protocol::{RequestBody, ResponseBody};
use kaas_core::record::{split_batches, BatchBuilder};
use kaas_net::client::Connection;
use kaas_net::volume::LocalVolume;
use kaas_net::{Broker, BrokerConfig};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

/// Well below the partition count, so one descriptor per partition cannot fit.
const OPEN_FILE_LIMIT: u64 = 256;
const TOPICS: [&str; 3] = ["many-a", "many-b", "many-c"];
const PARTITIONS_PER_TOPIC: i32 = 200;

fn value(topic: &str, partition: i32) -> Vec<u8> {
    format!("{topic}/{partition}").into_bytes()
}

/// A broker on `dir`, served on an ephemeral 127.0.0.1 port, with the
/// volume's default descriptor cache (sized from the lowered limit).
async fn start(dir: &Path) -> (Arc<Broker>, Arc<LocalVolume>, Connection) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("local addr");
    let volume = Arc::new(LocalVolume::new(dir).expect("volume"));
    assert_eq!(
        volume.open_file_limit() as u64,
        OPEN_FILE_LIMIT / 2,
        "the default cache takes half the soft limit"
    );
    let broker = Broker::open(
        BrokerConfig::new(addr),
        volume.clone(),
        kaas_net::env::Env::system(),
    )
    .expect("broker opens");
    tokio::spawn(kaas_net::server::serve(
        broker.clone(),
        listener,
        std::future::pending(),
    ));
    let conn = Connection::connect(addr).await.expect("connect");
    (broker, volume, conn)
}

/// Every append was fsynced (acks=all), so nothing is pinned: the cache
/// holds no more descriptors than its limit.
fn assert_bounded(volume: &LocalVolume) {
    assert!(
        volume.open_files() <= volume.open_file_limit(),
        "{} segment files open, limit {}",
        volume.open_files(),
        volume.open_file_limit()
    );
}

async fn produce_one(conn: &mut Connection, topic: &str, partition: i32) {
    let batch = BatchBuilder::new()
        .record(1_000, None, Some(&value(topic, partition)))
        .build();
    let req = kaas_net::client::single_partition_produce(
        topic,
        partition,
        batch.into_bytes(),
        -1,
        10_000,
    );
    match conn
        .send(produce_request::API_KEY, 9, &req)
        .await
        .expect("produce")
    {
        ResponseBody::Produce(r) => {
            let p = &r.responses[0].partition_responses[0];
            assert_eq!(
                (p.error_code, p.base_offset),
                (0, 0),
                "produce to {topic}-{partition}"
            );
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// Fetches every partition of `topic` in one request and checks each holds
/// exactly its one record.
async fn fetch_all(conn: &mut Connection, topic: &str) {
    let req = RequestBody::Fetch(FetchRequest {
        max_wait_ms: 0,
        min_bytes: 1,
        max_bytes: i32::MAX,
        topics: vec![fetch_request::FetchTopic {
            topic: topic.into(),
            partitions: (0..PARTITIONS_PER_TOPIC)
                .map(|partition| fetch_request::FetchPartition {
                    partition,
                    fetch_offset: 0,
                    partition_max_bytes: 1 << 16,
                    current_leader_epoch: -1,
                    log_start_offset: -1,
                    last_fetched_epoch: -1,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }],
        ..Default::default()
    });
    let resp = match conn
        .send(fetch_request::API_KEY, 12, &req)
        .await
        .expect("fetch")
    {
        ResponseBody::Fetch(r) => r,
        other => panic!("unexpected {other:?}"),
    };
    assert_eq!(resp.error_code, 0);
    let partitions = &resp.responses[0].partitions;
    assert_eq!(partitions.len(), PARTITIONS_PER_TOPIC as usize);
    for p in partitions {
        let where_ = format!("{topic}-{}", p.partition_index);
        assert_eq!((p.error_code, p.high_watermark), (0, 1), "{where_}");
        let values: Vec<Bytes> = split_batches(p.records.clone().unwrap_or_default())
            .flat_map(|b| {
                b.records()
                    .map(|r| r.expect("a valid record").value.expect("a value"))
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(values, vec![value(topic, p.partition_index)], "{where_}");
    }
}

#[test]
fn more_partitions_than_open_files_are_created_written_read_and_recovered() {
    let (_, hard) = rlimit::getrlimit(rlimit::Resource::NOFILE).expect("getrlimit");
    rlimit::setrlimit(rlimit::Resource::NOFILE, OPEN_FILE_LIMIT, hard).expect("setrlimit");
    let total = TOPICS.len() as u64 * PARTITIONS_PER_TOPIC as u64;
    assert!(
        total > 2 * OPEN_FILE_LIMIT,
        "the test must outnumber the limit"
    );

    let dir = tempfile::tempdir().expect("temp dir");
    // Each life of the broker gets its own runtime: dropping it ends every
    // task (server, flushers), so the first broker's files are closed
    // before the second opens the same directory, as after a restart.
    let runtime = || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime")
    };

    runtime().block_on(async {
        let (broker, volume, mut conn) = start(dir.path()).await;
        for topic in TOPICS {
            broker
                .create_topic(topic, PARTITIONS_PER_TOPIC, 1, BTreeMap::new())
                .await
                .unwrap_or_else(|e| panic!("create {topic}: {e:?}"));
        }
        for topic in TOPICS {
            for partition in 0..PARTITIONS_PER_TOPIC {
                produce_one(&mut conn, topic, partition).await;
            }
        }
        assert_bounded(&volume);
        for topic in TOPICS {
            fetch_all(&mut conn, topic).await;
        }
        assert_bounded(&volume);
    });

    runtime().block_on(async {
        let (broker, volume, mut conn) = start(dir.path()).await;
        assert_eq!(broker.topics().len(), TOPICS.len(), "topics recovered");
        assert_bounded(&volume);
        for topic in TOPICS {
            fetch_all(&mut conn, topic).await;
        }
        assert_bounded(&volume);
    });
}
