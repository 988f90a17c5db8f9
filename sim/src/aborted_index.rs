//! The aborted-transactions index, checked against the log it indexes.
//!
//! A read_committed consumer drops aborted records by the list a fetch
//! answer carries, which the broker takes from its aborted index (the
//! `.txnindex` files, trusted or rebuilt by recovery), not from the log.
//! An entry the index holds wrongly (a torn one read as valid, a rebuilt
//! one that names the wrong first offset) hides records of its producer
//! from some reader, and one it lacks shows aborted records; which reader
//! meets it depends on where fetches happen to start, so the workloads'
//! reads show only some of them. At the end of a seed every partition is
//! held to the index its own batches imply ([`expected_entries`]), entry
//! for entry: an fsck of the index against the log, as FoundationDB's
//! simulation ends with a consistency check of what the storage servers
//! hold.
//!
//! The derivation is this checker's own, not the broker's replay: a
//! producer's transaction on a partition begins at its first transactional
//! data batch after its previous marker; an ABORT marker that closes one
//! is an entry (producer, first offset, marker offset, and the last stable
//! offset once it closed: the first offset of the earliest transaction
//! still open, else the offset after the marker); a marker that closes
//! nothing is not indexed, as Kafka emits no completed transaction for it.

use kaas_core::partition::AbortedTxn;
use kaas_core::record::{parse_end_txn_marker, split_batches, ControlType, RecordBatch};
use kaas_net::log::PartitionLog;
use std::collections::BTreeMap;

/// Reads of the log are this large: a batch larger than this is still
/// returned whole.
const READ_BYTES: usize = 1 << 20;

/// The aborted-index entries a log whose batches are `batches` (in offset
/// order) must hold, oldest marker first.
pub fn expected_entries(
    batches: impl IntoIterator<Item = RecordBatch>,
) -> Result<Vec<AbortedTxn>, String> {
    // Producer id -> first offset of its open transaction.
    let mut open: BTreeMap<i64, i64> = BTreeMap::new();
    let mut entries = Vec::new();
    for batch in batches {
        if !batch.is_transactional() {
            continue;
        }
        let pid = batch.producer_id();
        if !batch.is_control() {
            open.entry(pid).or_insert(batch.base_offset());
            continue;
        }
        let marker = parse_end_txn_marker(&batch)
            .map_err(|e| format!("control batch at {}: {e:?}", batch.base_offset()))?;
        let Some(marker) = marker else {
            continue;
        };
        let Some(first_offset) = open.remove(&pid) else {
            continue;
        };
        if marker.control_type == ControlType::Abort {
            entries.push(AbortedTxn {
                producer_id: pid,
                first_offset,
                last_offset: batch.base_offset(),
                last_stable_offset: open
                    .values()
                    .min()
                    .copied()
                    .unwrap_or(batch.base_offset() + 1),
            });
        }
    }
    Ok(entries)
}

/// Every batch of `log` from its start to its end, as stored.
fn all_batches(log: &PartitionLog) -> Result<Vec<RecordBatch>, String> {
    let (mut offset, end) = (log.log_start_offset(), log.end_offset());
    let mut batches = Vec::new();
    while offset < end {
        let read = log
            .read(offset, READ_BYTES, end)
            .map_err(|e| format!("read at {offset}: {e:?}"))?;
        if read.next_offset <= offset {
            return Err(format!(
                "a read at {offset} returned nothing below the end {end}"
            ));
        }
        batches.extend(split_batches(read.records).filter(|b| b.last_offset() >= offset));
        offset = read.next_offset;
    }
    Ok(batches)
}

/// Holds `log`'s aborted index (`PartitionLog::aborted_index`, what its
/// read_committed fetches answer from) to the one its batches imply.
/// Returns how many entries were compared, or what differs.
pub fn check(log: &PartitionLog) -> Result<usize, String> {
    let expected = expected_entries(all_batches(log)?)?;
    let held = log.aborted_index();
    if held == expected {
        return Ok(held.len());
    }
    let wrong: Vec<&AbortedTxn> = held.iter().filter(|e| !expected.contains(e)).collect();
    let missing: Vec<&AbortedTxn> = expected.iter().filter(|e| !held.contains(e)).collect();
    Err(format!(
        "the aborted index does not match the log's own markers: it holds {} entries the batches do not imply {wrong:?}, and lacks {} they do {missing:?} (held {}, implied {})",
        wrong.len(),
        missing.len(),
        held.len(),
        expected.len()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kaas_core::record::{build_control_batch, BatchBuilder, EndTxnMarker};

    fn data(pid: i64, offset: i64) -> RecordBatch {
        BatchBuilder::transactional(pid, 0, 0)
            .with_base_offset(offset)
            .record(0, None, Some(b"v"))
            .build()
    }

    fn marker(pid: i64, offset: i64, control_type: ControlType) -> RecordBatch {
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
    }

    /// The check over a real log: the index the broker appended is the
    /// one the batches imply; an entry nothing in the log implies (a torn
    /// one trusted, say) fails it, and so does a missing one.
    #[test]
    fn a_log_whose_index_names_an_abort_its_batches_do_not_imply_fails_the_check() {
        use crate::volume::SimVolume;
        use kaas_net::log::LogConfig;
        use kaas_net::volume::Volume;
        use std::sync::Arc;
        let volume: Arc<dyn Volume> = Arc::new(SimVolume::new());
        let dir = kaas_core::layout::partition_dir("t", 0);
        let mut log =
            PartitionLog::open(volume, dir, LogConfig::default(), 0).expect("open the log");
        for batch in [
            data(7, 0),
            data(7, 0),
            marker(7, 0, ControlType::Abort),
            data(7, 0),
            marker(7, 0, ControlType::Commit),
        ] {
            log.append_batch(&batch).expect("append");
        }
        let real = AbortedTxn {
            producer_id: 7,
            first_offset: 0,
            last_offset: 2,
            last_stable_offset: 3,
        };
        assert_eq!(check(&log).map_err(|_| ()), Err(()), "the entry is missing");
        log.append_aborted(real).expect("index the abort");
        assert_eq!(check(&log), Ok(1));
        log.append_aborted(AbortedTxn {
            first_offset: 0,
            last_offset: 0,
            last_stable_offset: 0,
            ..real
        })
        .expect("index a torn entry");
        let e = check(&log).expect_err("a torn entry");
        assert!(
            e.contains("holds 1 entries the batches do not imply"),
            "{e}"
        );
    }

    #[test]
    fn an_abort_closing_a_transaction_is_an_entry_and_a_commit_or_an_empty_marker_is_not() {
        let batches = vec![
            data(7, 0),
            data(8, 1),
            data(7, 2),
            marker(7, 3, ControlType::Abort),
            marker(8, 4, ControlType::Commit),
            // Nothing open for 7: no entry.
            marker(7, 5, ControlType::Abort),
            data(7, 6),
            marker(7, 7, ControlType::Abort),
        ];
        assert_eq!(
            expected_entries(batches),
            Ok(vec![
                // 8's transaction, begun at 1, is still open when 7's ends.
                AbortedTxn {
                    producer_id: 7,
                    first_offset: 0,
                    last_offset: 3,
                    last_stable_offset: 1
                },
                AbortedTxn {
                    producer_id: 7,
                    first_offset: 6,
                    last_offset: 7,
                    last_stable_offset: 8
                },
            ])
        );
    }
}
