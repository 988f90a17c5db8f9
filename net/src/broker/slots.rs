//! Coordinator slots follow ownership as partitions do: the ownership rule
//! (`kaas_core::cluster::next_step`) is applied to every group slot and
//! every transaction slot, at start (`Decider::resuming`) and after every
//! heartbeat (`Broker::reconcile`).
//!
//! - Claim: the slot's epoch file is won (or this broker's own newest claim
//!   kept at start), its snapshot and journal are loaded and it is served
//!   at the claim's epoch (its coordinator epoch).
//! - Release: it stops serving at once (requests and waiters answer
//!   NOT_COORDINATOR, nothing more is queued), waits until no write of the
//!   slot is in flight (slot writes are answered only once durable, so
//!   everything acknowledged is on the volume then), and writes the
//!   release, so the broker placement now names takes it at once.
//! - Depose: another broker won a newer epoch: it stops serving at once.
//! - After a lease lapse every slot is let go of first, to be won again at
//!   a new epoch.
//! - Follow / Keep: the newest claim is recorded for FindCoordinator.

use super::{ownership, Broker};
use crate::env::IoKind;
use crate::slot_store::{self, load_claimed, CoordinatorSlot, MovingSlots};
use kaas_core::cluster::placement::Item;
use kaas_core::cluster::{Claim, Step, COORDINATOR_SLOTS};
use kaas_core::layout;
use std::io;
use std::sync::Arc;

/// The two kinds of coordinator slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Group,
    Txn,
}

impl Kind {
    fn item(self, slot: u32) -> Item<'static> {
        match self {
            Kind::Group => Item::GroupSlot(slot),
            Kind::Txn => Item::TxnSlot(slot),
        }
    }

    fn epochs_dir(self, slot: u32) -> String {
        match self {
            Kind::Group => layout::group_slot_epochs_dir(slot),
            Kind::Txn => layout::txn_slot_epochs_dir(slot),
        }
    }

    fn epoch_file(self, slot: u32, epoch: i32) -> String {
        match self {
            Kind::Group => layout::group_slot_epoch_file(slot, epoch),
            Kind::Txn => layout::txn_slot_epoch_file(slot, epoch),
        }
    }
}

/// One slot's decision in a round: its newest claim and the step.
struct Decided {
    kind: Kind,
    slot: u32,
    newest: Option<Claim>,
    step: Step,
}

impl Broker {
    /// Takes the slots placed here at start: free ones, this broker's own
    /// (kept at their epoch: the process lock proves its previous life is
    /// over) and those whose holder is gone; the others are followed.
    /// Blocks on the volume (nothing is served yet).
    pub(super) fn take_slots_at_start(&self) -> io::Result<()> {
        for slot in 0..COORDINATOR_SLOTS {
            self.take_slot_at_start(&*self.groups, Kind::Group, slot)?;
            self.take_slot_at_start(&*self.transactions, Kind::Txn, slot)?;
        }
        Ok(())
    }

    fn take_slot_at_start<O: MovingSlots>(&self, owner: &O, kind: Kind, slot: u32) -> io::Result<()>
    where
        O::File: CoordinatorSlot,
    {
        let decider = ownership::Decider::at(&self.membership, self.env.clock.monotonic_ms());
        let taken = ownership::take(
            self.volume.as_ref(),
            &kind.epochs_dir(slot),
            &|epoch| kind.epoch_file(slot, epoch),
            &decider,
            &kind.item(slot),
        )?;
        match taken.won {
            Some(claim) => {
                match load_claimed(self.volume.as_ref(), slot, claim) {
                    Ok(file) => owner.serve(slot, file),
                    // A load refused (a stale listing hid a newer journal
                    // of the slot) or failed costs this slot only, not the
                    // broker's start: the ownership round loads it again
                    // once the listing has caught up (simulator seed 1222).
                    Err(e) => {
                        tracing::warn!(?kind, slot, error = %e, "cannot load a claimed slot at start; the ownership round retries");
                        owner.follow(slot, Some(claim));
                    }
                }
            }
            None => owner.follow(slot, taken.after),
        }
        Ok(())
    }

    /// After a lease lapse every slot served here is let go of, to be won
    /// again at a new epoch (`Broker::let_go_after_a_lapse`).
    pub(super) fn let_go_of_slots_after_a_lapse(&self) {
        for slot in 0..COORDINATOR_SLOTS {
            if self.groups.serving(slot).is_some() {
                tracing::warn!(slot, "lease lapsed: group slot let go of");
                self.groups.unserve(slot, None);
            }
            if self.transactions.serving(slot).is_some() {
                tracing::warn!(slot, "lease lapsed: transaction slot let go of");
                self.transactions.unserve(slot, None);
            }
        }
    }

