//! Produce: validate each partition's batch, append it, and for acks=all
//! answer only once it is durable.

use crate::broker::{Broker, Partition, Topic};
use crate::cluster::txn_asks;
use kaas_core::deliberate_bugs::{planted, Bug};
use kaas_core::partition::AppendDecision;
use kaas_core::produce::{
    admit_batch, keyless_record_messages, record_errors_summary, records_out_of_time,
    records_without_key, valid_acks, validate_produce_records,
};
use kaas_core::producer::BatchIdentity;
use kaas_core::protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, PartitionProduceResponse, TopicProduceResponse,
};
use kaas_core::protocol::messages::{ProduceRequest, ProduceResponse};
use kaas_core::protocol::{ErrorCode, Uuid};
use kaas_core::record::RecordBatch;
use kaas_core::topic_config::cleanup_compacts;
use kaas_core::txn::coordinator_queue::AskKind;
use kaas_core::txn::rules::{produce_error_of_verification, refused_by_transaction_check};
use std::collections::BTreeMap;
use std::sync::Arc;

/// First Produce version that names topics by id instead of by name.
const TOPIC_IDS_FROM: i16 = 13;

/// First Produce version whose transactional batches add their partition
/// to the transaction themselves (transaction version 2, KIP-890 part 2).
const IMPLICIT_ADD_FROM: i16 = 12;

/// What a Produce request appended, to be answered by
/// [`Appended::answer`]: at once for acks=1, once durable for acks=all.
/// The connection reads its next request meanwhile (see `crate::server`).
pub struct Appended {
    broker: Arc<Broker>,
    acks: i16,
    deadline: i64,
    responses: Vec<TopicProduceResponse>,
    pending: Vec<PendingAppend>,
}

/// (response slot: topic, partition), the partition, and where its batch
/// landed: a successful append waiting to be answered.
type PendingAppend = ((usize, usize), Arc<Partition>, AppendDecision);

/// Appends every partition's batch, in request order. `None` for acks=0:
/// the client expects no response.
pub async fn append(broker: &Arc<Broker>, req: ProduceRequest, version: i16) -> Option<Appended> {
    let acks = req.acks;
    let txn_id = req.transactional_id.as_deref();
    let mut responses = Vec::with_capacity(req.topic_data.len());
    // The acks=all wait is bounded by the request's timeout as a whole,
    // counted from its arrival, not per partition.
    let deadline = broker.env.clock.monotonic_ms() + i64::from(req.timeout_ms.max(0));
    // Every partition's batch is checked first, so that the partitions a
    // request of transaction version 2 adds are added in one decision.
    let mut checked: Vec<CheckedAt> = Vec::new();
    for topic_data in req.topic_data {
        let topic = resolve(broker, &topic_data.name, topic_data.topic_id, version).await;
        let mut partition_responses = Vec::with_capacity(topic_data.partition_data.len());
        for pd in topic_data.partition_data {
            let outcome = if valid_acks(acks) {
                check_one(broker, &topic, pd.index, pd.records, txn_id)
            } else {
                Err(ErrorCode::InvalidRequiredAcks.into())
            };
            checked.push(((responses.len(), partition_responses.len()), outcome));
            partition_responses.push(PartitionProduceResponse {
                index: pd.index,
                base_offset: -1,
                log_append_time_ms: -1,
                log_start_offset: -1,
                ..Default::default()
            });
        }
        let (name, topic_id) = match &topic {
            Ok(t) => (t.name.clone(), t.id),
            Err(_) => (topic_data.name, topic_data.topic_id),
        };
        responses.push(TopicProduceResponse {
            name,
            topic_id,
            partition_responses,
            ..Default::default()
        });
    }
    if version >= IMPLICIT_ADD_FROM {
        add_implicitly(broker, txn_id.unwrap_or_default(), version, &mut checked).await;
    }
    let mut pending: Vec<PendingAppend> = Vec::new();
    for ((t, p), outcome) in checked {
        let outcome = match outcome {
            Ok(c) => append_checked(broker, c, txn_id.unwrap_or_default(), version).await,
            Err(refused) => Err(refused),
        };
        let resp = &mut responses[t].partition_responses[p];
        match outcome {
            Ok((partition, appended)) => {
                resp.base_offset = appended.base_offset();
                resp.log_start_offset = partition.log_start_offset();
                pending.push(((t, p), partition, appended));
            }
            Err(refused) => {
                resp.error_code = refused.code.code();
                resp.log_start_offset = refused.log_start_offset;
                if let Some(records) = refused.records {
                    resp.error_message = Some(records.summary);
                    resp.record_errors = records.each;
                }
            }
        }
    }

    (acks != 0).then(|| Appended {
        broker: broker.clone(),
        acks,
        deadline,
        responses,
        pending,
    })
}

