//! Topic administration: creating with bad names, counts and configs,
//! deleting, adding partitions, DeleteRecords, configs, Metadata's
//! auto-creation, the cluster description, OffsetForLeaderEpoch.

use super::{scenario, Scenario};
use crate::observe::err;
use crate::ops::{batch_with_keyless, plain_batch, AlterOps, TOPIC_KEYS};
use crate::session::{Session, Step};
use kaas_core::protocol::messages::*;
use kaas_core::protocol::{RequestBody, Uuid};
use kaas_core::topic_config::TOPIC_CONFIGS;
use serde_json::json;

pub fn scenarios() -> Vec<Scenario> {
    vec![
        scenario!(
            "admin/create-invalid-names",
            "empty, dot, dot-dot, bad characters, too long",
            invalid_names
        ),
        scenario!(
            "admin/create-existing",
            "creating a topic twice",
            create_existing
        ),
        scenario!(
            "admin/create-partition-counts",
            "0, -1 (the default), -2 partitions",
            partition_counts
        ),
        scenario!(
            "admin/create-replication-factors",
            "replication factor 1, 3 (more than brokers), 0",
            replication_factors
        ),
        scenario!(
            "admin/create-configs",
            "known, unknown and malformed topic configs",
            create_configs
        ),
        scenario!(
            "admin/create-validate-only",
            "validate_only creates nothing",
            validate_only
        ),
        scenario!(
            "admin/delete-topics",
            "delete by name, by id, unknown names and ids",
            delete_topics
        ),
        scenario!(
            "admin/create-partitions",
            "grow, shrink, same count, unknown topic",
            create_partitions
        ),
        scenario!(
            "admin/delete-records",
            "before the high watermark, at it (-1), past it, unknown partition",
            delete_records
        ),
        scenario!(
            "admin/compacted-topics",
            "cleanup.policy compact and compact,delete: created, described, DeleteRecords, keyless records refused",
            compacted_topics
        ),
        scenario!(
            "admin/describe-configs",
            "a topic's configs and their sources; an unknown topic",
            describe_configs
        ),
        scenario!(
            "admin/create-every-config",
            "a topic created with every topic config of Kafka 4.1 at its default, described back",
            create_every_config
        ),
        scenario!(
            "admin/incremental-alter-configs",
            "SET, DELETE, APPEND, SUBTRACT; invalid values, unknown names, duplicates, validate_only, unknown topics, broker resources (static and dynamic configs)",
            incremental_alter_configs
        ),
        scenario!(
            "admin/alter-configs",
            "AlterConfigs replaces a topic's set; invalid values, null values, validate_only",
            alter_configs
        ),
        scenario!(
            "admin/metadata-auto-create",
            "Metadata creates a missing topic only when asked to",
            metadata_auto_create
        ),
        scenario!(
            "admin/metadata-all-topics",
            "Metadata for all topics includes the new ones",
            metadata_all
        ),
        scenario!(
            "admin/describe-cluster",
            "one broker, a controller, no error",
            describe_cluster
        ),
        scenario!(
            "admin/offset-for-leader-epoch",
            "end offsets of the current, an older and a future epoch",
            offset_for_leader_epoch
        ),
    ]
}

async fn create_named(s: &mut Session, step: &str, name: &str) -> Step<i16> {
    let version = s.version(create_topics_request::API_KEY)?;
    let body = RequestBody::CreateTopics(CreateTopicsRequest {
        topics: vec![create_topics_request::CreatableTopic {
            name: name.into(),
            num_partitions: 1,
            replication_factor: -1,
            ..Default::default()
        }],
        timeout_ms: 10_000,
        ..Default::default()
    });
    let r = call_as!(s, CreateTopics, version, body, step);
    let code = r.topics.first().map_or(-100, |t| t.error_code);
    s.observe(step, json!({"error": err(code)}));
    Ok(code)
}

async fn invalid_names(s: &mut Session) -> Step {
    let long = format!("{}-{}", s.name("x"), "y".repeat(250));
    let bad_char = s.name("a b");
    let slash = s.name("a/b");
    for (step, name) in [
        ("empty", ""),
        ("dot", "."),
        ("dot-dot", ".."),
        ("space", bad_char.as_str()),
        ("slash", slash.as_str()),
        ("250+ chars", long.as_str()),
    ] {
        create_named(s, step, name).await?;
    }
    Ok(())
}

async fn create_existing(s: &mut Session) -> Step {
    let t = s.create_topic("t", 2).await?;
    s.create_topic_with("again", &t, 2, &[]).await?;
    s.create_topic_with("again with another count", &t, 5, &[])
        .await?;
    s.metadata("unchanged", &[&t], false).await?;
    Ok(())
}

