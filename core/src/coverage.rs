//! Coverage marks: named moments in the broker's own code that the
//! simulator counts, so that a batch of seeds shows the rare paths its
//! checkers exist for were taken at all. A checker that never saw its case
//! proves nothing: "no zombie batch got through" means something only if
//! zombie batches were sent where the new epoch had not written yet.
//!
//! [`hit`] costs nothing outside the simulator. Under `cfg(madsim)` it
//! counts into one process-wide table: each seed runs in a process of its
//! own (`kaas_sim::runner`), so the table is that seed's. The counts are a
//! side channel only: nothing reads them back into a decision, so the code
//! under test behaves the same with or without them.
//!
//! A mark is hit where the decision is made, once per occurrence. Marks are
//! listed in [`Mark::ALL`]; `scripts/sim` prints those no seed of a batch
//! hit, and fails a batch in which a mark it requires never fired.

crate::named_enum! {
    /// A rare path of the broker, named for what happened.
    pub enum Mark {
        /// The reaper aborted an Ongoing transaction past its timeout under a
        /// bumped epoch.
        ReaperAbortedATimedOutTransaction,
        /// A pass of the reaper found a transaction past its timeout already
        /// prepared (between EndTxn's two phases, or left prepared by a crash)
        /// and left it to be completed in the direction already decided.
        ReaperPassedOverAPreparedTransaction,
        /// The reaper's abort and an InitProducerId of the same transactional
        /// id were decided at once: whichever came second was turned away
        /// with CONCURRENT_TRANSACTIONS while the first was being written.
        ReaperRacedAnInitProducerId,
        /// The reaper's abort and an EndTxn of the same transaction were
        /// decided at once: whichever came second was turned away with
        /// CONCURRENT_TRANSACTIONS (an EndTxn then retries into the abort).
        ReaperRacedAnEndTxn,
        /// The reaper, deciding on a transaction its pass had found timed
        /// out, found the producer's epoch bumped since (an InitProducerId,
        /// or an EndTxn of transaction version 2): it left the entry alone.
        ReaperFoundTheEpochBumpedSinceItsPass,
        /// An EndTxn (first try or retry) arrived after its transaction had
        /// been aborted under a bumped epoch (by the reaper or by an
        /// InitProducerId) and was refused: it cannot commit what was
        /// aborted (KAFKA-6119).
        EndTxnOfATransactionAbortedUnderItRefused,
        /// The marker reconcile completed a prepared transaction that no EndTxn
        /// was completing (a crash or a failure between the two phases).
        ReconcileCompletedAPreparedTransaction,
        /// A retried EndTxn found its transaction complete in the same
        /// direction and succeeded without doing anything.
        EndTxnRetryFoundItsTransactionComplete,
        /// InitProducerId found a transaction in flight and aborted it under a
        /// bumped epoch (CONCURRENT_TRANSACTIONS to the caller).
        InitProducerIdAbortedATransactionInFlight,
        /// InitProducerId claimed the last epoch (KIP-360): a retry, answered
        /// with the current epoch without another bump.
        InitProducerIdRetryAnsweredWithoutABump,
        /// A batch of an older producer epoch was refused on a partition where
        /// no batch of the newer epoch had been written: the epoch came from a
        /// fence (the cross-partition fence), not from the newer producer.
        ZombieBatchFencedWhereItsSuccessorNeverWrote,
        /// An idempotent retry was answered as a duplicate of a batch written
        /// before the partition's last opening (its state rebuilt by recovery).
        DuplicateOfABatchFromBeforeTheOpening,
        /// A marker from a coordinator epoch older than the last one seen for
        /// its producer was refused (TRANSACTION_COORDINATOR_FENCED).
        MarkerOfADeposedCoordinatorRefused,
        /// An item (partition or coordinator slot) was claimed from a broker
        /// whose lease had lapsed.
        ItemTakenFromABrokerWhoseLeaseLapsed,
        /// A writer that found its successor's claim after its last write
        /// acknowledged nothing of it.
        DeposedWriterAcknowledgedNothing,
        /// An opening or a slot load refused a directory listing that hid a
        /// file a lookup by name found (a stale NFS listing).
        StaleListingRefused,
        /// Recovery cut a torn tail (a partly written batch) from a segment.
        TornSegmentTailCut,
        /// A slot journal's load cut a torn tail (a partly written record).
        TornJournalTailCut,
        /// An append or sync of a partition failed, and the partition stopped
        /// acknowledging until it is opened again.
        PartitionStoppedByAFailedWrite,
        /// OffsetFetch with require_stable found offsets staged by a
        /// transaction not yet complete (UNSTABLE_OFFSET_COMMIT).
        UnstableOffsetsHeldBack,
        /// An OffsetCommit or TxnOffsetCommit naming a member the group no
        /// longer has, or a generation it has moved past, was refused: a
        /// zombie member fenced.
        ZombieMemberCommitRefused,
        /// The log cleaner swapped a cleaned copy in for a segment, while the
        /// partition kept taking writes and reads.
        CleanedCopySwappedIn,
        /// The simulator killed a broker process and kept the page cache,
        /// which held data the broker had not synced: the restarted broker
        /// reads it back, and a later power loss may take it. Hit by the
        /// simulator's fault driver, not the broker, which cannot know.
        ProcessKillKeptUnsyncedData,
        /// A record acknowledged to an acks=1 producer is missing from the
        /// final read (or its offset holds another record) after a power
        /// loss: allowed, since acks=1 answers before the fsync. Hit by the
        /// simulator's checker, not the broker, which cannot know.
        LowAcksRecordLostByACrash,
        /// A buggify point (`kaas_net::buggify`) delayed the step after it.
        BuggifyDelayedAPoint,
        /// A buggify point failed the step after it, as its IO would.
        BuggifyFailedAPoint,
        /// A buggify point held the broker until the simulator killed it
        /// there.
        BuggifyCrashedAtAPoint,
        /// DeleteRecords moved a partition's log start forward (persisted
        /// first, then applied).
        LogStartMovedByDeleteRecords,
        /// Retention (by time or size, or below a start DeleteRecords
        /// moved) took a partition's oldest segments out.
        SegmentDeletedByRetention,
        /// A transactional id idle past `transactional.id.expiration.ms` was
        /// forgotten: its next InitProducerId gets a fresh producer id.
        IdleTransactionalIdExpired,
        /// An expiry decided on an idle transactional id found the id
        /// updated since (an InitProducerId in between) and kept it.
        ExpiryOvertakenByANewerDecision,
        /// A partition forgot an idle producer's idempotent state
        /// (`producer.id.expiration.ms`; see [`producer_expired`]).
        ProducerStateExpired,
        /// A broker's lookup by name was answered with a file version another
        /// broker had replaced by a rename less than the seed's attribute-cache
        /// age before (an NFS client's cached view, within the staleness
        /// bound). Hit by the simulator's volume, not the broker, which
        /// cannot know.
        StaleFileViewRead,
    }
}

