//! The coordinator's rules, one function each (KIP-98, KIP-360, KIP-588).
//! Each takes the current entry and `now`, and returns the entry to persist
//! (or a typed outcome) without touching anything: the driver writes the
//! slot file, places markers and answers.

use super::entry::{TxnEntry, NO_PRODUCER_EPOCH, NO_PRODUCER_ID};
use super::state::TxnState;
use crate::coverage::{self, Mark};
use crate::deliberate_bugs::{planted, Bug};
use crate::protocol::ErrorCode;
use regex::{Regex, RegexBuilder};

/// `transaction.max.timeout.ms`: the longest transaction a producer may
/// ask for (Kafka's default, 15 minutes).
pub const DEFAULT_MAX_TIMEOUT_MS: i32 = 900_000;

/// `transactional.id.expiration.ms`: how long an idle transactional id is
/// kept (Kafka's default, 7 days).
pub const DEFAULT_ID_EXPIRATION_MS: i64 = 7 * 24 * 60 * 60 * 1000;

/// An identity a producer claims in InitProducerId v3+ (KIP-360): the
/// producer id and epoch it last had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim {
    pub producer_id: i64,
    pub producer_epoch: i16,
}

/// What an InitProducerId with a transactional id leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Init {
    /// Persist this entry, then answer with its producer id and epoch.
    Ready(TxnEntry),
    /// A transaction was in flight: persist this entry (its transaction
    /// aborting under a bumped epoch, so the old producer is fenced), owe
    /// its abort markers, and answer CONCURRENT_TRANSACTIONS: the producer
    /// retries once the abort completes, and gets the next epoch.
    AbortFirst(TxnEntry),
}

/// What an EndTxn leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// Persist this prepared entry, write its markers, then [`complete`].
    Prepare(TxnEntry),
    /// The same EndTxn already completed (a retry): answer success.
    AlreadyComplete,
}

/// The transaction timeout a producer asks for must be positive and at
/// most `transaction.max.timeout.ms`: else INVALID_TRANSACTION_TIMEOUT.
pub fn validate_transaction_timeout(timeout_ms: i32, max_timeout_ms: i32) -> Result<(), ErrorCode> {
    if timeout_ms <= 0 || timeout_ms > max_timeout_ms {
        return Err(ErrorCode::InvalidTransactionTimeout);
    }
    Ok(())
}

/// An epoch this close to `i16::MAX` cannot be bumped again: the next
/// InitProducerId rotates to a fresh producer id instead.
pub fn epoch_is_exhausted(epoch: i16) -> bool {
    epoch >= i16::MAX - 1
}

/// KIP-360: a claimed identity is honoured when the entry has no epoch yet
/// (it was just created), when it names the current producer id (the
/// epoch is checked by [`bumped_epochs`]), or when it names the previous
/// producer id with an exhausted epoch (a retry of the rotation whose
/// answer was lost). Anything else is a fenced producer.
pub fn claim_is_valid(entry: &TxnEntry, claim: Claim) -> bool {
    entry.producer_epoch == NO_PRODUCER_EPOCH
        || claim.producer_id == entry.producer_id
        || (claim.producer_id == entry.prev_producer_id && epoch_is_exhausted(claim.producer_epoch))
}

/// KIP-360's epoch rule for a re-initialization without rotation:
/// `(epoch, last_epoch)` to persist.
/// - no claim: bump; the last epoch is forgotten (-1);
/// - the claim names the current epoch (or there is none yet): bump, and
///   remember the current one as the last;
/// - the claim names the last epoch: a retry of that bump, answer the
///   current epoch again without bumping;
/// - else PRODUCER_FENCED.
pub fn bumped_epochs(
    entry: &TxnEntry,
    claimed_epoch: Option<i16>,
) -> Result<(i16, i16), ErrorCode> {
    let bumped = entry.producer_epoch.saturating_add(1);
    match claimed_epoch {
        None => Ok((bumped, NO_PRODUCER_EPOCH)),
        Some(e) if entry.producer_epoch == NO_PRODUCER_EPOCH || e == entry.producer_epoch => {
            Ok((bumped, entry.producer_epoch))
        }
        Some(e) if e == entry.last_producer_epoch => {
            coverage::hit(Mark::InitProducerIdRetryAnsweredWithoutABump);
            Ok((entry.producer_epoch, entry.last_producer_epoch))
        }
        Some(_) => Err(ErrorCode::ProducerFenced),
    }
}

