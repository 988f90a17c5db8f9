//! Group commit for coordinator slot files, shared by every coordinator
//! that keeps its state in `slot-<N>.json` files (consumer groups now,
//! transactions next).
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

pub mod journal;

use crate::env::{Env, IoKind};
use crate::volume::Volume;
pub use journal::{load, Journal, Loaded};
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

/// What a writer reports to a request waiting for its slot's write.
pub type WriteDone = oneshot::Sender<Result<(), ErrorCode>>;

/// Waits for a slot write; a writer that went away counts as a failed
/// write, answered as a storage failure at a coordinator is answered.
pub async fn wait_written(rx: oneshot::Receiver<Result<(), ErrorCode>>) -> Result<(), ErrorCode> {
    rx.await.unwrap_or(Err(ErrorCode::NotCoordinator))
}

/// The queued ops and waiting requests of every slot. Lives inside the
/// owner's lock, so ops are queued in the order the owner decided them.
pub struct SlotQueues<Op> {
    queues: Vec<SlotQueue<Op>>,
}

struct SlotQueue<Op> {
    ops: Vec<Op>,
    done: Vec<WriteDone>,
    /// A writer task is running for this slot.
    writing: bool,
    journal: Journal,
}

/// One round of a slot's writer: what was queued, and the durable state it
/// applies to.
pub struct Round<F: SlotFile> {
    pub ops: Vec<F::Op>,
    pub done: Vec<WriteDone>,
    pub state: F,
    pub journal: Journal,
}

/// What a round takes from a slot's queue.
pub struct Taken<Op> {
    pub ops: Vec<Op>,
    pub done: Vec<WriteDone>,
    pub journal: Journal,
}

impl<Op> SlotQueues<Op> {
    /// One queue per slot, slot `i` writing to `journals[i]`.
    pub fn new(journals: Vec<Journal>) -> SlotQueues<Op> {
        SlotQueues {
            queues: journals
                .into_iter()
                .map(|journal| SlotQueue {
                    ops: Vec::new(),
                    done: Vec::new(),
                    writing: false,
                    journal,
                })
                .collect(),
        }
    }

    /// Queues `op` for `slot`; false for a slot that does not exist.
    pub fn push_op(&mut self, slot: u32, op: Op) -> bool {
        match self.queues.get_mut(slot as usize) {
            Some(q) => {
                q.ops.push(op);
                true
            }
            None => false,
        }
    }

    /// `done` is told once everything queued so far for `slot` is durable.
    pub fn push_done(&mut self, slot: u32, done: WriteDone) -> bool {
        match self.queues.get_mut(slot as usize) {
            Some(q) => {
                q.done.push(done);
                true
            }
            None => false,
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
    /// stops) when nothing is.
    pub fn take(&mut self, slot: u32) -> Option<Taken<Op>> {
        let q = self.queues.get_mut(slot as usize)?;
        if q.ops.is_empty() && q.done.is_empty() {
            q.writing = false;
            return None;
        }
        Some(Taken {
            ops: std::mem::take(&mut q.ops),
            done: std::mem::take(&mut q.done),
            journal: q.journal.clone(),
        })
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
    fn finish_round(&self, slot: u32, outcome: RoundOutcome<Self::File>) -> Result<(), ErrorCode>;
    fn volume(&self) -> &Arc<dyn Volume>;
    fn env(&self) -> &Env;
}

/// The writer task of one slot: rounds until the queue is drained.
pub async fn run_writer<O: SlotOwner>(owner: Arc<O>, slot: u32) {
    while let Some(Round {
        ops,
        done,
        mut state,
        journal,
    }) = owner.take_round(slot)
    {
        let mut changed = false;
        for op in &ops {
            changed |= state.apply(op);
        }
        let outcome = if changed {
            state.bump_version();
            match write(owner.as_ref(), &journal, &state).await {
                Ok(()) => RoundOutcome::Written(state),
                Err(e) => RoundOutcome::Failed(e),
            }
        } else {
            RoundOutcome::Unchanged
        };
        let result = owner.finish_round(slot, outcome);
        for tx in done {
            let _ = tx.send(result);
        }
    }
}

async fn write<O: SlotOwner>(owner: &O, journal: &Journal, state: &O::File) -> io::Result<()> {
    let bytes = state.encode()?;
    let volume = owner.volume().clone();
    let journal = journal.clone();
    owner
        .env()
        .blocking(IoKind::Fsync, move || {
            journal.write(volume.as_ref(), &bytes)
        })
        .await
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
