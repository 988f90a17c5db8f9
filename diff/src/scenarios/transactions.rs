//! Transactions (KIP-98, KIP-360, KIP-588, KIP-890): the coordinator's
//! InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn and
//! TxnOffsetCommit with every error path, what read_committed consumers
//! and OffsetFetch(require_stable) see of open, committed and aborted
//! transactions, and the admin views (DescribeTransactions,
//! ListTransactions, DescribeProducers).
//!
//! Where the answer depends on the request's version (PRODUCER_FENCED
//! against INVALID_PRODUCER_EPOCH, the epoch bump of EndTxn v5, the
//! implicit AddPartitionsToTxn of Produce v12), the scenario sweeps every
//! version both brokers serve, each with its own transactional id.
//! Producer ids are written down by role and epochs relative to the first
//! one seen (`pid1 epoch+1`, observe::producer).
//!
//! Every EndTxn is followed by an unobserved wait until the transaction
//! is no longer Prepare*: Kafka answers EndTxn once the outcome is logged
//! and writes the markers after, so without the wait the next step would
//! race them (and CONCURRENT_TRANSACTIONS would come and go with timing).

use super::groups::{coordinator_ready, join_new, sync_alone, Join};
use super::{scenario, Scenario};
use crate::ops::{FetchSpec, Txn, TXN_TIMEOUT_MS};
use crate::session::{Session, Step, Stop};
use kaas_core::protocol::messages::*;
use serde_json::json;
use std::time::Duration;

pub fn scenarios() -> Vec<Scenario> {
    vec![
        scenario!("txn/find-coordinator", "FindCoordinator of a transactional id (key type 1)", find_coordinator),
        scenario!("txn/init-producer-id", "a new transactional id gets epoch 0; InitProducerId again bumps the epoch of the same producer id (every version)", init_twice),
        scenario!("txn/init-timeout", "a transaction timeout above transaction.max.timeout.ms, or not positive, is INVALID_TRANSACTION_TIMEOUT", init_timeout),
        scenario!("txn/init-claim-current", "v3+: claiming the current producer id and epoch bumps the epoch; the same claim again is a retry", init_claim_current),
        scenario!("txn/init-claim-wrong", "v3+: claiming a stale or future epoch, or another producer id, is fenced (PRODUCER_FENCED from v4, INVALID_PRODUCER_EPOCH before)", init_claim_wrong),
        scenario!("txn/init-during-ongoing", "InitProducerId while a transaction is open aborts it: CONCURRENT_TRANSACTIONS, then a bumped epoch; the old producer is fenced", init_during_ongoing),
        scenario!("txn/add-partitions-errors", "AddPartitionsToTxn v0-v3: unknown topic or partition, wrong epoch, wrong producer id, unknown transactional id", add_partitions_errors),
        scenario!("txn/add-partitions-batched", "AddPartitionsToTxn v4+ (the brokers' batched form) sent by a client", add_partitions_batched),
        scenario!("txn/add-offsets", "AddOffsetsToTxn: success, wrong epoch, wrong producer id, unknown transactional id (every version)", add_offsets),
        scenario!("txn/commit", "a transaction committed: markers, last stable offset, the next transaction", commit),
        scenario!("txn/abort", "a transaction aborted: markers, the aborted list of a read_committed fetch", abort),
        scenario!("txn/commit-tv1", "a whole transaction the way a pre-KIP-890 client runs it (Produce v11, EndTxn v4)", commit_tv1),
        scenario!("txn/timeout-abort", "a transaction open longer than its timeout is aborted by the coordinator; its producer is fenced", timeout_abort),
        scenario!("txn/end-txn-empty", "EndTxn with nothing in the transaction (every version)", end_txn_empty),
        scenario!("txn/end-txn-retry", "EndTxn retried after completion: the same outcome is NONE, the other INVALID_TXN_STATE (every version)", end_txn_retry),
        scenario!("txn/end-txn-fenced", "EndTxn with a wrong epoch, a wrong producer id, an unknown transactional id (every version)", end_txn_fenced),
        scenario!("txn/produce-not-added", "a transactional Produce to a partition not added to the transaction, per Produce version (KIP-890)", produce_not_added),
        scenario!("txn/produce-without-transactional-id", "a transactional batch in a Produce that names no transactional id", produce_without_id),
        scenario!("txn/read-committed-open", "read_committed Fetch and ListOffsets stop at the last stable offset of an open transaction", read_committed_open),
        scenario!("txn/read-committed-aborted", "read_committed Fetch after an abort lists the aborted transaction", read_committed_aborted),
        scenario!("txn/offset-commit", "TxnOffsetCommit: pending offsets are UNSTABLE_OFFSET_COMMIT to require_stable, visible after commit", offset_commit),
        scenario!("txn/offset-commit-abort", "TxnOffsetCommit offsets are discarded by an abort", offset_commit_abort),
        scenario!("txn/offset-commit-errors", "TxnOffsetCommit without AddOffsetsToTxn, wrong epoch, wrong producer id (every version)", offset_commit_errors),
        scenario!("txn/offset-commit-member", "TxnOffsetCommit v3+ checked against a live group's generation and member", offset_commit_member),
        scenario!("txn/write-txn-markers", "WriteTxnMarkers as an operator sends it (KIP-664): unknown partitions, the abort of an open transaction, a deposed coordinator epoch, a marker with nothing open, then the client's own abort", write_txn_markers),
        scenario!("txn/describe-list", "DescribeTransactions and ListTransactions (state filters) of Empty, Ongoing and CompleteCommit transactions", describe_list),
        scenario!("txn/describe-producers", "DescribeProducers during an open transaction shows its first offset", describe_producers),
    ]
}

