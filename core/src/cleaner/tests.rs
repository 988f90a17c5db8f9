//! One test per cleaning rule, named after it.

use std::ops::Range;

use bytes::Bytes;

use super::*;
use crate::compression::MAX_DECOMPRESSED_BATCH_BYTES;
use crate::partition::AbortedTxn;
use crate::record::{
    build_control_batch, reseal, BatchBuilder, Compression, ControlType, EndTxnMarker, RecordBatch,
};

const NOW: i64 = 1_000_000;
const RETENTION: i64 = 5_000;
const TIME: PassTime = PassTime {
    now_ms: NOW,
    delete_retention_ms: RETENTION,
};

type Rec<'a> = (Option<&'a str>, Option<&'a str>);

/// A log under construction: offsets assigned densely, record timestamps
/// `1000 + offset`.
#[derive(Default)]
struct Log {
    batches: Vec<RecordBatch>,
    next: i64,
}

impl Log {
    fn push(&mut self, builder: BatchBuilder, recs: &[Rec]) -> i64 {
        let base = self.next;
        let mut builder = builder.with_base_offset(base);
        for (i, (k, v)) in recs.iter().enumerate() {
            let ts = 1_000 + base + i as i64;
            builder = builder.record(ts, k.map(str::as_bytes), v.map(str::as_bytes));
        }
        let batch = builder.build();
        self.next = batch.next_offset();
        self.batches.push(batch);
        base
    }

    fn data(&mut self, recs: &[Rec]) -> i64 {
        self.push(BatchBuilder::new(), recs)
    }

    fn idempotent(&mut self, pid: i64, recs: &[Rec]) -> i64 {
        self.push(BatchBuilder::idempotent(pid, 0, 0), recs)
    }

    fn txn(&mut self, pid: i64, recs: &[Rec]) -> i64 {
        self.push(BatchBuilder::transactional(pid, 0, 0), recs)
    }

    fn marker(&mut self, pid: i64, control_type: ControlType) -> i64 {
        self.marker_at_epoch(pid, 0, control_type)
    }

    fn marker_at_epoch(&mut self, pid: i64, epoch: i16, control_type: ControlType) -> i64 {
        let marker = EndTxnMarker {
            control_type,
            coordinator_epoch: 0,
        };
        let base = self.next;
        let batch = build_control_batch(pid, epoch, 1_000 + base, marker).with_assigned(base, 0);
        self.next = batch.next_offset();
        self.batches.push(batch);
        base
    }

    /// A batch compressed with `codec`, as a producer sends it.
    fn zipped(&mut self, codec: Compression, builder: BatchBuilder, recs: &[Rec]) -> i64 {
        let base = self.push(builder, recs);
        let last = self.batches.pop().unwrap();
        self.batches.push(last.compressed_with(codec).unwrap());
        base
    }

    /// A batch with the gzip bit set over uncompressed records: it does
    /// not decompress, so its records cannot be read.
    fn compressed(&mut self, builder: BatchBuilder, recs: &[Rec]) -> i64 {
        let base = self.push(builder, recs);
        let last = self.batches.pop().unwrap();
        let mut bytes = last.as_bytes().to_vec();
        bytes[22] |= 0x01;
        self.batches.push(RecordBatch::new(reseal(bytes)).unwrap());
        base
    }

    fn end(&self) -> i64 {
        self.next
    }
}

fn aborted(pid: i64, first_offset: i64, last_offset: i64) -> AbortedTxn {
    AbortedTxn {
        producer_id: pid,
        first_offset,
        last_offset,
        last_stable_offset: last_offset + 1,
    }
}

fn views(batches: &[RecordBatch]) -> Vec<BatchView> {
    batches.iter().map(|b| BatchView::of(b).unwrap()).collect()
}

fn build_map(
    batches: &[RecordBatch],
    dirty: Range<i64>,
    budget: usize,
    ab: &[AbortedTxn],
) -> KeyMap {
    let mut map = KeyMap::with_budget(budget, dirty, ab);
    for view in views(batches) {
        if map.add(&view) == MapStep::Full {
            break;
        }
    }
    map
}

/// One pass as the driver runs it.
struct Pass {
    fates: Vec<Fate>,
    out: Vec<RecordBatch>,
    end: i64,
    summary: CleanSummary,
    aborted_to_index: Vec<AbortedTxn>,
}

