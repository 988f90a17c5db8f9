//! The driver over a real directory: durability across a reopen, group
//! commit of slot writes, failed writes, and timers on real time.

use super::GroupCoordinator;
use crate::volume::Volume;
use bytes::Bytes;
use kaas_core::cluster::coordinator_slot;
use kaas_core::group::coordinator::{CommitOffset, CommitRequest};
use kaas_core::group::slot::SlotState;
use kaas_core::group::{GroupConfig, JoinRequest, Protocol, SyncRequest};
use kaas_core::layout::{group_slot_file, group_slot_journal};
use kaas_core::protocol::ErrorCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::slot_store::test_volume::flaky;

/// A coordinator as broker 0 on `volume`.
fn open(volume: Arc<dyn Volume>, config: GroupConfig) -> Arc<GroupCoordinator> {
    let env = crate::env::Env::system();
    let c = GroupCoordinator::open(
        volume,
        env.clone(),
        crate::slot_store::leased(0, &env),
        config,
    )
    .unwrap();
    crate::slot_store::serve_all(c.as_ref(), 0);
    c
}

fn simple_commit(group: &str, partition: i32, offset: i64) -> CommitRequest {
    CommitRequest {
        group_id: group.into(),
        member_id: String::new(),
        instance_id: None,
        generation: -1,
        retention_time_ms: -1,
        missing_group_is_not_found: false,
        offsets: vec![CommitOffset {
            topic: "t".into(),
            partition,
            offset,
            leader_epoch: 4,
            metadata: Some("m".into()),
        }],
    }
}

/// The committed offset, -1 if none (as the wire says it).
fn committed(c: &GroupCoordinator, group: &str, partition: i32) -> i64 {
    let fetched = c
        .fetch_offsets(group, Some(&[("t".to_string(), vec![partition])]), false)
        .expect("served");
    match &fetched[0].1[0].committed {
        Ok(Some(c)) => c.offset,
        Ok(None) => -1,
        Err(e) => panic!("not told: {e:?}"),
    }
}

#[tokio::test]
async fn committed_offsets_survive_reopening_the_volume() {
    let dir = tempfile::tempdir().unwrap();
    let (volume, _) = flaky(dir.path());
    let c = open(volume.clone(), GroupConfig::default());
    assert_eq!(
        c.commit_offsets(simple_commit("g", 0, 42)).await,
        Ok(vec![Ok(())])
    );
    assert_eq!(committed(&c, "g", 0), 42);
    drop(c);
    // What a restart (or kill -9 after the answer) finds on the volume.
    let slot = coordinator_slot("g");
    let state = crate::slot_store::load(
        volume.as_ref(),
        &group_slot_file(slot, 0),
        &group_slot_journal(slot, 0),
        |bytes| SlotState::decode(bytes, slot),
    )
    .unwrap()
    .state
    .expect("slot written");
    assert_eq!(state.groups["g"].offsets["t"][&0].offset, 42);
    let reopened = open(volume, GroupConfig::default());
    assert_eq!(committed(&reopened, "g", 0), 42);
    let listed = reopened.list_groups(&[], &[]);
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].group_id, "g");
}

#[tokio::test]
async fn concurrent_commits_to_one_slot_share_a_write() {
    let dir = tempfile::tempdir().unwrap();
    let (volume, slot_writes) = flaky(dir.path());
    let c = open(volume.clone(), GroupConfig::default());
    let commits: Vec<_> = (0..64)
        .map(|p| c.commit_offsets(simple_commit("g", p, p as i64 * 10)))
        .collect();
    for result in futures_join_all(commits).await {
        assert_eq!(result, Ok(vec![Ok(())]));
    }
    for p in 0..64 {
        assert_eq!(committed(&c, "g", p), p as i64 * 10);
    }
    let writes = slot_writes.writes.load(Ordering::SeqCst);
    assert!(
        writes <= 2,
        "64 concurrent commits took {writes} slot writes"
    );
}

#[tokio::test]
async fn a_failed_slot_write_refuses_the_commit_and_shows_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (volume, slot_writes) = flaky(dir.path());
    let c = open(volume.clone(), GroupConfig::default());
    assert_eq!(
        c.commit_offsets(simple_commit("g", 0, 1)).await,
        Ok(vec![Ok(())])
    );
    slot_writes.fail.store(true, Ordering::SeqCst);
    assert_eq!(
        c.commit_offsets(simple_commit("g", 0, 2)).await,
        Ok(vec![Err(ErrorCode::NotCoordinator)])
    );
    assert_eq!(committed(&c, "g", 0), 1);
    // A deletion that cannot be written leaves the group in place.
    assert_eq!(
        c.delete_groups(&["g".to_string()]).await,
        vec![Err(ErrorCode::NotCoordinator)]
    );
    assert_eq!(c.list_groups(&[], &[]).len(), 1);
    assert_eq!(committed(&c, "g", 0), 1);
    slot_writes.fail.store(false, Ordering::SeqCst);
    assert_eq!(
        c.commit_offsets(simple_commit("g", 0, 3)).await,
        Ok(vec![Ok(())])
    );
    assert_eq!(committed(&c, "g", 0), 3);
}

