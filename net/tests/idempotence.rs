//! The idempotent producer over real TCP: InitProducerId hands out distinct
//! ids, a retried batch is answered with its original offset and stored
//! once, the rules' errors reach the client, and DescribeProducers shows
//! the state.
#![cfg(not(madsim))]

mod support;

use kaas_core::protocol::messages::*;
use kaas_core::protocol::{ErrorCode, RequestBody, ResponseBody};
use kaas_core::record::{BatchBuilder, RecordBatch};
use kaas_net::client::Connection;

const TOPIC: &str = "idem";

async fn init_producer_id(conn: &mut Connection) -> (i64, i16) {
    let req = RequestBody::InitProducerId(InitProducerIdRequest {
        transactional_id: None,
        transaction_timeout_ms: 60_000,
        ..Default::default()
    });
    match conn
        .send(init_producer_id_request::API_KEY, 4, &req)
        .await
        .expect("init")
    {
        ResponseBody::InitProducerId(r) => {
            assert_eq!(r.error_code, 0);
            (r.producer_id, r.producer_epoch)
        }
        other => panic!("unexpected {other:?}"),
    }
}

fn batch(pid: i64, epoch: i16, seq: i32, records: usize) -> RecordBatch {
    let mut b = BatchBuilder::idempotent(pid, epoch, seq);
    for i in 0..records {
        b.push(kaas_core::record::NewRecord::new(
            1_000,
            None,
            Some(format!("{seq}-{i}").as_bytes()),
        ));
    }
    b.build()
}

/// (error code, base offset) of a one-partition acks=all produce.
async fn produce(conn: &mut Connection, b: &RecordBatch) -> (i16, i64) {
    let req = kaas_net::client::single_partition_produce(TOPIC, 0, b.as_bytes().clone(), -1, 5_000);
    match conn
        .send(produce_request::API_KEY, 9, &req)
        .await
        .expect("produce")
    {
        ResponseBody::Produce(r) => {
            let p = &r.responses[0].partition_responses[0];
            (p.error_code, p.base_offset)
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn retried_batches_are_stored_once_and_rule_violations_reach_the_client() {
    let tb = support::start_broker(|_| {}).await;
    let mut conn = Connection::connect(tb.addr).await.unwrap();

    let (pid, epoch) = init_producer_id(&mut conn).await;
    let (other, _) = init_producer_id(&mut conn).await;
    assert_ne!(pid, other, "two producers got the same id");
    assert_eq!(epoch, 0);

    assert_eq!(produce(&mut conn, &batch(pid, 0, 0, 3)).await, (0, 0));
    assert_eq!(produce(&mut conn, &batch(pid, 0, 3, 2)).await, (0, 3));
    // The retry of the first batch: same answer, nothing written.
    assert_eq!(produce(&mut conn, &batch(pid, 0, 0, 3)).await, (0, 0));
    // A gap, and a stranger starting mid-stream.
    assert_eq!(
        produce(&mut conn, &batch(pid, 0, 9, 1)).await.0,
        ErrorCode::OutOfOrderSequenceNumber.code()
    );
    assert_eq!(produce(&mut conn, &batch(pid, 0, 5, 1)).await, (0, 5));
    assert_eq!(
        produce(&mut conn, &batch(other, 0, 4, 1)).await.0,
        ErrorCode::UnknownProducerId.code()
    );
    assert_eq!(produce(&mut conn, &batch(other, 0, 0, 1)).await, (0, 6));
    // A new epoch starts at sequence 0 and fences the old one.
    assert_eq!(
        produce(&mut conn, &batch(pid, 1, 3, 1)).await.0,
        ErrorCode::OutOfOrderSequenceNumber.code()
    );
    assert_eq!(produce(&mut conn, &batch(pid, 1, 0, 1)).await, (0, 7));
    assert_eq!(
        produce(&mut conn, &batch(pid, 0, 6, 1)).await.0,
        ErrorCode::InvalidProducerEpoch.code()
    );

    let partition = tb.broker.partition(TOPIC, 0, -1).unwrap();
    assert_eq!(
        partition.high_watermark(),
        8,
        "the retry was written a second time"
    );

    let req = RequestBody::DescribeProducers(DescribeProducersRequest {
        topics: vec![describe_producers_request::TopicRequest {
            name: TOPIC.into(),
            partition_indexes: vec![0],
            ..Default::default()
        }],
        ..Default::default()
    });
    let ResponseBody::DescribeProducers(r) = conn
        .send(describe_producers_request::API_KEY, 0, &req)
        .await
        .unwrap()
    else {
        panic!("unexpected response");
    };
    let mut states: Vec<(i64, i32, i32)> = r.topics[0].partitions[0]
        .active_producers
        .iter()
        .map(|p| (p.producer_id, p.producer_epoch, p.last_sequence))
        .collect();
    states.sort();
    let mut want = vec![(pid, 1, 0), (other, 0, 0)];
    want.sort();
    assert_eq!(states, want);
}
