//! Workload actors on the client node: plain producers (acks=all, or acks=1
//! or acks=0 as the seed drew), a consumer that fetches while faults run,
//! and the final read-back.
//!
//! They talk to the broker through `kaas_net::client` over madsim's
//! simulated TCP and report everything to the shared [`History`]. Every
//! network step has a timeout and every retry a bounded, jittered backoff,
//! so a dead broker costs time, never a hung run.

use crate::checker::{lso_is_the_high_watermark, GaveUp, History, PartitionLog};
use crate::cluster_history::ClusterHistory;
use crate::cluster_history::FetchedBatch;
use crate::compact_history::CompactHistory;
use crate::eos_history::EosHistory;
use crate::group_history::GroupHistory;
use crate::low_acks::Acks;
use crate::params::{SimParams, PLAIN_PRODUCE_ATTEMPTS};
use crate::poll_history::{self, PollHistory, Reading, Seek};
use crate::retention::{reset_to_earliest, Reset};
use crate::router::{redirects, Leader, Router};
use crate::txn_history::TxnHistory;
use bytes::Bytes;
use kaas_core::compression::MAX_DECOMPRESSED_BATCH_BYTES;
use kaas_core::protocol::messages::{fetch_request, produce_request, FetchRequest};
use kaas_core::protocol::{ErrorCode, RequestBody, ResponseBody};
use kaas_core::record::{split_batches, BatchBuilder, Compression, NewRecord, RecordBatch};
use kaas_net::broker::Isolation;
use kaas_net::client::{
    decode_response, encode_request, produce_to_topics, ClientError, Connection,
};
use madsim::rand::seq::SliceRandom;
use madsim::rand::{thread_rng, Rng};
use madsim::time::{sleep, timeout, Instant};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

pub use crate::checker::{TOPIC, TWIN_TOPIC};
pub(crate) const PRODUCE_VERSION: i16 = 9;
pub(crate) const FETCH_VERSION: i16 = 12;
/// How long the broker may wait for the fsync before answering
/// REQUEST_TIMED_OUT.
const PRODUCE_TIMEOUT_MS: i32 = 5_000;
/// Client-side bound on one request, beyond the broker's own timeout.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// The shortest pause between an acks=0 producer's batches: with no answer
/// to wait for, nothing else paces it (a real one is paced by its socket's
/// buffer, which madsim's never fills).
const UNACKNOWLEDGED_MIN_PAUSE: Duration = Duration::from_millis(10);
/// An acks=0 producer with several brokers looks its leaders up again every
/// this many batches: a leader that moved answers nothing at acks=0, so
/// nothing else tells it (Kafka's client refreshes by `metadata.max.age.ms`).
const UNACKNOWLEDGED_REFRESH_BATCHES: u32 = 20;
/// How long the consumer's fetches long-poll.
const FETCH_MAX_WAIT_MS: i32 = 200;
pub(crate) const FETCH_MAX_BYTES: i32 = 64 * 1024;

/// A topic the main checker holds to its rules, each with a [`History`]
/// of its own: [`TOPIC`], which every plain and idempotent producer,
/// consumer and group member uses, and [`TWIN_TOPIC`], which only the
/// plain producers' requests carry beside it (`SimParams::twin_topic`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlainTopic {
    Main,
    Twin,
}

impl PlainTopic {
    pub fn name(self) -> &'static str {
        match self {
            PlainTopic::Main => TOPIC,
            PlainTopic::Twin => TWIN_TOPIC,
        }
    }
}

/// State shared by the actors and the supervisor.
#[derive(Default)]
pub struct Shared {
    history: Mutex<History>,
    /// [`TWIN_TOPIC`]'s history, in seeds that draw it.
    twin: Mutex<History>,
    groups: Mutex<GroupHistory>,
    txns: Mutex<TxnHistory>,
    eos: Mutex<EosHistory>,
    cluster: Mutex<ClusterHistory>,
    compact: Mutex<CompactHistory>,
    polls: Mutex<PollHistory>,
    /// The compacted topic exists with its configs: its reader may start
    /// (a Metadata lookup before it would auto-create it uncompacted).
    pub compact_topic_created: AtomicBool,
    /// Faults are over: producers finish their current batch and stop.
    pub stop_producing: AtomicBool,
    /// Producers are done: the consumer stops.
    pub stop_fetching: AtomicBool,
    /// The fault phase is over: group members stop crashing and leaving.
    pub faults_over: AtomicBool,
    /// The group caught up with the log: its members leave and stop.
    pub stop_group: AtomicBool,
    /// The exactly-once loop has an EndTxn(commit) in flight (the offset
    /// observer polls fast then), and `eos_commit_started` wakes the
    /// observer when one starts.
    pub eos_committing: AtomicBool,
    pub eos_commit_started: tokio::sync::Notify,
    /// The exactly-once loop drained its input and stopped: so does the
    /// observer.
    pub eos_done: AtomicBool,
    /// How many times the broker was killed so far (the fault driver
    /// bumps it at each kill): tells which broker incarnation an event
    /// happened in.
    pub incarnation: AtomicU64,
}

impl Shared {
    /// The history. Never held across an await, so it cannot deadlock.
    pub fn history(&self) -> MutexGuard<'_, History> {
        self.history.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The history of one of the plain topics; same rule.
    pub fn history_of(&self, plain: PlainTopic) -> MutexGuard<'_, History> {
        match plain {
            PlainTopic::Main => self.history(),
            PlainTopic::Twin => self.twin.lock().unwrap_or_else(|p| p.into_inner()),
        }
    }

    /// The group history; same rule.
    pub fn groups(&self) -> MutexGuard<'_, GroupHistory> {
        self.groups.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The transactional workload's history; same rule.
    pub fn txns(&self) -> MutexGuard<'_, TxnHistory> {
        self.txns.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The exactly-once loop's history; same rule.
    pub fn eos(&self) -> MutexGuard<'_, EosHistory> {
        self.eos.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What clients saw of partition leadership (multi-broker seeds); same
    /// rule.
    pub fn cluster(&self) -> MutexGuard<'_, ClusterHistory> {
        self.cluster.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The compacted-topic workload's history; same rule.
    pub fn compact(&self) -> MutexGuard<'_, CompactHistory> {
        self.compact.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every consumer's fetch answers, for the poll-order rules; same rule.
    pub fn polls(&self) -> MutexGuard<'_, PollHistory> {
        self.polls.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn incarnation(&self) -> u64 {
        self.incarnation.load(Ordering::Relaxed)
    }
}

/// Exponential backoff between 10 ms and 500 ms with jitter, so retrying
/// actors neither hammer a restarting broker nor move in lockstep, yet
/// catch a broker that only stays up for a few hundred milliseconds.
pub(crate) struct Backoff {
    next: Duration,
}

impl Backoff {
    const MIN: Duration = Duration::from_millis(10);
    const MAX: Duration = Duration::from_millis(500);

    pub(crate) fn new() -> Backoff {
        Backoff { next: Self::MIN }
    }

    pub(crate) async fn wait(&mut self) {
        let jittered = self.next.mul_f64(thread_rng().gen_range(0.5..1.5));
        sleep(jittered).await;
        self.next = (self.next * 2).min(Self::MAX);
    }

    pub(crate) fn reset(&mut self) {
        self.next = Self::MIN;
    }
}

