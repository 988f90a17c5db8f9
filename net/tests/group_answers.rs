//! The group APIs' answers on the wire, error codes and all: what each
//! handler makes of the coordinator's outcomes (success is 0, a refusal its
//! code; some refusals still carry data, such as MEMBER_ID_REQUIRED's member
//! id), including the version-dependent shapes (LeaveGroup v0-2 vs v3+,
//! DescribeGroups before and from v6).
#![cfg(not(madsim))]

mod support;

use bytes::Bytes;
use kaas_core::protocol::messages::*;
use kaas_core::protocol::{ErrorCode, RequestBody, ResponseBody};
use kaas_net::client::Connection;

const G: &str = "g";
const TOPIC: &str = "t";

async fn call(
    conn: &mut Connection,
    api_key: i16,
    version: i16,
    body: RequestBody,
) -> ResponseBody {
    conn.send(api_key, version, &body).await.expect("answered")
}

fn code(e: ErrorCode) -> i16 {
    e.code()
}

fn join_req(group: &str, member_id: &str) -> RequestBody {
    RequestBody::JoinGroup(JoinGroupRequest {
        group_id: group.into(),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 10_000,
        member_id: member_id.into(),
        protocol_type: "consumer".into(),
        protocols: vec![join_group_request::JoinGroupRequestProtocol {
            name: "range".into(),
            // Not a parseable subscription: the group is then assumed to
            // consume every topic (OffsetDelete's safe side).
            metadata: Bytes::from_static(b"x"),
            ..Default::default()
        }],
        ..Default::default()
    })
}

async fn join(
    conn: &mut Connection,
    version: i16,
    group: &str,
    member_id: &str,
) -> JoinGroupResponse {
    match call(
        conn,
        join_group_request::API_KEY,
        version,
        join_req(group, member_id),
    )
    .await
    {
        ResponseBody::JoinGroup(r) => r,
        other => panic!("unexpected {other:?}"),
    }
}

async fn sync(
    conn: &mut Connection,
    version: i16,
    member_id: &str,
    generation: i32,
) -> SyncGroupResponse {
    let req = RequestBody::SyncGroup(SyncGroupRequest {
        group_id: G.into(),
        generation_id: generation,
        member_id: member_id.into(),
        assignments: vec![sync_group_request::SyncGroupRequestAssignment {
            member_id: member_id.into(),
            assignment: Bytes::from_static(b"mine"),
            ..Default::default()
        }],
        ..Default::default()
    });
    match call(conn, sync_group_request::API_KEY, version, req).await {
        ResponseBody::SyncGroup(r) => r,
        other => panic!("unexpected {other:?}"),
    }
}

async fn heartbeat(conn: &mut Connection, member_id: &str, generation: i32) -> i16 {
    let req = RequestBody::Heartbeat(HeartbeatRequest {
        group_id: G.into(),
        generation_id: generation,
        member_id: member_id.into(),
        ..Default::default()
    });
    match call(conn, heartbeat_request::API_KEY, 3, req).await {
        ResponseBody::Heartbeat(r) => r.error_code,
        other => panic!("unexpected {other:?}"),
    }
}

