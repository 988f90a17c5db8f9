//! Fetch: offsets out of range, size limits, long polls, isolation levels,
//! leader epochs.

use super::{scenario, Scenario};
use crate::ops::{plain_batch, FetchSpec};
use crate::session::{Session, Step};
use serde_json::json;
use std::time::{Duration, Instant};

pub fn scenarios() -> Vec<Scenario> {
    vec![
        scenario!(
            "fetch/offset-out-of-range",
            "fetch past the log end, and at a negative offset",
            out_of_range
        ),
        scenario!(
            "fetch/at-log-end",
            "fetch exactly at the log end: no error, no records",
            at_log_end
        ),
        scenario!(
            "fetch/from-the-middle",
            "fetch from inside a batch returns the whole batch",
            from_the_middle
        ),
        scenario!(
            "fetch/first-batch-over-limit",
            "a first batch larger than the limits is still returned (KIP-74)",
            first_batch_over_limit
        ),
        scenario!(
            "fetch/max-bytes",
            "the response stops at max_bytes, in whole batches",
            max_bytes
        ),
        scenario!(
            "fetch/partition-max-bytes",
            "partition_max_bytes limits one partition",
            partition_max_bytes
        ),
        scenario!(
            "fetch/long-poll-times-out",
            "an empty long poll answers after max_wait_ms",
            long_poll_times_out
        ),
        scenario!(
            "fetch/long-poll-wakes",
            "a long poll answers when data arrives",
            long_poll_wakes
        ),
        scenario!(
            "fetch/unknown-topic-or-partition",
            "fetch of a missing topic or partition",
            unknown
        ),
        scenario!(
            "fetch/read-committed",
            "read_committed without transactions sees what read_uncommitted sees",
            read_committed
        ),
        scenario!(
            "fetch/leader-epoch",
            "current_leader_epoch newer and older than the leader's",
            leader_epoch
        ),
        scenario!(
            "fetch/below-log-start",
            "fetch below a log start moved by DeleteRecords",
            below_log_start
        ),
    ]
}

async fn five_records(s: &mut Session) -> Step<String> {
    let t = s.create_topic("t", 1).await?;
    s.produce("produce 3", &t, 0, plain_batch(s.t0, 0, 3), -1)
        .await?;
    s.produce("produce 2", &t, 0, plain_batch(s.t0, 3, 2), -1)
        .await?;
    Ok(t)
}

async fn out_of_range(s: &mut Session) -> Step {
    let t = five_records(s).await?;
    s.fetch("offset 6", &t, FetchSpec::at(0, 6)).await?;
    s.fetch("offset 100", &t, FetchSpec::at(0, 100)).await?;
    s.fetch("offset -1", &t, FetchSpec::at(0, -1)).await?;
    Ok(())
}

async fn at_log_end(s: &mut Session) -> Step {
    let t = five_records(s).await?;
    s.fetch("offset 5", &t, FetchSpec::at(0, 5)).await?;
    Ok(())
}

async fn from_the_middle(s: &mut Session) -> Step {
    let t = five_records(s).await?;
    s.fetch("offset 1", &t, FetchSpec::at(0, 1)).await?;
    s.fetch("offset 4", &t, FetchSpec::at(0, 4)).await?;
    Ok(())
}

async fn first_batch_over_limit(s: &mut Session) -> Step {
    let t = five_records(s).await?;
    let spec = FetchSpec {
        max_bytes: 10,
        partition_max_bytes: 10,
        ..FetchSpec::at(0, 0)
    };
    s.fetch("limits of 10 bytes", &t, spec).await?;
    Ok(())
}

async fn ten_batches(s: &mut Session) -> Step<String> {
    let t = s.create_topic("t", 1).await?;
    for i in 0..10 {
        s.produce(&format!("batch {i}"), &t, 0, plain_batch(s.t0, i, 1), -1)
            .await?;
    }
    Ok(t)
}

