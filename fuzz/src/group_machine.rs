//! (e) The classic group coordinator (`kaas_core::group`) driven by random
//! JoinGroup / SyncGroup / Heartbeat / LeaveGroup / OffsetCommit /
//! DeleteGroups / OffsetDelete requests, time passing, offset retention and
//! coordinator restarts, the way net's driver drives it: slot ops are
//! applied to the durable slot state, written (encode/decode), and
//! installed back.
//!
//! Invariants:
//! - a parked JoinGroup/SyncGroup is answered exactly once: effects only
//!   name parked waiters, never one answered already or directly;
//! - once time passes every deadline, no request stays parked (liveness);
//! - a group's generation never goes backwards while it exists, across
//!   coordinator restarts too;
//! - Empty means no members; CompletingRebalance and Stable have a leader
//!   that is a member;
//! - an accepted offset commit is what OffsetFetch returns until the group
//!   or offset is deleted or expires, across restarts;
//! - slot files round-trip.

use arbitrary::Arbitrary;
use bytes::Bytes;
use kaas_core::cluster::coordinator_slot;
use kaas_core::group::coordinator::{CommitOffset, CommitRequest, Output};
use kaas_core::group::{
    Coordinator, Effect, GroupConfig, GroupState, JoinRequest, JoinResult, Protocol, SlotOp,
    SlotState, SyncRequest, Waiter,
};
use kaas_core::protocol::ErrorCode;
use std::collections::BTreeMap;

const GROUPS: [&str; 3] = ["g0", "g1", ""];
const CLIENTS: usize = 4;
const SESSION_MS: [i32; 4] = [6_000, 10_000, 45_000, 1_000];
const REBALANCE_MS: [i32; 3] = [1_000, 10_000, 300_000];
const TOPIC: &str = "t";

#[derive(Arbitrary, Debug, Clone)]
pub enum GroupOp {
    Join {
        client: u8,
        group: u8,
        /// Rejoin with the member id the client was given (else none).
        with_id: bool,
        /// Static member (`group.instance.id`).
        is_static: bool,
        session: u8,
        rebalance: u8,
        protocols: u8,
        require_known_member_id: bool,
        /// Protocol metadata bytes (parsed as a consumer subscription).
        metadata: Option<Vec<u8>>,
    },
    Sync {
        client: u8,
        group: u8,
        stale_generation: bool,
        with_protocol_type: bool,
    },
    Heartbeat {
        client: u8,
        group: u8,
        stale_generation: bool,
    },
    Leave {
        client: u8,
        group: u8,
    },
    Commit {
        client: u8,
        group: u8,
        /// A commit from outside the group protocol (generation -1).
        simple: bool,
        partition: u8,
        offset: u16,
    },
    Delete {
        group: u8,
    },
    DeleteOffsets {
        group: u8,
        partition: u8,
    },
    Advance {
        ms: u16,
    },
    /// Jump to the next deadline and fire it.
    NextDeadline,
    ExpireOffsets {
        days: u8,
    },
    /// The coordinator restarts from its slot files: parked requests are
    /// lost with their connections.
    Restart,
}

/// What a client knows of its membership in one group.
#[derive(Debug, Clone, Default)]
struct Membership {
    member_id: String,
    generation: i32,
    /// The members listed in the leader's JoinGroup answer.
    leader_of: Vec<String>,
    protocol_type: String,
}

#[derive(Debug, Clone, Copy)]
enum Parked {
    Join { client: usize, group: usize },
    Sync,
}

pub struct Machine {
    coord: Coordinator,
    /// The durable slot files, as last written.
    slots: BTreeMap<u32, SlotState>,
    now_ms: i64,
    next_waiter: Waiter,
    parked: BTreeMap<Waiter, Parked>,
    members: BTreeMap<(usize, usize), Membership>,
    generations: BTreeMap<String, i32>,
    /// Offsets acknowledged as committed: (group, partition) -> offset.
    committed: BTreeMap<(String, i32), i64>,
    suffix: u64,
}

impl Default for Machine {
    fn default() -> Self {
        Machine::new()
    }
}

fn pick<T: Copy>(options: &[T], i: u8) -> T {
    options[usize::from(i) % options.len()]
}

impl Machine {
    pub fn new() -> Machine {
        Machine {
            coord: Coordinator::new(GroupConfig::default(), 0),
            slots: BTreeMap::new(),
            now_ms: 1_000_000,
            next_waiter: 1,
            parked: BTreeMap::new(),
            members: BTreeMap::new(),
            generations: BTreeMap::new(),
            committed: BTreeMap::new(),
            suffix: 0,
        }
    }

