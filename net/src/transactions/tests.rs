//! The coordinator driver's interleavings (docs/transactions.md, "Races"):
//! each pair of actors that may act on one transactional id at once, run
//! against the real slot store on a local volume.

use super::{InitOutcome, TxnCoordinator};
use crate::volume::Volume;
use kaas_core::protocol::ErrorCode;
use kaas_core::txn::{TxnConfig, TxnEntry, TxnState};
use std::sync::atomic::Ordering;
use std::sync::Arc;

const ID: &str = "tx";

use crate::slot_store::test_volume::flaky;

fn open(volume: Arc<dyn Volume>) -> Arc<TxnCoordinator> {
    let env = crate::env::Env::system();
    let c = TxnCoordinator::open(
        volume,
        env.clone(),
        crate::slot_store::leased(0, &env),
        TxnConfig::default(),
    )
    .unwrap();
    crate::slot_store::serve_all(c.as_ref(), 0);
    c
}

/// A producer at epoch 0 with an ongoing transaction on t-0.
async fn ongoing(c: &Arc<TxnCoordinator>, timeout_ms: i32) -> (i64, i16) {
    let (pid, epoch) = match c.init_producer_id(ID, timeout_ms, None, Some(42)).await {
        Ok(InitOutcome::Ready {
            producer_id,
            producer_epoch,
        }) => (producer_id, producer_epoch),
        _ => panic!("init failed"),
    };
    c.add_to_transaction(ID, pid, epoch, &[("t".into(), 0)], &[])
        .await
        .unwrap();
    (pid, epoch)
}

/// EndTxn of transaction version 1: the prepared entry, if any.
async fn end_txn(
    c: &Arc<TxnCoordinator>,
    pid: i64,
    epoch: i16,
    commit: bool,
) -> Result<Option<TxnEntry>, ErrorCode> {
    c.end_txn(ID, pid, epoch, commit, false, None)
        .await
        .map(|(prepared, _)| prepared)
}

fn state(c: &TxnCoordinator) -> TxnState {
    c.entry(ID).map(|e| e.state).unwrap()
}

#[tokio::test]
async fn a_decision_being_written_turns_away_a_second_one() {
    let dir = tempfile::tempdir().unwrap();
    let (volume, writes) = flaky(dir.path());
    let c = open(volume);
    let (pid, epoch) = ongoing(&c, 1).await;
    let found = c.entry(ID).unwrap();
    // EndTxn decides and its write is held on the disk...
    writes.hold.store(true, Ordering::SeqCst);
    let first = tokio::spawn({
        let c = c.clone();
        async move { end_txn(&c, pid, epoch, true).await }
    });
    for _ in 0..2_000 {
        if writes.waiting.load(Ordering::SeqCst) == 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    assert_eq!(
        writes.waiting.load(Ordering::SeqCst),
        1,
        "the EndTxn is being written"
    );
    // ...so every other decision on the id is told to retry, whatever it
    // would have decided: the reaper (the transaction is past its 1 ms
    // timeout), a second EndTxn, AddPartitions, InitProducerId.
    let busy = Err(ErrorCode::ConcurrentTransactions);
    assert_eq!(c.abort_timed_out(&found).await, busy);
    assert_eq!(end_txn(&c, pid, epoch, false).await, busy);
    assert_eq!(
        c.add_to_transaction(ID, pid, epoch, &[("t".into(), 1)], &[])
            .await,
        Err(ErrorCode::ConcurrentTransactions)
    );
    assert!(matches!(
        c.init_producer_id(ID, 60_000, None, None).await,
        Err(ErrorCode::ConcurrentTransactions)
    ));
    writes.hold.store(false, Ordering::SeqCst);
    let prepared = first.await.unwrap().unwrap().unwrap();
    assert_eq!(prepared.state, TxnState::PrepareCommit);
    assert_eq!(state(&c), TxnState::PrepareCommit);
    assert_eq!(prepared.partitions.len(), 1, "t-1 was never added");
}

#[tokio::test]
async fn the_reaper_leaves_a_prepared_transaction_to_its_completion() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(flaky(dir.path()).0);
    let (pid, epoch) = ongoing(&c, 1).await;
    let found = c.entry(ID).unwrap();
    let prepared = end_txn(&c, pid, epoch, true).await.unwrap().unwrap();
    // The reaper found it Ongoing and past its timeout a moment before:
    // by the time it decides, the transaction is prepared. Nothing to do.
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    assert_eq!(c.abort_timed_out(&found).await, Ok(None));
    assert_eq!(state(&c), TxnState::PrepareCommit);
    c.finish_prepared(&prepared).await.unwrap();
    assert_eq!(state(&c), TxnState::CompleteCommit);
}

