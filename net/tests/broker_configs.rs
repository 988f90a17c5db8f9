//! Dynamic broker configs over the wire (KIP-226): IncrementalAlterConfigs
//! and AlterConfigs on BROKER resources (this broker's id, or "" for the
//! cluster-wide default), DescribeConfigs answering each config's value,
//! source and synonyms as Kafka does, the effect on topics and their logs
//! at once, a restart, and a second broker following the default.
#![cfg(not(madsim))]
// A test: an unwrap that fails is the test failing.
#![allow(clippy::unwrap_used)]

mod support;

use kaas_core::cluster::membership::LeaseBounds;
use kaas_core::protocol::messages::*;
use kaas_core::protocol::{ErrorCode, RequestBody, ResponseBody};
use kaas_core::record::{BatchBuilder, NewRecord};
use kaas_net::client::Connection;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use support::configs::{
    describe, incremental_answers, produce, replace, resource, segments, Described, Ops, APPEND,
    BROKER, DELETE, SET, SOURCE_DEFAULT, SOURCE_DYNAMIC_BROKER, SOURCE_DYNAMIC_DEFAULT,
    SOURCE_STATIC_BROKER, SOURCE_TOPIC, TOPIC,
};

/// IncrementalAlterConfigs of one resource: (error code, message).
async fn incremental(
    addr: SocketAddr,
    kind: i8,
    name: &str,
    configs: Ops<'_>,
    validate_only: bool,
) -> (i16, Option<String>) {
    let mut answers =
        incremental_answers(addr, vec![resource(kind, name, configs)], validate_only).await;
    answers.remove(0)
}

/// Sets configs of a BROKER resource, for real; its error code.
async fn set(addr: SocketAddr, name: &str, configs: &[(&str, &str)]) -> i16 {
    let ops: Vec<(&str, i8, Option<&str>)> =
        configs.iter().map(|(n, v)| (*n, SET, Some(*v))).collect();
    incremental(addr, BROKER, name, &ops, false).await.0
}

fn syn(name: &str, value: &str, source: i8) -> (String, String, i8) {
    (name.into(), value.into(), source)
}

fn code(e: ErrorCode) -> i16 {
    e.code()
}

#[tokio::test]
async fn a_broker_config_changes_at_once_and_validate_only_changes_nothing() {
    let tb = support::start_broker(|_| {}).await;
    let before = describe(tb.addr, BROKER, "0").await;
    let ms = &before["log.retention.ms"];
    assert_eq!((ms.value.as_deref(), ms.source), (None, SOURCE_DEFAULT));
    assert!(!ms.read_only, "dynamic");
    assert_eq!(
        before["log.retention.hours"].synonyms,
        [syn("log.retention.hours", "168", SOURCE_DEFAULT)]
    );
    assert!(before["broker.id"].read_only);
    assert!(
        before["log.retention.hours"].read_only,
        "only the ms spelling is dynamic, as in Kafka"
    );

    let answer = incremental(
        tb.addr,
        BROKER,
        "0",
        &[("log.retention.ms", SET, Some("60000"))],
        true,
    )
    .await;
    assert_eq!(answer, (0, None));
    assert_eq!(
        describe(tb.addr, BROKER, "0").await,
        before,
        "validate_only"
    );
    assert_eq!(tb.broker.log_defaults().retention_ms, 604_800_000);

    assert_eq!(set(tb.addr, "0", &[("log.retention.ms", "60000")]).await, 0);
    let after = describe(tb.addr, BROKER, "0").await;
    let ms = &after["log.retention.ms"];
    assert_eq!(
        (ms.value.as_deref(), ms.source),
        (Some("60000"), SOURCE_DYNAMIC_BROKER)
    );
    assert_eq!(
        ms.synonyms,
        [
            syn("log.retention.ms", "60000", SOURCE_DYNAMIC_BROKER),
            syn("log.retention.hours", "168", SOURCE_DEFAULT),
        ]
    );
    assert_eq!(tb.broker.log_defaults().retention_ms, 60_000);

    // A topic that sets no retention.ms takes it, and says where from.
    tb.broker
        .create_topic("t", 1, 1, BTreeMap::new())
        .await
        .unwrap();
    let t = describe(tb.addr, TOPIC, "t").await;
    let r = &t["retention.ms"];
    assert_eq!(
        (r.value.as_deref(), r.source),
        (Some("60000"), SOURCE_DYNAMIC_BROKER)
    );
    assert_eq!(
        r.synonyms,
        [
            syn("log.retention.ms", "60000", SOURCE_DYNAMIC_BROKER),
            syn("log.retention.hours", "168", SOURCE_DEFAULT),
        ]
    );
    let topic = tb.broker.topic("t").unwrap();
    assert_eq!(tb.broker.retention(&topic), (-1, 60_000));
    // A topic's own value still wins.
    let answer = incremental(
        tb.addr,
        TOPIC,
        "t",
        &[("retention.ms", SET, Some("1000"))],
        false,
    )
    .await;
    assert_eq!(answer.0, 0);
    let r = &describe(tb.addr, TOPIC, "t").await["retention.ms"];
    assert_eq!((r.value.as_deref(), r.source), (Some("1000"), SOURCE_TOPIC));
    assert_eq!(
        r.synonyms[1],
        syn("log.retention.ms", "60000", SOURCE_DYNAMIC_BROKER)
    );
}

