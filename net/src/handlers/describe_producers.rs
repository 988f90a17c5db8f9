//! DescribeProducers: the producer state of partitions, for operators.

use super::per_partition;
use crate::broker::Broker;
use kaas_core::protocol::messages::describe_producers_response::{
    PartitionResponse, ProducerState, TopicResponse,
};
use kaas_core::protocol::messages::{DescribeProducersRequest, DescribeProducersResponse};

pub async fn handle(broker: &Broker, req: DescribeProducersRequest) -> DescribeProducersResponse {
    let mut topics = Vec::with_capacity(req.topics.len());
    for t in req.topics {
        let results = per_partition(broker, &t.name, t.partition_indexes, |p, _| {
            let states = p.with_producers(|table| {
                table
                    .entries()
                    .map(|e| ProducerState {
                        producer_id: e.producer_id,
                        producer_epoch: i32::from(e.epoch),
                        last_sequence: e.last_seq(),
                        last_timestamp: e.last_timestamp,
                        coordinator_epoch: e.coordinator_epoch,
                        current_txn_start_offset: e.current_txn_first_offset.unwrap_or(-1),
                        ..Default::default()
                    })
                    .collect::<Vec<_>>()
            });
            std::future::ready(states)
        })
        .await;
        let partitions = results
            .into_iter()
            .map(|(index, found)| match found {
                Ok(states) => PartitionResponse {
                    partition_index: index,
                    active_producers: states,
                    ..Default::default()
                },
                Err(code) => PartitionResponse {
                    partition_index: index,
                    error_code: code.code(),
                    error_message: Some(format!("{code:?}")),
                    ..Default::default()
                },
            })
            .collect();
        topics.push(TopicResponse {
            name: t.name,
            partitions,
            ..Default::default()
        });
    }
    DescribeProducersResponse {
        topics,
        ..Default::default()
    }
}
