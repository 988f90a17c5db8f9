//! The coordinator's background work, one task per broker:
//! - the reaper: an Ongoing transaction past its timeout is aborted under
//!   a bumped epoch (the producer that began it is fenced), its markers
//!   owed exactly as for a client abort;
//! - the marker reconcile: every prepared transaction that no task is
//!   completing (its EndTxn failed half-way, or the broker restarted
//!   between the phases) is completed again;
//! - expiry of idle transactional ids.
//!
//! The first pass runs at startup, so transactions a crash left prepared
//! complete without waiting an interval.

use super::complete;
use crate::broker::Broker;
use crate::buggify::Site;
use kaas_core::coverage::{self, Mark};
use kaas_core::txn::rules;
use std::sync::{Arc, Weak};
use std::time::Duration;

pub async fn run_timers(broker: Weak<Broker>) {
    let (every_ms, expire_every_ms) = match broker.upgrade() {
        Some(b) => {
            let c = b.transactions.config();
            (
                c.abort_timed_out_interval_ms.max(1),
                c.remove_expired_interval_ms.max(1),
            )
        }
        None => return,
    };
    let mut next_expiry_ms = i64::MIN;
    loop {
        let Some(b) = broker.upgrade() else {
            return;
        };
        let now = b.env.now_ms();
        reap_and_reconcile(&b, now);
        if now >= next_expiry_ms {
            let expired = b.transactions.expire(now);
            if expired > 0 {
                tracing::info!(expired, "expired idle transactional ids");
            }
            next_expiry_ms = now.saturating_add(expire_every_ms);
        }
        drop(b);
        tokio::time::sleep(Duration::from_millis(every_ms as u64)).await;
    }
}

/// One pass of the reaper and the reconcile. Each transaction is handled
/// by its own task, so a slow partition does not hold up the others (or
/// the next pass).
fn reap_and_reconcile(broker: &Arc<Broker>, now_ms: i64) {
    for entry in broker.transactions.entries() {
        if rules::has_timed_out(&entry, now_ms) {
            let b = broker.clone();
            tokio::spawn(async move {
                if b.env.buggify.at(Site::ReaperDecision).await.is_err() {
                    return; // as a failed write would: the next pass retries
                }
                match b.transactions.abort_timed_out(&entry).await {
                    Ok(Some(prepared)) => {
                        coverage::hit(Mark::ReaperAbortedATimedOutTransaction);
                        tracing::info!(transactional_id = %prepared.transactional_id, producer_id = prepared.producer_id, epoch = prepared.producer_epoch, "aborting a transaction past its timeout");
                        b.fence_producer(prepared.producer_id, prepared.producer_epoch);
                        let _ = complete(&b, prepared).await;
                    }
                    Ok(None) => {}
                    Err(code) => {
                        tracing::debug!(transactional_id = %entry.transactional_id, error = ?code, "reaper deferred")
                    }
                }
            });
        } else if entry.state.is_prepared() {
            if rules::is_past_timeout(&entry, now_ms) {
                // Past its timeout, but the direction is decided: it is
                // completed as prepared, never aborted over.
                coverage::hit(Mark::ReaperPassedOverAPreparedTransaction);
            }
            let b = broker.clone();
            tokio::spawn(async move {
                if complete(&b, entry).await.is_ok() {
                    coverage::hit(Mark::ReconcileCompletedAPreparedTransaction);
                }
            });
        }
    }
}
