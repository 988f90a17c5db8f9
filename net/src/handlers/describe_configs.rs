//! DescribeConfigs for topics and for this broker: every config with its
//! effective value, where it comes from and (when asked) its synonyms in
//! precedence order, as Kafka answers them (`kaas_core::broker_config`).

use crate::broker::Broker;
use kaas_core::broker_config::{self, Source};
use kaas_core::config_docs;
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

/// The default of a topic config on this broker: the effective value of
/// its broker synonym (dynamic per broker, dynamic cluster default, the
/// `kaas serve` flags, built-in), else Kafka's default.
pub fn broker_default(broker: &Broker, name: &str) -> String {
    broker.with_config_layers(|layers| layers.topic_default(name))
}

/// Every topic config with its effective value. A config the topic does
/// not set takes its source from its broker synonym's first layer, as in
/// Kafka (a dynamic `log.retention.ms` makes `retention.ms` DYNAMIC_BROKER_CONFIG).
pub fn topic_entries(broker: &Broker, configs: &BTreeMap<String, String>) -> Vec<Entry> {
    broker.with_config_layers(|layers| {
        TOPIC_CONFIGS
            .iter()
            .map(|def| {
                let mut synonyms = Vec::new();
                if let Some(v) = configs.get(def.name) {
                    synonyms.push((def.name.to_string(), v.clone(), SOURCE_TOPIC));
                }
                if let Some(broker_name) = broker_config::topic_synonym(def.name) {
                    synonyms.extend(
                        layers
                            .synonyms(broker_name)
                            .into_iter()
                            .map(|(n, v, source)| (n, v, source as i8)),
                    );
                }
                let value = match configs.get(def.name) {
                    Some(v) => v.clone(),
                    None => layers.topic_default(def.name),
                };
                Entry {
                    name: def.name.to_string(),
                    value: Some(value),
                    read_only: false,
                    config_source: synonyms.first().map_or(SOURCE_DEFAULT, |s| s.2),
                    config_type: def.kind as i8,
                    synonyms,
                }
            })
            .collect()
    })
}

/// The broker configs kaas describes, sorted by name: the dynamic ones,
/// the broker-wide defaults of the other topic configs, and the start-up
/// settings below.
fn broker_entries(broker: &Broker, per_broker: bool) -> Vec<Entry> {
    let cfg = &broker.config;
    let fixed = [
        (
            "auto.create.topics.enable",
            cfg.auto_create_topics.to_string(),
            ConfigType::Boolean,
        ),
        ("broker.id", cfg.broker_id.to_string(), ConfigType::Int),
        (
            "num.partitions",
            cfg.default_partitions.to_string(),
            ConfigType::Int,
        ),
        (
            "socket.request.max.bytes",
            cfg.max_frame_bytes.to_string(),
            ConfigType::Int,
        ),
    ];
    let mut entries: Vec<Entry> = broker.with_config_layers(|layers| {
        let dynamic = broker_config::DYNAMIC_BROKER_CONFIGS
            .iter()
            .map(|d| (d.name, d.kind));
        let topic_defaults = TOPIC_CONFIGS.iter().filter_map(|d| {
            let name = d.broker_name?;
            (!broker_config::is_dynamic(name)).then_some((name, d.kind))
        });
        dynamic
            .chain(broker_config::UNIT_SYNONYMS.iter().copied())
            .chain(topic_defaults)
            .filter_map(|(name, kind)| {
                // The cluster default's resource lists only what is set
                // there, as Kafka does.
                let synonyms: Vec<(String, String, i8)> = layers
                    .synonyms(name)
                    .into_iter()
                    .filter(|(.., source)| per_broker || *source == Source::DynamicDefault)
                    .map(|(n, v, source)| (n, v, source as i8))
                    .collect();
                let value = if per_broker {
                    layers.value(name).map(|(v, _)| v.to_string())
                } else {
                    Some(layers.cluster_default.get(name)?.clone())
                };
                Some(Entry {
                    name: name.to_string(),
                    value,
                    read_only: !broker_config::is_dynamic(name),
                    config_source: synonyms.first().map_or(SOURCE_DEFAULT, |s| s.2),
                    config_type: kind as i8,
                    synonyms,
                })
            })
            .collect()
    });
    if per_broker {
        entries.extend(fixed.into_iter().map(|(name, value, kind)| Entry {
            name: name.to_string(),
            value: Some(value.clone()),
            read_only: true,
            config_source: SOURCE_STATIC_BROKER,
            config_type: kind as i8,
            synonyms: vec![(name.to_string(), value, SOURCE_STATIC_BROKER)],
        }));
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    entries
}

/// What config `name` of a resource of `resource_type` means.
fn documentation(resource_type: i8, name: &str) -> Option<String> {
    match resource_type {
        RESOURCE_TOPIC => topic_config::find(name).map(config_docs::topic_documentation),
        _ => config_docs::broker_documentation(name),
    }
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
                RESOURCE_BROKER => broker_config::broker_resource(
                    &res.resource_name,
                    broker.config.broker_id,
                    broker_config::ResourceUse::Describe,
                )
                .map(|named| {
                    broker_entries(broker, named == broker_config::BrokerResource::ThisBroker)
                })
                .map_err(|refusal| (refusal.code, refusal.message)),
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
                            // Written only when asked (the flag and the
                            // field exist from v3), so a plain describe
                            // builds no sentences.
                            documentation: if req.include_documentation {
                                documentation(res.resource_type, &e.name)
                            } else {
                                None
                            },
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
