//! The marker queue on the volume (`kaas_core::txn::marker_queue`): the
//! coordinator's side ([`dispatch`]: queue requests for the brokers that
//! lead part of a transaction and wait for their acks) and the target's
//! side ([`run_watcher`]: apply what is queued for this broker and
//! acknowledge it durably).

use crate::broker::Broker;
use crate::env::IoKind;
use crate::volume::Volume;
use kaas_core::layout::{
    marker_ack_dir, marker_ack_file, marker_file, marker_of_file, marker_queue_dir,
    MARKER_QUEUE_DIR,
};
use kaas_core::partition::IncomingMarker;
use kaas_core::protocol::ErrorCode;
use kaas_core::txn::marker_queue::{
    outstanding, queued_for_this_holding, refusal_settles_marker, MarkerAck, MarkerRequest,
    MARKER_QUEUE_VERSION,
};
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::sync::{Arc, Weak};
use std::time::Duration;

/// How often a broker looks for markers queued for it: a transaction
/// spanning brokers waits about this long per phase for each target.
pub const WATCH_INTERVAL_MS: u64 = 100;

/// How long a coordinator waits for acks before leaving the transaction
/// prepared for a retry (EndTxn answers a retriable error; the reconcile
/// completes it later).
const ACK_WAIT_MS: i64 = 5_000;

fn storage(e: io::Error) -> ErrorCode {
    tracing::warn!(error = %e, "marker queue volume error");
    ErrorCode::KafkaStorageError
}

/// Queues `requests` (target broker -> what it must apply) and waits until
/// every item is acknowledged durable. Then the request files are removed.
/// `Err(COORDINATOR_NOT_AVAILABLE)` when some target did not answer in
/// time: the transaction stays prepared and a retry queues the same files.
pub async fn dispatch(
    broker: &Arc<Broker>,
    requests: BTreeMap<i32, MarkerRequest>,
) -> Result<(), ErrorCode> {
    if requests.is_empty() {
        return Ok(());
    }
    let me = broker.config.broker_id;
    // One nonce per dispatch: acks of an earlier transaction of the same
    // producer and epoch (same file names) answer nothing here.
    let nonce = crate::entropy::random_u64();
    let requests: BTreeMap<i32, MarkerRequest> = requests
        .into_iter()
        .map(|(target, r)| (target, MarkerRequest { nonce, ..r }))
        .collect();
    let volume = broker.volume.clone();
    let queued = requests.clone();
    broker
        .env
        .blocking(IoKind::Fsync, move || {
            for (target, request) in &queued {
                volume.create_dir_all(&marker_queue_dir(*target))?;
                let bytes = request.encode().map_err(io::Error::other)?;
                volume.write_atomic(
                    &marker_file(*target, request.producer_id, request.producer_epoch),
                    &bytes,
                )?;
            }
            Ok(())
        })
        .await
        .map_err(storage)?;
    let deadline = broker.env.clock.monotonic_ms() + ACK_WAIT_MS;
    loop {
        let volume = broker.volume.clone();
        let waiting = requests.clone();
        let left = broker
            .env
            .blocking(IoKind::Buffered, move || {
                let mut left = 0;
                for (target, request) in &waiting {
                    let path =
                        marker_ack_file(me, request.producer_id, request.producer_epoch, *target);
                    let ack = match volume.read(&path)? {
                        Some(bytes) => MarkerAck::decode(&bytes).ok(),
                        None => None,
                    };
                    if !outstanding(request, ack.as_ref()).is_empty() {
                        left += 1;
                    }
                }
                Ok(left)
            })
            .await
            .map_err(storage)?;
        if left == 0 {
            break;
        }
        if broker.env.clock.monotonic_ms() >= deadline {
            tracing::warn!(
                targets = left,
                "queued markers not acknowledged in time; the transaction stays prepared"
            );
            return Err(ErrorCode::CoordinatorNotAvailable);
        }
        tokio::time::sleep(Duration::from_millis(WATCH_INTERVAL_MS)).await;
    }
    let volume = broker.volume.clone();
    let Some(&MarkerRequest {
        producer_id,
        producer_epoch,
        ..
    }) = requests.values().next()
    else {
        return Ok(());
    };
    let targets: Vec<i32> = requests.keys().copied().collect();
    broker
        .env
        .blocking(IoKind::Buffered, move || {
            remove_requests_of(volume.as_ref(), &targets, producer_id, producer_epoch)
        })
        .await
        .map_err(storage)
}

