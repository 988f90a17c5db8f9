//! One classic group: membership, generations and the rebalance barriers.
//!
//! The machine is driven by requests (`join`, `sync`, `heartbeat`, `leave`)
//! and by time (`tick`). A JoinGroup or SyncGroup that must wait for other
//! members is *parked*: the call returns `None` and remembers the caller's
//! [`Waiter`] token; the answer is pushed later as an [`Effect`] by whatever
//! call completes the barrier. A call may also answer other parked requests
//! (for example a static member's rejoin fences its previous incarnation).
//!
//! The rules follow Kafka's classic group coordinator; each rule lives in
//! one method or function named after it.

use super::member::{Member, Protocol, StableGeneration, StoredMember};
use super::state::GroupState;
use super::subscription::subscribed_topics;
use super::{GroupConfig, CONSUMER_PROTOCOL_TYPE};
use crate::coverage::{self, Mark};
use crate::deliberate_bugs::{planted, Bug};
use crate::protocol::ErrorCode;
use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet};

/// Identifies a parked JoinGroup or SyncGroup request. Chosen by the driver,
/// opaque here.
pub type Waiter = u64;

/// A JoinGroup request, version-independent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinRequest {
    /// Empty for a member that has no id yet.
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocol_type: String,
    pub protocols: Vec<Protocol>,
    /// JoinGroup v4+ from a dynamic member: a member without an id is given
    /// one and asked to rejoin with it (MEMBER_ID_REQUIRED, KIP-394).
    pub require_known_member_id: bool,
    /// JoinGroup v9+: the client understands `skip_assignment` (KIP-814).
    pub supports_skip_assignment: bool,
    /// A fresh unique string (a UUID) the driver supplies, used to build a
    /// new member id if this request needs one.
    pub unique_suffix: String,
}

/// One member as the leader sees it in its JoinGroup response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinedMember {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub metadata: Bytes,
}

/// A JoinGroup's success: the member's place in a generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinedGroup {
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: String,
    pub skip_assignment: bool,
    pub member_id: String,
    /// Every member with its metadata: only in the leader's answer.
    pub members: Vec<JoinedMember>,
}

/// A refused JoinGroup. Kafka's refusal still names a member id: the new
/// one with MEMBER_ID_REQUIRED (the client rejoins with it), otherwise the
/// request's, or none. It has no generation, protocol or leader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinError {
    pub error: ErrorCode,
    pub member_id: String,
}

impl JoinError {
    pub fn new(member_id: impl Into<String>, error: ErrorCode) -> JoinError {
        JoinError {
            error,
            member_id: member_id.into(),
        }
    }
}

/// The answer to a JoinGroup.
pub type JoinResult = Result<JoinedGroup, JoinError>;

/// A SyncGroup request, version-independent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncRequest {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub generation: i32,
    /// v5+: must match the group's when given.
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    /// The leader's assignment, by member id (empty from followers).
    pub assignments: Vec<(String, Bytes)>,
}

/// A SyncGroup's success: the member's share of the leader's assignment,
/// in the group's protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncedGroup {
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignment: Bytes,
}

/// The answer to a SyncGroup. A refusal carries nothing but its error
/// (Kafka answers it with no protocol and an empty assignment).
pub type SyncResult = Result<SyncedGroup, ErrorCode>;

/// An answer to a parked request, produced by a later call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    Join { waiter: Waiter, result: JoinResult },
    Sync { waiter: Waiter, result: SyncResult },
}

/// The delayed first rebalance of an empty group
/// (`group.initial.rebalance.delay.ms`): wait `delay_ms`, and while new
/// members keep arriving wait again, until `remaining_ms` is used up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct InitialDelay {
    delay_ms: i64,
    remaining_ms: i64,
}

/// Builds a member id: the instance id for a static member, else the
/// client id, then a dash and a unique suffix (as Kafka does, so tools show
/// recognisable ids).
pub fn member_id_for(client_id: &str, instance_id: Option<&str>, unique_suffix: &str) -> String {
    format!("{}-{unique_suffix}", instance_id.unwrap_or(client_id))
}

/// JoinGroup's session timeout must lie within the broker's bounds, else
/// INVALID_SESSION_TIMEOUT.
pub fn session_timeout_in_range(session_timeout_ms: i32, cfg: &GroupConfig) -> bool {
    (cfg.min_session_timeout_ms..=cfg.max_session_timeout_ms).contains(&session_timeout_ms)
}

/// SyncGroup v5+ names the protocol type and name the member believes in;
/// a mismatch with the group's is INCONSISTENT_GROUP_PROTOCOL. Either side
/// being unknown is not a mismatch.
pub fn protocol_inconsistent(requested: Option<&str>, group: Option<&str>) -> bool {
    matches!((requested, group), (Some(r), Some(g)) if r != g)
}

#[derive(Debug, Clone)]
pub struct Group {
    pub id: String,
    state: GroupState,
    previous_state: GroupState,
    /// When the group entered its current state.
    state_since_ms: i64,
    generation: i32,
    protocol_type: Option<String>,
    protocol_name: Option<String>,
    leader: Option<String>,
    members: BTreeMap<String, Member>,
    /// Member ids handed out with MEMBER_ID_REQUIRED, not yet used to join,
    /// with the time they are forgotten.
    pending_members: BTreeMap<String, i64>,
    /// group.instance.id -> current member id.
    static_members: BTreeMap<String, String>,
    /// When the join phase (PreparingRebalance) ends at the latest.
    join_deadline_ms: Option<i64>,
    initial_delay: Option<InitialDelay>,
    new_member_added: bool,
    /// Members of the current generation that have not sent SyncGroup yet.
    pending_sync: BTreeSet<String>,
    sync_deadline_ms: Option<i64>,
    /// Topics the members subscribe to, when the group is a consumer group
    /// whose metadata parses.
    subscribed_topics: Option<BTreeSet<String>>,
    /// The generation whose leader's assignment is being written: its
    /// SyncGroup answers wait for [`Group::assignment_written`], as Kafka
    /// answers them only once the group's record is appended, so no member
    /// holds an assignment a restart could forget.
    assignment_in_flight: Option<i32>,
    /// The current generation's members are to be written (taken by the
    /// coordinator with [`Group::take_stable_to_store`]).
    store_requested: bool,
}

