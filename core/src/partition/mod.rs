//! One partition's rules as a pure state machine: which offsets a batch
//! gets, what is durable, what consumers may see, and when the producer
//! state may be written down.
//!
//! The driver (`kaas_net::broker::Partition`) owns the files; this owns every
//! decision about them. It is told what happened (`append`, `durable_up_to`,
//! `segment_rolled`, `records_deleted`, `failed`) and answers with decisions
//! (write this batch at these offsets, answer this retry with the original
//! offsets, refuse with this code) and effects for the driver to carry out
//! ([`Effects`]: publish a high watermark, write a producer snapshot). No
//! IO happens here, so a model can check it (see the property test in
//! `tests.rs`).
//!
//! Offsets, lowest first:
//!
//! ```text
//! log start <= last stable offset <= high watermark == durable end <= log end
//! ```
//!
//! - **log end**: the next offset to assign. Advanced by `append` *before*
//!   the driver writes the batch, under the driver's append lane, so the
//!   order of decisions is the order of writes.
//! - **durable end**: everything below is fsync'd.
//! - **high watermark**: what consumers may read. With one copy of the
//!   data the fsync is what replication is in Kafka, so the high watermark
//!   *is* the durable end: a consumer never reads an offset a crash could
//!   take back and hand to another record.
//! - **last stable offset**: what read_committed consumers may read: the
//!   high watermark, or the first offset of the earliest open transaction
//!   if that is lower.

pub mod leader_epochs;
pub mod segment_roll;
#[cfg(test)]
mod tests;
pub mod txn_index;

use crate::coverage::{self, Mark};
use crate::deliberate_bugs::{planted, Bug};
use crate::producer::{
    check_marker, encode_snapshot, BatchIdentity, Classification, CompletedTxn, ProducerTable,
};
use crate::protocol::ErrorCode;
use leader_epochs::{trim_before_log_start, EpochEntry};
use std::collections::BTreeSet;

/// Where a batch goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppendDecision {
    /// New: write it with these offsets. Durable once the high watermark
    /// passes `last_offset`.
    Write { base_offset: i64, last_offset: i64 },
    /// A retry of a batch already in the log: write nothing, answer with
    /// the original offsets (once they are durable, for acks=all: the
    /// original may still be on its way to disk).
    Duplicate { base_offset: i64, last_offset: i64 },
}

impl AppendDecision {
    pub fn base_offset(&self) -> i64 {
        match *self {
            AppendDecision::Write { base_offset, .. }
            | AppendDecision::Duplicate { base_offset, .. } => base_offset,
        }
    }

    /// One past the last offset: durable once the high watermark reaches it.
    pub fn end_offset(&self) -> i64 {
        match *self {
            AppendDecision::Write { last_offset, .. }
            | AppendDecision::Duplicate { last_offset, .. } => last_offset + 1,
        }
    }
}

/// What an incoming batch looks like to the rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IncomingBatch {
    /// `None` for a batch without a producer id.
    pub identity: Option<BatchIdentity>,
    /// Offsets in the batch minus one (lastOffsetDelta).
    pub last_offset_delta: i32,
    pub max_timestamp: i64,
}

/// A producer snapshot to write: the table encoded as of `offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotWrite {
    pub offset: i64,
    pub bytes: Vec<u8>,
}

/// A transaction marker to write: the coordinator's decision for one
/// producer's transaction on this partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IncomingMarker {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub coordinator_epoch: i32,
    pub commit: bool,
    /// The transaction version the marker was written under (KIP-1228;
    /// 0 when the request has no such field): it decides which producer
    /// epochs are stale ([`crate::producer::marker_epoch_is_stale`]).
    pub transaction_version: i8,
}

/// Where a marker goes and, for an abort, what the aborted index records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MarkerWritten {
    pub offset: i64,
    pub aborted: Option<AbortedTxn>,
}

/// One entry of a segment's aborted-transactions index (`.txnindex`, the
/// layout Kafka uses): the aborted transaction's producer, its first and
/// last offset (the marker), and the last stable offset when it completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    pub last_offset: i64,
    pub last_stable_offset: i64,
}

/// read_committed Fetch: the aborted transactions a consumer must know to
/// drop aborted records from `fetch_offset` up to `upper` (exclusive): those
/// that end at or after the fetch offset and began before the upper bound,
/// as `(producer id, first offset)`, in the order they began.
pub fn aborted_transactions_in_range(
    aborted: &[AbortedTxn],
    fetch_offset: i64,
    upper: i64,
) -> Vec<(i64, i64)> {
    let mut found: Vec<(i64, i64)> = aborted
        .iter()
        .filter(|a| a.last_offset >= fetch_offset && a.first_offset < upper)
        .map(|a| (a.producer_id, a.first_offset))
        .collect();
    found.sort_by_key(|&(pid, first)| (first, pid));
    found
}

