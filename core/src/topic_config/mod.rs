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

/// One topic config: Kafka's definition, and what kaas does with it.
#[derive(Debug, Clone, Copy)]
pub struct ConfigDef {
    pub name: &'static str,
    pub kind: ConfigType,
    /// What a value must be (Kafka's validator).
    pub check: Check,
    /// The broker-wide config that supplies the default, where Kafka has one.
    pub broker_name: Option<&'static str>,
    /// Kafka's default, where the broker sets none (the broker's own
    /// settings override some: `Broker::topic_default`).
    pub default: &'static str,
    /// Whether kaas acts on it.
    pub effect: Effect,
}

/// A config value's constraint, as Kafka's `ConfigDef` validators state it.
#[derive(Debug, Clone, Copy)]
pub enum Check {
    /// A number of the config's type, at least this.
    AtLeast(i64),
    /// A number of the config's type within these bounds, or one of the
    /// listed extra values (gzip's -1, "the codec's default").
    Between(i64, i64, &'static [i64]),
    /// A fraction in [0, 1].
    Ratio,
    /// `true` or `false`.
    Bool,
    /// One of these strings.
    OneOf(&'static [&'static str]),
    /// A comma-separated list, each item one of these.
    ListOf(&'static [&'static str]),
    /// Kafka's throttled-replicas list: empty, `*`, or `partition:broker`
    /// pairs.
    ThrottledReplicas,
}

/// What kaas does with a config a topic sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Acted on as Kafka acts on it.
    Honoured,
    /// Accepted, validated, stored and described, but it changes nothing in
    /// kaas, for the reason given (docs/protocol.md lists each).
    NoEffect(&'static str),
}

pub const RETENTION_MS: &str = "retention.ms";
pub const RETENTION_BYTES: &str = "retention.bytes";
pub const SEGMENT_BYTES: &str = "segment.bytes";
/// The active segment rolls once it has waited this long (by its records'
/// timestamps, or the clock when they have none).
pub const SEGMENT_MS: &str = "segment.ms";
/// Up to this much is taken off `segment.ms`, per segment, so partitions
/// do not all roll at once.
pub const SEGMENT_JITTER_MS: &str = "segment.jitter.ms";
pub const MAX_MESSAGE_BYTES: &str = "max.message.bytes";
pub const CLEANUP_POLICY: &str = "cleanup.policy";
pub const DELETE_RETENTION_MS: &str = "delete.retention.ms";
pub const MIN_CLEANABLE_DIRTY_RATIO: &str = "min.cleanable.dirty.ratio";
pub const MIN_COMPACTION_LAG_MS: &str = "min.compaction.lag.ms";
pub const MAX_COMPACTION_LAG_MS: &str = "max.compaction.lag.ms";
pub const INDEX_INTERVAL_BYTES: &str = "index.interval.bytes";
pub const TIMESTAMP_AFTER_MAX_MS: &str = "message.timestamp.after.max.ms";
pub const TIMESTAMP_BEFORE_MAX_MS: &str = "message.timestamp.before.max.ms";
/// Kafka 4's default `message.timestamp.after.max.ms`: an hour.
pub const DEFAULT_TIMESTAMP_AFTER_MAX_MS: i64 = 3_600_000;

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

const NO_REPLICAS: &str =
    "one copy of each partition on the shared volume: no replicas to elect, throttle or count";
const NO_TIERING: &str = "no tiered storage: the volume holds the whole log";
const NO_RECOMPRESSION: &str = "batches are stored as the producer compressed them";
const MAX: &str = "9223372036854775807";