impl Group {
    /// A new, empty group.
    pub fn new(id: impl Into<String>, now_ms: i64) -> Group {
        Group {
            id: id.into(),
            state: GroupState::Empty,
            previous_state: GroupState::Empty,
            state_since_ms: now_ms,
            generation: 0,
            protocol_type: None,
            protocol_name: None,
            leader: None,
            members: BTreeMap::new(),
            pending_members: BTreeMap::new(),
            static_members: BTreeMap::new(),
            join_deadline_ms: None,
            initial_delay: None,
            new_member_added: false,
            pending_sync: BTreeSet::new(),
            sync_deadline_ms: None,
            subscribed_topics: None,
            assignment_in_flight: None,
            store_requested: false,
        }
    }

    /// A group restored from its slot file without stored members (it was
    /// Empty, or the file predates stored membership): it comes back Empty.
    pub fn loaded(
        id: impl Into<String>,
        protocol_type: Option<String>,
        generation: i32,
        empty_since_ms: i64,
    ) -> Group {
        let mut g = Group::new(id, empty_since_ms);
        g.protocol_type = protocol_type;
        g.generation = generation;
        g.subscribed_topics = g.compute_subscribed_topics();
        g
    }

    /// A group restored Stable from its stored generation, as Kafka loads
    /// a group whose record has members: same generation, protocol, leader,
    /// member ids and assignments, so its members carry on without a
    /// rebalance. Every session restarts at `now_ms`: a member that does
    /// not come back expires and the group rebalances as usual.
    pub fn restored(
        id: impl Into<String>,
        protocol_type: Option<String>,
        stable: &StableGeneration,
        now_ms: i64,
    ) -> Group {
        let mut g = Group::new(id, now_ms);
        g.protocol_type = protocol_type.clone();
        g.generation = stable.generation;
        g.protocol_name = stable.protocol_name.clone();
        let protocol = stable.protocol_name.clone().unwrap_or_default();
        for m in &stable.members {
            if let Some(instance) = &m.instance_id {
                g.static_members
                    .insert(instance.clone(), m.member_id.clone());
            }
            let member = Member {
                id: m.member_id.clone(),
                instance_id: m.instance_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                session_timeout_ms: m.session_timeout_ms,
                rebalance_timeout_ms: m.rebalance_timeout_ms,
                protocol_type: protocol_type.clone().unwrap_or_default(),
                protocols: vec![Protocol {
                    name: protocol.clone(),
                    metadata: m.subscription.clone(),
                }],
                assignment: m.assignment.clone(),
                join_waiter: None,
                sync_waiter: None,
                is_new: false,
                heartbeat_deadline_ms: now_ms + m.session_timeout_ms as i64,
            };
            g.members.insert(member.id.clone(), member);
        }
        // A stored leader is one of the stored members; if the record says
        // otherwise, any member leads rather than none.
        g.leader = stable
            .leader
            .clone()
            .filter(|l| g.members.contains_key(l))
            .or_else(|| g.members.keys().next().cloned());
        if !g.members.is_empty() {
            g.transition(GroupState::Stable, now_ms);
        }
        g.subscribed_topics = g.compute_subscribed_topics();
        g
    }

    /// The members of the current generation as the slot file keeps them.
    fn stable_generation(&self) -> StableGeneration {
        let protocol = self.protocol_name.as_deref().unwrap_or("");
        StableGeneration {
            generation: self.generation,
            protocol_name: self.protocol_name.clone(),
            leader: self.leader.clone(),
            members: self
                .members
                .values()
                .map(|m| StoredMember {
                    member_id: m.id.clone(),
                    instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    session_timeout_ms: m.session_timeout_ms,
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    subscription: m.metadata(protocol),
                    assignment: m.assignment.clone(),
                })
                .collect(),
        }
    }

    /// The generation to write, if the last call asked for one.
    pub fn take_stable_to_store(&mut self) -> Option<StableGeneration> {
        std::mem::take(&mut self.store_requested).then(|| self.stable_generation())
    }

    pub fn state(&self) -> GroupState {
        self.state
    }

    pub fn state_since_ms(&self) -> i64 {
        self.state_since_ms
    }

    pub fn generation(&self) -> i32 {
        self.generation
    }

    pub fn protocol_type(&self) -> Option<&str> {
        self.protocol_type.as_deref()
    }

    pub fn protocol_name(&self) -> Option<&str> {
        self.protocol_name.as_deref()
    }

    pub fn leader(&self) -> Option<&str> {
        self.leader.as_deref()
    }

    pub fn members(&self) -> impl Iterator<Item = &Member> {
        self.members.values()
    }

    pub fn member(&self, id: &str) -> Option<&Member> {
        self.members.get(id)
    }

    pub fn has_pending_member(&self, id: &str) -> bool {
        self.pending_members.contains_key(id)
    }

    pub fn static_member_id(&self, instance_id: &str) -> Option<&str> {
        self.static_members.get(instance_id).map(String::as_str)
    }

    /// Empty with nobody joining: the group exists only for its offsets
    /// (if any) and can be forgotten once it has none.
    pub fn is_idle(&self) -> bool {
        self.state == GroupState::Empty
            && self.members.is_empty()
            && self.pending_members.is_empty()
    }

    pub fn subscribed_topics(&self) -> Option<&BTreeSet<String>> {
        self.subscribed_topics.as_ref()
    }

    /// The group leaves this coordinator (its slot moved to another
    /// broker): every parked JoinGroup and SyncGroup is answered `code`,
    /// so its client looks the coordinator up again and rejoins there.
    pub fn abandon(&mut self, code: ErrorCode, fx: &mut Vec<Effect>) {
        for m in self.members.values_mut() {
            if let Some(w) = m.join_waiter.take() {
                fx.push(Effect::Join {
                    waiter: w,
                    result: Err(JoinError::new(m.id.clone(), code)),
                });
            }
            if let Some(w) = m.sync_waiter.take() {
                fx.push(Effect::Sync {
                    waiter: w,
                    result: Err(code),
                });
            }
        }
    }

    /// Marks a group deleted: it accepts nothing more.
    pub fn mark_dead(&mut self, now_ms: i64) {
        self.transition(GroupState::Dead, now_ms);
    }

    fn transition(&mut self, to: GroupState, now_ms: i64) {
        self.previous_state = self.state;
        self.state = to;
        self.state_since_ms = now_ms;
    }

    fn uses_consumer_protocol(&self) -> bool {
        self.protocol_type.as_deref() == Some(CONSUMER_PROTOCOL_TYPE)
    }

