//! The exactly-once consume-transform-produce loop. Everything observed
//! goes to [`crate::eos_history::EosHistory`].
//!
//! The loop is an application with the transactional id
//! [`EOS_TRANSACTIONAL_ID`] and the consumer group [`EOS_GROUP`], run as
//! instances, as a deployment restarting would. An instance does what a
//! Java EOS application does (`KafkaProducer.sendOffsetsToTransaction`
//! with the group's metadata), one request at a time: FindCoordinator →
//! InitProducerId (v4; claiming its identity after an abortable error,
//! KIP-360) → OffsetFetch (v7, require_stable: an UNSTABLE_OFFSET_COMMIT
//! answer means a transaction of the previous instance still owes its
//! offsets: retry later) → loop { read_committed Fetches of the input
//! topic from its positions (written by [`crate::eos_input`]), as a
//! consumer's poll → AddPartitionsToTxn (v3) → one transactional batch
//! per output partition → AddOffsetsToTxn (v3) → TxnOffsetCommit (v3,
//! generation -1 and no member id: the loop is no group member, the form
//! Kafka accepts from `sendOffsetsToTransaction(offsets, groupId)`) →
//! EndTxn (commit, sometimes abort) }. After an acknowledged commit the
//! positions move on; after an abort they stay (the input is read again);
//! after a fence or an unclear end the instance re-initializes and reads
//! its positions back with OffsetFetch.
//!
//! Sometimes an instance stops mid-transaction and a new one takes over
//! (its InitProducerId aborts what the old one left open, or the reaper
//! does); sometimes the old one was only paused and comes back as a zombie
//! that tries to finish its transaction: it must be fenced, or, if it got
//! there first, its commit must stand.
//!
//! [`crate::eos_observer`] watches the loop's committed offsets.

use crate::eos_history::{
    output_value, EosTxn, EosTxnIndex, EOS_GROUP, EOS_INPUT_TOPIC, EOS_OUTPUT_TOPIC,
    EOS_TRANSACTIONAL_ID,
};
use crate::eos_observer::{committed_offsets, coordinator_busy, offset_fetch_body};
use crate::params::SimParams;
use crate::routes::{self, Routes};
use crate::txn::{
    coordinator_retriable, ends_identity, is_bumped_identity, is_fence, percent,
    END_TXN_VERSION_V2, PRODUCE_VERSION_V2,
};
use crate::txn_history::TxnEnd;
use crate::workload::{produce_outcome, retriable, Backoff, RequestError, Shared, PRODUCE_VERSION};
use bytes::Bytes;
use kaas_core::protocol::messages::{
    add_offsets_to_txn_request, add_partitions_to_txn_request, end_txn_request,
    find_coordinator_request, init_producer_id_request, metadata_request, offset_fetch_request,
    produce_request, txn_offset_commit_request, AddOffsetsToTxnRequest, AddPartitionsToTxnRequest,
    EndTxnRequest, FindCoordinatorRequest, InitProducerIdRequest, MetadataRequest, ProduceRequest,
    TxnOffsetCommitRequest,
};
use kaas_core::protocol::{ErrorCode, RequestBody, ResponseBody};
use kaas_core::record::{BatchBuilder, NewRecord};
use kaas_net::broker::Isolation;
use kaas_net::client::{decode_response, encode_request};
use madsim::rand::{thread_rng, Rng};
use madsim::time::{sleep, Instant};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

const FIND_COORDINATOR_VERSION: i16 = 3;
const INIT_PRODUCER_ID_VERSION: i16 = 4;
const ADD_PARTITIONS_VERSION: i16 = 3;
const ADD_OFFSETS_VERSION: i16 = 3;
const TXN_OFFSET_COMMIT_VERSION: i16 = 3;
const END_TXN_VERSION: i16 = 3;
/// Transaction version 2 adds the group with TxnOffsetCommit v5.
const TXN_OFFSET_COMMIT_VERSION_V2: i16 = 5;
const OFFSET_FETCH_VERSION: i16 = 7;
const METADATA_VERSION: i16 = 9;
const CLIENT_ID: &str = "sim-eos";
/// Once this many transactions committed with no instance resumed from
/// committed offsets yet, the next transaction's instance stalls for good
/// (not as a zombie), so the next one must resume: the `MIN_EOS_RESUMES`
/// gate. Left to the stall draw alone (3-12 % of transactions, and only
/// during the faults), a dozen seeds in a thousand never resumed, most of
/// them because every commit came after the faults.
const RESUME_OWED_AFTER_COMMITS: u64 = 5;
const PRODUCE_TIMEOUT_MS: i32 = 5_000;

