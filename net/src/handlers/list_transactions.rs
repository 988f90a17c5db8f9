//! ListTransactions (KIP-664, with KIP-994's duration filter and
//! KIP-1152's id pattern): the transactional ids this broker coordinates,
//! filtered by state, producer id, how long their transaction has been
//! running and a regular expression on the id. A state filter naming no
//! state is reported back in `unknown_state_filters`; a pattern that does
//! not compile fails the request with INVALID_REGULAR_EXPRESSION.

use crate::broker::Broker;
use kaas_core::protocol::messages::list_transactions_response::TransactionState;
use kaas_core::protocol::messages::{ListTransactionsRequest, ListTransactionsResponse};
use kaas_core::txn::rules::{is_listed, transactional_id_pattern};
use kaas_core::txn::state::STATE_NAMES;

pub fn handle(broker: &Broker, req: ListTransactionsRequest) -> ListTransactionsResponse {
    let now = broker.env.now_ms();
    let pattern = match transactional_id_pattern(req.transactional_id_pattern.as_deref()) {
        Ok(p) => p,
        Err(e) => {
            return ListTransactionsResponse {
                error_code: e.code(),
                ..Default::default()
            }
        }
    };
    let unknown_state_filters = req
        .state_filters
        .iter()
        .filter(|s| !STATE_NAMES.contains(&s.as_str()))
        .cloned()
        .collect();
    let transaction_states = broker
        .transactions
        .entries()
        .into_iter()
        .filter(|e| {
            is_listed(
                e,
                &req.state_filters,
                &req.producer_id_filters,
                req.duration_filter,
                pattern.as_ref(),
                now,
            )
        })
        .map(|e| TransactionState {
            transactional_id: e.transactional_id,
            producer_id: e.producer_id,
            transaction_state: e.state.as_str().to_string(),
            ..Default::default()
        })
        .collect();
    ListTransactionsResponse {
        unknown_state_filters,
        transaction_states,
        ..Default::default()
    }
}
