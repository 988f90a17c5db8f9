//! Topic configs: which names kaas knows, their defaults, and validation.
//!
//! A topic stores only the configs it sets; everything else falls back to the
//! broker default. Unknown names and unparsable values are rejected the way
//! Kafka rejects them (INVALID_CONFIG), so a typo never silently does nothing.

use std::collections::BTreeMap;

pub mod alter;

/// How a config value is typed, as DescribeConfigs v3+ reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigType {
    Boolean = 1,
    String = 2,
    Int = 3,
    Short = 4,
    Long = 5,
    Double = 6,
    List = 7,
    Class = 8,
    Password = 9,
}

/// One topic config kaas understands.
#[derive(Debug, Clone, Copy)]
pub struct ConfigDef {
    pub name: &'static str,
    pub kind: ConfigType,
    /// Allowed values for enumerated strings; empty means any.
    pub choices: &'static [&'static str],
    /// The broker-wide config that supplies the default.
    pub broker_name: &'static str,
}

pub const RETENTION_MS: &str = "retention.ms";
pub const RETENTION_BYTES: &str = "retention.bytes";
pub const SEGMENT_BYTES: &str = "segment.bytes";
pub const MAX_MESSAGE_BYTES: &str = "max.message.bytes";
pub const CLEANUP_POLICY: &str = "cleanup.policy";

/// The most partitions one topic may have. Kafka sets no limit, but here
/// every partition is a directory, open files and a flusher task, and
/// CreateTopics and CreatePartitions come from any client: a request for
/// 2^31 partitions must be refused, not attempted.
pub const MAX_PARTITIONS: i32 = 10_000;

/// The partition count CreateTopics and CreatePartitions may ask for.
pub fn check_partition_count(count: i32) -> Result<(), String> {
    if count <= 0 {
        return Err("Number of partitions must be larger than 0.".into());
    }
    if count > MAX_PARTITIONS {
        return Err(format!(
            "Number of partitions must be at most {MAX_PARTITIONS}."
        ));
    }
    Ok(())
}

/// The topic configs kaas accepts. `cleanup.policy` is a list of `delete`
/// and `compact` (see [`cleanup_deletes`]): a topic whose policy has
/// `compact` keeps every record, which is what Kafka's compaction promises
/// at the least (compaction only ever drops a record that a later one with
/// the same key supersedes, whenever the cleaner gets to it), so kaas's log
/// is a log the cleaner has not visited yet. Kafka Streams asks for it for
/// every changelog topic.
pub const TOPIC_CONFIGS: &[ConfigDef] = &[
    ConfigDef {
        name: CLEANUP_POLICY,
        kind: ConfigType::List,
        choices: &["compact", "delete"],
        broker_name: "log.cleanup.policy",
    },
    ConfigDef {
        name: "compression.type",
        kind: ConfigType::String,
        choices: &["producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"],
        broker_name: "compression.type",
    },
    ConfigDef {
        name: MAX_MESSAGE_BYTES,
        kind: ConfigType::Int,
        choices: &[],
        broker_name: "message.max.bytes",
    },
    ConfigDef {
        name: "message.timestamp.type",
        kind: ConfigType::String,
        choices: &["CreateTime"],
        broker_name: "log.message.timestamp.type",
    },
    ConfigDef {
        name: "min.insync.replicas",
        kind: ConfigType::Int,
        choices: &[],
        broker_name: "min.insync.replicas",
    },
    ConfigDef {
        name: RETENTION_BYTES,
        kind: ConfigType::Long,
        choices: &[],
        broker_name: "log.retention.bytes",
    },
    ConfigDef {
        name: RETENTION_MS,
        kind: ConfigType::Long,
        choices: &[],
        broker_name: "log.retention.ms",
    },
    ConfigDef {
        name: SEGMENT_BYTES,
        kind: ConfigType::Int,
        choices: &[],
        broker_name: "log.segment.bytes",
    },
];

pub fn find(name: &str) -> Option<&'static ConfigDef> {
    TOPIC_CONFIGS.iter().find(|d| d.name == name)
}

