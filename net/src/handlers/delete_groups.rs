//! DeleteGroups: removes empty groups and their offsets, answered once the
//! removal is durable.

use crate::broker::Broker;
use kaas_core::protocol::messages::delete_groups_response::DeletableGroupResult;
use kaas_core::protocol::messages::{DeleteGroupsRequest, DeleteGroupsResponse};
use std::sync::Arc;

pub async fn handle(broker: &Arc<Broker>, req: DeleteGroupsRequest) -> DeleteGroupsResponse {
    let errors = broker.groups.delete_groups(&req.groups_names).await;
    let results = req
        .groups_names
        .into_iter()
        .zip(errors)
        .map(|(group_id, e)| DeletableGroupResult {
            group_id,
            error_code: e.code(),
            ..Default::default()
        })
        .collect();
    DeleteGroupsResponse {
        results,
        ..Default::default()
    }
}
