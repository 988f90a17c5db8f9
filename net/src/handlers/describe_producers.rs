//! DescribeProducers: the producer state of partitions, for operators.

use crate::broker::Broker;
use kaas_core::protocol::messages::describe_producers_response::{
    PartitionResponse, ProducerState, TopicResponse,
};
use kaas_core::protocol::messages::{DescribeProducersRequest, DescribeProducersResponse};
use kaas_core::protocol::ErrorCode;

pub fn handle(broker: &Broker, req: DescribeProducersRequest) -> DescribeProducersResponse {
    let topics = req
        .topics
        .into_iter()
        .map(|t| {
            let topic = broker.topic(&t.name);
            let partitions = t
                .partition_indexes
                .into_iter()
                .map(|index| {
                    let mut resp = PartitionResponse {
                        partition_index: index,
                        ..Default::default()
                    };
                    let found = topic
                        .as_ref()
                        .and_then(|t| t.partition(index))
                        .ok_or(ErrorCode::UnknownTopicOrPartition)
                        .and_then(|p| {
                            p.with_producers(|table| {
                                table
                                    .entries()
                                    .map(|e| ProducerState {
                                        producer_id: e.producer_id,
                                        producer_epoch: i32::from(e.epoch),
                                        last_sequence: e.last_seq(),
                                        last_timestamp: e.last_timestamp,
                                        coordinator_epoch: e.coordinator_epoch,
                                        current_txn_start_offset: e
                                            .current_txn_first_offset
                                            .unwrap_or(-1),
                                        ..Default::default()
                                    })
                                    .collect()
                            })
                        });
                    match found {
                        Ok(states) => resp.active_producers = states,
                        Err(code) => {
                            resp.error_code = code.code();
                            resp.error_message = Some(format!("{code:?}"));
                        }
                    }
                    resp
                })
                .collect();
            TopicResponse {
                name: t.name,
                partitions,
                ..Default::default()
            }
        })
        .collect();
    DescribeProducersResponse {
        topics,
        ..Default::default()
    }
}
