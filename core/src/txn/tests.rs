use super::rules::*;
use super::*;
use crate::protocol::ErrorCode;
use proptest::prelude::*;

const ID: &str = "tx";
const NOW: i64 = 1_000_000;

fn fresh() -> impl FnMut() -> i64 {
    || 7000
}

fn ready(r: Result<Init, ErrorCode>) -> TxnEntry {
    match r {
        Ok(Init::Ready(e)) => e,
        other => panic!("expected Ready, got {other:?}"),
    }
}

/// A new id initialized once: producer 7000 at epoch 0.
fn initialized() -> TxnEntry {
    ready(init_producer_id(None, ID, 60_000, None, fresh(), NOW))
}

fn parts(list: &[(&str, i32)]) -> Vec<(String, i32)> {
    list.iter().map(|(t, p)| (t.to_string(), *p)).collect()
}

fn ongoing() -> TxnEntry {
    let e = initialized();
    add_to_transaction(
        &e,
        7000,
        0,
        &parts(&[("t", 0), ("t", 1)]),
        &["g".into()],
        NOW + 5,
    )
    .expect("added")
    .expect("changed")
}

/// `ongoing()` after an EndTxn in the given direction.
fn prepared(commit: bool) -> TxnEntry {
    match end_txn(&ongoing(), 7000, 0, commit, NOW + 10) {
        Ok(End::Prepare(p)) => p,
        other => panic!("expected Prepare, got {other:?}"),
    }
}

fn claim(producer_id: i64, producer_epoch: i16) -> Option<Claim> {
    Some(Claim {
        producer_id,
        producer_epoch,
    })
}

#[test]
fn validate_transaction_timeout_refuses_zero_negative_and_above_the_maximum() {
    let max = DEFAULT_MAX_TIMEOUT_MS;
    assert_eq!(validate_transaction_timeout(1, max), Ok(()));
    assert_eq!(validate_transaction_timeout(max, max), Ok(()));
    for bad in [0, -1, max + 1] {
        assert_eq!(
            validate_transaction_timeout(bad, max),
            Err(ErrorCode::InvalidTransactionTimeout)
        );
    }
}

#[test]
fn first_init_allocates_a_producer_id_at_epoch_0() {
    let e = initialized();
    assert_eq!((e.producer_id, e.producer_epoch), (7000, 0));
    assert_eq!(e.last_producer_epoch, NO_PRODUCER_EPOCH);
    assert_eq!(e.state, TxnState::Empty);
    // A claim on an id never seen (the producer's state expired) is honoured
    // with a fresh producer id, as Kafka does.
    let e = ready(init_producer_id(
        None,
        ID,
        60_000,
        claim(42, 9),
        fresh(),
        NOW,
    ));
    assert_eq!((e.producer_id, e.producer_epoch), (7000, 0));
}

#[test]
fn init_without_a_claim_bumps_the_epoch_and_forgets_the_last() {
    let e = initialized();
    let next = ready(init_producer_id(
        Some(&e),
        ID,
        60_000,
        None,
        || unreachable!(),
        NOW,
    ));
    assert_eq!((next.producer_id, next.producer_epoch), (7000, 1));
    assert_eq!(next.last_producer_epoch, NO_PRODUCER_EPOCH);
}

#[test]
fn init_claiming_the_current_epoch_bumps_and_remembers_it() {
    let e = initialized();
    let next = ready(init_producer_id(
        Some(&e),
        ID,
        60_000,
        claim(7000, 0),
        || unreachable!(),
        NOW,
    ));
    assert_eq!((next.producer_epoch, next.last_producer_epoch), (1, 0));
}

#[test]
fn init_claiming_the_last_epoch_is_a_retry_answered_without_a_bump() {
    let e = initialized();
    let bumped = ready(init_producer_id(
        Some(&e),
        ID,
        60_000,
        claim(7000, 0),
        || unreachable!(),
        NOW,
    ));
    let retry = ready(init_producer_id(
        Some(&bumped),
        ID,
        60_000,
        claim(7000, 0),
        || unreachable!(),
        NOW,
    ));
    assert_eq!((retry.producer_epoch, retry.last_producer_epoch), (1, 0));
}

