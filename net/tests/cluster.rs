//! Several brokers in one process on one temporary volume: membership.
//! Each heartbeats its own file and reads the others'; Metadata and
//! DescribeCluster list the live ones, and all name the same controller.
#![cfg(not(madsim))]
// A test: an unwrap that fails is the test failing.
#![allow(clippy::unwrap_used)]

mod support;

use kaas_core::cluster::membership::LeaseBounds;
use kaas_core::protocol::messages::*;
use kaas_core::protocol::{RequestBody, ResponseBody};
use kaas_net::client::Connection;
use std::net::SocketAddr;
use std::time::Duration;

/// Short bounds, so a stopped broker leaves the live set within a second.
const BOUNDS: LeaseBounds = LeaseBounds {
    lease_ms: 300,
    clock_skew_ms: 50,
    volume_staleness_ms: 100,
};

async fn start(dir: &std::path::Path, id: i32, rack: &str) -> support::SharedBroker {
    support::start_shared_broker(dir, |c| {
        c.broker_id = id;
        c.rack = Some(rack.to_string());
        c.lease = BOUNDS;
    })
    .await
}

/// (controller, [(id, port, rack)]) as Metadata answers it at `addr`.
async fn metadata_brokers(addr: SocketAddr) -> (i32, Vec<(i32, i32, Option<String>)>) {
    let mut conn = Connection::connect(addr).await.unwrap();
    let req = RequestBody::Metadata(MetadataRequest {
        topics: Some(vec![]),
        ..Default::default()
    });
    match conn
        .send(metadata_request::API_KEY, 12, &req)
        .await
        .unwrap()
    {
        ResponseBody::Metadata(r) => (
            r.controller_id,
            r.brokers
                .into_iter()
                .map(|b| (b.node_id, b.port, b.rack))
                .collect(),
        ),
        other => panic!("unexpected {other:?}"),
    }
}

/// (controller, ids) as DescribeCluster answers it at `addr`.
async fn described_brokers(addr: SocketAddr) -> (i32, Vec<i32>) {
    let mut conn = Connection::connect(addr).await.unwrap();
    let req = RequestBody::DescribeCluster(DescribeClusterRequest {
        endpoint_type: 1,
        ..Default::default()
    });
    match conn
        .send(describe_cluster_request::API_KEY, 1, &req)
        .await
        .unwrap()
    {
        ResponseBody::DescribeCluster(r) => (
            r.controller_id,
            r.brokers.into_iter().map(|b| b.broker_id).collect(),
        ),
        other => panic!("unexpected {other:?}"),
    }
}

/// Waits (boundedly) until Metadata at `addr` lists exactly `ids`.
async fn until_listed(addr: SocketAddr, ids: &[i32]) -> (i32, Vec<(i32, i32, Option<String>)>) {
    let mut last = None;
    for _ in 0..100 {
        let answer = metadata_brokers(addr).await;
        let listed: Vec<i32> = answer.1.iter().map(|b| b.0).collect();
        if listed == ids {
            return answer;
        }
        last = Some(answer);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{addr} never listed {ids:?}; last answer {last:?}");
}

#[tokio::test]
async fn brokers_on_one_volume_list_each_other_and_drop_a_stopped_one() {
    let dir = tempfile::tempdir().unwrap();
    let b2 = start(dir.path(), 2, "r2").await;
    let b0 = start(dir.path(), 0, "r0").await;
    let b1 = start(dir.path(), 1, "r1").await;
    let addrs = [b0.addr, b1.addr, b2.addr];

    for addr in addrs {
        let (controller, brokers) = until_listed(addr, &[0, 1, 2]).await;
        assert_eq!(controller, 0, "the lowest live id, at {addr}");
        let want: Vec<_> = addrs
            .iter()
            .enumerate()
            .map(|(id, a)| (id as i32, a.port() as i32, Some(format!("r{id}"))))
            .collect();
        assert_eq!(brokers, want, "every broker's advertised address and rack");
        assert_eq!(described_brokers(addr).await, (0, vec![0, 1, 2]));
    }

    // Broker 0 stops: after its lease plus the bounds it is gone from every
    // other broker's answers, and the controller is the next lowest id.
    b0.stop().await;
    for addr in [b1.addr, b2.addr] {
        let (controller, _) = until_listed(addr, &[1, 2]).await;
        assert_eq!(controller, 1);
        assert_eq!(described_brokers(addr).await, (1, vec![1, 2]));
    }

    // It comes back (a new incarnation) and is listed again.
    let b0 = start(dir.path(), 0, "r0").await;
    for addr in [b0.addr, b1.addr, b2.addr] {
        assert_eq!(until_listed(addr, &[0, 1, 2]).await.0, 0);
    }
}

#[tokio::test]
async fn a_single_broker_lists_itself_as_the_controller() {
    let tb = support::start_broker(|c| {
        c.broker_id = 4;
        c.rack = Some("east".into());
    })
    .await;
    let (controller, brokers) = metadata_brokers(tb.addr).await;
    assert!(tb
        .broker
        .membership
        .may_act(tb.broker.env.clock.monotonic_ms()));
    assert_eq!(controller, 4);
    assert_eq!(
        brokers,
        vec![(4, tb.addr.port() as i32, Some("east".to_string()))]
    );
}
