//! AlterConfigs and IncrementalAlterConfigs over the wire: a topic's configs
//! change as Kafka changes them, DescribeConfigs answers the result, the
//! change survives a restart and applies at once (a smaller segment.bytes
//! rolls the open log), and two brokers on one volume changing one topic at
//! once both land (each change is the topic file's next version, created
//! exclusively).
#![cfg(not(madsim))]
// A test: an unwrap that fails is the test failing.
#![allow(clippy::unwrap_used)]

mod support;

use kaas_core::cluster::membership::LeaseBounds;
use kaas_core::protocol::messages::produce_response;
use kaas_core::protocol::messages::*;
use kaas_core::protocol::{ErrorCode, ResponseBody};
use kaas_core::record::{BatchBuilder, NewRecord};
use kaas_net::client::Connection;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use support::configs::{
    describe, documentation, produce, resource, segments, t0_files, APPEND, BROKER, DELETE, SET,
    SOURCE_DEFAULT, SOURCE_TOPIC, SUBTRACT, TOPIC,
};

/// IncrementalAlterConfigs (v1, flexible); the error code of each resource.
async fn incremental(
    addr: SocketAddr,
    resources: Vec<incremental_alter_configs_request::AlterConfigsResource>,
    validate_only: bool,
) -> Vec<i16> {
    support::configs::incremental_answers(addr, resources, validate_only)
        .await
        .into_iter()
        .map(|(code, _)| code)
        .collect()
}

/// AlterConfigs (v0) of one topic's whole set; its error code.
async fn replace(addr: SocketAddr, topic: &str, configs: &[(&str, &str)]) -> i16 {
    support::configs::replace(addr, TOPIC, topic, configs).await
}

/// DescribeConfigs of a topic: name → (value, source).
async fn described(addr: SocketAddr, topic: &str) -> BTreeMap<String, (String, i8)> {
    describe(addr, TOPIC, topic)
        .await
        .into_iter()
        .map(|(name, c)| (name, (c.value.unwrap_or_default(), c.source)))
        .collect()
}

fn code(e: ErrorCode) -> i16 {
    e.code()
}

#[tokio::test]
async fn incremental_alter_configs_sets_deletes_appends_and_subtracts_as_kafka_does() {
    let tb = support::start_broker(|_| {}).await;
    tb.broker
        .create_topic("t", 1, 1, BTreeMap::new())
        .await
        .unwrap();
    let set =
        |configs: &[(&'static str, i8, Option<&'static str>)]| vec![resource(TOPIC, "t", configs)];
    assert_eq!(
        incremental(
            tb.addr,
            set(&[
                ("retention.ms", SET, Some("60000")),
                ("cleanup.policy", APPEND, Some("compact")),
            ]),
            false
        )
        .await,
        [0]
    );
    let d = described(tb.addr, "t").await;
    assert_eq!(d["retention.ms"], ("60000".into(), SOURCE_TOPIC));
    assert_eq!(
        d["cleanup.policy"],
        ("delete,compact".into(), SOURCE_TOPIC),
        "APPEND starts from the default"
    );

    // Refused whole, nothing of it applied: an invalid value beside a
    // valid change, an unknown name, APPEND to a non-list, a SET of null.
    for bad in [
        vec![
            ("retention.bytes", SET, Some("1")),
            ("retention.ms", SET, Some("soon")),
        ],
        vec![("no.such.config", SET, Some("1"))],
        vec![("retention.ms", APPEND, Some("1"))],
    ] {
        assert_eq!(
            incremental(tb.addr, set(&bad), false).await,
            [code(ErrorCode::InvalidConfig)],
            "{bad:?}"
        );
    }
    assert_eq!(
        incremental(tb.addr, set(&[("retention.ms", SET, None)]), false).await,
        [code(ErrorCode::InvalidRequest)]
    );
    assert_eq!(
        incremental(
            tb.addr,
            set(&[
                ("retention.ms", SET, Some("1")),
                ("retention.ms", DELETE, None)
            ]),
            false
        )
        .await,
        [code(ErrorCode::InvalidRequest)],
        "one name twice"
    );
    // validate_only decides and changes nothing.
    assert_eq!(
        incremental(tb.addr, set(&[("retention.ms", SET, Some("1"))]), true).await,
        [0]
    );
    assert_eq!(described(tb.addr, "t").await, d, "nothing changed");

    assert_eq!(
        incremental(
            tb.addr,
            set(&[
                ("retention.ms", DELETE, None),
                ("cleanup.policy", SUBTRACT, Some("delete")),
            ]),
            false
        )
        .await,
        [0]
    );
    let d = described(tb.addr, "t").await;
    assert_eq!(d["retention.ms"].1, SOURCE_DEFAULT, "back to the default");
    assert_eq!(d["cleanup.policy"], ("compact".into(), SOURCE_TOPIC));

    // Per resource: an unknown topic, a resource named twice, a broker's
    // static config, a resource type kaas has no configs for.
    let answers = incremental(
        tb.addr,
        vec![
            resource(TOPIC, "missing", &[("retention.ms", SET, Some("1"))]),
            resource(TOPIC, "t", &[("retention.ms", SET, Some("1"))]),
            resource(TOPIC, "t", &[("retention.bytes", SET, Some("1"))]),
            resource(BROKER, "0", &[("num.partitions", SET, Some("3"))]),
            resource(8, "0", &[("kafka", SET, Some("DEBUG"))]),
        ],
        false,
    )
    .await;
    assert_eq!(
        answers,
        [
            code(ErrorCode::UnknownTopicOrPartition),
            code(ErrorCode::InvalidRequest),
            code(ErrorCode::InvalidRequest),
            code(ErrorCode::InvalidRequest),
            code(ErrorCode::InvalidRequest),
        ]
    );
    assert_eq!(described(tb.addr, "t").await, d, "nothing changed");
}

