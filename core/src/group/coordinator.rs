//! The group coordinator as data: every group this broker coordinates and
//! the durable view of every slot.
//!
//! Live membership lives here, in memory. Offsets, and the members of each
//! group's last stored generation, live in the slot views, which hold
//! exactly what the slot files on the volume say: a change is returned as a
//! [`SlotOp`] for the driver to write, and becomes visible (to OffsetFetch,
//! retention, describe) only when the driver installs the written state
//! with [`Coordinator::install_slot`]. So nothing a reader sees can be lost
//! by a crash; likewise a generation's SyncGroup answers wait until its
//! members are written (see [`Output::stored`]).

use super::classic::{
    self, Effect, Group, JoinError, JoinRequest, JoinResult, SyncRequest, SyncResult, Waiter,
};
use super::offsets::{self, GroupRecord, OffsetEntry};
use super::slot::{GroupMeta, SlotOp, SlotState};
use super::state::{self, GroupState};
use super::txn_completions::TxnCompletions;
use super::GroupConfig;
use crate::cluster::{coordinator_slot, COORDINATOR_SLOTS};
use crate::protocol::ErrorCode;
use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet};

/// What a call needs the driver to do besides answering its own request:
/// answer parked requests, and write slot changes.
#[derive(Debug, Default)]
pub struct Output {
    pub effects: Vec<Effect>,
    /// (slot, op), in the order they must be applied.
    pub ops: Vec<(u32, SlotOp)>,
    /// Generations queued (in `ops`) for writing whose outcome the driver
    /// must report with [`Coordinator::stable_written`] once the slot's
    /// write ends; an immediate answer of the same call (a static member's
    /// rejoin) also waits for it.
    pub stored: Vec<StoredGeneration>,
}

/// A group's generation queued for writing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredGeneration {
    pub slot: u32,
    pub group: String,
    pub generation: i32,
}

/// One partition of an OffsetCommit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitOffset {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: Option<String>,
}

/// An OffsetCommit, version-independent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitRequest {
    pub group_id: String,
    pub member_id: String,
    pub instance_id: Option<String>,
    /// Generation, or -1 for a commit from outside the group protocol. (v9's
    /// member epoch of the new consumer protocol is a generation here: every
    /// kaas group is a classic group.)
    pub generation: i32,
    /// v2-v4: -1 for the broker's retention.
    pub retention_time_ms: i64,
    /// v9+: a commit with a generation to a group that does not exist is
    /// GROUP_ID_NOT_FOUND; older versions say ILLEGAL_GENERATION.
    pub missing_group_is_not_found: bool,
    pub offsets: Vec<CommitOffset>,
}

/// One partition of an OffsetFetch answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedOffset {
    pub partition: i32,
    /// The committed offset (`None`: nothing is committed), or why it
    /// cannot be told.
    pub committed: Result<Option<CommittedOffset>, ErrorCode>,
}

/// A committed offset as OffsetFetch shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
}

/// A member as DescribeGroups shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberDescription {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub metadata: Bytes,
    pub assignment: Bytes,
}

/// A group as DescribeGroups shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDescription {
    pub state: GroupState,
    pub protocol_type: String,
    /// The selected protocol, only while Stable (as Kafka reports it).
    pub protocol_data: String,
    pub members: Vec<MemberDescription>,
}

/// A group as ListGroups shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedGroup {
    pub group_id: String,
    pub protocol_type: String,
    pub state: GroupState,
}

#[derive(Debug, Clone)]
pub struct Coordinator {
    config: GroupConfig,
    groups: BTreeMap<String, Group>,
    slots: Vec<SlotState>,
    /// Groups deleted, or whose offsets the periodic cleanup is expiring:
    /// one of them that is idle once its record is gone is forgotten with
    /// the record (Kafka's cleanup deletes an empty group in the pass that
    /// expires its last offsets). Any other idle group left without a
    /// record (its last offsets removed by OffsetDelete) stays, Empty,
    /// until the next cleanup pass, as in Kafka 4: DeleteGroups still
    /// finds it.
    forget_with_record: BTreeSet<String>,
    /// Transaction ends applied here, against TxnOffsetCommits verified by
    /// a remote coordinator before them (`txn_completions`).
    completions: TxnCompletions,
}