/// Every version of `api_key` both brokers serve, lowest first.
fn versions(s: &Session, api_key: i16) -> Step<Vec<i16>> {
    let (lo, hi) = s
        .version_range(api_key)
        .ok_or_else(|| Stop(format!("api {api_key} is not served by both brokers")))?;
    Ok((lo..=hi).collect())
}

/// The error the last observation wrote down, for a scenario whose next
/// request depends on whether the last one was accepted.
fn last_error(s: &Session) -> String {
    s.transcript
        .entries
        .last()
        .and_then(|e| e.value.get("error"))
        .and_then(|v| v.as_str())
        .unwrap_or_default()
        .to_owned()
}

/// A producer id no broker gave this scenario.
fn other_pid(txn: &Txn) -> i64 {
    txn.pid + 1000
}

async fn find_coordinator(s: &mut Session) -> Step {
    let id = s.name("tx");
    s.txn_coordinator_ready(&id).await?;
    // Key types start at v1; v4 batches the keys.
    for v in versions(s, find_coordinator_request::API_KEY)? {
        if v >= 1 {
            s.find_coordinator(&format!("v{v} transactional id"), v, &id, 1)
                .await?;
        }
    }
    Ok(())
}

async fn init_twice(s: &mut Session) -> Step {
    for v in versions(s, init_producer_id_request::API_KEY)? {
        let id = s.name(&format!("tx-v{v}"));
        s.txn_coordinator_ready(&id).await?;
        let (_, first) = s
            .init_txn_at(&format!("v{v} first"), v, &id, TXN_TIMEOUT_MS, None)
            .await?;
        // Epochs are otherwise written relative to the first; the first
        // itself is a rule (a new transactional id starts at 0).
        s.observe(format!("v{v} first epoch"), json!(first.epoch));
        s.init_txn_at(&format!("v{v} second"), v, &id, TXN_TIMEOUT_MS, None)
            .await?;
        s.init_txn_at(&format!("v{v} third"), v, &id, TXN_TIMEOUT_MS, None)
            .await?;
    }
    Ok(())
}

async fn init_timeout(s: &mut Session) -> Step {
    let v = s.version(init_producer_id_request::API_KEY)?;
    let id = s.name("tx");
    s.txn_coordinator_ready(&id).await?;
    for (step, timeout) in [
        ("timeout 900001 (max + 1)", 900_001),
        ("timeout 0", 0),
        ("timeout -5", -5),
        ("timeout 900000 (the max)", 900_000),
        ("timeout 2147483647", i32::MAX),
        ("timeout 1", 1),
    ] {
        s.init_txn_at(step, v, &id, timeout, None).await?;
    }
    s.describe_transactions("describe", &[&id]).await?;
    Ok(())
}

async fn init_claim_current(s: &mut Session) -> Step {
    for v in versions(s, init_producer_id_request::API_KEY)? {
        if v < 3 {
            continue;
        }
        let id = s.name(&format!("tx-v{v}"));
        s.txn_coordinator_ready(&id).await?;
        let (_, a) = s
            .init_txn_at(&format!("v{v} init"), v, &id, TXN_TIMEOUT_MS, None)
            .await?;
        let claim = Some((a.pid, a.epoch));
        let (_, b) = s
            .init_txn_at(
                &format!("v{v} claim the current epoch"),
                v,
                &id,
                TXN_TIMEOUT_MS,
                claim,
            )
            .await?;
        // The answer to the claim lost and the claim sent again: the
        // coordinator remembers the epoch it bumped from.
        s.init_txn_at(
            &format!("v{v} the same claim again (a retry)"),
            v,
            &id,
            TXN_TIMEOUT_MS,
            claim,
        )
        .await?;
        s.init_txn_at(
            &format!("v{v} claim the new epoch"),
            v,
            &id,
            TXN_TIMEOUT_MS,
            Some((b.pid, b.epoch)),
        )
        .await?;
        // A claim for a transactional id the coordinator has never seen.
        let fresh = s.name(&format!("tx-v{v}-fresh"));
        s.txn_coordinator_ready(&fresh).await?;
        s.init_txn_at(
            &format!("v{v} claim on a new transactional id"),
            v,
            &fresh,
            TXN_TIMEOUT_MS,
            claim,
        )
        .await?;
    }
    Ok(())
}

async fn init_claim_wrong(s: &mut Session) -> Step {
    for v in versions(s, init_producer_id_request::API_KEY)? {
        if v < 3 {
            continue;
        }
        let id = s.name(&format!("tx-v{v}"));
        s.txn_coordinator_ready(&id).await?;
        let (_, a) = s
            .init_txn_at(&format!("v{v} init"), v, &id, TXN_TIMEOUT_MS, None)
            .await?;
        let (_, b) = s
            .init_txn_at(
                &format!("v{v} init again (a new producer instance)"),
                v,
                &id,
                TXN_TIMEOUT_MS,
                None,
            )
            .await?;
        s.init_txn_at(
            &format!("v{v} claim the stale epoch"),
            v,
            &id,
            TXN_TIMEOUT_MS,
            Some((a.pid, a.epoch)),
        )
        .await?;
        s.init_txn_at(
            &format!("v{v} claim a future epoch"),
            v,
            &id,
            TXN_TIMEOUT_MS,
            Some((b.pid, b.epoch + 5)),
        )
        .await?;
        s.init_txn_at(
            &format!("v{v} claim another producer id"),
            v,
            &id,
            TXN_TIMEOUT_MS,
            Some((other_pid(&b), b.epoch)),
        )
        .await?;
        s.init_txn_at(
            &format!("v{v} claim the current epoch after all that"),
            v,
            &id,
            TXN_TIMEOUT_MS,
            Some((b.pid, b.epoch)),
        )
        .await?;
    }
    Ok(())
}

