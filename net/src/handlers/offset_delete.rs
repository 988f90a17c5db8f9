//! OffsetDelete: removes a group's offsets of topics it does not consume.

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
    let errors = match broker.groups.delete_offsets(&req.group_id, &known).await {
        Ok(errors) => errors,
        Err(e) => {
            return OffsetDeleteResponse {
                error_code: e.code(),
                ..Default::default()
            }
        }
    };
    let mut errors = errors.into_iter();
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
                .map(|(p, verdict)| OffsetDeleteResponsePartition {
                    partition_index: p.partition_index,
                    error_code: verdict
                        .unwrap_or_else(|| errors.next().unwrap_or(ErrorCode::UnknownServerError))
                        .code(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        })
        .collect();
    OffsetDeleteResponse {
        error_code: ErrorCode::None.code(),
        topics,
        ..Default::default()
    }
}
