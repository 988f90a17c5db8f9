//! Deliberate bugs: the simulator's measured bug-finding power (issue 13
//! item 11, docs/simulation.md "Deliberate bugs").
//!
//! Each [`Bug`] names one mistake of the kind the design documents call
//! dangerous (a producer id reused after a crash, a zombie batch accepted
//! after an epoch bump, offsets visible before their markers...). Its code
//! sits at the one place the real rule is decided, behind [`planted`]:
//!
//! ```ignore
//! if deliberate_bugs::planted(Bug::ZombieEpochAccepted) { return Ok(()); }
//! ```
//!
//! Without the `deliberate-bugs` cargo feature [`planted`] is a constant
//! `false` that the compiler folds away: no build of kaas but the bug hunt's
//! carries the bugs. With it (`scripts/sim --bug NAME`, `scripts/sim-bugs`),
//! one bug at a time is planted for the whole process: each seed runs in a
//! process of its own, so it is that seed's bug. Nothing else reads the
//! choice.

crate::named_enum! {
    /// A deliberate mistake, named for what the broker then does wrong.
    pub enum Bug {
        /// The producer id allocator persists the start of the block it hands
        /// out instead of its end, so a restarted broker hands the same ids out
        /// again: a producer id reused after a crash.
        PidBlockNotAdvanced,
        /// A partition accepts a batch whose producer epoch is older than the
        /// producer's current one: a zombie batch accepted after an epoch bump.
        ZombieEpochAccepted,
        /// The reaper aborts a timed-out transaction without bumping its
        /// epoch (KAFKA-6119): the producer that began it is not fenced.
        ReaperKeepsTheEpoch,
        /// A transaction's staged offsets are committed before its markers
        /// are written: offsets visible at prepare instead of complete.
        OffsetsVisibleBeforeMarkers,
        /// Complete* is persisted once the markers are written, without
        /// waiting for them to be durable: a control marker missing after a
        /// crash, under a coordinator that believes it written.
        MarkerNotAwaitedDurable,
        /// Recovery trusts every entry of a `.txnindex` file, a torn one
        /// included: a torn state file read as valid.
        TornTxnIndexTrusted,
        /// A partition opened after a restart forgets the transactions open
        /// in its log: the last stable offset not rebuilt on restart.
        LsoNotRebuiltOnRestart,
        /// A broker's silence is judged without the volume staleness bound:
        /// a stale NFS view trusted for an ownership decision.
        LeaseIgnoresStaleness,
        /// The newest claim of an item is taken from the directory listing
        /// alone, without looking up the next epochs by name: a stale listing
        /// trusted for an ownership decision (the bug simulator seed 1222
        /// found).
        NewestClaimFromTheListing,
        /// An idempotent retry of a batch still remembered is appended again
        /// instead of being answered as a duplicate.
        RetryAppendedAgain,
        /// Produce with acks=all answers before the batch is durable.
        AckedBeforeDurable,
        /// Produce with acks=all waits for the first partition of a request
        /// to be durable and answers the others' batches as appended: a
        /// request with several partitions acknowledges writes a crash can
        /// still take.
        OnlyTheFirstPartitionAwaited,
        /// Produce with acks=all waits only for the partitions of the
        /// request's first topic to be durable: a request that carries
        /// several topics acknowledges the others' writes before a crash
        /// can no longer take them.
        OnlyTheFirstTopicAwaited,
        /// A flush acknowledges what it made durable even though a successor
        /// has claimed the partition: a deposed leader acknowledges writes
        /// nobody will read.
        DeposedWriterAcknowledges,
        /// The log cleaner removes ABORT markers whose transaction the aborted
        /// index still names (the bug simulator seed 1197 found).
        AbortMarkerCleanedAway,
        /// A read_committed fetch is bounded by the high watermark, not the
        /// last stable offset: open transactions' records are served.
        ReadCommittedPastTheLso,
        /// A read_uncommitted fetch is bounded by the last stable offset, not
        /// the high watermark: open transactions' records, which Kafka
        /// serves at read_uncommitted, are held back as if read_committed.
        ReadUncommittedStopsAtTheLso,
        /// `write_atomic` and `create_exclusive` rename (or link) their
        /// temporary without syncing its content first: a power loss may
        /// leave the name on an empty file.
        TemporaryNotSynced,
        /// `write_atomic` and `create_exclusive` return without syncing the
        /// directory they published a name in: a power loss may undo a
        /// replace or a claim that was acknowledged.
        DirectoryNotSynced,
        /// Partition recovery does not sync the tail of its own active
        /// segment: after a process kill the restarted broker serves (and
        /// counts durable) records that were only in the page cache.
        RecoveredTailNotSynced,
        /// A partition's recovery and a slot journal's loading do not sync
        /// the directory of the files they read back: a file whose creator
        /// was killed before its first sync keeps a name that only the page
        /// cache holds, and a later power loss takes the file.
        ReadBackNamesNotSynced,
        /// A fetch is bounded by (and answers) the log end instead of the
        /// high watermark: consumers read records that are only in the page
        /// cache, which a power loss may take back.
        HighWatermarkPastTheDurableEnd,
        /// The group coordinator accepts an OffsetCommit from a current
        /// member whose generation does not match the group's: a zombie's
        /// commit of a generation that moved on becomes visible.
        StaleGenerationCommitAccepted,
        /// A partition's recovery ignores the persisted log start and starts
        /// the log at its first segment's base: records DeleteRecords
        /// deleted inside that segment come back after a restart.
        LogStartForgottenOnRecovery,
        /// Time retention deletes every sealed, settled segment without
        /// looking at its newest timestamp: records still within
        /// `retention.ms` are lost.
        RetentionIgnoresSegmentAge,
        /// A fetch that waited for data (a long poll woken by new data)
        /// reads again one batch past the offset asked for, when its read
        /// starts at that offset and holds another batch: the consumer's
        /// position moves past a batch it never received, as a stale or
        /// off-by-one read position kept across the wait would make it.
        FetchSkipsABatch,
        /// The reaper never finds a transaction past its timeout: one its
        /// producer abandoned stays open, and the last stable offset of
        /// its partitions stays behind it for ever.
        ReaperNeverAborts,
        /// The group coordinator keeps a generation's sync deadline after
        /// every member synced, and when it passes sends the Stable group
        /// back to rebalance: the group never settles, though its members
        /// still consume and commit between rebalances.
        SyncDeadlineRebalancesAStableGroup,
    }
}

#[cfg(feature = "deliberate-bugs")]
static PLANTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Whether `bug` is planted in this process: always `false` without the
/// `deliberate-bugs` feature.
#[cfg(feature = "deliberate-bugs")]
pub fn planted(bug: Bug) -> bool {
    PLANTED.load(std::sync::atomic::Ordering::Relaxed) == bug as usize + 1
}

/// Whether `bug` is planted in this process: always `false` without the
/// `deliberate-bugs` feature.
#[cfg(not(feature = "deliberate-bugs"))]
#[inline(always)]
pub fn planted(bug: Bug) -> bool {
    let _ = bug;
    false
}

/// Plants `bug` for the rest of this process (the bug hunt's seed child,
/// before its seed starts). Only one bug is planted at a time.
#[cfg(feature = "deliberate-bugs")]
pub fn plant(bug: Bug) {
    PLANTED.store(bug as usize + 1, std::sync::atomic::Ordering::Relaxed);
}

/// Whether this build can plant bugs at all.
pub const AVAILABLE: bool = cfg!(feature = "deliberate-bugs");
