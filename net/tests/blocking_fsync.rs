//! A slow disk stalls only what waits for it.
//!
//! The volume here holds every fsync of one partition's segments until the
//! test releases it. Meanwhile a Fetch of that same partition, Produces to it
//! with acks=1 that roll its segments, a Produce with acks=all to another
//! partition, ListOffsets and ApiVersions on other connections must all be
//! answered; the acks=all Produce to the stalled partition must not be, and
//! is answered once the fsync completes. Before the partition state machine
//! split, a roll fsynced inline under the partition lock on an async worker:
//! on a slow volume the whole broker stopped.
#![cfg(not(madsim))]
// A test: an unwrap that fails is the test failing.
#![allow(clippy::unwrap_used)]

use bytes::Bytes;
use kaas_core::protocol::messages::*;
use kaas_core::protocol::{RequestBody, ResponseBody};
use kaas_core::record::{BatchBuilder, NewRecord};
use kaas_net::client::{single_partition_fetch, single_partition_produce, Connection};
use kaas_net::volume::hooked::{DiskWait, HookedVolume};
use kaas_net::volume::LocalVolume;
use kaas_net::{Broker, BrokerConfig};
use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// Holds fsyncs of files under `prefix` while closed.
struct Gate {
    prefix: String,
    state: Mutex<GateState>,
    changed: Condvar,
}

#[derive(Default)]
struct GateState {
    closed: bool,
    /// fsyncs waiting at the gate right now.
    waiting: usize,
}

impl Gate {
    fn set_closed(&self, closed: bool) {
        let mut s = self.state.lock().unwrap();
        s.closed = closed;
        self.changed.notify_all();
    }

    fn waiting(&self) -> usize {
        self.state.lock().unwrap().waiting
    }

    /// The volume's hook: holds a disk wait on a file under the prefix.
    fn pass(&self, wait: DiskWait<'_>) -> io::Result<()> {
        let (DiskWait::Sync(path)
        | DiskWait::WriteAtomic(path)
        | DiskWait::CreateExclusive(path)
        | DiskWait::Rename(path)
        | DiskWait::SyncDir(path)
        | DiskWait::FreeTail(path)) = wait;
        if !path.starts_with(&self.prefix) {
            return Ok(());
        }
        let mut s = self.state.lock().unwrap();
        s.waiting += 1;
        self.changed.notify_all();
        // Bounded: a test that forgets to open the gate fails, not hangs.
        let (mut s, _) = self
            .changed
            .wait_timeout_while(s, Duration::from_secs(60), |s| s.closed)
            .unwrap();
        s.waiting -= 1;
        Ok(())
    }
}

