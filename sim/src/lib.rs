//! kaas-sim: deterministic simulation of kaas under madsim.
//!
//! Build with `RUSTFLAGS="--cfg madsim"` (see `scripts/sim`): the workspace's
//! `tokio` is madsim-tokio, so the real `kaas_net` server runs on simulated
//! time and a simulated network, on top of [`volume::SimVolume`].
//!
//! - [`volume`]: the in-memory volume with crash and torn-write semantics.
//! - [`checker`]: the history of a run and the rules it must satisfy.
//! - [`group_history`]: the same for the consumer group (commits, offset
//!   fetches, assignments); [`group_settle`]: whether the group settles
//!   once the faults are over.
//! - [`txn_history`]: the same for the transactional workload (what
//!   read_committed may return, atomicity, epochs).
//! - [`eos_history`]: the same for the exactly-once consume-transform-
//!   produce loop (each input once in the committed output, committed
//!   offsets visible only after their transaction's markers).
//! - [`compact_history`]: the same for the compacted topic (which records
//!   the cleaner may remove).
//! - [`aborted_index`]: each partition's aborted-transactions index held,
//!   at the end of a seed, to the one its own batches imply.
//! - [`low_acks`]: what plain producers at acks=1 and acks=0 may lose.
//! - [`retention_history`]: what DeleteRecords and `retention.ms` may take
//!   from the main topic (the checker learns the log start).
//! - [`poll_history`]: poll order within each consumer (no skipped record,
//!   no position going back but by an explicit seek).
//! - [`cluster_history`] and [`writers`]: the multi-broker rules
//!   (leader epochs, one writer per file and epoch).
//! - [`params`]: per-seed workload and fault parameters.
//! - [`batch`]: a batch of seeds added up: the run's summary table and the
//!   coverage marks (`kaas_core::coverage`) no seed hit.
//! - `env` (madsim builds only): each broker's own clock (seeded offset and
//!   drift) and an IO runner on which an fsync takes simulated time.
//! - `harness`, `workload`, `idempotent`, `group_member`, `txn`, `eos`,
//!   `eos_input`, `eos_observer`, `compact`, `pipeline`, `router`,
//!   `retention`, `routes`, `runner` (madsim builds only): the simulated cluster, the
//!   client actors (plain and idempotent producers, a tailing consumer,
//!   consumer group members, transactional producers with zombies, a
//!   read_committed consumer, an exactly-once loop with its input producer
//!   and the observer of its offsets, a keyed producer and a reader on a
//!   compacted topic, a DeleteRecords actor), where each request goes with several brokers, and
//!   running many seeds.
//!
//! Without `--cfg madsim` the modules marked "madsim builds only" are left
//! out, and the others' unit tests (including the real partition log
//! recovering on `SimVolume`) run in a normal `cargo test`.

pub mod aborted_index;
pub mod batch;
pub mod buggify;
pub mod checker;
pub mod cluster_history;
pub mod compact_history;
#[cfg(madsim)]
pub mod env;
pub mod eos_history;
pub mod expiries;
pub mod group_history;
pub mod group_settle;
pub mod low_acks;
pub mod params;
pub mod poll_history;
pub mod retention_history;
pub mod txn_history;
pub mod volume;
pub mod writers;

#[cfg(madsim)]
pub mod compact;
#[cfg(madsim)]
pub mod eos;
#[cfg(madsim)]
pub mod eos_input;
#[cfg(madsim)]
pub mod eos_observer;
#[cfg(madsim)]
pub mod group_member;
#[cfg(madsim)]
pub mod harness;
#[cfg(madsim)]
pub mod idempotent;
#[cfg(madsim)]
pub mod one_owner;
#[cfg(madsim)]
pub mod pipeline;
#[cfg(madsim)]
pub mod retention;
#[cfg(madsim)]
pub mod router;
#[cfg(madsim)]
pub mod routes;
#[cfg(madsim)]
pub mod runner;
#[cfg(madsim)]
pub mod txn;
#[cfg(madsim)]
pub mod workload;
