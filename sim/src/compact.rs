//! The compacted-topic workload (seeds with `SimParams::compaction`): a
//! keyed producer and a reader on a one-partition topic with
//! `cleanup.policy=compact`, small segments and a low dirty ratio, so the
//! brokers' cleaners clean it again and again while the faults run.
//!
//! - Before any workload starts, [`create_topics`] creates the topic
//!   (CreateTopics with the seed's configs), and in some seeds the
//!   transactional workload's topic compacted too (its records then keyed
//!   by their unique values: only aborted records and markers may go).
//! - The producer takes a producer id and writes batches of a few records
//!   over a few keys, some of them tombstones, idempotent, one batch at a
//!   time, each retried with the same sequence until acknowledged. So every record
//!   that reaches the log is acknowledged in the end, at the offset it has
//!   there: what the cleaner may remove is always judged against records
//!   the history knows (a record nobody saw cannot excuse a gap).
//! - The reader reads the partition from its start to the high watermark
//!   every so often; after the faults, a final read must get through.
//!
//! Both report to [`CompactHistory`](crate::compact_history), whose rules
//! say which records compaction may take.

use crate::checker::lso_is_the_high_watermark;
use crate::compact_history::{FullRead, KeyedRecord, COMPACT_TOPIC};
use crate::params::{CompactionParams, SimParams};
use crate::router::{redirects, Router};
use crate::txn_history::TXN_TOPIC;
use crate::workload::{
    retriable, Backoff, Shared, FETCH_MAX_BYTES, FETCH_VERSION, PRODUCE_VERSION,
};
use bytes::Bytes;
use kaas_core::compression::MAX_DECOMPRESSED_BATCH_BYTES;
use kaas_core::protocol::messages::{
    create_topics_request, fetch_request, init_producer_id_request, produce_request,
    CreateTopicsRequest, FetchRequest, InitProducerIdRequest,
};
use kaas_core::protocol::{ErrorCode, RequestBody, ResponseBody};
use kaas_core::record::{split_batches, BatchBuilder, Compression, NewRecord};
use kaas_net::broker::Isolation;
use kaas_net::client::{single_partition_produce, Connection};
use madsim::rand::{thread_rng, Rng};
use madsim::time::{sleep, Instant};
use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

const PARTITION: i32 = 0;
const CREATE_TOPICS_VERSION: i16 = 5;
const INIT_PRODUCER_ID_VERSION: i16 = 4;
/// The acks=all timeout the producer asks for.
const ACK_TIMEOUT_MS: i32 = 5_000;
const MAX_RECORDS_PER_BATCH: usize = 4;
/// Pause between batches: a few thousand records over the run are plenty
/// (few keys), while every cleaning round rereads the whole log.
const THINK_MS: std::ops::RangeInclusive<u64> = 10..=50;
/// Once told to stop, how long the producer may take to get its last
/// batch acknowledged (no faults any more by then).
const DRAIN_DEADLINE: Duration = Duration::from_secs(60);
/// How long one read during the faults may take before it is reported as
/// far as it got.
const READ_DEADLINE: Duration = Duration::from_secs(10);

/// The topic's configs: compaction only, so nothing but the cleaner ever
/// removes a record.
fn topic_configs(c: &CompactionParams) -> Vec<(&'static str, String)> {
    vec![
        ("cleanup.policy", "compact".to_string()),
        ("segment.bytes", c.segment_bytes.to_string()),
        ("segment.ms", c.segment_ms.to_string()),
        (
            "min.cleanable.dirty.ratio",
            format!("{:.2}", f64::from(c.dirty_ratio_percent) / 100.0),
        ),
        ("delete.retention.ms", c.delete_retention_ms.to_string()),
        ("min.compaction.lag.ms", c.min_lag_ms.to_string()),
    ]
}

fn codec(c: &CompactionParams) -> Compression {
    crate::params::codec_of(c.codec)
}