async fn init_during_ongoing(s: &mut Session) -> Step {
    let t = s.create_topic("t", 1).await?;
    let tx = s.init_txn("init", "tx").await?;
    s.add_partitions("add t-0", &tx, &[(&t, &[0])]).await?;
    s.produce_txn("produce 2 records", &t, 0, &tx, 0, (0, 2))
        .await?;
    let v = s.version(init_producer_id_request::API_KEY)?;
    s.init_txn_at(
        "init while the transaction is open",
        v,
        &tx.id,
        TXN_TIMEOUT_MS,
        None,
    )
    .await?;
    // Clients retry CONCURRENT_TRANSACTIONS; how many retries it takes
    // is timing, what the last one answers is the rule.
    s.init_txn_retried("init retried until not CONCURRENT_TRANSACTIONS", v, &tx.id)
        .await?;
    s.describe_transactions("describe", &[&tx.id]).await?;
    let ev = s.version(end_txn_request::API_KEY)?;
    s.end_txn_at("the old producer commits", ev, &tx, true)
        .await?;
    s.produce_txn("the old producer produces", &t, 0, &tx, 2, (2, 1))
        .await?;
    let mut spec = FetchSpec::at(0, 0);
    spec.isolation_level = 1;
    s.fetch("fetch read_committed", &t, spec).await?;
    Ok(())
}

async fn add_partitions_errors(s: &mut Session) -> Step {
    let t = s.create_topic("t", 2).await?;
    let missing = s.name("missing");
    for v in versions(s, add_partitions_to_txn_request::API_KEY)? {
        if v > 3 {
            continue;
        }
        let tx = s
            .init_txn(&format!("v{v} init"), &format!("tx-v{v}"))
            .await?;
        s.add_partitions_at(&format!("v{v} add t-0"), v, &tx, &[(&t, &[0])])
            .await?;
        s.add_partitions_at(&format!("v{v} add t-0 again"), v, &tx, &[(&t, &[0])])
            .await?;
        s.add_partitions_at(
            &format!("v{v} add t-1 and an unknown topic"),
            v,
            &tx,
            &[(&t, &[1]), (&missing, &[0])],
        )
        .await?;
        s.add_partitions_at(
            &format!("v{v} add t-1 and t-7 (no such partition)"),
            v,
            &tx,
            &[(&t, &[1, 7])],
        )
        .await?;
        s.add_partitions_at(
            &format!("v{v} add t-1 with a future epoch"),
            v,
            &tx.with_epoch(tx.epoch + 1),
            &[(&t, &[1])],
        )
        .await?;
        s.add_partitions_at(
            &format!("v{v} add t-1 with another producer id"),
            v,
            &tx.with_pid(other_pid(&tx)),
            &[(&t, &[1])],
        )
        .await?;
        let unknown = Txn {
            id: s.name(&format!("tx-v{v}-never-initialized")),
            ..tx.clone()
        };
        s.txn_coordinator_ready(&unknown.id).await?;
        s.add_partitions_at(
            &format!("v{v} add t-1 for an unknown transactional id"),
            v,
            &unknown,
            &[(&t, &[1])],
        )
        .await?;
        s.add_partitions_at(
            &format!("v{v} add unknown topic with a future epoch"),
            v,
            &tx.with_epoch(tx.epoch + 1),
            &[(&missing, &[0])],
        )
        .await?;
        s.describe_transactions(&format!("v{v} describe"), &[&tx.id])
            .await?;
        // A stale epoch after a new producer instance took over.
        let iv = s.version(init_producer_id_request::API_KEY)?;
        s.init_txn_at(
            &format!("v{v} a new instance (aborts)"),
            iv,
            &tx.id,
            TXN_TIMEOUT_MS,
            None,
        )
        .await?;
        s.txn_settled(&tx.id).await?;
        s.add_partitions_at(
            &format!("v{v} add t-1 with the stale epoch"),
            v,
            &tx,
            &[(&t, &[1])],
        )
        .await?;
    }
    Ok(())
}

