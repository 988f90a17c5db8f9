//! The zero-copy view over one v2 record batch and its validation.

use bytes::{BufMut, Bytes, BytesMut};
use std::fmt;

use super::records::Records;

/// The only record format kaas accepts and stores.
pub const MAGIC_V2: i8 = 2;
/// Bytes before `batchLength` counts: baseOffset (8) + batchLength (4).
pub const LOG_OVERHEAD: usize = 12;
/// Size of the fixed batch header; records follow it.
pub const BATCH_HEADER_LEN: usize = 61;
/// `producerId` of a batch from a non-idempotent producer.
pub const NO_PRODUCER_ID: i64 = -1;
/// `producerEpoch` of a batch from a non-idempotent producer.
pub const NO_PRODUCER_EPOCH: i16 = -1;
/// `baseSequence` of a batch from a non-idempotent producer (and of markers).
pub const NO_SEQUENCE: i32 = -1;
/// A timestamp that was not set.
pub const NO_TIMESTAMP: i64 = -1;

// Field positions, see the layout table in the module doc.
const BASE_OFFSET: usize = 0;
const BATCH_LENGTH: usize = 8;
const PARTITION_LEADER_EPOCH: usize = 12;
const MAGIC: usize = 16;
const CRC: usize = 17;
pub(crate) const ATTRIBUTES: usize = 21;
const LAST_OFFSET_DELTA: usize = 23;
const BASE_TIMESTAMP: usize = 27;
const MAX_TIMESTAMP: usize = 35;
const PRODUCER_ID: usize = 43;
const PRODUCER_EPOCH: usize = 51;
const BASE_SEQUENCE: usize = 53;
const RECORD_COUNT: usize = 57;
/// The CRC covers everything from `attributes` to the end of the batch, so
/// the fields before it (offset, length, leader epoch, magic) can be
/// rewritten by the broker for free.
const CRC_START: usize = ATTRIBUTES;

pub(crate) const COMPRESSION_MASK: i16 = 0x07;
const TIMESTAMP_TYPE_BIT: i16 = 0x08;
const TRANSACTIONAL_BIT: i16 = 0x10;
const CONTROL_BIT: i16 = 0x20;
/// Attribute bit 6 (KIP-534): `baseTimestamp` holds the batch's delete
/// horizon, the time after which the log cleaner may remove its tombstones
/// and transaction markers; record timestamps stay `baseTimestamp + delta`.
pub(crate) const DELETE_HORIZON_BIT: i16 = 0x40;

// Kafka error codes the batch errors map to.
const CORRUPT_MESSAGE: i16 = 2;
const UNSUPPORTED_FOR_MESSAGE_FORMAT: i16 = 43;
const UNSUPPORTED_COMPRESSION_TYPE: i16 = 76;
const INVALID_RECORD: i16 = 87;

/// Compression codec from attribute bits 0-2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
    /// Ids 5-7 are not assigned by Kafka; `validate` rejects them.
    Unknown(u8),
}

impl Compression {
    /// Every codec Kafka defines, `None` aside.
    pub const CODECS: [Compression; 4] = [
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    fn from_attributes(attributes: i16) -> Self {
        match attributes & COMPRESSION_MASK {
            0 => Compression::None,
            1 => Compression::Gzip,
            2 => Compression::Snappy,
            3 => Compression::Lz4,
            4 => Compression::Zstd,
            // Masked to three bits, so the cast is lossless.
            other => Compression::Unknown(other as u8),
        }
    }

    /// The attribute bits for this codec.
    pub fn id(self) -> u8 {
        match self {
            Compression::None => 0,
            Compression::Gzip => 1,
            Compression::Snappy => 2,
            Compression::Lz4 => 3,
            Compression::Zstd => 4,
            Compression::Unknown(id) => id,
        }
    }
}

/// Attribute bit 3: who set the timestamps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampType {
    /// The producer's timestamps (`CreateTime`).
    CreateTime,
    /// The broker overwrote `maxTimestamp` on append (`LogAppendTime`); the
    /// per-record timestamps must then be ignored.
    LogAppendTime,
}

