//! The requests scenarios send most, each with what it writes down.
//!
//! Every operation uses the highest version both brokers serve unless the
//! caller names one, and observes what a client could act on: error codes,
//! offsets, watermarks, records. Throttle times, error messages, node ids
//! and endpoints are left out (they are the broker's own business).

use crate::observe::{batches, err, producer};
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

/// Records `first..first + n` as [`plain_batch`] makes them, except that
/// those whose index in the batch is in `keyless` have no key.
pub fn batch_with_keyless(t0: i64, first: i64, n: i64, keyless: &[i64]) -> Bytes {
    let mut b = BatchBuilder::new();
    for i in first..first + n {
        let key = format!("k{i}");
        let value = format!("v{i}");
        let key = (!keyless.contains(&(i - first))).then_some(key.as_bytes());
        b.push(NewRecord::new(t0 + i, key, Some(value.as_bytes())));
    }
    b.build().into_bytes()
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
        self.produce_as(step, version, None, topic, partition, records, acks)
            .await
    }

    /// [`produce_at`](Self::produce_at) with the request's transactional
    /// id (a transactional batch needs one).
    #[allow(clippy::too_many_arguments)]
    pub async fn produce_as(
        &mut self,
        step: &str,
        version: i16,
        transactional_id: Option<&str>,
        topic: &str,
        partition: i32,
        records: Bytes,
        acks: i16,
    ) -> Step {
        let mut body =
            kaas_net::client::single_partition_produce(topic, partition, records, acks, 10_000);
        if let RequestBody::Produce(p) = &mut body {
            p.transactional_id = transactional_id.map(str::to_owned);
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
        // The aborted transactions a read_committed consumer skips: each
        // producer (aliased) and its transaction's first offset.
        let aborted = p.aborted_transactions.as_ref().map(|a| {
            let mut list: Vec<Value> = a
                .iter()
                .map(|t| json!([self.alias("pid", t.producer_id), t.first_offset]))
                .collect();
            list.sort_by_key(|v| v.to_string());
            list
        });
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
/// The configs of one IncrementalAlterConfigs resource: (config,
/// operation, value).
pub type AlterOps<'a> = &'a [(&'a str, i8, Option<&'a str>)];

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
        self.describe_configs_showing(step, topic, keys, &[]).await
    }

    /// [`describe_configs`](Self::describe_configs) once the broker shows
    /// `expect` (config -> value), for at most ten seconds. Kafka answers an
    /// alter once its controller has committed it and applies it on the
    /// broker a moment later (under load, several requests later); kaas
    /// applies before it answers. A client that reads back waits, as the
    /// e2e tests do; what is compared is the settled state.
    pub async fn describe_configs_showing(
        &mut self,
        step: &str,
        topic: &str,
        keys: &[&str],
        expect: &[(&str, &str)],
    ) -> Step {
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
        let mut tries = 0;
        let r = loop {
            let r = call_as!(self, DescribeConfigs, version, body.clone(), step);
            tries += 1;
            let shown = |(name, value): &(&str, &str)| {
                r.results.first().is_some_and(|res| {
                    res.configs
                        .iter()
                        .any(|c| c.name == *name && c.value.as_deref() == Some(*value))
                })
            };
            if expect.iter().all(shown) || tries >= 100 {
                break r;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
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

    /// IncrementalAlterConfigs of `resources`, each (resource type, name,
    /// [`AlterOps`]); observes each resource's error.
    pub async fn incremental_alter_configs(
        &mut self,
        step: &str,
        resources: &[(i8, &str, AlterOps<'_>)],
        validate_only: bool,
    ) -> Step {
        let version = self.version(incremental_alter_configs_request::API_KEY)?;
        let body = RequestBody::IncrementalAlterConfigs(IncrementalAlterConfigsRequest {
            resources: resources
                .iter()
                .map(|(kind, name, configs)| {
                    incremental_alter_configs_request::AlterConfigsResource {
                        resource_type: *kind,
                        resource_name: (*name).into(),
                        configs: configs
                            .iter()
                            .map(|(config, op, value)| {
                                incremental_alter_configs_request::AlterableConfig {
                                    name: (*config).into(),
                                    config_operation: *op,
                                    value: value.map(str::to_string),
                                    ..Default::default()
                                }
                            })
                            .collect(),
                        ..Default::default()
                    }
                })
                .collect(),
            validate_only,
            ..Default::default()
        });
        let r = call_as!(self, IncrementalAlterConfigs, version, body, step);
        let errors: Vec<_> = r.responses.iter().map(|r| err(r.error_code)).collect();
        self.observe(step, json!({ "errors": errors }));
        Ok(())
    }

    /// AlterConfigs of one topic's whole set; observes the error.
    pub async fn alter_configs(
        &mut self,
        step: &str,
        topic: &str,
        configs: &[(&str, Option<&str>)],
        validate_only: bool,
    ) -> Step {
        let version = self.version(alter_configs_request::API_KEY)?;
        let body = RequestBody::AlterConfigs(AlterConfigsRequest {
            resources: vec![alter_configs_request::AlterConfigsResource {
                resource_type: 2,
                resource_name: topic.into(),
                configs: configs
                    .iter()
                    .map(|(name, value)| alter_configs_request::AlterableConfig {
                        name: (*name).into(),
                        value: value.map(str::to_string),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }],
            validate_only,
            ..Default::default()
        });
        let r = call_as!(self, AlterConfigs, version, body, step);
        let code = r.responses.first().map_or(-100, |r| r.error_code);
        self.observe(step, json!({"error": err(code)}));
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
        self.describe_producers_stamped(step, topic, partitions, None)
            .await
    }

    /// DescribeProducers after a marker the broker stamped with its own
    /// clock: a last timestamp at or after `since_ms` (wall clock, taken
    /// before the marker was sent) shows as "since the marker", as the two
    /// brokers' clocks cannot give the same number.
    pub async fn describe_producers_after(
        &mut self,
        step: &str,
        topic: &str,
        partitions: &[i32],
        since_ms: i64,
    ) -> Step {
        self.describe_producers_stamped(step, topic, partitions, Some(since_ms))
            .await
    }

    async fn describe_producers_stamped(
        &mut self,
        step: &str,
        topic: &str,
        partitions: &[i32],
        since_ms: Option<i64>,
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
                    "last_timestamp": match since_ms {
                        Some(since) if a.last_timestamp >= since => json!("since the marker"),
                        _ if a.last_timestamp >= 0 => json!(a.last_timestamp - self.t0),
                        _ => json!(a.last_timestamp),
                    },
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

/// A transactional producer as a scenario drives it: its transactional id
/// (full name) and the producer id and epoch its broker gave it.
#[derive(Debug, Clone)]
pub struct Txn {
    pub id: String,
    pub pid: i64,
    pub epoch: i16,
}

impl Txn {
    /// The same producer claiming another epoch (a zombie, or a producer
    /// from the future).
    pub fn with_epoch(&self, epoch: i16) -> Txn {
        Txn {
            epoch,
            ..self.clone()
        }
    }

    /// The same transactional id claiming a producer id it was never given.
    pub fn with_pid(&self, pid: i64) -> Txn {
        Txn {
            pid,
            ..self.clone()
        }
    }
}

/// One transaction of a batched AddPartitionsToTxn (v4+): the producer,
/// whether to only verify, and partitions of topics (full names).
pub type BatchedAdd<'a> = (&'a Txn, bool, &'a [(&'a str, &'a [i32])]);

/// The transaction timeout scenarios ask for: long enough that no
/// transaction times out while a scenario runs.
pub const TXN_TIMEOUT_MS: i32 = 60_000;

/// A batch of `n` transactional records (keys and values as
/// [`plain_batch`]).
pub fn txn_batch(t0: i64, first: i64, n: i64, txn: &Txn, seq: i32) -> Bytes {
    records(
        BatchBuilder::transactional(txn.pid, txn.epoch, seq),
        t0,
        first,
        n,
    )
}

/// Errors on which a transactional request is retried unobserved, as
/// clients retry them: the coordinator is loading, not available yet, or
/// elsewhere (a fresh Kafka creates its transaction log on first use).
fn coordinator_not_ready(code: i16) -> bool {
    matches!(code, 14..=16)
}

/// How long the unobserved waits on a transaction coordinator may take.
const TXN_WAIT: Duration = Duration::from_secs(30);

pub fn find_coordinator_body(key: &str, key_type: i8, version: i16) -> RequestBody {
    RequestBody::FindCoordinator(FindCoordinatorRequest {
        key: if version < 4 {
            key.into()
        } else {
            String::new()
        },
        key_type,
        coordinator_keys: if version >= 4 {
            vec![key.into()]
        } else {
            Vec::new()
        },
        ..Default::default()
    })
}

impl Session {
    /// FindCoordinator of `key` as `key_type`; observes the error and
    /// whether a node was named; returns the error.
    pub async fn find_coordinator(
        &mut self,
        step: &str,
        version: i16,
        key: &str,
        key_type: i8,
    ) -> Step<i16> {
        let body = find_coordinator_body(key, key_type, version);
        let r = call_as!(self, FindCoordinator, version, body, step);
        let (code, node) = if version >= 4 {
            r.coordinators
                .first()
                .map_or((-100, -1), |c| (c.error_code, c.node_id))
        } else {
            (r.error_code, r.node_id)
        };
        self.observe(step, json!({"error": err(code), "has_node": node >= 0}));
        Ok(code)
    }

    /// Waits (not observed) until the coordinator of transactional id
    /// `id` answers FindCoordinator: a fresh Kafka creates its transaction
    /// log (50 partitions) on the first lookup.
    pub async fn txn_coordinator_ready(&mut self, id: &str) -> Step {
        let version = self.latest_version(find_coordinator_request::API_KEY)?;
        let deadline = tokio::time::Instant::now() + TXN_WAIT;
        loop {
            let body = find_coordinator_body(id, 1, version);
            if let Answer::Body(ResponseBody::FindCoordinator(r)) =
                self.try_call(version, &body).await
            {
                let code = if version >= 4 {
                    r.coordinators.first().map_or(-100, |c| c.error_code)
                } else {
                    r.error_code
                };
                if code == 0 {
                    return Ok(());
                }
            }
            if tokio::time::Instant::now() >= deadline {
                self.observe("transaction coordinator", json!("never available"));
                return Err(Stop(format!("no transaction coordinator for {id}")));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// InitProducerId for transactional id `id` (full name) at `version`,
    /// with `timeout_ms` and, from v3, an optional claim of the producer id
    /// and epoch the producer last had. Retries (unobserved) while the
    /// coordinator is not ready; observes the error and the producer by
    /// role; returns the error and the producer it was given.
    pub async fn init_txn_at(
        &mut self,
        step: &str,
        version: i16,
        id: &str,
        timeout_ms: i32,
        claim: Option<(i64, i16)>,
    ) -> Step<(i16, Txn)> {
        let r = self
            .init_txn_unobserved(step, version, id, timeout_ms, claim, false)
            .await?;
        self.init_txn_answer(step, id, r)
    }

    /// InitProducerId retried (unobserved) while it answers
    /// CONCURRENT_TRANSACTIONS, as clients retry it, for at most 30 s;
    /// observes the answer it stops at.
    pub async fn init_txn_retried(
        &mut self,
        step: &str,
        version: i16,
        id: &str,
    ) -> Step<(i16, Txn)> {
        let r = self
            .init_txn_unobserved(step, version, id, TXN_TIMEOUT_MS, None, true)
            .await?;
        self.init_txn_answer(step, id, r)
    }

    async fn init_txn_unobserved(
        &mut self,
        step: &str,
        version: i16,
        id: &str,
        timeout_ms: i32,
        claim: Option<(i64, i16)>,
        retry_concurrent: bool,
    ) -> Step<InitProducerIdResponse> {
        let (producer_id, producer_epoch) = claim.unwrap_or((-1, -1));
        let body = RequestBody::InitProducerId(InitProducerIdRequest {
            transactional_id: Some(id.into()),
            transaction_timeout_ms: timeout_ms,
            producer_id,
            producer_epoch,
            ..Default::default()
        });
        let deadline = tokio::time::Instant::now() + TXN_WAIT;
        loop {
            let r = call_as!(self, InitProducerId, version, body.clone(), step);
            let retry =
                coordinator_not_ready(r.error_code) || (retry_concurrent && r.error_code == 51);
            if !retry || tokio::time::Instant::now() >= deadline {
                return Ok(r);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn init_txn_answer(
        &mut self,
        step: &str,
        id: &str,
        r: InitProducerIdResponse,
    ) -> Step<(i16, Txn)> {
        let who = producer(self, r.producer_id, r.producer_epoch);
        self.observe(step, json!({"error": err(r.error_code), "producer": who}));
        Ok((
            r.error_code,
            Txn {
                id: id.to_owned(),
                pid: r.producer_id,
                epoch: r.producer_epoch,
            },
        ))
    }

    /// A fresh transactional producer for this run's id `short`: waits for
    /// its coordinator, then InitProducerId at the highest common version;
    /// anything but success ends the scenario.
    pub async fn init_txn(&mut self, step: &str, short: &str) -> Step<Txn> {
        let id = self.name(short);
        self.txn_coordinator_ready(&id).await?;
        let version = self.version(init_producer_id_request::API_KEY)?;
        let (code, txn) = self
            .init_txn_at(step, version, &id, TXN_TIMEOUT_MS, None)
            .await?;
        if code != 0 {
            return Err(Stop(format!("InitProducerId for {id}: {code}")));
        }
        Ok(txn)
    }

    /// AddPartitionsToTxn in the client's form (v0-v3): `partitions` of
    /// topics (full names); observes every partition's error, sorted by
    /// topic and partition; returns the first non-zero error (0 if none).
    pub async fn add_partitions_at(
        &mut self,
        step: &str,
        version: i16,
        txn: &Txn,
        partitions: &[(&str, &[i32])],
    ) -> Step<i16> {
        let topics = partitions
            .iter()
            .map(
                |(t, ps)| add_partitions_to_txn_request::AddPartitionsToTxnTopic {
                    name: (*t).into(),
                    partitions: ps.to_vec(),
                    ..Default::default()
                },
            )
            .collect();
        let body = RequestBody::AddPartitionsToTxn(AddPartitionsToTxnRequest {
            v3_and_below_transactional_id: txn.id.clone(),
            v3_and_below_producer_id: txn.pid,
            v3_and_below_producer_epoch: txn.epoch,
            v3_and_below_topics: topics,
            ..Default::default()
        });
        let r = call_as!(self, AddPartitionsToTxn, version, body, step);
        let seen = self.partition_results(&r.results_by_topic_v3_and_below);
        let first = r
            .results_by_topic_v3_and_below
            .iter()
            .flat_map(|t| t.results_by_partition.iter())
            .map(|p| p.partition_error_code)
            .find(|&c| c != 0)
            .unwrap_or(0);
        self.observe(step, seen);
        Ok(first)
    }

    /// AddPartitionsToTxn at the highest common version of the client's
    /// form (v3 and below).
    pub async fn add_partitions(
        &mut self,
        step: &str,
        txn: &Txn,
        partitions: &[(&str, &[i32])],
    ) -> Step<i16> {
        let version = self.version(add_partitions_to_txn_request::API_KEY)?.min(3);
        self.add_partitions_at(step, version, txn, partitions).await
    }

    fn partition_results(
        &self,
        topics: &[add_partitions_to_txn_response::AddPartitionsToTxnTopicResult],
    ) -> Value {
        let mut seen: Vec<Value> = topics
            .iter()
            .flat_map(|t| {
                t.results_by_partition.iter().map(|p| {
                    json!([
                        self.local(&t.name),
                        p.partition_index,
                        err(p.partition_error_code)
                    ])
                })
            })
            .collect();
        seen.sort_by_key(|v| v.to_string());
        json!(seen)
    }

    /// AddPartitionsToTxn in the batched form (v4+): several transactions
    /// at once, each with `verify_only`; observes the top-level error and,
    /// per transactional id (local name, sorted), every partition's error.
    pub async fn add_partitions_batched(
        &mut self,
        step: &str,
        version: i16,
        txns: &[BatchedAdd<'_>],
    ) -> Step {
        let transactions = txns
            .iter()
            .map(|(txn, verify_only, parts)| {
                add_partitions_to_txn_request::AddPartitionsToTxnTransaction {
                    transactional_id: txn.id.clone(),
                    producer_id: txn.pid,
                    producer_epoch: txn.epoch,
                    verify_only: *verify_only,
                    topics: parts
                        .iter()
                        .map(
                            |(t, ps)| add_partitions_to_txn_request::AddPartitionsToTxnTopic {
                                name: (*t).into(),
                                partitions: ps.to_vec(),
                                ..Default::default()
                            },
                        )
                        .collect(),
                    ..Default::default()
                }
            })
            .collect();
        let body = RequestBody::AddPartitionsToTxn(AddPartitionsToTxnRequest {
            transactions,
            ..Default::default()
        });
        let r = call_as!(self, AddPartitionsToTxn, version, body, step);
        let mut per_txn: Vec<Value> = r
            .results_by_transaction
            .iter()
            .map(|t| {
                json!([
                    self.local(&t.transactional_id),
                    self.partition_results(&t.topic_results)
                ])
            })
            .collect();
        per_txn.sort_by_key(|v| v.to_string());
        self.observe(
            step,
            json!({"error": err(r.error_code), "transactions": per_txn}),
        );
        Ok(())
    }

    /// AddOffsetsToTxn of `group` (full name); observes and returns the error.
    pub async fn add_offsets_at(
        &mut self,
        step: &str,
        version: i16,
        txn: &Txn,
        group: &str,
    ) -> Step<i16> {
        let body = RequestBody::AddOffsetsToTxn(AddOffsetsToTxnRequest {
            transactional_id: txn.id.clone(),
            producer_id: txn.pid,
            producer_epoch: txn.epoch,
            group_id: group.into(),
            ..Default::default()
        });
        let r = call_as!(self, AddOffsetsToTxn, version, body, step);
        self.observe(step, json!({"error": err(r.error_code)}));
        Ok(r.error_code)
    }

    pub async fn add_offsets(&mut self, step: &str, txn: &Txn, group: &str) -> Step<i16> {
        let version = self.version(add_offsets_to_txn_request::API_KEY)?;
        self.add_offsets_at(step, version, txn, group).await
    }

    /// EndTxn (commit or abort) at `version`; observes the error and, from
    /// v5 (KIP-890: the epoch is bumped at every transaction's end), the
    /// producer the answer names. Returns the error and the producer to
    /// go on with (the answer's from v5 on success, else `txn` unchanged).
    pub async fn end_txn_at(
        &mut self,
        step: &str,
        version: i16,
        txn: &Txn,
        commit: bool,
    ) -> Step<(i16, Txn)> {
        let body = RequestBody::EndTxn(EndTxnRequest {
            transactional_id: txn.id.clone(),
            producer_id: txn.pid,
            producer_epoch: txn.epoch,
            committed: commit,
            ..Default::default()
        });
        let r = call_as!(self, EndTxn, version, body, step);
        let mut seen = json!({"error": err(r.error_code)});
        let mut next = txn.clone();
        if version >= 5 {
            seen["producer"] = producer(self, r.producer_id, r.producer_epoch);
            if r.error_code == 0 && r.producer_id >= 0 {
                next.pid = r.producer_id;
                next.epoch = r.producer_epoch;
            }
        }
        self.observe(step, seen);
        Ok((r.error_code, next))
    }

    /// WriteTxnMarkers (KIP-664's operator abort, as Admin.abortTransaction
    /// sends it to the partition's leader): one marker for `txn`'s producer
    /// at `epoch` on `partitions` of `topic`; the error of each partition.
    #[allow(clippy::too_many_arguments)]
    pub async fn write_txn_markers(
        &mut self,
        step: &str,
        txn: &Txn,
        epoch: i16,
        commit: bool,
        topic: &str,
        partitions: &[i32],
        coordinator_epoch: i32,
    ) -> Step {
        let version = self.version(write_txn_markers_request::API_KEY)?;
        let body = RequestBody::WriteTxnMarkers(WriteTxnMarkersRequest {
            markers: vec![write_txn_markers_request::WritableTxnMarker {
                producer_id: txn.pid,
                producer_epoch: epoch,
                transaction_result: commit,
                topics: vec![write_txn_markers_request::WritableTxnMarkerTopic {
                    name: topic.into(),
                    partition_indexes: partitions.to_vec(),
                    ..Default::default()
                }],
                coordinator_epoch,
                ..Default::default()
            }],
            ..Default::default()
        });
        let r = call_as!(self, WriteTxnMarkers, version, body, step);
        let mut seen = Vec::new();
        for m in &r.markers {
            let pid = self.alias("pid", m.producer_id);
            for t in &m.topics {
                let topic = self.local(&t.name);
                for p in &t.partitions {
                    seen.push(json!([pid, topic, p.partition_index, err(p.error_code)]));
                }
            }
        }
        seen.sort_by_key(|v| v.to_string());
        self.observe(step, json!(seen));
        Ok(())
    }

    /// EndTxn at the highest common version; then waits (unobserved) until
    /// the transaction is complete, so the next step does not race the
    /// markers. Returns the producer to go on with.
    pub async fn end_txn(&mut self, step: &str, txn: &Txn, commit: bool) -> Step<Txn> {
        let version = self.version(end_txn_request::API_KEY)?;
        let (_, next) = self.end_txn_at(step, version, txn, commit).await?;
        self.txn_settled(&txn.id).await?;
        Ok(next)
    }

    /// Waits (not observed) until DescribeTransactions shows `id` in no
    /// Prepare* state: Kafka answers EndTxn once the outcome is logged and
    /// writes the markers after.
    pub async fn txn_settled(&mut self, id: &str) -> Step {
        let version = self.latest_version(describe_transactions_request::API_KEY)?;
        let deadline = tokio::time::Instant::now() + TXN_WAIT;
        while tokio::time::Instant::now() < deadline {
            let body = RequestBody::DescribeTransactions(DescribeTransactionsRequest {
                transactional_ids: vec![id.into()],
                ..Default::default()
            });
            if let Answer::Body(ResponseBody::DescribeTransactions(r)) =
                self.try_call(version, &body).await
            {
                let settled = r.transaction_states.iter().all(|t| {
                    !coordinator_not_ready(t.error_code)
                        && !t.transaction_state.starts_with("Prepare")
                });
                if settled {
                    return Ok(());
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }

    /// Waits (not observed) until DescribeTransactions shows `id` in a
    /// state other than `state`, at most `wait`.
    pub async fn txn_left_state(&mut self, id: &str, state: &str, wait: Duration) -> Step {
        let version = self.latest_version(describe_transactions_request::API_KEY)?;
        let deadline = tokio::time::Instant::now() + wait;
        while tokio::time::Instant::now() < deadline {
            let body = RequestBody::DescribeTransactions(DescribeTransactionsRequest {
                transactional_ids: vec![id.into()],
                ..Default::default()
            });
            if let Answer::Body(ResponseBody::DescribeTransactions(r)) =
                self.try_call(version, &body).await
            {
                if r.transaction_states
                    .iter()
                    .all(|t| t.error_code == 0 && t.transaction_state != state)
                {
                    return Ok(());
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(())
    }

    /// A transactional Produce of records `first..first+n` at `seq`.
    pub async fn produce_txn(
        &mut self,
        step: &str,
        topic: &str,
        partition: i32,
        txn: &Txn,
        seq: i32,
        (first, n): (i64, i64),
    ) -> Step {
        let batch = txn_batch(self.t0, first, n, txn, seq);
        let version = self.version(produce_request::API_KEY)?;
        self.produce_as(step, version, Some(&txn.id), topic, partition, batch, -1)
            .await
    }

    /// TxnOffsetCommit of `offsets` of `topic` for `group`, as a member
    /// (`generation`, `member`; -1 and "" for none) from v3; observes each
    /// partition's error.
    #[allow(clippy::too_many_arguments)]
    pub async fn txn_offset_commit_at(
        &mut self,
        step: &str,
        version: i16,
        txn: &Txn,
        group: &str,
        (generation, member): (i32, &str),
        topic: &str,
        offsets: &[(i32, i64)],
    ) -> Step {
        let body = RequestBody::TxnOffsetCommit(TxnOffsetCommitRequest {
            transactional_id: txn.id.clone(),
            group_id: group.into(),
            producer_id: txn.pid,
            producer_epoch: txn.epoch,
            generation_id: generation,
            member_id: member.into(),
            group_instance_id: None,
            topics: vec![txn_offset_commit_request::TxnOffsetCommitRequestTopic {
                name: topic.into(),
                partitions: offsets
                    .iter()
                    .map(
                        |&(p, o)| txn_offset_commit_request::TxnOffsetCommitRequestPartition {
                            partition_index: p,
                            committed_offset: o,
                            committed_leader_epoch: -1,
                            committed_metadata: Some(format!("txn at {o}")),
                            ..Default::default()
                        },
                    )
                    .collect(),
                ..Default::default()
            }],
            ..Default::default()
        });
        let r = call_as!(self, TxnOffsetCommit, version, body, step);
        let mut parts: Vec<Value> = r
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(|p| json!([self.local(&t.name), p.partition_index, err(p.error_code)]))
            })
            .collect();
        parts.sort_by_key(|v| v.to_string());
        self.observe(step, json!(parts));
        Ok(())
    }

    /// OffsetFetch of `partitions` of `topic` for `group`, with
    /// `require_stable` (v7+); observes the error and per partition its
    /// offset, metadata and error.
    pub async fn fetch_offsets_stable(
        &mut self,
        step: &str,
        group: &str,
        topic: &str,
        partitions: &[i32],
        require_stable: bool,
    ) -> Step {
        let version = self.version(offset_fetch_request::API_KEY)?;
        let body = if version >= 8 {
            RequestBody::OffsetFetch(OffsetFetchRequest {
                groups: vec![offset_fetch_request::OffsetFetchRequestGroup {
                    group_id: group.into(),
                    member_id: None,
                    member_epoch: -1,
                    topics: Some(vec![offset_fetch_request::OffsetFetchRequestTopics {
                        name: topic.into(),
                        topic_id: self.topic_id(topic),
                        partition_indexes: partitions.to_vec(),
                        ..Default::default()
                    }]),
                    ..Default::default()
                }],
                require_stable,
                ..Default::default()
            })
        } else {
            RequestBody::OffsetFetch(OffsetFetchRequest {
                group_id: group.into(),
                topics: Some(vec![offset_fetch_request::OffsetFetchRequestTopic {
                    name: topic.into(),
                    partition_indexes: partitions.to_vec(),
                    ..Default::default()
                }]),
                require_stable,
                ..Default::default()
            })
        };
        let r = call_as!(self, OffsetFetch, version, body, step);
        let mut error = r.error_code;
        let mut parts = Vec::new();
        for g in &r.groups {
            error = error.max(g.error_code);
            for t in &g.topics {
                for p in &t.partitions {
                    parts.push(json!([
                        self.local(&t.name),
                        p.partition_index,
                        p.committed_offset,
                        p.metadata,
                        err(p.error_code)
                    ]));
                }
            }
        }
        for t in &r.topics {
            for p in &t.partitions {
                parts.push(json!([
                    self.local(&t.name),
                    p.partition_index,
                    p.committed_offset,
                    p.metadata,
                    err(p.error_code)
                ]));
            }
        }
        parts.sort_by_key(|v| v.to_string());
        self.observe(step, json!({"error": err(error), "partitions": parts}));
        Ok(())
    }

    /// DescribeTransactions of transactional ids (full names); observes,
    /// per id in the order asked, its error, state, timeout, whether a
    /// start time is set, the producer by role and its partitions.
    pub async fn describe_transactions(&mut self, step: &str, ids: &[&str]) -> Step {
        let version = self.version(describe_transactions_request::API_KEY)?;
        let body = RequestBody::DescribeTransactions(DescribeTransactionsRequest {
            transactional_ids: ids.iter().map(|i| (*i).to_owned()).collect(),
            ..Default::default()
        });
        let r = call_as!(self, DescribeTransactions, version, body, step);
        let mut seen = Vec::new();
        for t in &r.transaction_states {
            let mut topics: Vec<Value> = t
                .topics
                .iter()
                .map(|tp| {
                    let name = self.local(&tp.topic);
                    if name.starts_with("<foreign") {
                        // __consumer_offsets (AddOffsetsToTxn): which of
                        // its partitions holds a group is the broker's own
                        // layout; how many are in the transaction is not.
                        return json!([name, format!("{} partition(s)", tp.partitions.len())]);
                    }
                    let mut ps = tp.partitions.clone();
                    ps.sort();
                    json!([name, ps])
                })
                .collect();
            topics.sort_by_key(|v| v.to_string());
            let who = if t.error_code == 0 {
                producer(self, t.producer_id, t.producer_epoch)
            } else {
                json!(null)
            };
            seen.push(json!({
                "id": self.local(&t.transactional_id),
                "error": err(t.error_code),
                "state": t.transaction_state,
                "timeout_ms": t.transaction_timeout_ms,
                // The start is the coordinator's clock: whether there is
                // one (-1: none) is what a client can rely on.
                "started": if t.error_code == 0 {
                    json!(t.transaction_start_time_ms >= 0)
                } else {
                    json!(t.transaction_start_time_ms)
                },
                "producer": who,
                "topics": topics,
            }));
        }
        self.observe(step, json!(seen));
        Ok(())
    }

    /// ListTransactions with `states` (names), narrowed to `producers` (so
    /// other scenarios' transactions stay out) and to this run's names;
    /// observes the error, the unknown state filters and the transactions
    /// found, sorted.
    pub async fn list_transactions(
        &mut self,
        step: &str,
        states: &[&str],
        producers: &[i64],
    ) -> Step {
        let version = self.version(list_transactions_request::API_KEY)?;
        self.list_transactions_with(step, version, states, producers, (-1, None))
            .await
    }

    /// [`list_transactions`](Self::list_transactions) at `version`, with
    /// the duration filter (v1+, ms; -1 none) and the transactional id
    /// pattern (v2+).
    pub async fn list_transactions_with(
        &mut self,
        step: &str,
        version: i16,
        states: &[&str],
        producers: &[i64],
        (duration_ms, pattern): (i64, Option<&str>),
    ) -> Step {
        let body = RequestBody::ListTransactions(ListTransactionsRequest {
            state_filters: states.iter().map(|s| (*s).to_owned()).collect(),
            producer_id_filters: producers.to_vec(),
            duration_filter: duration_ms,
            transactional_id_pattern: pattern.map(str::to_owned),
            ..Default::default()
        });
        let r = call_as!(self, ListTransactions, version, body, step);
        let mut found: Vec<Value> = Vec::new();
        for t in &r.transaction_states {
            let id = self.local(&t.transactional_id);
            if id.starts_with("<foreign") {
                continue;
            }
            let pid = self.alias("pid", t.producer_id);
            found.push(json!([id, pid, t.transaction_state]));
        }
        found.sort_by_key(|v| v.to_string());
        let mut unknown = r.unknown_state_filters.clone();
        unknown.sort();
        self.observe(
            step,
            json!({"error": err(r.error_code), "unknown_states": unknown, "transactions": found}),
        );
        Ok(())
    }
}