#[tokio::test]
async fn a_reaped_producer_is_fenced_and_its_end_txn_refused() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(flaky(dir.path()).0);
    let (pid, epoch) = ongoing(&c, 1).await;
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let found = c.entry(ID).unwrap();
    let aborted = c.abort_timed_out(&found).await.unwrap().unwrap();
    assert_eq!(aborted.state, TxnState::PrepareAbort);
    assert_eq!(aborted.producer_epoch, epoch + 1);
    // The producer's EndTxn arrives after the reaper: fenced, so it can
    // never commit what was aborted (KAFKA-6119).
    assert_eq!(
        end_txn(&c, pid, epoch, true).await,
        Err(ErrorCode::ProducerFenced)
    );
    // InitProducerId while the abort's markers are owed: retry later.
    assert!(matches!(
        c.init_producer_id(ID, 60_000, None, None).await,
        Err(ErrorCode::ConcurrentTransactions)
    ));
}

#[tokio::test]
async fn two_completers_of_one_transaction_run_one_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(flaky(dir.path()).0);
    let (pid, epoch) = ongoing(&c, 60_000).await;
    let prepared = end_txn(&c, pid, epoch, false).await.unwrap().unwrap();
    // EndTxn's own completion and the reconcile.
    assert!(c.begin_completion(ID));
    assert!(!c.begin_completion(ID), "the reconcile must wait its turn");
    c.finish_prepared(&prepared).await.unwrap();
    c.end_completion(ID);
    // A completer that comes late finds the work done and writes nothing.
    assert!(c.begin_completion(ID));
    c.finish_prepared(&prepared).await.unwrap();
    c.end_completion(ID);
    assert_eq!(state(&c), TxnState::CompleteAbort);
    // EndTxn retried in the same direction succeeds, the other is refused.
    assert_eq!(end_txn(&c, pid, epoch, false).await, Ok(None));
    assert_eq!(
        end_txn(&c, pid, epoch, true).await,
        Err(ErrorCode::InvalidTxnState)
    );
}

#[tokio::test]
async fn init_producer_id_during_a_transaction_aborts_it_first_under_a_bumped_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(flaky(dir.path()).0);
    let (_, epoch) = ongoing(&c, 60_000).await;
    let prepared: TxnEntry = match c.init_producer_id(ID, 60_000, None, None).await {
        Ok(InitOutcome::AbortFirst(p)) => p,
        _ => panic!("expected the transaction to be aborted first"),
    };
    assert_eq!(prepared.state, TxnState::PrepareAbort);
    assert_eq!(prepared.producer_epoch, epoch + 1);
    // The reaper finds nothing Ongoing any more.
    assert_eq!(c.abort_timed_out(&prepared).await, Ok(None));
    c.finish_prepared(&prepared).await.unwrap();
    match c.init_producer_id(ID, 60_000, None, None).await {
        Ok(InitOutcome::Ready { producer_epoch, .. }) => assert_eq!(producer_epoch, epoch + 2),
        _ => panic!("the retry gets the next epoch"),
    }
}

#[tokio::test]
async fn a_failed_slot_write_changes_nothing_and_the_retry_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let (volume, writes) = flaky(dir.path());
    let c = open(volume);
    let (pid, epoch) = ongoing(&c, 60_000).await;
    writes.fail.store(true, Ordering::SeqCst);
    assert_eq!(
        end_txn(&c, pid, epoch, true).await,
        Err(ErrorCode::NotCoordinator)
    );
    assert_eq!(
        state(&c),
        TxnState::Ongoing,
        "nothing a crash could take back"
    );
    writes.fail.store(false, Ordering::SeqCst);
    assert!(end_txn(&c, pid, epoch, true).await.unwrap().is_some());
    assert_eq!(state(&c), TxnState::PrepareCommit);
}

