//! What the coordinator keeps per transactional id (Kafka's
//! `TransactionMetadata`): the durable entry of a transaction slot file.

use super::state::TxnState;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// No producer id / no epoch, as on the wire.
pub const NO_PRODUCER_ID: i64 = -1;
pub const NO_PRODUCER_EPOCH: i16 = -1;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnEntry {
    pub transactional_id: String,
    pub producer_id: i64,
    /// The producer id before the last rotation (epoch exhaustion), so a
    /// producer that missed the answer can still claim its old identity.
    pub prev_producer_id: i64,
    pub producer_epoch: i16,
    /// The producer id this id moves to when its prepared transaction
    /// completes: EndTxn v5 found the epoch exhausted and could not bump it
    /// again (KIP-890); -1 otherwise. Absent from files written before it
    /// existed, which never needed it.
    #[serde(default = "no_producer_id")]
    pub next_producer_id: i64,
    /// The epoch before the last bump requested with a claimed identity
    /// (KIP-360): a retry of that InitProducerId claims it and gets the
    /// current epoch back without a second bump.
    pub last_producer_epoch: i16,
    pub timeout_ms: i32,
    pub state: TxnState,
    /// Partitions of the ongoing transaction (the markers it will owe).
    pub partitions: BTreeSet<(String, i32)>,
    /// Groups whose offsets the ongoing transaction commits (KIP-447).
    pub groups: BTreeSet<String>,
    /// When the ongoing transaction began (its first AddPartitions or
    /// AddOffsets); -1 when none is in flight.
    pub start_ms: i64,
    pub last_update_ms: i64,
}

fn no_producer_id() -> i64 {
    NO_PRODUCER_ID
}

impl TxnEntry {
    /// A new transactional id, before its first epoch is handed out.
    pub fn new(transactional_id: &str, producer_id: i64, timeout_ms: i32, now_ms: i64) -> TxnEntry {
        TxnEntry {
            transactional_id: transactional_id.to_owned(),
            producer_id,
            prev_producer_id: NO_PRODUCER_ID,
            producer_epoch: NO_PRODUCER_EPOCH,
            next_producer_id: NO_PRODUCER_ID,
            last_producer_epoch: NO_PRODUCER_EPOCH,
            timeout_ms,
            state: TxnState::Empty,
            partitions: BTreeSet::new(),
            groups: BTreeSet::new(),
            start_ms: -1,
            last_update_ms: now_ms,
        }
    }

    /// The identity the producer continues with once this entry's prepared
    /// transaction completes: the next producer id at epoch 0 after an
    /// exhausted epoch, else the entry's own.
    pub fn continues_as(&self) -> (i64, i16) {
        if self.next_producer_id != NO_PRODUCER_ID {
            (self.next_producer_id, 0)
        } else {
            (self.producer_id, self.producer_epoch)
        }
    }
}