/// InitProducerId with a transactional id (KIP-98, KIP-360). `entry` is
/// the id's current entry, `None` for an id never seen (or expired);
/// `fresh_pid` draws a new producer id, called only when one is needed.
/// The caller has validated the timeout ([`validate_transaction_timeout`]).
pub fn init_producer_id(
    entry: Option<&TxnEntry>,
    transactional_id: &str,
    timeout_ms: i32,
    claim: Option<Claim>,
    mut fresh_pid: impl FnMut() -> i64,
    now_ms: i64,
) -> Result<Init, ErrorCode> {
    let mut next = match entry {
        Some(e) => e.clone(),
        None => TxnEntry::new(transactional_id, fresh_pid(), timeout_ms, now_ms),
    };
    if let Some(c) = claim {
        if !claim_is_valid(&next, c) {
            return Err(ErrorCode::ProducerFenced);
        }
    }
    match next.state {
        TxnState::PrepareCommit | TxnState::PrepareAbort | TxnState::Dead => {
            Err(ErrorCode::ConcurrentTransactions)
        }
        TxnState::Ongoing => {
            coverage::hit(Mark::InitProducerIdAbortedATransactionInFlight);
            Ok(Init::AbortFirst(fence_and_abort(&next, now_ms)))
        }
        TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => {
            let claimed_epoch = claim.map(|c| c.producer_epoch);
            if epoch_is_exhausted(next.producer_epoch)
                && claimed_epoch.is_none_or(|e| e == next.producer_epoch)
            {
                // Rotation: a fresh producer id at epoch 0; the old identity
                // stays claimable by a producer that missed this answer.
                next.prev_producer_id = next.producer_id;
                next.last_producer_epoch = if claim.is_some() {
                    next.producer_epoch
                } else {
                    NO_PRODUCER_EPOCH
                };
                next.producer_id = fresh_pid();
                next.producer_epoch = 0;
            } else {
                let (epoch, last) = bumped_epochs(&next, claimed_epoch)?;
                next.producer_epoch = epoch;
                next.last_producer_epoch = last;
            }
            next.state = TxnState::Empty;
            next.timeout_ms = timeout_ms;
            next.partitions.clear();
            next.groups.clear();
            next.start_ms = -1;
            next.last_update_ms = now_ms;
            Ok(Init::Ready(next))
        }
    }
}

/// Every transactional request but InitProducerId names the producer id and
/// epoch it acts for: another producer id is INVALID_PRODUCER_ID_MAPPING,
/// another epoch PRODUCER_FENCED.
pub fn check_producer(
    entry: &TxnEntry,
    producer_id: i64,
    producer_epoch: i16,
) -> Result<(), ErrorCode> {
    if producer_id != entry.producer_id {
        return Err(ErrorCode::InvalidProducerIdMapping);
    }
    if producer_epoch != entry.producer_epoch {
        return Err(ErrorCode::ProducerFenced);
    }
    Ok(())
}

/// AddPartitionsToTxn / AddOffsetsToTxn: the transaction becomes (or stays)
/// Ongoing with these partitions and groups added; it begins now if none
/// was in flight. While its markers are being written, CONCURRENT_TRANSACTIONS
/// (the producer retries). `None`: nothing new, nothing to persist.
pub fn add_to_transaction(
    entry: &TxnEntry,
    producer_id: i64,
    producer_epoch: i16,
    partitions: &[(String, i32)],
    groups: &[String],
    now_ms: i64,
) -> Result<Option<TxnEntry>, ErrorCode> {
    check_producer(entry, producer_id, producer_epoch)?;
    match entry.state {
        TxnState::PrepareCommit | TxnState::PrepareAbort | TxnState::Dead => {
            return Err(ErrorCode::ConcurrentTransactions)
        }
        TxnState::Ongoing
            if partitions.iter().all(|p| entry.partitions.contains(p))
                && groups.iter().all(|g| entry.groups.contains(g)) =>
        {
            return Ok(None)
        }
        _ => {}
    }
    let mut next = entry.clone();
    if next.state != TxnState::Ongoing {
        next.start_ms = now_ms;
    }
    next.state = TxnState::Ongoing;
    next.partitions.extend(partitions.iter().cloned());
    next.groups.extend(groups.iter().cloned());
    next.last_update_ms = now_ms;
    Ok(Some(next))
}