    fn waiter(&mut self) -> Waiter {
        self.next_waiter += 1;
        self.next_waiter
    }

    fn membership(&mut self, client: u8, group: u8) -> (usize, usize, Membership) {
        let key = (
            usize::from(client) % CLIENTS,
            usize::from(group) % GROUPS.len(),
        );
        (
            key.0,
            key.1,
            self.members.get(&key).cloned().unwrap_or_default(),
        )
    }

    pub fn apply(&mut self, op: &GroupOp) {
        let mut out = Output::default();
        match op {
            GroupOp::Join {
                client,
                group,
                with_id,
                is_static,
                session,
                rebalance,
                protocols,
                require_known_member_id,
                metadata,
            } => {
                let (c, g, m) = self.membership(*client, *group);
                let metadata = Bytes::from(metadata.clone().unwrap_or_default());
                let names: &[&str] = match protocols % 3 {
                    0 => &["range"],
                    1 => &["roundrobin"],
                    _ => &["range", "cooperative-sticky"],
                };
                let protocol_type = if protocols % 5 == 4 {
                    "connect"
                } else {
                    "consumer"
                };
                self.suffix += 1;
                let req = JoinRequest {
                    member_id: if *with_id {
                        m.member_id.clone()
                    } else {
                        String::new()
                    },
                    instance_id: is_static.then(|| format!("instance-{c}")),
                    client_id: format!("client-{c}"),
                    client_host: "/127.0.0.1".to_string(),
                    session_timeout_ms: pick(&SESSION_MS, *session),
                    rebalance_timeout_ms: pick(&REBALANCE_MS, *rebalance),
                    protocol_type: protocol_type.to_string(),
                    protocols: names
                        .iter()
                        .map(|n| Protocol {
                            name: n.to_string(),
                            metadata: metadata.clone(),
                        })
                        .collect(),
                    require_known_member_id: *require_known_member_id,
                    supports_skip_assignment: protocols % 2 == 0,
                    unique_suffix: format!("{:08x}", self.suffix),
                };
                let w = self.waiter();
                let answer = self.coord.join(GROUPS[g], req, w, self.now_ms, &mut out);
                match answer {
                    Some(result) => self.joined(c, g, &result),
                    None => {
                        self.parked.insert(
                            w,
                            Parked::Join {
                                client: c,
                                group: g,
                            },
                        );
                    }
                }
            }
            GroupOp::Sync {
                client,
                group,
                stale_generation,
                with_protocol_type,
            } => {
                let (_, g, m) = self.membership(*client, *group);
                let assignments = m
                    .leader_of
                    .iter()
                    .map(|id| (id.clone(), Bytes::from(format!("assignment of {id}"))))
                    .collect();
                let req = SyncRequest {
                    member_id: m.member_id.clone(),
                    instance_id: None,
                    generation: m.generation - i32::from(*stale_generation),
                    protocol_type: with_protocol_type.then(|| m.protocol_type.clone()),
                    protocol_name: None,
                    assignments,
                };
                let w = self.waiter();
                // A refused SyncGroup carries no assignment: its type says so.
                if self.coord.sync(GROUPS[g], req, w, &mut out).is_none() {
                    self.parked.insert(w, Parked::Sync);
                }
            }
            GroupOp::Heartbeat {
                client,
                group,
                stale_generation,
            } => {
                let (_, g, m) = self.membership(*client, *group);
                let _ = self.coord.heartbeat(
                    GROUPS[g],
                    &m.member_id,
                    None,
                    m.generation - i32::from(*stale_generation),
                    self.now_ms,
                    &mut out,
                );
            }
            GroupOp::Leave { client, group } => {
                let (_, g, m) = self.membership(*client, *group);
                let leaving = [(m.member_id.clone(), None)];
                if let Ok(outcomes) = self.coord.leave(GROUPS[g], &leaving, self.now_ms, &mut out) {
                    assert_eq!(outcomes.len(), 1, "one outcome per leaving member");
                }
            }
            GroupOp::Commit {
                client,
                group,
                simple,
                partition,
                offset,
            } => {
                let (_, g, m) = self.membership(*client, *group);
                let partition = i32::from(*partition % 4);
                let req = CommitRequest {
                    group_id: GROUPS[g].to_string(),
                    member_id: if *simple {
                        String::new()
                    } else {
                        m.member_id.clone()
                    },
                    instance_id: None,
                    generation: if *simple { -1 } else { m.generation },
                    retention_time_ms: -1,
                    missing_group_is_not_found: partition % 2 == 0,
                    offsets: vec![CommitOffset {
                        topic: TOPIC.to_string(),
                        partition,
                        offset: i64::from(*offset),
                        leader_epoch: -1,
                        metadata: Some("m".to_string()),
                    }],
                };
                let result = self.coord.commit_offsets(&req, self.now_ms, &mut out);
                self.finish(out);
                if let Ok(outcomes) = result {
                    assert_eq!(outcomes.len(), 1, "one outcome per committed offset");
                    if outcomes[0].is_ok() {
                        self.committed
                            .insert((GROUPS[g].to_string(), partition), i64::from(*offset));
                    }
                }
                self.check();
                return;
            }
            GroupOp::Delete { group } => {
                let g = GROUPS[usize::from(*group) % GROUPS.len()];
                if self.coord.delete_group(g, self.now_ms, &mut out).is_ok() {
                    self.committed.retain(|(group, _), _| group != g);
                }
            }
            GroupOp::DeleteOffsets { group, partition } => {
                let g = GROUPS[usize::from(*group) % GROUPS.len()];
                let p = i32::from(*partition % 4);
                let req = [(TOPIC.to_string(), p)];
                if let Ok(outcomes) = self.coord.delete_offsets(g, &req, &mut out) {
                    if outcomes == [Ok(())] {
                        self.committed.remove(&(g.to_string(), p));
                    }
                }
            }
            GroupOp::Advance { ms } => {
                self.now_ms += i64::from(*ms);
                self.coord.tick(self.now_ms, &mut out);
            }
            GroupOp::NextDeadline => {
                if let Some(d) = self.coord.next_deadline_ms() {
                    self.now_ms = self.now_ms.max(d);
                    self.coord.tick(self.now_ms, &mut out);
                }
            }
            GroupOp::ExpireOffsets { days } => {
                self.now_ms += i64::from(*days) * 86_400_000;
                self.coord.tick(self.now_ms, &mut out);
                self.coord.expire_offsets(self.now_ms, &mut out);
            }
            GroupOp::Restart => {
                let mut coord = Coordinator::new(GroupConfig::default(), 0);
                for state in self.slots.values() {
                    coord.install_slot(state.clone(), self.now_ms);
                }
                self.coord = coord;
                self.parked.clear();
                // Restored groups come back Empty at their durable
                // generation, or Stable at the generation whose members
                // were stored (as Kafka restores its last group record): a
                // rebalance begun after that is forgotten, and its number
                // may be handed out again, which is safe because none of
                // its SyncGroups was answered before it was stored. Groups
                // only in memory are gone.
                for (id, gen) in &self.generations {
                    if let Some(g) = self.coord.group(id) {
                        match g.state() {
                            GroupState::Empty => assert!(
                                g.generation() >= *gen,
                                "generation of {id} went back in a restart"
                            ),
                            GroupState::Stable => {
                                let stored = self
                                    .slots
                                    .get(&coordinator_slot(id))
                                    .and_then(|s| s.groups.get(id))
                                    .and_then(|r| r.stable.as_ref())
                                    .map(|s| s.generation);
                                assert_eq!(
                                    Some(g.generation()),
                                    stored,
                                    "{id} restored Stable at a generation it did not store"
                                );
                            }
                            other => panic!("{id} restored {other:?}"),
                        }
                    }
                }
                // The numbers to compare with from here on are the
                // restored ones.
                for id in GROUPS {
                    match self.coord.group(id) {
                        Some(g) => {
                            self.generations.insert(id.to_string(), g.generation());
                        }
                        None => {
                            self.generations.remove(id);
                        }
                    }
                }
            }
        }
        self.finish(out);
        self.check();
    }

