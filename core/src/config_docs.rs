//! What each config kaas describes means, for DescribeConfigs v3+ when the
//! client sets `IncludeDocumentation` (the Java AdminClient's
//! `DescribeConfigsOptions.includeDocumentation`, `kafka-configs
//! --describe` does not ask).
//!
//! The sentences are kaas's own, one per config, and say what kaas does
//! with the value: a topic config kaas only stores says so and why, taken
//! from its [`Effect::NoEffect`] reason, so the answer can never claim an
//! effect the broker does not have. A broker config that is the default of
//! a topic config is documented through that topic config, so the two
//! cannot drift apart.

use crate::broker_config::{self, UNIT_SYNONYMS};
use crate::topic_config::{self, ConfigDef, Effect, TOPIC_CONFIGS};

/// The documentation of topic config `def`: what it means, and, when kaas
/// does not act on it, that it has no effect here and why.
pub fn topic_documentation(def: &ConfigDef) -> String {
    let meaning = topic_meaning(def.name);
    match def.effect {
        Effect::Honoured => meaning.to_string(),
        Effect::NoEffect(why) => format!("{meaning} In kaas it has no effect: {why}."),
    }
}

/// The documentation of broker config `name`, for every broker config
/// DescribeConfigs lists; `None` for a name kaas does not describe.
pub fn broker_documentation(name: &str) -> Option<String> {
    if let Some(own) = broker_meaning(name) {
        return Some(own.to_string());
    }
    if let Some(def) = defaulted_topic_config(name) {
        return Some(format!(
            "The default of topic config {} for topics that do not set it. {}",
            def.name,
            topic_documentation(def)
        ));
    }
    let (ms_name, unit) = coarser_unit(name)?;
    Some(format!(
        "{ms_name} in {unit}, used only when the finer spellings of {ms_name} are not set."
    ))
}

/// The topic config whose default broker config `name` supplies.
fn defaulted_topic_config(name: &str) -> Option<&'static ConfigDef> {
    TOPIC_CONFIGS
        .iter()
        .find(|def| broker_config::topic_synonym(def.name) == Some(name))
}

/// The ms config a coarser unit synonym spells, and its unit.
fn coarser_unit(name: &str) -> Option<(&'static str, &'static str)> {
    if !UNIT_SYNONYMS.iter().any(|(n, _)| *n == name) {
        return None;
    }
    let ms_name = broker_config::synonyms(name).first()?;
    let unit = if name.ends_with(".minutes") {
        "minutes"
    } else {
        "hours"
    };
    Some((ms_name, unit))
}

/// The broker configs that are not the default of a topic config.
fn broker_meaning(name: &str) -> Option<&'static str> {
    Some(match name {
        broker_config::LOG_CLEANER_BACKOFF_MS => {
            "How long the log cleaner sleeps when no compacted partition needs cleaning."
        }
        broker_config::LOG_CLEANER_DEDUPE_BUFFER_SIZE => {
            "The memory, in bytes, the log cleaner may use for the key map of one cleaning pass; a larger map cleans more of the log in one pass."
        }
        broker_config::LOG_CLEANER_IO_MAX_BYTES_PER_SECOND => {
            "The most bytes a second the log cleaner reads and writes, so that cleaning leaves disk bandwidth for produce and fetch."
        }
        "auto.create.topics.enable" => {
            "Whether a Metadata or Produce request that names an unknown topic creates it (set by `kaas serve --auto-create-topics`)."
        }
        "broker.id" => "This broker's id in the cluster (set by `kaas serve --broker-id`).",
        "num.partitions" => {
            "The partition count of an auto-created topic (set by `kaas serve --default-partitions`)."
        }
        "socket.request.max.bytes" => {
            "The largest request frame the broker reads; a larger one closes the connection (set by `kaas serve --max-frame-bytes`)."
        }
        _ => return None,
    })
}