async fn add_partitions_batched(s: &mut Session) -> Step {
    let t = s.create_topic("t", 2).await?;
    let missing = s.name("missing");
    for v in versions(s, add_partitions_to_txn_request::API_KEY)? {
        if v < 4 {
            continue;
        }
        let a = s
            .init_txn(&format!("v{v} init a"), &format!("tx-v{v}-a"))
            .await?;
        let b = s
            .init_txn(&format!("v{v} init b"), &format!("tx-v{v}-b"))
            .await?;
        s.add_partitions_batched(
            &format!("v{v} add a: t-0, verify b: t-0"),
            v,
            &[(&a, false, &[(&t, &[0])]), (&b, true, &[(&t, &[0])])],
        )
        .await?;
        s.add_partitions_batched(
            &format!("v{v} verify a: t-0 and t-1"),
            v,
            &[(&a, true, &[(&t, &[0, 1])])],
        )
        .await?;
        s.add_partitions_batched(
            &format!("v{v} add a future epoch of b, an unknown topic for a"),
            v,
            &[
                (&b.with_epoch(b.epoch + 1), false, &[(&t, &[1])]),
                (&a, false, &[(&missing, &[0])]),
            ],
        )
        .await?;
        s.describe_transactions(&format!("v{v} describe a, b"), &[&a.id, &b.id])
            .await?;
        let ev = s.version(end_txn_request::API_KEY)?;
        s.end_txn_at(&format!("v{v} abort a"), ev, &a, false)
            .await?;
        s.txn_settled(&a.id).await?;
    }
    Ok(())
}

async fn add_offsets(s: &mut Session) -> Step {
    let g = s.name("g");
    coordinator_ready(s, &g).await?;
    for v in versions(s, add_offsets_to_txn_request::API_KEY)? {
        let tx = s
            .init_txn(&format!("v{v} init"), &format!("tx-v{v}"))
            .await?;
        s.add_offsets_at(&format!("v{v} add offsets of g"), v, &tx, &g)
            .await?;
        s.add_offsets_at(&format!("v{v} again"), v, &tx, &g).await?;
        s.add_offsets_at(
            &format!("v{v} with a future epoch"),
            v,
            &tx.with_epoch(tx.epoch + 1),
            &g,
        )
        .await?;
        s.add_offsets_at(
            &format!("v{v} with another producer id"),
            v,
            &tx.with_pid(other_pid(&tx)),
            &g,
        )
        .await?;
        let unknown = Txn {
            id: s.name(&format!("tx-v{v}-never-initialized")),
            ..tx.clone()
        };
        s.txn_coordinator_ready(&unknown.id).await?;
        s.add_offsets_at(
            &format!("v{v} for an unknown transactional id"),
            v,
            &unknown,
            &g,
        )
        .await?;
        s.describe_transactions(&format!("v{v} describe"), &[&tx.id])
            .await?;
        let ev = s.version(end_txn_request::API_KEY)?;
        s.end_txn_at(&format!("v{v} abort"), ev, &tx, false).await?;
        s.txn_settled(&tx.id).await?;
    }
    Ok(())
}

/// The next sequence of a producer that wrote `written` records in the
/// epoch of `before`: sequences restart at 0 when an EndTxn (v5) bumped
/// the epoch.
fn next_seq(before: &Txn, after: &Txn, written: i32) -> i32 {
    if before.epoch == after.epoch && before.pid == after.pid {
        written
    } else {
        0
    }
}

/// One transaction to the end: add t-0, two records, EndTxn, then what a
/// read_committed consumer and the coordinator see; then a second
/// transaction from the same producer.
async fn whole_transaction(s: &mut Session, commit: bool) -> Step {
    let t = s.create_topic("t", 1).await?;
    let tx = s.init_txn("init", "tx").await?;
    s.add_partitions("add t-0", &tx, &[(&t, &[0])]).await?;
    s.produce_txn("produce 2 records", &t, 0, &tx, 0, (0, 2))
        .await?;
    s.describe_transactions("describe ongoing", &[&tx.id])
        .await?;
    let word = if commit { "commit" } else { "abort" };
    let next = s.end_txn(word, &tx, commit).await?;
    s.describe_transactions("describe after", &[&tx.id]).await?;
    let mut rc = FetchSpec::at(0, 0);
    rc.isolation_level = 1;
    s.fetch("fetch read_committed", &t, rc).await?;
    s.fetch("fetch read_uncommitted", &t, FetchSpec::at(0, 0))
        .await?;
    s.list_offset("latest read_committed", &t, 0, -1, 1).await?;
    // The same producer's next transaction.
    s.add_partitions("next: add t-0", &next, &[(&t, &[0])])
        .await?;
    let seq = next_seq(&tx, &next, 2);
    s.produce_txn("next: produce 1 record", &t, 0, &next, seq, (2, 1))
        .await?;
    s.list_offset("next: latest read_committed", &t, 0, -1, 1)
        .await?;
    s.end_txn("next: commit", &next, true).await?;
    s.fetch("next: fetch read_committed", &t, rc).await?;
    s.describe_transactions("next: describe", &[&tx.id]).await?;
    Ok(())
}

async fn commit(s: &mut Session) -> Step {
    whole_transaction(s, true).await
}

async fn abort(s: &mut Session) -> Step {
    whole_transaction(s, false).await
}

