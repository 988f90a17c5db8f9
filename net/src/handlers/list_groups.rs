//! ListGroups, with the states filter (v4+) and types filter (v5+).

use crate::broker::Broker;
use kaas_core::group::state::CLASSIC_GROUP_TYPE;
use kaas_core::protocol::messages::list_groups_response::ListedGroup;
use kaas_core::protocol::messages::{ListGroupsRequest, ListGroupsResponse};
use kaas_core::protocol::ErrorCode;
use std::sync::Arc;

pub fn handle(broker: &Arc<Broker>, req: ListGroupsRequest) -> ListGroupsResponse {
    let groups = broker
        .groups
        .list_groups(&req.states_filter, &req.types_filter)
        .into_iter()
        .map(|g| ListedGroup {
            group_id: g.group_id,
            protocol_type: g.protocol_type,
            group_state: g.state.as_str().to_string(),
            group_type: CLASSIC_GROUP_TYPE.to_string(),
            ..Default::default()
        })
        .collect();
    ListGroupsResponse {
        error_code: ErrorCode::None.code(),
        groups,
        ..Default::default()
    }
}
