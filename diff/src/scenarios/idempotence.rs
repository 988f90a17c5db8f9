//! Idempotent producers: sequences, duplicates, epochs, and what
//! DescribeProducers shows of them.

use super::{scenario, Scenario};
use crate::ops::{idempotent_batch, FetchSpec};
use crate::session::{Session, Step};

pub fn scenarios() -> Vec<Scenario> {
    vec![
        scenario!(
            "idempotence/in-order",
            "consecutive sequences append",
            in_order
        ),
        scenario!(
            "idempotence/retry-of-last-batch",
            "the last batch resent is answered with its first offset, not appended",
            retry_last
        ),
        scenario!(
            "idempotence/retry-within-five",
            "any of the last five batches resent is a duplicate",
            retry_within_five
        ),
        scenario!(
            "idempotence/retry-older-than-five",
            "a batch older than the last five resent",
            retry_older
        ),
        scenario!(
            "idempotence/sequence-gap",
            "a batch that skips sequence numbers",
            sequence_gap
        ),
        scenario!(
            "idempotence/first-batch-not-zero",
            "a producer's first batch with a sequence above 0",
            first_not_zero
        ),
        scenario!(
            "idempotence/epoch-bump",
            "a higher epoch restarts sequences; the old epoch is fenced",
            epoch_bump
        ),
        scenario!(
            "idempotence/new-epoch-not-zero",
            "a new epoch must start at sequence 0",
            new_epoch_not_zero
        ),
        scenario!(
            "idempotence/init-producer-id",
            "each InitProducerId gives a new producer id at epoch 0",
            init_twice
        ),
        scenario!(
            "idempotence/per-partition",
            "sequences are per partition",
            per_partition
        ),
        scenario!(
            "idempotence/describe-producers",
            "DescribeProducers shows the producer's epoch and last sequence",
            describe_producers
        ),
    ]
}

/// An idempotent produce of `n` records, acks=all.
#[allow(clippy::too_many_arguments)]
async fn send(
    s: &mut Session,
    step: &str,
    topic: &str,
    partition: i32,
    (pid, epoch): (i64, i16),
    seq: i32,
    first: i64,
    n: i64,
) -> Step {
    let batch = idempotent_batch(s.t0, first, n, pid, epoch, seq);
    s.produce(step, topic, partition, batch, -1).await
}

async fn in_order(s: &mut Session) -> Step {
    let t = s.create_topic("t", 1).await?;
    let p = s.init_producer_id("init").await?;
    send(s, "seq 0", &t, 0, p, 0, 0, 3).await?;
    send(s, "seq 3", &t, 0, p, 3, 3, 2).await?;
    s.fetch("fetch", &t, FetchSpec::at(0, 0)).await?;
    Ok(())
}

async fn retry_last(s: &mut Session) -> Step {
    let t = s.create_topic("t", 1).await?;
    let p = s.init_producer_id("init").await?;
    send(s, "seq 0", &t, 0, p, 0, 0, 3).await?;
    send(s, "seq 0 again", &t, 0, p, 0, 0, 3).await?;
    s.list_offset("latest", &t, 0, -1, 0).await?;
    Ok(())
}

async fn retry_within_five(s: &mut Session) -> Step {
    let t = s.create_topic("t", 1).await?;
    let p = s.init_producer_id("init").await?;
    for i in 0..5 {
        send(s, &format!("seq {i}"), &t, 0, p, i, i as i64, 1).await?;
    }
    send(s, "seq 1 again", &t, 0, p, 1, 1, 1).await?;
    send(s, "seq 4 again", &t, 0, p, 4, 4, 1).await?;
    send(s, "seq 5", &t, 0, p, 5, 5, 1).await?;
    s.list_offset("latest", &t, 0, -1, 0).await?;
    Ok(())
}

