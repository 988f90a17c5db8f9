//! The transactional workload: transactional producers (with zombies and
//! producers that stop mid-transaction), a read_committed and a
//! read_uncommitted consumer, and the final reads at both isolation levels
//! and liveness checks. Everything observed goes to
//! [`crate::txn_history::TxnHistory`].
//!
//! A producer slot owns the transactional id `tx-<slot>` and runs instances
//! of it, as an application restarting would. An instance does what the
//! Java producer does, one request at a time:
//! FindCoordinator (key type 1) → InitProducerId (v4; after an error that
//! leaves its transaction's fate to the coordinator, claiming its identity,
//! KIP-360) → loop { AddPartitionsToTxn (v3) for 1-3 partitions → Produce
//! (transactional batches, acks=all, every retry with the same bytes) →
//! EndTxn (commit or abort, drawn per transaction) }. Retriable answers
//! (CONCURRENT_TRANSACTIONS, NOT_COORDINATOR, a lost connection, ...) are
//! retried; a fence (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH) ends the
//! transaction and the instance starts again with a fresh InitProducerId.
//!
//! Sometimes a zombie starts: a second instance of the same id that inits
//! (fencing the first), runs a transaction or two and goes away. Sometimes
//! an instance stops mid-transaction without a word; the slot starts a new
//! instance later, and until then the reaper must abort what it left open.

use crate::checker;
use crate::params::SimParams;
use crate::poll_history::{self, Logs, Reading};
use crate::routes::{self, Routes};
use crate::txn_history::{Txn, TxnEnd, TxnIndex, TXN_TOPIC};
use crate::workload::{
    ensure_connected, fetch_request_at_epochs, polling, produce_outcome, retriable, Backoff,
    RequestError, Shared, PRODUCE_VERSION, REQUEST_TIMEOUT,
};
use bytes::Bytes;
use kaas_core::protocol::messages::describe_transactions_response::TransactionState;
use kaas_core::protocol::messages::{
    add_partitions_to_txn_request, describe_transactions_request, end_txn_request, fetch_request,
    find_coordinator_request, init_producer_id_request, metadata_request, produce_request,
    AddPartitionsToTxnRequest, DescribeTransactionsRequest, EndTxnRequest, FindCoordinatorRequest,
    InitProducerIdRequest, MetadataRequest, ProduceRequest,
};
use kaas_core::protocol::{ErrorCode, RequestBody, ResponseBody};
use kaas_core::record::{
    parse_end_txn_marker, split_batches, BatchBuilder, ControlType, NewRecord,
};
use kaas_net::broker::Isolation;
use kaas_net::client::{decode_response, encode_request, Connection};
use madsim::rand::{thread_rng, Rng};
use madsim::time::{sleep, timeout, Instant};
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const FIND_COORDINATOR_VERSION: i16 = 3;
const INIT_PRODUCER_ID_VERSION: i16 = 4;
const ADD_PARTITIONS_VERSION: i16 = 3;
const END_TXN_VERSION: i16 = 3;
/// Transaction version 2 (KIP-890 part 2), as the Java client 4.x speaks
/// it: Produce v12 adds its partition to the transaction itself, and
/// EndTxn v5 bumps the epoch at every end and answers the new one.
pub(crate) const PRODUCE_VERSION_V2: i16 = 12;
pub(crate) const END_TXN_VERSION_V2: i16 = 5;

/// Whether the identity EndTxn v5 answered for a transaction of (`pid`,
/// `epoch`) is one transaction version 2 may hand out: the epoch bumped, or
/// a fresh producer id at epoch 0 once the epoch is exhausted.
pub(crate) fn is_bumped_identity(pid: i64, epoch: i16, next_pid: i64, next_epoch: i16) -> bool {
    (next_pid == pid && next_epoch > epoch) || (next_pid != pid && next_epoch == 0)
}
const DESCRIBE_TRANSACTIONS_VERSION: i16 = 0;
const METADATA_VERSION: i16 = 9;
const FETCH_VERSION: i16 = 12;
const CLIENT_ID: &str = "sim-txn";
/// How long the acks=all wait of a transactional Produce may take.
const PRODUCE_TIMEOUT_MS: i32 = 5_000;
/// Once told to stop, how long a producer may take to end its transaction.
const DRAIN_DEADLINE: Duration = Duration::from_secs(60);

/// The transactional id of a producer slot.
pub fn transactional_id(slot: usize) -> String {
    format!("tx-{slot}")
}

pub(crate) fn percent(p: u32) -> bool {
    thread_rng().gen_range(0..100) < p
}

/// Instance numbers, unique in the run.
static NEXT_INSTANCE: AtomicU64 = AtomicU64::new(0);

/// How a transaction attempt ended for the instance.
enum Step {
    /// Ended (committed or aborted); the instance goes on.
    Done,
    /// The instance was fenced: it starts over with a fresh identity.
    Fenced,
    /// The transaction's fate is the coordinator's (an abort after a
    /// refusal, an unclear EndTxn): re-init claiming the identity.
    Reinit,
    /// The instance stopped mid-transaction.
    Stalled,
    /// Told to stop and out of time (a liveness violation is recorded).
    GaveUp,
}

/// Whether an error is a fence of this producer.
pub(crate) fn is_fence(code: i16) -> bool {
    code == ErrorCode::ProducerFenced.code() || code == ErrorCode::InvalidProducerEpoch.code()
}

/// Whether an answer ends the producer's identity: a fence, or, in a seed
/// whose idle transactional ids expire, INVALID_PRODUCER_ID_MAPPING (the
/// id expired while the producer idled, with no transaction in flight, as
/// only idle ids expire). Either way the instance starts over with a fresh
/// InitProducerId. Where ids never expire, that answer stays a violation.
pub(crate) fn ends_identity(params: &SimParams, code: i16) -> bool {
    is_fence(code)
        || (params.txn_id_expiration_ms > 0 && code == ErrorCode::InvalidProducerIdMapping.code())
}

/// Coordinator answers that mean "not now": retry (after finding the
/// coordinator again for NOT_COORDINATOR).
pub(crate) fn coordinator_retriable(code: i16) -> bool {
    [
        ErrorCode::ConcurrentTransactions,
        ErrorCode::NotCoordinator,
        ErrorCode::CoordinatorNotAvailable,
        ErrorCode::CoordinatorLoadInProgress,
        ErrorCode::RequestTimedOut,
    ]
    .iter()
    .any(|c| c.code() == code)
}