/// The APIs a client before KIP-890 part 2 uses, at its versions: Produce
/// v11 (no implicit AddPartitionsToTxn), EndTxn v4 (no epoch bump),
/// AddOffsetsToTxn v3, TxnOffsetCommit v4.
async fn commit_tv1(s: &mut Session) -> Step {
    for (api, v) in [
        (produce_request::API_KEY, 11),
        (end_txn_request::API_KEY, 4),
        (add_partitions_to_txn_request::API_KEY, 3),
        (add_offsets_to_txn_request::API_KEY, 3),
        (txn_offset_commit_request::API_KEY, 4),
    ] {
        let (lo, hi) = s
            .version_range(api)
            .ok_or_else(|| Stop(format!("api {api} is not served by both brokers")))?;
        if !(lo..=hi).contains(&v) {
            return Err(Stop(format!(
                "api {api} v{v} is not served by both brokers"
            )));
        }
        s.pin(api, Some(v));
    }
    let t = s.create_topic("t", 1).await?;
    let g = s.name("g");
    coordinator_ready(s, &g).await?;
    let tx = s.init_txn("init", "tx").await?;
    s.add_partitions("add t-0", &tx, &[(&t, &[0])]).await?;
    s.produce_txn("produce 2 records", &t, 0, &tx, 0, (0, 2))
        .await?;
    s.add_offsets("add offsets of g", &tx, &g).await?;
    let tv = s.version(txn_offset_commit_request::API_KEY)?;
    s.txn_offset_commit_at(
        "commit offset 2 of t-0",
        tv,
        &tx,
        &g,
        (-1, ""),
        &t,
        &[(0, 2)],
    )
    .await?;
    let next = s.end_txn("commit", &tx, true).await?;
    s.fetch_offsets_stable("committed offsets", &g, &t, &[0], true)
        .await?;
    let mut rc = FetchSpec::at(0, 0);
    rc.isolation_level = 1;
    s.fetch("fetch read_committed", &t, rc).await?;
    s.add_partitions("next: add t-0", &next, &[(&t, &[0])])
        .await?;
    let seq = next_seq(&tx, &next, 2);
    s.produce_txn("next: produce 1 record", &t, 0, &next, seq, (2, 1))
        .await?;
    s.end_txn("next: abort", &next, false).await?;
    s.fetch("next: fetch read_committed", &t, rc).await?;
    s.describe_transactions("describe", &[&tx.id]).await?;
    Ok(())
}

async fn timeout_abort(s: &mut Session) -> Step {
    let t = s.create_topic("t", 1).await?;
    let id = s.name("tx");
    s.txn_coordinator_ready(&id).await?;
    let v = s.version(init_producer_id_request::API_KEY)?;
    let (_, tx) = s
        .init_txn_at("init, timeout 1 s", v, &id, 1000, None)
        .await?;
    s.add_partitions("add t-0", &tx, &[(&t, &[0])]).await?;
    s.produce_txn("produce", &t, 0, &tx, 0, (0, 1)).await?;
    // Kafka looks for expired transactions every 10 s
    // (transaction.abort.timed.out.transaction.cleanup.interval.ms):
    // when is the broker's business, that it happens is the rule.
    s.txn_left_state(&id, "Ongoing", Duration::from_secs(40))
        .await?;
    s.txn_settled(&id).await?;
    s.describe_transactions("describe once aborted", &[&id])
        .await?;
    s.produce_txn("the producer produces", &t, 0, &tx, 1, (1, 1))
        .await?;
    s.add_partitions("the producer adds t-0", &tx, &[(&t, &[0])])
        .await?;
    let ev = s.version(end_txn_request::API_KEY)?;
    s.end_txn_at("the producer commits", ev, &tx, true).await?;
    let mut rc = FetchSpec::at(0, 0);
    rc.isolation_level = 1;
    s.fetch("fetch read_committed", &t, rc).await?;
    s.init_txn_at("init again", v, &id, TXN_TIMEOUT_MS, None)
        .await?;
    Ok(())
}

async fn end_txn_empty(s: &mut Session) -> Step {
    for v in versions(s, end_txn_request::API_KEY)? {
        let tx = s
            .init_txn(&format!("v{v} init"), &format!("tx-v{v}"))
            .await?;
        let (_, after) = s
            .end_txn_at(&format!("v{v} commit an empty transaction"), v, &tx, true)
            .await?;
        s.txn_settled(&tx.id).await?;
        s.end_txn_at(
            &format!("v{v} abort an empty transaction"),
            v,
            &after,
            false,
        )
        .await?;
        s.txn_settled(&tx.id).await?;
        s.describe_transactions(&format!("v{v} describe"), &[&tx.id])
            .await?;
    }
    Ok(())
}

async fn end_txn_retry(s: &mut Session) -> Step {
    let t = s.create_topic("t", 1).await?;
    let mut first = 0;
    for v in versions(s, end_txn_request::API_KEY)? {
        for commit in [true, false] {
            let (word, other) = if commit {
                ("commit", "abort")
            } else {
                ("abort", "commit")
            };
            let tx = s
                .init_txn(&format!("v{v} {word}: init"), &format!("tx-v{v}-{word}"))
                .await?;
            s.add_partitions(&format!("v{v} {word}: add t-0"), &tx, &[(&t, &[0])])
                .await?;
            s.produce_txn(&format!("v{v} {word}: produce"), &t, 0, &tx, 0, (first, 1))
                .await?;
            first += 1;
            let (_, after) = s
                .end_txn_at(&format!("v{v} {word}"), v, &tx, commit)
                .await?;
            s.txn_settled(&tx.id).await?;
            // The retry carries what the first EndTxn carried.
            s.end_txn_at(&format!("v{v} {word} again"), v, &tx, commit)
                .await?;
            s.end_txn_at(&format!("v{v} then {other}"), v, &tx, !commit)
                .await?;
            if after.epoch != tx.epoch {
                // v5: the answer's epoch, with nothing in the transaction.
                s.end_txn_at(
                    &format!("v{v} {word} again with the bumped epoch"),
                    v,
                    &after,
                    commit,
                )
                .await?;
                s.txn_settled(&tx.id).await?;
            }
            s.describe_transactions(&format!("v{v} {word}: describe"), &[&tx.id])
                .await?;
        }
    }
    Ok(())
}