/// Why bytes are not a usable v2 batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchError {
    /// Fewer bytes than the fixed header (or than `baseOffset`+`batchLength`).
    TooShort { needed: usize, available: usize },
    /// `batchLength` smaller than the fixed header it must contain.
    BatchLengthTooSmall(i32),
    /// The buffer ends before `batchLength` says the batch does.
    Truncated { needed: usize, available: usize },
    /// The buffer given to [`RecordBatch::new`] is longer than the batch.
    TrailingBytes { batch_size: usize, available: usize },
    /// Not magic 2 (v0/v1 message sets are not supported).
    UnsupportedMagic(i8),
    /// The stored CRC-32C does not match the bytes.
    CrcMismatch { stored: u32, computed: u32 },
    /// `recordCount` is negative.
    NegativeRecordCount(i32),
    /// `lastOffsetDelta` is negative: the batch would end before it starts.
    NegativeLastOffsetDelta(i32),
    /// Compression bits name no codec.
    UnknownCompression(u8),
    /// A client batch whose `recordCount` is not `lastOffsetDelta + 1` (or zero).
    InconsistentRecordCount {
        record_count: i32,
        last_offset_delta: i32,
    },
    /// A client may not send control batches; only the coordinator writes them.
    ControlBatchFromClient,
    /// An idempotent batch (producerId >= 0) without a base sequence.
    MissingSequence,
}

impl BatchError {
    /// The Kafka error code a Produce response should carry for this error.
    pub fn error_code(&self) -> i16 {
        match self {
            BatchError::UnsupportedMagic(_) => UNSUPPORTED_FOR_MESSAGE_FORMAT,
            BatchError::UnknownCompression(_) => UNSUPPORTED_COMPRESSION_TYPE,
            BatchError::InconsistentRecordCount { .. }
            | BatchError::ControlBatchFromClient
            | BatchError::MissingSequence => INVALID_RECORD,
            BatchError::TooShort { .. }
            | BatchError::BatchLengthTooSmall(_)
            | BatchError::Truncated { .. }
            | BatchError::TrailingBytes { .. }
            | BatchError::CrcMismatch { .. }
            | BatchError::NegativeRecordCount(_)
            | BatchError::NegativeLastOffsetDelta(_) => CORRUPT_MESSAGE,
        }
    }
}

impl fmt::Display for BatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BatchError::TooShort { needed, available } => {
                write!(
                    f,
                    "batch header needs {needed} bytes, {available} available"
                )
            }
            BatchError::BatchLengthTooSmall(len) => write!(f, "batchLength {len} is too small"),
            BatchError::Truncated { needed, available } => {
                write!(f, "batch needs {needed} bytes, {available} available")
            }
            BatchError::TrailingBytes {
                batch_size,
                available,
            } => write!(
                f,
                "batch of {batch_size} bytes followed by {available} bytes"
            ),
            BatchError::UnsupportedMagic(m) => write!(f, "unsupported magic {m}"),
            BatchError::CrcMismatch { stored, computed } => {
                write!(
                    f,
                    "crc mismatch: stored {stored:#010x}, computed {computed:#010x}"
                )
            }
            BatchError::NegativeRecordCount(n) => write!(f, "negative record count {n}"),
            BatchError::NegativeLastOffsetDelta(d) => write!(f, "negative lastOffsetDelta {d}"),
            BatchError::UnknownCompression(id) => write!(f, "unknown compression id {id}"),
            BatchError::InconsistentRecordCount {
                record_count,
                last_offset_delta,
            } => write!(
                f,
                "record count {record_count} does not match lastOffsetDelta {last_offset_delta}"
            ),
            BatchError::ControlBatchFromClient => write!(f, "control batch sent by a client"),
            BatchError::MissingSequence => write!(f, "idempotent batch without base sequence"),
        }
    }
}

impl std::error::Error for BatchError {}

