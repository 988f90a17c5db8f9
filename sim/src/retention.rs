//! Deleting from the main topic while the faults run (issue 13 item 4): a
//! third of the seeds ([`SimParams::with_retention`]) create the topic with
//! a short `retention.ms`, run a DeleteRecords actor, or both. What may go
//! is `crate::retention_history`'s to judge.
//!
//! - [`create_topic`]: CreateTopics of [`TOPIC`] with the seed's
//!   `retention.ms`, before any producer's first request auto-creates it
//!   with the broker's defaults (which keep everything: the other topics,
//!   transactional and exactly-once, must lose nothing).
//! - [`deleter`]: every `delete_every_ms` (jittered) picks a partition and
//!   asks its leader to delete the records before an offset up to the
//!   durable end the history knew a round before (so the newest records
//!   stay for the final read to compare), reporting the request and its
//!   answer: the low watermark, a refusal, or nothing.
//! - [`reset_to_earliest`]: what every reader of the topic does when a
//!   fetch is answered OFFSET_OUT_OF_RANGE (its position fell below the log
//!   start): ask ListOffsets EARLIEST and move there, as Kafka's consumer
//!   does with `auto.offset.reset=earliest`.

use crate::params::SimParams;
use crate::retention_history::DeleteOutcome;
use crate::router::{redirects, Router};
use crate::workload::{Backoff, Shared, TOPIC};
use kaas_core::protocol::messages::{
    create_topics_request, delete_records_request, list_offsets_request, CreateTopicsRequest,
    DeleteRecordsRequest, ListOffsetsRequest,
};
use kaas_core::protocol::{ErrorCode, RequestBody, ResponseBody};
use kaas_net::client::Connection;
use madsim::rand::{thread_rng, Rng};
use madsim::time::sleep;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

const CREATE_TOPICS_VERSION: i16 = 5;
const DELETE_RECORDS_VERSION: i16 = 2;
const LIST_OFFSETS_VERSION: i16 = 7;
/// ListOffsets' timestamp asking for the log start.
const EARLIEST: i64 = -2;
/// How long the broker may take to delete (it persists the new start).
const DELETE_TIMEOUT_MS: i32 = 5_000;

/// Creates [`TOPIC`] with the seed's `retention.ms`, asking each broker in
/// turn until one creates it or says it exists.
pub async fn create_topic(params: SimParams, brokers: Vec<SocketAddr>, shared: Arc<Shared>) {
    let Some(r) = params.retention else {
        return;
    };
    shared.history().retention.set_deleting(r.retention_ms);
    if r.retention_ms < 0 {
        // Nothing to configure: the first Produce auto-creates it.
        return;
    }
    let body = RequestBody::CreateTopics(CreateTopicsRequest {
        topics: vec![create_topics_request::CreatableTopic {
            name: TOPIC.into(),
            num_partitions: params.partitions,
            replication_factor: 1,
            configs: vec![create_topics_request::CreatableTopicConfig {
                name: "retention.ms".into(),
                value: Some(r.retention_ms.to_string()),
                ..Default::default()
            }],
            ..Default::default()
        }],
        timeout_ms: 10_000,
        ..Default::default()
    });
    let mut backoff = Backoff::new();
    let mut conn = None;
    for attempt in 0.. {
        let addr = brokers[attempt % brokers.len()];
        let answer = crate::workload::request_once(
            &mut conn,
            addr,
            create_topics_request::API_KEY,
            CREATE_TOPICS_VERSION,
            &body,
            |m| shared.history().violation(m),
        )
        .await;
        if let Some(ResponseBody::CreateTopics(resp)) = answer {
            let code = resp.topics.first().map_or(-1, |t| t.error_code);
            if code == 0 || code == ErrorCode::TopicAlreadyExists.code() {
                return;
            }
            if code == ErrorCode::InvalidConfig.code() {
                shared.history().violation(format!(
                    "CreateTopics of {TOPIC} refused retention.ms={}",
                    r.retention_ms
                ));
                return;
            }
        }
        backoff.wait().await;
    }
}

