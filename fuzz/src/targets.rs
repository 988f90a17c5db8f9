//! The byte-input targets: request frames, the codec round trip, record
//! batches and state files.

use crate::alloc_meter;
use crate::archive;
use crate::frames;
use crate::mem_volume::MemVolume;
use bytes::{Bytes, BytesMut};
use kaas_core::produce::records_without_key;
use kaas_core::producer::{
    decode_snapshot, encode_snapshot, pid_for, BatchIdentity, Classification,
};
use kaas_core::protocol::frame::encode_response;
use kaas_core::protocol::messages::{ResponseBody, APIS};
use kaas_core::protocol::{decode_request, Reader, Request, RequestError, Writer};
use kaas_core::record::{
    assign_in_place, build_control_batch, parse_end_txn_marker, split_batches, Compression,
    RecordBatch, Tail, BATCH_HEADER_LEN,
};
use kaas_net::broker::Isolation;
use kaas_net::handlers::{self, Outcome};
use kaas_net::volume::Volume;
use kaas_net::{Broker, BrokerConfig};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The memory a frame of `len` bytes may take to decode. Every length
/// field is checked against the bytes that remain before anything is
/// allocated, and arrays reserve at most 256 elements up front, so decoding
/// allocates a bounded multiple of the frame, never what a length claims.
pub fn decode_budget(len: usize) -> usize {
    256 * len + (256 << 10)
}

/// Highest `peak / (frame len + 1)` seen so far, reported on stderr when it
/// grows if `KAAS_FUZZ_STATS` is set (docs/fuzzing.md quotes it).
static WORST_RATIO: AtomicUsize = AtomicUsize::new(0);

fn note_ratio(len: usize, usage: alloc_meter::Usage) {
    let ratio = usage.peak_bytes / (len + 1);
    if ratio > WORST_RATIO.fetch_max(ratio, Ordering::Relaxed)
        && std::env::var_os("KAAS_FUZZ_STATS").is_some()
    {
        eprintln!(
            "kaas-fuzz: decode of a {len}-byte frame peaked at {} bytes ({ratio}x), largest allocation {}",
            usage.peak_bytes, usage.largest_bytes
        );
    }
}

/// (a) The request path of the server: frame length check, header, body
/// for every API and version kaas advertises, the answer to a refusal.
pub fn request_frame(data: &[u8]) {
    for frame in frames(data) {
        let len = frame.len();
        let (result, usage) =
            alloc_meter::measure(|| decode_request(frame, handlers::supported_versions));
        note_ratio(len, usage);
        assert!(
            usage.peak_bytes <= decode_budget(len),
            "decoding a {len}-byte frame took {} bytes",
            usage.peak_bytes
        );
        match result {
            Ok(req) => {
                let (lo, hi) = handlers::supported_versions(req.header.api_key)
                    .expect("decoded a request of an API we do not serve");
                assert!((lo..=hi).contains(&req.header.api_version));
                assert_eq!(req.body.api_key(), req.header.api_key);
                assert!(req.trailing <= len);
            }
            Err(e) => {
                let _ = e.to_string();
                match handlers::refuse(&e) {
                    Outcome::Respond { body, version } => {
                        let header = e.header().expect("answered a request without a header");
                        assert!(matches!(e, RequestError::UnsupportedVersion { .. }));
                        encode_response(header.api_key, version, header.correlation_id, &body)
                            .expect("the answer to a refused request encodes");
                    }
                    Outcome::Close(_) => {}
                    Outcome::Silent => panic!("a refused request went unanswered and open"),
                    Outcome::Later(_) => panic!("a refused request was answered later"),
                }
            }
        }
    }
}

/// Every version of every API the codec knows (not only the served ones):
/// the round trip covers the whole codec.
fn codec_versions(api_key: i16) -> Option<(i16, i16)> {
    APIS.iter()
        .find(|(k, ..)| *k == api_key)
        .map(|&(_, _, lo, hi, _)| (lo, hi))
}

