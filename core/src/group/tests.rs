//! Specifications of the group rules, one test per rule, plus a property
//! test of the membership machine against a small model of its clients.

use super::classic::{
    member_id_for, Effect, JoinRequest, JoinResult, JoinedGroup, SyncRequest, SyncResult, Waiter,
};
use super::coordinator::{
    CommitOffset, CommitRequest, Coordinator, FetchedOffset, Output, StoredGeneration,
};
use super::member::Protocol;
use super::offsets::OffsetEntry;
use super::slot::{GroupMeta, SlotFileError, SlotOp, SlotState};
use super::state::GroupState;
use super::GroupConfig;
use crate::cluster::coordinator_slot;
use crate::protocol::messages::ConsumerProtocolSubscription;
use crate::protocol::{ErrorCode, Writer};
use bytes::{Bytes, BytesMut};
use std::collections::{BTreeMap, BTreeSet};

const G: &str = "g";
const SESSION: i32 = 10_000;
const REBALANCE: i32 = 30_000;
const DELAY: i64 = 3_000;

fn subscription(topics: &[&str]) -> Bytes {
    let sub = ConsumerProtocolSubscription {
        topics: topics.iter().map(|t| t.to_string()).collect(),
        ..Default::default()
    };
    let mut buf = BytesMut::new();
    let mut w = Writer::new(&mut buf);
    w.i16(1);
    sub.encode(&mut w, 1).expect("encodes");
    buf.freeze()
}

/// A fetched partition's committed offset, -1 if there is none (as the
/// wire says it).
fn offset(f: &FetchedOffset) -> i64 {
    match &f.committed {
        Ok(Some(c)) => c.offset,
        Ok(None) => -1,
        Err(e) => panic!("partition {} not told: {e:?}", f.partition),
    }
}

fn range(topics: &[&str]) -> Vec<Protocol> {
    vec![Protocol {
        name: "range".into(),
        metadata: subscription(topics),
    }]
}

/// A parked request's answer.
#[derive(Debug, Clone)]
enum Answer {
    Join(JoinResult),
    Sync(SyncResult),
}

/// Drives a Coordinator the way the net driver does: hands out waiter
/// tokens, collects answers to parked requests, and "writes" slot ops
/// (installing them) unless told to hold them back.
struct H {
    c: Coordinator,
    now: i64,
    next_waiter: Waiter,
    answers: BTreeMap<Waiter, Answer>,
    hold_writes: bool,
    held: Vec<(u32, SlotOp)>,
    /// Generations in `held` whose write outcome the core waits for.
    stored: Vec<StoredGeneration>,
    uuid: u64,
    session_ms: i32,
    rebalance_ms: i32,
}

impl H {
    fn new() -> H {
        H::with(GroupConfig {
            initial_rebalance_delay_ms: DELAY,
            ..GroupConfig::default()
        })
    }

    fn with(cfg: GroupConfig) -> H {
        H {
            c: Coordinator::new(cfg, 0),
            now: 1_000_000,
            next_waiter: 1,
            answers: BTreeMap::new(),
            hold_writes: false,
            held: Vec::new(),
            stored: Vec::new(),
            uuid: 0,
            session_ms: SESSION,
            rebalance_ms: REBALANCE,
        }
    }

    fn finish(&mut self, out: Output) {
        for e in out.effects {
            match e {
                Effect::Join { waiter, result } => {
                    assert!(
                        self.answers.insert(waiter, Answer::Join(result)).is_none(),
                        "answered twice"
                    );
                }
                Effect::Sync { waiter, result } => {
                    assert!(
                        self.answers.insert(waiter, Answer::Sync(result)).is_none(),
                        "answered twice"
                    );
                }
            }
        }
        self.held.extend(out.ops);
        self.stored.extend(out.stored);
        if !self.hold_writes {
            self.write();
        }
    }

    /// Writes every held op, one batch per slot, like the slot writer.
    fn write(&mut self) {
        let mut by_slot: BTreeMap<u32, Vec<SlotOp>> = BTreeMap::new();
        for (slot, op) in self.held.drain(..) {
            by_slot.entry(slot).or_default().push(op);
        }
        for (slot, ops) in by_slot {
            let mut next = self.c.slot(slot).expect("slot").clone();
            for op in &ops {
                next.apply(op);
            }
            next.version += 1;
            // What would be written must read back the same.
            let bytes = next.encode().expect("encodes");
            assert_eq!(SlotState::decode(&bytes, slot).expect("decodes"), next);
            self.c.install_slot(next, self.now);
        }
        self.report_stored(Ok(()));
    }

    /// Tells the core how the writes of its queued generations ended.
    fn report_stored(&mut self, outcome: Result<(), ErrorCode>) {
        for s in std::mem::take(&mut self.stored) {
            let mut out = Output::default();
            self.c
                .stable_written(&s.group, s.generation, outcome, self.now, &mut out);
            self.finish(out);
        }
    }

    /// A restart: a fresh coordinator loads every slot as written.
    fn restart(&mut self) {
        let mut c = Coordinator::new(self.c.config().clone(), 0);
        for slot in 0..crate::cluster::COORDINATOR_SLOTS {
            let state = self.c.slot(slot).expect("slot").clone();
            c.install_slot(state, self.now);
        }
        self.c = c;
        self.answers.clear();
    }

    /// The held writes fail: nothing reaches the slot, and the core hears it.
    fn fail_writes(&mut self) {
        self.held.clear();
        self.report_stored(Err(ErrorCode::NotCoordinator));
    }

    fn waiter(&mut self) -> Waiter {
        self.next_waiter += 1;
        self.next_waiter
    }

    fn join_req(
        &mut self,
        member_id: &str,
        instance: Option<&str>,
        protocols: Vec<Protocol>,
        version: i16,
    ) -> JoinRequest {
        self.uuid += 1;
        JoinRequest {
            member_id: member_id.into(),
            instance_id: instance.map(str::to_string),
            client_id: "client".into(),
            client_host: "/127.0.0.1".into(),
            session_timeout_ms: self.session_ms,
            rebalance_timeout_ms: self.rebalance_ms,
            protocol_type: "consumer".into(),
            protocols,
            require_known_member_id: version >= 4 && instance.is_none(),
            supports_skip_assignment: version >= 9,
            unique_suffix: format!("u{}", self.uuid),
        }
    }

    /// JoinGroup: Ok(answer) or Err(waiter) if parked.
    fn join_with(&mut self, req: JoinRequest) -> Result<JoinResult, Waiter> {
        let w = self.waiter();
        let mut out = Output::default();
        let r = self.c.join(G, req, w, self.now, &mut out);
        self.finish(out);
        r.ok_or(w)
    }

    fn join(
        &mut self,
        member_id: &str,
        instance: Option<&str>,
        topics: &[&str],
    ) -> Result<JoinResult, Waiter> {
        let req = self.join_req(member_id, instance, range(topics), 9);
        self.join_with(req)
    }

    /// A dynamic member's full first join (v4+): MEMBER_ID_REQUIRED, then
    /// the parked real join. Returns (member id, waiter).
    fn join_new(&mut self, topics: &[&str]) -> (String, Waiter) {
        let first = self
            .join("", None, topics)
            .expect("answered at once")
            .expect_err("refused");
        assert_eq!(first.error, ErrorCode::MemberIdRequired);
        let id = first.member_id;
        let w = self.join(&id, None, topics).expect_err("parked");
        (id, w)
    }

    /// A group of one static member (v9), assigned "A": its JoinGroup answer.
    fn stable_static_member(&mut self, instance: &str) -> JoinedGroup {
        let w = self.join("", Some(instance), &["t"]).expect_err("parked");
        self.advance_until_answered(w, REBALANCE as i64);
        let r = self.join_answer(w).expect("answered").expect("joined");
        let s = self
            .sync(&r.member_id, r.generation, &[(&r.member_id, b"A")])
            .expect_err("parked");
        self.sync_answer(s).expect("answered").expect("synced");
        r
    }

    /// Two new members join one generation: their JoinGroup answers.
    fn two_joined(&mut self, topics_a: &[&str], topics_b: &[&str]) -> (JoinedGroup, JoinedGroup) {
        let (_, wa) = self.join_new(topics_a);
        let (_, wb) = self.join_new(topics_b);
        self.advance_until_answered(wa, REBALANCE as i64);
        let ra = self.join_answer(wa).expect("a").expect("joined");
        let rb = self.join_answer(wb).expect("b").expect("joined");
        (ra, rb)
    }

    fn sync_with(&mut self, req: SyncRequest) -> Result<SyncResult, Waiter> {
        let w = self.waiter();
        let mut out = Output::default();
        let r = self.c.sync(G, req, w, &mut out);
        self.finish(out);
        r.ok_or(w)
    }

    fn sync(
        &mut self,
        member: &str,
        generation: i32,
        assignments: &[(&str, &[u8])],
    ) -> Result<SyncResult, Waiter> {
        self.sync_with(SyncRequest {
            member_id: member.into(),
            instance_id: None,
            generation,
            protocol_type: Some("consumer".into()),
            protocol_name: Some("range".into()),
            assignments: assignments
                .iter()
                .map(|(m, a)| (m.to_string(), Bytes::copy_from_slice(a)))
                .collect(),
        })
    }

    fn heartbeat(
        &mut self,
        member: &str,
        instance: Option<&str>,
        generation: i32,
    ) -> Result<(), ErrorCode> {
        let mut out = Output::default();
        let e = self
            .c
            .heartbeat(G, member, instance, generation, self.now, &mut out);
        self.finish(out);
        e
    }

