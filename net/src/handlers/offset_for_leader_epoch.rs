//! OffsetForLeaderEpoch: where a leader epoch ends, so a client can check
//! that its position was not truncated away.
//!
//! kaas has had one leader epoch per partition so far (see
//! `crate::LEADER_EPOCH`): it ends at the log end.

use super::fetch::check_leader_epoch;
use crate::broker::Broker;
use kaas_core::protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kaas_core::protocol::messages::{OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse};
use kaas_core::protocol::ErrorCode;

pub fn handle(broker: &Broker, req: OffsetForLeaderEpochRequest) -> OffsetForLeaderEpochResponse {
    let topics = req
        .topics
        .into_iter()
        .map(|t| {
            let topic = broker.topic(&t.topic);
            let partitions = t
                .partitions
                .into_iter()
                .map(|p| {
                    let mut resp = EpochEndOffset {
                        partition: p.partition,
                        leader_epoch: -1,
                        end_offset: -1,
                        ..Default::default()
                    };
                    let partition = topic.as_ref().and_then(|t| t.partition(p.partition));
                    match (partition, check_leader_epoch(p.current_leader_epoch)) {
                        (None, _) => resp.error_code = ErrorCode::UnknownTopicOrPartition.code(),
                        (_, Err(code)) => resp.error_code = code.code(),
                        (Some(part), Ok(())) => {
                            if p.leader_epoch <= crate::LEADER_EPOCH && p.leader_epoch >= 0 {
                                resp.leader_epoch = crate::LEADER_EPOCH;
                                resp.end_offset = part.high_watermark();
                            }
                            // An epoch newer than any we had: undefined (-1, -1).
                        }
                    }
                    resp
                })
                .collect();
            OffsetForLeaderTopicResult {
                topic: t.topic,
                partitions,
                ..Default::default()
            }
        })
        .collect();
    OffsetForLeaderEpochResponse {
        topics,
        ..Default::default()
    }
}