/// A partition forgot a producer's state: recorded for the simulator's
/// checkers, which cannot see the broker's clock. Past it, that producer's
/// retry of a batch appended before is appended again, or refused with
/// UNKNOWN_PRODUCER_ID, as in Kafka; before it, either would be a lost
/// producer state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerExpiry {
    pub topic: String,
    pub partition: i32,
    pub producer_id: i64,
    /// The partition's log end when it forgot: every batch the producer
    /// had appended there is below it.
    pub log_end: i64,
}

#[cfg(madsim)]
static EXPIRIES: std::sync::Mutex<Vec<ProducerExpiry>> = std::sync::Mutex::new(Vec::new());

/// Records `expiry` (in the simulator; nothing elsewhere) and counts
/// [`Mark::ProducerStateExpired`].
pub fn producer_expired(expiry: impl FnOnce() -> ProducerExpiry) {
    hit(Mark::ProducerStateExpired);
    #[cfg(madsim)]
    EXPIRIES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(expiry());
    #[cfg(not(madsim))]
    let _ = expiry;
}

/// Every expiry recorded in this process since the last
/// [`clear_producer_expiries`], oldest first (none outside the simulator).
pub fn producer_expiries() -> Vec<ProducerExpiry> {
    #[cfg(madsim)]
    return EXPIRIES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    #[cfg(not(madsim))]
    Vec::new()
}

/// Forgets the recorded expiries (a simulation starting in this process).
pub fn clear_producer_expiries() {
    #[cfg(madsim)]
    EXPIRIES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clear();
}

#[cfg(madsim)]
static COUNTS: [std::sync::atomic::AtomicU64; Mark::ALL.len()] =
    [const { std::sync::atomic::AtomicU64::new(0) }; Mark::ALL.len()];

/// Counts one occurrence of `mark` (in the simulator; nothing elsewhere).
#[inline]
pub fn hit(mark: Mark) {
    #[cfg(madsim)]
    COUNTS[mark as usize].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    #[cfg(not(madsim))]
    let _ = mark;
}

/// How often each mark was hit in this process, every mark listed (all
/// zero outside the simulator).
pub fn counts() -> Vec<(Mark, u64)> {
    Mark::ALL
        .iter()
        .map(|&m| {
            #[cfg(madsim)]
            let n = COUNTS[m as usize].load(std::sync::atomic::Ordering::Relaxed);
            #[cfg(not(madsim))]
            let n = 0;
            (m, n)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marks_place_in_all_is_its_counter_index() {
        for (i, m) in Mark::ALL.iter().enumerate() {
            assert_eq!(*m as usize, i, "{m:?} would count into another mark's slot");
        }
    }

    #[test]
    fn a_mark_is_found_by_its_name_and_names_are_its_variant() {
        for m in Mark::ALL {
            assert_eq!(Mark::from_name(m.name()), Some(*m));
            assert_eq!(m.name(), format!("{m:?}"));
        }
        assert_eq!(Mark::from_name("NoSuchMark"), None);
    }

    #[test]
    #[cfg(not(madsim))]
    fn hits_outside_the_simulator_count_nothing() {
        hit(Mark::TornSegmentTailCut);
        assert!(counts().iter().all(|(_, n)| *n == 0));
        assert_eq!(counts().len(), Mark::ALL.len());
    }
}
