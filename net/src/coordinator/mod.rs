//! The group coordinator driver: runs `kaas_core::group::Coordinator` with
//! real time, real waiting and the real volume.
//!
//! - One mutex guards the core state; it is never held across an await.
//! - A parked JoinGroup/SyncGroup waits on a oneshot channel keyed by its
//!   waiter token; the core's effects complete those channels.
//! - One timer task sleeps until the core's next deadline (or until a
//!   request may have created an earlier one) and then ticks the core; it
//!   also runs offset retention every `offsets_retention_check_interval_ms`.
//! - Slot changes are queued per slot and written by the shared slot store
//!   (`crate::slot_store`): one writer per slot applies everything queued
//!   to a copy of the slot, writes it once (tmp + fsync + rename) and only
//!   then installs it and answers the requests that waited: many concurrent
//!   commits cost one fsync, and no reader ever sees an offset a crash
//!   could take back.
//!
//! Slots move between brokers (docs/cluster.md): the ownership round serves
//! a slot here by loading its file (`MovingSlots::serve`) and lets it go by
//! forgetting it (`MovingSlots::unserve`); every operation checks, under the
//! lock, that its group's slot is served here, so nothing is decided or
//! queued for a slot another broker may already coordinate.
//!
//! Live membership is in memory; each completed generation's members are
//! written to the slot (the leader's SyncGroup answers wait for that write,
//! as Kafka's wait for the group's record), so after a restart a group
//! comes back Stable and its members carry on in their generation.

#[cfg(test)]
mod tests;

use crate::cluster::Membership;
use crate::env::Env;
use crate::slot_store::{
    self, wait_written, Claimed, CoordinatorSlot, MovingSlots, Round, RoundOutcome, SlotFile,
    SlotOwner, SlotQueues, WriteDone,
};
use crate::volume::Volume;
use kaas_core::cluster::{check_slot_access, coordinator_slot, Claim, ClusterView};
use kaas_core::group::coordinator::{
    CommitRequest, FetchedOffset, GroupDescription, ListedGroup, Output,
};
use kaas_core::group::{
    Coordinator, Effect, GroupConfig, JoinError, JoinRequest, JoinResult, JoinedGroup, SlotOp,
    SlotState, SyncRequest, SyncResult, Waiter,
};
use kaas_core::layout::{group_slot_epoch_file, GROUP_STATE_DIR};
use kaas_core::protocol::ErrorCode;
use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;
use tokio::sync::{oneshot, Notify};

/// The longest the timer task sleeps without looking again (it also notices
/// a dropped coordinator this way).
const MAX_TIMER_SLEEP_MS: i64 = 10_000;

struct Inner {
    core: Coordinator,
    joins: HashMap<Waiter, oneshot::Sender<JoinResult>>,
    syncs: HashMap<Waiter, oneshot::Sender<SyncResult>>,
    queues: SlotQueues<SlotOp>,
}

/// What a JoinGroup waits for once the lock is released.
enum Parked {
    /// Its answer from the core.
    Join(oneshot::Receiver<JoinResult>),
    /// The write of the answer it already has.
    Written(JoinedGroup, oneshot::Receiver<Result<(), ErrorCode>>),
}

pub struct GroupCoordinator {
    inner: Mutex<Inner>,
    volume: Arc<dyn Volume>,
    env: Env,
    /// This broker's lease: background work acts only while it holds.
    membership: Arc<Membership>,
    /// Who this broker is, for the ownership gate.
    view: ClusterView,
    /// Wakes the timer task after a request that may have set an earlier
    /// deadline.
    wake: Arc<Notify>,
    next_waiter: AtomicU64,
}

impl GroupCoordinator {
    /// A coordinator serving no slot yet (the ownership round serves them,
    /// see [`MovingSlots`]), with its timer task started. Must run inside
    /// the runtime.
    pub fn open(
        volume: Arc<dyn Volume>,
        env: Env,
        membership: Arc<Membership>,
        config: GroupConfig,
    ) -> io::Result<Arc<GroupCoordinator>> {
        volume.create_dir_all(GROUP_STATE_DIR)?;
        let retention_every = config.offsets_retention_check_interval_ms;
        let coordinator = Arc::new(GroupCoordinator {
            inner: Mutex::new(Inner {
                core: Coordinator::new(config, -1),
                joins: HashMap::new(),
                syncs: HashMap::new(),
                queues: SlotQueues::new(),
            }),
            volume,
            env,
            view: ClusterView::single(membership.broker_id()),
            membership,
            wake: Arc::new(Notify::new()),
            next_waiter: AtomicU64::new(1),
        });
        tokio::spawn(run_timers(
            Arc::downgrade(&coordinator),
            coordinator.wake.clone(),
            retention_every,
        ));
        Ok(coordinator)
    }