async fn end_txn_fenced(s: &mut Session) -> Step {
    let t = s.create_topic("t", 1).await?;
    for (first, v) in versions(s, end_txn_request::API_KEY)?
        .into_iter()
        .enumerate()
    {
        let tx = s
            .init_txn(&format!("v{v} init"), &format!("tx-v{v}"))
            .await?;
        s.add_partitions(&format!("v{v} add t-0"), &tx, &[(&t, &[0])])
            .await?;
        s.produce_txn(&format!("v{v} produce"), &t, 0, &tx, 0, (first as i64, 1))
            .await?;
        s.end_txn_at(
            &format!("v{v} commit with a future epoch"),
            v,
            &tx.with_epoch(tx.epoch + 1),
            true,
        )
        .await?;
        s.end_txn_at(
            &format!("v{v} commit with another producer id"),
            v,
            &tx.with_pid(other_pid(&tx)),
            true,
        )
        .await?;
        let unknown = Txn {
            id: s.name(&format!("tx-v{v}-never-initialized")),
            ..tx.clone()
        };
        s.txn_coordinator_ready(&unknown.id).await?;
        s.end_txn_at(
            &format!("v{v} commit an unknown transactional id"),
            v,
            &unknown,
            true,
        )
        .await?;
        s.describe_transactions(&format!("v{v} still ongoing"), &[&tx.id])
            .await?;
        s.end_txn_at(&format!("v{v} abort"), v, &tx, false).await?;
        s.txn_settled(&tx.id).await?;
    }
    Ok(())
}

async fn produce_not_added(s: &mut Session) -> Step {
    let t = s.create_topic("t", 1).await?;
    let mut first = 0;
    // Transactional batches are record format v2, which Produce carries
    // from v3 on.
    for pv in versions(s, produce_request::API_KEY)? {
        if pv < 3 {
            continue;
        }
        let tx = s
            .init_txn(&format!("v{pv} init"), &format!("tx-v{pv}"))
            .await?;
        let batch = crate::ops::txn_batch(s.t0, first, 1, &tx, 0);
        s.produce_as(
            &format!("v{pv} produce to t-0, not added"),
            pv,
            Some(&tx.id),
            &t,
            0,
            batch,
            -1,
        )
        .await?;
        let accepted = last_error(s) == "NONE";
        if accepted {
            first += 1;
        }
        s.describe_transactions(&format!("v{pv} describe"), &[&tx.id])
            .await?;
        s.add_partitions(&format!("v{pv} add t-0"), &tx, &[(&t, &[0])])
            .await?;
        let seq = i32::from(accepted);
        let batch = crate::ops::txn_batch(s.t0, first, 1, &tx, seq);
        s.produce_as(
            &format!("v{pv} produce after adding"),
            pv,
            Some(&tx.id),
            &t,
            0,
            batch,
            -1,
        )
        .await?;
        if last_error(s) == "NONE" {
            first += 1;
        }
        let ev = s.version(end_txn_request::API_KEY)?;
        s.end_txn_at(&format!("v{pv} commit"), ev, &tx, true)
            .await?;
        s.txn_settled(&tx.id).await?;
    }
    let mut rc = FetchSpec::at(0, 0);
    rc.isolation_level = 1;
    s.fetch("fetch read_committed", &t, rc).await?;
    Ok(())
}

async fn produce_without_id(s: &mut Session) -> Step {
    let t = s.create_topic("t", 1).await?;
    let tx = s.init_txn("init", "tx").await?;
    s.add_partitions("add t-0", &tx, &[(&t, &[0])]).await?;
    let batch = crate::ops::txn_batch(s.t0, 0, 1, &tx, 0);
    s.produce("transactional batch, no transactional id", &t, 0, batch, -1)
        .await?;
    let other = s.name("tx-other");
    let batch = crate::ops::txn_batch(s.t0, 0, 1, &tx, 0);
    let v = s.version(produce_request::API_KEY)?;
    s.produce_as(
        "transactional batch, another transactional id",
        v,
        Some(&other),
        &t,
        0,
        batch,
        -1,
    )
    .await?;
    s.produce_txn(
        "transactional batch, its transactional id",
        &t,
        0,
        &tx,
        0,
        (0, 1),
    )
    .await?;
    s.end_txn("commit", &tx, true).await?;
    let mut rc = FetchSpec::at(0, 0);
    rc.isolation_level = 1;
    s.fetch("fetch read_committed", &t, rc).await?;
    Ok(())
}

/// Two plain records, then an open transaction of two, then a plain
/// record past it: offsets 0-1 plain, 2-3 transactional, 4 plain.
async fn open_transaction(s: &mut Session) -> Step<(String, Txn)> {
    let t = s.create_topic("t", 1).await?;
    let tx = s.init_txn("init", "tx").await?;
    s.produce("plain 0-1", &t, 0, crate::ops::plain_batch(s.t0, 0, 2), -1)
        .await?;
    s.add_partitions("add t-0", &tx, &[(&t, &[0])]).await?;
    s.produce_txn("transactional 2-3", &t, 0, &tx, 0, (2, 2))
        .await?;
    s.produce("plain 4", &t, 0, crate::ops::plain_batch(s.t0, 4, 1), -1)
        .await?;
    Ok((t, tx))
}

