//! The transaction coordinator driver: runs the rules of `kaas_core::txn`
//! against the transaction slot files, with real time and the real volume.
//!
//! - The slot views hold exactly what the slot files say. A decision is
//!   made on the durable entry, queued as a [`TxnSlotOp`] and written by the
//!   shared slot store (`crate::slot_store`): concurrent decisions on one
//!   slot (many producers' EndTxns) cost one fsync, and the request is
//!   answered only once its entry is durable.
//! - While an id's decision is being written, another request for the same
//!   id is answered CONCURRENT_TRANSACTIONS (the producer retries), as Kafka
//!   answers during a pending transition. So every decision is made on a
//!   durable entry and a failed write needs no undo.
//! - Completing a prepared transaction (markers, then offsets, then the
//!   Complete* entry) is `completion`'s work; at most one task completes
//!   one id at a time.
//! - One timer task runs the reaper and the marker reconcile every
//!   `abort_timed_out_interval_ms`, and expiry every
//!   `remove_expired_interval_ms` (`timers`).
//!
//! - Slots move between brokers (docs/cluster.md): the ownership round
//!   serves a slot by loading its file and lets it go by forgetting it
//!   (`MovingSlots`); a decision checks under the lock that its slot is
//!   served here. A slot taken over is completed by the timers like one
//!   recovered at start: its prepared transactions at the next pass, its
//!   ongoing ones once they time out.
//!
//! The mutex is never held across an await.

pub mod completion;
#[cfg(test)]
mod tests;
mod timers;

pub use completion::complete;
pub use timers::run_timers;

use crate::cluster::Membership;
use crate::env::Env;
use crate::slot_store::{
    self, wait_written, Claimed, CoordinatorSlot, Durability, MovingSlots, Round, RoundOutcome,
    SlotFile, SlotOwner, SlotQueues,
};
use crate::volume::Volume;
use kaas_core::cluster::{
    check_slot_access, coordinator_slot, Claim, ClusterView, COORDINATOR_SLOTS,
};
use kaas_core::coverage::{self, Mark};
use kaas_core::deliberate_bugs::{planted, Bug};
use kaas_core::layout::{txn_slot_epoch_file, TXN_STATE_DIR};
use kaas_core::protocol::ErrorCode;
use kaas_core::txn::rules::{self, epoch_is_exhausted};
use kaas_core::txn::{
    Claim as ProducerClaim, End, Init, TxnConfig, TxnEntry, TxnSlotOp, TxnSlotState,
};
use std::collections::{HashMap, HashSet};
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::oneshot;

struct Inner {
    /// The durable state of every slot, as last written (empty for a slot
    /// not served here).
    slots: Vec<TxnSlotState>,
    queues: SlotQueues<TxnSlotOp>,
    /// Ids whose next entry is being written, and what decided it.
    writing: HashMap<String, Decider>,
    /// Ids whose prepared transaction a task is completing.
    completing: HashSet<String>,
}

pub struct TxnCoordinator {
    inner: Mutex<Inner>,
    volume: Arc<dyn Volume>,
    env: Env,
    config: TxnConfig,
    /// This broker's lease: background work acts only while it holds.
    membership: Arc<Membership>,
    view: ClusterView,
}

/// What made a decision on a transactional id. While one is written, a
/// second on the same id is turned away; which two met is what the
/// simulator's coverage marks count ([`mark_race`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decider {
    InitProducerId,
    AddToTransaction,
    EndTxn,
    Reaper,
    Completion,
}

/// Counts the races docs/transactions.md lists between the reaper and a
/// producer's request: `turned_away` found `busy` being written.
fn mark_race(turned_away: Decider, busy: Decider) {
    use Decider::{EndTxn, InitProducerId, Reaper};
    match (turned_away, busy) {
        (Reaper, InitProducerId) | (InitProducerId, Reaper) => {
            coverage::hit(Mark::ReaperRacedAnInitProducerId)
        }
        (Reaper, EndTxn) | (EndTxn, Reaper) => coverage::hit(Mark::ReaperRacedAnEndTxn),
        _ => {}
    }
}

