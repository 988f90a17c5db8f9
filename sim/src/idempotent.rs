//! The idempotent producer actor: a producer id from InitProducerId,
//! idempotent batches pipelined up to max.in.flight per partition, and
//! every retry with the exact bytes of the first attempt.
//!
//! It behaves as the Java producer does:
//! - Each batch is encoded once (frame, correlation id and all) and resent
//!   unchanged after any error, timeout, lost connection or broker crash,
//!   until acknowledged. There is no retry limit: an idempotent batch is
//!   only ever given up by a reset that abandons it (below).
//! - Answers come in request order on the connection. An error on one
//!   partition stops that partition's sends until its in-flight requests are
//!   answered, then everything unacknowledged there is resent in sequence
//!   order (the batches behind a failed one typically get
//!   OUT_OF_ORDER_SEQUENCE_NUMBER).
//! - OUT_OF_ORDER_SEQUENCE_NUMBER or UNKNOWN_PRODUCER_ID for a batch behind
//!   an unacknowledged one is expected (its predecessor was not appended);
//!   for the *first* unacknowledged batch of a partition it means the broker
//!   lost acknowledged batches or their producer state: a violation. The
//!   producer then recovers as Java does, with a new identity.
//! - After an outage (a connection the broker dropped, or could not be
//!   opened) it sometimes resets its identity: a new producer id from
//!   InitProducerId, or a local epoch bump (KIP-360), with sequences back at
//!   0. A reset first gets every batch acknowledged, or abandons them (an
//!   application restart). The first reconnection after a broker restart
//!   always resets with a new id, so ids are drawn from more than one
//!   broker incarnation.
//! - Its acks=all timeout is seeded, sometimes short: the broker then
//!   answers REQUEST_TIMED_OUT for batches it appended but has not made
//!   durable yet, and their retries are duplicates.
//! - Sometimes it drops the connection right after a successful answer, as
//!   if the answer had been lost: the retry must be answered as a duplicate,
//!   at the same offset.
//! - After a local epoch bump, once the new epoch has a batch acknowledged
//!   on a partition, a copy of the old epoch's first batch there (sequence
//!   0, acknowledged long ago) arrives late on a connection of its own, as
//!   a request delayed in the network would: the broker must refuse it
//!   (INVALID_PRODUCER_EPOCH). Accepted, it would be a zombie batch written
//!   after the epoch bump, a duplicate of acknowledged records; the
//!   sequence rule alone lets it in, as a new epoch may start at 0.

use crate::checker::{BatchIndex, IdempotentBatch};
use crate::params::SimParams;
use crate::pipeline::Pipeline;
use crate::router::{redirects, Router};
use crate::workload::{
    produce_outcome, retriable, Backoff, RequestError, Shared, CONNECT_TIMEOUT, PRODUCE_VERSION,
    REQUEST_TIMEOUT, TOPIC,
};
use bytes::Bytes;
use kaas_core::protocol::messages::{
    init_producer_id_request, produce_request, InitProducerIdRequest,
};
use kaas_core::protocol::{ErrorCode, RequestBody, ResponseBody};
use kaas_core::record::{BatchBuilder, NewRecord};
use kaas_net::client::{decode_response, encode_request, single_partition_produce};
use madsim::rand::{thread_rng, Rng};
use madsim::time::{sleep, sleep_until, timeout, Instant};
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

const INIT_PRODUCER_ID_VERSION: i16 = 4;
/// Once told to stop, how long the producer may take to get its batches
/// acknowledged (no faults any more by then).
const DRAIN_DEADLINE: Duration = Duration::from_secs(60);
const CLIENT_ID: &str = "sim-idempotent";
/// If no answer was lost by the time this many idempotent batches are
/// acknowledged, the next answer is: a seed with few batches and a low
/// `lose_answer_percent` could otherwise have no retry answered as a
/// duplicate at all, and its duplicate checks would compare nothing.
const LOSE_AN_ANSWER_BY: u64 = 8;

