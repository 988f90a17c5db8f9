//! Completing a prepared transaction: the second phase of EndTxn, of the
//! reaper's abort and of the marker reconcile.
//!
//! 1. A COMMIT or ABORT marker goes to every partition of the transaction,
//!    all at once, and each is waited for until it is durable (the last
//!    stable offset moves past the transaction only then). Partitions
//!    other brokers lead get theirs through the marker queue
//!    (`crate::cluster::markers`), acknowledged back once durable.
//! 2. The offsets the transaction staged in each group are committed or
//!    dropped, durably: offsets become visible only after the markers.
//! 3. Complete* is persisted; nothing is owed any more.
//!
//! Every step may be repeated after a crash or a failure: a second marker
//! for the same transaction closes nothing (an empty transaction at the
//! marker's offset), a second completion of a group's offsets finds
//! nothing staged, and Complete* is only written over the same prepared
//! entry. So the reconcile can simply run the whole of it again.
//!
//! A step that fails leaves the entry prepared, and the timers' next pass
//! runs the completion again: so it is with a marker for a partition led
//! by another broker (NOT_LEADER_OR_FOLLOWER, until markers are sent
//! between brokers) and with staged offsets of a group coordinated by
//! another broker (NOT_COORDINATOR). Nothing is dropped; it waits.

