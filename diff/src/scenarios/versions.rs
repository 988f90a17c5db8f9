//! Every API at every version both brokers serve.
//!
//! `versions/api-versions` compares the ApiVersions lists themselves. The
//! sweeps run one realistic cycle of requests once per version of one API,
//! with that API pinned to the version and every other at its highest: a
//! topic's life for the partition APIs, a group's life for the group APIs,
//! a producer's for InitProducerId and DescribeProducers.

use super::groups::{
    commit, coordinator_ready, delete_group, describe, fetch_offsets, heartbeat, join_new, leave,
    list_has, offset_delete, sync_alone, Join,
};
use super::Scenario;
use crate::observe::err;
use crate::ops::{idempotent_batch, plain_batch, FetchSpec, TOPIC_KEYS};
use crate::session::{Session, Step};
use kaas_core::protocol::messages::*;
use kaas_core::protocol::RequestBody;
use serde_json::json;

/// The APIs whose schemas kaas's codec has: beyond these, an API is only
/// compared by its ApiVersions entry.
const KNOWN_APIS: &[(i16, &str)] = &[
    (0, "Produce"),
    (1, "Fetch"),
    (2, "ListOffsets"),
    (3, "Metadata"),
    (8, "OffsetCommit"),
    (9, "OffsetFetch"),
    (10, "FindCoordinator"),
    (11, "JoinGroup"),
    (12, "Heartbeat"),
    (13, "LeaveGroup"),
    (14, "SyncGroup"),
    (15, "DescribeGroups"),
    (16, "ListGroups"),
    (18, "ApiVersions"),
    (19, "CreateTopics"),
    (20, "DeleteTopics"),
    (21, "DeleteRecords"),
    (22, "InitProducerId"),
    (23, "OffsetForLeaderEpoch"),
    (24, "AddPartitionsToTxn"),
    (25, "AddOffsetsToTxn"),
    (26, "EndTxn"),
    (27, "WriteTxnMarkers"),
    (28, "TxnOffsetCommit"),
    (32, "DescribeConfigs"),
    (33, "AlterConfigs"),
    (35, "DescribeLogDirs"),
    (37, "CreatePartitions"),
    (42, "DeleteGroups"),
    (44, "IncrementalAlterConfigs"),
    (47, "OffsetDelete"),
    (60, "DescribeCluster"),
    (61, "DescribeProducers"),
    (65, "DescribeTransactions"),
    (66, "ListTransactions"),
];

/// Which cycle exercises an API.
#[derive(Clone, Copy)]
enum Cycle {
    Topic,
    Group,
    Producer,
}

macro_rules! sweep {
    ($name:literal, $api:expr, $cycle:expr) => {
        Scenario {
            name: $name,
            about: "one cycle per version both brokers serve",
            run: |s| Box::pin(sweep(s, $api, $cycle)),
        }
    };
}

pub fn scenarios() -> Vec<Scenario> {
    use Cycle::*;
    vec![
        Scenario {
            name: "versions/api-versions",
            about: "the ApiVersions lists, API by API, and ApiVersions at each version",
            run: |s| Box::pin(api_versions(s)),
        },
        sweep!("versions/produce", produce_request::API_KEY, Topic),
        sweep!("versions/fetch", fetch_request::API_KEY, Topic),
        sweep!(
            "versions/list-offsets",
            list_offsets_request::API_KEY,
            Topic
        ),
        sweep!("versions/metadata", metadata_request::API_KEY, Topic),
        sweep!(
            "versions/create-topics",
            create_topics_request::API_KEY,
            Topic
        ),
        sweep!(
            "versions/delete-topics",
            delete_topics_request::API_KEY,
            Topic
        ),
        sweep!(
            "versions/delete-records",
            delete_records_request::API_KEY,
            Topic
        ),
        sweep!(
            "versions/offset-for-leader-epoch",
            offset_for_leader_epoch_request::API_KEY,
            Topic
        ),
        sweep!(
            "versions/describe-configs",
            describe_configs_request::API_KEY,
            Topic
        ),
        sweep!(
            "versions/create-partitions",
            create_partitions_request::API_KEY,
            Topic
        ),
        sweep!(
            "versions/describe-cluster",
            describe_cluster_request::API_KEY,
            Topic
        ),
        sweep!(
            "versions/init-producer-id",
            init_producer_id_request::API_KEY,
            Producer
        ),
        sweep!(
            "versions/describe-producers",
            describe_producers_request::API_KEY,
            Producer
        ),
        sweep!(
            "versions/find-coordinator",
            find_coordinator_request::API_KEY,
            Group
        ),
        sweep!("versions/join-group", join_group_request::API_KEY, Group),
        sweep!("versions/sync-group", sync_group_request::API_KEY, Group),
        sweep!("versions/heartbeat", heartbeat_request::API_KEY, Group),
        sweep!("versions/leave-group", leave_group_request::API_KEY, Group),
        sweep!(
            "versions/offset-commit",
            offset_commit_request::API_KEY,
            Group
        ),
        sweep!(
            "versions/offset-fetch",
            offset_fetch_request::API_KEY,
            Group
        ),
        sweep!(
            "versions/describe-groups",
            describe_groups_request::API_KEY,
            Group
        ),
        sweep!("versions/list-groups", list_groups_request::API_KEY, Group),
        sweep!(
            "versions/delete-groups",
            delete_groups_request::API_KEY,
            Group
        ),
        sweep!(
            "versions/offset-delete",
            offset_delete_request::API_KEY,
            Group
        ),
    ]
}

