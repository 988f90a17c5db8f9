//! One partition as the broker serves it: the log, the high watermark and
//! the group-commit flusher.
//!
//! The high watermark is the *durable* end of the log: data becomes visible
//! to consumers only once it is fsync'd. With a single copy of the data, the
//! fsync plays the role replication plays in Kafka: a consumer never reads
//! an offset that a crash could take back and hand to a different record.

pub use crate::log::partition_dir;
use crate::log::{LogConfig, PartitionLog, ReadError};
use bytes::Bytes;
use kaas_core::protocol::ErrorCode;
use kaas_core::record::RecordBatch;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::{watch, Notify};

const OPEN: u8 = 0;
const CLOSED: u8 = 1;
/// An fsync failed: what is on disk is unknown, so nothing more is
/// acknowledged (a later fsync succeeding would not prove the earlier
/// writes reached the disk).
const FAILED: u8 = 2;

pub struct Partition {
    pub topic: String,
    pub index: i32,
    log: Mutex<PartitionLog>,
    high_watermark: watch::Sender<i64>,
    flush_wanted: Notify,
    state: AtomicU8,
}

/// Where an append landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    pub base_offset: i64,
    /// One past the last offset written: durable once the high watermark
    /// reaches it.
    pub end_offset: i64,
    pub log_start_offset: i64,
}

/// What a fetch of one partition returns.
#[derive(Debug, Clone)]
pub struct FetchedData {
    pub records: Bytes,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
}

/// Which records a reader may see (Fetch and ListOffsets isolation level).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isolation {
    ReadUncommitted,
    ReadCommitted,
}

impl Isolation {
    pub fn from_wire(level: i8) -> Isolation {
        if level == 1 {
            Isolation::ReadCommitted
        } else {
            Isolation::ReadUncommitted
        }
    }
}

impl Partition {
    pub fn new(topic: &str, index: i32, log: PartitionLog) -> Partition {
        let durable = log.end_offset();
        Partition {
            topic: topic.to_string(),
            index,
            log: Mutex::new(log),
            high_watermark: watch::Sender::new(durable),
            flush_wanted: Notify::new(),
            state: AtomicU8::new(OPEN),
        }
    }

    pub fn open(volume: Arc<dyn crate::volume::Volume>, topic: &str, index: i32, config: LogConfig) -> std::io::Result<Partition> {
        let log = PartitionLog::open(volume, partition_dir(topic, index), config)?;
        Ok(Partition::new(topic, index, log))
    }

    fn log(&self) -> MutexGuard<'_, PartitionLog> {
        // A panic while holding the lock cannot leave the log half-updated in
        // a way the next caller could not handle: appends are all-or-nothing
        // on the in-memory state. Keep serving.
        self.log.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn check_open(&self) -> Result<(), ErrorCode> {
        match self.state.load(Ordering::Acquire) {
            OPEN => Ok(()),
            CLOSED => Err(ErrorCode::UnknownTopicOrPartition),
            _ => Err(ErrorCode::KafkaStorageError),
        }
    }

    pub fn high_watermark(&self) -> i64 {
        *self.high_watermark.borrow()
    }

    /// The end of what read_committed consumers may see. Without open
    /// transactions it is the high watermark; the transactions issue lowers
    /// it to the first offset of the earliest open transaction.
    pub fn last_stable_offset(&self) -> i64 {
        self.high_watermark()
    }

    pub fn log_start_offset(&self) -> i64 {
        self.log().log_start_offset()
    }

    /// Appends validated batches and asks the flusher for an fsync. Does not
    /// wait for it: `wait_durable` does, for acks=all.
    pub fn append(&self, batches: &[RecordBatch]) -> Result<Appended, ErrorCode> {
        self.check_open()?;
        let mut log = self.log();
        let appended = log.append(batches).map_err(|e| {
            tracing::error!(topic = %self.topic, partition = self.index, error = %e, "append failed");
            ErrorCode::KafkaStorageError
        })?;
        let log_start_offset = log.log_start_offset();
        drop(log);
        self.flush_wanted.notify_one();
        Ok(Appended {
            base_offset: appended.base_offset,
            end_offset: appended.last_offset + 1,
            log_start_offset,
        })
    }

