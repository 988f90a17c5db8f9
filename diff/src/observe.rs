//! Turning answers into observations: error codes by name, fetched
//! batches as what a consumer would see.

use crate::session::Session;
use bytes::Bytes;
use kaas_core::record::{parse_end_txn_marker, split_batches, ControlType, Tail};
use serde_json::{json, Value};

/// An error code as Kafka names it (the number too when we do not know
/// the name), so a report reads `UNKNOWN_TOPIC_OR_PARTITION`, not `3`.
pub fn err(code: i16) -> Value {
    json!(error_name(code).map_or_else(|| format!("ERROR_{code}"), str::to_owned))
}

fn error_name(code: i16) -> Option<&'static str> {
    Some(match code {
        -1 => "UNKNOWN_SERVER_ERROR",
        0 => "NONE",
        1 => "OFFSET_OUT_OF_RANGE",
        2 => "CORRUPT_MESSAGE",
        3 => "UNKNOWN_TOPIC_OR_PARTITION",
        4 => "INVALID_FETCH_SIZE",
        5 => "LEADER_NOT_AVAILABLE",
        6 => "NOT_LEADER_OR_FOLLOWER",
        7 => "REQUEST_TIMED_OUT",
        10 => "MESSAGE_TOO_LARGE",
        12 => "OFFSET_METADATA_TOO_LARGE",
        14 => "COORDINATOR_LOAD_IN_PROGRESS",
        15 => "COORDINATOR_NOT_AVAILABLE",
        16 => "NOT_COORDINATOR",
        17 => "INVALID_TOPIC_EXCEPTION",
        18 => "RECORD_LIST_TOO_LARGE",
        19 => "NOT_ENOUGH_REPLICAS",
        21 => "INVALID_REQUIRED_ACKS",
        22 => "ILLEGAL_GENERATION",
        23 => "INCONSISTENT_GROUP_PROTOCOL",
        24 => "INVALID_GROUP_ID",
        25 => "UNKNOWN_MEMBER_ID",
        26 => "INVALID_SESSION_TIMEOUT",
        27 => "REBALANCE_IN_PROGRESS",
        28 => "INVALID_COMMIT_OFFSET_SIZE",
        29 => "TOPIC_AUTHORIZATION_FAILED",
        30 => "GROUP_AUTHORIZATION_FAILED",
        31 => "CLUSTER_AUTHORIZATION_FAILED",
        32 => "INVALID_TIMESTAMP",
        33 => "UNSUPPORTED_SASL_MECHANISM",
        34 => "ILLEGAL_SASL_STATE",
        35 => "UNSUPPORTED_VERSION",
        36 => "TOPIC_ALREADY_EXISTS",
        37 => "INVALID_PARTITIONS",
        38 => "INVALID_REPLICATION_FACTOR",
        39 => "INVALID_REPLICA_ASSIGNMENT",
        40 => "INVALID_CONFIG",
        41 => "NOT_CONTROLLER",
        42 => "INVALID_REQUEST",
        43 => "UNSUPPORTED_FOR_MESSAGE_FORMAT",
        44 => "POLICY_VIOLATION",
        45 => "OUT_OF_ORDER_SEQUENCE_NUMBER",
        46 => "DUPLICATE_SEQUENCE_NUMBER",
        47 => "INVALID_PRODUCER_EPOCH",
        48 => "INVALID_TXN_STATE",
        49 => "INVALID_PRODUCER_ID_MAPPING",
        50 => "INVALID_TRANSACTION_TIMEOUT",
        51 => "CONCURRENT_TRANSACTIONS",
        52 => "TRANSACTION_COORDINATOR_FENCED",
        53 => "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
        54 => "SECURITY_DISABLED",
        55 => "OPERATION_NOT_ATTEMPTED",
        56 => "KAFKA_STORAGE_ERROR",
        57 => "LOG_DIR_NOT_FOUND",
        59 => "UNKNOWN_PRODUCER_ID",
        60 => "REASSIGNMENT_IN_PROGRESS",
        68 => "NON_EMPTY_GROUP",
        69 => "GROUP_ID_NOT_FOUND",
        70 => "FETCH_SESSION_ID_NOT_FOUND",
        71 => "INVALID_FETCH_SESSION_EPOCH",
        72 => "LISTENER_NOT_FOUND",
        73 => "TOPIC_DELETION_DISABLED",
        74 => "FENCED_LEADER_EPOCH",
        75 => "UNKNOWN_LEADER_EPOCH",
        76 => "UNSUPPORTED_COMPRESSION_TYPE",
        77 => "STALE_BROKER_EPOCH",
        78 => "OFFSET_NOT_AVAILABLE",
        79 => "MEMBER_ID_REQUIRED",
        80 => "PREFERRED_LEADER_NOT_AVAILABLE",
        81 => "GROUP_MAX_SIZE_REACHED",
        82 => "FENCED_INSTANCE_ID",
        83 => "ELIGIBLE_LEADERS_NOT_AVAILABLE",
        84 => "ELECTION_NOT_NEEDED",
        85 => "NO_REASSIGNMENT_IN_PROGRESS",
        86 => "GROUP_SUBSCRIBED_TO_TOPIC",
        87 => "INVALID_RECORD",
        88 => "UNSTABLE_OFFSET_COMMIT",
        89 => "THROTTLING_QUOTA_EXCEEDED",
        90 => "PRODUCER_FENCED",
        91 => "RESOURCE_NOT_FOUND",
        92 => "DUPLICATE_RESOURCE",
        93 => "UNACCEPTABLE_CREDENTIAL",
        94 => "INCONSISTENT_VOTER_SET",
        95 => "INVALID_UPDATE_VERSION",
        96 => "FEATURE_UPDATE_FAILED",
        97 => "PRINCIPAL_DESERIALIZATION_FAILURE",
        98 => "SNAPSHOT_NOT_FOUND",
        99 => "POSITION_OUT_OF_RANGE",
        100 => "UNKNOWN_TOPIC_ID",
        101 => "DUPLICATE_BROKER_REGISTRATION",
        102 => "BROKER_ID_NOT_REGISTERED",
        103 => "INCONSISTENT_TOPIC_ID",
        104 => "INCONSISTENT_CLUSTER_ID",
        105 => "TRANSACTIONAL_ID_NOT_FOUND",
        106 => "FETCH_SESSION_TOPIC_ID_ERROR",
        107 => "INELIGIBLE_REPLICA",
        108 => "NEW_LEADER_ELECTED",
        109 => "OFFSET_MOVED_TO_TIERED_STORAGE",
        110 => "FENCED_MEMBER_EPOCH",
        111 => "UNRELEASED_INSTANCE_ID",
        112 => "UNSUPPORTED_ASSIGNOR",
        113 => "STALE_MEMBER_EPOCH",
        114 => "MISMATCHED_ENDPOINT_TYPE",
        115 => "UNSUPPORTED_ENDPOINT_TYPE",
        116 => "UNKNOWN_CONTROLLER_ID",
        117 => "UNKNOWN_SUBSCRIPTION_ID",
        118 => "TELEMETRY_TOO_LARGE",
        119 => "INVALID_REGISTRATION",
        120 => "TRANSACTION_ABORTABLE",
        _ => return None,
    })
}

