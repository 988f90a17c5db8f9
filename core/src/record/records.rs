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

    fn fail(&mut self, err: RecordError) -> Option<Result<Record, RecordError>> {
        self.failed = true;
        Some(Err(err))
    }

    fn decode_one(&mut self) -> Option<Record> {
        let buf = &self.body[..];
        let mut pos = self.pos;
        let length = usize::try_from(get_varint(buf, &mut pos)?).ok()?;
        let end = pos.checked_add(length)?;
        let record = buf.get(..end)?;
        // attributes: unused in v2, but present.
        record.get(pos)?;
        pos += 1;
        let timestamp_delta = get_varlong(record, &mut pos)?;
        let offset_delta = get_varint(record, &mut pos)?;
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
        match self.decode_one() {
            Some(record) => {
                self.index += 1;
                Some(Ok(record))
            }
            None => {
                let index = self.index;
                self.fail(RecordError::Malformed { index })
            }
        }
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
}