/// What the driver must do after an event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Effects {
    /// The high watermark moved to this: publish it (wake acks=all waiters
    /// and long-poll fetches).
    pub high_watermark: Option<i64>,
    /// Snapshots whose offset is now durable: write them, in order.
    pub snapshots: Vec<SnapshotWrite>,
}

/// The state the driver recovered from the volume at startup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovered {
    pub log_start_offset: i64,
    /// Recovery made everything that survived durable, so this is also the
    /// durable end and the high watermark.
    pub log_end_offset: i64,
    pub leader_epoch: i32,
    /// Where each leader epoch's log starts (the leader-epoch checkpoint;
    /// empty while the partition has had one epoch only).
    pub leader_epochs: Vec<EpochEntry>,
    pub producers: ProducerTable,
    /// Offset of the producer snapshot on the volume, if there is one.
    pub snapshot_offset: Option<i64>,
}

/// The partition's rules and bookkeeping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionState {
    leader_epoch: i32,
    /// See [`Recovered::leader_epochs`]; trimmed as the log start moves.
    leader_epochs: Vec<EpochEntry>,
    log_start: i64,
    log_end: i64,
    durable_end: i64,
    producers: ProducerTable,
    /// Open transactions as (first offset, producer id). Empty until
    /// transactions land; the last stable offset is computed from it.
    open_transactions: BTreeSet<(i64, i64)>,
    /// Transactions whose marker is written but not yet durable, as
    /// (marker offset, first offset). They hold the last stable offset
    /// back like open ones: until the marker is durable a crash can take it
    /// back and reopen the transaction, and a consumer must not have read
    /// past its records as decided. Kafka keeps them the same way (its
    /// "unreplicated transactions", released when the high watermark
    /// passes the marker). They do not count as open for the last stable
    /// offset recorded in the aborted index, which is Kafka's too.
    completing: BTreeSet<(i64, i64)>,
    /// Snapshots taken (at a roll, or asked for before a deletion) that
    /// wait for the log to be durable up to their offset.
    pending_snapshots: Vec<SnapshotWrite>,
    /// Offset of the newest snapshot the driver reported written.
    written_snapshot: Option<i64>,
    /// An append or an fsync failed: what is on disk is unknown, so nothing
    /// more is appended or acknowledged.
    failed: bool,
    /// The log end at the opening: batches below it were found by recovery.
    opened_at: i64,
}

impl PartitionState {
    pub fn recovered(r: Recovered) -> PartitionState {
        let open_transactions = if planted(Bug::LsoNotRebuiltOnRestart) {
            BTreeSet::new()
        } else {
            open_transactions_of(&r.producers)
        };
        PartitionState {
            leader_epoch: r.leader_epoch,
            leader_epochs: r.leader_epochs,
            log_start: r.log_start_offset,
            log_end: r.log_end_offset,
            durable_end: r.log_end_offset,
            producers: r.producers,
            open_transactions,
            completing: BTreeSet::new(),
            pending_snapshots: Vec::new(),
            written_snapshot: r.snapshot_offset,
            failed: false,
            opened_at: r.log_end_offset,
        }
    }

    pub fn leader_epoch(&self) -> i32 {
        self.leader_epoch
    }

    pub fn log_start_offset(&self) -> i64 {
        self.log_start
    }

    /// Where each leader epoch's log starts (empty: one epoch only).
    pub fn leader_epochs(&self) -> &[EpochEntry] {
        &self.leader_epochs
    }

    /// OffsetForLeaderEpoch: where epoch `asked` ends
    /// ([`leader_epochs::epoch_end_offset`]); the current epoch ends at the
    /// high watermark, the end of what exists for a client.
    pub fn epoch_end_offset(&self, asked: i32) -> Option<(i32, i64)> {
        leader_epochs::epoch_end_offset(
            &self.leader_epochs,
            self.leader_epoch,
            self.log_start,
            self.high_watermark(),
            asked,
        )
    }

    pub fn log_end_offset(&self) -> i64 {
        self.log_end
    }

    pub fn high_watermark(&self) -> i64 {
        high_watermark(self.durable_end)
    }

    pub fn last_stable_offset(&self) -> i64 {
        let open = self.open_transactions.first().map(|&(first, _)| first);
        let completing = self.completing.iter().map(|&(_, first)| first).min();
        let first_unstable = match (open, completing) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        last_stable_offset(self.high_watermark(), self.log_start, first_unstable)
    }