/// An InitProducerId's answer: the identity to hand out, or a transaction
/// that must be aborted first (its prepared entry, to complete).
pub enum InitOutcome {
    Ready {
        producer_id: i64,
        producer_epoch: i16,
    },
    AbortFirst(TxnEntry),
}

impl TxnCoordinator {
    /// A coordinator serving no slot yet (the ownership round serves them,
    /// see [`MovingSlots`]).
    pub fn open(
        volume: Arc<dyn Volume>,
        env: Env,
        membership: Arc<Membership>,
        config: TxnConfig,
    ) -> io::Result<Arc<TxnCoordinator>> {
        volume.create_dir_all(TXN_STATE_DIR)?;
        Ok(Arc::new(TxnCoordinator {
            inner: Mutex::new(Inner {
                slots: (0..COORDINATOR_SLOTS)
                    .map(|slot| TxnSlotState::new(slot, -1))
                    .collect(),
                queues: SlotQueues::new(),
                writing: HashMap::new(),
                completing: HashSet::new(),
            }),
            volume,
            env,
            config,
            view: ClusterView::single(membership.broker_id()),
            membership,
        }))
    }

    pub fn config(&self) -> &TxnConfig {
        &self.config
    }

    /// The newest claim known on slot `slot`: this broker's while it serves
    /// the slot, else the one the last ownership round read (the ownership
    /// gate and FindCoordinator ask).
    pub fn slot_claim(&self, slot: u32) -> Option<Claim> {
        self.lock().queues.claim(slot)
    }

    /// Whether this broker may act for `slot` now: it serves the slot and
    /// its lease holds (background work asks, as requests ask through
    /// `Broker::txn_coordinator`).
    fn holds(&self, inner: &Inner, slot: u32) -> bool {
        inner
            .queues
            .serving(slot)
            .is_some_and(|claim| check_slot_access(&self.view, slot, claim).is_ok())
            && self.membership.may_act(self.env.clock.monotonic_ms())
    }

    /// Whether this broker may act for the slot of `transactional_id` now
    /// (a completion asks before each step).
    pub fn holds_id(&self, transactional_id: &str) -> bool {
        let inner = self.lock();
        self.holds(&inner, coordinator_slot(transactional_id))
    }

