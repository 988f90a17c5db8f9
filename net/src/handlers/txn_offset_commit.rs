//! TxnOffsetCommit (KIP-98, KIP-447): offsets a transaction commits for a
//! group, staged durably in the group's slot file and visible only once
//! the transaction's markers are durable (`crate::transactions::completion`).
//!
//! The transaction must have added the group (AddOffsetsToTxn) at the
//! producer's current epoch; v3+ also checks member, generation and
//! instance id against the live group, as OffsetCommit does. Partitions of
//! topics that do not exist are refused here.

use crate::broker::Broker;
use crate::cluster::txn_asks;
use kaas_core::group::coordinator::{CommitOffset, CommitRequest};
use kaas_core::protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kaas_core::protocol::messages::{
    txn_offset_commit_request, TxnOffsetCommitRequest, TxnOffsetCommitResponse,
};
use kaas_core::protocol::ErrorCode;
use kaas_core::txn::coordinator_queue::AskKind;
use kaas_core::txn::rules::{fenced_error_for, not_in_transaction_error};
use std::sync::Arc;

/// First TxnOffsetCommit version of transaction version 2 (KIP-890 part 2):
/// the group joins the transaction with its first offsets.
const IMPLICIT_ADD_FROM: i16 = 5;

pub async fn handle(
    broker: &Arc<Broker>,
    req: TxnOffsetCommitRequest,
    version: i16,
) -> TxnOffsetCommitResponse {
    let mut offsets = Vec::new();
    let mut known = Vec::new();
    for t in &req.topics {
        let topic = broker.topic(&t.name);
        for p in &t.partitions {
            let exists = topic
                .as_ref()
                .is_some_and(|topic| topic.partition(p.partition_index).is_some());
            known.push(exists);
            if exists {
                offsets.push(CommitOffset {
                    topic: t.name.clone(),
                    partition: p.partition_index,
                    offset: p.committed_offset,
                    leader_epoch: p.committed_leader_epoch,
                    metadata: p.committed_metadata.clone(),
                });
            }
        }
    }
    let result = stage(broker, &req, offsets, version).await;
    let fenced = |code| match code {
        ErrorCode::ProducerFenced => fenced_error_for(txn_offset_commit_request::API_KEY, version),
        ErrorCode::InvalidTxnState => {
            not_in_transaction_error(txn_offset_commit_request::API_KEY, version)
        }
        other => other,
    };
    let mut staged = match &result {
        Ok(outcomes) => outcomes.clone().into_iter(),
        Err(_) => Vec::new().into_iter(),
    };
    let mut known = known.into_iter();
    let topics = req
        .topics
        .iter()
        .map(|t| TxnOffsetCommitResponseTopic {
            name: t.name.clone(),
            partitions: t
                .partitions
                .iter()
                .map(|p| {
                    let outcome = match (known.next().unwrap_or(false), &result) {
                        (false, _) => Err(ErrorCode::UnknownTopicOrPartition),
                        (true, Err(e)) => Err(*e),
                        (true, Ok(_)) => {
                            staged.next().unwrap_or(Err(ErrorCode::UnknownServerError))
                        }
                    };
                    TxnOffsetCommitResponsePartition {
                        partition_index: p.partition_index,
                        error_code: outcome.err().map_or(ErrorCode::None, fenced).code(),
                        ..Default::default()
                    }
                })
                .collect(),
            ..Default::default()
        })
        .collect();
    TxnOffsetCommitResponse {
        topics,
        ..Default::default()
    }
}

async fn stage(
    broker: &Arc<Broker>,
    req: &TxnOffsetCommitRequest,
    offsets: Vec<CommitOffset>,
    version: i16,
) -> Result<Vec<Result<(), ErrorCode>>, ErrorCode> {
    let groups = broker.group_coordinator(&req.group_id)?;
    if req.transactional_id.is_empty() {
        return Err(ErrorCode::InvalidRequest);
    }
    let id = req.transactional_id.as_str();
    let transactions = broker.txn_coordinator(id);
    // The transaction's coordinator may be another broker: then it is
    // asked through the volume (`crate::cluster::txn_asks`).
    let remote = match &transactions {
        Ok(_) => None,
        Err(code) => Some(txn_asks::remote_coordinator(broker, id).ok_or(*code)?),
    };
    let question = |kind| txn_asks::Question {
        kind,
        transactional_id: id,
        producer_id: req.producer_id,
        producer_epoch: req.producer_epoch,
        partitions: &[],
        groups: std::slice::from_ref(&req.group_id),
    };
    if version >= IMPLICIT_ADD_FROM {
        // Transaction version 2: the commit adds its group itself.
        match (&transactions, remote) {
            (Ok(t), _) => {
                t.add_to_transaction(
                    id,
                    req.producer_id,
                    req.producer_epoch,
                    &[],
                    std::slice::from_ref(&req.group_id),
                )
                .await?
            }
            (Err(_), Some(c)) => txn_asks::ask(broker, c, question(AskKind::Add)).await?,
            (Err(code), None) => return Err(*code),
        }
    }
    // The answer comes back through the volume: a completion of the
    // transaction applied here meanwhile refuses the staging (see
    // `kaas_core::group::txn_completions`).
    let asked = match remote {
        Some(c) => {
            let mark = groups.txn_completion_mark();
            let answer = txn_asks::ask(broker, c, question(AskKind::VerifyGroup)).await;
            Some((answer, mark))
        }
        None => None,
    };
    let verify = || match (&asked, &transactions) {
        (Some((answer, _)), _) => *answer,
        (None, Ok(t)) => t.verify_group(id, req.producer_id, req.producer_epoch, &req.group_id),
        (None, Err(code)) => Err(*code),
    };
    if offsets.is_empty() {
        return verify().map(|()| Vec::new());
    }
    let commit = CommitRequest {
        group_id: req.group_id.clone(),
        member_id: req.member_id.clone(),
        instance_id: req.group_instance_id.clone(),
        generation: req.generation_id,
        retention_time_ms: -1,
        missing_group_is_not_found: false,
        offsets,
    };
    let verified_at = asked.map(|(_, mark)| mark);
    groups
        .stage_txn_offsets(
            commit,
            req.producer_id,
            req.producer_epoch,
            verified_at,
            verify,
        )
        .await
}
