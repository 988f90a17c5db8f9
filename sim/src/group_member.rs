//! Consumer group members: the classic protocol as a Kafka consumer with
//! the eager `range` assignor speaks it, over our codec.
//!
//! A member finds the coordinator, joins (KIP-394: the first JoinGroup is
//! answered MEMBER_ID_REQUIRED with the id to rejoin with), and the leader
//! range-assigns the topic's partitions among the members it was told of
//! (ConsumerProtocolSubscription / ConsumerProtocolAssignment, as the Java
//! client encodes them). Every member then reads its partitions' committed
//! offsets, fetches from there, heartbeats, and commits its positions with
//! its generation and member id. REBALANCE_IN_PROGRESS makes it commit and
//! rejoin; ILLEGAL_GENERATION a rejoin; UNKNOWN_MEMBER_ID (its session
//! expired, say while the broker was down) a rejoin without id. A broker
//! restart alone costs no rejoin: the group comes back Stable with its
//! stored members.
//!
//! Each member slot runs incarnations: an incarnation lives a seeded while,
//! then crashes (disappears without a word; its session expires) or leaves
//! (commits, LeaveGroup), and a new one joins later as a new member. The
//! broker is killed and restarted under all of it. Everything observable
//! goes to [`crate::group_history::GroupHistory`], whose rules the run is
//! checked against.
//!
//! Zombies (`SimParams::group_zombie_percent`): when an incarnation's
//! generation moves on (REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION,
//! UNKNOWN_MEMBER_ID) or the incarnation crashes or leaves, it may leave a
//! [`Zombie`] behind: paused (a GC pause, a partition) until a later
//! generation is stored, it then goes on fetching and committing as its
//! old generation's member for a while. Its commits must be refused, and a
//! refused one must never be read back.

use crate::group_history::{CommitId, CommitOutcome, ZombieAnswer};
use crate::group_settle::{Described, Settling};
use crate::params::SimParams;
use crate::poll_history::{ConsumerId, Reading, Seek};
use crate::retention::{reset_to_earliest, Reset};
use crate::routes::{self, Routes};
use crate::workload::{polling, Backoff, Floors, PlainTopic, RequestError, Shared, TOPIC};
use bytes::{Bytes, BytesMut};
use kaas_core::protocol::messages::{
    consumer_protocol_assignment, describe_groups_request, find_coordinator_request,
    heartbeat_request, join_group_request, leave_group_request, offset_commit_request,
    offset_fetch_request, sync_group_request, ConsumerProtocolAssignment,
    ConsumerProtocolSubscription, DescribeGroupsRequest, FindCoordinatorRequest, HeartbeatRequest,
    JoinGroupRequest, LeaveGroupRequest, OffsetCommitRequest, OffsetCommitResponse,
    OffsetFetchRequest, SyncGroupRequest,
};
use kaas_core::protocol::{ErrorCode, Reader, RequestBody, ResponseBody, Writer};
use madsim::rand::{thread_rng, Rng};
use madsim::task::JoinHandle;
use madsim::time::{sleep, Instant};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

pub const GROUP: &str = "sim-group";
const PROTOCOL_TYPE: &str = "consumer";
const ASSIGNOR: &str = "range";
const FIND_COORDINATOR_VERSION: i16 = 3;
const JOIN_VERSION: i16 = 5;
const SYNC_VERSION: i16 = 3;
const HEARTBEAT_VERSION: i16 = 3;
const LEAVE_VERSION: i16 = 3;
const OFFSET_COMMIT_VERSION: i16 = 7;
const OFFSET_FETCH_VERSION: i16 = 7;
const DESCRIBE_GROUPS_VERSION: i16 = 5;
const SUBSCRIPTION_VERSION: i16 = 1;
const ASSIGNMENT_VERSION: i16 = 0;
/// Beyond the rebalance timeout, how long a parked JoinGroup or SyncGroup
/// may take before the member gives up on the connection (the Java client
/// allows 5 s; a crashed broker never answers, so this is dead time).
const PARKED_SLACK: Duration = Duration::from_secs(2);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// How an incarnation ended.
enum Ending {
    Stopped,
    Crashed,
    Left,
}

/// Runs member slot `slot` (its incarnations) until told to stop.
pub async fn group_member(
    slot: usize,
    params: SimParams,
    brokers: Vec<SocketAddr>,
    shared: Arc<Shared>,
) {
    let session = Duration::from_millis(params.session_timeout_ms as u64);
    let mut zombies = Vec::new();
    for incarnation in 0.. {
        let mut member = Member::new(slot, incarnation, params, &brokers, shared.clone());
        let ending = member.run().await;
        zombies.append(&mut member.zombies);
        let pause = match ending {
            Ending::Stopped => {
                // They stop when the group does; waiting for them keeps
                // their last commits before the final read.
                for z in zombies {
                    if z.await.is_err() {
                        shared
                            .groups()
                            .violation(format!("a zombie of slot {slot} died"));
                    }
                }
                return;
            }
            Ending::Crashed => {
                shared.groups().stats.member_crashes += 1;
                // Sometimes back before its old session expires.
                session.mul_f64(thread_rng().gen_range(0.0..2.0))
            }
            Ending::Left => {
                shared.groups().stats.member_leaves += 1;
                session.mul_f64(thread_rng().gen_range(0.0..1.0))
            }
        };
        sleep(pause).await;
    }
}