    /// The slots' part of [`reconcile`](Self::reconcile). The decisions of
    /// all slots are read in one pass on the IO runner (two hundred small
    /// reads, not two hundred hops); acting on them may load or release
    /// slots one by one.
    pub(super) async fn reconcile_slots(&self) {
        let serving: Vec<(Kind, u32, Option<Claim>)> = (0..COORDINATOR_SLOTS)
            .flat_map(|slot| {
                [
                    (Kind::Group, slot, self.groups.serving(slot)),
                    (Kind::Txn, slot, self.transactions.serving(slot)),
                ]
            })
            .collect();
        let (volume, clock, membership) = (
            self.volume.clone(),
            self.env.clock.clone(),
            self.membership.clone(),
        );
        let decided = self
            .env
            .blocking(IoKind::Buffered, move || {
                let decider = ownership::Decider::at(&membership, clock.monotonic_ms());
                let mut decided = Vec::with_capacity(serving.len());
                for (kind, slot, serving) in serving {
                    let newest = match ownership::newest(
                        volume.as_ref(),
                        &kind.epochs_dir(slot),
                        &|epoch| kind.epoch_file(slot, epoch),
                    ) {
                        Ok(newest) => newest,
                        Err(e) => {
                            // Nothing is known of this slot this round; it
                            // stays as it is until a read succeeds.
                            tracing::warn!(?kind, slot, error = %e, "cannot read a slot's claim");
                            continue;
                        }
                    };
                    let step = decider.step(&kind.item(slot), newest, serving);
                    decided.push(Decided {
                        kind,
                        slot,
                        newest,
                        step,
                    });
                }
                Ok(decided)
            })
            .await;
        let decided = match decided {
            Ok(decided) => decided,
            Err(e) => {
                tracing::warn!(error = %e, "slot ownership round failed");
                return;
            }
        };
        for d in decided {
            let result = match d.kind {
                Kind::Group => self.apply_slot_step(&self.groups, &d).await,
                Kind::Txn => self.apply_slot_step(&self.transactions, &d).await,
            };
            if let Err(e) = result {
                tracing::warn!(kind = ?d.kind, slot = d.slot, error = %e, "slot ownership round failed");
            }
        }
    }

    /// Carries out one slot's step.
    async fn apply_slot_step<O: MovingSlots>(&self, owner: &Arc<O>, d: &Decided) -> io::Result<()>
    where
        O::File: CoordinatorSlot,
    {
        let (kind, slot) = (d.kind, d.slot);
        match (d.step, owner.serving(slot)) {
            (Step::Keep, _) => {}
            (Step::Depose, Some(_)) => {
                tracing::warn!(?kind, slot, newest = ?d.newest, "another broker coordinates the slot now");
                owner.unserve(slot, d.newest);
            }
            (Step::Release, serving) => {
                // Its own claim, served or not (given up after a lapse).
                let Some(held) = serving.or(d.newest) else {
                    return Ok(());
                };
                // Stop first: nothing more is decided or queued here. Then
                // wait out a write in flight (it is answered NOT_COORDINATOR,
                // but lands on the volume): after it nothing of this broker
                // writes the slot's files, and all it acknowledged is
                // durable. Only then may the next owner load them.
                if serving.is_some() {
                    owner.unserve(slot, Some(held));
                }
                slot_store::writer_stopped(owner.as_ref(), slot).await;
                let volume = self.volume.clone();
                self.env
                    .blocking(IoKind::Fsync, move || {
                        ownership::release(
                            volume.as_ref(),
                            &kind.epochs_dir(slot),
                            &|epoch| kind.epoch_file(slot, epoch),
                            held,
                        )
                    })
                    .await?;
                // FindCoordinator names nobody until the next round reads
                // who took it.
                owner.follow(slot, None);
                tracing::info!(
                    ?kind,
                    slot,
                    epoch = held.epoch,
                    "released the slot to its new place"
                );
            }
            (Step::Claim(wanted), None) => {
                // A write of an earlier serving here (let go of after a
                // lapse) must be over before the files are read again.
                slot_store::writer_stopped(owner.as_ref(), slot).await;
                let (volume, me, newest) =
                    (self.volume.clone(), self.membership.broker_id(), d.newest);
                let claimed = self
                    .env
                    .blocking(IoKind::Fsync, move || {
                        let won = ownership::win(
                            volume.as_ref(),
                            &kind.epochs_dir(slot),
                            &|epoch| kind.epoch_file(slot, epoch),
                            wanted,
                            newest,
                        )?;
                        match won {
                            Ok(claim) if claim.broker_id == me => {
                                load_claimed::<O::File>(volume.as_ref(), slot, claim).map(Ok)
                            }
                            Ok(claim) => Ok(Err(Some(claim))),
                            Err(newer) => Ok(Err(newer)),
                        }
                    })
                    .await?;
                match claimed {
                    Ok(claimed) => {
                        tracing::info!(
                            ?kind,
                            slot,
                            epoch = claimed.claim.epoch,
                            "took the slot over"
                        );
                        owner.serve(slot, claimed);
                    }
                    Err(newer) => owner.follow(slot, newer),
                }
            }
            (_, None) => owner.follow(slot, d.newest),
            (_, Some(_)) => {}
        }
        Ok(())
    }
}