/// What the start of a buffer holds, judged from its first bytes only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A whole batch of this many bytes starts the buffer.
    Complete(usize),
    /// The buffer ends inside the batch. `needed` is the batch size once
    /// `batchLength` could be read, `None` before that.
    Incomplete { needed: Option<usize> },
    /// The header cannot start a v2 batch (bad length or magic).
    Corrupt(BatchError),
}

/// Frames the batch at the start of `buf` without copying or checking the
/// CRC: the size comes from `batchLength`, and the magic byte is checked as
/// soon as it is available so garbage is recognised early.
pub fn frame_batch(buf: &[u8]) -> Frame {
    let Some(batch_length) = read_i32(buf, BATCH_LENGTH) else {
        return Frame::Incomplete { needed: None };
    };
    let min_length = (BATCH_HEADER_LEN - LOG_OVERHEAD) as i32;
    if batch_length < min_length {
        return Frame::Corrupt(BatchError::BatchLengthTooSmall(batch_length));
    }
    if let Some(magic) = read_i8(buf, MAGIC) {
        if magic != MAGIC_V2 {
            return Frame::Corrupt(BatchError::UnsupportedMagic(magic));
        }
    }
    // batch_length >= 49 here, so the conversion cannot fail; usize is at
    // least 32 bits on every target we build for.
    let size = LOG_OVERHEAD + usize::try_from(batch_length).unwrap_or(0);
    if buf.len() < size {
        Frame::Incomplete { needed: Some(size) }
    } else {
        Frame::Complete(size)
    }
}

/// A view over exactly one v2 record batch.
///
/// Construction checks only the framing (header present, `batchLength`
/// consistent with the buffer, magic 2), so every accessor is infallible.
/// Call [`validate`](Self::validate) before trusting the contents.
#[derive(Clone, PartialEq, Eq)]
pub struct RecordBatch {
    buf: Bytes,
}

impl fmt::Debug for RecordBatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecordBatch")
            .field("base_offset", &self.base_offset())
            .field("last_offset_delta", &self.last_offset_delta())
            .field("size", &self.size())
            .field("producer_id", &self.producer_id())
            .field("producer_epoch", &self.producer_epoch())
            .field("base_sequence", &self.base_sequence())
            .field("attributes", &self.attributes())
            .finish()
    }
}

impl RecordBatch {
    /// Views `buf`, which must hold exactly one batch.
    pub fn new(buf: Bytes) -> Result<Self, BatchError> {
        let available = buf.len();
        match frame_batch(&buf) {
            Frame::Complete(size) if size == available => Self::from_framed(buf),
            Frame::Complete(batch_size) => Err(BatchError::TrailingBytes {
                batch_size,
                available,
            }),
            Frame::Incomplete {
                needed: Some(needed),
            } => Err(BatchError::Truncated { needed, available }),
            Frame::Incomplete { needed: None } => Err(BatchError::TooShort {
                needed: BATCH_HEADER_LEN,
                available,
            }),
            Frame::Corrupt(e) => Err(e),
        }
    }

    /// Wraps bytes `frame_batch` reported as `Complete` with exactly this
    /// length; rechecks the two facts the accessors rely on.
    pub(crate) fn from_framed(buf: Bytes) -> Result<Self, BatchError> {
        if buf.len() < BATCH_HEADER_LEN {
            return Err(BatchError::TooShort {
                needed: BATCH_HEADER_LEN,
                available: buf.len(),
            });
        }
        Ok(RecordBatch { buf })
    }

    /// Wraps bytes this module's builders produced (framed by construction).
    /// Accessors stay panic-free even on short bytes, so this cannot make
    /// anything unsafe, only wrong if misused.
    pub(crate) fn from_built(buf: Bytes) -> Self {
        debug_assert!(matches!(frame_batch(&buf), Frame::Complete(n) if n == buf.len()));
        RecordBatch { buf }
    }

    /// The whole batch, as stored and sent on the wire.
    pub fn as_bytes(&self) -> &Bytes {
        &self.buf
    }

    /// Consumes the view, returning the batch bytes.
    pub fn into_bytes(self) -> Bytes {
        self.buf
    }

