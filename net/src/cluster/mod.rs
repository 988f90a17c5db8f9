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
use crate::env::IoKind;
use std::sync::Weak;

/// How often a broker heartbeats: three times per lease, so one slow or
/// failed write still leaves two chances before the lease runs out.
pub fn heartbeat_interval_ms(lease_ms: i64) -> u64 {
    (lease_ms / 3).max(1) as u64
}

/// Heartbeats, each followed by the ownership round
/// ([`Broker::reconcile`]), until the broker is dropped.
pub async fn run_heartbeats(broker: Weak<Broker>) {
    let Some(every) = broker
        .upgrade()
        .map(|b| heartbeat_interval_ms(b.config.lease.lease_ms))
    else {
        return;
    };
    loop {
        tokio::time::sleep(std::time::Duration::from_millis(every)).await;
        let Some(b) = broker.upgrade() else { return };
        let (volume, clock, membership) =
            (b.volume.clone(), b.env.clock.clone(), b.membership.clone());
        // Errors are logged by the round; the next one tries again.
        let _ = b
            .env
            .blocking(IoKind::Fsync, move || {
                heartbeat::round(volume.as_ref(), clock.as_ref(), &membership)
            })
            .await;
        b.reconcile().await;
        b.exchange_fences().await;
    }
}