#[tokio::test]
async fn concurrent_decisions_on_one_slot_share_a_write() {
    let dir = tempfile::tempdir().unwrap();
    let (volume, writes) = flaky(dir.path());
    let c = open(volume);
    // Ids of one slot, each initialized concurrently.
    let ids: Vec<String> = (0..)
        .map(|i| format!("tx-{i}"))
        .filter(|id| kaas_core::cluster::coordinator_slot(id) == 7)
        .take(32)
        .collect();
    let before = writes.writes.load(Ordering::SeqCst);
    let mut inits = tokio::task::JoinSet::new();
    for (i, id) in ids.into_iter().enumerate() {
        let c = c.clone();
        inits.spawn(async move {
            c.init_producer_id(&id, 60_000, None, Some(100 + i as i64))
                .await
        });
    }
    let mut ready = 0;
    while let Some(done) = inits.join_next().await {
        if matches!(done.unwrap(), Ok(InitOutcome::Ready { .. })) {
            ready += 1;
        }
    }
    assert_eq!(ready, 32);
    let taken = writes.writes.load(Ordering::SeqCst) - before;
    assert!(
        taken <= 3,
        "32 concurrent InitProducerIds took {taken} slot writes"
    );
}

#[tokio::test]
async fn entries_survive_reopening_the_volume() {
    let dir = tempfile::tempdir().unwrap();
    let (volume, _) = flaky(dir.path());
    let c = open(volume.clone());
    let (pid, epoch) = ongoing(&c, 60_000).await;
    end_txn(&c, pid, epoch, true).await.unwrap();
    drop(c);
    let c = open(volume);
    let e = c.entry(ID).unwrap();
    assert_eq!(
        (e.producer_id, e.producer_epoch, e.state),
        (pid, epoch, TxnState::PrepareCommit)
    );
    assert_eq!(e.partitions.len(), 1, "the markers still owed");
}

#[tokio::test]
async fn a_partition_already_added_is_verified_while_another_is_being_added() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(flaky(dir.path()).0);
    let (pid, epoch) = ongoing(&c, 60_000).await;
    let t0 = ("t".to_string(), 0);
    let t1 = ("t".to_string(), 1);
    let (added, (during_t0, during_t1)) = tokio::join!(
        c.add_to_transaction(ID, pid, epoch, std::slice::from_ref(&t1), &[]),
        async {
            // The AddPartitionsToTxn for t-1 is being written now.
            tokio::task::yield_now().await;
            (c.verify(ID, pid, epoch, &t0), c.verify(ID, pid, epoch, &t1))
        }
    );
    assert_eq!(added, Ok(()));
    assert_eq!(during_t0, Ok(()), "t-0 is in the durable entry");
    assert_eq!(
        during_t1,
        Err(ErrorCode::ConcurrentTransactions),
        "t-1 is not durable yet: retry"
    );
    assert_eq!(c.verify(ID, pid, epoch, &t1), Ok(()));
}