    // ---- stored fields ----

    pub fn base_offset(&self) -> i64 {
        read_i64(&self.buf, BASE_OFFSET).unwrap_or(0)
    }
    pub fn batch_length(&self) -> i32 {
        read_i32(&self.buf, BATCH_LENGTH).unwrap_or(0)
    }
    pub fn partition_leader_epoch(&self) -> i32 {
        read_i32(&self.buf, PARTITION_LEADER_EPOCH).unwrap_or(0)
    }
    pub fn magic(&self) -> i8 {
        read_i8(&self.buf, MAGIC).unwrap_or(0)
    }
    pub fn crc(&self) -> u32 {
        read_u32(&self.buf, CRC).unwrap_or(0)
    }
    pub fn attributes(&self) -> i16 {
        read_i16(&self.buf, ATTRIBUTES).unwrap_or(0)
    }
    pub fn last_offset_delta(&self) -> i32 {
        read_i32(&self.buf, LAST_OFFSET_DELTA).unwrap_or(0)
    }
    pub fn base_timestamp(&self) -> i64 {
        read_i64(&self.buf, BASE_TIMESTAMP).unwrap_or(0)
    }
    pub fn max_timestamp(&self) -> i64 {
        read_i64(&self.buf, MAX_TIMESTAMP).unwrap_or(0)
    }
    pub fn producer_id(&self) -> i64 {
        read_i64(&self.buf, PRODUCER_ID).unwrap_or(0)
    }
    pub fn producer_epoch(&self) -> i16 {
        read_i16(&self.buf, PRODUCER_EPOCH).unwrap_or(0)
    }
    pub fn base_sequence(&self) -> i32 {
        read_i32(&self.buf, BASE_SEQUENCE).unwrap_or(0)
    }
    pub fn record_count(&self) -> i32 {
        read_i32(&self.buf, RECORD_COUNT).unwrap_or(0)
    }

    // ---- derived ----

    /// Offset of the last record; saturates rather than overflowing on a
    /// hostile header (validate rejects negative deltas).
    pub fn last_offset(&self) -> i64 {
        self.base_offset()
            .saturating_add(i64::from(self.last_offset_delta()))
    }

    /// The offset right after this batch.
    pub fn next_offset(&self) -> i64 {
        self.last_offset().saturating_add(1)
    }

    /// Sequence number of the last record, wrapping at `i32::MAX` as Kafka
    /// producers do. `NO_SEQUENCE` stays `NO_SEQUENCE`.
    pub fn last_sequence(&self) -> i32 {
        let base = self.base_sequence();
        if base == NO_SEQUENCE {
            return NO_SEQUENCE;
        }
        let delta = self.last_offset_delta();
        let sum = i64::from(base) + i64::from(delta);
        if sum > i64::from(i32::MAX) {
            // Kafka: sequences wrap to 0 after i32::MAX.
            (sum - i64::from(i32::MAX) - 1) as i32
        } else {
            sum as i32
        }
    }

    /// Total size in bytes (`batchLength + 12`), equal to `as_bytes().len()`.
    pub fn size(&self) -> usize {
        self.buf.len()
    }

    pub fn compression(&self) -> Compression {
        Compression::from_attributes(self.attributes())
    }
    pub fn timestamp_type(&self) -> TimestampType {
        if self.attributes() & TIMESTAMP_TYPE_BIT != 0 {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        }
    }
    pub fn is_transactional(&self) -> bool {
        self.attributes() & TRANSACTIONAL_BIT != 0
    }
    pub fn is_control(&self) -> bool {
        self.attributes() & CONTROL_BIT != 0
    }
    /// The delete horizon a log cleaner stamped on this batch (KIP-534):
    /// its tombstones and markers may go once the clock reaches it. `None`
    /// until a cleaning pass has rewritten the batch with one.
    pub fn delete_horizon_ms(&self) -> Option<i64> {
        (self.attributes() & DELETE_HORIZON_BIT != 0).then(|| self.base_timestamp())
    }
    /// True if the batch carries a producer id (idempotent or transactional).
    pub fn has_producer_id(&self) -> bool {
        self.producer_id() >= 0
    }