struct Instance {
    slot: usize,
    instance: u64,
    txn_id: String,
    params: SimParams,
    brokers: Vec<SocketAddr>,
    shared: Arc<Shared>,
    /// The coordinator's and the leaders' connections.
    routes: Routes,
    /// Producer id and epoch of the current session.
    session: Option<(i64, i16)>,
    /// The identity to claim at the next InitProducerId (KIP-360).
    claim: Option<(i64, i16)>,
    /// Next sequence per partition, in the current session.
    seqs: BTreeMap<i32, i32>,
    txn_no: u32,
    backoff: Backoff,
    zombie: bool,
    /// Speaks transaction version 2: no AddPartitionsToTxn, and a new
    /// epoch after every EndTxn.
    v2: bool,
    drain_deadline: Option<Instant>,
}

/// Runs transactional producer slot `slot` until told to stop.
pub async fn txn_producer(
    slot: usize,
    params: SimParams,
    brokers: Vec<SocketAddr>,
    shared: Arc<Shared>,
) {
    let zombie_alive = Arc::new(AtomicBool::new(false));
    loop {
        let mut instance = Instance::new(slot, params, brokers.clone(), shared.clone(), false);
        let ending = instance.run(Some(&zombie_alive)).await;
        if !matches!(ending, Step::Stalled) {
            break;
        }
        // Back some time later, often after the reaper has aborted what
        // this instance left open, sometimes before.
        let pause = thread_rng().gen_range(0..=2 * params.txn_timeout_ms as u64);
        sleep(Duration::from_millis(pause)).await;
        if shared.stop_producing.load(Ordering::Relaxed) {
            break;
        }
    }
    // A zombie still running finishes on its own; wait for it, so the
    // harness's final checks see its transactions ended.
    while zombie_alive.load(Ordering::Relaxed) {
        sleep(Duration::from_millis(50)).await;
    }
}

impl Instance {
    fn new(
        slot: usize,
        params: SimParams,
        brokers: Vec<SocketAddr>,
        shared: Arc<Shared>,
        zombie: bool,
    ) -> Instance {
        let instance = NEXT_INSTANCE.fetch_add(1, Ordering::Relaxed);
        // Drawn only in seeds that speak it, so that the others draw from
        // the simulation's rng exactly as before it existed.
        let v2 = params.txn_v2_percent > 0 && percent(params.txn_v2_percent);
        Instance {
            slot,
            instance,
            txn_id: transactional_id(slot),
            params,
            routes: Routes::new(format!("tx-{slot}.{instance}"), &brokers),
            brokers,
            shared,
            session: None,
            claim: None,
            seqs: BTreeMap::new(),
            txn_no: 0,
            backoff: Backoff::new(),
            zombie,
            v2,
            drain_deadline: None,
        }
    }

    fn stopping(&self) -> bool {
        self.shared.stop_producing.load(Ordering::Relaxed)
    }

    /// Told to stop and past the drain deadline: records the liveness
    /// violation once and says so.
    fn out_of_time(&mut self, doing: &str) -> bool {
        if !self.stopping() {
            return false;
        }
        let d = *self
            .drain_deadline
            .get_or_insert_with(|| Instant::now() + DRAIN_DEADLINE);
        if Instant::now() < d {
            return false;
        }
        self.violation(format!(
            "liveness: still {doing} {DRAIN_DEADLINE:?} after the faults stopped"
        ));
        true
    }

    fn violation(&self, what: String) {
        self.shared.txns().violation(format!(
            "transactional producer {} instance {}: {what}",
            self.txn_id, self.instance
        ));
    }

    async fn request(
        &mut self,
        api_key: i16,
        version: i16,
        body: &RequestBody,
    ) -> Result<ResponseBody, RequestError> {
        let key = (routes::KEY_TRANSACTION, self.txn_id.clone());
        let result = self
            .routes
            .ask_coordinator(&key, api_key, version, body, &self.shared)
            .await;
        if let Err(RequestError::Malformed(m)) = &result {
            self.violation(format!("malformed answer to api {api_key}: {m}"));
        }
        result
    }

    async fn run(&mut self, zombie_alive: Option<&Arc<AtomicBool>>) -> Step {
        let mut txns_left: u32 = if self.zombie {
            thread_rng().gen_range(1..=2)
        } else {
            u32::MAX
        };
        loop {
            if self.stopping() || txns_left == 0 {
                return Step::Done;
            }
            if self.session.is_none() && !self.init().await {
                return Step::GaveUp;
            }
            if let Some(alive) = zombie_alive {
                if !alive.load(Ordering::Relaxed) && percent(self.params.txn_zombie_percent) {
                    self.spawn_zombie(alive.clone());
                }
            }
            txns_left -= 1;
            match self.transaction().await {
                Step::Done => {
                    let think = thread_rng().gen_range(0..=50);
                    sleep(Duration::from_millis(think)).await;
                }
                Step::Fenced => {
                    self.session = None;
                    self.claim = None;
                    if self.zombie {
                        return Step::Done;
                    }
                    // Give whoever fenced us time to get something done.
                    let pause = thread_rng().gen_range(100..=1_500);
                    sleep(Duration::from_millis(pause)).await;
                }
                Step::Reinit => {
                    self.claim = self.session.take();
                }
                Step::Stalled => return Step::Stalled,
                Step::GaveUp => return Step::GaveUp,
            }
        }
    }

    fn spawn_zombie(&self, alive: Arc<AtomicBool>) {
        alive.store(true, Ordering::Relaxed);
        self.shared.txns().stats.zombies += 1;
        let mut zombie = Instance::new(
            self.slot,
            self.params,
            self.brokers.clone(),
            self.shared.clone(),
            true,
        );
        tracing::debug!(txn_id = %self.txn_id, instance = zombie.instance, "zombie starts");
        tokio::spawn(async move {
            let _ = zombie.run(None).await;
            alive.store(false, Ordering::Relaxed);
        });
    }