/// Before any workload starts: creates the compacted topic and, if the
/// seed says so, the transactional workload's topic compacted too (before
/// a Metadata lookup auto-creates it uncompacted).
pub async fn create_topics(params: SimParams, brokers: Vec<SocketAddr>, shared: Arc<Shared>) {
    let Some(c) = params.compaction else {
        return;
    };
    if c.txn_topic && !create_topic(&c, TXN_TOPIC, params.partitions, &brokers, &shared).await {
        return;
    }
    if create_topic(&c, COMPACT_TOPIC, 1, &brokers, &shared).await {
        shared.compact_topic_created.store(true, Relaxed);
    }
}

/// Creates `topic` compacted, asking each broker in turn until one creates
/// it or says it exists; false if it refused the configs (a violation).
async fn create_topic(
    c: &CompactionParams,
    topic: &str,
    partitions: i32,
    brokers: &[SocketAddr],
    shared: &Shared,
) -> bool {
    let body = RequestBody::CreateTopics(CreateTopicsRequest {
        topics: vec![create_topics_request::CreatableTopic {
            name: topic.into(),
            num_partitions: partitions,
            replication_factor: 1,
            configs: topic_configs(c)
                .into_iter()
                .map(
                    |(name, value)| create_topics_request::CreatableTopicConfig {
                        name: name.into(),
                        value: Some(value),
                        ..Default::default()
                    },
                )
                .collect(),
            ..Default::default()
        }],
        timeout_ms: 10_000,
        ..Default::default()
    });
    let mut backoff = Backoff::new();
    let mut conn = None;
    let mut attempt = 0;
    loop {
        let addr = brokers[attempt % brokers.len()];
        attempt += 1;
        let answer = crate::workload::request_once(
            &mut conn,
            addr,
            create_topics_request::API_KEY,
            CREATE_TOPICS_VERSION,
            &body,
            |m| shared.compact().violation(format!("compact: {m}")),
        )
        .await;
        if let Some(ResponseBody::CreateTopics(r)) = answer {
            let code = r.topics.first().map_or(-1, |t| t.error_code);
            if code == 0 || code == ErrorCode::TopicAlreadyExists.code() {
                return true;
            }
            if code == ErrorCode::InvalidConfig.code() {
                shared.compact().violation(format!(
                    "compact: CreateTopics of {topic} refused the configs {:?}",
                    topic_configs(c)
                ));
                return false;
            }
        }
        backoff.wait().await;
    }
}

/// The keyed producer: see the module documentation.
pub async fn compact_producer(params: SimParams, brokers: Vec<SocketAddr>, shared: Arc<Shared>) {
    let Some(c) = params.compaction else {
        return;
    };
    if !shared.compact_topic_created.load(Relaxed) {
        return;
    }
    let mut p = KeyedProducer {
        c,
        router: Router::for_topic("compact-producer", &brokers, COMPACT_TOPIC),
        shared,
        conn: None,
        backoff: Backoff::new(),
        session: None,
        sequence: 0,
        written: 0,
        drain_by: None,
    };
    p.run().await;
}

struct KeyedProducer {
    c: CompactionParams,
    router: Router,
    shared: Arc<Shared>,
    conn: Option<Connection>,
    backoff: Backoff,
    /// Producer id and epoch, once InitProducerId answered.
    session: Option<(i64, i16)>,
    /// The next batch's base sequence.
    sequence: i32,
    /// Records built so far: each value is unique.
    written: u64,
    /// Set once told to stop: the last batch must be acknowledged by then.
    drain_by: Option<Instant>,
}

impl KeyedProducer {
    fn violation(&self, what: String) {
        self.shared
            .compact()
            .violation(format!("compact producer: {what}"));
    }

    /// Whether to go on retrying: false once the drain deadline passed
    /// (a liveness violation).
    fn in_time(&mut self) -> bool {
        if !self.shared.stop_producing.load(Relaxed) {
            return true;
        }
        let by = *self
            .drain_by
            .get_or_insert_with(|| Instant::now() + DRAIN_DEADLINE);
        if Instant::now() < by {
            return true;
        }
        self.violation(format!(
            "liveness: a batch still unacknowledged {DRAIN_DEADLINE:?} after the faults stopped"
        ));
        false
    }