fn encode_request(req: &Request) -> Bytes {
    let mut buf = BytesMut::new();
    let mut w = Writer::new(&mut buf);
    req.header.encode(&mut w).expect("a decoded header encodes");
    req.body
        .encode(&mut w, req.header.api_version)
        .unwrap_or_else(|e| {
            panic!(
                "decoded api key {} v{} does not encode: {e}",
                req.header.api_key, req.header.api_version
            )
        });
    buf.freeze()
}

/// (b) Whatever decodes re-encodes, decodes to an equal value, and encodes
/// again to identical bytes. Requests of every API and version, and, read
/// as `[api key][version][body]`, responses too (the client decodes them).
pub fn roundtrip(data: &[u8]) {
    for frame in frames(data) {
        if let Ok(req) = decode_request(frame.clone(), codec_versions) {
            let first = encode_request(&req);
            let again = decode_request(first.clone(), codec_versions)
                .unwrap_or_else(|e| panic!("re-encoded request does not decode: {e}"));
            assert_eq!(again.trailing, 0, "re-encoded request has trailing bytes");
            assert_eq!(again.header, req.header, "header changed in a round trip");
            assert_eq!(again.body, req.body, "body changed in a round trip");
            assert_eq!(encode_request(&again), first, "second encoding differs");
        }
        response_roundtrip(&frame);
    }
}

fn response_roundtrip(frame: &Bytes) {
    let mut r = Reader::new(frame.clone());
    let (Ok(key), Ok(version)) = (r.i16(), r.i16()) else {
        return;
    };
    let Some((lo, hi)) = codec_versions(key) else {
        return;
    };
    if !(lo..=hi).contains(&version) {
        return;
    }
    let Ok(resp) = ResponseBody::decode(key, version, &mut r) else {
        return;
    };
    let encode = |body: &ResponseBody| {
        let mut buf = BytesMut::new();
        body.encode(&mut Writer::new(&mut buf), version)
            .unwrap_or_else(|e| panic!("decoded response {key} v{version} does not encode: {e}"));
        buf.freeze()
    };
    let first = encode(&resp);
    let mut r = Reader::new(first.clone());
    let again = ResponseBody::decode(key, version, &mut r)
        .unwrap_or_else(|e| panic!("re-encoded response {key} v{version} does not decode: {e}"));
    assert!(r.is_empty(), "re-encoded response has trailing bytes");
    assert_eq!(
        again, resp,
        "response {key} v{version} changed in a round trip"
    );
    assert_eq!(encode(&again), first, "second encoding differs");
}

/// (c) Record batches: the single-batch view, the walk over concatenated
/// batches, validation, offset assignment, records and control markers.
pub fn record_batch(data: &[u8]) {
    let buf = Bytes::copy_from_slice(data);
    if let Ok(batch) = RecordBatch::new(buf.clone()) {
        assert_eq!(batch.size(), data.len());
        exercise_batch(&batch);
    }
    let mut walk = split_batches(buf);
    let mut whole = 0usize;
    for batch in walk.by_ref() {
        whole += batch.size();
        exercise_batch(&batch);
    }
    assert_eq!(walk.position(), whole);
    assert_eq!(walk.remaining().len(), data.len() - whole);
    match walk.tail() {
        Tail::Pending => panic!("walk ended without a tail"),
        Tail::Clean => assert_eq!(whole, data.len()),
        Tail::Partial { position, needed } => {
            assert_eq!(*position, whole);
            assert!(whole < data.len());
            if let Some(needed) = needed {
                assert!(*needed > data.len() - whole);
            }
        }
        Tail::Corrupt { position, error } => {
            assert_eq!(*position, whole);
            let _ = (error.error_code(), error.to_string());
        }
    }
}