    /// CRC-32C of the covered bytes, as it should be stored.
    pub fn compute_crc(&self) -> u32 {
        self.buf
            .get(CRC_START..)
            .map(crc32c::crc32c)
            .unwrap_or_default()
    }

    /// Structural validation: everything a stored or received batch must
    /// satisfy for the broker to handle it safely.
    pub fn validate(&self) -> Result<(), BatchError> {
        let magic = self.magic();
        if magic != MAGIC_V2 {
            return Err(BatchError::UnsupportedMagic(magic));
        }
        let expected = LOG_OVERHEAD as i64 + i64::from(self.batch_length());
        if expected != self.buf.len() as i64 {
            return Err(BatchError::TrailingBytes {
                batch_size: usize::try_from(expected).unwrap_or(0),
                available: self.buf.len(),
            });
        }
        let (stored, computed) = (self.crc(), self.compute_crc());
        if stored != computed {
            return Err(BatchError::CrcMismatch { stored, computed });
        }
        if let Compression::Unknown(id) = self.compression() {
            return Err(BatchError::UnknownCompression(id));
        }
        let count = self.record_count();
        if count < 0 {
            return Err(BatchError::NegativeRecordCount(count));
        }
        let delta = self.last_offset_delta();
        if delta < 0 {
            return Err(BatchError::NegativeLastOffsetDelta(delta));
        }
        Ok(())
    }

    /// [`validate`](Self::validate) plus the rules Kafka's LogValidator
    /// applies to batches arriving in a Produce request.
    pub fn validate_from_client(&self) -> Result<(), BatchError> {
        self.validate()?;
        let record_count = self.record_count();
        let last_offset_delta = self.last_offset_delta();
        // Offsets inside a client batch are 0..count-1, so the count and the
        // delta must agree; otherwise offset assignment would be a lie.
        if record_count == 0 || i64::from(record_count) != i64::from(last_offset_delta) + 1 {
            return Err(BatchError::InconsistentRecordCount {
                record_count,
                last_offset_delta,
            });
        }
        if self.is_control() {
            return Err(BatchError::ControlBatchFromClient);
        }
        if self.has_producer_id() && self.base_sequence() < 0 {
            return Err(BatchError::MissingSequence);
        }
        Ok(())
    }

    /// The records, decoded lazily. Only meaningful for uncompressed
    /// batches; for compressed ones the iterator yields an error.
    pub fn records(&self) -> Records {
        let body = self.buf.slice(BATCH_HEADER_LEN.min(self.buf.len())..);
        Records::new(
            body,
            self.record_count(),
            self.compression(),
            self.base_offset(),
            self.base_timestamp(),
        )
    }

    /// Appends the batch to `out` with `baseOffset` and
    /// `partitionLeaderEpoch` rewritten. Neither field is covered by the
    /// CRC, so the batch stays valid without recomputing it.
    pub fn write_assigned(&self, out: &mut BytesMut, base_offset: i64, leader_epoch: i32) {
        out.reserve(self.buf.len());
        out.put_i64(base_offset);
        out.put_slice(
            self.buf
                .get(BATCH_LENGTH..PARTITION_LEADER_EPOCH)
                .unwrap_or(&[]),
        );
        out.put_i32(leader_epoch);
        out.put_slice(self.buf.get(MAGIC..).unwrap_or(&[]));
    }

    /// A copy of the batch with `baseOffset` and `partitionLeaderEpoch`
    /// rewritten (one copy; see [`write_assigned`](Self::write_assigned)).
    pub fn with_assigned(&self, base_offset: i64, leader_epoch: i32) -> RecordBatch {
        let mut out = BytesMut::with_capacity(self.buf.len());
        self.write_assigned(&mut out, base_offset, leader_epoch);
        RecordBatch { buf: out.freeze() }
    }
}

