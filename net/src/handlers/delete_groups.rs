//! DeleteGroups: removes empty groups and their offsets, answered once the
//! removal is durable.

use super::wire_code;
use crate::broker::Broker;
use kaas_core::protocol::messages::delete_groups_response::DeletableGroupResult;
use kaas_core::protocol::messages::{DeleteGroupsRequest, DeleteGroupsResponse};
use std::sync::Arc;

pub async fn handle(broker: &Arc<Broker>, req: DeleteGroupsRequest) -> DeleteGroupsResponse {
    let outcomes = broker.groups.delete_groups(&req.groups_names).await;
    let results = req
        .groups_names
        .into_iter()
        .zip(outcomes)
        .map(|(group_id, outcome)| DeletableGroupResult {
            group_id,
            error_code: wire_code(&outcome),
            ..Default::default()
        })
        .collect();
    DeleteGroupsResponse {
        results,
        ..Default::default()
    }
}