    /// The largest rebalance timeout of the members: how long a join or
    /// sync phase may last.
    pub fn rebalance_timeout_ms(&self) -> i64 {
        self.members
            .values()
            .map(|m| m.rebalance_timeout_ms as i64)
            .max()
            .unwrap_or(0)
    }

    // ----------------------------------------------------------------- rules

    /// A request naming `member_id` (and maybe a group.instance.id) is from a
    /// current member: the instance id, if given, must map to exactly this
    /// member id (else FENCED_INSTANCE_ID: a newer incarnation replaced it),
    /// and the member must exist (else UNKNOWN_MEMBER_ID).
    pub fn validate_member(
        &self,
        member_id: &str,
        instance_id: Option<&str>,
    ) -> Result<(), ErrorCode> {
        if let Some(instance) = instance_id {
            match self.static_members.get(instance) {
                None => return Err(ErrorCode::UnknownMemberId),
                Some(current) if current != member_id => return Err(ErrorCode::FencedInstanceId),
                Some(_) => {}
            }
        }
        if self.members.contains_key(member_id) {
            Ok(())
        } else {
            Err(ErrorCode::UnknownMemberId)
        }
    }

    /// Whether an OffsetCommit (or TxnOffsetCommit) may write for this
    /// group. Generation -1 with no member id is a commit from outside the
    /// group protocol (admin tools, `assign()` consumers), allowed only while
    /// the group is empty; anything else must come from a current member of
    /// the current generation. Regular commits during CompletingRebalance
    /// get REBALANCE_IN_PROGRESS: the member has a new generation but not
    /// its assignment yet.
    pub fn validate_offset_commit(
        &self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        transactional: bool,
    ) -> Result<(), ErrorCode> {
        if self.state == GroupState::Dead {
            return Err(ErrorCode::CoordinatorNotAvailable);
        }
        if generation < 0 && self.state == GroupState::Empty {
            return Ok(());
        }
        if generation >= 0 || !member_id.is_empty() || instance_id.is_some() {
            if let Err(e) = self.validate_member(member_id, instance_id) {
                coverage::hit(Mark::ZombieMemberCommitRefused);
                return Err(e);
            }
            if generation != self.generation && !planted(Bug::StaleGenerationCommitAccepted) {
                coverage::hit(Mark::ZombieMemberCommitRefused);
                return Err(ErrorCode::IllegalGeneration);
            }
        } else if !transactional && self.state != GroupState::Empty {
            return Err(ErrorCode::UnknownMemberId);
        }
        if !transactional && self.state == GroupState::CompletingRebalance {
            return Err(ErrorCode::RebalanceInProgress);
        }
        Ok(())
    }

    /// Whether a joining member's protocols fit the group: an empty group
    /// takes any non-empty protocol type and list; otherwise the type must be
    /// the group's and at least one protocol must be supported by every
    /// current member.
    pub fn supports_protocols(&self, protocol_type: &str, protocols: &[Protocol]) -> bool {
        if self.state == GroupState::Empty {
            return !protocol_type.is_empty() && !protocols.is_empty();
        }
        self.protocol_type.as_deref() == Some(protocol_type)
            && protocols.iter().any(|p| {
                self.members
                    .values()
                    .all(|m| m.protocols.iter().any(|q| q.name == p.name))
            })
    }

    /// The protocol of the next generation: among the protocols every member
    /// supports, each member votes for its most preferred; most votes wins,
    /// ties go to the alphabetically first name (Kafka leaves ties to hash
    /// order; we pick a deterministic one).
    pub fn select_protocol(&self) -> Option<String> {
        let mut candidates: BTreeSet<&str> = match self.members.values().next() {
            Some(m) => m.protocols.iter().map(|p| p.name.as_str()).collect(),
            None => return None,
        };
        for m in self.members.values() {
            let names: BTreeSet<&str> = m.protocols.iter().map(|p| p.name.as_str()).collect();
            candidates.retain(|c| names.contains(c));
        }
        let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
        for m in self.members.values() {
            if let Some(v) = m.vote(&candidates) {
                *votes.entry(v).or_default() += 1;
            }
        }
        let mut best: Option<(&str, usize)> = None;
        for (name, n) in votes {
            if best.is_none_or(|(_, b)| n > b) {
                best = Some((name, n));
            }
        }
        best.map(|(name, _)| name.to_string())
    }

    /// Topics the group's consumers subscribe to: `Some` only for a
    /// `consumer` group whose every member's metadata parses.
    fn compute_subscribed_topics(&self) -> Option<BTreeSet<String>> {
        if !self.uses_consumer_protocol() {
            return None;
        }
        if self.members.is_empty() {
            return Some(BTreeSet::new());
        }
        let protocol = self.protocol_name.as_deref()?;
        let mut topics = BTreeSet::new();
        for m in self.members.values() {
            topics.extend(subscribed_topics(&m.metadata(protocol))?);
        }
        Some(topics)
    }

    /// Whether the group consumes `topic` (OffsetDelete's
    /// GROUP_SUBSCRIBED_TO_TOPIC). When the subscriptions are unknown, a
    /// consumer group is assumed to consume it, to be safe.
    pub fn is_subscribed_to_topic(&self, topic: &str) -> bool {
        match &self.subscribed_topics {
            Some(topics) => topics.contains(topic),
            None => self.uses_consumer_protocol(),
        }
    }

    /// Whether a JoinGroup from `member_id` may proceed given
    /// `group.max.size`: members already waiting in the join phase are
    /// always let through; new ones only while there is room.
    fn accepts_joining_member(&self, member_id: &str, max_size: usize) -> bool {
        match self.state {
            GroupState::Empty | GroupState::Dead => true,
            GroupState::PreparingRebalance => {
                self.members
                    .get(member_id)
                    .is_some_and(Member::is_awaiting_join)
                    || self
                        .members
                        .values()
                        .filter(|m| m.is_awaiting_join())
                        .count()
                        < max_size
            }
            GroupState::CompletingRebalance | GroupState::Stable => {
                self.members.contains_key(member_id) || self.members.len() < max_size
            }
        }
    }

    fn all_members_joined(&self) -> bool {
        self.pending_members.is_empty() && self.members.values().all(Member::is_awaiting_join)
    }

    fn current_members(&self) -> Vec<JoinedMember> {
        let protocol = self.protocol_name.as_deref().unwrap_or("");
        self.members
            .values()
            .map(|m| JoinedMember {
                member_id: m.id.clone(),
                instance_id: m.instance_id.clone(),
                metadata: m.metadata(protocol),
            })
            .collect()
    }

