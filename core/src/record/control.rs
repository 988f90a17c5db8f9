//! Transaction markers (COMMIT / ABORT control batches, KIP-98).
//!
//! A marker is a batch with the transactional and control attribute bits
//! set, the producer's id and epoch, no sequence, and exactly one record:
//! key = `version i16 (0), type i16 (0 abort, 1 commit)`,
//! value = `version i16 (0), coordinatorEpoch i32`.

use bytes::BufMut;

use super::batch::{RecordBatch, NO_SEQUENCE};
use super::builder::{BatchBuilder, NewRecord};
use super::records::RecordError;

/// Version written in both the key and the value of a marker record.
pub const END_TXN_MARKER_VERSION: i16 = 0;

/// Control record types Kafka defines. kaas writes only `Abort` and
/// `Commit`; others (e.g. KRaft's leader change, 2) are reported as `Other`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlType {
    Abort,
    Commit,
    Other(i16),
}

impl ControlType {
    pub fn id(self) -> i16 {
        match self {
            ControlType::Abort => 0,
            ControlType::Commit => 1,
            ControlType::Other(id) => id,
        }
    }

    pub fn from_id(id: i16) -> Self {
        match id {
            0 => ControlType::Abort,
            1 => ControlType::Commit,
            other => ControlType::Other(other),
        }
    }
}

/// The content of an end-transaction marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndTxnMarker {
    pub control_type: ControlType,
    /// Epoch of the coordinator that decided the outcome; lets a partition
    /// reject markers from a stale coordinator.
    pub coordinator_epoch: i32,
}

/// Builds the marker batch for `producer_id`/`producer_epoch`, stamped with
/// `timestamp_ms`. Base offset and leader epoch are left at 0/-1: the log
/// assigns both on append.
pub fn build_control_batch(
    producer_id: i64,
    producer_epoch: i16,
    timestamp_ms: i64,
    marker: EndTxnMarker,
) -> RecordBatch {
    let mut key = Vec::with_capacity(4);
    key.put_i16(END_TXN_MARKER_VERSION);
    key.put_i16(marker.control_type.id());
    let mut value = Vec::with_capacity(6);
    value.put_i16(END_TXN_MARKER_VERSION);
    value.put_i32(marker.coordinator_epoch);
    BatchBuilder::transactional(producer_id, producer_epoch, NO_SEQUENCE)
        .with_control()
        .push_record(NewRecord::new(timestamp_ms, Some(&key), Some(&value)))
        .build()
}

/// Reads the marker out of a control batch.
///
/// `Ok(None)` if the batch is not a control batch, or its control type is
/// not COMMIT/ABORT. Newer key/value versions are parsed by their version-0
/// prefix, as Kafka does.
pub fn parse_end_txn_marker(batch: &RecordBatch) -> Result<Option<EndTxnMarker>, RecordError> {
    if !batch.is_control() {
        return Ok(None);
    }
    let record = match batch.records().next() {
        Some(record) => record?,
        None => {
            return Err(RecordError::CountMismatch {
                declared: batch.record_count(),
                found: 0,
            })
        }
    };
    let malformed = RecordError::Malformed { index: 0 };
    let key = record.key.as_deref().ok_or(malformed.clone())?;
    let key_version = read_i16(key, 0).ok_or(malformed.clone())?;
    let control_type = ControlType::from_id(read_i16(key, 2).ok_or(malformed.clone())?);
    if key_version < 0 {
        return Err(malformed);
    }
    if let ControlType::Other(_) = control_type {
        return Ok(None);
    }
    let value = record.value.as_deref().ok_or(malformed.clone())?;
    let value_version = read_i16(value, 0).ok_or(malformed.clone())?;
    if value_version < 0 {
        return Err(malformed);
    }
    let coordinator_epoch = value
        .get(2..6)
        .and_then(|b| b.try_into().ok())
        .map(i32::from_be_bytes)
        .ok_or(malformed)?;
    Ok(Some(EndTxnMarker {
        control_type,
        coordinator_epoch,
    }))
}

fn read_i16(buf: &[u8], pos: usize) -> Option<i16> {
    buf.get(pos..pos + 2)
        .and_then(|b| b.try_into().ok())
        .map(i16::from_be_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{BatchBuilder, NO_SEQUENCE};

    #[test]
    fn commit_marker_has_kafka_layout_and_parses_back() {
        let marker = EndTxnMarker {
            control_type: ControlType::Commit,
            coordinator_epoch: 7,
        };
        let b = build_control_batch(1234, 5, 99, marker);
        assert_eq!(b.validate(), Ok(()));
        assert!(b.is_control());
        assert!(b.is_transactional());
        assert_eq!(b.producer_id(), 1234);
        assert_eq!(b.producer_epoch(), 5);
        assert_eq!(b.base_sequence(), NO_SEQUENCE);
        assert_eq!(b.record_count(), 1);
        assert_eq!(b.last_offset_delta(), 0);
        assert_eq!(b.max_timestamp(), 99);

        let record = b.records().next().unwrap().unwrap();
        assert_eq!(record.key.as_deref(), Some(&[0, 0, 0, 1][..]));
        assert_eq!(record.value.as_deref(), Some(&[0, 0, 0, 0, 0, 7][..]));
        assert_eq!(parse_end_txn_marker(&b), Ok(Some(marker)));
    }

    #[test]
    fn abort_marker_parses_back_after_offset_assignment() {
        let marker = EndTxnMarker {
            control_type: ControlType::Abort,
            coordinator_epoch: -1,
        };
        let b = build_control_batch(1, 0, 0, marker).with_assigned(500, 2);
        assert_eq!(b.validate(), Ok(()));
        assert_eq!(parse_end_txn_marker(&b), Ok(Some(marker)));
    }

    #[test]
    fn data_batches_are_not_markers() {
        let b = BatchBuilder::transactional(1, 0, 0)
            .record(0, Some(b"\0\0\0\x01"), Some(b"x"))
            .build();
        assert_eq!(parse_end_txn_marker(&b), Ok(None));
    }

    #[test]
    fn short_marker_key_is_malformed() {
        let b = BatchBuilder::transactional(1, 0, NO_SEQUENCE)
            .with_control()
            .record(0, Some(b"\0"), Some(b"\0\0\0\0\0\0"))
            .build();
        assert_eq!(
            parse_end_txn_marker(&b),
            Err(RecordError::Malformed { index: 0 })
        );
    }
}