    fn leave(
        &mut self,
        members: &[(&str, Option<&str>)],
    ) -> Result<Vec<Result<(), ErrorCode>>, ErrorCode> {
        let leaving: Vec<(String, Option<String>)> = members
            .iter()
            .map(|(m, i)| (m.to_string(), i.map(str::to_string)))
            .collect();
        let mut out = Output::default();
        let r = self.c.leave(G, &leaving, self.now, &mut out);
        self.finish(out);
        r
    }

    fn advance(&mut self, ms: i64) {
        self.now += ms;
        let mut out = Output::default();
        self.c.tick(self.now, &mut out);
        self.finish(out);
    }

    /// Advances time in steps so every deadline on the way fires in order.
    fn advance_by_steps(&mut self, ms: i64) {
        let end = self.now + ms;
        while let Some(d) = self.c.next_deadline_ms().filter(|d| *d <= end) {
            let step = (d - self.now).max(0);
            self.advance(step);
        }
        let rest = end - self.now;
        self.advance(rest);
    }

    /// Fires deadlines one at a time until `w` is answered (at most `max_ms`).
    fn advance_until_answered(&mut self, w: Waiter, max_ms: i64) {
        let end = self.now + max_ms;
        while !self.answers.contains_key(&w) {
            match self.c.next_deadline_ms().filter(|d| *d <= end) {
                Some(d) => {
                    let step = (d - self.now).max(0);
                    self.advance(step);
                }
                None => return,
            }
        }
    }

    fn join_answer(&mut self, w: Waiter) -> Option<JoinResult> {
        match self.answers.remove(&w) {
            Some(Answer::Join(r)) => Some(r),
            Some(other) => panic!("waiter {w} got {other:?}"),
            None => None,
        }
    }

    fn sync_answer(&mut self, w: Waiter) -> Option<SyncResult> {
        match self.answers.remove(&w) {
            Some(Answer::Sync(r)) => Some(r),
            Some(other) => panic!("waiter {w} got {other:?}"),
            None => None,
        }
    }

    fn state(&self) -> GroupState {
        self.c
            .group(G)
            .map(|g| g.state())
            .unwrap_or(GroupState::Dead)
    }

    fn generation(&self) -> i32 {
        self.c.group(G).map(|g| g.generation()).unwrap_or(-1)
    }

    fn commit(
        &mut self,
        member: &str,
        generation: i32,
        offsets: &[(&str, i32, i64)],
    ) -> Result<Vec<Result<(), ErrorCode>>, ErrorCode> {
        self.commit_req(CommitRequest {
            group_id: G.into(),
            member_id: member.into(),
            instance_id: None,
            generation,
            retention_time_ms: -1,
            missing_group_is_not_found: false,
            offsets: offsets
                .iter()
                .map(|(t, p, o)| CommitOffset {
                    topic: t.to_string(),
                    partition: *p,
                    offset: *o,
                    leader_epoch: -1,
                    metadata: None,
                })
                .collect(),
        })
    }

    fn commit_req(&mut self, req: CommitRequest) -> Result<Vec<Result<(), ErrorCode>>, ErrorCode> {
        let mut out = Output::default();
        let r = self.c.commit_offsets(&req, self.now, &mut out);
        self.finish(out);
        r
    }

    fn committed(&self, topic: &str, partition: i32) -> i64 {
        let fetched = self
            .c
            .fetch_offsets(G, Some(&[(topic.to_string(), vec![partition])]), false);
        offset(&fetched[0].1[0])
    }

    fn expire(&mut self) {
        let mut out = Output::default();
        self.c.expire_offsets(self.now, &mut out);
        self.finish(out);
    }

    /// Forms a stable group of `n` dynamic members: returns their ids (the
    /// first is the leader) and the generation.
    fn stable_group(&mut self, n: usize, topics: &[&str]) -> (Vec<String>, i32) {
        let mut ids = Vec::new();
        let mut waiters = Vec::new();
        for _ in 0..n {
            let (id, w) = self.join_new(topics);
            ids.push(id);
            waiters.push(w);
        }
        self.advance_until_answered(waiters[0], REBALANCE as i64);
        let mut leader = String::new();
        let mut generation = -1;
        for w in &waiters {
            let r = self
                .join_answer(*w)
                .expect("join completed")
                .expect("joined");
            leader = r.leader.clone();
            generation = r.generation;
        }
        ids.sort_by_key(|id| id != &leader);
        let assignment: Vec<(String, Vec<u8>)> = ids
            .iter()
            .map(|id| (id.clone(), id.as_bytes().to_vec()))
            .collect();
        let refs: Vec<(&str, &[u8])> = assignment
            .iter()
            .map(|(m, a)| (m.as_str(), a.as_slice()))
            .collect();
        let followers: Vec<Waiter> = ids[1..]
            .iter()
            .map(|id| self.sync(id, generation, &[]).expect_err("parked"))
            .collect();
        let mine = self.sync(&ids[0], generation, &refs).expect_err("parked");
        self.sync_answer(mine)
            .expect("leader answered")
            .expect("leader synced");
        for w in followers {
            self.sync_answer(w)
                .expect("follower answered")
                .expect("follower synced");
        }
        assert_eq!(self.state(), GroupState::Stable);
        (ids, generation)
    }
}

// ---------------------------------------------------------------- membership

#[test]
fn member_id_is_instance_or_client_id_plus_unique_suffix() {
    assert_eq!(member_id_for("rdkafka", None, "abc"), "rdkafka-abc");
    assert_eq!(
        member_id_for("rdkafka", Some("inst-1"), "abc"),
        "inst-1-abc"
    );
}

#[test]
fn join_with_empty_group_id_is_invalid_group_id() {
    let mut h = H::new();
    let req = h.join_req("", None, range(&["t"]), 9);
    let mut out = Output::default();
    let r =
        h.c.join("", req, 1, h.now, &mut out)
            .expect("answered")
            .expect_err("refused");
    assert_eq!(r.error, ErrorCode::InvalidGroupId);
}

#[test]
fn session_timeout_outside_broker_bounds_is_invalid_session_timeout() {
    let mut h = H::new();
    let mut req = h.join_req("", None, range(&["t"]), 9);
    req.session_timeout_ms = 1_000;
    assert_eq!(
        h.join_with(req.clone())
            .expect("answered")
            .expect_err("refused")
            .error,
        ErrorCode::InvalidSessionTimeout
    );
    req.session_timeout_ms = 1_800_001;
    assert_eq!(
        h.join_with(req)
            .expect("answered")
            .expect_err("refused")
            .error,
        ErrorCode::InvalidSessionTimeout
    );
}

#[test]
fn first_join_without_member_id_is_member_id_required_from_v4() {
    let mut h = H::new();
    let r = h
        .join("", None, &["t"])
        .expect("answered at once")
        .expect_err("refused");
    assert_eq!(r.error, ErrorCode::MemberIdRequired);
    assert!(r.member_id.starts_with("client-"));
    assert!(h
        .c
        .group(G)
        .expect("group")
        .has_pending_member(&r.member_id));
    // Before v4 the member is added straight away.
    let req = h.join_req("", None, range(&["t"]), 3);
    assert!(h.join_with(req).is_err(), "parked in the join phase");
    assert_eq!(h.c.group(G).expect("group").members().count(), 1);
}

#[test]
fn join_with_unknown_member_id_is_unknown_member_id() {
    let mut h = H::new();
    assert_eq!(
        h.join("nobody", None, &["t"])
            .expect("answered")
            .expect_err("refused")
            .error,
        ErrorCode::UnknownMemberId
    );
    h.stable_group(1, &["t"]);
    assert_eq!(
        h.join("nobody", None, &["t"])
            .expect("answered")
            .expect_err("refused")
            .error,
        ErrorCode::UnknownMemberId
    );
}

#[test]
fn pending_member_id_expires_after_session_timeout() {
    let mut h = H::new();
    let r = h
        .join("", None, &["t"])
        .expect("answered")
        .expect_err("member id required");
    h.advance(SESSION as i64);
    assert!(!h
        .c
        .group(G)
        .expect("group")
        .has_pending_member(&r.member_id));
    assert_eq!(
        h.join(&r.member_id, None, &["t"])
            .expect("answered")
            .expect_err("refused")
            .error,
        ErrorCode::UnknownMemberId
    );
}

#[test]
fn initial_rebalance_waits_the_delay_before_completing() {
    let mut h = H::new();
    let (_, w) = h.join_new(&["t"]);
    assert_eq!(h.state(), GroupState::PreparingRebalance);
    h.advance(DELAY - 1);
    assert!(
        h.join_answer(w).is_none(),
        "the first rebalance waits out the delay"
    );
    h.advance(1);
    let r = h
        .join_answer(w)
        .expect("completed after the delay")
        .expect("joined");
    assert_eq!(r.generation, 1);
    assert_eq!(h.state(), GroupState::CompletingRebalance);
}

#[test]
fn initial_rebalance_delay_extends_while_new_members_arrive() {
    let mut h = H::new();
    let (_, w1) = h.join_new(&["t"]);
    h.advance(DELAY - 100);
    let (_, w2) = h.join_new(&["t"]);
    h.advance(100);
    assert!(
        h.join_answer(w1).is_none(),
        "a member arrived during the delay: wait again"
    );
    h.advance(DELAY);
    let r1 = h.join_answer(w1).expect("completed").expect("joined");
    let r2 = h.join_answer(w2).expect("completed").expect("joined");
    assert_eq!((r1.generation, r2.generation), (1, 1));
}