/// One request on `conn` to `addr` (connected first if need be, dropped
/// on any failure), bounded by the request timeout: the answer, or `None`.
/// A malformed answer (a broker bug, not a fault) goes to `malformed`, for
/// the workload's history to record as a violation.
pub(crate) async fn request_once(
    conn: &mut Option<Connection>,
    addr: SocketAddr,
    api_key: i16,
    version: i16,
    body: &RequestBody,
    malformed: impl FnOnce(String),
) -> Option<ResponseBody> {
    if conn.as_ref().is_some_and(|c| c.peer() != addr) {
        *conn = None;
    }
    let c = ensure_connected(conn, addr).await.ok()?;
    match timeout(REQUEST_TIMEOUT, c.send(api_key, version, body)).await {
        Ok(Ok(answer)) => Some(answer),
        Ok(Err(e)) => {
            if is_malformed(&e) {
                malformed(format!("malformed answer to api {api_key}: {e}"));
            }
            *conn = None;
            None
        }
        Err(_) => {
            *conn = None;
            None
        }
    }
}

/// The connection, made first if there is none; `Err` if the broker
/// cannot be reached.
pub(crate) async fn ensure_connected(
    conn: &mut Option<Connection>,
    addr: SocketAddr,
) -> Result<&mut Connection, String> {
    if conn.is_none() {
        match timeout(CONNECT_TIMEOUT, Connection::connect(addr)).await {
            Ok(Ok(c)) => *conn = Some(c),
            Ok(Err(e)) => return Err(format!("connect: {e}")),
            Err(_) => return Err("connect: timed out".into()),
        }
    }
    conn.as_mut().ok_or_else(|| "no connection".to_string())
}

/// Why a request gave nothing usable.
#[derive(Clone)]
pub(crate) enum RequestError {
    /// The broker is unreachable, slow or restarting: retry.
    Network(String),
    /// The broker answered something malformed, or served bytes that are
    /// not whole, valid batches: a bug.
    Malformed(String),
}

impl RequestError {
    pub(crate) fn of(e: ClientError) -> RequestError {
        if is_malformed(&e) {
            RequestError::Malformed(e.to_string())
        } else {
            RequestError::Network(e.to_string())
        }
    }
}

/// Sends one request frame and returns its response frame, dropping the
/// connection on any failure so the next attempt starts clean.
pub(crate) async fn round_trip(
    conn: &mut Option<Connection>,
    addr: SocketAddr,
    frame: &[u8],
) -> Result<Bytes, RequestError> {
    let c = ensure_connected(conn, addr)
        .await
        .map_err(RequestError::Network)?;
    let result = match timeout(REQUEST_TIMEOUT, c.send_raw_frame(frame)).await {
        Ok(Ok(response)) => Ok(response),
        Ok(Err(e)) => Err(RequestError::of(e)),
        Err(_) => Err(RequestError::Network("request timed out".to_string())),
    };
    if result.is_err() {
        *conn = None;
    }
    result
}

/// A produce request carrying each of `parts`, grouped by topic in the
/// order each topic first appears.
fn produce_request(parts: &[&Part], acks: Acks) -> RequestBody {
    let mut topics: Vec<(&str, Vec<(i32, Bytes)>)> = Vec::new();
    for part in parts {
        let (topic, batch) = (part.plain.name(), (part.partition, part.records.clone()));
        match topics.iter_mut().find(|(t, _)| *t == topic) {
            Some((_, batches)) => batches.push(batch),
            None => topics.push((topic, vec![batch])),
        }
    }
    produce_to_topics(topics, acks.wire(), PRODUCE_TIMEOUT_MS)
}

/// `batch` compressed with the seed's `codec`. Kafka's four codecs always
/// compress a valid batch; were one to fail, the batch goes uncompressed,
/// which the broker takes as well.
pub(crate) fn compressed(batch: RecordBatch, codec: Compression) -> RecordBatch {
    batch.compressed_with(codec).unwrap_or(batch)
}

/// True for errors that mean the broker sent something malformed (as
/// opposed to the connection failing): a bug, not a fault to retry through.
pub(crate) fn is_malformed(e: &ClientError) -> bool {
    matches!(
        e,
        ClientError::Decode(_)
            | ClientError::CorrelationMismatch { .. }
            | ClientError::InvalidFrameLength(_)
    )
}

/// The (error code, base offset) of the one partition of `topic` a
/// produce carried.
pub(crate) fn produce_outcome(
    body: &ResponseBody,
    topic: &str,
    partition: i32,
) -> Result<(i16, i64), RequestError> {
    let ResponseBody::Produce(resp) = body else {
        return Err(RequestError::Malformed(
            "produce answered with another response type".into(),
        ));
    };
    resp.responses
        .iter()
        .filter(|t| t.name == topic)
        .flat_map(|t| &t.partition_responses)
        .find(|p| p.index == partition)
        .map(|p| (p.error_code, p.base_offset))
        .ok_or_else(|| {
            RequestError::Malformed(format!("produce response lacks partition {partition}"))
        })
}

/// Errors a plain producer retries. Anything else from this workload's
/// well-formed requests means the broker misjudged them: a violation.
pub(crate) fn retriable(code: i16) -> bool {
    [
        ErrorCode::RequestTimedOut,
        ErrorCode::KafkaStorageError,
        ErrorCode::UnknownTopicOrPartition,
        ErrorCode::LeaderNotAvailable,
        ErrorCode::NotLeaderOrFollower,
        ErrorCode::UnknownServerError,
    ]
    .iter()
    .any(|c| c.code() == code)
}

/// A plain producer's next batch: where it goes, its uniquely named
/// records, and the pause after it.
struct PlainBatch {
    plain: PlainTopic,
    partition: i32,
    values: Vec<Bytes>,
    think: Duration,
}

impl PlainBatch {
    /// Draws batch `batch_no` of producer `id` and reports it sent.
    fn next(id: usize, batch_no: u32, params: &SimParams, acks: Acks, shared: &Shared) -> Self {
        let partition = thread_rng().gen_range(0..params.partitions);
        PlainBatch::on(
            id,
            batch_no,
            PlainTopic::Main,
            partition,
            params,
            acks,
            shared,
        )
    }

    /// Draws batch `batch_no` of producer `id` for `partition` of `plain`
    /// and reports it sent.
    fn on(
        id: usize,
        batch_no: u32,
        plain: PlainTopic,
        partition: i32,
        params: &SimParams,
        acks: Acks,
        shared: &Shared,
    ) -> Self {
        let (count, think) = {
            let mut rng = thread_rng();
            (
                rng.gen_range(1..=params.max_records_per_batch),
                Duration::from_millis(rng.gen_range(0..=params.producer_think_ms)),
            )
        };
        let values: Vec<Bytes> = (0..count)
            .map(|r| Bytes::from(format!("p{id}-b{batch_no}-r{r}")))
            .collect();
        let mut history = shared.history_of(plain);
        history.sent(&values);
        history.low_acks.sent(acks, &values);
        if params.retention.is_some() && plain == PlainTopic::Main {
            // The timestamp the produce request gives them (no await
            // before it is built): what time retention judges them by.
            history.retention.stamp(&values, crate::env::wall_ms());
        }
        PlainBatch {
            plain,
            partition,
            values,
            think,
        }
    }
}

/// One partition's batch in a plain producer's request: its record batch
/// is built once, so every attempt sends it with the same bytes.
struct Part {
    plain: PlainTopic,
    partition: i32,
    values: Vec<Bytes>,
    records: Bytes,
}

