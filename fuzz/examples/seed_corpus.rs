//! Writes the generated part of the seed corpus (scripts/fuzz-capture runs
//! it; stable toolchain is enough):
//!
//! ```text
//! cargo run --example seed_corpus -- <corpus dir> [<captured frames dir>]
//! ```
//!
//! - `request_frame/`: one sample request for every API and version kaas
//!   advertises, so every served decoder is reached from the first run;
//! - `roundtrip/`: the same for the versions the codec knows but kaas
//!   does not serve (the target also reads request_frame/);
//! - `record_batch/`: batches from the builder (plain, idempotent,
//!   transactional, headers, markers, several in a row) and the record sets
//!   of captured Produce requests (real clients' batches, compressed too);
//! - `state_files/`: a producer snapshot, a PID block file, a group slot
//!   file, a transaction slot file and a whole volume written by a real
//!   broker.
//!
//! File names are content hashes, so re-running never duplicates a seed.

use bytes::{Bytes, BytesMut};
use kaas_core::layout;
use kaas_core::producer::{encode_snapshot, BatchIdentity, ProducerTable};
use kaas_core::protocol::messages::{Gen, RequestBody, APIS};
use kaas_core::protocol::{decode_request, RequestHeader, Writer};
use kaas_core::record::{build_control_batch, BatchBuilder, ControlType, EndTxnMarker, NewRecord};
use kaas_fuzz::{archive, mem_volume::MemVolume, with_length_prefix};
use kaas_net::volume::Volume;
use kaas_net::{Broker, BrokerConfig};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn write_seed(dir: &Path, tag: &str, data: &[u8]) {
    // FNV-1a: stable, dependency-free content naming.
    let hash = data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    });
    let path = dir.join(format!("{tag}-{hash:016x}"));
    std::fs::write(&path, data).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

fn request_bytes(key: i16, version: i16, body: &RequestBody) -> Vec<u8> {
    let header = RequestHeader {
        api_key: key,
        api_version: version,
        correlation_id: 1,
        client_id: Some("seed".into()),
        unknown_tagged_fields: Vec::new(),
    };
    let mut buf = BytesMut::new();
    let mut w = Writer::new(&mut buf);
    header.encode(&mut w).expect("header encodes");
    body.encode(&mut w, version).expect("sample encodes");
    with_length_prefix(&buf)
}

fn requests(corpus: &Path) {
    let served = corpus.join("request_frame");
    let other = corpus.join("roundtrip");
    for &(key, name, lo, hi, _) in APIS {
        for version in lo..=hi {
            let dir = if kaas_net::handlers::supported_versions(key)
                .is_some_and(|(a, b)| (a..=b).contains(&version))
            {
                &served
            } else {
                &other
            };
            let mut g = Gen::new(0x5eed ^ ((key as u64) << 16) ^ version as u64);
            let body = RequestBody::sample(&mut g, key, version).expect("known api");
            write_seed(
                dir,
                &format!("gen-{name}-v{version}"),
                &request_bytes(key, version, &body),
            );
        }
    }
}

fn batches() -> Vec<(&'static str, Vec<u8>)> {
    let plain = BatchBuilder::new()
        .record(1_700_000_000_000, Some(b"k"), Some(b"v"))
        .record(1_700_000_000_001, None, Some(b"value two"))
        .build();
    let with_headers = BatchBuilder::idempotent(1 << 40, 0, 0)
        .push_record(
            NewRecord::new(5, Some(b"key"), None)
                .header("h1", Some(b"x"))
                .header("h2", None),
        )
        .build();
    let txn = BatchBuilder::transactional(7, 3, 2147483646)
        .record(9, None, Some(b"a"))
        .record(9, None, Some(b"b"))
        .build();
    let marker = |commit| {
        build_control_batch(
            7,
            3,
            10,
            EndTxnMarker {
                control_type: if commit {
                    ControlType::Commit
                } else {
                    ControlType::Abort
                },
                coordinator_epoch: 4,
            },
        )
    };
    let mut several = BytesMut::new();
    for (i, b) in [&plain, &txn, &marker(true)].into_iter().enumerate() {
        b.write_assigned(&mut several, i as i64 * 10, 0);
    }
    let mut torn = several.to_vec();
    torn.truncate(torn.len() - 7);
    vec![
        ("plain", plain.as_bytes().to_vec()),
        ("headers", with_headers.as_bytes().to_vec()),
        ("txn", txn.as_bytes().to_vec()),
        ("commit", marker(true).as_bytes().to_vec()),
        ("abort", marker(false).as_bytes().to_vec()),
        ("several", several.to_vec()),
        ("torn", torn),
    ]
}

