//! What a Produce request may append: the rules applied to each partition's
//! records before they reach the log.

use crate::compression::{CompressionError, MAX_DECOMPRESSED_BATCH_BYTES};
use crate::protocol::ErrorCode;
use crate::record::{split_batches, BatchError, RecordBatch, RecordError, Tail};
use bytes::Bytes;

/// The acks values Kafka defines: none, leader, all.
pub fn valid_acks(acks: i16) -> bool {
    matches!(acks, -1..=1)
}

/// Validates one partition's `records` from a Produce request (v3+) and
/// returns its batch.
///
/// Kafka requires exactly one v2 batch per partition from v3 on (more, or
/// none, is INVALID_RECORD); a batch whose framing or CRC is broken is
/// CORRUPT_MESSAGE; a batch larger than the topic's `max.message.bytes` is
/// MESSAGE_TOO_LARGE.
pub fn validate_produce_records(
    records: Option<Bytes>,
    max_message_bytes: i64,
) -> Result<RecordBatch, ErrorCode> {
    let records = records.ok_or(ErrorCode::InvalidRecord)?;
    let mut batches = split_batches(records);
    let first = batches.next();
    let second = batches.next();
    match batches.tail() {
        Tail::Clean | Tail::Pending => {}
        Tail::Partial { .. } => return Err(ErrorCode::CorruptMessage),
        Tail::Corrupt { error, .. } => return Err(batch_error_code(error)),
    }
    let batch = match (first, second) {
        (Some(batch), None) => batch,
        _ => return Err(ErrorCode::InvalidRecord),
    };
    if batch.size() as i64 > max_message_bytes {
        return Err(ErrorCode::MessageTooLarge);
    }
    batch
        .validate_from_client()
        .map_err(|e| batch_error_code(&e))?;
    Ok(batch)
}

fn batch_error_code(e: &BatchError) -> ErrorCode {
    match e {
        BatchError::UnsupportedMagic(_) => ErrorCode::UnsupportedForMessageFormat,
        BatchError::UnknownCompression(_) => ErrorCode::UnsupportedCompressionType,
        BatchError::InconsistentRecordCount { .. }
        | BatchError::ControlBatchFromClient
        | BatchError::MissingSequence => ErrorCode::InvalidRecord,
        _ => ErrorCode::CorruptMessage,
    }
}

/// Batches no producer may write: control batches (transaction markers)
/// are written by the transaction coordinator only; from a client they
/// are INVALID_RECORD, as in Kafka. A transactional batch needs the
/// transactional id it belongs to (ProduceRequest v3+ carries it): without
/// one Kafka's authorizer refuses it, TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
pub fn admit_batch(batch: &RecordBatch, transactional_id: Option<&str>) -> Result<(), ErrorCode> {
    if batch.is_control() {
        return Err(ErrorCode::InvalidRecord);
    }
    if batch.is_transactional() && transactional_id.is_none_or(str::is_empty) {
        return Err(ErrorCode::TransactionalIdAuthorizationFailed);
    }
    Ok(())
}

/// A compacted topic keeps the last record of each key, so every record it
/// takes needs one; Kafka refuses the whole batch with INVALID_RECORD and
/// names each keyless record (its index in the batch) in the response's
/// `record_errors`. The indexes of the records of `batch` without a key,
/// in order; empty when every record has one. A compressed batch is read
/// through its decompressed records, as Kafka's validator reads them
/// ([`compacted_records`]). A record that does not decode makes the batch
/// CORRUPT_MESSAGE.
pub fn records_without_key(batch: &RecordBatch) -> Result<Vec<i32>, ErrorCode> {
    let batch = compacted_records(batch)?;
    let mut keyless = Vec::new();
    for (index, record) in (0..).zip(batch.records()) {
        match record {
            Ok(r) if r.key.is_none() => keyless.push(index),
            Ok(_) => {}
            Err(_) => return Err(ErrorCode::CorruptMessage),
        }
    }
    Ok(keyless)
}