    /// The coordinator epoch markers of `transactional_id` carry: the
    /// claim this broker serves its slot at (-1 if it does not).
    pub fn coordinator_epoch(&self, transactional_id: &str) -> i32 {
        self.lock()
            .queues
            .serving(coordinator_slot(transactional_id))
            .map_or(-1, |c| c.epoch)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The durable entry of `transactional_id` (`None` also when its slot
    /// is not served here: the handlers ask behind the ownership gate).
    pub fn entry(&self, transactional_id: &str) -> Option<TxnEntry> {
        let inner = self.lock();
        entry_in(&inner, transactional_id).cloned()
    }

    /// Every durable entry of the slots this broker holds now (a slot
    /// served since the last call included).
    pub fn entries(&self) -> Vec<TxnEntry> {
        let inner = self.lock();
        inner
            .slots
            .iter()
            .filter(|s| self.holds(&inner, s.slot))
            .flat_map(|s| s.entries.values().cloned())
            .collect()
    }

    /// Decides on the durable entry of `id` with `decide`, which returns the
    /// entry to persist (if any) and the answer; persists it and returns the
    /// answer once the entry is durable. While another decision on `id` is
    /// being written: CONCURRENT_TRANSACTIONS.
    async fn decide<T>(
        self: &Arc<Self>,
        id: &str,
        by: Decider,
        decide: impl FnOnce(Option<&TxnEntry>) -> Result<(Option<TxnEntry>, T), ErrorCode>,
    ) -> Result<T, ErrorCode> {
        self.decide_with(id, by, Durability::Synced, decide).await
    }

    /// [`Self::decide`], answering once the entry is written as `durability`
    /// says.
    async fn decide_with<T>(
        self: &Arc<Self>,
        id: &str,
        by: Decider,
        durability: Durability,
        decide: impl FnOnce(Option<&TxnEntry>) -> Result<(Option<TxnEntry>, T), ErrorCode>,
    ) -> Result<T, ErrorCode> {
        let slot = coordinator_slot(id);
        let (rx, answer) = {
            let mut inner = self.lock();
            // The ownership gate was passed before the lock was taken; the
            // slot may have been let go of since.
            if inner.queues.serving(slot).is_none() {
                return Err(ErrorCode::NotCoordinator);
            }
            if let Some(&busy) = inner.writing.get(id) {
                mark_race(by, busy);
                return Err(ErrorCode::ConcurrentTransactions);
            }
            let (next, answer) = decide(entry_in(&inner, id))?;
            let Some(next) = next else {
                return Ok(answer);
            };
            let (tx, rx) = oneshot::channel();
            match durability {
                Durability::Synced => {
                    inner.queues.push_op(slot, TxnSlotOp::Put(next));
                    inner.queues.push_done(slot, tx);
                }
                Durability::Deferred => {
                    inner.queues.push_deferred(slot, TxnSlotOp::Put(next), tx);
                }
            }
            inner.writing.insert(id.to_string(), by);
            if inner.queues.claim_writer(slot) {
                tokio::spawn(slot_store::run_writer(self.clone(), slot));
            }
            (rx, answer)
        };
        let written = wait_written(rx).await;
        self.lock().writing.remove(id);
        written.map(|()| answer)
    }

    /// Whether InitProducerId for `id` will need a fresh producer id (a new
    /// id, or an exhausted epoch): the handler draws one before deciding,
    /// as drawing may write the producer id block.
    pub fn needs_fresh_producer_id(&self, id: &str) -> bool {
        self.entry(id)
            .is_none_or(|e| epoch_is_exhausted(e.producer_epoch))
    }

    /// Whether EndTxn v5 for `id` may move it to a fresh producer id (its
    /// epoch is exhausted); an unknown id draws none.
    pub fn end_may_rotate(&self, id: &str) -> bool {
        self.entry(id)
            .is_some_and(|e| epoch_is_exhausted(e.producer_epoch))
    }

    /// InitProducerId with a transactional id (KIP-98, KIP-360). `fresh`:
    /// a producer id drawn beforehand, if one may be needed.
    pub async fn init_producer_id(
        self: &Arc<Self>,
        id: &str,
        timeout_ms: i32,
        claim: Option<ProducerClaim>,
        fresh: Option<i64>,
    ) -> Result<InitOutcome, ErrorCode> {
        rules::validate_transaction_timeout(timeout_ms, self.config.max_timeout_ms)?;
        let now = self.env.now_ms();
        self.decide(id, Decider::InitProducerId, |entry| {
            let mut fresh = fresh;
            let init = rules::init_producer_id(
                entry,
                id,
                timeout_ms,
                claim,
                || fresh.take().unwrap_or(-1),
                now,
            )?;
            match init {
                Init::Ready(next) if next.producer_id < 0 => {
                    // The entry changed since the handler asked whether a
                    // fresh id was needed: the producer retries.
                    let _ = next;
                    Err(ErrorCode::ConcurrentTransactions)
                }
                Init::Ready(next) => {
                    let answer = InitOutcome::Ready {
                        producer_id: next.producer_id,
                        producer_epoch: next.producer_epoch,
                    };
                    Ok((Some(next), answer))
                }
                Init::AbortFirst(next) => Ok((Some(next.clone()), InitOutcome::AbortFirst(next))),
            }
        })
        .await
    }

    /// AddPartitionsToTxn / AddOffsetsToTxn.
    pub async fn add_to_transaction(
        self: &Arc<Self>,
        id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &[(String, i32)],
        groups: &[String],
    ) -> Result<(), ErrorCode> {
        let now = self.env.now_ms();
        self.decide(id, Decider::AddToTransaction, |entry| {
            let entry = entry.ok_or(ErrorCode::InvalidProducerIdMapping)?;
            let next = rules::add_to_transaction(
                entry,
                producer_id,
                producer_epoch,
                partitions,
                groups,
                now,
            )?;
            Ok((next, ()))
        })
        .await
    }

    /// AddPartitionsToTxn with VerifyOnly, and the verification of a
    /// transactional Produce (KIP-890 part 1): has the ongoing transaction
    /// of `id` added this partition? Memory only.
    pub fn verify(
        &self,
        id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partition: &(String, i32),
    ) -> Result<(), ErrorCode> {
        let inner = self.lock();
        if inner.queues.serving(coordinator_slot(id)).is_none() {
            return Err(ErrorCode::NotCoordinator);
        }
        let verified =
            rules::verify_partition(entry_in(&inner, id), producer_id, producer_epoch, partition);
        match verified {
            // Not in the durable entry, but a decision being written may
            // be the one that adds it: the producer retries. (One in the
            // durable entry is safe to accept whatever is being written:
            // the transaction's marker can only follow this batch.)
            Err(_) if inner.writing.contains_key(id) => Err(ErrorCode::ConcurrentTransactions),
            other => other,
        }
    }

    /// TxnOffsetCommit's check: has the ongoing transaction of `id` added
    /// `group`? Memory only.
    pub fn verify_group(
        &self,
        id: &str,
        producer_id: i64,
        producer_epoch: i16,
        group: &str,
    ) -> Result<(), ErrorCode> {
        let inner = self.lock();
        if inner.queues.serving(coordinator_slot(id)).is_none() {
            return Err(ErrorCode::NotCoordinator);
        }
        if inner.writing.contains_key(id) {
            return Err(ErrorCode::ConcurrentTransactions);
        }
        rules::verify_group(entry_in(&inner, id), producer_id, producer_epoch, group)
    }

    /// EndTxn: the prepared entry to complete, once it is durable, or
    /// `None` for a retry of an EndTxn that already completed; and the
    /// producer's identity after it (transaction version 2 bumps the
    /// epoch at every end: `v2`, EndTxn v5).
    /// `fresh`: a producer id drawn beforehand for EndTxn v5 at an
    /// exhausted epoch (see [`Self::end_may_rotate`]).
    #[allow(clippy::too_many_arguments)]
    pub async fn end_txn(
        self: &Arc<Self>,
        id: &str,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
        v2: bool,
        fresh: Option<i64>,
    ) -> Result<(Option<TxnEntry>, (i64, i16)), ErrorCode> {
        let now = self.env.now_ms();
        self.decide(id, Decider::EndTxn, |entry| {
            let entry = entry.ok_or(ErrorCode::InvalidProducerIdMapping)?;
            let end = if v2 {
                let mut fresh = fresh;
                let fresh = || fresh.take().unwrap_or(-1);
                rules::end_txn_v2(entry, producer_id, producer_epoch, commit, fresh, now)
            } else {
                rules::end_txn(entry, producer_id, producer_epoch, commit, now)
            };
            let end = end.inspect_err(|_| {
                if rules::was_aborted_under(entry, producer_id, producer_epoch) {
                    coverage::hit(Mark::EndTxnOfATransactionAbortedUnderItRefused);
                }
            })?;
            match end {
                End::Prepare(next)
                    if v2
                        && epoch_is_exhausted(entry.producer_epoch)
                        && next.next_producer_id < 0 =>
                {
                    // Only EndTxn v5 moves to a fresh producer id; the
                    // entry changed since the handler asked whether one was
                    // needed: the producer retries.
                    Err(ErrorCode::ConcurrentTransactions)
                }
                End::Prepare(next) => {
                    let identity = next.continues_as();
                    Ok((Some(next.clone()), (Some(next), identity)))
                }
                End::AlreadyComplete => {
                    Ok((None, (None, (entry.producer_id, entry.producer_epoch))))
                }
            }
        })
        .await
    }

    /// The reaper's abort of a transaction past its timeout: the fenced,
    /// prepared entry to complete, or `None` if the transaction moved on
    /// since it was found.
    pub async fn abort_timed_out(
        self: &Arc<Self>,
        found: &TxnEntry,
    ) -> Result<Option<TxnEntry>, ErrorCode> {
        let now = self.env.now_ms();
        let id = &found.transactional_id;
        self.decide(id, Decider::Reaper, |entry| match entry {
            Some(e)
                if rules::has_timed_out(e, now)
                    && e.producer_id == found.producer_id
                    && e.producer_epoch == found.producer_epoch =>
            {
                let mut next = rules::fence_and_abort(e, now);
                if planted(Bug::ReaperKeepsTheEpoch) {
                    next.producer_epoch = e.producer_epoch;
                }
                Ok((Some(next.clone()), Some(next)))
            }
            Some(e) => {
                if (e.producer_id, e.producer_epoch) != (found.producer_id, found.producer_epoch) {
                    coverage::hit(Mark::ReaperFoundTheEpochBumpedSinceItsPass);
                }
                Ok((None, None))
            }
            None => Ok((None, None)),
        })
        .await
    }

    /// Persists Complete* for a prepared transaction whose markers and
    /// offsets are durable. Nothing to do if the entry is no longer that
    /// prepared transaction (another completer finished it).
    pub async fn finish_prepared(self: &Arc<Self>, prepared: &TxnEntry) -> Result<(), ErrorCode> {
        let now = self.env.now_ms();
        let id = &prepared.transactional_id;
        self.decide_with(
            id,
            Decider::Completion,
            Durability::Deferred,
            |entry| match entry {
                Some(e)
                    if e.state == prepared.state
                        && e.producer_id == prepared.producer_id
                        && e.producer_epoch == prepared.producer_epoch =>
                {
                    Ok((rules::complete(e, now), ()))
                }
                _ => Ok((None, ())),
            },
        )
        .await
    }

    /// Marks `id` as being completed; false if a task already is.
    pub fn begin_completion(&self, id: &str) -> bool {
        self.lock().completing.insert(id.to_string())
    }

    pub fn end_completion(&self, id: &str) {
        self.lock().completing.remove(id);
    }

    /// Queues the expiry of every idle id past `transactional.id.expiration.ms`
    /// in the slots this broker holds; returns how many.
    pub fn expire(self: &Arc<Self>, now_ms: i64) -> usize {
        let mut inner = self.lock();
        let mut expired = Vec::new();
        for s in &inner.slots {
            if !self.holds(&inner, s.slot) {
                continue;
            }
            for e in s.entries.values() {
                if rules::has_expired(e, now_ms, self.config.id_expiration_ms)
                    && !inner.writing.contains_key(&e.transactional_id)
                {
                    expired.push((s.slot, e.transactional_id.clone(), e.last_update_ms));
                }
            }
        }
        for (slot, transactional_id, last_update_ms) in &expired {
            inner.queues.push_op(
                *slot,
                TxnSlotOp::Expire {
                    transactional_id: transactional_id.clone(),
                    last_update_ms: *last_update_ms,
                },
            );
            if inner.queues.claim_writer(*slot) {
                tokio::spawn(slot_store::run_writer(self.clone(), *slot));
            }
        }
        expired.len()
    }
}

fn entry_in<'a>(inner: &'a Inner, id: &str) -> Option<&'a TxnEntry> {
    inner
        .slots
        .get(coordinator_slot(id) as usize)
        .and_then(|s| s.entries.get(id))
}

