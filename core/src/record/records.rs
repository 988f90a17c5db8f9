//! Lazy decoding of the records inside an uncompressed v2 batch.
//!
//! Each record is:
//! `length varint, attributes i8, timestampDelta varlong, offsetDelta varint,
//! keyLength varint, key, valueLength varint, value, headerCount varint,
//! headers (keyLength varint, key, valueLength varint, value)`.
//! Every length is checked against the bytes that remain before anything is
//! sliced or allocated.

use bytes::Bytes;
use std::fmt;

use super::batch::Compression;
use super::varint::{get_varint, get_varlong};

/// One record header; the key is a UTF-8 string on the wire but kept as
/// bytes here since the broker never interprets it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordHeader {
    pub key: Bytes,
    pub value: Option<Bytes>,
}

/// One decoded record, with offset and timestamp made absolute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<RecordHeader>,
}

/// Why the records of a batch could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordError {
    /// The batch is compressed; kaas stores such batches but does not
    /// decompress them.
    Compressed(Compression),
    /// A record's bytes are malformed at this index.
    Malformed { index: i32 },
    /// Bytes remain after `recordCount` records, or fewer records than
    /// `recordCount` fit.
    CountMismatch { declared: i32, found: i32 },
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordError::Compressed(c) => write!(f, "records are compressed ({c:?})"),
            RecordError::Malformed { index } => write!(f, "record {index} is malformed"),
            RecordError::CountMismatch { declared, found } => {
                write!(f, "batch declares {declared} records, holds {found}")
            }
        }
    }
}

impl std::error::Error for RecordError {}

/// Iterator over the records of one batch. Yields at most one error, then
/// stops.
pub struct Records {
    body: Bytes,
    pos: usize,
    declared: i32,
    index: i32,
    base_offset: i64,
    base_timestamp: i64,
    failed: bool,
    compression: Compression,
}

impl Records {
    pub(crate) fn new(
        body: Bytes,
        declared: i32,
        compression: Compression,
        base_offset: i64,
        base_timestamp: i64,
    ) -> Self {
        Records {
            body,
            pos: 0,
            declared,
            index: 0,
            base_offset,
            base_timestamp,
            failed: false,
            compression,
        }
    }

    fn fail<T>(&mut self, err: RecordError) -> Option<Result<T, RecordError>> {
        self.failed = true;
        Some(Err(err))
    }

    /// The start every record has: its length, its attributes (unused in
    /// v2, but present), its timestamp and offset deltas. Returns where the
    /// record ends and the two deltas, with `pos` just past them.
    fn decode_head(&self, pos: &mut usize) -> Option<(usize, i64, i32)> {
        let buf = &self.body[..];
        let length = usize::try_from(get_varint(buf, pos)?).ok()?;
        let end = pos.checked_add(length)?;
        let record = buf.get(..end)?;
        record.get(*pos)?;
        *pos += 1;
        let timestamp_delta = get_varlong(record, pos)?;
        let offset_delta = get_varint(record, pos)?;
        Some((end, timestamp_delta, offset_delta))
    }

    fn decode_one(&mut self) -> Option<Record> {
        let mut pos = self.pos;
        let (end, timestamp_delta, offset_delta) = self.decode_head(&mut pos)?;
        let record = self.body.get(..end)?;
        let key = self.get_nullable(record, &mut pos)?;
        let value = self.get_nullable(record, &mut pos)?;
        let header_count = usize::try_from(get_varint(record, &mut pos)?).ok()?;
        // Each header takes at least two bytes; bounding by the remaining
        // bytes keeps a hostile count from reserving memory.
        if header_count > (end - pos) / 2 {
            return None;
        }
        let mut headers = Vec::with_capacity(header_count);
        for _ in 0..header_count {
            let key = self.get_nullable(record, &mut pos)??;
            let value = self.get_nullable(record, &mut pos)?;
            headers.push(RecordHeader { key, value });
        }
        if pos != end {
            return None;
        }
        self.pos = end;
        Some(Record {
            offset: self.base_offset.checked_add(i64::from(offset_delta))?,
            timestamp: self.base_timestamp.checked_add(timestamp_delta)?,
            key,
            value,
            headers,
        })
    }

    /// The next record's offset and timestamp, its key, value and headers
    /// skipped over by its length, unread: what a check of timestamps
    /// needs, without a copy or an allocation per record.
    fn decode_stamp(&mut self) -> Option<Stamp> {
        let mut pos = self.pos;
        let (end, timestamp_delta, offset_delta) = self.decode_head(&mut pos)?;
        self.pos = end;
        Some(Stamp {
            offset: self.base_offset.checked_add(i64::from(offset_delta))?,
            timestamp: self.base_timestamp.checked_add(timestamp_delta)?,
        })
    }

    /// The records' offsets and timestamps only ([`Stamps`]).
    pub fn stamps(self) -> Stamps {
        Stamps(self)
    }

