//! The config APIs over the wire, for the tests of topic configs and of
//! dynamic broker configs: IncrementalAlterConfigs, AlterConfigs and
//! DescribeConfigs of one resource, and a log to watch them act on (t-0).
// Only the config and cleanup-policy test binaries use it, each a part of it.
#![allow(dead_code)]
// A test: an unwrap that fails is the test failing.
#![allow(clippy::unwrap_used)]

use super::TestBroker;
use kaas_core::protocol::messages::*;
use kaas_core::protocol::{RequestBody, ResponseBody};
use kaas_core::record::{BatchBuilder, NewRecord};
use kaas_net::client::Connection;
use std::collections::BTreeMap;
use std::net::SocketAddr;

/// Resource types.
pub const TOPIC: i8 = 2;
pub const BROKER: i8 = 4;
/// IncrementalAlterConfigs operations.
pub const SET: i8 = 0;
pub const DELETE: i8 = 1;
pub const APPEND: i8 = 2;
pub const SUBTRACT: i8 = 3;
/// DescribeConfigs sources.
pub const SOURCE_TOPIC: i8 = 1;
pub const SOURCE_DYNAMIC_BROKER: i8 = 2;
pub const SOURCE_DYNAMIC_DEFAULT: i8 = 3;
pub const SOURCE_STATIC_BROKER: i8 = 4;
pub const SOURCE_DEFAULT: i8 = 5;

/// (name, operation, value) of each config an IncrementalAlterConfigs changes.
pub type Ops<'a> = &'a [(&'a str, i8, Option<&'a str>)];

/// One resource of an IncrementalAlterConfigs.
pub fn resource(
    kind: i8,
    name: &str,
    configs: Ops<'_>,
) -> incremental_alter_configs_request::AlterConfigsResource {
    incremental_alter_configs_request::AlterConfigsResource {
        resource_type: kind,
        resource_name: name.into(),
        configs: configs
            .iter()
            .map(
                |(n, op, v)| incremental_alter_configs_request::AlterableConfig {
                    name: (*n).into(),
                    config_operation: *op,
                    value: v.map(str::to_string),
                    ..Default::default()
                },
            )
            .collect(),
        ..Default::default()
    }
}

/// IncrementalAlterConfigs (v1, flexible): each resource's (error code, message).
pub async fn incremental_answers(
    addr: SocketAddr,
    resources: Vec<incremental_alter_configs_request::AlterConfigsResource>,
    validate_only: bool,
) -> Vec<(i16, Option<String>)> {
    let mut conn = Connection::connect(addr).await.unwrap();
    let req = RequestBody::IncrementalAlterConfigs(IncrementalAlterConfigsRequest {
        resources,
        validate_only,
        ..Default::default()
    });
    match conn
        .send(incremental_alter_configs_request::API_KEY, 1, &req)
        .await
        .unwrap()
    {
        ResponseBody::IncrementalAlterConfigs(r) => r
            .responses
            .iter()
            .map(|r| (r.error_code, r.error_message.clone()))
            .collect(),
        other => panic!("unexpected {other:?}"),
    }
}