fn pass_with(
    batches: &[RecordBatch],
    first_dirty: i64,
    budget: usize,
    ab: &[AbortedTxn],
    producers: &ActiveProducers,
    time: PassTime,
) -> Pass {
    let end = batches.last().map_or(first_dirty, |b| b.next_offset());
    let map = build_map(batches, first_dirty..end, budget, ab);
    let mut decider = Decider::new(map, ab, producers.clone(), time);
    let mut fates = Vec::new();
    let mut out = Vec::new();
    for batch in batches {
        let fate = decider.next(&BatchView::of(batch).unwrap());
        if let Some(written) = fate.apply(batch).unwrap() {
            assert_eq!(written.validate(), Ok(()));
            out.push(written);
        }
        fates.push(fate);
    }
    Pass {
        fates,
        out,
        end: decider.map().end(),
        summary: decider.summary().clone(),
        aborted_to_index: decider.aborted_to_index().to_vec(),
    }
}

fn pass(batches: &[RecordBatch], ab: &[AbortedTxn], time: PassTime) -> Pass {
    pass_with(batches, 0, usize::MAX, ab, &ActiveProducers::new(), time)
}

fn at(now_ms: i64) -> PassTime {
    PassTime {
        now_ms,
        delete_retention_ms: RETENTION,
    }
}

/// `(offset, key, value)` of every record of `batches`.
fn contents(batches: &[RecordBatch]) -> Vec<(i64, Option<String>, Option<String>)> {
    let text = |b: Option<Bytes>| b.map(|b| String::from_utf8(b.to_vec()).unwrap());
    batches
        .iter()
        .filter(|b| !b.is_control())
        .map(|b| b.decompressed(MAX_DECOMPRESSED_BATCH_BYTES).unwrap())
        .flat_map(|b| b.records().map(|r| r.unwrap()).collect::<Vec<_>>())
        .map(|r| (r.offset, text(r.key), text(r.value)))
        .collect()
}

fn row(offset: i64, key: &str, value: Option<&str>) -> (i64, Option<String>, Option<String>) {
    (offset, Some(key.to_owned()), value.map(str::to_owned))
}

fn offsets_of(batches: &[RecordBatch]) -> Vec<(i64, i64)> {
    batches
        .iter()
        .map(|b| (b.base_offset(), b.last_offset()))
        .collect()
}

// ------------------------------------------------------------ the key map

#[test]
fn the_key_map_holds_the_latest_offset_of_each_key() {
    let mut log = Log::default();
    log.data(&[(Some("a"), Some("1")), (Some("b"), Some("2"))]);
    log.data(&[(Some("a"), Some("3")), (None, Some("x"))]);
    let map = build_map(&log.batches, 0..log.end(), usize::MAX, &[]);
    assert_eq!(map.get(b"a"), Some(2));
    assert_eq!(map.get(b"b"), Some(1));
    assert_eq!(map.get(b"c"), None);
    assert_eq!((map.len(), map.end(), map.is_full()), (2, 4, false));
}

#[test]
fn the_key_map_learns_nothing_from_aborted_or_control_batches() {
    let mut log = Log::default();
    let first = log.txn(7, &[(Some("a"), Some("aborted"))]);
    let m = log.marker(7, ControlType::Abort);
    log.txn(7, &[(Some("b"), Some("committed"))]);
    log.marker(7, ControlType::Commit);
    let map = build_map(
        &log.batches,
        0..log.end(),
        usize::MAX,
        &[aborted(7, first, m)],
    );
    assert_eq!(map.get(b"a"), None);
    assert_eq!(map.get(b"b"), Some(2));
    assert_eq!(map.len(), 1, "marker keys are not data keys");
    assert_eq!(map.end(), log.end());
}

#[test]
fn the_key_map_ignores_records_before_the_first_dirty_offset() {
    let mut log = Log::default();
    log.data(&[(Some("a"), Some("1")), (Some("b"), Some("2"))]);
    let map = build_map(&log.batches, 1..log.end(), usize::MAX, &[]);
    assert_eq!(map.get(b"a"), None);
    assert_eq!(map.get(b"b"), Some(1));
}

#[test]
fn the_key_map_ignores_batches_outside_the_dirty_section() {
    let mut log = Log::default();
    log.data(&[(Some("a"), Some("1"))]);
    log.data(&[(Some("b"), Some("2"))]);
    log.data(&[(Some("c"), Some("3"))]);
    let v = views(&log.batches);
    let mut map = KeyMap::with_budget(usize::MAX, 1..2, &[]);
    assert_eq!(map.add(&v[0]), MapStep::Outside);
    assert_eq!(map.add(&v[1]), MapStep::Mapped);
    assert_eq!(map.add(&v[2]), MapStep::Outside);
    assert_eq!((map.get(b"b"), map.len(), map.end()), (Some(1), 1, 2));
}