#[test]
fn init_claiming_another_epoch_is_producer_fenced() {
    let e = initialized();
    let bumped = ready(init_producer_id(
        Some(&e),
        ID,
        60_000,
        None,
        || unreachable!(),
        NOW,
    ));
    let bumped = ready(init_producer_id(
        Some(&bumped),
        ID,
        60_000,
        None,
        || unreachable!(),
        NOW,
    ));
    assert_eq!(
        init_producer_id(
            Some(&bumped),
            ID,
            60_000,
            claim(7000, 0),
            || unreachable!(),
            NOW
        ),
        Err(ErrorCode::ProducerFenced)
    );
}

#[test]
fn init_claiming_another_producer_id_is_producer_fenced() {
    let e = initialized();
    assert_eq!(
        init_producer_id(Some(&e), ID, 60_000, claim(6999, 0), || unreachable!(), NOW),
        Err(ErrorCode::ProducerFenced)
    );
}

#[test]
fn init_on_an_exhausted_epoch_rotates_to_a_fresh_producer_id() {
    let mut e = initialized();
    e.producer_epoch = i16::MAX - 1;
    let next = ready(init_producer_id(
        Some(&e),
        ID,
        60_000,
        claim(7000, i16::MAX - 1),
        || 8000,
        NOW,
    ));
    assert_eq!((next.producer_id, next.producer_epoch), (8000, 0));
    assert_eq!(
        (next.prev_producer_id, next.last_producer_epoch),
        (7000, i16::MAX - 1)
    );
    // The producer missed that answer and claims its old identity again:
    // a valid claim (previous id, exhausted epoch), answered as a retry.
    let retry = ready(init_producer_id(
        Some(&next),
        ID,
        60_000,
        claim(7000, i16::MAX - 1),
        || unreachable!(),
        NOW,
    ));
    assert_eq!((retry.producer_id, retry.producer_epoch), (8000, 0));
}

#[test]
fn init_with_a_transaction_in_flight_aborts_it_under_a_bumped_epoch() {
    let e = ongoing();
    match init_producer_id(Some(&e), ID, 60_000, None, || unreachable!(), NOW + 10) {
        Ok(Init::AbortFirst(next)) => {
            assert_eq!(next.state, TxnState::PrepareAbort);
            assert_eq!(next.producer_epoch, 1);
            assert_eq!(next.partitions, e.partitions, "the abort markers are owed");
            assert_eq!(next.groups, e.groups);
            // The producer that began it is fenced.
            assert_eq!(
                end_txn(&next, 7000, 0, true, NOW + 11),
                Err(ErrorCode::ProducerFenced)
            );
        }
        other => panic!("expected AbortFirst, got {other:?}"),
    }
}

#[test]
fn init_while_markers_are_written_is_concurrent_transactions() {
    let prepared = prepared(true);
    assert_eq!(
        init_producer_id(Some(&prepared), ID, 60_000, None, || unreachable!(), NOW),
        Err(ErrorCode::ConcurrentTransactions)
    );
}

#[test]
fn add_to_transaction_begins_an_ongoing_transaction() {
    let e = ongoing();
    assert_eq!(e.state, TxnState::Ongoing);
    assert_eq!(e.start_ms, NOW + 5);
    assert_eq!(e.partitions.len(), 2);
    let more = add_to_transaction(&e, 7000, 0, &parts(&[("u", 0)]), &[], NOW + 9)
        .expect("added")
        .expect("changed");
    assert_eq!(
        more.start_ms,
        NOW + 5,
        "the transaction began at its first add"
    );
    assert_eq!(more.partitions.len(), 3);
}

#[test]
fn add_to_transaction_of_known_partitions_changes_nothing() {
    let e = ongoing();
    assert_eq!(
        add_to_transaction(&e, 7000, 0, &parts(&[("t", 1)]), &["g".into()], NOW + 9),
        Ok(None)
    );
}

#[test]
fn add_to_transaction_checks_the_producer_id_then_the_epoch() {
    let e = ongoing();
    let p = parts(&[("u", 0)]);
    assert_eq!(
        add_to_transaction(&e, 1, 0, &p, &[], NOW),
        Err(ErrorCode::InvalidProducerIdMapping)
    );
    assert_eq!(
        add_to_transaction(&e, 7000, 3, &p, &[], NOW),
        Err(ErrorCode::ProducerFenced)
    );
}