    /// The answer of a member in the current generation (`with_members`:
    /// the leader's, which lists everyone).
    fn joined(
        &self,
        member_id: &str,
        leader: String,
        with_members: bool,
        skip_assignment: bool,
    ) -> JoinedGroup {
        JoinedGroup {
            generation: self.generation,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
            leader,
            skip_assignment,
            member_id: member_id.to_string(),
            members: if with_members {
                self.current_members()
            } else {
                Vec::new()
            },
        }
    }

    // -------------------------------------------------------------- JoinGroup

    /// Handles a JoinGroup. `None`: parked until the join phase completes.
    /// The caller has checked the group id and the session timeout.
    pub fn join(
        &mut self,
        req: JoinRequest,
        waiter: Waiter,
        cfg: &GroupConfig,
        now_ms: i64,
        fx: &mut Vec<Effect>,
    ) -> Option<JoinResult> {
        if !self.accepts_joining_member(&req.member_id, cfg.max_size) {
            // A member over the limit that is not waiting in the join phase
            // is shed so the group can shrink back under it.
            if self.members.contains_key(&req.member_id) {
                self.remove_member(&req.member_id, fx);
            }
            return Some(Err(JoinError::new("", ErrorCode::GroupMaxSizeReached)));
        }
        if req.member_id.is_empty() {
            self.join_new_member(req, waiter, cfg, now_ms, fx)
        } else {
            self.join_existing_member(req, waiter, cfg, now_ms, fx)
        }
    }

    fn join_new_member(
        &mut self,
        req: JoinRequest,
        waiter: Waiter,
        cfg: &GroupConfig,
        now_ms: i64,
        fx: &mut Vec<Effect>,
    ) -> Option<JoinResult> {
        if self.state == GroupState::Dead {
            return Some(Err(JoinError::new("", ErrorCode::CoordinatorNotAvailable)));
        }
        if !self.supports_protocols(&req.protocol_type, &req.protocols) {
            return Some(Err(JoinError::new(
                "",
                ErrorCode::InconsistentGroupProtocol,
            )));
        }
        let new_id = member_id_for(
            &req.client_id,
            req.instance_id.as_deref(),
            &req.unique_suffix,
        );
        if let Some(instance) = req.instance_id.clone() {
            return match self.static_members.get(&instance).cloned() {
                Some(old_id) => self
                    .rejoin_static_member(&instance, &old_id, new_id, req, waiter, cfg, now_ms, fx),
                None => self.add_member_and_rebalance(new_id, req, waiter, cfg, now_ms, fx),
            };
        }
        if req.require_known_member_id {
            self.pending_members
                .insert(new_id.clone(), now_ms + req.session_timeout_ms as i64);
            return Some(Err(JoinError::new(new_id, ErrorCode::MemberIdRequired)));
        }
        self.add_member_and_rebalance(new_id, req, waiter, cfg, now_ms, fx)
    }

    fn join_existing_member(
        &mut self,
        req: JoinRequest,
        waiter: Waiter,
        cfg: &GroupConfig,
        now_ms: i64,
        fx: &mut Vec<Effect>,
    ) -> Option<JoinResult> {
        let member_id = req.member_id.clone();
        if self.state == GroupState::Dead {
            return Some(Err(JoinError::new(
                member_id,
                ErrorCode::CoordinatorNotAvailable,
            )));
        }
        if !self.supports_protocols(&req.protocol_type, &req.protocols) {
            return Some(Err(JoinError::new(
                member_id,
                ErrorCode::InconsistentGroupProtocol,
            )));
        }
        if self.pending_members.contains_key(&member_id) {
            if req.instance_id.is_some() {
                // Pending ids are only handed to dynamic members; a client
                // mixing one with an instance id starts over without an id.
                return Some(Err(JoinError::new(member_id, ErrorCode::UnknownMemberId)));
            }
            self.pending_members.remove(&member_id);
            return self.add_member_and_rebalance(member_id, req, waiter, cfg, now_ms, fx);
        }
        if let Err(e) = self.validate_member(&member_id, req.instance_id.as_deref()) {
            return Some(Err(JoinError::new(member_id, e)));
        }
        let (is_leader, matches) = match self.members.get(&member_id) {
            Some(m) => (
                self.leader.as_deref() == Some(member_id.as_str()),
                m.matches(&req.protocols),
            ),
            None => return Some(Err(JoinError::new(member_id, ErrorCode::UnknownMemberId))),
        };
        match self.state {
            GroupState::PreparingRebalance => {
                self.update_member_and_rebalance(req, waiter, cfg, now_ms, fx)
            }
            GroupState::CompletingRebalance if matches => {
                // The same metadata again: most likely the member lost our
                // JoinGroup answer. Answer it again for this generation.
                let leader = self.leader.clone().unwrap_or_default();
                Some(Ok(self.joined(&member_id, leader, is_leader, false)))
            }
            GroupState::CompletingRebalance => {
                self.update_member_and_rebalance(req, waiter, cfg, now_ms, fx)
            }
            GroupState::Stable if is_leader || !matches => {
                // The leader rejoining forces a rebalance: that is how it
                // reacts to changes the metadata does not show (new
                // partitions of a subscribed topic).
                self.update_member_and_rebalance(req, waiter, cfg, now_ms, fx)
            }
            GroupState::Stable => {
                let leader = self.leader.clone().unwrap_or_default();
                Some(Ok(self.joined(&member_id, leader, false, false)))
            }
            GroupState::Empty | GroupState::Dead => {
                Some(Err(JoinError::new(member_id, ErrorCode::UnknownMemberId)))
            }
        }
    }

    fn add_member_and_rebalance(
        &mut self,
        member_id: String,
        req: JoinRequest,
        waiter: Waiter,
        cfg: &GroupConfig,
        now_ms: i64,
        fx: &mut Vec<Effect>,
    ) -> Option<JoinResult> {
        let member = Member {
            id: member_id.clone(),
            instance_id: req.instance_id,
            client_id: req.client_id,
            client_host: req.client_host,
            session_timeout_ms: req.session_timeout_ms,
            rebalance_timeout_ms: req.rebalance_timeout_ms,
            protocol_type: req.protocol_type,
            protocols: req.protocols,
            assignment: Bytes::new(),
            join_waiter: Some(waiter),
            sync_waiter: None,
            is_new: true,
            // The member cannot heartbeat while its JoinGroup is parked, and
            // a client that gave up cannot be told apart from a slow one: so
            // it gets a generous fixed time instead of its session timeout.
            heartbeat_deadline_ms: now_ms + cfg.new_member_join_timeout_ms,
        };
        if self.state == GroupState::PreparingRebalance && self.previous_state == GroupState::Empty
        {
            self.new_member_added = true;
        }
        self.add_member(member);
        self.maybe_prepare_rebalance_or_complete_join(cfg, now_ms, fx);
        None
    }

