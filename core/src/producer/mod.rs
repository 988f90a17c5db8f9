//! Idempotent-producer state: the rules that make a retried Produce land
//! exactly once, in order (KIP-98, with KIP-360's retention and epoch rules).
//!
//! Per (partition, producer id) the broker keeps the producer's epoch and
//! the metadata of its last few batches. `ProducerTable::classify` decides,
//! before anything is appended, whether a batch is new, a duplicate of one
//! already in the log (answer with its offset, write nothing), or out of
//! order / from a fenced epoch. It is a pure function of the table and the
//! batch; `record_append` updates the table after the append succeeded.

mod pid;
mod snapshot;

pub use pid::{local_pid_range, pid_for, PidBlock, PID_BLOCK_SIZE};
pub use snapshot::{decode_snapshot, encode_snapshot, SnapshotError};

use crate::coverage::{self, Mark};
use crate::deliberate_bugs::{planted, Bug};
use crate::protocol::ErrorCode;
use crate::record::{ControlType, RecordBatch, NO_PRODUCER_EPOCH, NO_SEQUENCE};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};

/// Batches remembered per producer: the Java producer's
/// max.in.flight.requests.per.connection (5) bounds how far a retry can
/// trail the newest batch, so a duplicate is always one of these.
pub const MAX_CACHED_BATCHES: usize = 5;

/// Kafka's producer.id.expiration.ms default: one day.
pub const DEFAULT_PRODUCER_ID_EXPIRATION_MS: i64 = 24 * 60 * 60 * 1000;

/// What the rules need to know about an incoming batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchIdentity {
    pub producer_id: i64,
    pub epoch: i16,
    pub first_seq: i32,
    pub last_seq: i32,
    pub is_transactional: bool,
    /// offsets in the batch - 1 (lastOffsetDelta).
    pub offset_delta: i32,
}

impl BatchIdentity {
    /// `None` for a batch without a producer id (not idempotent).
    pub fn of(batch: &RecordBatch) -> Option<BatchIdentity> {
        batch.has_producer_id().then(|| BatchIdentity {
            producer_id: batch.producer_id(),
            epoch: batch.producer_epoch(),
            first_seq: batch.base_sequence(),
            last_seq: batch.last_sequence(),
            is_transactional: batch.is_transactional(),
            offset_delta: batch.last_offset_delta(),
        })
    }
}

/// Where one remembered batch landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchMeta {
    pub first_seq: i32,
    pub last_seq: i32,
    pub first_offset: i64,
    pub last_offset: i64,
}

/// The state of one producer on one partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerEntry {
    pub producer_id: i64,
    pub epoch: i16,
    /// Newest last.
    pub batches: VecDeque<BatchMeta>,
    /// Broker time of the last append, for expiry.
    pub last_update_ms: i64,
    /// Max timestamp of the last batch (DescribeProducers).
    pub last_timestamp: i64,
    pub coordinator_epoch: i32,
    /// First offset of the open transaction, if one is open.
    pub current_txn_first_offset: Option<i64>,
}

impl ProducerEntry {
    fn new(producer_id: i64) -> ProducerEntry {
        ProducerEntry {
            producer_id,
            epoch: NO_PRODUCER_EPOCH,
            batches: VecDeque::new(),
            last_update_ms: 0,
            last_timestamp: -1,
            coordinator_epoch: -1,
            current_txn_first_offset: None,
        }
    }

    pub fn last_seq(&self) -> i32 {
        self.batches.back().map_or(NO_SEQUENCE, |b| b.last_seq)
    }
}

/// A transaction a marker closed on one partition: what the aborted
/// index records for an abort (`first_offset..=last_offset`, the marker
/// last).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompletedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    pub last_offset: i64,
    pub aborted: bool,
}

