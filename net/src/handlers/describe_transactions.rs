//! DescribeTransactions (KIP-664): the coordinator's entry of each id.
//! An id this broker does not coordinate is NOT_COORDINATOR; one it does
//! not know (or that expired) TRANSACTIONAL_ID_NOT_FOUND.

use crate::broker::Broker;
use kaas_core::cluster::coordinator_slot;
use kaas_core::protocol::messages::describe_transactions_response::{TopicData, TransactionState};
use kaas_core::protocol::messages::{DescribeTransactionsRequest, DescribeTransactionsResponse};
use kaas_core::protocol::ErrorCode;
use kaas_core::txn::TxnEntry;
use std::collections::BTreeMap;

/// Kafka's internal topic of committed offsets.
const OFFSETS_TOPIC: &str = "__consumer_offsets";

pub fn handle(broker: &Broker, req: DescribeTransactionsRequest) -> DescribeTransactionsResponse {
    let transaction_states = req
        .transactional_ids
        .into_iter()
        .map(|id| {
            let found = broker
                .txn_coordinator(&id)
                .and_then(|c| c.entry(&id).ok_or(ErrorCode::TransactionalIdNotFound));
            match found {
                Ok(entry) => described(entry),
                Err(code) => TransactionState {
                    error_code: code.code(),
                    transactional_id: id,
                    producer_id: -1,
                    producer_epoch: -1,
                    transaction_start_time_ms: 0,
                    ..Default::default()
                },
            }
        })
        .collect();
    DescribeTransactionsResponse {
        transaction_states,
        ..Default::default()
    }
}

fn described(entry: TxnEntry) -> TransactionState {
    let mut topics: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for (topic, partition) in &entry.partitions {
        topics.entry(topic.clone()).or_default().push(*partition);
    }
    // A group's offsets are written, in Kafka, to its partition of
    // __consumer_offsets, which the transaction lists among its own; kaas
    // shows the group's coordinator slot there, its counterpart.
    for group in &entry.groups {
        let slots = topics.entry(OFFSETS_TOPIC.to_string()).or_default();
        let slot = coordinator_slot(group) as i32;
        if !slots.contains(&slot) {
            slots.push(slot);
        }
    }
    TransactionState {
        error_code: ErrorCode::None.code(),
        transaction_state: entry.state.as_str().to_string(),
        transaction_timeout_ms: entry.timeout_ms,
        transaction_start_time_ms: entry.start_ms,
        producer_id: entry.producer_id,
        producer_epoch: entry.producer_epoch,
        topics: topics
            .into_iter()
            .map(|(topic, partitions)| TopicData {
                topic,
                partitions,
                ..Default::default()
            })
            .collect(),
        transactional_id: entry.transactional_id,
        ..Default::default()
    }
}