#[test]
fn leader_receives_every_members_metadata_followers_none() {
    let mut h = H::new();
    let (ra, rb) = h.two_joined(&["t1"], &["t2"]);
    let (a, b) = (ra.member_id.clone(), rb.member_id.clone());
    assert_eq!(ra.leader, rb.leader);
    let (leader, follower) = if ra.leader == a { (ra, rb) } else { (rb, ra) };
    assert_eq!(leader.leader, leader.member_id);
    let ids: BTreeSet<String> = leader.members.iter().map(|m| m.member_id.clone()).collect();
    assert_eq!(ids, BTreeSet::from([a, b]));
    assert!(leader.members.iter().all(|m| !m.metadata.is_empty()));
    assert!(follower.members.is_empty());
    assert_eq!(leader.protocol_name.as_deref(), Some("range"));
}

#[test]
fn join_response_is_held_until_every_known_member_rejoins() {
    let mut h = H::new();
    let (ids, gen1) = h.stable_group(2, &["t"]);
    // The leader rejoining starts a rebalance; it waits for the follower.
    let wl = h.join(&ids[0], None, &["t"]).expect_err("parked");
    assert_eq!(h.state(), GroupState::PreparingRebalance);
    h.advance(5_000);
    assert!(h.join_answer(wl).is_none());
    assert_eq!(
        h.heartbeat(&ids[1], None, gen1),
        Err(ErrorCode::RebalanceInProgress)
    );
    let wf = h
        .join(&ids[1], None, &["t"])
        .expect_err("parked until complete");
    // The follower was the last one: both answers come with its join.
    let rl = h.join_answer(wl).expect("leader answered").expect("joined");
    let rf = h
        .join_answer(wf)
        .expect("follower answered")
        .expect("joined");
    assert_eq!((rl.generation, rf.generation), (gen1 + 1, gen1 + 1));
}

#[test]
fn members_that_do_not_rejoin_within_the_rebalance_timeout_are_removed() {
    let mut h = H::new();
    let (ids, gen1) = h.stable_group(2, &["t"]);
    let wl = h.join(&ids[0], None, &["t"]).expect_err("parked");
    // The follower keeps heartbeating (so its session lives) but never rejoins.
    for _ in 0..(REBALANCE / 5_000) {
        h.advance(5_000);
        let _ = h.heartbeat(&ids[1], None, gen1);
    }
    let r = h
        .join_answer(wl)
        .expect("completed at the rebalance timeout")
        .expect("joined");
    assert_eq!(r.members.len(), 1);
    assert!(h.c.group(G).expect("group").member(&ids[1]).is_none());
    assert_eq!(
        h.heartbeat(&ids[1], None, gen1),
        Err(ErrorCode::UnknownMemberId)
    );
}

#[test]
fn sync_group_distributes_the_leaders_assignment() {
    let mut h = H::new();
    let (a, wa) = h.join_new(&["t"]);
    let (b, wb) = h.join_new(&["t"]);
    h.advance_until_answered(wa, REBALANCE as i64);
    let ra = h.join_answer(wa).expect("a").expect("joined");
    h.join_answer(wb).expect("b").expect("joined");
    let (leader, follower) = if ra.leader == a { (a, b) } else { (b, a) };
    let generation = ra.generation;
    let wf = h
        .sync(&follower, generation, &[])
        .expect_err("waits for the leader");
    assert_eq!(h.state(), GroupState::CompletingRebalance);
    let wl = h
        .sync(&leader, generation, &[(&leader, b"L"), (&follower, b"F")])
        .expect_err("answered by effect");
    assert_eq!(
        h.sync_answer(wl)
            .expect("leader")
            .expect("synced")
            .assignment,
        Bytes::from_static(b"L")
    );
    let sf = h.sync_answer(wf).expect("follower").expect("synced");
    assert_eq!(sf.assignment, Bytes::from_static(b"F"));
    assert_eq!(sf.protocol_name.as_deref(), Some("range"));
    assert_eq!(h.state(), GroupState::Stable);
    // A late SyncGroup in Stable gets the stored assignment.
    assert_eq!(
        h.sync(&follower, generation, &[])
            .expect("immediate")
            .expect("synced")
            .assignment,
        Bytes::from_static(b"F")
    );
}

#[test]
fn sync_with_another_protocol_is_inconsistent_group_protocol() {
    let mut h = H::new();
    let (ids, generation) = h.stable_group(1, &["t"]);
    let r = h
        .sync_with(SyncRequest {
            member_id: ids[0].clone(),
            instance_id: None,
            generation,
            protocol_type: Some("consumer".into()),
            protocol_name: Some("roundrobin".into()),
            assignments: vec![],
        })
        .expect("answered");
    assert_eq!(r, Err(ErrorCode::InconsistentGroupProtocol));
}

#[test]
fn sync_with_stale_generation_is_illegal_generation() {
    let mut h = H::new();
    let (ids, generation) = h.stable_group(1, &["t"]);
    assert_eq!(
        h.sync(&ids[0], generation - 1, &[]).expect("answered"),
        Err(ErrorCode::IllegalGeneration)
    );
}

#[test]
fn join_with_a_protocol_nobody_supports_is_inconsistent_group_protocol() {
    let mut h = H::new();
    h.stable_group(1, &["t"]);
    let other = vec![Protocol {
        name: "sticky".into(),
        metadata: subscription(&["t"]),
    }];
    let req = h.join_req("", None, other, 9);
    assert_eq!(
        h.join_with(req)
            .expect("answered")
            .expect_err("refused")
            .error,
        ErrorCode::InconsistentGroupProtocol
    );
    let mut req = h.join_req("", None, range(&["t"]), 9);
    req.protocol_type = "connect".into();
    assert_eq!(
        h.join_with(req)
            .expect("answered")
            .expect_err("refused")
            .error,
        ErrorCode::InconsistentGroupProtocol
    );
}

#[test]
fn heartbeat_during_rebalance_is_rebalance_in_progress() {
    let mut h = H::new();
    let (ids, generation) = h.stable_group(2, &["t"]);
    assert_eq!(h.heartbeat(&ids[1], None, generation), Ok(()));
    let _ = h.join(&ids[0], None, &["t"]).expect_err("parked");
    assert_eq!(
        h.heartbeat(&ids[1], None, generation),
        Err(ErrorCode::RebalanceInProgress)
    );
}

#[test]
fn heartbeat_with_stale_generation_is_illegal_generation() {
    let mut h = H::new();
    let (ids, generation) = h.stable_group(1, &["t"]);
    assert_eq!(
        h.heartbeat(&ids[0], None, generation - 1),
        Err(ErrorCode::IllegalGeneration)
    );
}

#[test]
fn heartbeat_from_unknown_member_is_unknown_member_id() {
    let mut h = H::new();
    assert_eq!(h.heartbeat("x", None, 1), Err(ErrorCode::UnknownMemberId));
    let (_, generation) = h.stable_group(1, &["t"]);
    assert_eq!(
        h.heartbeat("x", None, generation),
        Err(ErrorCode::UnknownMemberId)
    );
}

#[test]
fn session_timeout_expiry_removes_the_member_and_rebalances() {
    let mut h = H::new();
    let (ids, generation) = h.stable_group(2, &["t"]);
    h.advance(SESSION as i64 / 2);
    assert_eq!(h.heartbeat(&ids[0], None, generation), Ok(()));
    h.advance(SESSION as i64 / 2);
    // ids[1] never heartbeated: gone, and the group rebalances.
    assert!(h.c.group(G).expect("group").member(&ids[1]).is_none());
    assert_eq!(
        h.heartbeat(&ids[0], None, generation),
        Err(ErrorCode::RebalanceInProgress)
    );
    let w = h.join(&ids[0], None, &["t"]).expect_err("parked");
    let r = h
        .join_answer(w)
        .expect("only member rejoined: done at once")
        .expect("joined");
    assert_eq!(r.generation, generation + 1);
    assert_eq!(r.members.len(), 1);
}

#[test]
fn last_member_leaving_makes_the_group_empty_with_a_new_generation() {
    let mut h = H::new();
    let (ids, generation) = h.stable_group(1, &["t"]);
    assert_eq!(h.leave(&[(&ids[0], None)]), Ok(vec![Ok(())]));
    assert_eq!(h.state(), GroupState::Empty);
    assert_eq!(h.generation(), generation + 1);
}

#[test]
fn leave_group_removes_a_batch_of_members_and_reports_each() {
    let mut h = H::new();
    let (ids, _) = h.stable_group(3, &["t"]);
    let r = h
        .leave(&[(&ids[1], None), ("ghost", None), (&ids[2], None)])
        .expect("group exists");
    assert_eq!(r, vec![Ok(()), Err(ErrorCode::UnknownMemberId), Ok(())]);
    assert_eq!(h.state(), GroupState::PreparingRebalance);
    assert_eq!(
        h.leave(&[("x", None)]).expect("answered"),
        vec![Err(ErrorCode::UnknownMemberId)]
    );
}