#[tokio::test]
async fn per_broker_beats_the_cluster_default_which_beats_the_static_config() {
    let tb = support::start_broker(|c| c.log.max_message_bytes = 3_000_000).await;
    let mmb = &describe(tb.addr, BROKER, "0").await["message.max.bytes"];
    assert_eq!(
        (mmb.value.as_deref(), mmb.source),
        (Some("3000000"), SOURCE_STATIC_BROKER)
    );
    assert_eq!(
        set(
            tb.addr,
            "",
            &[("log.segment.bytes", "2000"), ("message.max.bytes", "5000")]
        )
        .await,
        0
    );
    assert_eq!(set(tb.addr, "0", &[("log.segment.bytes", "1000")]).await, 0);

    let d = describe(tb.addr, BROKER, "0").await;
    let seg = &d["log.segment.bytes"];
    assert_eq!(
        (seg.value.as_deref(), seg.source),
        (Some("1000"), SOURCE_DYNAMIC_BROKER)
    );
    assert_eq!(
        seg.synonyms,
        [
            syn("log.segment.bytes", "1000", SOURCE_DYNAMIC_BROKER),
            syn("log.segment.bytes", "2000", SOURCE_DYNAMIC_DEFAULT),
            syn("log.segment.bytes", "1073741824", SOURCE_DEFAULT),
        ]
    );
    let mmb = &d["message.max.bytes"];
    assert_eq!(
        (mmb.value.as_deref(), mmb.source),
        (Some("5000"), SOURCE_DYNAMIC_DEFAULT)
    );
    assert_eq!(
        mmb.synonyms,
        [
            syn("message.max.bytes", "5000", SOURCE_DYNAMIC_DEFAULT),
            syn("message.max.bytes", "3000000", SOURCE_STATIC_BROKER),
            syn("message.max.bytes", "1048588", SOURCE_DEFAULT),
        ]
    );
    let effective = tb.broker.log_defaults();
    assert_eq!(
        (effective.segment_bytes, effective.max_message_bytes),
        (1000, 5000)
    );

    // The cluster default's resource lists only what is set there.
    let cluster = describe(tb.addr, BROKER, "").await;
    assert_eq!(
        cluster.keys().collect::<Vec<_>>(),
        ["log.segment.bytes", "message.max.bytes"]
    );
    assert_eq!(
        cluster["log.segment.bytes"],
        Described {
            value: Some("2000".into()),
            source: SOURCE_DYNAMIC_DEFAULT,
            read_only: false,
            synonyms: vec![syn("log.segment.bytes", "2000", SOURCE_DYNAMIC_DEFAULT)],
        }
    );

    // A topic's default follows the same precedence.
    tb.broker
        .create_topic("t", 1, 1, BTreeMap::new())
        .await
        .unwrap();
    let t = describe(tb.addr, TOPIC, "t").await;
    assert_eq!(t["segment.bytes"].value.as_deref(), Some("1000"));
    assert_eq!(t["segment.bytes"].source, SOURCE_DYNAMIC_BROKER);
    assert_eq!(t["max.message.bytes"].value.as_deref(), Some("5000"));
    assert_eq!(t["max.message.bytes"].source, SOURCE_DYNAMIC_DEFAULT);
    let topic = tb.broker.topic("t").unwrap();
    assert_eq!(tb.broker.max_message_bytes(&topic), 5000);

    // Deleting the per-broker value leaves the cluster default.
    let answer = incremental(
        tb.addr,
        BROKER,
        "0",
        &[("log.segment.bytes", DELETE, None)],
        false,
    )
    .await;
    assert_eq!(answer.0, 0);
    let seg = &describe(tb.addr, BROKER, "0").await["log.segment.bytes"];
    assert_eq!(
        (seg.value.as_deref(), seg.source),
        (Some("2000"), SOURCE_DYNAMIC_DEFAULT)
    );
    assert_eq!(tb.broker.log_defaults().segment_bytes, 2000);

    // AlterConfigs replaces the resource's whole set.
    assert_eq!(
        replace(tb.addr, BROKER, "", &[("log.roll.ms", "5000")]).await,
        0
    );
    let cluster = describe(tb.addr, BROKER, "").await;
    assert_eq!(cluster.keys().collect::<Vec<_>>(), ["log.roll.ms"]);
    let effective = tb.broker.log_defaults();
    assert_eq!(
        (
            effective.segment_bytes,
            effective.max_message_bytes,
            effective.roll_ms
        ),
        (1 << 30, 3_000_000, 5000)
    );
}

