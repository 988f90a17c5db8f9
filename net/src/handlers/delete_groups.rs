//! DeleteGroups: removes empty groups and their offsets, answered once the
//! removal is durable.

use super::wire_code;
use crate::broker::Broker;
use kaas_core::protocol::messages::delete_groups_response::DeletableGroupResult;
use kaas_core::protocol::messages::{DeleteGroupsRequest, DeleteGroupsResponse};
use kaas_core::protocol::ErrorCode;
use std::sync::Arc;

pub async fn handle(broker: &Arc<Broker>, req: DeleteGroupsRequest) -> DeleteGroupsResponse {
    // Each group through the ownership gate; those this broker coordinates
    // are deleted together (one write per slot).
    let gated: Vec<_> = req
        .groups_names
        .iter()
        .map(|id| broker.group_coordinator(id).map(|_| id.clone()))
        .collect();
    let owned: Vec<String> = gated.iter().filter_map(|g| g.clone().ok()).collect();
    let mut deleted = broker.groups.delete_groups(&owned).await.into_iter();
    let outcomes: Vec<Result<(), ErrorCode>> = gated
        .into_iter()
        .map(|g| match g {
            Ok(_) => deleted.next().unwrap_or(Err(ErrorCode::NotCoordinator)),
            Err(code) => Err(code),
        })
        .collect();
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
