//! cleanup.policy: a topic whose policy has `compact` is accepted (Kafka
//! Streams creates one per changelog) and, with no `delete` in it, keeps
//! every record: retention passes it by and DeleteRecords is refused with
//! POLICY_VIOLATION, as in Kafka; a batch with keyless records is refused
//! (INVALID_RECORD, each record named), compressed or not. (The log
//! cleaner itself is tested in `kaas_net::log::cleaner_tests`.)
#![cfg(not(madsim))]
// A test: an unwrap that fails is the test failing.
#![allow(clippy::unwrap_used)]

mod support;

use support::configs::{produce_keyed, produce_keyed_to, t0_files};

use kaas_core::protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use kaas_core::protocol::messages::*;
use kaas_core::protocol::{ErrorCode, RequestBody, ResponseBody};
use kaas_core::record::{BatchBuilder, Compression, NewRecord};
use kaas_net::client::Connection;
use std::collections::BTreeMap;

/// Topics whose records all go at once under retention.ms=0, with small
/// segments so there are sealed ones to delete.
fn configs(policy: Option<&str>) -> BTreeMap<String, String> {
    let mut c = BTreeMap::from([
        ("retention.ms".to_string(), "0".to_string()),
        ("segment.bytes".to_string(), "300".to_string()),
    ]);
    if let Some(p) = policy {
        c.insert("cleanup.policy".into(), p.into());
    }
    c
}

