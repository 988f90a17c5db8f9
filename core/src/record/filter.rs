//! Rewriting a batch with some of its records removed: what the log cleaner
//! writes back for a compacted topic.
//!
//! A rewritten batch must look, to everything that reads the log later, like
//! the batch the producer sent with records taken out of it, so:
//!
//! - `baseOffset` and `lastOffsetDelta` are the original ones, and each kept
//!   record keeps its offset delta. The batch still spans the producer's
//!   whole sequence range (`baseSequence + lastOffsetDelta` is its last
//!   sequence), which is what lets the producer state be rebuilt from the
//!   log and a retry be recognised after cleaning. A compacted batch thus
//!   has `recordCount <= lastOffsetDelta + 1`, with gaps in its offsets;
//!   [`RecordBatch::validate`] and [`Records`](super::Records) accept that.
//! - Producer id, epoch, base sequence, leader epoch and the attribute bits
//!   are kept; only the delete-horizon bit may be added.
//! - Record timestamps read back identical. Without a new delete horizon the
//!   base timestamp is kept and the kept records are copied byte for byte;
//!   with one, `baseTimestamp` becomes the horizon (KIP-534) and each record's
//!   timestamp delta is re-encoded against it (it may become negative: the
//!   delta is a signed varlong).
//! - `maxTimestamp` is the largest kept record timestamp for `CreateTime`
//!   batches; a `LogAppendTime` batch keeps its own (its record timestamps
//!   are not the ones consumers see).
//!
//! A compressed batch is decompressed (bounded by
//! [`MAX_DECOMPRESSED_BATCH_BYTES`]), filtered as above, and its kept
//! records compressed again with the batch's own codec; a batch left with
//! no records is written uncompressed, as Kafka writes it.

use bytes::{BufMut, BytesMut};
use std::fmt;

use super::batch::{
    attributes, finish_header, put_header, Compression, RecordBatch, TimestampType,
    BATCH_HEADER_LEN, DELETE_HORIZON_BIT, NO_TIMESTAMP,
};
use super::varint::{get_varint, get_varlong, put_varint, put_varlong};
use crate::compression::{CompressionError, MAX_DECOMPRESSED_BATCH_BYTES};

/// Why a batch could not be rewritten.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FilterError {
    /// The batch is compressed; its records cannot be picked apart as
    /// they are stored (see [`RecordBatch::decompressed`]).
    Compressed(Compression),
    /// A compressed batch could not be decompressed (or compressed again).
    Codec(CompressionError),
    /// The record at this index is malformed (or the declared count does not
    /// match the records present, reported at the first missing or extra one).
    Malformed {
        /// Index of the record, in record order.
        index: usize,
    },
    /// The keep flags do not match the batch's records one for one.
    FlagCountMismatch {
        /// Records in the batch.
        records: usize,
        /// Flags given.
        flags: usize,
    },
    /// A kept record's timestamp cannot be expressed against the new delete
    /// horizon (the difference overflows an i64). Keeping the batch as it is
    /// is always a safe answer.
    TimestampOutOfRange {
        /// Index of the record, in record order.
        index: usize,
    },
}

impl fmt::Display for FilterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FilterError::Compressed(c) => write!(f, "cannot filter a compressed batch ({c:?})"),
            FilterError::Codec(e) => write!(f, "{e}"),
            FilterError::Malformed { index } => write!(f, "record {index} is malformed"),
            FilterError::FlagCountMismatch { records, flags } => {
                write!(f, "{flags} keep flags for {records} records")
            }
            FilterError::TimestampOutOfRange { index } => write!(
                f,
                "record {index}'s timestamp does not fit against the delete horizon"
            ),
        }
    }
}

impl std::error::Error for FilterError {}

/// Where one record lies in the batch body, and the parts of its head that a
/// re-encoding needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RecordSpan {
    /// First byte of the record (its length varint), relative to the body.
    pub start: usize,
    /// One past the last byte of the record.
    pub end: usize,
    /// The record's attributes byte (right after the length prefix).
    pub attributes_at: usize,
    /// The record's `timestampDelta`.
    pub timestamp_delta: i64,
    /// First byte after the `timestampDelta` varlong (the `offsetDelta`).
    pub after_timestamp: usize,
}