/// Removes the request for `producer_id` at `epoch` from every broker's
/// queue, not only the ones this dispatch wrote: an earlier dispatch of the
/// same transaction that timed out, or whose coordinator lost the slot, may
/// have queued it to a broker that led one of its partitions then. Left
/// there, it would be applied once that broker leads the partition again,
/// after the producer's next transaction (the same producer id and epoch,
/// under transaction version 1) wrote there, and would abort that one
/// (simulator seed 1042: a committed transaction's record on a partition
/// that had moved twice read as aborted). The transaction is settled when
/// this runs and its producer has not been answered yet, so no later
/// transaction of the producer can have a request queued.
///
/// `written` (this dispatch's targets) are removed by name: a stale listing
/// of the queue root may not show a queue this dispatch just created. The
/// others are found by the listing; each is read first, so a queue without
/// the request costs a lookup, not a removal and its directory fsync.
fn remove_requests_of(
    volume: &dyn Volume,
    written: &[i32],
    producer_id: i64,
    epoch: i16,
) -> io::Result<()> {
    let listed = volume
        .list(MARKER_QUEUE_DIR)?
        .into_iter()
        .filter_map(|dir| dir.strip_prefix("to-").and_then(|t| t.parse::<i32>().ok()))
        .filter(|target| !written.contains(target))
        .collect::<Vec<_>>();
    for &target in written {
        volume.remove(&marker_file(target, producer_id, epoch))?;
    }
    for target in listed {
        let path = marker_file(target, producer_id, epoch);
        if volume.read(&path)?.is_some() {
            volume.remove(&path)?;
        }
    }
    Ok(())
}

/// Applies queued markers for this broker, and answers questions queued
/// for its transaction coordinator, until it is dropped.
pub async fn run_watcher(broker: Weak<Broker>) {
    let mut rounds: u64 = 0;
    let mut pause = WATCH_INTERVAL_MS;
    loop {
        tokio::time::sleep(Duration::from_millis(pause)).await;
        let Some(b) = broker.upgrade() else { return };
        // Alone, nobody can queue anything for this broker: it looks once
        // per heartbeat (another broker is seen live within one, and its
        // asks wait longer than that) instead of ten times a second.
        let alone = b.membership.live_ids(b.env.clock.monotonic_ms()).len() <= 1;
        pause = if alone {
            super::heartbeat_interval_ms(b.config.lease.lease_ms)
        } else {
            WATCH_INTERVAL_MS
        };
        if !b.may_act() {
            continue;
        }
        if let Err(e) = watch_once(&b).await {
            tracing::warn!(error = %e, "marker queue round failed");
        }
        // Questions to this broker's transaction coordinator, on the same
        // beat (`crate::cluster::txn_asks`).
        if let Err(e) = super::txn_asks::serve_once(&b).await {
            tracing::warn!(error = %e, "coordinator queue round failed");
        }
        rounds += 1;
        // Acks and answers whose request is gone are garbage; looked for
        // now and then.
        if rounds.is_multiple_of(100) {
            if let Err(e) = collect_acks(&b).await {
                tracing::warn!(error = %e, "marker ack clean-up failed");
            }
            if let Err(e) = super::txn_asks::collect_answers(&b).await {
                tracing::warn!(error = %e, "coordinator answer clean-up failed");
            }
        }
    }
}

