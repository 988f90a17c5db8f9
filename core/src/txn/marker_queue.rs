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
//!
//! A request names the holding it was queued for (each item's claim epoch
//! then), and only that holding applies it ([`queued_for_this_holding`]):
//! a coordinator that gave up waiting completes the transaction through
//! the item's next holder and leaves its request behind, and under
//! transaction version 1 (every transaction of a producer at one epoch) that
//! request, applied when its target holds the item again, would close the
//! producer's next transaction there.

use crate::protocol::ErrorCode;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
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
    /// Topic -> partition -> the leader epoch the coordinator saw when it
    /// queued the request ([`queued_for_this_holding`]). Absent from files
    /// written before it existed: any holder applies those.
    #[serde(default)]
    pub leader_epochs: BTreeMap<String, BTreeMap<i32, i32>>,
    /// Group -> the claim epoch of its coordinator slot's holder then.
    #[serde(default)]
    pub group_epochs: BTreeMap<String, i32>,
}

/// Whether the holder of an item (a partition's leader, a group slot's
/// coordinator) at claim epoch `holder_epoch` applies a queued request for
/// it that was queued for `queued_epoch`: only the same holding does. A
/// request queued for an earlier holding was left behind by a coordinator
/// that stopped waiting for it and completed the transaction through a
/// later holder; under transaction version 1 the producer's next
/// transaction has the same producer id and epoch, so that request, applied
/// now, would abort or commit the next one (simulator seed 909: a committed
/// transaction's output aborted by its predecessor's marker). It is not
/// acknowledged either: the coordinator of the live transaction, if it
/// queued this one, retries for the current holding once its wait times
/// out. `None`: a request from before epochs were recorded.
pub fn queued_for_this_holding(queued_epoch: Option<i32>, holder_epoch: i32) -> bool {
    queued_epoch.is_none_or(|e| e == holder_epoch)
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

    /// Adds a partition whose leader was at `leader_epoch` when queued.
    pub fn add_partition(&mut self, topic: &str, index: i32, leader_epoch: i32) {
        self.partitions.insert((topic.to_owned(), index));
        self.leader_epochs
            .entry(topic.to_owned())
            .or_default()
            .insert(index, leader_epoch);
    }

    /// Adds a group whose coordinator slot was held at `slot_epoch`.
    pub fn add_group(&mut self, group: &str, slot_epoch: i32) {
        self.groups.insert(group.to_owned());
        self.group_epochs.insert(group.to_owned(), slot_epoch);
    }

    /// The leader epoch a partition was queued for.
    pub fn leader_epoch_of(&self, topic: &str, index: i32) -> Option<i32> {
        self.leader_epochs.get(topic)?.get(&index).copied()
    }

    /// The slot epoch a group was queued for.
    pub fn group_epoch_of(&self, group: &str) -> Option<i32> {
        self.group_epochs.get(group).copied()
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
            leader_epochs: BTreeMap::new(),
            group_epochs: BTreeMap::new(),
        }
    }

    #[test]
    fn a_queued_marker_is_applied_only_by_the_holding_it_was_queued_for() {
        let mut r = MarkerRequest {
            partitions: BTreeSet::new(),
            groups: BTreeSet::new(),
            ..request()
        };
        r.add_partition("t", 3, 7);
        r.add_group("g", 4);
        assert!(queued_for_this_holding(r.leader_epoch_of("t", 3), 7));
        assert!(
            !queued_for_this_holding(r.leader_epoch_of("t", 3), 9),
            "a later leadership of the partition"
        );
        assert!(queued_for_this_holding(r.group_epoch_of("g"), 4));
        assert!(!queued_for_this_holding(r.group_epoch_of("g"), 5));
        // The epochs survive the file, and a file written before they
        // existed is applied by any holder.
        let read = MarkerRequest::decode(&r.encode().unwrap()).unwrap();
        assert_eq!(read.leader_epoch_of("t", 3), Some(7));
        assert_eq!(read.group_epoch_of("g"), Some(4));
        let old = br#"{"version":1,"from":0,"nonce":1,"producer_id":7,"producer_epoch":2,"coordinator_epoch":4,"commit":true,"partitions":[["t",3]],"groups":[]}"#;
        let old = MarkerRequest::decode(old).unwrap();
        assert!(queued_for_this_holding(old.leader_epoch_of("t", 3), 9));
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
