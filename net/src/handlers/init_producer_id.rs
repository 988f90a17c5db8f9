//! InitProducerId for idempotent producers: a fresh producer id at epoch 0.
//!
//! Without a transactional id Kafka always mints a new id, whatever id and
//! epoch the request carries (v3+); so does kaas. Transactional ids need the
//! transaction coordinator, which kaas does not have yet: those requests are
//! refused with INVALID_REQUEST instead of handing out an id whose
//! transactions could not be honoured.

use crate::broker::Broker;
use kaas_core::protocol::messages::{InitProducerIdRequest, InitProducerIdResponse};
use kaas_core::protocol::ErrorCode;

pub async fn handle(broker: &Broker, req: InitProducerIdRequest) -> InitProducerIdResponse {
    let mut resp = InitProducerIdResponse {
        producer_id: -1,
        producer_epoch: -1,
        ..Default::default()
    };
    if req.transactional_id.is_some() {
        tracing::warn!(transactional_id = ?req.transactional_id, "transactions are not supported yet");
        resp.error_code = ErrorCode::InvalidRequest.code();
        return resp;
    }
    match broker.producer_ids.next().await {
        Ok(pid) => {
            resp.producer_id = pid;
            resp.producer_epoch = 0;
        }
        Err(e) => {
            tracing::error!(error = %e, "cannot allocate a producer id");
            resp.error_code = ErrorCode::CoordinatorNotAvailable.code();
        }
    }
    resp
}
