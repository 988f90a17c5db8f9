//! WriteTxnMarkers: COMMIT or ABORT markers written on request. Kafka's
//! coordinators send it to partition leaders; operators send it to abort
//! a hanging transaction (KIP-664: `kafka-transactions.sh abort`, Admin
//! `abortTransaction`), naming the producer, its epoch and the coordinator
//! epoch DescribeProducers showed. kaas's own coordinator writes its
//! markers directly, so this is the operator's tool.
//!
//! Each marker is checked by the partition's rules like the coordinator's
//! (`kaas_core::producer::check_marker`: a stale producer epoch is
//! INVALID_PRODUCER_EPOCH, an older coordinator epoch
//! TRANSACTION_COORDINATOR_FENCED) and answered once durable. From v2 a
//! marker names its transaction version (KIP-1228): a version-2 marker
//! must carry an epoch above the producer's current one.

use super::wire_code;
use crate::broker::Broker;
use kaas_core::partition::IncomingMarker;
use kaas_core::protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use kaas_core::protocol::messages::{WriteTxnMarkersRequest, WriteTxnMarkersResponse};
use kaas_core::protocol::ErrorCode;
use std::sync::Arc;

pub async fn handle(broker: &Arc<Broker>, req: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse {
    let mut markers = Vec::with_capacity(req.markers.len());
    for m in req.markers {
        let marker = IncomingMarker {
            producer_id: m.producer_id,
            producer_epoch: m.producer_epoch,
            coordinator_epoch: m.coordinator_epoch,
            commit: m.transaction_result,
            transaction_version: m.transaction_version,
        };
        let mut topics = Vec::with_capacity(m.topics.len());
        for t in m.topics {
            let mut partitions = Vec::with_capacity(t.partition_indexes.len());
            for index in t.partition_indexes {
                let outcome = write_one(broker, &t.name, index, marker).await;
                partitions.push(WritableTxnMarkerPartitionResult {
                    partition_index: index,
                    error_code: wire_code(&outcome),
                    ..Default::default()
                });
            }
            topics.push(WritableTxnMarkerTopicResult {
                name: t.name,
                partitions,
                ..Default::default()
            });
        }
        markers.push(WritableTxnMarkerResult {
            producer_id: m.producer_id,
            topics,
            ..Default::default()
        });
    }
    WriteTxnMarkersResponse {
        markers,
        ..Default::default()
    }
}

async fn write_one(
    broker: &Broker,
    topic: &str,
    index: i32,
    marker: IncomingMarker,
) -> Result<(), ErrorCode> {
    let partition = broker.partition(topic, index, -1)?;
    let offset = partition.write_marker(marker).await?;
    partition.wait_durable(offset + 1).await
}
