//! The marker queue: how a transaction coordinator gets its COMMIT or ABORT
//! markers written to partitions (and its staged offsets completed in
//! groups) that other brokers lead, with no inter-broker RPC (DESIGN.md §6,
//! seed 002).
//!
//! For each broker that leads part of a transaction, the coordinator writes
//! a [`MarkerRequest`] to `__cluster/marker_queue/to-<broker>/<pid>-<epoch>.json`
//! (one writer: the coordinator; replaced whole, so a retry is the same
//! file). The target applies what it leads, waits until it is durable, and
//! answers with a [`MarkerAck`] in `__cluster/marker_queue/acks/to-<coordinator>/`
//! (one writer: the target). The coordinator completes the transaction only
//! once every item is acknowledged ([`outstanding`]); it then removes its
//! requests, and each target removes its ack once the request is gone.
//! Applying a marker twice closes nothing the second time, so a request
//! read again after a crash is harmless.

use crate::protocol::ErrorCode;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fmt;

/// The format of queue files; a reader refuses any other.
pub const MARKER_QUEUE_VERSION: u32 = 1;

/// What one coordinator asks one broker to apply for one transaction end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MarkerRequest {
    pub version: u32,
    /// The coordinator's broker: where the ack goes.
    pub from: i32,
    /// Fresh for every dispatch: the file keeps its name across a
    /// producer's transactions (transaction version 1 ends them all at one
    /// epoch), so only this tells an ack of this dispatch from an ack of an
    /// earlier transaction's.
    pub nonce: u64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub coordinator_epoch: i32,
    pub commit: bool,
    pub partitions: BTreeSet<(String, i32)>,
    pub groups: BTreeSet<String>,
}

/// What the target made durable of a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MarkerAck {
    pub version: u32,
    /// The broker that applied them.
    pub by: i32,
    /// The request's nonce.
    pub nonce: u64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub partitions: BTreeSet<(String, i32)>,
    pub groups: BTreeSet<String>,
}

/// Why a queue file could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueFileError {
    Parse(String),
    UnknownVersion(u32),
}

impl fmt::Display for QueueFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QueueFileError::Parse(e) => write!(f, "not a marker queue file: {e}"),
            QueueFileError::UnknownVersion(v) => write!(f, "unknown marker queue version {v}"),
        }
    }
}

impl std::error::Error for QueueFileError {}

fn decode<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
    version: impl Fn(&T) -> u32,
) -> Result<T, QueueFileError> {
    let v: T = serde_json::from_slice(bytes).map_err(|e| QueueFileError::Parse(e.to_string()))?;
    match version(&v) {
        MARKER_QUEUE_VERSION => Ok(v),
        other => Err(QueueFileError::UnknownVersion(other)),
    }
}

impl MarkerRequest {
    pub fn encode(&self) -> Result<Vec<u8>, serde_json::Error> {
        serde_json::to_vec(self)
    }

    pub fn decode(bytes: &[u8]) -> Result<MarkerRequest, QueueFileError> {
        decode(bytes, |r: &MarkerRequest| r.version)
    }
}

impl MarkerAck {
    pub fn encode(&self) -> Result<Vec<u8>, serde_json::Error> {
        serde_json::to_vec(self)
    }

    pub fn decode(bytes: &[u8]) -> Result<MarkerAck, QueueFileError> {
        decode(bytes, |a: &MarkerAck| a.version)
    }

    /// Whether this ack answers `request` (the same dispatch of the same
    /// transaction end).
    pub fn answers(&self, request: &MarkerRequest) -> bool {
        self.nonce == request.nonce
            && self.producer_id == request.producer_id
            && self.producer_epoch == request.producer_epoch
    }
}

/// What of `request` its target still owes, given its `ack` (if any): the
/// coordinator completes the transaction only when this is empty for every
/// target. An ack of another transaction end acknowledges nothing.
pub fn outstanding(request: &MarkerRequest, ack: Option<&MarkerAck>) -> MarkerRequest {
    let ack = ack.filter(|a| a.answers(request));
    let mut left = request.clone();
    if let Some(a) = ack {
        left.partitions.retain(|p| !a.partitions.contains(p));
        left.groups.retain(|g| !a.groups.contains(g));
    }
    left
}

