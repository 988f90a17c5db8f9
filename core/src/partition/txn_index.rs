//! A segment's aborted-transactions index (`<base offset>.txnindex`): one
//! fixed-size entry per transaction aborted in the segment, in the order
//! their markers were written, in Kafka's layout (so the files read the same
//! as Kafka's):
//!
//! ```text
//! version i16 (0) | producer id i64 | first offset i64 | last offset i64 | last stable offset i64
//! ```
//!
//! Appended, never rewritten: a crash can leave a torn last entry, which a
//! reader drops (the marker it describes is then rebuilt from the log by
//! recovery, which replays the segment's markers).

use super::AbortedTxn;
use crate::deliberate_bugs::{planted, Bug};
use crate::record::{parse_end_txn_marker, ControlType, RecordBatch};

/// Bytes of one entry.
pub const ENTRY_BYTES: usize = 34;

/// The only entry version there is.
pub const ENTRY_VERSION: i16 = 0;

/// Why an index could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnIndexError {
    /// The entry at this byte position has a version we do not know.
    UnknownVersion { position: usize, version: i16 },
}

/// One entry in the index's layout.
pub fn encode_entry(a: &AbortedTxn) -> [u8; ENTRY_BYTES] {
    let mut out = [0u8; ENTRY_BYTES];
    out[0..2].copy_from_slice(&ENTRY_VERSION.to_be_bytes());
    out[2..10].copy_from_slice(&a.producer_id.to_be_bytes());
    out[10..18].copy_from_slice(&a.first_offset.to_be_bytes());
    out[18..26].copy_from_slice(&a.last_offset.to_be_bytes());
    out[26..34].copy_from_slice(&a.last_stable_offset.to_be_bytes());
    out
}

/// Reads an index file's content: every whole entry, in order, and the
/// number of trailing bytes of a torn last entry (dropped).
pub fn decode_index(bytes: &[u8]) -> Result<(Vec<AbortedTxn>, usize), TxnIndexError> {
    let whole = bytes.len() / ENTRY_BYTES;
    let mut out = Vec::with_capacity(whole);
    for (i, e) in bytes.chunks_exact(ENTRY_BYTES).enumerate() {
        let version = i16::from_be_bytes([e[0], e[1]]);
        if version != ENTRY_VERSION {
            return Err(TxnIndexError::UnknownVersion {
                position: i * ENTRY_BYTES,
                version,
            });
        }
        let at = |from: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&e[from..from + 8]);
            i64::from_be_bytes(b)
        };
        out.push(AbortedTxn {
            producer_id: at(2),
            first_offset: at(10),
            last_offset: at(18),
            last_stable_offset: at(26),
        });
    }
    Ok((out, bytes.len() % ENTRY_BYTES))
}

/// How many of a segment's entries, from the first, the broker can have
/// written: each names a marker inside the segment (`base..end`), after the
/// previous entry's, for a transaction that began before its marker (kaas
/// indexes only transactions with data on the partition, which precedes
/// the marker), of a producer kaas issued (ids start at 2^40, never 0). A crash can
/// leave a whole-sized last entry whose bytes are partly zeros (the file's
/// size reached the disk before its data); decoded, it would hide records
/// of its producer from read_committed readers (seed 41 of the simulator,
/// once its power cuts landed one operation later). It and everything
/// after it are not trusted. Their markers are past the replay start
/// (entries are made durable before a snapshot covers them), so recovery's
/// replay writes them again.
pub fn plausible_entries(entries: &[AbortedTxn], base: i64, end: i64) -> usize {
    if planted(Bug::TornTxnIndexTrusted) {
        return entries.len();
    }
    let mut previous: Option<i64> = None;
    entries
        .iter()
        .take_while(|a| {
            let ok = a.producer_id > 0
                && (0..a.last_offset).contains(&a.first_offset)
                && (base..end).contains(&a.last_offset)
                && previous.is_none_or(|p| a.last_offset > p);
            previous = Some(a.last_offset);
            ok
        })
        .count()
}