#[test]
fn a_full_key_map_stops_at_a_batch_boundary() {
    let mut log = Log::default();
    log.data(&[(Some("a"), Some("1")), (Some("b"), Some("2"))]);
    log.data(&[(Some("a"), Some("3"))]); // no new key: free
    log.data(&[(Some("c"), Some("4")), (Some("d"), Some("5"))]);
    log.data(&[(Some("e"), Some("6"))]);
    let two_keys = 2 * (1 + ENTRY_OVERHEAD_BYTES);
    let v = views(&log.batches);
    let mut map = KeyMap::with_budget(two_keys + 1, 0..log.end(), &[]);
    assert_eq!(map.add(&v[0]), MapStep::Mapped);
    assert_eq!(map.add(&v[1]), MapStep::Mapped);
    assert_eq!(map.add(&v[2]), MapStep::Full, "c and d do not both fit");
    assert_eq!(map.add(&v[3]), MapStep::Full);
    assert_eq!(
        map.end(),
        3,
        "the round stops where the batch that did not fit begins"
    );
    assert_eq!(map.get(b"c"), None, "nothing of a batch that did not fit");
    assert_eq!(map.bytes_used(), two_keys);
    assert!(map.is_full());
}

#[test]
fn a_key_map_always_takes_its_first_batch() {
    let mut log = Log::default();
    log.data(&[(Some("a"), Some("1")), (Some("b"), Some("2"))]);
    log.data(&[(Some("c"), Some("3"))]);
    let map = build_map(&log.batches, 0..log.end(), 0, &[]);
    assert_eq!(
        (map.len(), map.end()),
        (2, 2),
        "a round always makes progress"
    );
}

// ------------------------------------------------------------ records

#[test]
fn the_last_record_of_each_key_survives() {
    let mut log = Log::default();
    log.data(&[(Some("a"), Some("1")), (Some("b"), Some("2"))]);
    log.data(&[(Some("a"), Some("3")), (Some("c"), Some("4"))]);
    log.data(&[(Some("b"), Some("5"))]);
    let p = pass(&log.batches, &[], TIME);
    assert_eq!(
        contents(&p.out),
        vec![
            row(2, "a", Some("3")),
            row(3, "c", Some("4")),
            row(4, "b", Some("5"))
        ]
    );
    assert_eq!(p.fates[0], Fate::Drop);
    assert_eq!(p.fates[2], Fate::KeepWhole);
}

#[test]
fn a_key_the_map_does_not_know_survives() {
    // Offsets 0..2 are clean already; the dirty section [2, 3) only has b.
    let mut log = Log::default();
    log.data(&[(Some("a"), Some("1")), (Some("b"), Some("2"))]);
    log.data(&[(Some("b"), Some("3"))]);
    let p = pass_with(
        &log.batches,
        2,
        usize::MAX,
        &[],
        &ActiveProducers::new(),
        TIME,
    );
    assert_eq!(
        contents(&p.out),
        vec![row(0, "a", Some("1")), row(2, "b", Some("3"))]
    );
}

#[test]
fn records_without_a_key_are_removed() {
    let mut log = Log::default();
    log.data(&[(None, Some("x")), (Some("a"), Some("1")), (None, None)]);
    let p = pass(&log.batches, &[], TIME);
    assert_eq!(contents(&p.out), vec![row(1, "a", Some("1"))]);
    assert_eq!(p.summary.keyless_removed, 2);
}

#[test]
fn batches_past_the_mapped_section_are_untouched() {
    let mut log = Log::default();
    log.data(&[(Some("a"), Some("1"))]);
    log.data(&[(Some("b"), Some("2")), (Some("c"), Some("3"))]);
    log.data(&[(Some("a"), Some("4")), (None, Some("keyless"))]);
    // A budget of one key: the map takes the first batch only.
    let p = pass_with(&log.batches, 0, 1, &[], &ActiveProducers::new(), TIME);
    assert_eq!(p.end, 1);
    assert_eq!(p.fates[1..], [Fate::KeepWhole, Fate::KeepWhole]);
    assert_eq!(p.out[1..], log.batches[1..]);
}

#[test]
fn a_batch_whose_records_all_stay_is_kept_whole() {
    let mut log = Log::default();
    log.data(&[(Some("a"), Some("1")), (Some("b"), Some("2"))]);
    let p = pass(&log.batches, &[], TIME);
    assert_eq!(p.fates, vec![Fate::KeepWhole]);
    assert_eq!(p.out, log.batches);
}

