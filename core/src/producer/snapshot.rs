//! `producer-state.snapshot`: the producer table as of a log offset.
//!
//! Written atomically on segment roll and clean shutdown. At startup the
//! table is the snapshot plus a replay of the log from the snapshot's
//! offset, so it is exact even after kill -9. A snapshot that does not
//! parse is an error (the caller rebuilds from the whole log), never a panic.

use super::{ProducerEntry, ProducerTable};
use serde::{Deserialize, Serialize};

const VERSION: u32 = 1;

#[derive(Serialize, Deserialize)]
struct SnapshotFile {
    version: u32,
    /// Every batch below this offset is reflected in `producers`.
    offset: i64,
    producers: Vec<ProducerEntry>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SnapshotError {
    Malformed(String),
    UnknownVersion(u32),
}

impl std::fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SnapshotError::Malformed(e) => write!(f, "malformed producer snapshot: {e}"),
            SnapshotError::UnknownVersion(v) => {
                write!(f, "producer snapshot version {v} is unknown")
            }
        }
    }
}

impl std::error::Error for SnapshotError {}

pub fn encode_snapshot(table: &ProducerTable, offset: i64) -> Vec<u8> {
    let file = SnapshotFile {
        version: VERSION,
        offset,
        producers: table.entries().cloned().collect(),
    };
    // Serialising plain data to a Vec cannot fail.
    serde_json::to_vec(&file).unwrap_or_default()
}

/// The table and the offset it is valid up to.
pub fn decode_snapshot(bytes: &[u8]) -> Result<(ProducerTable, i64), SnapshotError> {
    let file: SnapshotFile =
        serde_json::from_slice(bytes).map_err(|e| SnapshotError::Malformed(e.to_string()))?;
    if file.version != VERSION {
        return Err(SnapshotError::UnknownVersion(file.version));
    }
    if file.offset < 0
        || file
            .producers
            .iter()
            .any(|p| p.batches.len() > super::MAX_CACHED_BATCHES)
    {
        return Err(SnapshotError::Malformed("inconsistent snapshot".into()));
    }
    Ok((ProducerTable::from_entries(file.producers), file.offset))
}