fn exercise_batch(batch: &RecordBatch) {
    let _ = (
        batch.last_offset(),
        batch.next_offset(),
        batch.last_sequence(),
        batch.timestamp_type(),
        batch.is_transactional(),
        batch.has_producer_id(),
        format!("{batch:?}"),
    );
    let valid = batch.validate();
    let from_client = batch.validate_from_client();
    if from_client.is_ok() {
        assert!(
            valid.is_ok(),
            "validate_from_client passed what validate refused"
        );
    }
    for e in [&valid, &from_client]
        .into_iter()
        .filter_map(|r| r.as_ref().err())
    {
        let _ = (e.error_code(), e.to_string());
    }
    if let Some(id) = BatchIdentity::of(batch) {
        assert_eq!(id.producer_id, batch.producer_id());
        assert_eq!(id.last_seq, batch.last_sequence());
    }

    // Records: at most `recordCount` of them, at most one error, and a
    // valid uncompressed batch decodes completely.
    let declared = batch.record_count();
    let (mut records, mut errors) = (0i64, 0);
    for record in batch.records() {
        match record {
            Ok(r) => {
                records += 1;
                let _ = (r.offset, r.timestamp, r.key, r.value, r.headers.len());
            }
            Err(e) => {
                errors += 1;
                let _ = e.to_string();
            }
        }
    }
    assert!(errors <= 1, "records() yielded more than one error");
    assert!(records <= i64::from(declared.max(0)));
    if valid.is_ok() && errors == 0 && batch.compression() == Compression::None {
        assert_eq!(records, i64::from(declared));
    }

    // A marker read back from a control batch builds into an equal one.
    if let Ok(Some(marker)) = parse_end_txn_marker(batch) {
        let rebuilt = build_control_batch(
            batch.producer_id(),
            batch.producer_epoch(),
            batch.max_timestamp(),
            marker,
        );
        assert_eq!(parse_end_txn_marker(&rebuilt), Ok(Some(marker)));
        assert!(rebuilt.validate().is_ok());
    }

    // Offset assignment leaves the CRC valid and touches only its fields.
    let moved = batch.with_assigned(1 << 40, 7);
    assert_eq!(moved.base_offset(), 1 << 40);
    assert_eq!(moved.partition_leader_epoch(), 7);
    assert_eq!(moved.size(), batch.size());
    assert_eq!(moved.crc(), batch.crc());
    if valid.is_ok() {
        assert!(
            moved.validate().is_ok(),
            "offset assignment broke a valid batch"
        );
    }
    let mut copy = batch.as_bytes().to_vec();
    assert!(assign_in_place(&mut copy, 1 << 40, 7));
    assert_eq!(&copy[..], &moved.as_bytes()[..]);

    exercise_decompression(batch);
}

/// The most a fuzzed batch may decompress to: small, so bombs are cheap to
/// find and to refuse (the broker's bound is 64 MiB).
const FUZZ_DECOMPRESSED_LIMIT: usize = 1 << 20;

