//! The cleaner on a real directory: rounds, the swap, and crashes at each
//! step of it.

use kaas_core::cleaner::{ActiveProducers, CleanPlan, CompactionConfig};
use kaas_core::compression::MAX_DECOMPRESSED_BATCH_BYTES;
use kaas_core::layout::{self, Entry};
use kaas_core::record::{split_batches, BatchBuilder, Compression, NewRecord, RecordBatch};
use std::collections::BTreeMap;
use std::sync::Arc;

use super::{remove_replaced, run_round, LogConfig, PartitionLog, RoundOutcome, RoundSettings};
use crate::volume::{LocalVolume, Volume};

const DIR: &str = "topics/c-0";
/// A day: tombstones stay this long after a round first kept them.
const RETENTION: i64 = 86_400_000;

struct Fixture {
    _tmp: tempfile::TempDir,
    root: std::path::PathBuf,
    volume: Arc<dyn Volume>,
}

impl Fixture {
    fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        let volume: Arc<dyn Volume> = Arc::new(LocalVolume::new(&root).unwrap());
        Fixture {
            _tmp: tmp,
            root,
            volume,
        }
    }

    fn open(&self, epoch: i32) -> PartitionLog {
        let config = LogConfig {
            segment_bytes: 2_000,
            index_interval_bytes: 300,
            ..LogConfig::default()
        };
        PartitionLog::open(self.volume.clone(), DIR.to_string(), config, epoch).unwrap()
    }

    fn names(&self) -> Vec<Entry> {
        self.volume
            .list(DIR)
            .unwrap()
            .iter()
            .map(|n| layout::classify(n))
            .collect()
    }
}

/// `count` batches of 5 records over keys `k0`..`k{keys-1}`, in order;
/// every `tombstone_every`-th record (if not 0) is a delete.
fn fill(log: &mut PartitionLog, count: usize, keys: usize, tombstone_every: usize) {
    fill_with(log, count, keys, tombstone_every, |_| Compression::None);
}

/// [`fill`], batch `i` compressed with `codec(i)`.
fn fill_with(
    log: &mut PartitionLog,
    count: usize,
    keys: usize,
    tombstone_every: usize,
    codec: impl Fn(usize) -> Compression,
) {
    let mut n = 0;
    for i in 0..count {
        let mut b = BatchBuilder::new();
        for _ in 0..5 {
            let key = format!("k{}", n % keys);
            let value = format!("v{n}");
            let delete = tombstone_every > 0 && n % tombstone_every == tombstone_every - 1;
            b.push(NewRecord::new(
                1_000 + n as i64,
                Some(key.as_bytes()),
                (!delete).then_some(value.as_bytes()),
            ));
            n += 1;
        }
        let batch = b.build().compressed_with(codec(i)).unwrap();
        log.append_batch(&batch).unwrap();
    }
    log.sync().unwrap();
}

/// A record as read back: offset, key, value (`None`: a tombstone).
type Read = (i64, String, Option<String>);

/// Every record of the log, and the batches.
fn records(log: &PartitionLog) -> (Vec<Read>, Vec<RecordBatch>) {
    let mut out = Vec::new();
    let mut batches = Vec::new();
    let mut offset = log.log_start_offset();
    while offset < log.end_offset() {
        let read = log.read(offset, 1 << 20, i64::MAX).unwrap();
        assert!(read.next_offset > offset, "no progress at {offset}");
        for batch in split_batches(read.records) {
            assert_eq!(batch.validate(), Ok(()));
            let plain = batch.decompressed(MAX_DECOMPRESSED_BATCH_BYTES).unwrap();
            for r in plain.records() {
                let r = r.unwrap();
                let text = |b: &bytes::Bytes| String::from_utf8(b.to_vec()).unwrap();
                out.push((
                    r.offset,
                    text(r.key.as_ref().unwrap()),
                    r.value.as_ref().map(text),
                ));
            }
            batches.push(batch);
        }
        offset = read.next_offset;
    }
    (out, batches)
}

