//! DescribeCluster: this broker, which is also the controller.

use crate::broker::Broker;
use kaas_core::protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kaas_core::protocol::messages::{DescribeClusterRequest, DescribeClusterResponse};
use kaas_core::protocol::ErrorCode;

/// DescribeCluster endpoint types: 1 brokers, 2 controllers.
const ENDPOINT_BROKERS: i8 = 1;

pub fn handle(broker: &Broker, req: DescribeClusterRequest) -> DescribeClusterResponse {
    let cfg = &broker.config;
    if req.endpoint_type != ENDPOINT_BROKERS && req.endpoint_type != 2 {
        return DescribeClusterResponse {
            error_code: ErrorCode::UnsupportedEndpointType.code(),
            error_message: Some(format!("Unsupported endpoint type {}", req.endpoint_type)),
            endpoint_type: req.endpoint_type,
            ..Default::default()
        };
    }
    DescribeClusterResponse {
        endpoint_type: req.endpoint_type,
        cluster_id: broker.cluster_id.clone(),
        controller_id: cfg.broker_id,
        brokers: vec![DescribeClusterBroker {
            broker_id: cfg.broker_id,
            host: cfg.advertised_host.clone(),
            port: cfg.advertised_port,
            rack: None,
            is_fenced: false,
            ..Default::default()
        }],
        ..Default::default()
    }
}
