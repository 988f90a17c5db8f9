//! The log cleaner's round for one partition (compacted topics): the
//! driver of `crate::log::run_round`, through the partition's gate.
//!
//! A round runs off the request path: it holds the append lane only to
//! take handles on the sealed segments and, at the end, to swap the copies
//! in; the reading and writing run on the IO runner meanwhile, while
//! produce and fetch go on. It holds `deleting`, so retention and
//! DeleteRecords wait for it rather than remove a segment it is copying.
//! After each round it sleeps long enough to keep its reads and writes
//! under the I/O budget.

use std::time::Duration;

use kaas_core::cleaner::{ActiveProducers, CleanPlan, CleanSummary, CompactionConfig};
use kaas_core::protocol::ErrorCode;

use super::{partition_dir, storage_error, Partition};
use crate::env::IoKind;
use crate::log::{remove_replaced, run_round, RoundSettings};

/// What a topic's configs and the broker's settings make of a round.
#[derive(Debug, Clone, Copy)]
pub struct CleanerSettings {
    /// `delete.retention.ms`.
    pub delete_retention_ms: i64,
    pub compaction: CompactionConfig,
    /// How much of the dirty section one round maps
    /// (`--log-cleaner-dedupe-buffer-size`).
    pub key_map_bytes: usize,
    /// The I/O budget (`--log-cleaner-io-max-bytes-per-second`); `None`:
    /// unlimited.
    pub io_bytes_per_second: Option<u64>,
}

/// What a round did, for the log.
#[derive(Debug, Clone)]
pub struct RoundReport {
    pub copies: usize,
    pub summary: CleanSummary,
    pub bytes_read: u64,
    pub bytes_written: u64,
}

impl Partition {
    /// Runs one cleaning round if the plan asks for one. `Ok(None)`: the
    /// partition is not open here, or nothing to clean yet. A round that
    /// fails changes nothing in the log (the copies it may have left whole
    /// are valid cleanings of their segments; a later opening uses them).
    pub async fn clean(
        &self,
        now_ms: i64,
        settings: &CleanerSettings,
    ) -> Result<Option<RoundReport>, ErrorCode> {
        if self.check_open().is_err() {
            return Ok(None);
        }
        let one = self.deleting.lock().await;
        let input = self.log.lock().await.cleaning_input();
        let round = {
            let state = self.state();
            RoundSettings {
                now_ms,
                delete_retention_ms: settings.delete_retention_ms,
                compaction: settings.compaction,
                checkpoint: *self
                    .cleaner_checkpoint
                    .lock()
                    .unwrap_or_else(|p| p.into_inner()),
                // Only what is durable and stable is cleaned.
                last_stable_offset: state.last_stable_offset().min(state.high_watermark()),
                key_map_bytes: settings.key_map_bytes,
                producers: ActiveProducers::from_table(state.producers()),
            }
        };
        let outcome = self
            .env
            .blocking(IoKind::Buffered, move || run_round(&input, &round))
            .await
            .map_err(storage_error)?;
        if !matches!(outcome.plan, CleanPlan::Clean { .. }) {
            return Ok(None);
        }
        let report = RoundReport {
            copies: outcome.copies.len(),
            summary: outcome.summary.clone(),
            bytes_read: outcome.bytes_read,
            bytes_written: outcome.bytes_written,
        };
        // The swap is the one step that changes what the log reads: only
        // while this broker still holds the partition.
        let remove = if self.check_open().is_ok() {
            let remove = self.log.lock().await.install_cleaned(outcome.copies);
            *self
                .cleaner_checkpoint
                .lock()
                .unwrap_or_else(|p| p.into_inner()) = outcome.checkpoint;
            remove
        } else {
            outcome.copies.iter().map(|c| c.files()).collect()
        };
        if !remove.is_empty() {
            let (volume, dir) = (self.volume.clone(), partition_dir(&self.topic, self.index));
            let removed = self
                .env
                .blocking(IoKind::Buffered, move || {
                    remove_replaced(volume.as_ref(), &dir, &remove)
                })
                .await;
            if let Err(e) = removed {
                // The log reads the copies already; the next opening
                // removes what is left.
                tracing::warn!(topic = %self.topic, partition = self.index, error = %e, "cannot remove replaced segments");
            }
        }
        drop(one);
        if let Some(rate) = settings.io_bytes_per_second.filter(|r| *r > 0) {
            let bytes = report.bytes_read + report.bytes_written;
            tokio::time::sleep(Duration::from_millis(bytes.saturating_mul(1000) / rate)).await;
        }
        Ok(Some(report))
    }
}