impl CoordinatorSlot for TxnSlotState {
    const STATE_DIR: &'static str = TXN_STATE_DIR;

    fn claim_file(slot: u32, epoch: i32) -> String {
        txn_slot_epoch_file(slot, epoch)
    }

    fn decode_slot(bytes: &[u8], slot: u32) -> Result<TxnSlotState, String> {
        TxnSlotState::decode(bytes, slot).map_err(|e| e.to_string())
    }

    fn empty(slot: u32, coordinator_epoch: i32) -> TxnSlotState {
        TxnSlotState::new(slot, coordinator_epoch)
    }

    fn set_coordinator_epoch(&mut self, epoch: i32) {
        self.coordinator_epoch = epoch;
    }
}

/// Transaction slot files written by the shared slot store.
impl SlotFile for TxnSlotState {
    type Op = TxnSlotOp;

    fn apply(&mut self, op: &TxnSlotOp) -> bool {
        TxnSlotState::apply(self, op)
    }

    fn bump_version(&mut self) {
        self.version += 1;
    }

    fn version(&self) -> u64 {
        self.version
    }

    fn encode(&self) -> io::Result<Vec<u8>> {
        TxnSlotState::encode(self).map_err(io::Error::other)
    }
}

/// Stops serving `slot` (its newest claim now `newest`): its entries are
/// forgotten and what is queued for it answered NOT_COORDINATOR.
fn let_go(inner: &mut Inner, slot: u32, newest: Option<Claim>) {
    if let Some(s) = inner.slots.get_mut(slot as usize) {
        *s = TxnSlotState::new(slot, -1);
    }
    inner.queues.unserve(slot, newest);
}

