//! Dynamic broker configs (KIP-226): which broker configs a client may
//! change at runtime, what an AlterConfigs or IncrementalAlterConfigs on a
//! BROKER resource makes of the configs set there, and how the layers of
//! values (this broker's dynamic set, the cluster-wide dynamic default, the
//! `kaas serve` flags, the built-in defaults) resolve into the value each
//! config has and the sources DescribeConfigs reports.
//!
//! Pure: the broker holds the layers, calls these, persists the result.
//! Each layer is a map from Kafka's config name to its value as given.

use crate::protocol::ErrorCode;
use crate::topic_config::alter::{duplicate_names, Change, Operation, Refusal};
use crate::topic_config::{self, ConfigDef, ConfigType, TOPIC_CONFIGS};
use std::collections::BTreeMap;

/// A broker config kaas lets a client change at runtime.
#[derive(Debug, Clone, Copy)]
pub struct DynamicDef {
    pub name: &'static str,
    pub kind: ConfigType,
    /// The smallest value accepted (of the config's type).
    pub min: Option<i64>,
}

pub const LOG_SEGMENT_BYTES: &str = "log.segment.bytes";
pub const LOG_ROLL_MS: &str = "log.roll.ms";
pub const LOG_ROLL_HOURS: &str = "log.roll.hours";
pub const LOG_ROLL_JITTER_MS: &str = "log.roll.jitter.ms";
pub const LOG_ROLL_JITTER_HOURS: &str = "log.roll.jitter.hours";
pub const LOG_RETENTION_MS: &str = "log.retention.ms";
pub const LOG_RETENTION_MINUTES: &str = "log.retention.minutes";
pub const LOG_RETENTION_HOURS: &str = "log.retention.hours";
pub const LOG_RETENTION_BYTES: &str = "log.retention.bytes";
pub const MESSAGE_MAX_BYTES: &str = "message.max.bytes";
pub const LOG_CLEANER_BACKOFF_MS: &str = "log.cleaner.backoff.ms";
pub const LOG_CLEANER_DEDUPE_BUFFER_SIZE: &str = "log.cleaner.dedupe.buffer.size";
pub const LOG_CLEANER_IO_MAX_BYTES_PER_SECOND: &str = "log.cleaner.io.max.bytes.per.second";

const MS_PER_MINUTE: i64 = 60_000;
const MS_PER_HOUR: i64 = 3_600_000;

/// The broker configs that are dynamic in kaas, sorted by name: the
/// broker-wide defaults of the topic configs kaas acts on (retention,
/// segment size and roll time, the largest batch), and the log cleaner's
/// pace and budgets. Each is dynamic in Kafka too, both per broker and
/// cluster-wide. As in Kafka, only the ms spelling of a time is: the
/// coarser synonyms ([`UNIT_SYNONYMS`]) are start-up settings. Kafka's
/// other dynamic configs (thread pools, listeners, quotas, the defaults of
/// topic configs kaas only stores) are static here: see [`is_dynamic`].
#[rustfmt::skip]
pub const DYNAMIC_BROKER_CONFIGS: &[DynamicDef] = &[
    dynamic(LOG_CLEANER_BACKOFF_MS, ConfigType::Long, Some(0)),
    dynamic(LOG_CLEANER_DEDUPE_BUFFER_SIZE, ConfigType::Long, Some(0)),
    dynamic(LOG_CLEANER_IO_MAX_BYTES_PER_SECOND, ConfigType::Double, Some(0)),
    dynamic(LOG_RETENTION_BYTES, ConfigType::Long, None),
    dynamic(LOG_RETENTION_MS, ConfigType::Long, None),
    dynamic(LOG_ROLL_JITTER_MS, ConfigType::Long, Some(0)),
    dynamic(LOG_ROLL_MS, ConfigType::Long, Some(1)),
    // Kafka's minimum; kaas's segment.bytes takes the same.
    dynamic(LOG_SEGMENT_BYTES, ConfigType::Int, Some(14)),
    dynamic(MESSAGE_MAX_BYTES, ConfigType::Int, Some(0)),
];

const fn dynamic(name: &'static str, kind: ConfigType, min: Option<i64>) -> DynamicDef {
    DynamicDef { name, kind, min }
}