impl Part {
    /// `batch` as one record batch, stamped now (no await since
    /// [`PlainBatch::on`] stamped it for retention), in the seed's codec.
    fn of(batch: PlainBatch, codec: Compression) -> Part {
        let mut builder = BatchBuilder::new();
        for value in &batch.values {
            builder.push(NewRecord::new(crate::env::wall_ms(), None, Some(value)));
        }
        Part {
            plain: batch.plain,
            partition: batch.partition,
            values: batch.values,
            records: compressed(builder.build(), codec).into_bytes(),
        }
    }
}

/// Produces batches of uniquely named records until told to stop, at the
/// acks level the seed drew for slot `id`. At acks=all and acks=1 it
/// retries each batch with the exact same batch bytes until acknowledged
/// or given up (as Kafka's producer retries at either level); without
/// idempotence a retry after a lost response may append the batch twice,
/// which the checker allows. In seeds that draw multi-partition requests
/// (`SimParams::multi_partition_produce`) one request carries batches for
/// several partitions, as real clients send them, and in seeds that draw
/// the twin topic (`SimParams::twin_topic`) for partitions of both
/// topics; each partition's answer stands on its own, and a retry carries
/// only the partitions not yet answered. At acks=0 see
/// [`unacknowledged_producer`].
pub async fn producer(
    id: usize,
    params: SimParams,
    brokers: Vec<SocketAddr>,
    shared: std::sync::Arc<Shared>,
) {
    let acks = params.acks_of(id);
    if acks == Acks::None {
        return unacknowledged_producer(id, params, brokers, shared).await;
    }
    let mut routers = Routers {
        main: Router::new(format!("producer-{id}"), &brokers),
        twin: Router::for_topic(format!("producer-{id}"), &brokers, TWIN_TOPIC),
    };
    let mut conn: Option<Connection> = None;
    let mut backoff = Backoff::new();
    let mut batch_no: u32 = 0;
    while !shared.stop_producing.load(Ordering::Relaxed) {
        let first = PlainBatch::next(id, batch_no, &params, acks, &shared);
        let (first_partition, think) = (first.partition, first.think);
        let correlation_id = batch_no as i32;
        batch_no += 1;
        let mut parts = vec![Part::of(first, params.compression())];
        if params.multi_partition_produce {
            let mut more = |plain: PlainTopic, partitions: Vec<i32>| {
                for partition in partitions {
                    let batch =
                        PlainBatch::on(id, batch_no, plain, partition, &params, acks, &shared);
                    batch_no += 1;
                    parts.push(Part::of(batch, params.compression()));
                }
            };
            more(
                PlainTopic::Main,
                some_partitions(params.partitions, Some(first_partition)),
            );
            if params.twin_topic {
                more(PlainTopic::Twin, some_partitions(params.partitions, None));
            }
        }
        let mut pending: Vec<&Part> = parts.iter().collect();
        let mut attempts = 0;
        // Whether any attempt had a connection, so may have been written:
        // what a batch given up was ([`GaveUp`]). Every attempt carries
        // every pending part, so one flag serves them all.
        let mut reached = false;
        let give_up = |pending: &[&Part], reached: bool| {
            for part in pending {
                let mut history = shared.history_of(part.plain);
                history.stats.batches_abandoned += 1;
                if acks == Acks::All {
                    let how = if reached {
                        GaveUp::Unknown
                    } else {
                        GaveUp::NeverSent
                    };
                    history.gave_up(&part.values, how);
                }
            }
        };
        while let Some(lead) = pending.first().map(|p| (p.plain, p.partition)) {
            attempts += 1;
            // Sent to the first pending partition's leader: a partition it
            // does not lead is answered NOT_LEADER_OR_FOLLOWER and retried.
            let Some(leader) = routers.of(lead.0).leader(lead.1, &shared).await else {
                // No live leader known (multi-broker only): ask again.
                shared.history().stats.produce_errors += 1;
                if attempts >= params.plain_produce_attempts {
                    give_up(&pending, reached);
                    break;
                }
                backoff.wait().await;
                continue;
            };
            if conn.as_ref().is_some_and(|c| c.peer() != leader.addr) {
                conn = None;
            }
            let addr = leader.addr;
            let connected = ensure_connected(&mut conn, addr).await.map(|_| ());
            reached |= connected.is_ok();
            if connected.is_ok() {
                let mut history = shared.history();
                if pending.len() > 1 {
                    history.stats.multi_partition_requests += 1;
                }
                if pending.iter().any(|p| p.plain != lead.0) {
                    history.stats.multi_topic_requests += 1;
                }
            }
            for part in &pending {
                shared
                    .history_of(part.plain)
                    .low_acks
                    .attempted(&part.values);
            }
            // The harness counts every power loss in both histories.
            let losses_at_send = shared.history().low_acks.power_losses();
            let frame = match encode_request(
                produce_request::API_KEY,
                PRODUCE_VERSION,
                correlation_id,
                Some("sim-producer"),
                &produce_request(&pending, acks),
            ) {
                Ok(f) => f,
                Err(e) => {
                    shared.history().violation(format!(
                        "producer {id}: cannot encode a produce request: {e}"
                    ));
                    return;
                }
            };
            // An attempt without a connection wrote nothing: it must not
            // connect again inside the round trip, unrecorded.
            let answer = match connected {
                Err(e) => Err(RequestError::Network(e)),
                Ok(()) => match round_trip(&mut conn, addr, &frame).await {
                    Ok(response) => decode_response(
                        produce_request::API_KEY,
                        PRODUCE_VERSION,
                        correlation_id,
                        response,
                    )
                    .map_err(RequestError::of),
                    Err(e) => Err(e),
                },
            };
            if let Err(e) = &answer {
                if let RequestError::Malformed(e) = e {
                    shared
                        .history()
                        .violation(format!("producer {id}: malformed produce response: {e}"));
                    conn = None;
                }
                routers.invalidate();
            }
            let mut retry = Vec::new();
            for part in pending {
                let (plain, partition) = (part.plain, part.partition);
                let outcome = match &answer {
                    Ok(body) => produce_outcome(body, plain.name(), partition),
                    Err(e) => Err(e.clone()),
                };
                if let (Ok(_), Err(RequestError::Malformed(e))) = (&answer, &outcome) {
                    shared
                        .history()
                        .violation(format!("producer {id}: malformed produce response: {e}"));
                    conn = None;
                }
                match outcome {
                    Ok((0, base_offset)) if acks == Acks::Leader => {
                        // Appended, not yet durable: no claim on the offset.
                        shared.history_of(plain).low_acks.leader_acked(
                            partition,
                            base_offset,
                            &part.values,
                            losses_at_send,
                        );
                    }
                    Ok((0, base_offset)) => {
                        shared
                            .history_of(plain)
                            .acked(partition, base_offset, &part.values);
                        // The cluster history's rules are per partition
                        // of the main topic.
                        if routers.main.multi() && plain == PlainTopic::Main {
                            shared
                                .cluster()
                                .acked(partition, base_offset, leader.broker, false);
                        }
                    }
                    Ok((code, _)) if retriable(code) => {
                        shared.history().stats.produce_errors += 1;
                        if routers.main.multi() && redirects(code) {
                            shared.cluster().redirected();
                            routers.invalidate();
                        }
                        retry.push(part);
                    }
                    Ok((code, _)) => {
                        shared.history().violation(format!(
                            "producer {id}: produce of batch {correlation_id} to {} partition {partition} failed with non-retriable error {code}",
                            plain.name()
                        ));
                    }
                    Err(_) => {
                        shared.history().stats.produce_errors += 1;
                        retry.push(part);
                    }
                }
            }
            pending = retry;
            if pending.is_empty() {
                backoff.reset();
                break;
            }
            if attempts >= params.plain_produce_attempts {
                give_up(&pending, reached);
                break;
            }
            shared.history().stats.produce_retries += 1;
            backoff.wait().await;
        }
        sleep(think).await;
    }
}