/// What a topic config means, in kaas's words.
fn topic_meaning(name: &str) -> &'static str {
    match name {
        topic_config::CLEANUP_POLICY => {
            "What happens to old segments: delete removes them by retention.ms and retention.bytes, compact keeps the latest record of each key."
        }
        "compression.gzip.level" => "The gzip level the broker would compress batches with when compression.type is gzip.",
        "compression.lz4.level" => "The lz4 level the broker would compress batches with when compression.type is lz4.",
        "compression.type" => "The codec batches are stored in; producer keeps the producer's own.",
        "compression.zstd.level" => "The zstd level the broker would compress batches with when compression.type is zstd.",
        topic_config::DELETE_RETENTION_MS => {
            "How long a tombstone, and the marker of a finished transaction, stays on a compacted topic after cleaning reaches it, so that readers can see the delete."
        }
        "file.delete.delay.ms" => "How long a deleted segment's file is kept before it is removed.",
        "flush.messages" => "How many records are written between forced syncs of the log.",
        "flush.ms" => "The longest time a record waits before a forced sync of the log.",
        "follower.replication.throttled.replicas" => "The follower replicas whose replication is throttled.",
        topic_config::INDEX_INTERVAL_BYTES => {
            "How many bytes of records lie between two entries of a segment's offset and time indexes."
        }
        "leader.replication.throttled.replicas" => "The leader replicas whose replication is throttled.",
        "local.retention.bytes" => "How many bytes of a tiered partition stay on local disk.",
        "local.retention.ms" => "How long a tiered partition's segments stay on local disk.",
        topic_config::MAX_COMPACTION_LAG_MS => {
            "The longest a record may stay uncleaned on a compacted topic; a segment older than this is cleaned whatever its dirty ratio."
        }
        topic_config::MAX_MESSAGE_BYTES => {
            "The largest record batch, in bytes, a producer may write to the topic."
        }
        topic_config::TIMESTAMP_AFTER_MAX_MS => {
            "How far ahead of the broker's clock a record's CreateTime may be; a later one is refused."
        }
        topic_config::TIMESTAMP_BEFORE_MAX_MS => {
            "How far behind the broker's clock a record's CreateTime may be; an earlier one is refused."
        }
        "message.timestamp.type" => {
            "Which time a record carries: CreateTime, set by the producer, or LogAppendTime, set by the broker as it appends."
        }
        topic_config::MIN_CLEANABLE_DIRTY_RATIO => {
            "The share of a compacted log not yet cleaned at which the cleaner cleans it."
        }
        topic_config::MIN_COMPACTION_LAG_MS => {
            "The shortest time a record stays uncleaned on a compacted topic."
        }
        "min.insync.replicas" => "How many replicas must have a batch before an acks=all produce is answered.",
        "preallocate" => "Whether a new segment's file is allocated at its full size when it is created.",
        "remote.log.copy.disable" => "Whether copying segments to tiered storage is stopped.",
        "remote.log.delete.on.disable" => "Whether turning tiered storage off deletes the tiered segments.",
        "remote.storage.enable" => "Whether the topic's old segments move to tiered storage.",
        topic_config::RETENTION_BYTES => {
            "The most bytes a partition keeps under the delete policy before its oldest segments go; -1 is no limit."
        }
        topic_config::RETENTION_MS => {
            "How long a segment is kept under the delete policy, measured from its newest record; -1 keeps it for ever."
        }
        topic_config::SEGMENT_BYTES => "The size at which the active segment is closed and a new one begun.",
        "segment.index.bytes" => "The largest size of a segment's offset index.",
        topic_config::SEGMENT_JITTER_MS => {
            "Up to this much is taken from segment.ms for each segment, so partitions do not all roll at once."
        }
        topic_config::SEGMENT_MS => {
            "The age at which the active segment is closed and a new one begun, even if it is not full, so retention and cleaning can reach it."
        }
        "unclean.leader.election.enable" => {
            "Whether a replica that is not in sync may become leader, at the cost of losing records."
        }
        _ => "A topic config kaas accepts and stores.",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names DescribeConfigs lists for a BROKER resource (as
    /// `net::handlers::describe_configs` builds them).
    fn described_broker_configs() -> Vec<&'static str> {
        let mut names: Vec<&str> = broker_config::DYNAMIC_BROKER_CONFIGS
            .iter()
            .map(|d| d.name)
            .chain(UNIT_SYNONYMS.iter().map(|(n, _)| *n))
            .chain(TOPIC_CONFIGS.iter().filter_map(|d| d.broker_name))
            .chain([
                "auto.create.topics.enable",
                "broker.id",
                "num.partitions",
                "socket.request.max.bytes",
            ])
            .collect();
        names.sort_unstable();
        names.dedup();
        names
    }

    #[test]
    fn every_described_config_has_documentation() {
        for def in TOPIC_CONFIGS {
            assert_ne!(
                topic_meaning(def.name),
                topic_meaning("no.such.config"),
                "{} has no sentence of its own",
                def.name
            );
        }
        for name in described_broker_configs() {
            let doc = broker_documentation(name);
            assert!(doc.is_some(), "broker config {name} is undocumented");
        }
        assert_eq!(broker_documentation("no.such.config"), None);
    }

    #[test]
    fn a_no_effect_config_says_it_has_no_effect() {
        for def in TOPIC_CONFIGS {
            let doc = topic_documentation(def);
            match def.effect {
                Effect::NoEffect(why) => {
                    assert!(doc.contains("no effect"), "{}: {doc}", def.name);
                    assert!(doc.contains(why), "{}: {doc}", def.name);
                }
                Effect::Honoured => assert!(!doc.contains("no effect"), "{}: {doc}", def.name),
            }
        }
        let preallocate = broker_documentation("log.preallocate").unwrap_or_default();
        assert!(preallocate.contains("no effect"), "{preallocate}");
    }

    #[test]
    fn a_topic_default_names_its_topic_config() {
        let doc = broker_documentation(broker_config::LOG_RETENTION_MS).unwrap_or_default();
        assert!(
            doc.starts_with("The default of topic config retention.ms"),
            "{doc}"
        );
        let doc = broker_documentation(broker_config::LOG_ROLL_MS).unwrap_or_default();
        assert!(doc.contains("topic config segment.ms "), "{doc}");
        let doc = broker_documentation(broker_config::LOG_RETENTION_HOURS).unwrap_or_default();
        assert!(doc.starts_with("log.retention.ms in hours"), "{doc}");
    }
}