/// Checks one config a client wants to set; the error is the message for
/// INVALID_CONFIG.
pub fn validate(name: &str, value: Option<&str>) -> Result<(), String> {
    let def = find(name).ok_or_else(|| format!("Unknown topic config name: {name}"))?;
    let value = value.ok_or_else(|| format!("Null value not supported for topic config {name}"))?;
    let ok = match def.kind {
        ConfigType::Int => value
            .trim()
            .parse::<i32>()
            .is_ok_and(|v| i64::from(v) >= minimum(name)),
        ConfigType::Long => value
            .trim()
            .parse::<i64>()
            .is_ok_and(|v| v >= minimum(name)),
        ConfigType::Boolean => matches!(value, "true" | "false"),
        // Kafka's ValidList: every comma-separated item one of the choices.
        ConfigType::List => value
            .split(',')
            .all(|item| def.choices.contains(&item.trim())),
        _ => def.choices.is_empty() || def.choices.contains(&value.trim()),
    };
    if ok {
        Ok(())
    } else {
        Err(format!("Invalid value {value} for configuration {name}"))
    }
}

/// Whether a topic's `cleanup.policy` deletes: retention (`retention.ms`,
/// `retention.bytes`) and DeleteRecords apply only then, as in Kafka. A
/// `compact`-only topic keeps its records until the topic goes. The broker
/// default (`log.cleanup.policy`) is `delete`.
pub fn cleanup_deletes(configs: &BTreeMap<String, String>) -> bool {
    configs
        .get(CLEANUP_POLICY)
        .is_none_or(|policy| policy.split(',').any(|item| item.trim() == "delete"))
}

/// Whether a topic's `cleanup.policy` compacts (`compact` is in its list):
/// then every record it takes needs a key (`produce::records_without_key`).
pub fn cleanup_compacts(configs: &BTreeMap<String, String>) -> bool {
    configs
        .get(CLEANUP_POLICY)
        .is_some_and(|policy| policy.split(',').any(|item| item.trim() == "compact"))
}

/// Smallest legal value of a numeric config.
fn minimum(name: &str) -> i64 {
    match name {
        SEGMENT_BYTES => 14, // one batch header must fit
        MAX_MESSAGE_BYTES => 0,
        "min.insync.replicas" => 1,
        RETENTION_MS | RETENTION_BYTES => -1,
        _ => i64::MIN,
    }
}

/// Reads a numeric config a topic sets, or `default`.
pub fn get_i64(configs: &BTreeMap<String, String>, name: &str, default: i64) -> i64 {
    configs
        .get(name)
        .and_then(|v| v.trim().parse::<i64>().ok())
        .unwrap_or(default)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the `broker_requests` fuzz target: a CreateTopics asking for
    /// hundreds of millions of partitions was attempted, one directory and
    /// flusher at a time, holding the admin lock for good.
    #[test]
    fn partition_counts_beyond_the_limit_are_refused_not_attempted() {
        assert!(check_partition_count(1).is_ok());
        assert!(check_partition_count(MAX_PARTITIONS).is_ok());
        assert!(check_partition_count(MAX_PARTITIONS + 1).is_err());
        assert!(check_partition_count(i32::MAX).is_err());
        assert!(check_partition_count(0).is_err());
        assert!(check_partition_count(-1).is_err());
    }

    #[test]
    fn unknown_config_names_are_rejected() {
        assert!(validate("retention.msx", Some("1")).is_err());
    }

    #[test]
    fn numeric_configs_must_parse_and_respect_their_minimum() {
        assert!(validate(RETENTION_MS, Some("-1")).is_ok());
        assert!(validate(RETENTION_MS, Some("abc")).is_err());
        assert!(validate(SEGMENT_BYTES, Some("10")).is_err());
        assert!(validate(SEGMENT_BYTES, Some("1048576")).is_ok());
    }

    #[test]
    fn cleanup_policy_is_a_list_of_compact_and_delete() {
        for ok in ["delete", "compact", "compact,delete", "delete, compact"] {
            assert!(validate(CLEANUP_POLICY, Some(ok)).is_ok(), "{ok}");
        }
        for bad in ["", "sometimes", "compact,sometimes", "none"] {
            assert!(validate(CLEANUP_POLICY, Some(bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn only_a_policy_with_delete_deletes() {
        let with =
            |policy: &str| BTreeMap::from([(CLEANUP_POLICY.to_string(), policy.to_string())]);
        assert!(cleanup_deletes(&BTreeMap::new()), "the default is delete");
        assert!(cleanup_deletes(&with("delete")));
        assert!(cleanup_deletes(&with("compact,delete")));
        assert!(cleanup_deletes(&with("delete, compact")));
        assert!(!cleanup_deletes(&with("compact")));
    }
}