/// EndTxn (transaction version 1): Ongoing moves to PrepareCommit or
/// PrepareAbort, keeping its partitions and groups as the markers owed.
/// A retry after completion in the same direction succeeds; while the
/// same direction is still being written, CONCURRENT_TRANSACTIONS (the
/// producer retries); the other direction, or no transaction at all, is
/// INVALID_TXN_STATE.
pub fn end_txn(
    entry: &TxnEntry,
    producer_id: i64,
    producer_epoch: i16,
    commit: bool,
    now_ms: i64,
) -> Result<End, ErrorCode> {
    check_producer(entry, producer_id, producer_epoch)?;
    match (entry.state, commit) {
        (TxnState::Ongoing, _) => {
            let mut next = entry.clone();
            next.state = if commit {
                TxnState::PrepareCommit
            } else {
                TxnState::PrepareAbort
            };
            next.last_update_ms = now_ms;
            Ok(End::Prepare(next))
        }
        (TxnState::CompleteCommit, true) | (TxnState::CompleteAbort, false) => {
            coverage::hit(Mark::EndTxnRetryFoundItsTransactionComplete);
            Ok(End::AlreadyComplete)
        }
        (TxnState::PrepareCommit, true) | (TxnState::PrepareAbort, false) => {
            Err(ErrorCode::ConcurrentTransactions)
        }
        _ => Err(ErrorCode::InvalidTxnState),
    }
}

/// EndTxn under transaction version 2 (KIP-890 part 2, EndTxn v5): every
/// transaction end bumps the epoch, in the prepared entry (so its markers
/// carry the new epoch and fence whatever the old one still sends), and the
/// producer continues at the epoch it is answered.
/// - Ongoing at the current epoch: Prepare* at epoch + 1, the old epoch
///   remembered as the last;
/// - no transaction at the current epoch: an abort still bumps (the client
///   aborts after an error without knowing whether anything was added), a
///   commit is INVALID_TXN_STATE;
/// - the epoch just before the current one, after the end it asked for
///   (a retry whose answer was lost): the same direction succeeds
///   ([`End::AlreadyComplete`], answered with the current epoch), while
///   still being written CONCURRENT_TRANSACTIONS, the other direction
///   INVALID_TXN_STATE; this also covers a transaction the reaper aborted,
///   whose producer's commit is then INVALID_TXN_STATE rather than fenced;
/// - any other epoch: PRODUCER_FENCED.
///
/// At an exhausted epoch ([`epoch_is_exhausted`]) the bump still happens,
/// to `i16::MAX`, so the markers fence the old epoch, and the entry takes
/// `fresh()` as its next producer id: completion moves it there at epoch 0
/// ([`complete`]), and that identity is the answer
/// ([`TxnEntry::continues_as`]). A
/// retry from the old identity after that (the previous producer id at the
/// exhausted epoch) is recognised like any other retry.
pub fn end_txn_v2(
    entry: &TxnEntry,
    producer_id: i64,
    producer_epoch: i16,
    commit: bool,
    fresh: impl FnOnce() -> i64,
    now_ms: i64,
) -> Result<End, ErrorCode> {
    let rotated_retry = producer_id == entry.prev_producer_id
        && entry.producer_epoch == 0
        && epoch_is_exhausted(producer_epoch)
        && producer_epoch < i16::MAX;
    if producer_id != entry.producer_id && !rotated_retry {
        return Err(ErrorCode::InvalidProducerIdMapping);
    }
    let current = producer_epoch == entry.producer_epoch && !rotated_retry;
    let previous =
        rotated_retry || i32::from(producer_epoch) == i32::from(entry.producer_epoch) - 1;
    let bumped = |state| {
        let mut next = entry.clone();
        if epoch_is_exhausted(next.producer_epoch) {
            next.next_producer_id = fresh();
        }
        next.last_producer_epoch = next.producer_epoch;
        next.producer_epoch = next.producer_epoch.saturating_add(1);
        next.state = state;
        next.last_update_ms = now_ms;
        next
    };
    match (entry.state, commit) {
        (TxnState::Ongoing, _) if current => Ok(End::Prepare(bumped(if commit {
            TxnState::PrepareCommit
        } else {
            TxnState::PrepareAbort
        }))),
        (TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort, false)
            if current =>
        {
            // An empty transaction that begins and aborts now, as Kafka
            // records it (DescribeTransactions shows its start).
            let mut next = bumped(TxnState::PrepareAbort);
            next.start_ms = now_ms;
            Ok(End::Prepare(next))
        }
        (TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort, true) if current => {
            Err(ErrorCode::InvalidTxnState)
        }
        (TxnState::CompleteCommit, true) | (TxnState::CompleteAbort, false) if previous => {
            coverage::hit(Mark::EndTxnRetryFoundItsTransactionComplete);
            Ok(End::AlreadyComplete)
        }
        (TxnState::PrepareCommit, true) | (TxnState::PrepareAbort, false) if previous => {
            Err(ErrorCode::ConcurrentTransactions)
        }
        (
            TxnState::CompleteCommit
            | TxnState::CompleteAbort
            | TxnState::PrepareCommit
            | TxnState::PrepareAbort,
            _,
        ) if previous => Err(ErrorCode::InvalidTxnState),
        (TxnState::PrepareCommit | TxnState::PrepareAbort | TxnState::Dead, _) if current => {
            Err(ErrorCode::ConcurrentTransactions)
        }
        _ if rotated_retry => Err(ErrorCode::InvalidProducerIdMapping),
        _ => Err(ErrorCode::ProducerFenced),
    }
}