/// The coarser spellings of the dynamic times (`log.retention.hours` for
/// `log.retention.ms`, ...), with their types: described, and listed as
/// synonyms, but not dynamic, as in Kafka, whose dynamic set has only the
/// ms spellings.
pub const UNIT_SYNONYMS: &[(&str, ConfigType)] = &[
    (LOG_RETENTION_HOURS, ConfigType::Int),
    (LOG_RETENTION_MINUTES, ConfigType::Int),
    (LOG_ROLL_HOURS, ConfigType::Int),
    (LOG_ROLL_JITTER_HOURS, ConfigType::Int),
];

/// Broker configs kaas knows and holds fixed for the broker's life (its
/// `kaas serve` flags, or Kafka settings with no counterpart that can
/// change): a change is refused as Kafka refuses a static config.
pub const STATIC_BROKER_CONFIGS: &[&str] = &[
    "advertised.listeners",
    "auto.create.topics.enable",
    "broker.id",
    "broker.rack",
    "listeners",
    "log.dir",
    "log.dirs",
    "log.retention.check.interval.ms",
    "node.id",
    "num.partitions",
    "process.roles",
    "socket.request.max.bytes",
];

/// What a BROKER resource of a config request names: the cluster-wide
/// default (a blank name) or the broker answering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BrokerResource {
    ClusterDefault,
    ThisBroker,
}

/// Which request a BROKER resource came in (Kafka words its refusals
/// differently for each).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResourceUse {
    Alter,
    Describe,
}

/// The rule for the name of a BROKER resource, as Kafka has it: blank for
/// the cluster-wide default, else the id of the broker that answers; any
/// other name is refused with INVALID_REQUEST and Kafka's message.
pub fn broker_resource(name: &str, me: i32, by: ResourceUse) -> Result<BrokerResource, Refusal> {
    if name.is_empty() {
        return Ok(BrokerResource::ClusterDefault);
    }
    let message = match (name.parse::<i32>(), by) {
        (Ok(id), _) if id == me => return Ok(BrokerResource::ThisBroker),
        (Ok(_), ResourceUse::Alter) => {
            format!("Unexpected broker id, expected {me}, but received {name}")
        }
        (Ok(_), ResourceUse::Describe) => {
            format!("Unexpected broker id, expected {me} or empty string, but received {name}")
        }
        (Err(_), ResourceUse::Alter) => format!("Node id must be an integer, but it is: {name}"),
        (Err(_), ResourceUse::Describe) => {
            format!("Broker id must be an integer, but it is: {name}")
        }
    };
    Err(Refusal {
        code: ErrorCode::InvalidRequest,
        message,
    })
}

/// The definition of a dynamic broker config.
pub fn find(name: &str) -> Option<&'static DynamicDef> {
    DYNAMIC_BROKER_CONFIGS.iter().find(|d| d.name == name)
}

/// Whether a client may change broker config `name` at runtime. The one
/// rule: it is in [`DYNAMIC_BROKER_CONFIGS`].
pub fn is_dynamic(name: &str) -> bool {
    find(name).is_some()
}

/// Whether kaas knows `name` as a broker config that is not dynamic here:
/// one of [`STATIC_BROKER_CONFIGS`], or the broker-wide default of a topic
/// config kaas does not let change at runtime (`log.cleanup.policy`, ...).
pub fn is_known_static(name: &str) -> bool {
    !is_dynamic(name)
        && (STATIC_BROKER_CONFIGS.contains(&name)
            || UNIT_SYNONYMS.iter().any(|(n, _)| *n == name)
            || TOPIC_CONFIGS.iter().any(|d| d.broker_name == Some(name)))
}