#[test]
fn static_member_rejoin_replaces_old_member_without_rebalance() {
    let mut h = H::new();
    let req = h.join_req("", Some("inst-a"), range(&["t"]), 5);
    let wa = h
        .join_with(req)
        .expect_err("static members join without MEMBER_ID_REQUIRED");
    h.advance_until_answered(wa, REBALANCE as i64);
    let ra = h.join_answer(wa).expect("answered").expect("joined");
    let old_id = ra.member_id.clone();
    assert!(old_id.starts_with("inst-a-"));
    let generation = ra.generation;
    let ws = h
        .sync(&old_id, generation, &[(&old_id, b"A")])
        .expect_err("parked");
    assert_eq!(
        h.sync_answer(ws)
            .expect("answered")
            .expect("synced")
            .assignment,
        Bytes::from_static(b"A")
    );
    // The instance restarts and rejoins without its member id.
    let req = h.join_req("", Some("inst-a"), range(&["t"]), 5);
    let r = h
        .join_with(req)
        .expect("answered at once: no rebalance")
        .expect("joined");
    assert_eq!(r.generation, generation, "same generation");
    assert_ne!(r.member_id, old_id);
    assert_eq!(
        r.leader, old_id,
        "told the old leader id, so it does not reassign"
    );
    assert_eq!(h.state(), GroupState::Stable);
    // It keeps its assignment; the old incarnation is fenced.
    let s = h.sync_with(SyncRequest {
        member_id: r.member_id.clone(),
        instance_id: Some("inst-a".into()),
        generation,
        protocol_type: None,
        protocol_name: None,
        assignments: vec![],
    });
    assert_eq!(
        s.expect("stable").expect("synced").assignment,
        Bytes::from_static(b"A")
    );
    assert_eq!(
        h.heartbeat(&old_id, Some("inst-a"), generation),
        Err(ErrorCode::FencedInstanceId)
    );
    assert_eq!(
        h.heartbeat(&r.member_id, Some("inst-a"), generation),
        Ok(())
    );
}

#[test]
fn static_member_rejoin_fences_a_parked_old_incarnation() {
    let mut h = H::new();
    let req = h.join_req("", Some("inst-a"), range(&["t"]), 5);
    let old = h.join_with(req).expect_err("parked");
    let req = h.join_req("", Some("inst-a"), range(&["t"]), 5);
    let new = h.join_with(req).expect_err("parked: initial rebalance");
    let fenced = h
        .join_answer(old)
        .expect("old one answered at once")
        .expect_err("fenced");
    assert_eq!(fenced.error, ErrorCode::FencedInstanceId);
    h.advance_until_answered(new, REBALANCE as i64);
    h.join_answer(new).expect("answered").expect("joined");
}

#[test]
fn static_leader_rejoin_from_v9_learns_it_leads_but_skips_assignment() {
    let mut h = H::new();
    h.stable_static_member("inst-a");
    let req = h.join_req("", Some("inst-a"), range(&["t"]), 9);
    let again = h.join_with(req).expect("no rebalance").expect("joined");
    assert_eq!(again.leader, again.member_id);
    assert!(again.skip_assignment);
    assert_eq!(again.members.len(), 1);
    assert_eq!(h.state(), GroupState::Stable);
}

#[test]
fn static_member_rejoin_with_a_different_protocol_rebalances() {
    let mut h = H::new();
    let req = h.join_req("", Some("inst-a"), range(&["t"]), 5);
    let w = h.join_with(req).expect_err("parked");
    h.advance_until_answered(w, REBALANCE as i64);
    let r = h.join_answer(w).expect("answered").expect("joined");
    let s = h.sync(&r.member_id, r.generation, &[]).expect_err("parked");
    h.sync_answer(s).expect("answered").expect("synced");
    // It now prefers another assignor (still supporting the current one,
    // or the group would refuse it as inconsistent).
    let mut other = vec![Protocol {
        name: "roundrobin".into(),
        metadata: subscription(&["t"]),
    }];
    other.extend(range(&["t"]));
    let req = h.join_req("", Some("inst-a"), other, 5);
    let w = h.join_with(req).expect_err("protocol changes: rebalance");
    let r2 = h
        .join_answer(w)
        .expect("alone: completes at once")
        .expect("joined");
    assert_eq!(r2.generation, r.generation + 1);
    assert_eq!(r2.protocol_name.as_deref(), Some("roundrobin"));
}

#[test]
fn leave_by_instance_id_alone_removes_the_static_member() {
    let mut h = H::new();
    let req = h.join_req("", Some("inst-a"), range(&["t"]), 5);
    let w = h.join_with(req).expect_err("parked");
    h.advance_until_answered(w, REBALANCE as i64);
    h.join_answer(w).expect("answered").expect("joined");
    assert_eq!(h.leave(&[("", Some("inst-a"))]), Ok(vec![Ok(())]));
    assert_eq!(
        h.leave(&[("", Some("inst-a"))]),
        Ok(vec![Err(ErrorCode::UnknownMemberId)])
    );
    assert_eq!(h.c.group(G).expect("group").members().count(), 0);
}

#[test]
fn rejoin_of_a_follower_with_same_metadata_in_stable_returns_current_generation() {
    let mut h = H::new();
    let (ids, generation) = h.stable_group(2, &["t"]);
    let r = h
        .join(&ids[1], None, &["t"])
        .expect("answered at once")
        .expect("joined");
    assert_eq!(r.generation, generation);
    assert_eq!(h.state(), GroupState::Stable);
    // Changed metadata does rebalance.
    assert!(h.join(&ids[1], None, &["t", "u"]).is_err());
    assert_eq!(h.state(), GroupState::PreparingRebalance);
}

#[test]
fn members_that_never_sync_are_removed_after_the_rebalance_timeout() {
    let mut h = H::new();
    let (a, wa) = h.join_new(&["t"]);
    let (b, wb) = h.join_new(&["t"]);
    h.advance_until_answered(wa, REBALANCE as i64);
    let ra = h.join_answer(wa).expect("a").expect("joined");
    h.join_answer(wb).expect("b").expect("joined");
    let (leader, follower) = if ra.leader == a { (a, b) } else { (b, a) };
    let ws = h.sync(&leader, ra.generation, &[]).expect_err("parked");
    h.sync_answer(ws).expect("answered").expect("stable");
    // The follower never syncs (nor heartbeats beyond its session, but the
    // sync deadline is what fires first here).
    for _ in 0..(REBALANCE / 5_000) {
        h.advance(5_000);
        let _ = h.heartbeat(&leader, None, ra.generation);
        let _ = h.heartbeat(&follower, None, ra.generation);
    }
    assert!(h.c.group(G).expect("group").member(&follower).is_none());
    assert_eq!(h.state(), GroupState::PreparingRebalance);
}

#[test]
fn group_max_size_refuses_new_members() {
    let mut h = H::with(GroupConfig {
        max_size: 1,
        initial_rebalance_delay_ms: DELAY,
        ..GroupConfig::default()
    });
    let (ids, _) = h.stable_group(1, &["t"]);
    assert_eq!(
        h.join("", None, &["t"])
            .expect("answered")
            .expect_err("refused")
            .error,
        ErrorCode::GroupMaxSizeReached
    );
    // The member already in is not affected (its rejoin, as leader, rebalances).
    assert!(
        h.join(&ids[0], None, &["t"]).is_err(),
        "parked in the join phase"
    );
}

// ------------------------------------------------------------------- offsets

#[test]
fn offset_commit_with_stale_generation_is_illegal_generation() {
    let mut h = H::new();
    let (ids, generation) = h.stable_group(1, &["t"]);
    assert_eq!(
        h.commit(&ids[0], generation - 1, &[("t", 0, 5)]),
        Err(ErrorCode::IllegalGeneration)
    );
    assert_eq!(
        h.commit(&ids[0], generation, &[("t", 0, 5)]),
        Ok(vec![Ok(())])
    );
    assert_eq!(h.committed("t", 0), 5);
}

#[test]
fn offset_commit_from_unknown_member_is_unknown_member_id() {
    let mut h = H::new();
    let (_, generation) = h.stable_group(1, &["t"]);
    assert_eq!(
        h.commit("ghost", generation, &[("t", 0, 5)]),
        Err(ErrorCode::UnknownMemberId)
    );
}

#[test]
fn simple_commit_is_allowed_only_while_the_group_is_empty() {
    let mut h = H::new();
    // No group yet: generation -1 creates an offsets-only group.
    assert_eq!(h.commit("", -1, &[("t", 0, 7)]), Ok(vec![Ok(())]));
    assert_eq!(h.committed("t", 0), 7);
    assert_eq!(h.state(), GroupState::Empty);
    assert_eq!(h.c.group(G).expect("group").protocol_type(), None);
    h.stable_group(1, &["t"]);
    assert_eq!(
        h.commit("", -1, &[("t", 0, 8)]),
        Err(ErrorCode::UnknownMemberId)
    );
    assert_eq!(h.committed("t", 0), 7);
}

#[test]
fn offset_commit_with_a_generation_to_a_missing_group_depends_on_version() {
    let mut h = H::new();
    assert_eq!(
        h.commit("m", 3, &[("t", 0, 1)]),
        Err(ErrorCode::IllegalGeneration)
    );
    let mut req = CommitRequest {
        group_id: G.into(),
        member_id: "m".into(),
        instance_id: None,
        generation: 3,
        retention_time_ms: -1,
        missing_group_is_not_found: true,
        offsets: vec![],
    };
    assert_eq!(h.commit_req(req.clone()), Err(ErrorCode::GroupIdNotFound));
    req.generation = -1;
    req.member_id.clear();
    assert_eq!(h.commit_req(req), Ok(vec![]));
}

#[test]
fn offset_commit_during_completing_rebalance_is_rebalance_in_progress() {
    let mut h = H::new();
    let (_, w) = h.join_new(&["t"]);
    h.advance_until_answered(w, REBALANCE as i64);
    let r = h.join_answer(w).expect("answered").expect("joined");
    assert_eq!(h.state(), GroupState::CompletingRebalance);
    assert_eq!(
        h.commit(&r.member_id, r.generation, &[("t", 0, 1)]),
        Err(ErrorCode::RebalanceInProgress)
    );
}

