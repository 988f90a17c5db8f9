//! AlterConfigs and IncrementalAlterConfigs on a topic: what a request makes
//! of the configs the topic sets, by Kafka's rules.
//!
//! Pure: the broker reads the topic's newest metadata, calls one of these,
//! and publishes the result as the topic's next version (or, with
//! `validate_only`, stops there). A refusal names the Kafka error and the
//! message for the resource's answer; nothing is half-applied, since the
//! whole resource is answered with one error code.

use super::{find, validate, ConfigType};
use crate::protocol::ErrorCode;
use std::collections::{BTreeMap, BTreeSet};

/// An IncrementalAlterConfigs operation (KIP-339 `ConfigOperation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// Set the value.
    Set,
    /// Remove the topic's value: the default applies again.
    Delete,
    /// Add items to a list config (those not in it yet).
    Append,
    /// Remove items from a list config.
    Subtract,
}

impl Operation {
    /// The operation of a wire code, if it is one.
    pub fn from_code(code: i8) -> Option<Self> {
        match code {
            0 => Some(Self::Set),
            1 => Some(Self::Delete),
            2 => Some(Self::Append),
            3 => Some(Self::Subtract),
            _ => None,
        }
    }
}

/// Why a resource's change is refused: its answer's error and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: ErrorCode,
    pub message: String,
}

impl Refusal {
    fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Refusal {
            code,
            message: message.into(),
        }
    }
}

/// One config of a request: (name, operation, value). AlterConfigs's
/// entries are all `Set`.
pub type Change = (String, Operation, Option<String>);

/// Two entries for one name in one resource: Kafka refuses the resource
/// (INVALID_REQUEST) rather than picking one.
pub fn duplicate_names(changes: &[Change]) -> Result<(), Refusal> {
    let mut seen = BTreeSet::new();
    match changes
        .iter()
        .find(|(name, ..)| !seen.insert(name.as_str()))
    {
        Some((name, ..)) => Err(Refusal::new(
            ErrorCode::InvalidRequest,
            format!("Error due to duplicate config keys: {name}"),
        )),
        None => Ok(()),
    }
}

/// IncrementalAlterConfigs: applies each change to the topic's `current`
/// configs and checks the result. `default` is a config's value where the
/// topic sets none (what APPEND and SUBTRACT start from, as in Kafka).
pub fn incremental(
    current: &BTreeMap<String, String>,
    changes: &[Change],
    default: &dyn Fn(&str) -> String,
) -> Result<BTreeMap<String, String>, Refusal> {
    duplicate_names(changes)?;
    let mut next = current.clone();
    for (name, op, value) in changes {
        let def = find(name).ok_or_else(|| {
            Refusal::new(
                ErrorCode::InvalidConfig,
                format!("Unknown topic config name: {name}"),
            )
        })?;
        match op {
            Operation::Set => {
                let value = value.as_deref().ok_or_else(|| null_value(name))?;
                next.insert(name.clone(), value.trim().to_string());
            }
            Operation::Delete => {
                next.remove(name);
            }
            Operation::Append | Operation::Subtract => {
                if def.kind != ConfigType::List {
                    let verb = if *op == Operation::Append {
                        "append"
                    } else {
                        "subtract"
                    };
                    return Err(Refusal::new(
                        ErrorCode::InvalidConfig,
                        format!("Config value {verb} is not allowed for config key: {name}"),
                    ));
                }
                let value = value.as_deref().ok_or_else(|| null_value(name))?;
                let base = next.get(name).cloned().unwrap_or_else(|| default(name));
                let mut items = list_items(&base);
                let given = list_items(value);
                if *op == Operation::Append {
                    for item in given {
                        if !items.contains(&item) {
                            items.push(item);
                        }
                    }
                } else {
                    items.retain(|item| !given.contains(item));
                }
                next.insert(name.clone(), items.join(","));
            }
        }
    }
    check_all(&next)?;
    Ok(next)
}

/// AlterConfigs (the original API): the resource's configs replace the
/// topic's whole set; a config not named returns to its default.
pub fn replacing(changes: &[Change]) -> Result<BTreeMap<String, String>, Refusal> {
    duplicate_names(changes)?;
    let mut next = BTreeMap::new();
    for (name, _, value) in changes {
        if find(name).is_none() {
            return Err(Refusal::new(
                ErrorCode::InvalidConfig,
                format!("Unknown topic config name: {name}"),
            ));
        }
        let value = value.as_deref().ok_or_else(|| null_value(name))?;
        next.insert(name.clone(), value.trim().to_string());
    }
    check_all(&next)?;
    Ok(next)
}

