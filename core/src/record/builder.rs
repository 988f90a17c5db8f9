//! Building uncompressed v2 batches, so tests, the simulator's workload
//! clients and the control-marker writer never hand-craft bytes.

use bytes::{BufMut, Bytes, BytesMut};

use super::batch::{
    attributes, finish_header, put_header, Compression, RecordBatch, TimestampType,
    BATCH_HEADER_LEN, NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE, NO_TIMESTAMP,
};
use super::varint::{put_varint, put_varlong};

/// One record to put in a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewRecord {
    pub timestamp: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Option<Bytes>)>,
}

impl NewRecord {
    pub fn new(timestamp: i64, key: Option<&[u8]>, value: Option<&[u8]>) -> Self {
        NewRecord {
            timestamp,
            key: key.map(Bytes::copy_from_slice),
            value: value.map(Bytes::copy_from_slice),
            headers: Vec::new(),
        }
    }

    /// Adds a header (chainable).
    pub fn header(mut self, key: &str, value: Option<&[u8]>) -> Self {
        self.headers
            .push((key.to_owned(), value.map(Bytes::copy_from_slice)));
        self
    }
}

/// Builds one uncompressed v2 batch.
///
/// Defaults: base offset 0, leader epoch -1, no producer id (-1/-1/-1),
/// not transactional, CreateTime. The base timestamp is the first record's
/// timestamp and record offsets are 0..n-1, as the Java producer does.
/// A builder with no records yields a batch with `recordCount` 0 and
/// `lastOffsetDelta` 0, which `validate_from_client` rejects (useful to
/// test exactly that).
#[derive(Debug, Clone)]
pub struct BatchBuilder {
    base_offset: i64,
    partition_leader_epoch: i32,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    transactional: bool,
    control: bool,
    timestamp_type: TimestampType,
    records: Vec<NewRecord>,
}

impl Default for BatchBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl BatchBuilder {
    /// A batch from a plain (non-idempotent) producer.
    pub fn new() -> Self {
        BatchBuilder {
            base_offset: 0,
            partition_leader_epoch: -1,
            producer_id: NO_PRODUCER_ID,
            producer_epoch: NO_PRODUCER_EPOCH,
            base_sequence: NO_SEQUENCE,
            transactional: false,
            control: false,
            timestamp_type: TimestampType::CreateTime,
            records: Vec::new(),
        }
    }

    /// A batch from an idempotent producer.
    pub fn idempotent(producer_id: i64, producer_epoch: i16, base_sequence: i32) -> Self {
        BatchBuilder {
            producer_id,
            producer_epoch,
            base_sequence,
            ..Self::new()
        }
    }

    /// A batch from a transactional producer.
    pub fn transactional(producer_id: i64, producer_epoch: i16, base_sequence: i32) -> Self {
        BatchBuilder {
            transactional: true,
            ..Self::idempotent(producer_id, producer_epoch, base_sequence)
        }
    }

    pub fn with_base_offset(mut self, base_offset: i64) -> Self {
        self.base_offset = base_offset;
        self
    }

    pub fn with_partition_leader_epoch(mut self, epoch: i32) -> Self {
        self.partition_leader_epoch = epoch;
        self
    }

    pub fn with_timestamp_type(mut self, timestamp_type: TimestampType) -> Self {
        self.timestamp_type = timestamp_type;
        self
    }

    /// Marks the batch as a control batch; only `control.rs` needs this.
    pub(crate) fn with_control(mut self) -> Self {
        self.control = true;
        self
    }

    /// Adds a record without headers (chainable).
    pub fn record(self, timestamp: i64, key: Option<&[u8]>, value: Option<&[u8]>) -> Self {
        self.push_record(NewRecord::new(timestamp, key, value))
    }

    /// Adds a record (chainable).
    pub fn push_record(mut self, record: NewRecord) -> Self {
        self.records.push(record);
        self
    }

    /// Adds a record through a mutable reference, for loops.
    pub fn push(&mut self, record: NewRecord) -> &mut Self {
        self.records.push(record);
        self
    }