#[test]
fn offset_commit_with_oversized_metadata_is_offset_metadata_too_large() {
    let mut h = H::new();
    let big = "x".repeat(4097);
    let r = h.commit_req(CommitRequest {
        group_id: G.into(),
        member_id: String::new(),
        instance_id: None,
        generation: -1,
        retention_time_ms: -1,
        missing_group_is_not_found: false,
        offsets: vec![
            CommitOffset {
                topic: "t".into(),
                partition: 0,
                offset: 1,
                leader_epoch: 3,
                metadata: Some(big),
            },
            CommitOffset {
                topic: "t".into(),
                partition: 1,
                offset: 2,
                leader_epoch: 3,
                metadata: Some("ok".into()),
            },
        ],
    });
    assert_eq!(r, Ok(vec![Err(ErrorCode::OffsetMetadataTooLarge), Ok(())]));
    assert_eq!(h.committed("t", 0), -1);
    let f = h.c.fetch_offsets(G, None, false);
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].1[0].partition, 1);
    let c = f[0].1[0]
        .committed
        .clone()
        .expect("told")
        .expect("committed");
    assert_eq!(c.leader_epoch, 3);
    assert_eq!(c.metadata, "ok");
}

#[test]
fn committed_offsets_are_visible_only_once_written() {
    let mut h = H::new();
    h.hold_writes = true;
    assert_eq!(h.commit("", -1, &[("t", 0, 9)]), Ok(vec![Ok(())]));
    assert_eq!(h.committed("t", 0), -1, "not durable yet");
    h.write();
    assert_eq!(h.committed("t", 0), 9);
}

#[test]
fn offset_fetch_of_a_missing_group_is_no_offset_not_an_error() {
    let h = H::new();
    let f =
        h.c.fetch_offsets("nope", Some(&[("t".into(), vec![0, 1])]), true);
    assert_eq!(
        f[0].1
            .iter()
            .map(|p| p.committed.clone())
            .collect::<Vec<_>>(),
        vec![Ok(None); 2]
    );
    assert!(h.c.fetch_offsets("nope", None, false).is_empty());
}

#[test]
fn offsets_of_an_empty_group_expire_retention_after_it_became_empty() {
    let retention = 60_000;
    let mut h = H::with(GroupConfig {
        offsets_retention_ms: retention,
        initial_rebalance_delay_ms: DELAY,
        ..GroupConfig::default()
    });
    let (ids, generation) = h.stable_group(1, &["t"]);
    assert_eq!(
        h.commit(&ids[0], generation, &[("t", 0, 5)]),
        Ok(vec![Ok(())])
    );
    // Long after the commit, but the group is still active: kept.
    for _ in 0..20 {
        h.advance(SESSION as i64 / 2);
        assert_eq!(h.heartbeat(&ids[0], None, generation), Ok(()));
    }
    h.expire();
    assert_eq!(h.committed("t", 0), 5);
    h.leave(&[(&ids[0], None)]).expect("left");
    assert_eq!(h.state(), GroupState::Empty);
    h.advance(retention - 1);
    h.expire();
    assert_eq!(
        h.committed("t", 0),
        5,
        "counted from when the group became empty"
    );
    h.advance(1);
    h.expire();
    assert_eq!(h.committed("t", 0), -1);
    assert!(
        h.c.group(G).is_none(),
        "an empty group without offsets is forgotten"
    );
}

#[test]
fn offsets_of_an_offsets_only_group_expire_retention_after_their_commit() {
    let mut h = H::with(GroupConfig {
        offsets_retention_ms: 1_000,
        ..GroupConfig::default()
    });
    h.commit("", -1, &[("t", 0, 1)]).expect("committed");
    h.advance(500);
    h.commit("", -1, &[("t", 1, 1)]).expect("committed");
    h.advance(500);
    h.expire();
    assert_eq!((h.committed("t", 0), h.committed("t", 1)), (-1, 1));
}

#[test]
fn stable_consumer_group_offsets_of_unsubscribed_topics_expire() {
    let mut h = H::with(GroupConfig {
        offsets_retention_ms: 1_000,
        initial_rebalance_delay_ms: DELAY,
        ..GroupConfig::default()
    });
    let (ids, generation) = h.stable_group(1, &["t"]);
    h.commit(&ids[0], generation, &[("t", 0, 1), ("old", 0, 1)])
        .expect("committed");
    h.advance(1_000);
    h.expire();
    assert_eq!((h.committed("t", 0), h.committed("old", 0)), (1, -1));
}

#[test]
fn explicit_retention_time_overrides_the_broker_retention() {
    let mut h = H::new();
    let r = h.commit_req(CommitRequest {
        group_id: G.into(),
        member_id: String::new(),
        instance_id: None,
        generation: -1,
        retention_time_ms: 100,
        missing_group_is_not_found: false,
        offsets: vec![CommitOffset {
            topic: "t".into(),
            partition: 0,
            offset: 1,
            leader_epoch: -1,
            metadata: None,
        }],
    });
    assert_eq!(r, Ok(vec![Ok(())]));
    h.advance(100);
    h.expire();
    assert_eq!(h.committed("t", 0), -1);
}

#[test]
fn expiry_spares_an_offset_committed_again_after_the_decision() {
    let mut h = H::with(GroupConfig {
        offsets_retention_ms: 1_000,
        ..GroupConfig::default()
    });
    h.commit("", -1, &[("t", 0, 1)]).expect("committed");
    h.advance(1_000);
    h.hold_writes = true;
    h.expire();
    h.commit("", -1, &[("t", 0, 2)]).expect("committed");
    h.write();
    assert_eq!(h.committed("t", 0), 2);
}

#[test]
fn delete_groups_refuses_a_group_with_members() {
    let mut h = H::new();
    h.stable_group(1, &["t"]);
    let mut out = Output::default();
    assert_eq!(
        h.c.delete_group(G, h.now, &mut out),
        Err(ErrorCode::NonEmptyGroup)
    );
    assert_eq!(
        h.c.delete_group("nope", h.now, &mut out),
        Err(ErrorCode::GroupIdNotFound)
    );
}

#[test]
fn delete_groups_removes_an_empty_group_and_its_offsets() {
    let mut h = H::new();
    h.commit("", -1, &[("t", 0, 1)]).expect("committed");
    let mut out = Output::default();
    assert_eq!(h.c.delete_group(G, h.now, &mut out), Ok(()));
    h.finish(out);
    assert!(h.c.group(G).is_none());
    assert!(h.c.record(G).is_none());
    assert!(h.c.list_groups(&[], &[]).is_empty());
}

#[test]
fn offset_delete_of_a_subscribed_topic_is_group_subscribed_to_topic() {
    let mut h = H::new();
    let (ids, generation) = h.stable_group(1, &["t"]);
    h.commit(&ids[0], generation, &[("t", 0, 1), ("u", 0, 1)])
        .expect("committed");
    let parts = vec![("t".to_string(), 0), ("u".to_string(), 0)];
    let mut out = Output::default();
    let r = h.c.delete_offsets(G, &parts, &mut out);
    h.finish(out);
    assert_eq!(r, Ok(vec![Err(ErrorCode::GroupSubscribedToTopic), Ok(())]));
    assert_eq!((h.committed("t", 0), h.committed("u", 0)), (1, -1));
    let mut out = Output::default();
    assert_eq!(
        h.c.delete_offsets("nope", &parts, &mut out),
        Err(ErrorCode::GroupIdNotFound)
    );
}

#[test]
fn require_stable_with_a_pending_transactional_offset_is_unstable_offset_commit() {
    let mut h = H::new();
    h.commit("", -1, &[("t", 0, 1)]).expect("committed");
    let entry = OffsetEntry {
        offset: 5,
        leader_epoch: -1,
        metadata: String::new(),
        commit_timestamp_ms: h.now,
        expire_timestamp_ms: None,
    };
    let meta = GroupMeta {
        protocol_type: None,
        generation: 0,
        empty_since_ms: Some(h.now),
    };
    h.held.push((
        coordinator_slot(G),
        SlotOp::StageTxnOffsets {
            group: G.into(),
            meta,
            producer_id: 42,
            producer_epoch: 0,
            offsets: vec![("t".into(), 0, entry)],
        },
    ));
    h.write();
    let ask = [("t".to_string(), vec![0])];
    assert_eq!(
        offset(&h.c.fetch_offsets(G, Some(&ask), false)[0].1[0]),
        1,
        "the committed offset"
    );
    assert_eq!(
        h.c.fetch_offsets(G, Some(&ask), true)[0].1[0].committed,
        Err(ErrorCode::UnstableOffsetCommit)
    );
    h.held.push((
        coordinator_slot(G),
        SlotOp::CompleteTxn {
            group: G.into(),
            producer_id: 42,
            commit: true,
        },
    ));
    h.write();
    assert_eq!(offset(&h.c.fetch_offsets(G, Some(&ask), true)[0].1[0]), 5);
}

