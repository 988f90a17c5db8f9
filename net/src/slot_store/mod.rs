//! Group commit for coordinator slot files, shared by the two coordinators
//! that keep their state in `slot-<N>` files (consumer groups and
//! transactions; one snapshot and journal per coordinator epoch, see
//! [`claimed`]).
//!
//! Changes to a slot are queued, under the owner's lock, as ops together
//! with the requests waiting for them to be durable. One writer task per
//! slot drains the queue: each round takes everything queued so far,
//! applies it to a copy of the slot's durable state, writes the file once
//! (tmp + fsync + rename, on the IO runner, off the async workers), and
//! only then hands the copy back to the owner to install and answers the
//! waiting requests. Ops queued during a write go into the next round, so
//! many concurrent changes cost one fsync, and no reader ever sees a state
//! a crash could take back. A round's write is an append to the slot's
//! journal (see [`journal`]), not a replace of its file.
//!
//! Slots move between brokers (docs/cluster.md): the queues also record
//! which slots this broker serves, at which claim, and who else holds the
//! rest. A slot is served from [`SlotQueues::serve`] (its state loaded with
//! [`load_claimed`]) until [`SlotQueues::unserve`]: from then on nothing is
//! queued for it, whatever was queued is answered NOT_COORDINATOR, and a
//! round already writing is answered NOT_COORDINATOR too (its incarnation
//! is no longer the slot's), so no write of a slot this broker let go of
//! is ever acknowledged. Nor is one made durable after another broker
//! claimed the slot's next epoch ([`RoundOutcome::Deposed`]).

pub mod claimed;
pub mod journal;

use crate::buggify::Site;
use crate::env::{Env, IoKind};
use crate::volume::Volume;
pub use claimed::{load_claimed, Claimed};
pub use journal::{load, Journal, Loaded};
use kaas_core::cluster::{Claim, COORDINATOR_SLOTS};
use kaas_core::protocol::ErrorCode;
use std::io;
use std::sync::Arc;
use tokio::sync::oneshot;

/// The durable state of one slot, as written to its file.
pub trait SlotFile: Clone + Send + 'static {
    type Op: Send + 'static;
    /// Applies `op`; whether the state changed (an unchanged state is not
    /// written).
    fn apply(&mut self, op: &Self::Op) -> bool;
    /// Called once before a changed state is written: the file's version
    /// counter moves on.
    fn bump_version(&mut self);
    /// The file's version counter: which of two states is newer.
    fn version(&self) -> u64;
    fn encode(&self) -> io::Result<Vec<u8>>;
}

/// A coordinator's slot file (groups', transactions'): where slot `n`
/// lives and how it is read, so loading a claimed slot is one function for
/// both coordinators.
pub trait CoordinatorSlot: SlotFile {
    /// The directory of this kind's slot files (`kaas_core::layout`), one
    /// snapshot and one journal per slot and coordinator epoch.
    const STATE_DIR: &'static str;
    /// The file claiming coordinator epoch `epoch` of slot `slot`.
    fn claim_file(slot: u32, epoch: i32) -> String;
    /// Decodes slot `slot`'s snapshot or journal record.
    fn decode_slot(bytes: &[u8], slot: u32) -> Result<Self, String>;
    /// A slot never written, held at `coordinator_epoch`.
    fn empty(slot: u32, coordinator_epoch: i32) -> Self;
    /// The coordinator epoch written into the slot with every change.
    fn set_coordinator_epoch(&mut self, epoch: i32);
}

/// What a writer reports to a request waiting for its slot's write.
pub type WriteDone = oneshot::Sender<Result<(), ErrorCode>>;

/// Waits for a slot write; a writer that went away counts as a failed
/// write, answered as a storage failure at a coordinator is answered.
pub async fn wait_written(rx: oneshot::Receiver<Result<(), ErrorCode>>) -> Result<(), ErrorCode> {
    rx.await.unwrap_or(Err(ErrorCode::NotCoordinator))
}

/// The queued ops and waiting requests of every slot, and which slots are
/// served here. Lives inside the owner's lock, so ops are queued in the
/// order the owner decided them, and a slot cannot be let go of between a
/// request's check that it is served and the queuing of its change.
pub struct SlotQueues<Op> {
    queues: Vec<SlotQueue<Op>>,
}

