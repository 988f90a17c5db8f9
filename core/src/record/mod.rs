//! Kafka v2 record batches (magic 2), zero-copy.
//!
//! A produce request carries its records as opaque bytes; the broker only
//! needs the batch *header* to validate, deduplicate, assign offsets and
//! index. So the main type, [`RecordBatch`], is a view over a `Bytes` slice
//! that reads header fields in place. Records inside a batch are decoded
//! only where a rule needs them (control markers, exact timestamp lookups).
//!
//! Byte layout of a batch (all integers big-endian):
//!
//! ```text
//! 0  baseOffset i64          | not covered by the CRC: the broker rewrites
//! 8  batchLength i32         | these on append without recomputing it
//! 12 partitionLeaderEpoch i32|
//! 16 magic i8
//! 17 crc u32 (CRC-32C of bytes 21..end)
//! 21 attributes i16
//! 23 lastOffsetDelta i32
//! 27 baseTimestamp i64
//! 35 maxTimestamp i64
//! 43 producerId i64
//! 51 producerEpoch i16
//! 53 baseSequence i32
//! 57 recordCount i32
//! 61 records...
//! ```

mod batch;
mod builder;
mod compressed;
mod control;
mod filter;
mod records;
mod split;
mod varint;

pub use batch::{
    assign_in_place, frame_batch, BatchError, Compression, Frame, RecordBatch, TimestampType,
    BATCH_HEADER_LEN, LOG_OVERHEAD, MAGIC_V2, NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE,
    NO_TIMESTAMP,
};
pub use builder::{BatchBuilder, NewRecord};
pub use control::{
    build_control_batch, parse_end_txn_marker, ControlType, EndTxnMarker, END_TXN_MARKER_VERSION,
};
pub(crate) use filter::record_spans;
#[cfg(test)]
pub(crate) use filter::reseal;
pub use filter::FilterError;
pub use records::{Record, RecordError, RecordHeader, Records, Stamp, Stamps};
pub use split::{split_batches, Batches, Tail};

#[cfg(test)]
mod proptests;
