//! Sequential batch reading from a segment file, in chunks.
//!
//! Reading batch by batch would cost a read per batch; reading the whole
//! segment would cost its size in memory. The reader keeps one chunk and
//! refills it when a batch runs past its end. It only frames batches; CRC
//! checks are the caller's business.

use bytes::Bytes;
use kaas_core::record::{frame_batch, BatchError, Frame, RecordBatch, BATCH_HEADER_LEN};
use std::io;

use crate::volume::SegmentFile;

/// Chunk size for scanning a whole segment (startup recovery).
pub(crate) const RECOVERY_CHUNK: usize = 1 << 20;

/// One step of a scan.
#[derive(Debug)]
pub(crate) enum Step {
    /// A framed batch starting at `position`.
    Batch { position: u64, batch: RecordBatch },
    /// The scan reached `end` exactly after a batch.
    End,
    /// The bytes from `position` to `end` are the start of a batch that does
    /// not fit: a torn write.
    Partial { position: u64 },
    /// The bytes at `position` cannot start a batch.
    Corrupt { position: u64, error: BatchError },
}

pub(crate) struct BatchReader<'a> {
    file: &'a dyn SegmentFile,
    position: u64,
    end: u64,
    chunk: Bytes,
    chunk_start: u64,
    chunk_len: usize,
}

impl<'a> BatchReader<'a> {
    /// Reads batches from `start` up to `end` (at most the file's current
    /// length: an older epoch's file is read only up to where its epoch
    /// ended), refilling `chunk_len` bytes at a time (at least one batch
    /// header).
    pub fn new(file: &'a dyn SegmentFile, start: u64, end: u64, chunk_len: usize) -> Self {
        BatchReader {
            file,
            position: start,
            end: end.min(file.len()),
            chunk: Bytes::new(),
            chunk_start: start,
            chunk_len: chunk_len.max(BATCH_HEADER_LEN),
        }
    }

    /// The bytes at the current position that are already in the chunk.
    fn buffered(&self) -> &[u8] {
        let skip =
            usize::try_from(self.position.saturating_sub(self.chunk_start)).unwrap_or(usize::MAX);
        self.chunk.get(skip..).unwrap_or(&[])
    }

    fn refill(&mut self, at_least: usize) -> io::Result<()> {
        let remaining = self.end.saturating_sub(self.position);
        let want = at_least.max(self.chunk_len);
        let want = usize::try_from(remaining).map_or(want, |r| r.min(want));
        self.chunk = self.file.read_at(self.position, want)?;
        self.chunk_start = self.position;
        Ok(())
    }

    pub fn next_step(&mut self) -> io::Result<Step> {
        if self.position >= self.end {
            return Ok(Step::End);
        }
        // How many bytes the last refill asked for: a second refill is
        // only worth it when the batch turned out bigger than that (the
        // first refill may only have been for the header).
        let mut refilled_for = 0usize;
        loop {
            let position = self.position;
            match frame_batch(self.buffered()) {
                Frame::Complete(size) => {
                    let start = usize::try_from(position - self.chunk_start)
                        .map_err(|_| super::invalid_data("chunk offset overflow"))?;
                    let bytes = self.chunk.slice(start..start + size);
                    let batch = RecordBatch::new(bytes)
                        .map_err(|e| super::invalid_data(format!("framed batch rejected: {e}")))?;
                    self.position += size as u64;
                    return Ok(Step::Batch { position, batch });
                }
                Frame::Corrupt(error) => return Ok(Step::Corrupt { position, error }),
                Frame::Incomplete { needed } => {
                    let needed = needed.unwrap_or(BATCH_HEADER_LEN);
                    // A length field pointing past the end is a torn (or
                    // garbled) tail; never read or allocate for it.
                    if refilled_for >= needed || position.saturating_add(needed as u64) > self.end {
                        return Ok(Step::Partial { position });
                    }
                    self.refill(needed)?;
                    refilled_for = needed;
                }
            }
        }
    }
}
