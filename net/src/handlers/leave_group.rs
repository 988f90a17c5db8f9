//! LeaveGroup: one member (v0-2) or a batch (v3+, which also lets an admin
//! remove static members by instance id).

use crate::broker::Broker;
use kaas_core::protocol::messages::leave_group_response::MemberResponse;
use kaas_core::protocol::messages::{LeaveGroupRequest, LeaveGroupResponse};
use kaas_core::protocol::ErrorCode;
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
    match broker.groups.leave(&req.group_id, &leaving) {
        Err(e) => LeaveGroupResponse {
            error_code: e.code(),
            ..Default::default()
        },
        Ok(errors) if version >= 3 => LeaveGroupResponse {
            error_code: ErrorCode::None.code(),
            members: leaving
                .into_iter()
                .zip(errors)
                .map(|((member_id, group_instance_id), e)| MemberResponse {
                    member_id,
                    group_instance_id,
                    error_code: e.code(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        },
        // One member: its error is the answer.
        Ok(errors) => LeaveGroupResponse {
            error_code: errors.first().copied().unwrap_or(ErrorCode::None).code(),
            ..Default::default()
        },
    }
}