/// Kafka's synonyms of a broker config, the preferred one first: the same
/// setting in other units (`log.retention.ms`, then `.minutes`, then
/// `.hours`), or just the name itself.
pub fn synonyms(name: &str) -> &'static [&'static str] {
    const RETENTION: &[&str] = &[LOG_RETENTION_MS, LOG_RETENTION_MINUTES, LOG_RETENTION_HOURS];
    const ROLL: &[&str] = &[LOG_ROLL_MS, LOG_ROLL_HOURS];
    const JITTER: &[&str] = &[LOG_ROLL_JITTER_MS, LOG_ROLL_JITTER_HOURS];
    match name {
        LOG_RETENTION_MS | LOG_RETENTION_MINUTES | LOG_RETENTION_HOURS => RETENTION,
        LOG_ROLL_MS | LOG_ROLL_HOURS => ROLL,
        LOG_ROLL_JITTER_MS | LOG_ROLL_JITTER_HOURS => JITTER,
        _ => match DYNAMIC_BROKER_CONFIGS.iter().find(|d| d.name == name) {
            Some(d) => std::slice::from_ref(&d.name),
            None => match TOPIC_CONFIGS.iter().find(|d| d.broker_name == Some(name)) {
                Some(ConfigDef {
                    broker_name: Some(n),
                    ..
                }) => std::slice::from_ref(n),
                _ => &[],
            },
        },
    }
}

/// The broker config whose value is topic config `topic_name`'s default,
/// as Kafka pairs them (`retention.ms` with `log.retention.ms`, whose
/// synonyms are the minutes and hours).
pub fn topic_synonym(topic_name: &str) -> Option<&'static str> {
    match topic_name {
        topic_config::RETENTION_MS => Some(LOG_RETENTION_MS),
        topic_config::SEGMENT_MS => Some(LOG_ROLL_MS),
        topic_config::SEGMENT_JITTER_MS => Some(LOG_ROLL_JITTER_MS),
        _ => topic_config::find(topic_name).and_then(|d| d.broker_name),
    }
}

// ------------------------------------------------------------ the changes

/// IncrementalAlterConfigs on a BROKER resource: each change applied to
/// the resource's `current` dynamic configs, the result checked whole.
pub fn incremental(
    current: &BTreeMap<String, String>,
    changes: &[Change],
) -> Result<BTreeMap<String, String>, Refusal> {
    duplicate_names(changes)?;
    null_values(changes, true)?;
    let mut next = current.clone();
    for (name, op, value) in changes {
        match (op, value) {
            (Operation::Set, Some(value)) => {
                next.insert(name.clone(), value.trim().to_string());
            }
            (Operation::Delete, _) => {
                next.remove(name);
            }
            // No dynamic broker config of kaas is a list (Kafka refuses
            // these the same way for its non-list configs).
            (Operation::Append | Operation::Subtract, _) => {
                let verb = if *op == Operation::Append {
                    "append"
                } else {
                    "subtract"
                };
                return Err(refusal(
                    ErrorCode::InvalidConfig,
                    format!("Config value {verb} is not allowed for config key: {name}"),
                ));
            }
            // Refused by `null_values` above.
            (Operation::Set, None) => {}
        }
    }
    check_all(&next)?;
    Ok(next)
}

/// AlterConfigs on a BROKER resource: the configs given replace the
/// resource's whole dynamic set.
pub fn replacing(changes: &[Change]) -> Result<BTreeMap<String, String>, Refusal> {
    duplicate_names(changes)?;
    null_values(changes, false)?;
    let next = changes
        .iter()
        .filter_map(|(name, _, value)| Some((name.clone(), value.as_deref()?.trim().to_string())))
        .collect();
    check_all(&next)?;
    Ok(next)
}

/// Kafka refuses a value-less SET (any value-less entry of AlterConfigs)
/// before anything else, naming them all.
fn null_values(changes: &[Change], incremental: bool) -> Result<(), Refusal> {
    let nulls: Vec<&str> = changes
        .iter()
        .filter(|(_, op, value)| value.is_none() && !(incremental && *op == Operation::Delete))
        .map(|(name, ..)| name.as_str())
        .collect();
    if nulls.is_empty() {
        Ok(())
    } else {
        Err(refusal(
            ErrorCode::InvalidRequest,
            format!("Null value not supported for : {}", nulls.join(", ")),
        ))
    }
}

