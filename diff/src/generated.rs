//! Generated sequences: random but valid operations from a seed, run
//! against both brokers and compared like any scenario.
//!
//! The whole plan is drawn from the seed before anything is sent, with a
//! model that assumes every operation succeeds. The plan therefore never
//! depends on what a broker answered, and both brokers get exactly the same
//! requests: the first answer that differs is the finding, not a cascade of
//! diverging requests after it.

use crate::ops::{idempotent_batch, plain_batch, FetchSpec};
use crate::scenarios::groups::{
    assignment, commit, coordinator_ready, describe, fetch_offsets, heartbeat, join, join_new,
    leave, sync, wait_described, Join,
};
use crate::session::{Session, Step};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

/// One operation of a plan. Topics and partitions are indexes into the
/// plan's topics.
#[derive(Debug, Clone)]
enum Op {
    /// `records` plain records, the first being the partition's record
    /// number `first` (its key, value and timestamp follow from it).
    Produce {
        topic: usize,
        partition: i32,
        first: i64,
        records: i64,
    },
    ProduceIdempotent {
        topic: usize,
        partition: i32,
        first: i64,
        records: i64,
        seq: i32,
    },
    /// Resends an idempotent batch already sent (a retry).
    RetryIdempotent {
        topic: usize,
        partition: i32,
        first: i64,
        records: i64,
        seq: i32,
    },
    /// A batch whose sequence skips ahead of the expected one.
    SequenceGap {
        topic: usize,
        partition: i32,
        first: i64,
        seq: i32,
    },
    Fetch {
        topic: usize,
        partition: i32,
        offset: i64,
        max_bytes: i32,
    },
    ListOffsets {
        topic: usize,
        partition: i32,
        timestamp: i64,
    },
    DeleteRecords {
        topic: usize,
        partition: i32,
        before: i64,
    },
    AddPartition {
        topic: usize,
    },
    Commit {
        topic: usize,
        partition: i32,
        offset: i64,
    },
    FetchOffsets,
    /// A group membership step of this plan's one consumer.
    Member(MemberOp),
    DescribeProducers {
        topic: usize,
    },
    Metadata,
}

/// What the plan's consumer does in its group. It acts with the member id
/// and generation its own broker gave it (aliased in the transcript), so
/// both runs send the same requests while the brokers agree.
#[derive(Debug, Clone, Copy)]
enum MemberOp {
    /// JoinGroup: as a new member, or rejoining with its member id.
    Join,
    /// SyncGroup as the leader, assigning itself every partition of t0.
    Sync,
    Heartbeat,
    /// OffsetCommit with its member id and generation.
    Commit {
        partition: i32,
        offset: i64,
    },
    Leave,
    Describe,
}

/// What the plan believes about one partition.
#[derive(Debug, Clone, Default)]
struct PartitionModel {
    log_start: i64,
    log_end: i64,
    next_seq: i32,
    /// The last idempotent batch: (first record index, records, sequence).
    last_batch: Option<(i64, i64, i32)>,
    /// DeleteRecords moved the log start: a max-timestamp ListOffsets may
    /// then name a deleted record on Kafka (a documented difference, see
    /// `list-offsets/max-timestamp-below-log-start`), so none is drawn.
    deleted: bool,
}

struct Plan {
    /// Partitions per topic at the start.
    topics: Vec<i32>,
    ops: Vec<Op>,
}

