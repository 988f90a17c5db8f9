//! The log cleaner's round for one partition (compacted topics): the
//! driver of `crate::log::run_round`, through the partition's gate.
//!
//! A round runs off the request path: it holds the append lane only to
//! take handles on the sealed segments and, at the end, to swap the copies
//! in; the reading and writing run on the IO runner meanwhile, while
//! produce and fetch go on. It holds `deleting`, so retention and
//! DeleteRecords wait for it rather than remove a segment it is copying.
//! After each step it sleeps long enough to keep its reads and writes
//! under the I/O budget, and after the swap it removes the replaced files
//! at that pace too (`remove_paced`).

use std::time::Duration;

use kaas_core::cleaner::{ActiveProducers, CleanPlan, CleanSummary, CompactionConfig};
use kaas_core::protocol::ErrorCode;

use super::{partition_dir, storage_error, Partition};
use crate::env::IoKind;
use crate::log::{
    remove_replaced, run_round, CleaningInput, DetachedSegment, Round, RoundOutcome, RoundSettings,
};

/// Bytes a round reads and writes between two pauses for the I/O budget.
const STEP_BYTES: u64 = 512 << 10;

/// How much of a replaced file one cut frees before the next pause.
const FREE_PIECE: u64 = 1 << 20;

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
    /// How long the round's reading and writing took (the IO runner's
    /// part, without the pause for the I/O budget).
    pub elapsed_ms: i64,
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
        let (outcome, elapsed_ms) = self.run(input, round, settings.io_bytes_per_second).await?;
        if !matches!(outcome.plan, CleanPlan::Clean { .. }) {
            return Ok(None);
        }
        let report = RoundReport {
            copies: outcome.copies.len(),
            summary: outcome.summary.clone(),
            bytes_read: outcome.bytes_read,
            bytes_written: outcome.bytes_written,
            elapsed_ms,
        };
        // The swap is the one step that changes what the log reads: only
        // while this broker still holds the partition. Otherwise the copies
        // stay for the next opening (`abandon_cleaned` says why).
        let remove = if self.check_open().is_ok() {
            let remove = self.log.lock().await.install_cleaned(outcome.copies);
            *self
                .cleaner_checkpoint
                .lock()
                .unwrap_or_else(|p| p.into_inner()) = outcome.checkpoint;
            remove
        } else {
            self.log.lock().await.abandon_cleaned(&outcome.copies)
        };
        // The files the swap replaced are out of the log: retention and
        // DeleteRecords no longer need to wait for their removal.
        drop(one);
        self.remove_paced(remove, settings.io_bytes_per_second)
            .await;
        Ok(Some(report))
    }

    /// Removes the files a swap replaced one segment at a time, within the
    /// I/O budget: freeing a file's blocks is disk work too. On a file
    /// system that discards what it frees (ext4 mounted with `discard`),
    /// the twenty-four 16 MiB originals of a 400 MB round removed back to
    /// back held every acks=all produce's fdatasync for about 300 ms, and
    /// each one alone for about 15 ms (docs/performance.md, "The log
    /// cleaner"). So each file is first cut down a piece at a time
    /// ([`free_tail_paced`](Self::free_tail_paced)), then removed.
    async fn remove_paced(&self, remove: Vec<DetachedSegment>, rate: Option<u64>) {
        let rate = rate.filter(|r| *r > 0);
        for segment in remove {
            let freed = match rate {
                Some(rate) => self.free_tail_paced(&segment, rate).await,
                None => 0,
            };
            let (volume, dir) = (self.volume.clone(), partition_dir(&self.topic, self.index));
            let removed = self
                .env
                .blocking(IoKind::Buffered, move || {
                    remove_replaced(volume.as_ref(), &dir, &[segment])
                })
                .await;
            if let Err(e) = removed {
                // The log reads the copies already; the next opening
                // removes what is left.
                tracing::warn!(topic = %self.topic, partition = self.index, error = %e, "cannot remove replaced segments");
                return;
            }
            if let Some(rate) = rate {
                let left = segment.bytes.saturating_sub(freed);
                tokio::time::sleep(Duration::from_millis(left.saturating_mul(1000) / rate)).await;
            }
        }
    }

    /// Cuts a replaced segment's log file down [`FREE_PIECE`] at a time,
    /// pausing after each cut as the budget would after writing as many
    /// bytes; returns the bytes freed so. Only while this broker holds the
    /// partition: the file is out of its log, and fetches read the log
    /// under its lane, so nothing here reads the file any more; a broker
    /// that opens the partition after a move reads the copy (its name was
    /// durable before the swap), but what it lists is its own affair, so
    /// a partition that moved has its files removed whole, as before.
    async fn free_tail_paced(&self, segment: &DetachedSegment, rate: u64) -> u64 {
        let (volume, path) = (
            self.volume.clone(),
            segment.log_path(&partition_dir(&self.topic, self.index)),
        );
        let Ok(file) = self
            .env
            .blocking(IoKind::Buffered, move || volume.open_segment(&path, false))
            .await
        else {
            // Gone already, or unreadable: the removal says which.
            return 0;
        };
        let mut len = file.len();
        let mut freed = 0;
        while len > 0 && self.check_open().is_ok() {
            let to = len.saturating_sub(FREE_PIECE);
            let f = file.clone();
            if self
                .env
                .blocking(IoKind::Buffered, move || f.free_tail(to))
                .await
                .is_err()
            {
                break;
            }
            let piece = len - to;
            freed += piece;
            len = to;
            tokio::time::sleep(Duration::from_millis(piece.saturating_mul(1000) / rate)).await;
        }
        freed
    }

    /// Runs a round on the IO runner, a step of [`STEP_BYTES`] at a time,
    /// pausing after each long enough to keep its reads and writes under
    /// `rate` bytes a second (`None`: in one go). Returns the outcome and
    /// the time spent in steps (without the pauses).
    async fn run(
        &self,
        input: CleaningInput,
        round: RoundSettings,
        rate: Option<u64>,
    ) -> Result<(RoundOutcome, i64), ErrorCode> {
        let Some(rate) = rate.filter(|r| *r > 0) else {
            let started = self.env.now_ms();
            let outcome = self
                .env
                .blocking(IoKind::Buffered, move || run_round(input, round))
                .await
                .map_err(storage_error)?;
            return Ok((outcome, self.env.now_ms().saturating_sub(started)));
        };
        let mut round = self
            .env
            .blocking(IoKind::Buffered, move || Round::start(input, round))
            .await
            .map_err(storage_error)?;
        let mut working_ms = 0;
        loop {
            let started = self.env.now_ms();
            let (r, done, moved) = self
                .env
                .blocking(IoKind::Buffered, move || {
                    let before = round.io_bytes();
                    let done = round.step(STEP_BYTES)?;
                    let moved = round.io_bytes() - before;
                    Ok((round, done, moved))
                })
                .await
                .map_err(storage_error)?;
            round = r;
            working_ms += self.env.now_ms().saturating_sub(started);
            if done {
                return Ok((round.finish(), working_ms));
            }
            // Still this broker's partition? A round of a partition that
            // moved stops here; what it wrote whole is a valid cleaning.
            self.check_open()?;
            tokio::time::sleep(Duration::from_millis(moved.saturating_mul(1000) / rate)).await;
        }
    }
}
