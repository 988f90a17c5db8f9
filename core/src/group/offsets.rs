//! Committed offsets: what is stored per group, and the rules for accepting
//! and expiring them.
//!
//! Every group has two layers:
//! - `offsets`: committed offsets, what OffsetFetch returns;
//! - `pending_txn`: offsets written by a transaction (TxnOffsetCommit,
//!   KIP-98/447), keyed by producer id, invisible until the transaction
//!   commits (then they move into `offsets`) or aborts (then they vanish).
//!   OffsetFetch with `require_stable` answers UNSTABLE_OFFSET_COMMIT for a
//!   partition that has one.

use super::member::StableGeneration;
use super::state::GroupState;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// One committed offset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OffsetEntry {
    pub offset: i64,
    /// The leader epoch of the record at `offset - 1` as the consumer saw
    /// it (OffsetCommit v6+), -1 if unknown.
    #[serde(default = "no_leader_epoch")]
    pub leader_epoch: i32,
    /// Client metadata; a null from the client is stored as empty, as Kafka
    /// does.
    #[serde(default)]
    pub metadata: String,
    pub commit_timestamp_ms: i64,
    /// OffsetCommit v2-v4 may set a per-commit retention; later versions
    /// leave expiry to the broker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expire_timestamp_ms: Option<i64>,
}

fn no_leader_epoch() -> i32 {
    -1
}

/// Offsets by topic, then partition.
pub type TopicOffsets = BTreeMap<String, BTreeMap<i32, OffsetEntry>>;

/// Offsets a transaction committed to the group, waiting for its outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingTxnOffsets {
    pub producer_epoch: i16,
    pub offsets: TopicOffsets,
}

/// The durable state of one group in its slot file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupRecord {
    /// The group's protocol type; absent for groups that only store offsets
    /// (simple consumers, admin tools).
    #[serde(default)]
    pub protocol_type: Option<String>,
    /// The last generation written; a restarted coordinator continues from
    /// it so generations keep increasing.
    #[serde(default)]
    pub generation: i32,
    /// When the group became empty, if it was empty when last written.
    #[serde(default)]
    pub empty_since_ms: Option<i64>,
    #[serde(default)]
    pub offsets: TopicOffsets,
    /// Producer id -> that transaction's offsets.
    #[serde(default)]
    pub pending_txn: BTreeMap<i64, PendingTxnOffsets>,
    /// The members of the last generation whose assignment was stored,
    /// while the group has members; absent once it is Empty (and in files
    /// written before membership was kept, which therefore load Empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stable: Option<StableGeneration>,
}

impl GroupRecord {
    pub fn offset(&self, topic: &str, partition: i32) -> Option<&OffsetEntry> {
        self.offsets.get(topic).and_then(|p| p.get(&partition))
    }

    /// Whether an open transaction has written an offset for the partition.
    pub fn has_pending_txn_offset(&self, topic: &str, partition: i32) -> bool {
        self.pending_txn.values().any(|p| {
            p.offsets
                .get(topic)
                .is_some_and(|ps| ps.contains_key(&partition))
        })
    }

    /// Nothing worth keeping: no offsets, no pending ones, no members.
    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty() && self.pending_txn.is_empty() && self.stable.is_none()
    }

    pub fn set_offset(&mut self, topic: &str, partition: i32, entry: OffsetEntry) {
        self.offsets
            .entry(topic.to_string())
            .or_default()
            .insert(partition, entry);
    }

    pub fn remove_offset(&mut self, topic: &str, partition: i32) -> Option<OffsetEntry> {
        let parts = self.offsets.get_mut(topic)?;
        let removed = parts.remove(&partition);
        if parts.is_empty() {
            self.offsets.remove(topic);
        }
        removed
    }
}

/// OffsetCommit metadata longer than `offset.metadata.max.bytes` is refused
/// with OFFSET_METADATA_TOO_LARGE (measured in characters, as Kafka's Java
/// string length does for ordinary text).
pub fn offset_metadata_too_large(metadata: Option<&str>, max: usize) -> bool {
    metadata.is_some_and(|m| m.chars().count() > max)
}

/// OffsetCommit v2-v4 `retention_time_ms`: -1 means the broker's retention;
/// anything else pins this commit's expiry to `now + retention`.
pub fn expire_timestamp_for(retention_time_ms: i64, now_ms: i64) -> Option<i64> {
    (retention_time_ms != -1).then(|| now_ms.saturating_add(retention_time_ms))
}

/// From when an offset's retention period is counted (KIP-211).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExpiryBase {
    /// The group has been empty since this time: all its offsets age from
    /// then, however recent their commits.
    EmptySince(i64),
    /// Offsets age from their own commit, except those of these topics
    /// (which a stable consumer group still consumes).
    CommitTime { except_topics: BTreeSet<String> },
}

/// When a group's offsets may expire at all:
/// - a group with a protocol type that is Empty: from when it became empty;
/// - a Stable `consumer` group with known subscriptions: offsets of topics
///   it no longer consumes, from their commit (KIP-496);
/// - a group without protocol type (offsets only): from each commit;
/// - otherwise never (members are active and may still need them).
pub fn offset_expiry_base(
    protocol_type: Option<&str>,
    state: GroupState,
    state_since_ms: i64,
    subscribed_topics: Option<&BTreeSet<String>>,
) -> Option<ExpiryBase> {
    match protocol_type {
        None => Some(ExpiryBase::CommitTime {
            except_topics: BTreeSet::new(),
        }),
        Some(_) if state == GroupState::Empty => Some(ExpiryBase::EmptySince(state_since_ms)),
        Some(t) if t == super::CONSUMER_PROTOCOL_TYPE && state == GroupState::Stable => {
            subscribed_topics.map(|topics| ExpiryBase::CommitTime {
                except_topics: topics.clone(),
            })
        }
        Some(_) => None,
    }
}

/// Whether one offset has outlived its retention. A per-commit expiry
/// (OffsetCommit v2-v4) overrides the broker's retention.
pub fn offset_expired(entry: &OffsetEntry, base_ms: i64, now_ms: i64, retention_ms: i64) -> bool {
    match entry.expire_timestamp_ms {
        Some(at) => now_ms >= at,
        None => now_ms.saturating_sub(base_ms) >= retention_ms,
    }
}

/// The offsets of `record` that have expired at `now_ms` under `base`.
/// Partitions with a pending transactional offset are kept: the
/// transaction's outcome is still to be applied to them.
pub fn expired_offsets(
    record: &GroupRecord,
    base: &ExpiryBase,
    now_ms: i64,
    retention_ms: i64,
) -> Vec<(String, i32, OffsetEntry)> {
    let mut out = Vec::new();
    for (topic, parts) in &record.offsets {
        let empty_since = match base {
            ExpiryBase::EmptySince(t) => Some(*t),
            ExpiryBase::CommitTime { except_topics } if except_topics.contains(topic) => continue,
            ExpiryBase::CommitTime { .. } => None,
        };
        for (partition, entry) in parts {
            if record.has_pending_txn_offset(topic, *partition) {
                continue;
            }
            let base_ms = empty_since.unwrap_or(entry.commit_timestamp_ms);
            if offset_expired(entry, base_ms, now_ms, retention_ms) {
                out.push((topic.clone(), *partition, entry.clone()));
            }
        }
    }
    out
}
