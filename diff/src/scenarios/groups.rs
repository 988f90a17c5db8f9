//! Classic consumer groups: joining, syncing, heartbeats, static members,
//! rebalances, committed offsets, and the admin calls on groups.

use super::{scenario, Scenario};
use crate::observe::err;
use crate::session::{Session, Step, Stop};
use bytes::{Bytes, BytesMut};
use kaas_core::protocol::messages::*;
use kaas_core::protocol::{RequestBody, ResponseBody, Writer};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

pub fn scenarios() -> Vec<Scenario> {
    vec![
        scenario!("groups/find-coordinator", "the coordinator of a group; an unknown key type", find_coordinator_scenario),
        scenario!("groups/join-sync-heartbeat-leave", "MEMBER_ID_REQUIRED, then a one-member generation from join to leave", lifecycle),
        scenario!("groups/unknown-member", "heartbeat, sync and leave from a member the group does not know", unknown_member),
        scenario!("groups/illegal-generation", "heartbeat, sync and commit with a wrong generation", illegal_generation),
        scenario!("groups/static-member-replaced", "a static member rejoining under a new member id fences the old one", static_replaced),
        scenario!("groups/rebalance-timeout", "a member that does not rejoin within the rebalance timeout is removed", rebalance_timeout),
        scenario!("groups/two-members-rebalance", "a second member joins; the first rejoins; both get the next generation", two_members),
        scenario!("groups/session-timeout-bounds", "session timeouts below the minimum and above the maximum", session_timeout_bounds),
        scenario!("groups/inconsistent-protocol", "a member with another protocol type, or no common assignor", inconsistent_protocol),
        scenario!("groups/standalone-offsets", "commit and fetch offsets without group membership", standalone_offsets),
        scenario!("groups/member-commit", "commits checked against member and generation", member_commit),
        scenario!("groups/describe-list-delete", "a group through Stable, Empty and Dead, as DescribeGroups, ListGroups and DeleteGroups see it", describe_list_delete),
        scenario!("groups/offset-delete", "OffsetDelete refuses topics the group consumes", offset_delete_refuses_subscribed),
    ]
}

const PROTOCOL: &str = "consumer";

fn subscription(topics: &[&str]) -> Bytes {
    let sub = ConsumerProtocolSubscription {
        topics: topics.iter().map(|t| (*t).to_owned()).collect(),
        ..Default::default()
    };
    let mut buf = BytesMut::new();
    let mut w = Writer::new(&mut buf);
    w.i16(0);
    // Encoding a few topic names cannot fail; an empty subscription is
    // still a valid answer to observe if it ever did.
    let _ = sub.encode(&mut w, 0);
    buf.freeze()
}

pub(crate) fn assignment(topic: &str, partitions: &[i32]) -> Bytes {
    let a = ConsumerProtocolAssignment {
        assigned_partitions: vec![consumer_protocol_assignment::TopicPartition {
            topic: topic.into(),
            partitions: partitions.to_vec(),
            ..Default::default()
        }],
        ..Default::default()
    };
    let mut buf = BytesMut::new();
    let mut w = Writer::new(&mut buf);
    w.i16(0);
    let _ = a.encode(&mut w, 0);
    buf.freeze()
}

/// One JoinGroup's parameters.
#[derive(Clone)]
pub(crate) struct Join<'a> {
    pub(super) group: &'a str,
    pub(crate) member: String,
    pub(super) instance: Option<String>,
    pub(super) session_ms: i32,
    pub(super) rebalance_ms: i32,
    pub(super) protocol_type: &'a str,
    pub(super) assignors: &'a [&'a str],
    pub(super) topics: Vec<String>,
}