impl RecordSpan {
    /// Bytes the record takes in the batch, length prefix included.
    pub fn len(&self) -> usize {
        self.end - self.start
    }
}

/// The byte spans of an uncompressed batch's records, checked for framing
/// only (each record's length, attributes byte and timestamp delta, and the
/// declared record count against the records that fill the body).
pub(crate) fn record_spans(batch: &RecordBatch) -> Result<Vec<RecordSpan>, FilterError> {
    let compression = batch.compression();
    if compression != Compression::None {
        return Err(FilterError::Compressed(compression));
    }
    let body = body(batch);
    let declared = usize::try_from(batch.record_count()).unwrap_or(0);
    // Each record takes at least one byte: a hostile count cannot make us
    // reserve more than the body could hold.
    let mut spans = Vec::with_capacity(declared.min(body.len()));
    let mut pos = 0;
    while pos < body.len() {
        let index = spans.len();
        if index >= declared {
            return Err(FilterError::Malformed { index });
        }
        let span = span_at(body, pos).ok_or(FilterError::Malformed { index })?;
        pos = span.end;
        spans.push(span);
    }
    if spans.len() != declared {
        return Err(FilterError::Malformed { index: spans.len() });
    }
    Ok(spans)
}

fn body(batch: &RecordBatch) -> &[u8] {
    batch.as_bytes().get(BATCH_HEADER_LEN..).unwrap_or(&[])
}

fn span_at(body: &[u8], start: usize) -> Option<RecordSpan> {
    let mut pos = start;
    let length = usize::try_from(get_varint(body, &mut pos)?).ok()?;
    let end = pos.checked_add(length)?;
    let record = body.get(..end)?;
    let attributes_at = pos;
    record.get(attributes_at)?;
    pos += 1;
    let timestamp_delta = get_varlong(record, &mut pos)?;
    Some(RecordSpan {
        start,
        end,
        attributes_at,
        timestamp_delta,
        after_timestamp: pos,
    })
}

impl RecordBatch {
    /// This batch with only the records whose flag in `keep` is true (one
    /// flag per record, in record order), as the log cleaner writes it back:
    /// same base offset and `lastOffsetDelta`, same producer fields, leader
    /// epoch and attributes, kept records unchanged (see the module doc).
    ///
    /// `new_delete_horizon`, when given, is stamped into the batch (attribute
    /// bit 0x40, `baseTimestamp` = the horizon) and the record timestamp
    /// deltas are re-encoded against it. When `None`, a horizon the batch
    /// already has is kept.
    ///
    /// If no flag is set, the result is [`empty_header`](Self::empty_header).
    /// A compressed batch is filtered through its uncompressed twin and
    /// compressed again with its codec ([`retain_compressed`](Self::retain_compressed)).
    pub fn retain(
        &self,
        keep: &[bool],
        new_delete_horizon: Option<i64>,
    ) -> Result<RecordBatch, FilterError> {
        let codec = self.compression();
        if codec != Compression::None {
            return self.retain_compressed(codec, keep, new_delete_horizon);
        }
        let spans = record_spans(self)?;
        if spans.len() != keep.len() {
            return Err(FilterError::FlagCountMismatch {
                records: spans.len(),
                flags: keep.len(),
            });
        }
        if !keep.contains(&true) {
            return Ok(self.empty_header());
        }
        let kept: Vec<(usize, &RecordSpan)> = spans
            .iter()
            .enumerate()
            .filter(|&(i, _)| keep.get(i).copied().unwrap_or(false))
            .collect();
        let old_base = self.base_timestamp();
        let (base_timestamp, attributes) = match new_delete_horizon {
            Some(horizon) => (horizon, self.attributes() | DELETE_HORIZON_BIT),
            None => (old_base, self.attributes()),
        };
        let max_timestamp = self.retained_max_timestamp(&kept)?;
        let count = i32::try_from(kept.len()).unwrap_or(i32::MAX);

        let body_len: usize = kept.iter().map(|(_, s)| s.len()).sum();
        // A re-encoded delta may grow by a few bytes; reserve for the worst.
        let mut out = BytesMut::with_capacity(BATCH_HEADER_LEN + body_len + 16 * kept.len());
        put_header(
            &mut out,
            self.base_offset(),
            self.partition_leader_epoch(),
            attributes,
            self.last_offset_delta(),
            base_timestamp,
            max_timestamp,
            self.producer_id(),
            self.producer_epoch(),
            self.base_sequence(),
            count,
        );
        let body = body(self);
        for &(index, span) in &kept {
            if base_timestamp == old_base {
                // Same base: the record's bytes are still right, as they are.
                out.put_slice(body.get(span.start..span.end).unwrap_or(&[]));
            } else {
                let timestamp = old_base
                    .checked_add(span.timestamp_delta)
                    .and_then(|ts| ts.checked_sub(base_timestamp))
                    .ok_or(FilterError::TimestampOutOfRange { index })?;
                put_rebased(&mut out, body, span, timestamp);
            }
        }
        finish_header(&mut out);
        Ok(RecordBatch::from_built(out.freeze()))
    }