#[test]
fn retained_records_keep_their_offsets_and_the_batch_its_sequence_range() {
    let mut log = Log::default();
    log.idempotent(
        4,
        &[
            (Some("a"), Some("1")),
            (Some("b"), Some("2")),
            (Some("a"), Some("3")),
            (Some("b"), Some("4")),
            (Some("c"), Some("5")),
        ],
    );
    log.data(&[(Some("c"), Some("6"))]);
    let p = pass(&log.batches, &[], TIME);
    assert_eq!(
        p.fates[0],
        Fate::Rewrite {
            keep: vec![false, false, true, true, false],
            new_delete_horizon: None
        }
    );
    let out = &p.out[0];
    let original = &log.batches[0];
    assert_eq!((out.base_offset(), out.last_offset()), (0, 4));
    assert_eq!(out.last_sequence(), original.last_sequence());
    assert_eq!(out.record_count(), 2);
    let kept: Vec<_> = out.records().map(|r| r.unwrap()).collect();
    assert_eq!((kept[0].offset, kept[0].timestamp), (2, 1_002));
    assert_eq!((kept[1].offset, kept[1].timestamp), (3, 1_003));
    assert_eq!(out.max_timestamp(), 1_003);
}

// ------------------------------------------------------------ tombstones

#[test]
fn a_batch_first_rewritten_with_a_tombstone_gets_a_delete_horizon() {
    let mut log = Log::default();
    log.data(&[(Some("a"), Some("1"))]);
    log.data(&[(Some("a"), None), (Some("b"), Some("2"))]);
    let p = pass(&log.batches, &[], TIME);
    assert_eq!(
        p.fates[1],
        Fate::Rewrite {
            keep: vec![true, true],
            new_delete_horizon: Some(NOW + RETENTION)
        }
    );
    let out = &p.out[0];
    assert_eq!(out.delete_horizon_ms(), Some(NOW + RETENTION));
    let stamps: Vec<_> = out.records().map(|r| r.unwrap().timestamp).collect();
    assert_eq!(
        stamps,
        vec![1_001, 1_002],
        "timestamps survive the new base"
    );
}

#[test]
fn a_tombstone_survives_until_its_delete_horizon() {
    let mut log = Log::default();
    log.data(&[(Some("a"), Some("1"))]);
    log.data(&[(Some("a"), None)]);
    let first = pass(&log.batches, &[], TIME);
    assert_eq!(contents(&first.out), vec![row(1, "a", None)]);
    let again = pass(&first.out, &[], at(NOW + RETENTION - 1));
    assert_eq!(contents(&again.out), vec![row(1, "a", None)]);
    assert_eq!(
        again.fates,
        vec![Fate::KeepWhole],
        "the horizon is set once"
    );
}

#[test]
fn a_tombstone_goes_once_its_delete_horizon_has_passed() {
    let mut log = Log::default();
    log.data(&[(Some("a"), None), (Some("b"), Some("2"))]);
    log.data(&[(Some("c"), None)]);
    let first = pass(&log.batches, &[], TIME);
    let later = pass(&first.out, &[], at(NOW + RETENTION));
    assert_eq!(contents(&later.out), vec![row(1, "b", Some("2"))]);
    assert_eq!(later.summary.tombstones_removed, 2);
    // The rewritten batch keeps the horizon its tombstone was judged by.
    assert_eq!(later.out[0].delete_horizon_ms(), Some(NOW + RETENTION));
}

// ------------------------------------------------------------ transactions

#[test]
fn aborted_transaction_batches_are_discarded() {
    let mut log = Log::default();
    let first = log.txn(7, &[(Some("a"), Some("aborted"))]);
    log.data(&[(Some("b"), Some("plain"))]);
    log.txn(7, &[(Some("c"), Some("aborted"))]);
    let m = log.marker(7, ControlType::Abort);
    log.data(&[(Some("z"), Some("end"))]);
    let p = pass(&log.batches, &[aborted(7, first, m)], TIME);
    assert_eq!(
        contents(&p.out),
        vec![row(1, "b", Some("plain")), row(4, "z", Some("end"))]
    );
    assert_eq!(p.summary.aborted_removed, 2);
}

#[test]
fn committed_transaction_records_are_compacted_like_any_other() {
    let mut log = Log::default();
    log.txn(7, &[(Some("a"), Some("1")), (Some("b"), Some("2"))]);
    log.marker(7, ControlType::Commit);
    log.data(&[(Some("a"), Some("3"))]);
    let p = pass(&log.batches, &[], TIME);
    assert_eq!(
        contents(&p.out),
        vec![row(1, "b", Some("2")), row(3, "a", Some("3"))]
    );
}

