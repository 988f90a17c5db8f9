//! Random logs through the key map, the decision and the filter, against a
//! model of what compaction keeps: per key, the last record among the
//! non-aborted data (in offset order), tombstones until their horizon,
//! nothing without a key, every offset unchanged. Some batches are
//! compressed (with each of Kafka's codecs): they are cleaned like the
//! others and stay compressed with their codec. Some carry a codec bit over
//! records that do not decompress: those are outside the model's view of
//! keys, and stay whole.
//!
//! Rounds run with a random key-map budget until the whole log is clean;
//! after each one, the cleaned prefix obeys the model over that prefix and
//! everything past it is untouched. A last pass at a later time removes
//! the tombstones whose horizon has passed.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::*;
use crate::compression::MAX_DECOMPRESSED_BATCH_BYTES;
use crate::partition::AbortedTxn;
use crate::record::{
    build_control_batch, reseal, BatchBuilder, Compression, ControlType, EndTxnMarker, NewRecord,
    RecordBatch,
};

/// Cleaning rounds run at this time; every record is older.
const T: i64 = 10_000_000;

/// A record to write: key index (None: no key), value (None: tombstone),
/// timestamp jitter.
type Rec = (Option<u8>, Option<u8>, i64);

/// How a batch is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Zip {
    /// Uncompressed.
    Plain,
    /// Compressed with this codec.
    With(Compression),
    /// The gzip bit over uncompressed records: it does not decompress.
    Broken,
}

#[derive(Debug, Clone)]
enum Op {
    /// A plain batch, or an idempotent one from producer `20 + p`.
    Data {
        producer: Option<u8>,
        records: Vec<Rec>,
        compressed: Zip,
    },
    /// A transactional batch from producer `10 + p`, opening its
    /// transaction if none is open.
    Txn {
        producer: u8,
        records: Vec<Rec>,
        compressed: Zip,
    },
    /// The marker of producer `10 + p` (of an empty transaction if none is
    /// open).
    End { producer: u8, commit: bool },
}

fn rec() -> impl Strategy<Value = Rec> {
    (
        prop_oneof![1 => Just(None), 6 => (0u8..5).prop_map(Some)],
        prop_oneof![1 => Just(None), 4 => any::<u8>().prop_map(Some)],
        -50i64..50,
    )
}

fn op() -> impl Strategy<Value = Op> {
    let records = || proptest::collection::vec(rec(), 1..5);
    let compressed = || {
        prop_oneof![
            12 => Just(Zip::Plain),
            1 => Just(Zip::With(Compression::Gzip)),
            1 => Just(Zip::With(Compression::Snappy)),
            1 => Just(Zip::With(Compression::Lz4)),
            1 => Just(Zip::With(Compression::Zstd)),
            1 => Just(Zip::Broken),
        ]
    };
    prop_oneof![
        5 => (proptest::option::of(0u8..2), records(), compressed())
            .prop_map(|(producer, records, compressed)| Op::Data { producer, records, compressed }),
        3 => (0u8..2, records(), compressed())
            .prop_map(|(producer, records, compressed)| Op::Txn { producer, records, compressed }),
        2 => (0u8..2, any::<bool>()).prop_map(|(producer, commit)| Op::End { producer, commit }),
    ]
}

/// One record of the input, as the model sees it.
#[derive(Debug, Clone, Copy)]
struct ModelRecord {
    offset: i64,
    key: Option<u8>,
    value: Option<u8>,
    timestamp: i64,
    aborted: bool,
    opaque: bool,
}

/// What a record reads back as: offset, key, value, timestamp.
type Seen = (i64, Option<Vec<u8>>, Option<Vec<u8>>, i64);

impl ModelRecord {
    fn seen(&self) -> Seen {
        (
            self.offset,
            self.key.map(key_bytes),
            self.value.map(|v| vec![v]),
            self.timestamp,
        )
    }
}

fn key_bytes(k: u8) -> Vec<u8> {
    vec![b'k', k]
}