    pub fn producers(&self) -> &ProducerTable {
        &self.producers
    }

    pub fn is_failed(&self) -> bool {
        self.failed
    }

    /// Decides where an incoming (already validated) batch goes. A `Write`
    /// advances the log end and records the producer's batch at once: the
    /// driver writes it next, in decision order, and if that write fails it
    /// reports [`failed`](Self::failed), after which nothing is
    /// acknowledged.
    pub fn append(
        &mut self,
        batch: &IncomingBatch,
        now_ms: i64,
    ) -> Result<AppendDecision, ErrorCode> {
        if self.failed {
            return Err(ErrorCode::KafkaStorageError);
        }
        if batch.last_offset_delta < 0 {
            return Err(ErrorCode::CorruptMessage);
        }
        if let Some(id) = &batch.identity {
            match self.producers.classify(id) {
                Classification::Append => {}
                Classification::Duplicate {
                    first_offset,
                    last_offset,
                } => {
                    if last_offset < self.opened_at {
                        coverage::hit(Mark::DuplicateOfABatchFromBeforeTheOpening);
                    }
                    return Ok(AppendDecision::Duplicate {
                        base_offset: first_offset,
                        last_offset,
                    });
                }
                Classification::Reject(code) => return Err(code),
            }
        }
        let base_offset = self.log_end;
        let last_offset = base_offset
            .checked_add(i64::from(batch.last_offset_delta))
            .ok_or(ErrorCode::KafkaStorageError)?;
        self.log_end = last_offset + 1;
        if let Some(id) = &batch.identity {
            let opened = self
                .producers
                .record_append(id, base_offset, batch.max_timestamp, now_ms);
            if let Some(first_offset) = opened {
                self.open_transactions
                    .insert((first_offset, id.producer_id));
            }
        }
        Ok(AppendDecision::Write {
            base_offset,
            last_offset,
        })
    }

    /// Decides the offset of a transaction marker (COMMIT or ABORT control
    /// batch) the coordinator asks to write, and closes the producer's open
    /// transaction: the last stable offset moves past it once it is
    /// durable. An aborted transaction is returned for the aborted index;
    /// a marker with no transaction open here closes nothing and indexes
    /// nothing. `timestamp_ms` is the marker's (the producer's last
    /// timestamp). Refused with the codes of [`check_marker`].
    pub fn append_marker(
        &mut self,
        marker: &IncomingMarker,
        timestamp_ms: i64,
    ) -> Result<MarkerWritten, ErrorCode> {
        if self.failed {
            return Err(ErrorCode::KafkaStorageError);
        }
        check_marker(
            self.producers.get(marker.producer_id),
            marker.producer_epoch,
            marker.coordinator_epoch,
            marker.transaction_version,
        )?;
        let offset = self.log_end;
        self.log_end += 1;
        let completed = self.producers.record_marker(
            marker.producer_id,
            marker.producer_epoch,
            marker.coordinator_epoch,
            marker.commit,
            offset,
            timestamp_ms,
        );
        let aborted = completed.and_then(|completed| {
            self.open_transactions
                .remove(&(completed.first_offset, marker.producer_id));
            self.completing.insert((offset, completed.first_offset));
            let still_open = self.open_transactions.first().map(|&(first, _)| first);
            aborted_index_entry(&completed, still_open)
        });
        Ok(MarkerWritten { offset, aborted })
    }

    /// Everything below `offset` is fsync'd. Moves the high watermark and
    /// releases the snapshots that are now durable. Never moves back, and
    /// never past the log end.
    pub fn durable_up_to(&mut self, offset: i64) -> Effects {
        let mut fx = Effects::default();
        if self.failed {
            return fx;
        }
        let before = self.high_watermark();
        self.durable_end = self.durable_end.max(offset.min(self.log_end));
        // Markers now durable release their transactions.
        let durable_end = self.durable_end;
        self.completing.retain(|&(marker, _)| marker >= durable_end);
        if self.high_watermark() != before {
            fx.high_watermark = Some(self.high_watermark());
        }
        let durable = self.durable_end;
        let (ready, waiting) = std::mem::take(&mut self.pending_snapshots)
            .into_iter()
            .partition(|s| snapshot_may_be_written(s.offset, durable));
        self.pending_snapshots = waiting;
        fx.snapshots = ready;
        fx
    }

    /// A segment was rolled: the producer state is snapshotted there, so
    /// the recovery replay is bounded by about one segment. Returns the
    /// snapshot's offset; it is written once the log is durable up to it.
    pub fn segment_rolled(&mut self) -> i64 {
        self.take_snapshot()
    }

