//! Heartbeat: keeps a member's session alive and tells it when to rejoin.

use super::wire_code;
use crate::broker::Broker;
use kaas_core::protocol::messages::{HeartbeatRequest, HeartbeatResponse};
use std::sync::Arc;

pub fn handle(broker: &Arc<Broker>, req: HeartbeatRequest) -> HeartbeatResponse {
    let outcome = broker.group_coordinator(&req.group_id).and_then(|groups| {
        groups.heartbeat(
            &req.group_id,
            &req.member_id,
            req.group_instance_id.as_deref(),
            req.generation_id,
        )
    });
    HeartbeatResponse {
        error_code: wire_code(&outcome),
        ..Default::default()
    }
}
