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

use super::init_producer_id::next_producer_id;
use crate::broker::Broker;
use crate::transactions::complete;
use kaas_core::protocol::messages::{end_txn_request, EndTxnRequest, EndTxnResponse};
use kaas_core::protocol::ErrorCode;
use kaas_core::txn::rules::fenced_error_for;
use std::sync::Arc;

/// First EndTxn version of transaction version 2 (KIP-890 part 2): the
/// epoch is bumped at every end and the answer names the producer's next
/// identity.
const EPOCH_BUMP_FROM: i16 = 5;

pub async fn handle(broker: &Arc<Broker>, req: EndTxnRequest, version: i16) -> EndTxnResponse {
    let mut resp = EndTxnResponse {
        producer_id: -1,
        producer_epoch: -1,
        ..Default::default()
    };
    match end(broker, &req, version >= EPOCH_BUMP_FROM).await {
        Ok((producer_id, producer_epoch)) => {
            if version >= EPOCH_BUMP_FROM {
                resp.producer_id = producer_id;
                resp.producer_epoch = producer_epoch;
            }
        }
        Err(ErrorCode::ProducerFenced) => {
            resp.error_code = fenced_error_for(end_txn_request::API_KEY, version).code()
        }
        Err(code) => resp.error_code = code.code(),
    }
    resp
}

async fn end(broker: &Arc<Broker>, req: &EndTxnRequest, v2: bool) -> Result<(i64, i16), ErrorCode> {
    if req.transactional_id.is_empty() {
        return Err(ErrorCode::InvalidRequest);
    }
    let coordinator = broker.txn_coordinator(&req.transactional_id)?;
    let fresh = if v2 && coordinator.end_may_rotate(&req.transactional_id) {
        Some(next_producer_id(broker).await?.0)
    } else {
        None
    };
    let (prepared, identity) = coordinator
        .end_txn(
            &req.transactional_id,
            req.producer_id,
            req.producer_epoch,
            req.committed,
            v2,
            fresh,
        )
        .await?;
    if let Some(prepared) = prepared {
        if v2 {
            // The new epoch fences the old one everywhere at once.
            broker.fence_producer(prepared.producer_id, prepared.producer_epoch);
        }
        complete(broker, prepared)
            .await
            .map_err(|_| ErrorCode::ConcurrentTransactions)?;
    }
    Ok(identity)
}