async fn partition_counts(s: &mut Session) -> Step {
    for (short, n) in [("zero", 0), ("default", -1), ("minus-two", -2)] {
        let t = s.name(short);
        s.create_topic_with(&format!("{n} partitions"), &t, n, &[])
            .await?;
    }
    Ok(())
}

async fn replication_factors(s: &mut Session) -> Step {
    let version = s.version(create_topics_request::API_KEY)?;
    for (short, rf) in [("one", 1i16), ("three", 3), ("zero", 0)] {
        let body = RequestBody::CreateTopics(CreateTopicsRequest {
            topics: vec![create_topics_request::CreatableTopic {
                name: s.name(short),
                num_partitions: 1,
                replication_factor: rf,
                ..Default::default()
            }],
            timeout_ms: 10_000,
            ..Default::default()
        });
        let step = format!("replication factor {rf}");
        let r = call_as!(s, CreateTopics, version, body, &step);
        let t = r.topics.first().cloned().unwrap_or_default();
        s.observe(
            step,
            json!({"error": err(t.error_code), "replication_factor": t.replication_factor}),
        );
    }
    Ok(())
}

async fn create_configs(s: &mut Session) -> Step {
    let cases: [(&str, &[(&str, &str)]); 5] = [
        (
            "retention",
            &[("retention.ms", "3600000"), ("cleanup.policy", "delete")],
        ),
        ("unknown-name", &[("no.such.config", "1")]),
        ("not-a-number", &[("retention.ms", "soon")]),
        ("bad-policy", &[("cleanup.policy", "sometimes")]),
        ("negative-segment", &[("segment.bytes", "-5")]),
    ];
    for (short, configs) in cases {
        let t = s.name(short);
        s.create_topic_with(short, &t, 1, configs).await?;
    }
    Ok(())
}

async fn validate_only(s: &mut Session) -> Step {
    let version = s.version(create_topics_request::API_KEY)?;
    let t = s.name("t");
    let body = RequestBody::CreateTopics(CreateTopicsRequest {
        topics: vec![create_topics_request::CreatableTopic {
            name: t.clone(),
            num_partitions: 3,
            replication_factor: -1,
            ..Default::default()
        }],
        timeout_ms: 10_000,
        validate_only: true,
        ..Default::default()
    });
    let r = call_as!(s, CreateTopics, version, body, "validate");
    let res = r.topics.first().cloned().unwrap_or_default();
    s.observe(
        "validate only",
        json!({"error": err(res.error_code), "partitions": res.num_partitions}),
    );
    s.metadata("not created", &[&t], false).await?;
    s.create_topic_with("create for real", &t, 3, &[]).await?;
    Ok(())
}

async fn delete_topics(s: &mut Session) -> Step {
    let a = s.create_topic("a", 1).await?;
    let b = s.create_topic("b", 1).await?;
    let b_id = s.topic_id(&b);
    let version = s.version(delete_topics_request::API_KEY)?;
    let missing = s.name("missing");
    let by_name = if version >= 6 {
        vec![
            delete_topics_request::DeleteTopicState {
                name: Some(a.clone()),
                ..Default::default()
            },
            delete_topics_request::DeleteTopicState {
                name: Some(missing.clone()),
                ..Default::default()
            },
        ]
    } else {
        Vec::new()
    };
    let body = RequestBody::DeleteTopics(DeleteTopicsRequest {
        topics: by_name,
        topic_names: if version >= 6 {
            Vec::new()
        } else {
            vec![a.clone(), missing.clone()]
        },
        timeout_ms: 10_000,
        ..Default::default()
    });
    let r = call_as!(s, DeleteTopics, version, body, "delete by name");
    let mut seen: Vec<_> = r
        .responses
        .iter()
        .map(|t| (t.name.as_deref().map(|n| s.local(n)), err(t.error_code)))
        .collect();
    seen.sort_by_key(|x| x.0.clone());
    s.observe("delete a and missing by name", json!(seen));
    if version >= 6 {
        let body = RequestBody::DeleteTopics(DeleteTopicsRequest {
            topics: vec![
                delete_topics_request::DeleteTopicState {
                    name: None,
                    topic_id: b_id,
                    ..Default::default()
                },
                delete_topics_request::DeleteTopicState {
                    name: None,
                    topic_id: Uuid([7; 16]),
                    ..Default::default()
                },
            ],
            timeout_ms: 10_000,
            ..Default::default()
        });
        let r = call_as!(s, DeleteTopics, version, body, "delete by id");
        let mut seen: Vec<_> = r
            .responses
            .iter()
            .map(|t| {
                (
                    t.topic_id == b_id,
                    t.name.as_deref().map(|n| s.local(n)),
                    err(t.error_code),
                )
            })
            .collect();
        seen.sort_by_key(|x| x.0);
        s.observe("delete b and an unknown id by id", json!(seen));
    }
    // Deletion completes asynchronously on Kafka: wait until both are gone.
    s.wait_gone(&[&a, &b]).await?;
    s.metadata("both gone", &[&a, &b], false).await?;
    Ok(())
}

