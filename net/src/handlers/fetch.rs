//! Fetch: read from each partition up to its high watermark (or last stable
//! offset for read_committed), long-polling until `min_bytes` are available
//! or `max_wait_ms` passes.
//!
//! Fetch sessions (KIP-227) are not kept: the response carries session id 0,
//! which tells clients to send full fetch requests.

use crate::broker::{Broker, Isolation, Topic};
use bytes::Bytes;
use kaas_core::deliberate_bugs::{planted, Bug};
use kaas_core::protocol::messages::fetch_request::FetchTopic;
use kaas_core::protocol::messages::fetch_response::{
    AbortedTransaction, FetchableTopicResponse, PartitionData,
};
use kaas_core::protocol::messages::{FetchRequest, FetchResponse};
use kaas_core::protocol::ErrorCode;
use kaas_core::record::split_batches;
use std::sync::Arc;

/// First Fetch version that names topics by id.
const TOPIC_IDS_FROM: i16 = 13;

pub async fn handle(broker: &Arc<Broker>, req: FetchRequest, version: i16) -> FetchResponse {
    let isolation = Isolation::from_wire(req.isolation_level);
    let deadline = broker.env.clock.monotonic_ms() + i64::from(req.max_wait_ms.max(0));
    // Subscribe before the first read so a high-watermark move between the
    // read and the wait is not missed.
    let mut progress = broker.watch_progress();
    // Whether this pass reads after a wait (the deliberate bug
    // `FetchSkipsABatch` lives there).
    let mut woken = false;
    loop {
        progress.borrow_and_update();
        let (responses, bytes, any_error) = read_all(
            broker,
            &req.topics,
            req.max_bytes,
            isolation,
            version,
            woken,
        )
        .await;
        let satisfied = bytes >= req.min_bytes.max(0) as usize || any_error;
        if satisfied || broker.env.clock.monotonic_ms() >= deadline {
            return FetchResponse {
                responses,
                session_id: 0,
                ..Default::default()
            };
        }
        tokio::select! {
            changed = progress.changed() => if changed.is_err() { return FetchResponse { responses, ..Default::default() } },
            _ = broker.env.sleep_until(deadline) => {}
        }
        woken = true;
    }
}

/// The deliberate bug [`Bug::FetchSkipsABatch`]: `records` without their
/// first batch, if it starts at `offset` (the one asked for) and another
/// batch follows.
fn without_first_batch(records: Bytes, offset: i64) -> Bytes {
    let mut batches = split_batches(records.clone());
    match (batches.next(), batches.next()) {
        (Some(first), Some(_)) if first.base_offset() == offset => records.slice(first.size()..),
        _ => records,
    }
}

/// The aborted-transactions list of a partition that failed, as Kafka
/// answers it (clients read null and empty alike; the differential suite
/// does not): a partition the broker does not know gets an empty list, one
/// whose read failed (offset out of range, a fenced or unknown leader
/// epoch, a storage error) gets null, at either isolation level.
fn aborted_list_of_failed(code: ErrorCode) -> Option<Vec<AbortedTransaction>> {
    matches!(
        code,
        ErrorCode::UnknownTopicOrPartition | ErrorCode::UnknownTopicId
    )
    .then(Vec::new)
}

async fn read_all(
    broker: &Broker,
    topics: &[FetchTopic],
    max_bytes: i32,
    isolation: Isolation,
    version: i16,
    woken: bool,
) -> (Vec<FetchableTopicResponse>, usize, bool) {
    let mut budget = max_bytes.max(0) as usize;
    let mut total = 0usize;
    let mut any_error = false;
    let mut out = Vec::with_capacity(topics.len());
    for ft in topics {
        let topic: Result<Arc<Topic>, ErrorCode> = if version >= TOPIC_IDS_FROM {
            broker
                .topic_by_id(ft.topic_id)
                .ok_or(ErrorCode::UnknownTopicId)
        } else {
            broker
                .topic(&ft.topic)
                .ok_or(ErrorCode::UnknownTopicOrPartition)
        };
        let mut partitions = Vec::with_capacity(ft.partitions.len());
        for fp in &ft.partitions {
            let mut pd = PartitionData {
                partition_index: fp.partition,
                high_watermark: -1,
                last_stable_offset: -1,
                log_start_offset: -1,
                preferred_read_replica: -1,
                aborted_transactions: (isolation == Isolation::ReadCommitted).then(Vec::new),
                records: Some(bytes::Bytes::new()),
                ..Default::default()
            };
            let partition = topic
                .as_ref()
                .map_err(|c| *c)
                .and_then(|t| broker.gate(t, fp.partition, fp.current_leader_epoch));
            let result = match partition {
                Ok(p) => {
                    // KIP-74: the first partition with data may exceed the
                    // response budget by one batch so a consumer always
                    // makes progress; later ones only get what is left.
                    let limit = (fp.partition_max_bytes.max(0) as usize).min(budget);
                    let must_return_one = total == 0;
                    p.read(
                        fp.fetch_offset,
                        if must_return_one { limit.max(1) } else { limit },
                        isolation,
                    )
                    .await
                }
                Err(code) => Err(code),
            };
            match result {
                Ok(mut data) => {
                    if woken && planted(Bug::FetchSkipsABatch) {
                        data.records = without_first_batch(data.records, fp.fetch_offset);
                    }
                    let n = data.records.len();
                    total += n;
                    budget = budget.saturating_sub(n);
                    pd.high_watermark = data.high_watermark;
                    pd.last_stable_offset = data.last_stable_offset;
                    pd.log_start_offset = data.log_start_offset;
                    pd.records = Some(data.records);
                    // read_committed: the consumer drops the records of
                    // these aborted transactions; read_uncommitted keeps
                    // the null it was given above.
                    if let Some(aborted) = data.aborted_transactions {
                        pd.aborted_transactions = Some(
                            aborted
                                .into_iter()
                                .map(|(producer_id, first_offset)| AbortedTransaction {
                                    producer_id,
                                    first_offset,
                                    ..Default::default()
                                })
                                .collect(),
                        );
                    }
                }
                Err(code) => {
                    any_error = true;
                    pd.error_code = code.code();
                    pd.aborted_transactions = aborted_list_of_failed(code);
                }
            }
            partitions.push(pd);
        }
        out.push(FetchableTopicResponse {
            topic: ft.topic.clone(),
            topic_id: ft.topic_id,
            partitions,
            ..Default::default()
        });
    }
    (out, total, any_error)
}