    fn joined(&mut self, client: usize, group: usize, result: &JoinResult) {
        let entry = self.members.entry((client, group)).or_default();
        let joined = match result {
            Ok(joined) => joined,
            Err(refused) => {
                if refused.error == ErrorCode::MemberIdRequired {
                    entry.member_id = refused.member_id.clone();
                }
                return;
            }
        };
        entry.member_id = joined.member_id.clone();
        entry.generation = joined.generation;
        entry.protocol_type = joined.protocol_type.clone().unwrap_or_default();
        entry.leader_of = if joined.leader == joined.member_id {
            assert!(
                joined
                    .members
                    .iter()
                    .any(|m| m.member_id == joined.member_id),
                "the leader is not among the members it is told of"
            );
            joined.members.iter().map(|m| m.member_id.clone()).collect()
        } else {
            assert!(joined.members.is_empty(), "a follower was told the members");
            Vec::new()
        };
    }

    /// Answers parked requests and writes slot ops, as the driver does.
    fn finish(&mut self, out: Output) {
        for effect in out.effects {
            let waiter = match &effect {
                Effect::Join { waiter, .. } | Effect::Sync { waiter, .. } => *waiter,
            };
            let parked = self
                .parked
                .remove(&waiter)
                .unwrap_or_else(|| panic!("answer for waiter {waiter}, which is not parked"));
            match (effect, parked) {
                (Effect::Join { result, .. }, Parked::Join { client, group }) => {
                    self.joined(client, group, &result)
                }
                (Effect::Sync { .. }, Parked::Sync) => {}
                (effect, parked) => panic!("{effect:?} answers a parked {parked:?}"),
            }
        }
        for (slot, op) in out.ops {
            assert_eq!(slot, coordinator_slot(op.group()), "op for the wrong slot");
            if let SlotOp::Expire { group, offsets } = &op {
                for (_, partition, entry) in offsets {
                    let key = (group.clone(), *partition);
                    if self.committed.get(&key) == Some(&entry.offset) {
                        self.committed.remove(&key);
                    }
                }
            }
            let state = self
                .slots
                .entry(slot)
                .or_insert_with(|| SlotState::new(slot, 0));
            state.apply(&op);
            let bytes = state.encode().expect("a slot state encodes");
            let written = SlotState::decode(&bytes, slot).expect("our own slot file parses");
            assert_eq!(&written, state, "slot file round trip");
            self.coord.install_slot(written, self.now_ms);
        }
        // A stored generation's SyncGroups wait to hear that its write
        // ended, as the driver reports once the slot's round is durable;
        // here every write succeeds at once.
        for stored in out.stored {
            let mut reported = Output::default();
            self.coord.stable_written(
                &stored.group,
                stored.generation,
                Ok(()),
                self.now_ms,
                &mut reported,
            );
            self.finish(reported);
        }
    }