fn meta_of(g: &Group) -> GroupMeta {
    GroupMeta {
        protocol_type: g.protocol_type().map(str::to_string),
        generation: g.generation(),
        empty_since_ms: (g.state() == GroupState::Empty).then(|| g.state_since_ms()),
    }
}

impl Coordinator {
    pub fn new(config: GroupConfig, coordinator_epoch: i32) -> Coordinator {
        Coordinator {
            config,
            groups: BTreeMap::new(),
            slots: (0..COORDINATOR_SLOTS)
                .map(|s| SlotState::new(s, coordinator_epoch))
                .collect(),
            forget_with_record: BTreeSet::new(),
            completions: TxnCompletions::default(),
        }
    }

    pub fn config(&self) -> &GroupConfig {
        &self.config
    }

    pub fn slot(&self, slot: u32) -> Option<&SlotState> {
        self.slots.get(slot as usize)
    }

    pub fn group(&self, group_id: &str) -> Option<&Group> {
        self.groups.get(group_id)
    }

    /// The durable record of a group (its committed offsets), if any.
    pub fn record(&self, group_id: &str) -> Option<&GroupRecord> {
        self.slots
            .get(coordinator_slot(group_id) as usize)
            .and_then(|s| s.groups.get(group_id))
    }

    /// Installs a slot's durable state: read at startup, or just written.
    /// Every group with a record has a group in memory (a restored one comes
    /// back Stable with its stored members, each session restarting at
    /// `now_ms`, or Empty if none are stored); an idle group whose record this state removed because
    /// the cleanup expired its last offsets is forgotten, as Kafka forgets
    /// it (see `forget_with_record`).
    pub fn install_slot(&mut self, state: SlotState, now_ms: i64) {
        let Some(current) = self.slots.get_mut(state.slot as usize) else {
            return;
        };
        let old = std::mem::replace(current, state);
        let new = &self.slots[old.slot as usize];
        for (id, rec) in &new.groups {
            if !self.groups.contains_key(id) {
                let group = match &rec.stable {
                    Some(stable) => Group::restored(id, rec.protocol_type.clone(), stable, now_ms),
                    None => {
                        let empty_since = rec.empty_since_ms.unwrap_or(now_ms);
                        Group::loaded(id, rec.protocol_type.clone(), rec.generation, empty_since)
                    }
                };
                self.groups.insert(id.clone(), group);
            }
        }
        for id in old.groups.keys() {
            if !new.groups.contains_key(id)
                && self.forget_with_record.remove(id)
                && self.groups.get(id).is_some_and(Group::is_idle)
            {
                self.groups.remove(id);
            }
        }
    }

    /// Forgets slot `slot` (this broker stopped coordinating it): its groups
    /// leave memory, their parked requests are answered NOT_COORDINATOR,
    /// and its view is empty until [`install_slot`](Self::install_slot)
    /// loads it again. What the slot's file holds is untouched; the next
    /// owner restores it from there.
    pub fn unload_slot(&mut self, slot: u32, out: &mut Output) {
        let Some(view) = self.slots.get_mut(slot as usize) else {
            return;
        };
        *view = SlotState::new(slot, -1);
        let leaving: Vec<String> = self
            .groups
            .keys()
            .filter(|id| coordinator_slot(id) == slot)
            .cloned()
            .collect();
        for id in leaving {
            if let Some(mut g) = self.groups.remove(&id) {
                g.abandon(ErrorCode::NotCoordinator, &mut out.effects);
            }
        }
        self.forget_with_record
            .retain(|id| coordinator_slot(id) != slot);
    }

    /// Runs `f` on an existing group and records its metadata change, if
    /// any, as a slot op.
    fn with_group<R>(
        &mut self,
        group_id: &str,
        out: &mut Output,
        f: impl FnOnce(&mut Group, &GroupConfig, &mut Vec<Effect>) -> R,
    ) -> Option<R> {
        let g = self.groups.get_mut(group_id)?;
        let before = meta_of(g);
        let r = f(g, &self.config, &mut out.effects);
        let after = meta_of(g);
        let slot = coordinator_slot(group_id);
        if after != before {
            out.ops.push((
                slot,
                SlotOp::Meta {
                    group: group_id.to_string(),
                    meta: after.clone(),
                },
            ));
        }
        if let Some(stable) = g.take_stable_to_store() {
            out.stored.push(StoredGeneration {
                slot,
                group: group_id.to_string(),
                generation: stable.generation,
            });
            out.ops.push((
                slot,
                SlotOp::StoreStable {
                    group: group_id.to_string(),
                    meta: after,
                    stable,
                },
            ));
        }
        Some(r)
    }