    fn add_member(&mut self, member: Member) {
        if self.members.is_empty() {
            self.protocol_type = Some(member.protocol_type.clone());
        }
        if self.leader.is_none() {
            self.leader = Some(member.id.clone());
        }
        if let Some(instance) = &member.instance_id {
            self.static_members
                .insert(instance.clone(), member.id.clone());
        }
        self.members.insert(member.id.clone(), member);
    }

    fn update_member_and_rebalance(
        &mut self,
        req: JoinRequest,
        waiter: Waiter,
        cfg: &GroupConfig,
        now_ms: i64,
        fx: &mut Vec<Effect>,
    ) -> Option<JoinResult> {
        self.update_member(
            &req.member_id,
            req.protocols,
            req.rebalance_timeout_ms,
            req.session_timeout_ms,
            waiter,
            fx,
        );
        self.maybe_prepare_rebalance_or_complete_join(cfg, now_ms, fx);
        None
    }

    fn update_member(
        &mut self,
        member_id: &str,
        protocols: Vec<Protocol>,
        rebalance_timeout_ms: i32,
        session_timeout_ms: i32,
        waiter: Waiter,
        fx: &mut Vec<Effect>,
    ) {
        let Some(m) = self.members.get_mut(member_id) else {
            return;
        };
        m.protocols = protocols;
        m.rebalance_timeout_ms = rebalance_timeout_ms;
        m.session_timeout_ms = session_timeout_ms;
        if let Some(old) = m.join_waiter.replace(waiter) {
            // A second JoinGroup while the first still waits: the client
            // gave up on the first; tell it to retry rather than leave it
            // hanging.
            fx.push(Effect::Join {
                waiter: old,
                result: Err(JoinError::new(member_id, ErrorCode::RebalanceInProgress)),
            });
        }
    }

    /// A static member rejoins without its member id (typically after a
    /// restart): the new incarnation takes over the old member's place and
    /// assignment, and the old one is fenced. In a stable group whose
    /// protocol would not change this costs no rebalance (KIP-345).
    #[allow(clippy::too_many_arguments)]
    fn rejoin_static_member(
        &mut self,
        instance_id: &str,
        old_id: &str,
        new_id: String,
        req: JoinRequest,
        waiter: Waiter,
        cfg: &GroupConfig,
        now_ms: i64,
        fx: &mut Vec<Effect>,
    ) -> Option<JoinResult> {
        let current_leader = self.leader.clone().unwrap_or_default();
        self.replace_static_member(instance_id, old_id, &new_id, fx);
        if let Some(m) = self.members.get_mut(&new_id) {
            m.heartbeat_deadline_ms = now_ms + m.session_timeout_ms as i64;
        }
        self.update_member(
            &new_id,
            req.protocols,
            req.rebalance_timeout_ms,
            req.session_timeout_ms,
            waiter,
            fx,
        );
        match self.state {
            GroupState::Stable => {
                if self.select_protocol() == self.protocol_name {
                    if let Some(m) = self.members.get_mut(&new_id) {
                        m.join_waiter = None;
                    }
                    // The new member id must survive a restart, or the new
                    // incarnation would be fenced by the stored old one;
                    // the driver answers once it is written (as Kafka does).
                    self.store_requested = true;
                    if req.supports_skip_assignment {
                        // KIP-814: a leader learns it is the leader (so it
                        // keeps watching metadata) but must not reassign.
                        let is_leader = self.leader.as_deref() == Some(new_id.as_str());
                        let leader = self.leader.clone().unwrap_or_default();
                        Some(Ok(self.joined(&new_id, leader, is_leader, is_leader)))
                    } else {
                        // Older clients: name the previous leader id, which
                        // is not this member's new id, so even a rejoining
                        // leader does not run an assignment a stable group
                        // would never distribute.
                        Some(Ok(self.joined(&new_id, current_leader, false, false)))
                    }
                } else {
                    self.maybe_prepare_rebalance_or_complete_join(cfg, now_ms, fx);
                    None
                }
            }
            GroupState::CompletingRebalance => {
                // The leader may already be assigning to the old member id,
                // which would leave the new one without partitions.
                self.prepare_rebalance(cfg, now_ms, fx);
                None
            }
            GroupState::PreparingRebalance => {
                self.maybe_complete_join_phase(now_ms, fx);
                None
            }
            GroupState::Empty | GroupState::Dead => {
                // A static mapping exists only while its member does.
                if let Some(m) = self.members.get_mut(&new_id) {
                    m.join_waiter = None;
                }
                Some(Err(JoinError::new(new_id, ErrorCode::UnknownMemberId)))
            }
        }
    }

    fn replace_static_member(
        &mut self,
        instance_id: &str,
        old_id: &str,
        new_id: &str,
        fx: &mut Vec<Effect>,
    ) {
        let Some(mut m) = self.members.remove(old_id) else {
            return;
        };
        if let Some(w) = m.join_waiter.take() {
            fx.push(Effect::Join {
                waiter: w,
                result: Err(JoinError::new(old_id, ErrorCode::FencedInstanceId)),
            });
        }
        if let Some(w) = m.sync_waiter.take() {
            fx.push(Effect::Sync {
                waiter: w,
                result: Err(ErrorCode::FencedInstanceId),
            });
        }
        m.id = new_id.to_string();
        m.is_new = false;
        self.members.insert(new_id.to_string(), m);
        if self.leader.as_deref() == Some(old_id) {
            self.leader = Some(new_id.to_string());
        }
        if self.pending_sync.remove(old_id) {
            self.pending_sync.insert(new_id.to_string());
        }
        self.static_members
            .insert(instance_id.to_string(), new_id.to_string());
    }

    fn maybe_prepare_rebalance_or_complete_join(
        &mut self,
        cfg: &GroupConfig,
        now_ms: i64,
        fx: &mut Vec<Effect>,
    ) {
        if self.state.can_rebalance() {
            self.prepare_rebalance(cfg, now_ms, fx);
        } else {
            self.maybe_complete_join_phase(now_ms, fx);
        }
    }

