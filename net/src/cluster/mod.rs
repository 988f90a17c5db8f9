//! The cluster of brokers sharing one volume, as this broker takes part in
//! it (DESIGN.md §6, docs/cluster.md): its heartbeat and lease, and the
//! live brokers it has read. The rules are `kaas_core::cluster`'s; this is
//! their driver.

pub mod fences;
pub mod heartbeat;
pub mod markers;
pub mod membership;
pub mod txn_asks;

pub use membership::{LiveBroker, Membership};

use crate::broker::Broker;
use crate::buggify::Site;
use crate::env::{Env, IoKind};
use crate::volume::Volume;
use std::sync::{Arc, Weak};
use tokio::sync::Notify;

/// How often a broker heartbeats: three times per lease, so one slow or
/// failed write still leaves two chances before the lease runs out.
pub fn heartbeat_interval_ms(lease_ms: i64) -> u64 {
    (lease_ms / 3).max(1) as u64
}

/// Heartbeats every lease/3 until `alive` is gone (the broker dropped it),
/// waking `rounds` after each so the ownership round follows. The rounds run
/// in their own task ([`run_ownership`]): a round that takes long (many
/// items to load or release) must never delay the heartbeat that keeps the
/// lease, or the broker would lose everything it holds for being busy.
/// Started as soon as the first heartbeat is written, so a long start
/// (recovering many items) keeps its lease too.
pub async fn run_heartbeats(
    volume: Arc<dyn Volume>,
    env: Env,
    membership: Arc<Membership>,
    alive: Weak<()>,
    rounds: Arc<Notify>,
) {
    let every = heartbeat_interval_ms(membership.bounds().lease_ms);
    loop {
        tokio::time::sleep(std::time::Duration::from_millis(every)).await;
        if alive.upgrade().is_none() {
            // Lets the ownership task see the broker is gone.
            rounds.notify_one();
            return;
        }
        if env.buggify.at(Site::LeaseRenewal).await.is_err() {
            // As a failed write: no renewal this time; the next one tries.
            rounds.notify_one();
            continue;
        }
        let lapses = membership.lapses();
        let (volume, clock, member) = (volume.clone(), env.clock.clone(), membership.clone());
        // Errors are logged by the round; the next one tries again.
        let _ = env
            .blocking(IoKind::Fsync, move || {
                heartbeat::round(volume.as_ref(), clock.as_ref(), &member)
            })
            .await;
        if membership.lapses() != lapses {
            wake_when_settled(&env, &membership, &rounds);
        }
        rounds.notify_one();
    }
}

/// Wakes the ownership round once this broker's new lease has settled
/// (`Membership::settled`): a start among other brokers, or a lapse, takes
/// nothing until then, and waiting for the next heartbeat on top would
/// leave its items unserved for up to a third of a lease longer.
pub fn wake_when_settled(env: &Env, membership: &Arc<Membership>, rounds: &Arc<Notify>) {
    let Some(wait) = membership.settles_in_ms(env.clock.monotonic_ms()) else {
        return;
    };
    let rounds = rounds.clone();
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(wait.saturating_add(1))).await;
        rounds.notify_one();
    });
}

/// The ownership round ([`Broker::reconcile`]) after each heartbeat, until
/// the broker is dropped. Heartbeats that come while a round runs make one
/// more round, not one each.
pub async fn run_ownership(broker: Weak<Broker>, rounds: Arc<Notify>) {
    loop {
        rounds.notified().await;
        let Some(b) = broker.upgrade() else { return };
        b.reconcile().await;
        b.exchange_fences().await;
    }
}
