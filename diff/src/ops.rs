//! The requests scenarios send most, each with what it writes down.
//!
//! Every operation uses the highest version both brokers serve unless the
//! caller names one, and observes what a client could act on: error codes,
//! offsets, watermarks, records. Throttle times, error messages, node ids
//! and endpoints are left out (they are the broker's own business).

use crate::observe::{batches, err};
use crate::session::{Answer, Session, Step, Stop};
use bytes::Bytes;
use kaas_core::protocol::messages::*;
use kaas_core::protocol::{RequestBody, ResponseBody, Uuid};
use kaas_core::record::{BatchBuilder, NewRecord};
use serde_json::{json, Value};
use std::time::Duration;

/// How long a new topic may take to get a leader (Kafka publishes it
/// through its metadata log a moment after CreateTopics answers).
const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// A Fetch of one partition, with the knobs scenarios turn.
#[derive(Debug, Clone, Copy)]
pub struct FetchSpec {
    pub partition: i32,
    pub offset: i64,
    pub max_wait_ms: i32,
    pub min_bytes: i32,
    pub max_bytes: i32,
    pub partition_max_bytes: i32,
    pub isolation_level: i8,
    pub current_leader_epoch: i32,
}

impl FetchSpec {
    pub fn at(partition: i32, offset: i64) -> FetchSpec {
        FetchSpec {
            partition,
            offset,
            max_wait_ms: 0,
            min_bytes: 1,
            max_bytes: 1 << 20,
            partition_max_bytes: 1 << 20,
            isolation_level: 0,
            current_leader_epoch: -1,
        }
    }
}

/// A batch of `n` plain records: keys `k<first+i>`, values `v<first+i>`,
/// timestamps `t0 + first + i`.
pub fn plain_batch(t0: i64, first: i64, n: i64) -> Bytes {
    records(BatchBuilder::new(), t0, first, n)
}

/// The same records from an idempotent producer.
pub fn idempotent_batch(t0: i64, first: i64, n: i64, pid: i64, epoch: i16, seq: i32) -> Bytes {
    records(BatchBuilder::idempotent(pid, epoch, seq), t0, first, n)
}

fn records(mut b: BatchBuilder, t0: i64, first: i64, n: i64) -> Bytes {
    for i in first..first + n {
        let key = format!("k{i}");
        let value = format!("v{i}");
        b.push(NewRecord::new(
            t0 + i,
            Some(key.as_bytes()),
            Some(value.as_bytes()),
        ));
    }
    b.build().into_bytes()
}