    async fn run(&mut self) {
        while !self.shared.stop_producing.load(Relaxed) {
            let Some((producer_id, epoch)) = self.session else {
                self.init_producer_id().await;
                continue;
            };
            let records = self.next_records();
            let mut builder = BatchBuilder::idempotent(producer_id, epoch, self.sequence);
            let now = crate::env::wall_ms();
            for r in &records {
                builder.push(NewRecord::new(now, Some(&r.key), r.value.as_deref()));
            }
            let batch = match codec(&self.c) {
                Compression::None => builder.build(),
                codec => match builder.build().compressed_with(codec) {
                    Ok(b) => b,
                    Err(e) => return self.violation(format!("cannot compress a batch: {e}")),
                },
            };
            let body = single_partition_produce(
                COMPACT_TOPIC,
                PARTITION,
                batch.into_bytes(),
                -1,
                ACK_TIMEOUT_MS,
            );
            if !self.produce_until_acknowledged(&body, &records).await {
                return;
            }
            self.sequence = self.sequence.wrapping_add(records.len() as i32);
            let think = thread_rng().gen_range(THINK_MS);
            sleep(Duration::from_millis(think)).await;
        }
    }

    /// One to four records over the seed's keys, some tombstones, every
    /// value unique.
    fn next_records(&mut self) -> Vec<KeyedRecord> {
        let mut rng = thread_rng();
        let count = rng.gen_range(1..=MAX_RECORDS_PER_BATCH);
        (0..count)
            .map(|_| {
                self.written += 1;
                let key = Bytes::from(format!("k{}", rng.gen_range(0..self.c.keys)));
                let tombstone = rng.gen_range(0..100) < self.c.tombstone_percent;
                let value = (!tombstone).then(|| Bytes::from(format!("v{}", self.written)));
                KeyedRecord { key, value }
            })
            .collect()
    }

    async fn init_producer_id(&mut self) {
        let body = RequestBody::InitProducerId(InitProducerIdRequest {
            transactional_id: None,
            transaction_timeout_ms: 60_000,
            producer_id: -1,
            producer_epoch: -1,
            ..Default::default()
        });
        let broker = self.router.any_broker();
        let Some(addr) = self.router.addr_of(broker) else {
            return self.backoff.wait().await;
        };
        let answer = crate::workload::request_once(
            &mut self.conn,
            addr,
            init_producer_id_request::API_KEY,
            INIT_PRODUCER_ID_VERSION,
            &body,
            |m| self.shared.compact().violation(format!("compact: {m}")),
        )
        .await;
        match answer {
            Some(ResponseBody::InitProducerId(r)) if r.error_code == 0 => {
                self.session = Some((r.producer_id, r.producer_epoch));
                self.sequence = 0;
                self.backoff.reset();
            }
            _ => self.backoff.wait().await,
        }
    }

    /// Whether the partition forgot this producer at some point.
    fn forgotten(&self) -> bool {
        self.session.is_some_and(|(pid, _)| {
            let expiries = kaas_core::coverage::producer_expiries();
            crate::expiries::forgot(&expiries, COMPACT_TOPIC, PARTITION, pid)
        })
    }

