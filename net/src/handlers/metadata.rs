//! Metadata: brokers, the cluster id, and topics with their partitions.
//! Names a client asks for may be auto-created.

use crate::broker::{Broker, Seat, Topic};
use kaas_core::protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kaas_core::protocol::messages::{MetadataRequest, MetadataResponse};
use kaas_core::protocol::{ErrorCode, Uuid};
use std::sync::Arc;

pub async fn handle(broker: &Arc<Broker>, req: MetadataRequest, version: i16) -> MetadataResponse {
    // Before v4 there was no flag and Metadata always auto-created.
    let may_create = version < 4 || req.allow_auto_topic_creation;
    let topics = match req.topics {
        // v0 uses an empty list for "all topics"; v1+ uses null.
        Some(list) if !(version == 0 && list.is_empty()) => {
            let mut out = Vec::with_capacity(list.len());
            for t in list {
                out.push(match t.name {
                    Some(name) => by_name(broker, name, may_create).await,
                    None => by_id(broker, t.topic_id),
                });
            }
            out
        }
        _ => broker
            .topics()
            .iter()
            .map(|t| describe(broker, t))
            .collect(),
    };
    let now = broker.env.clock.monotonic_ms();
    MetadataResponse {
        brokers: broker
            .membership
            .live(now)
            .into_iter()
            .map(|b| MetadataResponseBroker {
                node_id: b.id,
                host: b.host,
                port: b.port,
                rack: b.rack,
                ..Default::default()
            })
            .collect(),
        cluster_id: Some(broker.cluster_id.clone()),
        controller_id: broker.membership.controller_id(now),
        topics,
        ..Default::default()
    }
}

async fn by_name(broker: &Arc<Broker>, name: String, may_create: bool) -> MetadataResponseTopic {
    if let Err(_msg) = kaas_core::topic_name::validate_topic_name(&name) {
        return error_topic(Some(name), Uuid::ZERO, ErrorCode::InvalidTopicException);
    }
    let found = if may_create {
        broker.get_or_auto_create(&name).await
    } else {
        broker
            .topic(&name)
            .ok_or(ErrorCode::UnknownTopicOrPartition)
    };
    match found {
        Ok(topic) => describe(broker, &topic),
        Err(code) => error_topic(Some(name), Uuid::ZERO, code),
    }
}

fn by_id(broker: &Broker, id: Uuid) -> MetadataResponseTopic {
    match broker.topic_by_id(id) {
        Some(topic) => describe(broker, &topic),
        None => error_topic(None, id, ErrorCode::UnknownTopicId),
    }
}

fn error_topic(name: Option<String>, topic_id: Uuid, code: ErrorCode) -> MetadataResponseTopic {
    MetadataResponseTopic {
        error_code: code.code(),
        name,
        topic_id,
        ..Default::default()
    }
}

fn describe(broker: &Broker, topic: &Topic) -> MetadataResponseTopic {
    let live = broker.membership.live_ids(broker.env.clock.monotonic_ms());
    MetadataResponseTopic {
        error_code: ErrorCode::None.code(),
        name: Some(topic.name.clone()),
        topic_id: topic.id,
        is_internal: false,
        partitions: topic
            .partitions
            .iter()
            .map(|seat| describe_partition(seat, &live))
            .collect(),
        ..Default::default()
    }
}

/// A partition's leader is the broker of its newest claim while that
/// broker is live; otherwise none is (LEADER_NOT_AVAILABLE), and clients
/// ask again until the partition's new place has taken it.
fn describe_partition(seat: &Seat, live: &[i32]) -> MetadataResponsePartition {
    let (code, leader, epoch) = match seat.leader() {
        Some(c) if live.contains(&c.broker_id) => (ErrorCode::None, c.broker_id, c.epoch),
        other => (
            ErrorCode::LeaderNotAvailable,
            -1,
            other.map_or(-1, |c| c.epoch),
        ),
    };
    let replicas = if leader >= 0 { vec![leader] } else { vec![] };
    MetadataResponsePartition {
        error_code: code.code(),
        partition_index: seat.index,
        leader_id: leader,
        leader_epoch: epoch,
        replica_nodes: replicas.clone(),
        isr_nodes: replicas,
        offline_replicas: vec![],
        ..Default::default()
    }
}
