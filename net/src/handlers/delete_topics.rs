//! DeleteTopics, by name (v0+) or by topic id (v6+).

use crate::broker::Broker;
use kaas_core::protocol::messages::delete_topics_response::DeletableTopicResult;
use kaas_core::protocol::messages::{DeleteTopicsRequest, DeleteTopicsResponse};
use kaas_core::protocol::{ErrorCode, Uuid};
use std::sync::Arc;

pub async fn handle(broker: &Arc<Broker>, req: DeleteTopicsRequest) -> DeleteTopicsResponse {
    // v0-5 list names; v6+ lists (name or id) pairs.
    let mut targets: Vec<(Option<String>, Uuid)> = req
        .topic_names
        .into_iter()
        .map(|n| (Some(n), Uuid::ZERO))
        .collect();
    targets.extend(req.topics.into_iter().map(|t| (t.name, t.topic_id)));
    let mut responses = Vec::with_capacity(targets.len());
    for (name, id) in targets {
        let mut result = DeletableTopicResult {
            name: name.clone(),
            topic_id: id,
            ..Default::default()
        };
        let resolved = match (&name, id.is_zero()) {
            (Some(n), _) => broker
                .topic(n)
                .map(|t| t.name.clone())
                .ok_or(ErrorCode::UnknownTopicOrPartition),
            (None, false) => broker
                .topic_by_id(id)
                .map(|t| t.name.clone())
                .ok_or(ErrorCode::UnknownTopicId),
            (None, true) => Err(ErrorCode::InvalidRequest),
        };
        match resolved {
            Ok(n) => match broker.delete_topic(&n).await {
                Ok(deleted_id) => {
                    result.name = Some(n);
                    result.topic_id = deleted_id;
                }
                Err(e) => {
                    result.error_code = e.code.code();
                    result.error_message = Some(e.message);
                }
            },
            Err(code) => result.error_code = code.code(),
        }
        responses.push(result);
    }
    DeleteTopicsResponse {
        responses,
        ..Default::default()
    }
}