#[test]
fn a_commit_marker_stays_while_its_transaction_has_data() {
    let mut log = Log::default();
    log.txn(7, &[(Some("a"), Some("1"))]);
    log.marker(7, ControlType::Commit);
    log.data(&[(Some("z"), Some("end"))]);
    let p = pass(&log.batches, &[], TIME);
    assert_eq!(p.fates[1], Fate::KeepWhole, "no horizon while data remains");
}

#[test]
fn a_commit_marker_of_an_empty_transaction_gets_a_horizon_then_goes() {
    let mut log = Log::default();
    log.txn(7, &[(Some("a"), Some("1"))]);
    log.marker(7, ControlType::Commit);
    log.data(&[(Some("a"), Some("2"))]);
    // Pass 1 removes the transaction's only record; its batch was still
    // met in this pass, so the marker stays as it is.
    let p1 = pass(&log.batches, &[], TIME);
    assert_eq!(p1.fates[..2], [Fate::Drop, Fate::KeepWhole]);
    // Pass 2 finds the transaction empty: the marker gets its horizon.
    let p2 = pass(&p1.out, &[], TIME);
    assert_eq!(
        p2.fates[0],
        Fate::Rewrite {
            keep: vec![true],
            new_delete_horizon: Some(NOW + RETENTION)
        }
    );
    assert_eq!(p2.out[0].delete_horizon_ms(), Some(NOW + RETENTION));
    // Before the horizon it stays; at it, it goes.
    let p3 = pass(&p2.out, &[], at(NOW + RETENTION - 1));
    assert_eq!(p3.fates[0], Fate::KeepWhole);
    let p4 = pass(&p2.out, &[], at(NOW + RETENTION));
    assert_eq!(p4.fates[0], Fate::Drop);
    assert_eq!(p4.summary.markers_removed, 1);
}

#[test]
fn an_abort_marker_stays_in_the_pass_that_removes_its_data() {
    let mut log = Log::default();
    let first = log.txn(7, &[(Some("a"), Some("1"))]);
    let m = log.marker(7, ControlType::Abort);
    log.data(&[(Some("z"), Some("end"))]);
    let txn = aborted(7, first, m);
    let p = pass(&log.batches, &[txn], TIME);
    assert_eq!(p.fates[..2], [Fate::Drop, Fate::KeepWhole]);
    assert_eq!(p.aborted_to_index, vec![txn], "its data was still there");
}

/// `decide::marker_may_go`: an ABORT marker outlives its data for good,
/// since the aborted index that names its transaction is not rebuilt by
/// cleaning (Kafka drops both after the delete horizon).
#[test]
fn an_abort_marker_stays_after_its_data_is_gone() {
    let mut log = Log::default();
    let first = log.txn(7, &[(Some("a"), Some("1"))]);
    let m = log.marker(7, ControlType::Abort);
    log.data(&[(Some("z"), Some("end"))]);
    let ab = [aborted(7, first, m)];
    let p1 = pass(&log.batches, &ab, TIME);
    let p2 = pass(&p1.out, &ab, TIME);
    assert_eq!(p2.fates[0], Fate::KeepWhole, "no horizon to wait for");
    assert!(
        p2.aborted_to_index.is_empty(),
        "no aborted data left to filter"
    );
    let p3 = pass(&p2.out, &ab, at(NOW + RETENTION));
    assert_eq!(p3.fates[0], Fate::KeepWhole);
    assert_eq!(p3.out.len(), 2, "the marker and the last record");
    assert_eq!(contents(&p3.out), vec![row(2, "z", Some("end"))]);
    assert!(!marker_may_go(Some(ControlType::Abort)));
    assert!(marker_may_go(Some(ControlType::Commit)));
}

#[test]
fn an_empty_control_batch_is_discarded() {
    let mut log = Log::default();
    log.marker(7, ControlType::Commit);
    log.data(&[(Some("z"), Some("end"))]);
    log.batches[0] = log.batches[0].empty_header();
    let p = pass(&log.batches, &[], TIME);
    assert_eq!(p.fates[0], Fate::Drop);
}

#[test]
fn a_control_batch_of_unknown_type_is_kept() {
    let mut log = Log::default();
    log.marker(7, ControlType::Other(3));
    log.data(&[(Some("z"), Some("end"))]);
    let p = pass(&log.batches, &[], at(i64::MAX));
    assert_eq!(p.fates[0], Fate::KeepWhole);
}