    /// JoinGroup. `None`: parked; the answer comes as an effect for `waiter`.
    pub fn join(
        &mut self,
        group_id: &str,
        req: JoinRequest,
        waiter: Waiter,
        now_ms: i64,
        out: &mut Output,
    ) -> Option<JoinResult> {
        if group_id.is_empty() {
            return Some(Err(JoinError::new(
                req.member_id,
                ErrorCode::InvalidGroupId,
            )));
        }
        if !classic::session_timeout_in_range(req.session_timeout_ms, &self.config) {
            return Some(Err(JoinError::new(
                req.member_id,
                ErrorCode::InvalidSessionTimeout,
            )));
        }
        if !self.groups.contains_key(group_id) {
            // Only a member without an id may create a group: a member id
            // names a member of a group that no longer exists here.
            if !req.member_id.is_empty() {
                return Some(Err(JoinError::new(
                    req.member_id,
                    ErrorCode::UnknownMemberId,
                )));
            }
            self.groups
                .insert(group_id.to_string(), Group::new(group_id, now_ms));
        }
        self.with_group(group_id, out, |g, cfg, fx| {
            g.join(req, waiter, cfg, now_ms, fx)
        })
        .flatten()
    }

    /// SyncGroup. `None`: parked; the answer comes as an effect for `waiter`.
    pub fn sync(
        &mut self,
        group_id: &str,
        req: SyncRequest,
        waiter: Waiter,
        out: &mut Output,
    ) -> Option<SyncResult> {
        if group_id.is_empty() {
            return Some(Err(ErrorCode::InvalidGroupId));
        }
        match self.with_group(group_id, out, |g, _, fx| g.sync(req, waiter, fx)) {
            Some(r) => r,
            None => Some(Err(ErrorCode::UnknownMemberId)),
        }
    }

    /// The write of a generation queued by an earlier call (see
    /// [`Output::stored`]) ended: the waiting SyncGroups are answered.
    pub fn stable_written(
        &mut self,
        group_id: &str,
        generation: i32,
        outcome: Result<(), ErrorCode>,
        now_ms: i64,
        out: &mut Output,
    ) {
        self.with_group(group_id, out, |g, cfg, fx| {
            g.assignment_written(generation, outcome, cfg, now_ms, fx)
        });
    }

    pub fn heartbeat(
        &mut self,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        now_ms: i64,
        out: &mut Output,
    ) -> Result<(), ErrorCode> {
        if group_id.is_empty() {
            return Err(ErrorCode::InvalidGroupId);
        }
        self.with_group(group_id, out, |g, _, _| {
            g.heartbeat(member_id, instance_id, generation, now_ms)
        })
        .unwrap_or(Err(ErrorCode::UnknownMemberId))
    }

    /// LeaveGroup: one outcome per leaving member, or a group-level error.
    pub fn leave(
        &mut self,
        group_id: &str,
        leaving: &[(String, Option<String>)],
        now_ms: i64,
        out: &mut Output,
    ) -> Result<Vec<Result<(), ErrorCode>>, ErrorCode> {
        if group_id.is_empty() {
            return Err(ErrorCode::InvalidGroupId);
        }
        self.with_group(group_id, out, |g, cfg, fx| {
            g.leave(leaving, cfg, now_ms, fx)
        })
        .unwrap_or_else(|| Ok(vec![Err(ErrorCode::UnknownMemberId); leaving.len()]))
    }

    /// OffsetCommit: validates against the group and returns one outcome
    /// per offset (or a group-level error); accepted offsets are in one
    /// `Commit` op in `out`, and are committed once that op is written.
    pub fn commit_offsets(
        &mut self,
        req: &CommitRequest,
        now_ms: i64,
        out: &mut Output,
    ) -> Result<Vec<Result<(), ErrorCode>>, ErrorCode> {
        let (meta, outcomes, accepted) = self.accept_offsets(req, None, now_ms)?;
        if !accepted.is_empty() {
            let op = SlotOp::Commit {
                group: req.group_id.clone(),
                meta,
                offsets: accepted,
            };
            out.ops.push((coordinator_slot(&req.group_id), op));
        }
        Ok(outcomes)
    }

