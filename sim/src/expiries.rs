//! What the checkers know of partitions forgetting idle producers
//! (`producer.id.expiration.ms`, drawn by `SimParams::with_producer_expiry`).
//!
//! Past an expiry a partition has no state for the producer, so, as in
//! Kafka, a retry of a batch it appended before is appended again (at
//! sequence 0), or refused with UNKNOWN_PRODUCER_ID (above 0), and a late
//! copy from an older epoch is taken as new. Each of these is a violation
//! unless the partition really forgot that producer in between; the broker
//! records each expiry with the partition's log end at that moment
//! (`kaas_core::coverage::producer_expired`), and these rules read it. Pure
//! functions over the record, unit-tested without madsim.

use kaas_core::coverage::ProducerExpiry;
use kaas_core::protocol::ErrorCode;

/// Whether `topic`'s `partition` forgot `producer_id` at some point.
pub fn forgot(expiries: &[ProducerExpiry], topic: &str, partition: i32, producer_id: i64) -> bool {
    expiries
        .iter()
        .any(|e| e.topic == topic && e.partition == partition && e.producer_id == producer_id)
}

/// Whether `topic`'s `partition` forgot `producer_id` after a batch of it
/// was appended at `first` and before one was appended at `second`: the
/// only way one batch of an idempotent producer is in the log twice.
pub fn forgot_between(
    expiries: &[ProducerExpiry],
    topic: &str,
    partition: i32,
    producer_id: i64,
    first: i64,
    second: i64,
) -> bool {
    expiries.iter().any(|e| {
        e.topic == topic
            && e.partition == partition
            && e.producer_id == producer_id
            && first < e.log_end
            && e.log_end <= second
    })
}

/// Whether a sequence error for a producer's *first* unacknowledged batch
/// on a partition is explained by an expiry there rather than by lost
/// acknowledged state: UNKNOWN_PRODUCER_ID once the partition `forgot` the
/// producer, or OUT_OF_ORDER_SEQUENCE_NUMBER once a late copy of an older
/// epoch's first batch was accepted as new after such an expiry
/// (`stale_copy_took_over`), leaving the partition at that older epoch, where
/// the current epoch's next sequence cannot follow (Kafka refuses it alike).
pub fn sequence_error_explained(code: i16, forgot: bool, stale_copy_took_over: bool) -> bool {
    (code == ErrorCode::UnknownProducerId.code() && forgot)
        || (code == ErrorCode::OutOfOrderSequenceNumber.code() && stale_copy_took_over)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expiry(partition: i32, producer_id: i64, log_end: i64) -> ProducerExpiry {
        ProducerExpiry {
            topic: "sim".into(),
            partition,
            producer_id,
            log_end,
        }
    }

    #[test]
    fn a_second_copy_is_allowed_only_past_an_expiry_between_the_two() {
        let expiries = [expiry(1, 7, 40)];
        assert!(forgot_between(&expiries, "sim", 1, 7, 10, 45));
        assert!(forgot_between(&expiries, "sim", 1, 7, 39, 40));
        // Both copies before the expiry, or both after it: a broker that
        // lost the producer's state some other way.
        assert!(!forgot_between(&expiries, "sim", 1, 7, 10, 30));
        assert!(!forgot_between(&expiries, "sim", 1, 7, 40, 60));
        // Another producer, partition or topic forgot nothing of this one.
        assert!(!forgot_between(&expiries, "sim", 1, 8, 10, 45));
        assert!(!forgot_between(&expiries, "sim", 2, 7, 10, 45));
        assert!(!forgot_between(&expiries, "simtx", 1, 7, 10, 45));
        assert!(forgot(&expiries, "sim", 1, 7));
        assert!(!forgot(&expiries, "sim", 0, 7));
    }

    /// Seed 884: the partition forgot the producer, a late epoch-0 copy was
    /// then accepted as new, and the epoch-1 batch after it was refused
    /// OUT_OF_ORDER_SEQUENCE_NUMBER, which is what Kafka answers too.
    #[test]
    fn a_sequence_error_is_explained_only_by_the_expiry_that_causes_it() {
        let unknown = ErrorCode::UnknownProducerId.code();
        let out_of_order = ErrorCode::OutOfOrderSequenceNumber.code();
        assert!(sequence_error_explained(unknown, true, false));
        assert!(sequence_error_explained(out_of_order, true, true));
        // Without the expiry, or with only the expiry, the broker lost state.
        assert!(!sequence_error_explained(unknown, false, false));
        assert!(!sequence_error_explained(out_of_order, true, false));
        assert!(!sequence_error_explained(out_of_order, false, false));
        // A late copy that took over leaves a known (old) epoch behind, not
        // an unknown producer; nor does it explain other errors.
        assert!(!sequence_error_explained(unknown, false, true));
        assert!(!sequence_error_explained(
            ErrorCode::InvalidProducerEpoch.code(),
            true,
            true
        ));
    }
}