/// Every topic config of Kafka 4.1 (DescribeConfigs of a topic lists
/// these), sorted by name: kaas accepts each value Kafka accepts, acts on
/// those marked [`Effect::Honoured`], and says why not for the rest.
/// `cleanup.policy` with `compact` runs the log cleaner on the topic
/// (`kaas_core::cleaner`, with `delete.retention.ms`,
/// `min.cleanable.dirty.ratio` and the compaction lags). Two values Kafka
/// accepts are refused with a
/// clear message ([`refused_value`]). One row per config, kept as a table.
#[rustfmt::skip]
pub const TOPIC_CONFIGS: &[ConfigDef] = &[
    def(CLEANUP_POLICY, ConfigType::List, Check::ListOf(&["compact", "delete"]), Some("log.cleanup.policy"), "delete", Effect::Honoured),
    def("compression.gzip.level", ConfigType::Int, Check::Between(1, 9, &[-1]), Some("compression.gzip.level"), "-1", Effect::NoEffect(NO_RECOMPRESSION)),
    def("compression.lz4.level", ConfigType::Int, Check::Between(1, 17, &[]), Some("compression.lz4.level"), "9", Effect::NoEffect(NO_RECOMPRESSION)),
    def("compression.type", ConfigType::String, Check::OneOf(&["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"]), Some("compression.type"), "producer", Effect::NoEffect(NO_RECOMPRESSION)),
    def("compression.zstd.level", ConfigType::Int, Check::Between(-131072, 22, &[]), Some("compression.zstd.level"), "3", Effect::NoEffect(NO_RECOMPRESSION)),
    def(DELETE_RETENTION_MS, ConfigType::Long, Check::AtLeast(0), Some("log.cleaner.delete.retention.ms"), "86400000", Effect::Honoured),
    def("file.delete.delay.ms", ConfigType::Long, Check::AtLeast(0), Some("log.segment.delete.delay.ms"), "60000", Effect::NoEffect("a deleted segment's file goes at once; a reader that has it open keeps reading it")),
    def("flush.messages", ConfigType::Long, Check::AtLeast(1), Some("log.flush.interval.messages"), MAX, Effect::NoEffect("kaas syncs every batch before an acks=all answer and the rest within its flush interval; this could only ask for fewer syncs")),
    def("flush.ms", ConfigType::Long, Check::AtLeast(0), None, MAX, Effect::NoEffect("as flush.messages")),
    def("follower.replication.throttled.replicas", ConfigType::List, Check::ThrottledReplicas, None, "", Effect::NoEffect(NO_REPLICAS)),
    def(INDEX_INTERVAL_BYTES, ConfigType::Int, Check::AtLeast(0), Some("log.index.interval.bytes"), "4096", Effect::Honoured),
    def("leader.replication.throttled.replicas", ConfigType::List, Check::ThrottledReplicas, None, "", Effect::NoEffect(NO_REPLICAS)),
    def("local.retention.bytes", ConfigType::Long, Check::AtLeast(-2), Some("log.local.retention.bytes"), "-2", Effect::NoEffect(NO_TIERING)),
    def("local.retention.ms", ConfigType::Long, Check::AtLeast(-2), Some("log.local.retention.ms"), "-2", Effect::NoEffect(NO_TIERING)),
    def(MAX_COMPACTION_LAG_MS, ConfigType::Long, Check::AtLeast(1), Some("log.cleaner.max.compaction.lag.ms"), MAX, Effect::Honoured),
    def(MAX_MESSAGE_BYTES, ConfigType::Int, Check::AtLeast(0), Some("message.max.bytes"), "1048588", Effect::Honoured),
    def(TIMESTAMP_AFTER_MAX_MS, ConfigType::Long, Check::AtLeast(0), Some("log.message.timestamp.after.max.ms"), "3600000" /* DEFAULT_TIMESTAMP_AFTER_MAX_MS */, Effect::Honoured),
    def(TIMESTAMP_BEFORE_MAX_MS, ConfigType::Long, Check::AtLeast(0), Some("log.message.timestamp.before.max.ms"), MAX, Effect::Honoured),
    def("message.timestamp.type", ConfigType::String, Check::OneOf(&["CreateTime", "LogAppendTime"]), Some("log.message.timestamp.type"), "CreateTime", Effect::Honoured),
    def(MIN_CLEANABLE_DIRTY_RATIO, ConfigType::Double, Check::Ratio, Some("log.cleaner.min.cleanable.ratio"), "0.5", Effect::Honoured),
    def(MIN_COMPACTION_LAG_MS, ConfigType::Long, Check::AtLeast(0), Some("log.cleaner.min.compaction.lag.ms"), "0", Effect::Honoured),
    def("min.insync.replicas", ConfigType::Int, Check::AtLeast(1), Some("min.insync.replicas"), "1", Effect::NoEffect(NO_REPLICAS)),
    def("preallocate", ConfigType::Boolean, Check::Bool, Some("log.preallocate"), "false", Effect::NoEffect("segments grow as written")),
    def("remote.log.copy.disable", ConfigType::Boolean, Check::Bool, None, "false", Effect::NoEffect(NO_TIERING)),
    def("remote.log.delete.on.disable", ConfigType::Boolean, Check::Bool, None, "false", Effect::NoEffect(NO_TIERING)),
    def("remote.storage.enable", ConfigType::Boolean, Check::Bool, None, "false", Effect::NoEffect(NO_TIERING)),
    def(RETENTION_BYTES, ConfigType::Long, Check::AtLeast(i64::MIN), Some("log.retention.bytes"), "-1", Effect::Honoured),
    def(RETENTION_MS, ConfigType::Long, Check::AtLeast(-1), None, "604800000", Effect::Honoured),
    // Kafka's minimum is 1 MiB; kaas takes any segment one batch header fits.
    def(SEGMENT_BYTES, ConfigType::Int, Check::AtLeast(14), Some("log.segment.bytes"), "1073741824", Effect::Honoured),
    def("segment.index.bytes", ConfigType::Int, Check::AtLeast(4), Some("log.index.size.max.bytes"), "10485760", Effect::NoEffect("kaas's index is sparse and sized by its segment")),
    // Both roll the active segment by time (`kaas_core::partition::segment_roll`).
    def(SEGMENT_JITTER_MS, ConfigType::Long, Check::AtLeast(0), None, "0", Effect::Honoured),
    def(SEGMENT_MS, ConfigType::Long, Check::AtLeast(1), None, "604800000", Effect::Honoured),
    def("unclean.leader.election.enable", ConfigType::Boolean, Check::Bool, Some("unclean.leader.election.enable"), "false", Effect::NoEffect(NO_REPLICAS)),
];