impl SlotOwner for TxnCoordinator {
    type File = TxnSlotState;

    fn take_round(&self, slot: u32) -> Option<Round<TxnSlotState>> {
        let mut inner = self.lock();
        let state = inner.slots.get(slot as usize).cloned()?;
        Some(inner.queues.take(slot)?.into_round(state))
    }

    fn finish_round(
        &self,
        slot: u32,
        incarnation: u64,
        outcome: RoundOutcome<TxnSlotState>,
    ) -> Result<(), ErrorCode> {
        let mut inner = self.lock();
        if !inner.queues.is_current(slot, incarnation) {
            // Let go of while writing: whatever reached the volume is the
            // next owner's to load; nothing here may count on it.
            return Err(ErrorCode::NotCoordinator);
        }
        match outcome {
            RoundOutcome::Unchanged => Ok(()),
            RoundOutcome::Written(state) => {
                if let Some(s) = inner.slots.get_mut(slot as usize) {
                    *s = state;
                }
                Ok(())
            }
            RoundOutcome::Failed(e) => {
                tracing::error!(slot, error = %e, "cannot write transaction slot file; its changes are refused");
                // Nothing was installed, so nothing to undo. The client
                // looks the coordinator up again and retries.
                Err(ErrorCode::NotCoordinator)
            }
            RoundOutcome::Deposed => {
                tracing::warn!(
                    slot,
                    "a successor claimed the transaction slot: its changes are refused and it is let go of"
                );
                // Let go of at once, not at the ownership round's next
                // pass: an answer from memory (AddPartitionsToTxn of a
                // partition already added, a retried EndTxn) would speak
                // for state the successor may have changed since
                // (simulator seed 682).
                let_go(&mut inner, slot, None);
                Err(ErrorCode::NotCoordinator)
            }
        }
    }

    fn volume(&self) -> &Arc<dyn Volume> {
        &self.volume
    }

    fn env(&self) -> &Env {
        &self.env
    }
}

impl MovingSlots for TxnCoordinator {
    fn serving(&self, slot: u32) -> Option<Claim> {
        self.lock().queues.serving(slot)
    }

    fn serve(&self, slot: u32, claimed: Claimed<TxnSlotState>) {
        let mut inner = self.lock();
        let ids = claimed.state.entries.len();
        if let Some(s) = inner.slots.get_mut(slot as usize) {
            *s = claimed.state;
            inner.queues.serve(slot, claimed.claim, claimed.journal);
        }
        if ids > 0 {
            tracing::info!(
                slot,
                transactional_ids = ids,
                epoch = claimed.claim.epoch,
                "recovered transaction state"
            );
        }
    }

    fn unserve(&self, slot: u32, newest: Option<Claim>) {
        let_go(&mut self.lock(), slot, newest);
    }

    fn follow(&self, slot: u32, newest: Option<Claim>) {
        self.lock().queues.follow(slot, newest);
    }

    fn writing(&self, slot: u32) -> bool {
        self.lock().queues.writing(slot)
    }
}
