//! OffsetDelete: removes a group's offsets of topics it does not consume.

use super::wire_code;
use crate::broker::Broker;
use kaas_core::protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kaas_core::protocol::messages::{OffsetDeleteRequest, OffsetDeleteResponse};
use kaas_core::protocol::ErrorCode;
use std::sync::Arc;

pub async fn handle(broker: &Arc<Broker>, req: OffsetDeleteRequest) -> OffsetDeleteResponse {
    let mut known = Vec::new();
    let mut verdicts: Vec<Vec<Option<ErrorCode>>> = Vec::with_capacity(req.topics.len());
    for t in &req.topics {
        let topic = broker.topic(&t.name);
        let row = t
            .partitions
            .iter()
            .map(|p| {
                if topic
                    .as_ref()
                    .is_some_and(|topic| topic.partition(p.partition_index).is_some())
                {
                    known.push((t.name.clone(), p.partition_index));
                    None
                } else {
                    Some(ErrorCode::UnknownTopicOrPartition)
                }
            })
            .collect();
        verdicts.push(row);
    }
    let result = match broker.group_coordinator(&req.group_id) {
        Ok(groups) => groups.delete_offsets(&req.group_id, &known).await,
        Err(code) => Err(code),
    };
    let error_code = wire_code(&result);
    // A group-level error answers the request alone.
    let Ok(outcomes) = result else {
        return OffsetDeleteResponse {
            error_code,
            ..Default::default()
        };
    };
    // The coordinator answers the partitions it was given, in order.
    let mut outcomes = outcomes.into_iter();
    let topics = req
        .topics
        .into_iter()
        .zip(verdicts)
        .map(|(t, row)| OffsetDeleteResponseTopic {
            name: t.name,
            partitions: t
                .partitions
                .iter()
                .zip(row)
                .map(|(p, verdict)| {
                    let outcome = match verdict {
                        Some(e) => Err(e),
                        None => outcomes
                            .next()
                            .unwrap_or(Err(ErrorCode::UnknownServerError)),
                    };
                    OffsetDeleteResponsePartition {
                        partition_index: p.partition_index,
                        error_code: wire_code(&outcome),
                        ..Default::default()
                    }
                })
                .collect(),
            ..Default::default()
        })
        .collect();
    OffsetDeleteResponse {
        error_code,
        topics,
        ..Default::default()
    }
}