    /// Takes a snapshot of the producer table as of the log end (the table
    /// reflects exactly the batches below it) and queues it until that
    /// offset is durable. Deletions ask for one first: producer state must
    /// outlive the segments that go (KIP-360). Returns its offset.
    pub fn take_snapshot(&mut self) -> i64 {
        let offset = self.log_end;
        let bytes = encode_snapshot(&self.producers, offset);
        // A newer snapshot supersedes an older one still waiting.
        self.pending_snapshots.retain(|s| s.offset > offset);
        self.pending_snapshots.push(SnapshotWrite { offset, bytes });
        offset
    }

    /// The driver wrote the snapshot at `offset`.
    pub fn snapshot_written(&mut self, offset: i64) {
        self.written_snapshot = Some(self.written_snapshot.map_or(offset, |o| o.max(offset)));
    }

    /// Offset of the newest snapshot on the volume.
    pub fn written_snapshot(&self) -> Option<i64> {
        self.written_snapshot
    }

    /// Whether DeleteRecords may move the log start to `new_start`.
    pub fn may_delete_before(&self, new_start: i64) -> Result<(), ErrorCode> {
        may_delete_records_before(new_start, self.high_watermark())
    }

    /// Whether the segments below `new_start` may go without losing
    /// producer state a restart needs.
    pub fn deletion_is_covered(&self, new_start: i64) -> bool {
        snapshot_covers_deletion(self.written_snapshot, new_start)
    }

    /// The log start moved (DeleteRecords, retention). Never moves back.
    pub fn records_deleted(&mut self, new_start: i64) {
        self.log_start = self.log_start.max(new_start.min(self.log_end));
        trim_before_log_start(&mut self.leader_epochs, self.log_start);
    }

    /// Whether `batch` comes where its producer has no transaction open
    /// at its epoch: a transactional batch there needs its coordinator's
    /// word first (KIP-890 part 1), whatever its sequence. (Checking only
    /// in-sequence batches would let the batch after a refused one reach
    /// the sequence check and fail with OUT_OF_ORDER_SEQUENCE_NUMBER, which
    /// a transactional producer must abort on, instead of the retriable
    /// answer of the verification.)
    pub fn opens_transaction(&self, batch: &BatchIdentity) -> bool {
        batch.is_transactional
            && !self
                .producers
                .get(batch.producer_id)
                .is_some_and(|e| e.epoch == batch.epoch && e.current_txn_first_offset.is_some())
    }

    /// The cross-partition fence: see [`ProducerTable::fence`].
    pub fn fence_producer(&mut self, producer_id: i64, epoch: i16) -> bool {
        self.producers.fence(producer_id, epoch)
    }

    /// Forgets producers idle for `expiration_ms`; returns their ids.
    pub fn expire_producers(&mut self, now_ms: i64, expiration_ms: i64) -> Vec<i64> {
        self.producers.expire(now_ms, expiration_ms)
    }

    /// An append or fsync failed. Nothing more is appended or acknowledged
    /// until the partition is recovered from the volume again.
    pub fn failed(&mut self) {
        if !self.failed {
            coverage::hit(Mark::PartitionStoppedByAFailedWrite);
        }
        self.failed = true;
        self.pending_snapshots.clear();
    }
}

/// With a single copy of the data, the high watermark is the durable end.
pub fn high_watermark(durable_end: i64) -> i64 {
    durable_end
}

/// read_committed consumers see up to the high watermark, or up to the
/// first offset of the earliest open transaction if that is lower, but
/// never below the log start: DeleteRecords and retention may remove the
/// records where an open transaction began (they are bounded by the high
/// watermark, not by this offset), and a bound below the log start would
/// leave read_committed consumers nothing to read and ListOffsets LATEST
/// answering an offset that no longer exists. Kafka clamps its first
/// unstable offset to the log start the same way (UnifiedLog's
/// `maybeIncrementFirstUnstableOffset`).
///
/// `first_unstable` is the first offset of the earliest transaction not
/// yet decided durably: open, or closed by a marker not yet durable.
pub fn last_stable_offset(high_watermark: i64, log_start: i64, first_unstable: Option<i64>) -> i64 {
    first_unstable.map_or(high_watermark, |first| {
        first.max(log_start).min(high_watermark)
    })
}

