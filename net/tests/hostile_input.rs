//! Hostile input over real TCP: every way a client can misbehave gets an
//! error answer or a closed connection, and the broker keeps serving
//! everyone else. After each case a well-behaved client produces and
//! fetches through the same broker.
#![cfg(not(madsim))]

mod support;

use bytes::{BufMut, Bytes, BytesMut};
use kaas_core::protocol::messages::*;
use kaas_core::protocol::{ErrorCode, RequestBody, RequestHeader, ResponseBody, Writer};
use kaas_core::record::{split_batches, BatchBuilder};
use kaas_net::client::{decode_response, encode_request, Connection};
use std::net::SocketAddr;
use std::time::Duration;
use support::TestBroker;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Frames above this close the connection in these tests (1 MiB keeps the
/// "exactly too large" case cheap).
const MAX_FRAME: usize = 1 << 20;
const PATIENCE: Duration = Duration::from_secs(10);

async fn start_broker() -> TestBroker {
    support::start_broker(|config| config.max_frame_bytes = MAX_FRAME).await
}

fn frame(header: &RequestHeader, body: &[u8]) -> Vec<u8> {
    let mut buf = BytesMut::new();
    buf.put_i32(0);
    header
        .encode(&mut Writer::new(&mut buf))
        .expect("header encodes");
    buf.put_slice(body);
    let len = (buf.len() - 4) as i32;
    buf[0..4].copy_from_slice(&len.to_be_bytes());
    buf.to_vec()
}

fn header(api_key: i16, api_version: i16, correlation_id: i32) -> RequestHeader {
    RequestHeader {
        api_key,
        api_version,
        correlation_id,
        client_id: Some("hostile".into()),
        unknown_tagged_fields: Vec::new(),
    }
}

async fn send(addr: SocketAddr, bytes: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(bytes).await.expect("send");
    s
}

/// The broker closes the connection without answering.
async fn assert_closed_silently(mut s: TcpStream, case: &str) {
    let mut buf = [0u8; 64];
    match tokio::time::timeout(PATIENCE, s.read(&mut buf)).await {
        Ok(Ok(0)) => {}
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Ok(Ok(n)) => panic!("{case}: expected a close, got {n} bytes: {:?}", &buf[..n]),
        Ok(Err(e)) => panic!("{case}: expected a close, got {e}"),
        Err(_) => panic!("{case}: the connection is still open after {PATIENCE:?}"),
    }
}

/// Reads one response frame (without its length prefix).
async fn read_response(s: &mut TcpStream) -> Bytes {
    let mut len = [0u8; 4];
    tokio::time::timeout(PATIENCE, s.read_exact(&mut len))
        .await
        .expect("a response in time")
        .expect("a response");
    let len = usize::try_from(i32::from_be_bytes(len)).expect("a valid length");
    let mut body = vec![0u8; len];
    tokio::time::timeout(PATIENCE, s.read_exact(&mut body))
        .await
        .expect("a response in time")
        .expect("a whole response");
    Bytes::from(body)
}

fn produce(topic: &str, value: &[u8]) -> RequestBody {
    let batch = BatchBuilder::new().record(1, None, Some(value)).build();
    kaas_net::client::single_partition_produce(topic, 0, batch.into_bytes(), -1, 5_000)
}

fn fetch(topic: &str, max_wait_ms: i32) -> RequestBody {
    kaas_net::client::single_partition_fetch(topic, 0, 0, -1, max_wait_ms)
}

/// A well-behaved client still gets ApiVersions, Produce and Fetch served.
async fn assert_still_serving(b: &TestBroker, case: &str) {
    let topic = format!("after-{case}");
    let value = format!("value after {case}");
    let mut conn = tokio::time::timeout(PATIENCE, Connection::connect(b.addr))
        .await
        .unwrap_or_else(|_| panic!("{case}: connect timed out"))
        .unwrap_or_else(|e| panic!("{case}: cannot connect: {e}"));
    let versions = conn
        .send(
            api_versions_request::API_KEY,
            3,
            &RequestBody::ApiVersions(ApiVersionsRequest::default()),
        )
        .await
        .unwrap_or_else(|e| panic!("{case}: ApiVersions: {e}"));
    assert!(matches!(versions, ResponseBody::ApiVersions(r) if r.error_code == 0));
    match conn
        .send(
            produce_request::API_KEY,
            9,
            &produce(&topic, value.as_bytes()),
        )
        .await
        .unwrap_or_else(|e| panic!("{case}: Produce: {e}"))
    {
        ResponseBody::Produce(r) => {
            assert_eq!(
                r.responses[0].partition_responses[0].error_code, 0,
                "{case}"
            )
        }
        other => panic!("{case}: {other:?}"),
    }
    match conn
        .send(fetch_request::API_KEY, 12, &fetch(&topic, 0))
        .await
        .unwrap_or_else(|e| panic!("{case}: Fetch: {e}"))
    {
        ResponseBody::Fetch(r) => {
            let p = &r.responses[0].partitions[0];
            assert_eq!(p.error_code, 0, "{case}");
            let records = p.records.clone().unwrap_or_default();
            let values: Vec<Bytes> = split_batches(records)
                .flat_map(|b| b.records().collect::<Vec<_>>())
                .filter_map(|r| r.ok().and_then(|r| r.value))
                .collect();
            assert_eq!(values, vec![Bytes::from(value)], "{case}");
        }
        other => panic!("{case}: {other:?}"),
    }
    assert!(
        b.broker.topic(&topic).is_some(),
        "{case}: topic not created"
    );
}

#[tokio::test]
async fn garbage_bytes_close_the_connection() {
    let b = start_broker().await;
    // An HTTP request: "GET " read as a length is over a gigabyte.
    let s = send(b.addr, b"GET / HTTP/1.1\r\nHost: kaas\r\n\r\n").await;
    assert_closed_silently(s, "http").await;
    // A plausible length, then bytes that are no request header.
    let mut junk = vec![0, 0, 0, 40];
    junk.extend((0u8..40).map(|i| i.wrapping_mul(97) | 0x80));
    let s = send(b.addr, &junk).await;
    assert_closed_silently(s, "junk").await;
    assert_still_serving(&b, "garbage").await;
}

#[tokio::test]
async fn truncated_frame_then_disconnect_leaves_the_broker_serving() {
    let b = start_broker().await;
    let mut s = send(b.addr, &[0, 0, 0, 100, 0, 18, 0, 3, 0, 0]).await;
    s.shutdown().await.unwrap();
    assert_closed_silently(s, "truncated").await;
    assert_still_serving(&b, "truncated").await;
}

#[tokio::test]
async fn huge_length_prefix_is_refused_before_reading_a_body() {
    let b = start_broker().await;
    // No body follows: the close can only come from the length check.
    for (case, len) in [
        ("i32-max", i32::MAX),
        ("one-over-max", MAX_FRAME as i32 + 1),
    ] {
        let s = send(b.addr, &len.to_be_bytes()).await;
        assert_closed_silently(s, case).await;
    }
    assert_still_serving(&b, "huge-length").await;
}

#[tokio::test]
async fn negative_and_too_short_lengths_close_the_connection() {
    let b = start_broker().await;
    for (case, len) in [
        ("minus-one", -1i32),
        ("i32-min", i32::MIN),
        ("zero", 0),
        ("seven", 7),
    ] {
        let s = send(b.addr, &len.to_be_bytes()).await;
        assert_closed_silently(s, case).await;
    }
    assert_still_serving(&b, "negative-length").await;
}

#[tokio::test]
async fn unknown_api_key_closes_the_connection() {
    let b = start_broker().await;
    for key in [-1i16, 1000, 17 /* SaslHandshake: not served */] {
        let s = send(b.addr, &frame(&header(key, 0, 5), &[])).await;
        assert_closed_silently(s, &format!("api key {key}")).await;
    }
    assert_still_serving(&b, "unknown-api").await;
}

#[tokio::test]
async fn unsupported_version_closes_the_connection() {
    let b = start_broker().await;
    for (key, version) in [
        (produce_request::API_KEY, 99i16),
        (fetch_request::API_KEY, -1),
    ] {
        let s = send(b.addr, &frame(&header(key, version, 6), &[])).await;
        assert_closed_silently(s, &format!("api {key} v{version}")).await;
    }
    assert_still_serving(&b, "unsupported-version").await;
}

#[tokio::test]
async fn api_versions_of_an_unsupported_version_is_answered_in_v0() {
    let b = start_broker().await;
    // A newer client's ApiVersions v99 (flexible header, unknown body).
    let mut s = send(
        b.addr,
        &frame(&header(api_versions_request::API_KEY, 99, 77), &[0, 1, 2]),
    )
    .await;
    let response = read_response(&mut s).await;
    match decode_response(api_versions_request::API_KEY, 0, 77, response).unwrap() {
        ResponseBody::ApiVersions(r) => {
            assert_eq!(r.error_code, ErrorCode::UnsupportedVersion.code());
            let range = r
                .api_keys
                .iter()
                .find(|k| k.api_key == api_versions_request::API_KEY)
                .expect("ApiVersions is listed");
            assert!(range.max_version >= 3);
        }
        other => panic!("{other:?}"),
    }
    // The connection stays usable: the client retries with a version we have.
    // v3 body: two empty compact strings, no tagged fields.
    let retry = frame(&header(api_versions_request::API_KEY, 3, 78), &[1, 1, 0]);
    s.write_all(&retry).await.unwrap();
    let response = read_response(&mut s).await;
    assert!(matches!(
        decode_response(api_versions_request::API_KEY, 3, 78, response).unwrap(),
        ResponseBody::ApiVersions(r) if r.error_code == 0
    ));
    assert_still_serving(&b, "api-versions-v99").await;
}

#[tokio::test]
async fn valid_header_with_an_undecodable_body_closes_the_connection() {
    let b = start_broker().await;
    let cases: [(&str, i16, i16, &[u8]); 3] = [
        // Metadata v12: a compact topics array claiming 2^32 - 2 entries.
        (
            "metadata-huge-array",
            metadata_request::API_KEY,
            12,
            &[0xff, 0xff, 0xff, 0xff, 0x0f],
        ),
        // Produce v8: a topics array of i32::MAX in a few bytes.
        (
            "produce-huge-array",
            produce_request::API_KEY,
            8,
            &[0xff, 0xff, 0, 1, 0, 0, 0, 100, 0x7f, 0xff, 0xff, 0xff],
        ),
        // CreateTopics v4: ends in the middle of the first field.
        (
            "create-topics-cut",
            create_topics_request::API_KEY,
            4,
            &[0, 0],
        ),
    ];
    for (case, key, version, body) in cases {
        let s = send(b.addr, &frame(&header(key, version, 9), body)).await;
        assert_closed_silently(s, case).await;
    }
    assert_still_serving(&b, "undecodable-body").await;
}

#[tokio::test]
async fn disconnect_mid_request_leaves_the_broker_serving() {
    let b = start_broker().await;
    // Half of a valid Produce, then gone.
    let whole = encode_request(
        produce_request::API_KEY,
        9,
        1,
        Some("hostile"),
        &produce("mid-request", b"never written"),
    )
    .unwrap();
    let s = send(b.addr, &whole[..whole.len() / 2]).await;
    drop(s);
    // A whole long-poll Fetch, gone before its answer.
    let poll = encode_request(fetch_request::API_KEY, 12, 2, None, &fetch("idle", 2_000)).unwrap();
    let s = send(b.addr, &poll).await;
    drop(s);
    // A whole Produce, gone before its answer: the write still lands.
    let s = send(b.addr, &whole).await;
    drop(s);
    assert_still_serving(&b, "mid-request").await;
}

#[tokio::test]
async fn a_stalled_client_does_not_hold_up_anyone_else() {
    let b = start_broker().await;
    // Slowloris: a frame that never completes, on a connection kept open.
    let stalled = send(b.addr, &[0, 0, 0x10, 0, 0, 18, 0]).await;
    // And a connection that pipelines requests without reading answers.
    let mut pipelined = Vec::new();
    for id in 0..50 {
        pipelined.extend(frame(
            &header(api_versions_request::API_KEY, 3, id),
            &[1, 1, 0],
        ));
    }
    let flood = send(b.addr, &pipelined).await;
    assert_still_serving(&b, "stalled").await;
    drop((stalled, flood));
}

/// Found by the `broker_requests` fuzz target: a CreateTopics (or
/// CreatePartitions) asking for hundreds of millions of partitions was
/// attempted, one directory at a time, and the broker's topic
/// administration never came back.
#[tokio::test]
async fn a_request_for_billions_of_partitions_is_refused_not_attempted() {
    let b = start_broker().await;
    let mut conn = Connection::connect(b.addr).await.unwrap();
    let create = |name: &str, partitions| {
        RequestBody::CreateTopics(CreateTopicsRequest {
            topics: vec![create_topics_request::CreatableTopic {
                name: name.into(),
                num_partitions: partitions,
                replication_factor: 1,
                ..Default::default()
            }],
            timeout_ms: 5_000,
            ..Default::default()
        })
    };
    let code = |resp: ResponseBody| match resp {
        ResponseBody::CreateTopics(r) => r.topics[0].error_code,
        other => panic!("{other:?}"),
    };
    let resp = tokio::time::timeout(
        PATIENCE,
        conn.send(create_topics_request::API_KEY, 7, &create("huge", i32::MAX)),
    )
    .await
    .expect("an answer in time")
    .unwrap();
    assert_eq!(code(resp), ErrorCode::InvalidPartitions.code());
    let resp = conn
        .send(create_topics_request::API_KEY, 7, &create("small", 2))
        .await
        .unwrap();
    assert_eq!(code(resp), 0);
    let grow = RequestBody::CreatePartitions(CreatePartitionsRequest {
        topics: vec![create_partitions_request::CreatePartitionsTopic {
            name: "small".into(),
            count: i32::MAX,
            ..Default::default()
        }],
        timeout_ms: 5_000,
        ..Default::default()
    });
    let resp = tokio::time::timeout(
        PATIENCE,
        conn.send(create_partitions_request::API_KEY, 3, &grow),
    )
    .await
    .expect("an answer in time")
    .unwrap();
    match resp {
        ResponseBody::CreatePartitions(r) => {
            assert_eq!(r.results[0].error_code, ErrorCode::InvalidPartitions.code())
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(b.broker.topic("small").unwrap().partitions.len(), 2);
    assert_still_serving(&b, "huge-partition-count").await;
}

/// Only Produce carries bulk data; any other request above the non-Produce
/// limit is refused from its first six bytes, before its body is buffered
/// (decoded non-Produce requests can take ~30 times their wire size).
#[tokio::test]
async fn oversized_non_produce_request_is_refused_from_its_api_key() {
    let b = support::start_broker(|config| {
        config.max_frame_bytes = MAX_FRAME;
        config.max_non_produce_frame_bytes = 64 * 1024;
    })
    .await;
    let len = 100 * 1024i32;
    let mut head = len.to_be_bytes().to_vec();
    head.extend_from_slice(&3i16.to_be_bytes()); // Metadata
    let s = send(b.addr, &head).await;
    assert_closed_silently(s, "oversized metadata").await;
    assert_still_serving(&b, "oversized-non-produce").await;
}

// ---- Many connections at once: the listener's limits. ----

/// Waits, boundedly, for the broker to reach a state it reaches on its own
/// after a client goes away (a connection's slot and budget are released
/// by its task, a moment after the client sees the close).
async fn eventually(what: &str, mut reached: impl FnMut() -> bool) {
    for _ in 0..1_000 {
        if reached() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never reached: {what}");
}

/// An ApiVersions v3 request frame (two empty compact strings, no tags).
fn api_versions_frame(correlation_id: i32) -> Vec<u8> {
    frame(
        &header(api_versions_request::API_KEY, 3, correlation_id),
        &[1, 1, 0],
    )
}

/// Opens a connection and gets an ApiVersions answer on it: proof that the
/// broker admitted it (a TCP connect alone completes in the kernel).
async fn admitted_connection(addr: SocketAddr, correlation_id: i32) -> TcpStream {
    let mut s = send(addr, &api_versions_frame(correlation_id)).await;
    let response = read_response(&mut s).await;
    assert!(matches!(
        decode_response(api_versions_request::API_KEY, 3, correlation_id, response),
        Ok(ResponseBody::ApiVersions(r)) if r.error_code == 0
    ));
    s
}

/// Sends a request on a new connection and expects the broker to close it
/// unanswered. The write itself may already fail if the close came first.
async fn assert_refused(addr: SocketAddr, case: &str) {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    let _ = s.write_all(&api_versions_frame(1)).await;
    assert_closed_silently(s, case).await;
}

#[tokio::test]
async fn connections_over_the_total_cap_are_closed_until_others_go_away() {
    const CAP: usize = 8;
    let b = support::start_broker(|config| {
        config.max_frame_bytes = MAX_FRAME;
        config.max_connections = CAP;
    })
    .await;
    let mut held = Vec::new();
    for i in 0..CAP {
        held.push(admitted_connection(b.addr, i as i32).await);
    }
    assert_eq!(b.limits.open_connections(), CAP);
    // Twice as many again, all at once: every one is closed unanswered.
    let mut excess = tokio::task::JoinSet::new();
    for i in 0..2 * CAP {
        let addr = b.addr;
        excess.spawn(async move { assert_refused(addr, &format!("excess {i}")).await });
    }
    while let Some(done) = excess.join_next().await {
        done.expect("an excess connection was refused");
    }
    assert_eq!(b.limits.refused_connections(), 2 * CAP as u64);
    assert_eq!(b.limits.open_connections(), CAP);
    // The connections already open were not disturbed.
    for (i, s) in held.iter_mut().enumerate() {
        s.write_all(&api_versions_frame(100 + i as i32))
            .await
            .unwrap();
        let response = read_response(s).await;
        assert!(
            decode_response(api_versions_request::API_KEY, 3, 100 + i as i32, response).is_ok()
        );
    }
    drop(held);
    eventually("every slot released", || b.limits.open_connections() == 0).await;
    assert_still_serving(&b, "over-max-connections").await;
}

#[tokio::test]
async fn connections_over_the_per_address_cap_are_closed_and_a_freed_slot_is_reused() {
    const PER_IP: usize = 4;
    let b = support::start_broker(|config| {
        config.max_frame_bytes = MAX_FRAME;
        config.max_connections_per_ip = PER_IP;
    })
    .await;
    let mut held = Vec::new();
    for i in 0..PER_IP {
        held.push(admitted_connection(b.addr, i as i32).await);
    }
    // Well under the total cap: this refusal is the per-address one. (That
    // other addresses are not held back is a unit test of ServerLimits; this
    // test stays on 127.0.0.1.)
    assert_refused(b.addr, "one more from 127.0.0.1").await;
    assert_eq!(b.limits.refused_connections(), 1);
    held.pop();
    eventually("the closed connection's slot released", || {
        b.limits.open_connections() == PER_IP - 1
    })
    .await;
    // The well-behaved client takes the freed slot.
    assert_still_serving(&b, "over-max-connections-per-ip").await;
    drop(held);
}

/// A Produce frame whose batch carries one `value_bytes` value.
fn big_produce_frame(value_bytes: usize, acks: i16) -> Bytes {
    let value = vec![0x5a; value_bytes];
    let batch = BatchBuilder::new().record(1, None, Some(&value)).build();
    let body =
        kaas_net::client::single_partition_produce("big", 0, batch.into_bytes(), acks, 5_000);
    encode_request(produce_request::API_KEY, 9, 1, Some("hostile"), &body).expect("encodes")
}

/// The Produce answer's partition error code.
fn produce_error_code(response: Bytes) -> i16 {
    match decode_response(produce_request::API_KEY, 9, 1, response).expect("a Produce answer") {
        ResponseBody::Produce(r) => r.responses[0].partition_responses[0].error_code,
        other => panic!("{other:?}"),
    }
}

/// Many clients each announce a 4 MiB Produce and trickle its body. The
/// broker buffers only as many as fit the request budget at a time; the
/// rest wait unread. Every client is answered in the end, the bytes held
/// never exceed the budget, and the broker serves others once it frees.
#[tokio::test]
async fn many_large_trickled_requests_stay_within_the_request_budget() {
    const CLIENTS: usize = 64;
    const VALUE: usize = 4 << 20;
    const BUDGET: u32 = 16 << 20;
    const CHUNK: usize = 64 << 10;
    let b = support::start_broker(|config| {
        config.max_frame_bytes = 8 << 20;
        config.queued_max_request_bytes = BUDGET;
    })
    .await;
    // Above the default message.max.bytes (1 MiB): each is answered
    // MESSAGE_TOO_LARGE after its whole body was read, so the test
    // exercises the budget without writing 256 MiB to the log.
    let request = big_produce_frame(VALUE, -1);
    let frame_len = request.len() - 4;
    assert!(
        CLIENTS * frame_len > 10 * BUDGET as usize,
        "the budget must bind"
    );

    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let limits = b.limits.clone();
        let done = done.clone();
        tokio::spawn(async move {
            let mut largest = 0;
            let mut samples = 0u32;
            // Bounded: stops when the clients are done, or after ~10 min.
            while !done.load(std::sync::atomic::Ordering::Relaxed) && samples < 600_000 {
                largest = largest.max(limits.queued_request_bytes());
                samples += 1;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            (largest, samples)
        })
    };
    let mut clients = tokio::task::JoinSet::new();
    for _ in 0..CLIENTS {
        let addr = b.addr;
        let request = request.clone();
        clients.spawn(async move {
            let mut s = TcpStream::connect(addr).await.expect("connect");
            for chunk in request.chunks(CHUNK) {
                s.write_all(chunk).await.expect("the broker reads on");
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            read_response(&mut s).await
        });
    }
    // A hang guard, not a timing assertion: every client is answered or the
    // test fails rather than waits forever.
    let answered = tokio::time::timeout(Duration::from_secs(300), async {
        let mut answered = 0;
        while let Some(response) = clients.join_next().await {
            let response = response.expect("a client was answered");
            assert_eq!(
                produce_error_code(response),
                ErrorCode::MessageTooLarge.code()
            );
            answered += 1;
        }
        answered
    })
    .await
    .expect("every trickling client answered in time");
    assert_eq!(answered, CLIENTS);
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let (largest_sample, samples) = sampler.await.unwrap();

    let budget = BUDGET as usize;
    assert!(
        largest_sample <= budget,
        "sampled {largest_sample} > {budget}"
    );
    let peak = b.limits.peak_queued_request_bytes();
    assert!(peak <= budget, "peak {peak} > budget {budget}");
    assert!(peak >= frame_len, "no frame was ever admitted");
    assert!(samples > 0);
    eventually("the budget is free again", || {
        b.limits.queued_request_bytes() == 0
    })
    .await;
    drop(admitted_connection(b.addr, 7).await);
    assert_still_serving(&b, "request-budget").await;
}

/// A frame larger than the whole budget cannot ever fit; it is admitted
/// alone, taking the whole budget, rather than waiting forever.
#[tokio::test]
async fn a_request_larger_than_the_whole_budget_is_still_served() {
    const BUDGET: u32 = 1 << 20;
    let b = support::start_broker(|config| {
        config.max_frame_bytes = 8 << 20;
        config.log.max_message_bytes = 4 << 20;
        config.queued_max_request_bytes = BUDGET;
    })
    .await;
    let request = big_produce_frame(2 << 20, -1);
    let frame_len = request.len() - 4;
    assert!(frame_len > BUDGET as usize);
    let mut s = send(b.addr, &request).await;
    let response = read_response(&mut s).await;
    assert_eq!(produce_error_code(response), 0);
    // While it was queued it was the only thing queued.
    assert_eq!(b.limits.peak_queued_request_bytes(), frame_len);
    assert_still_serving(&b, "larger-than-budget").await;
}