/// Rewrites `baseOffset` and `partitionLeaderEpoch` of a batch in place in
/// an owned buffer. Returns false (and leaves `buf` alone) if `buf` is too
/// short to hold the header.
pub fn assign_in_place(buf: &mut [u8], base_offset: i64, leader_epoch: i32) -> bool {
    let Some(offset_field) = buf.get_mut(BASE_OFFSET..BASE_OFFSET + 8) else {
        return false;
    };
    offset_field.copy_from_slice(&base_offset.to_be_bytes());
    let Some(epoch_field) = buf.get_mut(PARTITION_LEADER_EPOCH..PARTITION_LEADER_EPOCH + 4) else {
        return false;
    };
    epoch_field.copy_from_slice(&leader_epoch.to_be_bytes());
    true
}

/// Stores the CRC of `buf[21..]` at its place; used by builders.
pub(crate) fn seal_crc(buf: &mut [u8]) {
    let crc = buf.get(CRC_START..).map(crc32c::crc32c).unwrap_or_default();
    if let Some(field) = buf.get_mut(CRC..CRC + 4) {
        field.copy_from_slice(&crc.to_be_bytes());
    }
}

/// Writes a batch header with placeholder length and CRC; the caller
/// appends the records and then calls [`finish_header`].
#[allow(clippy::too_many_arguments)]
pub(crate) fn put_header(
    out: &mut BytesMut,
    base_offset: i64,
    leader_epoch: i32,
    attributes: i16,
    last_offset_delta: i32,
    base_timestamp: i64,
    max_timestamp: i64,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    record_count: i32,
) {
    out.put_i64(base_offset);
    out.put_i32(0); // batchLength, patched by finish_header
    out.put_i32(leader_epoch);
    out.put_i8(MAGIC_V2);
    out.put_u32(0); // crc, patched by finish_header
    out.put_i16(attributes);
    out.put_i32(last_offset_delta);
    out.put_i64(base_timestamp);
    out.put_i64(max_timestamp);
    out.put_i64(producer_id);
    out.put_i16(producer_epoch);
    out.put_i32(base_sequence);
    out.put_i32(record_count);
}

/// Patches `batchLength` and the CRC once the records are written.
pub(crate) fn finish_header(buf: &mut [u8]) {
    let batch_length = i32::try_from(buf.len().saturating_sub(LOG_OVERHEAD)).unwrap_or(i32::MAX);
    if let Some(field) = buf.get_mut(BATCH_LENGTH..BATCH_LENGTH + 4) {
        field.copy_from_slice(&batch_length.to_be_bytes());
    }
    seal_crc(buf);
}

/// Attribute bits for a batch.
pub(crate) fn attributes(
    compression: Compression,
    timestamp_type: TimestampType,
    transactional: bool,
    control: bool,
) -> i16 {
    let mut a = i16::from(compression.id()) & COMPRESSION_MASK;
    if timestamp_type == TimestampType::LogAppendTime {
        a |= TIMESTAMP_TYPE_BIT;
    }
    if transactional {
        a |= TRANSACTIONAL_BIT;
    }
    if control {
        a |= CONTROL_BIT;
    }
    a
}