/// What compaction must leave of `before`: the last record of each key,
/// at its offset, below `end`; everything from `end` on as it was.
/// Tombstones stay (within their retention).
fn model(before: &[Read], end: i64) -> Vec<Read> {
    let mut last: BTreeMap<&str, i64> = BTreeMap::new();
    for (offset, key, _) in before.iter().filter(|(o, _, _)| *o < end) {
        last.insert(key, *offset);
    }
    before
        .iter()
        .filter(|(o, k, _)| *o >= end || last.get(k.as_str()) == Some(o))
        .cloned()
        .collect()
}

fn settings(log: &PartitionLog, now_ms: i64) -> RoundSettings {
    RoundSettings {
        now_ms,
        delete_retention_ms: RETENTION,
        compaction: CompactionConfig {
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
            min_cleanable_dirty_ratio: 0.0,
        },
        checkpoint: None,
        last_stable_offset: log.end_offset(),
        key_map_bytes: 1 << 20,
        producers: ActiveProducers::new(),
    }
}

/// A round as the partition runs it: input under the lane, the round
/// outside, the swap under the lane, removals outside.
fn clean(fx: &Fixture, log: &mut PartitionLog, now_ms: i64) -> RoundOutcome {
    let input = log.cleaning_input();
    let mut outcome = run_round(input, settings(log, now_ms)).unwrap();
    let replaced = log.install_cleaned(std::mem::take(&mut outcome.copies));
    remove_replaced(fx.volume.as_ref(), DIR, &replaced).unwrap();
    outcome
}

#[test]
fn a_round_keeps_the_last_record_of_each_key_at_its_offset() {
    let fx = Fixture::new();
    let mut log = fx.open(0);
    fill(&mut log, 60, 7, 0);
    let (before, _) = records(&log);
    let active = log.segment_base_offsets().last().copied().unwrap();
    let outcome = clean(&fx, &mut log, 10_000);
    assert!(matches!(outcome.plan, CleanPlan::Clean { .. }));
    assert_eq!(
        outcome.checkpoint,
        Some(active),
        "cleaned up to the active segment"
    );
    assert!(outcome.summary.records_superseded > 200);
    let (after, batches) = records(&log);
    assert_eq!(after, model(&before, active));
    assert_eq!(log.end_offset(), 300, "the log ends where it did");
    // Every segment still ends where it did: a batch (maybe bare) holds
    // its last offset.
    let mut ends: Vec<i64> = batches.iter().map(|b| b.next_offset()).collect();
    ends.dedup();
    for base in log.segment_base_offsets().into_iter().skip(1) {
        assert!(ends.contains(&base), "a batch ends at segment base {base}");
    }
    // On the volume: copies replaced the originals below the active one.
    let names = fx.names();
    assert!(names
        .iter()
        .any(|e| matches!(e, Entry::CleanedSegment(_, 0))));
    assert!(names.iter().any(|e| matches!(e, Entry::CleanedIndex(_, 0))));
    assert!(!names.iter().any(|e| matches!(e, Entry::Cleaning(..))));
    assert_eq!(
        names
            .iter()
            .filter(|e| matches!(e, Entry::Segment(_)))
            .count(),
        1,
        "only the active segment's original is left: {names:?}"
    );
    // Reopened, the log reads the same.
    drop(log);
    let log = fx.open(0);
    assert_eq!(records(&log).0, after);
}

#[test]
fn a_round_cleans_compressed_batches_and_writes_them_back_compressed() {
    let codecs: Vec<Compression> = Compression::CODECS
        .into_iter()
        .chain([Compression::None])
        .collect();
    let fx = Fixture::new();
    let mut log = fx.open(0);
    fill_with(&mut log, 60, 7, 9, |i| codecs[i % codecs.len()]);
    let (before, original) = records(&log);
    let active = log.segment_base_offsets().last().copied().unwrap();
    let outcome = clean(&fx, &mut log, 10_000);
    assert_eq!(outcome.checkpoint, Some(active));
    assert!(outcome.summary.records_superseded > 200);
    let (after, batches) = records(&log);
    assert_eq!(
        after,
        model(&before, active),
        "the latest value per key, at its offset"
    );
    let codec_at: BTreeMap<i64, Compression> = original
        .iter()
        .map(|b| (b.base_offset(), b.compression()))
        .collect();
    let mut rewritten = 0;
    for b in batches.iter().filter(|b| b.record_count() > 0) {
        assert_eq!(
            b.compression(),
            codec_at[&b.base_offset()],
            "batch {} keeps its codec",
            b.base_offset()
        );
        rewritten += usize::from(b.compression() != Compression::None && b.record_count() < 5);
    }
    assert!(rewritten > 0, "some compressed batches were rewritten");
    drop(log);
    let log = fx.open(0);
    assert_eq!(records(&log).0, after, "reopened, it reads the same");
}