/// A transaction marker is refused if its producer epoch is stale
/// ([`marker_epoch_is_stale`]: INVALID_PRODUCER_EPOCH), or if it carries an
/// older coordinator epoch than the last marker for this producer (a
/// deposed coordinator: TRANSACTION_COORDINATOR_FENCED), in that order, as
/// Kafka checks them.
pub fn check_marker(
    entry: Option<&ProducerEntry>,
    producer_epoch: i16,
    coordinator_epoch: i32,
    transaction_version: i8,
) -> Result<(), ErrorCode> {
    let Some(entry) = entry else {
        return Ok(());
    };
    if marker_epoch_is_stale(transaction_version, producer_epoch, entry.epoch) {
        return Err(ErrorCode::InvalidProducerEpoch);
    }
    if coordinator_epoch < entry.coordinator_epoch {
        coverage::hit(Mark::MarkerOfADeposedCoordinatorRefused);
        return Err(ErrorCode::TransactionCoordinatorFenced);
    }
    Ok(())
}

/// KIP-1228: a coordinator of transaction version 2 bumps the producer's
/// epoch before it writes a transaction's markers, so a version-2 marker
/// must carry an epoch above the producer's current one on the partition;
/// one at that epoch is late or repeated. Markers of versions 0 and 1
/// (WriteTxnMarkers v1, which has no version field) may equal it.
pub fn marker_epoch_is_stale(
    transaction_version: i8,
    marker_epoch: i16,
    current_epoch: i16,
) -> bool {
    if transaction_version >= 2 {
        marker_epoch <= current_epoch
    } else {
        marker_epoch < current_epoch
    }
}

/// The decision for one incoming batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Classification {
    /// New and in order: append it.
    Append,
    /// Already in the log (a retry): answer with where it landed, write nothing.
    Duplicate { first_offset: i64, last_offset: i64 },
    /// Refuse it with this error.
    Reject(ErrorCode),
}

/// Producer state of one partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProducerTable {
    entries: BTreeMap<i64, ProducerEntry>,
}

/// A retry of a batch still remembered: same epoch, same sequence range.
pub fn find_duplicate(entry: &ProducerEntry, batch: &BatchIdentity) -> Option<BatchMeta> {
    if batch.epoch != entry.epoch {
        return None;
    }
    entry
        .batches
        .iter()
        .find(|b| b.first_seq == batch.first_seq && b.last_seq == batch.last_seq)
        .copied()
}

/// An epoch lower than the producer's current one comes from a fenced
/// (zombie) instance: INVALID_PRODUCER_EPOCH, which Kafka answers on
/// Produce since 2.7 (PRODUCER_FENCED is reserved for the coordinator APIs).
pub fn check_epoch(entry: &ProducerEntry, batch: &BatchIdentity) -> Result<(), ErrorCode> {
    if batch.epoch < entry.epoch && !planted(Bug::ZombieEpochAccepted) {
        return Err(ErrorCode::InvalidProducerEpoch);
    }
    Ok(())
}

/// The next sequence follows the last one, wrapping from i32::MAX to 0.
pub fn in_sequence(last_seq: i32, next_seq: i32) -> bool {
    i64::from(next_seq) == i64::from(last_seq) + 1 || (next_seq == 0 && last_seq == i32::MAX)
}

/// Sequence rules:
/// - a producer this partition has no state for must start at sequence 0,
///   else UNKNOWN_PRODUCER_ID, which clients answer by resetting their
///   sequence (KIP-360). Kafka today accepts any sequence here, because its
///   state used to vanish with the log segments; kaas keeps the state until
///   producer.id.expiration.ms (KIP-360's prolonged retention), so a
///   non-zero first sequence can only mean earlier batches were lost or
///   reordered, and accepting it would leave a permanent hole;
/// - a new epoch must start at sequence 0;
/// - within an epoch, each batch must follow the previous one.
pub fn check_sequence(entry: &ProducerEntry, batch: &BatchIdentity) -> Result<(), ErrorCode> {
    if entry.epoch == NO_PRODUCER_EPOCH {
        return if batch.first_seq == 0 {
            Ok(())
        } else {
            Err(ErrorCode::UnknownProducerId)
        };
    }
    if batch.epoch != entry.epoch {
        return if batch.first_seq == 0 {
            Ok(())
        } else {
            Err(ErrorCode::OutOfOrderSequenceNumber)
        };
    }
    // With no batch remembered in this epoch the last sequence is
    // NO_SEQUENCE (-1), so this also requires the epoch to start at 0.
    if in_sequence(entry.last_seq(), batch.first_seq) {
        Ok(())
    } else {
        Err(ErrorCode::OutOfOrderSequenceNumber)
    }
}