/// A dynamic consumer's JoinGroup with short timeouts.
fn join_req(member_id: &str) -> JoinRequest {
    JoinRequest {
        member_id: member_id.into(),
        instance_id: None,
        client_id: "test".into(),
        client_host: String::new(),
        session_timeout_ms: 300,
        rebalance_timeout_ms: 1_000,
        protocol_type: "consumer".into(),
        protocols: vec![Protocol {
            name: "range".into(),
            metadata: Bytes::from_static(b"x"),
        }],
        require_known_member_id: true,
        supports_skip_assignment: false,
        unique_suffix: "1".into(),
    }
}

/// The SyncGroup of a leader alone in its group, assigning itself "a".
fn leader_sync(member_id: &str, generation: i32) -> SyncRequest {
    SyncRequest {
        member_id: member_id.into(),
        instance_id: None,
        generation,
        protocol_type: None,
        protocol_name: None,
        assignments: vec![(member_id.into(), Bytes::from_static(b"a"))],
    }
}

fn short_timeouts() -> GroupConfig {
    GroupConfig {
        initial_rebalance_delay_ms: 50,
        min_session_timeout_ms: 200,
        ..GroupConfig::default()
    }
}

#[tokio::test]
async fn a_generation_that_cannot_be_written_answers_its_sync_not_coordinator() {
    let dir = tempfile::tempdir().unwrap();
    let (volume, slot_writes) = flaky(dir.path());
    let c = open(volume.clone(), short_timeouts());
    let first = c.join("g", join_req("")).await.expect_err("refused");
    let joined = c
        .join("g", join_req(&first.member_id))
        .await
        .expect("joined");
    slot_writes.fail.store(true, Ordering::SeqCst);
    assert_eq!(
        c.sync("g", leader_sync(&joined.member_id, joined.generation))
            .await,
        Err(ErrorCode::NotCoordinator)
    );
    // Nobody holds that assignment: the group rebalances instead.
    assert_eq!(
        c.describe_group("g").unwrap().map(|d| d.state),
        Some(kaas_core::group::GroupState::PreparingRebalance)
    );
    drop(c);
    // Nor did a restart find it.
    slot_writes.fail.store(false, Ordering::SeqCst);
    let reopened = open(volume, GroupConfig::default());
    assert_eq!(reopened.describe_group("g").unwrap().map(|d| d.state), None);
}

#[tokio::test]
async fn a_group_forms_and_its_member_expires_on_real_time() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(flaky(dir.path()).0, short_timeouts());
    let first = c.join("g", join_req("")).await.expect_err("refused");
    assert_eq!(first.error, ErrorCode::MemberIdRequired);
    // Parked until the timer ends the initial delay.
    let joined = c
        .join("g", join_req(&first.member_id))
        .await
        .expect("joined");
    assert_eq!(joined.generation, 1);
    assert_eq!(joined.leader, joined.member_id);
    let synced = c
        .sync("g", leader_sync(&joined.member_id, 1))
        .await
        .expect("synced");
    assert_eq!(synced.assignment, Bytes::from_static(b"a"));
    assert_eq!(c.heartbeat("g", &joined.member_id, None, 1), Ok(()));
    // No more heartbeats: the session (300 ms) expires and the group empties.
    tokio::time::sleep(std::time::Duration::from_millis(800)).await;
    assert_eq!(
        c.heartbeat("g", &joined.member_id, None, 1),
        Err(ErrorCode::UnknownMemberId)
    );
    assert_eq!(
        c.describe_group("g").unwrap().map(|d| d.state),
        Some(kaas_core::group::GroupState::Empty)
    );
}

