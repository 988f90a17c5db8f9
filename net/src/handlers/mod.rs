//! Request handlers: one file per API.
//!
//! A handler is thin: it turns a decoded request into calls on the broker
//! (and, for rules, on `kaas_core`), and builds the response. `dispatch`
//! routes a request to its handler and owns the list of versions kaas
//! advertises in ApiVersions.

mod add_offsets_to_txn;
mod add_partitions_to_txn;
mod alter_configs;
mod api_versions;
mod create_partitions;
mod create_topics;
mod delete_groups;
mod delete_records;
mod delete_topics;
mod describe_cluster;
mod describe_configs;
mod describe_groups;
mod describe_producers;
mod describe_transactions;
mod end_txn;
mod fetch;
mod find_coordinator;
mod heartbeat;
mod init_producer_id;
mod join_group;
mod leave_group;
mod list_groups;
mod list_offsets;
mod list_transactions;
mod metadata;
mod offset_commit;
mod offset_delete;
mod offset_fetch;
mod offset_for_leader_epoch;
mod produce;
mod sync_group;
mod txn_offset_commit;
mod write_txn_markers;

use crate::broker::{Broker, Partition};
use kaas_core::protocol::messages::*;
use kaas_core::protocol::{ErrorCode, RequestBody, RequestError, RequestHeader, ResponseBody};
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

/// The APIs kaas serves and the versions of each: (api key, min, max).
/// Only APIs with a handler below are listed, so a client never learns of
/// an API that would be answered by closing the connection.
pub const SUPPORTED_APIS: &[(i16, i16, i16)] = &[
    (produce_request::API_KEY, 3, 13),
    (fetch_request::API_KEY, 4, 18),
    (list_offsets_request::API_KEY, 1, 10),
    (metadata_request::API_KEY, 0, 13),
    (api_versions_request::API_KEY, 0, 4),
    (create_topics_request::API_KEY, 2, 7),
    (delete_topics_request::API_KEY, 1, 6),
    (delete_records_request::API_KEY, 0, 2),
    (offset_for_leader_epoch_request::API_KEY, 2, 4),
    (describe_configs_request::API_KEY, 1, 4),
    (alter_configs_request::API_KEY, 0, 2),
    (incremental_alter_configs_request::API_KEY, 0, 1),
    (create_partitions_request::API_KEY, 0, 3),
    (describe_cluster_request::API_KEY, 0, 2),
    (init_producer_id_request::API_KEY, 0, 5),
    (describe_producers_request::API_KEY, 0, 0),
    (find_coordinator_request::API_KEY, 0, 6),
    (join_group_request::API_KEY, 0, 9),
    (sync_group_request::API_KEY, 0, 5),
    (heartbeat_request::API_KEY, 0, 4),
    (leave_group_request::API_KEY, 0, 5),
    (offset_commit_request::API_KEY, 2, 9),
    (offset_fetch_request::API_KEY, 1, 9),
    (describe_groups_request::API_KEY, 0, 6),
    (list_groups_request::API_KEY, 0, 5),
    (delete_groups_request::API_KEY, 0, 2),
    (offset_delete_request::API_KEY, 0, 0),
    // Transactions (KIP-98); EndTxn v5 and TxnOffsetCommit v5 are those of
    // transaction version 2 (KIP-890 part 2), finalized in ApiVersions.
    (add_partitions_to_txn_request::API_KEY, 0, 5),
    (add_offsets_to_txn_request::API_KEY, 0, 4),
    (end_txn_request::API_KEY, 0, 5),
    (txn_offset_commit_request::API_KEY, 0, 5),
    (describe_transactions_request::API_KEY, 0, 0),
    (list_transactions_request::API_KEY, 0, 2),
    (write_txn_markers_request::API_KEY, 1, 2),
];

/// One partition of a partition-addressed request.
pub(crate) trait PartitionRef {
    fn index(&self) -> i32;
    /// The leader epoch the client believes current; -1: unchecked.
    fn current_leader_epoch(&self) -> i32 {
        -1
    }
}

impl PartitionRef for i32 {
    fn index(&self) -> i32 {
        *self
    }
}