#[tokio::test]
async fn a_slot_let_go_of_decides_nothing_and_a_new_owner_finds_its_transactions() {
    use crate::slot_store::{load_claimed, writer_stopped, MovingSlots};
    use kaas_core::cluster::{coordinator_slot, Claim};
    let dir = tempfile::tempdir().unwrap();
    let (volume, _) = flaky(dir.path());
    let c = open(volume.clone());
    let (pid, epoch) = ongoing(&c, 60_000).await;
    let prepared = end_txn(&c, pid, epoch, true).await.unwrap().unwrap();
    let slot = coordinator_slot(ID);
    c.unserve(slot, None);
    writer_stopped(c.as_ref(), slot).await;
    assert_eq!(c.entry(ID), None, "its state left memory");
    assert!(c.entries().is_empty(), "the timers find nothing of it");
    assert_eq!(
        c.finish_prepared(&prepared).await,
        Err(ErrorCode::NotCoordinator)
    );
    assert_eq!(
        c.verify(ID, pid, epoch, &("t".into(), 0)),
        Err(ErrorCode::NotCoordinator)
    );
    assert_eq!(c.coordinator_epoch(ID), -1);

    // Another coordinator takes the slot at the next epoch: the prepared
    // transaction is there for its timers, and its markers carry the new
    // coordinator epoch.
    let next = TxnCoordinator::open(
        volume.clone(),
        crate::env::Env::system(),
        crate::slot_store::leased(1, &crate::env::Env::system()),
        TxnConfig::default(),
    )
    .unwrap();
    let theirs = Claim {
        broker_id: 1,
        epoch: 1,
    };
    next.serve(slot, load_claimed(volume.as_ref(), slot, theirs).unwrap());
    assert_eq!(state(&next), TxnState::PrepareCommit);
    assert_eq!(next.entries().len(), 1);
    assert_eq!(next.coordinator_epoch(ID), 1);
    assert_eq!(next.finish_prepared(&prepared).await, Ok(()));
    assert_eq!(state(&next), TxnState::CompleteCommit);
}

/// Complete* is written without a sync of its own: EndTxn's completion
/// costs no journal sync, and the producer's next decision, synced, makes
/// it durable along with itself.
#[tokio::test]
async fn a_completion_is_made_durable_by_the_next_decision() {
    let dir = tempfile::tempdir().unwrap();
    let (volume, writes) = flaky(dir.path());
    let c = open(volume.clone());
    let (pid, epoch) = ongoing(&c, 60_000).await;
    let synced = || writes.writes.load(Ordering::SeqCst);
    let before = synced();
    let prepared = end_txn(&c, pid, epoch, true).await.unwrap().unwrap();
    assert_eq!(synced(), before + 1, "Prepare* is synced");
    c.finish_prepared(&prepared).await.unwrap();
    assert_eq!(state(&c), TxnState::CompleteCommit);
    assert_eq!(synced(), before + 1, "Complete* has no sync of its own");
    c.add_to_transaction(ID, pid, epoch, &[("t".into(), 1)], &[])
        .await
        .unwrap();
    assert_eq!(synced(), before + 2);
    drop(c);
    let e = open(volume).entry(ID).unwrap();
    assert_eq!(e.state, TxnState::Ongoing);
    assert_eq!(e.partitions.len(), 1, "the new transaction's only");
}

/// A write that finds a successor's claim lets the slot go at once: a
/// request the stale entry would answer without a write (a partition
/// already added) is NOT_COORDINATOR, not acknowledged from memory
/// (simulator seed 682).
#[tokio::test]
async fn a_slot_whose_write_found_a_successor_answers_nothing_from_memory() {
    let dir = tempfile::tempdir().unwrap();
    let (volume, _) = flaky(dir.path());
    let c = open(volume.clone());
    let (pid, epoch) = ongoing(&c, 60_000).await;
    let slot = kaas_core::cluster::coordinator_slot(ID);
    volume
        .create_dir_all(&kaas_core::layout::txn_slot_epochs_dir(slot))
        .unwrap();
    volume
        .write_atomic(
            &kaas_core::layout::txn_slot_epoch_file(slot, 1),
            b"{\"broker_id\":1}",
        )
        .unwrap();
    // A write (a second partition) finds the successor and is refused ...
    assert_eq!(
        c.add_to_transaction(ID, pid, epoch, &[("t".into(), 1)], &[])
            .await
            .err(),
        Some(ErrorCode::NotCoordinator)
    );
    // ... and the partition already added, which needs no write, is not
    // acknowledged either.
    assert_eq!(
        c.add_to_transaction(ID, pid, epoch, &[("t".into(), 0)], &[])
            .await
            .err(),
        Some(ErrorCode::NotCoordinator)
    );
    assert!(c.entry(ID).is_none(), "nothing of the slot is kept");
}