#[test]
fn alter_configs_replaces_the_whole_set_and_it_survives_a_restart() {
    let first = support::runtime();
    let (dir, before) = first.block_on(async {
        let tb = support::start_broker(|_| {}).await;
        tb.broker
            .create_topic(
                "t",
                1,
                1,
                BTreeMap::from([("retention.ms".to_string(), "60000".to_string())]),
            )
            .await
            .unwrap();
        assert_eq!(
            replace(tb.addr, "t", &[("retention.bytes", "5000")]).await,
            0
        );
        assert_eq!(
            replace(tb.addr, "t", &[("segment.bytes", "-5")]).await,
            code(ErrorCode::InvalidConfig)
        );
        assert_eq!(
            replace(tb.addr, "missing", &[("retention.bytes", "5000")]).await,
            code(ErrorCode::UnknownTopicOrPartition)
        );
        let before = described(tb.addr, "t").await;
        assert_eq!(before["retention.bytes"], ("5000".into(), SOURCE_TOPIC));
        assert_eq!(
            before["retention.ms"].1, SOURCE_DEFAULT,
            "a config not named returns to its default"
        );
        (tb._dir, before)
    });
    // The broker goes away with its runtime; its directory stays.
    drop(first);
    support::runtime().block_on(async {
        let tb = support::start_broker_in(dir, |_| {}).await;
        assert_eq!(described(tb.addr, "t").await, before);
    });
}

#[tokio::test]
async fn a_smaller_segment_bytes_applies_to_the_open_log_at_once() {
    let tb = support::start_broker(|_| {}).await;
    tb.broker
        .create_topic("t", 1, 1, BTreeMap::new())
        .await
        .unwrap();
    produce(&tb, 5).await;
    assert_eq!(segments(&tb), 1);
    assert_eq!(
        incremental(
            tb.addr,
            vec![resource(TOPIC, "t", &[("segment.bytes", SET, Some("300"))])],
            false
        )
        .await,
        [0]
    );
    produce(&tb, 5).await;
    assert!(segments(&tb) >= 3, "rolled: {} segments", segments(&tb));
}

/// Appends one durable record to t-0 stamped `ts`.
async fn produce_at_time(tb: &support::TestBroker, ts: i64) {
    let p = tb.broker.partition("t", 0, -1).unwrap();
    let mut b = BatchBuilder::new();
    b.push(NewRecord::new(ts, Some(b"k"), Some(b"v")));
    let d = p.append(b.build()).await.unwrap();
    p.wait_durable(d.end_offset()).await.unwrap();
}