/// The set a resource would hold, checked as Kafka checks it: configs
/// that are not dynamic first (INVALID_REQUEST, Kafka's message naming
/// them all), then names kaas does not know (INVALID_CONFIG; Kafka stores
/// those), then each value (INVALID_REQUEST with Kafka's message: its
/// broker validation reports a bad value so, KAFKA-13609).
fn check_all(configs: &BTreeMap<String, String>) -> Result<(), Refusal> {
    let fixed: Vec<&str> = configs
        .keys()
        .map(String::as_str)
        .filter(|name| is_known_static(name))
        .collect();
    if !fixed.is_empty() {
        return Err(refusal(
            ErrorCode::InvalidRequest,
            format!(
                "Cannot update these configs dynamically: Set({})",
                fixed.join(", ")
            ),
        ));
    }
    for (name, value) in configs {
        let def = find(name).ok_or_else(|| {
            refusal(
                ErrorCode::InvalidConfig,
                format!("Unknown broker config name: {name}"),
            )
        })?;
        check_value(def, value).map_err(|m| refusal(ErrorCode::InvalidRequest, m))?;
    }
    Ok(())
}

/// One value of a dynamic config, by its type and minimum; the error is
/// Kafka's message.
pub fn check_value(def: &DynamicDef, value: &str) -> Result<(), String> {
    let v = value.trim();
    let (number, type_name) = match def.kind {
        ConfigType::Int => (v.parse::<i32>().ok().map(f64::from), "INT"),
        ConfigType::Long => (v.parse::<i64>().ok().map(|n| n as f64), "LONG"),
        _ => (v.parse::<f64>().ok().filter(|d| d.is_finite()), "DOUBLE"),
    };
    let Some(number) = number else {
        return Err(format!(
            "Invalid value {value} for configuration {}: Not a number of type {type_name}",
            def.name
        ));
    };
    match def.min {
        Some(min) if number < min as f64 => Err(format!(
            "Invalid value {value} for configuration {}: Value must be at least {min}",
            def.name
        )),
        _ => Ok(()),
    }
}

fn refusal(code: ErrorCode, message: String) -> Refusal {
    Refusal { code, message }
}

// ------------------------------------------------------------- the layers

/// Where a broker config's value comes from (DescribeConfigs
/// `ConfigSource`), in precedence order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Set dynamically for this broker.
    DynamicBroker = 2,
    /// Set dynamically as the cluster-wide default.
    DynamicDefault = 3,
    /// This broker's start-up setting (a `kaas serve` flag).
    StaticBroker = 4,
    /// The built-in default.
    Default = 5,
}

/// A broker's config values, layer by layer.
#[derive(Debug, Clone, Copy)]
pub struct Layers<'a> {
    pub per_broker: &'a BTreeMap<String, String>,
    pub cluster_default: &'a BTreeMap<String, String>,
    pub static_broker: &'a BTreeMap<String, String>,
    pub default: &'a BTreeMap<String, String>,
}