/// Whether a partition's refusal of a queued marker settles that marker:
/// a stale refusal (`crate::producer::check_marker`: a later epoch of the
/// producer, or a later coordinator, already wrote there) means the
/// transaction was settled before that later epoch existed, so the marker
/// owes nothing there and is acknowledged, as Kafka's coordinator drops
/// it. Any other refusal leaves it owed, to be applied again.
pub fn refusal_settles_marker(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::InvalidProducerEpoch | ErrorCode::TransactionCoordinatorFenced
    )
}

impl MarkerRequest {
    pub fn is_empty(&self) -> bool {
        self.partitions.is_empty() && self.groups.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn request() -> MarkerRequest {
        MarkerRequest {
            version: MARKER_QUEUE_VERSION,
            from: 0,
            nonce: 11,
            producer_id: 7,
            producer_epoch: 2,
            coordinator_epoch: 4,
            commit: true,
            partitions: [("t".to_string(), 0), ("t".to_string(), 3)].into(),
            groups: ["g".to_string()].into(),
        }
    }

    fn ack(partitions: &[i32], groups: &[&str], epoch: i16) -> MarkerAck {
        MarkerAck {
            version: MARKER_QUEUE_VERSION,
            by: 1,
            nonce: 11,
            producer_id: 7,
            producer_epoch: epoch,
            partitions: partitions.iter().map(|p| ("t".to_string(), *p)).collect(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        }
    }

    #[test]
    fn a_stale_refusal_settles_a_queued_marker_and_others_leave_it_owed() {
        assert!(refusal_settles_marker(ErrorCode::InvalidProducerEpoch));
        assert!(refusal_settles_marker(
            ErrorCode::TransactionCoordinatorFenced
        ));
        for owed in [
            ErrorCode::NotLeaderOrFollower,
            ErrorCode::KafkaStorageError,
            ErrorCode::UnknownTopicOrPartition,
        ] {
            assert!(!refusal_settles_marker(owed), "{owed:?}");
        }
    }

    #[test]
    fn queue_files_round_trip_and_refuse_other_versions() {
        let r = request();
        assert_eq!(MarkerRequest::decode(&r.encode().unwrap()), Ok(r.clone()));
        let a = ack(&[0], &[], 2);
        assert_eq!(MarkerAck::decode(&a.encode().unwrap()), Ok(a));
        let mut other = request();
        other.version = 2;
        assert_eq!(
            MarkerRequest::decode(&other.encode().unwrap()),
            Err(QueueFileError::UnknownVersion(2))
        );
    }

    #[test]
    fn a_transaction_completes_only_when_every_item_is_acknowledged() {
        let r = request();
        assert_eq!(outstanding(&r, None), r);
        let part = outstanding(&r, Some(&ack(&[0], &[], 2)));
        assert_eq!(part.partitions.len(), 1);
        assert_eq!(part.groups.len(), 1);
        assert!(outstanding(&r, Some(&ack(&[0, 3], &["g"], 2))).is_empty());
    }

    #[test]
    fn an_ack_of_another_transaction_end_acknowledges_nothing() {
        let r = request();
        assert_eq!(outstanding(&r, Some(&ack(&[0, 3], &["g"], 1))), r);
        // Transaction version 1 ends every transaction of a producer at one
        // epoch: an earlier transaction's ack has the same producer and
        // epoch, and only the nonce tells it apart.
        let earlier = MarkerAck {
            nonce: 10,
            ..ack(&[0, 3], &["g"], 2)
        };
        assert_eq!(outstanding(&r, Some(&earlier)), r);
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic_the_queue_decoders(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = MarkerRequest::decode(&bytes);
            let _ = MarkerAck::decode(&bytes);
        }
    }
}