    async fn find_coordinator(&mut self) -> bool {
        if self.routes.multi() {
            let key = (routes::KEY_TRANSACTION, self.txn_id.clone());
            return match self.routes.find_coordinator(&key, &self.shared).await {
                Ok(_) => true,
                Err(RequestError::Malformed(m)) => {
                    self.violation(m);
                    false
                }
                Err(RequestError::Network(_)) => false,
            };
        }
        let body = RequestBody::FindCoordinator(FindCoordinatorRequest {
            key: self.txn_id.clone(),
            key_type: 1,
            ..Default::default()
        });
        match self
            .request(
                find_coordinator_request::API_KEY,
                FIND_COORDINATOR_VERSION,
                &body,
            )
            .await
        {
            Ok(ResponseBody::FindCoordinator(r)) if r.error_code == 0 => {
                let at = format!("{}:{}", r.host, r.port);
                if r.node_id != 0 || at != self.routes.first().to_string() {
                    self.violation(format!(
                        "FindCoordinator named node {} at {at}, not this broker",
                        r.node_id
                    ));
                }
                true
            }
            Ok(ResponseBody::FindCoordinator(r)) if coordinator_retriable(r.error_code) => false,
            Ok(other @ ResponseBody::FindCoordinator(_)) => {
                self.violation(format!("unexpected FindCoordinator answer {other:?}"));
                false
            }
            Ok(other) => {
                self.violation(format!("FindCoordinator answered {other:?}"));
                false
            }
            Err(_) => false,
        }
    }

    /// FindCoordinator and InitProducerId until granted; false if told to
    /// stop and out of time.
    async fn init(&mut self) -> bool {
        let mut found = false;
        loop {
            if self.out_of_time("initializing") {
                return false;
            }
            if !found {
                found = self.find_coordinator().await;
                if !found {
                    self.backoff.wait().await;
                    continue;
                }
            }
            let (producer_id, producer_epoch) = self.claim.unwrap_or((-1, -1));
            let body = RequestBody::InitProducerId(InitProducerIdRequest {
                transactional_id: Some(self.txn_id.clone()),
                transaction_timeout_ms: self.params.txn_timeout_ms,
                producer_id,
                producer_epoch,
                ..Default::default()
            });
            let sent_at = self.shared.txns().tick();
            let answer = self
                .request(
                    init_producer_id_request::API_KEY,
                    INIT_PRODUCER_ID_VERSION,
                    &body,
                )
                .await;
            match answer {
                Ok(ResponseBody::InitProducerId(r)) if r.error_code == 0 => {
                    tracing::debug!(txn_id = %self.txn_id, instance = self.instance, pid = r.producer_id, epoch = r.producer_epoch, claim = ?self.claim, "transactional id initialized");
                    self.shared.txns().granted(
                        &self.txn_id,
                        self.instance,
                        r.producer_id,
                        r.producer_epoch,
                        sent_at,
                    );
                    self.session = Some((r.producer_id, r.producer_epoch));
                    self.claim = None;
                    self.seqs.clear();
                    self.backoff.reset();
                    return true;
                }
                Ok(ResponseBody::InitProducerId(r)) if is_fence(r.error_code) => {
                    // Our claim is stale: someone else initialized since.
                    self.shared.txns().stats.fences_seen += 1;
                    self.claim = None;
                }
                Ok(ResponseBody::InitProducerId(r)) if coordinator_retriable(r.error_code) => {
                    if r.error_code == ErrorCode::NotCoordinator.code() {
                        found = false;
                    }
                    self.backoff.wait().await;
                }
                Ok(other) => {
                    self.violation(format!("unexpected InitProducerId answer {other:?}"));
                    self.backoff.wait().await;
                }
                Err(_) => self.backoff.wait().await,
            }
        }
    }

    /// One transaction, begun to ended.
    async fn transaction(&mut self) -> Step {
        let Some((pid, epoch)) = self.session else {
            return Step::Reinit;
        };
        let (partitions, commit, stall_after) = {
            let mut rng = thread_rng();
            let n = rng.gen_range(1..=self.params.partitions.min(3)) as usize;
            let mut all: Vec<i32> = (0..self.params.partitions).collect();
            let mut chosen = Vec::new();
            for _ in 0..n {
                let i = rng.gen_range(0..all.len());
                chosen.push(all.swap_remove(i));
            }
            chosen.sort_unstable();
            let commit = rng.gen_range(0..100) >= self.params.txn_abort_percent;
            let stall = !self.zombie && rng.gen_range(0..100) < self.params.txn_stall_percent;
            // Stall after this many batches (0: right after adding).
            let stall_after = stall.then(|| rng.gen_range(0..=n));
            (chosen, commit, stall_after)
        };
        let txn_no = self.txn_no;
        self.txn_no += 1;
        let index = self.shared.txns().begin(Txn {
            transactional_id: self.txn_id.clone(),
            instance: self.instance,
            producer_id: pid,
            epoch,
            batches: Vec::new(),
            end: TxnEnd::Open,
        });
        tracing::debug!(txn_id = %self.txn_id, instance = self.instance, index, ?partitions, commit, ?stall_after, "transaction begins");
        // Transaction version 2 adds each partition with its first batch.
        if !self.v2 {
            if let Some(step) = self.add_partitions(index, pid, epoch, &partitions).await {
                return step;
            }
        }
        let mut batches_sent = 0;
        for &p in &partitions {
            let count = thread_rng().gen_range(1..=2);
            for k in 0..count {
                if stall_after == Some(batches_sent) {
                    return self.stall(index);
                }
                batches_sent += 1;
                let values: Vec<Bytes> = (0..thread_rng()
                    .gen_range(1..=self.params.max_records_per_batch))
                    .map(|r| {
                        Bytes::from(format!(
                            "t{}.{}.{txn_no}.p{p}.b{k}.r{r}",
                            self.slot, self.instance
                        ))
                    })
                    .collect();
                if let Some(step) = self.produce(index, pid, epoch, p, values).await {
                    return step;
                }
            }
        }
        if stall_after.is_some() {
            return self.stall(index);
        }
        self.end_txn(index, pid, epoch, commit).await
    }

    fn stall(&mut self, index: TxnIndex) -> Step {
        tracing::debug!(txn_id = %self.txn_id, instance = self.instance, index, "stalls mid-transaction");
        self.shared.txns().end(index, TxnEnd::Abandoned);
        self.routes.disconnect_all();
        Step::Stalled
    }