#[test]
fn a_second_round_at_the_same_epoch_replaces_the_first_ones_copies() {
    let fx = Fixture::new();
    let mut log = fx.open(0);
    fill(&mut log, 40, 5, 0);
    clean(&fx, &mut log, 10_000);
    fill(&mut log, 40, 5, 0);
    let (before, _) = records(&log);
    let outcome = clean(&fx, &mut log, 20_000);
    let end = outcome.checkpoint.unwrap();
    let (after, _) = records(&log);
    assert_eq!(after, model(&before, end));
    drop(log);
    assert_eq!(records(&fx.open(0)).0, after);
}

/// Found by the simulator (a compacted seed with several brokers): a round
/// whose partition moved before the swap removed its copies. A copy by the
/// epoch of an earlier round's copy had replaced that one by its rename, so
/// removing it deleted the only version of its segment, and the next
/// opening started the log after the hole.
#[test]
fn a_round_not_swapped_in_leaves_its_copies_for_the_next_opening() {
    let fx = Fixture::new();
    let mut log = fx.open(0);
    fill(&mut log, 40, 5, 0);
    clean(&fx, &mut log, 10_000);
    fill(&mut log, 40, 5, 0);
    let (before, _) = records(&log);
    let mut outcome = run_round(log.cleaning_input(), settings(&log, 20_000)).unwrap();
    assert!(!outcome.copies.is_empty());
    // The partition moved: no swap, and nothing of the log's to remove.
    let copies = std::mem::take(&mut outcome.copies);
    assert_eq!(log.abandon_cleaned(&copies), Vec::new());
    drop(log);
    let log = fx.open(1);
    assert_eq!(
        records(&log).0,
        model(&before, outcome.checkpoint.unwrap()),
        "the copies are the log: reopened, it reads the round's cleaning"
    );
}

#[test]
fn tombstones_stay_until_their_delete_horizon_then_go() {
    let fx = Fixture::new();
    let mut log = fx.open(0);
    // Every 7th record a delete; 7 keys, so the last record of one key is
    // a tombstone.
    fill(&mut log, 60, 7, 7);
    let (before, _) = records(&log);
    let end = clean(&fx, &mut log, 10_000).checkpoint.unwrap();
    let (after, _) = records(&log);
    assert_eq!(after, model(&before, end));
    assert!(
        after.iter().any(|(o, _, v)| *o < end && v.is_none()),
        "a tombstone survives the first round"
    );
    // Before the horizon nothing changes; after it the tombstones go.
    clean(&fx, &mut log, 10_000 + RETENTION - 1);
    assert_eq!(records(&log).0, after);
    clean(&fx, &mut log, 10_000 + RETENTION);
    let (later, _) = records(&log);
    let expected: Vec<_> = after
        .into_iter()
        .filter(|(o, _, v)| *o >= end || v.is_some())
        .collect();
    assert_eq!(later, expected);
}

#[test]
fn an_interrupted_cleaning_leaves_the_original() {
    let fx = Fixture::new();
    let mut log = fx.open(0);
    fill(&mut log, 40, 5, 0);
    let (before, _) = records(&log);
    let first = layout::SegmentId::new(log.segment_base_offsets()[0], 0);
    drop(log);
    // A crash while writing the copy: a temporary, half written.
    let temporary = layout::cleaning_path(DIR, first, 0);
    fx.volume.write_atomic(&temporary, b"half a batch").unwrap();
    let log = fx.open(0);
    assert_eq!(records(&log).0, before);
    assert!(
        !fx.names().contains(&Entry::Cleaning(first, 0)),
        "the leftover goes"
    );
}