#[tokio::test]
async fn a_shorter_segment_ms_applies_to_the_open_log_at_once() {
    let tb = support::start_broker(|_| {}).await;
    tb.broker
        .create_topic("t", 1, 1, BTreeMap::new())
        .await
        .unwrap();
    let now = tb.broker.env.now_ms();
    produce_at_time(&tb, now).await;
    // A week's default: records stamped minutes apart share a segment.
    produce_at_time(&tb, now + 600_000).await;
    assert_eq!(segments(&tb), 1);
    assert_eq!(
        incremental(
            tb.addr,
            vec![resource(TOPIC, "t", &[("segment.ms", SET, Some("1000"))])],
            false
        )
        .await,
        [0]
    );
    // The segment's first batch is at `now`: this one is more than a
    // second after it.
    produce_at_time(&tb, now + 600_500).await;
    assert_eq!(segments(&tb), 2, "rolled by segment.ms");
    produce_at_time(&tb, now + 601_000).await;
    assert_eq!(segments(&tb), 2, "500 ms into the new segment");
    produce_at_time(&tb, now + 601_501).await;
    assert_eq!(segments(&tb), 3);
}

#[tokio::test]
async fn the_broker_default_of_segment_ms_is_its_log_roll_ms() {
    let tb = support::start_broker(|c| c.log.roll_ms = 1000).await;
    tb.broker
        .create_topic("t", 1, 1, BTreeMap::new())
        .await
        .unwrap();
    assert_eq!(
        described(tb.addr, "t")
            .await
            .get("segment.ms")
            .map(|v| v.0.as_str()),
        Some("1000")
    );
    let now = tb.broker.env.now_ms();
    produce_at_time(&tb, now).await;
    produce_at_time(&tb, now + 1_001).await;
    assert_eq!(segments(&tb), 2);
}