    /// The end of a transaction the producer cannot finish: it was fenced,
    /// or gave up.
    fn fenced(&mut self, index: TxnIndex) -> Step {
        let mut t = self.shared.txns();
        t.stats.fences_seen += 1;
        t.end(index, TxnEnd::Fenced);
        Step::Fenced
    }

    async fn create_topic(&mut self) {
        let body = RequestBody::Metadata(MetadataRequest {
            topics: Some(vec![
                kaas_core::protocol::messages::metadata_request::MetadataRequestTopic {
                    name: Some(TXN_TOPIC.into()),
                    ..Default::default()
                },
            ]),
            allow_auto_topic_creation: true,
            ..Default::default()
        });
        let _ = self
            .request(metadata_request::API_KEY, METADATA_VERSION, &body)
            .await;
    }

    async fn add_partitions(
        &mut self,
        index: TxnIndex,
        pid: i64,
        epoch: i16,
        partitions: &[i32],
    ) -> Option<Step> {
        use kaas_core::protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
        let body = RequestBody::AddPartitionsToTxn(AddPartitionsToTxnRequest {
            v3_and_below_transactional_id: self.txn_id.clone(),
            v3_and_below_producer_id: pid,
            v3_and_below_producer_epoch: epoch,
            v3_and_below_topics: vec![AddPartitionsToTxnTopic {
                name: TXN_TOPIC.into(),
                partitions: partitions.to_vec(),
                ..Default::default()
            }],
            ..Default::default()
        });
        loop {
            if self.out_of_time("adding partitions") {
                self.shared.txns().end(index, TxnEnd::Abandoned);
                return Some(Step::GaveUp);
            }
            let answer = self
                .request(
                    add_partitions_to_txn_request::API_KEY,
                    ADD_PARTITIONS_VERSION,
                    &body,
                )
                .await;
            let codes: Vec<i16> = match answer {
                Ok(ResponseBody::AddPartitionsToTxn(r)) => r
                    .results_by_topic_v3_and_below
                    .iter()
                    .flat_map(|t| t.results_by_partition.iter())
                    .map(|p| p.partition_error_code)
                    .collect(),
                Ok(other) => {
                    self.violation(format!("AddPartitionsToTxn answered {other:?}"));
                    self.backoff.wait().await;
                    continue;
                }
                Err(_) => {
                    self.backoff.wait().await;
                    continue;
                }
            };
            if codes.len() != partitions.len() {
                self.violation(format!(
                    "AddPartitionsToTxn answered {} partitions for {}",
                    codes.len(),
                    partitions.len()
                ));
            }
            if codes.iter().all(|&c| c == 0) {
                self.backoff.reset();
                return None;
            }
            if let Some(&c) = codes.iter().find(|&&c| ends_identity(&self.params, c)) {
                let _ = c;
                return Some(self.fenced(index));
            }
            if codes
                .iter()
                .any(|&c| c == ErrorCode::UnknownTopicOrPartition.code())
            {
                self.create_topic().await;
            } else if !codes.iter().all(|&c| {
                c == 0 || coordinator_retriable(c) || c == ErrorCode::OperationNotAttempted.code()
            }) {
                // INVALID_PRODUCER_ID_MAPPING and the like: the coordinator
                // forgot us (it must not) or moved on; start over.
                self.violation(format!(
                    "AddPartitionsToTxn refused with {codes:?} (session {pid}/{epoch})"
                ));
                self.shared.txns().end(index, TxnEnd::Abandoned);
                return Some(Step::Reinit);
            }
            self.backoff.wait().await;
        }
    }

    /// Transaction version 2: EndTxn at (`pid`, `epoch`) answered the
    /// identity the producer continues with, a bumped epoch (or a new
    /// producer id at epoch 0 once the epoch is exhausted); sequences start
    /// again at 0 under it.
    fn continue_as(&mut self, pid: i64, epoch: i16, next_pid: i64, next_epoch: i16) {
        if !is_bumped_identity(pid, epoch, next_pid, next_epoch) {
            self.violation(format!(
                "EndTxn v5 of {pid}/{epoch} answered {next_pid}/{next_epoch}, not a bumped epoch"
            ));
        }
        self.session = Some((next_pid, next_epoch));
        self.seqs.clear();
        self.shared.txns().stats.v2_ends += 1;
    }