struct SlotQueue<Op> {
    ops: Vec<Op>,
    done: Vec<WriteDone>,
    /// How the next round is written: synced unless everything queued for
    /// it was queued as deferred.
    durability: Durability,
    /// A writer task is running for this slot.
    writing: bool,
    /// Served here: the claim held and the journal rounds append to.
    served: Option<(Claim, Journal)>,
    /// The newest claim read while not served here (another broker's, a
    /// release's, or none).
    elsewhere: Option<Claim>,
    /// Moves on whenever the slot is served or let go of: a round taken
    /// under an older one belongs to a serving that is over.
    incarnation: u64,
}

/// What a round's waiters are told to wait for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// The round is synced before its waiters hear of it: the usual case.
    Synced,
    /// The round is appended, and synced by the slot's next synced round
    /// (a sync of the journal covers every append before it). Only for a
    /// change that a crash may take back because something else redoes it:
    /// a transaction's Complete*, which the reconcile writes again from
    /// the durable Prepare* after a restart (docs/transactions.md,
    /// "Complete* without its own sync"). A round is deferred only if
    /// everything in it was queued deferred ([`SlotQueues::push_deferred`]).
    Deferred,
}

/// One round of a slot's writer: what was queued, and the durable state it
/// applies to.
pub struct Round<F: SlotFile> {
    pub ops: Vec<F::Op>,
    pub done: Vec<WriteDone>,
    pub state: F,
    pub journal: Journal,
    /// The slot's incarnation when the round was taken (see
    /// [`SlotQueues::is_current`]).
    pub incarnation: u64,
    pub durability: Durability,
}

/// What a round takes from a slot's queue.
pub struct Taken<Op> {
    pub ops: Vec<Op>,
    pub done: Vec<WriteDone>,
    pub journal: Journal,
    pub incarnation: u64,
    pub durability: Durability,
}

impl<Op> Default for SlotQueues<Op> {
    fn default() -> Self {
        SlotQueues::new()
    }
}

impl<Op> SlotQueues<Op> {
    /// One queue per coordinator slot, none served yet.
    pub fn new() -> SlotQueues<Op> {
        SlotQueues {
            queues: (0..COORDINATOR_SLOTS)
                .map(|_| SlotQueue {
                    ops: Vec::new(),
                    done: Vec::new(),
                    durability: Durability::Deferred,
                    writing: false,
                    served: None,
                    elsewhere: None,
                    incarnation: 0,
                })
                .collect(),
        }
    }

    /// Serves `slot` at `claim`, its rounds appending to `journal`.
    pub fn serve(&mut self, slot: u32, claim: Claim, journal: Journal) {
        if let Some(q) = self.queues.get_mut(slot as usize) {
            q.served = Some((claim, journal));
            q.elsewhere = None;
            q.incarnation += 1;
        }
    }

    /// Stops serving `slot` (its newest claim is now `newest`): what is
    /// queued is dropped and its waiters answered NOT_COORDINATOR, and a
    /// round being written will be answered the same.
    pub fn unserve(&mut self, slot: u32, newest: Option<Claim>) {
        if let Some(q) = self.queues.get_mut(slot as usize) {
            q.served = None;
            q.elsewhere = newest;
            q.incarnation += 1;
            q.ops.clear();
            for tx in q.done.drain(..) {
                let _ = tx.send(Err(ErrorCode::NotCoordinator));
            }
        }
    }

    /// Records `newest` as the claim of a slot not served here.
    pub fn follow(&mut self, slot: u32, newest: Option<Claim>) {
        if let Some(q) = self.queues.get_mut(slot as usize) {
            if q.served.is_none() {
                q.elsewhere = newest;
            }
        }
    }

    /// The claim this broker serves `slot` at, if it does.
    pub fn serving(&self, slot: u32) -> Option<Claim> {
        self.queues
            .get(slot as usize)
            .and_then(|q| q.served.as_ref().map(|(c, _)| *c))
    }

    /// The newest claim known on `slot`: this broker's while it serves it.
    pub fn claim(&self, slot: u32) -> Option<Claim> {
        let q = self.queues.get(slot as usize)?;
        q.served.as_ref().map(|(c, _)| *c).or(q.elsewhere)
    }

    /// Whether a writer task still runs for `slot` (a round of it may be
    /// writing the slot's journal).
    pub fn writing(&self, slot: u32) -> bool {
        self.queues.get(slot as usize).is_some_and(|q| q.writing)
    }

    /// Whether a round taken at `incarnation` still belongs to the slot's
    /// current serving.
    pub fn is_current(&self, slot: u32, incarnation: u64) -> bool {
        self.queues
            .get(slot as usize)
            .is_some_and(|q| q.served.is_some() && q.incarnation == incarnation)
    }