fn draw(seed: u64, steps: usize) -> Plan {
    let mut rng = SmallRng::seed_from_u64(seed);
    let topics: Vec<i32> = (0..rng.gen_range(1..=2))
        .map(|_| rng.gen_range(1..=3))
        .collect();
    let mut model: Vec<Vec<PartitionModel>> = topics
        .iter()
        .map(|&n| vec![PartitionModel::default(); n as usize])
        .collect();
    let mut ops = Vec::with_capacity(steps);
    for _ in 0..steps {
        let topic = rng.gen_range(0..model.len());
        let partition = rng.gen_range(0..model[topic].len());
        let grows = model[topic].len() < 4;
        let p = &mut model[topic][partition];
        let partition_i32 = partition as i32;
        let op = match rng.gen_range(0..112) {
            0..=19 => {
                let records = rng.gen_range(1..=5);
                let first = p.log_end;
                p.log_end += records;
                Op::Produce {
                    topic,
                    partition: partition_i32,
                    first,
                    records,
                }
            }
            20..=39 => {
                let records = rng.gen_range(1..=4);
                let (first, seq) = (p.log_end, p.next_seq);
                p.last_batch = Some((first, records, seq));
                p.next_seq += records as i32;
                p.log_end += records;
                Op::ProduceIdempotent {
                    topic,
                    partition: partition_i32,
                    first,
                    records,
                    seq,
                }
            }
            40..=44 if p.last_batch.is_some() => {
                let (first, records, seq) = p.last_batch.unwrap_or_default();
                Op::RetryIdempotent {
                    topic,
                    partition: partition_i32,
                    first,
                    records,
                    seq,
                }
            }
            // Only once the partition knows the producer: a first batch
            // with a gap is a documented difference (UNKNOWN_PRODUCER_ID)
            // whose consequences would blur the rest of the sequence.
            45..=46 if p.last_batch.is_some() => Op::SequenceGap {
                topic,
                partition: partition_i32,
                first: p.log_end,
                seq: p.next_seq + 3,
            },
            47..=64 => {
                let offset = rng.gen_range(0..=p.log_end + 2);
                let max_bytes = [1, 150, 1 << 20][rng.gen_range(0..3)];
                Op::Fetch {
                    topic,
                    partition: partition_i32,
                    offset,
                    max_bytes,
                }
            }
            65..=74 => {
                let timestamp = match rng.gen_range(0..4) {
                    0 => -1,
                    1 => -2,
                    2 if !p.deleted => -3,
                    _ => rng.gen_range(0..=p.log_end.max(1) * 2),
                };
                Op::ListOffsets {
                    topic,
                    partition: partition_i32,
                    timestamp,
                }
            }
            75..=78 if p.log_end > p.log_start => {
                let before = rng.gen_range(p.log_start..=p.log_end);
                p.log_start = before;
                p.deleted = true;
                Op::DeleteRecords {
                    topic,
                    partition: partition_i32,
                    before,
                }
            }
            79..=80 if grows => Op::AddPartition { topic },
            81..=88 => {
                let offset = rng.gen_range(0..=p.log_end);
                Op::Commit {
                    topic,
                    partition: partition_i32,
                    offset,
                }
            }
            89..=90 => Op::FetchOffsets,
            91..=106 => Op::Member(match rng.gen_range(0..8) {
                0..=2 => MemberOp::Join,
                3 => MemberOp::Sync,
                4 => MemberOp::Heartbeat,
                5 => MemberOp::Commit {
                    partition: 0,
                    offset: rng.gen_range(0..=model[0][0].log_end),
                },
                6 => MemberOp::Leave,
                _ => MemberOp::Describe,
            }),
            107..=109 => Op::DescribeProducers { topic },
            _ => Op::Metadata,
        };
        if let Op::AddPartition { topic } = op {
            model[topic].push(PartitionModel::default());
        }
        ops.push(op);
    }
    Plan { topics, ops }
}

/// Runs the plan of `seed`. Record timestamps are t0 plus the record's
/// index in its partition, so a timestamp search has something to find.
pub async fn run(s: &mut Session, seed: u64, steps: usize) -> Step {
    let plan = draw(seed, steps);
    let mut names = Vec::new();
    let mut partitions = Vec::new();
    for (i, &n) in plan.topics.iter().enumerate() {
        names.push(s.create_topic(&format!("t{i}"), n).await?);
        partitions.push(n);
    }
    let group = s.name("g");
    coordinator_ready(s, &group).await?;
    let (pid, epoch) = s.init_producer_id("init producer id").await?;
    // The consumer's member id and generation, as its broker gave them.
    let mut member: Option<(String, i32)> = None;
    for (i, op) in plan.ops.iter().enumerate() {
        let label = |what: &str| format!("{i}: {what}");
        match *op {
            Op::Produce {
                topic,
                partition,
                first,
                records,
            } => {
                let b = plain_batch(s.t0, first, records);
                let step = label(&format!("produce {records} to t{topic}/{partition}"));
                s.produce(&step, &names[topic], partition, b, -1).await?;
            }
            Op::ProduceIdempotent {
                topic,
                partition,
                first,
                records,
                seq,
            }
            | Op::RetryIdempotent {
                topic,
                partition,
                first,
                records,
                seq,
            } => {
                let b = idempotent_batch(s.t0, first, records, pid, epoch, seq);
                let what = if matches!(op, Op::RetryIdempotent { .. }) {
                    "retry"
                } else {
                    "idempotent"
                };
                let step = label(&format!("{what} seq {seq} to t{topic}/{partition}"));
                s.produce(&step, &names[topic], partition, b, -1).await?;
            }
            Op::SequenceGap {
                topic,
                partition,
                first,
                seq,
            } => {
                let b = idempotent_batch(s.t0, first, 1, pid, epoch, seq);
                let step = label(&format!("gap seq {seq} to t{topic}/{partition}"));
                s.produce(&step, &names[topic], partition, b, -1).await?;
            }
            Op::Fetch {
                topic,
                partition,
                offset,
                max_bytes,
            } => {
                let spec = FetchSpec {
                    max_bytes,
                    partition_max_bytes: max_bytes,
                    ..FetchSpec::at(partition, offset)
                };
                s.fetch(
                    &label(&format!(
                        "fetch t{topic}/{partition} at {offset}, max {max_bytes}"
                    )),
                    &names[topic],
                    spec,
                )
                .await?;
            }
            Op::ListOffsets {
                topic,
                partition,
                timestamp,
            } => {
                let ts = if timestamp >= 0 {
                    s.t0 + timestamp
                } else {
                    timestamp
                };
                s.list_offset(
                    &label(&format!("list offsets t{topic}/{partition} at {timestamp}")),
                    &names[topic],
                    partition,
                    ts,
                    0,
                )
                .await?;
            }
            Op::DeleteRecords {
                topic,
                partition,
                before,
            } => {
                s.delete_records(
                    &label(&format!("delete t{topic}/{partition} before {before}")),
                    &names[topic],
                    partition,
                    before,
                )
                .await?;
            }
            Op::AddPartition { topic } => {
                partitions[topic] += 1;
                let count = partitions[topic];
                if s.create_partitions(
                    &label(&format!("t{topic} to {count} partitions")),
                    &names[topic],
                    count,
                )
                .await?
                    == 0
                {
                    s.wait_ready(&names[topic], count).await?;
                }
            }
            Op::Commit {
                topic,
                partition,
                offset,
            } => {
                let step = label(&format!("commit t{topic}/{partition} at {offset}"));
                commit(
                    s,
                    &step,
                    &group,
                    -1,
                    "",
                    &names[topic],
                    &[(partition, offset)],
                )
                .await?;
            }
            Op::FetchOffsets => {
                fetch_offsets(s, &label("fetch committed offsets"), &group, None).await?;
            }
            Op::Member(m) => {
                member_step(s, &label, m, &group, &names[0], partitions[0], &mut member).await?;
            }
            Op::DescribeProducers { topic } => {
                let all: Vec<i32> = (0..partitions[topic]).collect();
                s.describe_producers(
                    &label(&format!("describe producers of t{topic}")),
                    &names[topic],
                    &all,
                )
                .await?;
            }
            Op::Metadata => {
                let refs: Vec<&str> = names.iter().map(String::as_str).collect();
                s.metadata(&label("metadata"), &refs, false).await?;
            }
        }
    }
    s.observe("done", json!(plan.ops.len()));
    Ok(())
}

