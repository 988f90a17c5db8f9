//! Compacted topics (issue 12): the same records, with the same configs, to
//! both brokers; once both have cleaned, the records that survive are
//! compared.
//!
//! Segments roll by `segment.ms` judged by record timestamps, so the
//! scenario rolls them without waiting: each batch is stamped two seconds
//! after the one before, with `segment.ms` at one second, and so starts a
//! segment of its own. Both cleaners run every 500 ms here
//! (`log.cleaner.backoff.ms` in scripts/kafka-ref,
//! `--log-cleaner-backoff-ms` in scripts/diff). Waiting for a cleaner is not
//! observed: the scenario reads the partition (unobserved) until it holds
//! what a cleaned log must hold, for at most [`CLEAN_TIMEOUT`], then writes
//! down what it holds. A broker that never cleans, or cleans differently,
//! shows a different record set.
//!
//! What both must agree on: neither cleans the active segment; below it,
//! each key keeps its last record (a later record in the active segment
//! does not count: the cleaner maps only what it cleans); a tombstone stays
//! until a round after `delete.retention.ms` from the round that first kept
//! it; offsets never change. What they may do differently and is not
//! observed: how cleaned segments are grouped, and batches left without
//! records (kaas keeps each segment's last batch as an empty header, Kafka
//! drops it); only records are compared.

use super::{scenario, Scenario};
use crate::observe::err;
use crate::session::{Session, Step};
use kaas_core::protocol::messages::*;
use kaas_core::protocol::{RequestBody, ResponseBody};
use kaas_core::record::{split_batches, BatchBuilder, NewRecord};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

pub fn scenarios() -> Vec<Scenario> {
    vec![scenario!(
        "compaction/survivors",
        "updates and tombstones over a few keys, one segment per batch by segment.ms: the records left once both brokers have cleaned, then once the tombstones' delete.retention.ms has passed",
        survivors
    )]
}

/// The longest wait for one broker's cleaner to reach the expected log.
const CLEAN_TIMEOUT: Duration = Duration::from_secs(25);
/// Two batches' timestamps apart: more than `segment.ms`.
const STEP_MS: i64 = 2_000;
const DELETE_RETENTION_MS: i64 = 1_000;

/// One record as a consumer sees it: offset, key, value (None: tombstone).
type Rec = (i64, String, Option<String>);

/// The batches of round one: (key, value) per record, None a tombstone.
/// Keys k0..k4 are updated in every batch; batch 4 deletes k0 and k1, and
/// batch 5 writes all but k0 again (so k0's tombstone is its last record,
/// and k1's is superseded); the last batch, which stays in the active
/// segment, holds only a key of its own.
fn round_one() -> Vec<Vec<(String, Option<String>)>> {
    let mut batches = Vec::new();
    for b in 0..6 {
        let mut records = Vec::new();
        for k in (0..5).filter(|&k| b < 5 || k > 0) {
            let deleted = b == 4 && k < 2;
            let value = (!deleted).then(|| format!("v{b}.{k}"));
            records.push((format!("k{k}"), value));
        }
        batches.push(records);
    }
    batches.push(vec![("active".to_string(), Some("a".to_string()))]);
    batches
}

/// Round two: new keys only, so the log is dirty again and a round runs
/// after the tombstones' horizon; the last batch again stays active.
fn round_two() -> Vec<Vec<(String, Option<String>)>> {
    let mut batches = Vec::new();
    for b in 0..3 {
        batches.push(vec![
            (format!("f{b}"), Some(format!("f{b}"))),
            ("f".to_string(), Some(format!("f.{b}"))),
        ]);
    }
    batches
}

/// What a cleaned log holds: below the active segment (which starts at
/// `active_base`), each key's last record there, tombstones only if
/// `tombstones` (their horizon has not passed); the active segment whole.
fn cleaned(written: &[Rec], active_base: i64, tombstones: bool) -> Vec<Rec> {
    let mut last: BTreeMap<&str, &Rec> = BTreeMap::new();
    for r in written.iter().filter(|r| r.0 < active_base) {
        last.insert(&r.1, r);
    }
    let mut out: Vec<Rec> = last
        .into_values()
        .filter(|r| tombstones || r.2.is_some())
        .cloned()
        .collect();
    out.extend(written.iter().filter(|r| r.0 >= active_base).cloned());
    out.sort();
    out
}

