//! Produce: every acks setting, and the ways a produce is refused.

use super::{scenario, Scenario};
use crate::ops::{plain_batch, FetchSpec};
use crate::session::{Session, Step};
use bytes::{Bytes, BytesMut};
use kaas_core::record::BatchBuilder;

pub fn scenarios() -> Vec<Scenario> {
    vec![
        scenario!(
            "produce/acks-1-and-all",
            "acks=1 and acks=all append in order and read back",
            acks_1_and_all
        ),
        scenario!(
            "produce/acks-0",
            "an acks=0 batch is appended before a later acks=1 one",
            acks_0
        ),
        scenario!(
            "produce/invalid-acks",
            "acks other than -1, 0, 1",
            invalid_acks
        ),
        scenario!(
            "produce/timestamp-bounds",
            "record timestamps too far ahead (Kafka 4: an hour by default) or, per topic, too old",
            timestamp_bounds
        ),
        scenario!(
            "produce/unknown-topic",
            "produce to a topic that does not exist",
            unknown_topic
        ),
        scenario!(
            "produce/unknown-partition",
            "produce to a partition past the topic's count",
            unknown_partition
        ),
        scenario!(
            "produce/corrupt-crc",
            "a batch whose CRC does not match",
            corrupt_crc
        ),
        scenario!(
            "produce/two-batches-in-one",
            "two batches for one partition in one request",
            two_batches
        ),
        scenario!(
            "produce/message-too-large",
            "a batch over the topic's max.message.bytes",
            too_large
        ),
        scenario!(
            "produce/multi-partition",
            "one request to three partitions, each its own offsets",
            multi_partition
        ),
    ]
}

async fn acks_1_and_all(s: &mut Session) -> Step {
    let t = s.create_topic("t", 1).await?;
    s.produce("acks=1", &t, 0, plain_batch(s.t0, 0, 3), 1)
        .await?;
    s.produce("acks=all", &t, 0, plain_batch(s.t0, 3, 2), -1)
        .await?;
    s.fetch("fetch all", &t, FetchSpec::at(0, 0)).await?;
    s.list_offset("latest", &t, 0, -1, 0).await?;
    Ok(())
}

async fn acks_0(s: &mut Session) -> Step {
    let t = s.create_topic("t", 1).await?;
    s.produce("acks=0", &t, 0, plain_batch(s.t0, 0, 3), 0)
        .await?;
    // Same connection: the broker handles requests in order, so the next
    // batch lands after the acks=0 one. acks=all, because kaas shows
    // records to consumers only once they are durable (docs/oracle.md):
    // after an acks=all answer both brokers show everything before it.
    s.produce("acks=all after", &t, 0, plain_batch(s.t0, 3, 1), -1)
        .await?;
    s.fetch("fetch all", &t, FetchSpec::at(0, 0)).await?;
    Ok(())
}

async fn invalid_acks(s: &mut Session) -> Step {
    let t = s.create_topic("t", 1).await?;
    s.produce("acks=2", &t, 0, plain_batch(s.t0, 0, 1), 2)
        .await?;
    s.produce("acks=-2", &t, 0, plain_batch(s.t0, 0, 1), -2)
        .await?;
    s.list_offset("nothing appended", &t, 0, -1, 0).await?;
    Ok(())
}

async fn timestamp_bounds(s: &mut Session) -> Step {
    const HOUR: i64 = 3_600_000;
    let t = s.create_topic("t", 1).await?;
    s.produce(
        "two hours ahead",
        &t,
        0,
        plain_batch(s.t0 + 2 * HOUR, 0, 3),
        -1,
    )
    .await?;
    s.produce("now", &t, 0, plain_batch(s.t0, 0, 2), -1).await?;
    s.produce("a day ago", &t, 0, plain_batch(s.t0 - 24 * HOUR, 2, 1), -1)
        .await?;
    s.incremental_alter_configs(
        "allow four hours ahead, one minute behind",
        &[(
            2,
            t.as_str(),
            &[
                ("message.timestamp.after.max.ms", 0, Some("14400000")),
                ("message.timestamp.before.max.ms", 0, Some("60000")),
            ],
        )],
        false,
    )
    .await?;
    // Kafka's broker applies a config change from its metadata log, a
    // moment after the answer; both are given a moment.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    s.produce(
        "two hours ahead, allowed",
        &t,
        0,
        plain_batch(s.t0 + 2 * HOUR, 3, 3),
        -1,
    )
    .await?;
    s.produce(
        "a day ago, now too old",
        &t,
        0,
        plain_batch(s.t0 - 24 * HOUR, 6, 1),
        -1,
    )
    .await?;
    Ok(())
}