    /// Number of records added so far.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Encodes the batch with a correct length and CRC.
    pub fn build(&self) -> RecordBatch {
        let base_timestamp = self.records.first().map_or(NO_TIMESTAMP, |r| r.timestamp);
        let max_timestamp = self
            .records
            .iter()
            .map(|r| r.timestamp)
            .max()
            .unwrap_or(NO_TIMESTAMP);
        let count = i32::try_from(self.records.len()).unwrap_or(i32::MAX);
        let last_offset_delta = count.saturating_sub(1).max(0);

        let mut out = BytesMut::with_capacity(BATCH_HEADER_LEN + 64 * self.records.len());
        put_header(
            &mut out,
            self.base_offset,
            self.partition_leader_epoch,
            attributes(
                Compression::None,
                self.timestamp_type,
                self.transactional,
                self.control,
            ),
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            count,
        );
        let mut body = Vec::new();
        for (offset_delta, record) in self.records.iter().enumerate() {
            body.clear();
            encode_record_body(
                &mut body,
                record,
                record.timestamp.wrapping_sub(base_timestamp),
                i32::try_from(offset_delta).unwrap_or(i32::MAX),
            );
            put_varint(&mut out, i32::try_from(body.len()).unwrap_or(i32::MAX));
            out.put_slice(&body);
        }
        finish_header(&mut out);
        RecordBatch::from_built(out.freeze())
    }
}

fn encode_record_body(out: &mut Vec<u8>, record: &NewRecord, ts_delta: i64, offset_delta: i32) {
    out.put_i8(0); // attributes: unused in v2
    put_varlong(out, ts_delta);
    put_varint(out, offset_delta);
    put_nullable(out, record.key.as_deref());
    put_nullable(out, record.value.as_deref());
    put_varint(out, i32::try_from(record.headers.len()).unwrap_or(i32::MAX));
    for (key, value) in &record.headers {
        put_nullable(out, Some(key.as_bytes()));
        put_nullable(out, value.as_deref());
    }
}

fn put_nullable(out: &mut Vec<u8>, bytes: Option<&[u8]>) {
    match bytes {
        None => put_varint(out, -1),
        Some(b) => {
            put_varint(out, i32::try_from(b.len()).unwrap_or(i32::MAX));
            out.put_slice(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transactional_builder_sets_the_bit_and_producer_fields() {
        let b = BatchBuilder::transactional(9, 2, 100)
            .with_base_offset(5)
            .with_partition_leader_epoch(3)
            .record(7, Some(b"k"), Some(b"v"))
            .build();
        assert_eq!(b.validate_from_client(), Ok(()));
        assert!(b.is_transactional());
        assert!(!b.is_control());
        assert_eq!(
            (b.producer_id(), b.producer_epoch(), b.base_sequence()),
            (9, 2, 100)
        );
        assert_eq!((b.base_offset(), b.partition_leader_epoch()), (5, 3));
    }

    #[test]
    fn log_append_time_sets_the_timestamp_type_bit() {
        let b = BatchBuilder::new()
            .with_timestamp_type(TimestampType::LogAppendTime)
            .record(7, None, Some(b"v"))
            .build();
        assert_eq!(b.timestamp_type(), TimestampType::LogAppendTime);
        assert_eq!(b.validate(), Ok(()));
    }

    #[test]
    fn empty_builder_gives_a_batch_clients_may_not_send() {
        let b = BatchBuilder::new().build();
        assert_eq!(b.validate(), Ok(()));
        assert_eq!(b.record_count(), 0);
        assert_eq!(b.size(), BATCH_HEADER_LEN);
        assert!(b.validate_from_client().is_err());
    }

    #[test]
    fn push_in_a_loop_matches_chained_records() {
        let mut looped = BatchBuilder::idempotent(1, 0, 0);
        for i in 0..3u8 {
            looped.push(NewRecord::new(i64::from(i), None, Some(&[i])));
        }
        let chained = BatchBuilder::idempotent(1, 0, 0)
            .record(0, None, Some(&[0]))
            .record(1, None, Some(&[1]))
            .record(2, None, Some(&[2]))
            .build();
        assert_eq!(looped.len(), 3);
        assert_eq!(looped.build(), chained);
    }
}