    /// Sends the batch to the partition's leader until it is acknowledged,
    /// or until its fate is unknown because the partition forgot the
    /// producer (then with no session: a new one is asked for); false if it
    /// never was (a violation has been reported).
    async fn produce_until_acknowledged(
        &mut self,
        body: &RequestBody,
        records: &[KeyedRecord],
    ) -> bool {
        loop {
            if !self.in_time() {
                return false;
            }
            let Some(leader) = self.router.leader(PARTITION, &self.shared).await else {
                self.backoff.wait().await;
                continue;
            };
            let answer = crate::workload::request_once(
                &mut self.conn,
                leader.addr,
                produce_request::API_KEY,
                PRODUCE_VERSION,
                body,
                |m| self.shared.compact().violation(format!("compact: {m}")),
            )
            .await;
            let outcome = match answer {
                Some(ResponseBody::Produce(r)) => r
                    .responses
                    .iter()
                    .filter(|t| t.name == COMPACT_TOPIC)
                    .flat_map(|t| &t.partition_responses)
                    .find(|p| p.index == PARTITION)
                    .map(|p| (p.error_code, p.base_offset)),
                _ => None,
            };
            match outcome {
                Some((0, base_offset)) => {
                    let mut history = self.shared.compact();
                    for (i, r) in records.iter().enumerate() {
                        history.acked(base_offset + i as i64, r.clone());
                    }
                    drop(history);
                    self.backoff.reset();
                    return true;
                }
                Some((code, _)) if retriable(code) => {
                    if redirects(code) {
                        self.router.invalidate();
                    }
                }
                Some((code, _))
                    if code == ErrorCode::UnknownProducerId.code() && self.forgotten() =>
                {
                    // The partition forgot this idle producer
                    // (`producer.id.expiration.ms`): the batch's fate is
                    // unknown (an attempt may have been appended before),
                    // and the producer starts over with a new id, as the
                    // Java client does.
                    tracing::debug!(
                        sequence = self.sequence,
                        "compact producer forgotten by its partition"
                    );
                    self.session = None;
                    return true;
                }
                Some((code, _)) => {
                    // The only batch in flight, retried with its own
                    // sequence: OUT_OF_ORDER_SEQUENCE_NUMBER or
                    // UNKNOWN_PRODUCER_ID here means the broker lost the
                    // producer's acknowledged batches or their state (the
                    // cleaner must keep an active producer's last batch).
                    self.violation(format!(
                        "produce at sequence {} refused with error {code}",
                        self.sequence
                    ));
                    return false;
                }
                None => self.router.invalidate(),
            }
            self.backoff.wait().await;
        }
    }
}

/// Reads the partition again and again while the faults run, every read
/// reported as far as it got.
pub async fn compact_reader(params: SimParams, brokers: Vec<SocketAddr>, shared: Arc<Shared>) {
    let Some(c) = params.compaction else {
        return;
    };
    let mut reader = Reader::new(&brokers, Isolation::ReadUncommitted);
    while !shared.stop_fetching.load(Relaxed) {
        if shared.compact_topic_created.load(Relaxed) {
            let (read, _) = reader.read(&shared, Instant::now() + READ_DEADLINE).await;
            if let Some(read) = read {
                shared.compact().read(read);
            }
        }
        sleep(Duration::from_millis(c.read_every_ms)).await;
    }
}

/// After the faults: one whole read, from the log start to the high
/// watermark, within `deadline`.
pub async fn final_read(
    params: SimParams,
    brokers: Vec<SocketAddr>,
    shared: Arc<Shared>,
    deadline: Duration,
) -> Result<(), String> {
    if params.compaction.is_none() || !shared.compact_topic_created.load(Relaxed) {
        return Ok(());
    }
    // At read_committed: no transaction writes the topic, so it must
    // deliver what read_uncommitted would, up to the high watermark.
    let mut reader = Reader::new(&brokers, Isolation::ReadCommitted);
    let give_up = Instant::now() + deadline;
    loop {
        let (read, complete) = reader.read(&shared, give_up).await;
        if let Some(read) = read {
            let end = read.end;
            shared.compact().read(read);
            if complete {
                return Ok(());
            }
            if Instant::now() >= give_up {
                return Err(format!(
                    "liveness: the compacted topic could not be read past offset {end} within {deadline:?} after the faults"
                ));
            }
        } else if Instant::now() >= give_up {
            return Err(format!(
                "liveness: the compacted topic could not be read within {deadline:?} after the faults"
            ));
        }
    }
}

struct Reader {
    router: Router,
    conn: Option<Connection>,
    backoff: Backoff,
    isolation: Isolation,
}

impl Reader {
    fn new(brokers: &[SocketAddr], isolation: Isolation) -> Reader {
        Reader {
            router: Router::for_topic("compact-reader", brokers, COMPACT_TOPIC),
            conn: None,
            backoff: Backoff::new(),
            isolation,
        }
    }