impl ProducerTable {
    pub fn new() -> ProducerTable {
        ProducerTable::default()
    }

    pub fn get(&self, producer_id: i64) -> Option<&ProducerEntry> {
        self.entries.get(&producer_id)
    }

    pub fn entries(&self) -> impl Iterator<Item = &ProducerEntry> {
        self.entries.values()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Decides what to do with an incoming idempotent batch.
    pub fn classify(&self, batch: &BatchIdentity) -> Classification {
        let fresh = ProducerEntry::new(batch.producer_id);
        let entry = self.entries.get(&batch.producer_id).unwrap_or(&fresh);
        if let Some(dup) = find_duplicate(entry, batch) {
            if planted(Bug::RetryAppendedAgain) {
                return Classification::Append;
            }
            return Classification::Duplicate {
                first_offset: dup.first_offset,
                last_offset: dup.last_offset,
            };
        }
        if let Err(code) = check_epoch(entry, batch) {
            // Batches are forgotten when an epoch is fenced and refilled
            // by the newer epoch's own writes: none means the epoch came
            // from the fence alone.
            if entry.batches.is_empty() {
                coverage::hit(Mark::ZombieBatchFencedWhereItsSuccessorNeverWrote);
            }
            return Classification::Reject(code);
        }
        if let Err(code) = check_sequence(entry, batch) {
            return Classification::Reject(code);
        }
        Classification::Append
    }

    /// Records a batch that was appended at `first_offset`: the epoch moves
    /// to the batch's (a new epoch forgets the old epoch's batches), the
    /// batch joins the remembered ones, the oldest beyond five is dropped.
    /// Returns `Some(first_offset)` if the batch opened a transaction.
    pub fn record_append(
        &mut self,
        batch: &BatchIdentity,
        first_offset: i64,
        max_timestamp: i64,
        now_ms: i64,
    ) -> Option<i64> {
        let entry = self
            .entries
            .entry(batch.producer_id)
            .or_insert_with(|| ProducerEntry::new(batch.producer_id));
        if batch.epoch != entry.epoch {
            entry.epoch = batch.epoch;
            entry.batches.clear();
        }
        entry.batches.push_back(BatchMeta {
            first_seq: batch.first_seq,
            last_seq: batch.last_seq,
            first_offset,
            last_offset: first_offset + i64::from(batch.offset_delta),
        });
        while entry.batches.len() > MAX_CACHED_BATCHES {
            entry.batches.pop_front();
        }
        entry.last_update_ms = now_ms;
        entry.last_timestamp = max_timestamp;
        if batch.is_transactional && entry.current_txn_first_offset.is_none() {
            entry.current_txn_first_offset = Some(first_offset);
            return Some(first_offset);
        }
        None
    }

    /// Records a transaction marker written at `offset` (checked first with
    /// [`check_marker`]): it closes the producer's open transaction, and
    /// the transaction it closes is returned for the aborted index. A
    /// marker for a producer with no open transaction here (the
    /// transaction wrote nothing to this partition) closes an empty one at
    /// the marker's own offset, as Kafka records it.
    pub fn record_marker(
        &mut self,
        producer_id: i64,
        producer_epoch: i16,
        coordinator_epoch: i32,
        commit: bool,
        offset: i64,
        timestamp_ms: i64,
    ) -> Option<CompletedTxn> {
        let entry = self
            .entries
            .entry(producer_id)
            .or_insert_with(|| ProducerEntry::new(producer_id));
        // A marker written at a bumped epoch (KIP-360 aborts, and every
        // transaction end under KIP-890) starts that epoch: as in
        // `record_append`, the old epoch's batches are forgotten, or the
        // producer's first batch of the new epoch would be taken for a retry
        // of an old one.
        if producer_epoch > entry.epoch {
            entry.epoch = producer_epoch;
            entry.batches.clear();
        }
        // The idle clock (`last_update_ms`) is left alone: it follows the
        // producer's own batches, as recovery's replay has always had it.
        // The last timestamp is the marker's, as Kafka reports it.
        entry.coordinator_epoch = coordinator_epoch;
        entry.last_timestamp = timestamp_ms;
        // Only a transaction with data on this partition completes here: a
        // marker with nothing open (an abort after the data went elsewhere,
        // an operator's second marker) moves no stable offset and is not
        // indexed, as Kafka emits no completed transaction for it.
        let first_offset = entry.current_txn_first_offset.take()?;
        Some(CompletedTxn {
            producer_id,
            first_offset,
            last_offset: offset,
            aborted: !commit,
        })
    }

    /// The producer's coordinator bumped its epoch to `epoch`: a producer
    /// known here at an older epoch moves to it, its batches forgotten, so
    /// the older epoch's batches are refused as fenced (the cross-partition
    /// fence). An open transaction stays open: its abort marker, written at
    /// `epoch`, closes it. A producer unknown here is left alone (its
    /// transactional batches are verified with the coordinator).
    pub fn fence(&mut self, producer_id: i64, epoch: i16) -> bool {
        match self.entries.get_mut(&producer_id) {
            Some(entry) if entry.epoch < epoch => {
                entry.epoch = epoch;
                entry.batches.clear();
                true
            }
            _ => false,
        }
    }

    /// Rebuilds state from a batch found in the log during recovery: no
    /// validation (it was validated when appended), same bookkeeping. A
    /// marker returns the transaction it closed (if one was open), so
    /// recovery can rebuild the aborted index of the replayed range.
    pub fn replay(&mut self, batch: &RecordBatch, now_ms: i64) -> Option<CompletedTxn> {
        if batch.is_control() {
            // A transaction marker closes the producer's open transaction.
            // One whose record cannot be read still closes it (it was
            // validated when written); its coordinator epoch is then kept.
            let marker = crate::record::parse_end_txn_marker(batch).ok().flatten();
            let known_epoch = self
                .entries
                .get(&batch.producer_id())
                .map(|e| e.coordinator_epoch);
            let coordinator_epoch = marker
                .as_ref()
                .map(|m| m.coordinator_epoch)
                .or(known_epoch)
                .unwrap_or(-1);
            let commit = marker.is_none_or(|m| m.control_type == ControlType::Commit);
            return self.record_marker(
                batch.producer_id(),
                batch.producer_epoch(),
                coordinator_epoch,
                commit,
                batch.base_offset(),
                batch.max_timestamp(),
            );
        }
        if let Some(id) = BatchIdentity::of(batch) {
            self.record_append(&id, batch.base_offset(), batch.max_timestamp(), now_ms);
        }
        None
    }

    /// The first offset of the earliest transaction still open here.
    pub fn first_open_offset(&self) -> Option<i64> {
        self.entries
            .values()
            .filter_map(|e| e.current_txn_first_offset)
            .min()
    }

    /// Drops producers idle for `expiration_ms` (producer.id.expiration.ms)
    /// and returns their ids. State outlives the log segments that held the
    /// producer's batches (KIP-360): only this clock removes it, and never
    /// while the producer has a transaction open here.
    pub fn expire(&mut self, now_ms: i64, expiration_ms: i64) -> Vec<i64> {
        let idle = |e: &ProducerEntry| {
            e.current_txn_first_offset.is_none()
                && now_ms.saturating_sub(e.last_update_ms) >= expiration_ms
        };
        let expired: Vec<i64> = self
            .entries
            .values()
            .filter(|e| idle(e))
            .map(|e| e.producer_id)
            .collect();
        for id in &expired {
            self.entries.remove(id);
        }
        expired
    }

    fn from_entries(entries: Vec<ProducerEntry>) -> ProducerTable {
        ProducerTable {
            entries: entries.into_iter().map(|e| (e.producer_id, e)).collect(),
        }
    }
}

#[cfg(test)]
mod tests;