impl<'a> Layers<'a> {
    /// The layers, highest precedence first.
    fn in_order(&self) -> [(&'a BTreeMap<String, String>, Source); 4] {
        [
            (self.per_broker, Source::DynamicBroker),
            (self.cluster_default, Source::DynamicDefault),
            (self.static_broker, Source::StaticBroker),
            (self.default, Source::Default),
        ]
    }

    /// Config `name`'s own value: the highest layer that sets that very
    /// name (precedence: dynamic per broker, dynamic default, static,
    /// built-in), or none.
    pub fn value(&self, name: &str) -> Option<(&'a str, Source)> {
        self.in_order()
            .into_iter()
            .find_map(|(layer, source)| layer.get(name).map(|v| (v.as_str(), source)))
    }

    /// A numeric config's own value, if some layer sets it to a number.
    pub fn number(&self, name: &str) -> Option<i64> {
        let (v, _) = self.value(name)?;
        let v = v.trim();
        v.parse::<i64>().ok().or_else(|| {
            v.parse::<f64>()
                .ok()
                .filter(|d| d.is_finite())
                .map(|d| d as i64)
        })
    }

    /// A time that Kafka takes in ms or coarser units: the first of
    /// `units` (name, ms per unit) some layer sets wins, whatever layer
    /// sets a coarser one (as in Kafka, where `log.retention.ms` in any
    /// layer outranks `log.retention.hours` in any).
    fn millis(&self, units: &[(&str, i64)]) -> Option<i64> {
        units.iter().find_map(|(name, factor)| {
            self.number(name)
                .map(|n| if n < 0 { -1 } else { n.saturating_mul(*factor) })
        })
    }

    /// The effective `log.retention.ms`.
    pub fn retention_ms(&self) -> Option<i64> {
        self.millis(&[
            (LOG_RETENTION_MS, 1),
            (LOG_RETENTION_MINUTES, MS_PER_MINUTE),
            (LOG_RETENTION_HOURS, MS_PER_HOUR),
        ])
    }

    /// The effective `log.roll.ms`.
    pub fn roll_ms(&self) -> Option<i64> {
        self.millis(&[(LOG_ROLL_MS, 1), (LOG_ROLL_HOURS, MS_PER_HOUR)])
    }

    /// The effective `log.roll.jitter.ms`.
    pub fn roll_jitter_ms(&self) -> Option<i64> {
        self.millis(&[
            (LOG_ROLL_JITTER_MS, 1),
            (LOG_ROLL_JITTER_HOURS, MS_PER_HOUR),
        ])
    }

    /// DescribeConfigs's synonyms of broker config `name`, as Kafka lists
    /// them: layer by layer in precedence order, in each the synonyms it
    /// sets in preference order, starting from the first entry for `name`
    /// itself (so `log.retention.hours` is not listed as a synonym of
    /// `log.retention.ms` unless some layer sets `log.retention.ms`).
    pub fn synonyms(&self, name: &str) -> Vec<(String, String, Source)> {
        let names = synonyms(name);
        let mut all = Vec::new();
        for (layer, source) in self.in_order() {
            for n in names {
                if let Some(v) = layer.get(*n) {
                    all.push(((*n).to_string(), v.clone(), source));
                }
            }
        }
        match all.iter().position(|(n, ..)| n == name) {
            Some(first) => all.split_off(first),
            None => Vec::new(),
        }
    }

    /// The value topic config `topic_name` has where a topic sets none:
    /// its broker synonym's effective value, else Kafka's default.
    pub fn topic_default(&self, topic_name: &str) -> String {
        let effective = match topic_name {
            topic_config::RETENTION_MS => self.retention_ms().map(|n| n.to_string()),
            topic_config::SEGMENT_MS => self.roll_ms().map(|n| n.to_string()),
            topic_config::SEGMENT_JITTER_MS => self.roll_jitter_ms().map(|n| n.to_string()),
            _ => topic_synonym(topic_name)
                .and_then(|b| self.value(b))
                .map(|(v, _)| v.to_string()),
        };
        effective
            .or_else(|| topic_config::find(topic_name).map(|d| d.default.to_string()))
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broker_resource_names_this_broker_or_the_cluster_default() {
        use BrokerResource::*;
        for by in [ResourceUse::Alter, ResourceUse::Describe] {
            assert_eq!(broker_resource("", 3, by), Ok(ClusterDefault));
            assert_eq!(broker_resource("3", 3, by), Ok(ThisBroker));
            for other in ["4", "x", " 3"] {
                let refused = broker_resource(other, 3, by).unwrap_err();
                assert_eq!(refused.code, ErrorCode::InvalidRequest, "{other}");
            }
        }
        let message = |name, by| broker_resource(name, 3, by).unwrap_err().message;
        assert_eq!(
            message("4", ResourceUse::Alter),
            "Unexpected broker id, expected 3, but received 4"
        );
        assert_eq!(
            message("4", ResourceUse::Describe),
            "Unexpected broker id, expected 3 or empty string, but received 4"
        );
        assert_eq!(
            message("x", ResourceUse::Alter),
            "Node id must be an integer, but it is: x"
        );
        assert_eq!(
            message("x", ResourceUse::Describe),
            "Broker id must be an integer, but it is: x"
        );
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect()
    }

    fn set(name: &str, value: &str) -> Change {
        (name.to_string(), Operation::Set, Some(value.to_string()))
    }

    #[test]
    fn only_the_log_defaults_kaas_acts_on_are_dynamic() {
        for name in [
            "log.retention.ms",
            "log.retention.bytes",
            "log.segment.bytes",
            "log.roll.ms",
            "log.roll.jitter.ms",
            "message.max.bytes",
            "log.cleaner.backoff.ms",
            "log.cleaner.dedupe.buffer.size",
            "log.cleaner.io.max.bytes.per.second",
        ] {
            assert!(is_dynamic(name), "{name}");
            assert!(!is_known_static(name), "{name}");
        }
        for name in [
            "broker.id",
            "num.partitions",
            "log.dirs",
            "log.cleanup.policy",
            "log.index.interval.bytes",
            // Kafka's dynamic set has only the ms spellings of the times.
            "log.retention.hours",
            "log.retention.minutes",
            "log.roll.hours",
            "log.roll.jitter.hours",
        ] {
            assert!(!is_dynamic(name), "{name}");
            assert!(is_known_static(name), "{name}");
        }
        assert!(!is_dynamic("no.such.config") && !is_known_static("no.such.config"));
        let names: Vec<&str> = DYNAMIC_BROKER_CONFIGS.iter().map(|d| d.name).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(names, sorted, "sorted by name, each once");
    }

    #[test]
    fn a_static_config_is_refused_naming_every_one_as_kafka_does() {
        let e = incremental(
            &BTreeMap::new(),
            &[
                set("log.retention.ms", "1000"),
                set("num.partitions", "3"),
                set("broker.id", "7"),
            ],
        )
        .unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidRequest);
        assert_eq!(
            e.message,
            "Cannot update these configs dynamically: Set(broker.id, num.partitions)"
        );
        let e = replacing(&[set("log.cleanup.policy", "compact")]).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidRequest);
    }

