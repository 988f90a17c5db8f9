//! The durable state of one transaction slot and the operations on it.
//!
//! A slot file (`crate::layout::txn_slot_file`) holds the entry of every
//! transactional id that hashes to the slot (`crate::cluster::coordinator_slot`).
//! It is replaced whole (tmp + fsync + rename) by its single writer, the
//! slot's coordinator; changes are [`TxnSlotOp`]s so that many of them
//! (concurrent EndTxns of many producers) are applied to one copy and cost
//! one write. Applying the same op twice is harmless.

use super::entry::TxnEntry;
use crate::cluster::coordinator_slot;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// Version of the transaction slot file layout.
pub const TXN_SLOT_FILE_FORMAT: u32 = 1;

/// One change to a slot's durable state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnSlotOp {
    /// Store this entry, replacing the id's previous one.
    Put(TxnEntry),
    /// Expiry: forget the id if its entry is still the one last updated at
    /// `last_update_ms` (an InitProducerId that raced with the decision
    /// keeps it).
    Expire {
        transactional_id: String,
        last_update_ms: i64,
    },
}

/// The content of one transaction slot file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnSlotState {
    pub format: u32,
    pub slot: u32,
    /// The owner's coordinator epoch when it wrote the file; markers carry
    /// it, so a partition can refuse those of a deposed coordinator.
    pub coordinator_epoch: i32,
    /// Incremented by every write, so two copies can be ordered.
    pub version: u64,
    pub entries: BTreeMap<String, TxnEntry>,
}

/// Why a transaction slot file could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnSlotError {
    Parse(String),
    UnknownFormat(u32),
    WrongSlot {
        expected: u32,
        found: u32,
    },
    /// An entry filed under another id, or under an id of another slot.
    MisfiledEntry(String),
}

impl fmt::Display for TxnSlotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TxnSlotError::Parse(e) => write!(f, "not a transaction slot file: {e}"),
            TxnSlotError::UnknownFormat(v) => write!(f, "unknown transaction slot file format {v}"),
            TxnSlotError::WrongSlot { expected, found } => {
                write!(f, "slot file for slot {expected} says it is slot {found}")
            }
            TxnSlotError::MisfiledEntry(id) => {
                write!(
                    f,
                    "transactional id {id:?} is filed where it does not belong"
                )
            }
        }
    }
}

impl std::error::Error for TxnSlotError {}

impl TxnSlotState {
    pub fn new(slot: u32, coordinator_epoch: i32) -> TxnSlotState {
        TxnSlotState {
            format: TXN_SLOT_FILE_FORMAT,
            slot,
            coordinator_epoch,
            version: 0,
            entries: BTreeMap::new(),
        }
    }

    /// Applies `op`; returns whether the state changed (an unchanged state
    /// needs no write).
    pub fn apply(&mut self, op: &TxnSlotOp) -> bool {
        match op {
            TxnSlotOp::Put(entry) => {
                if self.entries.get(&entry.transactional_id) == Some(entry) {
                    return false;
                }
                self.entries
                    .insert(entry.transactional_id.clone(), entry.clone());
                true
            }
            TxnSlotOp::Expire {
                transactional_id,
                last_update_ms,
            } => {
                let entry = self.entries.get(transactional_id);
                let still_idle_since = entry.is_some_and(|e| e.last_update_ms == *last_update_ms);
                if still_idle_since {
                    crate::coverage::hit(crate::coverage::Mark::IdleTransactionalIdExpired);
                    self.entries.remove(transactional_id);
                } else if entry.is_some() {
                    crate::coverage::hit(crate::coverage::Mark::ExpiryOvertakenByANewerDecision);
                }
                still_idle_since
            }
        }
    }

    pub fn encode(&self) -> Result<Vec<u8>, serde_json::Error> {
        serde_json::to_vec_pretty(self)
    }

