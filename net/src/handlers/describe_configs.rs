//! DescribeConfigs for topics and for this broker.

use crate::broker::Broker;
use kaas_core::protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kaas_core::protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse};
use kaas_core::protocol::ErrorCode;
use kaas_core::topic_config::{self, ConfigType, TOPIC_CONFIGS};
use std::collections::BTreeMap;

const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;

/// Where a config value comes from (DescribeConfigs v1+ `ConfigSource`).
const SOURCE_TOPIC: i8 = 1;
const SOURCE_STATIC_BROKER: i8 = 4;
const SOURCE_DEFAULT: i8 = 5;

/// One described config.
pub struct Entry {
    pub name: String,
    pub value: Option<String>,
    pub read_only: bool,
    pub config_source: i8,
    pub config_type: i8,
    pub synonyms: Vec<(String, String, i8)>,
}

/// The default of a topic config on this broker: the broker's own setting
/// where `kaas serve` has one, else Kafka's default.
pub fn broker_default(broker: &Broker, name: &str) -> String {
    let d = &broker.config.log;
    match name {
        "max.message.bytes" => d.max_message_bytes.to_string(),
        "retention.bytes" => d.retention_bytes.to_string(),
        "retention.ms" => d.retention_ms.to_string(),
        "segment.bytes" => d.segment_bytes.to_string(),
        "segment.ms" => d.roll_ms.to_string(),
        "segment.jitter.ms" => d.roll_jitter_ms.to_string(),
        _ => topic_config::find(name)
            .map(|def| def.default.to_string())
            .unwrap_or_default(),
    }
}

/// Every topic config with its effective value.
pub fn topic_entries(broker: &Broker, configs: &BTreeMap<String, String>) -> Vec<Entry> {
    TOPIC_CONFIGS
        .iter()
        .map(|def| {
            let default = broker_default(broker, def.name);
            let mut synonyms = Vec::new();
            let (value, source) = match configs.get(def.name) {
                Some(v) => {
                    synonyms.push((def.name.to_string(), v.clone(), SOURCE_TOPIC));
                    (v.clone(), SOURCE_TOPIC)
                }
                None => (default.clone(), SOURCE_DEFAULT),
            };
            if let Some(broker_name) = def.broker_name {
                synonyms.push((broker_name.to_string(), default, SOURCE_DEFAULT));
            }
            Entry {
                name: def.name.to_string(),
                value: Some(value),
                read_only: false,
                config_source: source,
                config_type: def.kind as i8,
                synonyms,
            }
        })
        .collect()
}

fn broker_entries(broker: &Broker) -> Vec<Entry> {
    let cfg = &broker.config;
    let entry = |name: &str, value: String, kind: ConfigType| Entry {
        name: name.to_string(),
        value: Some(value.clone()),
        read_only: true,
        config_source: SOURCE_STATIC_BROKER,
        config_type: kind as i8,
        synonyms: vec![(name.to_string(), value, SOURCE_STATIC_BROKER)],
    };
    vec![
        entry(
            "auto.create.topics.enable",
            cfg.auto_create_topics.to_string(),
            ConfigType::Boolean,
        ),
        entry("broker.id", cfg.broker_id.to_string(), ConfigType::Int),
        entry(
            "log.retention.bytes",
            cfg.log.retention_bytes.to_string(),
            ConfigType::Long,
        ),
        entry(
            "log.retention.ms",
            cfg.log.retention_ms.to_string(),
            ConfigType::Long,
        ),
        entry(
            "log.segment.bytes",
            cfg.log.segment_bytes.to_string(),
            ConfigType::Int,
        ),
        entry(
            "message.max.bytes",
            cfg.log.max_message_bytes.to_string(),
            ConfigType::Int,
        ),
        entry(
            "num.partitions",
            cfg.default_partitions.to_string(),
            ConfigType::Int,
        ),
        entry(
            "socket.request.max.bytes",
            cfg.max_frame_bytes.to_string(),
            ConfigType::Int,
        ),
    ]
}

pub fn handle(
    broker: &Broker,
    req: DescribeConfigsRequest,
    _version: i16,
) -> DescribeConfigsResponse {
    let results = req
        .resources
        .into_iter()
        .map(|res| {
            let mut result = DescribeConfigsResult {
                resource_type: res.resource_type,
                resource_name: res.resource_name.clone(),
                ..Default::default()
            };
            let entries = match res.resource_type {
                RESOURCE_TOPIC => match broker.topic(&res.resource_name) {
                    Some(t) => Ok(topic_entries(broker, &t.configs)),
                    None => Err((
                        ErrorCode::UnknownTopicOrPartition,
                        format!("Topic {} does not exist", res.resource_name),
                    )),
                },
                RESOURCE_BROKER
                    if res.resource_name.is_empty()
                        || res.resource_name == broker.config.broker_id.to_string() =>
                {
                    Ok(broker_entries(broker))
                }
                RESOURCE_BROKER => Err((
                    ErrorCode::InvalidRequest,
                    format!("Unexpected broker id {}", res.resource_name),
                )),
                other => Err((
                    ErrorCode::InvalidRequest,
                    format!("Unsupported resource type {other}"),
                )),
            };
            match entries {
                Ok(entries) => {
                    result.configs = entries
                        .into_iter()
                        .filter(|e| {
                            res.configuration_keys
                                .as_ref()
                                .is_none_or(|keys| keys.contains(&e.name))
                        })
                        .map(|e| DescribeConfigsResourceResult {
                            name: e.name,
                            value: e.value,
                            read_only: e.read_only,
                            config_source: e.config_source,
                            is_sensitive: false,
                            synonyms: if req.include_synonyms {
                                e.synonyms
                                    .into_iter()
                                    .map(|(name, value, source)| DescribeConfigsSynonym {
                                        name,
                                        value: Some(value),
                                        source,
                                        ..Default::default()
                                    })
                                    .collect()
                            } else {
                                Vec::new()
                            },
                            config_type: e.config_type,
                            documentation: None,
                            ..Default::default()
                        })
                        .collect();
                }
                Err((code, message)) => {
                    result.error_code = code.code();
                    result.error_message = Some(message);
                }
            }
            result
        })
        .collect();
    DescribeConfigsResponse {
        results,
        ..Default::default()
    }
}