/// The aborted-index entry of a completed transaction, `None` for a
/// commit. Its last stable offset is Kafka's: the first offset of the
/// earliest transaction still open once this one closed
/// (`still_open_first`), else the offset after the marker. The same rule
/// serves the marker write and the recovery replay, so a rebuilt index is
/// byte for byte the one written.
pub fn aborted_index_entry(
    completed: &CompletedTxn,
    still_open_first: Option<i64>,
) -> Option<AbortedTxn> {
    completed.aborted.then(|| AbortedTxn {
        producer_id: completed.producer_id,
        first_offset: completed.first_offset,
        last_offset: completed.last_offset,
        last_stable_offset: still_open_first.unwrap_or(completed.last_offset + 1),
    })
}

/// A read_committed fetch of `[fetch offset, upper)` looks at aborted-index
/// entries in marker order and may stop after one whose last stable offset
/// is at or past `upper`: when that transaction ended, every transaction
/// that began below `upper` had already ended (else the last stable offset
/// would be below its first offset), and every later one begins after
/// that marker, so no later entry can overlap the fetch. Kafka stops at
/// the same point (`TxnIndexSearchResult.isComplete`).
pub fn aborted_search_is_complete(entry: &AbortedTxn, upper: i64) -> bool {
    entry.last_stable_offset >= upper
}

/// Recovery keeps an aborted-index entry read from a `.txnindex` file only
/// if its marker lies below `replay_from`, the offset from which the
/// producer state is replayed from the log: below it, the entry was made
/// durable before the snapshot that bounds the replay was written (the
/// flusher syncs a segment's `.txnindex` with the segment, and a snapshot
/// is written only once the log under it is durable). Entries at or past
/// `replay_from` are rebuilt from the markers the replay meets, so an entry
/// whose marker a crash took back from the log does not survive, and one
/// whose write a crash lost comes back.
pub fn txn_index_entry_is_trusted(entry: &AbortedTxn, replay_from: i64) -> bool {
    entry.last_offset < replay_from
}

/// A snapshot may be written only once the log up to its offset is
/// durable. Written earlier, a crash can take back batches it covers;
/// trusted at a later start, it would answer a retry of such a batch as a
/// duplicate at offsets that by then hold other records.
pub fn snapshot_may_be_written(snapshot_offset: i64, durable_end: i64) -> bool {
    snapshot_offset <= durable_end
}

/// A snapshot found at startup is used only if it is not ahead of the
/// recovered log (defence in depth: with the rule above it never is, but a
/// snapshot from an older version or outside damage could be).
pub fn snapshot_is_trusted(snapshot_offset: i64, log_end: i64) -> bool {
    snapshot_offset <= log_end
}

/// A producer snapshot written by the leader of `snapshot_epoch` speaks
/// only for that epoch's log: it is trusted up to where the next epoch
/// starts (`leader_epochs::file_reach`), never past it, since anything a
/// deposed leader saw beyond that point is not in the log. An epoch the
/// checkpoint does not list wrote nothing (a later epoch took over at the
/// same offset): its snapshot is trusted up to where the next listed epoch
/// starts, which is the log it found when it took over.
pub fn epoch_snapshot_is_trusted(
    entries: &[leader_epochs::EpochEntry],
    snapshot_epoch: i32,
    snapshot_offset: i64,
    log_end: i64,
) -> bool {
    let reach = match leader_epochs::file_reach(entries, snapshot_epoch) {
        leader_epochs::FileReach::ToLogEnd => log_end,
        leader_epochs::FileReach::Below(next_start) => next_start.min(log_end),
        leader_epochs::FileReach::Unread => entries
            .iter()
            .find(|e| e.epoch > snapshot_epoch)
            .map_or(log_end, |e| e.start_offset.min(log_end)),
    };
    snapshot_is_trusted(snapshot_offset, reach)
}

/// DeleteRecords and retention may move the log start up to the high
/// watermark, never past it: consumers must be able to read what they were
/// told exists, and offsets above it are not durable.
pub fn may_delete_records_before(new_start: i64, high_watermark: i64) -> Result<(), ErrorCode> {
    if new_start < 0 || new_start > high_watermark {
        return Err(ErrorCode::OffsetOutOfRange);
    }
    Ok(())
}

/// Producer state must outlive the log segments that held its batches
/// (KIP-360): a restart rebuilds the table from the snapshot plus the log
/// after it, so segments below `new_start` may be deleted only once a
/// snapshot at or past `new_start` is on the volume.
pub fn snapshot_covers_deletion(written_snapshot: Option<i64>, new_start: i64) -> bool {
    written_snapshot.is_some_and(|s| s >= new_start)
}

fn open_transactions_of(table: &ProducerTable) -> BTreeSet<(i64, i64)> {
    table
        .entries()
        .filter_map(|e| e.current_txn_first_offset.map(|o| (o, e.producer_id)))
        .collect()
}