/// One batch until it is acknowledged.
struct Batch {
    index: BatchIndex,
    correlation_id: i32,
    /// The whole request, encoded once.
    frame: Bytes,
    /// Sent on the current connection, answer not read yet.
    in_flight: bool,
    sends: u32,
    /// The partition's known durable end when the latest resend went out:
    /// an answer below it shows the resend was a duplicate.
    floor_at_resend: Option<i64>,
    /// Acknowledged while an earlier batch is not (a success behind a
    /// failed request): it stays in the window until those are.
    acked: bool,
    /// The broker it was last sent to (while `in_flight`: awaits its
    /// answer from there).
    broker: i32,
    /// The batch's base sequence is 0: the first of its epoch here.
    first_of_epoch: bool,
}

/// An acknowledged first batch of an epoch (sequence 0), kept to be sent
/// again late once a newer epoch wrote on its partition.
#[derive(Clone)]
struct FirstBatch {
    epoch: i16,
    correlation_id: i32,
    frame: Bytes,
}

/// One partition's batches.
#[derive(Default)]
struct Lane {
    /// The window: batches in sequence order from the first unacknowledged
    /// one to the newest (acknowledged ones behind an unacknowledged one
    /// included). The broker remembers the last 5 batches it appended, so
    /// a retry is recognised only if no more than 5 batches were sent from
    /// it on: the window never holds more than max.in.flight batches, as
    /// the Java producer sends no new batch of a partition while an earlier
    /// one awaits its retry. (Found by this simulation: counting only the
    /// unacknowledged batches let a 6th batch out, and the first one's retry
    /// was rightly answered OUT_OF_ORDER_SEQUENCE_NUMBER.)
    window: VecDeque<Batch>,
    next_seq: i32,
    /// An answer on this partition was an error: nothing more is sent on it
    /// until its in-flight requests are answered; then every unacknowledged
    /// batch is resent, in order.
    blocked: bool,
    /// The current epoch's acknowledged first batch here.
    first_acked: Option<FirstBatch>,
    /// The previous epoch's, after a local epoch bump: sent again once
    /// the new epoch has a batch acknowledged here.
    stale: Option<FirstBatch>,
    /// That late copy was accepted because the partition had forgotten the
    /// producer: its state there is now the old epoch's, so the current
    /// epoch's next batch (sequence above 0) is rightly refused with
    /// OUT_OF_ORDER_SEQUENCE_NUMBER, as Kafka refuses it.
    taken_over_by_stale_copy: bool,
}

impl Lane {
    fn in_flight(&self) -> usize {
        self.window.iter().filter(|b| b.in_flight).count()
    }

    /// Whether a batch of this lane awaits an answer from a broker other
    /// than `broker`: its leader moved while requests were in flight, and
    /// nothing more is sent until they are answered (or their connection
    /// is lost), so that sequences reach the new leader in order.
    fn in_flight_elsewhere(&self, broker: i32) -> bool {
        self.window
            .iter()
            .any(|b| b.in_flight && b.broker != broker)
    }
}

/// What the producer saw of the broker since its last connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Outage {
    None,
    /// The connection failed or timed out (a crash, or a clogged link).
    Lost,
    /// A connection could not be opened.
    Down,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reset {
    NewProducerId,
    BumpEpoch,
}

struct Producer {
    id: usize,
    params: SimParams,
    /// Where each partition's batches go (one broker, or each partition's
    /// leader).
    router: Router,
    shared: Arc<Shared>,
    /// One connection per broker (only broker 0's with one broker).
    conns: BTreeMap<i32, Pipeline>,
    /// (partition, correlation id, broker) of every request sent whose
    /// answer has not been read, in the order sent. Each connection answers
    /// in order, so the oldest request is always the next answer on its
    /// connection.
    outstanding: VecDeque<(i32, i32, i32)>,
    /// A partition had batches to send but no live leader known: back off
    /// before looking again.
    unroutable: bool,
    lanes: Vec<Lane>,
    /// Producer id and epoch, once InitProducerId answered.
    session: Option<(i64, i16)>,
    next_correlation_id: i32,
    batch_no: u32,
    next_batch_at: Instant,
    /// The broker dropped the connection or could not be reached since the
    /// last successful connect.
    outage: Outage,
    /// The broker incarnation the producer id was granted in, until the
    /// producer has reset after a restart.
    first_incarnation: Option<u64>,
    granted_once: bool,
    /// A reset waiting for every batch to be acknowledged.
    pending_reset: Option<Reset>,
    backoff: Backoff,
}