async fn unknown_topic(s: &mut Session) -> Step {
    let t = s.name("missing");
    s.produce("produce", &t, 0, plain_batch(s.t0, 0, 1), -1)
        .await?;
    // Produce never creates a topic, whatever auto-creation says.
    s.metadata("still missing", &[&t], false).await?;
    Ok(())
}

async fn unknown_partition(s: &mut Session) -> Step {
    let t = s.create_topic("t", 1).await?;
    s.produce("partition 1", &t, 1, plain_batch(s.t0, 0, 1), -1)
        .await?;
    s.produce("partition -1", &t, -1, plain_batch(s.t0, 0, 1), -1)
        .await?;
    Ok(())
}

async fn corrupt_crc(s: &mut Session) -> Step {
    let t = s.create_topic("t", 1).await?;
    let mut b = BytesMut::from(&plain_batch(s.t0, 0, 2)[..]);
    // The last byte is inside the last record's value: the CRC covers it.
    if let Some(last) = b.last_mut() {
        *last ^= 0xff;
    }
    s.produce("bad crc", &t, 0, b.freeze(), -1).await?;
    s.list_offset("nothing appended", &t, 0, -1, 0).await?;
    s.produce(
        "a good batch still goes in",
        &t,
        0,
        plain_batch(s.t0, 0, 1),
        -1,
    )
    .await?;
    Ok(())
}

async fn two_batches(s: &mut Session) -> Step {
    let t = s.create_topic("t", 1).await?;
    let mut b = BytesMut::new();
    b.extend_from_slice(&plain_batch(s.t0, 0, 2));
    b.extend_from_slice(&plain_batch(s.t0, 2, 2));
    s.produce("two batches", &t, 0, b.freeze(), -1).await?;
    s.fetch("what was kept", &t, FetchSpec::at(0, 0)).await?;
    Ok(())
}

async fn too_large(s: &mut Session) -> Step {
    let t = s.name("small");
    s.create_topic_with(
        "create with max.message.bytes=1000",
        &t,
        1,
        &[("max.message.bytes", "1000")],
    )
    .await?;
    let big = vec![b'x'; 2000];
    let batch = BatchBuilder::new()
        .record(s.t0, Some(b"k"), Some(&big))
        .build()
        .into_bytes();
    s.produce("2000-byte value", &t, 0, batch, -1).await?;
    s.produce("a small one fits", &t, 0, plain_batch(s.t0, 0, 1), -1)
        .await?;
    Ok(())
}

async fn multi_partition(s: &mut Session) -> Step {
    let t = s.create_topic("t", 3).await?;
    for p in 0..3 {
        s.produce(
            &format!("partition {p}"),
            &t,
            p,
            plain_batch(s.t0, 0, p as i64 + 1),
            -1,
        )
        .await?;
    }
    let mut body = kaas_net::client::single_partition_produce(&t, 0, Bytes::new(), -1, 10_000);
    if let kaas_core::protocol::RequestBody::Produce(p) = &mut body {
        let id = s.topic_id(&t);
        p.topic_data[0].topic_id = id;
        p.topic_data[0].partition_data = (0..3)
            .map(
                |i| kaas_core::protocol::messages::produce_request::PartitionProduceData {
                    index: i,
                    records: Some(plain_batch(s.t0, 10, 2)),
                    ..Default::default()
                },
            )
            .collect();
    }
    let version = s.version(kaas_core::protocol::messages::produce_request::API_KEY)?;
    if let kaas_core::protocol::ResponseBody::Produce(r) = s.call(version, body).await? {
        // Clients match partitions by index; the order is the broker's own.
        let mut seen: Vec<_> = r
            .responses
            .iter()
            .flat_map(|t| t.partition_responses.iter())
            .map(|p| (p.index, crate::observe::err(p.error_code), p.base_offset))
            .collect();
        seen.sort_by_key(|p| p.0);
        s.observe("one request, three partitions", serde_json::json!(seen));
    }
    Ok(())
}
