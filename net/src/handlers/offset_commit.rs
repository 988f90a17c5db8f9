//! OffsetCommit: answered once the offsets are durable in the group's slot
//! file. Partitions of topics that do not exist are refused here; every
//! group rule is `kaas_core::group`'s.

use super::wire_code;
use crate::broker::Broker;
use kaas_core::group::coordinator::{CommitOffset, CommitRequest};
use kaas_core::protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kaas_core::protocol::messages::{OffsetCommitRequest, OffsetCommitResponse};
use kaas_core::protocol::ErrorCode;
use std::sync::Arc;

pub async fn handle(
    broker: &Arc<Broker>,
    req: OffsetCommitRequest,
    version: i16,
) -> OffsetCommitResponse {
    // Per partition: None if it goes to the coordinator, else its error.
    let mut verdicts: Vec<Vec<Option<ErrorCode>>> = Vec::with_capacity(req.topics.len());
    let mut offsets = Vec::new();
    for t in &req.topics {
        let topic = broker.topic(&t.name);
        let mut row = Vec::with_capacity(t.partitions.len());
        for p in &t.partitions {
            if topic
                .as_ref()
                .is_some_and(|topic| topic.partition(p.partition_index).is_some())
            {
                offsets.push(CommitOffset {
                    topic: t.name.clone(),
                    partition: p.partition_index,
                    offset: p.committed_offset,
                    leader_epoch: p.committed_leader_epoch,
                    metadata: p.committed_metadata.clone(),
                });
                row.push(None);
            } else {
                row.push(Some(ErrorCode::UnknownTopicOrPartition));
            }
        }
        verdicts.push(row);
    }
    let commit = CommitRequest {
        group_id: req.group_id,
        member_id: req.member_id,
        instance_id: req.group_instance_id,
        generation: req.generation_id_or_member_epoch,
        retention_time_ms: req.retention_time_ms,
        missing_group_is_not_found: version >= 9,
        offsets,
    };
    let result = match broker.group_coordinator(&commit.group_id) {
        Ok(groups) => groups.commit_offsets(commit).await,
        Err(code) => Err(code),
    };
    // The coordinator answers the partitions it was given, in order.
    let mut coordinator_outcomes = match &result {
        Ok(outcomes) => outcomes.clone().into_iter(),
        Err(_) => Vec::new().into_iter(),
    };
    let topics = req
        .topics
        .into_iter()
        .zip(verdicts)
        .map(|(t, row)| OffsetCommitResponseTopic {
            name: t.name,
            topic_id: t.topic_id,
            partitions: t
                .partitions
                .iter()
                .zip(row)
                .map(|(p, verdict)| {
                    let outcome = match (verdict, &result) {
                        (Some(e), _) => Err(e),
                        (None, Err(e)) => Err(*e),
                        (None, Ok(_)) => coordinator_outcomes
                            .next()
                            .unwrap_or(Err(ErrorCode::UnknownServerError)),
                    };
                    OffsetCommitResponsePartition {
                        partition_index: p.partition_index,
                        error_code: wire_code(&outcome),
                        ..Default::default()
                    }
                })
                .collect(),
            ..Default::default()
        })
        .collect();
    OffsetCommitResponse {
        topics,
        ..Default::default()
    }
}