/// The generated log and what the model knows about it.
#[derive(Debug, Default)]
struct Built {
    batches: Vec<RecordBatch>,
    records: Vec<ModelRecord>,
    aborted: Vec<AbortedTxn>,
    /// Base offset of each transactional data batch -> its marker's offset.
    closing_marker: BTreeMap<i64, i64>,
    /// Per producer id: last offset of its last data batch, and its markers.
    last_data: BTreeMap<i64, i64>,
    markers: BTreeMap<i64, Vec<i64>>,
    end: i64,
}

/// An open transaction: its first offset and its data batches.
#[derive(Debug, Default)]
struct Open {
    first: i64,
    batches: Vec<i64>,
    records: Vec<usize>,
}

impl Built {
    fn from_ops(ops: &[Op], close_with_commit: bool) -> Built {
        let mut b = Built::default();
        let mut open: BTreeMap<i64, Open> = BTreeMap::new();
        for op in ops {
            match op {
                Op::Data {
                    producer,
                    records,
                    compressed,
                } => {
                    let builder = match producer {
                        Some(p) => BatchBuilder::idempotent(20 + i64::from(*p), 0, 0),
                        None => BatchBuilder::new(),
                    };
                    b.push_data(builder, records, *compressed);
                }
                Op::Txn {
                    producer,
                    records,
                    compressed,
                } => {
                    let pid = 10 + i64::from(*producer);
                    let base = b.end;
                    let first_record = b.records.len();
                    b.push_data(BatchBuilder::transactional(pid, 0, 0), records, *compressed);
                    let txn = open.entry(pid).or_insert_with(|| Open {
                        first: base,
                        ..Open::default()
                    });
                    txn.batches.push(base);
                    txn.records.extend(first_record..b.records.len());
                }
                Op::End { producer, commit } => {
                    let pid = 10 + i64::from(*producer);
                    b.push_marker(pid, *commit, open.remove(&pid));
                }
            }
        }
        // Close what is open, so the whole log is below the LSO.
        let still_open: Vec<i64> = open.keys().copied().collect();
        for pid in still_open {
            b.push_marker(pid, close_with_commit, open.remove(&pid));
        }
        b
    }

    fn push_data(&mut self, builder: BatchBuilder, records: &[Rec], compressed: Zip) {
        let base = self.end;
        let mut builder = builder
            .with_base_offset(base)
            .with_partition_leader_epoch(3);
        for (i, &(key, value, jitter)) in records.iter().enumerate() {
            let offset = base + i as i64;
            let timestamp = 1_000 + offset * 10 + jitter;
            let key = key.map(key_bytes);
            let value = value.map(|v| vec![v]);
            builder.push(NewRecord::new(timestamp, key.as_deref(), value.as_deref()));
            self.records.push(ModelRecord {
                offset,
                key: records[i].0,
                value: records[i].1,
                timestamp,
                aborted: false,
                opaque: compressed == Zip::Broken,
            });
        }
        let mut batch = builder.build();
        match compressed {
            Zip::Plain => {}
            Zip::With(codec) => batch = batch.compressed_with(codec).unwrap(),
            Zip::Broken => {
                let mut bytes = batch.as_bytes().to_vec();
                bytes[22] |= 0x01; // gzip: the cleaner cannot read it
                batch = RecordBatch::new(reseal(bytes)).unwrap();
            }
        }
        if batch.has_producer_id() {
            self.last_data
                .insert(batch.producer_id(), batch.last_offset());
        }
        self.end = batch.next_offset();
        self.batches.push(batch);
    }

    fn push_marker(&mut self, pid: i64, commit: bool, txn: Option<Open>) {
        let offset = self.end;
        let marker = EndTxnMarker {
            control_type: if commit {
                ControlType::Commit
            } else {
                ControlType::Abort
            },
            coordinator_epoch: 0,
        };
        let batch =
            build_control_batch(pid, 0, 1_000 + offset * 10, marker).with_assigned(offset, 3);
        self.end = batch.next_offset();
        self.batches.push(batch);
        self.markers.entry(pid).or_default().push(offset);
        let Some(txn) = txn else { return };
        for base in &txn.batches {
            self.closing_marker.insert(*base, offset);
        }
        if !commit {
            for &i in &txn.records {
                self.records[i].aborted = true;
            }
            self.aborted.push(AbortedTxn {
                producer_id: pid,
                first_offset: txn.first,
                last_offset: offset,
                last_stable_offset: offset + 1,
            });
        }
    }