/// Where a transaction's instance stalls (0: before it produces, 1:
/// before it commits the offsets, 2: before EndTxn), and whether the stall
/// is owed to the resume gate ([`RESUME_OWED_AFTER_COMMITS`]), so never a
/// zombie's.
#[derive(Debug, Clone, Copy)]
struct Stall {
    at: u32,
    owed: bool,
}
/// Input records one transaction takes per partition: large batches keep
/// the loop's share of the seed's run time small.
const MAX_RECORDS_PER_PARTITION: usize = 500;
/// Fetches one poll may make to gather them.
const MAX_FETCHES_PER_POLL: usize = 8;
/// How long the loop may take to drain its input once the producers
/// stopped.
const DRAIN_DEADLINE: Duration = Duration::from_secs(120);

/// Instance numbers, unique in the run (a seed runs in its own process).
static NEXT_INSTANCE: AtomicU64 = AtomicU64::new(0);

/// How a transaction attempt ended for the instance.
enum Step {
    /// Ended (committed or aborted); the instance goes on.
    Done,
    /// No new input.
    Idle,
    /// The input is final and every record of it committed.
    Drained,
    /// Fenced: start over with a fresh identity.
    Fenced,
    /// The transaction's fate is the coordinator's: re-init claiming the
    /// identity.
    Reinit,
    /// The instance stopped mid-transaction.
    Stalled,
    /// Out of time while draining (a liveness violation is recorded).
    GaveUp,
}

/// What one poll of the input brought.
struct Poll {
    /// Records per input partition, in offset order.
    batch: BTreeMap<i32, Vec<(i64, Bytes)>>,
    /// The positions after them.
    next: BTreeMap<i32, i64>,
    /// The first fetch found every partition read up to its high
    /// watermark.
    at_end: bool,
    /// A fetch failed (the topic does not exist yet, the broker is down).
    failed: bool,
}

/// What an instance tells the loop that runs instances.
enum Report {
    /// It stopped mid-transaction: start the next instance.
    Stalled,
    /// It drained the input, or gave up: the loop is over.
    Ended,
}

/// Runs the loop's instances until one drains the input after the
/// producers stopped, then waits for zombies and tells the observer.
pub async fn eos_loop(params: SimParams, brokers: Vec<SocketAddr>, shared: Arc<Shared>) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let zombies = Arc::new(AtomicUsize::new(0));
    loop {
        let instance = Instance::new(
            params,
            &brokers,
            shared.clone(),
            tx.clone(),
            zombies.clone(),
        );
        tokio::spawn(instance.run());
        match rx.recv().await {
            Some(Report::Stalled) => {
                // Back some time later: often after the reaper aborted what
                // the old instance left open, sometimes before (the new
                // InitProducerId aborts it).
                let pause = thread_rng().gen_range(0..=2 * params.eos_txn_timeout_ms as u64);
                sleep(Duration::from_millis(pause)).await;
            }
            Some(Report::Ended) | None => break,
        }
    }
    while zombies.load(Ordering::Relaxed) > 0 {
        sleep(Duration::from_millis(50)).await;
    }
    shared.eos_done.store(true, Ordering::Relaxed);
}

struct Instance {
    instance: u64,
    params: SimParams,
    shared: Arc<Shared>,
    /// The coordinators' and the leaders' connections.
    routes: Routes,
    /// Producer id and epoch of the current session.
    session: Option<(i64, i16)>,
    /// The identity to claim at the next InitProducerId (KIP-360).
    claim: Option<(i64, i16)>,
    /// Next sequence per output partition, in the current session.
    seqs: BTreeMap<i32, i32>,
    /// Input positions: the committed offsets, read back at every
    /// (re-)initialization and moved on by every acknowledged commit.
    positions: Option<BTreeMap<i32, i64>>,
    backoff: Backoff,
    /// Paused mid-transaction and back: finishes that one and goes away.
    zombie: bool,
    /// Speaks transaction version 2 (KIP-890 part 2): Produce v12 and
    /// TxnOffsetCommit v5 add the partition and the group themselves (no
    /// AddPartitionsToTxn, no AddOffsetsToTxn), and EndTxn v5 bumps the
    /// epoch at every end.
    v2: bool,
    reports: mpsc::UnboundedSender<Report>,
    zombies: Arc<AtomicUsize>,
    drain_deadline: Option<Instant>,
    correlation: i32,
}

