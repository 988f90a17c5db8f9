//! OffsetForLeaderEpoch: where a leader epoch ends, so a client can check
//! that its position was not truncated away.
//!
//! The answer comes from the partition's leader-epoch checkpoint, as
//! Kafka's does (`kaas_core::partition::leader_epochs::epoch_end_offset`):
//! the current epoch ends at the high watermark, an older one where the
//! next known epoch starts.

use super::{per_partition, PartitionRef};
use crate::broker::Broker;
use kaas_core::protocol::messages::offset_for_leader_epoch_request::OffsetForLeaderPartition;
use kaas_core::protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kaas_core::protocol::messages::{OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse};

impl PartitionRef for OffsetForLeaderPartition {
    fn index(&self) -> i32 {
        self.partition
    }
    fn current_leader_epoch(&self) -> i32 {
        self.current_leader_epoch
    }
}

pub async fn handle(
    broker: &Broker,
    req: OffsetForLeaderEpochRequest,
) -> OffsetForLeaderEpochResponse {
    let mut topics = Vec::with_capacity(req.topics.len());
    for t in req.topics {
        let results = per_partition(broker, &t.topic, t.partitions, |p, r| {
            let answer = p.epoch_end_offset(r.leader_epoch);
            std::future::ready(Ok(answer))
        })
        .await;
        let partitions = results
            .into_iter()
            .map(|(p, result)| {
                let mut resp = EpochEndOffset {
                    partition: p.partition,
                    leader_epoch: -1,
                    end_offset: -1,
                    ..Default::default()
                };
                match result {
                    Ok(Some((epoch, end))) => {
                        resp.leader_epoch = epoch;
                        resp.end_offset = end;
                    }
                    Ok(None) => {}
                    Err(code) => resp.error_code = code.code(),
                }
                resp
            })
            .collect();
        topics.push(OffsetForLeaderTopicResult {
            topic: t.topic,
            partitions,
            ..Default::default()
        });
    }
    OffsetForLeaderEpochResponse {
        topics,
        ..Default::default()
    }
}