async fn read_views(s: &mut Session, when: &str, t: &str) -> Step {
    let mut rc = FetchSpec::at(0, 0);
    rc.isolation_level = 1;
    s.fetch(&format!("{when}: fetch read_committed"), t, rc)
        .await?;
    rc.offset = 4;
    s.fetch(&format!("{when}: fetch read_committed from 4"), t, rc)
        .await?;
    s.fetch(
        &format!("{when}: fetch read_uncommitted"),
        t,
        FetchSpec::at(0, 0),
    )
    .await?;
    s.list_offset(&format!("{when}: latest read_committed"), t, 0, -1, 1)
        .await?;
    s.list_offset(&format!("{when}: latest read_uncommitted"), t, 0, -1, 0)
        .await?;
    s.list_offset(&format!("{when}: earliest read_committed"), t, 0, -2, 1)
        .await?;
    Ok(())
}

async fn read_committed_open(s: &mut Session) -> Step {
    let (t, tx) = open_transaction(s).await?;
    read_views(s, "open", &t).await?;
    s.end_txn("commit", &tx, true).await?;
    read_views(s, "committed", &t).await?;
    Ok(())
}

async fn read_committed_aborted(s: &mut Session) -> Step {
    let (t, tx) = open_transaction(s).await?;
    s.end_txn("abort", &tx, false).await?;
    read_views(s, "aborted", &t).await?;
    Ok(())
}

/// A topic, a group whose coordinator answers, a producer with the
/// group's offsets in its transaction and offset 5 of t-0 committed in it.
async fn pending_offsets(s: &mut Session) -> Step<(String, String, Txn)> {
    let t = s.create_topic("t", 2).await?;
    let g = s.name("g");
    coordinator_ready(s, &g).await?;
    let tx = s.init_txn("init", "tx").await?;
    s.add_offsets("add offsets of g", &tx, &g).await?;
    let v = s.version(txn_offset_commit_request::API_KEY)?;
    s.txn_offset_commit_at("txn commit t-0 at 5", v, &tx, &g, (-1, ""), &t, &[(0, 5)])
        .await?;
    s.fetch_offsets_stable("pending: require_stable", &g, &t, &[0, 1], true)
        .await?;
    s.fetch_offsets_stable("pending: not require_stable", &g, &t, &[0, 1], false)
        .await?;
    Ok((t, g, tx))
}

async fn offset_commit(s: &mut Session) -> Step {
    let (t, g, tx) = pending_offsets(s).await?;
    s.end_txn("commit", &tx, true).await?;
    s.fetch_offsets_stable("committed: require_stable", &g, &t, &[0, 1], true)
        .await?;
    Ok(())
}

async fn offset_commit_abort(s: &mut Session) -> Step {
    let (t, g, tx) = pending_offsets(s).await?;
    s.end_txn("abort", &tx, false).await?;
    s.fetch_offsets_stable("aborted: require_stable", &g, &t, &[0, 1], true)
        .await?;
    Ok(())
}

async fn offset_commit_errors(s: &mut Session) -> Step {
    let t = s.create_topic("t", 1).await?;
    let g = s.name("g");
    coordinator_ready(s, &g).await?;
    for v in versions(s, txn_offset_commit_request::API_KEY)? {
        let tx = s
            .init_txn(&format!("v{v} init"), &format!("tx-v{v}"))
            .await?;
        let off = i64::from(v) + 1;
        s.txn_offset_commit_at(
            &format!("v{v} without AddOffsetsToTxn"),
            v,
            &tx,
            &g,
            (-1, ""),
            &t,
            &[(0, off)],
        )
        .await?;
        s.describe_transactions(&format!("v{v} describe"), &[&tx.id])
            .await?;
        s.add_offsets(&format!("v{v} add offsets of g"), &tx, &g)
            .await?;
        s.txn_offset_commit_at(
            &format!("v{v} with a future epoch"),
            v,
            &tx.with_epoch(tx.epoch + 1),
            &g,
            (-1, ""),
            &t,
            &[(0, off)],
        )
        .await?;
        s.txn_offset_commit_at(
            &format!("v{v} with another producer id"),
            v,
            &tx.with_pid(other_pid(&tx)),
            &g,
            (-1, ""),
            &t,
            &[(0, off)],
        )
        .await?;
        s.txn_offset_commit_at(
            &format!("v{v} commit"),
            v,
            &tx,
            &g,
            (-1, ""),
            &t,
            &[(0, off)],
        )
        .await?;
        s.end_txn(&format!("v{v} commit"), &tx, true).await?;
        s.fetch_offsets_stable(&format!("v{v} committed"), &g, &t, &[0], true)
            .await?;
    }
    Ok(())
}