    /// The records the model keeps once `[0, end)` is clean, at a time
    /// when tombstones are `expired` or not; records from `end` on are not
    /// included.
    fn expected(&self, end: i64, expired: bool) -> Vec<Seen> {
        let mut latest: BTreeMap<u8, i64> = BTreeMap::new();
        for r in self.records.iter().filter(|r| r.offset < end) {
            if let (Some(k), false, false) = (r.key, r.aborted, r.opaque) {
                latest.insert(k, r.offset);
            }
        }
        self.records
            .iter()
            .filter(|r| r.offset < end)
            .filter(|r| {
                r.opaque
                    || (!r.aborted
                        && r.key.is_some_and(|k| latest.get(&k) == Some(&r.offset))
                        && (r.value.is_some() || !expired))
            })
            .map(ModelRecord::seen)
            .collect()
    }

    fn original(&self, base_offset: i64) -> &RecordBatch {
        self.batches
            .iter()
            .find(|b| b.base_offset() == base_offset)
            .unwrap()
    }
}

/// Every data record of `batches` below `end`; a batch that does not
/// decompress must be the original, byte for byte, and stands for its
/// model records.
fn seen_below(built: &Built, batches: &[RecordBatch], end: i64) -> Vec<Seen> {
    let mut out = Vec::new();
    for batch in batches.iter().filter(|b| b.base_offset() < end) {
        if batch.is_control() {
            continue;
        }
        let Ok(batch) = batch.decompressed(MAX_DECOMPRESSED_BATCH_BYTES) else {
            assert_eq!(batch, built.original(batch.base_offset()));
            out.extend(
                built
                    .records
                    .iter()
                    .filter(|r| r.offset >= batch.base_offset() && r.offset <= batch.last_offset())
                    .map(ModelRecord::seen),
            );
            continue;
        };
        for r in batch.records() {
            let r = r.unwrap();
            out.push((
                r.offset,
                r.key.map(|k| k.to_vec()),
                r.value.map(|v| v.to_vec()),
                r.timestamp,
            ));
        }
    }
    out
}

/// One round: map the dirty section `[first_dirty, log end)` under
/// `budget`, decide every batch, write the output.
fn round(
    built: &Built,
    log: &[RecordBatch],
    first_dirty: i64,
    budget: usize,
    producers: &ActiveProducers,
    time: PassTime,
) -> (Vec<RecordBatch>, i64) {
    let mut map = KeyMap::with_budget(budget, first_dirty..built.end, &built.aborted);
    for batch in log {
        if map.add(&BatchView::of(batch).unwrap()) == MapStep::Full {
            break;
        }
    }
    let mut decider = Decider::new(map, &built.aborted, producers.clone(), time);
    let mut out = Vec::new();
    for batch in log {
        let fate = decider.next(&BatchView::of(batch).unwrap());
        if let Some(written) = fate.apply(batch).unwrap() {
            out.push(written);
        }
    }
    (out, decider.map().end())
}

