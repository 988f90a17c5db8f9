//! OffsetFetch: committed offsets of one group (v1-7) or several (v8+).
//! `require_stable` (v7+) reports partitions with an open transaction's
//! offset as UNSTABLE_OFFSET_COMMIT instead of the committed offset.

use crate::broker::Broker;
use kaas_core::group::coordinator::FetchedOffset;
use kaas_core::protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kaas_core::protocol::messages::{OffsetFetchRequest, OffsetFetchResponse};
use kaas_core::protocol::ErrorCode;
use std::sync::Arc;

pub fn handle(broker: &Arc<Broker>, req: OffsetFetchRequest, version: i16) -> OffsetFetchResponse {
    let require_stable = version >= 7 && req.require_stable;
    if version >= 8 {
        let groups = req
            .groups
            .into_iter()
            .map(|g| {
                let topics: Option<Vec<(String, Vec<i32>)>> = g.topics.map(|ts| {
                    ts.into_iter()
                        .map(|t| (t.name, t.partition_indexes))
                        .collect()
                });
                let fetched =
                    broker
                        .groups
                        .fetch_offsets(&g.group_id, topics.as_deref(), require_stable);
                OffsetFetchResponseGroup {
                    group_id: g.group_id,
                    topics: fetched
                        .into_iter()
                        .map(|(name, parts)| OffsetFetchResponseTopics {
                            name,
                            partitions: parts.into_iter().map(partitions_v8).collect(),
                            ..Default::default()
                        })
                        .collect(),
                    error_code: ErrorCode::None.code(),
                    ..Default::default()
                }
            })
            .collect();
        return OffsetFetchResponse {
            groups,
            ..Default::default()
        };
    }
    let topics: Option<Vec<(String, Vec<i32>)>> = req.topics.map(|ts| {
        ts.into_iter()
            .map(|t| (t.name, t.partition_indexes))
            .collect()
    });
    let fetched = broker
        .groups
        .fetch_offsets(&req.group_id, topics.as_deref(), require_stable);
    OffsetFetchResponse {
        topics: fetched
            .into_iter()
            .map(|(name, parts)| OffsetFetchResponseTopic {
                name,
                partitions: parts.into_iter().map(partition_v1).collect(),
                ..Default::default()
            })
            .collect(),
        error_code: ErrorCode::None.code(),
        ..Default::default()
    }
}

fn partition_v1(p: FetchedOffset) -> OffsetFetchResponsePartition {
    OffsetFetchResponsePartition {
        partition_index: p.partition,
        committed_offset: p.offset,
        committed_leader_epoch: p.leader_epoch,
        metadata: Some(p.metadata),
        error_code: p.error.code(),
        ..Default::default()
    }
}

fn partitions_v8(p: FetchedOffset) -> OffsetFetchResponsePartitions {
    OffsetFetchResponsePartitions {
        partition_index: p.partition,
        committed_offset: p.offset,
        committed_leader_epoch: p.leader_epoch,
        metadata: Some(p.metadata),
        error_code: p.error.code(),
        ..Default::default()
    }
}