use crate::broker::Broker;
use crate::buggify::Site;
use kaas_core::cluster::Claim;
use kaas_core::deliberate_bugs::{planted, Bug};
use kaas_core::partition::IncomingMarker;
use kaas_core::protocol::ErrorCode;
use kaas_core::txn::marker_queue::{MarkerRequest, MARKER_QUEUE_VERSION};
use kaas_core::txn::{TxnEntry, TxnState};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Completes `prepared` (a PrepareCommit or PrepareAbort entry that is
/// durable). Err: some step failed; the entry stays prepared and the
/// reconcile tries again. CONCURRENT_TRANSACTIONS: another task is
/// completing it.
pub async fn complete(broker: &Arc<Broker>, prepared: TxnEntry) -> Result<(), ErrorCode> {
    let coordinator = &broker.transactions;
    let id = prepared.transactional_id.clone();
    if !coordinator.begin_completion(&id) {
        return Err(ErrorCode::ConcurrentTransactions);
    }
    let outcome = run(broker, &prepared).await;
    coordinator.end_completion(&id);
    if let Err(code) = outcome {
        tracing::warn!(transactional_id = %id, error = ?code, "transaction not completed yet; the reconcile retries");
    }
    outcome
}

async fn run(broker: &Arc<Broker>, prepared: &TxnEntry) -> Result<(), ErrorCode> {
    let commit = match prepared.state {
        TxnState::PrepareCommit => true,
        TxnState::PrepareAbort => false,
        _ => return Ok(()),
    };
    // Only the slot's holder completes it: one that let the slot go (or
    // whose lease ran out) leaves the entry to the next owner, which
    // completes the same decision at its own epoch.
    if !broker.transactions.holds_id(&prepared.transactional_id) {
        return Err(ErrorCode::NotCoordinator);
    }
    let marker = IncomingMarker {
        producer_id: prepared.producer_id,
        producer_epoch: prepared.producer_epoch,
        coordinator_epoch: broker
            .transactions
            .coordinator_epoch(&prepared.transactional_id),
        commit,
        // Checked as a marker of transaction versions 0 and 1 (the epoch
        // may equal the producer's) whatever the transaction's version:
        // a completion retried after a crash writes its markers again, at
        // the same epoch, to partitions that already hold them, and must
        // be accepted. KIP-1228's stricter check is for markers others send.
        transaction_version: 0,
    };
    // Markers first, everywhere (this broker's own partitions before the
    // queue), and only then the staged offsets: offsets become visible
    // only once every marker backing them is durable.
    let (local, remote) = split_partitions(broker, &prepared.partitions)?;
    tracing::debug!(transactional_id = %prepared.transactional_id, ?marker, ?local, ?remote, "completing a prepared transaction");
    if planted(Bug::OffsetsVisibleBeforeMarkers) {
        for group in &prepared.groups {
            if let Ok(groups) = broker.group_coordinator(group) {
                groups
                    .complete_txn(group, prepared.producer_id, commit)
                    .await?
            }
        }
    }
    write_markers(broker, &local, marker).await?;
    crate::cluster::markers::dispatch(broker, requests(broker, prepared, marker, remote)).await?;
    // Prepared, every marker durable, nothing of the second phase done.
    broker
        .env
        .buggify
        .at_or(Site::PrepareToComplete, ErrorCode::KafkaStorageError)
        .await?;
    // Each remote group with its slot's claim epoch: only that holding
    // applies the request (`queued_for_this_holding`).
    let mut remote_groups: BTreeMap<i32, BTreeMap<String, i32>> = BTreeMap::new();
    for group in &prepared.groups {
        match broker.group_coordinator(group) {
            Ok(groups) => {
                groups
                    .complete_txn(group, prepared.producer_id, commit)
                    .await?
            }
            Err(_) => {
                let owner = group_owner(broker, group).ok_or(ErrorCode::CoordinatorNotAvailable)?;
                remote_groups
                    .entry(owner.broker_id)
                    .or_default()
                    .insert(group.clone(), owner.epoch);
            }
        }
    }
    let group_requests = remote_groups
        .into_iter()
        .map(|(target, groups)| {
            let mut r = request(broker, prepared, marker);
            for (group, epoch) in groups {
                r.add_group(&group, epoch);
            }
            (target, r)
        })
        .collect();
    crate::cluster::markers::dispatch(broker, group_requests).await?;
    broker.transactions.finish_prepared(prepared).await
}

/// Partitions other brokers lead, by leader, each with its leader's epoch.
type RemotePartitions = BTreeMap<i32, BTreeMap<(String, i32), i32>>;

/// The partitions this broker leads (or whose topic is gone), and those
/// other live brokers lead, by leader. A partition with no live leader
/// now fails the completion, which is retried.
fn split_partitions(
    broker: &Broker,
    partitions: &BTreeSet<(String, i32)>,
) -> Result<(BTreeSet<(String, i32)>, RemotePartitions), ErrorCode> {
    let me = broker.config.broker_id;
    let live = broker.membership.live_ids(broker.env.clock.monotonic_ms());
    let mut local = BTreeSet::new();
    let mut remote = RemotePartitions::new();
    for (topic, index) in partitions {
        let leader = broker
            .topic(topic)
            .and_then(|t| t.partition(*index).map(|seat| seat.leader()));
        match leader {
            // Gone (deleted topic or partition): write_markers skips it.
            None => {
                local.insert((topic.clone(), *index));
            }
            Some(Some(c)) if c.broker_id != me && live.contains(&c.broker_id) => {
                remote
                    .entry(c.broker_id)
                    .or_default()
                    .insert((topic.clone(), *index), c.epoch);
            }
            Some(Some(c)) if c.broker_id == me => {
                local.insert((topic.clone(), *index));
            }
            Some(_) => return Err(ErrorCode::NotLeaderOrFollower),
        }
    }
    Ok((local, remote))
}

/// The claim of the live broker holding a group's coordinator slot, if
/// another one does.
fn group_owner(broker: &Broker, group: &str) -> Option<Claim> {
    let slot = kaas_core::cluster::coordinator_slot(group);
    let claim = broker.groups.slot_claim(slot)?;
    let live = broker.membership.live_ids(broker.env.clock.monotonic_ms());
    (claim.broker_id != broker.config.broker_id && live.contains(&claim.broker_id)).then_some(claim)
}

/// An empty queue request for `prepared`'s markers.
fn request(broker: &Broker, prepared: &TxnEntry, marker: IncomingMarker) -> MarkerRequest {
    MarkerRequest {
        version: MARKER_QUEUE_VERSION,
        from: broker.config.broker_id,
        // Set by `dispatch`, fresh each time.
        nonce: 0,
        producer_id: prepared.producer_id,
        producer_epoch: prepared.producer_epoch,
        coordinator_epoch: marker.coordinator_epoch,
        commit: marker.commit,
        partitions: BTreeSet::new(),
        groups: BTreeSet::new(),
        leader_epochs: BTreeMap::new(),
        group_epochs: BTreeMap::new(),
    }
}

/// The queue requests for partitions other brokers lead.
fn requests(
    broker: &Broker,
    prepared: &TxnEntry,
    marker: IncomingMarker,
    remote: RemotePartitions,
) -> BTreeMap<i32, MarkerRequest> {
    remote
        .into_iter()
        .map(|(target, partitions)| {
            let mut r = request(broker, prepared, marker);
            for ((topic, index), leader_epoch) in partitions {
                r.add_partition(&topic, index, leader_epoch);
            }
            (target, r)
        })
        .collect()
}

/// Writes `marker` to every partition and waits until all are durable.
/// A partition whose topic was deleted owes nothing.
async fn write_markers(
    broker: &Arc<Broker>,
    partitions: &BTreeSet<(String, i32)>,
    marker: IncomingMarker,
) -> Result<(), ErrorCode> {
    // Spawned, so the writes to different partitions run at once (a
    // JoinSet would do, but madsim's tokio has none).
    let mut writes = Vec::new();
    for (topic, index) in partitions {
        let partition = match broker.partition(topic, *index, -1) {
            Ok(p) => p,
            Err(ErrorCode::UnknownTopicOrPartition) => continue,
            Err(code) => return Err(code),
        };
        let buggify = broker.env.buggify.clone();
        writes.push(tokio::spawn(async move {
            let failed = ErrorCode::KafkaStorageError;
            buggify.at_or(Site::MarkerWrite, failed).await?;
            let offset = partition.write_marker(marker).await?;
            buggify.at_or(Site::MarkerAppended, failed).await?;
            if planted(Bug::MarkerNotAwaitedDurable) {
                return Ok(());
            }
            partition.wait_durable(offset + 1).await
        }));
    }
    let mut outcome = Ok(());
    for write in writes {
        let result = write.await.unwrap_or(Err(ErrorCode::KafkaStorageError));
        if let Err(code) = result {
            outcome = Err(code);
        }
    }
    outcome
}
