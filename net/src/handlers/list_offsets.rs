//! ListOffsets: earliest, latest, max-timestamp and by-timestamp lookups.

use super::{per_partition, PartitionRef};
use crate::broker::{Broker, Isolation, Partition};
use kaas_core::protocol::messages::list_offsets_request::ListOffsetsPartition;
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

impl PartitionRef for ListOffsetsPartition {
    fn index(&self) -> i32 {
        self.partition_index
    }
    fn current_leader_epoch(&self) -> i32 {
        self.current_leader_epoch
    }
}

pub async fn handle(broker: &Broker, req: ListOffsetsRequest) -> ListOffsetsResponse {
    let isolation = Isolation::from_wire(req.isolation_level);
    let mut topics = Vec::with_capacity(req.topics.len());
    for t in req.topics {
        let results = per_partition(broker, &t.name, t.partitions, |p, r| {
            let timestamp = r.timestamp;
            async move {
                let found = lookup(&p, timestamp, isolation).await?;
                Ok(found.map(|(offset, ts)| (offset, ts, p.leader_epoch())))
            }
        })
        .await;
        let partitions = results
            .into_iter()
            .map(|(p, result)| {
                let mut resp = ListOffsetsPartitionResponse {
                    partition_index: p.partition_index,
                    timestamp: -1,
                    offset: -1,
                    leader_epoch: -1,
                    ..Default::default()
                };
                match result {
                    Ok(Some((offset, timestamp, epoch))) => {
                        resp.offset = offset;
                        resp.timestamp = timestamp;
                        resp.leader_epoch = epoch;
                    }
                    Ok(None) => {}
                    Err(code) => resp.error_code = code.code(),
                }
                resp
            })
            .collect();
        topics.push(ListOffsetsTopicResponse {
            name: t.name,
            partitions,
            ..Default::default()
        });
    }
    ListOffsetsResponse {
        topics,
        ..Default::default()
    }
}

/// (offset, timestamp) for one partition, or `None` if no offset matches.
async fn lookup(
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
            let found = p
                .with_log(move |log| {
                    if timestamp == MAX_TIMESTAMP {
                        log.max_timestamp()
                    } else {
                        log.offset_for_timestamp(timestamp)
                    }
                })
                .await?;
            // As Kafka's Partition does: an answer past what the reader
            // may see is no answer.
            Ok(found.filter(|&(offset, _)| offset < bound))
        }
        _ => Err(ErrorCode::InvalidRequest),
    }
}