    #[test]
    fn unknown_names_are_invalid_config_and_bad_values_invalid_request() {
        let e = incremental(&BTreeMap::new(), &[set("no.such.config", "1")]).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidConfig);
        for (name, value, says) in [
            ("log.retention.ms", "soon", "Not a number of type LONG"),
            ("log.segment.bytes", "10", "Value must be at least 14"),
            ("log.roll.ms", "0", "Value must be at least 1"),
            (
                "message.max.bytes",
                "4294967296",
                "Not a number of type INT",
            ),
            (
                "log.cleaner.io.max.bytes.per.second",
                "fast",
                "Not a number of type DOUBLE",
            ),
        ] {
            let e = replacing(&[set(name, value)]).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidRequest, "{name}={value}");
            assert!(e.message.contains(says), "{}", e.message);
        }
        assert!(replacing(&[set("log.cleaner.io.max.bytes.per.second", "1.5E7")]).is_ok());
    }

    #[test]
    fn incremental_changes_only_the_named_configs_and_delete_needs_no_value() {
        let current = map(&[("log.retention.ms", "1000"), ("log.segment.bytes", "2000")]);
        let next = incremental(
            &current,
            &[
                set("log.retention.ms", "5000"),
                ("log.segment.bytes".into(), Operation::Delete, None),
                ("broker.id".into(), Operation::Delete, None),
            ],
        )
        .unwrap();
        assert_eq!(next, map(&[("log.retention.ms", "5000")]));
    }

    #[test]
    fn append_and_subtract_are_refused_on_broker_configs() {
        for op in [Operation::Append, Operation::Subtract] {
            let e = incremental(
                &BTreeMap::new(),
                &[("log.retention.ms".into(), op, Some("1".into()))],
            )
            .unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidConfig);
        }
    }

    #[test]
    fn null_values_and_duplicate_names_are_invalid_requests() {
        let e = incremental(
            &BTreeMap::new(),
            &[("log.retention.ms".into(), Operation::Set, None)],
        )
        .unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidRequest);
        let e = replacing(&[("log.retention.ms".into(), Operation::Set, None)]).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidRequest);
        let e =
            replacing(&[set("log.retention.ms", "1"), set("log.retention.ms", "2")]).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidRequest);
    }

    #[test]
    fn replacing_sets_exactly_the_configs_named() {
        assert_eq!(
            replacing(&[set("log.roll.ms", "60000")]).unwrap(),
            map(&[("log.roll.ms", "60000")])
        );
        assert_eq!(replacing(&[]).unwrap(), BTreeMap::new());
    }

    #[test]
    fn per_broker_beats_the_cluster_default_beats_static_beats_built_in() {
        let per_broker = map(&[("log.segment.bytes", "100")]);
        let cluster = map(&[("log.segment.bytes", "200"), ("message.max.bytes", "300")]);
        let fixed = map(&[("log.segment.bytes", "400"), ("log.retention.bytes", "500")]);
        let default = map(&[
            ("log.segment.bytes", "1073741824"),
            ("log.retention.bytes", "-1"),
            ("message.max.bytes", "1048588"),
            ("log.cleaner.backoff.ms", "15000"),
        ]);
        let layers = Layers {
            per_broker: &per_broker,
            cluster_default: &cluster,
            static_broker: &fixed,
            default: &default,
        };
        assert_eq!(
            layers.value("log.segment.bytes"),
            Some(("100", Source::DynamicBroker))
        );
        assert_eq!(
            layers.value("message.max.bytes"),
            Some(("300", Source::DynamicDefault))
        );
        assert_eq!(
            layers.value("log.retention.bytes"),
            Some(("500", Source::StaticBroker))
        );
        assert_eq!(
            layers.value("log.cleaner.backoff.ms"),
            Some(("15000", Source::Default))
        );
        assert_eq!(layers.value("log.retention.ms"), None);
        assert_eq!(
            layers.synonyms("log.segment.bytes"),
            vec![
                (
                    "log.segment.bytes".into(),
                    "100".into(),
                    Source::DynamicBroker
                ),
                (
                    "log.segment.bytes".into(),
                    "200".into(),
                    Source::DynamicDefault
                ),
                (
                    "log.segment.bytes".into(),
                    "400".into(),
                    Source::StaticBroker
                ),
                (
                    "log.segment.bytes".into(),
                    "1073741824".into(),
                    Source::Default
                ),
            ]
        );
    }

    #[test]
    fn the_finest_unit_set_anywhere_wins_and_synonyms_start_at_the_name_itself() {
        let empty = BTreeMap::new();
        let default = map(&[("log.retention.hours", "168"), ("log.roll.hours", "168")]);
        let cluster = map(&[("log.retention.minutes", "30")]);
        let layers = Layers {
            per_broker: &empty,
            cluster_default: &cluster,
            static_broker: &empty,
            default: &default,
        };
        assert_eq!(layers.retention_ms(), Some(30 * 60_000));
        assert_eq!(layers.roll_ms(), Some(168 * 3_600_000));
        assert_eq!(layers.topic_default("retention.ms"), "1800000");
        // Kafka lists log.retention.ms's synonyms from log.retention.ms on:
        // none while no layer sets it.
        assert_eq!(layers.synonyms("log.retention.ms"), vec![]);
        assert_eq!(
            layers.synonyms("log.retention.minutes"),
            vec![
                (
                    "log.retention.minutes".into(),
                    "30".into(),
                    Source::DynamicDefault
                ),
                ("log.retention.hours".into(), "168".into(), Source::Default),
            ]
        );
        let fixed = map(&[("log.retention.ms", "1000")]);
        let layers = Layers {
            static_broker: &fixed,
            ..layers
        };
        assert_eq!(
            layers.retention_ms(),
            Some(1000),
            "a static log.retention.ms outranks a dynamic log.retention.minutes, as in Kafka"
        );
        assert_eq!(
            layers.synonyms("log.retention.ms"),
            vec![
                (
                    "log.retention.ms".into(),
                    "1000".into(),
                    Source::StaticBroker
                ),
                ("log.retention.hours".into(), "168".into(), Source::Default),
            ]
        );
    }

    #[test]
    fn a_topic_config_default_is_its_broker_synonyms_effective_value() {
        let empty = BTreeMap::new();
        let per_broker = map(&[("message.max.bytes", "2000"), ("log.roll.hours", "2")]);
        let layers = Layers {
            per_broker: &per_broker,
            cluster_default: &empty,
            static_broker: &empty,
            default: &empty,
        };
        assert_eq!(layers.topic_default("max.message.bytes"), "2000");
        assert_eq!(layers.topic_default("segment.ms"), "7200000");
        assert_eq!(
            layers.topic_default("cleanup.policy"),
            "delete",
            "Kafka's default"
        );
        assert_eq!(topic_synonym("retention.ms"), Some("log.retention.ms"));
        assert_eq!(topic_synonym("segment.bytes"), Some("log.segment.bytes"));
        assert_eq!(topic_synonym("flush.ms"), None);
    }
}