    /// Reads from offset 0 (nothing deletes from this topic, so the log
    /// starts there) until the high watermark or `give_up`. Returns what
    /// was covered (`None` if nothing), and whether it reached the high
    /// watermark.
    async fn read(&mut self, shared: &Shared, give_up: Instant) -> (Option<FullRead>, bool) {
        let mut read = FullRead::default();
        while Instant::now() < give_up {
            let Some(leader) = self.router.leader(PARTITION, shared).await else {
                self.backoff.wait().await;
                continue;
            };
            let answer = crate::workload::request_once(
                &mut self.conn,
                leader.addr,
                fetch_request::API_KEY,
                FETCH_VERSION,
                &fetch(read.end, leader.epoch, self.isolation),
                |m| shared.compact().violation(format!("compact: {m}")),
            )
            .await;
            let Some(ResponseBody::Fetch(resp)) = answer else {
                self.router.invalidate();
                self.backoff.wait().await;
                continue;
            };
            let Some(data) = resp
                .responses
                .iter()
                .filter(|t| t.topic == COMPACT_TOPIC)
                .flat_map(|t| &t.partitions)
                .find(|p| p.partition_index == PARTITION)
            else {
                self.backoff.wait().await;
                continue;
            };
            if data.error_code == ErrorCode::OffsetOutOfRange.code() {
                shared.compact().violation(format!(
                    "compact reader: offset {} out of range (log start {}, high watermark {}): nothing deletes from a compacted topic",
                    read.end, data.log_start_offset, data.high_watermark
                ));
                return (None, false);
            }
            if data.error_code != 0 {
                if redirects(data.error_code) {
                    self.router.invalidate();
                }
                self.backoff.wait().await;
                continue;
            }
            if let Err(e) = lso_is_the_high_watermark(
                COMPACT_TOPIC,
                PARTITION,
                data.last_stable_offset,
                data.high_watermark,
            ) {
                shared.compact().violation(format!("compact reader: {e}"));
                return (None, false);
            }
            let before = read.end;
            read.high_watermark = read.high_watermark.max(data.high_watermark);
            if let Err(e) = take_records(data.records.clone(), &mut read) {
                shared.compact().violation(format!("compact reader: {e}"));
                return (None, false);
            }
            if read.end >= data.high_watermark {
                self.backoff.reset();
                return (Some(read), true);
            }
            if read.end == before {
                // Below the high watermark but nothing served: ask again.
                self.backoff.wait().await;
            } else {
                self.backoff.reset();
            }
        }
        ((read.end > 0).then_some(read), false)
    }
}

fn fetch(offset: i64, leader_epoch: i32, isolation: Isolation) -> RequestBody {
    RequestBody::Fetch(FetchRequest {
        replica_id: -1,
        max_wait_ms: 0,
        isolation_level: isolation.to_wire(),
        min_bytes: 1,
        max_bytes: FETCH_MAX_BYTES,
        topics: vec![fetch_request::FetchTopic {
            topic: COMPACT_TOPIC.into(),
            partitions: vec![fetch_request::FetchPartition {
                partition: PARTITION,
                fetch_offset: offset,
                partition_max_bytes: FETCH_MAX_BYTES,
                current_leader_epoch: leader_epoch,
                last_fetched_epoch: -1,
                log_start_offset: -1,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    })
}

/// Adds the records of `bytes` at or after `read.end` to the read and
/// moves its end past the last batch.
fn take_records(bytes: Option<Bytes>, read: &mut FullRead) -> Result<(), String> {
    let Some(bytes) = bytes else {
        return Ok(());
    };
    let from = read.end;
    for batch in split_batches(bytes) {
        batch
            .validate()
            .map_err(|e| format!("fetched batch at {} is invalid: {e}", batch.base_offset()))?;
        read.end = read.end.max(batch.next_offset());
        if batch.is_control() {
            continue;
        }
        let batch = batch
            .decompressed(MAX_DECOMPRESSED_BATCH_BYTES)
            .map_err(|e| {
                format!(
                    "cannot decompress the batch at {}: {e}",
                    batch.base_offset()
                )
            })?;
        for record in batch.records() {
            let record = record.map_err(|e| format!("undecodable record: {e}"))?;
            if record.offset < from {
                continue;
            }
            let key = record
                .key
                .ok_or_else(|| format!("record at {} has no key", record.offset))?;
            read.records.push((
                record.offset,
                KeyedRecord {
                    key,
                    value: record.value,
                },
            ));
        }
    }
    Ok(())
}
