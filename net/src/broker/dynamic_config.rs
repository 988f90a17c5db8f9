//! Dynamic broker configs (KIP-226) on the volume, and the effective log
//! defaults they make (`kaas_core::broker_config` has the rules).
//!
//! Two kinds of file, each with one writer
//! (`kaas_core::layout::BROKER_CONFIGS_DIR`):
//! - `kaas-<id>.json`, the configs set for broker `<id>` alone: written only
//!   by that broker (a request naming another broker's id is refused, as in
//!   Kafka), replaced whole with `write_atomic`. The broker's memory is the
//!   authority between writes, so a change reads nothing first.
//! - `default@<N>.json`, version N of the cluster-wide default: any broker
//!   may change it, so, as with topic versions (`topic_file`), a change
//!   creates the next version exclusively and a broker that loses the race
//!   rebuilds its change on the winner's. Readers take the newest version;
//!   the others follow a change in their next ownership round.

use crate::config::LogDefaults;
use crate::volume::Volume;
use kaas_core::broker_config::{self as rules, Layers};
use kaas_core::layout::{self, BROKER_CONFIGS_DIR};
use kaas_core::topic_config::TOPIC_CONFIGS;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io;

pub type Configs = BTreeMap<String, String>;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct BrokerFile {
    broker_id: i32,
    configs: Configs,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct DefaultFile {
    version: u32,
    configs: Configs,
}

/// The cluster default as last read, and the version a change creates next.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CurrentDefault {
    pub configs: Configs,
    /// The version read; 0 when none is on the volume.
    pub version: u32,
    /// One past the highest version seen.
    pub next_version: u32,
}

use super::versions::{self, READ_ATTEMPTS};

fn invalid(path: &str, e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("{path}: {e}"))
}

/// Broker `broker_id`'s own dynamic configs (empty if it never set any).
pub fn read_own(volume: &dyn Volume, broker_id: i32) -> io::Result<Configs> {
    let path = layout::broker_config_file(broker_id);
    let Some(bytes) = volume.read(&path)? else {
        return Ok(Configs::new());
    };
    let file: BrokerFile = serde_json::from_slice(&bytes).map_err(|e| invalid(&path, e))?;
    if file.broker_id != broker_id {
        return Err(invalid(
            &path,
            format!("written for broker {}", file.broker_id),
        ));
    }
    Ok(file.configs)
}

/// Replaces broker `broker_id`'s own dynamic configs (its one writer).
pub fn write_own(volume: &dyn Volume, broker_id: i32, configs: &Configs) -> io::Result<()> {
    volume.create_dir_all(BROKER_CONFIGS_DIR)?;
    let json = serde_json::to_vec_pretty(&BrokerFile {
        broker_id,
        configs: configs.clone(),
    })
    .map_err(io::Error::other)?;
    volume.write_atomic(&layout::broker_config_file(broker_id), &json)
}

/// The newest cluster default on the volume.
pub fn read_default(volume: &dyn Volume) -> io::Result<CurrentDefault> {
    'listing: for _ in 0..READ_ATTEMPTS {
        let mut versions: Vec<u32> = volume
            .list(BROKER_CONFIGS_DIR)?
            .iter()
            .filter_map(|e| layout::broker_default_config_version(e))
            .collect();
        versions.sort_unstable_by(|a, b| b.cmp(a));
        let mut current = CurrentDefault {
            next_version: versions.first().map_or(1, |v| v.saturating_add(1)),
            ..CurrentDefault::default()
        };
        for version in versions {
            match read_version(volume, version)? {
                Read::Found(configs) => {
                    current.configs = configs;
                    current.version = version;
                    break;
                }
                Read::Gone => continue 'listing,
                Read::Unreadable => continue,
            }
        }
        return beyond_the_listing(volume, current);
    }
    Err(io::Error::other(
        "the cluster's dynamic broker default kept changing while read",
    ))
}

enum Read {
    Found(Configs),
    /// Removed since the listing: a newer version replaced it.
    Gone,
    /// Does not parse (reported): an older version may follow.
    Unreadable,
}

fn read_version(volume: &dyn Volume, version: u32) -> io::Result<Read> {
    let path = layout::broker_default_config_file(version);
    let Some(bytes) = volume.read(&path)? else {
        return Ok(Read::Gone);
    };
    match serde_json::from_slice::<DefaultFile>(&bytes) {
        Ok(f) if f.version == version => Ok(Read::Found(f.configs)),
        Ok(f) => {
            tracing::warn!(file = %path, version = f.version, "dynamic broker default names another version");
            Ok(Read::Unreadable)
        }
        Err(e) => {
            tracing::warn!(file = %path, error = %e, "dynamic broker default does not parse");
            Ok(Read::Unreadable)
        }
    }
}