/// The fan-out every partition-addressed API shares: the topic is resolved
/// once by name, each partition passes the broker's ownership gate, and
/// `each` runs for those that do, in request order. Every partition gets
/// an outcome, paired with its request.
pub(crate) async fn per_partition<P, R, F, Fut>(
    broker: &Broker,
    topic: &str,
    partitions: Vec<P>,
    mut each: F,
) -> Vec<(P, Result<R, ErrorCode>)>
where
    P: PartitionRef,
    F: FnMut(Arc<Partition>, &P) -> Fut,
    Fut: Future<Output = Result<R, ErrorCode>>,
{
    let resolved = broker.topic(topic);
    let mut out = Vec::with_capacity(partitions.len());
    for p in partitions {
        let result = match resolved.as_deref() {
            None => Err(ErrorCode::UnknownTopicOrPartition),
            Some(t) => match broker.gate(t, p.index(), p.current_leader_epoch()) {
                Ok(partition) => each(partition, &p).await,
                Err(code) => Err(code),
            },
        };
        out.push((p, result));
    }
    out
}

pub fn supported_versions(api_key: i16) -> Option<(i16, i16)> {
    SUPPORTED_APIS
        .iter()
        .find(|(k, ..)| *k == api_key)
        .map(|&(_, lo, hi)| (lo, hi))
}

/// The wire's error code of a rule's outcome: NONE (0) for success, else
/// the error's own code. Rules say success with `Ok`, never with
/// `ErrorCode::None`; this is where the two meet.
fn wire_code<T>(outcome: &Result<T, ErrorCode>) -> i16 {
    match outcome {
        Ok(_) => ErrorCode::None.code(),
        Err(e) => e.code(),
    }
}

/// What to do after a request.
pub enum Outcome {
    /// Send this body, encoded at `version`.
    Respond { body: ResponseBody, version: i16 },
    /// Send nothing (Produce with acks=0).
    Silent,
    /// The answer once this resolves (a Produce waiting for durability);
    /// the connection may read and handle the requests after it meanwhile.
    Later(Pin<Box<dyn Future<Output = Outcome> + Send>>),
    /// Close the connection: the request cannot be understood, and answering
    /// would desynchronise the stream (Kafka does the same).
    Close(String),
}

impl std::fmt::Debug for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Respond { body, version } => f
                .debug_struct("Respond")
                .field("body", body)
                .field("version", version)
                .finish(),
            Outcome::Silent => f.write_str("Silent"),
            Outcome::Later(_) => f.write_str("Later"),
            Outcome::Close(reason) => f.debug_tuple("Close").field(reason).finish(),
        }
    }
}

/// The answer to a frame that `decode_request` refused. An ApiVersions
/// request of a version we do not serve comes from a client newer than us:
/// it gets the versions we have (in v0) so it can retry with one of them.
/// Anything else closes the connection.
pub fn refuse(error: &RequestError) -> Outcome {
    match error {
        RequestError::UnsupportedVersion { header, .. }
            if header.api_key == api_versions_request::API_KEY =>
        {
            Outcome::Respond {
                body: ResponseBody::ApiVersions(api_versions::unsupported()),
                version: 0,
            }
        }
        other => Outcome::Close(other.to_string()),
    }
}

