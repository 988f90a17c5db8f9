//! DeleteRecords: move a partition's log start offset forward.

use super::{per_partition, PartitionRef};
use crate::broker::Broker;
use kaas_core::protocol::messages::delete_records_request::DeleteRecordsPartition;
use kaas_core::protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kaas_core::protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};
use kaas_core::protocol::ErrorCode;
use kaas_core::topic_config;

/// An offset of -1 means "up to the high watermark".
const HIGH_WATERMARK: i64 = -1;

impl PartitionRef for DeleteRecordsPartition {
    fn index(&self) -> i32 {
        self.partition_index
    }
}

pub async fn handle(broker: &Broker, req: DeleteRecordsRequest) -> DeleteRecordsResponse {
    let mut topics = Vec::with_capacity(req.topics.len());
    for t in req.topics {
        // Kafka refuses to delete records of a topic whose cleanup.policy
        // does not delete (compact only) with POLICY_VIOLATION.
        let deletes = broker
            .topic(&t.name)
            .is_none_or(|topic| topic_config::cleanup_deletes(&topic.configs));
        let results = per_partition(broker, &t.name, t.partitions, |p, r| {
            let offset = r.offset;
            async move {
                if !deletes {
                    return Err(ErrorCode::PolicyViolation);
                }
                let target = if offset == HIGH_WATERMARK {
                    p.high_watermark()
                } else {
                    offset
                };
                p.delete_records_before(target).await
            }
        })
        .await;
        let partitions = results
            .into_iter()
            .map(|(p, result)| DeleteRecordsPartitionResult {
                partition_index: p.partition_index,
                low_watermark: *result.as_ref().unwrap_or(&-1),
                error_code: result.err().map_or(0, |c| c.code()),
                ..Default::default()
            })
            .collect();
        topics.push(DeleteRecordsTopicResult {
            name: t.name,
            partitions,
            ..Default::default()
        });
    }
    DeleteRecordsResponse {
        topics,
        ..Default::default()
    }
}
