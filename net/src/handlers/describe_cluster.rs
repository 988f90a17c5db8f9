//! DescribeCluster: the live brokers, and the controller among them
//! (`kaas_core::cluster::membership::controller_id`).

use crate::broker::Broker;
use kaas_core::protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kaas_core::protocol::messages::{DescribeClusterRequest, DescribeClusterResponse};
use kaas_core::protocol::ErrorCode;

/// DescribeCluster endpoint types: 1 brokers, 2 controllers.
const ENDPOINT_BROKERS: i8 = 1;

pub fn handle(broker: &Broker, req: DescribeClusterRequest) -> DescribeClusterResponse {
    if req.endpoint_type != ENDPOINT_BROKERS && req.endpoint_type != 2 {
        return DescribeClusterResponse {
            error_code: ErrorCode::UnsupportedEndpointType.code(),
            error_message: Some(format!("Unsupported endpoint type {}", req.endpoint_type)),
            endpoint_type: req.endpoint_type,
            ..Default::default()
        };
    }
    let now = broker.env.clock.monotonic_ms();
    DescribeClusterResponse {
        endpoint_type: req.endpoint_type,
        cluster_id: broker.cluster_id.clone(),
        controller_id: broker.membership.controller_id(now),
        // Every live broker serves as a controller too (there is no
        // separate quorum), so both endpoint types list the same brokers.
        brokers: broker
            .membership
            .live(now)
            .into_iter()
            .map(|b| DescribeClusterBroker {
                broker_id: b.id,
                host: b.host,
                port: b.port,
                rack: b.rack,
                is_fenced: false,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}