    /// Waits until everything before `end_offset` is durable.
    pub async fn wait_durable(&self, end_offset: i64) -> Result<(), ErrorCode> {
        let mut rx = self.high_watermark.subscribe();
        loop {
            if *rx.borrow_and_update() >= end_offset {
                return Ok(());
            }
            self.check_open()?;
            if rx.changed().await.is_err() {
                return Err(ErrorCode::KafkaStorageError);
            }
        }
    }

    /// Subscribes to high-watermark moves (long-poll fetches wait on it).
    pub fn watch_high_watermark(&self) -> watch::Receiver<i64> {
        self.high_watermark.subscribe()
    }

    /// Reads from `offset` up to the isolation level's bound.
    pub fn read(&self, offset: i64, max_bytes: usize, isolation: Isolation) -> Result<FetchedData, ErrorCode> {
        self.check_open()?;
        let high_watermark = self.high_watermark();
        let last_stable_offset = self.last_stable_offset();
        let bound = match isolation {
            Isolation::ReadUncommitted => high_watermark,
            Isolation::ReadCommitted => last_stable_offset,
        };
        let log = self.log();
        let log_start_offset = log.log_start_offset();
        let records = match log.read(offset, max_bytes, bound) {
            Ok(read) => read.records,
            Err(ReadError::OutOfRange) => return Err(ErrorCode::OffsetOutOfRange),
            Err(ReadError::Io(e)) => {
                tracing::error!(topic = %self.topic, partition = self.index, error = %e, "read failed");
                return Err(ErrorCode::KafkaStorageError);
            }
        };
        Ok(FetchedData {
            records,
            high_watermark,
            last_stable_offset,
            log_start_offset,
        })
    }

    /// Runs `f` on the log under its lock (ListOffsets, DeleteRecords,
    /// retention: short, infrequent operations).
    pub fn with_log<T>(&self, f: impl FnOnce(&mut PartitionLog) -> T) -> Result<T, ErrorCode> {
        self.check_open()?;
        Ok(f(&mut self.log()))
    }

    /// Stops the flusher and refuses further requests (topic deletion).
    pub fn close(&self) {
        self.state.store(CLOSED, Ordering::Release);
        self.flush_wanted.notify_one();
        self.high_watermark.send_modify(|_| {});
    }

    /// fsyncs everything appended so far and publishes the new high
    /// watermark (clean shutdown; the flusher's loop body).
    pub async fn flush(&self) -> Result<(), ErrorCode> {
        let (file, end) = {
            let log = self.log();
            if log.end_offset() <= self.high_watermark() {
                return Ok(());
            }
            log.sync_handle()
        };
        // fsync blocks; keep it off the async worker threads.
        let synced = tokio::task::spawn_blocking(move || file.sync()).await;
        match synced {
            Ok(Ok(())) => {
                self.log().mark_durable(end);
                self.high_watermark.send_if_modified(|hw| {
                    let moved = end > *hw;
                    *hw = (*hw).max(end);
                    moved
                });
                Ok(())
            }
            failure => {
                tracing::error!(topic = %self.topic, partition = self.index, ?failure, "fsync failed; partition stops accepting writes");
                self.state.store(FAILED, Ordering::Release);
                self.high_watermark.send_modify(|_| {});
                Err(ErrorCode::KafkaStorageError)
            }
        }
    }

    /// The group-commit flusher: every request appended while an fsync is
    /// running shares the next one.
    pub async fn run_flusher(self: Arc<Self>, progress: Arc<watch::Sender<u64>>) {
        loop {
            self.flush_wanted.notified().await;
            loop {
                if self.state.load(Ordering::Acquire) != OPEN {
                    return;
                }
                let before = self.high_watermark();
                if self.flush().await.is_err() {
                    return;
                }
                if self.high_watermark() == before {
                    break;
                }
                progress.send_modify(|n| *n = n.wrapping_add(1));
            }
        }
    }
}
