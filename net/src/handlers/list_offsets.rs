//! ListOffsets: earliest, latest, max-timestamp and by-timestamp lookups.

use super::fetch::check_leader_epoch;
use crate::broker::{Broker, Isolation, Partition};
use kaas_core::protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kaas_core::protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};
use kaas_core::protocol::ErrorCode;

/// The special timestamps of ListOffsets.
const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
const EARLIEST_LOCAL: i64 = -4;
const LATEST_TIERED: i64 = -5;

pub fn handle(broker: &Broker, req: ListOffsetsRequest, _version: i16) -> ListOffsetsResponse {
    let isolation = Isolation::from_wire(req.isolation_level);
    let topics = req
        .topics
        .into_iter()
        .map(|t| {
            let topic = broker.topic(&t.name);
            let partitions = t
                .partitions
                .into_iter()
                .map(|p| {
                    let mut resp = ListOffsetsPartitionResponse {
                        partition_index: p.partition_index,
                        timestamp: -1,
                        offset: -1,
                        leader_epoch: -1,
                        ..Default::default()
                    };
                    let partition = topic.as_ref().and_then(|t| t.partition(p.partition_index));
                    let result = match partition {
                        None => Err(ErrorCode::UnknownTopicOrPartition),
                        Some(part) => check_leader_epoch(p.current_leader_epoch)
                            .and_then(|_| lookup(part, p.timestamp, isolation)),
                    };
                    match result {
                        Ok(Some((offset, timestamp))) => {
                            resp.offset = offset;
                            resp.timestamp = timestamp;
                            resp.leader_epoch = crate::LEADER_EPOCH;
                        }
                        Ok(None) => {}
                        Err(code) => resp.error_code = code.code(),
                    }
                    resp
                })
                .collect();
            ListOffsetsTopicResponse {
                name: t.name,
                partitions,
                ..Default::default()
            }
        })
        .collect();
    ListOffsetsResponse {
        topics,
        ..Default::default()
    }
}

/// (offset, timestamp) for one partition, or `None` if no offset matches.
fn lookup(
    p: &Partition,
    timestamp: i64,
    isolation: Isolation,
) -> Result<Option<(i64, i64)>, ErrorCode> {
    let bound = match isolation {
        Isolation::ReadUncommitted => p.high_watermark(),
        Isolation::ReadCommitted => p.last_stable_offset(),
    };
    match timestamp {
        LATEST => Ok(Some((bound, -1))),
        EARLIEST | EARLIEST_LOCAL => Ok(Some((p.log_start_offset(), -1))),
        // No tiered storage: nothing is tiered.
        LATEST_TIERED => Ok(None),
        MAX_TIMESTAMP | 0.. => {
            let found = p.with_log(|log| {
                if timestamp == MAX_TIMESTAMP {
                    log.max_timestamp()
                } else {
                    log.offset_for_timestamp(timestamp)
                }
            })?;
            match found {
                Ok(Some((offset, ts))) if offset < bound => Ok(Some((offset, ts))),
                Ok(_) => Ok(None),
                Err(e) => {
                    tracing::error!(error = %e, "offset_for_timestamp failed");
                    Err(ErrorCode::KafkaStorageError)
                }
            }
        }
        _ => Err(ErrorCode::InvalidRequest),
    }
}