impl Instance {
    fn new(
        params: SimParams,
        brokers: &[SocketAddr],
        shared: Arc<Shared>,
        reports: mpsc::UnboundedSender<Report>,
        zombies: Arc<AtomicUsize>,
    ) -> Instance {
        let instance = NEXT_INSTANCE.fetch_add(1, Ordering::Relaxed);
        // Drawn only in seeds that speak it, so that the others draw from
        // the simulation's rng exactly as before it existed.
        let v2 = params.txn_v2_percent > 0 && percent(params.txn_v2_percent);
        Instance {
            instance,
            params,
            shared,
            routes: Routes::new(format!("eos.{instance}"), brokers),
            session: None,
            claim: None,
            seqs: BTreeMap::new(),
            positions: None,
            backoff: Backoff::new(),
            zombie: false,
            v2,
            reports,
            zombies,
            drain_deadline: None,
            correlation: 0,
        }
    }

    fn violation(&self, what: String) {
        self.shared.eos().violation(format!(
            "EOS loop {EOS_TRANSACTIONAL_ID} instance {}: {what}",
            self.instance
        ));
    }

    /// The producers stopped and the drain deadline passed: records the
    /// liveness violation and says so.
    fn out_of_time(&mut self, doing: &str) -> bool {
        if !self.shared.stop_fetching.load(Ordering::Relaxed) {
            return false;
        }
        let d = *self
            .drain_deadline
            .get_or_insert_with(|| Instant::now() + DRAIN_DEADLINE);
        if Instant::now() < d {
            return false;
        }
        self.violation(format!(
            "liveness: still {doing} {DRAIN_DEADLINE:?} after the producers stopped"
        ));
        true
    }

    async fn request(
        &mut self,
        api_key: i16,
        version: i16,
        body: &RequestBody,
    ) -> Result<ResponseBody, RequestError> {
        // The group's requests go to the group's coordinator, the rest to
        // the transactional id's (Metadata to it too: any broker answers).
        let key = if api_key == offset_fetch_request::API_KEY
            || api_key == txn_offset_commit_request::API_KEY
        {
            (routes::KEY_GROUP, EOS_GROUP.to_string())
        } else {
            (routes::KEY_TRANSACTION, EOS_TRANSACTIONAL_ID.to_string())
        };
        let result = self
            .routes
            .ask_coordinator(&key, api_key, version, body, &self.shared)
            .await;
        if let Err(RequestError::Malformed(m)) = &result {
            self.violation(format!("malformed answer to api {api_key}: {m}"));
        }
        result
    }

    async fn run(mut self) {
        let report = match self.main().await {
            Step::Stalled => None,
            _ if self.zombie => {
                self.zombies.fetch_sub(1, Ordering::Relaxed);
                None
            }
            _ => Some(Report::Ended),
        };
        if let Some(r) = report {
            let _ = self.reports.send(r);
        }
    }

    async fn main(&mut self) -> Step {
        loop {
            if self.session.is_none() && !self.init().await {
                return Step::GaveUp;
            }
            if self.positions.is_none() && !self.resume().await {
                return Step::GaveUp;
            }
            let step = self.transaction().await;
            if self.zombie {
                return Step::Done;
            }
            match step {
                Step::Done if !self.shared.stop_fetching.load(Ordering::Relaxed) => {
                    // Time for input to pile up: fewer, larger
                    // transactions. (Once the input is final, the loop
                    // drains it without a pause.)
                    let think = thread_rng().gen_range(100..=300);
                    sleep(Duration::from_millis(think)).await;
                }
                Step::Done => {}
                Step::Idle => {}
                Step::Fenced => {
                    self.session = None;
                    self.claim = None;
                    self.positions = None;
                    let pause = thread_rng().gen_range(100..=1_000);
                    sleep(Duration::from_millis(pause)).await;
                }
                Step::Reinit => {
                    self.claim = self.session.take();
                    self.positions = None;
                }
                Step::Drained | Step::Stalled | Step::GaveUp => return step,
            }
        }
    }