async fn create_partitions(s: &mut Session) -> Step {
    let t = s.create_topic("t", 1).await?;
    if s.create_partitions("grow to 3", &t, 3).await? == 0 {
        s.wait_ready(&t, 3).await?;
    }
    s.create_partitions("same count", &t, 3).await?;
    s.create_partitions("shrink to 2", &t, 2).await?;
    let missing = s.name("missing");
    s.create_partitions("unknown topic", &missing, 2).await?;
    s.metadata("three partitions", &[&t], false).await?;
    s.produce(
        "produce to the new partition 2",
        &t,
        2,
        plain_batch(s.t0, 0, 1),
        -1,
    )
    .await?;
    Ok(())
}

async fn delete_records(s: &mut Session) -> Step {
    let t = s.create_topic("t", 1).await?;
    s.produce("produce 5", &t, 0, plain_batch(s.t0, 0, 5), -1)
        .await?;
    s.delete_records("before 2", &t, 0, 2).await?;
    s.delete_records("before 1 (below log start)", &t, 0, 1)
        .await?;
    s.delete_records("past the high watermark", &t, 0, 9)
        .await?;
    s.delete_records("-1: up to the high watermark", &t, 0, -1)
        .await?;
    s.delete_records("unknown partition", &t, 3, 0).await?;
    s.list_offset("earliest", &t, 0, -2, 0).await?;
    s.produce("produce after", &t, 0, plain_batch(s.t0, 5, 1), -1)
        .await?;
    Ok(())
}

/// Kafka Streams creates its changelog topics with cleanup.policy=compact.
/// Records of a topic whose policy does not delete cannot be deleted
/// (POLICY_VIOLATION); with `delete` in the policy they can.
async fn compacted_topics(s: &mut Session) -> Step {
    for (short, policy) in [("compact", "compact"), ("both", "compact,delete")] {
        let t = s.name(short);
        s.create_topic_with(
            &format!("create {policy}"),
            &t,
            1,
            &[("cleanup.policy", policy)],
        )
        .await?;
        s.describe_configs(&format!("{policy}: configs"), &t, &["cleanup.policy"])
            .await?;
        s.produce(
            &format!("{policy}: produce 3"),
            &t,
            0,
            plain_batch(s.t0, 0, 3),
            -1,
        )
        .await?;
        s.delete_records(&format!("{policy}: delete before 1"), &t, 0, 1)
            .await?;
        s.list_offset(&format!("{policy}: earliest"), &t, 0, -2, 0)
            .await?;
        // A compacted topic needs every record keyed: a batch with keyless
        // records is refused whole, each of them named in record_errors.
        s.produce(
            &format!("{policy}: produce 4, the 1st and 3rd keyless"),
            &t,
            0,
            batch_with_keyless(s.t0, 3, 4, &[0, 2]),
            -1,
        )
        .await?;
        s.list_offset(&format!("{policy}: latest after"), &t, 0, -1, 0)
            .await?;
    }
    Ok(())
}

async fn describe_configs(s: &mut Session) -> Step {
    let t = s.name("t");
    s.create_topic_with(
        "create with retention.ms",
        &t,
        1,
        &[("retention.ms", "3600000")],
    )
    .await?;
    s.describe_configs("configs", &t, TOPIC_KEYS).await?;
    let missing = s.name("missing");
    s.describe_configs("unknown topic", &missing, TOPIC_KEYS)
        .await?;
    Ok(())
}

const TOPIC: i8 = 2;
const BROKER: i8 = 4;
/// The configs the alter scenarios read back: `TOPIC_KEYS` but
/// min.insync.replicas, whose source differs for a documented reason
/// (`configs: min.insync.replicas` in the differences) and which no step
/// here changes.
const ALTERED_KEYS: &[&str] = &[
    "cleanup.policy",
    "retention.ms",
    "retention.bytes",
    "segment.bytes",
    "max.message.bytes",
    "compression.type",
];
const SET: i8 = 0;
const DELETE: i8 = 1;
const APPEND: i8 = 2;
const SUBTRACT: i8 = 3;