/// A plain producer's leader lookups, one router per topic.
struct Routers {
    main: Router,
    twin: Router,
}

impl Routers {
    fn of(&mut self, plain: PlainTopic) -> &mut Router {
        match plain {
            PlainTopic::Main => &mut self.main,
            PlainTopic::Twin => &mut self.twin,
        }
    }

    fn invalidate(&mut self) {
        self.main.invalidate();
        self.twin.invalidate();
    }
}

/// A random subset of the topic's partitions besides `except`, possibly
/// none: the other partitions a multi-partition request carries.
fn some_partitions(partitions: i32, except: Option<i32>) -> Vec<i32> {
    let mut rng = thread_rng();
    let mut some: Vec<i32> = (0..partitions).filter(|p| Some(*p) != except).collect();
    some.shuffle(&mut rng);
    let keep = rng.gen_range(0..=some.len());
    some.truncate(keep);
    some
}

/// A plain producer at acks=0: writes each batch once to its partition's
/// leader and never waits for an answer, since none comes. A batch is
/// written again only if it never reached a connection; a failed write may
/// still have delivered it, so it is not retried (at acks=0 the producer
/// cannot tell). What became of each record the checker learns from the
/// reads.
async fn unacknowledged_producer(
    id: usize,
    params: SimParams,
    brokers: Vec<SocketAddr>,
    shared: std::sync::Arc<Shared>,
) {
    let mut router = Router::new(format!("producer-{id}"), &brokers);
    let mut conn: Option<Connection> = None;
    let mut backoff = Backoff::new();
    let mut batch_no: u32 = 0;
    while !shared.stop_producing.load(Ordering::Relaxed) {
        let batch = PlainBatch::next(id, batch_no, &params, Acks::None, &shared);
        let think = batch.think;
        batch_no += 1;
        let part = Part::of(batch, params.compression());
        let body = produce_request(&[&part], Acks::None);
        for _ in 0..PLAIN_PRODUCE_ATTEMPTS {
            match write_unacknowledged(&mut router, &mut conn, &part, &body, &shared).await {
                Ok(()) => {
                    backoff.reset();
                    break;
                }
                Err(written) => {
                    shared.history().stats.produce_errors += 1;
                    router.invalidate();
                    if written {
                        break;
                    }
                    backoff.wait().await;
                }
            }
        }
        if router.multi() && batch_no.is_multiple_of(UNACKNOWLEDGED_REFRESH_BATCHES) {
            router.invalidate();
        }
        sleep(think.max(UNACKNOWLEDGED_MIN_PAUSE)).await;
    }
}

/// One attempt to write an acks=0 batch to its leader. `Err(true)`: the
/// write failed after it began (it may have been delivered); `Err(false)`:
/// no leader or no connection, nothing was written.
async fn write_unacknowledged(
    router: &mut Router,
    conn: &mut Option<Connection>,
    part: &Part,
    body: &RequestBody,
    shared: &Shared,
) -> Result<(), bool> {
    let leader = router.leader(part.partition, shared).await.ok_or(false)?;
    if conn.as_ref().is_some_and(|c| c.peer() != leader.addr) {
        *conn = None;
    }
    let c = ensure_connected(conn, leader.addr)
        .await
        .map_err(|_| false)?;
    shared.history().low_acks.attempted(&part.values);
    let sent = timeout(
        REQUEST_TIMEOUT,
        c.send_oneway(produce_request::API_KEY, PRODUCE_VERSION, body),
    )
    .await;
    if !matches!(sent, Ok(Ok(()))) {
        *conn = None;
        return Err(true);
    }
    Ok(())
}

/// The positions a fetch asks for, per topic, in request order.
pub(crate) type Asked<'a> = [(&'a str, &'a BTreeMap<i32, i64>)];

