//! The states of a classic group.

/// Where a classic group is in its life cycle.
///
/// ```text
/// Empty ──join──▶ PreparingRebalance ──all joined / timeout──▶ CompletingRebalance
///   ▲                   ▲      │                                   │ leader's SyncGroup
///   │                   │      └──no members left──▶ Empty         ▼
///   └─ last member ─────┴──────── member change / leader rejoin ─ Stable
/// Dead: deleted or unloaded; never leaves.
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    Dead,
}

impl GroupState {
    /// The name Kafka uses on the wire (DescribeGroups, ListGroups).
    pub fn as_str(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }

    /// Whether a rebalance may start from this state.
    pub fn can_rebalance(self) -> bool {
        matches!(
            self,
            GroupState::Empty | GroupState::CompletingRebalance | GroupState::Stable
        )
    }
}

/// ListGroups v4+ `StatesFilter`: an empty filter matches every state; names
/// compare case-insensitively, as Kafka parses them.
pub fn state_matches_filter(state: GroupState, filter: &[String]) -> bool {
    filter.is_empty()
        || filter
            .iter()
            .any(|f| f.eq_ignore_ascii_case(state.as_str()))
}

/// ListGroups v5+ `TypesFilter`: every kaas group is a classic group.
pub fn classic_type_matches_filter(filter: &[String]) -> bool {
    filter.is_empty()
        || filter
            .iter()
            .any(|f| f.eq_ignore_ascii_case(CLASSIC_GROUP_TYPE))
}

/// The group type of every group kaas hosts (KIP-848 names the old protocol
/// "classic").
pub const CLASSIC_GROUP_TYPE: &str = "classic";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_groups_states_filter_is_case_insensitive() {
        assert!(state_matches_filter(GroupState::Stable, &[]));
        assert!(state_matches_filter(GroupState::Stable, &["stable".into()]));
        assert!(state_matches_filter(
            GroupState::PreparingRebalance,
            &["Empty".into(), "PREPARINGREBALANCE".into()]
        ));
        assert!(!state_matches_filter(GroupState::Empty, &["Stable".into()]));
        assert!(classic_type_matches_filter(&["Classic".into()]));
        assert!(!classic_type_matches_filter(&["consumer".into()]));
    }
}