    /// The join phase ends early once every member has rejoined, except the
    /// first one after Empty, which always waits out the initial delay.
    fn maybe_complete_join_phase(&mut self, now_ms: i64, fx: &mut Vec<Effect>) {
        if self.state == GroupState::PreparingRebalance
            && self.all_members_joined()
            && self.previous_state != GroupState::Empty
        {
            self.complete_join(now_ms, fx);
        }
    }

    /// Starts a rebalance: members waiting in SyncGroup are told to rejoin,
    /// and the join phase gets its deadline (the initial delay for a group
    /// coming from Empty, else the rebalance timeout).
    fn prepare_rebalance(&mut self, cfg: &GroupConfig, now_ms: i64, fx: &mut Vec<Effect>) {
        if self.state == GroupState::CompletingRebalance {
            self.reset_and_propagate_assignment_with_error(
                ErrorCode::RebalanceInProgress,
                now_ms,
                fx,
            );
        }
        self.pending_sync.clear();
        self.sync_deadline_ms = None;
        // Its SyncGroups were just answered; the write's end changes nothing.
        self.assignment_in_flight = None;
        let initial = self.state == GroupState::Empty;
        self.transition(GroupState::PreparingRebalance, now_ms);
        if initial {
            let delay_ms = cfg.initial_rebalance_delay_ms;
            self.initial_delay = Some(InitialDelay {
                delay_ms,
                remaining_ms: (self.rebalance_timeout_ms() - delay_ms).max(0),
            });
            self.new_member_added = false;
            self.join_deadline_ms = Some(now_ms + delay_ms);
        } else if self.all_members_joined() {
            self.complete_join(now_ms, fx);
        } else {
            self.initial_delay = None;
            self.join_deadline_ms = Some(now_ms + self.rebalance_timeout_ms());
        }
    }

    /// Ends the join phase: members that did not rejoin are dropped (static
    /// ones are kept: they may come back), the next generation starts and
    /// every waiting member learns it; the leader also gets everyone's
    /// metadata to compute the assignment.
    fn complete_join(&mut self, now_ms: i64, fx: &mut Vec<Effect>) {
        self.join_deadline_ms = None;
        self.initial_delay = None;
        let gone: Vec<String> = self
            .members
            .values()
            .filter(|m| !m.is_awaiting_join() && !m.is_static())
            .map(|m| m.id.clone())
            .collect();
        for id in gone {
            self.remove_member(&id, fx);
        }
        if self.state == GroupState::Dead {
            return;
        }
        if !self.maybe_elect_new_joined_leader() && !self.members.is_empty() {
            // Only static members that have not rejoined are left: wait
            // another rebalance timeout (their sessions will expire if they
            // are gone).
            self.join_deadline_ms = Some(now_ms + self.rebalance_timeout_ms());
            return;
        }
        self.init_next_generation(now_ms);
        if self.state == GroupState::Empty {
            return;
        }
        let leader = self.leader.clone().unwrap_or_default();
        let ids: Vec<String> = self.members.keys().cloned().collect();
        for id in ids {
            let is_leader = leader == id;
            let joined = self.joined(&id, leader.clone(), is_leader, false);
            if let Some(m) = self.members.get_mut(&id) {
                if let Some(w) = m.join_waiter.take() {
                    fx.push(Effect::Join {
                        waiter: w,
                        result: Ok(joined),
                    });
                }
                m.heartbeat_deadline_ms = now_ms + m.session_timeout_ms as i64;
                m.is_new = false;
            }
            self.pending_sync.insert(id);
        }
        self.sync_deadline_ms = Some(now_ms + self.rebalance_timeout_ms());
    }

    /// The leader must be a member that rejoined; if the old one did not,
    /// any member that did takes over. False if nobody rejoined.
    fn maybe_elect_new_joined_leader(&mut self) -> bool {
        let Some(leader) = self.leader.clone() else {
            return false;
        };
        if self
            .members
            .get(&leader)
            .is_some_and(Member::is_awaiting_join)
        {
            return true;
        }
        match self.members.values().find(|m| m.is_awaiting_join()) {
            Some(m) => {
                self.leader = Some(m.id.clone());
                true
            }
            None => false,
        }
    }

    fn init_next_generation(&mut self, now_ms: i64) {
        self.generation += 1;
        if self.members.is_empty() {
            self.protocol_name = None;
            self.subscribed_topics = self.compute_subscribed_topics();
            self.transition(GroupState::Empty, now_ms);
        } else {
            self.protocol_name = self.select_protocol();
            self.subscribed_topics = self.compute_subscribed_topics();
            self.transition(GroupState::CompletingRebalance, now_ms);
        }
        self.pending_sync.clear();
    }

    /// Removes a member (no rebalance decision here). A parked JoinGroup or
    /// SyncGroup of the member is answered UNKNOWN_MEMBER_ID so its client
    /// starts over.
    fn remove_member(&mut self, member_id: &str, fx: &mut Vec<Effect>) {
        self.pending_members.remove(member_id);
        let Some(m) = self.members.remove(member_id) else {
            return;
        };
        if let Some(w) = m.join_waiter {
            fx.push(Effect::Join {
                waiter: w,
                result: Err(JoinError::new("", ErrorCode::UnknownMemberId)),
            });
        }
        if let Some(w) = m.sync_waiter {
            fx.push(Effect::Sync {
                waiter: w,
                result: Err(ErrorCode::UnknownMemberId),
            });
        }
        if let Some(instance) = &m.instance_id {
            if self.static_members.get(instance).map(String::as_str) == Some(member_id) {
                self.static_members.remove(instance);
            }
        }
        self.pending_sync.remove(member_id);
        if self.leader.as_deref() == Some(member_id) {
            self.leader = self.members.keys().next().cloned();
        }
    }

    /// Removes a member that left or failed and lets the group react: a
    /// settled group rebalances; a group in its join phase may now have
    /// everyone it waits for.
    fn remove_member_and_update(
        &mut self,
        member_id: &str,
        cfg: &GroupConfig,
        now_ms: i64,
        fx: &mut Vec<Effect>,
    ) {
        self.remove_member(member_id, fx);
        match self.state {
            GroupState::Stable | GroupState::CompletingRebalance => {
                self.maybe_prepare_rebalance_or_complete_join(cfg, now_ms, fx)
            }
            GroupState::PreparingRebalance if self.all_members_joined() => {
                self.complete_join(now_ms, fx)
            }
            _ => {}
        }
    }