    /// TxnOffsetCommit (KIP-98, KIP-447): validated as an OffsetCommit from
    /// a transaction (a member may commit during CompletingRebalance, and
    /// v3+ checks member, generation and instance id against the live
    /// group); accepted offsets are staged under the producer's
    /// transaction by one `StageTxnOffsets` op, invisible to OffsetFetch
    /// until [`complete_txn`](Self::complete_txn) commits them.
    /// `verified_at`: the [`txn_completion_mark`](Self::txn_completion_mark)
    /// taken before a remote transaction coordinator was asked; a
    /// completion of the producer's transaction since refuses the staging
    /// (CONCURRENT_TRANSACTIONS, retriable).
    pub fn stage_txn_offsets(
        &mut self,
        req: &CommitRequest,
        producer_id: i64,
        producer_epoch: i16,
        verified_at: Option<u64>,
        now_ms: i64,
        out: &mut Output,
    ) -> Result<Vec<Result<(), ErrorCode>>, ErrorCode> {
        if verified_at.is_some_and(|mark| self.completions.completed_since(producer_id, mark)) {
            return Err(ErrorCode::ConcurrentTransactions);
        }
        let (meta, outcomes, accepted) =
            self.accept_offsets(req, Some((producer_id, producer_epoch)), now_ms)?;
        if !accepted.is_empty() {
            let op = SlotOp::StageTxnOffsets {
                group: req.group_id.clone(),
                meta,
                producer_id,
                producer_epoch,
                offsets: accepted,
            };
            out.ops.push((coordinator_slot(&req.group_id), op));
        }
        Ok(outcomes)
    }

    /// The transaction of `producer_id` ended, its markers durable: its
    /// staged offsets for `group_id` become committed (or are dropped on
    /// abort) once the returned op is written.
    ///
    /// Always one op, even when nothing is staged in the state already
    /// written: a TxnOffsetCommit verified and queued just before the
    /// transaction ended (a zombie's, as InitProducerId aborts its
    /// transaction) is installed only once its write is durable, so the
    /// written state may not show it yet. Queued behind it on the slot, the
    /// op completes it when the rounds are applied in order; where there is
    /// nothing to complete it changes nothing and costs no write. Deciding
    /// from the written state alone left such offsets staged for a
    /// transaction long complete, and OffsetFetch with require_stable
    /// answered UNSTABLE_OFFSET_COMMIT for ever (simulator seed 486).
    pub fn complete_txn(
        &mut self,
        group_id: &str,
        producer_id: i64,
        commit: bool,
        now_ms: i64,
        out: &mut Output,
    ) {
        self.completions.record(producer_id, now_ms);
        let op = SlotOp::CompleteTxn {
            group: group_id.to_string(),
            producer_id,
            commit,
        };
        out.ops.push((coordinator_slot(group_id), op));
    }

    /// The number a TxnOffsetCommit takes before it asks a remote
    /// transaction coordinator (see `stage_txn_offsets`).
    pub fn txn_completion_mark(&self) -> u64 {
        self.completions.mark()
    }

    /// The shared checks of OffsetCommit and TxnOffsetCommit (`txn`: the
    /// producer of a transactional one): the group's metadata to write, one
    /// outcome per offset, and the accepted offsets.
    #[allow(clippy::type_complexity)]
    fn accept_offsets(
        &mut self,
        req: &CommitRequest,
        txn: Option<(i64, i16)>,
        now_ms: i64,
    ) -> Result<
        (
            GroupMeta,
            Vec<Result<(), ErrorCode>>,
            Vec<(String, i32, OffsetEntry)>,
        ),
        ErrorCode,
    > {
        if !self.groups.contains_key(&req.group_id) {
            if req.generation >= 0 {
                return Err(if req.missing_group_is_not_found {
                    ErrorCode::GroupIdNotFound
                } else {
                    ErrorCode::IllegalGeneration
                });
            }
            // A group used only to store offsets: Empty, no protocol type.
            self.groups
                .insert(req.group_id.clone(), Group::new(&req.group_id, now_ms));
        }
        let max_metadata = self.config.offset_metadata_max_bytes;
        let g = self
            .groups
            .get_mut(&req.group_id)
            .ok_or(ErrorCode::CoordinatorNotAvailable)?;
        g.validate_offset_commit(
            &req.member_id,
            req.instance_id.as_deref(),
            req.generation,
            txn.is_some(),
        )?;
        g.commit_keeps_alive(&req.member_id, now_ms);
        let expire_timestamp_ms = offsets::expire_timestamp_for(req.retention_time_ms, now_ms);
        let mut outcomes = Vec::with_capacity(req.offsets.len());
        let mut accepted = Vec::new();
        for o in &req.offsets {
            if offsets::offset_metadata_too_large(o.metadata.as_deref(), max_metadata) {
                outcomes.push(Err(ErrorCode::OffsetMetadataTooLarge));
                continue;
            }
            outcomes.push(Ok(()));
            accepted.push((
                o.topic.clone(),
                o.partition,
                OffsetEntry {
                    offset: o.offset,
                    leader_epoch: o.leader_epoch,
                    metadata: o.metadata.clone().unwrap_or_default(),
                    commit_timestamp_ms: now_ms,
                    expire_timestamp_ms,
                },
            ));
        }
        Ok((meta_of(g), outcomes, accepted))
    }

