//! ListOffsets: earliest, latest, max timestamp, by timestamp, and the
//! special timestamps of the tiered-storage era.

use super::{scenario, Scenario};
use crate::session::{Session, Step};
use kaas_core::record::BatchBuilder;

pub fn scenarios() -> Vec<Scenario> {
    vec![
        scenario!(
            "list-offsets/empty-topic",
            "earliest, latest and max timestamp of an empty partition",
            empty
        ),
        scenario!(
            "list-offsets/by-timestamp",
            "the first offset whose timestamp is at or after the one asked",
            by_timestamp
        ),
        scenario!(
            "list-offsets/timestamps-out-of-order",
            "timestamps that go backwards across and within batches",
            out_of_order
        ),
        scenario!(
            "list-offsets/special-timestamps",
            "-3 max timestamp, -4 earliest local, -5 latest tiered",
            special
        ),
        scenario!(
            "list-offsets/unknown-partition",
            "a partition the topic does not have",
            unknown_partition
        ),
        scenario!(
            "list-offsets/after-delete-records",
            "earliest follows DeleteRecords",
            after_delete
        ),
        scenario!(
            "list-offsets/max-timestamp-below-log-start",
            "the record with the largest timestamp was deleted",
            max_timestamp_deleted
        ),
    ]
}

/// Produces one batch whose records carry `times` (relative to t0), the
/// first being the partition's record number `first`.
async fn produce_times(s: &mut Session, t: &str, first: i64, times: &[i64]) -> Step {
    let step = format!("produce times {times:?}");
    let batch = batch_with_times(s.t0, first, times);
    s.produce(&step, t, 0, batch, -1).await
}

/// A batch whose records carry these timestamps (relative to t0).
fn batch_with_times(t0: i64, first: i64, times: &[i64]) -> bytes::Bytes {
    let mut b = BatchBuilder::new();
    for (i, ts) in times.iter().enumerate() {
        let key = format!("k{}", first + i as i64);
        b.push(kaas_core::record::NewRecord::new(
            t0 + ts,
            Some(key.as_bytes()),
            Some(b"v"),
        ));
    }
    b.build().into_bytes()
}

async fn empty(s: &mut Session) -> Step {
    let t = s.create_topic("t", 1).await?;
    for (name, ts) in [
        ("earliest", -2),
        ("latest", -1),
        ("max timestamp", -3),
        ("time 0", 0),
    ] {
        s.list_offset(name, &t, 0, ts, 0).await?;
    }
    Ok(())
}

async fn by_timestamp(s: &mut Session) -> Step {
    let t = s.create_topic("t", 1).await?;
    produce_times(s, &t, 0, &[0, 10, 20]).await?;
    produce_times(s, &t, 3, &[30, 40]).await?;
    for rel in [-5, 0, 5, 10, 25, 40, 41] {
        s.list_offset(&format!("time t0{rel:+}"), &t, 0, s.t0 + rel, 0)
            .await?;
    }
    s.list_offset("max timestamp", &t, 0, -3, 0).await?;
    Ok(())
}

async fn out_of_order(s: &mut Session) -> Step {
    let t = s.create_topic("t", 1).await?;
    produce_times(s, &t, 0, &[50, 10, 30]).await?;
    produce_times(s, &t, 3, &[20, 60]).await?;
    produce_times(s, &t, 5, &[5]).await?;
    for rel in [0, 15, 25, 55, 61] {
        s.list_offset(&format!("time t0+{rel}"), &t, 0, s.t0 + rel, 0)
            .await?;
    }
    s.list_offset("max timestamp", &t, 0, -3, 0).await?;
    Ok(())
}

async fn special(s: &mut Session) -> Step {
    let t = s.create_topic("t", 1).await?;
    produce_times(s, &t, 0, &[0, 10, 20]).await?;
    for ts in [-3, -4, -5] {
        s.list_offset(&format!("timestamp {ts}"), &t, 0, ts, 0)
            .await?;
    }
    Ok(())
}

async fn unknown_partition(s: &mut Session) -> Step {
    let t = s.create_topic("t", 1).await?;
    s.list_offset("partition 4", &t, 4, -1, 0).await?;
    let missing = s.name("missing");
    s.list_offset("missing topic", &missing, 0, -1, 0).await?;
    Ok(())
}

async fn after_delete(s: &mut Session) -> Step {
    let t = s.create_topic("t", 1).await?;
    produce_times(s, &t, 0, &[0, 10, 20]).await?;
    produce_times(s, &t, 3, &[30, 40]).await?;
    s.delete_records("delete before 4", &t, 0, 4).await?;
    s.list_offset("earliest", &t, 0, -2, 0).await?;
    s.list_offset("time t0+0", &t, 0, s.t0, 0).await?;
    s.list_offset("max timestamp", &t, 0, -3, 0).await?;
    Ok(())
}

async fn max_timestamp_deleted(s: &mut Session) -> Step {
    let t = s.create_topic("t", 1).await?;
    produce_times(s, &t, 0, &[50, 10]).await?;
    produce_times(s, &t, 2, &[20, 30]).await?;
    s.delete_records("delete before 2", &t, 0, 2).await?;
    s.list_offset("max timestamp", &t, 0, -3, 0).await?;
    s.list_offset("time t0+15", &t, 0, s.t0 + 15, 0).await?;
    Ok(())
}