async fn survivors(s: &mut Session) -> Step {
    let t = s.name("compacted");
    s.create_topic_with(
        "create compacted, segment.ms 1000",
        &t,
        1,
        &[
            ("cleanup.policy", "compact"),
            ("segment.ms", "1000"),
            ("min.cleanable.dirty.ratio", "0.01"),
            ("delete.retention.ms", "1000"),
        ],
    )
    .await?;
    let mut written: Vec<Rec> = Vec::new();
    let mut stamp = s.t0;
    produce_round(s, &t, "round 1", &round_one(), &mut stamp, &mut written).await?;
    let active_base = written.last().map_or(0, |r| r.0);
    let expected = cleaned(&written, active_base, true);
    let (got, high) = wait_for_log(s, &t, &expected).await?;
    observe_log(s, "cleaned, tombstones kept", &got, high, &expected);

    // Past the tombstones' horizon (set by the round that first kept them,
    // by the broker's clock), the next round removes them.
    tokio::time::sleep(Duration::from_millis(DELETE_RETENTION_MS as u64 + 500)).await;
    produce_round(s, &t, "round 2", &round_two(), &mut stamp, &mut written).await?;
    let active_base = written.last().map_or(0, |r| r.0);
    let expected = cleaned(&written, active_base, false);
    let (got, high) = wait_for_log(s, &t, &expected).await?;
    observe_log(s, "cleaned again, tombstones gone", &got, high, &expected);
    Ok(())
}

/// Produces each batch (acks=all, observed), stamped `STEP_MS` after the
/// one before; records what was written at which offset.
async fn produce_round(
    s: &mut Session,
    topic: &str,
    round: &str,
    batches: &[Vec<(String, Option<String>)>],
    stamp: &mut i64,
    written: &mut Vec<Rec>,
) -> Step {
    for (i, records) in batches.iter().enumerate() {
        let mut b = BatchBuilder::new();
        for (key, value) in records {
            b.push(NewRecord::new(
                *stamp,
                Some(key.as_bytes()),
                value.as_deref().map(str::as_bytes),
            ));
        }
        let next = written.last().map_or(0, |r| r.0 + 1);
        for (offset, (key, value)) in (next..).zip(records) {
            written.push((offset, key.clone(), value.clone()));
        }
        s.produce(
            &format!("{round}: batch {i}"),
            topic,
            0,
            b.build().into_bytes(),
            -1,
        )
        .await?;
        *stamp += STEP_MS;
    }
    Ok(())
}

/// Reads the partition (unobserved) until it holds `expected` or
/// [`CLEAN_TIMEOUT`] has passed; the last read and the high watermark.
async fn wait_for_log(s: &mut Session, topic: &str, expected: &[Rec]) -> Step<(Vec<Rec>, i64)> {
    let deadline = Instant::now() + CLEAN_TIMEOUT;
    loop {
        let (got, high) = read_log(s, topic).await?;
        if got == expected || Instant::now() >= deadline {
            return Ok((got, high));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn observe_log(s: &mut Session, step: &str, got: &[Rec], high: i64, expected: &[Rec]) {
    let records: Vec<Value> = got.iter().map(|(o, k, v)| json!([o, k, v])).collect();
    s.observe(
        step,
        json!({
            "high_watermark": high,
            "records": records,
            "as a cleaned log must be": got == expected,
        }),
    );
}

/// Every record of partition 0 from offset 0, by Fetch after Fetch (each
/// answers at most one segment); an error ends the read with what it has
/// and is written into the set as a record, so it shows in the comparison.
async fn read_log(s: &mut Session, topic: &str) -> Step<(Vec<Rec>, i64)> {
    let version = s.version(fetch_request::API_KEY)?;
    let mut out = Vec::new();
    let mut offset = 0;
    let mut high = -1;
    // A bounded number of fetches: the log has a few dozen batches.
    for _ in 0..200 {
        let body = RequestBody::Fetch(FetchRequest {
            replica_id: -1,
            max_wait_ms: 0,
            min_bytes: 1,
            max_bytes: 1 << 20,
            isolation_level: 0,
            session_id: 0,
            session_epoch: -1,
            topics: vec![fetch_request::FetchTopic {
                topic: topic.into(),
                topic_id: s.topic_id(topic),
                partitions: vec![fetch_request::FetchPartition {
                    partition: 0,
                    current_leader_epoch: -1,
                    fetch_offset: offset,
                    last_fetched_epoch: -1,
                    log_start_offset: -1,
                    partition_max_bytes: 1 << 20,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        });
        let ResponseBody::Fetch(r) = s.call(version, body).await? else {
            out.push((offset, "answer of another API".into(), None));
            break;
        };
        let p = r
            .responses
            .first()
            .and_then(|t| t.partitions.first())
            .cloned()
            .unwrap_or_default();
        let code = r.error_code.max(p.error_code);
        if code != 0 {
            out.push((offset, format!("fetch error {}", err(code)), None));
            break;
        }
        high = p.high_watermark;
        let before = offset;
        for batch in split_batches(p.records.unwrap_or_default()) {
            for r in batch.records() {
                match r {
                    Ok(r) if r.offset >= offset => out.push((
                        r.offset,
                        r.key
                            .as_deref()
                            .map(|k| String::from_utf8_lossy(k).into_owned())
                            .unwrap_or_default(),
                        r.value
                            .as_deref()
                            .map(|v| String::from_utf8_lossy(v).into_owned()),
                    )),
                    Ok(_) => {}
                    Err(e) => out.push((batch.base_offset(), format!("unreadable: {e}"), None)),
                }
            }
            offset = offset.max(batch.next_offset());
        }
        if offset >= high || offset == before {
            break;
        }
    }
    Ok((out, high))
}