/// What holds for the output of every pass.
fn check_pass(
    built: &Built,
    input: &[RecordBatch],
    out: &[RecordBatch],
    producers: &[(i64, Option<i64>)],
) {
    let mut previous_end = i64::MIN;
    for b in out {
        assert_eq!(b.validate(), Ok(()), "{b:?}");
        assert!(b.base_offset() > previous_end, "offsets only grow");
        previous_end = b.last_offset();
        let original = built.original(b.base_offset());
        assert_eq!(b.last_offset_delta(), original.last_offset_delta());
        assert_eq!(
            (b.producer_id(), b.producer_epoch(), b.base_sequence()),
            (
                original.producer_id(),
                original.producer_epoch(),
                original.base_sequence()
            )
        );
        assert_eq!(
            b.partition_leader_epoch(),
            original.partition_leader_epoch()
        );
        assert_eq!(b.is_control(), original.is_control());
        if b.record_count() > 0 {
            assert_eq!(b.compression(), original.compression(), "same codec");
        }
        assert_eq!(b.is_transactional(), original.is_transactional());
    }
    let bases: BTreeSet<i64> = out.iter().map(|b| b.base_offset()).collect();
    // A marker outlives every batch of its transaction.
    for b in out
        .iter()
        .filter(|b| b.is_transactional() && !b.is_control())
    {
        let marker = built.closing_marker[&b.base_offset()];
        assert!(
            bases.contains(&marker),
            "marker {marker} went before its data {b:?}"
        );
    }
    // A marker goes only once it has a delete horizon that passed.
    for b in input
        .iter()
        .filter(|b| b.is_control() && b.record_count() > 0)
    {
        if b.delete_horizon_ms().is_none() {
            assert!(
                bases.contains(&b.base_offset()),
                "marker without horizon went: {b:?}"
            );
        }
    }
    // Active producers keep their last entry.
    for &(pid, last_data) in producers {
        match last_data {
            Some(last) => assert!(
                out.iter()
                    .any(|b| b.last_offset() == last && b.producer_id() == pid),
                "producer {pid} lost its last batch"
            ),
            None => {
                for m in built.markers.get(&pid).into_iter().flatten() {
                    assert!(bases.contains(m), "producer {pid} lost its marker {m}");
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn cleaning_keeps_exactly_what_the_model_keeps(
        ops in proptest::collection::vec(op(), 1..30),
        close_with_commit in any::<bool>(),
        budget in prop_oneof![Just(usize::MAX), 0usize..300],
        retention in 1i64..1_000,
        later in 0i64..2_000,
        active in any::<u8>(),
    ) {
        let built = Built::from_ops(&ops, close_with_commit);
        let time = PassTime { now_ms: T, delete_retention_ms: retention };

        // Producers 10, 11, 20, 21, active by the bits of `active`.
        let mut producers = ActiveProducers::new();
        let mut expected_producers = Vec::new();
        for (bit, pid) in [10i64, 11, 20, 21].into_iter().enumerate() {
            if active & (1 << bit) == 0 {
                continue;
            }
            let last = built.last_data.get(&pid).copied();
            producers.insert(pid, ProducerLast { last_data_offset: last, epoch: 0 });
            expected_producers.push((pid, last));
        }

        // Rounds until the log is clean.
        let mut log = built.batches.clone();
        let mut first_dirty = 0;
        while first_dirty < built.end {
            let (out, end) = round(&built, &log, first_dirty, budget, &producers, time);
            prop_assert!(end > first_dirty, "a round makes progress");
            check_pass(&built, &log, &out, &expected_producers);
            // The cleaned prefix obeys the model over the prefix...
            prop_assert_eq!(seen_below(&built, &out, end), built.expected(end, false));
            // ...and what lies past it is untouched.
            let past = |batches: &[RecordBatch]| -> Vec<RecordBatch> {
                batches.iter().filter(|b| b.base_offset() >= end).cloned().collect()
            };
            prop_assert_eq!(past(&out), past(&log));
            if budget == usize::MAX {
                prop_assert_eq!(end, built.end, "an unbounded map takes the whole section");
            }
            log = out;
            first_dirty = end;
        }

        // Every kept tombstone got the horizon T + retention; a pass at or
        // after it removes them.
        let now = T + later;
        let time = PassTime { now_ms: now, delete_retention_ms: retention };
        let (out, end) = round(&built, &log, built.end, budget, &producers, time);
        prop_assert_eq!(end, built.end);
        check_pass(&built, &log, &out, &expected_producers);
        let expired = now >= T + retention;
        prop_assert_eq!(seen_below(&built, &out, built.end), built.expected(built.end, expired));
    }
}
