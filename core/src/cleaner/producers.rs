//! The batches that hold an active producer's state, which cleaning must
//! not take out of the log.
//!
//! A producer's state (last sequence, epoch) is rebuilt from the log when a
//! snapshot is missing, and its last batch is what a retry is matched
//! against. So the batch with an active producer's last data offset stays,
//! as a header with no records if every record in it goes; and when a
//! producer's last entry is a marker (no data offset known, e.g. after an
//! epoch bump), its markers at its current epoch stay, for fencing.

use std::collections::BTreeMap;

use super::view::BatchView;
use crate::producer::ProducerTable;

/// What the producer table knows of one active producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerLast {
    /// Last offset of its last data batch, `None` if no data batch is known
    /// at its current epoch.
    pub last_data_offset: Option<i64>,
    /// Its current epoch.
    pub epoch: i16,
}

/// The active producers of the partition, by producer id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ActiveProducers {
    by_id: BTreeMap<i64, ProducerLast>,
}

impl ActiveProducers {
    /// No active producers.
    pub fn new() -> ActiveProducers {
        ActiveProducers::default()
    }

    /// The producers of the partition's producer table, as it stands when
    /// the pass starts.
    pub fn from_table(table: &ProducerTable) -> ActiveProducers {
        let by_id = table
            .entries()
            .map(|entry| {
                let last = ProducerLast {
                    last_data_offset: entry.batches.back().map(|b| b.last_offset),
                    epoch: entry.epoch,
                };
                (entry.producer_id, last)
            })
            .collect();
        ActiveProducers { by_id }
    }

    /// Adds (or replaces) one producer.
    pub fn insert(&mut self, producer_id: i64, last: ProducerLast) {
        self.by_id.insert(producer_id, last);
    }

    /// True if `batch` holds the last entry of an active producer: its last
    /// data batch, or, when no data offset is known, one of its markers at
    /// its current epoch.
    pub fn holds_last_entry(&self, batch: &BatchView) -> bool {
        if !batch.has_producer_id() {
            return false;
        }
        self.by_id
            .get(&batch.producer_id)
            .is_some_and(|last| match last.last_data_offset {
                Some(offset) => batch.last_offset == offset,
                None => batch.is_control() && batch.producer_epoch == last.epoch,
            })
    }
}