    /// Queues `op` for `slot`; false (and the op is dropped) for a slot not
    /// served here.
    pub fn push_op(&mut self, slot: u32, op: Op) -> bool {
        match self.queues.get_mut(slot as usize) {
            Some(q) if q.served.is_some() => {
                q.ops.push(op);
                q.durability = Durability::Synced;
                true
            }
            _ => false,
        }
    }

    /// Queues `op` for `slot` with its waiter `done`, told once the op is
    /// written but perhaps not yet synced: the round is appended without a
    /// sync unless something else queued for it needs one, and the slot's
    /// next synced round makes it durable (see [`Durability::Deferred`]).
    /// False (and NOT_COORDINATOR) for a slot not served here.
    pub fn push_deferred(&mut self, slot: u32, op: Op, done: WriteDone) -> bool {
        match self.queues.get_mut(slot as usize) {
            Some(q) if q.served.is_some() => {
                q.ops.push(op);
                q.done.push(done);
                true
            }
            _ => {
                let _ = done.send(Err(ErrorCode::NotCoordinator));
                false
            }
        }
    }

    /// `done` is told once everything queued so far for `slot` is durable;
    /// at once NOT_COORDINATOR (and false) for a slot not served here.
    pub fn push_done(&mut self, slot: u32, done: WriteDone) -> bool {
        match self.queues.get_mut(slot as usize) {
            Some(q) if q.served.is_some() => {
                q.done.push(done);
                q.durability = Durability::Synced;
                true
            }
            _ => {
                let _ = done.send(Err(ErrorCode::NotCoordinator));
                false
            }
        }
    }

    /// Marks `slot` as having a writer; true if the caller must start one
    /// (none was running).
    pub fn claim_writer(&mut self, slot: u32) -> bool {
        match self.queues.get_mut(slot as usize) {
            Some(q) if !q.writing => {
                q.writing = true;
                true
            }
            _ => false,
        }
    }

    /// Takes everything queued for `slot`, or `None` (and the writer
    /// stops) when nothing is, or the slot is not served here.
    pub fn take(&mut self, slot: u32) -> Option<Taken<Op>> {
        let q = self.queues.get_mut(slot as usize)?;
        let journal = match &q.served {
            Some((_, journal)) if !(q.ops.is_empty() && q.done.is_empty()) => journal.clone(),
            _ => {
                q.writing = false;
                return None;
            }
        };
        Some(Taken {
            ops: std::mem::take(&mut q.ops),
            done: std::mem::take(&mut q.done),
            journal,
            incarnation: q.incarnation,
            durability: std::mem::replace(&mut q.durability, Durability::Deferred),
        })
    }
}

impl<Op> Taken<Op> {
    /// The round that applies what was taken to `state`, the slot's
    /// durable state.
    pub fn into_round<F: SlotFile<Op = Op>>(self, state: F) -> Round<F> {
        Round {
            ops: self.ops,
            done: self.done,
            state,
            journal: self.journal,
            incarnation: self.incarnation,
            durability: self.durability,
        }
    }
}

/// How a round ended.
pub enum RoundOutcome<F> {
    /// Nothing queued changed the state: nothing was written.
    Unchanged,
    /// This state is durable.
    Written(F),
    /// The write failed: the file is as it was.
    Failed(io::Error),
    /// The write is durable, but a successor claimed the slot's next epoch
    /// meanwhile and may not have read it: it must not be acknowledged
    /// (nor installed), and this broker no longer coordinates the slot.
    Deposed,
}

/// The coordinator that owns slot states: lends a round, takes it back.
/// Both calls run under the owner's own lock.
pub trait SlotOwner: Send + Sync + 'static {
    type File: SlotFile;
    /// The slot's next round: its queue and current durable state; `None`
    /// when the queue is drained (the writer then stops).
    fn take_round(&self, slot: u32) -> Option<Round<Self::File>>;
    /// The round's outcome: a written state is durable and is installed;
    /// after a failed write, whatever the owner already changed in memory
    /// for the round must be undone. Returns what the waiting requests are
    /// told.
    /// A round taken at an `incarnation` that is no longer the slot's (it
    /// was let go of meanwhile) must install nothing and answer
    /// NOT_COORDINATOR.
    fn finish_round(
        &self,
        slot: u32,
        incarnation: u64,
        outcome: RoundOutcome<Self::File>,
    ) -> Result<(), ErrorCode>;
    fn volume(&self) -> &Arc<dyn Volume>;
    fn env(&self) -> &Env;
}

