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
use kaas_net::volume::{LocalVolume, SegmentFile, Volume};
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

    fn pass(&self, path: &str) {
        if !path.starts_with(&self.prefix) {
            return;
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
    }
}

struct GatedVolume {
    inner: LocalVolume,
    gate: Arc<Gate>,
}

struct GatedFile {
    inner: Arc<dyn SegmentFile>,
    path: String,
    gate: Arc<Gate>,
}

impl SegmentFile for GatedFile {
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn append(&self, data: &[u8]) -> io::Result<u64> {
        self.inner.append(data)
    }
    fn read_at(&self, pos: u64, len: usize) -> io::Result<Bytes> {
        self.inner.read_at(pos, len)
    }
    fn sync(&self) -> io::Result<()> {
        self.gate.pass(&self.path);
        self.inner.sync()
    }
    fn truncate(&self, len: u64) -> io::Result<()> {
        self.inner.truncate(len)
    }
}

impl Volume for GatedVolume {
    fn read(&self, path: &str) -> io::Result<Option<Bytes>> {
        self.inner.read(path)
    }
    fn write_atomic(&self, path: &str, data: &[u8]) -> io::Result<()> {
        self.gate.pass(path);
        self.inner.write_atomic(path, data)
    }
    fn create_exclusive(&self, path: &str, data: &[u8]) -> io::Result<()> {
        self.gate.pass(path);
        self.inner.create_exclusive(path, data)
    }
    fn list(&self, dir: &str) -> io::Result<Vec<String>> {
        self.inner.list(dir)
    }
    fn create_dir_all(&self, dir: &str) -> io::Result<()> {
        self.inner.create_dir_all(dir)
    }
    fn remove(&self, path: &str) -> io::Result<()> {
        self.inner.remove(path)
    }
    fn remove_dir_all(&self, dir: &str) -> io::Result<()> {
        self.inner.remove_dir_all(dir)
    }
    fn open_segment(&self, path: &str, create: bool) -> io::Result<Arc<dyn SegmentFile>> {
        Ok(Arc::new(GatedFile {
            inner: self.inner.open_segment(path, create)?,
            path: path.to_string(),
            gate: self.gate.clone(),
        }))
    }
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

async fn latest_offset(conn: &mut Connection, topic: &str) -> i64 {
    let req = RequestBody::ListOffsets(ListOffsetsRequest {
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
    });
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
    let dir = tempfile::tempdir().unwrap();
    let gate = Arc::new(Gate {
        prefix: "topics/slow-0/".into(),
        state: Mutex::default(),
        changed: Condvar::new(),
    });
    let volume = Arc::new(GatedVolume {
        inner: LocalVolume::new(dir.path()).unwrap(),
        gate: gate.clone(),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let broker = Broker::open(
        BrokerConfig::new(addr),
        volume,
        kaas_net::env::Env::system(),
    )
    .unwrap();
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