impl Appended {
    /// The response: for acks=all, each partition's append once it is
    /// durable, or REQUEST_TIMED_OUT past the request's deadline.
    pub async fn answer(self) -> ProduceResponse {
        let Appended {
            broker,
            acks,
            deadline,
            mut responses,
            pending,
        } = self;
        if acks == -1 && !planted(Bug::AckedBeforeDurable) {
            wait_durable(&broker, deadline, &mut responses, pending).await;
        }
        ProduceResponse {
            responses,
            ..Default::default()
        }
    }
}

async fn wait_durable(
    broker: &Broker,
    deadline: i64,
    responses: &mut [TopicProduceResponse],
    pending: Vec<PendingAppend>,
) {
    let timeout = broker.env.sleep_until(deadline);
    tokio::pin!(timeout);
    let mut timed_out = false;
    for (i, ((t, p), partition, appended)) in pending.into_iter().enumerate() {
        if (i > 0 && planted(Bug::OnlyTheFirstPartitionAwaited))
            || (t > 0 && planted(Bug::OnlyTheFirstTopicAwaited))
        {
            continue;
        }
        let durable = partition.wait_durable(appended.end_offset());
        let code = if timed_out {
            // Past the deadline: only what is durable already counts.
            (partition.high_watermark() < appended.end_offset())
                .then_some(ErrorCode::RequestTimedOut)
        } else {
            tokio::select! {
                waited = durable => waited.err(),
                _ = &mut timeout => {
                    timed_out = true;
                    (partition.high_watermark() < appended.end_offset())
                        .then_some(ErrorCode::RequestTimedOut)
                }
            }
        };
        if let Some(code) = code {
            let resp = &mut responses[t].partition_responses[p];
            resp.error_code = code.code();
            resp.base_offset = -1;
        }
    }
}

async fn resolve(
    broker: &Arc<Broker>,
    name: &str,
    id: Uuid,
    version: i16,
) -> Result<Arc<Topic>, ErrorCode> {
    if version >= TOPIC_IDS_FROM {
        return broker.topic_by_id(id).ok_or(ErrorCode::UnknownTopicId);
    }
    if kaas_core::topic_name::validate_topic_name(name).is_err() {
        return Err(ErrorCode::InvalidTopicException);
    }
    broker.get_or_auto_create(name).await
}

/// Why a partition's batch was not appended, and the log start offset to
/// report with it: known (as Kafka reports it) when the partition's own
/// rules refused the batch, such as a producer sequence or epoch check, so
/// a producer can tell whether its state was removed with the log's start;
/// -1 when the request was refused before it reached a partition.
struct Refused {
    code: ErrorCode,
    log_start_offset: i64,
    /// The records that refused the batch, when it was refused for some
    /// of its records (v8+ answers them in `record_errors`).
    records: Option<RecordErrors>,
}

/// A batch refused for some of its records: Kafka's message for the batch
/// and one entry per record.
struct RecordErrors {
    summary: String,
    each: Vec<BatchIndexAndErrorMessage>,
}