async fn api_versions(s: &mut Session) -> Step {
    let mut listed = None;
    for version in 0..=3 {
        let body = RequestBody::ApiVersions(ApiVersionsRequest {
            client_software_name: "kaas-diff".into(),
            client_software_version: "0".into(),
            ..Default::default()
        });
        let r = call_as!(s, ApiVersions, version, body, "api versions");
        s.observe(
            format!("ApiVersions v{version}"),
            json!({"error": err(r.error_code), "apis": r.api_keys.len() > 20}),
        );
        listed = Some(r.api_keys);
    }
    let listed = listed.unwrap_or_default();
    for (key, name) in KNOWN_APIS {
        let range = listed
            .iter()
            .find(|k| k.api_key == *key)
            .map(|k| [k.min_version, k.max_version]);
        s.observe(format!("{key} {name}"), json!(range));
    }
    let mut others: Vec<_> = listed
        .iter()
        .filter(|k| !KNOWN_APIS.iter().any(|(key, _)| *key == k.api_key))
        .map(|k| [k.api_key, k.min_version, k.max_version])
        .collect();
    others.sort_unstable();
    s.observe("APIs beyond kaas's codec", json!(others));
    Ok(())
}

async fn sweep(s: &mut Session, api_key: i16, cycle: Cycle) -> Step {
    let Some((lo, hi)) = s.version_range(api_key) else {
        s.observe("versions", json!("not served by both"));
        return Ok(());
    };
    s.observe("versions", json!([lo, hi]));
    for v in lo..=hi {
        s.pin(api_key, Some(v));
        s.observe("version", json!(v));
        let short = format!("v{v}");
        match cycle {
            Cycle::Topic => topic_cycle(s, &short).await?,
            Cycle::Group => group_cycle(s, &short).await?,
            Cycle::Producer => producer_cycle(s, &short).await?,
        }
    }
    s.pin(api_key, None);
    Ok(())
}

/// A topic's life through every partition API.
async fn topic_cycle(s: &mut Session, short: &str) -> Step {
    let t = s.create_topic(short, 2).await?;
    s.metadata("metadata", &[&t], false).await?;
    s.produce("produce", &t, 0, plain_batch(s.t0, 0, 3), -1)
        .await?;
    s.produce("produce more", &t, 0, plain_batch(s.t0, 3, 2), -1)
        .await?;
    s.fetch("fetch", &t, FetchSpec::at(0, 1)).await?;
    s.fetch("fetch out of range", &t, FetchSpec::at(0, 9))
        .await?;
    s.list_offset("earliest", &t, 0, -2, 0).await?;
    s.list_offset("latest", &t, 0, -1, 0).await?;
    s.list_offset("by time", &t, 0, s.t0 + 3, 0).await?;
    let epoch = s.leader_epoch(&t, 0).await?;
    s.offset_for_leader_epoch("end of the current epoch", &t, -1, epoch, epoch)
        .await?;
    s.delete_records("delete records before 2", &t, 0, 2)
        .await?;
    s.list_offset("earliest after", &t, 0, -2, 0).await?;
    s.describe_configs("configs", &t, TOPIC_KEYS).await?;
    if s.create_partitions("grow to 3", &t, 3).await? == 0 {
        s.wait_ready(&t, 3).await?;
    }
    s.metadata("three partitions", &[&t], false).await?;
    s.describe_cluster("describe cluster").await?;
    s.delete_topic("delete", &t).await?;
    Ok(())
}

/// A group's life through every group API.
async fn group_cycle(s: &mut Session, short: &str) -> Step {
    let t = s.create_topic(&format!("{short}-t"), 1).await?;
    let g = s.name(&format!("{short}-g"));
    coordinator_ready(s, &g).await?;
    let j = join_new(s, "join", &Join::new(&g, &t)).await?;
    sync_alone(s, "sync", &g, &t, &j, &[0]).await?;
    heartbeat(s, "heartbeat", &g, j.generation, &j.member, None).await?;
    commit(s, "commit", &g, j.generation, &j.member, &t, &[(0, 1)]).await?;
    fetch_offsets(s, "fetch offsets", &g, Some((&t, &[0]))).await?;
    describe(s, "describe", &g).await?;
    list_has(s, "list", &g).await?;
    offset_delete(s, "offset delete", &g, &t).await?;
    leave(s, "leave", &g, &j.member).await?;
    offset_delete(s, "offset delete", &g, &t).await?;
    delete_group(s, "delete group", &g).await?;
    Ok(())
}

/// A producer's life: an id, two batches, a retry, what the partition shows.
async fn producer_cycle(s: &mut Session, short: &str) -> Step {
    let t = s.create_topic(short, 1).await?;
    let (pid, epoch) = s.init_producer_id("init producer id").await?;
    let first = idempotent_batch(s.t0, 0, 2, pid, epoch, 0);
    s.produce("seq 0", &t, 0, first.clone(), -1).await?;
    s.produce(
        "seq 2",
        &t,
        0,
        idempotent_batch(s.t0, 2, 1, pid, epoch, 2),
        -1,
    )
    .await?;
    s.produce("seq 0 again", &t, 0, first, -1).await?;
    s.describe_producers("describe producers", &t, &[0]).await?;
    Ok(())
}