#[test]
fn an_aborted_entry_that_ended_before_a_batch_does_not_abort_it() {
    // The aborted index still lists a transaction whose marker an earlier
    // pass removed; the producer's later committed data must stay.
    let mut log = Log::default();
    log.data(&[(Some("x"), Some("0"))]);
    let later = log.txn(7, &[(Some("a"), Some("committed"))]);
    log.marker(7, ControlType::Commit);
    let stale = aborted(7, 0, later - 1);
    let p = pass(&log.batches, &[stale], TIME);
    assert_eq!(
        contents(&p.out),
        vec![row(0, "x", Some("0")), row(1, "a", Some("committed"))]
    );
}

#[test]
fn any_control_batch_ends_its_producers_transaction() {
    // An aborted transaction closed by an emptied marker: the producer's
    // next transaction, committed, is not taken for aborted.
    let mut log = Log::default();
    let first = log.txn(7, &[(Some("a"), Some("aborted"))]);
    let m = log.marker(7, ControlType::Abort);
    log.txn(7, &[(Some("b"), Some("committed"))]);
    log.marker(7, ControlType::Commit);
    log.batches[1] = log.batches[1].empty_header();
    // The entry claims the transaction runs on: only the marker ends it.
    let p = pass(&log.batches, &[aborted(7, first, m + 10)], TIME);
    assert_eq!(contents(&p.out), vec![row(2, "b", Some("committed"))]);
}

// ------------------------------------------------------------ producer state

#[test]
fn the_last_batch_of_an_active_producer_is_kept_empty() {
    let mut log = Log::default();
    log.idempotent(4, &[(Some("a"), Some("1")), (Some("b"), Some("2"))]);
    log.data(&[(Some("a"), Some("3")), (Some("b"), Some("4"))]);
    let mut producers = ActiveProducers::new();
    producers.insert(
        4,
        ProducerLast {
            last_data_offset: Some(1),
            epoch: 0,
        },
    );
    let p = pass_with(&log.batches, 0, usize::MAX, &[], &producers, TIME);
    assert_eq!(p.fates[0], Fate::KeepEmpty);
    let empty = &p.out[0];
    assert_eq!(empty.record_count(), 0);
    assert_eq!((empty.base_offset(), empty.last_offset()), (0, 1));
    assert_eq!(empty.last_sequence(), log.batches[0].last_sequence());
    // Without the producer it goes.
    let p = pass(&log.batches, &[], TIME);
    assert_eq!(p.fates[0], Fate::Drop);
}

#[test]
fn the_last_marker_of_an_active_producer_without_data_is_kept_empty() {
    let mut log = Log::default();
    log.marker_at_epoch(7, 3, ControlType::Commit);
    log.marker_at_epoch(7, 2, ControlType::Commit);
    log.data(&[(Some("z"), Some("end"))]);
    // Give both markers a horizon that has passed.
    let p1 = pass(&log.batches, &[], TIME);
    let later = at(NOW + RETENTION);
    let mut producers = ActiveProducers::new();
    producers.insert(
        7,
        ProducerLast {
            last_data_offset: None,
            epoch: 3,
        },
    );
    let p = pass_with(&p1.out, 0, usize::MAX, &[], &producers, later);
    assert_eq!(
        p.fates[..2],
        [Fate::KeepEmpty, Fate::Drop],
        "only the marker at the producer's epoch holds its state"
    );
    assert!(p.out[0].is_control() && p.out[0].record_count() == 0);
}

#[test]
fn an_already_empty_batch_that_must_stay_is_kept_as_it_is() {
    let mut log = Log::default();
    log.idempotent(4, &[(Some("a"), Some("1"))]);
    log.data(&[(Some("z"), Some("end"))]);
    log.batches[0] = log.batches[0].empty_header();
    let mut producers = ActiveProducers::new();
    producers.insert(
        4,
        ProducerLast {
            last_data_offset: Some(0),
            epoch: 0,
        },
    );
    let p = pass_with(&log.batches, 0, usize::MAX, &[], &producers, TIME);
    assert_eq!(p.fates[0], Fate::KeepWhole);
}

#[test]
fn producers_come_from_the_producer_table() {
    use crate::producer::ProducerTable;
    let mut log = Log::default();
    log.idempotent(4, &[(Some("a"), Some("1")), (Some("b"), Some("2"))]);
    let mut table = ProducerTable::new();
    table.replay(&log.batches[0], 0);
    let producers = ActiveProducers::from_table(&table);
    let view = BatchView::of(&log.batches[0]).unwrap();
    assert!(producers.holds_last_entry(&view));
}

