//! FindCoordinator: which broker coordinates a group or a transactional id.
//! This broker when the ownership gate lets it serve the key, else the
//! live broker holding the slot's newest claim.

use crate::broker::Broker;
use kaas_core::protocol::messages::find_coordinator_response::Coordinator;
use kaas_core::protocol::messages::{FindCoordinatorRequest, FindCoordinatorResponse};
use kaas_core::protocol::ErrorCode;

/// Coordinator key types: consumer groups and transactional ids.
const KEY_TYPE_GROUP: i8 = 0;
const KEY_TYPE_TRANSACTION: i8 = 1;

pub fn handle(
    broker: &Broker,
    req: FindCoordinatorRequest,
    version: i16,
) -> FindCoordinatorResponse {
    // v4+ batches keys; earlier versions ask for one.
    let keys = if version >= 4 {
        req.coordinator_keys
    } else {
        vec![req.key]
    };
    let mut found: Vec<Coordinator> = keys
        .into_iter()
        .map(|k| locate(broker, k, req.key_type))
        .collect();
    if version >= 4 {
        return FindCoordinatorResponse {
            coordinators: found,
            ..Default::default()
        };
    }
    let c = found.pop().unwrap_or_default();
    FindCoordinatorResponse {
        error_code: c.error_code,
        error_message: c.error_message,
        node_id: c.node_id,
        host: c.host,
        port: c.port,
        ..Default::default()
    }
}

fn locate(broker: &Broker, key: String, key_type: i8) -> Coordinator {
    let cfg = &broker.config;
    let error = |code: ErrorCode, message: String, key: String| Coordinator {
        key,
        node_id: -1,
        host: String::new(),
        port: -1,
        error_code: code.code(),
        error_message: Some(message),
        ..Default::default()
    };
    if key_type != KEY_TYPE_GROUP && key_type != KEY_TYPE_TRANSACTION {
        return error(
            ErrorCode::InvalidRequest,
            format!("Unsupported coordinator key type {key_type}"),
            key,
        );
    }
    // This broker, if the ownership gate lets it serve the key; else the
    // live broker holding the slot's newest claim.
    let slot = kaas_core::cluster::coordinator_slot(&key);
    let (served_here, claim) = if key_type == KEY_TYPE_GROUP {
        (
            broker.group_coordinator(&key).is_ok(),
            broker.groups.slot_claim(slot),
        )
    } else {
        (
            broker.txn_coordinator(&key).is_ok(),
            broker.transactions.slot_claim(slot),
        )
    };
    let found = if served_here {
        Some((
            cfg.broker_id,
            cfg.advertised_host.clone(),
            cfg.advertised_port,
        ))
    } else {
        claim
            .filter(|c| c.broker_id != cfg.broker_id)
            .and_then(|c| {
                broker
                    .membership
                    .live(broker.env.clock.monotonic_ms())
                    .into_iter()
                    .find(|b| b.id == c.broker_id)
            })
            .map(|b| (b.id, b.host, b.port))
    };
    match found {
        Some((node_id, host, port)) => Coordinator {
            key,
            node_id,
            host,
            port,
            error_code: ErrorCode::None.code(),
            error_message: None,
            ..Default::default()
        },
        None => error(
            ErrorCode::CoordinatorNotAvailable,
            "The coordinator is not available.".into(),
            key,
        ),
    }
}