    // -------------------------------------------------------------- SyncGroup

    /// Handles a SyncGroup. `None`: parked until the leader's assignment.
    pub fn sync(
        &mut self,
        req: SyncRequest,
        waiter: Waiter,
        fx: &mut Vec<Effect>,
    ) -> Option<SyncResult> {
        if self.state == GroupState::Dead {
            return Some(Err(ErrorCode::CoordinatorNotAvailable));
        }
        if let Err(e) = self.validate_member(&req.member_id, req.instance_id.as_deref()) {
            return Some(Err(e));
        }
        if req.generation != self.generation {
            return Some(Err(ErrorCode::IllegalGeneration));
        }
        if protocol_inconsistent(req.protocol_type.as_deref(), self.protocol_type.as_deref())
            || protocol_inconsistent(req.protocol_name.as_deref(), self.protocol_name.as_deref())
        {
            return Some(Err(ErrorCode::InconsistentGroupProtocol));
        }
        match self.state {
            GroupState::Empty => Some(Err(ErrorCode::UnknownMemberId)),
            GroupState::PreparingRebalance => Some(Err(ErrorCode::RebalanceInProgress)),
            GroupState::CompletingRebalance => {
                if let Some(m) = self.members.get_mut(&req.member_id) {
                    if let Some(old) = m.sync_waiter.replace(waiter) {
                        fx.push(Effect::Sync {
                            waiter: old,
                            result: Err(ErrorCode::RebalanceInProgress),
                        });
                    }
                }
                self.remove_pending_sync_member(&req.member_id);
                // A leader's repeated SyncGroup while its assignment is
                // being written waits for that write.
                if self.leader.as_deref() == Some(req.member_id.as_str())
                    && self.assignment_in_flight.is_none()
                {
                    let assignments: BTreeMap<String, Bytes> =
                        req.assignments.into_iter().collect();
                    for m in self.members.values_mut() {
                        m.assignment = assignments.get(&m.id).cloned().unwrap_or_default();
                    }
                    // The answers go out once the generation is durable
                    // (`assignment_written`).
                    self.assignment_in_flight = Some(self.generation);
                    self.store_requested = true;
                }
                None
            }
            GroupState::Stable => {
                self.remove_pending_sync_member(&req.member_id);
                let assignment = self
                    .members
                    .get(&req.member_id)
                    .map(|m| m.assignment.clone())
                    .unwrap_or_default();
                Some(Ok(SyncedGroup {
                    protocol_type: self.protocol_type.clone(),
                    protocol_name: self.protocol_name.clone(),
                    assignment,
                }))
            }
            GroupState::Dead => Some(Err(ErrorCode::CoordinatorNotAvailable)),
        }
    }

    /// The write of `generation`'s assignment ended. Written: every waiting
    /// SyncGroup gets its share and the group is Stable. Failed: they get
    /// the storage error and the group rebalances, as Kafka does when it
    /// cannot append the group's record. Ignored if the group has moved on
    /// (a rebalance already answered them).
    pub fn assignment_written(
        &mut self,
        generation: i32,
        outcome: Result<(), ErrorCode>,
        cfg: &GroupConfig,
        now_ms: i64,
        fx: &mut Vec<Effect>,
    ) {
        if self.state != GroupState::CompletingRebalance
            || self.assignment_in_flight != Some(generation)
            || self.generation != generation
        {
            return;
        }
        self.assignment_in_flight = None;
        match outcome {
            Ok(()) => {
                self.propagate_assignment(Ok(()), now_ms, fx);
                self.transition(GroupState::Stable, now_ms);
            }
            Err(e) => {
                self.reset_and_propagate_assignment_with_error(e, now_ms, fx);
                self.maybe_prepare_rebalance_or_complete_join(cfg, now_ms, fx);
            }
        }
    }

    fn remove_pending_sync_member(&mut self, member_id: &str) {
        self.pending_sync.remove(member_id);
        if !self.sync_deadline_armed() {
            self.sync_deadline_ms = None;
        }
    }

    /// The sync deadline matters while some member of the generation has
    /// not synced yet.
    fn sync_deadline_armed(&self) -> bool {
        !self.pending_sync.is_empty() || planted(Bug::SyncDeadlineRebalancesAStableGroup)
    }

    fn reset_and_propagate_assignment_with_error(
        &mut self,
        error: ErrorCode,
        now_ms: i64,
        fx: &mut Vec<Effect>,
    ) {
        for m in self.members.values_mut() {
            m.assignment = Bytes::new();
        }
        self.propagate_assignment(Err(error), now_ms, fx);
    }

    /// Answers every parked SyncGroup: with its member's assignment if
    /// `outcome` is `Ok`, else with the error; and restarts those members'
    /// session timers: they could not heartbeat meaningfully while they
    /// waited.
    fn propagate_assignment(
        &mut self,
        outcome: Result<(), ErrorCode>,
        now_ms: i64,
        fx: &mut Vec<Effect>,
    ) {
        for m in self.members.values_mut() {
            if let Some(w) = m.sync_waiter.take() {
                fx.push(Effect::Sync {
                    waiter: w,
                    result: outcome.map(|()| SyncedGroup {
                        protocol_type: self.protocol_type.clone(),
                        protocol_name: self.protocol_name.clone(),
                        assignment: m.assignment.clone(),
                    }),
                });
                m.heartbeat_deadline_ms = now_ms + m.session_timeout_ms as i64;
            }
        }
    }

    // -------------------------------------------------------------- Heartbeat

    /// Handles a Heartbeat: keeps the member's session alive and tells it
    /// whether it must rejoin. `Err(REBALANCE_IN_PROGRESS)` is that signal:
    /// the session was kept alive all the same.
    pub fn heartbeat(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        now_ms: i64,
    ) -> Result<(), ErrorCode> {
        if self.state == GroupState::Dead {
            return Err(ErrorCode::CoordinatorNotAvailable);
        }
        self.validate_member(member_id, instance_id)?;
        if generation != self.generation {
            return Err(ErrorCode::IllegalGeneration);
        }
        match self.state {
            GroupState::Empty => Err(ErrorCode::UnknownMemberId),
            GroupState::PreparingRebalance => {
                self.keep_alive(member_id, now_ms);
                Err(ErrorCode::RebalanceInProgress)
            }
            GroupState::CompletingRebalance | GroupState::Stable => {
                self.keep_alive(member_id, now_ms);
                Ok(())
            }
            GroupState::Dead => Err(ErrorCode::CoordinatorNotAvailable),
        }
    }