#[test]
fn add_to_transaction_while_prepared_is_concurrent_transactions() {
    let prepared = prepared(false);
    assert_eq!(
        add_to_transaction(&prepared, 7000, 0, &parts(&[("u", 0)]), &[], NOW),
        Err(ErrorCode::ConcurrentTransactions)
    );
}

#[test]
fn end_txn_prepares_in_the_asked_direction_keeping_the_markers_owed() {
    let e = ongoing();
    for (commit, state) in [
        (true, TxnState::PrepareCommit),
        (false, TxnState::PrepareAbort),
    ] {
        let Ok(End::Prepare(p)) = end_txn(&e, 7000, 0, commit, NOW + 10) else {
            panic!("prepared")
        };
        assert_eq!(p.state, state);
        assert_eq!(
            (p.partitions.clone(), p.groups.clone()),
            (e.partitions.clone(), e.groups.clone())
        );
        // The same EndTxn again while the markers are written: retry later.
        assert_eq!(
            end_txn(&p, 7000, 0, commit, NOW),
            Err(ErrorCode::ConcurrentTransactions)
        );
        assert_eq!(
            end_txn(&p, 7000, 0, !commit, NOW),
            Err(ErrorCode::InvalidTxnState)
        );
    }
}

#[test]
fn end_txn_retried_after_completion_succeeds_and_the_other_direction_is_invalid_txn_state() {
    let p = prepared(true);
    let done = complete(&p, NOW + 20).expect("completed");
    assert_eq!(end_txn(&done, 7000, 0, true, NOW), Ok(End::AlreadyComplete));
    assert_eq!(
        end_txn(&done, 7000, 0, false, NOW),
        Err(ErrorCode::InvalidTxnState)
    );
}

#[test]
fn end_txn_on_empty_is_invalid_txn_state() {
    let e = initialized();
    assert_eq!(
        end_txn(&e, 7000, 0, true, NOW),
        Err(ErrorCode::InvalidTxnState)
    );
    assert_eq!(
        end_txn(&e, 7000, 1, true, NOW),
        Err(ErrorCode::ProducerFenced)
    );
    assert_eq!(
        end_txn(&e, 1, 0, true, NOW),
        Err(ErrorCode::InvalidProducerIdMapping)
    );
}

#[test]
fn complete_clears_the_partitions_and_groups() {
    let p = prepared(false);
    let done = complete(&p, NOW + 20).expect("completed");
    assert_eq!(done.state, TxnState::CompleteAbort);
    assert!(done.partitions.is_empty() && done.groups.is_empty());
    assert_eq!(
        complete(&done, NOW + 30),
        None,
        "a racing pass finds nothing to do"
    );
}

#[test]
fn reaper_aborts_an_ongoing_transaction_past_its_timeout_under_a_bumped_epoch() {
    let e = ongoing();
    assert!(!has_timed_out(&e, e.start_ms + 60_000));
    assert!(has_timed_out(&e, e.start_ms + 60_001));
    assert!(
        !has_timed_out(&initialized(), NOW + 10_000_000),
        "only Ongoing times out"
    );
    let aborted = fence_and_abort(&e, e.start_ms + 60_001);
    assert_eq!(
        (aborted.state, aborted.producer_epoch),
        (TxnState::PrepareAbort, 1)
    );
    assert_eq!(aborted.partitions, e.partitions);
    // The producer coming back with its old epoch is fenced (KAFKA-6119).
    assert_eq!(
        end_txn(&aborted, 7000, 0, true, NOW),
        Err(ErrorCode::ProducerFenced)
    );
}

#[test]
fn a_transaction_aborted_under_a_bumped_epoch_is_told_from_the_producers_own_ends() {
    let e = ongoing();
    let reaped = fence_and_abort(&e, e.start_ms + 60_001);
    assert!(was_aborted_under(&reaped, 7000, 0));
    assert!(!was_aborted_under(&reaped, 7000, 1), "the new epoch's own");
    assert!(!was_aborted_under(&reaped, 7001, 0), "another producer id");
    let mut completed = reaped.clone();
    completed.state = TxnState::CompleteAbort;
    assert!(was_aborted_under(&completed, 7000, 0));
    // The producer's own abort keeps its epoch.
    let Ok(End::Prepare(own)) = end_txn(&e, 7000, 0, false, NOW) else {
        panic!("an Ongoing transaction prepares its abort");
    };
    assert!(!was_aborted_under(&own, 7000, 0));
    // A re-initialization leaves no transaction to have been aborted.
    let Ok(Init::Ready(reinit)) = init_producer_id(Some(&completed), "t", 60_000, None, || -1, NOW)
    else {
        panic!("a completed abort re-initializes");
    };
    assert!(!was_aborted_under(&reinit, 7000, 1));
}

