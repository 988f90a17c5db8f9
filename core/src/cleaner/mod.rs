//! The log cleaner's rules for compacted topics (`cleanup.policy=compact`),
//! sans IO: Kafka's compaction, with time as an argument.
//!
//! A compacted log keeps, per key, the last record written, and a delete
//! (a tombstone: null value) until `delete.retention.ms` after a cleaning
//! pass first found it; records of aborted transactions go, and
//! transaction markers go once nothing of their transaction is left. Every
//! record kept keeps its offset.
//!
//! # How the driver runs a round
//!
//! 1. **Plan.** [`plan_cleaning`] takes the log's extent (log start, the
//!    cleaner checkpoint, last stable offset, active segment, the sealed
//!    segments' sizes and timestamps) and the topic's compaction settings,
//!    and says whether to clean now and which dirty section
//!    ([`CleanRange`]): whole segments, below the active segment, the last
//!    stable offset and `min.compaction.lag.ms`.
//! 2. **Map.** Read the batches of the dirty section in offset order, view
//!    each with [`BatchView::of`], and [`KeyMap::add`] it, until the range
//!    ends or the map answers [`MapStep::Full`] (its byte budget is spent;
//!    the rest stays dirty for the next round). [`KeyMap::end`] is where
//!    this round stops, and the new cleaner checkpoint once the round is
//!    written.
//! 3. **Decide.** Read the segments again from the log start through the
//!    one holding `KeyMap::end`, and give every batch, in order, to one
//!    [`Decider`]: [`Decider::next`] answers its [`Fate`] (keep it whole,
//!    drop it, keep only its header, or rewrite it with some records).
//!    Batches at or past the map's end come back [`Fate::KeepWhole`].
//!    Nothing but the transaction state of the walk is kept, so segments of
//!    any size stream through.
//! 4. **Write.** [`Fate::apply`] turns each batch into the one to write
//!    (or none); write them to the replacement segments, with the aborted
//!    index entries [`Decider::aborted_to_index`] lists, swap the segments
//!    in, then store the new checkpoint.
//!
//! The decision of each rule lives in one small function: the record rule
//! in `decide.rs` (`verdict`), markers in `decide_control` with
//! `txn.rs`, producer state in `producers.rs`, the plan in `range.rs`.

mod decide;
mod fate;
mod key_map;
mod producers;
mod range;
mod summary;
mod txn;
mod view;

pub use decide::{marker_may_go, Decider, PassTime};
pub use fate::Fate;
pub use key_map::{KeyMap, MapStep, ENTRY_OVERHEAD_BYTES};
pub use producers::{ActiveProducers, ProducerLast};
pub use range::{
    plan_cleaning, CleanPlan, CleanRange, CleanReason, CompactionConfig, LogExtent, SegmentSummary,
    WaitReason,
};
pub use summary::CleanSummary;
pub use view::{BatchContent, BatchView, ViewError, ViewRecord};

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;