async fn retry_older(s: &mut Session) -> Step {
    let t = s.create_topic("t", 1).await?;
    let p = s.init_producer_id("init").await?;
    for i in 0..6 {
        send(s, &format!("seq {i}"), &t, 0, p, i, i as i64, 1).await?;
    }
    send(s, "seq 0 again", &t, 0, p, 0, 0, 1).await?;
    s.list_offset("latest", &t, 0, -1, 0).await?;
    Ok(())
}

async fn sequence_gap(s: &mut Session) -> Step {
    let t = s.create_topic("t", 1).await?;
    let p = s.init_producer_id("init").await?;
    send(s, "seq 0", &t, 0, p, 0, 0, 2).await?;
    send(s, "seq 5 (expected 2)", &t, 0, p, 5, 2, 1).await?;
    send(s, "seq 2", &t, 0, p, 2, 2, 1).await?;
    s.list_offset("latest", &t, 0, -1, 0).await?;
    Ok(())
}

async fn first_not_zero(s: &mut Session) -> Step {
    let t = s.create_topic("t", 1).await?;
    let p = s.init_producer_id("init").await?;
    send(s, "first batch at seq 7", &t, 0, p, 7, 0, 1).await?;
    send(s, "then seq 0", &t, 0, p, 0, 0, 1).await?;
    s.list_offset("latest", &t, 0, -1, 0).await?;
    Ok(())
}

async fn epoch_bump(s: &mut Session) -> Step {
    let t = s.create_topic("t", 1).await?;
    let (pid, _) = s.init_producer_id("init").await?;
    send(s, "epoch 0 seq 0", &t, 0, (pid, 0), 0, 0, 2).await?;
    send(s, "epoch 0 seq 2", &t, 0, (pid, 0), 2, 2, 1).await?;
    send(s, "epoch 1 seq 0", &t, 0, (pid, 1), 0, 3, 1).await?;
    send(s, "epoch 0 seq 3 (fenced)", &t, 0, (pid, 0), 3, 4, 1).await?;
    send(s, "epoch 1 seq 1", &t, 0, (pid, 1), 1, 4, 1).await?;
    s.fetch("fetch", &t, FetchSpec::at(0, 0)).await?;
    Ok(())
}

async fn new_epoch_not_zero(s: &mut Session) -> Step {
    let t = s.create_topic("t", 1).await?;
    let (pid, _) = s.init_producer_id("init").await?;
    send(s, "epoch 0 seq 0", &t, 0, (pid, 0), 0, 0, 2).await?;
    send(s, "epoch 1 seq 2", &t, 0, (pid, 1), 2, 2, 1).await?;
    s.list_offset("latest", &t, 0, -1, 0).await?;
    Ok(())
}

async fn init_twice(s: &mut Session) -> Step {
    s.init_producer_id("first").await?;
    s.init_producer_id("second").await?;
    Ok(())
}

async fn per_partition(s: &mut Session) -> Step {
    let t = s.create_topic("t", 2).await?;
    let p = s.init_producer_id("init").await?;
    send(s, "p0 seq 0", &t, 0, p, 0, 0, 2).await?;
    send(s, "p1 seq 0", &t, 1, p, 0, 0, 3).await?;
    send(s, "p0 seq 2", &t, 0, p, 2, 2, 1).await?;
    send(s, "p1 seq 2 (expected 3)", &t, 1, p, 2, 3, 1).await?;
    send(s, "p1 seq 3", &t, 1, p, 3, 3, 1).await?;
    Ok(())
}

async fn describe_producers(s: &mut Session) -> Step {
    let t = s.create_topic("t", 2).await?;
    let p = s.init_producer_id("init").await?;
    send(s, "seq 0", &t, 0, p, 0, 0, 4).await?;
    send(s, "seq 4", &t, 0, p, 4, 4, 2).await?;
    s.describe_producers("describe partitions 0, 1, 7", &t, &[0, 1, 7])
        .await?;
    Ok(())
}
