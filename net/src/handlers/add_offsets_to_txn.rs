//! AddOffsetsToTxn: the transaction will commit offsets of this group
//! (KIP-98); its marker phase completes them in the group coordinator.

use crate::broker::Broker;
use kaas_core::protocol::messages::{
    add_offsets_to_txn_request, AddOffsetsToTxnRequest, AddOffsetsToTxnResponse,
};
use kaas_core::protocol::ErrorCode;
use kaas_core::txn::rules::fenced_error_for;
use std::sync::Arc;

pub async fn handle(
    broker: &Arc<Broker>,
    req: AddOffsetsToTxnRequest,
    version: i16,
) -> AddOffsetsToTxnResponse {
    let outcome = add(broker, &req).await;
    let code = match outcome {
        Ok(()) => ErrorCode::None,
        Err(ErrorCode::ProducerFenced) => {
            fenced_error_for(add_offsets_to_txn_request::API_KEY, version)
        }
        Err(code) => code,
    };
    AddOffsetsToTxnResponse {
        error_code: code.code(),
        ..Default::default()
    }
}

async fn add(broker: &Arc<Broker>, req: &AddOffsetsToTxnRequest) -> Result<(), ErrorCode> {
    if req.transactional_id.is_empty() {
        return Err(ErrorCode::InvalidRequest);
    }
    broker
        .txn_coordinator(&req.transactional_id)?
        .add_to_transaction(
            &req.transactional_id,
            req.producer_id,
            req.producer_epoch,
            &[],
            std::slice::from_ref(&req.group_id),
        )
        .await
}