const MAX_CAPTURED_RECORDS: usize = 64 << 10;
const CAPTURED_PER_CODEC: usize = 6;

/// The compression codec of the first batch (attributes bits 0-2).
fn codec_of(records: &Bytes) -> u8 {
    records.get(22).map_or(0xff, |b| b & 7)
}

/// The `records` of every Produce request among the captured frames.
fn captured_record_sets(captured: &Path) -> Vec<Bytes> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(captured) else {
        return out;
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for path in paths {
        let Ok(data) = std::fs::read(&path) else {
            continue;
        };
        for frame in kaas_fuzz::frames(&data) {
            let Ok(req) = decode_request(frame, kaas_net::handlers::supported_versions) else {
                continue;
            };
            if let RequestBody::Produce(p) = req.body {
                for t in p.topic_data {
                    for part in t.partition_data {
                        out.extend(part.records.filter(|r| !r.is_empty()));
                    }
                }
            }
        }
    }
    out
}

fn state_files(dir: &Path) {
    // A producer snapshot with a live, a transactional and a wrapped producer.
    let mut table = ProducerTable::new();
    let id = |pid, epoch, first_seq, last_seq, txn| BatchIdentity {
        producer_id: pid,
        epoch,
        first_seq,
        last_seq,
        is_transactional: txn,
        offset_delta: 1,
    };
    table.record_append(&id(1 << 40, 0, 0, 1, false), 0, 5, 100);
    table.record_append(&id(1 << 40, 0, 2, 3, false), 2, 6, 100);
    table.record_append(&id(7, 2, 0, 1, true), 4, 7, 200);
    table.record_append(&id(9, 0, i32::MAX, 0, false), 6, 8, 300);
    let mut snap = vec![0u8];
    snap.extend(encode_snapshot(&table, 8));
    write_seed(dir, "gen-snapshot", &snap);

    let mut pid = vec![1u8];
    pid.extend_from_slice(br#"{"next_block_start":3000}"#);
    write_seed(dir, "gen-pid-block", &pid);

    let mut slot = vec![2u8];
    slot.extend(group_slot(3, "g3"));
    write_seed(dir, "gen-group-slot", &slot);

    let mut txn = vec![2u8];
    txn.extend(txn_slot(3));
    write_seed(dir, "gen-txn-slot", &txn);

    write_seed(dir, "gen-volume", &[&[3u8][..], &broker_volume()].concat());
}

/// A slot file holding one group with a committed offset and a pending
/// transactional one.
fn group_slot(slot: u32, group: &str) -> Vec<u8> {
    use kaas_core::group::slot::GroupMeta;
    use kaas_core::group::{OffsetEntry, SlotOp, SlotState};
    let meta = GroupMeta {
        protocol_type: Some("consumer".into()),
        generation: 4,
        empty_since_ms: Some(1_700_000_000_000),
    };
    let entry = |offset| OffsetEntry {
        offset,
        leader_epoch: 0,
        metadata: "m".into(),
        commit_timestamp_ms: 1_700_000_000_000,
        expire_timestamp_ms: None,
    };
    let mut state = SlotState::new(slot, 0);
    state.apply(&SlotOp::Commit {
        group: group.into(),
        meta: meta.clone(),
        offsets: vec![("t".into(), 0, entry(42)), ("t".into(), 1, entry(7))],
    });
    state.apply(&SlotOp::StageTxnOffsets {
        group: group.into(),
        meta,
        producer_id: 1 << 40,
        producer_epoch: 0,
        offsets: vec![("u".into(), 0, entry(3))],
    });
    state.encode().expect("slot encodes")
}

/// A transaction slot file holding an idle id, an ongoing transaction with
/// a partition and a group, and a prepared one (as after a crash between
/// the phases of EndTxn).
fn txn_slot(slot: u32) -> Vec<u8> {
    use kaas_core::txn::{rules, Init, TxnSlotOp, TxnSlotState};
    let ids: Vec<String> = (0..)
        .map(|i| format!("tx-{i}"))
        .filter(|id| kaas_core::cluster::coordinator_slot(id) == slot)
        .take(3)
        .collect();
    let mut state = TxnSlotState::new(slot, 2);
    let mut pid = 1i64 << 40;
    for (i, id) in ids.iter().enumerate() {
        pid += 1;
        let Ok(Init::Ready(idle)) =
            rules::init_producer_id(None, id, 60_000, None, || pid, 1_700_000_000_000)
        else {
            panic!("a fresh id initializes");
        };
        let mut entry = idle.clone();
        if i > 0 {
            let parts = [("t".to_string(), 0), ("t".to_string(), 1)];
            entry =
                rules::add_to_transaction(&idle, pid, 0, &parts, &["g".into()], 1_700_000_000_100)
                    .expect("added")
                    .expect("changed");
        }
        if i > 1 {
            let Ok(kaas_core::txn::End::Prepare(prepared)) =
                rules::end_txn(&entry, pid, 0, true, 1_700_000_000_200)
            else {
                panic!("an ongoing transaction prepares");
            };
            entry = prepared;
        }
        state.apply(&TxnSlotOp::Put(entry));
    }
    state.encode().expect("slot encodes")
}

/// A volume as a real broker leaves it: topic `t` with two partitions,
/// `t-0` rolled into a second segment at offset 100, idempotent and plain
/// batches, producer snapshots, the cluster file and a PID block file.
fn broker_volume() -> Vec<u8> {
    let volume = Arc::new(MemVolume::new());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let dynvol: Arc<dyn Volume> = volume.clone();
        let config = BrokerConfig::new(([127, 0, 0, 1], 9092).into());
        let broker = Broker::open(config, dynvol, kaas_net::env::Env::in_place())
            .expect("open an empty volume");
        let batch = |pid: i64, seq: i32| {
            let mut b = BatchBuilder::idempotent(pid, 0, seq);
            for i in 0..10u8 {
                b.push(NewRecord::new(
                    1_700_000_000_000 + i64::from(i),
                    None,
                    Some(&[i; 8]),
                ));
            }
            b.build()
        };
        // Ten 10-record batches fill exactly one segment; the eleventh rolls.
        let size = batch(1 << 40, 0).size();
        let configs = BTreeMap::from([("segment.bytes".to_string(), (10 * size).to_string())]);
        broker
            .create_topic("t", 2, 1, configs)
            .await
            .expect("create t");
        broker
            .create_topic("u", 1, 1, BTreeMap::new())
            .await
            .expect("create u");
        let p = broker.partition("t", 0, -1).expect("t-0");
        for i in 0..12 {
            p.append(batch(1 << 40, i * 10)).await.expect("append");
        }
        let plain = BatchBuilder::new().record(3, None, Some(b"x")).build();
        broker
            .partition("t", 1, -1)
            .expect("t-1")
            .append(plain.clone())
            .await
            .expect("append");
        broker
            .partition("u", 0, -1)
            .expect("u-0")
            .append(plain)
            .await
            .expect("append");
        broker.flush_all().await;
        broker.producer_ids.next().await.expect("a pid");
    });
    let slot = kaas_core::cluster::coordinator_slot("g");
    assert_eq!(slot, 24, "archive::PATHS names slot 24 for group g");
    volume.put(
        &kaas_core::layout::group_slot_file(slot, 0),
        &group_slot(slot, "g"),
    );
    let files = volume.files();
    let entries = files
        .iter()
        .filter(|(path, _)| archive::PATHS.iter().any(|p| p == *path))
        .map(|(p, c)| (p.as_str(), c.as_slice()));
    let encoded = archive::encode(entries).expect("volume fits the archive format");
    assert!(
        files
            .keys()
            .any(|p| *p == layout::segment_path(&layout::partition_dir("t", 0), 100, 0)),
        "t-0 did not roll at offset 100: {:?}",
        files.keys().collect::<Vec<_>>()
    );
    encoded
}