/// Whether `marker`, the batch the log holds at `entry`'s last offset,
/// is the ABORT marker of `entry`'s producer that the entry claims.
///
/// Plausibility ([`plausible_entries`]) cannot tell every torn entry: a
/// crash that zeroes the low bytes of the marker offset leaves a smaller
/// offset, still inside the segment and after the previous entry, and if
/// it lands below the replay start recovery would trust it
/// (`txn_index_entry_is_trusted`). Such an entry can only be in the
/// segment the replay starts in (its true marker, unsynced, was at or past
/// the replay start, and zeroing only lowers it), so recovery holds that
/// segment's trusted entries to their markers with this rule.
pub fn marker_confirms_entry(entry: &AbortedTxn, marker: &RecordBatch) -> bool {
    marker.base_offset() == entry.last_offset
        && marker.is_control()
        && marker.producer_id() == entry.producer_id
        && matches!(
            parse_end_txn_marker(marker),
            Ok(Some(m)) if m.control_type == ControlType::Abort
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn aborted(pid: i64, first: i64) -> AbortedTxn {
        AbortedTxn {
            producer_id: pid,
            first_offset: first,
            last_offset: first + 3,
            last_stable_offset: first + 4,
        }
    }

    #[test]
    fn an_entry_has_kafkas_layout() {
        let e = encode_entry(&aborted(0x0102, 7));
        assert_eq!(&e[0..2], &[0, 0], "version 0");
        assert_eq!(&e[2..10], &0x0102i64.to_be_bytes());
        assert_eq!(&e[10..18], &7i64.to_be_bytes());
        assert_eq!(&e[18..26], &10i64.to_be_bytes());
        assert_eq!(&e[26..34], &11i64.to_be_bytes());
    }

    #[test]
    fn a_torn_last_entry_is_dropped_and_counted() {
        let mut bytes = encode_entry(&aborted(1, 0)).to_vec();
        bytes.extend_from_slice(&encode_entry(&aborted(2, 10))[..20]);
        assert_eq!(decode_index(&bytes), Ok((vec![aborted(1, 0)], 20)));
    }

    #[test]
    fn an_unknown_entry_version_is_an_error() {
        let mut bytes = encode_entry(&aborted(1, 0)).to_vec();
        let mut second = encode_entry(&aborted(2, 10));
        second[1] = 9;
        bytes.extend_from_slice(&second);
        assert_eq!(
            decode_index(&bytes),
            Err(TxnIndexError::UnknownVersion {
                position: 34,
                version: 9
            })
        );
    }

    #[test]
    fn an_entry_partly_zeroed_by_a_crash_is_not_trusted() {
        let segment = [aborted(7, 100), aborted(7, 110), aborted(8, 120)];
        assert_eq!(plausible_entries(&segment, 100, 130), 3);
        // The last entry's offsets reached the disk as zeros.
        let mut bytes: Vec<u8> = segment.iter().flat_map(encode_entry).collect();
        bytes[2 * ENTRY_BYTES + 10..].fill(0);
        let (decoded, torn) = decode_index(&bytes).unwrap();
        assert_eq!(torn, 0, "a whole-sized entry");
        assert_eq!(plausible_entries(&decoded, 100, 130), 2);
        // Every rule: marker inside the segment, after the previous one,
        // transaction begun before its marker, a real producer.
        assert_eq!(
            plausible_entries(&[aborted(7, 90)], 100, 130),
            0,
            "marker before the segment"
        );
        assert_eq!(
            plausible_entries(&[aborted(7, 127)], 100, 130),
            0,
            "marker past its end"
        );
        assert_eq!(
            plausible_entries(&[aborted(7, 110), aborted(7, 105)], 100, 130),
            1
        );
        let backwards = AbortedTxn {
            first_offset: 120,
            last_offset: 110,
            ..aborted(7, 0)
        };
        assert_eq!(plausible_entries(&[backwards], 100, 130), 0);
        assert_eq!(plausible_entries(&[aborted(0, 100)], 100, 130), 0);
        // A first entry of the first segment with both offsets zeroed:
        // every other rule holds, but no transaction with data ends where
        // it began.
        let zeroed = AbortedTxn {
            first_offset: 0,
            last_offset: 0,
            last_stable_offset: 0,
            ..aborted(7, 0)
        };
        assert_eq!(plausible_entries(&[zeroed], 0, 130), 0);
        assert_eq!(plausible_entries(&[aborted(-1, 100)], 100, 130), 0);
    }

    #[test]
    fn a_trusted_entry_must_name_its_producers_abort_marker() {
        use crate::record::{build_control_batch, BatchBuilder, EndTxnMarker};
        let marker = |pid: i64, offset: i64, control_type| {
            build_control_batch(
                pid,
                0,
                0,
                EndTxnMarker {
                    control_type,
                    coordinator_epoch: 0,
                },
            )
            .with_assigned(offset, 0)
        };
        let entry = aborted(7, 100);
        assert!(marker_confirms_entry(
            &entry,
            &marker(7, 103, ControlType::Abort)
        ));
        assert!(!marker_confirms_entry(
            &entry,
            &marker(7, 103, ControlType::Commit)
        ));
        assert!(!marker_confirms_entry(
            &entry,
            &marker(8, 103, ControlType::Abort)
        ));
        assert!(!marker_confirms_entry(
            &entry,
            &marker(7, 102, ControlType::Abort)
        ));
        let data = BatchBuilder::transactional(7, 0, 0)
            .record(0, None, Some(b"v"))
            .build()
            .with_assigned(103, 0);
        assert!(!marker_confirms_entry(&entry, &data));
    }

    proptest! {
        #[test]
        fn entries_read_back_as_written(
            entries in proptest::collection::vec((any::<i64>(), any::<i64>(), any::<i64>(), any::<i64>()), 0..20)
        ) {
            let entries: Vec<AbortedTxn> = entries
                .into_iter()
                .map(|(producer_id, first_offset, last_offset, last_stable_offset)| AbortedTxn {
                    producer_id, first_offset, last_offset, last_stable_offset,
                })
                .collect();
            let bytes: Vec<u8> = entries.iter().flat_map(encode_entry).collect();
            prop_assert_eq!(decode_index(&bytes), Ok((entries, 0)));
        }

        #[test]
        fn any_bytes_decode_without_panicking(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode_index(&bytes);
        }
    }
}