/// The DeleteRecords actor: see the module documentation.
pub async fn deleter(params: SimParams, brokers: Vec<SocketAddr>, shared: Arc<Shared>) {
    let Some(every) = params
        .retention
        .map(|r| r.delete_every_ms)
        .filter(|&ms| ms > 0)
    else {
        return;
    };
    let mut router = Router::new("deleter", &brokers);
    let mut conn: Option<Connection> = None;
    // Per partition, the durable end the history knew at the last visit.
    let mut known_end: BTreeMap<i32, i64> = BTreeMap::new();
    while !shared.stop_producing.load(Relaxed) {
        let (pause, partition) = {
            let mut rng = thread_rng();
            (
                Duration::from_millis(rng.gen_range(every / 2..=every * 3 / 2)),
                rng.gen_range(0..params.partitions),
            )
        };
        sleep(pause).await;
        let (durable, requested, floor) = {
            let h = shared.history();
            (
                h.fetch_floor(partition),
                h.retention.requested(partition),
                h.retention.start_floor(partition),
            )
        };
        // Up to what was durable a visit ago, never beyond: a request past
        // the high watermark is refused, and one at the end would leave
        // the final read nothing to compare.
        let limit = known_end.insert(partition, durable).unwrap_or(0);
        if limit <= requested {
            continue;
        }
        let offset = thread_rng().gen_range(requested + 1..=limit);
        let Some(leader) = router.leader(partition, &shared).await else {
            continue;
        };
        shared.history().retention.delete_sent(partition, offset);
        let body = RequestBody::DeleteRecords(DeleteRecordsRequest {
            topics: vec![delete_records_request::DeleteRecordsTopic {
                name: TOPIC.into(),
                partitions: vec![delete_records_request::DeleteRecordsPartition {
                    partition_index: partition,
                    offset,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            timeout_ms: DELETE_TIMEOUT_MS,
            ..Default::default()
        });
        let answer = crate::workload::request_once(
            &mut conn,
            leader.addr,
            delete_records_request::API_KEY,
            DELETE_RECORDS_VERSION,
            &body,
            |m| shared.history().violation(m),
        )
        .await;
        let outcome = match answer {
            Some(ResponseBody::DeleteRecords(resp)) => resp
                .topics
                .iter()
                .filter(|t| t.name == TOPIC)
                .flat_map(|t| &t.partitions)
                .find(|p| p.partition_index == partition)
                .map_or(DeleteOutcome::Unknown, |p| {
                    if p.error_code == 0 {
                        DeleteOutcome::Acked(p.low_watermark)
                    } else {
                        DeleteOutcome::Refused(p.error_code)
                    }
                }),
            _ => DeleteOutcome::Unknown,
        };
        match outcome {
            DeleteOutcome::Refused(code) if redirects(code) => {
                shared.cluster().redirected();
                router.invalidate();
            }
            DeleteOutcome::Refused(code) if code == ErrorCode::OffsetOutOfRange.code() => {
                shared.history().violation(format!(
                    "partition {partition}: DeleteRecords before {offset} refused OFFSET_OUT_OF_RANGE, but offsets up to {durable} were durable before it was sent"
                ));
            }
            DeleteOutcome::Unknown => router.invalidate(),
            _ => {}
        }
        shared
            .history()
            .retention
            .delete_answered(partition, offset, floor, outcome);
    }
}

/// What [`reset_to_earliest`] found.
pub(crate) enum Reset {
    /// The log starts at this offset, above the position: records were
    /// deleted, the reader moves there.
    MovedTo(i64),
    /// The log starts at or below the position: the range error had
    /// another cause.
    NotBelow(i64),
    /// No answer: try again later.
    Failed,
}

/// After a fetch at `position` of `partition` was answered
/// OFFSET_OUT_OF_RANGE: ListOffsets EARLIEST to `addr` (the partition's
/// leader at `epoch`, -1 if unknown), its answer checked against the log
/// start known before it was sent.
pub(crate) async fn reset_to_earliest(
    conn: &mut Option<Connection>,
    addr: SocketAddr,
    partition: i32,
    epoch: i32,
    position: i64,
    shared: &Shared,
) -> Reset {
    let floor = shared.history().retention.start_floor(partition);
    let body = RequestBody::ListOffsets(ListOffsetsRequest {
        replica_id: -1,
        isolation_level: 0,
        topics: vec![list_offsets_request::ListOffsetsTopic {
            name: TOPIC.into(),
            partitions: vec![list_offsets_request::ListOffsetsPartition {
                partition_index: partition,
                current_leader_epoch: epoch,
                timestamp: EARLIEST,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    });
    let answer = crate::workload::request_once(
        conn,
        addr,
        list_offsets_request::API_KEY,
        LIST_OFFSETS_VERSION,
        &body,
        |m| shared.history().violation(m),
    )
    .await;
    let Some(ResponseBody::ListOffsets(resp)) = answer else {
        return Reset::Failed;
    };
    let Some(start) = resp
        .topics
        .iter()
        .filter(|t| t.name == TOPIC)
        .flat_map(|t| &t.partitions)
        .find(|p| p.partition_index == partition && p.error_code == 0)
        .map(|p| p.offset)
    else {
        return Reset::Failed;
    };
    let mut history = shared.history();
    history
        .retention
        .start_seen(partition, floor, start, "ListOffsets EARLIEST");
    if start > position {
        history.retention.reset();
        Reset::MovedTo(start)
    } else {
        Reset::NotBelow(start)
    }
}