async fn delete_records(conn: &mut Connection, topic: &str, offset: i64) -> (i16, i64) {
    let req = RequestBody::DeleteRecords(DeleteRecordsRequest {
        topics: vec![DeleteRecordsTopic {
            name: topic.into(),
            partitions: vec![DeleteRecordsPartition {
                partition_index: 0,
                offset,
                ..Default::default()
            }],
            ..Default::default()
        }],
        timeout_ms: 10_000,
        ..Default::default()
    });
    match conn
        .send(delete_records_request::API_KEY, 2, &req)
        .await
        .unwrap()
    {
        ResponseBody::DeleteRecords(r) => {
            let p = &r.topics[0].partitions[0];
            (p.error_code, p.low_watermark)
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn a_compact_only_topic_keeps_every_record_and_refuses_delete_records() {
    let tb = support::start_broker(|_| {}).await;
    // (topic, policy, whether it deletes)
    let topics = [
        ("default", None, true),
        ("delete", Some("delete"), true),
        ("compact", Some("compact"), false),
        ("both", Some("compact,delete"), true),
    ];
    for (name, policy, _) in topics {
        tb.broker
            .create_topic(name, 1, 1, configs(policy))
            .await
            .unwrap();
        let p = tb.broker.partition(name, 0, -1).unwrap();
        for i in 0..10 {
            let mut b = BatchBuilder::new();
            let key = format!("k{}", i % 3);
            b.push(NewRecord::new(
                0,
                Some(key.as_bytes()),
                Some(format!("v{i}").as_bytes()),
            ));
            let d = p.append(b.build()).await.unwrap();
            p.wait_durable(d.end_offset()).await.unwrap();
        }
        assert_eq!(p.high_watermark(), 10, "{name}");
    }

    // Retention with every record past retention.ms.
    tb.broker.apply_retention(i64::MAX / 2).await;
    for (name, _, deletes) in topics {
        let start = tb.broker.partition(name, 0, -1).unwrap().log_start_offset();
        if deletes {
            assert!(start > 0, "{name}: retention deleted nothing");
        } else {
            assert_eq!(start, 0, "{name}: retention deleted records");
        }
    }

    let mut conn = Connection::connect(tb.addr).await.unwrap();
    for (name, _, deletes) in topics {
        let got = delete_records(&mut conn, name, 9).await;
        if deletes {
            assert_eq!(got, (0, 9), "{name}");
        } else {
            assert_eq!(got, (ErrorCode::PolicyViolation.code(), -1), "{name}");
            let p = tb.broker.partition(name, 0, -1).unwrap();
            assert_eq!(p.log_start_offset(), 0, "{name}: records deleted");
        }
    }
    // An unknown topic is still UNKNOWN_TOPIC_OR_PARTITION, not a policy matter.
    assert_eq!(
        delete_records(&mut conn, "nope", 1).await.0,
        ErrorCode::UnknownTopicOrPartition.code()
    );
}

#[tokio::test]
async fn create_topics_accepts_compact_and_describe_configs_reports_it() {
    let tb = support::start_broker(|_| {}).await;
    let mut conn = Connection::connect(tb.addr).await.unwrap();
    let create = |name: &str, policy: &str| {
        RequestBody::CreateTopics(CreateTopicsRequest {
            topics: vec![create_topics_request::CreatableTopic {
                name: name.into(),
                num_partitions: 1,
                replication_factor: 1,
                configs: vec![create_topics_request::CreatableTopicConfig {
                    name: "cleanup.policy".into(),
                    value: Some(policy.into()),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            timeout_ms: 10_000,
            ..Default::default()
        })
    };
    for (name, policy, code) in [
        ("c1", "compact", 0),
        ("c2", "compact,delete", 0),
        ("c3", "sometimes", ErrorCode::InvalidConfig.code()),
    ] {
        match conn
            .send(create_topics_request::API_KEY, 7, &create(name, policy))
            .await
            .unwrap()
        {
            ResponseBody::CreateTopics(r) => {
                assert_eq!(r.topics[0].error_code, code, "{name} {policy}")
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    let describe = RequestBody::DescribeConfigs(DescribeConfigsRequest {
        resources: vec![describe_configs_request::DescribeConfigsResource {
            resource_type: 2,
            resource_name: "c1".into(),
            configuration_keys: Some(vec!["cleanup.policy".into()]),
            ..Default::default()
        }],
        ..Default::default()
    });
    match conn
        .send(describe_configs_request::API_KEY, 4, &describe)
        .await
        .unwrap()
    {
        ResponseBody::DescribeConfigs(r) => {
            let entries: Vec<_> = r.results[0]
                .configs
                .iter()
                .map(|c| (c.name.as_str(), c.value.as_deref()))
                .collect();
            assert_eq!(entries, vec![("cleanup.policy", Some("compact"))]);
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// Produces `records` to partition 0 of `topic` at Produce v9 (record
/// errors are answered from v8); the partition's answer.
async fn produce(
    conn: &mut Connection,
    topic: &str,
    records: bytes::Bytes,
) -> produce_response::PartitionProduceResponse {
    let req = kaas_net::client::single_partition_produce(topic, 0, records, -1, 10_000);
    match conn.send(produce_request::API_KEY, 9, &req).await.unwrap() {
        ResponseBody::Produce(r) => r.responses[0].partition_responses[0].clone(),
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn a_compacted_topic_refuses_a_batch_with_keyless_records_naming_each() {
    let tb = support::start_broker(|_| {}).await;
    for (name, policy) in [("compact", Some("compact")), ("delete", None)] {
        tb.broker
            .create_topic(name, 1, 1, configs(policy))
            .await
            .unwrap();
    }
    let mut conn = Connection::connect(tb.addr).await.unwrap();
    let mixed = || {
        let mut b = BatchBuilder::new();
        for key in [None, Some(&b"k1"[..]), None] {
            b.push(NewRecord::new(0, key, Some(b"v")));
        }
        b.build().into_bytes()
    };

    let refused = produce(&mut conn, "compact", mixed()).await;
    assert_eq!(refused.error_code, ErrorCode::InvalidRecord.code());
    assert_eq!(refused.base_offset, -1);
    assert_eq!(refused.log_start_offset, 0);
    let indexes: Vec<i32> = refused
        .record_errors
        .iter()
        .map(|e| e.batch_index)
        .collect();
    assert_eq!(indexes, [0, 2]);
    assert_eq!(
        refused.record_errors[0]
            .batch_index_error_message
            .as_deref(),
        Some("Compacted topic cannot accept message without key in topic partition compact-0")
    );
    assert!(refused
        .error_message
        .as_deref()
        .is_some_and(|m| m.contains("2 record errors in total")));
    let p = tb.broker.partition("compact", 0, -1).unwrap();
    assert_eq!(p.high_watermark(), 0, "nothing of the batch was written");

    let mut keyed = BatchBuilder::new();
    keyed.push(NewRecord::new(0, Some(b"k"), Some(b"v")));
    let ok = produce(&mut conn, "compact", keyed.build().into_bytes()).await;
    assert_eq!((ok.error_code, ok.base_offset), (0, 0));

    // A topic that does not compact takes keyless records.
    let ok = produce(&mut conn, "delete", mixed()).await;
    assert_eq!((ok.error_code, ok.base_offset), (0, 0));
    assert!(ok.record_errors.is_empty());
}

#[tokio::test]
async fn a_compacted_topic_refuses_keyless_records_inside_a_compressed_batch() {
    let tb = support::start_broker(|_| {}).await;
    tb.broker
        .create_topic("compact", 1, 1, configs(Some("compact")))
        .await
        .unwrap();
    let mut conn = Connection::connect(tb.addr).await.unwrap();
    for codec in [
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ] {
        let mut b = BatchBuilder::new();
        for key in [Some(&b"k1"[..]), None, Some(&b"k2"[..]), None] {
            b.push(NewRecord::new(0, key, Some(b"v")));
        }
        let batch = b.build().compressed_with(codec).unwrap();
        let refused = produce(&mut conn, "compact", batch.into_bytes()).await;
        assert_eq!(
            refused.error_code,
            ErrorCode::InvalidRecord.code(),
            "{codec:?}"
        );
        let indexes: Vec<i32> = refused
            .record_errors
            .iter()
            .map(|e| e.batch_index)
            .collect();
        assert_eq!(indexes, [1, 3], "{codec:?}");
        assert_eq!(
            refused.record_errors[0]
                .batch_index_error_message
                .as_deref(),
            Some("Compacted topic cannot accept message without key in topic partition compact-0")
        );
    }
    // Records that do not decompress: CORRUPT_MESSAGE.
    let mut b = BatchBuilder::new();
    b.push(NewRecord::new(0, Some(b"k"), Some(b"v")));
    let mut bytes = b.build().into_bytes().to_vec();
    bytes[22] |= 0x03; // lz4, over records that are not an LZ4 frame
    let crc = crc32c::crc32c(&bytes[21..]);
    bytes[17..21].copy_from_slice(&crc.to_be_bytes());
    let corrupt = produce(&mut conn, "compact", bytes.into()).await;
    assert_eq!(corrupt.error_code, ErrorCode::CorruptMessage.code());
    let p = tb.broker.partition("compact", 0, -1).unwrap();
    assert_eq!(p.high_watermark(), 0, "nothing was written");

    let mut keyed = BatchBuilder::new();
    keyed.push(NewRecord::new(0, Some(b"k"), Some(b"v")));
    let batch = keyed.build().compressed_with(Compression::Zstd).unwrap();
    let ok = produce(&mut conn, "compact", batch.into_bytes()).await;
    assert_eq!((ok.error_code, ok.base_offset), (0, 0));
}

#[tokio::test]
async fn a_cleaning_round_removes_every_segment_it_replaced_before_it_returns() {
    // A budget small enough that the paced removal pauses after each of
    // the replaced segments (300 bytes each: 30 ms).
    let tb = support::start_broker(|c| c.log.cleaner_io_max_bytes_per_second = 10_000).await;
    let configs = BTreeMap::from([
        ("cleanup.policy".to_string(), "compact".to_string()),
        ("segment.bytes".to_string(), "300".to_string()),
    ]);
    tb.broker.create_topic("t", 1, 1, configs).await.unwrap();
    // Two keys, updated over and over: every sealed segment has records a
    // later one supersedes.
    produce_keyed(&tb, (0..30).map(|i| format!("k{}", i % 2))).await;
    let originals = t0_files(tb._dir.path(), ".log").len();
    assert!(originals >= 5, "{originals} segments");
    tb.broker.clean_compacted(support::now_ms()).await;
    let copies = t0_files(tb._dir.path(), ".log")
        .into_iter()
        .filter(|name| name.contains(".cleaned_"))
        .collect::<Vec<_>>();
    assert!(!copies.is_empty(), "the round cleaned nothing");
    for copy in &copies {
        let stem = copy.split(".cleaned_").next().unwrap();
        assert!(
            !t0_files(tb._dir.path(), ".log").contains(&format!("{stem}.log")),
            "{stem}.log is still there beside its copy {copy}"
        );
    }
    assert!(t0_files(tb._dir.path(), ".cleaning").is_empty());
}

/// The files a swap replaced give their blocks back a piece at a time
/// before their removal (`SegmentFile::free_tail`): each replaced original
/// is cut, and nothing the log still reads is.
#[tokio::test]
async fn a_cleaning_round_cuts_each_file_it_replaced_before_removing_it() {
    use kaas_net::volume::hooked::{DiskWait, HookedVolume};
    use kaas_net::volume::LocalVolume;
    use std::sync::{Arc, Mutex};
    let dir = tempfile::tempdir().unwrap();
    let cut = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = cut.clone();
    let volume = HookedVolume::new(LocalVolume::new(dir.path()).unwrap(), move |wait| {
        if let DiskWait::FreeTail(path) = wait {
            seen.lock()
                .unwrap()
                .push(path.rsplit('/').next().unwrap().to_string());
        }
        Ok(())
    });
    let mut config = kaas_net::config::BrokerConfig::new("127.0.0.1:0".parse().unwrap());
    config.log.cleaner_io_max_bytes_per_second = 10_000;
    let broker =
        kaas_net::Broker::open(config, Arc::new(volume), kaas_net::env::Env::system()).unwrap();
    let configs = BTreeMap::from([
        ("cleanup.policy".to_string(), "compact".to_string()),
        ("segment.bytes".to_string(), "300".to_string()),
    ]);
    broker.create_topic("t", 1, 1, configs).await.unwrap();
    produce_keyed_to(&broker, (0..30).map(|i| format!("k{}", i % 2))).await;
    let before = t0_files(dir.path(), ".log");
    broker.clean_compacted(support::now_ms()).await;
    let after = t0_files(dir.path(), ".log");
    let mut removed: Vec<String> = before.into_iter().filter(|f| !after.contains(f)).collect();
    assert!(!removed.is_empty(), "the round replaced nothing");
    let mut cut = cut.lock().unwrap().clone();
    cut.sort();
    cut.dedup();
    removed.sort();
    assert_eq!(
        cut, removed,
        "what was cut is exactly what the swap replaced"
    );
}
