//! ApiVersions over TCP: the `transaction.version` feature a broker
//! finalizes is the configured one (`kaas serve --transaction-version`),
//! 2 by default, while the supported range stays 0..2 (as Kafka 4.1 answers
//! at either level). Clients decide from the finalized level whether to
//! speak transaction version 2 (KIP-890 part 2).
#![cfg(not(madsim))]

mod support;

use kaas_core::protocol::messages::api_versions_response::{
    FinalizedFeatureKey, SupportedFeatureKey,
};
use kaas_core::protocol::messages::*;
use kaas_core::protocol::{RequestBody, ResponseBody};
use kaas_net::client::Connection;
use support::TestBroker;

/// The (name, min, max) of the supported and finalized features answered
/// to ApiVersions v3 (the first version with features).
async fn features(tb: &TestBroker) -> (Vec<(String, i16, i16)>, Vec<(String, i16, i16)>) {
    let mut conn = Connection::connect(tb.addr).await.expect("connect");
    let req = RequestBody::ApiVersions(ApiVersionsRequest {
        client_software_name: "kaas-test".into(),
        client_software_version: "1".into(),
        ..Default::default()
    });
    let answer = conn
        .send(api_versions_request::API_KEY, 3, &req)
        .await
        .expect("ApiVersions answered");
    let ResponseBody::ApiVersions(r) = answer else {
        panic!("not an ApiVersions answer: {answer:?}");
    };
    assert_eq!(r.error_code, 0);
    let supported = r
        .supported_features
        .iter()
        .map(|f: &SupportedFeatureKey| (f.name.to_string(), f.min_version, f.max_version))
        .collect();
    let finalized = r
        .finalized_features
        .iter()
        .map(|f: &FinalizedFeatureKey| {
            (f.name.to_string(), f.min_version_level, f.max_version_level)
        })
        .collect();
    (supported, finalized)
}

fn feature(name: &str, min: i16, max: i16) -> Vec<(String, i16, i16)> {
    vec![(name.to_string(), min, max)]
}

#[tokio::test]
async fn transaction_version_2_is_finalized_by_default() {
    let tb = support::start_broker(|_| {}).await;
    assert_eq!(tb.broker.config.transaction_version, 2);
    let (supported, finalized) = features(&tb).await;
    assert_eq!(supported, feature("transaction.version", 0, 2));
    assert_eq!(finalized, feature("transaction.version", 2, 2));
}

#[tokio::test]
async fn transaction_version_1_is_finalized_when_configured() {
    let tb = support::start_broker(|config| config.transaction_version = 1).await;
    let (supported, finalized) = features(&tb).await;
    // the broker still supports level 2; the cluster is at 1
    assert_eq!(supported, feature("transaction.version", 0, 2));
    assert_eq!(finalized, feature("transaction.version", 1, 1));
}