#[test]
fn txn_offset_commit_stages_offsets_that_only_complete_txn_commits() {
    let mut h = H::new();
    h.commit("", -1, &[("t", 0, 1)]).expect("committed");
    h.write();
    let req = simple_txn_commit(5);
    let mut out = Output::default();
    let staged = h.c.stage_txn_offsets(&req, 42, 0, None, h.now, &mut out);
    assert_eq!(staged, Ok(vec![Ok(())]));
    h.finish(out);
    h.write();
    let ask = [("t".to_string(), vec![0])];
    assert_eq!(h.committed("t", 0), 1, "staged offsets are invisible");
    assert_eq!(
        h.c.fetch_offsets(G, Some(&ask), true)[0].1[0].committed,
        Err(ErrorCode::UnstableOffsetCommit)
    );
    // Another producer's transaction has nothing staged: its op changes
    // nothing.
    let mut out = Output::default();
    h.c.complete_txn(G, 43, true, h.now, &mut out);
    assert_eq!(out.ops.len(), 1);
    h.finish(out);
    h.write();
    assert_eq!(h.committed("t", 0), 1);
    let mut out = Output::default();
    h.c.complete_txn(G, 42, true, h.now, &mut out);
    h.finish(out);
    h.write();
    assert_eq!(h.committed("t", 0), 5);
}

#[test]
fn a_completion_drops_offsets_staged_but_not_yet_written() {
    let mut h = H::new();
    h.commit("", -1, &[("t", 0, 1)]).expect("committed");
    h.write();
    // A TxnOffsetCommit is verified and queued ...
    let mut out = Output::default();
    let staged =
        h.c.stage_txn_offsets(&simple_txn_commit(5), 42, 0, None, h.now, &mut out);
    assert_eq!(staged, Ok(vec![Ok(())]));
    h.finish(out);
    // ... and before its write lands, the transaction is aborted and
    // completed at the group: the written state shows nothing staged.
    let mut out = Output::default();
    h.c.complete_txn(G, 42, false, h.now, &mut out);
    h.finish(out);
    h.write();
    let ask = [("t".to_string(), vec![0])];
    // Nothing is left staged for a transaction that is complete: stable,
    // and the commit before it.
    assert_eq!(offset(&h.c.fetch_offsets(G, Some(&ask), true)[0].1[0]), 1);
}

/// A TxnOffsetCommit of offset `offset` on t-0 from outside any group
/// membership (as a plain transactional producer sends it).
fn simple_txn_commit(offset: i64) -> CommitRequest {
    CommitRequest {
        group_id: G.into(),
        member_id: String::new(),
        instance_id: None,
        generation: -1,
        retention_time_ms: -1,
        missing_group_is_not_found: false,
        offsets: vec![CommitOffset {
            topic: "t".into(),
            partition: 0,
            offset,
            leader_epoch: -1,
            metadata: None,
        }],
    }
}

/// A TxnOffsetCommit verified by a transaction coordinator on another
/// broker before its transaction was completed here must not stage: its
/// offsets would wait for the producer's next transaction.
#[test]
fn a_txn_offset_commit_verified_before_its_transactions_completion_is_refused() {
    let mut h = H::new();
    h.write();
    let req = simple_txn_commit(5);
    let asked = h.c.txn_completion_mark();
    let mut out = Output::default();
    h.c.complete_txn(G, 42, true, h.now, &mut out);
    let mut out = Output::default();
    assert_eq!(
        h.c.stage_txn_offsets(&req, 42, 0, Some(asked), h.now, &mut out),
        Err(ErrorCode::ConcurrentTransactions)
    );
    assert!(out.ops.is_empty(), "nothing staged");
    // Another producer's completion does not refuse it, nor an earlier one.
    let asked = h.c.txn_completion_mark();
    h.c.complete_txn(G, 43, false, h.now, &mut out);
    assert_eq!(
        h.c.stage_txn_offsets(&req, 42, 0, Some(asked), h.now, &mut out),
        Ok(vec![Ok(())])
    );
}

#[test]
fn txn_offset_commit_from_a_stale_generation_is_illegal_generation() {
    let mut h = H::new();
    let (members, generation) = h.stable_group(1, &["t"]);
    let req = CommitRequest {
        group_id: G.into(),
        member_id: members[0].clone(),
        instance_id: None,
        generation: generation - 1,
        retention_time_ms: -1,
        missing_group_is_not_found: false,
        offsets: vec![],
    };
    let mut out = Output::default();
    assert_eq!(
        h.c.stage_txn_offsets(&req, 42, 0, None, h.now, &mut out),
        Err(ErrorCode::IllegalGeneration)
    );
    let req = CommitRequest {
        member_id: "someone-else".into(),
        generation,
        ..req
    };
    assert_eq!(
        h.c.stage_txn_offsets(&req, 42, 0, None, h.now, &mut out),
        Err(ErrorCode::UnknownMemberId)
    );
}

#[test]
fn aborted_transactional_offsets_are_dropped() {
    let mut s = SlotState::new(3, 0);
    let entry = OffsetEntry {
        offset: 5,
        leader_epoch: -1,
        metadata: String::new(),
        commit_timestamp_ms: 1,
        expire_timestamp_ms: None,
    };
    let meta = GroupMeta {
        protocol_type: None,
        generation: 0,
        empty_since_ms: None,
    };
    assert!(s.apply(&SlotOp::StageTxnOffsets {
        group: "g".into(),
        meta,
        producer_id: 1,
        producer_epoch: 0,
        offsets: vec![("t".into(), 0, entry)]
    }));
    assert!(s.apply(&SlotOp::CompleteTxn {
        group: "g".into(),
        producer_id: 1,
        commit: false
    }));
    assert!(s.groups.is_empty());
    assert!(
        !s.apply(&SlotOp::CompleteTxn {
            group: "g".into(),
            producer_id: 1,
            commit: false
        }),
        "applying twice is harmless"
    );
}

// ---------------------------------------------------------------- slot files

#[test]
fn slot_file_round_trips_and_names_its_slot() {
    let mut s = SlotState::new(7, 0);
    let entry = OffsetEntry {
        offset: 5,
        leader_epoch: 2,
        metadata: "m".into(),
        commit_timestamp_ms: 1,
        expire_timestamp_ms: Some(9),
    };
    let meta = GroupMeta {
        protocol_type: Some("consumer".into()),
        generation: 4,
        empty_since_ms: None,
    };
    s.apply(&SlotOp::Commit {
        group: "g".into(),
        meta,
        offsets: vec![("t".into(), 3, entry)],
    });
    let bytes = s.encode().expect("encodes");
    assert_eq!(SlotState::decode(&bytes, 7), Ok(s));
    assert_eq!(
        SlotState::decode(&bytes, 8),
        Err(SlotFileError::WrongSlot {
            expected: 8,
            found: 7
        })
    );
    assert!(matches!(
        SlotState::decode(b"{", 7),
        Err(SlotFileError::Parse(_))
    ));
}

#[test]
fn list_and_describe_show_groups_as_kafka_does() {
    let mut h = H::new();
    let (ids, _) = h.stable_group(1, &["t"]);
    let listed = h.c.list_groups(&["stable".into()], &[]);
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].protocol_type, "consumer");
    assert!(h.c.list_groups(&["Empty".into()], &[]).is_empty());
    assert!(h.c.list_groups(&[], &["consumer".into()]).is_empty());
    let d = h.c.describe_group(G).expect("exists");
    assert_eq!(d.state, GroupState::Stable);
    assert_eq!(d.protocol_data, "range");
    assert_eq!(d.members[0].member_id, ids[0]);
    assert!(!d.members[0].metadata.is_empty());
    assert!(h.c.describe_group("nope").is_none());
}

// ------------------------------------------------- a slot moving away and back

#[test]
fn an_unloaded_slot_forgets_its_groups_and_answers_parked_requests_not_coordinator() {
    let mut h = H::new();
    let (ids, generation) = h.stable_group(2, &["t"]);
    assert_eq!(
        h.commit(&ids[0], generation, &[("t", 0, 5)]),
        Ok(vec![Ok(())])
    );
    let durable = h.c.slot(coordinator_slot(G)).expect("slot").clone();
    // A member rejoins: the group rebalances and the join is parked.
    let w = h.join(&ids[0], None, &["t"]).expect_err("parked");
    let mut out = Output::default();
    h.c.unload_slot(coordinator_slot(G), &mut out);
    h.finish(out);
    match h.answers.get(&w) {
        Some(Answer::Join(Err(e))) => assert_eq!(e.error, ErrorCode::NotCoordinator),
        other => panic!("parked join answered {other:?}"),
    }
    assert!(h.c.group(G).is_none(), "the group left memory");
    assert!(h.c.record(G).is_none(), "and its offsets");
    // Taken back (by this broker or the next owner) from what was durable:
    // the same generation and offsets.
    h.c.install_slot(durable, h.now);
    assert_eq!(h.state(), GroupState::Stable);
    assert_eq!(h.generation(), generation);
    assert_eq!(h.committed("t", 0), 5);
}

// ------------------------------------------------------- restart (membership)

#[test]
fn a_stable_group_comes_back_stable_after_a_restart_and_its_members_keep_their_generation() {
    let mut h = H::new();
    let (ids, generation) = h.stable_group(2, &["t"]);
    h.now += 1_000;
    h.restart();
    assert_eq!(h.state(), GroupState::Stable);
    assert_eq!(h.generation(), generation);
    let g = h.c.group(G).expect("restored");
    assert_eq!(g.leader(), Some(ids[0].as_str()));
    assert_eq!(g.protocol_name(), Some("range"));
    for id in &ids {
        assert_eq!(h.heartbeat(id, None, generation), Ok(()));
        let m = h.c.group(G).expect("restored").member(id).expect("member");
        assert_eq!(m.assignment.as_ref(), id.as_bytes(), "its assignment");
        assert_eq!(m.client_host, "/127.0.0.1");
    }
    assert_eq!(
        h.commit(&ids[1], generation, &[("t", 0, 7)]),
        Ok(vec![Ok(())])
    );
    assert_eq!(h.committed("t", 0), 7);
    // A follower's late SyncGroup gets its stored share.
    let synced = h
        .sync(&ids[1], generation, &[])
        .expect("answered")
        .expect("synced");
    assert_eq!(synced.assignment.as_ref(), ids[1].as_bytes());
    // The subscriptions came back too: retention still spares "t".
    assert!(h.c.group(G).expect("restored").is_subscribed_to_topic("t"));
    assert!(!h.c.group(G).expect("restored").is_subscribed_to_topic("u"));
}

