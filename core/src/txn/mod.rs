//! Transactions at their coordinator (KIP-98, with the epoch rules of
//! KIP-360 and the fenced errors of KIP-588), as a pure state machine.
//!
//! - [`state`]: the states of one transactional id and the moves between
//!   them.
//! - [`entry`]: what is kept per transactional id, the durable entry of a
//!   transaction slot file.
//! - [`rules`]: one function per rule: InitProducerId, adding partitions
//!   and groups, EndTxn, completing once the markers are durable, the
//!   timeout reaper's abort, expiry. Each returns the entry to persist or a
//!   typed outcome; the driver persists, places markers and answers.
//! - [`slot`]: the durable state of one transaction slot file and the
//!   operations applied to it.
//!
//! Time is an argument (`now_ms`), fresh producer ids come from a closure:
//! nothing here reads a clock or touches a file.

pub mod config;
pub mod coordinator_queue;
pub mod entry;
pub mod marker_queue;
pub mod rules;
pub mod slot;
pub mod state;

#[cfg(test)]
mod tests;

pub use config::TxnConfig;
pub use entry::{TxnEntry, NO_PRODUCER_EPOCH, NO_PRODUCER_ID};
pub use rules::{Claim, End, Init};
pub use slot::{TxnSlotError, TxnSlotOp, TxnSlotState};
pub use state::TxnState;