    /// The newest claim known on slot `slot`: this broker's while it serves
    /// the slot, else the one the last ownership round read (the ownership
    /// gate and FindCoordinator ask).
    pub fn slot_claim(&self, slot: u32) -> Option<Claim> {
        self.lock().queues.claim(slot)
    }

    /// Whether this broker may act for `slot` now: it serves the slot and
    /// its lease holds. Background work (offset and group expiry) asks, as
    /// requests ask through `Broker::group_coordinator`.
    fn holds(&self, inner: &Inner, slot: u32) -> bool {
        inner
            .queues
            .serving(slot)
            .is_some_and(|claim| check_slot_access(&self.view, slot, claim).is_ok())
            && self.membership.may_act(self.env.clock.monotonic_ms())
    }

    /// NOT_COORDINATOR unless the slot of `group_id` is served here. Asked
    /// under the lock by every operation: the ownership gate was passed
    /// before the lock was taken, and the slot may have been let go of
    /// since.
    fn served(inner: &Inner, group_id: &str) -> Result<(), ErrorCode> {
        match inner.queues.serving(coordinator_slot(group_id)) {
            Some(_) => Ok(()),
            None => Err(ErrorCode::NotCoordinator),
        }
    }

    /// Answers parked requests as the core decided.
    /// Stops serving `slot` (its newest claim now `newest`): its groups are
    /// unloaded, their waiters answered, and what is queued for it answered
    /// NOT_COORDINATOR.
    fn let_go(inner: &mut Inner, slot: u32, newest: Option<Claim>) {
        let mut out = Output::default();
        inner.core.unload_slot(slot, &mut out);
        Self::answer(inner, out.effects);
        inner.queues.unserve(slot, newest);
    }

