//! InitProducerId: a producer id and epoch for an idempotent or a
//! transactional producer.
//!
//! Without a transactional id Kafka always mints a new id at epoch 0,
//! whatever id and epoch the request carries (v3+); so does kaas. With one,
//! the transaction coordinator decides (KIP-98, KIP-360: see
//! `kaas_core::txn::rules::init_producer_id`): the same producer id at the
//! next epoch, a retry answered without a second bump, or a fenced claim.
//! A transaction still in flight is aborted first, under the bumped epoch,
//! and the producer is told CONCURRENT_TRANSACTIONS: its retry gets the
//! identity once the abort's markers are durable.

use crate::broker::Broker;
use crate::buggify::Site;
use crate::transactions::{complete, InitOutcome};
use kaas_core::protocol::messages::{
    init_producer_id_request, InitProducerIdRequest, InitProducerIdResponse,
};
use kaas_core::protocol::ErrorCode;
use kaas_core::txn::rules::fenced_error_for;
use kaas_core::txn::Claim;
use std::sync::Arc;

/// First version whose request may claim the producer's current identity.
const CLAIM_FROM: i16 = 3;

pub async fn handle(
    broker: &Arc<Broker>,
    req: InitProducerIdRequest,
    version: i16,
) -> InitProducerIdResponse {
    let mut resp = InitProducerIdResponse {
        producer_id: -1,
        producer_epoch: -1,
        ..Default::default()
    };
    let outcome = match req.transactional_id.as_deref() {
        None => next_producer_id(broker).await,
        Some(id) => transactional(broker, id, &req, version).await,
    };
    match outcome {
        Ok((producer_id, producer_epoch)) => {
            resp.producer_id = producer_id;
            resp.producer_epoch = producer_epoch;
        }
        Err(ErrorCode::ProducerFenced) => {
            resp.error_code = fenced_error_for(init_producer_id_request::API_KEY, version).code()
        }
        Err(code) => resp.error_code = code.code(),
    }
    resp
}

/// A fresh producer id at epoch 0 (also drawn by EndTxn v5 at an
/// exhausted epoch).
pub(super) async fn next_producer_id(broker: &Broker) -> Result<(i64, i16), ErrorCode> {
    match broker.producer_ids.next().await {
        Ok(pid) => Ok((pid, 0)),
        Err(e) => {
            tracing::error!(error = %e, "cannot allocate a producer id");
            Err(ErrorCode::CoordinatorNotAvailable)
        }
    }
}

async fn transactional(
    broker: &Arc<Broker>,
    id: &str,
    req: &InitProducerIdRequest,
    version: i16,
) -> Result<(i64, i16), ErrorCode> {
    if id.is_empty() {
        return Err(ErrorCode::InvalidRequest);
    }
    let coordinator = broker.txn_coordinator(id)?;
    // -1/-1 claims nothing (a producer starting afresh).
    let claim = (version >= CLAIM_FROM && req.producer_id >= 0).then_some(Claim {
        producer_id: req.producer_id,
        producer_epoch: req.producer_epoch,
    });
    let fresh = if coordinator.needs_fresh_producer_id(id) {
        Some(next_producer_id(broker).await?.0)
    } else {
        None
    };
    let outcome = coordinator
        .init_producer_id(id, req.transaction_timeout_ms, claim, fresh)
        .await?;
    // A failure here loses the answer to a durable bump: the producer
    // retries, and the fence below waits for that retry.
    broker
        .env
        .buggify
        .at_or(Site::EpochBumpPersisted, ErrorCode::CoordinatorNotAvailable)
        .await?;
    match outcome {
        InitOutcome::Ready {
            producer_id,
            producer_epoch,
        } => {
            broker.fence_producer(producer_id, producer_epoch);
            Ok((producer_id, producer_epoch))
        }
        InitOutcome::AbortFirst(prepared) => {
            broker.fence_producer(prepared.producer_id, prepared.producer_epoch);
            let b = broker.clone();
            tokio::spawn(async move {
                let _ = complete(&b, prepared).await;
            });
            Err(ErrorCode::ConcurrentTransactions)
        }
    }
}