/// Newer versions than a (possibly stale) listing showed, looked up by name.
fn beyond_the_listing(
    volume: &dyn Volume,
    mut current: CurrentDefault,
) -> io::Result<CurrentDefault> {
    loop {
        let next = current.next_version;
        match read_version(volume, next)? {
            Read::Gone => return Ok(current),
            Read::Found(configs) => {
                current.configs = configs;
                current.version = next;
            }
            Read::Unreadable => {}
        }
        current.next_version = next.saturating_add(1);
    }
}

/// Publishes `configs` as the cluster default's next version, created
/// exclusively: `AlreadyExists` when another broker published that version
/// first (read again and rebuild the change on the winner's).
pub fn publish_default(
    volume: &dyn Volume,
    current: &CurrentDefault,
    configs: &Configs,
) -> io::Result<u32> {
    volume.create_dir_all(BROKER_CONFIGS_DIR)?;
    let version = current.next_version;
    let json = serde_json::to_vec_pretty(&DefaultFile {
        version,
        configs: configs.clone(),
    })
    .map_err(io::Error::other)?;
    versions::publish(volume, layout::broker_default_config_file, version, &json)?;
    Ok(version)
}

// ------------------------------------------------------------- the layers

/// Each log default under its Kafka name (times in ms): the one list both
/// the start-up layer and the built-in layer are made from. (All are
/// integers; i128 holds each of their types.)
fn by_kafka_name(log: &LogDefaults) -> [(&'static str, i128); 9] {
    [
        (rules::LOG_SEGMENT_BYTES, log.segment_bytes.into()),
        (rules::LOG_ROLL_MS, log.roll_ms.into()),
        (rules::LOG_ROLL_JITTER_MS, log.roll_jitter_ms.into()),
        (rules::LOG_RETENTION_MS, log.retention_ms.into()),
        (rules::LOG_RETENTION_BYTES, log.retention_bytes.into()),
        (rules::MESSAGE_MAX_BYTES, log.max_message_bytes.into()),
        (rules::LOG_CLEANER_BACKOFF_MS, log.cleaner_backoff_ms.into()),
        (
            rules::LOG_CLEANER_DEDUPE_BUFFER_SIZE,
            log.cleaner_dedupe_buffer_bytes as i128,
        ),
        (
            rules::LOG_CLEANER_IO_MAX_BYTES_PER_SECOND,
            log.cleaner_io_max_bytes_per_second.into(),
        ),
    ]
}

/// The start-up layer: each `kaas serve` setting given a value other than
/// its built-in default, under Kafka's name (a flag given its default
/// value reads as the default, a difference from Kafka, which tells them
/// apart).
pub fn static_layer(log: &LogDefaults) -> Configs {
    let defaults = by_kafka_name(&LogDefaults::default());
    by_kafka_name(log)
        .into_iter()
        .zip(defaults)
        .filter(|((_, value), (_, default))| value != default)
        .map(|((name, value), _)| (name.to_string(), value.to_string()))
        .collect()
}

/// The ms spellings whose built-in default Kafka gives in hours instead.
const DEFAULT_IN_HOURS: [(&str, &str); 3] = [
    (rules::LOG_ROLL_MS, rules::LOG_ROLL_HOURS),
    (rules::LOG_ROLL_JITTER_MS, rules::LOG_ROLL_JITTER_HOURS),
    (rules::LOG_RETENTION_MS, rules::LOG_RETENTION_HOURS),
];

/// The built-in layer: kaas's defaults under Kafka's names, and Kafka's
/// default of every other topic config's broker synonym. Like Kafka, the
/// times are given in hours (`log.retention.hours` 168), with no default
/// for the ms spellings.
pub fn default_layer() -> Configs {
    let mut out: Configs = TOPIC_CONFIGS
        .iter()
        .filter_map(|def| Some((def.broker_name?.to_string(), def.default.to_string())))
        .collect();
    for (name, value) in by_kafka_name(&LogDefaults::default()) {
        match DEFAULT_IN_HOURS.iter().find(|(ms, _)| *ms == name) {
            Some((_, hours)) => out.insert(hours.to_string(), (value / 3_600_000).to_string()),
            None => out.insert(name.to_string(), value.to_string()),
        };
    }
    out
}

/// The log defaults `layers` make: each the effective value of its Kafka
/// config, or the start-up value where no layer gives a usable one.
pub fn effective(start: &LogDefaults, layers: &Layers<'_>) -> LogDefaults {
    let number = |name: &str| layers.number(name);
    LogDefaults {
        segment_bytes: number(rules::LOG_SEGMENT_BYTES)
            .map_or(start.segment_bytes, |n| n.max(14) as u64),
        roll_ms: layers.roll_ms().map_or(start.roll_ms, |n| n.max(1)),
        roll_jitter_ms: layers
            .roll_jitter_ms()
            .map_or(start.roll_jitter_ms, |n| n.max(0)),
        retention_ms: layers.retention_ms().unwrap_or(start.retention_ms),
        retention_bytes: number(rules::LOG_RETENTION_BYTES).unwrap_or(start.retention_bytes),
        max_message_bytes: number(rules::MESSAGE_MAX_BYTES)
            .and_then(|n| i32::try_from(n).ok())
            .map_or(start.max_message_bytes, |n| n.max(0)),
        retention_check_interval_ms: start.retention_check_interval_ms,
        cleaner_backoff_ms: number(rules::LOG_CLEANER_BACKOFF_MS)
            .map_or(start.cleaner_backoff_ms, |n| n.max(0) as u64),
        cleaner_dedupe_buffer_bytes: number(rules::LOG_CLEANER_DEDUPE_BUFFER_SIZE)
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(start.cleaner_dedupe_buffer_bytes),
        cleaner_io_max_bytes_per_second: number(rules::LOG_CLEANER_IO_MAX_BYTES_PER_SECOND)
            .map_or(start.cleaner_io_max_bytes_per_second, |n| n.max(0) as u64),
    }
}

#[cfg(test)]
mod tests {
    // A test: an unwrap that fails is the test failing.
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::volume::LocalVolume;

    fn configs(pairs: &[(&str, &str)]) -> Configs {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect()
    }

    #[test]
    fn a_brokers_own_configs_round_trip_and_another_brokers_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let volume = LocalVolume::new(dir.path()).unwrap();
        assert_eq!(read_own(&volume, 1).unwrap(), Configs::new());
        let set = configs(&[("log.retention.ms", "1000")]);
        write_own(&volume, 1, &set).unwrap();
        assert_eq!(read_own(&volume, 1).unwrap(), set);
        assert_eq!(read_own(&volume, 2).unwrap(), Configs::new());
        volume
            .write_atomic(
                &layout::broker_config_file(2),
                br#"{"broker_id":1,"configs":{}}"#,
            )
            .unwrap();
        assert!(read_own(&volume, 2).is_err());
    }

    #[test]
    fn each_default_version_is_created_once_and_the_newest_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let volume = LocalVolume::new(dir.path()).unwrap();
        let none = read_default(&volume).unwrap();
        assert_eq!((none.version, none.next_version), (0, 1));
        let a = configs(&[("log.segment.bytes", "1000")]);
        assert_eq!(publish_default(&volume, &none, &a).unwrap(), 1);
        // A broker that read before that change loses the race for 1.
        let lost = publish_default(&volume, &none, &Configs::new()).unwrap_err();
        assert_eq!(lost.kind(), io::ErrorKind::AlreadyExists);
        let current = read_default(&volume).unwrap();
        assert_eq!((current.version, current.next_version), (1, 2));
        assert_eq!(current.configs, a);
        for _ in 0..versions::KEPT_VERSIONS + 3 {
            let current = read_default(&volume).unwrap();
            publish_default(&volume, &current, &Configs::new()).unwrap();
        }
        let current = read_default(&volume).unwrap();
        assert_eq!(current.version, versions::KEPT_VERSIONS + 4);
        assert_eq!(current.configs, Configs::new());
        assert!(volume
            .read(&layout::broker_default_config_file(1))
            .unwrap()
            .is_none());
    }

    #[test]
    fn the_layers_make_the_start_up_defaults_when_nothing_is_set() {
        let start = LogDefaults {
            segment_bytes: 4096,
            ..LogDefaults::default()
        };
        let fixed = static_layer(&start);
        assert_eq!(fixed, configs(&[("log.segment.bytes", "4096")]));
        let (empty, default) = (Configs::new(), default_layer());
        let layers = Layers {
            per_broker: &empty,
            cluster_default: &empty,
            static_broker: &fixed,
            default: &default,
        };
        let e = effective(&start, &layers);
        assert_eq!(e.segment_bytes, 4096);
        assert_eq!(e.retention_ms, start.retention_ms);
        assert_eq!(e.roll_ms, start.roll_ms);
        assert_eq!(e.max_message_bytes, start.max_message_bytes);
        assert_eq!(e.cleaner_backoff_ms, start.cleaner_backoff_ms);
        let per_broker = configs(&[
            ("log.retention.minutes", "5"),
            ("log.segment.bytes", "2048"),
        ]);
        let e = effective(
            &start,
            &Layers {
                per_broker: &per_broker,
                ..layers
            },
        );
        assert_eq!((e.segment_bytes, e.retention_ms), (2048, 300_000));
    }
}
