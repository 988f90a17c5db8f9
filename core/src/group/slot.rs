//! The durable state of one coordinator slot and the operations on it.
//!
//! A slot file (`crate::layout::group_slot_file`) holds every group of
//! the slot that has offsets or members. It is replaced whole (tmp + fsync + rename) by
//! its single writer, the slot's coordinator. Changes are expressed as
//! [`SlotOp`]s so many of them (say, commits from many consumers) can be
//! applied to one copy and cost one write; applying the same op twice is
//! harmless.

use super::member::StableGeneration;
use super::offsets::{GroupRecord, OffsetEntry, PendingTxnOffsets};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// Version of the slot file layout.
pub const SLOT_FILE_FORMAT: u32 = 1;

/// Group metadata written along with offsets (what a restart needs to
/// apply retention correctly and keep generations increasing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMeta {
    pub protocol_type: Option<String>,
    pub generation: i32,
    pub empty_since_ms: Option<i64>,
}

/// One change to a slot's durable state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotOp {
    /// OffsetCommit: store these offsets (creating the group's record).
    Commit {
        group: String,
        meta: GroupMeta,
        offsets: Vec<(String, i32, OffsetEntry)>,
    },
    /// The group's metadata changed; written only if the group has a record.
    /// A group that became Empty loses its stored members with it.
    Meta { group: String, meta: GroupMeta },
    /// The leader's SyncGroup completed a generation (or a static member
    /// replaced itself in one): store its members, creating the record, so
    /// a restart brings the group back Stable.
    StoreStable {
        group: String,
        meta: GroupMeta,
        stable: StableGeneration,
    },
    /// Retention: remove these offsets if they are still exactly what
    /// expired (a newer commit that raced with the decision survives).
    Expire {
        group: String,
        offsets: Vec<(String, i32, OffsetEntry)>,
    },
    /// OffsetDelete.
    DeleteOffsets {
        group: String,
        partitions: Vec<(String, i32)>,
    },
    /// DeleteGroups.
    DeleteGroup { group: String },
    /// TxnOffsetCommit: stage offsets under the producer's transaction.
    StageTxnOffsets {
        group: String,
        meta: GroupMeta,
        producer_id: i64,
        producer_epoch: i16,
        offsets: Vec<(String, i32, OffsetEntry)>,
    },
    /// The transaction of `producer_id` ended: on commit its staged offsets
    /// become the committed ones, on abort they are dropped.
    CompleteTxn {
        group: String,
        producer_id: i64,
        commit: bool,
    },
}

impl SlotOp {
    pub fn group(&self) -> &str {
        match self {
            SlotOp::Commit { group, .. }
            | SlotOp::Meta { group, .. }
            | SlotOp::StoreStable { group, .. }
            | SlotOp::Expire { group, .. }
            | SlotOp::DeleteOffsets { group, .. }
            | SlotOp::DeleteGroup { group }
            | SlotOp::StageTxnOffsets { group, .. }
            | SlotOp::CompleteTxn { group, .. } => group,
        }
    }
}

/// The content of one slot file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotState {
    pub format: u32,
    pub slot: u32,
    /// The owner's coordinator epoch when it wrote the file: a file from an
    /// older owner is recognisable once slots can move.
    pub coordinator_epoch: i32,
    /// Incremented by every write, so two copies can be ordered.
    pub version: u64,
    pub groups: BTreeMap<String, GroupRecord>,
}

/// Why a slot file could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotFileError {
    Parse(String),
    UnknownFormat(u32),
    WrongSlot { expected: u32, found: u32 },
}

impl fmt::Display for SlotFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SlotFileError::Parse(e) => write!(f, "not a group slot file: {e}"),
            SlotFileError::UnknownFormat(v) => write!(f, "unknown group slot file format {v}"),
            SlotFileError::WrongSlot { expected, found } => {
                write!(f, "slot file for slot {expected} says it is slot {found}")
            }
        }
    }
}

impl std::error::Error for SlotFileError {}

fn apply_meta(record: &mut GroupRecord, meta: &GroupMeta) {
    record.protocol_type = meta.protocol_type.clone();
    record.generation = meta.generation;
    record.empty_since_ms = meta.empty_since_ms;
    if meta.empty_since_ms.is_some() {
        // An Empty group has no members to bring back.
        record.stable = None;
    }
}