/// Decompression, as the cleaner and a compacted topic's key check run it:
/// bounded, a typed error or a twin with the same header (codec bits
/// aside) whose records compress back with the codec and decompress equal.
fn exercise_decompression(batch: &RecordBatch) {
    let codec = batch.compression();
    if codec == Compression::None {
        return;
    }
    let plain = match batch.decompressed(FUZZ_DECOMPRESSED_LIMIT) {
        Ok(plain) => plain,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    assert!(plain.size() <= BATCH_HEADER_LEN + FUZZ_DECOMPRESSED_LIMIT);
    assert_eq!(plain.compression(), Compression::None);
    assert_eq!(plain.attributes() & !7, batch.attributes() & !7);
    assert_eq!(
        (
            plain.base_offset(),
            plain.last_offset_delta(),
            plain.record_count()
        ),
        (
            batch.base_offset(),
            batch.last_offset_delta(),
            batch.record_count()
        )
    );
    assert!(plain.records().filter(Result::is_err).count() <= 1);
    let _ = records_without_key(&plain);
    if plain.record_count() > 0 {
        let again = plain.compressed_with(codec).expect("compresses");
        assert_eq!(again.compression(), codec);
        let back = again
            .decompressed(FUZZ_DECOMPRESSED_LIMIT)
            .expect("what kaas compressed decompresses");
        assert_eq!(
            back, plain,
            "a round trip through {codec:?} changed the batch"
        );
    }
}

/// (d) State file parsers: a corrupt file is an error, never a panic, and
/// what parses round-trips. The first byte picks the file kind.
pub fn state_files(data: &[u8]) {
    let Some((&kind, rest)) = data.split_first() else {
        return;
    };
    match kind % 4 {
        0 => producer_snapshot(rest),
        1 => pid_block_file(rest),
        2 => slot_file(rest),
        _ => broker_open(rest),
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

fn producer_snapshot(data: &[u8]) {
    let Ok((mut table, offset)) = decode_snapshot(data) else {
        return;
    };
    let encoded = encode_snapshot(&table, offset);
    let (again, again_offset) = decode_snapshot(&encoded).expect("our own snapshot parses");
    assert_eq!((&again, again_offset), (&table, offset));
    // The loaded state is used: classification and expiry must not panic.
    let pids: Vec<i64> = table.entries().map(|e| e.producer_id).collect();
    for pid in pids {
        let entry = table.get(pid).cloned().expect("listed entry");
        let probe = BatchIdentity {
            producer_id: pid,
            epoch: entry.epoch,
            first_seq: entry.last_seq().wrapping_add(1),
            last_seq: entry.last_seq().wrapping_add(1),
            is_transactional: false,
            offset_delta: 0,
        };
        let _ = table.classify(&probe);
        for b in &entry.batches {
            let retry = BatchIdentity {
                first_seq: b.first_seq,
                last_seq: b.last_seq,
                ..probe
            };
            if let Classification::Duplicate { first_offset, .. } = table.classify(&retry) {
                assert_eq!(first_offset, b.first_offset);
            }
        }
    }
    table.expire(i64::MAX, 1);
    table.expire(i64::MIN, i64::MAX);
}

fn pid_block_file(data: &[u8]) {
    let volume = Arc::new(MemVolume::new());
    volume.put(&kaas_core::layout::producer_id_block_file(0), data);
    let manager =
        kaas_net::broker::ProducerIdManager::new(volume.clone(), kaas_net::env::Env::in_place(), 0);
    let rt = runtime();
    let Ok(first) = rt.block_on(manager.next()) else {
        return;
    };
    assert!(
        first >= pid_for(0, 0) && first < pid_for(1, 0),
        "pid {first} outside broker 0's slice"
    );
    let second = rt
        .block_on(manager.next())
        .expect("the second id of a block");
    assert!(second > first, "pid {second} after {first}");
    // A restart never hands out an id again.
    let restarted =
        kaas_net::broker::ProducerIdManager::new(volume, kaas_net::env::Env::in_place(), 0);
    if let Ok(third) = rt.block_on(restarted.next()) {
        assert!(third > second, "pid {third} after restart, {second} before");
    }
}

/// A coordinator slot file: the same bytes read as a group slot and as a
/// transaction slot (both JSON, one layout each).
fn slot_file(data: &[u8]) {
    group_slot_file(data);
    txn_slot_file(data);
    // The same bytes as a slot journal: the scan ends inside them, and the
    // last whole record is what a coordinator would decode.
    let found = kaas_core::slot_journal::scan(data);
    assert!(found.valid_len <= data.len());
    if let Some(last) = found.last {
        group_slot_file(last);
        txn_slot_file(last);
    }
}

fn group_slot_file(data: &[u8]) {
    use kaas_core::group::SlotState;
    let Ok(state) = SlotState::decode(data, 3) else {
        return;
    };
    let encoded = state.encode().expect("a slot state encodes");
    let again = SlotState::decode(&encoded, 3).expect("our own slot file parses");
    assert_eq!(again, state);
}

/// A transaction slot file as the coordinator loads it: what decodes
/// encodes back the same, and the rules run on every loaded entry without
/// panicking, whatever epochs, states and times the file holds.
fn txn_slot_file(data: &[u8]) {
    use kaas_core::txn::{rules, Claim, TxnSlotState};
    let Ok(state) = TxnSlotState::decode(data, 3) else {
        return;
    };
    let encoded = state.encode().expect("a slot state encodes");
    let again = TxnSlotState::decode(&encoded, 3).expect("our own slot file parses");
    assert_eq!(again, state);
    for e in state.entries.values() {
        let (pid, epoch) = (e.producer_id, e.producer_epoch);
        let claim = Some(Claim {
            producer_id: pid,
            producer_epoch: epoch,
        });
        let _ = rules::init_producer_id(Some(e), &e.transactional_id, 60_000, claim, || 1, 0);
        let _ = rules::init_producer_id(Some(e), &e.transactional_id, 60_000, None, || 1, i64::MAX);
        let _ = rules::add_to_transaction(e, pid, epoch, &[("t".into(), 0)], &["g".into()], 0);
        for commit in [true, false] {
            let _ = rules::end_txn(e, pid, epoch, commit, i64::MIN);
            let _ = rules::end_txn_v2(e, pid, epoch, commit, || 1, i64::MAX);
            let _ = rules::end_txn_v2(e, pid, epoch.wrapping_add(1), commit, || 1, 0);
        }
        let _ = rules::complete(e, 0);
        let _ = rules::has_timed_out(e, i64::MAX);
        let _ = rules::has_timed_out(e, i64::MIN);
        let _ = rules::fence_and_abort(e, 0);
        let _ = rules::has_expired(e, i64::MIN, i64::MAX);
        let _ = rules::is_listed(e, &[], &[], i64::MAX, None, i64::MIN);
        let _ = rules::verify_partition(Some(e), pid, epoch, &("t".into(), 0));
        let _ = rules::verify_group(Some(e), pid, epoch, "g");
    }
}

/// What the broker serves, per partition: (high watermark, log start).
fn served(broker: &Broker) -> BTreeMap<(String, usize), (i64, i64)> {
    let mut out = BTreeMap::new();
    for topic in broker.topics() {
        for (i, seat) in topic.partitions.iter().enumerate() {
            // Alone on its volume, a broker leads every partition it opened.
            let Some(p) = seat.led() else { continue };
            out.insert(
                (topic.name.clone(), i),
                (p.high_watermark(), p.log_start_offset()),
            );
        }
    }
    out
}

/// Opens a broker on a volume made of fuzzed files (topic files, the
/// cluster file, segments, indexes, snapshots...): recovery must either
/// fail cleanly or give a broker that reads its logs, accepts an append,
/// and reopens to the same state after a clean shutdown.
fn broker_open(data: &[u8]) {
    let volume = Arc::new(MemVolume::new());
    for (path, content) in archive::decode(data) {
        volume.put(path, content);
    }
    let mut config = BrokerConfig::new(([127, 0, 0, 1], 9092).into());
    quiet_timers(&mut config);
    let rt = runtime();
    rt.block_on(async {
        let dynvol: Arc<dyn Volume> = volume.clone();
        let Ok(broker) = Broker::open(
            config.clone(),
            dynvol.clone(),
            kaas_net::env::Env::in_place(),
        ) else {
            return;
        };
        for topic in broker.topics() {
            for p in topic.partitions.iter().filter_map(|seat| seat.led()) {
                let start = p.log_start_offset();
                assert!(start <= p.high_watermark());
                if let Ok(read) = p.read(start, 1 << 20, Isolation::ReadUncommitted).await {
                    for batch in split_batches(read.records) {
                        let _ = batch.validate();
                    }
                }
            }
        }
        if let Ok(p) = broker.partition("t", 0, -1) {
            let batch = kaas_core::record::BatchBuilder::idempotent(5, 0, 0)
                .record(1, None, Some(b"v"))
                .build();
            let _ = p.append(batch).await;
        }
        broker.flush_all().await;
        let before = served(&broker);
        drop(broker);
        let Ok(reopened) = Broker::open(config, dynvol, kaas_net::env::Env::in_place()) else {
            panic!("a volume the broker opened and shut down cleanly does not reopen");
        };
        assert_eq!(
            served(&reopened),
            before,
            "state changed across a clean restart"
        );
    });
}

/// Partitions that CreateTopics and CreatePartitions may legally create
/// (up to `MAX_PARTITIONS` each) cost real work per partition; an input
/// asking for more than this many in all is skipped, to keep the target
/// fast. Counts over the limit cost nothing (they are refused) and still
/// run, so the limit itself stays fuzzed.
const MAX_NEW_PARTITIONS: i64 = 1000;

fn partitions_asked(body: &kaas_core::protocol::RequestBody) -> i64 {
    use kaas_core::protocol::RequestBody;
    use kaas_core::topic_config::MAX_PARTITIONS;
    let legal = |n: i64| {
        if n <= i64::from(MAX_PARTITIONS) {
            n.max(0)
        } else {
            0
        }
    };
    match body {
        RequestBody::CreateTopics(r) => r
            .topics
            .iter()
            .map(|t| legal(i64::from(t.num_partitions)) + legal(t.assignments.len() as i64))
            .sum(),
        RequestBody::CreatePartitions(r) => {
            r.topics.iter().map(|t| legal(i64::from(t.count))).sum()
        }
        _ => 0,
    }
}

/// A broker alone on its volume, on paused time: a long poll that waits
/// for weeks jumps from timer to timer, and every periodic timer makes that
/// thousands of wakeups per input. A heartbeat every lease/3 does (each
/// followed by an ownership round over every slot), and so did the
/// transaction reaper's pass every 10 s: three Fetch inputs of the corpus
/// (max_wait_ms of weeks) took 55 s of the debug corpus replay's 79 s, and
/// one took 11 s alone in the fuzz build, past libFuzzer's 10 s timeout.
/// A lease and a reaper pass of a day keep those wakeups few; both still
/// run (at start, and each virtual day of a long poll). The group
/// coordinator's timer, which wakes at least every 10 s, is the broker's
/// own and stays.
fn quiet_timers(config: &mut BrokerConfig) {
    const DAY_MS: i64 = 86_400_000;
    config.lease = kaas_core::cluster::membership::LeaseBounds {
        lease_ms: DAY_MS,
        clock_skew_ms: 1_000,
        volume_staleness_ms: 3_000,
    };
    config.txn.abort_timed_out_interval_ms = DAY_MS;
}

/// (f) The whole connection path of the server: `server::run_connection`
/// (framing, decoding, every handler, encoding) on an in-memory stream,
/// against a broker on an in-memory volume, on paused time (long polls and
/// rebalance delays pass instantly). The input is what a client sends on
/// one connection, so the request_frame corpus seeds it.
///
/// Besides not panicking: answers come in request order, each one for a
/// request that was sent, and each decodes with our codec at the version
/// the request was made with.
pub fn broker_requests(data: &[u8]) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // What the server will make of the stream, request by request.
    let mut expected = std::collections::VecDeque::new();
    let mut new_partitions = 0i64;
    for frame in frames(data) {
        match decode_request(frame, handlers::supported_versions) {
            Ok(req) => {
                new_partitions += partitions_asked(&req.body);
                let silent_ok = matches!(&req.body, kaas_core::protocol::RequestBody::Produce(p) if p.acks == 0);
                let version = req.header.api_version;
                expected.push_back((req.header, version, silent_ok));
            }
            Err(e) => {
                if let (Outcome::Respond { version, .. }, Some(h)) =
                    (handlers::refuse(&e), e.header())
                {
                    expected.push_back((h.clone(), version, false));
                } else {
                    break;
                }
            }
        }
    }
    if new_partitions > MAX_NEW_PARTITIONS {
        return;
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a tokio runtime");
    let responses = rt.block_on(async {
        let volume: Arc<dyn Volume> = Arc::new(MemVolume::new());
        let mut config = BrokerConfig::new(([127, 0, 0, 1], 9092).into());
        config.max_frame_bytes = crate::MAX_FRAME_BYTES;
        quiet_timers(&mut config);
        let broker = Broker::open(config, volume, kaas_net::env::Env::in_place())
            .expect("open an empty volume");
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let serving = tokio::spawn(kaas_net::server::run_connection(
            broker,
            server,
            ([127, 0, 0, 1], 40000).into(),
        ));
        let (mut rd, mut wr) = tokio::io::split(&mut client);
        let write = async {
            let _ = wr.write_all(data).await;
            let _ = wr.shutdown().await;
        };
        let mut out = Vec::new();
        let read = rd.read_to_end(&mut out);
        let (_, read) = tokio::join!(write, read);
        read.expect("reading the answers");
        serving.await.expect("the connection task panicked");
        out
    });
    // Match the answers to the requests.
    let mut rest = &responses[..];
    while !rest.is_empty() {
        let (len, body) = rest
            .split_first_chunk::<4>()
            .expect("a whole length prefix");
        let len = usize::try_from(i32::from_be_bytes(*len)).expect("a non-negative length");
        let frame = Bytes::copy_from_slice(body.get(..len).expect("a whole answer"));
        rest = &body[len..];
        let correlation_id = i32::from_be_bytes(frame[..4].try_into().expect("4 bytes"));
        loop {
            let (header, version, silent_ok) = expected
                .pop_front()
                .unwrap_or_else(|| panic!("an answer ({correlation_id}) to no request"));
            // A Produce with acks=0 may go unanswered: skip it when the
            // answer is not its own.
            let decoded = (header.correlation_id == correlation_id).then(|| {
                kaas_net::client::decode_response(
                    header.api_key,
                    version,
                    correlation_id,
                    frame.clone(),
                )
            });
            match decoded {
                Some(Ok(_)) => break,
                _ if silent_ok => continue,
                None => panic!(
                    "answer {correlation_id} where {} was due",
                    header.correlation_id
                ),
                Some(Err(e)) => panic!(
                    "answer to api key {} v{version} does not decode: {e}",
                    header.api_key
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kaas_core::protocol::RequestHeader;

    #[test]
    fn frames_are_cut_as_the_server_reads_them() {
        let mut data = crate::with_length_prefix(&[0u8; 10]);
        data.extend_from_slice(&crate::with_length_prefix(&[1u8; 8]));
        data.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 9, 9]);
        let frames = frames(&data);
        assert_eq!(frames.len(), 2);
        assert_eq!(frames[1].len(), 8);
        // A body cut short is decoded with what there is.
        assert_eq!(
            crate::frames(&[0, 0, 0, 20, 1, 2, 3, 4, 5, 6, 7, 8, 9])[0].len(),
            9
        );
    }

    #[test]
    fn archive_round_trips() {
        let entries = [
            (archive::PATHS[1].as_str(), &b"{}"[..]),
            (archive::PATHS[3].as_str(), &[1u8, 2][..]),
        ];
        let bytes = archive::encode(entries).unwrap();
        assert_eq!(archive::decode(&bytes), entries.to_vec());
    }

    #[test]
    fn request_header_of_a_refusal_is_kept() {
        let h = RequestHeader {
            api_key: 18,
            api_version: 99,
            correlation_id: 1,
            client_id: None,
            unknown_tagged_fields: Vec::new(),
        };
        let mut buf = BytesMut::new();
        h.encode(&mut Writer::new(&mut buf)).unwrap();
        request_frame(&crate::with_length_prefix(&buf));
    }
}