async fn offset_commit_member(s: &mut Session) -> Step {
    let t = s.create_topic("t", 1).await?;
    let g = s.name("g");
    coordinator_ready(s, &g).await?;
    let j = join_new(s, "join", &Join::new(&g, &t)).await?;
    sync_alone(s, "sync", &g, &t, &j, &[0]).await?;
    for v in versions(s, txn_offset_commit_request::API_KEY)? {
        if v < 3 {
            continue;
        }
        let tx = s
            .init_txn(&format!("v{v} init"), &format!("tx-v{v}"))
            .await?;
        s.add_offsets(&format!("v{v} add offsets of g"), &tx, &g)
            .await?;
        let member = j.member.as_str();
        for (what, generation, m) in [
            ("the next generation", j.generation + 1, member),
            ("an older generation", j.generation - 1, member),
            ("an unknown member", j.generation, "nobody"),
            ("no member id, the generation", j.generation, ""),
            ("the member, no generation", -1, member),
            ("no membership", -1, ""),
            ("the member", j.generation, member),
        ] {
            s.txn_offset_commit_at(
                &format!("v{v} as {what}"),
                v,
                &tx,
                &g,
                (generation, m),
                &t,
                &[(0, i64::from(v))],
            )
            .await?;
        }
        s.end_txn(&format!("v{v} commit"), &tx, true).await?;
        s.fetch_offsets_stable(&format!("v{v} committed"), &g, &t, &[0], true)
            .await?;
    }
    Ok(())
}

async fn describe_list(s: &mut Session) -> Step {
    let t = s.create_topic("t", 2).await?;
    let empty = s.init_txn("init empty", "tx-empty").await?;
    let ongoing = s.init_txn("init ongoing", "tx-ongoing").await?;
    s.add_partitions("ongoing: add t-0, t-1", &ongoing, &[(&t, &[0, 1])])
        .await?;
    s.produce_txn("ongoing: produce", &t, 0, &ongoing, 0, (0, 1))
        .await?;
    let done = s.init_txn("init committed", "tx-committed").await?;
    s.add_partitions("committed: add t-1", &done, &[(&t, &[1])])
        .await?;
    s.produce_txn("committed: produce", &t, 1, &done, 0, (0, 1))
        .await?;
    s.end_txn("committed: commit", &done, true).await?;
    let unknown = s.name("tx-unknown");
    s.txn_coordinator_ready(&unknown).await?;
    s.describe_transactions(
        "describe empty, ongoing, committed, unknown",
        &[&empty.id, &ongoing.id, &done.id, &unknown],
    )
    .await?;
    let pids = [empty.pid, ongoing.pid, done.pid];
    s.list_transactions("list all", &[], &pids).await?;
    s.list_transactions("list Ongoing", &["Ongoing"], &pids)
        .await?;
    s.list_transactions(
        "list Empty, CompleteCommit",
        &["Empty", "CompleteCommit"],
        &pids,
    )
    .await?;
    s.list_transactions("list CompleteAbort", &["CompleteAbort"], &pids)
        .await?;
    s.list_transactions("list an unknown state", &["Bogus", "Ongoing"], &pids)
        .await?;
    let lv = s.version(list_transactions_request::API_KEY)?;
    if lv >= 1 {
        s.list_transactions_with(
            "list running over an hour",
            lv,
            &[],
            &pids,
            (3_600_000, None),
        )
        .await?;
    }
    if lv >= 2 {
        // The whole id, anchored (the run's prefix holds '.', escaped).
        let full = format!("^{}$", ongoing.id.replace('.', "\\."));
        let patterns = [
            ("list by a pattern of the whole id", full.as_str()),
            ("list by a pattern of part of the id", "tx-(empty|ongoing)"),
            ("list by a pattern matching nothing", "^nothing$"),
            ("list by a pattern that does not compile", "(ab(cd"),
            // RE2 (KIP-1152) has no back-references; java.util.regex has.
            ("list by a pattern with a back-reference", "(tx)\\1"),
        ];
        for (step, pattern) in patterns {
            s.list_transactions_with(step, lv, &[], &pids, (-1, Some(pattern)))
                .await?;
        }
    }
    s.end_txn("ongoing: abort", &ongoing, false).await?;
    s.list_transactions("list after the abort", &[], &pids)
        .await?;
    Ok(())
}

async fn write_txn_markers(s: &mut Session) -> Step {
    let (t, tx) = open_transaction(s).await?;
    s.write_txn_markers("unknown partition", &tx, tx.epoch, false, &t, &[5], 0)
        .await?;
    let nope = s.name("nope");
    s.write_txn_markers("unknown topic", &tx, tx.epoch, false, &nope, &[0], 0)
        .await?;
    // What kafka-transactions.sh abort sends: the producer's epoch, the
    // coordinator epoch DescribeProducers shows (none yet: 0).
    let before = crate::session::wall_clock_ms();
    s.write_txn_markers("operator abort", &tx, tx.epoch, false, &t, &[0], 0)
        .await?;
    // The marker's timestamp becomes the producer's last one.
    s.describe_producers_after("after the operator abort", &t, &[0], before)
        .await?;
    read_views(s, "after the operator abort", &t).await?;
    s.write_txn_markers(
        "from a deposed coordinator",
        &tx,
        tx.epoch,
        false,
        &t,
        &[0],
        -1,
    )
    .await?;
    s.write_txn_markers("commit with nothing open", &tx, tx.epoch, true, &t, &[0], 0)
        .await?;
    s.end_txn("the client aborts too", &tx, false).await?;
    read_views(s, "after the client abort", &t).await?;
    Ok(())
}

async fn describe_producers(s: &mut Session) -> Step {
    let (t, tx) = open_transaction(s).await?;
    s.describe_producers("describe during the transaction", &t, &[0])
        .await?;
    s.end_txn("commit", &tx, true).await?;
    Ok(())
}