#[test]
fn idle_ids_expire_after_the_expiration_time_and_busy_ones_never() {
    let e = initialized();
    let exp = DEFAULT_ID_EXPIRATION_MS;
    assert!(!has_expired(&e, e.last_update_ms + exp - 1, exp));
    assert!(has_expired(&e, e.last_update_ms + exp, exp));
    let busy = ongoing();
    assert!(!has_expired(&busy, busy.last_update_ms + 10 * exp, exp));
}

#[test]
fn fenced_error_is_producer_fenced_from_kip_588_versions() {
    assert_eq!(fenced_error_for(22, 3), ErrorCode::InvalidProducerEpoch);
    assert_eq!(fenced_error_for(22, 4), ErrorCode::ProducerFenced);
    for api in [24, 25, 26] {
        assert_eq!(fenced_error_for(api, 1), ErrorCode::InvalidProducerEpoch);
        assert_eq!(fenced_error_for(api, 2), ErrorCode::ProducerFenced);
    }
    // TxnOffsetCommit never says PRODUCER_FENCED.
    for version in 0..=5 {
        assert_eq!(
            fenced_error_for(28, version),
            ErrorCode::InvalidProducerEpoch
        );
    }
}

#[test]
fn produce_error_of_verification_speaks_the_produce_errors_clients_retry_or_know() {
    for pending in [
        ErrorCode::ConcurrentTransactions,
        ErrorCode::NotCoordinator,
        ErrorCode::CoordinatorNotAvailable,
    ] {
        let code = produce_error_of_verification(pending, 9);
        assert_eq!(code, ErrorCode::NotEnoughReplicas);
        assert!(refused_by_transaction_check(code));
    }
    assert_eq!(
        produce_error_of_verification(ErrorCode::ProducerFenced, 9),
        ErrorCode::InvalidProducerEpoch
    );
    assert_eq!(
        produce_error_of_verification(ErrorCode::InvalidTxnState, 10),
        ErrorCode::InvalidTxnState
    );
    assert_eq!(
        produce_error_of_verification(ErrorCode::InvalidTxnState, 11),
        ErrorCode::TransactionAbortable
    );
    // A sequence error comes from the log's rules, with its log start.
    assert!(!refused_by_transaction_check(
        ErrorCode::OutOfOrderSequenceNumber
    ));
}

#[test]
fn not_in_transaction_error_is_transaction_abortable_for_kip_890_versions() {
    assert_eq!(not_in_transaction_error(0, 10), ErrorCode::InvalidTxnState);
    assert_eq!(
        not_in_transaction_error(0, 11),
        ErrorCode::TransactionAbortable
    );
    assert_eq!(not_in_transaction_error(28, 3), ErrorCode::InvalidTxnState);
    assert_eq!(
        not_in_transaction_error(28, 4),
        ErrorCode::TransactionAbortable
    );
    assert_eq!(
        not_in_transaction_error(24, 4),
        ErrorCode::TransactionAbortable
    );
}

#[test]
fn verify_partition_accepts_only_a_partition_the_ongoing_transaction_added() {
    let e = ongoing();
    let t0 = ("t".to_string(), 0);
    assert_eq!(verify_partition(Some(&e), 7000, 0, &t0), Ok(()));
    let other = ("t".to_string(), 2);
    assert_eq!(
        verify_partition(Some(&e), 7000, 0, &other),
        Err(ErrorCode::InvalidTxnState)
    );
    assert_eq!(
        verify_partition(None, 7000, 0, &t0),
        Err(ErrorCode::InvalidProducerIdMapping)
    );
    assert_eq!(
        verify_partition(Some(&e), 7001, 0, &t0),
        Err(ErrorCode::InvalidProducerIdMapping)
    );
    // Once the transaction is prepared, its batches come too late.
    assert_eq!(
        verify_partition(Some(&prepared(true)), 7000, 0, &t0),
        Err(ErrorCode::InvalidTxnState)
    );
    // A zombie of an older epoch is told it is fenced.
    let bumped = fence_and_abort(&e, NOW + 20);
    assert_eq!(
        verify_partition(Some(&bumped), 7000, 0, &t0),
        Err(ErrorCode::InvalidProducerEpoch)
    );
}

