//! The states of one transactional id at its coordinator.

use serde::{Deserialize, Serialize};

/// Where a transactional id is in its life cycle (Kafka's
/// `TransactionState`, same names on the wire).
///
/// ```text
///            InitProducerId                AddPartitions/AddOffsets
/// (none) ──────────────────▶ Empty ─────────────────────────────▶ Ongoing
///                              ▲                                   │  │ EndTxn(commit)
///     InitProducerId (bump)    │          EndTxn(abort), timeout   │  ▼
///   Complete* ─────────────────┘   PrepareAbort ◀──────────────────┘ PrepareCommit
///      ▲  │ AddPartitions/AddOffsets      │ markers durable            │ markers durable
///      │  └──────────▶ Ongoing            ▼                            ▼
///      └──────────────────────────── CompleteAbort            CompleteCommit
/// Ongoing ──InitProducerId, or the timeout──▶ PrepareAbort under a bumped
/// epoch (the fenced producer's transaction is aborted)
/// Dead: expired (transactional.id.expiration.ms); never leaves.
/// ```
///
/// Kafka passes through `PrepareEpochFence` on the way from Ongoing to
/// PrepareAbort when it fences; kaas makes that step in one durable write,
/// so the state never exists here (ListTransactions still accepts its
/// name in a filter: [`STATE_NAMES`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum TxnState {
    Empty,
    Ongoing,
    PrepareCommit,
    PrepareAbort,
    CompleteCommit,
    CompleteAbort,
    Dead,
}

/// Every state name Kafka may put on the wire, kaas's and
/// `PrepareEpochFence`.
pub const STATE_NAMES: &[&str] = &[
    "Empty",
    "Ongoing",
    "PrepareCommit",
    "PrepareAbort",
    "CompleteCommit",
    "CompleteAbort",
    "PrepareEpochFence",
    "Dead",
];

impl TxnState {
    /// The name Kafka uses on the wire (DescribeTransactions,
    /// ListTransactions).
    pub fn as_str(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
            TxnState::Dead => "Dead",
        }
    }

    /// Waiting for its markers: the partition and group lists are the
    /// durable record of what is still owed.
    pub fn is_prepared(self) -> bool {
        matches!(self, TxnState::PrepareCommit | TxnState::PrepareAbort)
    }

    /// No transaction in flight: a new one may begin, or the producer may
    /// re-initialize.
    pub fn is_idle(self) -> bool {
        matches!(
            self,
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
        )
    }

    /// Whether `self -> to` is a transition Kafka's coordinator makes.
    pub fn may_move_to(self, to: TxnState) -> bool {
        use TxnState::*;
        match to {
            Empty => matches!(self, Empty | CompleteCommit | CompleteAbort),
            Ongoing => matches!(self, Empty | Ongoing | CompleteCommit | CompleteAbort),
            PrepareCommit => self == Ongoing,
            PrepareAbort => self == Ongoing,
            CompleteCommit => self == PrepareCommit,
            CompleteAbort => self == PrepareAbort,
            Dead => matches!(self, Empty | CompleteCommit | CompleteAbort),
        }
    }
}