    /// One transactional batch, retried with the same bytes until
    /// acknowledged. `Some` ends the transaction.
    async fn produce(
        &mut self,
        index: TxnIndex,
        pid: i64,
        epoch: i16,
        partition: i32,
        values: Vec<Bytes>,
    ) -> Option<Step> {
        let seq = self.seqs.get(&partition).copied().unwrap_or(0);
        let count = values.len() as i32;
        let batch = self
            .shared
            .txns()
            .add_batch(index, partition, values.clone());
        let mut builder = BatchBuilder::transactional(pid, epoch, seq);
        let now = crate::env::wall_ms();
        // On a compacted topic every record needs a key: its own value,
        // unique, so compaction takes only aborted records (and markers).
        let keyed = self.params.compaction.is_some_and(|c| c.txn_topic);
        for v in &values {
            builder.push(NewRecord::new(now, keyed.then_some(&v[..]), Some(v)));
        }
        let body = RequestBody::Produce(ProduceRequest {
            transactional_id: Some(self.txn_id.clone()),
            acks: -1,
            timeout_ms: PRODUCE_TIMEOUT_MS,
            topic_data: vec![produce_request::TopicProduceData {
                name: TXN_TOPIC.into(),
                partition_data: vec![produce_request::PartitionProduceData {
                    index: partition,
                    records: Some(builder.build().into_bytes()),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        });
        let correlation_id = (self.instance as i32).wrapping_mul(7919) ^ (index as i32);
        let version = if self.v2 {
            PRODUCE_VERSION_V2
        } else {
            PRODUCE_VERSION
        };
        let frame = match encode_request(
            produce_request::API_KEY,
            version,
            correlation_id,
            Some(CLIENT_ID),
            &body,
        ) {
            Ok(f) => f,
            Err(e) => {
                self.violation(format!("cannot encode a produce request: {e}"));
                return Some(Step::GaveUp);
            }
        };
        loop {
            if self.out_of_time("producing") {
                self.shared.txns().end(index, TxnEnd::Abandoned);
                return Some(Step::GaveUp);
            }
            let sent = self
                .routes
                .produce(TXN_TOPIC, partition, &frame, &self.shared)
                .await;
            let outcome = match sent {
                Ok(response) => {
                    decode_response(produce_request::API_KEY, version, correlation_id, response)
                        .map_err(RequestError::of)
                        .and_then(|b| produce_outcome(&b, TXN_TOPIC, partition))
                }
                Err(e) => Err(e),
            };
            let code = match outcome {
                Ok((0, base_offset)) => {
                    self.shared.txns().batch_acked(index, batch, base_offset);
                    self.seqs.insert(partition, seq.wrapping_add(count));
                    self.backoff.reset();
                    return None;
                }
                Ok((code, _)) => code,
                Err(RequestError::Malformed(e)) => {
                    self.violation(format!("malformed produce answer: {e}"));
                    self.routes.disconnect_all();
                    -1
                }
                Err(RequestError::Network(_)) => -1,
            };
            if code != -1 {
                self.routes
                    .partition_outcome(TXN_TOPIC, Some(code), &self.shared);
            }
            if ends_identity(&self.params, code) {
                return Some(self.fenced(index));
            }
            if code == -1
                || retriable(code)
                || code == ErrorCode::NotEnoughReplicas.code()
                || code == ErrorCode::ConcurrentTransactions.code()
            {
                self.shared.txns().stats.produce_retries += 1;
                self.backoff.wait().await;
                continue;
            }
            // Refused for good (a sequence error, the transaction no
            // longer open): abort, then bump the epoch by claiming it, as
            // the Java client does with an abortable error.
            tracing::debug!(txn_id = %self.txn_id, instance = self.instance, index, partition, code, "produce refused");
            self.shared.txns().stats.produce_refusals += 1;
            return Some(match self.end_txn(index, pid, epoch, false).await {
                Step::Done => Step::Reinit,
                other => other,
            });
        }
    }

    async fn end_txn(&mut self, index: TxnIndex, pid: i64, epoch: i16, commit: bool) -> Step {
        let body = RequestBody::EndTxn(EndTxnRequest {
            transactional_id: self.txn_id.clone(),
            producer_id: pid,
            producer_epoch: epoch,
            committed: commit,
            ..Default::default()
        });
        // Whether an earlier attempt may have prepared the outcome.
        let mut maybe_applied = false;
        loop {
            let unknown = if commit {
                TxnEnd::CommitUnknown
            } else {
                TxnEnd::AbortUnknown
            };
            if self.out_of_time("ending a transaction") {
                self.shared.txns().end(index, unknown);
                return Step::GaveUp;
            }
            let version = if self.v2 {
                END_TXN_VERSION_V2
            } else {
                END_TXN_VERSION
            };
            let answer = self.request(end_txn_request::API_KEY, version, &body).await;
            let code = match answer {
                Ok(ResponseBody::EndTxn(r)) => {
                    if r.error_code == 0 && self.v2 {
                        self.continue_as(pid, epoch, r.producer_id, r.producer_epoch);
                    }
                    r.error_code
                }
                Ok(other) => {
                    self.violation(format!("EndTxn answered {other:?}"));
                    -1
                }
                Err(_) => -1,
            };
            if code == 0 {
                let end = if commit {
                    TxnEnd::CommitAcked
                } else {
                    TxnEnd::AbortAcked
                };
                tracing::debug!(txn_id = %self.txn_id, instance = self.instance, index, ?end, "transaction ended");
                self.shared.txns().end(index, end);
                self.backoff.reset();
                return Step::Done;
            }
            if ends_identity(&self.params, code) {
                let mut t = self.shared.txns();
                t.stats.fences_seen += 1;
                t.end(
                    index,
                    if maybe_applied {
                        unknown
                    } else {
                        TxnEnd::Fenced
                    },
                );
                return Step::Fenced;
            }
            if self.v2 && commit && code == ErrorCode::InvalidTxnState.code() {
                // Transaction version 2's answer to a commit whose
                // transaction was aborted under it (the reaper, or an
                // InitProducerId, bumped the epoch and aborted): a commit
                // applied earlier would have been answered as a retry. As
                // the Java client, give up this producer.
                let mut t = self.shared.txns();
                t.stats.fences_seen += 1;
                t.end(index, TxnEnd::Fenced);
                return Step::Fenced;
            }
            if code == -1 || coordinator_retriable(code) {
                maybe_applied = true;
                self.shared.txns().stats.end_retries += 1;
                self.backoff.wait().await;
                continue;
            }
            self.violation(format!(
                "EndTxn({}) of {pid}/{epoch} refused with error {code}",
                if commit { "commit" } else { "abort" }
            ));
            self.shared.txns().end(index, unknown);
            return Step::Reinit;
        }
    }
}

/// What the final reads of the transactional topic delivered at each
/// isolation level.
#[derive(Debug, Default)]
pub struct TxnLogs {
    pub committed: Logs,
    pub uncommitted: Logs,
}

/// One partition of a fetch, as a Kafka client delivers it.
pub(crate) struct PartitionRead {
    pub(crate) partition: i32,
    /// The offset the fetch asked for.
    pub(crate) requested: i64,
    pub(crate) error_code: i16,
    pub(crate) high_watermark: i64,
    pub(crate) last_stable_offset: i64,
    /// Records delivered: no control batch, and at read_committed none of
    /// an aborted transaction.
    pub(crate) records: Vec<(i64, Bytes)>,
    /// Offset after the last batch returned (the requested one if none).
    pub(crate) next_offset: i64,
    /// Batches of aborted transactions dropped.
    pub(crate) aborted_dropped: u64,
    /// Every batch returned, (base offset, last offset): control and
    /// aborted ones included.
    pub(crate) batches: Vec<(i64, i64)>,
    /// The isolation level's bound this answer named: the last stable
    /// offset at read_committed, the high watermark at read_uncommitted.
    pub(crate) bound: i64,
    /// The whole answer held no batch, though this partition asked below
    /// its bound without error ([`checker::starved_partitions`]).
    pub(crate) starved: bool,
}

impl PartitionRead {
    /// A partition no answer came for (multi-broker routing: no leader
    /// known, or its leader's request failed): error -1, retried.
    pub(crate) fn failed(partition: i32, requested: i64) -> PartitionRead {
        PartitionRead {
            partition,
            requested,
            error_code: -1,
            high_watermark: -1,
            last_stable_offset: -1,
            records: Vec::new(),
            next_offset: requested,
            aborted_dropped: 0,
            batches: Vec::new(),
            bound: -1,
            starved: false,
        }
    }

    /// What was wrong with this answer if it starved the partition
    /// ([`mark_starved`]), for the reader's history.
    pub(crate) fn starved_violation(&self, topic: &str, isolation: Isolation) -> Option<String> {
        self.starved.then(|| {
            format!(
                "{topic} partition {}: a {} fetch at {} was answered with no batch at all, though its bound was {} (high watermark {}, last stable offset {}): Kafka returns at least one batch below the bound",
                self.partition,
                isolation.name(),
                self.requested,
                self.bound,
                self.high_watermark,
                self.last_stable_offset
            )
        })
    }

    /// The answer as the poll-order rules take it (`crate::poll_history`).
    pub(crate) fn poll_answer(&self) -> poll_history::Answer {
        poll_history::Answer {
            partition: self.partition,
            requested: self.requested,
            batches: self.batches.clone(),
            delivered: self.records.iter().map(|(o, _)| *o).collect(),
            next_offset: self.next_offset,
        }
    }
}

/// Delivers a partition's batches as the Java consumer does
/// (`CompletedFetch.nextFetchedBatch`). At read_committed, before a batch
/// with a producer id, every aborted transaction whose first offset is at
/// or below the batch's last offset marks its producer aborted; an ABORT
/// marker clears its producer; a transactional batch of an aborted producer
/// is dropped. Control batches are never delivered. Every record delivered
/// must lie below the bound of the isolation level: the last stable offset,
/// or at read_uncommitted the high watermark (what is durable).
fn deliver(
    topic: &str,
    data: &kaas_core::protocol::messages::fetch_response::PartitionData,
    requested: i64,
    isolation: Isolation,
) -> Result<PartitionRead, String> {
    let p = data.partition_index;
    let mut out = PartitionRead {
        partition: p,
        requested,
        error_code: data.error_code,
        high_watermark: data.high_watermark,
        last_stable_offset: data.last_stable_offset,
        records: Vec::new(),
        next_offset: requested,
        aborted_dropped: 0,
        batches: Vec::new(),
        bound: match isolation {
            Isolation::ReadCommitted => data.last_stable_offset,
            Isolation::ReadUncommitted => data.high_watermark,
        },
        starved: false,
    };
    if data.error_code != 0 {
        return Ok(out);
    }
    // At read_uncommitted Kafka answers no aborted list (null): nothing is
    // dropped.
    let mut aborted = match (isolation, &data.aborted_transactions) {
        (Isolation::ReadCommitted, None) => {
            return Err(format!(
                "{topic} partition {p}: a read_committed fetch answered a null aborted_transactions"
            ))
        }
        (Isolation::ReadCommitted, Some(aborted)) => aborted.clone(),
        (Isolation::ReadUncommitted, _) => Vec::new(),
    };
    aborted.sort_by_key(|a| a.first_offset);
    let mut aborted = aborted.into_iter().peekable();
    let mut aborted_pids: BTreeSet<i64> = BTreeSet::new();
    let Some(bytes) = data.records.clone() else {
        return Ok(out);
    };
    for batch in split_batches(bytes) {
        batch.validate().map_err(|e| {
            format!(
                "{topic} partition {p}: fetched batch at {} is invalid: {e}",
                batch.base_offset()
            )
        })?;
        out.next_offset = out.next_offset.max(batch.next_offset());
        out.batches.push((batch.base_offset(), batch.last_offset()));
        if batch.has_producer_id() {
            while let Some(a) = aborted.next_if(|a| a.first_offset <= batch.last_offset()) {
                aborted_pids.insert(a.producer_id);
            }
            // A control batch the cleaner emptied (its marker discarded,
            // the header kept) holds no marker: as the Java consumer's
            // `containsAbortMarker`, it ends nothing.
            if batch.is_control() && batch.record_count() == 0 {
                continue;
            }
            if batch.is_control() {
                let marker = parse_end_txn_marker(&batch).map_err(|e| {
                    format!(
                        "{topic} partition {p}: bad control batch at {}: {e}",
                        batch.base_offset()
                    )
                })?;
                if marker.is_some_and(|m| m.control_type == ControlType::Abort) {
                    aborted_pids.remove(&batch.producer_id());
                }
                continue;
            }
            if batch.is_transactional() && aborted_pids.contains(&batch.producer_id()) {
                out.aborted_dropped += u64::from(batch.next_offset() > requested);
                continue;
            }
        }
        if batch.is_control() {
            continue;
        }
        for record in batch.records() {
            let record =
                record.map_err(|e| format!("{topic} partition {p}: undecodable record: {e}"))?;
            let value = record.value.ok_or_else(|| {
                format!(
                    "{topic} partition {p}: record at {} has no value",
                    record.offset
                )
            })?;
            if record.offset >= requested {
                let bound = out.bound;
                let bound_name = match isolation {
                    Isolation::ReadCommitted => "last stable offset",
                    Isolation::ReadUncommitted => "high watermark",
                };
                if record.offset >= bound {
                    return Err(format!(
                        "{topic} partition {p}: {} returned offset {} at or above the {bound_name} {bound}",
                        isolation.name(),
                        record.offset
                    ));
                }
                out.records.push((record.offset, value));
            }
        }
    }
    Ok(out)
}

/// One fetch of `positions` of `topic` at `isolation`, naming the leader
/// epoch the client knows for each partition in `epochs` (KIP-320: a broker
/// at another epoch answers FENCED_LEADER_EPOCH or UNKNOWN_LEADER_EPOCH
/// rather than serve); -1 for the others.
pub(crate) async fn fetch_at(
    conn: &mut Option<Connection>,
    addr: SocketAddr,
    topic: &str,
    positions: &BTreeMap<i32, i64>,
    epochs: &BTreeMap<i32, i32>,
    max_wait_ms: i32,
    isolation: Isolation,
) -> Result<Vec<PartitionRead>, RequestError> {
    let c = ensure_connected(conn, addr)
        .await
        .map_err(RequestError::Network)?;
    let body = fetch_request_at_epochs(topic, positions, epochs, max_wait_ms, isolation);
    let result = match timeout(
        REQUEST_TIMEOUT,
        c.send(fetch_request::API_KEY, FETCH_VERSION, &body),
    )
    .await
    {
        Ok(Ok(body)) => Ok(body),
        Ok(Err(e)) => Err(RequestError::of(e)),
        Err(_) => Err(RequestError::Network("fetch timed out".to_string())),
    };
    let body = match result {
        Ok(b) => b,
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
    let mut out = Vec::new();
    for answered in resp.responses.iter().filter(|t| t.topic == topic) {
        for data in &answered.partitions {
            let requested = positions.get(&data.partition_index).copied().unwrap_or(0);
            out.push(deliver(topic, data, requested, isolation).map_err(RequestError::Malformed)?);
        }
    }
    mark_starved(&mut out);
    Ok(out)
}

/// Marks the partitions one fetch answer starved
/// ([`checker::starved_partitions`]).
fn mark_starved(parts: &mut [PartitionRead]) {
    let answer: Vec<checker::AnsweredPartition> = parts
        .iter()
        .map(|p| checker::AnsweredPartition {
            error_code: p.error_code,
            requested: p.requested,
            bound: p.bound,
            batches: p.batches.len(),
        })
        .collect();
    for (p, starved) in parts.iter_mut().zip(checker::starved_partitions(&answer)) {
        p.starved = starved;
    }
}

/// Tails every partition of the transactional topic at `isolation` while
/// faults run, reporting what it delivers. At read_uncommitted it sees the
/// records of open and aborted transactions too: each must stay where it
/// was read (it was below the high watermark, so durable), and be one a
/// transactional producer sent (`TxnHistory::read_uncommitted`).
pub async fn txn_consumer(
    params: SimParams,
    brokers: Vec<SocketAddr>,
    shared: Arc<Shared>,
    isolation: Isolation,
) {
    let (name, reading) = match isolation {
        Isolation::ReadCommitted => ("txn-consumer", Reading::TxnCommitted),
        Isolation::ReadUncommitted => ("txn-uncommitted-consumer", Reading::TxnUncommitted),
    };
    let mut routes = Routes::new(name, &brokers);
    let mut backoff = Backoff::new();
    let compacted = params.compaction.as_ref().is_some_and(|c| c.txn_topic);
    let mut positions: BTreeMap<i32, i64> = (0..params.partitions).map(|p| (p, 0)).collect();
    let me = polling(
        &format!("{} consumer", isolation.name()),
        reading,
        &positions,
        &shared,
    );
    while !shared.stop_fetching.load(Ordering::Relaxed) {
        let fetched = match routes
            .fetch_isolated(TXN_TOPIC, &positions, 200, &shared, isolation)
            .await
        {
            Ok(f) => f,
            Err(e) => {
                if let RequestError::Malformed(e) = e {
                    shared.txns().violation(e);
                    routes.disconnect_all();
                }
                backoff.wait().await;
                continue;
            }
        };
        let mut any_error = false;
        for part in fetched {
            let Some(position) = positions.get_mut(&part.partition) else {
                continue;
            };
            if part.error_code != 0 {
                any_error = true;
                continue;
            }
            let mut t = shared.txns();
            if let Some(v) = part.starved_violation(TXN_TOPIC, isolation) {
                if !compacted {
                    t.violation(v);
                }
            }
            match isolation {
                Isolation::ReadCommitted => {
                    t.read_committed(part.partition, &part.records);
                    t.stats.aborted_batches_dropped += part.aborted_dropped;
                    t.stats.open_data_hidden +=
                        u64::from(part.last_stable_offset < part.high_watermark);
                }
                Isolation::ReadUncommitted => {
                    t.read_uncommitted(part.partition, &part.records, part.last_stable_offset)
                }
            }
            drop(t);
            shared.polls().answer(me, part.poll_answer());
            *position = (*position).max(part.next_offset);
        }
        if any_error {
            backoff.wait().await;
        } else {
            backoff.reset();
        }
    }
}

/// Liveness after the faults: every transactional id's transaction ends
/// (DescribeTransactions shows no Ongoing or Prepare* state), then every
/// partition is read up to its high watermark, at read_committed (the last
/// stable offset must catch up with it) and at read_uncommitted. Returns
/// what a client delivers at each.
pub async fn final_read(
    params: SimParams,
    brokers: Vec<SocketAddr>,
    shared: Arc<Shared>,
    deadline: Duration,
) -> Result<TxnLogs, String> {
    let started = Instant::now();
    let give_up = started + deadline;
    // Every producer has ended its transaction by now, but one that stopped
    // mid-way: the reaper aborts it once its timeout has passed (counted
    // from its start, on a broker clock that may be 10 s off the one that
    // started it, as each incarnation has its own), within an interval.
    let open_bound = Duration::from_millis(
        params.txn_timeout_ms as u64 + 2 * params.txn_timer_ms as u64 + 10_000,
    ) + Duration::from_secs(5);
    let mut last = String::new();
    let mut routes = Routes::new("txn-final", &brokers);
    let mut backoff = Backoff::new();
    let ids: Vec<String> = (0..params.txn_producers).map(transactional_id).collect();
    // The ids whose transaction was Ongoing at the first answer, with no
    // producer left to end it: the reaper's to abort (issue 13 item 9).
    let mut left_open: Option<Vec<String>> = None;
    loop {
        if Instant::now() >= started + open_bound {
            return Err(format!(
                "liveness: {open_bound:?} after the producers stopped, transactions are still open: {last}"
            ));
        }
        let states = match describe_transactions(&mut routes, &ids, &shared).await {
            Ok(states) => states,
            Err(e) => {
                last = e;
                backoff.wait().await;
                continue;
            }
        };
        let left_open = left_open.get_or_insert_with(|| {
            states
                .iter()
                .filter(|s| s.error_code == 0 && s.transaction_state == "Ongoing")
                .map(|s| s.transactional_id.clone())
                .collect()
        });
        let open: Vec<String> = states
            .iter()
            .filter(|s| {
                s.error_code != 0
                    || matches!(
                        s.transaction_state.as_str(),
                        "Ongoing" | "PrepareCommit" | "PrepareAbort"
                    )
            })
            .map(|s| {
                format!(
                    "{} {} (error {}, pid {} epoch {}, started {})",
                    s.transactional_id,
                    s.transaction_state,
                    s.error_code,
                    s.producer_id,
                    s.producer_epoch,
                    s.transaction_start_time_ms
                )
            })
            .collect();
        // An id no instance ever initialized is unknown; that is fine.
        let open: Vec<String> = open
            .into_iter()
            .filter(|s| {
                !s.contains(&format!(
                    "error {}",
                    ErrorCode::TransactionalIdNotFound.code()
                ))
            })
            .collect();
        if open.is_empty() {
            let reaped = states
                .iter()
                .filter(|s| left_open.contains(&s.transactional_id))
                .filter(|s| s.transaction_state == "CompleteAbort")
                .count();
            let stats = &mut shared.txns().stats;
            stats.settled_ms = started.elapsed().as_millis() as u64;
            stats.left_to_reaper = left_open.len() as u64;
            stats.reaped_after_stop = reaped as u64;
            break;
        }
        last = open.join(", ");
        sleep(Duration::from_millis(200)).await;
    }
    let partitions: Vec<i32> = (0..params.partitions).collect();
    let compacted = params.compaction.as_ref().is_some_and(|c| c.txn_topic);
    let mut logs = TxnLogs::default();
    for isolation in [Isolation::ReadCommitted, Isolation::ReadUncommitted] {
        let read = read_to_high_watermark(
            &mut routes,
            &ReadToTheEnd {
                topic: TXN_TOPIC,
                partitions: &partitions,
                isolation,
                compacted,
                give_up,
            },
            &shared,
        )
        .await?;
        shared.txns().stats.final_aborted_batches_dropped += read.aborted_dropped;
        match isolation {
            Isolation::ReadCommitted => logs.committed = read.logs,
            Isolation::ReadUncommitted => logs.uncommitted = read.logs,
        }
    }
    Ok(logs)
}

/// A final read: every partition of `partitions` of `topic` from offset 0
/// up to its high watermark, at `isolation`, by `give_up`.
pub(crate) struct ReadToTheEnd<'a> {
    pub(crate) topic: &'a str,
    pub(crate) partitions: &'a [i32],
    pub(crate) isolation: Isolation,
    /// The topic is compacted: an answer may rightly hold no batch below
    /// its bound ([`checker::starved_partitions`]).
    pub(crate) compacted: bool,
    pub(crate) give_up: Instant,
}

/// What a final read delivered.
pub(crate) struct ReadToTheEndResult {
    pub(crate) logs: Logs,
    /// Batches of aborted transactions dropped (read_committed).
    pub(crate) aborted_dropped: u64,
}

/// Reads as `read` says (at read_committed the last stable offset must
/// catch up with the high watermark). Returns what a client delivers; an
/// answer that breaks a fetch rule, or not reaching the end by the
/// deadline, is an error.
pub(crate) async fn read_to_high_watermark(
    routes: &mut Routes,
    read: &ReadToTheEnd<'_>,
    shared: &Shared,
) -> Result<ReadToTheEndResult, String> {
    let topic = read.topic;
    let isolation = read.isolation;
    let mut last = String::new();
    let mut backoff = Backoff::new();
    let mut out = ReadToTheEndResult {
        logs: Logs::new(),
        aborted_dropped: 0,
    };
    let mut positions: BTreeMap<i32, i64> = read.partitions.iter().map(|&p| (p, 0)).collect();
    while !positions.is_empty() {
        if Instant::now() >= read.give_up {
            return Err(format!(
                "liveness: could not read {topic} at {} up to its high watermark in time (positions {positions:?}; {last})",
                isolation.name()
            ));
        }
        let fetched = match routes
            .fetch_isolated(topic, &positions, 0, shared, isolation)
            .await
        {
            Ok(f) => f,
            Err(RequestError::Malformed(e)) => return Err(format!("final read of {topic}: {e}")),
            Err(RequestError::Network(e)) => {
                last = e;
                backoff.wait().await;
                continue;
            }
        };
        let mut progressed = false;
        for part in fetched {
            let Some(&position) = positions.get(&part.partition) else {
                continue;
            };
            if part.error_code == ErrorCode::UnknownTopicOrPartition.code() && position == 0 {
                // The topic was never created: nothing to read.
                positions.remove(&part.partition);
                progressed = true;
                continue;
            }
            if part.error_code != 0 {
                last = format!("partition {} error {}", part.partition, part.error_code);
                continue;
            }
            if let Some(v) = part.starved_violation(topic, isolation) {
                if !read.compacted {
                    return Err(format!("final read: {v}"));
                }
            }
            out.aborted_dropped += part.aborted_dropped;
            out.logs
                .entry(part.partition)
                .or_default()
                .extend(part.records.iter().cloned());
            if part.next_offset > position {
                progressed = true;
                positions.insert(part.partition, part.next_offset);
            } else if position >= part.high_watermark {
                positions.remove(&part.partition);
                progressed = true;
            } else {
                last = format!(
                    "partition {}: {} stuck at {position}, last stable offset {}, high watermark {}",
                    part.partition,
                    isolation.name(),
                    part.last_stable_offset,
                    part.high_watermark
                );
            }
        }
        if progressed {
            backoff.reset();
        } else {
            sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(out)
}

/// The states of `ids`: with one broker in one DescribeTransactions, with
/// several one per id, each to its coordinator (as Kafka's admin client
/// groups them).
async fn describe_transactions(
    routes: &mut Routes,
    ids: &[String],
    shared: &Shared,
) -> Result<Vec<TransactionState>, String> {
    let groups: Vec<Vec<String>> = if routes.multi() {
        ids.iter().map(|id| vec![id.clone()]).collect()
    } else {
        vec![ids.to_vec()]
    };
    let mut states = Vec::new();
    for group in groups {
        let key = (routes::KEY_TRANSACTION, group[0].clone());
        let body = RequestBody::DescribeTransactions(DescribeTransactionsRequest {
            transactional_ids: group,
            ..Default::default()
        });
        let answer = routes
            .ask_coordinator(
                &key,
                describe_transactions_request::API_KEY,
                DESCRIBE_TRANSACTIONS_VERSION,
                &body,
                shared,
            )
            .await;
        match answer {
            Ok(ResponseBody::DescribeTransactions(r)) => states.extend(r.transaction_states),
            Ok(other) => return Err(format!("DescribeTransactions: {other:?}")),
            Err(RequestError::Network(e) | RequestError::Malformed(e)) => {
                return Err(format!("DescribeTransactions: {e}"))
            }
        }
    }
    Ok(states)
}