/// Polls every future to completion concurrently (no extra crate needed).
async fn futures_join_all<F: std::future::Future>(futures: Vec<F>) -> Vec<F::Output> {
    let handles: Vec<_> = futures.into_iter().map(Box::pin).collect();
    let mut results: Vec<Option<F::Output>> = handles.iter().map(|_| None).collect();
    let mut handles: Vec<Option<_>> = handles.into_iter().map(Some).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (i, slot) in handles.iter_mut().enumerate() {
            if let Some(f) = slot {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => {
                        results[i] = Some(v);
                        *slot = None;
                    }
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    results.into_iter().map(|r| r.expect("completed")).collect()
}

/// Waits (boundedly) until `n` slot writes are held.
async fn until_held(slot_writes: &crate::slot_store::test_volume::SlotWrites, n: usize) {
    for _ in 0..5_000 {
        if slot_writes.waiting.load(Ordering::SeqCst) == n {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    panic!("{n} slot writes never held");
}

#[tokio::test]
async fn a_slot_let_go_of_acknowledges_nothing_more_and_is_loaded_back_from_the_volume() {
    use crate::slot_store::{load_claimed, writer_stopped, MovingSlots};
    use kaas_core::cluster::Claim;
    let dir = tempfile::tempdir().unwrap();
    let (volume, slot_writes) = flaky(dir.path());
    let c = open(volume.clone(), GroupConfig::default());
    let slot = coordinator_slot("g");
    assert_eq!(
        c.commit_offsets(simple_commit("g", 0, 1)).await,
        Ok(vec![Ok(())])
    );
    // One commit is being written, another queued behind it.
    slot_writes.hold.store(true, Ordering::SeqCst);
    let in_flight = tokio::spawn({
        let c = c.clone();
        async move { c.commit_offsets(simple_commit("g", 0, 2)).await }
    });
    until_held(&slot_writes, 1).await;
    let queued = tokio::spawn({
        let c = c.clone();
        async move { c.commit_offsets(simple_commit("g", 1, 7)).await }
    });
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;

    // The slot moves to broker 1.
    let theirs = Claim {
        broker_id: 1,
        epoch: 1,
    };
    c.unserve(slot, Some(theirs));
    assert_eq!(c.slot_claim(slot), Some(theirs));
    assert_eq!(c.serving(slot), None);
    assert_eq!(
        queued.await.unwrap(),
        Ok(vec![Err(ErrorCode::NotCoordinator)]),
        "a queued change is refused at once"
    );
    assert_eq!(
        c.fetch_offsets("g", None, false),
        Err(ErrorCode::NotCoordinator),
        "no answer from a forgotten slot"
    );
    assert_eq!(
        c.commit_offsets(simple_commit("g", 0, 3)).await,
        Err(ErrorCode::NotCoordinator)
    );
    assert!(c.list_groups(&[], &[]).is_empty(), "its groups left memory");
    slot_writes.hold.store(false, Ordering::SeqCst);
    assert_eq!(
        in_flight.await.unwrap(),
        Ok(vec![Err(ErrorCode::NotCoordinator)]),
        "the write in flight is never acknowledged"
    );
    writer_stopped(c.as_ref(), slot).await;

    // Back here at a newer epoch: loaded from what reached the volume (the
    // unacknowledged write landed, as a timed-out request's may).
    let ours = Claim {
        broker_id: 0,
        epoch: 2,
    };
    c.serve(slot, load_claimed(volume.as_ref(), slot, ours).unwrap());
    assert_eq!(committed(&c, "g", 0), 2);
    assert_eq!(committed(&c, "g", 1), -1);
    assert_eq!(
        c.commit_offsets(simple_commit("g", 1, 8)).await,
        Ok(vec![Ok(())])
    );
    let state = crate::slot_store::load(
        volume.as_ref(),
        &group_slot_file(slot, 2),
        &group_slot_journal(slot, 2),
        |b| SlotState::decode(b, slot),
    )
    .unwrap()
    .state
    .unwrap();
    assert_eq!(state.coordinator_epoch, 2, "written at the new epoch");
    assert_eq!(state.groups["g"].offsets["t"][&1].offset, 8);
    for gone in [group_slot_file(slot, 0), group_slot_journal(slot, 0)] {
        assert_eq!(volume.read(&gone).unwrap(), None, "{gone} removed");
    }
}

/// Lease bounds violated: another broker won the slot's next epoch while
/// this one still serves it. The commit reaches the volume, in this
/// epoch's journal, but is not acknowledged, and not seen here either.
#[tokio::test]
async fn a_commit_written_after_a_successor_claimed_is_not_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let (volume, slot_writes) = flaky(dir.path());
    let c = open(volume.clone(), GroupConfig::default());
    assert_eq!(
        c.commit_offsets(simple_commit("g", 0, 1)).await,
        Ok(vec![Ok(())])
    );
    let slot = coordinator_slot("g");
    let successor = kaas_core::layout::group_slot_epoch_file(slot, 1);
    volume
        .create_dir_all(&kaas_core::layout::group_slot_epochs_dir(slot))
        .unwrap();
    volume
        .write_atomic(&successor, b"{\"broker_id\":1}")
        .unwrap();
    let before = slot_writes.writes.load(Ordering::SeqCst);
    assert_eq!(
        c.commit_offsets(simple_commit("g", 0, 2)).await,
        Ok(vec![Err(ErrorCode::NotCoordinator)])
    );
    assert!(
        slot_writes.writes.load(Ordering::SeqCst) > before,
        "it was written"
    );
    // Not installed, and the slot let go of at once: nothing more is
    // answered from memory the successor may have changed since.
    assert_eq!(
        c.fetch_offsets("g", Some(&[("t".to_string(), vec![0])]), false)
            .err(),
        Some(ErrorCode::NotCoordinator)
    );
}