/// One look at this broker's queue: every request is applied as far as
/// this broker leads its items, and acknowledged. A request already fully
/// acknowledged is skipped (its ack is read back), so nothing is written
/// twice in the steady state.
async fn watch_once(broker: &Arc<Broker>) -> io::Result<()> {
    let me = broker.config.broker_id;
    let volume = broker.volume.clone();
    let pending = broker
        .env
        .blocking(IoKind::Buffered, move || {
            let mut pending = Vec::new();
            for name in volume.list(&marker_queue_dir(me))? {
                let Some((pid, epoch)) = marker_of_file(&name) else {
                    continue;
                };
                let Some(bytes) = volume.read(&marker_file(me, pid, epoch))? else {
                    continue;
                };
                let request = match MarkerRequest::decode(&bytes) {
                    Ok(r) => r,
                    Err(e) => {
                        tracing::warn!(file = %name, error = %e, "ignoring a queued marker");
                        continue;
                    }
                };
                let ack = match volume.read(&marker_ack_file(request.from, pid, epoch, me))? {
                    Some(bytes) => MarkerAck::decode(&bytes).ok(),
                    None => None,
                };
                let left = outstanding(&request, ack.as_ref());
                if !left.is_empty() {
                    pending.push((left, ack));
                }
            }
            Ok(pending)
        })
        .await?;
    for (left, ack) in pending {
        apply(broker, left, ack).await?;
    }
    Ok(())
}

/// Applies what this broker leads of `left`, durably, then records it in
/// the ack (on top of what `ack` already acknowledged).
async fn apply(
    broker: &Arc<Broker>,
    left: MarkerRequest,
    ack: Option<MarkerAck>,
) -> io::Result<()> {
    let me = broker.config.broker_id;
    let marker = IncomingMarker {
        producer_id: left.producer_id,
        producer_epoch: left.producer_epoch,
        coordinator_epoch: left.coordinator_epoch,
        commit: left.commit,
        // As the coordinator's own completion writes them (a retry may
        // write a marker again at the same epoch).
        transaction_version: 0,
    };
    let mut done = ack.filter(|a| a.answers(&left)).unwrap_or(MarkerAck {
        version: MARKER_QUEUE_VERSION,
        by: me,
        nonce: left.nonce,
        producer_id: left.producer_id,
        producer_epoch: left.producer_epoch,
        partitions: BTreeSet::new(),
        groups: BTreeSet::new(),
    });
    let before = (done.partitions.len(), done.groups.len());
    tracing::debug!(from = left.from, nonce = left.nonce, ?marker, partitions = ?left.partitions, "applying queued markers");
    for (topic, index) in &left.partitions {
        let partition = match broker.partition(topic, *index, -1) {
            Ok(p) => p,
            // A deleted topic owes nothing.
            Err(ErrorCode::UnknownTopicOrPartition) => {
                done.partitions.insert((topic.clone(), *index));
                continue;
            }
            // Led elsewhere now: the coordinator queues it to the new leader.
            Err(_) => continue,
        };
        // Queued for an earlier leadership of ours: left behind by a
        // coordinator that completed the transaction through another
        // leader since; not ours to apply, nor to acknowledge.
        if !queued_for_this_holding(
            left.leader_epoch_of(topic, *index),
            partition.leader().epoch,
        ) {
            tracing::debug!(topic = %topic, partition = index, queued_for = ?left.leader_epoch_of(topic, *index), leader_epoch = partition.leader().epoch, "a queued marker for an earlier leadership left alone");
            continue;
        }
        let written = match partition.write_marker(marker).await {
            Ok(offset) => partition.wait_durable(offset + 1).await,
            Err(code) => Err(code),
        };
        // A marker refused as stale (the partition has seen a later epoch
        // of the producer, or a later coordinator's marker) has nothing
        // left to close here: that later epoch exists only once this
        // transaction was settled. Acknowledged, it stops being applied
        // again: a request its coordinator abandoned (it lost the slot
        // while waiting, and the next owner completed the transaction
        // through other leaders) stays in the queue, and every refused
        // attempt counts as a marker written, which made every
        // transaction check asked of another broker for this partition
        // retry (simulator seed 1164: a livelock of the EOS loop).
        if written.is_ok() || written.is_err_and(refusal_settles_marker) {
            done.partitions.insert((topic.clone(), *index));
        }
    }
    for group in &left.groups {
        // As for partitions: only the slot holding it was queued for.
        let slot = kaas_core::cluster::coordinator_slot(group);
        let held_at = broker.groups.slot_claim(slot).map(|c| c.epoch);
        if !held_at.is_some_and(|e| queued_for_this_holding(left.group_epoch_of(group), e)) {
            continue;
        }
        if let Ok(groups) = broker.group_coordinator(group) {
            if groups
                .complete_txn(group, left.producer_id, left.commit)
                .await
                .is_ok()
            {
                done.groups.insert(group.clone());
            }
        }
    }
    if (done.partitions.len(), done.groups.len()) == before {
        return Ok(());
    }
    let volume = broker.volume.clone();
    let from = left.from;
    broker
        .env
        .blocking(IoKind::Fsync, move || {
            volume.create_dir_all(&marker_ack_dir(from))?;
            let bytes = done.encode().map_err(io::Error::other)?;
            volume.write_atomic(
                &marker_ack_file(from, done.producer_id, done.producer_epoch, me),
                &bytes,
            )
        })
        .await
}