async fn max_bytes(s: &mut Session) -> Step {
    // Each one-record batch is 61 + 13 = 74 bytes on the wire.
    let t = ten_batches(s).await?;
    for limit in [100, 222, 300] {
        let spec = FetchSpec {
            max_bytes: limit,
            ..FetchSpec::at(0, 0)
        };
        s.fetch(&format!("max_bytes {limit}"), &t, spec).await?;
    }
    Ok(())
}

async fn partition_max_bytes(s: &mut Session) -> Step {
    let t = ten_batches(s).await?;
    for limit in [150, 500] {
        let spec = FetchSpec {
            partition_max_bytes: limit,
            ..FetchSpec::at(0, 2)
        };
        s.fetch(&format!("partition_max_bytes {limit}"), &t, spec)
            .await?;
    }
    Ok(())
}

/// Whether an answer took about `wait` (at least 80% of it) or came at once.
fn waited(elapsed: Duration, wait: Duration) -> serde_json::Value {
    json!(if elapsed >= wait.mul_f64(0.8) {
        "waited"
    } else {
        "at once"
    })
}

async fn long_poll_times_out(s: &mut Session) -> Step {
    let t = five_records(s).await?;
    let spec = FetchSpec {
        max_wait_ms: 700,
        ..FetchSpec::at(0, 5)
    };
    let started = Instant::now();
    s.fetch("wait at the end", &t, spec).await?;
    s.observe(
        "answered",
        waited(started.elapsed(), Duration::from_millis(700)),
    );
    let spec = FetchSpec {
        max_wait_ms: 700,
        min_bytes: 1_000_000,
        ..FetchSpec::at(0, 0)
    };
    let started = Instant::now();
    s.fetch("min_bytes not reached", &t, spec).await?;
    s.observe(
        "answered",
        waited(started.elapsed(), Duration::from_millis(700)),
    );
    Ok(())
}

async fn long_poll_wakes(s: &mut Session) -> Step {
    let t = five_records(s).await?;
    let mut side = s.side();
    let spec = FetchSpec {
        max_wait_ms: 10_000,
        ..FetchSpec::at(0, 5)
    };
    let started = Instant::now();
    let topic = t.clone();
    let t0 = s.t0;
    let (fetched, produced) = tokio::join!(s.fetch("waiting fetch", &t, spec), async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        side.produce("produce meanwhile", &topic, 0, plain_batch(t0, 5, 1), -1)
            .await?;
        Ok::<_, crate::session::Stop>(side)
    });
    fetched?;
    s.absorb(produced?);
    s.observe(
        "answered before max_wait",
        json!(started.elapsed() < Duration::from_secs(8)),
    );
    Ok(())
}

async fn unknown(s: &mut Session) -> Step {
    let t = s.create_topic("t", 1).await?;
    s.fetch("partition 3", &t, FetchSpec::at(3, 0)).await?;
    let missing = s.name("missing");
    s.fetch("missing topic", &missing, FetchSpec::at(0, 0))
        .await?;
    Ok(())
}

async fn read_committed(s: &mut Session) -> Step {
    let t = five_records(s).await?;
    let spec = FetchSpec {
        isolation_level: 1,
        ..FetchSpec::at(0, 0)
    };
    s.fetch("read_committed", &t, spec).await?;
    s.list_offset("latest read_committed", &t, 0, -1, 1).await?;
    Ok(())
}

async fn leader_epoch(s: &mut Session) -> Step {
    let t = five_records(s).await?;
    for epoch in [-1, 0, 1000] {
        let spec = FetchSpec {
            current_leader_epoch: epoch,
            ..FetchSpec::at(0, 0)
        };
        s.fetch(&format!("current_leader_epoch {epoch}"), &t, spec)
            .await?;
    }
    Ok(())
}

async fn below_log_start(s: &mut Session) -> Step {
    let t = five_records(s).await?;
    s.delete_records("delete before 3", &t, 0, 3).await?;
    s.fetch("offset 1", &t, FetchSpec::at(0, 1)).await?;
    s.fetch("offset 3", &t, FetchSpec::at(0, 3)).await?;
    s.list_offset("earliest", &t, 0, -2, 0).await?;
    Ok(())
}