/// Runs one idempotent producer until told to stop and every batch it sent
/// is acknowledged.
pub async fn idempotent_producer(
    id: usize,
    params: SimParams,
    brokers: Vec<SocketAddr>,
    shared: Arc<Shared>,
) {
    let mut p = Producer {
        id,
        params,
        router: Router::new(format!("idempotent-{id}"), &brokers),
        shared,
        conns: BTreeMap::new(),
        outstanding: VecDeque::new(),
        unroutable: false,
        lanes: (0..params.partitions).map(|_| Lane::default()).collect(),
        session: None,
        next_correlation_id: 0,
        batch_no: 0,
        next_batch_at: Instant::now(),
        outage: Outage::None,
        first_incarnation: None,
        granted_once: false,
        pending_reset: None,
        backoff: Backoff::new(),
    };
    p.run().await;
}

fn percent(p: u32) -> bool {
    thread_rng().gen_range(0..100) < p
}

impl Producer {
    fn stopping(&self) -> bool {
        self.shared.stop_producing.load(Ordering::Relaxed)
    }

    fn unacked_count(&self) -> usize {
        self.lanes
            .iter()
            .flat_map(|l| &l.window)
            .filter(|b| !b.acked)
            .count()
    }

    fn all_acked(&self) -> bool {
        self.lanes.iter().all(|l| l.window.is_empty())
    }

    fn violation(&self, what: String) {
        self.shared
            .history()
            .violation(format!("idempotent producer {}: {what}", self.id));
    }

    async fn run(&mut self) {
        let mut deadline = None;
        loop {
            if self.stopping() {
                let d = *deadline.get_or_insert_with(|| Instant::now() + DRAIN_DEADLINE);
                if self.all_acked() && self.pending_reset.is_none() {
                    return;
                }
                if Instant::now() >= d {
                    let left = self.unacked_count();
                    self.violation(format!(
                        "liveness: {left} batches still unacknowledged {DRAIN_DEADLINE:?} after the faults stopped"
                    ));
                    return;
                }
            }
            if self.all_acked() {
                if let Some(kind) = self.pending_reset.take() {
                    self.reset(kind);
                }
            }
            if self.conns.is_empty() && !self.connect(self.router.any_broker()).await {
                continue;
            }
            if self.session.is_none() {
                self.init_producer_id().await;
                continue;
            }
            self.create_batches();
            if !self.send_ready().await {
                continue;
            }
            if self.outstanding.is_empty() {
                if std::mem::take(&mut self.unroutable) {
                    // A partition with batches has no live leader known
                    // (several brokers only): ask again after a while.
                    self.backoff.wait().await;
                    continue;
                }
                // Nothing in flight, so nothing unacknowledged either (an
                // unblocked lane always has something to send).
                if self.stopping() || self.pending_reset.is_some() {
                    continue;
                }
                sleep_until(self.next_batch_at).await;
                continue;
            }
            self.read_answer().await;
        }
    }

    /// Opens the connection to `broker`; after an outage, maybe resets.
    async fn connect(&mut self, broker: i32) -> bool {
        let Some(addr) = self.router.addr_of(broker) else {
            return false;
        };
        match timeout(CONNECT_TIMEOUT, Pipeline::connect(addr)).await {
            Ok(Ok(c)) => {
                // Nothing is in flight on a new connection.
                self.drop_connection(broker);
                let outage = std::mem::replace(&mut self.outage, Outage::None);
                if outage != Outage::None {
                    self.after_outage(outage);
                }
                self.conns.insert(broker, c);
                true
            }
            _ => {
                self.outage = Outage::Down;
                self.router.invalidate();
                self.backoff.wait().await;
                false
            }
        }
    }

    /// Drops the connection to `broker`: every request in flight there has
    /// an unknown fate and will be resent, in order.
    fn drop_connection(&mut self, broker: i32) {
        if self.conns.remove(&broker).is_some() {
            tracing::debug!(producer = self.id, broker, "connection dropped");
        }
        self.outstanding.retain(|&(_, _, b)| b != broker);
        for lane in &mut self.lanes {
            for b in &mut lane.window {
                if b.broker == broker {
                    b.in_flight = false;
                }
            }
            if lane.in_flight() == 0 {
                lane.blocked = false;
            }
        }
    }