    /// OffsetFetch of one group. `topics`: `None` for every committed
    /// offset. A group that does not exist has no offsets (`Ok(None)` for
    /// each requested partition), which is not an error.
    pub fn fetch_offsets(
        &self,
        group_id: &str,
        topics: Option<&[(String, Vec<i32>)]>,
        require_stable: bool,
    ) -> Vec<(String, Vec<FetchedOffset>)> {
        let live = self
            .groups
            .get(group_id)
            .is_some_and(|g| g.state() != GroupState::Dead);
        let record = if live { self.record(group_id) } else { None };
        let fetched = |topic: &str, partition: i32| -> FetchedOffset {
            let committed = if require_stable
                && record.is_some_and(|r| r.has_pending_txn_offset(topic, partition))
            {
                crate::coverage::hit(crate::coverage::Mark::UnstableOffsetsHeldBack);
                Err(ErrorCode::UnstableOffsetCommit)
            } else {
                Ok(record
                    .and_then(|r| r.offset(topic, partition))
                    .map(|e| CommittedOffset {
                        offset: e.offset,
                        leader_epoch: e.leader_epoch,
                        metadata: e.metadata.clone(),
                    }))
            };
            FetchedOffset {
                partition,
                committed,
            }
        };
        match topics {
            Some(list) => list
                .iter()
                .map(|(topic, parts)| {
                    (
                        topic.clone(),
                        parts.iter().map(|p| fetched(topic, *p)).collect(),
                    )
                })
                .collect(),
            None => record
                .map(|r| {
                    r.offsets
                        .iter()
                        .map(|(topic, parts)| {
                            (
                                topic.clone(),
                                parts.keys().map(|p| fetched(topic, *p)).collect(),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default(),
        }
    }

    /// DescribeGroups of one group; `None` if it does not exist.
    pub fn describe_group(&self, group_id: &str) -> Option<GroupDescription> {
        let g = self
            .groups
            .get(group_id)
            .filter(|g| g.state() != GroupState::Dead)?;
        let stable = g.state() == GroupState::Stable;
        let protocol = g.protocol_name().unwrap_or("");
        Some(GroupDescription {
            state: g.state(),
            protocol_type: g.protocol_type().unwrap_or("").to_string(),
            protocol_data: if stable {
                protocol.to_string()
            } else {
                String::new()
            },
            members: g
                .members()
                .map(|m| MemberDescription {
                    member_id: m.id.clone(),
                    instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    metadata: if stable {
                        m.metadata(protocol)
                    } else {
                        Bytes::new()
                    },
                    // Kafka 4 shows a member's current assignment in every
                    // state (its protocol metadata only when Stable): during
                    // a rebalance that is the previous generation's.
                    assignment: m.assignment.clone(),
                })
                .collect(),
        })
    }

    /// ListGroups with the v4+ states filter and v5+ types filter.
    pub fn list_groups(
        &self,
        states_filter: &[String],
        types_filter: &[String],
    ) -> Vec<ListedGroup> {
        if !state::classic_type_matches_filter(types_filter) {
            return Vec::new();
        }
        self.groups
            .values()
            .filter(|g| {
                g.state() != GroupState::Dead
                    && state::state_matches_filter(g.state(), states_filter)
            })
            .map(|g| ListedGroup {
                group_id: g.id.clone(),
                protocol_type: g.protocol_type().unwrap_or("").to_string(),
                state: g.state(),
            })
            .collect()
    }

    /// DeleteGroups of one group: only an Empty group can be deleted, with
    /// all its offsets.
    pub fn delete_group(
        &mut self,
        group_id: &str,
        now_ms: i64,
        out: &mut Output,
    ) -> Result<(), ErrorCode> {
        let Some(g) = self.groups.get_mut(group_id) else {
            return Err(ErrorCode::GroupIdNotFound);
        };
        match g.state() {
            GroupState::Dead => Err(ErrorCode::GroupIdNotFound),
            GroupState::Empty => {
                g.mark_dead(now_ms);
                self.groups.remove(group_id);
                // A slot state written before this deletion may bring the
                // group back as loaded; it goes again with its record.
                self.forget_with_record.insert(group_id.to_string());
                out.ops.push((
                    coordinator_slot(group_id),
                    SlotOp::DeleteGroup {
                        group: group_id.to_string(),
                    },
                ));
                Ok(())
            }
            _ => Err(ErrorCode::NonEmptyGroup),
        }
    }

    /// OffsetDelete: removes offsets of topics the group does not consume.
    /// Returns one outcome per partition, or a group-level error.
    pub fn delete_offsets(
        &mut self,
        group_id: &str,
        partitions: &[(String, i32)],
        out: &mut Output,
    ) -> Result<Vec<Result<(), ErrorCode>>, ErrorCode> {
        let g = self
            .groups
            .get(group_id)
            .ok_or(ErrorCode::GroupIdNotFound)?;
        match g.state() {
            GroupState::Dead => return Err(ErrorCode::GroupIdNotFound),
            GroupState::Empty => {}
            // Only a consumer group says what it consumes; any other
            // non-empty group might need every offset.
            _ if g.protocol_type() != Some(super::CONSUMER_PROTOCOL_TYPE) => {
                return Err(ErrorCode::NonEmptyGroup)
            }
            _ => {}
        }
        let record = self.record(group_id);
        let mut outcomes = Vec::with_capacity(partitions.len());
        let mut delete = Vec::new();
        for (topic, partition) in partitions {
            if g.is_subscribed_to_topic(topic) {
                outcomes.push(Err(ErrorCode::GroupSubscribedToTopic));
            } else {
                if record.is_some_and(|r| r.offset(topic, *partition).is_some()) {
                    delete.push((topic.clone(), *partition));
                }
                outcomes.push(Ok(()));
            }
        }
        if !delete.is_empty() {
            out.ops.push((
                coordinator_slot(group_id),
                SlotOp::DeleteOffsets {
                    group: group_id.to_string(),
                    partitions: delete,
                },
            ));
        }
        Ok(outcomes)
    }

    /// The earliest time `tick` has something to do.
    pub fn next_deadline_ms(&self) -> Option<i64> {
        self.groups
            .values()
            .filter_map(Group::next_deadline_ms)
            .min()
    }

    /// Applies every timeout due at `now_ms`.
    pub fn tick(&mut self, now_ms: i64, out: &mut Output) {
        let due: Vec<String> = self
            .groups
            .values()
            .filter(|g| g.next_deadline_ms().is_some_and(|d| d <= now_ms))
            .map(|g| g.id.clone())
            .collect();
        for id in due {
            self.with_group(&id, out, |g, cfg, fx| g.tick(cfg, now_ms, fx));
        }
    }

    /// Offset retention (the periodic cleanup): expired offsets become
    /// `Expire` ops, and idle groups without offsets are forgotten.
    pub fn expire_offsets(&mut self, now_ms: i64, out: &mut Output) {
        let retention_ms = self.config.offsets_retention_ms;
        let mut forget = Vec::new();
        for (id, g) in &self.groups {
            let Some(record) = self.record(id) else {
                if g.is_idle() {
                    forget.push(id.clone());
                }
                continue;
            };
            let Some(base) = offsets::offset_expiry_base(
                g.protocol_type(),
                g.state(),
                g.state_since_ms(),
                g.subscribed_topics(),
            ) else {
                continue;
            };
            let expired = offsets::expired_offsets(record, &base, now_ms, retention_ms);
            if !expired.is_empty() {
                self.forget_with_record.insert(id.clone());
                out.ops.push((
                    coordinator_slot(id),
                    SlotOp::Expire {
                        group: id.clone(),
                        offsets: expired,
                    },
                ));
            }
        }
        for id in forget {
            self.groups.remove(&id);
        }
    }
}