#[tokio::test]
async fn static_configs_bad_values_and_other_brokers_ids_are_refused_as_kafka_refuses_them() {
    let tb = support::start_broker(|_| {}).await;
    for name in ["0", ""] {
        let answer = incremental(
            tb.addr,
            BROKER,
            name,
            &[
                ("log.retention.ms", SET, Some("1")),
                ("num.partitions", SET, Some("3")),
                ("broker.id", SET, Some("7")),
            ],
            false,
        )
        .await;
        assert_eq!(
            answer,
            (
                code(ErrorCode::InvalidRequest),
                Some(
                    "Cannot update these configs dynamically: Set(broker.id, num.partitions)"
                        .into()
                )
            ),
            "resource {name:?}"
        );
    }
    let refused: [(Ops<'static>, ErrorCode, &str); 6] = [
        (
            &[("log.retention.hours", SET, Some("1"))],
            ErrorCode::InvalidRequest,
            "Cannot update these configs dynamically: Set(log.retention.hours)",
        ),
        (
            &[("log.retention.ms", SET, Some("soon"))],
            ErrorCode::InvalidRequest,
            "Invalid value soon for configuration log.retention.ms: Not a number of type LONG",
        ),
        (
            &[("log.segment.bytes", SET, Some("10"))],
            ErrorCode::InvalidRequest,
            "Invalid value 10 for configuration log.segment.bytes: Value must be at least 14",
        ),
        (
            &[("no.such.config", SET, Some("1"))],
            ErrorCode::InvalidConfig,
            "Unknown broker config name: no.such.config",
        ),
        (
            &[("log.retention.ms", SET, None)],
            ErrorCode::InvalidRequest,
            "Null value not supported for : log.retention.ms",
        ),
        (
            &[("log.retention.ms", APPEND, Some("1"))],
            ErrorCode::InvalidConfig,
            "Config value append is not allowed for config key: log.retention.ms",
        ),
    ];
    for (ops, error, message) in refused {
        let answer = incremental(tb.addr, BROKER, "0", ops, false).await;
        assert_eq!(answer, (code(error), Some(message.into())), "{ops:?}");
    }
    let answer = incremental(
        tb.addr,
        BROKER,
        "7",
        &[("log.retention.ms", SET, Some("1"))],
        false,
    )
    .await;
    assert_eq!(
        answer,
        (
            code(ErrorCode::InvalidRequest),
            Some("Unexpected broker id, expected 0, but received 7".into())
        )
    );
    let answer = incremental(
        tb.addr,
        BROKER,
        "b",
        &[("log.retention.ms", SET, Some("1"))],
        false,
    )
    .await;
    assert_eq!(answer.0, code(ErrorCode::InvalidRequest));
    assert_eq!(
        replace(tb.addr, BROKER, "0", &[("log.dirs", "/elsewhere")]).await,
        code(ErrorCode::InvalidRequest)
    );
    let effective = tb.broker.log_defaults();
    assert_eq!(
        (effective.retention_ms, effective.segment_bytes),
        (604_800_000, 1 << 30),
        "nothing changed"
    );
    assert!(describe(tb.addr, BROKER, "").await.is_empty());
    assert_eq!(
        describe_error(tb.addr, "7").await,
        (
            code(ErrorCode::InvalidRequest),
            Some("Unexpected broker id, expected 0 or empty string, but received 7".into())
        )
    );
}

/// DescribeConfigs of a BROKER resource that is refused: (code, message).
async fn describe_error(addr: SocketAddr, name: &str) -> (i16, Option<String>) {
    let mut conn = Connection::connect(addr).await.unwrap();
    let req = RequestBody::DescribeConfigs(DescribeConfigsRequest {
        resources: vec![describe_configs_request::DescribeConfigsResource {
            resource_type: BROKER,
            resource_name: name.into(),
            configuration_keys: None,
            ..Default::default()
        }],
        ..Default::default()
    });
    match conn
        .send(describe_configs_request::API_KEY, 4, &req)
        .await
        .unwrap()
    {
        ResponseBody::DescribeConfigs(r) => {
            (r.results[0].error_code, r.results[0].error_message.clone())
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn dynamic_broker_configs_survive_a_restart() {
    let first = support::runtime();
    let (dir, before) = first.block_on(async {
        let tb = support::start_broker(|_| {}).await;
        assert_eq!(
            set(tb.addr, "", &[("log.retention.ms", "1800000")]).await,
            0
        );
        assert_eq!(set(tb.addr, "0", &[("log.roll.ms", "7200000")]).await, 0);
        let before = describe(tb.addr, BROKER, "0").await;
        assert_eq!(tb.broker.log_defaults().retention_ms, 30 * 60_000);
        assert_eq!(tb.broker.log_defaults().roll_ms, 2 * 3_600_000);
        (tb._dir, before)
    });
    drop(first);
    support::runtime().block_on(async {
        let tb = support::start_broker_in(dir, |_| {}).await;
        assert_eq!(describe(tb.addr, BROKER, "0").await, before);
        let ms = &before["log.retention.ms"];
        assert_eq!(
            (ms.value.as_deref(), ms.source),
            (Some("1800000"), SOURCE_DYNAMIC_DEFAULT)
        );
        let roll = &before["log.roll.ms"];
        assert_eq!(
            (roll.value.as_deref(), roll.source),
            (Some("7200000"), SOURCE_DYNAMIC_BROKER)
        );
        assert_eq!(tb.broker.log_defaults().retention_ms, 30 * 60_000);
        assert_eq!(tb.broker.log_defaults().roll_ms, 2 * 3_600_000);
    });
}

#[tokio::test]
async fn a_dynamic_segment_size_rolls_the_open_logs_and_a_dynamic_retention_trims_them() {
    let tb = support::start_broker(|_| {}).await;
    tb.broker
        .create_topic("t", 1, 1, BTreeMap::new())
        .await
        .unwrap();
    produce(&tb, 5).await;
    assert_eq!(segments(&tb), 1);
    assert_eq!(set(tb.addr, "", &[("log.segment.bytes", "300")]).await, 0);
    produce(&tb, 5).await;
    let rolled = segments(&tb);
    assert!(rolled >= 3, "rolled: {rolled} segments");
    // Retention by size, per broker: everything but the active segment goes.
    assert_eq!(set(tb.addr, "0", &[("log.retention.bytes", "1")]).await, 0);
    tb.broker.apply_retention(support::now_ms()).await;
    assert_eq!(segments(&tb), 1, "from {rolled}");
}

#[tokio::test]
async fn a_dynamic_message_max_bytes_refuses_larger_batches_at_once() {
    let tb = support::start_broker(|_| {}).await;
    tb.broker
        .create_topic("t", 1, 1, BTreeMap::new())
        .await
        .unwrap();
    let mut conn = Connection::connect(tb.addr).await.unwrap();
    let produce = |value: usize| {
        let mut b = BatchBuilder::new();
        b.push(NewRecord::new(
            support::now_ms(),
            Some(b"k"),
            Some(&vec![b'v'; value]),
        ));
        RequestBody::Produce(ProduceRequest {
            acks: -1,
            timeout_ms: 5_000,
            topic_data: vec![produce_request::TopicProduceData {
                name: "t".into(),
                partition_data: vec![produce_request::PartitionProduceData {
                    index: 0,
                    records: Some(b.build().into_bytes()),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        })
    };
    let code_of = |r: ResponseBody| match r {
        ResponseBody::Produce(r) => r.responses[0].partition_responses[0].error_code,
        other => panic!("unexpected {other:?}"),
    };
    let r = conn
        .send(produce_request::API_KEY, 9, &produce(500))
        .await
        .unwrap();
    assert_eq!(code_of(r), 0);
    assert_eq!(set(tb.addr, "0", &[("message.max.bytes", "200")]).await, 0);
    let r = conn
        .send(produce_request::API_KEY, 9, &produce(500))
        .await
        .unwrap();
    assert_eq!(code_of(r), code(ErrorCode::MessageTooLarge));
}

#[tokio::test]
async fn another_broker_follows_the_cluster_default_but_not_this_brokers_own() {
    // As in topic_configs.rs: long enough that neither broker is counted
    // gone while CI loads the machine.
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
    assert_eq!(
        set(a.addr, "", &[("log.retention.bytes", "123456")]).await,
        0
    );
    assert_eq!(set(a.addr, "0", &[("log.segment.bytes", "4096")]).await, 0);
    // b names its own id only.
    let answer = incremental(
        b.addr,
        BROKER,
        "0",
        &[("log.segment.bytes", SET, Some("1"))],
        false,
    )
    .await;
    assert_eq!(answer.0, code(ErrorCode::InvalidRequest));
    for _ in 0..100 {
        if b.broker.log_defaults().retention_bytes == 123_456 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let seen = b.broker.log_defaults();
    assert_eq!(
        seen.retention_bytes, 123_456,
        "followed in an ownership round"
    );
    assert_eq!(
        seen.segment_bytes,
        1 << 30,
        "broker 0's own value stays its own"
    );
    let d = describe(b.addr, BROKER, "1").await;
    assert_eq!(d["log.retention.bytes"].source, SOURCE_DYNAMIC_DEFAULT);
    // b changes the default on top of a's change; a follows it.
    assert_eq!(set(b.addr, "", &[("message.max.bytes", "777")]).await, 0);
    assert_eq!(
        describe(b.addr, BROKER, "")
            .await
            .keys()
            .collect::<Vec<_>>(),
        ["log.retention.bytes", "message.max.bytes"],
        "built on a's version"
    );
    for _ in 0..100 {
        if a.broker.log_defaults().max_message_bytes == 777 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let seen = a.broker.log_defaults();
    assert_eq!(
        (seen.max_message_bytes, seen.retention_bytes),
        (777, 123_456)
    );
    assert_eq!(seen.segment_bytes, 4096);
    b.stop().await;
    a.stop().await;
}
