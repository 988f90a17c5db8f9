//! Properties over arbitrary input: bytes from the network or a damaged
//! volume never panic the batch code, and built batches always round-trip.

use bytes::Bytes;
use proptest::prelude::*;

use super::*;

fn exercise_batch(batch: &RecordBatch) {
    let _ = batch.validate();
    let _ = batch.validate_from_client();
    let _ = (
        batch.last_offset(),
        batch.next_offset(),
        batch.last_sequence(),
    );
    let _ = (
        batch.compression(),
        batch.timestamp_type(),
        batch.compute_crc(),
    );
    for record in batch.records().take(10_000) {
        let _ = record;
    }
    let _ = parse_end_txn_marker(batch);
    let _ = batch.with_assigned(i64::MAX, i32::MIN);
}

/// A valid header with arbitrary bytes after it, so the fuzzing gets past
/// the framing checks into record decoding.
fn framed(body: Vec<u8>, count: i32, delta: i32, control: bool) -> Bytes {
    let mut bytes = BatchBuilder::new().build().as_bytes().to_vec();
    bytes.extend_from_slice(&body);
    let len = (bytes.len() - LOG_OVERHEAD) as i32;
    bytes[8..12].copy_from_slice(&len.to_be_bytes());
    bytes[57..61].copy_from_slice(&count.to_be_bytes());
    bytes[23..27].copy_from_slice(&delta.to_be_bytes());
    if control {
        bytes[22] |= 0x30;
    }
    Bytes::from(bytes)
}

proptest! {
    #[test]
    fn random_bytes_never_panic_view_validate_or_split(data in proptest::collection::vec(any::<u8>(), 0..512)) {
        let buf = Bytes::from(data);
        let _ = frame_batch(&buf);
        if let Ok(batch) = RecordBatch::new(buf.clone()) {
            exercise_batch(&batch);
        }
        let mut it = split_batches(buf.clone());
        let mut total = 0;
        for batch in it.by_ref() {
            total += batch.size();
            exercise_batch(&batch);
        }
        prop_assert_eq!(total, it.position());
        prop_assert!(it.position() <= buf.len());
        prop_assert!(*it.tail() != Tail::Pending);
    }

    #[test]
    fn random_record_bytes_never_panic(
        body in proptest::collection::vec(any::<u8>(), 0..256),
        count in -2i32..40,
        delta in -2i32..40,
        control in any::<bool>(),
    ) {
        let buf = framed(body, count, delta, control);
        let batch = RecordBatch::new(buf).unwrap();
        exercise_batch(&batch);
    }

    #[test]
    fn built_batches_round_trip(
        records in proptest::collection::vec(
            (any::<i64>(), proptest::option::of(proptest::collection::vec(any::<u8>(), 0..20)),
             proptest::option::of(proptest::collection::vec(any::<u8>(), 0..20))),
            1..20),
        pid in any::<i64>(),
        epoch in any::<i16>(),
        seq in any::<i32>(),
        new_base in 0i64..i64::MAX / 2,
    ) {
        let mut builder = BatchBuilder::idempotent(pid, epoch, seq);
        for (ts, k, v) in &records {
            // Keep deltas within i64: Kafka timestamps are ms since epoch.
            builder.push(NewRecord::new(ts >> 2, k.as_deref(), v.as_deref()));
        }
        let batch = builder.build().with_assigned(new_base, 1);
        prop_assert_eq!(batch.validate(), Ok(()));
        prop_assert_eq!(batch.record_count() as usize, records.len());
        prop_assert_eq!(batch.base_offset(), new_base);
        let decoded: Vec<Record> = batch.records().collect::<Result<_, _>>().unwrap();
        prop_assert_eq!(decoded.len(), records.len());
        for (i, (r, (ts, k, v))) in decoded.iter().zip(&records).enumerate() {
            prop_assert_eq!(r.offset, new_base + i as i64);
            prop_assert_eq!(r.timestamp, ts >> 2);
            prop_assert_eq!(r.key.as_deref(), k.as_deref());
            prop_assert_eq!(r.value.as_deref(), v.as_deref());
        }
        let max_ts = records.iter().map(|(ts, _, _)| ts >> 2).max().unwrap();
        prop_assert_eq!(batch.max_timestamp(), max_ts);
    }
}
