//! kaas-core: the sans-IO heart of kaas.
//!
//! Everything here is a pure function of its arguments: no IO, no clock (time
//! is passed in as `now_ms`), no randomness but a seeded generator passed in.
//! The `net` crate drives it over real sockets and files; the simulator
//! drives it over simulated ones.

pub mod broker_config;
pub mod cleaner;
pub mod cluster;
pub mod compression;
pub mod config_docs;
pub mod coverage;
pub mod deliberate_bugs;
pub mod group;
pub mod layout;
pub mod named_enum;
pub mod partition;
pub mod produce;
pub mod producer;
pub mod protocol;
pub mod record;
pub mod slot_journal;
pub mod topic_config;
pub mod topic_name;
pub mod txn;