    /// FindCoordinator and InitProducerId until granted; false if out of
    /// time.
    async fn init(&mut self) -> bool {
        let mut found = false;
        loop {
            if self.out_of_time("initializing") {
                return false;
            }
            if !found && self.routes.multi() {
                let key = (routes::KEY_TRANSACTION, EOS_TRANSACTIONAL_ID.to_string());
                found = match self.routes.find_coordinator(&key, &self.shared).await {
                    Ok(_) => true,
                    Err(RequestError::Malformed(m)) => {
                        self.violation(m);
                        false
                    }
                    Err(RequestError::Network(_)) => false,
                };
                if !found {
                    self.backoff.wait().await;
                    continue;
                }
            }
            if !found {
                let body = RequestBody::FindCoordinator(FindCoordinatorRequest {
                    key: EOS_TRANSACTIONAL_ID.into(),
                    key_type: 1,
                    ..Default::default()
                });
                found = matches!(
                    self.request(find_coordinator_request::API_KEY, FIND_COORDINATOR_VERSION, &body)
                        .await,
                    Ok(ResponseBody::FindCoordinator(r)) if r.error_code == 0
                );
                if !found {
                    self.backoff.wait().await;
                    continue;
                }
            }
            let (producer_id, producer_epoch) = self.claim.unwrap_or((-1, -1));
            let body = RequestBody::InitProducerId(InitProducerIdRequest {
                transactional_id: Some(EOS_TRANSACTIONAL_ID.into()),
                transaction_timeout_ms: self.params.eos_txn_timeout_ms,
                producer_id,
                producer_epoch,
                ..Default::default()
            });
            // The epoch rules of the transactional workload hold for this
            // id too: its grants go to that history.
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
                    tracing::debug!(
                        instance = self.instance,
                        pid = r.producer_id,
                        epoch = r.producer_epoch,
                        "EOS loop initialized"
                    );
                    self.shared.txns().granted(
                        EOS_TRANSACTIONAL_ID,
                        self.instance,
                        r.producer_id,
                        r.producer_epoch,
                        sent_at,
                    );
                    self.shared.eos().stats.inits += 1;
                    self.session = Some((r.producer_id, r.producer_epoch));
                    self.claim = None;
                    self.seqs.clear();
                    self.backoff.reset();
                    return true;
                }
                Ok(ResponseBody::InitProducerId(r)) if is_fence(r.error_code) => {
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

    /// Reads the committed positions back (require_stable) until no
    /// transaction owes offsets; false if out of time.
    async fn resume(&mut self) -> bool {
        let partitions: Vec<i32> = (0..self.params.partitions).collect();
        loop {
            if self.out_of_time("reading the committed offsets") {
                return false;
            }
            let sent_at = self.shared.eos().tick();
            let answer = self
                .request(
                    offset_fetch_request::API_KEY,
                    OFFSET_FETCH_VERSION,
                    &offset_fetch_body(&partitions, true),
                )
                .await;
            let fetched = match answer {
                Ok(ResponseBody::OffsetFetch(r)) => committed_offsets(&r),
                Ok(other) => {
                    self.violation(format!("OffsetFetch answered {other:?}"));
                    Err(-1)
                }
                Err(_) => Err(-1),
            };
            let offsets = match fetched {
                Ok(offsets) => offsets,
                Err(code) => {
                    if code == ErrorCode::UnstableOffsetCommit.code() {
                        self.shared.eos().stats.unstable += 1;
                    } else if code != -1 && !coordinator_busy(code) {
                        self.violation(format!("OffsetFetch(require_stable) failed with {code}"));
                    }
                    self.backoff.wait().await;
                    continue;
                }
            };
            let mut eos = self.shared.eos();
            for (&p, &o) in &offsets {
                eos.offset_read(p, o, sent_at);
            }
            if offsets.values().any(|&o| o > 0) {
                eos.stats.resumes += 1;
            }
            drop(eos);
            tracing::debug!(instance = self.instance, ?offsets, "EOS loop resumes");
            self.positions = Some(
                partitions
                    .iter()
                    .map(|&p| (p, offsets.get(&p).copied().unwrap_or(-1).max(0)))
                    .collect(),
            );
            self.backoff.reset();
            return true;
        }
    }

    /// Reads a batch of input and transforms it in one transaction.
    async fn transaction(&mut self) -> Step {
        let (Some((pid, epoch)), Some(positions)) = (self.session, self.positions.clone()) else {
            return Step::Reinit;
        };
        if self.out_of_time("draining its input") {
            return Step::GaveUp;
        }
        let inputs_final = self.shared.stop_fetching.load(Ordering::Relaxed);
        let Poll {
            batch,
            next,
            at_end,
            failed,
        } = self.poll(&positions).await;
        if batch.is_empty() {
            if inputs_final && at_end {
                return Step::Drained;
            }
            if failed {
                // The input topic does not exist yet, or the broker is
                // restarting.
                self.backoff.wait().await;
            }
            return Step::Idle;
        }
        let (commit, stall_at) = {
            let mut rng = thread_rng();
            let commit = rng.gen_range(0..100) >= self.params.eos_abort_percent;
            let churn = !self.shared.faults_over.load(Ordering::Relaxed) && !self.zombie;
            // Owed even after the faults: in some seeds every commit
            // comes after them (seed 55: the first commits were fenced).
            let owed = !self.zombie && self.resume_owed();
            let stall = owed || churn && rng.gen_range(0..100) < self.params.eos_stall_percent;
            (
                commit,
                stall.then(|| Stall {
                    at: rng.gen_range(0..3),
                    owed,
                }),
            )
        };
        let offsets: BTreeMap<i32, i64> = batch.keys().map(|p| (*p, next[p])).collect();
        let index = {
            let mut eos = self.shared.eos();
            for (&p, records) in &batch {
                eos.input_read(p, records);
            }
            eos.begin(EosTxn {
                instance: self.instance,
                producer_id: pid,
                epoch,
                inputs: batch
                    .iter()
                    .flat_map(|(&p, r)| r.iter().map(move |(o, _)| (p, *o)))
                    .collect(),
                offsets: offsets.clone(),
                end: TxnEnd::Open,
            })
        };
        tracing::debug!(
            instance = self.instance,
            index,
            ?offsets,
            commit,
            ?stall_at,
            "EOS transaction begins"
        );
        let partitions: Vec<i32> = batch.keys().copied().collect();
        if !self.v2 {
            if let Some(step) = self.add_partitions(index, pid, epoch, &partitions).await {
                return step;
            }
        }
        if let Some(step) = self.maybe_stall(stall_at, 0, index).await {
            return step;
        }
        for (&p, records) in &batch {
            let values: Vec<Bytes> = records
                .iter()
                .map(|(o, v)| output_value(p, *o, index, v))
                .collect();
            if let Some(step) = self.produce(index, pid, epoch, p, values).await {
                return step;
            }
        }
        if let Some(step) = self.maybe_stall(stall_at, 1, index).await {
            return step;
        }
        if !self.v2 {
            if let Some(step) = self.add_offsets(index, pid, epoch).await {
                return step;
            }
        }
        if let Some(step) = self.commit_offsets(index, pid, epoch, &offsets).await {
            return step;
        }
        if let Some(step) = self.maybe_stall(stall_at, 2, index).await {
            return step;
        }
        let step = self.end_txn(index, commit).await;
        if matches!(step, Step::Done) && commit {
            if let Some(positions) = self.positions.as_mut() {
                positions.extend(offsets);
            }
        }
        step
    }

    /// Reads input from `positions` as a consumer's poll does: fetches
    /// until one brings nothing new or every partition has
    /// [`MAX_RECORDS_PER_PARTITION`] (a fetch stops at the end of a
    /// segment, so with small segments one fetch is a handful of records).
    async fn poll(&mut self, positions: &BTreeMap<i32, i64>) -> Poll {
        let mut out = Poll {
            batch: BTreeMap::new(),
            next: positions.clone(),
            at_end: true,
            failed: false,
        };
        for round in 0..MAX_FETCHES_PER_POLL {
            // Only the first fetch waits for input to arrive.
            let wait = if round == 0 { 100 } else { 0 };
            let fetched = match self
                .routes
                .fetch_committed(EOS_INPUT_TOPIC, &out.next, wait, &self.shared)
                .await
            {
                Ok(f) => f,
                Err(e) => {
                    if let RequestError::Malformed(m) = e {
                        self.violation(format!("input fetch: {m}"));
                    }
                    out.at_end = false;
                    out.failed = round == 0;
                    break;
                }
            };
            if round == 0 && fetched.len() != positions.len() {
                out.at_end = false;
            }
            let mut progressed = false;
            for part in fetched {
                let Some(&at) = out.next.get(&part.partition) else {
                    continue;
                };
                if part.error_code != 0 {
                    out.at_end = false;
                    out.failed = true;
                    continue;
                }
                if let Some(v) = part.starved_violation(EOS_INPUT_TOPIC, Isolation::ReadCommitted) {
                    self.violation(v);
                }
                if round == 0 {
                    out.at_end &= part.records.is_empty() && at >= part.high_watermark;
                }
                let taken = out.batch.entry(part.partition).or_default();
                let room = MAX_RECORDS_PER_PARTITION - taken.len();
                taken.extend(part.records.into_iter().take(room));
                if let Some(&(last, _)) = taken.last() {
                    progressed |= last + 1 > at;
                    out.next.insert(part.partition, last + 1);
                }
            }
            let full = out
                .batch
                .values()
                .all(|b| b.len() >= MAX_RECORDS_PER_PARTITION);
            if !progressed || full {
                break;
            }
        }
        out.batch.retain(|_, b| !b.is_empty());
        out
    }

    /// At the drawn point, the instance stops mid-transaction: the next
    /// instance starts. Mostly it is gone for good (its transaction is the
    /// reaper's or the next instance's to abort); a zombie comes back after
    /// a pause and carries on.
    async fn maybe_stall(
        &mut self,
        stall_at: Option<Stall>,
        here: u32,
        index: EosTxnIndex,
    ) -> Option<Step> {
        let stall = stall_at.filter(|s| s.at == here)?;
        self.shared.eos().stats.stalls += 1;
        self.routes.disconnect_all();
        let zombie = percent(self.params.eos_zombie_percent) && !stall.owed;
        if zombie {
            self.zombie = true;
            self.zombies.fetch_add(1, Ordering::Relaxed);
            self.shared.eos().stats.zombies += 1;
        } else {
            self.shared.eos().end(index, TxnEnd::Abandoned);
        }
        tracing::debug!(
            instance = self.instance,
            index,
            here,
            zombie,
            "EOS instance stalls"
        );
        let _ = self.reports.send(Report::Stalled);
        if !zombie {
            return Some(Step::Stalled);
        }
        let pause = thread_rng().gen_range(0..=2 * self.params.eos_txn_timeout_ms as u64);
        sleep(Duration::from_millis(pause)).await;
        None
    }

    /// Enough transactions committed and no instance has resumed from
    /// committed offsets yet ([`RESUME_OWED_AFTER_COMMITS`]).
    fn resume_owed(&self) -> bool {
        let eos = self.shared.eos();
        eos.stats.resumes == 0 && eos.stats.commits_acked >= RESUME_OWED_AFTER_COMMITS
    }

    fn fenced(&mut self, index: EosTxnIndex) -> Step {
        self.shared.eos().end(index, TxnEnd::Fenced);
        Step::Fenced
    }

    async fn create_output_topic(&mut self) {
        let body = RequestBody::Metadata(MetadataRequest {
            topics: Some(vec![
                kaas_core::protocol::messages::metadata_request::MetadataRequestTopic {
                    name: Some(EOS_OUTPUT_TOPIC.into()),
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

    /// Sends a coordinator request until its error codes are all 0 (`None`)
    /// or it ends the transaction (`Some`): retriable ones are retried,
    /// UNKNOWN_TOPIC_OR_PARTITION creates the output topic first, a fence
    /// ends in [`Step::Fenced`], anything else is a violation and the
    /// instance aborts and re-initializes.
    async fn until_accepted(
        &mut self,
        index: EosTxnIndex,
        what: &str,
        api_key: i16,
        version: i16,
        body: &RequestBody,
        codes: fn(&ResponseBody) -> Option<Vec<i16>>,
    ) -> Option<Step> {
        loop {
            if self.out_of_time(what) {
                self.shared.eos().end(index, TxnEnd::Abandoned);
                return Some(Step::GaveUp);
            }
            let answer = self.request(api_key, version, body).await;
            let codes = match &answer {
                Ok(r) => match codes(r) {
                    Some(c) => c,
                    None => {
                        self.violation(format!("{what} answered {r:?}"));
                        vec![-1]
                    }
                },
                Err(_) => vec![-1],
            };
            if codes.iter().all(|&c| c == 0) {
                self.backoff.reset();
                return None;
            }
            if codes.iter().any(|&c| ends_identity(&self.params, c)) {
                return Some(self.fenced(index));
            }
            if codes
                .iter()
                .any(|&c| c == ErrorCode::UnknownTopicOrPartition.code())
            {
                self.create_output_topic().await;
            } else if !codes.iter().all(|&c| {
                c <= 0 || coordinator_retriable(c) || c == ErrorCode::OperationNotAttempted.code()
            }) {
                self.violation(format!("{what} refused with {codes:?}"));
                return Some(match self.end_txn(index, false).await {
                    Step::Done => Step::Reinit,
                    other => other,
                });
            }
            self.backoff.wait().await;
        }
    }

    async fn add_partitions(
        &mut self,
        index: EosTxnIndex,
        pid: i64,
        epoch: i16,
        partitions: &[i32],
    ) -> Option<Step> {
        use kaas_core::protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
        let body = RequestBody::AddPartitionsToTxn(AddPartitionsToTxnRequest {
            v3_and_below_transactional_id: EOS_TRANSACTIONAL_ID.into(),
            v3_and_below_producer_id: pid,
            v3_and_below_producer_epoch: epoch,
            v3_and_below_topics: vec![AddPartitionsToTxnTopic {
                name: EOS_OUTPUT_TOPIC.into(),
                partitions: partitions.to_vec(),
                ..Default::default()
            }],
            ..Default::default()
        });
        self.until_accepted(
            index,
            "AddPartitionsToTxn",
            add_partitions_to_txn_request::API_KEY,
            ADD_PARTITIONS_VERSION,
            &body,
            |r| match r {
                ResponseBody::AddPartitionsToTxn(r) => Some(
                    r.results_by_topic_v3_and_below
                        .iter()
                        .flat_map(|t| t.results_by_partition.iter())
                        .map(|p| p.partition_error_code)
                        .collect(),
                ),
                _ => None,
            },
        )
        .await
    }

    async fn add_offsets(&mut self, index: EosTxnIndex, pid: i64, epoch: i16) -> Option<Step> {
        let body = RequestBody::AddOffsetsToTxn(AddOffsetsToTxnRequest {
            transactional_id: EOS_TRANSACTIONAL_ID.into(),
            producer_id: pid,
            producer_epoch: epoch,
            group_id: EOS_GROUP.into(),
            ..Default::default()
        });
        self.until_accepted(
            index,
            "AddOffsetsToTxn",
            add_offsets_to_txn_request::API_KEY,
            ADD_OFFSETS_VERSION,
            &body,
            |r| match r {
                ResponseBody::AddOffsetsToTxn(r) => Some(vec![r.error_code]),
                _ => None,
            },
        )
        .await
    }

    async fn commit_offsets(
        &mut self,
        index: EosTxnIndex,
        pid: i64,
        epoch: i16,
        offsets: &BTreeMap<i32, i64>,
    ) -> Option<Step> {
        use kaas_core::protocol::messages::txn_offset_commit_request::{
            TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
        };
        let body = RequestBody::TxnOffsetCommit(TxnOffsetCommitRequest {
            transactional_id: EOS_TRANSACTIONAL_ID.into(),
            group_id: EOS_GROUP.into(),
            producer_id: pid,
            producer_epoch: epoch,
            // Not a group member: the form Kafka accepts for any group state.
            generation_id: -1,
            member_id: String::new(),
            group_instance_id: None,
            topics: vec![TxnOffsetCommitRequestTopic {
                name: EOS_INPUT_TOPIC.into(),
                partitions: offsets
                    .iter()
                    .map(|(&p, &o)| TxnOffsetCommitRequestPartition {
                        partition_index: p,
                        committed_offset: o,
                        committed_leader_epoch: -1,
                        committed_metadata: Some(String::new()),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }],
            ..Default::default()
        });
        self.until_accepted(
            index,
            "TxnOffsetCommit",
            txn_offset_commit_request::API_KEY,
            if self.v2 {
                TXN_OFFSET_COMMIT_VERSION_V2
            } else {
                TXN_OFFSET_COMMIT_VERSION
            },
            &body,
            |r| match r {
                ResponseBody::TxnOffsetCommit(r) => Some(
                    r.topics
                        .iter()
                        .flat_map(|t| t.partitions.iter())
                        .map(|p| p.error_code)
                        .collect(),
                ),
                _ => None,
            },
        )
        .await
    }

    /// One transactional batch of output, retried with the same bytes
    /// until acknowledged. `Some` ends the transaction.
    async fn produce(
        &mut self,
        index: EosTxnIndex,
        pid: i64,
        epoch: i16,
        partition: i32,
        values: Vec<Bytes>,
    ) -> Option<Step> {
        let seq = self.seqs.get(&partition).copied().unwrap_or(0);
        let count = values.len() as i32;
        let mut builder = BatchBuilder::transactional(pid, epoch, seq);
        let now = crate::env::wall_ms();
        for v in &values {
            builder.push(NewRecord::new(now, None, Some(v)));
        }
        let body = RequestBody::Produce(ProduceRequest {
            transactional_id: Some(EOS_TRANSACTIONAL_ID.into()),
            acks: -1,
            timeout_ms: PRODUCE_TIMEOUT_MS,
            topic_data: vec![produce_request::TopicProduceData {
                name: EOS_OUTPUT_TOPIC.into(),
                partition_data: vec![produce_request::PartitionProduceData {
                    index: partition,
                    records: Some(builder.build().into_bytes()),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        });
        self.correlation = self.correlation.wrapping_add(1);
        let correlation_id = self.correlation;
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
                self.shared.eos().end(index, TxnEnd::Abandoned);
                return Some(Step::GaveUp);
            }
            let sent = self
                .routes
                .produce(EOS_OUTPUT_TOPIC, partition, &frame, &self.shared)
                .await;
            let outcome = match sent {
                Ok(response) => {
                    decode_response(produce_request::API_KEY, version, correlation_id, response)
                        .map_err(RequestError::of)
                        .and_then(|b| produce_outcome(&b, EOS_OUTPUT_TOPIC, partition))
                }
                Err(e) => Err(e),
            };
            let code = match outcome {
                Ok((0, base_offset)) => {
                    self.seqs.insert(partition, seq.wrapping_add(count));
                    self.backoff.reset();
                    self.shared
                        .eos()
                        .output_acked(index, partition, base_offset, &values);
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
                    .partition_outcome(EOS_OUTPUT_TOPIC, Some(code), &self.shared);
            }
            if ends_identity(&self.params, code) {
                return Some(self.fenced(index));
            }
            if code == -1
                || retriable(code)
                || code == ErrorCode::NotEnoughReplicas.code()
                || code == ErrorCode::ConcurrentTransactions.code()
            {
                self.backoff.wait().await;
                continue;
            }
            // Refused for good (the transaction no longer open): abort and
            // re-initialize claiming the identity, as the Java client does
            // with an abortable error.
            tracing::debug!(
                instance = self.instance,
                index,
                partition,
                code,
                "EOS produce refused"
            );
            return Some(match self.end_txn(index, false).await {
                Step::Done => Step::Reinit,
                other => other,
            });
        }
    }

    /// EndTxn of the session's transaction until answered.
    async fn end_txn(&mut self, index: EosTxnIndex, commit: bool) -> Step {
        let Some((pid, epoch)) = self.session else {
            return Step::Reinit;
        };
        let body = RequestBody::EndTxn(EndTxnRequest {
            transactional_id: EOS_TRANSACTIONAL_ID.into(),
            producer_id: pid,
            producer_epoch: epoch,
            committed: commit,
            ..Default::default()
        });
        let unknown = if commit {
            TxnEnd::CommitUnknown
        } else {
            TxnEnd::AbortUnknown
        };
        // Whether an earlier attempt may have prepared the outcome.
        let mut maybe_applied = false;
        let step = loop {
            if self.out_of_time("ending a transaction") {
                self.shared.eos().end(index, unknown);
                break Step::GaveUp;
            }
            if commit {
                // The observer polls while a commit may become visible.
                self.shared.eos_committing.store(true, Ordering::Relaxed);
                self.shared.eos_commit_started.notify_one();
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
                        // Transaction version 2: continue with the identity
                        // answered, sequences from 0.
                        if !is_bumped_identity(pid, epoch, r.producer_id, r.producer_epoch) {
                            self.violation(format!(
                                "EndTxn v5 of {pid}/{epoch} answered {}/{}, not a bumped epoch",
                                r.producer_id, r.producer_epoch
                            ));
                        }
                        self.session = Some((r.producer_id, r.producer_epoch));
                        self.seqs.clear();
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
                tracing::debug!(
                    instance = self.instance,
                    index,
                    ?end,
                    "EOS transaction ended"
                );
                self.shared.eos().end(index, end);
                self.backoff.reset();
                break Step::Done;
            }
            if ends_identity(&self.params, code) {
                self.shared.eos().end(
                    index,
                    if maybe_applied {
                        unknown
                    } else {
                        TxnEnd::Fenced
                    },
                );
                break Step::Fenced;
            }
            if self.v2 && commit && code == ErrorCode::InvalidTxnState.code() {
                // Version 2's answer to a commit whose transaction was
                // aborted under it (see `crate::txn`): as the Java client,
                // give up this instance.
                self.shared.eos().end(index, TxnEnd::Fenced);
                break Step::Fenced;
            }
            if code == -1 || coordinator_retriable(code) {
                maybe_applied = true;
                self.backoff.wait().await;
                continue;
            }
            self.violation(format!(
                "EndTxn({}) of {pid}/{epoch} refused with error {code}",
                if commit { "commit" } else { "abort" }
            ));
            self.shared.eos().end(index, unknown);
            break Step::Reinit;
        };
        self.shared.eos_committing.store(false, Ordering::Relaxed);
        step
    }
}
