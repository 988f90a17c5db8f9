//! The coordinator queue: how a partition leader (or a group coordinator)
//! asks another broker's transaction coordinator about a transaction, with
//! no inter-broker RPC. The marker queue's mirror image
//! ([`super::marker_queue`]).
//!
//! Kafka's partition leaders call the coordinator for KIP-890: transaction
//! version 1 verifies that the transaction added the partition before a
//! batch may open a transaction there, and version 2 adds it implicitly.
//! The group coordinator asks the same about a group for TxnOffsetCommit.
//! Here the asking broker writes a [`CoordinatorAsk`] to
//! `__cluster/txn_asks/to-<coordinator>/<nonce>.json` (one writer: the
//! asker), the coordinator's watcher decides it as a local request would be
//! decided and writes a [`CoordinatorAnswer`] to
//! `__cluster/txn_asks/answers/to-<asker>/<nonce>.json` (one writer: the
//! coordinator). The asker reads the answer and removes its ask; the
//! coordinator removes an answer whose ask is gone.

use crate::protocol::ErrorCode;
use serde::{Deserialize, Serialize};
use std::fmt;

/// The format of queue files; a reader refuses any other.
pub const COORDINATOR_QUEUE_VERSION: u32 = 1;

/// What is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AskKind {
    /// Has the ongoing transaction added these partitions? (KIP-890 part 1)
    VerifyPartitions,
    /// Add these partitions and groups to the ongoing transaction.
    /// (KIP-890 part 2's implicit add.)
    Add,
    /// Has the ongoing transaction added this group? (TxnOffsetCommit)
    VerifyGroup,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CoordinatorAsk {
    pub version: u32,
    /// The asking broker: where the answer goes.
    pub from: i32,
    /// Unique per ask: names both files.
    pub nonce: u64,
    pub kind: AskKind,
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub partitions: Vec<(String, i32)>,
    pub groups: Vec<String>,
}

/// The coordinator's decision: the error code a local request would have
/// got (0 for none).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CoordinatorAnswer {
    pub version: u32,
    pub nonce: u64,
    /// The coordinator that answered: the only one that may remove it.
    pub by: i32,
    pub error_code: i16,
}

/// The error a coordinator's answer carries, as the asker handles it. The
/// codes a transaction coordinator decides with are read back exactly; any
/// other (a newer broker's) is an unknown server error.
pub fn error_of_answer(code: i16) -> Result<(), ErrorCode> {
    use ErrorCode::*;
    let known = [
        ConcurrentTransactions,
        CoordinatorLoadInProgress,
        CoordinatorNotAvailable,
        InvalidProducerEpoch,
        InvalidProducerIdMapping,
        InvalidTxnState,
        NotCoordinator,
        NotEnoughReplicas,
        ProducerFenced,
        TransactionAbortable,
        KafkaStorageError,
    ];
    if code == 0 {
        return Ok(());
    }
    Err(known
        .into_iter()
        .find(|e| e.code() == code)
        .unwrap_or(UnknownServerError))
}

/// Why a queue file could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AskFileError {
    Parse(String),
    UnknownVersion(u32),
}

impl fmt::Display for AskFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AskFileError::Parse(e) => write!(f, "not a coordinator queue file: {e}"),
            AskFileError::UnknownVersion(v) => {
                write!(f, "unknown coordinator queue version {v}")
            }
        }
    }
}

impl std::error::Error for AskFileError {}

impl CoordinatorAsk {
    pub fn encode(&self) -> Result<Vec<u8>, serde_json::Error> {
        serde_json::to_vec(self)
    }

    pub fn decode(bytes: &[u8]) -> Result<CoordinatorAsk, AskFileError> {
        let a: CoordinatorAsk =
            serde_json::from_slice(bytes).map_err(|e| AskFileError::Parse(e.to_string()))?;
        match a.version {
            COORDINATOR_QUEUE_VERSION => Ok(a),
            other => Err(AskFileError::UnknownVersion(other)),
        }
    }
}

impl CoordinatorAnswer {
    pub fn encode(&self) -> Result<Vec<u8>, serde_json::Error> {
        serde_json::to_vec(self)
    }

    /// Reads the answer to the ask `nonce`; an answer to another ask is
    /// an error (a file named for one ask must hold its answer).
    pub fn decode(bytes: &[u8], nonce: u64) -> Result<CoordinatorAnswer, AskFileError> {
        let a: CoordinatorAnswer =
            serde_json::from_slice(bytes).map_err(|e| AskFileError::Parse(e.to_string()))?;
        if a.version != COORDINATOR_QUEUE_VERSION {
            return Err(AskFileError::UnknownVersion(a.version));
        }
        if a.nonce != nonce {
            return Err(AskFileError::Parse(format!(
                "the answer to ask {} in the file of ask {nonce}",
                a.nonce
            )));
        }
        Ok(a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn asks_and_answers_round_trip_and_an_answer_belongs_to_its_ask() {
        let ask = CoordinatorAsk {
            version: COORDINATOR_QUEUE_VERSION,
            from: 2,
            nonce: u64::MAX,
            kind: AskKind::Add,
            transactional_id: "tx".into(),
            producer_id: 9,
            producer_epoch: 1,
            partitions: vec![("t".into(), 3)],
            groups: vec![],
        };
        assert_eq!(CoordinatorAsk::decode(&ask.encode().unwrap()), Ok(ask));
        let answer = CoordinatorAnswer {
            version: COORDINATOR_QUEUE_VERSION,
            nonce: 5,
            by: 1,
            error_code: 48,
        };
        let bytes = answer.encode().unwrap();
        assert_eq!(CoordinatorAnswer::decode(&bytes, 5), Ok(answer));
        assert!(CoordinatorAnswer::decode(&bytes, 6).is_err());
    }

    #[test]
    fn an_answer_carries_the_coordinators_decision_back() {
        assert_eq!(error_of_answer(0), Ok(()));
        for e in [
            ErrorCode::InvalidTxnState,
            ErrorCode::ProducerFenced,
            ErrorCode::ConcurrentTransactions,
        ] {
            assert_eq!(error_of_answer(e.code()), Err(e));
        }
        assert_eq!(error_of_answer(9999), Err(ErrorCode::UnknownServerError));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic_the_ask_decoders(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = CoordinatorAsk::decode(&bytes);
            let _ = CoordinatorAnswer::decode(&bytes, 0);
        }
    }
}