async fn create_every_config(s: &mut Session) -> Step {
    let t = s.name("t");
    // Every topic config kaas knows at its default, which is Kafka 4.1's
    // (what a tool that copies one topic's description into another's
    // creation sends): both must take them and describe them alike.
    let defaults: Vec<(&str, &str)> = TOPIC_CONFIGS.iter().map(|d| (d.name, d.default)).collect();
    s.create_topic_with("create with every config", &t, 1, &defaults)
        .await?;
    let keys: Vec<&str> = defaults.iter().map(|(k, _)| *k).collect();
    s.describe_configs("described", &t, &keys).await?;
    for (name, value) in [
        ("min.cleanable.dirty.ratio", "1.5"),
        ("compression.gzip.level", "10"),
        ("compression.zstd.level", "23"),
        ("leader.replication.throttled.replicas", "0:x"),
        ("segment.ms", "0"),
        ("flush.messages", "0"),
        ("preallocate", "maybe"),
        ("remote.storage.enable", "true"),
    ] {
        let bad = s.name(&format!("bad-{name}"));
        s.create_topic_with(&format!("{name}={value}"), &bad, 1, &[(name, value)])
            .await?;
    }
    Ok(())
}

async fn incremental_alter_configs(s: &mut Session) -> Step {
    let t = s.name("t");
    s.create_topic_with("create", &t, 1, &[]).await?;
    let name = t.as_str();
    let one = |configs: AlterOps<'static>| [(TOPIC, name, configs)];
    s.incremental_alter_configs(
        "set retention.ms, append compact",
        &one(&[
            ("retention.ms", SET, Some("60000")),
            ("cleanup.policy", APPEND, Some("compact")),
        ]),
        false,
    )
    .await?;
    s.describe_configs_showing(
        "after set",
        &t,
        ALTERED_KEYS,
        &[
            ("retention.ms", "60000"),
            ("cleanup.policy", "delete,compact"),
        ],
    )
    .await?;
    let refused: [(&str, AlterOps<'static>); 6] = [
        (
            "a bad value beside a good one",
            &[
                ("retention.bytes", SET, Some("1")),
                ("retention.ms", SET, Some("soon")),
            ],
        ),
        ("an unknown name", &[("no.such.config", SET, Some("1"))]),
        ("append to a number", &[("retention.ms", APPEND, Some("1"))]),
        (
            "subtract from a number",
            &[("retention.ms", SUBTRACT, Some("1"))],
        ),
        ("set null", &[("retention.ms", SET, None)]),
        (
            "one name twice",
            &[
                ("retention.ms", SET, Some("1")),
                ("retention.ms", DELETE, None),
            ],
        ),
    ];
    for (step, configs) in refused {
        s.incremental_alter_configs(step, &one(configs), false)
            .await?;
    }
    s.incremental_alter_configs(
        "validate only",
        &one(&[("retention.ms", SET, Some("1"))]),
        true,
    )
    .await?;
    s.describe_configs("unchanged", &t, ALTERED_KEYS).await?;
    s.incremental_alter_configs(
        "delete retention.ms, subtract delete",
        &one(&[
            ("retention.ms", DELETE, None),
            ("cleanup.policy", SUBTRACT, Some("delete")),
        ]),
        false,
    )
    .await?;
    s.describe_configs_showing(
        "after delete",
        &t,
        ALTERED_KEYS,
        &[("retention.ms", "604800000"), ("cleanup.policy", "compact")],
    )
    .await?;
    s.incremental_alter_configs(
        "delete what is not set",
        &one(&[("segment.bytes", DELETE, None)]),
        false,
    )
    .await?;
    let missing = s.name("missing");
    let set_ms: AlterOps<'static> = &[("retention.ms", SET, Some("1"))];
    s.incremental_alter_configs(
        "an unknown topic, a topic twice",
        &[
            (TOPIC, missing.as_str(), set_ms),
            (TOPIC, t.as_str(), set_ms),
            (TOPIC, t.as_str(), set_ms),
        ],
        false,
    )
    .await?;
    s.incremental_alter_configs(
        "a broker's static config",
        &[(BROKER, "", &[("broker.id", SET, Some("7"))])],
        false,
    )
    .await?;
    // Dynamic broker configs (KIP-226) on the cluster default, validated
    // only: Kafka's node is shared by every scenario.
    s.incremental_alter_configs(
        "a dynamic broker default, validate only",
        &[(BROKER, "", &[("log.retention.ms", SET, Some("86400000"))])],
        true,
    )
    .await?;
    s.incremental_alter_configs(
        "a dynamic broker default beside a static config",
        &[(
            BROKER,
            "",
            &[
                ("log.retention.ms", SET, Some("86400000")),
                ("num.partitions", SET, Some("3")),
            ],
        )],
        true,
    )
    .await?;
    s.incremental_alter_configs(
        "a dynamic broker default with a bad value",
        &[(BROKER, "", &[("log.segment.bytes", SET, Some("soon"))])],
        true,
    )
    .await?;
    s.describe_configs("at the end", &t, ALTERED_KEYS).await?;
    Ok(())
}

async fn alter_configs(s: &mut Session) -> Step {
    let t = s.name("t");
    s.create_topic_with("create", &t, 1, &[("retention.ms", "60000")])
        .await?;
    s.alter_configs(
        "replace with retention.bytes",
        &t,
        &[("retention.bytes", Some("5000"))],
        false,
    )
    .await?;
    s.describe_configs_showing(
        "after replace",
        &t,
        ALTERED_KEYS,
        &[("retention.bytes", "5000"), ("retention.ms", "604800000")],
    )
    .await?;
    s.alter_configs("a bad value", &t, &[("segment.bytes", Some("-5"))], false)
        .await?;
    s.alter_configs(
        "an unknown name",
        &t,
        &[("no.such.config", Some("1"))],
        false,
    )
    .await?;
    s.alter_configs("validate only", &t, &[("retention.ms", Some("1"))], true)
        .await?;
    s.describe_configs("unchanged", &t, ALTERED_KEYS).await?;
    let missing = s.name("missing");
    s.alter_configs(
        "an unknown topic",
        &missing,
        &[("retention.ms", Some("1"))],
        false,
    )
    .await?;
    s.alter_configs("replace with nothing", &t, &[], false)
        .await?;
    s.describe_configs_showing(
        "all defaults",
        &t,
        ALTERED_KEYS,
        &[("retention.bytes", "-1")],
    )
    .await?;
    Ok(())
}

async fn metadata_auto_create(s: &mut Session) -> Step {
    let no = s.name("no");
    s.metadata("allow_auto_topic_creation=false", &[&no], false)
        .await?;
    let yes = s.name("yes");
    // Kafka answers LEADER_NOT_AVAILABLE while the new topic gets its
    // leader, kaas NONE at once; what a client ends up with is the same.
    let version = s.version(metadata_request::API_KEY)?;
    let body = crate::ops::metadata_body(Some(&[&yes]), true);
    let r = call_as!(s, Metadata, version, body, "auto-create");
    let code = r.topics.first().map_or(-100, |t| t.error_code);
    s.observe("auto-create answered", err(code));
    s.wait_ready(&yes, 1).await?;
    s.metadata("auto-created", &[&yes], false).await?;
    Ok(())
}

async fn metadata_all(s: &mut Session) -> Step {
    let a = s.create_topic("a", 2).await?;
    let version = s.version(metadata_request::API_KEY)?;
    let body = crate::ops::metadata_body(None, false);
    let r = call_as!(s, Metadata, version, body, "all topics");
    let found = r
        .topics
        .iter()
        .any(|t| t.name.as_deref() == Some(a.as_str()) && t.partitions.len() == 2);
    s.observe("new topic among all", json!(found));
    s.observe("one broker", json!(r.brokers.len()));
    s.observe(
        "cluster id present",
        json!(r.cluster_id.as_deref().is_some_and(|c| !c.is_empty())),
    );
    s.observe(
        "controller is a broker",
        json!(r.brokers.iter().any(|b| b.node_id == r.controller_id)),
    );
    Ok(())
}

async fn describe_cluster(s: &mut Session) -> Step {
    s.describe_cluster("describe cluster").await
}

async fn offset_for_leader_epoch(s: &mut Session) -> Step {
    let t = s.create_topic("t", 1).await?;
    s.produce("produce 4", &t, 0, plain_batch(s.t0, 0, 4), -1)
        .await?;
    // Which epoch the leader is at differs by design (see docs/oracle.md);
    // ask relative to the epoch Metadata reports.
    let epoch = s.leader_epoch(&t, 0).await?;
    for (step, current, asked) in [
        ("current epoch", -1, epoch),
        ("an older epoch", -1, epoch - 1),
        ("a future epoch", -1, epoch + 5),
        ("fenced: current_leader_epoch too old", epoch - 1, epoch),
        ("unknown: current_leader_epoch too new", epoch + 5, epoch),
    ] {
        s.offset_for_leader_epoch(step, &t, current, asked, epoch)
            .await?;
    }
    Ok(())
}