    /// Restarts a member's session timer (a heartbeat, or a commit while the
    /// group is Stable or PreparingRebalance).
    pub fn keep_alive(&mut self, member_id: &str, now_ms: i64) {
        if let Some(m) = self.members.get_mut(member_id) {
            m.heartbeat_deadline_ms = now_ms + m.session_timeout_ms as i64;
        }
    }

    /// OffsetCommit keeps a member alive in the states where it must be
    /// consuming (Stable) or about to learn of a rebalance (Preparing).
    pub fn commit_keeps_alive(&mut self, member_id: &str, now_ms: i64) {
        if matches!(
            self.state,
            GroupState::Stable | GroupState::PreparingRebalance
        ) {
            self.keep_alive(member_id, now_ms);
        }
    }

    // ------------------------------------------------------------- LeaveGroup

    /// Handles a LeaveGroup of one or more members (v3+ batches them; an
    /// admin may remove a static member by instance id alone). Returns one
    /// outcome per member, or a group-level error.
    pub fn leave(
        &mut self,
        leaving: &[(String, Option<String>)],
        cfg: &GroupConfig,
        now_ms: i64,
        fx: &mut Vec<Effect>,
    ) -> Result<Vec<Result<(), ErrorCode>>, ErrorCode> {
        if self.state == GroupState::Dead {
            return Err(ErrorCode::CoordinatorNotAvailable);
        }
        let mut outcomes = Vec::with_capacity(leaving.len());
        let mut removed_any = false;
        for (member_id, instance_id) in leaving {
            let outcome = if member_id.is_empty() {
                match instance_id
                    .as_deref()
                    .and_then(|i| self.static_members.get(i))
                    .cloned()
                {
                    Some(current) => {
                        self.remove_member(&current, fx);
                        Ok(())
                    }
                    None => Err(ErrorCode::UnknownMemberId),
                }
            } else if self.pending_members.remove(member_id).is_some() {
                Ok(())
            } else {
                let outcome = self.validate_member(member_id, instance_id.as_deref());
                if outcome.is_ok() {
                    self.remove_member(member_id, fx);
                }
                outcome
            };
            removed_any |= outcome.is_ok();
            outcomes.push(outcome);
        }
        if removed_any {
            match self.state {
                GroupState::Stable | GroupState::CompletingRebalance => {
                    self.maybe_prepare_rebalance_or_complete_join(cfg, now_ms, fx)
                }
                GroupState::PreparingRebalance => self.maybe_complete_join_phase(now_ms, fx),
                _ => {}
            }
        }
        Ok(outcomes)
    }

    // ------------------------------------------------------------------ time

    /// The earliest time `tick` has something to do.
    pub fn next_deadline_ms(&self) -> Option<i64> {
        let members = self
            .members
            .values()
            .filter(|m| m.is_new || !(m.is_awaiting_join() || m.is_awaiting_sync()))
            .map(|m| m.heartbeat_deadline_ms);
        let sync = self.sync_deadline_ms.filter(|_| self.sync_deadline_armed());
        members
            .chain(self.pending_members.values().copied())
            .chain(self.join_deadline_ms)
            .chain(sync)
            .min()
    }

    /// Applies everything due at `now_ms`: expired sessions and pending
    /// member ids, the end of the join phase, members that never synced.
    pub fn tick(&mut self, cfg: &GroupConfig, now_ms: i64, fx: &mut Vec<Effect>) {
        if self.state == GroupState::Dead {
            return;
        }
        let expired_pending: Vec<String> = self
            .pending_members
            .iter()
            .filter(|(_, d)| **d <= now_ms)
            .map(|(id, _)| id.clone())
            .collect();
        for id in expired_pending {
            self.pending_members.remove(&id);
            if self.state == GroupState::PreparingRebalance && self.all_members_joined() {
                self.complete_join(now_ms, fx);
            }
        }
        let expired: Vec<String> = self
            .members
            .values()
            .filter(|m| m.heartbeat_deadline_ms <= now_ms && !self.session_satisfied(m))
            .map(|m| m.id.clone())
            .collect();
        for id in expired {
            // An earlier removal in this loop may have changed the group
            // (a completed join phase restarts every session timer).
            if self
                .members
                .get(&id)
                .is_some_and(|m| m.heartbeat_deadline_ms <= now_ms && !self.session_satisfied(m))
            {
                self.remove_member_and_update(&id, cfg, now_ms, fx);
            }
        }
        if self.state == GroupState::PreparingRebalance
            && self.join_deadline_ms.is_some_and(|d| d <= now_ms)
        {
            self.on_join_deadline(cfg, now_ms, fx);
        }
        if self.sync_deadline_ms.is_some_and(|d| d <= now_ms) {
            self.sync_deadline_ms = None;
            if matches!(
                self.state,
                GroupState::CompletingRebalance | GroupState::Stable
            ) && self.sync_deadline_armed()
            {
                let missing: Vec<String> = self.pending_sync.iter().cloned().collect();
                for id in missing {
                    self.remove_member(&id, fx);
                }
                self.prepare_rebalance(cfg, now_ms, fx);
            }
        }
    }

    /// A member waiting in JoinGroup or SyncGroup cannot heartbeat, so its
    /// session does not expire then; only a new member's does (see
    /// `Member::is_new`).
    fn session_satisfied(&self, m: &Member) -> bool {
        !m.is_new && (m.is_awaiting_join() || m.is_awaiting_sync())
    }

    fn on_join_deadline(&mut self, cfg: &GroupConfig, now_ms: i64, fx: &mut Vec<Effect>) {
        match self.initial_delay {
            Some(d) if self.new_member_added && d.remaining_ms > 0 => {
                // Members are still arriving: give them another delay.
                self.new_member_added = false;
                let delay_ms = cfg.initial_rebalance_delay_ms.min(d.remaining_ms);
                self.initial_delay = Some(InitialDelay {
                    delay_ms,
                    remaining_ms: (d.remaining_ms - d.delay_ms).max(0),
                });
                self.join_deadline_ms = Some(now_ms + delay_ms);
            }
            _ => self.complete_join(now_ms, fx),
        }
    }
}