/// The records of a batch produced to a compacted topic, decompressed if
/// need be, for the key check. Data that does not decompress is
/// CORRUPT_MESSAGE, as in Kafka. Records that decompress to more than
/// [`MAX_DECOMPRESSED_BATCH_BYTES`] are MESSAGE_TOO_LARGE: Kafka reads a
/// compressed batch as a stream and has no such bound, but kaas holds the
/// records of a batch at once; a Java producer answered so splits the
/// batch and sends it again.
pub fn compacted_records(batch: &RecordBatch) -> Result<RecordBatch, ErrorCode> {
    batch
        .decompressed(MAX_DECOMPRESSED_BATCH_BYTES)
        .map_err(|e| match e {
            CompressionError::TooLarge { .. } => ErrorCode::MessageTooLarge,
            CompressionError::Unsupported(_) => ErrorCode::UnsupportedCompressionType,
            CompressionError::Corrupt { .. } => ErrorCode::CorruptMessage,
        })
}

/// Kafka's words for one keyless record of a compacted topic's partition
/// `topic`-`partition`, and for the refused batch (the first three record
/// errors).
pub fn keyless_record_messages(
    topic: &str,
    partition: i32,
    keyless: &[i32],
) -> (String, Vec<String>) {
    let one = format!(
        "Compacted topic cannot accept message without key in topic partition {topic}-{partition}"
    );
    let each: Vec<(i32, String)> = keyless.iter().map(|&i| (i, one.clone())).collect();
    (record_errors_summary(&each), vec![one; keyless.len()])
}

/// Kafka's message for a batch refused for some of its records: the count,
/// and the first three (index in the batch, message).
pub fn record_errors_summary(errors: &[(i32, String)]) -> String {
    let shown: Vec<String> = errors
        .iter()
        .take(3)
        .map(|(i, message)| format!("RecordError(batchIndex={i}, message='{message}')"))
        .collect();
    format!(
        "One or more records have been rejected due to {} record errors in total, and only showing the first three errors at most: [{}]",
        errors.len(),
        shown.join(", ")
    )
}

/// How far a record's CreateTime may be from the broker's clock (KIP-937:
/// the topic's `message.timestamp.before.max.ms` and
/// `message.timestamp.after.max.ms`; Kafka 4 refuses a timestamp more than
/// an hour ahead by default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimestampBounds {
    pub before_max_ms: i64,
    pub after_max_ms: i64,
}