/// AlterConfigs (v0) of one resource's whole set; its error code.
pub async fn replace(addr: SocketAddr, kind: i8, name: &str, configs: &[(&str, &str)]) -> i16 {
    let mut conn = Connection::connect(addr).await.unwrap();
    let req = RequestBody::AlterConfigs(AlterConfigsRequest {
        resources: vec![alter_configs_request::AlterConfigsResource {
            resource_type: kind,
            resource_name: name.into(),
            configs: configs
                .iter()
                .map(|(n, v)| alter_configs_request::AlterableConfig {
                    name: (*n).into(),
                    value: Some((*v).into()),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }],
        validate_only: false,
        ..Default::default()
    });
    match conn
        .send(alter_configs_request::API_KEY, 0, &req)
        .await
        .unwrap()
    {
        ResponseBody::AlterConfigs(r) => r.responses[0].error_code,
        other => panic!("unexpected {other:?}"),
    }
}

/// One described config: value, source, read-only, synonyms.
#[derive(Debug, Clone, PartialEq)]
pub struct Described {
    pub value: Option<String>,
    pub source: i8,
    pub read_only: bool,
    pub synonyms: Vec<(String, String, i8)>,
}

/// DescribeConfigs of one resource at `version`; its result, which must
/// not be an error.
async fn describe_result(
    addr: SocketAddr,
    kind: i8,
    name: &str,
    version: i16,
    include_documentation: bool,
) -> describe_configs_response::DescribeConfigsResult {
    let mut conn = Connection::connect(addr).await.unwrap();
    let req = RequestBody::DescribeConfigs(DescribeConfigsRequest {
        resources: vec![describe_configs_request::DescribeConfigsResource {
            resource_type: kind,
            resource_name: name.into(),
            configuration_keys: None,
            ..Default::default()
        }],
        include_synonyms: true,
        include_documentation,
        ..Default::default()
    });
    match conn
        .send(describe_configs_request::API_KEY, version, &req)
        .await
        .unwrap()
    {
        ResponseBody::DescribeConfigs(mut r) => {
            assert_eq!(r.results[0].error_code, 0, "{r:?}");
            r.results.swap_remove(0)
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// DescribeConfigs (v4, with synonyms) of one resource: name → config.
pub async fn describe(addr: SocketAddr, kind: i8, name: &str) -> BTreeMap<String, Described> {
    describe_result(addr, kind, name, 4, false)
        .await
        .configs
        .into_iter()
        .map(|c| {
            let synonyms = c
                .synonyms
                .into_iter()
                .map(|s| (s.name, s.value.unwrap_or_default(), s.source))
                .collect();
            let described = Described {
                value: c.value,
                source: c.config_source,
                read_only: c.read_only,
                synonyms,
            };
            (c.name, described)
        })
        .collect()
}

/// DescribeConfigs of one resource at `version`, asking for documentation
/// or not: name → the documentation answered.
pub async fn documentation(
    addr: SocketAddr,
    kind: i8,
    name: &str,
    version: i16,
    include_documentation: bool,
) -> BTreeMap<String, Option<String>> {
    describe_result(addr, kind, name, version, include_documentation)
        .await
        .configs
        .into_iter()
        .map(|c| (c.name, c.documentation))
        .collect()
}

/// Appends `n` records of 100 bytes, stamped now, to t-0, each durable,
/// record `i` keyed `k<i>`.
pub async fn produce(tb: &TestBroker, n: usize) {
    produce_keyed(tb, (0..n).map(|i| format!("k{i}"))).await
}

/// Appends one record of 100 bytes per key, stamped now, to t-0, each
/// durable.
pub async fn produce_keyed(tb: &TestBroker, keys: impl IntoIterator<Item = String>) {
    produce_keyed_to(&tb.broker, keys).await
}

/// [`produce_keyed`] to a broker the test opened itself.
pub async fn produce_keyed_to(broker: &kaas_net::Broker, keys: impl IntoIterator<Item = String>) {
    let p = broker.partition("t", 0, -1).unwrap();
    for key in keys {
        let mut b = BatchBuilder::new();
        b.push(NewRecord::new(
            super::now_ms(),
            Some(key.as_bytes()),
            Some(&[b'v'; 100]),
        ));
        let d = p.append(b.build()).await.unwrap();
        p.wait_durable(d.end_offset()).await.unwrap();
    }
}

/// The names of t-0's files under the data directory `data_dir` that end
/// with `suffix` (none if it has no directory).
pub fn t0_files(data_dir: &std::path::Path, suffix: &str) -> Vec<String> {
    std::fs::read_dir(data_dir.join("topics/t-0")).map_or(Vec::new(), |entries| {
        entries
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.ends_with(suffix))
            .collect()
    })
}

/// How many segment files t-0 has.
pub fn segments(tb: &TestBroker) -> usize {
    t0_files(tb._dir.path(), ".log").len()
}