impl From<ErrorCode> for Refused {
    fn from(code: ErrorCode) -> Self {
        Refused {
            code,
            log_start_offset: -1,
            records: None,
        }
    }
}

/// A compacted topic needs a key on every record
/// (`kaas_core::produce::records_without_key`): a batch with keyless
/// records is refused whole, INVALID_RECORD, each of them named.
fn check_keys(topic: &Topic, partition: &Partition, batch: &RecordBatch) -> Result<(), Refused> {
    if !cleanup_compacts(&topic.configs) {
        return Ok(());
    }
    let keyless = records_without_key(batch)?;
    if keyless.is_empty() {
        return Ok(());
    }
    let (summary, messages) = keyless_record_messages(&topic.name, partition.index, &keyless);
    let each = keyless.into_iter().zip(messages).collect();
    Err(refuse_records(
        ErrorCode::InvalidRecord,
        partition,
        summary,
        each,
    ))
}

/// Record timestamps too far from this broker's clock
/// (`kaas_core::produce::records_out_of_time`): the batch is refused
/// whole, INVALID_TIMESTAMP, each such record named.
fn check_timestamps(
    broker: &Broker,
    topic: &Topic,
    partition: &Partition,
    batch: &RecordBatch,
) -> Result<(), Refused> {
    let late = records_out_of_time(batch, broker.env.now_ms(), broker.timestamp_bounds(topic))?;
    if late.is_empty() {
        return Ok(());
    }
    let summary = record_errors_summary(&late);
    Err(refuse_records(
        ErrorCode::InvalidTimestamp,
        partition,
        summary,
        late,
    ))
}

/// A batch refused for the records `each` names (index, message).
fn refuse_records(
    code: ErrorCode,
    partition: &Partition,
    summary: String,
    each: Vec<(i32, String)>,
) -> Refused {
    let each = each
        .into_iter()
        .map(|(batch_index, message)| BatchIndexAndErrorMessage {
            batch_index,
            batch_index_error_message: Some(message),
            ..Default::default()
        })
        .collect();
    Refused {
        code,
        log_start_offset: partition.log_start_offset(),
        records: Some(RecordErrors { summary, each }),
    }
}

/// A partition's place in the response (topic, partition) and what the
/// request-level checks made of its batch.
type CheckedAt = ((usize, usize), Result<Checked, Refused>);

/// A partition's batch that passed the request-level checks.
struct Checked {
    partition: Arc<Partition>,
    batch: RecordBatch,
    key: (String, i32),
    /// Set for a transactional batch.
    transactional: Option<BatchIdentity>,
}

fn check_one(
    broker: &Broker,
    topic: &Result<Arc<Topic>, ErrorCode>,
    index: i32,
    records: Option<bytes::Bytes>,
    transactional_id: Option<&str>,
) -> Result<Checked, Refused> {
    let topic = topic.as_ref().map_err(|c| *c)?;
    let partition = broker.gate(topic, index, -1)?;
    let batch = validate_produce_records(records, broker.max_message_bytes(topic))?;
    admit_batch(&batch, transactional_id)?;
    check_keys(topic, &partition, &batch)?;
    check_timestamps(broker, topic, &partition, &batch)?;
    let transactional = BatchIdentity::of(&batch).filter(|id| id.is_transactional);
    Ok(Checked {
        partition,
        batch,
        key: (topic.name.clone(), index),
        transactional,
    })
}

