//! The partition log on the volume.
//!
//! ```text
//! topics/<topic>-<partition>/<base offset, 20 digits>[_<epoch>].log    batches, as received, offsets assigned
//! topics/<topic>-<partition>/<base offset, 20 digits>[_<epoch>].index  sparse index, written when the segment is sealed
//! topics/<topic>-<partition>/leader-epoch-checkpoint[_<epoch>]        where each leader epoch's log starts, one file per epoch
//! topics/<topic>-<partition>/log-start-offset                         the log start and first segment, before every deletion
//! ```
//!
//! A log is opened at a leader epoch and writes only files named with it;
//! an older epoch's files are read up to where the checkpoint says the next
//! epoch starts, and never written (see `recovery` and docs/cluster.md).
//!
//! Everything goes through [`Volume`](crate::volume::Volume), so the
//! simulator's in-memory volume (with its crash semantics) runs this exact
//! code. Appends and rolls never fsync: the driver's flusher takes a
//! [`SyncPlan`] (the segments rolled since the last fsync, then the active
//! one), runs it outside the log's lane and installs the indexes it wrote
//! ([`PartitionLog::finish_sync`]). Which offsets are durable, and so
//! visible, is decided by `kaas_core::partition`.

mod cleaner;
#[cfg(test)]
mod cleaner_tests;
mod fail_stop;
mod index;
mod partition_log;
mod recovery;
mod retention;
mod scan;
mod segment;
#[cfg(test)]
mod tests;

pub use cleaner::{
    remove_replaced, run_round, CleanedCopy, CleaningInput, Round, RoundOutcome, RoundSettings,
};
pub use kaas_core::layout::partition_dir;
pub use partition_log::{remove_segments, DetachedSegment, PartitionLog, SyncDone, SyncPlan};
pub use retention::{persist_log_start, RetentionOutcome};

use bytes::Bytes;
use std::fmt;
use std::io;

/// Per-partition log settings (from the topic config).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogConfig {
    /// A segment is rolled before an append would make it larger than this
    /// (Kafka `segment.bytes`). Capped at `u32::MAX` because index entries
    /// store file positions as u32.
    pub segment_bytes: u64,
    /// Bytes of batches between two index entries (Kafka
    /// `index.interval.bytes`).
    pub index_interval_bytes: u64,
    /// The active segment rolls before an append once it has waited longer
    /// than this, less its jitter (Kafka `segment.ms`; the rule is
    /// `kaas_core::partition::segment_roll`).
    pub segment_ms: i64,
    /// The most a segment's jitter takes off `segment_ms` (Kafka
    /// `segment.jitter.ms`).
    pub segment_jitter_ms: i64,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: 1 << 30,
            index_interval_bytes: 4096,
            segment_ms: kaas_core::partition::segment_roll::DEFAULT_SEGMENT_MS,
            segment_jitter_ms: 0,
        }
    }
}

/// What an append did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendInfo {
    /// Base offset assigned to the first batch.
    pub base_offset: i64,
    /// Last offset of the last batch.
    pub last_offset: i64,
    /// True if the append rolled at least one segment (the driver
    /// snapshots producer state then).
    pub rolled: bool,
}

/// The result of a read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadResult {
    /// Whole batches, concatenated, as stored. Empty if nothing is readable
    /// below the bound.
    pub records: Bytes,
    /// The offset after the last returned batch (the fetch offset if none).
    pub next_offset: i64,
    /// Log start offset at the time of the read (the Fetch response's
    /// `log_start_offset`).
    pub log_start_offset: i64,
}

/// Errors of reads and offset-addressed operations (Fetch, DeleteRecords).
#[derive(Debug)]
pub enum ReadError {
    /// The offset is below the log start or above the log end (the caller
    /// holds the log and can ask it for both).
    OutOfRange,
    /// The volume failed.
    Io(io::Error),
}

// Kafka error codes.
const OFFSET_OUT_OF_RANGE: i16 = 1;
const KAFKA_STORAGE_ERROR: i16 = 56;

impl ReadError {
    /// The Kafka error code a response should carry.
    pub fn error_code(&self) -> i16 {
        match self {
            ReadError::OutOfRange => OFFSET_OUT_OF_RANGE,
            ReadError::Io(_) => KAFKA_STORAGE_ERROR,
        }
    }
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::OutOfRange => write!(f, "offset out of range"),
            ReadError::Io(e) => write!(f, "log io error: {e}"),
        }
    }
}

impl std::error::Error for ReadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReadError::Io(e) => Some(e),
            ReadError::OutOfRange => None,
        }
    }
}

impl From<io::Error> for ReadError {
    fn from(e: io::Error) -> Self {
        ReadError::Io(e)
    }
}

/// Shorthand for data the volume returned that cannot be what kaas wrote.
pub(crate) fn invalid_data(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}