#[test]
fn a_crash_after_the_rename_opens_with_the_copy() {
    let fx = Fixture::new();
    let mut log = fx.open(0);
    fill(&mut log, 40, 5, 0);
    let (before, _) = records(&log);
    // The round writes its copies and renames them into place, then the
    // broker dies before the swap and the removals.
    let input = log.cleaning_input();
    let outcome = run_round(input, settings(&log, 10_000)).unwrap();
    let end = outcome.checkpoint.unwrap();
    let copies: Vec<_> = outcome.copies.iter().map(|c| c.files()).collect();
    assert!(!copies.is_empty());
    drop(outcome);
    drop(log);
    // And one copy lost its index (the crash came before it was written).
    let first = copies[0];
    fx.volume
        .remove(&layout::cleaned_index_path(DIR, first.id, 0))
        .unwrap();
    let log = fx.open(0);
    assert_eq!(records(&log).0, model(&before, end));
    let names = fx.names();
    for copy in &copies {
        assert!(
            !names.contains(&Entry::Segment(copy.id)),
            "the opening finished the swap"
        );
    }
}

#[test]
fn a_takeover_keeps_the_older_epochs_copies_and_cleans_with_its_own() {
    let fx = Fixture::new();
    let mut log = fx.open(0);
    fill(&mut log, 40, 5, 0);
    clean(&fx, &mut log, 10_000);
    let (cleaned, _) = records(&log);
    drop(log);
    let mut log = fx.open(1);
    assert_eq!(records(&log).0, cleaned);
    fill(&mut log, 40, 5, 0);
    let (before, _) = records(&log);
    let end = clean(&fx, &mut log, 20_000).checkpoint.unwrap();
    let (after, _) = records(&log);
    assert_eq!(after, model(&before, end));
    assert!(fx
        .names()
        .iter()
        .any(|e| matches!(e, Entry::CleanedSegment(_, 1))));
    drop(log);
    assert_eq!(records(&fx.open(1)).0, after);
    // An older epoch may not open what a newer one cleaned.
    assert!(PartitionLog::open(
        fx.volume.clone(),
        DIR.to_string(),
        LogConfig {
            segment_bytes: 2_000,
            index_interval_bytes: 300,
            ..LogConfig::default()
        },
        0
    )
    .is_err());
    let _ = &fx.root;
}

#[test]
fn the_active_segment_and_unstable_records_are_never_cleaned() {
    let fx = Fixture::new();
    let mut log = fx.open(0);
    fill(&mut log, 10, 2, 0);
    assert_eq!(log.segment_base_offsets().len(), 1, "one (active) segment");
    let outcome = clean(&fx, &mut log, 10_000);
    assert!(!matches!(outcome.plan, CleanPlan::Clean { .. }));
    fill(&mut log, 60, 2, 0);
    let input = log.cleaning_input();
    let mut s = settings(&log, 10_000);
    s.last_stable_offset = 0;
    let outcome = run_round(input, s).unwrap();
    assert!(!matches!(outcome.plan, CleanPlan::Clean { .. }));
    assert!(outcome.copies.is_empty());
}

/// A segment whose records all went is one bare batch header; a read there
/// goes on into the next segment, so a client is never answered only
/// headers while records follow (librdkafka would count that as a record
/// too large to fetch).
#[test]
fn a_read_goes_past_segments_with_no_records_left() {
    let fx = Fixture::new();
    let mut log = fx.open(0);
    fill(&mut log, 60, 1, 0);
    let end = clean(&fx, &mut log, 10_000).checkpoint.unwrap();
    let bases = log.segment_base_offsets();
    assert!(bases.len() > 3);
    let read = log.read(0, 1 << 20, i64::MAX).unwrap();
    let batches: Vec<RecordBatch> = split_batches(read.records).collect();
    assert!(
        batches.len() > 2,
        "the bare headers, then the records after them"
    );
    assert!(batches[..batches.len() - 1]
        .iter()
        .all(|b| b.record_count() == 0));
    assert!(batches.last().unwrap().record_count() > 0);
    assert!(read.next_offset >= end);
    // A small read still returns whole batches and makes progress.
    let read = log.read(0, 1, i64::MAX).unwrap();
    assert_eq!(split_batches(read.records).count(), 1);
    assert!(read.next_offset > 0);
}