/// The record batches of a fetched partition as a consumer sees them:
/// offsets, producer identity (aliased), sequence, flags, and every
/// record's offset, timestamp relative to the scenario's base, key,
/// value and headers. A partial batch at the end (cut by max bytes) is
/// dropped, as clients drop it.
pub fn batches(s: &mut Session, records: Option<&Bytes>) -> Value {
    let Some(buf) = records else {
        return json!(null);
    };
    let mut out = Vec::new();
    let mut walk = split_batches(buf.clone());
    for batch in walk.by_ref() {
        let pid = s.alias("pid", batch.producer_id());
        let mut recs = Vec::new();
        if batch.is_control() {
            // A transaction marker: its type is what a consumer acts on.
            // Its timestamp is the coordinator's clock and its value the
            // coordinator's epoch, both the broker's own business.
            let what = match parse_end_txn_marker(&batch) {
                Ok(Some(m)) => match m.control_type {
                    ControlType::Commit => json!("COMMIT"),
                    ControlType::Abort => json!("ABORT"),
                    ControlType::Other(t) => json!(format!("control type {t}")),
                },
                Ok(None) => json!("control record"),
                Err(e) => json!(format!("unreadable marker: {e}")),
            };
            recs.push(json!([batch.base_offset(), "marker", what]));
        }
        for r in batch.records().filter(|_| !batch.is_control()) {
            match r {
                Ok(r) => recs.push(json!([
                    r.offset,
                    r.timestamp - s.t0,
                    r.key.as_deref().map(String::from_utf8_lossy),
                    r.value.as_deref().map(text_or_len),
                    r.headers
                        .iter()
                        .map(|h| json!([
                            String::from_utf8_lossy(&h.key),
                            h.value.as_deref().map(String::from_utf8_lossy)
                        ]))
                        .collect::<Vec<_>>(),
                ])),
                Err(e) => recs.push(json!(format!("unreadable record: {e}"))),
            }
        }
        out.push(json!({
            "base": batch.base_offset(),
            "last": batch.last_offset(),
            "pid": pid,
            "epoch": batch.producer_epoch(),
            "seq": batch.base_sequence(),
            "txn": batch.is_transactional(),
            "control": batch.is_control(),
            "codec": format!("{:?}", batch.compression()),
            "records": recs,
        }));
    }
    if let Tail::Corrupt { error, .. } = walk.tail() {
        out.push(json!(format!("corrupt batch: {error:?}")));
    }
    json!(out)
}

/// A producer id and epoch by role, not value: the id as its alias
/// (`pid1`, the same alias fetched batches use) and the epoch relative to
/// the first epoch this scenario saw of that id (`pid1 epoch+0`, then
/// `pid1 epoch+1` after a bump). Producer ids are random by nature on
/// both brokers; epochs are counted from where each id started, so a bump
/// reads the same whatever the id's history. A negative id (none) is
/// written as it is.
pub fn producer(s: &mut Session, producer_id: i64, epoch: i16) -> Value {
    if producer_id < 0 {
        return json!(format!("{producer_id} epoch {epoch}"));
    }
    let pid = s.alias("pid", producer_id);
    let first = *s.first_epochs.entry(producer_id).or_insert(epoch);
    let rel = i32::from(epoch) - i32::from(first);
    let sign = if rel < 0 { "" } else { "+" };
    json!(format!(
        "{} epoch{sign}{rel}",
        pid.as_str().unwrap_or_default()
    ))
}

/// Short values as text; long ones (bulk test data) by length only.
fn text_or_len(v: &[u8]) -> Value {
    if v.len() <= 64 {
        json!(String::from_utf8_lossy(v))
    } else {
        json!(format!("<{} bytes>", v.len()))
    }
}