impl<'a> Join<'a> {
    pub(crate) fn new(group: &'a str, topic: &str) -> Join<'a> {
        Join {
            group,
            member: String::new(),
            instance: None,
            session_ms: 10_000,
            rebalance_ms: 10_000,
            protocol_type: PROTOCOL,
            assignors: &["range"],
            topics: vec![topic.to_owned()],
        }
    }
}

/// What a JoinGroup answered.
pub(crate) struct Joined {
    pub(crate) error: i16,
    pub(crate) generation: i32,
    pub(crate) member: String,
}

pub(crate) async fn join(s: &mut Session, step: &str, j: &Join<'_>) -> Step<Joined> {
    let version = s.version(join_group_request::API_KEY)?;
    let topics: Vec<&str> = j.topics.iter().map(String::as_str).collect();
    let body = RequestBody::JoinGroup(JoinGroupRequest {
        group_id: j.group.into(),
        session_timeout_ms: j.session_ms,
        rebalance_timeout_ms: j.rebalance_ms,
        member_id: j.member.clone(),
        group_instance_id: j.instance.clone(),
        protocol_type: j.protocol_type.into(),
        protocols: j
            .assignors
            .iter()
            .map(|a| join_group_request::JoinGroupRequestProtocol {
                name: (*a).into(),
                metadata: subscription(&topics),
                ..Default::default()
            })
            .collect(),
        reason: None,
        ..Default::default()
    });
    let r = call_as!(s, JoinGroup, version, body, step);
    let member = s.alias("member", &r.member_id);
    let leader = s.alias("member", &r.leader);
    let mut members: Vec<Value> = Vec::new();
    for m in &r.members {
        let id = s.alias("member", &m.member_id);
        members.push(json!([id, m.group_instance_id]));
    }
    members.sort_by_key(|m| m.to_string());
    s.observe(
        step,
        json!({
            "error": err(r.error_code),
            "generation": r.generation_id,
            "member": member,
            "leader": leader,
            "protocol": r.protocol_name,
            "members": members,
        }),
    );
    Ok(Joined {
        error: r.error_code,
        generation: r.generation_id,
        member: r.member_id,
    })
}

/// Joins as a new dynamic member the way clients do: the first JoinGroup
/// gets MEMBER_ID_REQUIRED and a member id, the second joins with it.
pub(crate) async fn join_new(s: &mut Session, step: &str, j: &Join<'_>) -> Step<Joined> {
    let first = join(s, &format!("{step} (no member id)"), j).await?;
    if first.error != 79 {
        return Ok(first);
    }
    let again = Join {
        member: first.member,
        ..j.clone()
    };
    join(s, step, &again).await
}

pub(crate) async fn sync(
    s: &mut Session,
    step: &str,
    group: &str,
    generation: i32,
    member: &str,
    assignments: &[(&str, Bytes)],
) -> Step<i16> {
    let version = s.version(sync_group_request::API_KEY)?;
    let body = RequestBody::SyncGroup(SyncGroupRequest {
        group_id: group.into(),
        generation_id: generation,
        member_id: member.into(),
        group_instance_id: None,
        protocol_type: Some(PROTOCOL.into()),
        protocol_name: Some("range".into()),
        assignments: assignments
            .iter()
            .map(|(m, a)| sync_group_request::SyncGroupRequestAssignment {
                member_id: (*m).into(),
                assignment: a.clone(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    });
    let r = call_as!(s, SyncGroup, version, body, step);
    let got = ConsumerProtocolAssignment::decode(
        &mut kaas_core::protocol::Reader::new(r.assignment.slice(2.min(r.assignment.len())..)),
        0,
    )
    .map(|a| {
        a.assigned_partitions
            .iter()
            .map(|tp| json!([s.local(&tp.topic), tp.partitions]))
            .collect::<Vec<_>>()
    })
    .ok();
    s.observe(step, json!({"error": err(r.error_code), "assignment": got}));
    Ok(r.error_code)
}

/// SyncGroup of a group's only member, its leader, assigning itself
/// `partitions` of `topic`.
pub(super) async fn sync_alone(
    s: &mut Session,
    step: &str,
    group: &str,
    topic: &str,
    member: &Joined,
    partitions: &[i32],
) -> Step<i16> {
    let assigned = [(member.member.as_str(), assignment(topic, partitions))];
    sync(s, step, group, member.generation, &member.member, &assigned).await
}

pub(crate) async fn heartbeat(
    s: &mut Session,
    step: &str,
    group: &str,
    generation: i32,
    member: &str,
    instance: Option<&str>,
) -> Step<i16> {
    let version = s.version(heartbeat_request::API_KEY)?;
    let body = RequestBody::Heartbeat(HeartbeatRequest {
        group_id: group.into(),
        generation_id: generation,
        member_id: member.into(),
        group_instance_id: instance.map(str::to_owned),
        ..Default::default()
    });
    let r = call_as!(s, Heartbeat, version, body, step);
    s.observe(step, json!({"error": err(r.error_code)}));
    Ok(r.error_code)
}

pub(crate) async fn leave(s: &mut Session, step: &str, group: &str, member: &str) -> Step {
    let version = s.version(leave_group_request::API_KEY)?;
    let body = RequestBody::LeaveGroup(LeaveGroupRequest {
        group_id: group.into(),
        member_id: member.into(),
        members: vec![leave_group_request::MemberIdentity {
            member_id: member.into(),
            group_instance_id: None,
            reason: None,
            ..Default::default()
        }],
        ..Default::default()
    });
    let r = call_as!(s, LeaveGroup, version, body, step);
    let members: Vec<_> = r.members.iter().map(|m| err(m.error_code)).collect();
    s.observe(
        step,
        json!({"error": err(r.error_code), "members": members}),
    );
    Ok(())
}

/// Commits `offsets` of partitions of `topic`; observes each partition's error.
pub(crate) async fn commit(
    s: &mut Session,
    step: &str,
    group: &str,
    generation: i32,
    member: &str,
    topic: &str,
    offsets: &[(i32, i64)],
) -> Step {
    let version = s.version(offset_commit_request::API_KEY)?;
    let body = RequestBody::OffsetCommit(OffsetCommitRequest {
        group_id: group.into(),
        generation_id_or_member_epoch: generation,
        member_id: member.into(),
        group_instance_id: None,
        retention_time_ms: -1,
        topics: vec![offset_commit_request::OffsetCommitRequestTopic {
            name: topic.into(),
            topic_id: s.topic_id(topic),
            partitions: offsets
                .iter()
                .map(
                    |&(p, o)| offset_commit_request::OffsetCommitRequestPartition {
                        partition_index: p,
                        committed_offset: o,
                        committed_leader_epoch: -1,
                        committed_metadata: Some(format!("at {o}")),
                        ..Default::default()
                    },
                )
                .collect(),
            ..Default::default()
        }],
        ..Default::default()
    });
    let r = call_as!(s, OffsetCommit, version, body, step);
    let mut parts: Vec<_> = r
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter())
        .map(|p| (p.partition_index, err(p.error_code)))
        .collect();
    parts.sort_by_key(|p| p.0);
    s.observe(step, json!(parts));
    Ok(())
}

/// Fetches committed offsets (`partitions` of `topic`, or all with `None`).
pub(crate) async fn fetch_offsets(
    s: &mut Session,
    step: &str,
    group: &str,
    topic: Option<(&str, &[i32])>,
) -> Step {
    let version = s.version(offset_fetch_request::API_KEY)?;
    let body = if version >= 8 {
        RequestBody::OffsetFetch(OffsetFetchRequest {
            groups: vec![offset_fetch_request::OffsetFetchRequestGroup {
                group_id: group.into(),
                member_id: None,
                member_epoch: -1,
                topics: topic.map(|(t, ps)| {
                    vec![offset_fetch_request::OffsetFetchRequestTopics {
                        name: t.into(),
                        topic_id: s.topic_id(t),
                        partition_indexes: ps.to_vec(),
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            }],
            ..Default::default()
        })
    } else {
        RequestBody::OffsetFetch(OffsetFetchRequest {
            group_id: group.into(),
            topics: topic.map(|(t, ps)| {
                vec![offset_fetch_request::OffsetFetchRequestTopic {
                    name: t.into(),
                    partition_indexes: ps.to_vec(),
                    ..Default::default()
                }]
            }),
            ..Default::default()
        })
    };
    let r = call_as!(s, OffsetFetch, version, body, step);
    let mut parts = Vec::new();
    let mut error = r.error_code;
    for g in &r.groups {
        error = error.max(g.error_code);
        for t in &g.topics {
            for p in &t.partitions {
                parts.push(json!([
                    s.local(&t.name),
                    p.partition_index,
                    p.committed_offset,
                    p.metadata,
                    err(p.error_code)
                ]));
            }
        }
    }
    for t in &r.topics {
        for p in &t.partitions {
            parts.push(json!([
                s.local(&t.name),
                p.partition_index,
                p.committed_offset,
                p.metadata,
                err(p.error_code)
            ]));
        }
    }
    parts.sort_by_key(|p| p.to_string());
    s.observe(step, json!({"error": err(error), "partitions": parts}));
    Ok(())
}

/// Waits (not observed) until the group's coordinator answers: a fresh
/// Kafka creates its offsets topic on the first FindCoordinator.
pub(crate) async fn coordinator_ready(s: &mut Session, group: &str) -> Step {
    let version = s.version(find_coordinator_request::API_KEY)?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let body = find_coordinator(group, 0, version);
        if let crate::session::Answer::Body(ResponseBody::FindCoordinator(r)) =
            s.try_call(version, &body).await
        {
            let code = if version >= 4 {
                r.coordinators.first().map_or(-100, |c| c.error_code)
            } else {
                r.error_code
            };
            if code == 0 {
                // The coordinator may still be loading the group's partition.
                if offsets_loaded(s, group).await {
                    return Ok(());
                }
            }
        }
        if Instant::now() >= deadline {
            s.observe("coordinator", json!("never available"));
            return Err(Stop(format!("no coordinator for {group}")));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn offsets_loaded(s: &mut Session, group: &str) -> bool {
    let Ok(version) = s.version(offset_fetch_request::API_KEY) else {
        return false;
    };
    let body = RequestBody::OffsetFetch(if version >= 8 {
        OffsetFetchRequest {
            groups: vec![offset_fetch_request::OffsetFetchRequestGroup {
                group_id: group.into(),
                member_epoch: -1,
                topics: None,
                ..Default::default()
            }],
            ..Default::default()
        }
    } else {
        OffsetFetchRequest {
            group_id: group.into(),
            topics: None,
            ..Default::default()
        }
    });
    match s.try_call(version, &body).await {
        crate::session::Answer::Body(ResponseBody::OffsetFetch(r)) => {
            r.error_code == 0 && r.groups.iter().all(|g| g.error_code == 0)
        }
        _ => false,
    }
}

fn find_coordinator(key: &str, key_type: i8, version: i16) -> RequestBody {
    RequestBody::FindCoordinator(FindCoordinatorRequest {
        key: if version < 4 {
            key.into()
        } else {
            String::new()
        },
        key_type,
        coordinator_keys: if version >= 4 {
            vec![key.into()]
        } else {
            Vec::new()
        },
        ..Default::default()
    })
}

/// A topic and a group ready for members.
async fn setup(s: &mut Session, partitions: i32) -> Step<(String, String)> {
    let t = s.create_topic("t", partitions).await?;
    let g = s.name("g");
    coordinator_ready(s, &g).await?;
    Ok((t, g))
}

async fn find_coordinator_scenario_step(
    s: &mut Session,
    step: &str,
    key: &str,
    key_type: i8,
) -> Step {
    let version = s.version(find_coordinator_request::API_KEY)?;
    let r = call_as!(
        s,
        FindCoordinator,
        version,
        find_coordinator(key, key_type, version),
        step
    );
    let (code, node) = if version >= 4 {
        r.coordinators
            .first()
            .map_or((-100, -1), |c| (c.error_code, c.node_id))
    } else {
        (r.error_code, r.node_id)
    };
    s.observe(step, json!({"error": err(code), "has_node": node >= 0}));
    Ok(())
}

async fn find_coordinator_scenario(s: &mut Session) -> Step {
    let g = s.name("g");
    coordinator_ready(s, &g).await?;
    find_coordinator_scenario_step(s, "group", &g, 0).await?;
    find_coordinator_scenario_step(s, "key type 7", &g, 7).await?;
    Ok(())
}

async fn lifecycle(s: &mut Session) -> Step {
    let (t, g) = setup(s, 2).await?;
    let j = join_new(s, "join", &Join::new(&g, &t)).await?;
    let a = assignment(&t, &[0, 1]);
    sync(
        s,
        "sync as leader",
        &g,
        j.generation,
        &j.member,
        &[(&j.member, a)],
    )
    .await?;
    heartbeat(s, "heartbeat", &g, j.generation, &j.member, None).await?;
    leave(s, "leave", &g, &j.member).await?;
    heartbeat(
        s,
        "heartbeat after leaving",
        &g,
        j.generation,
        &j.member,
        None,
    )
    .await?;
    Ok(())
}

async fn unknown_member(s: &mut Session) -> Step {
    let (t, g) = setup(s, 1).await?;
    heartbeat(s, "heartbeat, group unknown", &g, 1, "nobody", None).await?;
    let j = join_new(s, "join", &Join::new(&g, &t)).await?;
    sync_alone(s, "sync", &g, &t, &j, &[0]).await?;
    heartbeat(
        s,
        "heartbeat, member unknown",
        &g,
        j.generation,
        "nobody",
        None,
    )
    .await?;
    sync(s, "sync, member unknown", &g, j.generation, "nobody", &[]).await?;
    leave(s, "leave, member unknown", &g, "nobody").await?;
    Ok(())
}

async fn illegal_generation(s: &mut Session) -> Step {
    let (t, g) = setup(s, 1).await?;
    let j = join_new(s, "join", &Join::new(&g, &t)).await?;
    sync(
        s,
        "sync, wrong generation",
        &g,
        j.generation + 4,
        &j.member,
        &[],
    )
    .await?;
    sync_alone(s, "sync", &g, &t, &j, &[0]).await?;
    heartbeat(
        s,
        "heartbeat, wrong generation",
        &g,
        j.generation + 4,
        &j.member,
        None,
    )
    .await?;
    commit(
        s,
        "commit, wrong generation",
        &g,
        j.generation + 4,
        &j.member,
        &t,
        &[(0, 1)],
    )
    .await?;
    commit(
        s,
        "commit, right generation",
        &g,
        j.generation,
        &j.member,
        &t,
        &[(0, 1)],
    )
    .await?;
    Ok(())
}

async fn static_replaced(s: &mut Session) -> Step {
    let (t, g) = setup(s, 1).await?;
    let mut spec = Join::new(&g, &t);
    spec.instance = Some("instance-1".into());
    let first = join(s, "join static", &spec).await?;
    sync_alone(s, "sync", &g, &t, &first, &[0]).await?;
    let second = join(s, "rejoin static, no member id", &spec).await?;
    heartbeat(
        s,
        "old member id heartbeats",
        &g,
        first.generation,
        &first.member,
        Some("instance-1"),
    )
    .await?;
    heartbeat(
        s,
        "new member id heartbeats",
        &g,
        second.generation,
        &second.member,
        Some("instance-1"),
    )
    .await?;
    Ok(())
}

async fn rebalance_timeout(s: &mut Session) -> Step {
    let (t, g) = setup(s, 2).await?;
    let mut spec = Join::new(&g, &t);
    spec.rebalance_ms = 1500;
    let a = join_new(s, "a joins", &spec).await?;
    sync_alone(s, "a syncs", &g, &t, &a, &[0, 1]).await?;
    // b joins from a second connection; its JoinGroup waits for a.
    let mut side = s.side();
    let b_spec = spec.clone();
    let b_join = async move {
        let first = join(&mut side, "b joins (no member id)", &b_spec).await?;
        let again = Join {
            member: first.member,
            ..b_spec
        };
        let started = Instant::now();
        let b = join(&mut side, "b joins, completes once a is gone", &again).await?;
        side.observe(
            "b waited for the rebalance timeout",
            json!(started.elapsed() >= Duration::from_millis(1000)),
        );
        Ok::<_, Stop>((side, b))
    };
    let a_meanwhile = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        heartbeat(
            s,
            "a heartbeats during the rebalance",
            &g,
            a.generation,
            &a.member,
            None,
        )
        .await
    };
    let (b, a_hb) = tokio::join!(b_join, a_meanwhile);
    a_hb?;
    let (side, _) = b?;
    s.absorb(side);
    heartbeat(
        s,
        "a heartbeats after being removed",
        &g,
        a.generation,
        &a.member,
        None,
    )
    .await?;
    Ok(())
}

async fn two_members(s: &mut Session) -> Step {
    let (t, g) = setup(s, 2).await?;
    let spec = Join::new(&g, &t);
    let a = join_new(s, "a joins", &spec).await?;
    sync_alone(s, "a syncs", &g, &t, &a, &[0, 1]).await?;
    let mut side = s.side();
    let b_spec = spec.clone();
    let b_join = async move {
        let b = join_new(&mut side, "b joins", &b_spec).await?;
        Ok::<_, Stop>((side, b))
    };
    let a_rejoins = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        heartbeat(s, "a heartbeats", &g, a.generation, &a.member, None).await?;
        let again = Join {
            member: a.member.clone(),
            ..spec.clone()
        };
        join(s, "a rejoins", &again).await
    };
    let (b, a2) = tokio::join!(b_join, a_rejoins);
    let a2 = a2?;
    let (side, b) = b?;
    s.absorb(side);
    s.observe("same generation", json!(a2.generation == b.generation));
    Ok(())
}

async fn session_timeout_bounds(s: &mut Session) -> Step {
    let (t, g) = setup(s, 1).await?;
    for (step, ms) in [("session 1000 ms", 1000), ("session 2000000 ms", 2_000_000)] {
        let mut spec = Join::new(&g, &t);
        spec.session_ms = ms;
        join(s, step, &spec).await?;
    }
    Ok(())
}

async fn inconsistent_protocol(s: &mut Session) -> Step {
    let (t, g) = setup(s, 1).await?;
    let a = join_new(s, "a joins", &Join::new(&g, &t)).await?;
    sync_alone(s, "a syncs", &g, &t, &a, &[0]).await?;
    let mut other_type = Join::new(&g, &t);
    other_type.protocol_type = "connect";
    join_new(s, "b with protocol type connect", &other_type).await?;
    let mut other_assignor = Join::new(&g, &t);
    other_assignor.assignors = &["roundrobin"];
    join_new(s, "b with no assignor in common", &other_assignor).await?;
    Ok(())
}

async fn standalone_offsets(s: &mut Session) -> Step {
    let (t, g) = setup(s, 3).await?;
    commit(s, "commit p0=5 p1=7", &g, -1, "", &t, &[(0, 5), (1, 7)]).await?;
    fetch_offsets(s, "fetch p0 p1 p2", &g, Some((&t, &[0, 1, 2]))).await?;
    fetch_offsets(s, "fetch all", &g, None).await?;
    commit(s, "commit p0=9", &g, -1, "", &t, &[(0, 9)]).await?;
    fetch_offsets(s, "fetch p0", &g, Some((&t, &[0]))).await?;
    let missing = s.name("missing");
    commit(
        s,
        "commit to an unknown topic",
        &g,
        -1,
        "",
        &missing,
        &[(0, 1)],
    )
    .await?;
    commit(
        s,
        "commit to an unknown partition",
        &g,
        -1,
        "",
        &t,
        &[(9, 1)],
    )
    .await?;
    let other = s.name("other-group");
    coordinator_ready(s, &other).await?;
    fetch_offsets(
        s,
        "fetch from a group with no offsets",
        &other,
        Some((&t, &[0])),
    )
    .await?;
    Ok(())
}

async fn member_commit(s: &mut Session) -> Step {
    let (t, g) = setup(s, 1).await?;
    let j = join_new(s, "join", &Join::new(&g, &t)).await?;
    sync_alone(s, "sync", &g, &t, &j, &[0]).await?;
    commit(
        s,
        "commit as the member",
        &g,
        j.generation,
        &j.member,
        &t,
        &[(0, 3)],
    )
    .await?;
    commit(
        s,
        "commit as an unknown member",
        &g,
        j.generation,
        "nobody",
        &t,
        &[(0, 4)],
    )
    .await?;
    commit(
        s,
        "commit without membership to an active group",
        &g,
        -1,
        "",
        &t,
        &[(0, 4)],
    )
    .await?;
    fetch_offsets(s, "fetch", &g, Some((&t, &[0]))).await?;
    Ok(())
}

pub(crate) async fn describe(s: &mut Session, step: &str, group: &str) -> Step {
    let version = s.version(describe_groups_request::API_KEY)?;
    let body = RequestBody::DescribeGroups(DescribeGroupsRequest {
        groups: vec![group.into()],
        ..Default::default()
    });
    let r = call_as!(s, DescribeGroups, version, body, step);
    let g = r.groups.first().cloned().unwrap_or_default();
    let mut members = Vec::new();
    for m in &g.members {
        let id = s.alias("member", &m.member_id);
        members.push(json!([
            id,
            m.group_instance_id,
            m.client_id,
            !m.member_assignment.is_empty()
        ]));
    }
    s.observe(
        step,
        json!({
            "error": err(g.error_code),
            "state": g.group_state,
            "protocol_type": g.protocol_type,
            "protocol": g.protocol_data,
            "members": members,
        }),
    );
    Ok(())
}

/// Waits (not observed, at most 3 s) until DescribeGroups shows `members`
/// members: Kafka 4's group coordinator answers reads from its last
/// committed state, so right after a JoinGroup or LeaveGroup it may still
/// describe the group as it was. A client polling DescribeGroups sees the
/// change a moment later; the scenario looks once it is there.
pub(crate) async fn wait_described(s: &mut Session, group: &str, members: usize) -> Step {
    let version = s.latest_version(describe_groups_request::API_KEY)?;
    let body = RequestBody::DescribeGroups(DescribeGroupsRequest {
        groups: vec![group.into()],
        ..Default::default()
    });
    for _ in 0..30 {
        if let crate::session::Answer::Body(ResponseBody::DescribeGroups(r)) =
            s.try_call(version, &body).await
        {
            let settled = r.groups.first().is_some_and(|g| {
                (g.error_code == 0 && g.members.len() == members)
                    || (members == 0 && g.error_code == 69)
            });
            if settled {
                return Ok(());
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

pub(super) async fn list_has(s: &mut Session, step: &str, group: &str) -> Step {
    let version = s.version(list_groups_request::API_KEY)?;
    let body = RequestBody::ListGroups(ListGroupsRequest::default());
    let r = call_as!(s, ListGroups, version, body, step);
    let found: Vec<_> = r
        .groups
        .iter()
        .filter(|g| g.group_id == group)
        .map(|g| json!([g.protocol_type, g.group_state, g.group_type]))
        .collect();
    s.observe(step, json!({"error": err(r.error_code), "ours": found}));
    Ok(())
}

pub(super) async fn delete_group(s: &mut Session, step: &str, group: &str) -> Step {
    let version = s.version(delete_groups_request::API_KEY)?;
    let body = RequestBody::DeleteGroups(DeleteGroupsRequest {
        groups_names: vec![group.into()],
        ..Default::default()
    });
    let r = call_as!(s, DeleteGroups, version, body, step);
    let codes: Vec<_> = r.results.iter().map(|g| err(g.error_code)).collect();
    s.observe(step, json!(codes));
    Ok(())
}

async fn describe_list_delete(s: &mut Session) -> Step {
    let (t, g) = setup(s, 1).await?;
    let mut spec = Join::new(&g, &t);
    spec.instance = Some("instance-1".into());
    let j = join(s, "join static", &spec).await?;
    sync_alone(s, "sync", &g, &t, &j, &[0]).await?;
    describe(s, "describe stable", &g).await?;
    list_has(s, "listed stable", &g).await?;
    delete_group(s, "delete while it has members", &g).await?;
    commit(s, "commit", &g, j.generation, &j.member, &t, &[(0, 1)]).await?;
    let version = s.version(leave_group_request::API_KEY)?;
    let body = RequestBody::LeaveGroup(LeaveGroupRequest {
        group_id: g.clone(),
        members: vec![leave_group_request::MemberIdentity {
            member_id: j.member.clone(),
            group_instance_id: Some("instance-1".into()),
            ..Default::default()
        }],
        ..Default::default()
    });
    let r = call_as!(s, LeaveGroup, version, body, "leave");
    let members: Vec<_> = r.members.iter().map(|m| err(m.error_code)).collect();
    s.observe(
        "static member leaves",
        json!({"error": err(r.error_code), "members": members}),
    );
    describe(s, "describe empty", &g).await?;
    list_has(s, "listed empty", &g).await?;
    delete_group(s, "delete empty", &g).await?;
    describe(s, "describe deleted", &g).await?;
    fetch_offsets(s, "offsets gone", &g, Some((&t, &[0]))).await?;
    delete_group(s, "delete again", &g).await?;
    Ok(())
}

async fn offset_delete_refuses_subscribed(s: &mut Session) -> Step {
    let (t, g) = setup(s, 1).await?;
    let other = s.create_topic("other", 1).await?;
    let j = join_new(s, "join, subscribed to t", &Join::new(&g, &t)).await?;
    sync_alone(s, "sync", &g, &t, &j, &[0]).await?;
    commit(s, "commit t", &g, j.generation, &j.member, &t, &[(0, 2)]).await?;
    commit(
        s,
        "commit other",
        &g,
        j.generation,
        &j.member,
        &other,
        &[(0, 3)],
    )
    .await?;
    offset_delete(s, "delete t's offset", &g, &t).await?;
    offset_delete(s, "delete other's offset", &g, &other).await?;
    fetch_offsets(s, "what is left", &g, None).await?;
    Ok(())
}

/// OffsetDelete of partition 0 of `topic`; observes the group's error and
/// the partition's.
pub(super) async fn offset_delete(s: &mut Session, step: &str, group: &str, topic: &str) -> Step {
    let version = s.version(offset_delete_request::API_KEY)?;
    let body = RequestBody::OffsetDelete(OffsetDeleteRequest {
        group_id: group.into(),
        topics: vec![offset_delete_request::OffsetDeleteRequestTopic {
            name: topic.into(),
            partitions: vec![offset_delete_request::OffsetDeleteRequestPartition {
                partition_index: 0,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    });
    let r = call_as!(s, OffsetDelete, version, body, step);
    let parts: Vec<_> = r
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter())
        .map(|p| err(p.error_code))
        .collect();
    s.observe(
        step,
        json!({"error": err(r.error_code), "partitions": parts}),
    );
    Ok(())
}