fn read_array<const N: usize>(buf: &[u8], pos: usize) -> Option<[u8; N]> {
    buf.get(pos..pos.checked_add(N)?)?.try_into().ok()
}
fn read_i8(buf: &[u8], pos: usize) -> Option<i8> {
    read_array::<1>(buf, pos).map(i8::from_be_bytes)
}
fn read_i16(buf: &[u8], pos: usize) -> Option<i16> {
    read_array::<2>(buf, pos).map(i16::from_be_bytes)
}
fn read_i32(buf: &[u8], pos: usize) -> Option<i32> {
    read_array::<4>(buf, pos).map(i32::from_be_bytes)
}
fn read_u32(buf: &[u8], pos: usize) -> Option<u32> {
    read_array::<4>(buf, pos).map(u32::from_be_bytes)
}
fn read_i64(buf: &[u8], pos: usize) -> Option<i64> {
    read_array::<8>(buf, pos).map(i64::from_be_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::BatchBuilder;

    fn sample() -> RecordBatch {
        BatchBuilder::idempotent(42, 3, 7)
            .record(1_000, Some(b"k1"), Some(b"v1"))
            .record(1_005, None, Some(b"v2"))
            .record(1_002, Some(b"k3"), None)
            .build()
    }

    #[test]
    fn built_batch_reads_back_every_header_field() {
        let b = sample();
        assert_eq!(b.validate(), Ok(()));
        assert_eq!(b.validate_from_client(), Ok(()));
        assert_eq!(b.base_offset(), 0);
        assert_eq!(b.batch_length() as usize + LOG_OVERHEAD, b.size());
        assert_eq!(b.partition_leader_epoch(), -1);
        assert_eq!(b.magic(), MAGIC_V2);
        assert_eq!(b.compression(), Compression::None);
        assert_eq!(b.timestamp_type(), TimestampType::CreateTime);
        assert!(!b.is_transactional());
        assert!(!b.is_control());
        assert_eq!(b.last_offset_delta(), 2);
        assert_eq!(b.last_offset(), 2);
        assert_eq!(b.next_offset(), 3);
        assert_eq!(b.base_timestamp(), 1_000);
        assert_eq!(b.max_timestamp(), 1_005);
        assert_eq!(b.producer_id(), 42);
        assert_eq!(b.producer_epoch(), 3);
        assert_eq!(b.base_sequence(), 7);
        assert_eq!(b.last_sequence(), 9);
        assert_eq!(b.record_count(), 3);
    }

    #[test]
    fn any_flipped_bit_in_crc_covered_bytes_is_detected() {
        let b = sample();
        for pos in CRC_START..b.size() {
            for bit in 0..8 {
                let mut bytes = b.as_bytes().to_vec();
                bytes[pos] ^= 1 << bit;
                let v = RecordBatch::new(Bytes::from(bytes)).unwrap();
                assert!(
                    matches!(v.validate(), Err(BatchError::CrcMismatch { .. })),
                    "flip at byte {pos} bit {bit} not detected"
                );
            }
        }
    }

    #[test]
    fn a_flipped_bit_in_the_stored_crc_is_detected() {
        let mut bytes = sample().as_bytes().to_vec();
        bytes[CRC] ^= 0x80;
        let v = RecordBatch::new(Bytes::from(bytes)).unwrap();
        assert!(matches!(v.validate(), Err(BatchError::CrcMismatch { .. })));
    }

    #[test]
    fn truncated_buffers_are_rejected_at_every_length() {
        let b = sample();
        for len in 0..b.size() {
            let cut = b.as_bytes().slice(..len);
            let err = RecordBatch::new(cut).unwrap_err();
            assert!(
                matches!(
                    err,
                    BatchError::TooShort { .. } | BatchError::Truncated { .. }
                ),
                "len {len}: {err:?}"
            );
            assert_eq!(err.error_code(), CORRUPT_MESSAGE);
        }
    }

    #[test]
    fn trailing_bytes_are_rejected() {
        let mut bytes = sample().as_bytes().to_vec();
        bytes.push(0);
        assert!(matches!(
            RecordBatch::new(Bytes::from(bytes)),
            Err(BatchError::TrailingBytes { .. })
        ));
    }

    #[test]
    fn wrong_magic_is_rejected_with_its_own_error_code() {
        let mut bytes = sample().as_bytes().to_vec();
        bytes[MAGIC] = 1;
        let err = RecordBatch::new(Bytes::from(bytes)).unwrap_err();
        assert_eq!(err, BatchError::UnsupportedMagic(1));
        assert_eq!(err.error_code(), UNSUPPORTED_FOR_MESSAGE_FORMAT);
    }

    #[test]
    fn tiny_batch_length_is_corrupt_not_partial() {
        let mut bytes = sample().as_bytes().to_vec();
        bytes[BATCH_LENGTH..BATCH_LENGTH + 4].copy_from_slice(&10i32.to_be_bytes());
        assert_eq!(
            frame_batch(&bytes),
            Frame::Corrupt(BatchError::BatchLengthTooSmall(10))
        );
    }

    #[test]
    fn negative_count_and_delta_are_rejected_even_with_a_valid_crc() {
        let mut bytes = sample().as_bytes().to_vec();
        bytes[RECORD_COUNT..RECORD_COUNT + 4].copy_from_slice(&(-1i32).to_be_bytes());
        seal_crc(&mut bytes);
        let v = RecordBatch::new(Bytes::from(bytes)).unwrap();
        assert_eq!(v.validate(), Err(BatchError::NegativeRecordCount(-1)));

        let mut bytes = sample().as_bytes().to_vec();
        bytes[LAST_OFFSET_DELTA..LAST_OFFSET_DELTA + 4].copy_from_slice(&(-5i32).to_be_bytes());
        seal_crc(&mut bytes);
        let v = RecordBatch::new(Bytes::from(bytes)).unwrap();
        assert_eq!(v.validate(), Err(BatchError::NegativeLastOffsetDelta(-5)));
    }

    #[test]
    fn client_batches_must_have_count_matching_offset_delta() {
        let mut bytes = sample().as_bytes().to_vec();
        bytes[RECORD_COUNT..RECORD_COUNT + 4].copy_from_slice(&5i32.to_be_bytes());
        seal_crc(&mut bytes);
        let v = RecordBatch::new(Bytes::from(bytes)).unwrap();
        assert_eq!(v.validate(), Ok(()));
        let err = v.validate_from_client().unwrap_err();
        assert!(matches!(err, BatchError::InconsistentRecordCount { .. }));
        assert_eq!(err.error_code(), INVALID_RECORD);
    }

    #[test]
    fn client_may_not_send_control_batches() {
        let b = crate::record::build_control_batch(
            5,
            1,
            0,
            crate::record::EndTxnMarker {
                control_type: crate::record::ControlType::Commit,
                coordinator_epoch: 0,
            },
        );
        assert_eq!(b.validate(), Ok(()));
        assert_eq!(
            b.validate_from_client(),
            Err(BatchError::ControlBatchFromClient)
        );
    }

    #[test]
    fn unknown_compression_is_rejected() {
        let mut bytes = sample().as_bytes().to_vec();
        bytes[ATTRIBUTES + 1] |= 0x07;
        seal_crc(&mut bytes);
        let v = RecordBatch::new(Bytes::from(bytes)).unwrap();
        assert_eq!(v.validate(), Err(BatchError::UnknownCompression(7)));
    }

    #[test]
    fn assigning_offsets_keeps_the_crc_valid() {
        let b = sample();
        let assigned = b.with_assigned(1_000_000, 17);
        assert_eq!(assigned.validate(), Ok(()));
        assert_eq!(assigned.base_offset(), 1_000_000);
        assert_eq!(assigned.last_offset(), 1_000_002);
        assert_eq!(assigned.partition_leader_epoch(), 17);
        assert_eq!(assigned.crc(), b.crc());
        assert_eq!(assigned.size(), b.size());
        assert_eq!(&assigned.as_bytes()[MAGIC..], &b.as_bytes()[MAGIC..]);

        let mut owned = b.as_bytes().to_vec();
        assert!(assign_in_place(&mut owned, 9, 2));
        let v = RecordBatch::new(Bytes::from(owned)).unwrap();
        assert_eq!(v.validate(), Ok(()));
        assert_eq!((v.base_offset(), v.partition_leader_epoch()), (9, 2));
        assert!(!assign_in_place(&mut [0u8; 5], 1, 1));
    }

    #[test]
    fn last_sequence_wraps_like_kafka_producers() {
        let b = BatchBuilder::idempotent(1, 0, i32::MAX)
            .record(0, None, Some(b"a"))
            .record(0, None, Some(b"b"))
            .build();
        assert_eq!(b.last_sequence(), 0);
        let b = BatchBuilder::new().record(0, None, Some(b"a")).build();
        assert_eq!(b.last_sequence(), NO_SEQUENCE);
    }
}
