//! EndTxn: commit or abort, in two phases. The prepared entry is made
//! durable (from then on the outcome is decided and survives a crash), the
//! markers are written to every partition and made durable, the staged
//! offsets are completed, and Complete* is made durable; only then is the
//! producer answered, so its next transaction starts on a clean slate.
//!
//! If the second phase fails half-way the entry stays prepared and the
//! producer is told CONCURRENT_TRANSACTIONS: its retry is answered the
//! same until the marker reconcile has completed the transaction, and then
//! succeeds (a retry in the completed direction).

use crate::broker::Broker;
use crate::transactions::complete;
use kaas_core::protocol::messages::{end_txn_request, EndTxnRequest, EndTxnResponse};
use kaas_core::protocol::ErrorCode;
use kaas_core::txn::rules::fenced_error_for;
use std::sync::Arc;

pub async fn handle(broker: &Arc<Broker>, req: EndTxnRequest, version: i16) -> EndTxnResponse {
    let code = match end(broker, &req).await {
        Ok(()) => ErrorCode::None,
        Err(ErrorCode::ProducerFenced) => fenced_error_for(end_txn_request::API_KEY, version),
        Err(code) => code,
    };
    EndTxnResponse {
        error_code: code.code(),
        producer_id: -1,
        producer_epoch: -1,
        ..Default::default()
    }
}

async fn end(broker: &Arc<Broker>, req: &EndTxnRequest) -> Result<(), ErrorCode> {
    if req.transactional_id.is_empty() {
        return Err(ErrorCode::InvalidRequest);
    }
    let prepared = broker
        .txn_coordinator(&req.transactional_id)?
        .end_txn(
            &req.transactional_id,
            req.producer_id,
            req.producer_epoch,
            req.committed,
        )
        .await?;
    match prepared {
        None => Ok(()),
        Some(prepared) => complete(broker, prepared)
            .await
            .map_err(|_| ErrorCode::ConcurrentTransactions),
    }
}