pub(crate) fn fetch_request(
    asked: &Asked<'_>,
    max_wait_ms: i32,
    isolation: Isolation,
) -> RequestBody {
    RequestBody::Fetch(FetchRequest {
        replica_id: -1,
        max_wait_ms,
        isolation_level: isolation.to_wire(),
        min_bytes: 1,
        max_bytes: FETCH_MAX_BYTES,
        topics: asked
            .iter()
            .map(|(topic, positions)| fetch_request::FetchTopic {
                topic: (*topic).into(),
                partitions: positions
                    .iter()
                    .map(|(&partition, &offset)| fetch_request::FetchPartition {
                        partition,
                        fetch_offset: offset,
                        partition_max_bytes: FETCH_MAX_BYTES,
                        current_leader_epoch: -1,
                        last_fetched_epoch: -1,
                        log_start_offset: -1,
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    })
}

/// One partition of a fetch response.
pub(crate) struct FetchedPartition {
    pub(crate) partition: i32,
    /// The offset the fetch asked for.
    pub(crate) requested: i64,
    pub(crate) error_code: i16,
    pub(crate) high_watermark: i64,
    /// -1 with an error.
    pub(crate) last_stable_offset: i64,
    /// The log start the answer showed (-1 with an error).
    pub(crate) log_start_offset: i64,
    /// Records at or after the requested offset, in order.
    pub(crate) records: Vec<(i64, Bytes)>,
    /// Offset after the last returned batch (the requested one if none).
    pub(crate) next_offset: i64,
    /// Every whole batch returned, with its leader epoch.
    pub(crate) batches: Vec<FetchedBatch>,
}

impl FetchedPartition {
    /// A partition no answer came for (multi-broker routing): error -1.
    pub(crate) fn failed(partition: i32, requested: i64) -> FetchedPartition {
        FetchedPartition {
            partition,
            requested,
            error_code: -1,
            high_watermark: -1,
            last_stable_offset: -1,
            log_start_offset: -1,
            records: Vec::new(),
            next_offset: requested,
            batches: Vec::new(),
        }
    }

    /// The answer as the poll-order rules take it (`crate::poll_history`).
    pub(crate) fn poll_answer(&self) -> poll_history::Answer {
        poll_history::Answer {
            partition: self.partition,
            requested: self.requested,
            batches: self
                .batches
                .iter()
                .map(|b| (b.base_offset, b.last_offset))
                .collect(),
            delivered: self.records.iter().map(|(o, _)| *o).collect(),
            next_offset: self.next_offset,
        }
    }
}

/// Decodes the records of one partition, checking every batch's CRC: a
/// consumer must never be served bytes that were not written as a whole.
fn decode_fetched(
    data: &kaas_core::protocol::messages::fetch_response::PartitionData,
    requested: i64,
) -> Result<FetchedPartition, String> {
    let mut out = FetchedPartition {
        partition: data.partition_index,
        requested,
        error_code: data.error_code,
        high_watermark: data.high_watermark,
        last_stable_offset: data.last_stable_offset,
        log_start_offset: data.log_start_offset,
        records: Vec::new(),
        next_offset: requested,
        batches: Vec::new(),
    };
    let Some(bytes) = data.records.clone() else {
        return Ok(out);
    };
    for batch in split_batches(bytes) {
        batch.validate().map_err(|e| {
            format!(
                "partition {}: fetched batch at {} is invalid: {e}",
                data.partition_index,
                batch.base_offset()
            )
        })?;
        // Producers may compress (`SimParams::codec`); a consumer reads the
        // records inside.
        let batch = batch
            .decompressed(MAX_DECOMPRESSED_BATCH_BYTES)
            .map_err(|e| {
                format!(
                    "partition {}: fetched batch at {} does not decompress: {e}",
                    data.partition_index,
                    batch.base_offset()
                )
            })?;
        for record in batch.records() {
            let record = record.map_err(|e| {
                format!(
                    "partition {}: undecodable record: {e}",
                    data.partition_index
                )
            })?;
            let value = record.value.ok_or_else(|| {
                format!(
                    "partition {}: record at {} has no value",
                    data.partition_index, record.offset
                )
            })?;
            if record.offset >= requested {
                out.records.push((record.offset, value));
            }
        }
        out.next_offset = out.next_offset.max(batch.next_offset());
        out.batches.push(FetchedBatch {
            base_offset: batch.base_offset(),
            last_offset: batch.last_offset(),
            leader_epoch: batch.partition_leader_epoch(),
        });
    }
    Ok(out)
}

/// Sends one fetch for `positions` of `topic`.
pub(crate) async fn fetch_once(
    conn: &mut Option<Connection>,
    addr: SocketAddr,
    topic: &str,
    positions: &BTreeMap<i32, i64>,
    max_wait_ms: i32,
    isolation: Isolation,
) -> Result<Vec<FetchedPartition>, RequestError> {
    let mut answers =
        fetch_topics(conn, addr, &[(topic, positions)], max_wait_ms, isolation).await?;
    Ok(answers.pop().unwrap_or_default())
}

/// Sends one fetch for the positions of several topics, as a consumer
/// subscribed to them sends it; each topic's answer in `asked`'s order.
pub(crate) async fn fetch_topics(
    conn: &mut Option<Connection>,
    addr: SocketAddr,
    asked: &Asked<'_>,
    max_wait_ms: i32,
    isolation: Isolation,
) -> Result<Vec<Vec<FetchedPartition>>, RequestError> {
    let body = fetch_request(asked, max_wait_ms, isolation);
    fetch_with(conn, addr, &body, asked).await
}

/// Sends one fetch for `positions` that names each partition's leader
/// epoch (KIP-320: a broker at another epoch answers FENCED_LEADER_EPOCH
/// or UNKNOWN_LEADER_EPOCH instead of serving).
pub(crate) async fn fetch_at_epochs(
    conn: &mut Option<Connection>,
    addr: SocketAddr,
    topic: &str,
    positions: &BTreeMap<i32, i64>,
    epochs: &BTreeMap<i32, i32>,
    max_wait_ms: i32,
    isolation: Isolation,
) -> Result<Vec<FetchedPartition>, RequestError> {
    let body = fetch_request_at_epochs(topic, positions, epochs, max_wait_ms, isolation);
    let mut answers = fetch_with(conn, addr, &body, &[(topic, positions)]).await?;
    Ok(answers.pop().unwrap_or_default())
}

/// A fetch of `positions` of `topic` naming, for each partition in
/// `epochs`, the leader epoch the client knows (-1 for the others).
pub(crate) fn fetch_request_at_epochs(
    topic: &str,
    positions: &BTreeMap<i32, i64>,
    epochs: &BTreeMap<i32, i32>,
    max_wait_ms: i32,
    isolation: Isolation,
) -> RequestBody {
    let mut body = fetch_request(&[(topic, positions)], max_wait_ms, isolation);
    name_leader_epochs(&mut body, &[epochs]);
    body
}

/// Names in a Fetch the leader epoch the client knows for each partition
/// (KIP-320): `epochs[i]` for the request's `i`-th topic, -1 where it
/// knows none.
fn name_leader_epochs(body: &mut RequestBody, epochs: &[&BTreeMap<i32, i32>]) {
    if let RequestBody::Fetch(f) = body {
        for (topic, epochs) in f.topics.iter_mut().zip(epochs) {
            for p in &mut topic.partitions {
                p.current_leader_epoch = epochs.get(&p.partition).copied().unwrap_or(-1);
            }
        }
    }
}

async fn fetch_with(
    conn: &mut Option<Connection>,
    addr: SocketAddr,
    body: &RequestBody,
    asked: &Asked<'_>,
) -> Result<Vec<Vec<FetchedPartition>>, RequestError> {
    let c = ensure_connected(conn, addr)
        .await
        .map_err(RequestError::Network)?;
    let result = match timeout(
        REQUEST_TIMEOUT,
        c.send(fetch_request::API_KEY, FETCH_VERSION, body),
    )
    .await
    {
        Ok(Ok(body)) => Ok(body),
        Ok(Err(e)) => Err(RequestError::of(e)),
        Err(_) => Err(RequestError::Network("fetch timed out".to_string())),
    };
    let body = match result {
        Ok(body) => body,
        Err(e) => {
            *conn = None;
            return Err(e);
        }
    };
    let ResponseBody::Fetch(resp) = body else {
        return Err(RequestError::Malformed(
            "fetch answered with another response type".into(),
        ));
    };
    let mut out = Vec::with_capacity(asked.len());
    for (topic, positions) in asked {
        let mut parts = Vec::new();
        for answered in resp.responses.iter().filter(|t| t.topic == *topic) {
            for data in &answered.partitions {
                let requested = positions.get(&data.partition_index).copied().unwrap_or(0);
                parts.push(decode_fetched(data, requested).map_err(RequestError::Malformed)?);
            }
        }
        out.push(parts);
    }
    Ok(out)
}

/// One fetch round of a multi-broker client: every partition of
/// `positions` asked of its leader (one request per leader), at the epoch
/// the router knows. Partitions whose leader is unknown, or whose request
/// failed, are missing from the answer; `errors` counts them (the router
/// is invalidated for them).
async fn fetch_routed(
    router: &mut Router,
    conns: &mut BTreeMap<i32, Option<Connection>>,
    positions: &BTreeMap<i32, i64>,
    max_wait_ms: i32,
    isolation: Isolation,
    shared: &Shared,
    errors: &mut Vec<String>,
) -> Result<Vec<FetchedPartition>, String> {
    let mut answers = fetch_routed_topics(
        &mut [(router, positions)],
        conns,
        max_wait_ms,
        isolation,
        shared,
        errors,
    )
    .await?;
    Ok(answers.pop().unwrap_or_default())
}

/// [`fetch_routed`] for several topics, each with its router: one request
/// per leader carries every topic's partitions it leads, as a consumer
/// subscribed to several topics sends them. Each topic's answer in
/// `topics`' order.
async fn fetch_routed_topics(
    topics: &mut [(&mut Router, &BTreeMap<i32, i64>)],
    conns: &mut BTreeMap<i32, Option<Connection>>,
    max_wait_ms: i32,
    isolation: Isolation,
    shared: &Shared,
    errors: &mut Vec<String>,
) -> Result<Vec<Vec<FetchedPartition>>, String> {
    // Per leader: its address, and per topic (by index) the positions and
    // epochs asked of it.
    type Asked = BTreeMap<usize, (BTreeMap<i32, i64>, BTreeMap<i32, i32>)>;
    let mut by_leader: BTreeMap<i32, (SocketAddr, Asked)> = BTreeMap::new();
    for (i, (router, positions)) in topics.iter_mut().enumerate() {
        for (&p, &offset) in positions.iter() {
            match router.leader(p, shared).await {
                Some(l) => {
                    let asked = by_leader
                        .entry(l.broker)
                        .or_insert_with(|| (l.addr, BTreeMap::new()))
                        .1
                        .entry(i)
                        .or_default();
                    asked.0.insert(p, offset);
                    asked.1.insert(p, l.epoch);
                }
                None => errors.push(format!(
                    "{} partition {p}: no live leader known",
                    router.topic()
                )),
            }
        }
    }
    let mut out: Vec<Vec<FetchedPartition>> = topics.iter().map(|_| Vec::new()).collect();
    for (broker, (addr, asked)) in by_leader {
        let conn = conns.entry(broker).or_default();
        let names: Vec<String> = asked
            .keys()
            .map(|&i| topics[i].0.topic().to_string())
            .collect();
        let request: Vec<(&str, &BTreeMap<i32, i64>)> = names
            .iter()
            .zip(asked.values())
            .map(|(name, (positions, _))| (name.as_str(), positions))
            .collect();
        let mut body = fetch_request(&request, max_wait_ms, isolation);
        let epochs: Vec<&BTreeMap<i32, i32>> = asked.values().map(|(_, e)| e).collect();
        name_leader_epochs(&mut body, &epochs);
        match fetch_with(conn, addr, &body, &request).await {
            Ok(answers) => {
                for (&i, parts) in asked.keys().zip(answers) {
                    for part in parts {
                        if redirects(part.error_code) {
                            shared.cluster().redirected();
                            topics[i].0.invalidate();
                        }
                        out[i].push(part);
                    }
                }
            }
            Err(RequestError::Malformed(e)) => return Err(e),
            Err(RequestError::Network(e)) => {
                for &i in asked.keys() {
                    topics[i].0.invalidate();
                }
                errors.push(format!("broker {broker}: {e}"));
            }
        }
    }
    Ok(out)
}

/// What a fetch sent now must find, per partition: the durable end (its
/// high watermark may not be lower) and the log start (none of its records
/// below, nor a lower start in its answer).
pub(crate) struct Floors(PlainTopic, BTreeMap<i32, (i64, i64)>);

impl Floors {
    pub(crate) fn now(
        plain: PlainTopic,
        positions: &BTreeMap<i32, i64>,
        shared: &Shared,
    ) -> Floors {
        let history = shared.history_of(plain);
        Floors(
            plain,
            positions
                .keys()
                .map(|&p| {
                    (
                        p,
                        (history.fetch_floor(p), history.retention.start_floor(p)),
                    )
                })
                .collect(),
        )
    }

    /// Reports a successful fetch answer to the history, checked against
    /// these floors.
    pub(crate) fn fetched(&self, part: &FetchedPartition, shared: &Shared) {
        let (durable, start) = self.1.get(&part.partition).copied().unwrap_or((0, 0));
        tracing::debug!(
            topic = self.0.name(),
            partition = part.partition,
            durable,
            high_watermark = part.high_watermark,
            log_start = part.log_start_offset,
            "fetch answered"
        );
        let mut history = shared.history_of(self.0);
        history.fetched(part.partition, durable, part.high_watermark, &part.records);
        history.fetched_start(part.partition, start, part.log_start_offset, &part.records);
    }
}

/// A reader's fetch at `position` was answered OFFSET_OUT_OF_RANGE. With
/// deletions this seed, the position may have fallen below the log start:
/// ListOffsets EARLIEST (to `addr`, the leader at `epoch`) says, and the
/// reader moves there (`Some`). Otherwise, or if the log start is not above
/// the position, it is a violation: positions only advance over durable
/// data, never past the end. `None`: the reader stays (and backs off).
pub(crate) async fn out_of_range(
    params: &SimParams,
    plain: PlainTopic,
    conn: &mut Option<Connection>,
    leader: Leader,
    partition: i32,
    position: i64,
    shared: &Shared,
) -> Option<i64> {
    // Only the main topic's records are deleted (`crate::retention`).
    let start = if params.retention.is_some() && plain == PlainTopic::Main {
        match reset_to_earliest(conn, leader.addr, partition, leader.epoch, position, shared).await
        {
            Reset::MovedTo(start) => return Some(start),
            Reset::Failed => return None,
            Reset::NotBelow(start) => format!(" (the log starts at {start})"),
        }
    } else {
        String::new()
    };
    shared.history_of(plain).violation(format!(
        "partition {partition}: OFFSET_OUT_OF_RANGE at {position}, an offset the broker had already served up to{start}"
    ));
    None
}

/// A new consumer in the poll-order history, at `positions` (its first
/// seek on each partition).
pub(crate) fn polling(
    name: &str,
    reading: Reading,
    positions: &BTreeMap<i32, i64>,
    shared: &Shared,
) -> poll_history::ConsumerId {
    let mut polls = shared.polls();
    let me = polls.consumer(name, reading);
    for (&p, &offset) in positions {
        polls.seek(me, p, offset, Seek::Start);
    }
    me
}

/// [`out_of_range`] with several brokers: asked of `partition`'s leader as
/// `router` knows it, on that broker's connection; `None` if it knows none.
async fn out_of_range_routed(
    params: &SimParams,
    plain: PlainTopic,
    router: &mut Router,
    conns: &mut BTreeMap<i32, Option<Connection>>,
    partition: i32,
    position: i64,
    shared: &Shared,
) -> Option<i64> {
    let leader = router.leader(partition, shared).await?;
    let conn = conns.entry(leader.broker).or_default();
    out_of_range(params, plain, conn, leader, partition, position, shared).await
}

/// The only broker of a single-broker seed, as [`out_of_range`] names it:
/// its leader epochs are not checked.
fn sole_broker(addr: SocketAddr) -> Leader {
    Leader {
        broker: 0,
        addr,
        epoch: -1,
    }
}

/// Tails every partition while faults run, recording what it reads so the
/// checker can hold the broker to it later. In seeds that write the twin
/// topic, each fetch asks for both topics (with several brokers, each
/// leader's request carries both), as a consumer subscribed to two topics
/// does, and the twin's answers go to its own history (the poll-order and
/// cluster rules follow [`TOPIC`] alone).
pub async fn consumer(params: SimParams, brokers: Vec<SocketAddr>, shared: std::sync::Arc<Shared>) {
    if brokers.len() > 1 {
        return consumer_routed(params, brokers, shared).await;
    }
    let addr = brokers[0];
    let mut conn = None;
    let mut backoff = Backoff::new();
    let mut positions: BTreeMap<i32, i64> = (0..params.partitions).map(|p| (p, 0)).collect();
    let mut twin_positions: BTreeMap<i32, i64> = if params.twin_topic {
        positions.clone()
    } else {
        BTreeMap::new()
    };
    let tail = Tailing {
        me: polling("tailing consumer", Reading::Main, &positions, &shared),
        routed: false,
    };
    while !shared.stop_fetching.load(Ordering::Relaxed) {
        let floors = [
            Floors::now(PlainTopic::Main, &positions, &shared),
            Floors::now(PlainTopic::Twin, &twin_positions, &shared),
        ];
        let mut asked = vec![(TOPIC, &positions)];
        if !twin_positions.is_empty() {
            asked.push((TWIN_TOPIC, &twin_positions));
        }
        let answers = fetch_topics(
            &mut conn,
            addr,
            &asked,
            FETCH_MAX_WAIT_MS,
            Isolation::ReadUncommitted,
        )
        .await;
        let answers = match answers {
            Ok(answers) => answers,
            Err(e) => {
                if let RequestError::Malformed(e) = e {
                    shared.history().violation(e);
                }
                shared.history().stats.fetch_errors += 1;
                backoff.wait().await;
                continue;
            }
        };
        let mut any_error = false;
        for ((plain, floors), fetched) in [PlainTopic::Main, PlainTopic::Twin]
            .into_iter()
            .zip(&floors)
            .zip(answers)
        {
            let positions = match plain {
                PlainTopic::Main => &mut positions,
                PlainTopic::Twin => &mut twin_positions,
            };
            for part in fetched {
                let Some(position) = positions.get_mut(&part.partition) else {
                    continue;
                };
                if part.error_code == ErrorCode::OffsetOutOfRange.code() {
                    // The position only ever advances over data a fetch
                    // returned, which was durable: it cannot be past the
                    // end. Only below the log start (records deleted from
                    // the main topic) may it be out of range.
                    let at = *position;
                    let start = out_of_range(
                        &params,
                        plain,
                        &mut conn,
                        sole_broker(addr),
                        part.partition,
                        at,
                        &shared,
                    )
                    .await;
                    any_error |= !tail.reset(plain, part.partition, position, start, &shared);
                    continue;
                }
                any_error |= !tail.read(plain, &part, position, floors, &shared);
            }
        }
        if any_error {
            shared.history().stats.fetch_errors += 1;
            backoff.wait().await;
        } else {
            backoff.reset();
        }
    }
}

/// What the tailing consumer makes of its answers, with one broker or
/// several: the poll-order rules (and with several brokers the cluster
/// rules) follow [`TOPIC`] alone.
struct Tailing {
    me: poll_history::ConsumerId,
    routed: bool,
}

impl Tailing {
    /// An OFFSET_OUT_OF_RANGE answer at `position`, after which the log
    /// was found to start at `start` (`None`: it was not, a violation
    /// `out_of_range` reported, or no answer). False if the reader stays.
    fn reset(
        &self,
        plain: PlainTopic,
        partition: i32,
        position: &mut i64,
        start: Option<i64>,
        shared: &Shared,
    ) -> bool {
        let Some(start) = start else {
            return false;
        };
        *position = start;
        if plain == PlainTopic::Main {
            shared.polls().seek(self.me, partition, start, Seek::Reset);
        }
        true
    }

    /// Any other answer: an error (for the twin, UNKNOWN_TOPIC_OR_PARTITION
    /// too, until the first Produce creates it) makes it false; records
    /// go to `plain`'s history, checked against `floors`, and the position
    /// moves past them.
    fn read(
        &self,
        plain: PlainTopic,
        part: &FetchedPartition,
        position: &mut i64,
        floors: &Floors,
        shared: &Shared,
    ) -> bool {
        if part.error_code != 0 {
            return false;
        }
        floors.fetched(part, shared);
        if plain == PlainTopic::Main {
            if self.routed {
                shared
                    .cluster()
                    .fetched("consumer", part.partition, &part.batches);
            }
            shared.polls().answer(self.me, part.poll_answer());
        }
        *position = (*position).max(part.next_offset);
        true
    }
}

/// [`consumer`] with several brokers: each partition fetched from its
/// leader, and the epoch of every batch of [`TOPIC`] reported.
async fn consumer_routed(
    params: SimParams,
    brokers: Vec<SocketAddr>,
    shared: std::sync::Arc<Shared>,
) {
    let mut router = Router::new("consumer", &brokers);
    let mut twin_router = Router::for_topic("consumer", &brokers, TWIN_TOPIC);
    let mut conns = BTreeMap::new();
    let mut backoff = Backoff::new();
    let mut positions: BTreeMap<i32, i64> = (0..params.partitions).map(|p| (p, 0)).collect();
    let mut twin_positions: BTreeMap<i32, i64> = if params.twin_topic {
        positions.clone()
    } else {
        BTreeMap::new()
    };
    let tail = Tailing {
        me: polling("tailing consumer", Reading::Main, &positions, &shared),
        routed: true,
    };
    while !shared.stop_fetching.load(Ordering::Relaxed) {
        let floors = [
            Floors::now(PlainTopic::Main, &positions, &shared),
            Floors::now(PlainTopic::Twin, &twin_positions, &shared),
        ];
        let mut errors = Vec::new();
        let fetched = fetch_routed_topics(
            &mut [
                (&mut router, &positions),
                (&mut twin_router, &twin_positions),
            ],
            &mut conns,
            FETCH_MAX_WAIT_MS,
            Isolation::ReadUncommitted,
            &shared,
            &mut errors,
        )
        .await;
        let fetched = match fetched {
            Ok(f) => f,
            Err(e) => {
                shared.history().violation(e);
                Vec::new()
            }
        };
        let mut any_error = !errors.is_empty();
        for ((plain, floors), fetched) in [PlainTopic::Main, PlainTopic::Twin]
            .into_iter()
            .zip(&floors)
            .zip(fetched)
        {
            let (positions, router) = match plain {
                PlainTopic::Main => (&mut positions, &mut router),
                PlainTopic::Twin => (&mut twin_positions, &mut twin_router),
            };
            for part in fetched {
                let Some(position) = positions.get_mut(&part.partition) else {
                    continue;
                };
                if part.error_code == ErrorCode::OffsetOutOfRange.code() {
                    let at = *position;
                    let start = out_of_range_routed(
                        &params,
                        plain,
                        router,
                        &mut conns,
                        part.partition,
                        at,
                        &shared,
                    )
                    .await;
                    any_error |= !tail.reset(plain, part.partition, position, start, &shared);
                    continue;
                }
                any_error |= !tail.read(plain, &part, position, floors, &shared);
            }
        }
        if any_error {
            shared.history().stats.fetch_errors += 1;
            backoff.wait().await;
        } else {
            backoff.reset();
        }
    }
}

/// The final reads of the plain topics are at read_committed: every acknowledged
/// record must be readable there (issue 13 item 9). No transaction writes
/// them, so every answer's last stable offset must be its high
/// watermark (`checker::lso_is_the_high_watermark`), and read_committed returns
/// exactly what read_uncommitted would; the tailing consumer and the
/// group members read at read_uncommitted during the run.
const FINAL_READ: Isolation = Isolation::ReadCommitted;

/// A final read's answer: the plain topics have no transactions, so its
/// last stable offset is its high watermark (`lso_is_the_high_watermark`).
fn final_answer_is_stable(plain: PlainTopic, part: &FetchedPartition) -> Result<(), String> {
    lso_is_the_high_watermark(
        plain.name(),
        part.partition,
        part.last_stable_offset,
        part.high_watermark,
    )
    .map_err(|e| format!("final read_committed read of {e}"))
}

/// After the faults: reads every partition of `plain` from offset 0 to
/// its high watermark, at read_committed ([`FINAL_READ`]). Retries through
/// errors until `deadline`.
pub async fn read_everything(
    params: SimParams,
    plain: PlainTopic,
    addr: SocketAddr,
    shared: std::sync::Arc<Shared>,
    deadline: Duration,
) -> Result<BTreeMap<i32, PartitionLog>, String> {
    let give_up = Instant::now() + deadline;
    let mut conn = None;
    let mut backoff = Backoff::new();
    let mut logs: BTreeMap<i32, PartitionLog> = BTreeMap::new();
    let mut positions: BTreeMap<i32, i64> = (0..params.partitions).map(|p| (p, 0)).collect();
    let mut last_error = String::new();
    while !positions.is_empty() {
        if Instant::now() >= give_up {
            return Err(format!(
                "liveness: could not read every partition of {} back within {deadline:?} (still reading {positions:?}; last error: {last_error})",
                plain.name()
            ));
        }
        let floors = Floors::now(plain, &positions, &shared);
        let fetched =
            match fetch_once(&mut conn, addr, plain.name(), &positions, 0, FINAL_READ).await {
                Ok(f) => f,
                Err(RequestError::Malformed(e)) => return Err(format!("final read: {e}")),
                Err(RequestError::Network(e)) => {
                    last_error = e;
                    backoff.wait().await;
                    continue;
                }
            };
        let mut progressed = false;
        for part in fetched {
            let Some(&position) = positions.get(&part.partition) else {
                continue;
            };
            if part.error_code == ErrorCode::OffsetOutOfRange.code() {
                match out_of_range(
                    &params,
                    plain,
                    &mut conn,
                    sole_broker(addr),
                    part.partition,
                    position,
                    &shared,
                )
                .await
                {
                    Some(start) => {
                        final_start_moved(plain, &mut logs, part.partition, start, &shared);
                        positions.insert(part.partition, start);
                        progressed = true;
                    }
                    None => last_error = format!("partition {} out of range", part.partition),
                }
                continue;
            }
            if part.error_code != 0 {
                last_error = format!("partition {} error {}", part.partition, part.error_code);
                continue;
            }
            floors.fetched(&part, &shared);
            final_answer_is_stable(plain, &part)?;
            let position = position.max(final_start_moved(
                plain,
                &mut logs,
                part.partition,
                part.log_start_offset,
                &shared,
            ));
            let log = logs.entry(part.partition).or_default();
            log.extend(part.records.iter().filter(|(o, _)| *o >= position).cloned());
            if part.next_offset > position {
                progressed = true;
                positions.insert(part.partition, part.next_offset);
            } else if position >= part.high_watermark {
                positions.remove(&part.partition);
                progressed = true;
            } else {
                last_error = format!(
                    "partition {}: empty read at {position} below the high watermark {}",
                    part.partition, part.high_watermark
                );
            }
        }
        if progressed {
            backoff.reset();
        } else {
            backoff.wait().await;
        }
    }
    shared
        .history_of(plain)
        .retention
        .final_read_at(crate::env::wall_ms());
    Ok(logs)
}

/// The final read learned that `partition`'s log starts at `start` (from an
/// answer's log start, or a reset to the earliest offset): what it read
/// below is gone (retention goes on while it reads), so the final log is
/// the log as of its last answer. Returns where the final log now starts.
fn final_start_moved(
    plain: PlainTopic,
    logs: &mut BTreeMap<i32, PartitionLog>,
    partition: i32,
    start: i64,
    shared: &Shared,
) -> i64 {
    let mut history = shared.history_of(plain);
    let known = history.retention.start_of(partition);
    if start <= known {
        return known;
    }
    history.retention.final_start(partition, start);
    if let Some(log) = logs.get_mut(&partition) {
        log.retain(|(o, _)| *o >= start);
    }
    start
}

/// [`read_everything`] with several brokers: each partition read from its
/// leader. Also returns every partition's batches with their leader epochs,
/// in offset order (for [`TOPIC`], reported to the cluster history as the
/// client `final`).
pub async fn read_everything_routed(
    params: SimParams,
    plain: PlainTopic,
    brokers: Vec<SocketAddr>,
    shared: std::sync::Arc<Shared>,
    deadline: Duration,
) -> Result<
    (
        BTreeMap<i32, PartitionLog>,
        BTreeMap<i32, Vec<FetchedBatch>>,
    ),
    String,
> {
    let give_up = Instant::now() + deadline;
    let mut router = Router::for_topic("final", &brokers, plain.name());
    let mut conns = BTreeMap::new();
    let mut backoff = Backoff::new();
    let mut logs: BTreeMap<i32, PartitionLog> = BTreeMap::new();
    let mut batches: BTreeMap<i32, Vec<FetchedBatch>> = BTreeMap::new();
    let mut positions: BTreeMap<i32, i64> = (0..params.partitions).map(|p| (p, 0)).collect();
    let mut last_error = String::new();
    while !positions.is_empty() {
        if Instant::now() >= give_up {
            return Err(format!(
                "liveness: could not read every partition of {} back within {deadline:?} (still reading {positions:?}; last error: {last_error})",
                plain.name()
            ));
        }
        let mut errors = Vec::new();
        let floors = Floors::now(plain, &positions, &shared);
        let fetched = fetch_routed(
            &mut router,
            &mut conns,
            &positions,
            0,
            FINAL_READ,
            &shared,
            &mut errors,
        )
        .await
        .map_err(|e| format!("final read: {e}"))?;
        if let Some(e) = errors.pop() {
            last_error = e;
        }
        let mut progressed = false;
        for part in fetched {
            let Some(&position) = positions.get(&part.partition) else {
                continue;
            };
            if part.error_code == ErrorCode::OffsetOutOfRange.code() {
                let moved = out_of_range_routed(
                    &params,
                    plain,
                    &mut router,
                    &mut conns,
                    part.partition,
                    position,
                    &shared,
                )
                .await;
                match moved {
                    Some(start) => {
                        final_start_moved(plain, &mut logs, part.partition, start, &shared);
                        if let Some(seen) = batches.get_mut(&part.partition) {
                            seen.retain(|b| b.last_offset >= start);
                        }
                        positions.insert(part.partition, start);
                        progressed = true;
                    }
                    None => last_error = format!("partition {} out of range", part.partition),
                }
                continue;
            }
            if part.error_code != 0 {
                last_error = format!("partition {} error {}", part.partition, part.error_code);
                continue;
            }
            floors.fetched(&part, &shared);
            final_answer_is_stable(plain, &part)?;
            let position = position.max(final_start_moved(
                plain,
                &mut logs,
                part.partition,
                part.log_start_offset,
                &shared,
            ));
            if plain == PlainTopic::Main {
                shared
                    .cluster()
                    .fetched("final", part.partition, &part.batches);
            }
            let seen = batches.entry(part.partition).or_default();
            for b in &part.batches {
                if seen
                    .last()
                    .is_none_or(|last| b.base_offset > last.last_offset)
                {
                    seen.push(*b);
                }
            }
            let log = logs.entry(part.partition).or_default();
            log.extend(part.records.iter().filter(|(o, _)| *o >= position).cloned());
            if part.next_offset > position {
                progressed = true;
                positions.insert(part.partition, part.next_offset);
            } else if position >= part.high_watermark {
                positions.remove(&part.partition);
                progressed = true;
            } else {
                last_error = format!(
                    "partition {}: empty read at {position} below the high watermark {}",
                    part.partition, part.high_watermark
                );
            }
        }
        if progressed {
            backoff.reset();
        } else {
            backoff.wait().await;
        }
    }
    shared
        .history_of(plain)
        .retention
        .final_read_at(crate::env::wall_ms());
    Ok((logs, batches))
}
