//! AddPartitionsToTxn: the partitions a transaction will write (and owe
//! markers to). v0-3 carry one transaction from a producer; v4+ batch many
//! and may only verify (KIP-890 part 1: is each partition already in its
//! transaction?), which is what brokers ask of a coordinator.
//!
//! A partition the broker does not have fails the request before anything
//! is added: it gets UNKNOWN_TOPIC_OR_PARTITION and every other partition
//! OPERATION_NOT_ATTEMPTED, as in Kafka. Otherwise the coordinator's answer
//! is every partition's.

use crate::broker::Broker;
use kaas_core::protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
};
use kaas_core::protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use kaas_core::protocol::messages::{
    add_partitions_to_txn_request, AddPartitionsToTxnRequest, AddPartitionsToTxnResponse,
};
use kaas_core::protocol::ErrorCode;
use kaas_core::txn::rules::{fenced_error_for, not_in_transaction_error};
use std::sync::Arc;

/// First version with the batched, broker-to-broker form.
const BATCHED_FROM: i16 = 4;

pub async fn handle(
    broker: &Arc<Broker>,
    req: AddPartitionsToTxnRequest,
    version: i16,
) -> AddPartitionsToTxnResponse {
    if version < BATCHED_FROM {
        let txn = AddPartitionsToTxnTransaction {
            transactional_id: req.v3_and_below_transactional_id,
            producer_id: req.v3_and_below_producer_id,
            producer_epoch: req.v3_and_below_producer_epoch,
            verify_only: false,
            topics: req.v3_and_below_topics,
            ..Default::default()
        };
        let result = one_transaction(broker, txn, version).await;
        return AddPartitionsToTxnResponse {
            results_by_topic_v3_and_below: result.topic_results,
            ..Default::default()
        };
    }
    let mut results = Vec::with_capacity(req.transactions.len());
    for txn in req.transactions {
        results.push(one_transaction(broker, txn, version).await);
    }
    AddPartitionsToTxnResponse {
        results_by_transaction: results,
        ..Default::default()
    }
}

async fn one_transaction(
    broker: &Arc<Broker>,
    txn: AddPartitionsToTxnTransaction,
    version: i16,
) -> AddPartitionsToTxnResult {
    let partitions: Vec<(String, i32)> = txn
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| (t.name.clone(), *p)))
        .collect();
    // Whether the partition exists, wherever it is led: the coordinator
    // adds partitions other brokers lead too (their markers go through the
    // marker queue).
    let unknown: Vec<bool> = partitions
        .iter()
        .map(|(t, p)| {
            broker
                .topic(t)
                .and_then(|t| t.partition(*p).cloned())
                .is_none()
        })
        .collect();
    let codes: Vec<ErrorCode> = if unknown.iter().any(|u| *u) {
        unknown
            .iter()
            .map(|&u| {
                if u {
                    ErrorCode::UnknownTopicOrPartition
                } else {
                    ErrorCode::OperationNotAttempted
                }
            })
            .collect()
    } else if txn.verify_only {
        partitions
            .iter()
            .map(|p| verify(broker, &txn, p).err().unwrap_or(ErrorCode::None))
            .collect()
    } else {
        let code = add(broker, &txn, &partitions)
            .await
            .err()
            .unwrap_or(ErrorCode::None);
        vec![code; partitions.len()]
    };
    let codes = codes.into_iter().map(|c| match c {
        ErrorCode::ProducerFenced => {
            fenced_error_for(add_partitions_to_txn_request::API_KEY, version)
        }
        ErrorCode::InvalidTxnState if txn.verify_only => {
            not_in_transaction_error(add_partitions_to_txn_request::API_KEY, version)
        }
        other => other,
    });
    AddPartitionsToTxnResult {
        transactional_id: txn.transactional_id.clone(),
        topic_results: shape(&txn.topics, codes),
        ..Default::default()
    }
}

async fn add(
    broker: &Arc<Broker>,
    txn: &AddPartitionsToTxnTransaction,
    partitions: &[(String, i32)],
) -> Result<(), ErrorCode> {
    if txn.transactional_id.is_empty() {
        return Err(ErrorCode::InvalidRequest);
    }
    broker
        .txn_coordinator(&txn.transactional_id)?
        .add_to_transaction(
            &txn.transactional_id,
            txn.producer_id,
            txn.producer_epoch,
            partitions,
            &[],
        )
        .await
}

fn verify(
    broker: &Broker,
    txn: &AddPartitionsToTxnTransaction,
    partition: &(String, i32),
) -> Result<(), ErrorCode> {
    broker.txn_coordinator(&txn.transactional_id)?.verify(
        &txn.transactional_id,
        txn.producer_id,
        txn.producer_epoch,
        partition,
    )
}

/// The per-partition codes, in request order, shaped as the response's
/// topics.
fn shape(
    topics: &[AddPartitionsToTxnTopic],
    mut codes: impl Iterator<Item = ErrorCode>,
) -> Vec<AddPartitionsToTxnTopicResult> {
    topics
        .iter()
        .map(|t| AddPartitionsToTxnTopicResult {
            name: t.name.clone(),
            results_by_partition: t
                .partitions
                .iter()
                .map(|p| AddPartitionsToTxnPartitionResult {
                    partition_index: *p,
                    partition_error_code: codes.next().unwrap_or(ErrorCode::None).code(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        })
        .collect()
}