#[test]
fn verify_group_accepts_only_a_group_the_ongoing_transaction_added() {
    let e = ongoing();
    assert_eq!(verify_group(Some(&e), 7000, 0, "g"), Ok(()));
    assert_eq!(
        verify_group(Some(&e), 7000, 0, "other"),
        Err(ErrorCode::InvalidTxnState)
    );
    assert_eq!(
        verify_group(Some(&e), 7000, 1, "g"),
        Err(ErrorCode::ProducerFenced)
    );
    assert_eq!(
        verify_group(Some(&e), 7001, 0, "g"),
        Err(ErrorCode::InvalidProducerIdMapping)
    );
    assert_eq!(
        verify_group(None, 7000, 0, "g"),
        Err(ErrorCode::InvalidProducerIdMapping)
    );
    assert_eq!(
        verify_group(Some(&prepared(true)), 7000, 0, "g"),
        Err(ErrorCode::InvalidTxnState)
    );
}

#[test]
fn is_listed_matches_every_filter_given() {
    let e = ongoing();
    let none: &[String] = &[];
    assert!(is_listed(&e, none, &[], -1, None, NOW + 100));
    assert!(is_listed(
        &e,
        &["Ongoing".into()],
        &[7000],
        -1,
        None,
        NOW + 100
    ));
    assert!(!is_listed(&e, &["Empty".into()], &[], -1, None, NOW + 100));
    assert!(!is_listed(&e, none, &[1], -1, None, NOW + 100));
    // Running for 95 ms (began at NOW + 5).
    assert!(is_listed(&e, none, &[], 94, None, NOW + 100));
    assert!(!is_listed(&e, none, &[], 95, None, NOW + 100));
    // An id with no transaction in flight starts at -1: listed, as Kafka
    // lists it.
    assert!(is_listed(
        &initialized(),
        none,
        &[],
        1_000_000,
        None,
        NOW + 100
    ));
    // KIP-1152: the pattern must match the whole id.
    let listed_by = |p: &str| {
        let re = transactional_id_pattern(Some(p)).unwrap();
        is_listed(&e, none, &[], -1, re.as_ref(), NOW + 100)
    };
    assert!(listed_by(&format!("^{ID}$")));
    assert!(listed_by(".*"));
    assert!(!listed_by(&ID[1..]), "part of the id is not a match");
}

#[test]
fn transactional_id_pattern_must_compile_and_empty_filters_nothing() {
    assert!(transactional_id_pattern(None).unwrap().is_none());
    assert!(transactional_id_pattern(Some("")).unwrap().is_none());
    assert_eq!(
        transactional_id_pattern(Some("(ab(cd")).err(),
        Some(ErrorCode::InvalidRegularExpression)
    );
    // A pattern that would compile to more than the limit is refused, not
    // built: its size is the sender's choice.
    assert_eq!(
        transactional_id_pattern(Some("(a{1000}){1000}")).err(),
        Some(ErrorCode::InvalidRegularExpression)
    );
}

fn end_v2(e: &TxnEntry, epoch: i16, commit: bool) -> Result<End, ErrorCode> {
    end_txn_v2(e, 7000, epoch, commit, || 9000, NOW + 10)
}

fn prepared_v2(r: Result<End, ErrorCode>) -> TxnEntry {
    match r {
        Ok(End::Prepare(p)) => p,
        other => panic!("expected Prepare, got {other:?}"),
    }
}

#[test]
fn end_txn_v2_bumps_the_epoch_at_every_end_and_markers_carry_it() {
    let p = prepared_v2(end_v2(&ongoing(), 0, true));
    assert_eq!(p.state, TxnState::PrepareCommit);
    assert_eq!((p.producer_epoch, p.last_producer_epoch), (1, 0));
    assert_eq!(p.partitions.len(), 2, "the markers owed, at the new epoch");
    let done = complete(&p, NOW + 20).expect("completes");
    // The producer carries on at epoch 1: a new transaction, and its end.
    let next = add_to_transaction(&done, 7000, 1, &parts(&[("t", 0)]), &[], NOW + 30)
        .expect("added")
        .expect("changed");
    let p2 = prepared_v2(end_v2(&next, 1, false));
    assert_eq!((p2.state, p2.producer_epoch), (TxnState::PrepareAbort, 2));
}