#[test]
fn the_last_batch_of_the_round_is_kept_empty() {
    let mut log = Log::default();
    log.data(&[(Some("a"), Some("1"))]);
    log.data(&[(None, Some("keyless"))]);
    log.data(&[(Some("b"), Some("2"))]);
    // A budget of one key: the round maps batches 0 and 1 (no new key).
    let p = pass_with(&log.batches, 0, 1, &[], &ActiveProducers::new(), TIME);
    assert_eq!(p.end, 2);
    assert_eq!(
        p.fates,
        vec![Fate::KeepWhole, Fate::KeepEmpty, Fate::KeepWhole],
        "batch 1 loses its only record but ends the round"
    );
    assert_eq!(offsets_of(&p.out), vec![(0, 0), (1, 1), (2, 2)]);
    // The next round ends elsewhere: the empty header goes.
    let p2 = pass_with(&p.out, 2, 1, &[], &ActiveProducers::new(), TIME);
    assert_eq!(p2.fates, vec![Fate::KeepWhole, Fate::Drop, Fate::KeepWhole]);
}

// ------------------------------------------------------------ compressed

#[test]
fn a_compressed_batch_is_cleaned_record_by_record_and_stays_compressed() {
    for codec in Compression::CODECS {
        let mut log = Log::default();
        log.zipped(
            codec,
            BatchBuilder::idempotent(5, 0, 0),
            &[
                (Some("a"), Some("1")),
                (Some("b"), Some("1")),
                (None, Some("x")),
            ],
        );
        log.zipped(codec, BatchBuilder::new(), &[(Some("a"), Some("2"))]);
        log.data(&[(Some("z"), Some("end"))]);
        let p = pass(&log.batches, &[], TIME);
        assert_eq!(
            p.fates,
            vec![
                Fate::Rewrite {
                    keep: vec![false, true, false],
                    new_delete_horizon: None
                },
                Fate::KeepWhole,
                Fate::KeepWhole
            ],
            "{codec:?}"
        );
        let rewritten = &p.out[0];
        assert_eq!(rewritten.compression(), codec, "the batch's own codec");
        assert_eq!(rewritten.attributes(), log.batches[0].attributes());
        assert_eq!(
            (rewritten.base_offset(), rewritten.last_offset_delta()),
            (0, 2)
        );
        assert_eq!((rewritten.producer_id(), rewritten.base_sequence()), (5, 0));
        assert_eq!(rewritten.record_count(), 1);
        assert_eq!(
            contents(&p.out),
            vec![
                row(1, "b", Some("1")),
                row(3, "a", Some("2")),
                row(4, "z", Some("end"))
            ]
        );
        assert_eq!(p.summary.records_superseded, 1);
        assert_eq!(p.summary.keyless_removed, 1);
    }
}

#[test]
fn a_compressed_batch_emptied_by_cleaning_goes_or_stays_as_a_bare_header() {
    let mut log = Log::default();
    log.zipped(
        Compression::Zstd,
        BatchBuilder::new(),
        &[(Some("a"), Some("1"))],
    );
    log.zipped(
        Compression::Zstd,
        BatchBuilder::idempotent(9, 0, 0),
        &[(Some("a"), Some("2"))],
    );
    log.zipped(
        Compression::Lz4,
        BatchBuilder::new(),
        &[(Some("a"), Some("3"))],
    );
    let mut producers = ActiveProducers::new();
    producers.insert(
        9,
        ProducerLast {
            last_data_offset: Some(1),
            epoch: 0,
        },
    );
    let p = pass_with(&log.batches, 0, usize::MAX, &[], &producers, TIME);
    assert_eq!(p.fates, vec![Fate::Drop, Fate::KeepEmpty, Fate::KeepWhole]);
    assert_eq!(
        p.out[0].compression(),
        Compression::None,
        "a bare header is not compressed"
    );
    assert_eq!(p.out[0].record_count(), 0);
    assert_eq!(contents(&p.out), vec![row(2, "a", Some("3"))]);
}