/// One membership step of the plan's consumer; `member` follows what its
/// broker answered.
async fn member_step(
    s: &mut Session,
    label: &impl Fn(&str) -> String,
    op: MemberOp,
    group: &str,
    topic: &str,
    partitions: i32,
    member: &mut Option<(String, i32)>,
) -> Step {
    let (id, generation) = member.clone().unwrap_or_else(|| (String::new(), -1));
    match op {
        MemberOp::Join => {
            let mut spec = Join::new(group, topic);
            spec.member = id;
            let joined = if member.is_some() {
                join(s, &label("rejoin"), &spec).await?
            } else {
                join_new(s, &label("join"), &spec).await?
            };
            if joined.error == 0 {
                *member = Some((joined.member, joined.generation));
            }
        }
        MemberOp::Sync => {
            let all: Vec<i32> = (0..partitions).collect();
            let assigned = [(id.as_str(), assignment(topic, &all))];
            sync(s, &label("sync"), group, generation, &id, &assigned).await?;
        }
        MemberOp::Heartbeat => {
            heartbeat(s, &label("heartbeat"), group, generation, &id, None).await?;
        }
        MemberOp::Commit { partition, offset } => {
            let step = label(&format!("member commit t0/{partition} at {offset}"));
            commit(
                s,
                &step,
                group,
                generation,
                &id,
                topic,
                &[(partition, offset)],
            )
            .await?;
        }
        MemberOp::Leave => {
            leave(s, &label("leave"), group, &id).await?;
            *member = None;
        }
        MemberOp::Describe => {
            wait_described(s, group, usize::from(member.is_some())).await?;
            describe(s, &label("describe group"), group).await?
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_draws_the_same_plan_every_time() {
        let a = format!("{:?}", draw(7, 60).ops);
        let b = format!("{:?}", draw(7, 60).ops);
        assert_eq!(a, b);
        assert_ne!(a, format!("{:?}", draw(8, 60).ops));
    }

    #[test]
    fn plans_only_delete_up_to_what_was_produced() {
        for seed in 0..200 {
            let plan = draw(seed, 80);
            let mut end = vec![vec![0i64; 4]; plan.topics.len()];
            for op in &plan.ops {
                match *op {
                    Op::Produce {
                        topic,
                        partition,
                        records,
                        ..
                    }
                    | Op::ProduceIdempotent {
                        topic,
                        partition,
                        records,
                        ..
                    } => end[topic][partition as usize] += records,
                    Op::DeleteRecords {
                        topic,
                        partition,
                        before,
                    } => {
                        assert!(
                            before <= end[topic][partition as usize],
                            "seed {seed}: {op:?}"
                        )
                    }
                    _ => {}
                }
            }
        }
    }
}