const fn def(
    name: &'static str,
    kind: ConfigType,
    check: Check,
    broker_name: Option<&'static str>,
    default: &'static str,
    effect: Effect,
) -> ConfigDef {
    ConfigDef {
        name,
        kind,
        check,
        broker_name,
        default,
        effect,
    }
}

pub fn find(name: &str) -> Option<&'static ConfigDef> {
    TOPIC_CONFIGS.iter().find(|d| d.name == name)
}

/// Values Kafka accepts that kaas refuses, with the reason (INVALID_CONFIG).
/// Kafka itself refuses `remote.storage.enable=true` with this message
/// when tiered storage is off, as it always is here.
pub fn refused_value(name: &str, value: &str) -> Option<String> {
    match (name, value.trim()) {
        ("message.timestamp.type", "LogAppendTime") => Some(
            "kaas does not support message.timestamp.type=LogAppendTime: it stores batches as the producer stamped them".into(),
        ),
        ("remote.storage.enable", v) if v.eq_ignore_ascii_case("true") => Some(
            "Tiered Storage functionality is disabled in the broker. Topic cannot be configured with remote log storage.".into(),
        ),
        _ => None,
    }
}

/// Checks one config a client wants to set; the error is the message for
/// INVALID_CONFIG.
pub fn validate(name: &str, value: Option<&str>) -> Result<(), String> {
    let def = find(name).ok_or_else(|| format!("Unknown topic config name: {name}"))?;
    let value = value.ok_or_else(|| format!("Null value not supported for topic config {name}"))?;
    if let Some(why) = refused_value(name, value) {
        return Err(format!(
            "Invalid value {value} for configuration {name}: {why}"
        ));
    }
    let v = value.trim();
    let number = || -> Option<i64> {
        match def.kind {
            ConfigType::Int | ConfigType::Short => v.parse::<i32>().ok().map(i64::from),
            _ => v.parse::<i64>().ok(),
        }
    };
    let ok = match def.check {
        Check::AtLeast(min) => number().is_some_and(|n| n >= min),
        Check::Between(lo, hi, extra) => {
            number().is_some_and(|n| (lo..=hi).contains(&n) || extra.contains(&n))
        }
        Check::Ratio => v.parse::<f64>().is_ok_and(|r| (0.0..=1.0).contains(&r)),
        // Kafka parses booleans ignoring case.
        Check::Bool => v.eq_ignore_ascii_case("true") || v.eq_ignore_ascii_case("false"),
        Check::OneOf(choices) => choices.contains(&v),
        // Kafka's ValidList: every comma-separated item one of the choices.
        Check::ListOf(choices) => v.split(',').all(|item| choices.contains(&item.trim())),
        Check::ThrottledReplicas => throttled_replicas(v),
    };
    if ok {
        Ok(())
    } else {
        Err(format!("Invalid value {value} for configuration {name}"))
    }
}

/// Kafka's throttled-replicas syntax: empty, `*`, or `partition:broker`
/// pairs separated by commas.
fn throttled_replicas(v: &str) -> bool {
    let pair = |item: &str| {
        item.trim().split_once(':').is_some_and(|(p, b)| {
            p.trim().parse::<u32>().is_ok() && b.trim().parse::<u32>().is_ok()
        })
    };
    v.is_empty() || v == "*" || v.split(',').all(pair)
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

/// The cleaner's settings of a topic: `delete.retention.ms` and the
/// compaction config, each the topic's value or Kafka's default.
pub fn compaction(configs: &BTreeMap<String, String>) -> (i64, crate::cleaner::CompactionConfig) {
    let ratio = configs
        .get(MIN_CLEANABLE_DIRTY_RATIO)
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|r| (0.0..=1.0).contains(r))
        .unwrap_or(0.5);
    (
        get_i64(configs, DELETE_RETENTION_MS, 86_400_000),
        crate::cleaner::CompactionConfig {
            min_compaction_lag_ms: get_i64(configs, MIN_COMPACTION_LAG_MS, 0),
            max_compaction_lag_ms: get_i64(configs, MAX_COMPACTION_LAG_MS, i64::MAX),
            min_cleanable_dirty_ratio: ratio,
        },
    )
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

    #[test]
    fn every_config_is_listed_once_in_order_and_its_default_is_valid() {
        let names: Vec<&str> = TOPIC_CONFIGS.iter().map(|d| d.name).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(
            names, sorted,
            "sorted by name, each once, as Kafka lists them"
        );
        assert_eq!(names.len(), 33, "Kafka 4.1's topic configs");
        for d in TOPIC_CONFIGS {
            assert_eq!(validate(d.name, Some(d.default)), Ok(()), "{}", d.name);
        }
    }

    #[test]
    fn values_kafka_takes_that_kaas_cannot_honour_are_refused_saying_why() {
        let e = validate("message.timestamp.type", Some("LogAppendTime")).unwrap_err();
        assert!(e.contains("kaas does not support"), "{e}");
        assert!(validate("remote.storage.enable", Some("TRUE")).is_err());
        assert!(validate("remote.storage.enable", Some("False")).is_ok());
    }
}