/// A broker on a volume whose fsyncs of files under `prefix` wait at the
/// returned gate, and the listener to serve it on.
async fn gated_broker(
    prefix: &str,
) -> (
    tempfile::TempDir,
    Arc<Gate>,
    Arc<Broker>,
    tokio::net::TcpListener,
) {
    let dir = tempfile::tempdir().unwrap();
    let gate = Arc::new(Gate {
        prefix: prefix.into(),
        state: Mutex::default(),
        changed: Condvar::new(),
    });
    let held = gate.clone();
    let volume = Arc::new(HookedVolume::new(
        LocalVolume::new(dir.path()).unwrap(),
        move |wait| held.pass(wait),
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let broker = Broker::open(
        BrokerConfig::new(addr),
        volume,
        kaas_net::env::Env::system(),
    )
    .unwrap();
    (dir, gate, broker, listener)
}

fn batch(value: &str) -> Bytes {
    let mut b = BatchBuilder::new();
    b.push(NewRecord::new(1_000, None, Some(value.as_bytes())));
    b.build().as_bytes().clone()
}

/// (error code, base offset) of a one-batch Produce.
async fn produce(conn: &mut Connection, topic: &str, acks: i16, value: &str) -> (i16, i64) {
    let req = single_partition_produce(topic, 0, batch(value), acks, 30_000);
    match conn.send(produce_request::API_KEY, 9, &req).await.unwrap() {
        ResponseBody::Produce(r) => {
            let p = &r.responses[0].partition_responses[0];
            (p.error_code, p.base_offset)
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// ListOffsets for the latest offset of partition 0 (the high watermark).
fn latest_request(topic: &str) -> RequestBody {
    RequestBody::ListOffsets(ListOffsetsRequest {
        replica_id: -1,
        topics: vec![list_offsets_request::ListOffsetsTopic {
            name: topic.into(),
            partitions: vec![list_offsets_request::ListOffsetsPartition {
                partition_index: 0,
                timestamp: -1,
                current_leader_epoch: -1,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    })
}

async fn latest_offset(conn: &mut Connection, topic: &str) -> i64 {
    let req = latest_request(topic);
    match conn
        .send(list_offsets_request::API_KEY, 7, &req)
        .await
        .unwrap()
    {
        ResponseBody::ListOffsets(r) => {
            let p = &r.topics[0].partitions[0];
            assert_eq!(p.error_code, 0);
            p.offset
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// (error code, high watermark, record bytes) of a Fetch from offset 0.
async fn fetch(conn: &mut Connection, topic: &str) -> (i16, i64, usize) {
    let req = single_partition_fetch(topic, 0, 0, -1, 0);
    match conn.send(fetch_request::API_KEY, 11, &req).await.unwrap() {
        ResponseBody::Fetch(r) => {
            let p = &r.responses[0].partitions[0];
            let bytes = p.records.as_ref().map_or(0, |r| r.len());
            (p.error_code, p.high_watermark, bytes)
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// Each call the stalled broker must answer gets this long; a broker that
/// blocks never answers at all, so the bound only keeps a failure short.
const ANSWER_WITHIN: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_fsync_stalls_only_the_acks_all_produce_that_waits_for_it() {
    let (_dir, gate, broker, listener) = gated_broker("topics/slow-0/").await;
    let addr = listener.local_addr().unwrap();
    // Small segments: the acks=1 produces below roll them while the fsync
    // is held.
    let small = BTreeMap::from([("segment.bytes".to_string(), "200".to_string())]);
    broker.create_topic("slow", 1, 1, small).await.unwrap();
    broker
        .create_topic("fast", 1, 1, BTreeMap::new())
        .await
        .unwrap();
    tokio::spawn(kaas_net::server::serve(
        broker,
        listener,
        std::future::pending(),
    ));

    let mut other = Connection::connect(addr).await.unwrap();
    assert_eq!(produce(&mut other, "slow", -1, "durable").await, (0, 0));

    gate.set_closed(true);
    let stalled = tokio::spawn(async move {
        let mut conn = Connection::connect(addr).await.unwrap();
        produce(&mut conn, "slow", -1, "waits for the disk").await
    });
    for _ in 0..2_000 {
        if gate.waiting() > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(gate.waiting() > 0, "the flusher never reached the fsync");

    let answered = async {
        // ApiVersions on another connection.
        let req = RequestBody::ApiVersions(ApiVersionsRequest::default());
        let versions = other
            .send(api_versions_request::API_KEY, 3, &req)
            .await
            .unwrap();
        assert!(matches!(versions, ResponseBody::ApiVersions(r) if r.error_code == 0));
        // A Fetch of the stalled partition sees what was durable before.
        let (code, hw, bytes) = fetch(&mut other, "slow").await;
        assert_eq!((code, hw), (0, 1));
        assert!(bytes > 0);
        assert_eq!(latest_offset(&mut other, "slow").await, 1);
        // acks=1 appends to the stalled partition roll its segments and are
        // answered without waiting for the disk.
        for i in 0..5 {
            let (code, base) = produce(&mut other, "slow", 1, &format!("rolls {i:0>150}")).await;
            assert_eq!(code, 0);
            assert!(base >= 2, "offset {base}");
        }
        // acks=all to another partition: its own fsync is not held.
        assert_eq!(produce(&mut other, "fast", -1, "elsewhere").await, (0, 0));
    };
    tokio::time::timeout(ANSWER_WITHIN, answered)
        .await
        .expect("the broker stopped answering while one partition's fsync was held");
    assert!(
        !stalled.is_finished(),
        "an acks=all produce was answered before its fsync"
    );
    // Nothing past the held fsync became visible.
    assert_eq!(latest_offset(&mut other, "slow").await, 1);

    gate.set_closed(false);
    let (code, base) = tokio::time::timeout(ANSWER_WITHIN, stalled)
        .await
        .expect("the stalled produce was never answered")
        .unwrap();
    assert_eq!((code, base), (0, 1));
    // The acks=1 appends made while the fsync was held become durable with
    // the flusher's next round.
    let mut latest = 0;
    for _ in 0..2_000 {
        latest = latest_offset(&mut other, "slow").await;
        if latest == 7 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(latest, 7);
}

/// Reads one response frame (without its length prefix) from a raw stream.
async fn read_frame(stream: &mut tokio::net::TcpStream) -> Bytes {
    use tokio::io::AsyncReadExt;
    let len = stream.read_i32().await.unwrap();
    let mut body = vec![0; usize::try_from(len).unwrap()];
    stream.read_exact(&mut body).await.unwrap();
    Bytes::from(body)
}

/// Produces pipelined on one connection are all appended while the first
/// waits for its fsync, so they share it; a ListOffsets sent behind them
/// is answered after them, in order, and sees them (a request other than
/// Produce waits for every answer before it, as if one at a time).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_produces_share_a_held_fsync_and_what_follows_waits_for_them() {
    use kaas_net::client::{decode_response, encode_request};
    use tokio::io::AsyncWriteExt;
    let (_dir, gate, broker, listener) = gated_broker("topics/slow-0/").await;
    let addr = listener.local_addr().unwrap();
    broker
        .create_topic("slow", 1, 1, BTreeMap::new())
        .await
        .unwrap();
    let partition = broker.partition("slow", 0, -1).unwrap();
    tokio::spawn(kaas_net::server::serve(
        broker,
        listener,
        std::future::pending(),
    ));

    gate.set_closed(true);
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let produce = |value: &str| single_partition_produce("slow", 0, batch(value), -1, 30_000);
    let latest = latest_request("slow");
    let requests = [
        (produce_request::API_KEY, 9, produce("a")),
        (produce_request::API_KEY, 9, produce("b")),
        (produce_request::API_KEY, 9, produce("c")),
        (list_offsets_request::API_KEY, 7, latest),
    ];
    for (id, (key, version, body)) in requests.iter().enumerate() {
        let frame = encode_request(*key, *version, id as i32, None, body).unwrap();
        stream.write_all(&frame).await.unwrap();
    }
    // All three produces are appended while the first fsync is held.
    for _ in 0..2_000 {
        if gate.waiting() > 0 && partition.log_end_offset() == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(gate.waiting() > 0, "the flusher never reached the fsync");
    assert_eq!(
        partition.log_end_offset(),
        3,
        "the pipelined produces were not appended while the first waited"
    );
    let nothing = tokio::time::timeout(Duration::from_millis(200), read_frame(&mut stream)).await;
    assert!(nothing.is_err(), "an answer came before the fsync");

    gate.set_closed(false);
    let answers = async {
        let mut got = Vec::new();
        for (id, (key, version, _)) in requests.iter().enumerate() {
            let frame = read_frame(&mut stream).await;
            got.push(decode_response(*key, *version, id as i32, frame).unwrap());
        }
        got
    };
    let answers = tokio::time::timeout(ANSWER_WITHIN, answers)
        .await
        .expect("the pipelined requests were not all answered");
    for (i, answer) in answers[..3].iter().enumerate() {
        match answer {
            ResponseBody::Produce(r) => {
                let p = &r.responses[0].partition_responses[0];
                assert_eq!((p.error_code, p.base_offset), (0, i as i64));
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    match &answers[3] {
        ResponseBody::ListOffsets(r) => assert_eq!(r.topics[0].partitions[0].offset, 3),
        other => panic!("unexpected {other:?}"),
    }
}