impl Session {
    /// Creates `topic` (a full name) with `partitions` and `configs`;
    /// observes the error code and, on success, waits until the topic has
    /// a leader for every partition.
    pub async fn create_topic_with(
        &mut self,
        step: &str,
        topic: &str,
        partitions: i32,
        configs: &[(&str, &str)],
    ) -> Step<i16> {
        let version = self.version(create_topics_request::API_KEY)?;
        let body = RequestBody::CreateTopics(CreateTopicsRequest {
            topics: vec![create_topics_request::CreatableTopic {
                name: topic.into(),
                num_partitions: partitions,
                // -1 (the broker's default) only from v4.
                replication_factor: if version >= 4 { -1 } else { 1 },
                configs: configs
                    .iter()
                    .map(|(k, v)| create_topics_request::CreatableTopicConfig {
                        name: (*k).into(),
                        value: Some((*v).into()),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }],
            timeout_ms: 10_000,
            validate_only: false,
            ..Default::default()
        });
        let r = call_as!(self, CreateTopics, version, body, step);
        let code = r.topics.first().map_or(-100, |t| t.error_code);
        let partitions_seen = r.topics.first().map_or(-100, |t| t.num_partitions);
        self.observe(
            step,
            json!({"error": err(code), "partitions": partitions_seen}),
        );
        if code == 0 {
            self.wait_ready(topic, partitions).await?;
        }
        Ok(code)
    }

    /// Creates a topic under this run's name for `short`; returns the full name.
    pub async fn create_topic(&mut self, short: &str, partitions: i32) -> Step<String> {
        let topic = self.name(short);
        let code = self
            .create_topic_with(&format!("create {short}"), &topic, partitions, &[])
            .await?;
        if code != 0 {
            return Err(Stop(format!("cannot create {topic}: {code}")));
        }
        Ok(topic)
    }

    /// Waits (not observed) until every partition of `topic` has a leader
    /// and answers ListOffsets, remembering the topic id on the way.
    pub async fn wait_ready(&mut self, topic: &str, partitions: i32) -> Step {
        let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
        loop {
            if self.is_ready(topic, partitions).await {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                self.observe(
                    format!("wait for {}", self.local(topic)),
                    json!("never ready"),
                );
                return Err(Stop(format!("{topic} never got leaders")));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn is_ready(&mut self, topic: &str, partitions: i32) -> bool {
        let Some(id) = self.describe_topic_id(topic).await else {
            return false;
        };
        self.topic_ids.insert(topic.to_owned(), id);
        for p in 0..partitions {
            let Ok(version) = self.latest_version(list_offsets_request::API_KEY) else {
                return false;
            };
            let body = list_offsets_body(topic, p, -1, 0);
            match self.try_call(version, &body).await {
                Answer::Body(ResponseBody::ListOffsets(r)) => {
                    let code = r
                        .topics
                        .first()
                        .and_then(|t| t.partitions.first())
                        .map_or(-100, |p| p.error_code);
                    if code != 0 {
                        return false;
                    }
                }
                _ => return false,
            }
        }
        true
    }

    /// The topic id from Metadata when every partition has a leader.
    async fn describe_topic_id(&mut self, topic: &str) -> Option<Uuid> {
        let version = self.latest_version(metadata_request::API_KEY).ok()?;
        let body = metadata_body(Some(&[topic]), false);
        let Answer::Body(ResponseBody::Metadata(r)) = self.try_call(version, &body).await else {
            return None;
        };
        let t = r.topics.first()?;
        let led = !t.partitions.is_empty()
            && t.partitions
                .iter()
                .all(|p| p.error_code == 0 && p.leader_id >= 0);
        (t.error_code == 0 && led).then_some(t.topic_id)
    }

    /// The id of a topic this session created or waited for (zero if none).
    pub fn topic_id(&self, topic: &str) -> Uuid {
        self.topic_ids.get(topic).copied().unwrap_or(Uuid::ZERO)
    }

    pub(crate) fn wrong_answer(&mut self, step: &str) -> Stop {
        self.observe(step, json!("answer of another API"));
        Stop(format!("{step}: answer of another API"))
    }

    /// Produces `records` to one partition; observes error, base offset,
    /// log start and per-record errors.
    pub async fn produce(
        &mut self,
        step: &str,
        topic: &str,
        partition: i32,
        records: Bytes,
        acks: i16,
    ) -> Step {
        let version = self.version(produce_request::API_KEY)?;
        self.produce_at(step, version, topic, partition, records, acks)
            .await
    }

    pub async fn produce_at(
        &mut self,
        step: &str,
        version: i16,
        topic: &str,
        partition: i32,
        records: Bytes,
        acks: i16,
    ) -> Step {
        let mut body =
            kaas_net::client::single_partition_produce(topic, partition, records, acks, 10_000);
        if let RequestBody::Produce(p) = &mut body {
            for t in &mut p.topic_data {
                t.topic_id = self.topic_id(topic);
            }
        }
        if acks == 0 {
            self.send_oneway(version, body).await?;
            self.observe(step, json!("sent, no answer expected"));
            return Ok(());
        }
        let r = call_as!(self, Produce, version, body, step);
        let p = r
            .responses
            .first()
            .and_then(|t| t.partition_responses.first())
            .cloned()
            .unwrap_or_default();
        let record_errors: Vec<i32> = p.record_errors.iter().map(|e| e.batch_index).collect();
        self.observe(
            step,
            json!({
                "error": err(p.error_code),
                "base_offset": p.base_offset,
                "log_start": if version >= 5 { p.log_start_offset } else { -1 },
                "record_errors": record_errors,
            }),
        );
        Ok(())
    }

    /// Fetches one partition; observes error, watermarks, log start and the
    /// batches a consumer would see.
    pub async fn fetch(&mut self, step: &str, topic: &str, spec: FetchSpec) -> Step {
        let version = self.version(fetch_request::API_KEY)?;
        self.fetch_at(step, version, topic, spec).await
    }

    pub async fn fetch_at(
        &mut self,
        step: &str,
        version: i16,
        topic: &str,
        spec: FetchSpec,
    ) -> Step {
        let body = RequestBody::Fetch(FetchRequest {
            replica_id: -1,
            max_wait_ms: spec.max_wait_ms,
            min_bytes: spec.min_bytes,
            max_bytes: spec.max_bytes,
            isolation_level: spec.isolation_level,
            session_id: 0,
            session_epoch: -1,
            topics: vec![fetch_request::FetchTopic {
                topic: topic.into(),
                topic_id: self.topic_id(topic),
                partitions: vec![fetch_request::FetchPartition {
                    partition: spec.partition,
                    current_leader_epoch: spec.current_leader_epoch,
                    fetch_offset: spec.offset,
                    last_fetched_epoch: -1,
                    log_start_offset: -1,
                    partition_max_bytes: spec.partition_max_bytes,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        });
        let r = call_as!(self, Fetch, version, body, step);
        let p = r
            .responses
            .first()
            .and_then(|t| t.partitions.first())
            .cloned()
            .unwrap_or_default();
        let seen = batches(self, p.records.as_ref());
        let aborted = p.aborted_transactions.as_ref().map(|a| a.len());
        self.observe(
            step,
            json!({
                "error": err(r.error_code.max(p.error_code)),
                "top_error": err(r.error_code),
                "high_watermark": p.high_watermark,
                "last_stable": if version >= 4 { p.last_stable_offset } else { -1 },
                "log_start": if version >= 5 { p.log_start_offset } else { -1 },
                "aborted": aborted,
                "batches": seen,
            }),
        );
        Ok(())
    }

    /// ListOffsets of one partition at `timestamp` (-1 latest, -2
    /// earliest, -3 max timestamp, or a time); observes error, offset and
    /// the found record's timestamp relative to t0.
    pub async fn list_offset(
        &mut self,
        step: &str,
        topic: &str,
        partition: i32,
        timestamp: i64,
        isolation_level: i8,
    ) -> Step<i64> {
        let version = self.version(list_offsets_request::API_KEY)?;
        let body = list_offsets_body(topic, partition, timestamp, isolation_level);
        let r = call_as!(self, ListOffsets, version, body, step);
        let p = r
            .topics
            .first()
            .and_then(|t| t.partitions.first())
            .cloned()
            .unwrap_or_default();
        let ts = if p.timestamp >= 0 && timestamp != -1 && timestamp != -2 {
            json!(p.timestamp - self.t0)
        } else {
            json!(p.timestamp)
        };
        self.observe(
            step,
            json!({"error": err(p.error_code), "offset": p.offset, "timestamp": ts}),
        );
        Ok(p.offset)
    }

    /// Metadata for `topics` (full names; `None`: all) as a client reads
    /// it: per topic its error, partition count, whether each has a leader.
    pub async fn metadata(
        &mut self,
        step: &str,
        topics: &[&str],
        auto_create: bool,
    ) -> Step<Value> {
        let version = self.version(metadata_request::API_KEY)?;
        let body = metadata_body(Some(topics), auto_create);
        let r = call_as!(self, Metadata, version, body, step);
        let seen = self.metadata_topics(&r);
        self.observe(step, seen.clone());
        Ok(seen)
    }

    pub fn metadata_topics(&mut self, r: &MetadataResponse) -> Value {
        let topics: Vec<Value> = r
            .topics
            .iter()
            .map(|t| {
                json!({
                    "name": t.name.as_deref().map(|n| self.local(n)),
                    "error": err(t.error_code),
                    "internal": t.is_internal,
                    // Clients index partitions by number; Kafka lists them
                    // in no particular order.
                    "partitions": sorted_by_index(t.partitions.iter().map(|p| (p.partition_index, json!({
                        "index": p.partition_index,
                        "error": err(p.error_code),
                        "has_leader": p.leader_id >= 0,
                    })))),
                })
            })
            .collect();
        json!(topics)
    }

    /// DeleteRecords of one partition before `offset`; observes the error
    /// and the new low watermark.
    pub async fn delete_records(
        &mut self,
        step: &str,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> Step<i16> {
        let version = self.version(delete_records_request::API_KEY)?;
        let body = RequestBody::DeleteRecords(DeleteRecordsRequest {
            topics: vec![delete_records_request::DeleteRecordsTopic {
                name: topic.into(),
                partitions: vec![delete_records_request::DeleteRecordsPartition {
                    partition_index: partition,
                    offset,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            timeout_ms: 10_000,
            ..Default::default()
        });
        let r = call_as!(self, DeleteRecords, version, body, step);
        let p = r
            .topics
            .first()
            .and_then(|t| t.partitions.first())
            .cloned()
            .unwrap_or_default();
        self.observe(
            step,
            json!({"error": err(p.error_code), "low_watermark": p.low_watermark}),
        );
        Ok(p.error_code)
    }

    /// A non-transactional InitProducerId; observes the error and epoch
    /// and returns (producer id, epoch).
    pub async fn init_producer_id(&mut self, step: &str) -> Step<(i64, i16)> {
        let version = self.version(init_producer_id_request::API_KEY)?;
        let body = RequestBody::InitProducerId(InitProducerIdRequest {
            transactional_id: None,
            transaction_timeout_ms: -1,
            producer_id: -1,
            producer_epoch: -1,
            ..Default::default()
        });
        // A fresh Kafka answers COORDINATOR_LOAD_IN_PROGRESS until its
        // producer id manager is ready; clients retry, and so do we,
        // writing down only the answer they act on.
        let mut tries = 0;
        let r = loop {
            let r = call_as!(self, InitProducerId, version, body.clone(), step);
            tries += 1;
            if !matches!(r.error_code, 14..=16) || tries >= 100 {
                break r;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let pid = self.alias("pid", r.producer_id);
        self.observe(
            step,
            json!({"error": err(r.error_code), "producer_id": pid, "epoch": r.producer_epoch}),
        );
        Ok((r.producer_id, r.producer_epoch))
    }
}

fn sorted_by_index(items: impl Iterator<Item = (i32, Value)>) -> Vec<Value> {
    let mut v: Vec<(i32, Value)> = items.collect();
    v.sort_by_key(|(i, _)| *i);
    v.into_iter().map(|(_, x)| x).collect()
}

pub fn list_offsets_body(
    topic: &str,
    partition: i32,
    timestamp: i64,
    isolation_level: i8,
) -> RequestBody {
    RequestBody::ListOffsets(ListOffsetsRequest {
        replica_id: -1,
        isolation_level,
        topics: vec![list_offsets_request::ListOffsetsTopic {
            name: topic.into(),
            partitions: vec![list_offsets_request::ListOffsetsPartition {
                partition_index: partition,
                current_leader_epoch: -1,
                timestamp,
                ..Default::default()
            }],
            ..Default::default()
        }],
        timeout_ms: 10_000,
        ..Default::default()
    })
}

pub fn metadata_body(topics: Option<&[&str]>, auto_create: bool) -> RequestBody {
    RequestBody::Metadata(MetadataRequest {
        topics: topics.map(|ts| {
            ts.iter()
                .map(|t| metadata_request::MetadataRequestTopic {
                    name: Some((*t).into()),
                    ..Default::default()
                })
                .collect()
        }),
        allow_auto_topic_creation: auto_create,
        ..Default::default()
    })
}

/// Config keys every client reads and both brokers should agree on.
pub const TOPIC_KEYS: &[&str] = &[
    "cleanup.policy",
    "retention.ms",
    "retention.bytes",
    "max.message.bytes",
    "message.timestamp.type",
    "min.insync.replicas",
    "compression.type",
];

impl Session {
    /// DescribeConfigs of a topic's `keys`: the error and count, then one
    /// step per key, in `keys` order, so a difference names its key.
    pub async fn describe_configs(&mut self, step: &str, topic: &str, keys: &[&str]) -> Step {
        let version = self.version(describe_configs_request::API_KEY)?;
        let body = RequestBody::DescribeConfigs(DescribeConfigsRequest {
            resources: vec![describe_configs_request::DescribeConfigsResource {
                resource_type: 2,
                resource_name: topic.into(),
                configuration_keys: Some(keys.iter().map(|k| (*k).to_owned()).collect()),
                ..Default::default()
            }],
            ..Default::default()
        });
        let r = call_as!(self, DescribeConfigs, version, body, step);
        let res = r.results.first().cloned().unwrap_or_default();
        self.observe(
            step,
            json!({"error": err(res.error_code), "count": res.configs.len()}),
        );
        for key in keys {
            if let Some(c) = res.configs.iter().find(|c| c.name == *key) {
                self.observe(
                    format!("{step}: {key}"),
                    json!({"value": c.value, "source": c.config_source, "read_only": c.read_only, "sensitive": c.is_sensitive}),
                );
            }
        }
        Ok(())
    }

    /// CreatePartitions of `topic` to `count`; observes the error.
    pub async fn create_partitions(&mut self, step: &str, topic: &str, count: i32) -> Step<i16> {
        let version = self.version(create_partitions_request::API_KEY)?;
        let body = RequestBody::CreatePartitions(CreatePartitionsRequest {
            topics: vec![create_partitions_request::CreatePartitionsTopic {
                name: topic.into(),
                count,
                assignments: None,
                ..Default::default()
            }],
            timeout_ms: 10_000,
            validate_only: false,
            ..Default::default()
        });
        let r = call_as!(self, CreatePartitions, version, body, step);
        let code = r.results.first().map_or(-100, |r| r.error_code);
        self.observe(step, json!({"error": err(code)}));
        Ok(code)
    }

    /// The leader epoch Metadata reports for a partition (not observed:
    /// its value is the broker's own, see docs/oracle.md).
    pub async fn leader_epoch(&mut self, topic: &str, partition: i32) -> Step<i32> {
        let version = self.latest_version(metadata_request::API_KEY)?;
        let m = call_as!(
            self,
            Metadata,
            version,
            metadata_body(Some(&[topic]), false),
            "metadata"
        );
        Ok(m.topics
            .first()
            .and_then(|t| t.partitions.iter().find(|p| p.partition_index == partition))
            .map_or(-1, |p| p.leader_epoch))
    }

    /// OffsetForLeaderEpoch of one partition; observes the error, the
    /// epoch found relative to `base_epoch`, and its end offset.
    pub async fn offset_for_leader_epoch(
        &mut self,
        step: &str,
        topic: &str,
        current: i32,
        asked: i32,
        base_epoch: i32,
    ) -> Step {
        let version = self.version(offset_for_leader_epoch_request::API_KEY)?;
        let body = RequestBody::OffsetForLeaderEpoch(OffsetForLeaderEpochRequest {
            replica_id: -1,
            topics: vec![offset_for_leader_epoch_request::OffsetForLeaderTopic {
                topic: topic.into(),
                partitions: vec![offset_for_leader_epoch_request::OffsetForLeaderPartition {
                    partition: 0,
                    current_leader_epoch: current,
                    leader_epoch: asked,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        });
        let r = call_as!(self, OffsetForLeaderEpoch, version, body, step);
        let p = r
            .topics
            .first()
            .and_then(|t| t.partitions.first())
            .cloned()
            .unwrap_or_default();
        let rel = if p.leader_epoch >= 0 {
            json!(p.leader_epoch - base_epoch)
        } else {
            json!(p.leader_epoch)
        };
        self.observe(step, json!({"error": err(p.error_code), "epoch_minus_current": rel, "end_offset": p.end_offset}));
        Ok(())
    }

    /// DescribeProducers of `partitions` of `topic`: per partition its
    /// error and active producers (ids aliased, timestamps relative).
    pub async fn describe_producers(
        &mut self,
        step: &str,
        topic: &str,
        partitions: &[i32],
    ) -> Step {
        let version = self.version(describe_producers_request::API_KEY)?;
        let body = RequestBody::DescribeProducers(DescribeProducersRequest {
            topics: vec![describe_producers_request::TopicRequest {
                name: topic.into(),
                partition_indexes: partitions.to_vec(),
                ..Default::default()
            }],
            ..Default::default()
        });
        let r = call_as!(self, DescribeProducers, version, body, step);
        let mut parts = Vec::new();
        for pr in r.topics.iter().flat_map(|t| t.partitions.iter()) {
            let mut producers = Vec::new();
            for a in &pr.active_producers {
                producers.push(json!({
                    "pid": self.alias("pid", a.producer_id),
                    "epoch": a.producer_epoch,
                    "last_sequence": a.last_sequence,
                    "last_timestamp": if a.last_timestamp >= 0 { a.last_timestamp - self.t0 } else { a.last_timestamp },
                    "coordinator_epoch": a.coordinator_epoch,
                    "txn_start": a.current_txn_start_offset,
                }));
            }
            parts.push((
                pr.partition_index,
                json!([pr.partition_index, err(pr.error_code), producers]),
            ));
        }
        self.observe(step, json!(sorted_by_index(parts.into_iter())));
        Ok(())
    }

    /// DescribeCluster: its error, how many brokers, whether the controller
    /// is one of them, whether there is a cluster id, how many are fenced.
    pub async fn describe_cluster(&mut self, step: &str) -> Step {
        let version = self.version(describe_cluster_request::API_KEY)?;
        let body = RequestBody::DescribeCluster(DescribeClusterRequest {
            endpoint_type: 1,
            ..Default::default()
        });
        let r = call_as!(self, DescribeCluster, version, body, step);
        self.observe(
            step,
            json!({
                "error": err(r.error_code),
                "brokers": r.brokers.len(),
                "controller_is_a_broker": r.brokers.iter().any(|b| b.broker_id == r.controller_id),
                "cluster_id_present": !r.cluster_id.is_empty(),
                "fenced": r.brokers.iter().filter(|b| b.is_fenced).count(),
            }),
        );
        Ok(())
    }

    /// Deletes `topic` by name (by the topic id list of v6+); observes the
    /// error, then waits until Metadata no longer shows it.
    pub async fn delete_topic(&mut self, step: &str, topic: &str) -> Step<i16> {
        let version = self.version(delete_topics_request::API_KEY)?;
        let body = RequestBody::DeleteTopics(DeleteTopicsRequest {
            topics: if version >= 6 {
                vec![delete_topics_request::DeleteTopicState {
                    name: Some(topic.into()),
                    ..Default::default()
                }]
            } else {
                Vec::new()
            },
            topic_names: if version >= 6 {
                Vec::new()
            } else {
                vec![topic.into()]
            },
            timeout_ms: 10_000,
            ..Default::default()
        });
        let r = call_as!(self, DeleteTopics, version, body, step);
        let code = r.responses.first().map_or(-100, |t| t.error_code);
        self.observe(step, json!({"error": err(code)}));
        if code == 0 {
            self.wait_gone(&[topic]).await?;
        }
        Ok(code)
    }

    /// Waits (not observed) until Metadata says none of `topics` exists:
    /// deletion completes asynchronously on Kafka.
    pub async fn wait_gone(&mut self, topics: &[&str]) -> Step {
        let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
        let version = self.latest_version(metadata_request::API_KEY)?;
        while tokio::time::Instant::now() < deadline {
            let body = metadata_body(Some(topics), false);
            if let Answer::Body(ResponseBody::Metadata(r)) = self.try_call(version, &body).await {
                if r.topics.iter().all(|t| t.error_code == 3) {
                    return Ok(());
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }
}