#[test]
fn end_txn_v2_retried_with_the_epoch_before_the_bump_succeeds_in_the_same_direction_only() {
    let done = complete(&prepared_v2(end_v2(&ongoing(), 0, true)), NOW + 20).expect("completes");
    assert_eq!(end_v2(&done, 0, true), Ok(End::AlreadyComplete));
    assert_eq!(end_v2(&done, 0, false), Err(ErrorCode::InvalidTxnState));
    // With the new epoch nothing is ongoing: commit is refused, abort bumps.
    assert_eq!(end_v2(&done, 1, true), Err(ErrorCode::InvalidTxnState));
    let p = prepared_v2(end_v2(&done, 1, false));
    assert_eq!((p.state, p.producer_epoch), (TxnState::PrepareAbort, 2));
    assert!(p.partitions.is_empty());
    assert_eq!(
        p.start_ms,
        NOW + 10,
        "an empty transaction begun and aborted now"
    );
    // While the bump is being completed, the same retry waits.
    let writing = prepared_v2(end_v2(&ongoing(), 0, true));
    assert_eq!(
        end_v2(&writing, 0, true),
        Err(ErrorCode::ConcurrentTransactions)
    );
    assert_eq!(end_v2(&writing, 0, false), Err(ErrorCode::InvalidTxnState));
}

#[test]
fn end_txn_v2_after_the_reaper_is_invalid_txn_state_and_older_epochs_are_fenced() {
    let reaped = complete(&fence_and_abort(&ongoing(), NOW + 20), NOW + 30).expect("completes");
    assert_eq!(reaped.producer_epoch, 1);
    assert_eq!(end_v2(&reaped, 0, true), Err(ErrorCode::InvalidTxnState));
    let later = complete(&prepared_v2(end_v2(&reaped, 1, false)), NOW + 40).expect("completes");
    assert_eq!(later.producer_epoch, 2);
    assert_eq!(end_v2(&later, 0, true), Err(ErrorCode::ProducerFenced));
    assert_eq!(end_v2(&later, 3, true), Err(ErrorCode::ProducerFenced));
    assert_eq!(
        end_txn_v2(&later, 7001, 2, true, || 9000, NOW),
        Err(ErrorCode::InvalidProducerIdMapping)
    );
}

/// KIP-890: at an exhausted epoch EndTxn v5 still bumps (to i16::MAX, for
/// the markers) and moves the id to a fresh producer id at epoch 0 when the
/// transaction completes; the answer names that identity, a lost answer's
/// retry from the old one is recognised, and the old identity is fenced.
#[test]
fn end_txn_v2_at_an_exhausted_epoch_rotates_to_a_fresh_producer_id() {
    let mut e = ongoing();
    e.producer_epoch = i16::MAX - 1;
    let p = prepared_v2(end_v2(&e, i16::MAX - 1, true));
    assert_eq!(
        (p.producer_id, p.producer_epoch),
        (7000, i16::MAX),
        "the markers' identity"
    );
    assert_eq!(p.next_producer_id, 9000);
    assert_eq!(p.continues_as(), (9000, 0), "the answer");
    let done = complete(&p, NOW + 20).expect("completes");
    assert_eq!((done.producer_id, done.producer_epoch), (9000, 0));
    assert_eq!(
        (done.prev_producer_id, done.next_producer_id),
        (7000, NO_PRODUCER_ID)
    );
    assert_eq!(done.continues_as(), (9000, 0));
    // The answer was lost: the same EndTxn again succeeds, the other
    // direction does not, and the old identity at any other epoch is no
    // longer this id's.
    assert_eq!(end_v2(&done, i16::MAX - 1, true), Ok(End::AlreadyComplete));
    assert_eq!(
        end_v2(&done, i16::MAX - 1, false),
        Err(ErrorCode::InvalidTxnState)
    );
    assert_eq!(
        end_v2(&done, 5, true),
        Err(ErrorCode::InvalidProducerIdMapping)
    );
    // The new identity carries on from epoch 0.
    let next = add_to_transaction(&done, 9000, 0, &parts(&[("t", 0)]), &[], NOW + 30)
        .expect("added")
        .expect("changed");
    let p2 = prepared_v2(end_txn_v2(&next, 9000, 0, false, || 9001, NOW + 40));
    assert_eq!(
        (p2.producer_epoch, p2.next_producer_id),
        (1, NO_PRODUCER_ID)
    );
}

