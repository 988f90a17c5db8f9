//! SyncGroup: the leader hands in the assignment, every member waits for
//! its share.

use super::wire_code;
use crate::broker::Broker;
use kaas_core::group::SyncRequest;
use kaas_core::protocol::messages::{SyncGroupRequest, SyncGroupResponse};
use std::sync::Arc;

pub async fn handle(broker: &Arc<Broker>, req: SyncGroupRequest) -> SyncGroupResponse {
    let sync = SyncRequest {
        member_id: req.member_id,
        instance_id: req.group_instance_id,
        generation: req.generation_id,
        protocol_type: req.protocol_type,
        protocol_name: req.protocol_name,
        assignments: req
            .assignments
            .into_iter()
            .map(|a| (a.member_id, a.assignment))
            .collect(),
    };
    let result = match broker.group_coordinator(&req.group_id) {
        Ok(groups) => groups.sync(&req.group_id, sync).await,
        Err(code) => Err(code),
    };
    let error_code = wire_code(&result);
    match result {
        Ok(synced) => SyncGroupResponse {
            error_code,
            protocol_type: synced.protocol_type,
            protocol_name: synced.protocol_name,
            assignment: synced.assignment,
            ..Default::default()
        },
        // No protocol, an empty assignment.
        Err(_) => SyncGroupResponse {
            error_code,
            ..Default::default()
        },
    }
}