/// OffsetCommit v8 of partition 0 of `t` and of `missing`: the error code
/// of each, by topic.
async fn commit(
    conn: &mut Connection,
    group: &str,
    member_id: &str,
    generation: i32,
    offset: i64,
) -> Vec<(String, i16)> {
    let partition = |offset| offset_commit_request::OffsetCommitRequestPartition {
        partition_index: 0,
        committed_offset: offset,
        committed_leader_epoch: -1,
        committed_metadata: Some("m".into()),
        ..Default::default()
    };
    let req = RequestBody::OffsetCommit(OffsetCommitRequest {
        group_id: group.into(),
        generation_id_or_member_epoch: generation,
        member_id: member_id.into(),
        retention_time_ms: -1,
        topics: [TOPIC, "missing"]
            .into_iter()
            .map(|name| offset_commit_request::OffsetCommitRequestTopic {
                name: name.into(),
                partitions: vec![partition(offset)],
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    });
    match call(conn, offset_commit_request::API_KEY, 8, req).await {
        ResponseBody::OffsetCommit(r) => r
            .topics
            .into_iter()
            .map(|t| (t.name, t.partitions[0].error_code))
            .collect(),
        other => panic!("unexpected {other:?}"),
    }
}

/// OffsetFetch v5 of partition 0 of `t`: (offset, metadata, error code).
async fn fetch(conn: &mut Connection, group: &str) -> (i64, Option<String>, i16, i16) {
    let req = RequestBody::OffsetFetch(OffsetFetchRequest {
        group_id: group.into(),
        topics: Some(vec![offset_fetch_request::OffsetFetchRequestTopic {
            name: TOPIC.into(),
            partition_indexes: vec![0],
            ..Default::default()
        }]),
        ..Default::default()
    });
    match call(conn, offset_fetch_request::API_KEY, 5, req).await {
        ResponseBody::OffsetFetch(r) => {
            let p = &r.topics[0].partitions[0];
            (
                p.committed_offset,
                p.metadata.clone(),
                p.error_code,
                r.error_code,
            )
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// OffsetDelete of partition 0 of `t` and of `missing`: (group-level
/// error, per-topic errors).
async fn delete_offsets(conn: &mut Connection, group: &str) -> (i16, Vec<(String, i16)>) {
    let req = RequestBody::OffsetDelete(OffsetDeleteRequest {
        group_id: group.into(),
        topics: [TOPIC, "missing"]
            .into_iter()
            .map(|name| offset_delete_request::OffsetDeleteRequestTopic {
                name: name.into(),
                partitions: vec![offset_delete_request::OffsetDeleteRequestPartition {
                    partition_index: 0,
                    ..Default::default()
                }],
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    });
    match call(conn, offset_delete_request::API_KEY, 0, req).await {
        ResponseBody::OffsetDelete(r) => (
            r.error_code,
            r.topics
                .into_iter()
                .map(|t| (t.name, t.partitions[0].error_code))
                .collect(),
        ),
        other => panic!("unexpected {other:?}"),
    }
}

async fn leave(
    conn: &mut Connection,
    version: i16,
    group: &str,
    members: &[&str],
) -> LeaveGroupResponse {
    let req = RequestBody::LeaveGroup(LeaveGroupRequest {
        group_id: group.into(),
        member_id: if version < 3 {
            members[0].into()
        } else {
            String::new()
        },
        members: if version < 3 {
            Vec::new()
        } else {
            members
                .iter()
                .map(|m| leave_group_request::MemberIdentity {
                    member_id: m.to_string(),
                    ..Default::default()
                })
                .collect()
        },
        ..Default::default()
    });
    match call(conn, leave_group_request::API_KEY, version, req).await {
        ResponseBody::LeaveGroup(r) => r,
        other => panic!("unexpected {other:?}"),
    }
}

async fn delete_groups(conn: &mut Connection, groups: &[&str]) -> Vec<i16> {
    let req = RequestBody::DeleteGroups(DeleteGroupsRequest {
        groups_names: groups.iter().map(|g| g.to_string()).collect(),
        ..Default::default()
    });
    match call(conn, delete_groups_request::API_KEY, 2, req).await {
        ResponseBody::DeleteGroups(r) => r.results.iter().map(|g| g.error_code).collect(),
        other => panic!("unexpected {other:?}"),
    }
}

/// DescribeGroups of one group: (error code, state).
async fn describe(conn: &mut Connection, version: i16, group: &str) -> (i16, String) {
    let req = RequestBody::DescribeGroups(DescribeGroupsRequest {
        groups: vec![group.into()],
        ..Default::default()
    });
    match call(conn, describe_groups_request::API_KEY, version, req).await {
        ResponseBody::DescribeGroups(r) => {
            (r.groups[0].error_code, r.groups[0].group_state.clone())
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// Creates `TOPIC` with one partition.
async fn create_topic(conn: &mut Connection) {
    let create = RequestBody::CreateTopics(CreateTopicsRequest {
        topics: vec![create_topics_request::CreatableTopic {
            name: TOPIC.into(),
            num_partitions: 1,
            replication_factor: 1,
            ..Default::default()
        }],
        timeout_ms: 5_000,
        ..Default::default()
    });
    match call(conn, create_topics_request::API_KEY, 5, create).await {
        ResponseBody::CreateTopics(r) => assert_eq!(r.topics[0].error_code, 0),
        other => panic!("unexpected {other:?}"),
    }
}

/// A restart needs the first broker's tasks gone: each broker runs in a
/// runtime of its own, dropped before the next one opens the directory.
#[test]
fn a_member_keeps_its_member_id_and_generation_across_a_broker_restart() {
    let first = support::runtime();
    let (dir, member_id, generation) = first.block_on(async {
        let tb = support::start_broker(|c| c.group.initial_rebalance_delay_ms = 0).await;
        let mut conn = Connection::connect(tb.addr).await.unwrap();
        create_topic(&mut conn).await;
        let id = join(&mut conn, 5, G, "").await.member_id;
        let joined = join(&mut conn, 7, G, &id).await;
        assert_eq!(joined.error_code, 0);
        let synced = sync(&mut conn, 5, &id, joined.generation_id).await;
        assert_eq!(synced.error_code, 0);
        assert_eq!(synced.assignment.as_ref(), b"mine");
        (tb._dir, id, joined.generation_id)
    });
    // The broker goes away right after those answers; its directory stays.
    drop(first);

    support::runtime().block_on(async {
        let tb = support::start_broker_in(dir, |c| c.group.initial_rebalance_delay_ms = 0).await;
        let mut conn = Connection::connect(tb.addr).await.unwrap();
        // No rejoin: the old member id and generation are still good.
        assert_eq!(heartbeat(&mut conn, &member_id, generation).await, 0);
        let committed = commit(&mut conn, G, &member_id, generation, 11).await;
        assert_eq!(committed[0], (TOPIC.to_string(), 0));
        assert_eq!(fetch(&mut conn, G).await.0, 11);
        assert_eq!(describe(&mut conn, 5, G).await, (0, "Stable".to_string()));
    });
}

#[tokio::test]
async fn group_answers_carry_the_outcome_of_each_rule() {
    let tb = support::start_broker(|c| c.group.initial_rebalance_delay_ms = 0).await;
    let mut conn = Connection::connect(tb.addr).await.unwrap();
    create_topic(&mut conn).await;
    assert!(tb.broker.topic(TOPIC).is_some());

    // JoinGroup refusals: MEMBER_ID_REQUIRED carries the new member id;
    // others echo the request's; none carries a generation or leader.
    let first = join(&mut conn, 5, G, "").await;
    assert_eq!(first.error_code, code(ErrorCode::MemberIdRequired));
    assert!(!first.member_id.is_empty());
    assert_eq!((first.generation_id, first.leader.as_str()), (-1, ""));
    assert_eq!(
        first.protocol_name,
        Some(String::new()),
        "not nullable before v7"
    );
    assert!(first.members.is_empty());
    let r = join(&mut conn, 7, "", "").await;
    assert_eq!(r.error_code, code(ErrorCode::InvalidGroupId));
    assert_eq!((r.generation_id, r.protocol_name), (-1, None));
    let r = join(&mut conn, 5, "other", "nobody").await;
    assert_eq!(r.error_code, code(ErrorCode::UnknownMemberId));
    assert_eq!(r.member_id, "nobody");

    // A successful join: generation 1, and the only member leads.
    let joined = join(&mut conn, 7, G, &first.member_id).await;
    assert_eq!(joined.error_code, 0);
    assert_eq!(joined.generation_id, 1);
    assert_eq!(joined.member_id, first.member_id);
    assert_eq!(joined.leader, joined.member_id);
    assert_eq!(joined.protocol_type.as_deref(), Some("consumer"));
    assert_eq!(joined.protocol_name.as_deref(), Some("range"));
    assert_eq!(joined.members.len(), 1);
    let me = joined.member_id.as_str();

    // SyncGroup: a refusal carries no assignment nor protocol.
    let s = sync(&mut conn, 5, me, 0).await;
    assert_eq!(s.error_code, code(ErrorCode::IllegalGeneration));
    assert!(s.assignment.is_empty());
    assert_eq!((s.protocol_type, s.protocol_name), (None, None));
    let s = sync(&mut conn, 5, me, 1).await;
    assert_eq!(s.error_code, 0);
    assert_eq!(s.assignment, Bytes::from_static(b"mine"));
    assert_eq!(s.protocol_type.as_deref(), Some("consumer"));
    assert_eq!(s.protocol_name.as_deref(), Some("range"));

    assert_eq!(heartbeat(&mut conn, me, 1).await, 0);
    assert_eq!(
        heartbeat(&mut conn, me, 0).await,
        code(ErrorCode::IllegalGeneration)
    );
    assert_eq!(
        heartbeat(&mut conn, "ghost", 1).await,
        code(ErrorCode::UnknownMemberId)
    );

    // OffsetCommit: partitions of unknown topics are refused by the
    // handler; the others get the coordinator's per-partition outcome, or
    // its group-level error.
    let unknown = code(ErrorCode::UnknownTopicOrPartition);
    assert_eq!(
        commit(&mut conn, G, me, 1, 42).await,
        vec![(TOPIC.to_string(), 0), ("missing".to_string(), unknown)]
    );
    assert_eq!(
        commit(&mut conn, G, me, 0, 43).await,
        vec![
            (TOPIC.to_string(), code(ErrorCode::IllegalGeneration)),
            ("missing".to_string(), unknown)
        ]
    );
    assert_eq!(fetch(&mut conn, G).await, (42, Some("m".to_string()), 0, 0));
    assert_eq!(
        fetch(&mut conn, "nope").await,
        (-1, Some(String::new()), 0, 0)
    );

    // OffsetDelete: the group consumes `t` (as far as anyone can tell).
    assert_eq!(
        delete_offsets(&mut conn, G).await,
        (
            0,
            vec![
                (TOPIC.to_string(), code(ErrorCode::GroupSubscribedToTopic)),
                ("missing".to_string(), unknown)
            ]
        )
    );

    assert_eq!(
        delete_groups(&mut conn, &[G, "nope"]).await,
        vec![
            code(ErrorCode::NonEmptyGroup),
            code(ErrorCode::GroupIdNotFound)
        ]
    );
    assert_eq!(describe(&mut conn, 5, G).await, (0, "Stable".to_string()));
    assert_eq!(
        describe(&mut conn, 5, "nope").await,
        (0, "Dead".to_string())
    );
    assert_eq!(
        describe(&mut conn, 6, "nope").await,
        (code(ErrorCode::GroupIdNotFound), "Dead".to_string())
    );

    // LeaveGroup: v0-2 answer with the one member's outcome; v3+ with one
    // per member under a group-level 0, or a group-level error alone.
    let r = leave(&mut conn, 1, G, &["ghost"]).await;
    assert_eq!(r.error_code, code(ErrorCode::UnknownMemberId));
    let r = leave(&mut conn, 3, "", &[me]).await;
    assert_eq!(r.error_code, code(ErrorCode::InvalidGroupId));
    assert!(r.members.is_empty());
    let r = leave(&mut conn, 3, G, &[me, "ghost"]).await;
    assert_eq!(r.error_code, 0);
    assert_eq!(
        r.members
            .iter()
            .map(|m| (m.member_id.as_str(), m.error_code))
            .collect::<Vec<_>>(),
        vec![(me, 0), ("ghost", code(ErrorCode::UnknownMemberId))]
    );
    let r = leave(&mut conn, 0, "nope", &["ghost"]).await;
    assert_eq!(r.error_code, code(ErrorCode::UnknownMemberId));

    // An Empty group's offsets can go (a group that only stores offsets
    // here), and an Empty group can.
    assert_eq!(
        commit(&mut conn, "simple", "", -1, 7).await,
        vec![(TOPIC.to_string(), 0), ("missing".to_string(), unknown)]
    );
    assert_eq!(
        delete_offsets(&mut conn, "simple").await,
        (
            0,
            vec![(TOPIC.to_string(), 0), ("missing".to_string(), unknown)]
        )
    );
    assert_eq!(
        fetch(&mut conn, "simple").await,
        (-1, Some(String::new()), 0, 0)
    );
    assert_eq!(delete_groups(&mut conn, &[G]).await, vec![0]);
    assert_eq!(fetch(&mut conn, G).await, (-1, Some(String::new()), 0, 0));
    assert_eq!(
        delete_offsets(&mut conn, G).await,
        (code(ErrorCode::GroupIdNotFound), Vec::new())
    );
}

/// DescribeGroups shows where each member connects from, in Kafka's form
/// ("/" and the address, as Java prints an InetAddress), and its client id:
/// operators match members to machines by it, and the Java AdminClient
/// passes it on as MemberDescription.host().
#[tokio::test]
async fn described_members_carry_their_client_host() {
    let tb = support::start_broker(|c| c.group.initial_rebalance_delay_ms = 0).await;
    let mut conn = Connection::connect(tb.addr).await.unwrap();
    // v3 takes an empty member id at once (no MEMBER_ID_REQUIRED round trip).
    let joined = join(&mut conn, 3, G, "").await;
    assert_eq!(joined.error_code, 0);
    let synced = sync(&mut conn, 3, &joined.member_id, joined.generation_id).await;
    assert_eq!(synced.error_code, 0);
    let req = RequestBody::DescribeGroups(DescribeGroupsRequest {
        groups: vec![G.into()],
        ..Default::default()
    });
    let members = match call(&mut conn, describe_groups_request::API_KEY, 5, req).await {
        ResponseBody::DescribeGroups(r) => r.groups[0].members.clone(),
        other => panic!("unexpected {other:?}"),
    };
    assert_eq!(members.len(), 1);
    assert_eq!(members[0].member_id, joined.member_id);
    assert_eq!(members[0].client_host, format!("/{}", tb.addr.ip()));
    assert_eq!(members[0].client_host, "/127.0.0.1");
    assert_eq!(members[0].client_id, kaas_net::client::DEFAULT_CLIENT_ID);
}