/// Transaction version 2 (KIP-890 part 2): a request's transactional
/// batches add their partitions to the transaction themselves, all in one
/// decision (one slot write, as Kafka adds them in one call to its
/// coordinator) rather than one each in turn. A refusal refuses each of
/// them. Grouped by producer identity, of which a client sends one.
async fn add_implicitly(
    broker: &Arc<Broker>,
    txn_id: &str,
    version: i16,
    checked: &mut [CheckedAt],
) {
    let mut by_producer: BTreeMap<(i64, i16), Vec<usize>> = BTreeMap::new();
    for (i, (_, outcome)) in checked.iter().enumerate() {
        if let Some(id) = outcome.as_ref().ok().and_then(|c| c.transactional) {
            by_producer
                .entry((id.producer_id, id.epoch))
                .or_default()
                .push(i);
        }
    }
    for ((producer_id, epoch), members) in by_producer {
        let keys: Vec<(String, i32)> = members
            .iter()
            .filter_map(|&i| checked[i].1.as_ref().ok().map(|c| c.key.clone()))
            .collect();
        let added = match broker.txn_coordinator(txn_id) {
            Ok(coordinator) => coordinator
                .add_to_transaction(txn_id, producer_id, epoch, &keys, &[])
                .await
                .map_err(|code| produce_error_of_verification(code, version)),
            // The coordinator is another broker: asked through the volume.
            Err(code) => match txn_asks::remote_coordinator(broker, txn_id) {
                Some(coordinator) => txn_asks::ask(
                    broker,
                    coordinator,
                    txn_asks::Question {
                        kind: AskKind::Add,
                        transactional_id: txn_id,
                        producer_id,
                        producer_epoch: epoch,
                        partitions: &keys,
                        groups: &[],
                    },
                )
                .await
                .map_err(|code| produce_error_of_verification(code, version)),
                None => Err(code),
            },
        };
        if let Err(code) = added {
            for i in members {
                checked[i].1 = Err(code.into());
            }
        }
    }
}

async fn append_checked(
    broker: &Arc<Broker>,
    checked: Checked,
    txn_id: &str,
    version: i16,
) -> Result<(Arc<Partition>, AppendDecision), Refused> {
    let Checked {
        partition,
        batch,
        key,
        transactional,
    } = checked;
    // KIP-890 part 1: a batch that would open a transaction here must
    // belong to the producer's ongoing transaction, and that transaction
    // must have added this partition.
    let remote = transactional.and_then(|id| {
        let coordinator = txn_asks::remote_coordinator(broker, txn_id)?;
        partition
            .would_open_transaction(&id)
            .then_some((coordinator, id))
    });
    // A coordinator on another broker is asked before the lane (its answer
    // takes a trip through the volume). A marker written to this partition
    // between the question and the lane may have ended that transaction:
    // then the batch is refused as retriable and asks again.
    let asked = match remote {
        Some((coordinator, id)) => {
            let markers_before = partition.markers_written();
            let answer = txn_asks::ask(
                broker,
                coordinator,
                txn_asks::Question {
                    kind: AskKind::VerifyPartitions,
                    transactional_id: txn_id,
                    producer_id: id.producer_id,
                    producer_epoch: id.epoch,
                    partitions: std::slice::from_ref(&key),
                    groups: &[],
                },
            )
            .await;
            Some((answer, markers_before))
        }
        None => None,
    };
    let verify = |id: &BatchIdentity| {
        match asked {
            Some((answer, markers_before)) => answer.and_then(|()| {
                if partition.markers_written() == markers_before {
                    Ok(())
                } else {
                    Err(ErrorCode::ConcurrentTransactions)
                }
            }),
            None => broker
                .txn_coordinator(txn_id)
                .and_then(|c| c.verify(txn_id, id.producer_id, id.epoch, &key)),
        }
        .map_err(|code| produce_error_of_verification(code, version))
    };
    match partition.append_verified(batch, verify).await {
        Ok(appended) => Ok((partition, appended)),
        // A transactional batch from outside its transaction, or from a
        // fenced epoch, is refused by the transaction check, before the
        // log: no log start, as Kafka answers it.
        Err(code) if transactional.is_some() && refused_by_transaction_check(code) => {
            Err(code.into())
        }
        Err(code) => Err(Refused {
            code,
            log_start_offset: partition.log_start_offset(),
            records: None,
        }),
    }
}