impl SlotState {
    pub fn new(slot: u32, coordinator_epoch: i32) -> SlotState {
        SlotState {
            format: SLOT_FILE_FORMAT,
            slot,
            coordinator_epoch,
            version: 0,
            groups: BTreeMap::new(),
        }
    }

    /// Applies one op; returns whether anything changed.
    pub fn apply(&mut self, op: &SlotOp) -> bool {
        let before = self.groups.get(op.group()).cloned();
        match op {
            SlotOp::Commit {
                group,
                meta,
                offsets,
            } => {
                let record = self.groups.entry(group.clone()).or_default();
                apply_meta(record, meta);
                for (topic, partition, entry) in offsets {
                    record.set_offset(topic, *partition, entry.clone());
                }
            }
            SlotOp::Meta { group, meta } => {
                if let Some(record) = self.groups.get_mut(group) {
                    apply_meta(record, meta);
                }
                self.drop_if_empty(group);
            }
            SlotOp::StoreStable {
                group,
                meta,
                stable,
            } => {
                let record = self.groups.entry(group.clone()).or_default();
                apply_meta(record, meta);
                record.stable = Some(stable.clone());
            }
            SlotOp::Expire { group, offsets } => {
                if let Some(record) = self.groups.get_mut(group) {
                    for (topic, partition, seen) in offsets {
                        if record.offset(topic, *partition) == Some(seen) {
                            record.remove_offset(topic, *partition);
                        }
                    }
                }
                self.drop_if_empty(group);
            }
            SlotOp::DeleteOffsets { group, partitions } => {
                if let Some(record) = self.groups.get_mut(group) {
                    for (topic, partition) in partitions {
                        record.remove_offset(topic, *partition);
                    }
                }
                self.drop_if_empty(group);
            }
            SlotOp::DeleteGroup { group } => {
                self.groups.remove(group);
            }
            SlotOp::StageTxnOffsets {
                group,
                meta,
                producer_id,
                producer_epoch,
                offsets,
            } => {
                let record = self.groups.entry(group.clone()).or_default();
                apply_meta(record, meta);
                let pending =
                    record
                        .pending_txn
                        .entry(*producer_id)
                        .or_insert_with(|| PendingTxnOffsets {
                            producer_epoch: *producer_epoch,
                            offsets: BTreeMap::new(),
                        });
                pending.producer_epoch = *producer_epoch;
                for (topic, partition, entry) in offsets {
                    pending
                        .offsets
                        .entry(topic.clone())
                        .or_default()
                        .insert(*partition, entry.clone());
                }
            }
            SlotOp::CompleteTxn {
                group,
                producer_id,
                commit,
            } => {
                if let Some(record) = self.groups.get_mut(group) {
                    if let Some(pending) = record.pending_txn.remove(producer_id) {
                        if *commit {
                            for (topic, parts) in pending.offsets {
                                for (partition, entry) in parts {
                                    record.set_offset(&topic, partition, entry);
                                }
                            }
                        }
                    }
                }
                self.drop_if_empty(group);
            }
        }
        self.groups.get(op.group()) != before.as_ref()
    }

    fn drop_if_empty(&mut self, group: &str) {
        if self.groups.get(group).is_some_and(GroupRecord::is_empty) {
            self.groups.remove(group);
        }
    }

    pub fn encode(&self) -> Result<Vec<u8>, serde_json::Error> {
        serde_json::to_vec_pretty(self)
    }

    pub fn decode(bytes: &[u8], expected_slot: u32) -> Result<SlotState, SlotFileError> {
        let state: SlotState =
            serde_json::from_slice(bytes).map_err(|e| SlotFileError::Parse(e.to_string()))?;
        if state.format != SLOT_FILE_FORMAT {
            return Err(SlotFileError::UnknownFormat(state.format));
        }
        if state.slot != expected_slot {
            return Err(SlotFileError::WrongSlot {
                expected: expected_slot,
                found: state.slot,
            });
        }
        Ok(state)
    }
}