fn main() {
    let mut args = std::env::args().skip(1);
    let corpus = PathBuf::from(args.next().unwrap_or_else(|| "corpus".into()));
    let captured = args.next().map(PathBuf::from);
    for t in ["request_frame", "roundtrip", "record_batch", "state_files"] {
        std::fs::create_dir_all(corpus.join(t)).expect("corpus dir");
    }
    requests(&corpus);
    let rb = corpus.join("record_batch");
    for (tag, bytes) in batches() {
        write_seed(&rb, &format!("gen-{tag}"), &bytes);
    }
    if let Some(captured) = captured {
        // A few of each compression codec, smallest first: real clients'
        // batches without bloating the corpus.
        let mut sets = captured_record_sets(&captured);
        sets.retain(|r| r.len() <= MAX_CAPTURED_RECORDS);
        sets.sort_by_key(|r| (codec_of(r), r.len()));
        sets.dedup();
        let mut per_codec = BTreeMap::new();
        for records in sets {
            let n = per_codec.entry(codec_of(&records)).or_insert(0);
            if *n < CAPTURED_PER_CODEC {
                *n += 1;
                write_seed(
                    &rb,
                    &format!("captured-codec{}", codec_of(&records)),
                    &records,
                );
            }
        }
    }
    state_files(&corpus.join("state_files"));
}
