//! CreatePartitions: raise a topic's partition count.

use crate::broker::Broker;
use kaas_core::protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kaas_core::protocol::messages::{CreatePartitionsRequest, CreatePartitionsResponse};
use kaas_core::protocol::ErrorCode;
use std::sync::Arc;

pub async fn handle(
    broker: &Arc<Broker>,
    req: CreatePartitionsRequest,
) -> CreatePartitionsResponse {
    let mut results = Vec::with_capacity(req.topics.len());
    for t in req.topics {
        let mut result = CreatePartitionsTopicResult {
            name: t.name.clone(),
            ..Default::default()
        };
        let bad_assignment = t
            .assignments
            .as_ref()
            .is_some_and(|a| a.iter().any(|a| a.broker_ids != [broker.config.broker_id]));
        let outcome = if bad_assignment {
            Err(crate::broker::AdminError::new(
                ErrorCode::InvalidReplicaAssignment,
                "Assignments may only name this broker",
            ))
        } else {
            broker
                .create_partitions(&t.name, t.count, req.validate_only)
                .await
        };
        if let Err(e) = outcome {
            result.error_code = e.code.code();
            result.error_message = Some(e.message);
        }
        results.push(result);
    }
    CreatePartitionsResponse {
        results,
        ..Default::default()
    }
}