/// The driver pauses between steps to keep a round under its I/O budget: a
/// round taken a few hundred bytes at a time (mapping, deciding and writing
/// copies each cut in the middle of a segment) leaves exactly the log a
/// round in one go does.
#[test]
fn a_round_in_small_steps_cleans_as_one_in_one_go() {
    let (whole, stepped) = (Fixture::new(), Fixture::new());
    let mut a = whole.open(0);
    let mut b = stepped.open(0);
    for log in [&mut a, &mut b] {
        fill(log, 60, 7, 5);
    }
    clean(&whole, &mut a, 10_000);
    let mut round = super::Round::start(b.cleaning_input(), settings(&b, 10_000)).unwrap();
    let mut steps = 0;
    while !round.step(300).unwrap() {
        steps += 1;
    }
    assert!(steps > 20, "{steps} steps");
    let outcome = round.finish();
    let replaced = b.install_cleaned(outcome.copies);
    remove_replaced(stepped.volume.as_ref(), DIR, &replaced).unwrap();
    assert_eq!(records(&b).0, records(&a).0);
    assert_eq!(b.segment_base_offsets(), a.segment_base_offsets());
}

/// Appends one batch of 5 records, keys `keys(n)` for the record numbers
/// `first..first + 5`.
fn append_keys(log: &mut PartitionLog, first: usize, key: impl Fn(usize) -> String) {
    let mut b = BatchBuilder::new();
    for n in first..first + 5 {
        let (key, value) = (key(n), format!("v{n}"));
        b.push(NewRecord::new(
            1_000 + n as i64,
            Some(key.as_bytes()),
            Some(value.as_bytes()),
        ));
    }
    log.append_batch(&b.build()).unwrap();
}

#[test]
fn a_copy_starts_with_the_batches_before_the_first_that_changes_and_an_unchanged_segment_is_not_copied(
) {
    let fx = Fixture::new();
    let mut log = fx.open(0);
    // Keys written once fill the first segments, then keys updated over
    // and over: the segment where they meet keeps its first batches whole
    // and changes after them.
    let mut n = 0;
    while log.segment_base_offsets().len() < 3 {
        append_keys(&mut log, n, |n| format!("once{n}"));
        n += 5;
    }
    for _ in 0..40 {
        append_keys(&mut log, n, |n| format!("k{}", n % 4));
        n += 5;
    }
    log.sync().unwrap();
    let (before, batches_before) = records(&log);
    let bases = log.segment_base_offsets();
    let active = *bases.last().unwrap();
    let input = log.cleaning_input();
    let mut outcome = run_round(input, settings(&log, 10_000)).unwrap();
    let copied: Vec<i64> = outcome.copies.iter().map(|c| c.id().base_offset).collect();
    // The first two segments hold only keys written once: not copied.
    assert!(!copied.contains(&bases[0]), "{copied:?} of {bases:?}");
    assert!(!copied.contains(&bases[1]), "{copied:?} of {bases:?}");
    assert!(copied.contains(&bases[2]), "{copied:?} of {bases:?}");
    let replaced = log.install_cleaned(std::mem::take(&mut outcome.copies));
    remove_replaced(fx.volume.as_ref(), DIR, &replaced).unwrap();
    let (after, batches_after) = records(&log);
    assert_eq!(after, model(&before, active));
    // Every batch of keys written once is still there byte for byte,
    // those in the copied segment included.
    let once = |b: &&RecordBatch| {
        let plain = b.decompressed(MAX_DECOMPRESSED_BATCH_BYTES).unwrap();
        // A bare header (a batch whose records all went) has none.
        plain.records().next().is_some_and(|first| {
            let first = first.unwrap();
            first.key.as_deref().is_some_and(|k| k.starts_with(b"once"))
        })
    };
    let whole_before: Vec<&RecordBatch> = batches_before.iter().filter(once).collect();
    let whole_after: Vec<&RecordBatch> = batches_after.iter().filter(once).collect();
    assert!(whole_before.iter().any(|b| b.base_offset() >= bases[2]));
    assert_eq!(
        whole_after.iter().map(|b| b.as_bytes()).collect::<Vec<_>>(),
        whole_before
            .iter()
            .map(|b| b.as_bytes())
            .collect::<Vec<_>>()
    );
    drop(log);
    assert_eq!(records(&fx.open(0)).0, after);
}