#[tokio::test]
async fn two_brokers_changing_one_topic_at_once_both_land_and_each_sees_the_other() {
    // Long enough that neither broker is counted gone while CI loads the
    // machine (net/tests/cluster.rs has the story).
    const BOUNDS: LeaseBounds = LeaseBounds {
        lease_ms: 1_500,
        clock_skew_ms: 100,
        volume_staleness_ms: 200,
    };
    let dir = tempfile::tempdir().unwrap();
    let a = support::start_shared_broker(dir.path(), |c| {
        c.broker_id = 0;
        c.lease = BOUNDS;
    })
    .await;
    let b = support::start_shared_broker(dir.path(), |c| {
        c.broker_id = 1;
        c.lease = BOUNDS;
    })
    .await;
    a.broker
        .create_topic("t", 2, 1, BTreeMap::new())
        .await
        .unwrap();
    // Until b serves the topic (its ownership round follows the volume).
    for _ in 0..100 {
        if b.broker.topic("t").is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(b.broker.topic("t").is_some());
    // Each broker sets a different config, many times, at once: each
    // change builds on the other's, so the last of each holds.
    let changes = |addr: SocketAddr, name: &'static str| async move {
        for i in 0..10 {
            let value = (1_000_000 + i).to_string();
            let answer = incremental(
                addr,
                vec![resource(TOPIC, "t", &[(name, SET, Some(&value))])],
                false,
            )
            .await;
            assert_eq!(answer, [0], "{name}={value}");
        }
    };
    tokio::join!(
        changes(a.addr, "retention.ms"),
        changes(b.addr, "retention.bytes")
    );
    for addr in [a.addr, b.addr] {
        let mut last = BTreeMap::new();
        for _ in 0..100 {
            last = described(addr, "t").await;
            if last["retention.ms"].0 == "1000009" && last["retention.bytes"].0 == "1000009" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(last["retention.ms"], ("1000009".into(), SOURCE_TOPIC));
        assert_eq!(last["retention.bytes"], ("1000009".into(), SOURCE_TOPIC));
    }
    let versions: Vec<String> = std::fs::read_dir(dir.path().join("__cluster/topics"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("t"))
        .collect();
    assert!(
        versions.contains(&"t.json".to_string())
            && versions.contains(&"t@20.json".to_string())
            && versions.len() == 17,
        "version 0 and the 16 newest of 20 changes: {versions:?}"
    );
    b.stop().await;
    a.stop().await;
}

/// Every topic config of Kafka 4.1 at its default, as a client that
/// copies a topic's full description into CreateTopics sends them.
const KAFKA_DEFAULTS: &[(&str, &str)] = &[
    ("cleanup.policy", "delete"),
    ("compression.gzip.level", "-1"),
    ("compression.lz4.level", "9"),
    ("compression.type", "producer"),
    ("compression.zstd.level", "3"),
    ("delete.retention.ms", "86400000"),
    ("file.delete.delay.ms", "60000"),
    ("flush.messages", "9223372036854775807"),
    ("flush.ms", "9223372036854775807"),
    ("follower.replication.throttled.replicas", ""),
    ("index.interval.bytes", "4096"),
    ("leader.replication.throttled.replicas", ""),
    ("local.retention.bytes", "-2"),
    ("local.retention.ms", "-2"),
    ("max.compaction.lag.ms", "9223372036854775807"),
    ("max.message.bytes", "1048588"),
    ("message.timestamp.after.max.ms", "3600000"),
    ("message.timestamp.before.max.ms", "9223372036854775807"),
    ("message.timestamp.type", "CreateTime"),
    ("min.cleanable.dirty.ratio", "0.5"),
    ("min.compaction.lag.ms", "0"),
    ("min.insync.replicas", "1"),
    ("preallocate", "false"),
    ("remote.log.copy.disable", "false"),
    ("remote.log.delete.on.disable", "false"),
    ("remote.storage.enable", "false"),
    ("retention.bytes", "-1"),
    ("retention.ms", "604800000"),
    ("segment.bytes", "1073741824"),
    ("segment.index.bytes", "10485760"),
    ("segment.jitter.ms", "0"),
    ("segment.ms", "604800000"),
    ("unclean.leader.election.enable", "false"),
];

#[tokio::test]
async fn every_kafka_topic_config_is_accepted_and_described_and_invalid_values_are_refused() {
    let tb = support::start_broker(|_| {}).await;
    tb.broker
        .create_topic("t", 1, 1, BTreeMap::new())
        .await
        .unwrap();
    let d = described(tb.addr, "t").await;
    let names: Vec<&str> = d.keys().map(String::as_str).collect();
    let kafka: Vec<&str> = KAFKA_DEFAULTS.iter().map(|(n, _)| *n).collect();
    assert_eq!(names, kafka, "DescribeConfigs lists Kafka's topic configs");
    for (name, value) in KAFKA_DEFAULTS {
        assert_eq!(d[*name], ((*value).into(), SOURCE_DEFAULT), "{name}");
    }
    let every: Vec<_> = KAFKA_DEFAULTS
        .iter()
        .map(|(n, v)| (*n, SET, Some(*v)))
        .collect();
    assert_eq!(
        incremental(tb.addr, vec![resource(TOPIC, "t", &every)], false).await,
        [0]
    );
    let d = described(tb.addr, "t").await;
    for (name, value) in KAFKA_DEFAULTS {
        assert_eq!(d[*name], ((*value).into(), SOURCE_TOPIC), "{name}");
    }
    for refused in [
        ("message.timestamp.type", "LogAppendTime"),
        ("remote.storage.enable", "true"),
        ("min.cleanable.dirty.ratio", "1.5"),
        ("compression.gzip.level", "10"),
        ("leader.replication.throttled.replicas", "0:x"),
        ("segment.ms", "0"),
    ] {
        let answer = incremental(
            tb.addr,
            vec![resource(TOPIC, "t", &[(refused.0, SET, Some(refused.1))])],
            false,
        )
        .await;
        assert_eq!(answer, [code(ErrorCode::InvalidConfig)], "{refused:?}");
    }
}

/// Produces one batch of records stamped `timestamps` to t-0 at Produce v9
/// (record errors from v8); the partition's answer.
async fn produce_stamped(
    addr: SocketAddr,
    timestamps: &[i64],
) -> produce_response::PartitionProduceResponse {
    let mut b = BatchBuilder::new();
    for &ts in timestamps {
        b.push(NewRecord::new(ts, Some(b"k"), Some(b"v")));
    }
    let req =
        kaas_net::client::single_partition_produce("t", 0, b.build().into_bytes(), -1, 10_000);
    let mut conn = Connection::connect(addr).await.unwrap();
    match conn.send(produce_request::API_KEY, 9, &req).await.unwrap() {
        ResponseBody::Produce(r) => r.responses[0].partition_responses[0].clone(),
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn a_timestamp_more_than_the_topics_bound_ahead_is_invalid_timestamp() {
    let tb = support::start_broker(|_| {}).await;
    tb.broker
        .create_topic("t", 1, 1, BTreeMap::new())
        .await
        .unwrap();
    let now = tb.broker.env.now_ms();
    let hour = 3_600_000;
    let refused = produce_stamped(tb.addr, &[now, now + 2 * hour, now + 3 * hour]).await;
    assert_eq!(refused.error_code, code(ErrorCode::InvalidTimestamp));
    let indexes: Vec<i32> = refused
        .record_errors
        .iter()
        .map(|e| e.batch_index)
        .collect();
    assert_eq!(indexes, [1, 2], "Kafka 4's default: at most an hour ahead");
    assert_eq!(tb.broker.partition("t", 0, -1).unwrap().high_watermark(), 0);
    assert_eq!(
        produce_stamped(tb.addr, &[0, now]).await.error_code,
        0,
        "old is fine"
    );

    // A topic may allow more, or less.
    assert_eq!(
        incremental(
            tb.addr,
            vec![resource(
                TOPIC,
                "t",
                &[
                    ("message.timestamp.after.max.ms", SET, Some("14400000")),
                    ("message.timestamp.before.max.ms", SET, Some("60000")),
                ]
            )],
            false
        )
        .await,
        [0]
    );
    let ok = produce_stamped(tb.addr, &[now + 3 * hour]).await;
    assert_eq!(ok.error_code, 0, "{ok:?}");
    let old = produce_stamped(tb.addr, &[now, 0]).await;
    assert_eq!(old.error_code, code(ErrorCode::InvalidTimestamp));
    assert_eq!(old.record_errors[0].batch_index, 1);
}

#[tokio::test]
async fn describe_configs_answers_documentation_only_when_asked_at_v3_or_later() {
    let tb = support::start_broker(|_| {}).await;
    tb.broker
        .create_topic("t", 1, 1, BTreeMap::new())
        .await
        .unwrap();
    for (kind, name) in [(TOPIC, "t"), (BROKER, "0")] {
        for version in 3..=4 {
            let docs = documentation(tb.addr, kind, name, version, true).await;
            assert!(!docs.is_empty());
            for (config, doc) in &docs {
                let doc = doc.as_deref().unwrap_or_default();
                assert!(doc.len() > 20, "v{version} {config}: {doc:?}");
            }
            let docs = documentation(tb.addr, kind, name, version, false).await;
            assert!(docs.values().all(Option::is_none), "v{version}: {docs:?}");
        }
        // v1 and v2 carry neither the flag nor the field.
        for version in 1..=2 {
            let docs = documentation(tb.addr, kind, name, version, true).await;
            assert!(docs.values().all(Option::is_none), "v{version}: {docs:?}");
        }
    }
    let docs = documentation(tb.addr, TOPIC, "t", 4, true).await;
    let preallocate = docs["preallocate"].as_deref().unwrap_or_default();
    assert!(preallocate.contains("no effect"), "{preallocate}");
    let retention = docs["retention.ms"].as_deref().unwrap_or_default();
    assert!(!retention.contains("no effect"), "{retention}");
    let docs = documentation(tb.addr, BROKER, "0", 4, true).await;
    let default = docs["log.retention.ms"].as_deref().unwrap_or_default();
    assert!(default.contains("topic config retention.ms"), "{default}");
}

/// A restart whose listing of the topic files is stale (another broker
/// created the topic a moment ago, and this broker's cached view of the
/// directory predates it) must not take the topic's partition directory
/// for a deletion's leftover: the topic file is looked up by name first.
#[test]
fn a_topic_file_a_stale_listing_hides_keeps_its_partitions_on_disk() {
    use kaas_net::volume::hooked::HookedVolume;
    use kaas_net::volume::LocalVolume;
    let first = support::runtime();
    let dir = first.block_on(async {
        let tb = support::start_broker(|_| {}).await;
        tb.broker
            .create_topic("t", 1, 1, BTreeMap::new())
            .await
            .unwrap();
        produce(&tb, 3).await;
        tb._dir
    });
    drop(first);
    assert_eq!(t0_files(dir.path(), ".log").len(), 1);
    let topic_file = kaas_core::layout::topic_file("t");
    let hidden = topic_file.rsplit('/').next().unwrap().to_string();
    support::runtime().block_on(async {
        let volume = HookedVolume::new(LocalVolume::new(dir.path()).unwrap(), |_| Ok(()))
            .hiding_from_listings(move |name| name == hidden);
        let config = kaas_net::config::BrokerConfig::new("127.0.0.1:0".parse().unwrap());
        let broker = kaas_net::Broker::open(
            config,
            std::sync::Arc::new(volume),
            kaas_net::env::Env::system(),
        )
        .unwrap();
        drop(broker);
    });
    assert_eq!(
        t0_files(dir.path(), ".log").len(),
        1,
        "the partition of a live topic was removed as a deletion's leftover"
    );
    // Seen again, the topic has its records.
    support::runtime().block_on(async {
        let tb = support::start_broker_in(dir, |_| {}).await;
        let p = tb.broker.partition("t", 0, -1).unwrap();
        assert_eq!(p.high_watermark(), 3);
    });
}