    /// [`retain`](Self::retain) for a batch compressed with `codec`: its
    /// records decompressed, filtered, and compressed again with the same
    /// codec, so the batch's attributes are unchanged (but for the delete
    /// horizon bit). Header fields and record bytes come out as for an
    /// uncompressed batch. A batch left with no records is its bare header,
    /// uncompressed.
    fn retain_compressed(
        &self,
        codec: Compression,
        keep: &[bool],
        new_delete_horizon: Option<i64>,
    ) -> Result<RecordBatch, FilterError> {
        let plain = self
            .decompressed(MAX_DECOMPRESSED_BATCH_BYTES)
            .map_err(FilterError::Codec)?;
        plain
            .retain(keep, new_delete_horizon)?
            .compressed_with(codec)
            .map_err(FilterError::Codec)
    }

    /// The header of this batch with no records, kept where every record
    /// goes but the batch must stay: it holds an active producer's last
    /// sequence and epoch, or the end offset of a cleaning round. Same base
    /// offset, `lastOffsetDelta`, producer fields, leader epoch, timestamp
    /// type, transactional and control bits and `maxTimestamp`; no
    /// compression, no delete horizon, `baseTimestamp` unset (-1): the
    /// shape Kafka gives such a batch.
    pub fn empty_header(&self) -> RecordBatch {
        let mut out = BytesMut::with_capacity(BATCH_HEADER_LEN);
        put_header(
            &mut out,
            self.base_offset(),
            self.partition_leader_epoch(),
            attributes(
                Compression::None,
                self.timestamp_type(),
                self.is_transactional(),
                self.is_control(),
            ),
            self.last_offset_delta(),
            NO_TIMESTAMP,
            self.max_timestamp(),
            self.producer_id(),
            self.producer_epoch(),
            self.base_sequence(),
            0,
        );
        finish_header(&mut out);
        RecordBatch::from_built(out.freeze())
    }

    /// `maxTimestamp` of the rewritten batch: the kept records' largest for
    /// `CreateTime`, the batch's own for `LogAppendTime` (the broker's
    /// append time is what consumers see there, whatever the records say).
    fn retained_max_timestamp(&self, kept: &[(usize, &RecordSpan)]) -> Result<i64, FilterError> {
        if self.timestamp_type() == TimestampType::LogAppendTime {
            return Ok(self.max_timestamp());
        }
        let base = self.base_timestamp();
        let mut max = NO_TIMESTAMP;
        for (i, &(index, span)) in kept.iter().enumerate() {
            let ts = base
                .checked_add(span.timestamp_delta)
                .ok_or(FilterError::Malformed { index })?;
            max = if i == 0 { ts } else { max.max(ts) };
        }
        Ok(max)
    }
}

/// Writes the record of `span` with its timestamp delta replaced by
/// `timestamp_delta`: a new length, the attributes byte, the new delta, and
/// the rest of the record (offset delta, key, value, headers) as it was.
fn put_rebased(out: &mut BytesMut, body: &[u8], span: &RecordSpan, timestamp_delta: i64) {
    let mut delta = Vec::with_capacity(10);
    put_varlong(&mut delta, timestamp_delta);
    let rest = body.get(span.after_timestamp..span.end).unwrap_or(&[]);
    let length = 1 + delta.len() + rest.len();
    put_varint(out, i32::try_from(length).unwrap_or(i32::MAX));
    out.put_u8(body.get(span.attributes_at).copied().unwrap_or(0));
    out.put_slice(&delta);
    out.put_slice(rest);
}