/// The records of `batch` whose timestamp is out of `bounds` at `now_ms`,
/// each as (index in the batch, Kafka's message): Kafka refuses such a
/// batch whole with INVALID_TIMESTAMP and names each record in
/// `record_errors`. A record without a timestamp (-1) is not checked. A
/// compressed batch is not decompressed for this check (every batch of
/// every topic passes here; only compacted topics pay for decompression,
/// in [`records_without_key`]): its header's first and largest timestamps
/// stand for its records, and an offence is reported against its first
/// record.
pub fn records_out_of_time(
    batch: &RecordBatch,
    now_ms: i64,
    bounds: TimestampBounds,
) -> Result<Vec<(i32, String)>, ErrorCode> {
    let earliest = now_ms.saturating_sub(bounds.before_max_ms);
    let latest = now_ms.saturating_add(bounds.after_max_ms);
    let outside = |ts: i64| ts != -1 && (ts < earliest || ts > latest);
    let message = |ts: i64, offset: i64| {
        format!(
            "Timestamp {ts} of message with offset {offset} is out of range. The timestamp should be within [{earliest}, {latest}]"
        )
    };
    let mut out = Vec::new();
    // Every produced batch passes here: its records' timestamps are read
    // without decoding keys, values or headers.
    for (index, stamp) in (0..).zip(batch.records().stamps()) {
        match stamp {
            Ok(r) if outside(r.timestamp) => out.push((index, message(r.timestamp, r.offset))),
            Ok(_) => {}
            Err(RecordError::Compressed(_)) => {
                let first = batch.base_timestamp();
                let worst = [first, batch.max_timestamp()]
                    .into_iter()
                    .find(|&t| outside(t));
                return Ok(worst
                    .map(|ts| vec![(0, message(ts, batch.base_offset()))])
                    .unwrap_or_default());
            }
            Err(_) => return Err(ErrorCode::CorruptMessage),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{BatchBuilder, NewRecord};

    fn batch() -> Bytes {
        BatchBuilder::new()
            .push_record(NewRecord::new(1000, Some(b"k"), Some(b"v")))
            .build()
            .into_bytes()
    }

    #[test]
    fn admit_batch_refuses_control_batches_and_transactional_ones_without_their_id() {
        use crate::record::{build_control_batch, ControlType, EndTxnMarker};
        let plain = RecordBatch::new(batch()).expect("batch");
        assert_eq!(admit_batch(&plain, None), Ok(()));
        let txn = BatchBuilder::transactional(5, 0, 0)
            .push_record(NewRecord::new(1000, None, Some(b"v")))
            .build();
        assert_eq!(admit_batch(&txn, Some("tx")), Ok(()));
        let unauthorized = Err(ErrorCode::TransactionalIdAuthorizationFailed);
        assert_eq!(admit_batch(&txn, None), unauthorized);
        assert_eq!(admit_batch(&txn, Some("")), unauthorized);
        let marker = build_control_batch(
            5,
            0,
            1000,
            EndTxnMarker {
                control_type: ControlType::Commit,
                coordinator_epoch: 0,
            },
        );
        assert_eq!(
            admit_batch(&marker, Some("tx")),
            Err(ErrorCode::InvalidRecord)
        );
    }

    #[test]
    fn a_compacted_topic_refuses_keyless_records_and_names_each_of_them() {
        let mut b = BatchBuilder::new();
        for key in [None, Some(&b"k1"[..]), None, Some(&b""[..])] {
            b = b.push_record(NewRecord::new(1000, key, Some(b"v")));
        }
        let mixed = b.build();
        assert_eq!(
            records_without_key(&mixed),
            Ok(vec![0, 2]),
            "an empty key is a key"
        );
        let keyed = RecordBatch::new(batch()).expect("batch");
        assert_eq!(records_without_key(&keyed), Ok(vec![]));
        let (summary, each) = keyless_record_messages("t", 3, &[0, 2]);
        assert_eq!(each.len(), 2);
        assert_eq!(
            each[0],
            "Compacted topic cannot accept message without key in topic partition t-3"
        );
        assert!(summary
            .starts_with("One or more records have been rejected due to 2 record errors in total"));
        assert!(summary.contains("RecordError(batchIndex=2, message='Compacted topic"));
        let (summary, _) = keyless_record_messages("t", 0, &[0, 1, 2, 3, 4]);
        assert!(summary.contains("batchIndex=2") && !summary.contains("batchIndex=3"));
    }

    #[test]
    fn a_compacted_topic_refuses_keyless_records_inside_compressed_batches() {
        use crate::record::Compression;
        let mut b = BatchBuilder::new();
        for key in [Some(&b"k0"[..]), None, Some(&b"k2"[..]), None] {
            b = b.push_record(NewRecord::new(1000, key, Some(b"v")));
        }
        let plain = b.build();
        for codec in Compression::CODECS {
            let packed = plain.compressed_with(codec).unwrap();
            assert_eq!(records_without_key(&packed), Ok(vec![1, 3]), "{codec:?}");
            let keyed = RecordBatch::new(batch())
                .unwrap()
                .compressed_with(codec)
                .unwrap();
            assert_eq!(records_without_key(&keyed), Ok(vec![]));
        }
    }

    #[test]
    fn compressed_records_that_do_not_decompress_are_corrupt_or_too_large() {
        use crate::record::Compression;
        let mut bytes = batch().to_vec();
        bytes[22] |= 0x04; // zstd, over records that are not zstd
        let broken = RecordBatch::new(crate::record::reseal(bytes)).unwrap();
        assert_eq!(records_without_key(&broken), Err(ErrorCode::CorruptMessage));
        // A bomb: one record whose value is zeros past the bound.
        let zeros = vec![0u8; MAX_DECOMPRESSED_BATCH_BYTES + 1];
        let bomb = BatchBuilder::new()
            .push_record(NewRecord::new(1000, Some(b"k"), Some(&zeros)))
            .build()
            .compressed_with(Compression::Zstd)
            .unwrap();
        assert!(bomb.size() < 1 << 20);
        assert_eq!(records_without_key(&bomb), Err(ErrorCode::MessageTooLarge));
    }

    #[test]
    fn exactly_one_batch_per_partition_from_produce_v3() {
        assert!(validate_produce_records(Some(batch()), 1 << 20).is_ok());
        let mut two = batch().to_vec();
        two.extend_from_slice(&batch());
        assert_eq!(
            validate_produce_records(Some(two.into()), 1 << 20).unwrap_err(),
            ErrorCode::InvalidRecord
        );
        assert_eq!(
            validate_produce_records(Some(Bytes::new()), 1 << 20).unwrap_err(),
            ErrorCode::InvalidRecord
        );
        assert_eq!(
            validate_produce_records(None, 1 << 20).unwrap_err(),
            ErrorCode::InvalidRecord
        );
    }

    #[test]
    fn a_flipped_bit_is_corrupt_message() {
        let mut b = batch().to_vec();
        let last = b.len() - 1;
        b[last] ^= 1;
        assert_eq!(
            validate_produce_records(Some(b.into()), 1 << 20).unwrap_err(),
            ErrorCode::CorruptMessage
        );
    }

    #[test]
    fn a_truncated_batch_is_corrupt_message() {
        let b = batch();
        let cut = b.slice(..b.len() - 3);
        assert_eq!(
            validate_produce_records(Some(cut), 1 << 20).unwrap_err(),
            ErrorCode::CorruptMessage
        );
    }

    #[test]
    fn a_batch_over_max_message_bytes_is_message_too_large() {
        let b = batch();
        let limit = b.len() as i64 - 1;
        assert_eq!(
            validate_produce_records(Some(b), limit).unwrap_err(),
            ErrorCode::MessageTooLarge
        );
    }

    #[test]
    fn acks_must_be_none_leader_or_all() {
        assert!(valid_acks(-1) && valid_acks(0) && valid_acks(1));
        assert!(!valid_acks(2) && !valid_acks(-2));
    }

    #[test]
    fn records_with_timestamps_out_of_bounds_are_named_each() {
        let now = 1_000_000_000;
        let hour = 3_600_000;
        let bounds = TimestampBounds {
            before_max_ms: i64::MAX,
            after_max_ms: hour,
        };
        let mut b = BatchBuilder::new();
        for ts in [now, now + hour + 1, -1, now + hour, now + 2 * hour, 0] {
            b = b.push_record(NewRecord::new(ts, Some(b"k"), Some(b"v")));
        }
        let batch = b.build();
        let out = records_out_of_time(&batch, now, bounds).unwrap();
        let indexes: Vec<i32> = out.iter().map(|(i, _)| *i).collect();
        assert_eq!(
            indexes,
            [1, 4],
            "the bound itself is in range; -1 is no timestamp"
        );
        assert_eq!(
            out[0].1,
            format!(
                "Timestamp {} of message with offset 1 is out of range. The timestamp should be within [{}, {}]",
                now + hour + 1,
                now - i64::MAX,
                now + hour
            )
        );
        let strict = TimestampBounds {
            before_max_ms: 1000,
            after_max_ms: hour,
        };
        let late: Vec<i32> = records_out_of_time(&batch, now, strict)
            .unwrap()
            .iter()
            .map(|(i, _)| *i)
            .collect();
        assert_eq!(late, [1, 4, 5], "a timestamp too old is refused too");
        assert!(records_out_of_time(&batch, now + hour, bounds)
            .unwrap()
            .is_empty());
        assert!(record_errors_summary(&out)
            .starts_with("One or more records have been rejected due to 2 record errors in total"));
    }
}