    /// Reads a slot file, refusing one that is not what its name says:
    /// another format, another slot, or an entry that belongs elsewhere.
    pub fn decode(bytes: &[u8], expected_slot: u32) -> Result<TxnSlotState, TxnSlotError> {
        let state: TxnSlotState =
            serde_json::from_slice(bytes).map_err(|e| TxnSlotError::Parse(e.to_string()))?;
        if state.format != TXN_SLOT_FILE_FORMAT {
            return Err(TxnSlotError::UnknownFormat(state.format));
        }
        if state.slot != expected_slot {
            return Err(TxnSlotError::WrongSlot {
                expected: expected_slot,
                found: state.slot,
            });
        }
        for (id, entry) in &state.entries {
            if *id != entry.transactional_id || coordinator_slot(id) != expected_slot {
                return Err(TxnSlotError::MisfiledEntry(id.clone()));
            }
        }
        Ok(state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A transactional id of `slot`, found by trying names.
    fn id_in(slot: u32) -> String {
        (0..)
            .map(|i| format!("tx-{i}"))
            .find(|id| coordinator_slot(id) == slot)
            .unwrap_or_default()
    }

    fn entry(id: &str, now: i64) -> TxnEntry {
        TxnEntry::new(id, 5, 60_000, now)
    }

    #[test]
    fn put_replaces_and_a_repeated_put_changes_nothing() {
        let id = id_in(3);
        let mut s = TxnSlotState::new(3, 0);
        assert!(s.apply(&TxnSlotOp::Put(entry(&id, 1))));
        assert!(!s.apply(&TxnSlotOp::Put(entry(&id, 1))));
        assert!(s.apply(&TxnSlotOp::Put(entry(&id, 2))));
        assert_eq!(s.entries[&id].last_update_ms, 2);
    }

    #[test]
    fn expiry_forgets_an_id_only_if_untouched_since_the_decision() {
        let id = id_in(3);
        let mut s = TxnSlotState::new(3, 0);
        s.apply(&TxnSlotOp::Put(entry(&id, 2)));
        let stale = TxnSlotOp::Expire {
            transactional_id: id.clone(),
            last_update_ms: 1,
        };
        assert!(!s.apply(&stale), "a newer InitProducerId raced the expiry");
        assert!(s.entries.contains_key(&id));
        let current = TxnSlotOp::Expire {
            transactional_id: id.clone(),
            last_update_ms: 2,
        };
        assert!(s.apply(&current));
        assert!(!s.apply(&current));
        assert!(s.entries.is_empty());
    }

    #[test]
    fn a_slot_file_reads_back_what_was_written() {
        let id = id_in(9);
        let mut s = TxnSlotState::new(9, 4);
        s.apply(&TxnSlotOp::Put(entry(&id, 1)));
        s.version = 12;
        let bytes = s.encode().expect("encodes");
        assert_eq!(TxnSlotState::decode(&bytes, 9), Ok(s));
    }

    #[test]
    fn a_slot_file_that_is_not_what_its_name_says_is_refused() {
        let mut s = TxnSlotState::new(9, 0);
        let bytes = s.encode().expect("encodes");
        assert_eq!(
            TxnSlotState::decode(&bytes, 8),
            Err(TxnSlotError::WrongSlot {
                expected: 8,
                found: 9
            })
        );
        s.format = 99;
        let bytes = s.encode().expect("encodes");
        assert_eq!(
            TxnSlotState::decode(&bytes, 9),
            Err(TxnSlotError::UnknownFormat(99))
        );
        let foreign = id_in(2);
        let mut s = TxnSlotState::new(9, 0);
        s.entries.insert(foreign.clone(), entry(&foreign, 1));
        let bytes = s.encode().expect("encodes");
        assert_eq!(
            TxnSlotState::decode(&bytes, 9),
            Err(TxnSlotError::MisfiledEntry(foreign))
        );
        assert!(matches!(
            TxnSlotState::decode(b"{", 9),
            Err(TxnSlotError::Parse(_))
        ));
    }
}