/// The range assignor: members sorted by id, each a contiguous range of
/// partitions, the first `partitions % members` one more.
pub fn range_assign(members: &[String], partitions: i32) -> BTreeMap<String, Vec<i32>> {
    let mut sorted: Vec<&String> = members.iter().collect();
    sorted.sort();
    let n = sorted.len() as i32;
    let mut plan = BTreeMap::new();
    let mut next = 0;
    for (i, m) in sorted.into_iter().enumerate() {
        let count = if n == 0 {
            0
        } else {
            partitions / n + i32::from((i as i32) < partitions % n)
        };
        plan.insert(m.clone(), (next..next + count).collect());
        next += count;
    }
    plan
}

/// A versioned consumer-protocol blob: the version, then the struct.
fn versioned(
    version: i16,
    encode: impl FnOnce(&mut Writer<'_>) -> Result<(), kaas_core::protocol::EncodeError>,
) -> Result<Bytes, String> {
    let mut buf = BytesMut::new();
    let mut w = Writer::new(&mut buf);
    w.i16(version);
    encode(&mut w).map_err(|e| e.to_string())?;
    Ok(buf.freeze())
}

fn decode_subscription(bytes: &Bytes) -> Result<ConsumerProtocolSubscription, String> {
    let mut r = Reader::new(bytes.clone());
    let version = r.i16().map_err(|e| e.to_string())?;
    ConsumerProtocolSubscription::decode(&mut r, version.clamp(0, 3)).map_err(|e| e.to_string())
}

fn decode_assignment(bytes: &Bytes) -> Result<Vec<i32>, String> {
    if bytes.is_empty() {
        // No assignment at all (more members than partitions is still an
        // encoded empty list; this is a leader that assigned us nothing).
        return Ok(Vec::new());
    }
    let mut r = Reader::new(bytes.clone());
    let version = r.i16().map_err(|e| e.to_string())?;
    let a = ConsumerProtocolAssignment::decode(&mut r, version.clamp(0, 3))
        .map_err(|e| e.to_string())?;
    let mut partitions: Vec<i32> = a
        .assigned_partitions
        .iter()
        .filter(|t| t.topic == TOPIC)
        .flat_map(|t| t.partitions.iter().copied())
        .collect();
    partitions.sort_unstable();
    Ok(partitions)
}

struct Member {
    /// For messages: slot and incarnation.
    name: String,
    params: SimParams,
    shared: Arc<Shared>,
    /// The coordinator's and the partition leaders' connections.
    routes: Routes,
    member_id: String,
    /// -1 when not in a generation (must (re)join).
    generation: i32,
    leader: String,
    owned: Vec<i32>,
    /// Fetch positions; empty until the committed offsets were read.
    positions: BTreeMap<i32, i64>,
    /// This incarnation in the poll-order history.
    polls: ConsumerId,
    next_heartbeat: Instant,
    next_commit: Instant,
    dies_at: Option<Instant>,
    /// A request failed: rediscover the coordinator and heartbeat.
    lost_coordinator: bool,
    /// The coordinator was lost (maybe restarted): read the committed
    /// offsets back once, as a check that they survived. A restart no
    /// longer costs a rejoin (membership is stored), so without this no
    /// member would read an offset committed before a crash.
    check_committed: bool,
    backoff: Backoff,
    /// The zombies this incarnation left behind.
    zombies: Vec<JoinHandle<()>>,
}

impl Member {
    fn new(
        slot: usize,
        incarnation: u32,
        params: SimParams,
        brokers: &[SocketAddr],
        shared: Arc<Shared>,
    ) -> Member {
        let dies_at = params.member_lifetime_ms.map(|mean| {
            Instant::now() + Duration::from_millis(mean).mul_f64(thread_rng().gen_range(0.3..1.7))
        });
        let polls = shared
            .polls()
            .consumer(format!("member {slot}.{incarnation}"), Reading::Main);
        Member {
            name: format!("member {slot}.{incarnation}"),
            params,
            shared,
            routes: Routes::new(format!("member-{slot}.{incarnation}"), brokers),
            member_id: String::new(),
            generation: -1,
            leader: String::new(),
            owned: Vec::new(),
            positions: BTreeMap::new(),
            polls,
            next_heartbeat: Instant::now(),
            next_commit: Instant::now(),
            dies_at,
            lost_coordinator: true,
            check_committed: false,
            backoff: Backoff::new(),
            zombies: Vec::new(),
        }
    }

    fn violation(&self, what: String) {
        self.shared
            .groups()
            .violation(format!("{} ({}): {what}", self.name, self.member_id));
    }

    fn session(&self) -> Duration {
        Duration::from_millis(self.params.session_timeout_ms as u64)
    }

    /// As long as the session: a member that does not rejoin within it is
    /// dropped from the rebalance, and the parked ones wait no longer.
    fn rebalance_timeout(&self) -> Duration {
        self.session()
    }

    /// A tenth of the session (the Java defaults are 3 s of 45 s): a member
    /// that misses a heartbeat or two still keeps its session.
    fn heartbeat_interval(&self) -> Duration {
        self.session() / 10
    }

    /// Time to the next commit. Committing after every fetch (interval 0)
    /// is driven by `consume`; this is then only the fallback while nothing
    /// arrives.
    fn commit_interval(&self) -> Duration {
        match self.params.commit_interval_ms {
            0 => self.heartbeat_interval(),
            ms => Duration::from_millis(ms),
        }
    }

    /// Leaves the generation: the next loop rejoins (with the member id
    /// unless `forget_id`).
    fn rejoin(&mut self, forget_id: bool) {
        self.maybe_leave_a_zombie();
        self.generation = -1;
        self.owned.clear();
        self.positions.clear();
        if forget_id {
            self.member_id.clear();
        }
    }

    /// One request on the member's connection. Drops the connection on
    /// failure; a malformed answer is a violation.
    async fn request(
        &mut self,
        api_key: i16,
        version: i16,
        body: RequestBody,
        wait: Duration,
    ) -> Result<ResponseBody, RequestError> {
        let key = (routes::KEY_GROUP, GROUP.to_string());
        let result = self
            .routes
            .ask_coordinator_within(&key, wait, api_key, version, &body, &self.shared)
            .await;
        if let Err(e) = &result {
            // As a client does when it loses the coordinator: find it again
            // and heartbeat at once, to learn whether the session survived.
            // (Not when it could not even connect: the next request tries
            // again, as it always did.)
            self.lost_coordinator |= !self.routes.not_connected();
            if let RequestError::Malformed(m) = e {
                self.violation(format!("malformed answer to api {api_key}: {m}"));
            }
        }
        result
    }

    async fn run(&mut self) -> Ending {
        loop {
            if self.shared.stop_group.load(Ordering::Relaxed) {
                self.leave().await;
                return Ending::Stopped;
            }
            let churn = !self.shared.faults_over.load(Ordering::Relaxed);
            if churn && self.dies_at.is_some_and(|d| Instant::now() >= d) {
                if thread_rng().gen_bool(0.5) {
                    // Gone without a word: the coordinator only notices
                    // when the session expires.
                    self.maybe_leave_a_zombie();
                    return Ending::Crashed;
                }
                self.leave().await;
                // After the leave: its commit, if refused, already had the
                // chance to leave one (`rejoin`).
                self.maybe_leave_a_zombie();
                return Ending::Left;
            }
            if std::mem::take(&mut self.lost_coordinator) {
                self.find_coordinator().await;
                self.next_heartbeat = Instant::now();
                self.check_committed = true;
                continue;
            }
            if self.generation < 0 {
                self.join_and_sync().await;
                continue;
            }
            if self.positions.is_empty() && !self.owned.is_empty() {
                self.fetch_committed(true).await;
                continue;
            }
            if std::mem::take(&mut self.check_committed) && !self.owned.is_empty() {
                self.fetch_committed(false).await;
                continue;
            }
            if Instant::now() >= self.next_heartbeat {
                self.heartbeat().await;
                continue;
            }
            if Instant::now() >= self.next_commit {
                self.commit().await;
                continue;
            }
            self.consume().await;
        }
    }

    /// FindCoordinator, as a client does first: it must name this broker.
    async fn find_coordinator(&mut self) {
        if self.routes.multi() {
            let key = (routes::KEY_GROUP, GROUP.to_string());
            match self.routes.find_coordinator(&key, &self.shared).await {
                Ok(_) => {}
                Err(RequestError::Malformed(m)) => self.violation(m),
                Err(RequestError::Network(_)) => self.backoff.wait().await,
            }
            return;
        }
        let body = RequestBody::FindCoordinator(FindCoordinatorRequest {
            key: GROUP.into(),
            key_type: 0,
            ..Default::default()
        });
        let answer = self
            .request(
                find_coordinator_request::API_KEY,
                FIND_COORDINATOR_VERSION,
                body,
                REQUEST_TIMEOUT,
            )
            .await;
        if answer.is_err() {
            return self.backoff.wait().await;
        }
        if let Ok(ResponseBody::FindCoordinator(r)) = answer {
            let at = format!("{}:{}", r.host, r.port);
            if r.error_code != 0 || r.node_id != 0 || at != self.routes.first().to_string() {
                self.violation(format!(
                    "FindCoordinator answered error {} node {} at {at}, not this broker",
                    r.error_code, r.node_id
                ));
            }
        }
    }

    async fn join_and_sync(&mut self) {
        let subscription = versioned(SUBSCRIPTION_VERSION, |w| {
            ConsumerProtocolSubscription {
                topics: vec![TOPIC.into()],
                ..Default::default()
            }
            .encode(w, SUBSCRIPTION_VERSION)
        });
        let subscription = match subscription {
            Ok(s) => s,
            Err(e) => return self.violation(format!("cannot encode a subscription: {e}")),
        };
        let body = RequestBody::JoinGroup(JoinGroupRequest {
            group_id: GROUP.into(),
            session_timeout_ms: self.params.session_timeout_ms,
            rebalance_timeout_ms: self.rebalance_timeout().as_millis() as i32,
            member_id: self.member_id.clone(),
            group_instance_id: None,
            protocol_type: PROTOCOL_TYPE.into(),
            protocols: vec![join_group_request::JoinGroupRequestProtocol {
                name: ASSIGNOR.into(),
                metadata: subscription,
                ..Default::default()
            }],
            ..Default::default()
        });
        let wait = self.rebalance_timeout() + PARKED_SLACK;
        let joined = match self
            .request(join_group_request::API_KEY, JOIN_VERSION, body, wait)
            .await
        {
            Ok(ResponseBody::JoinGroup(r)) => r,
            Ok(other) => return self.violation(format!("JoinGroup answered {other:?}")),
            Err(_) => return self.backoff.wait().await,
        };
        let code = joined.error_code;
        tracing::debug!(member = %self.name, code, generation = joined.generation_id, leader = %joined.leader, id = %joined.member_id, "join answered");
        if code == ErrorCode::MemberIdRequired.code() {
            self.member_id = joined.member_id;
            return;
        }
        if code == ErrorCode::UnknownMemberId.code() {
            self.member_id.clear();
            return self.backoff.wait().await;
        }
        if code != 0 {
            if !coordinator_busy(code) && code != ErrorCode::RebalanceInProgress.code() {
                self.violation(format!("JoinGroup failed with error {code}"));
            }
            return self.backoff.wait().await;
        }
        self.shared.groups().stats.joins += 1;
        self.member_id = joined.member_id;
        let generation = joined.generation_id;
        let leader = joined.leader;
        let mut assignments = Vec::new();
        if leader == self.member_id {
            let mut ids = Vec::new();
            for m in &joined.members {
                match decode_subscription(&m.metadata) {
                    Ok(s) if s.topics.iter().any(|t| t == TOPIC) => ids.push(m.member_id.clone()),
                    Ok(s) => self.violation(format!(
                        "member {} joined subscribed to {:?}, not {TOPIC}",
                        m.member_id, s.topics
                    )),
                    Err(e) => self.violation(format!(
                        "member {}'s metadata does not decode: {e}",
                        m.member_id
                    )),
                }
            }
            if !ids.contains(&self.member_id) {
                self.violation(format!(
                    "the leader's JoinGroup answer does not list the leader: {ids:?}"
                ));
            }
            let plan = range_assign(&ids, self.params.partitions);
            for (member, partitions) in &plan {
                let encoded = versioned(ASSIGNMENT_VERSION, |w| {
                    ConsumerProtocolAssignment {
                        assigned_partitions: vec![consumer_protocol_assignment::TopicPartition {
                            topic: TOPIC.into(),
                            partitions: partitions.clone(),
                            ..Default::default()
                        }],
                        ..Default::default()
                    }
                    .encode(w, ASSIGNMENT_VERSION)
                });
                match encoded {
                    Ok(a) => assignments.push(sync_group_request::SyncGroupRequestAssignment {
                        member_id: member.clone(),
                        assignment: a,
                        ..Default::default()
                    }),
                    Err(e) => return self.violation(format!("cannot encode an assignment: {e}")),
                }
            }
            self.shared.groups().planned(generation, &leader, plan);
        }
        let body = RequestBody::SyncGroup(SyncGroupRequest {
            group_id: GROUP.into(),
            generation_id: generation,
            member_id: self.member_id.clone(),
            assignments,
            ..Default::default()
        });
        let synced = match self
            .request(sync_group_request::API_KEY, SYNC_VERSION, body, wait)
            .await
        {
            Ok(ResponseBody::SyncGroup(r)) => r,
            Ok(other) => return self.violation(format!("SyncGroup answered {other:?}")),
            Err(_) => return self.backoff.wait().await,
        };
        tracing::debug!(member = %self.name, code = synced.error_code, generation, "sync answered");
        match synced.error_code {
            0 => {}
            c if c == ErrorCode::UnknownMemberId.code() => return self.rejoin(true),
            c if c == ErrorCode::RebalanceInProgress.code()
                || c == ErrorCode::IllegalGeneration.code() =>
            {
                return self.rejoin(false)
            }
            c => {
                if !coordinator_busy(c) {
                    self.violation(format!("SyncGroup failed with error {c}"));
                }
                return self.backoff.wait().await;
            }
        }
        let owned = match decode_assignment(&synced.assignment) {
            Ok(p) => p,
            Err(e) => return self.violation(format!("assignment does not decode: {e}")),
        };
        self.shared
            .groups()
            .assigned(generation, &leader, &self.member_id, &owned);
        self.generation = generation;
        self.leader = leader;
        self.owned = owned;
        self.positions.clear();
        self.next_heartbeat = Instant::now() + self.heartbeat_interval();
        self.next_commit = Instant::now() + self.commit_interval();
        self.backoff.reset();
    }

    /// Reads the committed offsets of the owned partitions (the history
    /// checks each answer); with `resume`, they become the positions to
    /// start from (the earliest offset where nothing is committed).
    async fn fetch_committed(&mut self, resume: bool) {
        let sent = self.shared.groups().tick();
        let incarnation = self.shared.incarnation();
        let body = offset_fetch_body(&self.owned);
        let answer = match self
            .request(
                offset_fetch_request::API_KEY,
                OFFSET_FETCH_VERSION,
                body,
                REQUEST_TIMEOUT,
            )
            .await
        {
            Ok(ResponseBody::OffsetFetch(r)) => r,
            Ok(other) => return self.violation(format!("OffsetFetch answered {other:?}")),
            Err(_) => return self.backoff.wait().await,
        };
        if answer.error_code != 0 {
            if !coordinator_busy(answer.error_code) {
                self.violation(format!(
                    "OffsetFetch failed with error {}",
                    answer.error_code
                ));
            }
            return self.backoff.wait().await;
        }
        let mut positions = BTreeMap::new();
        for p in answer
            .topics
            .iter()
            .filter(|t| t.name == TOPIC)
            .flat_map(|t| &t.partitions)
        {
            if p.error_code != 0 {
                self.violation(format!(
                    "OffsetFetch of partition {} failed with error {}",
                    p.partition_index, p.error_code
                ));
                continue;
            }
            self.shared.groups().offset_fetched(
                &self.member_id,
                p.partition_index,
                sent,
                incarnation,
                p.committed_offset,
                p.metadata.as_deref(),
            );
            positions.insert(p.partition_index, p.committed_offset.max(0));
        }
        if self.owned.iter().any(|p| !positions.contains_key(p)) {
            self.violation(format!(
                "OffsetFetch for {:?} answered only {:?}",
                self.owned,
                positions.keys().collect::<Vec<_>>()
            ));
            return self.backoff.wait().await;
        }
        if resume {
            let mut polls = self.shared.polls();
            for (&p, &offset) in &positions {
                polls.seek(self.polls, p, offset, Seek::Committed);
            }
            drop(polls);
            self.positions = positions;
        }
    }

    async fn heartbeat(&mut self) {
        self.next_heartbeat = Instant::now() + self.heartbeat_interval();
        self.shared.groups().stats.heartbeats += 1;
        let body = RequestBody::Heartbeat(HeartbeatRequest {
            group_id: GROUP.into(),
            generation_id: self.generation,
            member_id: self.member_id.clone(),
            group_instance_id: None,
            ..Default::default()
        });
        let code = match self
            .request(
                heartbeat_request::API_KEY,
                HEARTBEAT_VERSION,
                body,
                REQUEST_TIMEOUT,
            )
            .await
        {
            Ok(ResponseBody::Heartbeat(r)) => r.error_code,
            Ok(other) => return self.violation(format!("Heartbeat answered {other:?}")),
            // The coordinator is unreachable; keep trying until the
            // session is known lost.
            Err(_) => return,
        };
        tracing::debug!(member = %self.name, code, generation = self.generation, "heartbeat answered");
        match code {
            0 => {}
            c if c == ErrorCode::RebalanceInProgress.code() => {
                // As the Java consumer does before rejoining (eager
                // protocol, auto-commit): commit what it consumed.
                self.shared.groups().stats.rebalances_seen += 1;
                self.commit().await;
                self.rejoin(false);
            }
            c if c == ErrorCode::IllegalGeneration.code() => self.rejoin(false),
            c if c == ErrorCode::UnknownMemberId.code() => self.rejoin(true),
            c if coordinator_busy(c) => {}
            c => self.violation(format!("Heartbeat failed with error {c}")),
        }
    }

    /// Commits the positions of the owned partitions.
    async fn commit(&mut self) {
        self.next_commit = Instant::now() + self.commit_interval();
        if self.positions.is_empty() || self.generation < 0 {
            return;
        }
        let ids: BTreeMap<i32, CommitId> = {
            let mut groups = self.shared.groups();
            self.positions
                .iter()
                .map(|(&p, &o)| (p, groups.commit_sent(p, o)))
                .collect()
        };
        let offsets: Vec<(i32, i64, String)> = self
            .positions
            .iter()
            .map(|(&p, &o)| (p, o, String::new()))
            .collect();
        let body = offset_commit_body(self.generation, &self.member_id, offsets);
        let answer = match self
            .request(
                offset_commit_request::API_KEY,
                OFFSET_COMMIT_VERSION,
                body,
                REQUEST_TIMEOUT,
            )
            .await
        {
            Ok(ResponseBody::OffsetCommit(r)) => r,
            other => {
                match other {
                    Ok(other) => self.violation(format!("OffsetCommit answered {other:?}")),
                    Err(RequestError::Network(e)) => {
                        tracing::debug!(member = %self.name, error = %e, "commit failed")
                    }
                    Err(RequestError::Malformed(_)) => {}
                }
                let mut groups = self.shared.groups();
                for id in ids.into_values() {
                    groups.commit_answered(id, CommitOutcome::Unknown);
                }
                return;
            }
        };
        let incarnation = self.shared.incarnation();
        let answered = partition_codes(&answer);
        let mut rejoin = None;
        tracing::debug!(member = %self.name, generation = self.generation, ?answered, positions = ?self.positions, "commit answered");
        for (p, id) in ids {
            let code = answered.get(&p).copied();
            let outcome = match code {
                Some(0) => CommitOutcome::Acked { at: 0, incarnation },
                Some(c)
                    if c == ErrorCode::RebalanceInProgress.code()
                        || c == ErrorCode::IllegalGeneration.code() =>
                {
                    rejoin = rejoin.or(Some(false));
                    CommitOutcome::Refused
                }
                Some(c) if c == ErrorCode::UnknownMemberId.code() => {
                    rejoin = Some(true);
                    CommitOutcome::Refused
                }
                // Members start with the producers: the topic may not be
                // created yet.
                Some(c) if c == ErrorCode::UnknownTopicOrPartition.code() => CommitOutcome::Refused,
                Some(c) if coordinator_busy(c) => CommitOutcome::Unknown,
                Some(c) => {
                    self.violation(format!(
                        "OffsetCommit of partition {p} failed with error {c}"
                    ));
                    CommitOutcome::Unknown
                }
                None => {
                    self.violation(format!("OffsetCommit answer lacks partition {p}"));
                    CommitOutcome::Unknown
                }
            };
            self.shared.groups().commit_answered(id, outcome);
        }
        if let Some(forget_id) = rejoin {
            self.rejoin(forget_id);
        }
    }

    /// One fetch of the owned partitions from their positions.
    async fn consume(&mut self) {
        if self.positions.is_empty() {
            // Nothing assigned: just keep the session alive.
            let until = self.next_heartbeat.min(self.next_commit);
            return madsim::time::sleep_until(until).await;
        }
        let wait_ms = (self.heartbeat_interval().as_millis() as i32 / 2).clamp(1, 100);
        let round = fetch_round(
            &mut self.routes,
            &mut self.positions,
            wait_ms,
            &self.shared,
            &self.name,
            self.polls,
        )
        .await;
        let Some(round) = round else {
            // With one broker a lost fetch is a lost coordinator too;
            // with several the partition's leader is another broker.
            self.lost_coordinator |= !self.routes.multi();
            return self.backoff.wait().await;
        };
        self.shared.groups().stats.records_consumed += round.records;
        if round.advanced && self.params.commit_interval_ms == 0 {
            self.next_commit = Instant::now();
        }
        if round.failed {
            self.backoff.wait().await;
        } else {
            self.backoff.reset();
        }
    }

    /// With the seed's chance, leaves a zombie of this incarnation's
    /// generation behind (it must be in one, with positions to commit).
    fn maybe_leave_a_zombie(&mut self) {
        let percent = self.params.group_zombie_percent;
        // No draw at 0 %, so such seeds run as before zombies existed.
        if percent == 0 || self.generation < 0 || self.positions.is_empty() {
            return;
        }
        if self.shared.faults_over.load(Ordering::Relaxed)
            || thread_rng().gen_range(0..100) >= percent
        {
            return;
        }
        let name = format!("zombie of {} (generation {})", self.name, self.generation);
        let polls = polling(&name, Reading::Main, &self.positions, &self.shared);
        let zombie = Zombie {
            name,
            polls,
            routes: Routes::new(format!("zombie-{}", self.name), self.routes.brokers()),
            member_id: self.member_id.clone(),
            generation: self.generation,
            positions: self.positions.clone(),
            lifetime: self.session().mul_f64(thread_rng().gen_range(0.5..2.0)),
            commit_interval: self.commit_interval(),
            shared: self.shared.clone(),
            backoff: Backoff::new(),
        };
        tracing::debug!(zombie = %zombie.name, member = %self.member_id, "a zombie carries on");
        self.zombies.push(madsim::task::spawn(zombie.run()));
    }

    /// Commits, then leaves the group (best effort: a dead broker makes it
    /// a crash in effect).
    async fn leave(&mut self) {
        if self.generation >= 0 {
            self.commit().await;
        }
        if self.member_id.is_empty() {
            return;
        }
        let body = RequestBody::LeaveGroup(LeaveGroupRequest {
            group_id: GROUP.into(),
            members: vec![leave_group_request::MemberIdentity {
                member_id: self.member_id.clone(),
                group_instance_id: None,
                ..Default::default()
            }],
            ..Default::default()
        });
        let _ = self
            .request(
                leave_group_request::API_KEY,
                LEAVE_VERSION,
                body,
                REQUEST_TIMEOUT,
            )
            .await;
    }
}

/// What one fetch round did.
struct FetchRound {
    /// Records returned.
    records: u64,
    /// Some position moved on.
    advanced: bool,
    /// Some partition answered an error.
    failed: bool,
}

/// One fetch of `positions`' partitions, each position moved past what came
/// back; the records go to the history's checks. `None` if the request
/// failed.
async fn fetch_round(
    routes: &mut Routes,
    positions: &mut BTreeMap<i32, i64>,
    wait_ms: i32,
    shared: &Shared,
    name: &str,
    me: ConsumerId,
) -> Option<FetchRound> {
    let floors = Floors::now(PlainTopic::Main, positions, shared);
    let fetched = match routes.fetch(positions, wait_ms, shared).await {
        Ok(f) => f,
        Err(e) => {
            if let RequestError::Malformed(m) = e {
                shared.history().violation(m);
            }
            return None;
        }
    };
    let mut round = FetchRound {
        records: 0,
        advanced: false,
        failed: false,
    };
    for part in fetched {
        let Some(position) = positions.get_mut(&part.partition) else {
            continue;
        };
        if part.error_code == ErrorCode::OffsetOutOfRange.code() {
            // The position is a committed offset or past fetched data,
            // both within the durable log: only deletions (this seed's
            // DeleteRecords or retention.ms) may leave it below the log
            // start, and then the member resets to the earliest offset.
            // `active`: set before any workload started, in seeds that
            // delete.
            let deleting = shared.history().retention.active();
            let start = match deleting {
                true => match routes.leader(TOPIC, part.partition, shared).await {
                    Some(l) => {
                        let conn = routes.conn(l.addr);
                        reset_to_earliest(conn, l.addr, part.partition, l.epoch, *position, shared)
                            .await
                    }
                    None => Reset::Failed,
                },
                false => Reset::NotBelow(-1),
            };
            match start {
                Reset::MovedTo(start) => {
                    *position = start;
                    shared.polls().seek(me, part.partition, start, Seek::Reset);
                    round.advanced = true;
                }
                Reset::Failed => {}
                Reset::NotBelow(start) => shared.groups().violation(format!(
                    "{name}: partition {} OFFSET_OUT_OF_RANGE at {position} (the log starts at {start})",
                    part.partition
                )),
            }
            round.failed = true;
            continue;
        }
        if part.error_code != 0 {
            round.failed = true;
            continue;
        }
        floors.fetched(&part, shared);
        shared.polls().answer(me, part.poll_answer());
        round.records += part.records.len() as u64;
        round.advanced |= part.next_offset > *position;
        *position = (*position).max(part.next_offset);
    }
    Some(round)
}

/// An OffsetCommit of `offsets` (partition, offset, metadata) as member
/// `member_id` of `generation`.
fn offset_commit_body(
    generation: i32,
    member_id: &str,
    offsets: Vec<(i32, i64, String)>,
) -> RequestBody {
    RequestBody::OffsetCommit(OffsetCommitRequest {
        group_id: GROUP.into(),
        generation_id_or_member_epoch: generation,
        member_id: member_id.to_string(),
        group_instance_id: None,
        retention_time_ms: -1,
        topics: vec![offset_commit_request::OffsetCommitRequestTopic {
            name: TOPIC.into(),
            partitions: offsets
                .into_iter()
                .map(
                    |(p, o, metadata)| offset_commit_request::OffsetCommitRequestPartition {
                        partition_index: p,
                        committed_offset: o,
                        committed_leader_epoch: -1,
                        committed_metadata: Some(metadata),
                        ..Default::default()
                    },
                )
                .collect(),
            ..Default::default()
        }],
        ..Default::default()
    })
}

/// An OffsetCommit answer's error code per partition of the topic.
fn partition_codes(answer: &OffsetCommitResponse) -> BTreeMap<i32, i16> {
    answer
        .topics
        .iter()
        .filter(|t| t.name == TOPIC)
        .flat_map(|t| &t.partitions)
        .map(|p| (p.partition_index, p.error_code))
        .collect()
}

/// What a zombie carries on as: the member `member_id` of `generation`,
/// owner of `positions`' partitions. It sleeps until a later generation
/// was stored (a SyncGroup answered it): before that it may still be a
/// member, its commits accepted and its session kept alive by them, a
/// slow member rather than a zombie. Then, for `lifetime` (or until the
/// faults end), it fetches them as before and commits every
/// `commit_interval`, but
/// half its positions (far behind what the live members commit: a new
/// owner that reads a legitimately accepted one only reads again), each
/// tagged in its metadata so that an OffsetFetch answer names the commit
/// that wrote it.
struct Zombie {
    name: String,
    /// The zombie in the poll-order history (a consumer of its own, from
    /// its member's positions).
    polls: ConsumerId,
    routes: Routes,
    member_id: String,
    generation: i32,
    positions: BTreeMap<i32, i64>,
    lifetime: Duration,
    commit_interval: Duration,
    shared: Arc<Shared>,
    backoff: Backoff,
}

impl Zombie {
    async fn run(mut self) {
        if !self.sleep_until_superseded().await {
            return;
        }
        tracing::debug!(zombie = %self.name, "the zombie wakes");
        self.shared.groups().stats.zombies += 1;
        let until = Instant::now() + self.lifetime;
        let mut next_commit = Instant::now();
        while Instant::now() < until && !self.group_stopping() {
            if Instant::now() >= next_commit {
                next_commit = Instant::now() + self.commit_interval;
                self.commit().await;
                continue;
            }
            let round = fetch_round(
                &mut self.routes,
                &mut self.positions,
                100,
                &self.shared,
                &self.name,
                self.polls,
            )
            .await;
            match round {
                Some(r) if !r.failed => self.backoff.reset(),
                _ => self.backoff.wait().await,
            }
        }
    }

    fn group_stopping(&self) -> bool {
        self.shared.faults_over.load(Ordering::Relaxed)
            || self.shared.stop_group.load(Ordering::Relaxed)
    }

    /// Waits until a generation past its own was stored; `false` if the
    /// group stops first.
    async fn sleep_until_superseded(&mut self) -> bool {
        loop {
            if self.group_stopping() {
                return false;
            }
            if self.shared.groups().newest_stored_generation() > self.generation {
                return true;
            }
            sleep(Duration::from_millis(50)).await;
        }
    }

    async fn commit(&mut self) {
        let sent: Vec<(i32, i64, usize, String)> = {
            let mut groups = self.shared.groups();
            self.positions
                .iter()
                .map(|(&p, &position)| {
                    let offset = position / 2;
                    let (n, tag) =
                        groups.zombie_commit_sent(p, offset, &self.member_id, self.generation);
                    (p, offset, n, tag)
                })
                .collect()
        };
        let offsets = sent.iter().map(|(p, o, _, tag)| (*p, *o, tag.clone()));
        let body = offset_commit_body(self.generation, &self.member_id, offsets.collect());
        let key = (routes::KEY_GROUP, GROUP.to_string());
        let answer = self
            .routes
            .ask_coordinator_within(
                &key,
                REQUEST_TIMEOUT,
                offset_commit_request::API_KEY,
                OFFSET_COMMIT_VERSION,
                &body,
                &self.shared,
            )
            .await;
        let incarnation = self.shared.incarnation();
        let codes = match answer {
            Ok(ResponseBody::OffsetCommit(r)) => partition_codes(&r),
            Ok(other) => {
                self.violation(format!("OffsetCommit answered {other:?}"));
                BTreeMap::new()
            }
            Err(e) => {
                if let RequestError::Malformed(m) = e {
                    self.violation(m);
                }
                self.backoff.wait().await;
                BTreeMap::new()
            }
        };
        let mut groups = self.shared.groups();
        for (p, _, n, _) in sent {
            let answer = match codes.get(&p).copied() {
                Some(0) => ZombieAnswer::Accepted { incarnation },
                Some(c) if coordinator_busy(c) => ZombieAnswer::Unknown,
                Some(c) => ZombieAnswer::Refused(c),
                None => ZombieAnswer::Unknown,
            };
            tracing::debug!(zombie = %self.name, partition = p, ?answer, "zombie commit answered");
            groups.zombie_commit_answered(n, answer);
        }
    }

    fn violation(&self, what: String) {
        self.shared
            .groups()
            .violation(format!("{} ({}): {what}", self.name, self.member_id));
    }
}

/// Errors a coordinator answers while it cannot serve (its slot write
/// failed, it is loading): retry later.
fn coordinator_busy(code: i16) -> bool {
    [
        ErrorCode::NotCoordinator,
        ErrorCode::CoordinatorNotAvailable,
        ErrorCode::CoordinatorLoadInProgress,
        ErrorCode::RequestTimedOut,
    ]
    .iter()
    .any(|c| c.code() == code)
}

fn offset_fetch_body(partitions: &[i32]) -> RequestBody {
    RequestBody::OffsetFetch(OffsetFetchRequest {
        group_id: GROUP.into(),
        topics: Some(vec![offset_fetch_request::OffsetFetchRequestTopic {
            name: TOPIC.into(),
            partition_indexes: partitions.to_vec(),
            ..Default::default()
        }]),
        require_stable: true,
        ..Default::default()
    })
}

/// After the faults, once the members' commits caught up with the log:
/// waits until the coordinator describes the group as settled
/// (`group_settle`), the same Stable answer with every partition assigned
/// once for `quiet` (and no newer generation handed out meanwhile), or
/// fails the seed's liveness at `deadline`. The members are still running.
pub async fn await_settled_group(
    params: SimParams,
    brokers: Vec<SocketAddr>,
    shared: Arc<Shared>,
    quiet: Duration,
    deadline: Duration,
) -> Result<(), String> {
    let started = Instant::now();
    let mut routes = Routes::new("group-settle", &brokers);
    let key = (routes::KEY_GROUP, GROUP.to_string());
    let mut backoff = Backoff::new();
    let mut settling = Settling::new(params.partitions, quiet.as_millis() as i64);
    let body = RequestBody::DescribeGroups(DescribeGroupsRequest {
        groups: vec![GROUP.into()],
        ..Default::default()
    });
    loop {
        if started.elapsed() >= deadline {
            return Err(format!(
                "liveness: the group did not settle within {deadline:?} after its commits caught up ({} answers, {} times unsettled again): {}",
                settling.answers,
                settling.restarts,
                settling.why_not()
            ));
        }
        let answer = routes
            .ask_coordinator(
                &key,
                describe_groups_request::API_KEY,
                DESCRIBE_GROUPS_VERSION,
                &body,
                &shared,
            )
            .await;
        let group = match answer {
            Ok(ResponseBody::DescribeGroups(r)) => r.groups.into_iter().next(),
            Ok(other) => return Err(format!("DescribeGroups answered {other:?}")),
            Err(_) => None,
        };
        let Some(group) = group.filter(|g| g.error_code == 0) else {
            backoff.wait().await;
            continue;
        };
        backoff.reset();
        let mut members = BTreeMap::new();
        for m in &group.members {
            let assigned = decode_assignment(&m.member_assignment)
                .map_err(|e| format!("DescribeGroups: {}'s assignment: {e}", m.member_id))?;
            members.insert(m.member_id.clone(), assigned);
        }
        let described = Described {
            state: group.group_state,
            members,
            generation: shared.groups().newest_stored_generation(),
        };
        if settling.observe(described, started.elapsed().as_millis() as i64) {
            return Ok(());
        }
        sleep(Duration::from_millis(200)).await;
    }
}

/// After everything stopped: reads the group's committed offsets of every
/// partition once more, for the final check. Retries until `deadline`.
pub async fn read_final_offsets(
    params: SimParams,
    brokers: Vec<SocketAddr>,
    shared: Arc<Shared>,
    deadline: Duration,
) -> Result<(), String> {
    let give_up = Instant::now() + deadline;
    let mut routes = Routes::new("group-final", &brokers);
    let key = (routes::KEY_GROUP, GROUP.to_string());
    let mut backoff = Backoff::new();
    let partitions: Vec<i32> = (0..params.partitions).collect();
    loop {
        if Instant::now() >= give_up {
            return Err(format!(
                "liveness: could not read the group's committed offsets within {deadline:?}"
            ));
        }
        let sent = shared.groups().tick();
        let incarnation = shared.incarnation();
        let answer = routes
            .ask_coordinator(
                &key,
                offset_fetch_request::API_KEY,
                OFFSET_FETCH_VERSION,
                &offset_fetch_body(&partitions),
                &shared,
            )
            .await;
        let r = match answer {
            Ok(ResponseBody::OffsetFetch(r)) if r.error_code == 0 => r,
            Ok(ResponseBody::OffsetFetch(r)) if coordinator_busy(r.error_code) => {
                backoff.wait().await;
                continue;
            }
            Ok(other) => return Err(format!("final OffsetFetch answered {other:?}")),
            Err(_) => {
                backoff.wait().await;
                continue;
            }
        };
        let mut groups = shared.groups();
        for p in r
            .topics
            .iter()
            .filter(|t| t.name == TOPIC)
            .flat_map(|t| &t.partitions)
        {
            if p.error_code != 0 {
                return Err(format!(
                    "final OffsetFetch of partition {} failed with error {}",
                    p.partition_index, p.error_code
                ));
            }
            groups.offset_fetched(
                "final check",
                p.partition_index,
                sent,
                incarnation,
                p.committed_offset,
                p.metadata.as_deref(),
            );
        }
        return Ok(());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_assign_splits_contiguously_extra_partitions_first() {
        let ids = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let plan = range_assign(&ids(&["b", "a"]), 3);
        assert_eq!(plan["a"], vec![0, 1]);
        assert_eq!(plan["b"], vec![2]);
        let plan = range_assign(&ids(&["a", "b", "c", "d"]), 2);
        assert_eq!(plan["c"], Vec::<i32>::new());
        assert_eq!(plan.values().flatten().count(), 2);
    }
}
