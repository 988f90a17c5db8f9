//! Classic consumer groups (the JoinGroup/SyncGroup protocol) and their
//! committed offsets, as pure state machines.
//!
//! - [`classic`]: one group's membership: states, generations, the join and
//!   sync barriers, static members, session and rebalance timeouts. Parked
//!   JoinGroup/SyncGroup requests are identified by an opaque [`Waiter`]
//!   token; their answers come back as [`Effect`]s.
//! - [`offsets`]: committed offsets, the pending transactional layer and the
//!   retention rules.
//! - [`slot`]: the durable state of one coordinator slot (the JSON file
//!   `__cluster/group_state/slot-<N>.json`) and the operations applied to it.
//! - [`coordinator`]: every group of the broker plus the durable slot views;
//!   what the request handlers call.
//!
//! Time is always an argument (`now_ms`); nothing here reads a clock.

pub mod classic;
pub mod coordinator;
pub mod member;
pub mod offsets;
pub mod slot;
pub mod state;
pub mod subscription;
pub mod txn_completions;

#[cfg(test)]
mod tests;

pub use classic::{
    Effect, Group, JoinError, JoinRequest, JoinResult, JoinedGroup, JoinedMember, SyncRequest,
    SyncResult, SyncedGroup, Waiter,
};
pub use coordinator::Coordinator;
pub use member::{Member, Protocol};
pub use offsets::{GroupRecord, OffsetEntry, PendingTxnOffsets};
pub use slot::{SlotOp, SlotState};
pub use state::GroupState;

/// The broker settings that shape group behaviour (Kafka's `group.*` and
/// `offsets.*` broker configs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupConfig {
    /// `group.initial.rebalance.delay.ms`: how long the first rebalance of
    /// an empty group waits for more members (extended while they keep
    /// coming, up to the rebalance timeout).
    pub initial_rebalance_delay_ms: i64,
    /// `group.min.session.timeout.ms`.
    pub min_session_timeout_ms: i32,
    /// `group.max.session.timeout.ms`.
    pub max_session_timeout_ms: i32,
    /// `group.max.size`.
    pub max_size: usize,
    /// How long a member that joined without a member id may wait in
    /// JoinGroup before it is dropped (Kafka's fixed 5 minutes).
    pub new_member_join_timeout_ms: i64,
    /// `offsets.retention.minutes`, in milliseconds.
    pub offsets_retention_ms: i64,
    /// `offsets.retention.check.interval.ms`.
    pub offsets_retention_check_interval_ms: i64,
    /// `offset.metadata.max.bytes`.
    pub offset_metadata_max_bytes: usize,
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            initial_rebalance_delay_ms: 3_000,
            min_session_timeout_ms: 6_000,
            max_session_timeout_ms: 1_800_000,
            max_size: i32::MAX as usize,
            new_member_join_timeout_ms: 300_000,
            offsets_retention_ms: 7 * 24 * 60 * 60 * 1000,
            offsets_retention_check_interval_ms: 600_000,
            offset_metadata_max_bytes: 4096,
        }
    }
}

/// The protocol type of groups formed by Kafka consumers.
pub const CONSUMER_PROTOCOL_TYPE: &str = "consumer";
