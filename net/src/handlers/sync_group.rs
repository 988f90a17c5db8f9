//! SyncGroup: the leader hands in the assignment, every member waits for
//! its share.

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
    let r = broker.groups.sync(&req.group_id, sync).await;
    SyncGroupResponse {
        error_code: r.error.code(),
        protocol_type: r.protocol_type,
        protocol_name: r.protocol_name,
        assignment: r.assignment,
        ..Default::default()
    }
}
