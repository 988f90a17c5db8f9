//! DescribeGroups: state, protocol and members of each group.

use super::wire_code;
use crate::broker::Broker;
use kaas_core::group::GroupState;
use kaas_core::protocol::messages::describe_groups_response::{
    DescribedGroup, DescribedGroupMember,
};
use kaas_core::protocol::messages::{DescribeGroupsRequest, DescribeGroupsResponse};
use kaas_core::protocol::ErrorCode;
use std::sync::Arc;

/// ACL operations on a group, as bits (READ 3, DELETE 6, DESCRIBE 8): with
/// no authorizer every client may do all of them.
const GROUP_OPERATIONS: i32 = (1 << 3) | (1 << 6) | (1 << 8);

pub fn handle(
    broker: &Arc<Broker>,
    req: DescribeGroupsRequest,
    version: i16,
) -> DescribeGroupsResponse {
    let authorized_operations = if req.include_authorized_operations {
        GROUP_OPERATIONS
    } else {
        i32::MIN
    };
    let groups = req
        .groups
        .into_iter()
        .map(|group_id| {
            match broker
                .group_coordinator(&group_id)
                .and_then(|g| g.describe_group(&group_id))
            {
                Err(code) => DescribedGroup {
                    error_code: code.code(),
                    group_id,
                    authorized_operations,
                    ..Default::default()
                },
                Ok(Some(d)) => DescribedGroup {
                    error_code: ErrorCode::None.code(),
                    group_id,
                    group_state: d.state.as_str().to_string(),
                    protocol_type: d.protocol_type,
                    protocol_data: d.protocol_data,
                    members: d
                        .members
                        .into_iter()
                        .map(|m| DescribedGroupMember {
                            member_id: m.member_id,
                            group_instance_id: m.instance_id,
                            client_id: m.client_id,
                            client_host: m.client_host,
                            member_metadata: m.metadata,
                            member_assignment: m.assignment,
                            ..Default::default()
                        })
                        .collect(),
                    authorized_operations,
                    ..Default::default()
                },
                Ok(None) => {
                    // Before v6 an unknown group is described as Dead without
                    // an error; v6 (KIP-1043) says GROUP_ID_NOT_FOUND.
                    let outcome = if version >= 6 {
                        Err(ErrorCode::GroupIdNotFound)
                    } else {
                        Ok(())
                    };
                    DescribedGroup {
                        error_code: wire_code(&outcome),
                        error_message: outcome
                            .err()
                            .map(|_| format!("Group {group_id} not found.")),
                        group_id,
                        group_state: GroupState::Dead.as_str().to_string(),
                        authorized_operations,
                        ..Default::default()
                    }
                }
            }
        })
        .collect();
    DescribeGroupsResponse {
        groups,
        ..Default::default()
    }
}
