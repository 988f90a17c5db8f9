//! OffsetFetch: committed offsets of one group (v1-7) or several (v8+).
//! `require_stable` (v7+) reports partitions with an open transaction's
//! offset as UNSTABLE_OFFSET_COMMIT instead of the committed offset.

use super::wire_code;
use crate::broker::Broker;
use kaas_core::group::coordinator::{CommittedOffset, FetchedOffset};
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
                let fetched = broker.group_coordinator(&g.group_id).and_then(|groups| {
                    groups.fetch_offsets(&g.group_id, topics.as_deref(), require_stable)
                });
                let (fetched, error_code) = match fetched {
                    Ok(fetched) => (fetched, ErrorCode::None.code()),
                    Err(code) => (Vec::new(), code.code()),
                };
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
                    error_code,
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
        .group_coordinator(&req.group_id)
        .and_then(|groups| groups.fetch_offsets(&req.group_id, topics.as_deref(), require_stable));
    let (fetched, error_code) = match fetched {
        Ok(fetched) => (fetched, ErrorCode::None.code()),
        Err(code) => (Vec::new(), code.code()),
    };
    OffsetFetchResponse {
        topics: fetched
            .into_iter()
            .map(|(name, parts)| OffsetFetchResponseTopic {
                name,
                partitions: parts.into_iter().map(partition_v1).collect(),
                ..Default::default()
            })
            .collect(),
        error_code,
        ..Default::default()
    }
}

/// A partition's committed offset, leader epoch and metadata on the wire:
/// -1, -1 and "" when there is none to give (nothing committed, or an
/// error).
fn wire_offset(committed: Result<Option<CommittedOffset>, ErrorCode>) -> (i64, i32, String) {
    match committed {
        Ok(Some(c)) => (c.offset, c.leader_epoch, c.metadata),
        Ok(None) | Err(_) => (-1, -1, String::new()),
    }
}

fn partition_v1(p: FetchedOffset) -> OffsetFetchResponsePartition {
    let error_code = wire_code(&p.committed);
    let (offset, leader_epoch, metadata) = wire_offset(p.committed);
    OffsetFetchResponsePartition {
        partition_index: p.partition,
        committed_offset: offset,
        committed_leader_epoch: leader_epoch,
        metadata: Some(metadata),
        error_code,
        ..Default::default()
    }
}

fn partitions_v8(p: FetchedOffset) -> OffsetFetchResponsePartitions {
    let error_code = wire_code(&p.committed);
    let (offset, leader_epoch, metadata) = wire_offset(p.committed);
    OffsetFetchResponsePartitions {
        partition_index: p.partition,
        committed_offset: offset,
        committed_leader_epoch: leader_epoch,
        metadata: Some(metadata),
        error_code,
        ..Default::default()
    }
}