/// Once every marker of a prepared transaction is durable: Complete*, the
/// partition and group lists cleared (nothing is owed any more). `None`
/// if the entry is not prepared (already completed by a racing pass).
pub fn complete(entry: &TxnEntry, now_ms: i64) -> Option<TxnEntry> {
    let state = match entry.state {
        TxnState::PrepareCommit => TxnState::CompleteCommit,
        TxnState::PrepareAbort => TxnState::CompleteAbort,
        _ => return None,
    };
    let mut next = entry.clone();
    next.state = state;
    next.partitions.clear();
    next.groups.clear();
    next.last_update_ms = now_ms;
    if next.next_producer_id != NO_PRODUCER_ID {
        // EndTxn v5 found the epoch exhausted: the producer continues as
        // the next producer id at epoch 0; the old one stays claimable.
        next.prev_producer_id = next.producer_id;
        next.producer_id = next.next_producer_id;
        next.next_producer_id = NO_PRODUCER_ID;
        next.producer_epoch = 0;
        next.last_producer_epoch = NO_PRODUCER_EPOCH;
    }
    Some(next)
}

/// The reaper's test: an Ongoing transaction past its start plus its
/// timeout is aborted.
pub fn has_timed_out(entry: &TxnEntry, now_ms: i64) -> bool {
    if planted(Bug::ReaperNeverAborts) {
        return false;
    }
    entry.state == TxnState::Ongoing && is_past_timeout(entry, now_ms)
}

/// The transaction in flight began more than its timeout ago, whatever
/// its state (a prepared one is past it too, but is completed, not reaped).
pub fn is_past_timeout(entry: &TxnEntry, now_ms: i64) -> bool {
    entry.start_ms.saturating_add(i64::from(entry.timeout_ms)) < now_ms
}

/// Aborts an Ongoing transaction from the coordinator's side (the reaper,
/// or an InitProducerId that finds it in flight): PrepareAbort under a
/// bumped epoch, so the producer that began it is fenced everywhere and
/// cannot commit it afterwards (KAFKA-6119); its partitions and groups are
/// kept, as the abort markers are owed exactly as for a client abort.
pub fn fence_and_abort(entry: &TxnEntry, now_ms: i64) -> TxnEntry {
    let mut next = entry.clone();
    next.producer_epoch = next.producer_epoch.saturating_add(1);
    next.last_producer_epoch = NO_PRODUCER_EPOCH;
    next.state = TxnState::PrepareAbort;
    next.last_update_ms = now_ms;
    next
}

/// Whether `entry` is a transaction aborted under a bumped epoch while the
/// producer at (`producer_id`, `producer_epoch`) was still in it: what
/// [`fence_and_abort`] leaves (the reaper's abort, or an InitProducerId's of
/// a transaction in flight), the epoch one past the producer's and no last
/// epoch to claim. That producer's EndTxn is refused, never a commit of what
/// was aborted (KAFKA-6119).
pub fn was_aborted_under(entry: &TxnEntry, producer_id: i64, producer_epoch: i16) -> bool {
    matches!(
        entry.state,
        TxnState::PrepareAbort | TxnState::CompleteAbort
    ) && entry.producer_id == producer_id
        && entry.producer_epoch == producer_epoch.saturating_add(1)
        && entry.last_producer_epoch == NO_PRODUCER_EPOCH
}