    /// Drops every connection.
    fn drop_connections(&mut self) {
        let brokers: Vec<i32> = self.conns.keys().copied().collect();
        for broker in brokers {
            self.drop_connection(broker);
        }
        // Requests on no connection cannot be answered any more.
        self.outstanding.clear();
        for lane in &mut self.lanes {
            lane.blocked = false;
            for b in &mut lane.window {
                b.in_flight = false;
            }
        }
    }

    /// The broker dropped the connection (crash, timeout, clog).
    async fn connection_lost(&mut self, broker: i32) {
        self.drop_connection(broker);
        self.outage = self.outage.max(Outage::Lost);
        self.shared.history().stats.produce_errors += 1;
        self.router.invalidate();
        self.backoff.wait().await;
    }

    fn after_outage(&mut self, outage: Outage) {
        // The first reconnection after a broker restart always takes a new
        // id, so that ids come from two broker incarnations (which one the
        // producer talks to only the harness knows: a restart can be too
        // quick for a connection to be refused).
        let first = self
            .first_incarnation
            .is_some_and(|i| i != self.shared.incarnation());
        if first {
            self.first_incarnation = None;
        } else if outage == Outage::None || !percent(self.params.reset_percent) {
            return;
        }
        let kind = if !first && percent(self.params.epoch_bump_percent) {
            Reset::BumpEpoch
        } else {
            Reset::NewProducerId
        };
        if percent(self.params.abandon_percent) {
            self.abandon_all();
            self.reset(kind);
        } else if self.pending_reset.is_none() {
            self.pending_reset = Some(kind);
        }
    }

    /// Gives up every unacknowledged batch (their fate stays unknown: each
    /// may be in the log once, or not at all).
    fn abandon_all(&mut self) {
        let n = self.unacked_count();
        self.shared.history().idem.batches_abandoned += n as u64;
        for lane in &mut self.lanes {
            lane.window.clear();
        }
        // Answers still on their way belong to the old identity.
        self.drop_connections();
    }

    /// A new identity, sequences from 0. Every batch is acknowledged or
    /// abandoned by now.
    fn reset(&mut self, kind: Reset) {
        tracing::debug!(producer = self.id, ?kind, session = ?self.session, "reset");
        self.shared.history().idem.resets += 1;
        self.session = match (kind, self.session) {
            (Reset::BumpEpoch, Some((pid, epoch))) if epoch < i16::MAX => {
                self.shared.history().idem.epoch_bumps += 1;
                Some((pid, epoch + 1))
            }
            _ => None,
        };
        let bumped = kind == Reset::BumpEpoch && self.session.is_some();
        for lane in &mut self.lanes {
            lane.next_seq = 0;
            lane.blocked = false;
            let first = lane.first_acked.take();
            lane.stale = if bumped { first } else { None };
            lane.taken_over_by_stale_copy = false;
        }
    }