    fn check(&mut self) {
        for id in GROUPS {
            let Some(g) = self.coord.group(id) else {
                self.generations.remove(id);
                continue;
            };
            if let Some(before) = self.generations.insert(id.to_string(), g.generation()) {
                assert!(
                    g.generation() >= before,
                    "generation of {id} went from {before} to {}",
                    g.generation()
                );
            }
            let members = g.members().count();
            match g.state() {
                GroupState::Empty => assert_eq!(members, 0, "an Empty group has members"),
                GroupState::CompletingRebalance | GroupState::Stable => {
                    let leader = g
                        .leader()
                        .expect("a group past the join phase has a leader");
                    assert!(g.member(leader).is_some(), "the leader is not a member");
                }
                _ => {}
            }
            let _ = self.coord.describe_group(id);
        }
        let listed = self.coord.list_groups(&[], &[]);
        assert!(listed.iter().all(|l| l.state != GroupState::Dead));
        for ((group, partition), offset) in &self.committed {
            let fetched = self.coord.fetch_offsets(
                group,
                Some(&[(TOPIC.to_string(), vec![*partition])]),
                false,
            );
            let got = fetched
                .first()
                .and_then(|(_, parts)| parts.first())
                .and_then(|f| f.committed.as_ref().ok())
                .and_then(|c| c.as_ref())
                .map(|c| c.offset);
            assert_eq!(
                got,
                Some(*offset),
                "committed offset of {group}/{partition} not fetched"
            );
        }
    }

    /// Lets time pass every deadline: nothing may stay parked.
    pub fn drain(&mut self) {
        for _ in 0..64 {
            let Some(d) = self.coord.next_deadline_ms() else {
                break;
            };
            self.now_ms = self.now_ms.max(d);
            let mut out = Output::default();
            self.coord.tick(self.now_ms, &mut out);
            self.finish(out);
            self.check();
        }
        assert!(
            self.parked.is_empty(),
            "requests parked forever: {:?}",
            self.parked
        );
    }
}

pub fn run(ops: &[GroupOp]) {
    let mut m = Machine::new();
    for op in ops {
        m.apply(op);
    }
    m.drain();
}