/// Removes this broker's acks whose request its coordinator has removed.
async fn collect_acks(broker: &Arc<Broker>) -> io::Result<()> {
    let me = broker.config.broker_id;
    let volume = broker.volume.clone();
    broker
        .env
        .blocking(IoKind::Buffered, move || {
            let acks_root = format!("{}/acks", kaas_core::layout::MARKER_QUEUE_DIR);
            for dir in volume.list(&acks_root)? {
                let Some(coordinator) = dir.strip_prefix("to-").and_then(|c| c.parse::<i32>().ok())
                else {
                    continue;
                };
                let suffix = format!("-from-{me}.json");
                for name in volume.list(&marker_ack_dir(coordinator))? {
                    let Some((pid, epoch)) = name
                        .strip_suffix(&suffix)
                        .and_then(|stem| marker_of_file(&format!("{stem}.json")))
                    else {
                        continue;
                    };
                    if volume.read(&marker_file(me, pid, epoch))?.is_none() {
                        volume.remove(&marker_ack_file(coordinator, pid, epoch, me))?;
                    }
                }
            }
            Ok(())
        })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::volume::LocalVolume;

    /// A settled transaction's request goes from every queue, including one
    /// an earlier, timed-out dispatch wrote to a broker this dispatch did
    /// not ask; other producers' and epochs' requests stay.
    #[test]
    fn a_settled_transactions_request_goes_from_every_queue() {
        let tmp = tempfile::tempdir().unwrap();
        let volume = LocalVolume::new(tmp.path()).unwrap();
        let files = [
            (1, marker_file(1, 7, 0)),
            (2, marker_file(2, 7, 0)),
            (2, marker_file(2, 7, 1)),
            (2, marker_file(2, 8, 0)),
        ];
        for (target, f) in &files {
            volume.create_dir_all(&marker_queue_dir(*target)).unwrap();
            volume.write_atomic(f, b"{}").unwrap();
        }
        volume.create_dir_all(&marker_ack_dir(1)).unwrap();
        // This dispatch wrote only to broker 1.
        remove_requests_of(&volume, &[1], 7, 0).unwrap();
        let left: Vec<bool> = files
            .iter()
            .map(|(_, f)| volume.read(f).unwrap().is_some())
            .collect();
        assert_eq!(left, [false, false, true, true]);
    }
}