/// A coordinator whose slots move between brokers: the ownership round
/// (`Broker::reconcile`) drives these.
pub trait MovingSlots: SlotOwner
where
    Self::File: CoordinatorSlot,
{
    /// The claim this broker serves `slot` at, if it does.
    fn serving(&self, slot: u32) -> Option<Claim>;
    /// Starts serving a slot loaded for a claim held here.
    fn serve(&self, slot: u32, claimed: Claimed<Self::File>);
    /// Stops serving `slot` at once: its requests and waiters are answered
    /// NOT_COORDINATOR from now on and its state leaves memory. `newest`
    /// is the slot's newest claim, for FindCoordinator.
    fn unserve(&self, slot: u32, newest: Option<Claim>);
    /// Records the newest claim of a slot served elsewhere.
    fn follow(&self, slot: u32, newest: Option<Claim>);
    /// Whether a writer of `slot` still runs.
    fn writing(&self, slot: u32) -> bool;
}

/// Waits until no writer of `slot` runs: after [`MovingSlots::unserve`],
/// once this returns, nothing of this broker writes the slot's files any
/// more, so they may be handed over (released) or loaded again. Polls,
/// since a round ends on the IO runner.
pub async fn writer_stopped<O: MovingSlots>(owner: &O, slot: u32)
where
    O::File: CoordinatorSlot,
{
    while owner.writing(slot) {
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
}

/// The writer task of one slot: rounds until the queue is drained.
pub async fn run_writer<O: SlotOwner>(owner: Arc<O>, slot: u32) {
    while let Some(Round {
        ops,
        done,
        mut state,
        journal,
        incarnation,
        durability,
    }) = owner.take_round(slot)
    {
        let mut changed = false;
        for op in &ops {
            changed |= state.apply(op);
        }
        let outcome = if changed {
            state.bump_version();
            match write(owner.as_ref(), &journal, &state, durability).await {
                Ok(Written::Alone) => RoundOutcome::Written(state),
                Ok(Written::Deposed) => RoundOutcome::Deposed,
                Err(e) => RoundOutcome::Failed(e),
            }
        } else {
            RoundOutcome::Unchanged
        };
        let result = owner.finish_round(slot, incarnation, outcome);
        for tx in done {
            let _ = tx.send(result);
        }
    }
}

/// A durable write, and whether the slot's epoch was still the newest
/// after it.
enum Written {
    Alone,
    Deposed,
}

async fn write<O: SlotOwner>(
    owner: &O,
    journal: &Journal,
    state: &O::File,
    durability: Durability,
) -> io::Result<Written> {
    let bytes = state.encode()?;
    owner.env().buggify.at(Site::SlotStateWrite).await?;
    let volume = owner.volume().clone();
    let journal = journal.clone();
    // A deferred round is an append to the page cache, done in place like
    // a partition's append; a synced one, or one that replaces the
    // snapshot, waits on the disk, off the async workers.
    let kind = match durability {
        Durability::Deferred if journal.would_append(bytes.len()) => IoKind::Append,
        _ => IoKind::Fsync,
    };
    owner
        .env()
        .blocking(kind, move || {
            journal.write(volume.as_ref(), &bytes, durability)?;
            if durability == Durability::Deferred {
                // Not asked: what a deferred round writes may be lost
                // anyway, and is redone from the durable state by whoever
                // serves the slot next, so acknowledging it after a
                // successor claimed the slot promises nothing the
                // successor must keep. The next synced round asks.
                return Ok(Written::Alone);
            }
            // The last word before acknowledging (one failed lookup per
            // round, on the IO runner with the sync it follows).
            Ok(if journal.deposed(volume.as_ref())? {
                kaas_core::coverage::hit(
                    kaas_core::coverage::Mark::DeposedWriterAcknowledgedNothing,
                );
                Written::Deposed
            } else {
                Written::Alone
            })
        })
        .await
}

/// A coordinator serving every slot at epoch 0 for `broker_id`, as a
/// broker alone on its volume does (coordinator tests).
#[cfg(test)]
pub(crate) fn serve_all<O: MovingSlots>(owner: &O, broker_id: i32)
where
    O::File: CoordinatorSlot,
{
    for slot in 0..COORDINATOR_SLOTS {
        let claim = Claim {
            broker_id,
            epoch: 0,
        };
        let claimed = load_claimed(owner.volume().as_ref(), slot, claim).expect("slot loads");
        owner.serve(slot, claimed);
    }
}

/// The membership of a broker whose lease holds for the whole test.
#[cfg(test)]
pub(crate) fn leased(broker_id: i32, env: &Env) -> Arc<crate::cluster::Membership> {
    let bounds = kaas_core::cluster::membership::LeaseBounds {
        lease_ms: 1 << 40,
        ..Default::default()
    };
    let m = crate::cluster::Membership::new(broker_id, "localhost", 9092, None, bounds, 1);
    let now = env.clock.monotonic_ms();
    m.heartbeat_durable(now, now);
    Arc::new(m)
}

/// A local volume whose slot writes the coordinator tests count and fail.
#[cfg(test)]
pub(crate) mod test_volume {
    use crate::volume::hooked::{DiskWait, HookedVolume};
    use crate::volume::{LocalVolume, Volume};
    use std::io;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;

    /// Counts slot writes, fails them while `fail` is set, and holds them
    /// while `hold` is set (at most 10 s, so a test that forgets to let go
    /// still ends): `waiting` counts the writes being held.
    #[derive(Default)]
    pub struct SlotWrites {
        pub writes: AtomicUsize,
        pub fail: AtomicBool,
        pub hold: AtomicBool,
        pub waiting: AtomicUsize,
    }

    /// A local volume on `dir` whose atomic writes `SlotWrites` watches.
    pub fn flaky(dir: &std::path::Path) -> (Arc<dyn Volume>, Arc<SlotWrites>) {
        let watch = Arc::new(SlotWrites::default());
        let seen = watch.clone();
        let volume = HookedVolume::new(LocalVolume::new(dir).expect("volume"), move |wait| {
            // A slot write is a journal sync, or a snapshot replace when
            // the journal is folded.
            let slot_write = match wait {
                DiskWait::WriteAtomic(_) => true,
                DiskWait::Sync(path) => path.ends_with(".log"),
                _ => false,
            };
            if slot_write {
                if seen.hold.load(Ordering::SeqCst) {
                    seen.waiting.fetch_add(1, Ordering::SeqCst);
                    for _ in 0..10_000 {
                        if !seen.hold.load(Ordering::SeqCst) {
                            break;
                        }
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                    seen.waiting.fetch_sub(1, Ordering::SeqCst);
                }
                if seen.fail.load(Ordering::SeqCst) {
                    return Err(io::Error::other("injected fsync failure"));
                }
                seen.writes.fetch_add(1, Ordering::SeqCst);
            }
            Ok(())
        });
        (Arc::new(volume), watch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::volume::LocalVolume;

    /// Slot 0 served at epoch 0, its journal in `dir`.
    fn served(dir: &std::path::Path) -> SlotQueues<u8> {
        let volume = LocalVolume::new(dir).unwrap();
        volume.create_dir_all("s").unwrap();
        let loaded = load(&volume, "s/slot-0.json", "s/slot-0.log", |_: &[u8]| {
            Err::<kaas_core::txn::TxnSlotState, _>("nothing to decode")
        })
        .unwrap();
        let mut queues = SlotQueues::new();
        let claim = Claim {
            broker_id: 0,
            epoch: 0,
        };
        queues.serve(0, claim, loaded.journal);
        queues
    }

    /// Only a round made of deferred ops alone goes unsynced: an op queued
    /// the usual way, even one nobody waits for (a group's metadata change,
    /// an expiry), makes its round synced as it always was.
    #[test]
    fn a_round_is_deferred_only_if_everything_in_it_was_queued_deferred() {
        let dir = tempfile::tempdir().unwrap();
        let mut q = served(dir.path());
        let (tx, _rx) = oneshot::channel();
        assert!(q.push_deferred(0, 1, tx));
        assert_eq!(q.take(0).unwrap().durability, Durability::Deferred);

        let (tx, _rx) = oneshot::channel();
        assert!(q.push_deferred(0, 2, tx));
        assert!(q.push_op(0, 3), "no waiter");
        assert_eq!(q.take(0).unwrap().durability, Durability::Synced);

        assert!(q.push_op(0, 4));
        assert_eq!(q.take(0).unwrap().durability, Durability::Synced);

        let (tx, _rx) = oneshot::channel();
        assert!(q.push_deferred(0, 5, tx));
        let (tx, _rx) = oneshot::channel();
        assert!(q.push_done(0, tx));
        let taken = q.take(0).unwrap();
        assert_eq!(taken.durability, Durability::Synced);
        assert_eq!(taken.ops, vec![5]);

        let (tx, _rx) = oneshot::channel();
        assert!(q.push_deferred(0, 6, tx));
        assert_eq!(
            q.take(0).unwrap().durability,
            Durability::Deferred,
            "a synced round does not carry over to the next"
        );
    }
}