#[test]
fn a_member_that_does_not_return_after_a_restart_is_expired_after_its_session_timeout() {
    let mut h = H::new();
    let (ids, generation) = h.stable_group(2, &["t"]);
    // Long after the members' last heartbeats: the sessions restart from
    // the load, not from before the crash.
    h.now += 10 * SESSION as i64;
    h.restart();
    let half = SESSION as i64 / 2;
    h.advance(half);
    assert_eq!(h.heartbeat(&ids[0], None, generation), Ok(()));
    assert_eq!(h.state(), GroupState::Stable);
    h.advance(half);
    // ids[1] never came back: gone, and the group rebalances.
    assert!(h.c.group(G).expect("group").member(&ids[1]).is_none());
    assert_eq!(h.state(), GroupState::PreparingRebalance);
    assert_eq!(
        h.heartbeat(&ids[0], None, generation),
        Err(ErrorCode::RebalanceInProgress)
    );
    let w = h.join(&ids[0], None, &["t"]).expect_err("parked");
    h.advance_until_answered(w, REBALANCE as i64);
    let r = h.join_answer(w).expect("answered").expect("joined");
    assert_eq!(r.generation, generation + 1);
    assert_eq!(r.leader, ids[0]);
}

#[test]
fn a_group_that_emptied_comes_back_empty() {
    let mut h = H::new();
    let (ids, generation) = h.stable_group(2, &["t"]);
    h.commit(&ids[0], generation, &[("t", 0, 5)])
        .expect("committed");
    h.leave(&[(&ids[0], None), (&ids[1], None)]).expect("left");
    assert_eq!(h.state(), GroupState::Empty);
    let empty_since = h.now;
    let record = h.c.record(G).expect("record").clone();
    assert_eq!(record.stable, None, "an Empty group stores no members");
    h.now += 50_000;
    h.restart();
    assert_eq!(h.state(), GroupState::Empty);
    let g = h.c.group(G).expect("group");
    assert_eq!(g.members().count(), 0);
    // Generations keep increasing, and retention counts from when it
    // emptied, not from the restart.
    assert_eq!(g.generation(), generation + 1);
    assert_eq!(g.state_since_ms(), empty_since);
    assert_eq!(g.protocol_type(), Some("consumer"));
    assert_eq!(
        h.heartbeat(&ids[0], None, generation),
        Err(ErrorCode::UnknownMemberId)
    );
    assert_eq!(h.committed("t", 0), 5);

    // A group that only ever had members (no offsets) leaves no record.
    let mut h = H::new();
    let (ids, _) = h.stable_group(1, &["t"]);
    assert!(h.c.record(G).is_some_and(|r| r.stable.is_some()));
    h.leave(&[(&ids[0], None)]).expect("left");
    assert!(h.c.record(G).is_none());
}

#[test]
fn an_old_slot_file_without_members_loads_as_before() {
    let slot = coordinator_slot(G);
    let old = format!(
        r#"{{"format": 1, "slot": {slot}, "coordinator_epoch": 0, "version": 3,
            "groups": {{"{G}": {{"protocol_type": "consumer", "generation": 4,
              "empty_since_ms": null,
              "offsets": {{"t": {{"0": {{"offset": 9, "leader_epoch": 0, "metadata": "",
                                       "commit_timestamp_ms": 1}}}}}},
              "pending_txn": {{}}}}}}}}"#
    );
    let state = SlotState::decode(old.as_bytes(), slot).expect("an old file loads");
    assert_eq!(state.groups[G].stable, None);
    let mut c = Coordinator::new(GroupConfig::default(), 0);
    c.install_slot(state.clone(), 5_000);
    let g = c.group(G).expect("loaded");
    assert_eq!(g.state(), GroupState::Empty);
    assert_eq!(g.generation(), 4);
    assert_eq!(g.members().count(), 0);
    // Written again, it still says nothing of members.
    let text = String::from_utf8(state.encode().expect("encodes")).expect("utf-8");
    assert!(!text.contains("stable"));
}

#[test]
fn sync_answers_wait_until_the_generation_is_written() {
    let mut h = H::new();
    let (ra, rb) = h.two_joined(&["t"], &["t"]);
    let generation = ra.generation;
    let leader = ra.leader.clone();
    let follower = if leader == ra.member_id {
        rb.member_id
    } else {
        ra.member_id
    };
    h.hold_writes = true;
    let wf = h.sync(&follower, generation, &[]).expect_err("parked");
    let wl = h
        .sync(&leader, generation, &[(&leader, b"L"), (&follower, b"F")])
        .expect_err("parked");
    // Nobody holds an assignment a crash could forget.
    assert!(h.sync_answer(wl).is_none() && h.sync_answer(wf).is_none());
    assert_eq!(h.state(), GroupState::CompletingRebalance);
    assert!(h.c.record(G).is_none_or(|r| r.stable.is_none()));
    h.write();
    assert_eq!(
        h.sync_answer(wf)
            .expect("answered")
            .expect("synced")
            .assignment,
        Bytes::from_static(b"F")
    );
    assert_eq!(
        h.sync_answer(wl)
            .expect("answered")
            .expect("synced")
            .assignment,
        Bytes::from_static(b"L")
    );
    assert_eq!(h.state(), GroupState::Stable);
    let stored =
        h.c.record(G)
            .and_then(|r| r.stable.clone())
            .expect("stored");
    assert_eq!(stored.generation, generation);
    assert_eq!(stored.leader.as_deref(), Some(leader.as_str()));
    assert_eq!(stored.members.len(), 2);
}

#[test]
fn a_failed_write_of_the_generation_refuses_its_syncs_with_not_coordinator_and_rebalances() {
    let mut h = H::new();
    let (a, wa) = h.join_new(&["t"]);
    h.advance_until_answered(wa, REBALANCE as i64);
    let generation = h.join_answer(wa).expect("joined").expect("ok").generation;
    h.hold_writes = true;
    let w = h.sync(&a, generation, &[(&a, b"A")]).expect_err("parked");
    h.fail_writes();
    assert_eq!(
        h.sync_answer(w).expect("answered"),
        Err(ErrorCode::NotCoordinator)
    );
    assert_eq!(h.state(), GroupState::PreparingRebalance);
    assert!(h
        .c
        .group(G)
        .expect("group")
        .member(&a)
        .expect("kept")
        .assignment
        .is_empty());
}

#[test]
fn a_static_member_is_known_by_its_latest_member_id_after_a_restart() {
    let mut h = H::new();
    let r = h.stable_static_member("i1");
    // The client restarts and takes its place back without a rebalance.
    let again = h
        .join("", Some("i1"), &["t"])
        .expect("answered")
        .expect("rejoined");
    assert_ne!(again.member_id, r.member_id);
    h.restart();
    assert_eq!(h.state(), GroupState::Stable);
    let g = h.c.group(G).expect("restored");
    assert_eq!(g.static_member_id("i1"), Some(again.member_id.as_str()));
    assert_eq!(
        h.heartbeat(&again.member_id, Some("i1"), r.generation),
        Ok(())
    );
    assert_eq!(
        h.heartbeat(&r.member_id, Some("i1"), r.generation),
        Err(ErrorCode::FencedInstanceId)
    );
}

// ------------------------------------------------------------------ property

mod model {
    //! Random clients against the machine. Each client follows the
    //! protocol (join, rejoin with its id, sync, heartbeat) but may stop
    //! at any time (crash), leave, or be slow; time moves randomly. The
    //! checks are the ones a consumer's correctness rests on:
    //! - in any one generation, no partition is handed to two members;
    //! - an assignment is only ever handed out for the group's current
    //!   generation, to a current member;
    //! - generations only increase.

    use super::*;
    use proptest::prelude::*;

    const PARTITIONS: i32 = 6;

