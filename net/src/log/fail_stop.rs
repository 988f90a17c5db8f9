//! Segment files that stay failed once an fsync of them failed.
//!
//! On Linux a failed fsync marks the dirty pages clean ("fsyncgate"): the
//! next fsync of the file has nothing left to write and succeeds, although
//! those bytes never reached the disk. The group-commit flusher syncs the
//! active segment outside the log's lock, so an append can roll the segment
//! between the flusher's failed fsync and the flusher failing the partition;
//! the roll's own fsync then succeeded, the segment was sealed, and its
//! index was trusted at the next startup although the crash had zeroed part
//! of it. So once a sync of a segment file fails, every later sync of it
//! fails too, and syncs of one file are serialised, so that one overlapping
//! a failing one cannot report success either.

use crate::volume::SegmentFile;
use bytes::Bytes;
use std::io;
use std::sync::{Arc, Mutex};

pub(crate) struct FailStop {
    inner: Arc<dyn SegmentFile>,
    /// Held across each sync; true once one failed.
    sync_failed: Mutex<bool>,
}

/// Wraps `file`. Segments wrap the file the volume just opened (wrapping
/// twice would be harmless).
pub(crate) fn fail_stop(file: Arc<dyn SegmentFile>) -> Arc<dyn SegmentFile> {
    Arc::new(FailStop {
        inner: file,
        sync_failed: Mutex::new(false),
    })
}

impl SegmentFile for FailStop {
    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn append(&self, data: &[u8]) -> io::Result<u64> {
        self.inner.append(data)
    }

    fn read_at(&self, pos: u64, len: usize) -> io::Result<Bytes> {
        self.inner.read_at(pos, len)
    }

    fn start_write_back(&self, from: u64, len: u64) {
        self.inner.start_write_back(from, len);
    }

    fn sync(&self) -> io::Result<()> {
        // A poisoned lock means a sync panicked: its outcome is unknown,
        // which is a failure too.
        let mut failed = self.sync_failed.lock().unwrap_or_else(|p| {
            let mut g = p.into_inner();
            *g = true;
            g
        });
        if *failed {
            return Err(io::Error::other(
                "an earlier fsync of this segment failed; its data can no longer be known durable",
            ));
        }
        let result = self.inner.sync();
        *failed = result.is_err();
        result
    }

    fn truncate(&self, len: u64) -> io::Result<()> {
        self.inner.truncate(len)
    }

    fn free_tail(&self, len: u64) -> io::Result<()> {
        self.inner.free_tail(len)
    }
}