    fn take_correlation_id(&mut self) -> i32 {
        let id = self.next_correlation_id;
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1);
        id
    }

    /// InitProducerId on the (idle) connection.
    async fn init_producer_id(&mut self) {
        let correlation_id = self.take_correlation_id();
        let body = RequestBody::InitProducerId(InitProducerIdRequest {
            transactional_id: None,
            transaction_timeout_ms: 60_000,
            producer_id: -1,
            producer_epoch: -1,
            ..Default::default()
        });
        let frame = match encode_request(
            init_producer_id_request::API_KEY,
            INIT_PRODUCER_ID_VERSION,
            correlation_id,
            Some(CLIENT_ID),
            &body,
        ) {
            Ok(f) => f,
            Err(e) => {
                self.violation(format!("cannot encode InitProducerId: {e}"));
                return sleep(Duration::from_secs(1)).await;
            }
        };
        let Some((&broker, conn)) = self.conns.iter_mut().next() else {
            return;
        };
        let sent = conn.send(&frame).await;
        let was_sent = sent.is_ok();
        let answer = match sent {
            Ok(()) => timeout(REQUEST_TIMEOUT, conn.recv()).await,
            Err(e) => Ok(Err(e)),
        };
        let frame = match answer {
            Ok(Ok(f)) => f,
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::InvalidData => {
                self.violation(format!("malformed InitProducerId answer: {e}"));
                return self.connection_lost(broker).await;
            }
            _ => {
                // Sent, never answered: the broker may have handed out an
                // id nobody will learn (Jepsen's "info").
                if was_sent {
                    self.shared.history().idem.inits_unknown += 1;
                }
                return self.connection_lost(broker).await;
            }
        };
        let decoded = decode_response(
            init_producer_id_request::API_KEY,
            INIT_PRODUCER_ID_VERSION,
            correlation_id,
            frame,
        );
        match decoded {
            Ok(ResponseBody::InitProducerId(r)) if r.error_code == 0 => {
                tracing::debug!(
                    producer = self.id,
                    pid = r.producer_id,
                    "producer id granted"
                );
                // The grant is the broker's whether or not its answer
                // arrives: an id handed out in a lost answer must never be
                // handed out again either.
                self.shared
                    .history()
                    .pid_granted(self.id, r.producer_id, r.producer_epoch);
                if percent(self.params.lose_answer_percent) {
                    // Treated as lost, as a client whose request timed out
                    // just before the answer came: it asks again.
                    self.shared.history().idem.inits_lost += 1;
                    return self.connection_lost(broker).await;
                }
                if !std::mem::replace(&mut self.granted_once, true) {
                    self.first_incarnation = Some(self.shared.incarnation());
                }
                self.session = Some((r.producer_id, r.producer_epoch));
                for lane in &mut self.lanes {
                    lane.next_seq = 0;
                }
                self.backoff.reset();
            }
            // The broker could not persist a new id block (its volume is
            // failing or gone): retry.
            Ok(ResponseBody::InitProducerId(r))
                if r.error_code == ErrorCode::CoordinatorNotAvailable.code() =>
            {
                self.backoff.wait().await;
            }
            Ok(other) => {
                self.violation(format!("unexpected InitProducerId answer: {other:?}"));
                self.connection_lost(broker).await;
            }
            Err(e) => {
                self.violation(format!("malformed InitProducerId answer: {e}"));
                self.connection_lost(broker).await;
            }
        }
    }

    /// Builds new batches while their time has come and their partition
    /// has room in its max.in.flight window.
    fn create_batches(&mut self) {
        let Some((pid, epoch)) = self.session else {
            return;
        };
        while !self.stopping()
            && self.pending_reset.is_none()
            && Instant::now() >= self.next_batch_at
        {
            let (partition, count, think) = {
                let mut rng = thread_rng();
                (
                    rng.gen_range(0..self.params.partitions),
                    rng.gen_range(1..=self.params.max_records_per_batch),
                    Duration::from_millis(rng.gen_range(0..=self.params.producer_think_ms)),
                )
            };
            let Some(lane) = self.lanes.get(partition as usize) else {
                return;
            };
            if lane.window.len() >= self.params.max_in_flight {
                // Like a full accumulator: the record waits for room.
                return;
            }
            let seq = lane.next_seq;
            let values: Vec<Bytes> = (0..count)
                .map(|r| Bytes::from(format!("i{}-b{}-r{r}", self.id, self.batch_no)))
                .collect();
            self.batch_no += 1;
            let correlation_id = self.take_correlation_id();
            let frame = match encode_produce(
                (pid, epoch, seq),
                partition,
                &values,
                correlation_id,
                self.params.idempotent_ack_timeout_ms,
                self.params.compression(),
            ) {
                Ok(f) => f,
                Err(e) => {
                    self.violation(format!("cannot encode a produce request: {e}"));
                    return;
                }
            };
            let mut history = self.shared.history();
            if self.params.retention.is_some() {
                // The timestamp `encode_produce` just gave them.
                history.retention.stamp(&values, crate::env::wall_ms());
            }
            let index = history.idempotent_batch(IdempotentBatch {
                producer: self.id,
                pid,
                epoch,
                partition,
                base_sequence: seq,
                values,
            });
            drop(history);
            let Some(lane) = self.lanes.get_mut(partition as usize) else {
                return;
            };
            lane.next_seq = seq.wrapping_add(count as i32);
            lane.window.push_back(Batch {
                index,
                correlation_id,
                frame,
                in_flight: false,
                sends: 0,
                floor_at_resend: None,
                acked: false,
                broker: -1,
                first_of_epoch: seq == 0,
            });
            self.next_batch_at = Instant::now() + think;
        }
    }

    /// Sends every batch that may go now, each to its partition's leader.
    /// `false` if a connection failed.
    async fn send_ready(&mut self) -> bool {
        // (partition, correlation id, broker) in sending order.
        let mut to_send = Vec::new();
        for p in 0..self.lanes.len() {
            let Some(lane) = self.lanes.get_mut(p) else {
                continue;
            };
            if lane.blocked && lane.in_flight() == 0 {
                lane.blocked = false;
            }
            if lane.blocked || !lane.window.iter().any(|b| !b.in_flight && !b.acked) {
                continue;
            }
            let Some(leader) = self.router.leader(p as i32, &self.shared).await else {
                self.unroutable = true;
                continue;
            };
            let Some(lane) = self.lanes.get_mut(p) else {
                continue;
            };
            if lane.in_flight_elsewhere(leader.broker) {
                continue;
            }
            let room = self.params.max_in_flight.saturating_sub(lane.in_flight());
            to_send.extend(
                lane.window
                    .iter()
                    .filter(|b| !b.in_flight && !b.acked)
                    .take(room)
                    .map(|b| (p as i32, b.correlation_id, leader.broker)),
            );
        }
        for (partition, correlation_id, broker) in to_send {
            if !self.conns.contains_key(&broker) && !self.connect(broker).await {
                // Unreachable: its batches wait for the next round.
                continue;
            }
            let floor = self.shared.history().fetch_floor(partition);
            let Some(batch) = self.lanes.get_mut(partition as usize).and_then(|l| {
                l.window
                    .iter_mut()
                    .find(|b| b.correlation_id == correlation_id)
            }) else {
                continue;
            };
            if batch.in_flight {
                // Sent already (a reconnect in this round re-sent nothing,
                // but be sure).
                continue;
            }
            let Some(conn) = self.conns.get_mut(&broker) else {
                return false;
            };
            tracing::debug!(
                producer = self.id,
                partition,
                correlation_id,
                broker,
                sends = batch.sends,
                "produce sent"
            );
            if conn.send(&batch.frame).await.is_err() {
                self.connection_lost(broker).await;
                return false;
            }
            batch.in_flight = true;
            batch.broker = broker;
            batch.sends += 1;
            if batch.sends > 1 {
                batch.floor_at_resend = Some(floor);
                self.shared.history().idem.resends += 1;
            }
            self.outstanding
                .push_back((partition, correlation_id, broker));
        }
        true
    }

    /// Reads and handles the answer to the oldest outstanding request.
    async fn read_answer(&mut self) {
        let Some(&(_, _, broker)) = self.outstanding.front() else {
            return;
        };
        let Some(conn) = self.conns.get_mut(&broker) else {
            self.outstanding.pop_front();
            return;
        };
        let frame = match timeout(REQUEST_TIMEOUT, conn.recv()).await {
            Ok(Ok(f)) => f,
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::InvalidData => {
                self.violation(format!("malformed produce answer: {e}"));
                return self.connection_lost(broker).await;
            }
            _ => return self.connection_lost(broker).await,
        };
        let Some((partition, correlation_id, _)) = self.outstanding.pop_front() else {
            return;
        };
        let outcome = decode_response(
            produce_request::API_KEY,
            PRODUCE_VERSION,
            correlation_id,
            frame,
        )
        .map_err(RequestError::of)
        .and_then(|body| produce_outcome(&body, TOPIC, partition));
        let (code, base_offset) = match outcome {
            Ok(o) => o,
            Err(RequestError::Malformed(e)) | Err(RequestError::Network(e)) => {
                self.violation(format!("malformed produce answer: {e}"));
                return self.connection_lost(broker).await;
            }
        };
        let Some(lane) = self.lanes.get_mut(partition as usize) else {
            return;
        };
        let Some(position) = lane
            .window
            .iter()
            .position(|b| b.correlation_id == correlation_id)
        else {
            return self.violation(format!(
                "an answer for request {correlation_id} on partition {partition}, which is not in flight"
            ));
        };
        lane.window[position].in_flight = false;
        tracing::debug!(producer = self.id, partition, correlation_id, position, code, base_offset, session = ?self.session, "produce answered");
        if code == 0 {
            return self
                .on_success(partition, position, base_offset, broker)
                .await;
        }
        if self.router.multi() && redirects(code) {
            self.shared.cluster().redirected();
            self.router.invalidate();
        }
        let sequence_error = code == ErrorCode::OutOfOrderSequenceNumber.code()
            || code == ErrorCode::UnknownProducerId.code();
        // The front of the window is always unacknowledged.
        if sequence_error && position > 0 {
            // Its predecessor was not appended (it failed too): resent in
            // order once this partition's in-flight requests are answered.
            self.shared.history().idem.sequence_errors += 1;
            lane.blocked = true;
        } else if retriable(code) {
            self.shared.history().stats.produce_errors += 1;
            lane.blocked = true;
        } else {
            let forgot = self.forgot_producer(partition);
            let taken_over = self
                .lanes
                .get(partition as usize)
                .is_some_and(|l| l.taken_over_by_stale_copy);
            if crate::expiries::sequence_error_explained(code, forgot, taken_over) {
                // The partition forgot this idle producer
                // (`producer.id.expiration.ms`): its sequence is unknown
                // there, as in Kafka's answer to a lost producer state, or
                // a late old-epoch copy re-created it at that epoch (seed
                // 884), where this epoch cannot continue its sequence.
                self.shared.history().idem.sequence_errors_after_expiry += 1;
            } else {
                let what = if sequence_error {
                    "for its first unacknowledged batch: the broker lost acknowledged batches or their producer state"
                } else {
                    "a non-retriable error"
                };
                self.violation(format!(
                    "partition {partition}: error {code} {what} (session {:?})",
                    self.session
                ));
            }
            // As the Java client does with an unresolvable sequence: give
            // up those batches and start over with a new identity.
            self.abandon_all();
            self.reset(Reset::NewProducerId);
        }
    }

    async fn on_success(&mut self, partition: i32, position: usize, base_offset: i64, broker: i32) {
        let Some(lane) = self.lanes.get_mut(partition as usize) else {
            return;
        };
        let drawn = percent(self.params.lose_answer_percent);
        let lose = drawn || {
            let idem = &self.shared.history().idem;
            idem.answers_lost == 0 && idem.batches_acked >= LOSE_AN_ANSWER_BY
        };
        let Some(batch) = lane.window.get(position) else {
            return;
        };
        let index = batch.index;
        let floor = batch.floor_at_resend;
        let resend = batch.sends > 1;
        let duplicate_of_lost = self
            .shared
            .history()
            .idempotent_answered(index, base_offset, lose);
        if self.router.multi() {
            self.shared
                .cluster()
                .acked(partition, base_offset, broker, resend);
        }
        if lose {
            // The connection "dies" with the answer on it: the batch, and
            // everything in flight behind it there, will be resent.
            self.drop_connection(broker);
            return;
        }
        if duplicate_of_lost || floor.is_some_and(|f| base_offset < f) {
            self.shared.history().idem.duplicates_confirmed += 1;
        }
        let epoch = self.session.map(|(_, e)| e);
        let mut stale = None;
        if let Some(lane) = self.lanes.get_mut(partition as usize) {
            if let Some(b) = lane.window.get_mut(position) {
                b.acked = true;
                if b.first_of_epoch {
                    if let Some(epoch) = epoch {
                        lane.first_acked = Some(FirstBatch {
                            epoch,
                            correlation_id: b.correlation_id,
                            frame: b.frame.clone(),
                        });
                    }
                }
            }
            while lane.window.front().is_some_and(|b| b.acked) {
                lane.window.pop_front();
            }
            if lane.stale.as_ref().is_some_and(|s| Some(s.epoch) < epoch) {
                stale = lane.stale.take();
            }
        }
        self.backoff.reset();
        if let Some(stale) = stale {
            self.send_stale_copy(partition, broker, stale).await;
        }
    }

    /// Sends an old epoch's first batch to the broker that just
    /// acknowledged a newer epoch's batch on `partition`, on a connection
    /// of its own, and checks it is refused. An answer that does not come
    /// (a crash, a clog, a leader that moved) proves nothing either way.
    async fn send_stale_copy(&mut self, partition: i32, broker: i32, stale: FirstBatch) {
        let Some(addr) = self.router.addr_of(broker) else {
            return;
        };
        let answer = timeout(REQUEST_TIMEOUT, async {
            let mut conn = Pipeline::connect(addr).await?;
            conn.send(&stale.frame).await?;
            conn.recv().await
        })
        .await;
        let Ok(Ok(frame)) = answer else {
            // It may have been appended all the same.
            self.stale_copy_may_have_taken_over(partition);
            return;
        };
        let outcome = decode_response(
            produce_request::API_KEY,
            PRODUCE_VERSION,
            stale.correlation_id,
            frame,
        )
        .map_err(RequestError::of)
        .and_then(|body| produce_outcome(&body, TOPIC, partition));
        match outcome {
            // The partition forgot the producer since the newer epoch
            // wrote (an answer held up longer than the expiration): a
            // late copy is then new to it, in Kafka as here.
            Ok((0, _)) if self.forgot_producer(partition) => {
                self.stale_copy_may_have_taken_over(partition)
            }
            Ok((0, base_offset)) => self.violation(format!(
                "partition {partition}: a late copy of epoch {}'s first batch, sent after a batch of epoch {} was acknowledged there, was accepted at offset {base_offset}: a fenced epoch wrote after the bump",
                stale.epoch,
                self.session.map_or(-1, |(_, e)| e),
            )),
            Ok((code, _)) if code == ErrorCode::InvalidProducerEpoch.code() => {
                self.shared.history().idem.stale_epochs_refused += 1;
            }
            // Appended, not durable in time: it may have taken over all
            // the same (seed 839: appended after an expiry, answered
            // REQUEST_TIMED_OUT, and this epoch's retries then rightly got
            // OUT_OF_ORDER_SEQUENCE_NUMBER). Every other error is a refusal.
            Ok((code, _)) if code == ErrorCode::RequestTimedOut.code() => {
                self.stale_copy_may_have_taken_over(partition)
            }
            _ => {}
        }
    }

    /// A late copy of an older epoch's first batch may have been appended
    /// to `partition`: if the partition forgot this producer, it is then
    /// at that older epoch, and this epoch's next batch is refused with
    /// OUT_OF_ORDER_SEQUENCE_NUMBER (`expiries::sequence_error_explained`).
    fn stale_copy_may_have_taken_over(&mut self, partition: i32) {
        if self.forgot_producer(partition) {
            if let Some(lane) = self.lanes.get_mut(partition as usize) {
                lane.taken_over_by_stale_copy = true;
            }
        }
    }

    /// Whether `partition` forgot this session's producer id
    /// (`producer.id.expiration.ms`); a local epoch bump keeps the id.
    fn forgot_producer(&self, partition: i32) -> bool {
        self.session.is_some_and(|(pid, _)| {
            let expiries = self.shared.history().expiries();
            crate::expiries::forgot(&expiries, TOPIC, partition, pid)
        })
    }
}

/// Encodes a produce request for one idempotent batch, once: retries send
/// exactly these bytes.
fn encode_produce(
    (pid, epoch, seq): (i64, i16, i32),
    partition: i32,
    values: &[Bytes],
    correlation_id: i32,
    timeout_ms: i32,
    codec: kaas_core::record::Compression,
) -> Result<Bytes, kaas_core::protocol::EncodeError> {
    let mut builder = BatchBuilder::idempotent(pid, epoch, seq);
    let now = crate::env::wall_ms();
    for value in values {
        builder.push(NewRecord::new(now, None, Some(value)));
    }
    let body = single_partition_produce(
        TOPIC,
        partition,
        crate::workload::compressed(builder.build(), codec).into_bytes(),
        -1,
        timeout_ms,
    );
    encode_request(
        produce_request::API_KEY,
        PRODUCE_VERSION,
        correlation_id,
        Some(CLIENT_ID),
        &body,
    )
}