/// Every value the topic would set must be valid (INVALID_CONFIG).
fn check_all(configs: &BTreeMap<String, String>) -> Result<(), Refusal> {
    for (name, value) in configs {
        validate(name, Some(value)).map_err(|m| Refusal::new(ErrorCode::InvalidConfig, m))?;
    }
    Ok(())
}

fn null_value(name: &str) -> Refusal {
    Refusal::new(
        ErrorCode::InvalidRequest,
        format!("Null value not supported for : {name}"),
    )
}

fn list_items(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topic_config::{CLEANUP_POLICY, RETENTION_MS, SEGMENT_BYTES};

    fn configs(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect()
    }

    fn change(name: &str, op: Operation, value: Option<&str>) -> Change {
        (name.to_string(), op, value.map(str::to_string))
    }

    fn defaults(name: &str) -> String {
        match name {
            CLEANUP_POLICY => "delete".into(),
            _ => String::new(),
        }
    }

    #[test]
    fn incremental_set_and_delete_change_only_the_named_configs() {
        let current = configs(&[(RETENTION_MS, "1000"), (SEGMENT_BYTES, "1048576")]);
        let next = incremental(
            &current,
            &[
                change(RETENTION_MS, Operation::Set, Some("2000")),
                change(SEGMENT_BYTES, Operation::Delete, None),
            ],
            &defaults,
        )
        .unwrap();
        assert_eq!(next, configs(&[(RETENTION_MS, "2000")]));
    }

    #[test]
    fn incremental_append_starts_from_the_default_and_adds_each_item_once() {
        let next = incremental(
            &BTreeMap::new(),
            &[change(
                CLEANUP_POLICY,
                Operation::Append,
                Some("compact,delete"),
            )],
            &defaults,
        )
        .unwrap();
        assert_eq!(next[CLEANUP_POLICY], "delete,compact");
        let next = incremental(
            &next,
            &[change(CLEANUP_POLICY, Operation::Subtract, Some("delete"))],
            &defaults,
        )
        .unwrap();
        assert_eq!(next[CLEANUP_POLICY], "compact");
    }

    #[test]
    fn incremental_append_or_subtract_on_a_non_list_config_is_invalid_config() {
        for op in [Operation::Append, Operation::Subtract] {
            let e = incremental(
                &BTreeMap::new(),
                &[change(RETENTION_MS, op, Some("1"))],
                &defaults,
            )
            .unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidConfig, "{op:?}");
        }
    }

    #[test]
    fn duplicate_config_names_in_one_resource_are_an_invalid_request() {
        let e = incremental(
            &BTreeMap::new(),
            &[
                change(RETENTION_MS, Operation::Set, Some("1")),
                change(RETENTION_MS, Operation::Delete, None),
            ],
            &defaults,
        )
        .unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidRequest);
        let e = replacing(&[
            change(RETENTION_MS, Operation::Set, Some("1")),
            change(RETENTION_MS, Operation::Set, Some("2")),
        ])
        .unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidRequest);
    }

    #[test]
    fn unknown_names_and_invalid_values_are_invalid_config_and_change_nothing() {
        let current = configs(&[(RETENTION_MS, "1000")]);
        for bad in [
            change("no.such.config", Operation::Set, Some("1")),
            change(RETENTION_MS, Operation::Set, Some("soon")),
            change(CLEANUP_POLICY, Operation::Set, Some("sometimes")),
            change(SEGMENT_BYTES, Operation::Set, Some("-5")),
        ] {
            let e = incremental(&current, std::slice::from_ref(&bad), &defaults).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidConfig, "{bad:?}");
            let e = replacing(std::slice::from_ref(&bad)).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidConfig, "{bad:?}");
        }
    }

    #[test]
    fn a_set_without_a_value_is_an_invalid_request() {
        let e = incremental(
            &BTreeMap::new(),
            &[change(RETENTION_MS, Operation::Set, None)],
            &defaults,
        )
        .unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidRequest);
    }

    #[test]
    fn replacing_returns_every_unnamed_config_to_its_default() {
        let next = replacing(&[change(SEGMENT_BYTES, Operation::Set, Some("1048576"))]).unwrap();
        assert_eq!(next, configs(&[(SEGMENT_BYTES, "1048576")]));
        assert_eq!(replacing(&[]).unwrap(), BTreeMap::new());
    }
}