#[test]
fn a_compressed_tombstone_gets_its_horizon_and_goes_after_it() {
    let mut log = Log::default();
    log.zipped(
        Compression::Gzip,
        BatchBuilder::new(),
        &[(Some("a"), Some("1")), (Some("a"), None)],
    );
    log.data(&[(Some("z"), Some("end"))]);
    let p = pass(&log.batches, &[], TIME);
    let horizon = NOW + RETENTION;
    assert_eq!(p.out[0].delete_horizon_ms(), Some(horizon));
    assert_eq!(p.out[0].compression(), Compression::Gzip);
    assert_eq!(contents(&p.out[..1]), vec![row(1, "a", None)]);
    let later = pass_with(
        &p.out,
        2,
        usize::MAX,
        &[],
        &ActiveProducers::new(),
        at(horizon),
    );
    assert_eq!(contents(&later.out), vec![row(2, "z", Some("end"))]);
}

#[test]
fn a_compressed_batch_that_does_not_decompress_is_kept_whole() {
    let mut log = Log::default();
    log.data(&[(Some("a"), Some("1"))]);
    log.compressed(BatchBuilder::new(), &[(Some("a"), Some("2")), (None, None)]);
    log.data(&[(Some("z"), Some("end"))]);
    let v = BatchView::of(&log.batches[1]).unwrap();
    assert_eq!(v.content, BatchContent::Opaque { is_control: false });
    let p = pass(&log.batches, &[], TIME);
    assert_eq!(
        p.fates,
        vec![Fate::KeepWhole, Fate::KeepWhole, Fate::KeepWhole],
        "its keys are unknown, so the earlier a stays too"
    );
}

#[test]
fn a_compressed_batch_of_an_aborted_transaction_keeps_its_marker() {
    let mut log = Log::default();
    let first = log.compressed(
        BatchBuilder::transactional(7, 0, 0),
        &[(Some("a"), Some("1"))],
    );
    let m = log.marker(7, ControlType::Abort);
    log.data(&[(Some("z"), Some("end"))]);
    let txn = aborted(7, first, m);
    let p = pass(&log.batches, &[txn], at(i64::MAX));
    assert_eq!(p.fates[..2], [Fate::KeepWhole, Fate::KeepWhole]);
    assert_eq!(p.aborted_to_index, vec![txn]);
}

// ------------------------------------------------------------ views

#[test]
fn a_batch_view_reads_keys_values_and_markers() {
    let mut log = Log::default();
    log.data(&[(Some("a"), None), (None, Some("v"))]);
    log.marker(3, ControlType::Abort);
    let v = views(&log.batches);
    match &v[0].content {
        BatchContent::Data(records) => {
            assert_eq!(records[0].key.as_deref(), Some(&b"a"[..]));
            assert!(!records[0].has_value);
            assert_eq!(records[1].key, None);
            assert!(records[1].has_value);
            let body: usize = records.iter().map(|r| r.size).sum();
            assert_eq!(body + crate::record::BATCH_HEADER_LEN, v[0].size);
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        v[1].content,
        BatchContent::Control {
            marker: Some(ControlType::Abort),
            record_count: 1,
            ..
        }
    ));
    assert!(v[1].is_control());
}

#[test]
fn a_damaged_batch_cannot_be_viewed() {
    let mut log = Log::default();
    log.data(&[(Some("a"), Some("1"))]);
    let mut bytes = log.batches[0].as_bytes().to_vec();
    bytes[57..61].copy_from_slice(&2i32.to_be_bytes());
    let damaged = RecordBatch::new(reseal(bytes)).unwrap();
    assert!(matches!(
        BatchView::of(&damaged),
        Err(ViewError::Framing(_))
    ));
}

// ------------------------------------------------------------ summary

#[test]
fn the_summary_counts_every_removal() {
    let mut log = Log::default();
    let first = log.txn(7, &[(Some("t"), Some("aborted"))]);
    let m = log.marker(7, ControlType::Abort);
    log.data(&[
        (Some("a"), Some("1")),
        (None, Some("x")),
        (Some("a"), Some("2")),
    ]);
    let p = pass(&log.batches, &[aborted(7, first, m)], TIME);
    let s = &p.summary;
    assert_eq!(s.batches_read, 3);
    assert_eq!(
        (s.batches_dropped, s.batches_kept_whole, s.batches_rewritten),
        (1, 1, 1)
    );
    assert_eq!(s.records_read, 5);
    assert_eq!(s.records_kept, 2);
    assert_eq!(
        (s.aborted_removed, s.keyless_removed, s.records_superseded),
        (1, 1, 1)
    );
    assert_eq!(s.records_removed(), 3);
    let read: usize = log.batches.iter().map(|b| b.size()).sum();
    let written: usize = p.out.iter().map(|b| b.size()).sum();
    assert_eq!(s.bytes_read, read as u64);
    assert_eq!(s.bytes_written, written as u64);
}