    fn answer(inner: &mut Inner, effects: Vec<Effect>) {
        for effect in effects {
            match effect {
                Effect::Join { waiter, result } => {
                    if let Some(tx) = inner.joins.remove(&waiter) {
                        let _ = tx.send(result);
                    }
                }
                Effect::Sync { waiter, result } => {
                    if let Some(tx) = inner.syncs.remove(&waiter) {
                        let _ = tx.send(result);
                    }
                }
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn waiter(&self) -> Waiter {
        self.next_waiter.fetch_add(1, Ordering::Relaxed)
    }

    /// Carries out what a core call asked for: answers parked requests,
    /// queues slot ops and starts writers. `done` is told once everything
    /// queued so far for its slot is durable.
    fn finish(
        self: &Arc<Self>,
        inner: &mut Inner,
        out: Output,
        done: Option<(u32, WriteDone)>,
        from_request: bool,
    ) {
        Self::answer(inner, out.effects);
        let mut touched = Vec::new();
        let stored = out.stored;
        for (slot, op) in out.ops {
            if let SlotOp::Meta { group, meta } = &op {
                tracing::debug!(%group, generation = meta.generation, empty = meta.empty_since_ms.is_some(), "group changed");
            }
            if inner.queues.push_op(slot, op) {
                touched.push(slot);
            }
        }
        if let Some((slot, tx)) = done {
            if inner.queues.push_done(slot, tx) {
                touched.push(slot);
            }
        }
        for s in stored {
            // The core waits to hear how the generation's write ended.
            let (tx, rx) = oneshot::channel();
            if inner.queues.push_done(s.slot, tx) {
                touched.push(s.slot);
            }
            let this = self.clone();
            tokio::spawn(async move {
                let outcome = wait_written(rx).await;
                let mut inner = this.lock();
                let mut out = Output::default();
                let now = this.env.now_ms();
                inner
                    .core
                    .stable_written(&s.group, s.generation, outcome, now, &mut out);
                this.finish(&mut inner, out, None, true);
            });
        }
        for slot in touched {
            if inner.queues.claim_writer(slot) {
                tokio::spawn(slot_store::run_writer(self.clone(), slot));
            }
        }
        if from_request {
            self.wake.notify_one();
        }
    }

    /// JoinGroup; waits while the request is parked.
    pub async fn join(self: &Arc<Self>, group_id: &str, req: JoinRequest) -> JoinResult {
        let waiter = self.waiter();
        let (rx, member_id) = {
            let mut inner = self.lock();
            if let Err(code) = Self::served(&inner, group_id) {
                return Err(JoinError::new(req.member_id, code));
            }
            let (tx, rx) = oneshot::channel();
            inner.joins.insert(waiter, tx);
            let mut out = Output::default();
            let member_id = req.member_id.clone();
            let immediate = inner
                .core
                .join(group_id, req, waiter, self.env.now_ms(), &mut out);
            if immediate.is_some() {
                inner.joins.remove(&waiter);
            }
            match immediate {
                // A static member took its place back under a new member
                // id: answer once that id is durable, or a restart would
                // fence the new incarnation with the stored old one.
                Some(Ok(joined)) if !out.stored.is_empty() => {
                    let (tx, written) = oneshot::channel();
                    let slot = coordinator_slot(group_id);
                    self.finish(&mut inner, out, Some((slot, tx)), true);
                    (Parked::Written(joined, written), String::new())
                }
                Some(r) => {
                    self.finish(&mut inner, out, None, true);
                    return r;
                }
                None => {
                    self.finish(&mut inner, out, None, true);
                    (Parked::Join(rx), member_id)
                }
            }
        };
        match rx {
            Parked::Written(joined, written) => match wait_written(written).await {
                Ok(()) => Ok(joined),
                Err(e) => Err(JoinError::new(joined.member_id, e)),
            },
            // A parked request is always answered by the core; a dropped
            // sender would mean its group vanished, and the client should
            // start over.
            Parked::Join(rx) => rx
                .await
                .unwrap_or_else(|_| Err(JoinError::new(member_id, ErrorCode::RebalanceInProgress))),
        }
    }

    /// SyncGroup; waits for the leader's assignment.
    pub async fn sync(self: &Arc<Self>, group_id: &str, req: SyncRequest) -> SyncResult {
        let waiter = self.waiter();
        let rx = {
            let mut inner = self.lock();
            Self::served(&inner, group_id)?;
            let (tx, rx) = oneshot::channel();
            inner.syncs.insert(waiter, tx);
            let mut out = Output::default();
            let immediate = inner.core.sync(group_id, req, waiter, &mut out);
            if immediate.is_some() {
                inner.syncs.remove(&waiter);
            }
            self.finish(&mut inner, out, None, true);
            match immediate {
                Some(r) => return r,
                None => rx,
            }
        };
        rx.await.unwrap_or(Err(ErrorCode::RebalanceInProgress))
    }

    pub fn heartbeat(
        self: &Arc<Self>,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
    ) -> Result<(), ErrorCode> {
        let mut inner = self.lock();
        Self::served(&inner, group_id)?;
        let mut out = Output::default();
        let outcome = inner.core.heartbeat(
            group_id,
            member_id,
            instance_id,
            generation,
            self.env.now_ms(),
            &mut out,
        );
        self.finish(&mut inner, out, None, false);
        outcome
    }

    /// LeaveGroup: one outcome per member, or a group-level error.
    pub fn leave(
        self: &Arc<Self>,
        group_id: &str,
        members: &[(String, Option<String>)],
    ) -> Result<Vec<Result<(), ErrorCode>>, ErrorCode> {
        let mut inner = self.lock();
        Self::served(&inner, group_id)?;
        let mut out = Output::default();
        let result = inner
            .core
            .leave(group_id, members, self.env.now_ms(), &mut out);
        self.finish(&mut inner, out, None, true);
        result
    }

    /// OffsetCommit: one outcome per offset (or a group-level error),
    /// answered once the accepted offsets are durable.
    pub async fn commit_offsets(
        self: &Arc<Self>,
        req: CommitRequest,
    ) -> Result<Vec<Result<(), ErrorCode>>, ErrorCode> {
        self.write_offsets(&req.group_id, |core, now, out| {
            core.commit_offsets(&req, now, out)
        })
        .await
    }

    /// TxnOffsetCommit: like [`commit_offsets`](Self::commit_offsets), but
    /// the accepted offsets are staged under the producer's transaction,
    /// durable before the answer and invisible until `complete_txn`.
    ///
    /// `verify` (is the group in the producer's ongoing transaction?) is
    /// asked under this coordinator's lock, in the same step that queues
    /// the offsets: the transaction's `complete_txn`, queued only after
    /// its end was decided (and `verify` then fails), always comes after
    /// them, so no staged offsets outlive their transaction.
    ///
    /// `verified_at`: for a transaction coordinator on another broker,
    /// asked before this call, the [`txn_completion_mark`](Self::txn_completion_mark)
    /// taken before the question (`kaas_core::group::txn_completions`).
    pub async fn stage_txn_offsets(
        self: &Arc<Self>,
        req: CommitRequest,
        producer_id: i64,
        producer_epoch: i16,
        verified_at: Option<u64>,
        verify: impl FnOnce() -> Result<(), ErrorCode>,
    ) -> Result<Vec<Result<(), ErrorCode>>, ErrorCode> {
        self.write_offsets(&req.group_id, |core, now, out| {
            verify()?;
            core.stage_txn_offsets(&req, producer_id, producer_epoch, verified_at, now, out)
        })
        .await
    }

    /// Taken before a TxnOffsetCommit asks a remote transaction
    /// coordinator (see [`stage_txn_offsets`](Self::stage_txn_offsets)).
    pub fn txn_completion_mark(&self) -> u64 {
        self.lock().core.txn_completion_mark()
    }

    /// Runs an offset-writing decision under the lock and answers once what
    /// it accepted is durable: an accepted offset counts only once written,
    /// and a failed write is its answer instead.
    async fn write_offsets(
        self: &Arc<Self>,
        group_id: &str,
        decide: impl FnOnce(
            &mut Coordinator,
            i64,
            &mut Output,
        ) -> Result<Vec<Result<(), ErrorCode>>, ErrorCode>,
    ) -> Result<Vec<Result<(), ErrorCode>>, ErrorCode> {
        let slot = coordinator_slot(group_id);
        let (outcomes, rx) = {
            let mut inner = self.lock();
            Self::served(&inner, group_id)?;
            let mut out = Output::default();
            let result = decide(&mut inner.core, self.env.now_ms(), &mut out);
            let outcomes = match result {
                Ok(outcomes) if !out.ops.is_empty() => outcomes,
                other => {
                    self.finish(&mut inner, out, None, false);
                    return other;
                }
            };
            let (tx, rx) = oneshot::channel();
            self.finish(&mut inner, out, Some((slot, tx)), false);
            (outcomes, rx)
        };
        let written = wait_written(rx).await;
        Ok(outcomes.into_iter().map(|o| o.and(written)).collect())
    }

    /// The transaction of `producer_id` ended and its markers are durable:
    /// its staged offsets for `group_id` are committed (or dropped), and
    /// this returns once that is durable. Repeating it is harmless.
    pub async fn complete_txn(
        self: &Arc<Self>,
        group_id: &str,
        producer_id: i64,
        commit: bool,
    ) -> Result<(), ErrorCode> {
        let rx = {
            let mut inner = self.lock();
            // Not served here: the staged offsets are another broker's to
            // complete, and the transaction is not complete until they
            // are, so its completion fails and is retried.
            Self::served(&inner, group_id)?;
            let mut out = Output::default();
            let now = self.env.now_ms();
            // Always one op, queued behind any staging still being
            // written (`Coordinator::complete_txn` in core); it costs no write
            // where it finds nothing to complete.
            inner
                .core
                .complete_txn(group_id, producer_id, commit, now, &mut out);
            let (tx, rx) = oneshot::channel();
            self.finish(
                &mut inner,
                out,
                Some((coordinator_slot(group_id), tx)),
                false,
            );
            rx
        };
        wait_written(rx).await
    }

    /// OffsetFetch of one group (`topics`: `None` for all).
    pub fn fetch_offsets(
        &self,
        group_id: &str,
        topics: Option<&[(String, Vec<i32>)]>,
        require_stable: bool,
    ) -> Result<Vec<(String, Vec<FetchedOffset>)>, ErrorCode> {
        // A slot let go of has no offsets in memory: answering from it
        // would tell the consumer nothing is committed.
        let inner = self.lock();
        Self::served(&inner, group_id)?;
        Ok(inner.core.fetch_offsets(group_id, topics, require_stable))
    }

    pub fn describe_group(&self, group_id: &str) -> Result<Option<GroupDescription>, ErrorCode> {
        let inner = self.lock();
        Self::served(&inner, group_id)?;
        Ok(inner.core.describe_group(group_id))
    }

    pub fn list_groups(
        &self,
        states_filter: &[String],
        types_filter: &[String],
    ) -> Vec<ListedGroup> {
        self.lock().core.list_groups(states_filter, types_filter)
    }

    /// DeleteGroups: one outcome per group, answered once the deletions are
    /// durable.
    pub async fn delete_groups(
        self: &Arc<Self>,
        group_ids: &[String],
    ) -> Vec<Result<(), ErrorCode>> {
        let mut pending = Vec::with_capacity(group_ids.len());
        {
            let mut inner = self.lock();
            for id in group_ids {
                if let Err(code) = Self::served(&inner, id) {
                    pending.push((Err(code), None));
                    continue;
                }
                let mut out = Output::default();
                let outcome = inner.core.delete_group(id, self.env.now_ms(), &mut out);
                let rx = if out.ops.is_empty() {
                    self.finish(&mut inner, out, None, false);
                    None
                } else {
                    let (tx, rx) = oneshot::channel();
                    self.finish(&mut inner, out, Some((coordinator_slot(id), tx)), false);
                    Some(rx)
                };
                pending.push((outcome, rx));
            }
        }
        let mut outcomes = Vec::with_capacity(pending.len());
        for (outcome, rx) in pending {
            outcomes.push(match rx {
                // A deletion counts only once written: a failed write is
                // the answer instead.
                Some(rx) => wait_written(rx).await.and(outcome),
                None => outcome,
            });
        }
        outcomes
    }

    /// OffsetDelete: one outcome per partition or a group-level error,
    /// answered once the deletion is durable.
    pub async fn delete_offsets(
        self: &Arc<Self>,
        group_id: &str,
        partitions: &[(String, i32)],
    ) -> Result<Vec<Result<(), ErrorCode>>, ErrorCode> {
        let (outcomes, rx) = {
            let mut inner = self.lock();
            Self::served(&inner, group_id)?;
            let mut out = Output::default();
            let outcomes = match inner.core.delete_offsets(group_id, partitions, &mut out) {
                Ok(outcomes) if !out.ops.is_empty() => outcomes,
                other => {
                    self.finish(&mut inner, out, None, false);
                    return other;
                }
            };
            let (tx, rx) = oneshot::channel();
            self.finish(
                &mut inner,
                out,
                Some((coordinator_slot(group_id), tx)),
                false,
            );
            (outcomes, rx)
        };
        wait_written(rx).await?;
        Ok(outcomes)
    }

    /// Applies due timeouts (and retention when it is time); returns when
    /// the timer should look again.
    fn on_timer(
        self: &Arc<Self>,
        now_ms: i64,
        next_retention_ms: &mut i64,
        retention_every_ms: i64,
    ) -> i64 {
        let mut inner = self.lock();
        let mut out = Output::default();
        inner.core.tick(now_ms, &mut out);
        if now_ms >= *next_retention_ms {
            inner.core.expire_offsets(now_ms, &mut out);
            // Expiry is background work: it writes only slots this broker
            // holds at this moment (served here, lease in force).
            let inner_ref: &Inner = &inner;
            out.ops.retain(|(slot, _)| self.holds(inner_ref, *slot));
            *next_retention_ms = now_ms + retention_every_ms.max(1);
        }
        self.finish(&mut inner, out, None, false);
        let next = inner.core.next_deadline_ms().unwrap_or(i64::MAX);
        next.min(*next_retention_ms)
            .min(now_ms + MAX_TIMER_SLEEP_MS)
    }
}

/// Group slot files written by the shared slot store.
impl SlotFile for SlotState {
    type Op = SlotOp;

    fn apply(&mut self, op: &SlotOp) -> bool {
        SlotState::apply(self, op)
    }

    fn bump_version(&mut self) {
        self.version += 1;
    }

    fn version(&self) -> u64 {
        self.version
    }

    fn encode(&self) -> io::Result<Vec<u8>> {
        SlotState::encode(self).map_err(io::Error::other)
    }
}

/// Undoes what a round that was not written changed in memory, and says
/// what its requests are told. Deletions already forgot their groups in
/// memory; the slot still has their offsets, so they come back.
fn refuse_round(core: &mut Coordinator, slot: u32, now: i64) -> ErrorCode {
    if let Some(current) = core.slot(slot).cloned() {
        core.install_slot(current, now);
    }
    // As Kafka answers when its log append fails on storage: the client
    // looks up the coordinator again and retries.
    ErrorCode::NotCoordinator
}

impl CoordinatorSlot for SlotState {
    const STATE_DIR: &'static str = GROUP_STATE_DIR;

    fn claim_file(slot: u32, epoch: i32) -> String {
        group_slot_epoch_file(slot, epoch)
    }

    fn decode_slot(bytes: &[u8], slot: u32) -> Result<SlotState, String> {
        SlotState::decode(bytes, slot).map_err(|e| e.to_string())
    }

    fn empty(slot: u32, coordinator_epoch: i32) -> SlotState {
        SlotState::new(slot, coordinator_epoch)
    }

    fn set_coordinator_epoch(&mut self, epoch: i32) {
        self.coordinator_epoch = epoch;
    }
}

impl SlotOwner for GroupCoordinator {
    type File = SlotState;

    fn take_round(&self, slot: u32) -> Option<Round<SlotState>> {
        let mut inner = self.lock();
        let state = inner.core.slot(slot).cloned()?;
        Some(inner.queues.take(slot)?.into_round(state))
    }

    fn finish_round(
        &self,
        slot: u32,
        incarnation: u64,
        outcome: RoundOutcome<SlotState>,
    ) -> Result<(), ErrorCode> {
        let mut inner = self.lock();
        if !inner.queues.is_current(slot, incarnation) {
            // Let go of while writing: whatever reached the volume is the
            // next owner's to load; nothing here may count on it.
            return Err(ErrorCode::NotCoordinator);
        }
        let now = self.env.now_ms();
        match outcome {
            RoundOutcome::Unchanged => Ok(()),
            RoundOutcome::Written(state) => {
                inner.core.install_slot(state, now);
                Ok(())
            }
            RoundOutcome::Failed(e) => {
                tracing::error!(slot, error = %e, "cannot write group slot file; its changes are refused");
                Err(refuse_round(&mut inner.core, slot, now))
            }
            RoundOutcome::Deposed => {
                tracing::warn!(
                    slot,
                    "a successor claimed the group slot: its changes are refused and it is let go of"
                );
                let refused = refuse_round(&mut inner.core, slot, now);
                // Let go of at once, not at the ownership round's next
                // pass: an answer from memory (a heartbeat, an OffsetFetch)
                // would speak for state the successor may have changed
                // since (simulator seed 682, on a transaction slot).
                Self::let_go(&mut inner, slot, None);
                Err(refused)
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

impl MovingSlots for GroupCoordinator {
    fn serving(&self, slot: u32) -> Option<Claim> {
        self.lock().queues.serving(slot)
    }

    fn serve(&self, slot: u32, claimed: Claimed<SlotState>) {
        let mut inner = self.lock();
        let groups = claimed.state.groups.len();
        inner.core.install_slot(claimed.state, self.env.now_ms());
        inner.queues.serve(slot, claimed.claim, claimed.journal);
        if groups > 0 {
            tracing::info!(
                slot,
                groups,
                epoch = claimed.claim.epoch,
                "recovered committed offsets"
            );
        }
        drop(inner);
        // Restored members' sessions run from now: the timer looks again.
        self.wake.notify_one();
    }

    fn unserve(&self, slot: u32, newest: Option<Claim>) {
        Self::let_go(&mut self.lock(), slot, newest);
    }

    fn follow(&self, slot: u32, newest: Option<Claim>) {
        self.lock().queues.follow(slot, newest);
    }

    fn writing(&self, slot: u32) -> bool {
        self.lock().queues.writing(slot)
    }
}

async fn run_timers(
    coordinator: Weak<GroupCoordinator>,
    wake: Arc<Notify>,
    retention_every_ms: i64,
) {
    // The first retention pass runs one interval after startup, as Kafka's
    // cleanup task does.
    let mut next_retention_ms = match coordinator.upgrade() {
        Some(c) => c.env.now_ms() + retention_every_ms.max(1),
        None => return,
    };
    loop {
        let Some(c) = coordinator.upgrade() else {
            return;
        };
        let now = c.env.now_ms();
        let next = c.on_timer(now, &mut next_retention_ms, retention_every_ms);
        drop(c);
        let sleep_ms = (next - now).max(1) as u64;
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(sleep_ms)) => {}
            _ = wake.notified() => {}
        }
    }
}