/// One client or coordinator action on a transactional id.
#[derive(Debug, Clone)]
enum Op {
    /// InitProducerId; the claim: none, the producer's view, or a stale one.
    Init(u8),
    Add(u8),
    End(bool),
    /// The markers became durable.
    Complete,
    /// The reaper runs far in the future.
    Reap,
    /// A request with the epoch before the last one the producer was given.
    StaleEnd,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..3).prop_map(Op::Init),
        (0u8..4).prop_map(Op::Add),
        any::<bool>().prop_map(Op::End),
        Just(Op::Complete),
        Just(Op::Reap),
        Just(Op::StaleEnd),
    ]
}

proptest! {
    /// Drives the machine with random actions against a model of what must
    /// hold whatever the order: transitions are legal, a producer id's epoch
    /// never goes back, the id rotates only from an exhausted epoch, what is
    /// owed is kept until completion and cleared after, and an epoch the
    /// coordinator has moved past is always refused.
    #[test]
    fn transitions_keep_the_coordinator_invariants(
        ops in proptest::collection::vec(op(), 1..60),
        start_epoch in prop_oneof![Just(0i16), Just(i16::MAX - 4)],
    ) {
        let mut next_pid = 100i64;
        let mut e = ready(init_producer_id(None, ID, 1_000, None, || 99, 0));
        e.producer_epoch = start_epoch;
        // The identity the producer last received.
        let mut mine = (e.producer_id, e.producer_epoch);
        let mut now = 0i64;
        for op in ops {
            now += 10;
            let before = e.clone();
            let after: Option<TxnEntry> = match op {
                Op::Init(which) => {
                    let c = match which {
                        0 => None,
                        1 => claim(mine.0, mine.1),
                        _ => claim(mine.0, mine.1.saturating_sub(2)),
                    };
                    match init_producer_id(Some(&e), ID, 1_000, c, || { next_pid += 1; next_pid }, now) {
                        Ok(Init::Ready(n)) => { mine = (n.producer_id, n.producer_epoch); Some(n) }
                        Ok(Init::AbortFirst(n)) => Some(n),
                        Err(code) => {
                            prop_assert!(matches!(code, ErrorCode::ProducerFenced | ErrorCode::ConcurrentTransactions));
                            None
                        }
                    }
                }
                Op::Add(n) => {
                    let p = parts(&[("t", i32::from(n))]);
                    add_to_transaction(&e, mine.0, mine.1, &p, &[], now).ok().flatten()
                }
                Op::End(commit) => match end_txn(&e, mine.0, mine.1, commit, now) {
                    Ok(End::Prepare(n)) => Some(n),
                    _ => None,
                },
                Op::Complete => complete(&e, now),
                Op::Reap => {
                    let later = now + 10_000;
                    has_timed_out(&e, later).then(|| fence_and_abort(&e, later))
                }
                Op::StaleEnd => {
                    if mine.1 > 0 || e.producer_epoch > mine.1 {
                        let stale = if e.producer_epoch > mine.1 { mine.1 } else { mine.1 - 1 };
                        prop_assert!(end_txn(&e, mine.0, stale, true, now).is_err());
                    }
                    None
                }
            };
            if let Some(n) = after {
                if n.state != before.state {
                    prop_assert!(before.state.may_move_to(n.state) || (before.state.is_idle() && n.state == TxnState::Empty),
                        "{:?} -> {:?}", before.state, n.state);
                }
                if n.producer_id == before.producer_id {
                    prop_assert!(n.producer_epoch >= before.producer_epoch);
                } else {
                    prop_assert!(epoch_is_exhausted(before.producer_epoch));
                    prop_assert_eq!(n.producer_epoch, 0);
                }
                if n.state.is_prepared() && before.state == TxnState::Ongoing {
                    prop_assert_eq!(&n.partitions, &before.partitions);
                }
                if n.state.is_idle() {
                    prop_assert!(n.partitions.is_empty() && n.groups.is_empty());
                }
                e = n;
            }
        }
    }
}
