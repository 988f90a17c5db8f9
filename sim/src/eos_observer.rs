//! The observer of the exactly-once loop's committed offsets, and the
//! final reads the loop's checks need ([`crate::eos`] is the loop).
//!
//! The observer reads the committed offsets of [`EOS_GROUP`] now and then,
//! fast while an EndTxn(commit) of the loop is in flight, and after each
//! answer reads the output at read_committed up to its last stable offset:
//! every input record below a committed offset must have its output there
//! (the markers are durable before the offsets are visible,
//! [`crate::eos_history::EosHistory::committed_observed`]).

use crate::eos_history::{EOS_GROUP, EOS_INPUT_TOPIC, EOS_OUTPUT_TOPIC};
use crate::params::SimParams;
use crate::poll_history::Logs;
use crate::routes::{self, Routes};
use crate::txn::{read_to_high_watermark, ReadToTheEnd};
use crate::workload::{Backoff, RequestError, Shared};
use kaas_core::protocol::messages::{offset_fetch_request, OffsetFetchRequest};
use kaas_core::protocol::{ErrorCode, RequestBody, ResponseBody};
use kaas_net::broker::Isolation;
use madsim::rand::{thread_rng, Rng};
use madsim::time::{sleep, timeout, Instant};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

const OFFSET_FETCH_VERSION: i16 = 7;
/// How often the observer polls while an EndTxn(commit) is in flight, at
/// most, and how many times per commit.
const IN_FLIGHT_POLL_MS: u64 = 3;
const IN_FLIGHT_POLLS: u32 = 4;

/// Errors a group coordinator answers while it cannot serve: retry later.
pub(crate) fn coordinator_busy(code: i16) -> bool {
    [
        ErrorCode::NotCoordinator,
        ErrorCode::CoordinatorNotAvailable,
        ErrorCode::CoordinatorLoadInProgress,
        ErrorCode::RequestTimedOut,
    ]
    .iter()
    .any(|c| c.code() == code)
}

pub(crate) fn offset_fetch_body(partitions: &[i32], require_stable: bool) -> RequestBody {
    RequestBody::OffsetFetch(OffsetFetchRequest {
        group_id: EOS_GROUP.into(),
        topics: Some(vec![
            kaas_core::protocol::messages::offset_fetch_request::OffsetFetchRequestTopic {
                name: EOS_INPUT_TOPIC.into(),
                partition_indexes: partitions.to_vec(),
                ..Default::default()
            },
        ]),
        require_stable,
        ..Default::default()
    })
}

/// The committed offset of every input partition an OffsetFetch answered
/// (-1: none), or the first error code (the group's, or a partition's).
pub(crate) fn committed_offsets(
    r: &kaas_core::protocol::messages::OffsetFetchResponse,
) -> Result<BTreeMap<i32, i64>, i16> {
    if r.error_code != 0 {
        return Err(r.error_code);
    }
    let mut out = BTreeMap::new();
    for p in r
        .topics
        .iter()
        .filter(|t| t.name == EOS_INPUT_TOPIC)
        .flat_map(|t| &t.partitions)
    {
        if p.error_code != 0 {
            return Err(p.error_code);
        }
        out.insert(p.partition_index, p.committed_offset);
    }
    Ok(out)
}

/// Reads the output at read_committed from `positions` up to each
/// partition's last stable offset, reporting what it reads; returns the
/// partitions read that far (a failed read leaves a partition out).
async fn read_output(
    routes: &mut Routes,
    positions: &mut BTreeMap<i32, i64>,
    shared: &Shared,
) -> Vec<i32> {
    let mut done = Vec::new();
    let mut pending = positions.clone();
    for _ in 0..20 {
        if pending.is_empty() {
            break;
        }
        let Ok(fetched) = routes
            .fetch_committed(EOS_OUTPUT_TOPIC, &pending, 0, shared)
            .await
        else {
            break;
        };
        for part in fetched {
            if part.error_code != 0 {
                pending.remove(&part.partition);
                continue;
            }
            if let Some(v) = part.starved_violation(EOS_OUTPUT_TOPIC, Isolation::ReadCommitted) {
                shared.eos().violation(v);
            }
            shared.eos().output_read(part.partition, &part.records);
            let at = positions.entry(part.partition).or_insert(0);
            *at = (*at).max(part.next_offset);
            if *at >= part.last_stable_offset {
                pending.remove(&part.partition);
                done.push(part.partition);
            } else {
                pending.insert(part.partition, *at);
            }
        }
    }
    done
}

