//! DeleteRecords: move a partition's log start offset forward.

use crate::broker::{Broker, Partition};
use kaas_core::protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kaas_core::protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};
use kaas_core::protocol::ErrorCode;

/// An offset of -1 means "up to the high watermark".
const HIGH_WATERMARK: i64 = -1;

pub fn handle(broker: &Broker, req: DeleteRecordsRequest) -> DeleteRecordsResponse {
    let topics = req
        .topics
        .into_iter()
        .map(|t| {
            let topic = broker.topic(&t.name);
            let partitions = t
                .partitions
                .into_iter()
                .map(|p| {
                    let mut r = DeleteRecordsPartitionResult {
                        partition_index: p.partition_index,
                        low_watermark: -1,
                        ..Default::default()
                    };
                    let result = match topic.as_ref().and_then(|t| t.partition(p.partition_index)) {
                        None => Err(ErrorCode::UnknownTopicOrPartition),
                        Some(part) => delete_before(part, p.offset),
                    };
                    match result {
                        Ok(low) => r.low_watermark = low,
                        Err(code) => r.error_code = code.code(),
                    }
                    r
                })
                .collect();
            DeleteRecordsTopicResult {
                name: t.name,
                partitions,
                ..Default::default()
            }
        })
        .collect();
    DeleteRecordsResponse {
        topics,
        ..Default::default()
    }
}

fn delete_before(p: &Partition, offset: i64) -> Result<i64, ErrorCode> {
    let hw = p.high_watermark();
    let target = if offset == HIGH_WATERMARK { hw } else { offset };
    if target < 0 || target > hw {
        return Err(ErrorCode::OffsetOutOfRange);
    }
    p.delete_records_before(target)
}
