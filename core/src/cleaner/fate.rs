//! What becomes of one batch, and writing that out.

use crate::record::{FilterError, RecordBatch};

/// The decision for one input batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fate {
    /// Write the batch as it is, byte for byte.
    KeepWhole,
    /// Leave the batch out.
    Drop,
    /// Write only its header, with no records
    /// ([`RecordBatch::empty_header`]): every record goes, but the batch
    /// holds an active producer's last entry or ends the cleaning round.
    KeepEmpty,
    /// Write the batch with only the records flagged in `keep` (one flag per
    /// record, in order, at least one set), stamping `new_delete_horizon`
    /// when the batch gets its first one ([`RecordBatch::retain`]).
    Rewrite {
        /// One flag per record of the batch, in order: true to keep it.
        keep: Vec<bool>,
        /// The horizon to stamp, when the batch has none yet.
        new_delete_horizon: Option<i64>,
    },
}

impl Fate {
    /// The batch to write for `batch` (the one this fate was decided for),
    /// or `None` to write nothing.
    ///
    /// Only a rewrite can fail, on a batch whose records cannot be rebuilt
    /// (see [`FilterError`]). Writing the original batch instead is always
    /// safe: it keeps records the cleaner could have removed, never loses
    /// one, and the decisions about later batches do not depend on it.
    pub fn apply(&self, batch: &RecordBatch) -> Result<Option<RecordBatch>, FilterError> {
        match self {
            Fate::KeepWhole => Ok(Some(batch.clone())),
            Fate::Drop => Ok(None),
            Fate::KeepEmpty => Ok(Some(batch.empty_header())),
            Fate::Rewrite {
                keep,
                new_delete_horizon,
            } => batch.retain(keep, *new_delete_horizon).map(Some),
        }
    }
}