/// Watches the loop's committed offsets until the loop is done: after each
/// OffsetFetch answer (require_stable or not, drawn), reads the output at
/// read_committed and checks that the output below every committed offset
/// is visible. Polls fast while an EndTxn(commit) is in flight, when a
/// broker that exposed offsets before their markers were durable would be
/// caught.
pub async fn offset_observer(params: SimParams, brokers: Vec<SocketAddr>, shared: Arc<Shared>) {
    let mut routes = Routes::new("eos-observer", &brokers);
    let key = (routes::KEY_GROUP, EOS_GROUP.to_string());
    let mut output: BTreeMap<i32, i64> = (0..params.partitions).map(|p| (p, 0)).collect();
    let partitions: Vec<i32> = (0..params.partitions).collect();
    let mut polls_in_flight = 0;
    while !shared.eos_done.load(Ordering::Relaxed) {
        if shared.eos_committing.load(Ordering::Relaxed) && polls_in_flight < IN_FLIGHT_POLLS {
            polls_in_flight += 1;
            let wait = thread_rng().gen_range(0..=IN_FLIGHT_POLL_MS);
            sleep(Duration::from_millis(wait)).await;
        } else {
            let idle = Duration::from_millis(thread_rng().gen_range(250..=750));
            let _ = timeout(idle, shared.eos_commit_started.notified()).await;
            polls_in_flight = 0;
        }
        let in_flight = shared.eos_committing.load(Ordering::Relaxed);
        let require_stable = thread_rng().gen_bool(0.5);
        let sent_at = shared.eos().tick();
        let answer = routes
            .ask_coordinator(
                &key,
                offset_fetch_request::API_KEY,
                OFFSET_FETCH_VERSION,
                &offset_fetch_body(&partitions, require_stable),
                &shared,
            )
            .await;
        let offsets = match answer {
            Ok(ResponseBody::OffsetFetch(r)) => match committed_offsets(&r) {
                Ok(offsets) => offsets,
                Err(code) => {
                    if code != ErrorCode::UnstableOffsetCommit.code() && !coordinator_busy(code) {
                        shared
                            .eos()
                            .violation(format!("observer: OffsetFetch failed with {code}"));
                    }
                    continue;
                }
            },
            Ok(other) => {
                shared
                    .eos()
                    .violation(format!("observer: OffsetFetch answered {other:?}"));
                continue;
            }
            Err(_) => continue,
        };
        let read = read_output(&mut routes, &mut output, &shared).await;
        let mut eos = shared.eos();
        for (&p, &committed) in &offsets {
            if read.contains(&p) {
                eos.committed_observed(p, committed, sent_at, in_flight);
            } else {
                eos.offset_read(p, committed, sent_at);
            }
        }
    }
}

/// What the final reads found: the group's committed offsets, the input
/// and the output as read_committed delivers them, and the output as
/// read_uncommitted does.
pub struct FinalRead {
    pub committed: BTreeMap<i32, i64>,
    pub input: Logs,
    pub output: Logs,
    pub output_uncommitted: Logs,
}

/// After the loop drained: the group's committed offsets
/// (require_stable, retried while unstable), then the whole input and
/// output read at read_committed up to their high watermarks, and the
/// output again at read_uncommitted.
pub async fn final_read(
    params: SimParams,
    brokers: Vec<SocketAddr>,
    shared: Arc<Shared>,
    deadline: Duration,
) -> Result<FinalRead, String> {
    let give_up = Instant::now() + deadline;
    let mut routes = Routes::new("eos-final", &brokers);
    let key = (routes::KEY_GROUP, EOS_GROUP.to_string());
    let mut backoff = Backoff::new();
    let partitions: Vec<i32> = (0..params.partitions).collect();
    let mut last = String::new();
    let committed = loop {
        if Instant::now() >= give_up {
            return Err(format!(
                "liveness: could not read {EOS_GROUP}'s committed offsets within {deadline:?} ({last})"
            ));
        }
        let sent_at = shared.eos().tick();
        let answer = routes
            .ask_coordinator(
                &key,
                offset_fetch_request::API_KEY,
                OFFSET_FETCH_VERSION,
                &offset_fetch_body(&partitions, true),
                &shared,
            )
            .await;
        match answer {
            Ok(ResponseBody::OffsetFetch(r)) => match committed_offsets(&r) {
                Ok(offsets) => {
                    let mut eos = shared.eos();
                    for (&p, &o) in &offsets {
                        eos.offset_read(p, o, sent_at);
                    }
                    break offsets;
                }
                Err(code) => last = format!("OffsetFetch error {code}"),
            },
            Ok(other) => {
                last = format!("OffsetFetch: {other:?}");
                routes.disconnect_all();
            }
            Err(RequestError::Network(e) | RequestError::Malformed(e)) => {
                last = format!("OffsetFetch: {e}");
            }
        }
        backoff.wait().await;
    };
    let read = |topic, isolation| ReadToTheEnd {
        topic,
        partitions: &partitions,
        isolation,
        compacted: false,
        give_up,
    };
    let input = read_to_high_watermark(
        &mut routes,
        &read(EOS_INPUT_TOPIC, Isolation::ReadCommitted),
        &shared,
    )
    .await?;
    let output = read_to_high_watermark(
        &mut routes,
        &read(EOS_OUTPUT_TOPIC, Isolation::ReadCommitted),
        &shared,
    )
    .await?;
    let output_uncommitted = read_to_high_watermark(
        &mut routes,
        &read(EOS_OUTPUT_TOPIC, Isolation::ReadUncommitted),
        &shared,
    )
    .await?;
    Ok(FinalRead {
        committed,
        input: input.logs,
        output: output.logs,
        output_uncommitted: output_uncommitted.logs,
    })
}