    /// One step of either iterator: the checks every record passes (the
    /// batch uncompressed, the declared count), then `decode`.
    fn step<T>(&mut self, decode: fn(&mut Self) -> Option<T>) -> Option<Result<T, RecordError>> {
        if self.failed {
            return None;
        }
        if self.compression != Compression::None {
            return self.fail(RecordError::Compressed(self.compression));
        }
        if self.index >= self.declared {
            if self.pos < self.body.len() {
                let declared = self.declared;
                return self.fail(RecordError::CountMismatch {
                    declared,
                    found: declared.saturating_add(1),
                });
            }
            return None;
        }
        if self.pos >= self.body.len() {
            let (declared, found) = (self.declared, self.index);
            return self.fail(RecordError::CountMismatch { declared, found });
        }
        match decode(self) {
            Some(item) => {
                self.index += 1;
                Some(Ok(item))
            }
            None => {
                let index = self.index;
                self.fail(RecordError::Malformed { index })
            }
        }
    }

    /// A length-prefixed byte string; the outer `None` means malformed, the
    /// inner `None` a null (length -1).
    fn get_nullable(&self, record: &[u8], pos: &mut usize) -> Option<Option<Bytes>> {
        let len = get_varint(record, pos)?;
        if len < 0 {
            return if len == -1 { Some(None) } else { None };
        }
        let start = *pos;
        let end = start.checked_add(usize::try_from(len).ok()?)?;
        if end > record.len() {
            return None;
        }
        *pos = end;
        Some(Some(self.body.slice(start..end)))
    }
}

impl Iterator for Records {
    type Item = Result<Record, RecordError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.step(Self::decode_one)
    }
}

/// A record's offset and timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    pub offset: i64,
    pub timestamp: i64,
}

/// Iterator over the offsets and timestamps of a batch's records
/// ([`Records::stamps`]). Only the record framing is checked, not the
/// keys, values and headers inside each record. Yields at most one error,
/// then stops.
pub struct Stamps(Records);

impl Iterator for Stamps {
    type Item = Result<Stamp, RecordError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.0.step(Records::decode_stamp)
    }
}

#[cfg(test)]
mod tests {
    use crate::record::{BatchBuilder, NewRecord, RecordError, RecordHeader};
    use bytes::Bytes;

    #[test]
    fn records_round_trip_through_the_builder() {
        let batch = BatchBuilder::new()
            .with_base_offset(100)
            .push_record(
                NewRecord::new(50, Some(b"key"), Some(b"value"))
                    .header("h1", Some(b"x"))
                    .header("h2", None),
            )
            .record(40, None, None)
            .build();
        let records: Vec<_> = batch.records().collect::<Result<_, _>>().unwrap();
        assert_eq!(records.len(), 2);
        assert_eq!(records[0].offset, 100);
        assert_eq!(records[0].timestamp, 50);
        assert_eq!(records[0].key.as_deref(), Some(&b"key"[..]));
        assert_eq!(records[0].value.as_deref(), Some(&b"value"[..]));
        assert_eq!(
            records[0].headers,
            vec![
                RecordHeader {
                    key: Bytes::from_static(b"h1"),
                    value: Some(Bytes::from_static(b"x"))
                },
                RecordHeader {
                    key: Bytes::from_static(b"h2"),
                    value: None
                },
            ]
        );
        assert_eq!(records[1].offset, 101);
        assert_eq!(records[1].timestamp, 40);
        assert_eq!(records[1].key, None);
        assert_eq!(records[1].value, None);
    }

    #[test]
    fn a_count_larger_than_the_records_is_reported() {
        let batch = BatchBuilder::new().record(0, None, Some(b"v")).build();
        let mut bytes = batch.as_bytes().to_vec();
        bytes[57..61].copy_from_slice(&2i32.to_be_bytes());
        let batch = crate::record::RecordBatch::new(Bytes::from(bytes)).unwrap();
        let results: Vec<_> = batch.records().collect();
        assert_eq!(results.len(), 2);
        assert_eq!(
            results[1],
            Err(RecordError::CountMismatch {
                declared: 2,
                found: 1
            })
        );
    }

    #[test]
    fn stamps_are_the_records_offsets_and_timestamps() {
        let mut b = BatchBuilder::new().with_base_offset(10);
        for ts in [500, 400, 900] {
            b = b.push_record(NewRecord::new(ts, Some(b"k"), Some(b"value")));
        }
        let batch = b.build();
        let full: Vec<(i64, i64)> = batch
            .records()
            .map(|r| r.map(|r| (r.offset, r.timestamp)).unwrap())
            .collect();
        let stamps: Vec<(i64, i64)> = batch
            .records()
            .stamps()
            .map(|s| s.map(|s| (s.offset, s.timestamp)).unwrap())
            .collect();
        assert_eq!(stamps, full);
        assert_eq!(stamps, [(10, 500), (11, 400), (12, 900)]);
    }
}