/// `transactional.id.expiration.ms`: an idle id untouched for that long is
/// forgotten (a transaction in flight or being completed never expires).
pub fn has_expired(entry: &TxnEntry, now_ms: i64, expiration_ms: i64) -> bool {
    entry.state.is_idle() && entry.last_update_ms <= now_ms.saturating_sub(expiration_ms)
}

/// The fenced error a request version can carry: PRODUCER_FENCED (KIP-588)
/// from InitProducerId v4, AddPartitionsToTxn v2, AddOffsetsToTxn v2 and
/// EndTxn v2; INVALID_PRODUCER_EPOCH before. TxnOffsetCommit, answered by
/// the group coordinator, says INVALID_PRODUCER_EPOCH at every version,
/// as Kafka 4 does.
pub fn fenced_error_for(api_key: i16, version: i16) -> ErrorCode {
    use crate::protocol::messages::{
        add_offsets_to_txn_request, add_partitions_to_txn_request, end_txn_request,
        init_producer_id_request,
    };
    let first_with_producer_fenced = match api_key {
        init_producer_id_request::API_KEY => 4,
        add_partitions_to_txn_request::API_KEY
        | add_offsets_to_txn_request::API_KEY
        | end_txn_request::API_KEY => 2,
        _ => i16::MAX,
    };
    if version >= first_with_producer_fenced {
        ErrorCode::ProducerFenced
    } else {
        ErrorCode::InvalidProducerEpoch
    }
}

/// The error for a transactional write that is not part of the ongoing
/// transaction (KIP-890): TRANSACTION_ABORTABLE for the versions that know
/// it (Produce v11+, TxnOffsetCommit v4+, and the verify-only
/// AddPartitionsToTxn of v4+), so the producer aborts and carries on;
/// INVALID_TXN_STATE for older clients.
pub fn not_in_transaction_error(api_key: i16, version: i16) -> ErrorCode {
    use crate::protocol::messages::{
        add_partitions_to_txn_request, produce_request, txn_offset_commit_request,
    };
    let first_with_abortable = match api_key {
        produce_request::API_KEY => 11,
        txn_offset_commit_request::API_KEY | add_partitions_to_txn_request::API_KEY => 4,
        _ => i16::MAX,
    };
    if version >= first_with_abortable {
        ErrorCode::TransactionAbortable
    } else {
        ErrorCode::InvalidTxnState
    }
}

/// A Produce refused by its transaction check (KIP-890 part 1), in the
/// words Produce clients know: a check the coordinator cannot answer yet
/// (a decision being written, the coordinator moving) is
/// NOT_ENOUGH_REPLICAS, which every client retries, as Kafka answers it; a
/// fenced producer INVALID_PRODUCER_EPOCH; a batch outside the transaction
/// the error its version knows ([`not_in_transaction_error`]).
pub fn produce_error_of_verification(code: ErrorCode, version: i16) -> ErrorCode {
    use crate::protocol::messages::produce_request;
    match code {
        ErrorCode::ConcurrentTransactions
        | ErrorCode::NotCoordinator
        | ErrorCode::CoordinatorNotAvailable
        | ErrorCode::CoordinatorLoadInProgress => ErrorCode::NotEnoughReplicas,
        ErrorCode::InvalidTxnState => not_in_transaction_error(produce_request::API_KEY, version),
        ErrorCode::ProducerFenced => ErrorCode::InvalidProducerEpoch,
        other => other,
    }
}

/// The refusals of a transactional batch that come from its transaction
/// check, before the log: answered without a log start offset, as Kafka
/// answers them.
pub fn refused_by_transaction_check(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::InvalidProducerEpoch
            | ErrorCode::InvalidTxnState
            | ErrorCode::TransactionAbortable
            | ErrorCode::InvalidProducerIdMapping
            | ErrorCode::NotEnoughReplicas
    )
}