    #[derive(Debug, Clone)]
    enum Step {
        Join(usize),
        Sync(usize),
        Heartbeat(usize),
        Leave(usize),
        Crash(usize),
        Advance(i64),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            3 => (0..4usize).prop_map(Step::Join),
            3 => (0..4usize).prop_map(Step::Sync),
            3 => (0..4usize).prop_map(Step::Heartbeat),
            1 => (0..4usize).prop_map(Step::Leave),
            1 => (0..4usize).prop_map(Step::Crash),
            3 => (1..8_000i64).prop_map(Step::Advance),
        ]
    }

    #[derive(Debug, Default, Clone)]
    struct Client {
        member_id: String,
        instance: Option<String>,
        generation: i32,
        join: Option<Waiter>,
        sync: Option<Waiter>,
        leader_members: Vec<String>,
        is_leader: bool,
    }

    fn encode_assignment(parts: &[i32]) -> Bytes {
        Bytes::from(
            parts
                .iter()
                .flat_map(|p| p.to_be_bytes())
                .collect::<Vec<u8>>(),
        )
    }

    fn decode_assignment(b: &Bytes) -> Vec<i32> {
        b.chunks(4)
            .filter(|c| c.len() == 4)
            .map(|c| i32::from_be_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    struct World {
        h: H,
        clients: Vec<Client>,
        /// generation -> partition -> member that received it.
        handed_out: BTreeMap<i32, BTreeMap<i32, String>>,
        last_generation: i32,
    }

    impl World {
        fn check_sync(&mut self, c: usize, r: SyncResult) {
            let Ok(synced) = r else {
                self.clients[c].generation = -1;
                return;
            };
            let client = &self.clients[c];
            let g = self.h.c.group(G).expect("group");
            assert_eq!(
                client.generation,
                g.generation(),
                "assignment for a stale generation"
            );
            assert!(
                g.member(&client.member_id).is_some(),
                "assignment for a non-member"
            );
            // A static member that rejoins replaces its old member id and
            // inherits its assignment without a rebalance (KIP-345); the old
            // id is fenced. Ownership therefore belongs to the instance id
            // of a static member, and to the member id of a dynamic one.
            let owner = client
                .instance
                .clone()
                .unwrap_or_else(|| client.member_id.clone());
            let owners = self.handed_out.entry(client.generation).or_default();
            for p in decode_assignment(&synced.assignment) {
                let prev = owners.insert(p, owner.clone());
                assert!(
                    prev.is_none() || prev.as_deref() == Some(owner.as_str()),
                    "partition {p} of generation {} handed to {} and {:?}",
                    client.generation,
                    owner,
                    prev
                );
            }
        }

        fn check_join(&mut self, c: usize, r: JoinResult) {
            let client = &mut self.clients[c];
            match r {
                Ok(joined) => {
                    client.member_id = joined.member_id.clone();
                    client.generation = joined.generation;
                    client.is_leader = joined.leader == joined.member_id;
                    client.leader_members =
                        joined.members.iter().map(|m| m.member_id.clone()).collect();
                }
                Err(refused) => match refused.error {
                    ErrorCode::MemberIdRequired => client.member_id = refused.member_id,
                    ErrorCode::UnknownMemberId | ErrorCode::FencedInstanceId => {
                        client.member_id.clear();
                        client.generation = -1;
                    }
                    _ => client.generation = -1,
                },
            }
        }

        fn collect(&mut self) {
            for c in 0..self.clients.len() {
                if let Some(w) = self.clients[c].join {
                    if let Some(r) = self.h.join_answer(w) {
                        self.clients[c].join = None;
                        self.check_join(c, r);
                    }
                }
                if let Some(w) = self.clients[c].sync {
                    if let Some(r) = self.h.sync_answer(w) {
                        self.clients[c].sync = None;
                        self.check_sync(c, r);
                    }
                }
            }
            let generation = self.h.generation();
            assert!(generation >= self.last_generation, "generation went back");
            self.last_generation = generation;
        }

        fn run(&mut self, s: Step) {
            match s {
                Step::Join(c)
                    if self.clients[c].join.is_none() && self.clients[c].sync.is_none() =>
                {
                    let client = self.clients[c].clone();
                    let req = self.h.join_req(
                        &client.member_id,
                        client.instance.as_deref(),
                        range(&["t"]),
                        9,
                    );
                    match self.h.join_with(req) {
                        Ok(r) => self.check_join(c, r),
                        Err(w) => self.clients[c].join = Some(w),
                    }
                }
                Step::Sync(c)
                    if self.clients[c].join.is_none() && self.clients[c].sync.is_none() =>
                {
                    let client = self.clients[c].clone();
                    if client.member_id.is_empty() || client.generation < 0 {
                        return;
                    }
                    let assignments: Vec<(String, Bytes)> = if client.is_leader {
                        let n = client.leader_members.len().max(1);
                        client
                            .leader_members
                            .iter()
                            .enumerate()
                            .map(|(i, m)| {
                                let parts: Vec<i32> =
                                    (0..PARTITIONS).filter(|p| *p as usize % n == i).collect();
                                (m.clone(), encode_assignment(&parts))
                            })
                            .collect()
                    } else {
                        Vec::new()
                    };
                    let req = SyncRequest {
                        member_id: client.member_id.clone(),
                        instance_id: client.instance.clone(),
                        generation: client.generation,
                        protocol_type: Some("consumer".into()),
                        protocol_name: Some("range".into()),
                        assignments,
                    };
                    match self.h.sync_with(req) {
                        Ok(r) => self.check_sync(c, r),
                        Err(w) => self.clients[c].sync = Some(w),
                    }
                }
                Step::Heartbeat(c) if !self.clients[c].member_id.is_empty() => {
                    let client = self.clients[c].clone();
                    let outcome = self.h.heartbeat(
                        &client.member_id,
                        client.instance.as_deref(),
                        client.generation,
                    );
                    if let Err(ErrorCode::UnknownMemberId | ErrorCode::FencedInstanceId) = outcome {
                        self.clients[c].member_id.clear();
                    }
                }
                Step::Leave(c) if !self.clients[c].member_id.is_empty() => {
                    let client = self.clients[c].clone();
                    let _ = self
                        .h
                        .leave(&[(&client.member_id, client.instance.as_deref())]);
                    self.clients[c] = Client {
                        instance: client.instance,
                        generation: -1,
                        ..Client::default()
                    };
                }
                Step::Crash(c) => {
                    // The process dies: whatever it was waiting for is lost,
                    // and it comes back knowing only its instance id.
                    let instance = self.clients[c].instance.clone();
                    self.clients[c] = Client {
                        instance,
                        generation: -1,
                        ..Client::default()
                    };
                }
                Step::Advance(ms) => self.h.advance_by_steps(ms),
                _ => {}
            }
            self.collect();
        }
    }

    fn new_world(statics: &[bool], delay: i64) -> World {
        let mut h = H::with(GroupConfig {
            initial_rebalance_delay_ms: delay,
            ..GroupConfig::default()
        });
        // Short timeouts relative to the time steps, so sessions expire and
        // join phases time out often.
        h.session_ms = 6_000;
        h.rebalance_ms = 9_000;
        let clients = statics
            .iter()
            .enumerate()
            .map(|(i, s)| Client {
                instance: s.then(|| format!("inst-{i}")),
                generation: -1,
                ..Client::default()
            })
            .collect();
        World {
            h,
            clients,
            handed_out: BTreeMap::new(),
            last_generation: -1,
        }
    }

    /// Guards the property test against passing vacuously: the same kind
    /// of random run does form generations and hand out partitions.
    #[test]
    fn random_runs_do_form_generations_and_assign_partitions() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let mut w = new_world(&[false, true, false, true], 0);
        for _ in 0..5_000 {
            let c = rng.gen_range(0..4usize);
            let s = match rng.gen_range(0..14) {
                0..=2 => Step::Join(c),
                3..=5 => Step::Sync(c),
                6..=8 => Step::Heartbeat(c),
                9 => Step::Leave(c),
                10 => Step::Crash(c),
                _ => Step::Advance(rng.gen_range(1..8_000)),
            };
            w.run(s);
        }
        let assigned_generations = w
            .handed_out
            .values()
            .filter(|owners| !owners.is_empty())
            .count();
        assert!(
            assigned_generations >= 20,
            "only {assigned_generations} generations handed out partitions"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]
        #[test]
        fn no_partition_is_owned_twice_in_a_generation_nor_assigned_for_a_stale_one(
            steps in proptest::collection::vec(step(), 1..200),
            statics in proptest::collection::vec(any::<bool>(), 4),
            delay in prop_oneof![Just(0i64), Just(DELAY)],
        ) {
            let mut w = new_world(&statics, delay);
            for s in steps {
                w.run(s);
            }
        }
    }
}

#[test]
fn an_empty_group_whose_last_offsets_offset_delete_removed_stays_until_the_cleanup() {
    let mut h = H::new();
    let (ids, _) = h.stable_group(1, &["t"]);
    h.leave(&[(&ids[0], None)]).expect("left");
    h.commit("", -1, &[("u", 0, 1)]).expect("committed");
    let mut out = Output::default();
    let r = h.c.delete_offsets(G, &[("u".to_string(), 0)], &mut out);
    h.finish(out);
    assert_eq!(r, Ok(vec![Ok(())]));
    assert!(h.c.record(G).is_none(), "no offsets are left to record");
    assert_eq!(h.state(), GroupState::Empty, "kept, as Kafka 4 keeps it");
    h.expire();
    assert!(
        h.c.group(G).is_none(),
        "the next cleanup pass forgets the idle group without offsets"
    );
    let mut out = Output::default();
    assert_eq!(
        h.c.delete_group(G, h.now, &mut out),
        Err(ErrorCode::GroupIdNotFound)
    );
}

#[test]
fn describe_shows_the_current_assignment_in_every_state_and_metadata_only_when_stable() {
    let mut h = H::new();
    let (ids, generation) = h.stable_group(1, &["t"]);
    // The member rejoins with another subscription: a rebalance begins.
    if let Err(w) = h.join(&ids[0], None, &["t", "u"]) {
        h.advance_until_answered(w, REBALANCE as i64);
    }
    let d = h.c.describe_group(G).expect("exists");
    assert_eq!(d.state, GroupState::CompletingRebalance);
    assert_eq!(d.protocol_data, "", "no protocol outside Stable");
    assert!(
        d.members[0].metadata.is_empty(),
        "no metadata outside Stable"
    );
    assert_eq!(
        d.members[0].assignment.as_ref(),
        ids[0].as_bytes(),
        "generation {generation}'s assignment until the next SyncGroup"
    );
}