/// Test helper: a copy of `batch` whose CRC-covered bytes were changed,
/// resealed. Kept here because the seal is private to `record`.
#[cfg(test)]
pub(crate) fn reseal(mut bytes: Vec<u8>) -> bytes::Bytes {
    super::batch::seal_crc(&mut bytes);
    bytes::Bytes::from(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{BatchBuilder, NewRecord, Record};
    use proptest::prelude::*;

    fn sample() -> RecordBatch {
        BatchBuilder::transactional(7, 3, 100)
            .with_base_offset(1_000)
            .with_partition_leader_epoch(5)
            .push_record(NewRecord::new(5_000, Some(b"a"), Some(b"1")).header("h", Some(b"x")))
            .record(4_000, Some(b"b"), None)
            .record(6_000, None, Some(b"3"))
            .record(5_500, Some(b"d"), Some(b"4"))
            .build()
    }

    fn records(batch: &RecordBatch) -> Vec<Record> {
        batch.records().collect::<Result<_, _>>().unwrap()
    }

    #[test]
    fn retain_keeps_offsets_sequence_range_and_producer_fields() {
        let b = sample();
        let out = b.retain(&[false, true, false, true], None).unwrap();
        assert_eq!(out.validate(), Ok(()));
        assert_eq!(out.base_offset(), 1_000);
        assert_eq!(out.last_offset_delta(), 3, "the sequence range is intact");
        assert_eq!(out.last_offset(), b.last_offset());
        assert_eq!(out.last_sequence(), b.last_sequence());
        assert_eq!(out.record_count(), 2);
        assert_eq!(
            (out.producer_id(), out.producer_epoch(), out.base_sequence()),
            (7, 3, 100)
        );
        assert_eq!(out.partition_leader_epoch(), 5);
        assert_eq!(out.attributes(), b.attributes());
        assert_eq!(out.delete_horizon_ms(), None);
        assert_eq!(out.base_timestamp(), b.base_timestamp());
    }

    #[test]
    fn retained_records_read_back_identical() {
        let b = sample();
        let all = records(&b);
        let out = b.retain(&[true, false, true, true], None).unwrap();
        let kept = records(&out);
        assert_eq!(kept, vec![all[0].clone(), all[2].clone(), all[3].clone()]);
        assert_eq!(kept[0].headers.len(), 1);
    }

    #[test]
    fn keeping_every_record_without_a_horizon_gives_the_same_bytes() {
        let b = sample();
        let out = b.retain(&[true; 4], None).unwrap();
        assert_eq!(out.as_bytes(), b.as_bytes());
    }

    #[test]
    fn a_new_delete_horizon_rebases_timestamps_with_negative_deltas() {
        let b = sample();
        let all = records(&b);
        let horizon = 86_400_000;
        let out = b.retain(&[true, true, false, true], Some(horizon)).unwrap();
        assert_eq!(out.validate(), Ok(()));
        assert_eq!(out.delete_horizon_ms(), Some(horizon));
        assert_eq!(out.base_timestamp(), horizon);
        assert_eq!(out.attributes(), b.attributes() | DELETE_HORIZON_BIT);
        let kept = records(&out);
        assert_eq!(kept, vec![all[0].clone(), all[1].clone(), all[3].clone()]);
        assert_eq!(out.max_timestamp(), 5_500);
    }

    #[test]
    fn an_existing_horizon_is_kept_when_rewritten_again() {
        let b = sample();
        let all = records(&b);
        let first = b.retain(&[true, true, true, true], Some(9_000)).unwrap();
        let second = first.retain(&[false, true, false, true], None).unwrap();
        assert_eq!(second.validate(), Ok(()));
        assert_eq!(second.delete_horizon_ms(), Some(9_000));
        assert_eq!(records(&second), vec![all[1].clone(), all[3].clone()]);
    }

    #[test]
    fn max_timestamp_is_the_largest_kept_for_create_time() {
        let b = sample();
        assert_eq!(b.max_timestamp(), 6_000);
        let out = b.retain(&[true, true, false, false], None).unwrap();
        assert_eq!(out.max_timestamp(), 5_000);
    }

    #[test]
    fn log_append_time_keeps_the_batch_max_timestamp() {
        let b = BatchBuilder::new()
            .with_timestamp_type(TimestampType::LogAppendTime)
            .record(10, Some(b"a"), Some(b"1"))
            .record(99, Some(b"b"), Some(b"2"))
            .build();
        let out = b.retain(&[true, false], None).unwrap();
        assert_eq!(out.max_timestamp(), 99);
        assert_eq!(out.timestamp_type(), TimestampType::LogAppendTime);
    }

    #[test]
    fn empty_header_keeps_the_producer_state_and_nothing_else() {
        let b = sample().retain(&[true; 4], Some(77)).unwrap();
        let e = b.empty_header();
        assert_eq!(e.validate(), Ok(()));
        assert_eq!(e.size(), BATCH_HEADER_LEN);
        assert_eq!(e.record_count(), 0);
        assert_eq!(e.records().count(), 0);
        assert_eq!((e.base_offset(), e.last_offset()), (1_000, 1_003));
        assert_eq!(e.last_sequence(), b.last_sequence());
        assert_eq!(
            (e.producer_id(), e.producer_epoch(), e.base_sequence()),
            (7, 3, 100)
        );
        assert!(e.is_transactional());
        assert!(!e.is_control());
        assert_eq!(e.delete_horizon_ms(), None);
        assert_eq!(e.base_timestamp(), NO_TIMESTAMP);
        assert_eq!(e.max_timestamp(), b.max_timestamp());
        assert_eq!(e.partition_leader_epoch(), 5);
        assert_eq!(
            sample().retain(&[false; 4], None).unwrap(),
            sample().empty_header()
        );
    }

    #[test]
    fn a_compressed_batch_is_rewritten_with_its_own_codec() {
        let plain = sample();
        let all = records(&plain);
        let limit = MAX_DECOMPRESSED_BATCH_BYTES;
        for codec in Compression::CODECS {
            let packed = plain.compressed_with(codec).unwrap();
            let out = packed.retain(&[false, true, false, true], None).unwrap();
            assert_eq!(out.validate(), Ok(()));
            assert_eq!(out.compression(), codec);
            assert_eq!(out.attributes(), packed.attributes());
            assert_eq!(
                (
                    out.base_offset(),
                    out.last_offset_delta(),
                    out.record_count()
                ),
                (1_000, 3, 2)
            );
            assert_eq!(
                (out.producer_id(), out.producer_epoch(), out.base_sequence()),
                (7, 3, 100)
            );
            assert_eq!(out.partition_leader_epoch(), 5);
            let kept = records(&out.decompressed(limit).unwrap());
            assert_eq!(kept, vec![all[1].clone(), all[3].clone()]);
            // The twin filtered, compressed: the same as the twin's rewrite.
            let expected = plain.retain(&[false, true, false, true], None).unwrap();
            assert_eq!(out.decompressed(limit).unwrap(), expected);
            // With a horizon, timestamps are rebased inside the codec too.
            let stamped = packed
                .retain(&[true, true, false, false], Some(9_999))
                .unwrap();
            assert_eq!(stamped.compression(), codec);
            assert_eq!(stamped.delete_horizon_ms(), Some(9_999));
            let kept = records(&stamped.decompressed(limit).unwrap());
            assert_eq!(kept, vec![all[0].clone(), all[1].clone()]);
            // Nothing kept: the bare header, uncompressed.
            let empty = packed.retain(&[false; 4], None).unwrap();
            assert_eq!(empty.compression(), Compression::None);
            assert_eq!(empty.record_count(), 0);
        }
    }

    #[test]
    fn a_compressed_batch_that_does_not_decompress_is_a_codec_error() {
        let mut bytes = sample().as_bytes().to_vec();
        bytes[22] |= 0x01; // gzip, over records that are not gzip
        let b = RecordBatch::new(reseal(bytes)).unwrap();
        assert_eq!(b.validate(), Ok(()));
        assert!(matches!(
            b.retain(&[true; 4], None),
            Err(FilterError::Codec(CompressionError::Corrupt { .. }))
        ));
        assert_eq!(
            record_spans(&b),
            Err(FilterError::Compressed(Compression::Gzip)),
            "its stored bytes are not records"
        );
    }

    #[test]
    fn keep_flags_must_match_the_records() {
        assert_eq!(
            sample().retain(&[true; 3], None),
            Err(FilterError::FlagCountMismatch {
                records: 4,
                flags: 3
            })
        );
    }

    #[test]
    fn a_count_that_does_not_match_the_records_is_malformed() {
        for count in [3i32, 5] {
            let mut bytes = sample().as_bytes().to_vec();
            bytes[57..61].copy_from_slice(&count.to_be_bytes());
            let b = RecordBatch::new(reseal(bytes)).unwrap();
            assert!(matches!(
                b.retain(&[true; 4], None),
                Err(FilterError::Malformed { .. })
            ));
        }
    }

    #[test]
    fn a_timestamp_that_cannot_be_rebased_is_refused() {
        let b = BatchBuilder::new()
            .record(i64::MIN + 5, Some(b"a"), None)
            .build();
        assert_eq!(
            b.retain(&[true], Some(1_000)),
            Err(FilterError::TimestampOutOfRange { index: 0 })
        );
    }

    proptest! {
        /// Any subset of any built batch, with or without a horizon, is a
        /// valid batch whose records are the kept ones, unchanged.
        #[test]
        fn any_subset_reads_back_as_the_kept_records(
            recs in proptest::collection::vec(
                (-(1i64 << 40)..(1i64 << 40),
                 proptest::option::of(proptest::collection::vec(any::<u8>(), 0..8)),
                 proptest::option::of(proptest::collection::vec(any::<u8>(), 0..8))),
                1..12),
            keep in proptest::collection::vec(any::<bool>(), 12),
            horizon in proptest::option::of(-(1i64 << 41)..(1i64 << 41)),
            base in 0i64..1 << 40,
        ) {
            let mut builder = BatchBuilder::idempotent(3, 1, 10).with_base_offset(base);
            for (ts, k, v) in &recs {
                builder.push(NewRecord::new(*ts, k.as_deref(), v.as_deref()));
            }
            let b = builder.build();
            let keep = &keep[..recs.len()];
            let out = b.retain(keep, horizon).unwrap();
            prop_assert_eq!(out.validate(), Ok(()));
            prop_assert_eq!(out.base_offset(), b.base_offset());
            prop_assert_eq!(out.last_offset_delta(), b.last_offset_delta());
            let expected: Vec<Record> = records(&b)
                .into_iter()
                .zip(keep)
                .filter(|(_, k)| **k)
                .map(|(r, _)| r)
                .collect();
            prop_assert_eq!(out.record_count() as usize, expected.len());
            prop_assert_eq!(&records(&out), &expected);
            if let Some(max) = expected.iter().map(|r| r.timestamp).max() {
                prop_assert_eq!(out.max_timestamp(), max);
                prop_assert_eq!(out.delete_horizon_ms(), horizon);
            }
        }

        /// Arbitrary bytes behind a valid header never panic the filter.
        #[test]
        fn arbitrary_record_bytes_never_panic_retain(
            body in proptest::collection::vec(any::<u8>(), 0..200),
            count in -2i32..20,
            keep in proptest::collection::vec(any::<bool>(), 0..20),
            horizon in proptest::option::of(any::<i64>()),
        ) {
            let mut bytes = BatchBuilder::new().build().as_bytes().to_vec();
            bytes.extend_from_slice(&body);
            let len = (bytes.len() - super::super::LOG_OVERHEAD) as i32;
            bytes[8..12].copy_from_slice(&len.to_be_bytes());
            bytes[57..61].copy_from_slice(&count.to_be_bytes());
            let b = RecordBatch::new(reseal(bytes)).unwrap();
            if let Ok(out) = b.retain(&keep, horizon) {
                prop_assert_eq!(out.validate(), Ok(()));
                let _ = out.records().count();
            }
            let _ = b.empty_header();
        }
    }
}