/// Handles a request that `kaas_core::protocol::decode_request` decoded
/// (so its API and version are ones we serve).
/// `peer` is the client's address, which DescribeGroups shows as each
/// member's host.
pub async fn dispatch(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    body: RequestBody,
    peer: SocketAddr,
) -> Outcome {
    let version = header.api_version;
    let respond = |body| Outcome::Respond { body, version };
    match body {
        RequestBody::ApiVersions(req) => respond(ResponseBody::ApiVersions(api_versions::handle(
            req,
            version,
            broker.config.transaction_version,
        ))),
        RequestBody::Metadata(req) => respond(ResponseBody::Metadata(
            metadata::handle(broker, req, version).await,
        )),
        RequestBody::Produce(req) => match produce::append(broker, req, version).await {
            Some(appended) => Outcome::Later(Box::pin(async move {
                Outcome::Respond {
                    body: ResponseBody::Produce(appended.answer().await),
                    version,
                }
            })),
            None => Outcome::Silent,
        },
        RequestBody::Fetch(req) => respond(ResponseBody::Fetch(
            fetch::handle(broker, req, version).await,
        )),
        RequestBody::ListOffsets(req) => respond(ResponseBody::ListOffsets(
            list_offsets::handle(broker, req).await,
        )),
        RequestBody::OffsetForLeaderEpoch(req) => respond(ResponseBody::OffsetForLeaderEpoch(
            offset_for_leader_epoch::handle(broker, req).await,
        )),
        RequestBody::CreateTopics(req) => respond(ResponseBody::CreateTopics(
            create_topics::handle(broker, req, version).await,
        )),
        RequestBody::CreatePartitions(req) => respond(ResponseBody::CreatePartitions(
            create_partitions::handle(broker, req).await,
        )),
        RequestBody::DeleteTopics(req) => respond(ResponseBody::DeleteTopics(
            delete_topics::handle(broker, req).await,
        )),
        RequestBody::DeleteRecords(req) => respond(ResponseBody::DeleteRecords(
            delete_records::handle(broker, req).await,
        )),
        RequestBody::DescribeConfigs(req) => respond(ResponseBody::DescribeConfigs(
            describe_configs::handle(broker, req, version),
        )),
        RequestBody::AlterConfigs(req) => respond(ResponseBody::AlterConfigs(
            alter_configs::handle(broker, req).await,
        )),
        RequestBody::IncrementalAlterConfigs(req) => {
            respond(ResponseBody::IncrementalAlterConfigs(
                alter_configs::handle_incremental(broker, req).await,
            ))
        }
        RequestBody::DescribeCluster(req) => respond(ResponseBody::DescribeCluster(
            describe_cluster::handle(broker, req),
        )),
        RequestBody::InitProducerId(req) => respond(ResponseBody::InitProducerId(
            init_producer_id::handle(broker, req, version).await,
        )),
        RequestBody::AddPartitionsToTxn(req) => respond(ResponseBody::AddPartitionsToTxn(
            add_partitions_to_txn::handle(broker, req, version).await,
        )),
        RequestBody::AddOffsetsToTxn(req) => respond(ResponseBody::AddOffsetsToTxn(
            add_offsets_to_txn::handle(broker, req, version).await,
        )),
        RequestBody::EndTxn(req) => respond(ResponseBody::EndTxn(
            end_txn::handle(broker, req, version).await,
        )),
        RequestBody::TxnOffsetCommit(req) => respond(ResponseBody::TxnOffsetCommit(
            txn_offset_commit::handle(broker, req, version).await,
        )),
        RequestBody::DescribeTransactions(req) => respond(ResponseBody::DescribeTransactions(
            describe_transactions::handle(broker, req),
        )),
        RequestBody::ListTransactions(req) => respond(ResponseBody::ListTransactions(
            list_transactions::handle(broker, req),
        )),
        RequestBody::WriteTxnMarkers(req) => respond(ResponseBody::WriteTxnMarkers(
            write_txn_markers::handle(broker, req).await,
        )),
        RequestBody::DescribeProducers(req) => respond(ResponseBody::DescribeProducers(
            describe_producers::handle(broker, req).await,
        )),
        RequestBody::FindCoordinator(req) => respond(ResponseBody::FindCoordinator(
            find_coordinator::handle(broker, req, version),
        )),
        RequestBody::JoinGroup(req) => {
            let client_id = header.client_id.as_deref().unwrap_or("");
            respond(ResponseBody::JoinGroup(
                join_group::handle(broker, req, version, client_id, peer).await,
            ))
        }
        RequestBody::SyncGroup(req) => respond(ResponseBody::SyncGroup(
            sync_group::handle(broker, req).await,
        )),
        RequestBody::Heartbeat(req) => {
            respond(ResponseBody::Heartbeat(heartbeat::handle(broker, req)))
        }
        RequestBody::LeaveGroup(req) => respond(ResponseBody::LeaveGroup(leave_group::handle(
            broker, req, version,
        ))),
        RequestBody::OffsetCommit(req) => respond(ResponseBody::OffsetCommit(
            offset_commit::handle(broker, req, version).await,
        )),
        RequestBody::OffsetFetch(req) => respond(ResponseBody::OffsetFetch(offset_fetch::handle(
            broker, req, version,
        ))),
        RequestBody::DescribeGroups(req) => respond(ResponseBody::DescribeGroups(
            describe_groups::handle(broker, req, version),
        )),
        RequestBody::ListGroups(req) => {
            respond(ResponseBody::ListGroups(list_groups::handle(broker, req)))
        }
        RequestBody::DeleteGroups(req) => respond(ResponseBody::DeleteGroups(
            delete_groups::handle(broker, req).await,
        )),
        RequestBody::OffsetDelete(req) => respond(ResponseBody::OffsetDelete(
            offset_delete::handle(broker, req).await,
        )),
        other => Outcome::Close(format!("no handler for api key {}", other.api_key())),
    }
}
