//! JoinGroup: a member enters (or re-enters) a group and waits for the
//! join phase to end. The rules are `kaas_core::group::classic`'s.

use super::wire_code;
use crate::broker::Broker;
use crate::entropy;
use kaas_core::group::{JoinError, JoinRequest, Protocol};
use kaas_core::protocol::messages::join_group_response::JoinGroupResponseMember;
use kaas_core::protocol::messages::{JoinGroupRequest, JoinGroupResponse};
use std::net::SocketAddr;
use std::sync::Arc;

pub async fn handle(
    broker: &Arc<Broker>,
    req: JoinGroupRequest,
    version: i16,
    client_id: &str,
    peer: SocketAddr,
) -> JoinGroupResponse {
    let join = JoinRequest {
        member_id: req.member_id,
        require_known_member_id: version >= 4 && req.group_instance_id.is_none(),
        instance_id: req.group_instance_id,
        client_id: client_id.to_string(),
        // As Kafka shows it (Java's InetAddress.toString() of the peer):
        // "/127.0.0.1". DescribeGroups reports it as the member's host.
        client_host: format!("/{}", peer.ip()),
        session_timeout_ms: req.session_timeout_ms,
        // v0 has no rebalance timeout: the session timeout served as both.
        rebalance_timeout_ms: if version == 0 {
            req.session_timeout_ms
        } else {
            req.rebalance_timeout_ms
        },
        protocol_type: req.protocol_type,
        protocols: req
            .protocols
            .into_iter()
            .map(|p| Protocol {
                name: p.name,
                metadata: p.metadata,
            })
            .collect(),
        supports_skip_assignment: version >= 9,
        unique_suffix: uuid_string(),
    };
    let result = match broker.group_coordinator(&req.group_id) {
        Ok(groups) => groups.join(&req.group_id, join).await,
        Err(error) => Err(JoinError {
            error,
            member_id: join.member_id,
        }),
    };
    let error_code = wire_code(&result.as_ref().map_err(|refused| refused.error));
    // Before v7 the protocol name is not nullable.
    let protocol_name = |name: Option<String>| {
        if version >= 7 {
            name
        } else {
            Some(name.unwrap_or_default())
        }
    };
    match result {
        Ok(joined) => JoinGroupResponse {
            error_code,
            generation_id: joined.generation,
            protocol_type: joined.protocol_type,
            protocol_name: protocol_name(joined.protocol_name),
            leader: joined.leader,
            skip_assignment: joined.skip_assignment,
            member_id: joined.member_id,
            members: joined
                .members
                .into_iter()
                .map(|m| JoinGroupResponseMember {
                    member_id: m.member_id,
                    group_instance_id: m.instance_id,
                    metadata: m.metadata,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        },
        // Only the member id: no generation, protocol, leader or members.
        Err(refused) => JoinGroupResponse {
            error_code,
            generation_id: -1,
            protocol_type: None,
            protocol_name: protocol_name(None),
            leader: String::new(),
            skip_assignment: false,
            member_id: refused.member_id,
            members: Vec::new(),
            ..Default::default()
        },
    }
}

/// A random UUID in its usual text form, the unique part of member ids
/// (as in Kafka's).
fn uuid_string() -> String {
    let h = format!("{:032x}", entropy::random_uuid().as_u128());
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}