/// KIP-890 part 1: a transactional batch may open a transaction on a
/// partition only if the producer's ongoing transaction, at its current
/// epoch, has added that partition. An id unknown here or mapped to
/// another producer is INVALID_PRODUCER_ID_MAPPING; a batch of a fenced
/// epoch INVALID_PRODUCER_EPOCH (the Produce error for a zombie); no
/// ongoing transaction, or a partition never added, INVALID_TXN_STATE
/// (see [`not_in_transaction_error`]): the hanging transaction that would
/// follow (data no marker will ever close) is refused instead.
pub fn verify_partition(
    entry: Option<&TxnEntry>,
    producer_id: i64,
    producer_epoch: i16,
    partition: &(String, i32),
) -> Result<(), ErrorCode> {
    let entry = entry.ok_or(ErrorCode::InvalidProducerIdMapping)?;
    if producer_id != entry.producer_id {
        return Err(ErrorCode::InvalidProducerIdMapping);
    }
    if producer_epoch < entry.producer_epoch {
        return Err(ErrorCode::InvalidProducerEpoch);
    }
    if producer_epoch != entry.producer_epoch
        || entry.state != TxnState::Ongoing
        || !entry.partitions.contains(partition)
    {
        return Err(ErrorCode::InvalidTxnState);
    }
    Ok(())
}

/// TxnOffsetCommit: a transaction may stage offsets for a group only
/// once its ongoing transaction, at the producer's current epoch, has added
/// the group (AddOffsetsToTxn): else the offsets could outlive the
/// transaction with no marker to commit or drop them. A fenced epoch is
/// PRODUCER_FENCED, an id mapped to another producer
/// INVALID_PRODUCER_ID_MAPPING, anything else INVALID_TXN_STATE (see
/// [`not_in_transaction_error`]).
pub fn verify_group(
    entry: Option<&TxnEntry>,
    producer_id: i64,
    producer_epoch: i16,
    group: &str,
) -> Result<(), ErrorCode> {
    let entry = entry.ok_or(ErrorCode::InvalidProducerIdMapping)?;
    check_producer(entry, producer_id, producer_epoch)?;
    if entry.state != TxnState::Ongoing || !entry.groups.contains(group) {
        return Err(ErrorCode::InvalidTxnState);
    }
    Ok(())
}

/// ListTransactions filters (KIP-664, KIP-994, KIP-1152): every filter
/// given must match: the state by its wire name, the producer id, the
/// duration (`now - start` above `min_duration_ms`; -1: any) and the
/// transactional id pattern (see [`transactional_id_pattern`]). As in
/// Kafka, an id with no transaction in flight has start -1, so it passes
/// any duration. An empty list filters nothing.
pub fn is_listed(
    entry: &TxnEntry,
    states: &[String],
    producer_ids: &[i64],
    min_duration_ms: i64,
    pattern: Option<&Regex>,
    now_ms: i64,
) -> bool {
    let state_ok = states.is_empty() || states.iter().any(|s| s == entry.state.as_str());
    let pid_ok = producer_ids.is_empty() || producer_ids.contains(&entry.producer_id);
    let duration_ok =
        min_duration_ms < 0 || now_ms.saturating_sub(entry.start_ms) > min_duration_ms;
    let id_ok = pattern.is_none_or(|p| p.is_match(&entry.transactional_id));
    state_ok && pid_ok && duration_ok && id_ok && entry.state != TxnState::Dead
}

/// The most a compiled transactional id pattern may take: a pattern comes
/// from the network, and the regex engine's own default is ten times this.
const PATTERN_SIZE_LIMIT: usize = 1 << 20;

/// KIP-1152: ListTransactions v2's transactional id pattern, a regular
/// expression the whole id must match. Absent or empty, it filters nothing;
/// one that does not compile (or would compile past
/// [`PATTERN_SIZE_LIMIT`]) is INVALID_REGULAR_EXPRESSION, as Kafka answers a
/// pattern its regex engine refuses.
pub fn transactional_id_pattern(pattern: Option<&str>) -> Result<Option<Regex>, ErrorCode> {
    match pattern {
        None | Some("") => Ok(None),
        Some(p) => RegexBuilder::new(&format!("^(?:{p})$"))
            .size_limit(PATTERN_SIZE_LIMIT)
            .build()
            .map(Some)
            .map_err(|_| ErrorCode::InvalidRegularExpression),
    }
}
