//! LeaveGroup: one member (v0-2) or a batch (v3+, which also lets an admin
//! remove static members by instance id).

use super::wire_code;
use crate::broker::Broker;
use kaas_core::protocol::messages::leave_group_response::MemberResponse;
use kaas_core::protocol::messages::{LeaveGroupRequest, LeaveGroupResponse};
use std::sync::Arc;

pub fn handle(broker: &Arc<Broker>, req: LeaveGroupRequest, version: i16) -> LeaveGroupResponse {
    let leaving: Vec<(String, Option<String>)> = if version >= 3 {
        req.members
            .into_iter()
            .map(|m| (m.member_id, m.group_instance_id))
            .collect()
    } else {
        vec![(req.member_id, None)]
    };
    let result = broker
        .group_coordinator(&req.group_id)
        .and_then(|groups| groups.leave(&req.group_id, &leaving));
    if version < 3 {
        // One member: its outcome is the answer.
        let outcome = result.and_then(|outcomes| outcomes.first().copied().unwrap_or(Ok(())));
        return LeaveGroupResponse {
            error_code: wire_code(&outcome),
            ..Default::default()
        };
    }
    let error_code = wire_code(&result);
    let members = match result {
        Ok(outcomes) => leaving
            .into_iter()
            .zip(outcomes)
            .map(|((member_id, group_instance_id), outcome)| MemberResponse {
                member_id,
                group_instance_id,
                error_code: wire_code(&outcome),
                ..Default::default()
            })
            .collect(),
        // A group-level error answers for every member.
        Err(_) => Vec::new(),
    };
    LeaveGroupResponse {
        error_code,
        members,
        ..Default::default()
    }
}
