//! A member of a classic group.

use super::classic::Waiter;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// One protocol a member supports (for consumers: an assignor name and the
/// subscription encoded for it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Protocol {
    pub name: String,
    pub metadata: Bytes,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub id: String,
    /// `group.instance.id` of a static member.
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocol_type: String,
    /// In the member's order of preference.
    pub protocols: Vec<Protocol>,
    /// What the leader assigned this member in the current generation.
    pub assignment: Bytes,
    /// The JoinGroup request parked until the join phase completes.
    pub(crate) join_waiter: Option<Waiter>,
    /// The SyncGroup request parked until the leader's assignment arrives.
    pub(crate) sync_waiter: Option<Waiter>,
    /// Joined without a member id and has not completed a join phase yet:
    /// such a member is dropped after `new_member_join_timeout_ms` even while
    /// it waits in JoinGroup, because its client may have given up.
    pub(crate) is_new: bool,
    /// When the member is dropped unless it heartbeats (or commits) again.
    pub(crate) heartbeat_deadline_ms: i64,
}

impl Member {
    pub fn is_static(&self) -> bool {
        self.instance_id.is_some()
    }

    pub fn is_awaiting_join(&self) -> bool {
        self.join_waiter.is_some()
    }

    pub fn is_awaiting_sync(&self) -> bool {
        self.sync_waiter.is_some()
    }

    /// The member's metadata for `protocol` (empty if it does not support it).
    pub fn metadata(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|p| p.name == protocol)
            .map(|p| p.metadata.clone())
            .unwrap_or_default()
    }

    /// Whether a JoinGroup carries exactly the protocols this member already
    /// has (same names, same metadata, same order): such a rejoin changes
    /// nothing and need not start a rebalance.
    pub fn matches(&self, protocols: &[Protocol]) -> bool {
        self.protocols == protocols
    }

    /// The member's most preferred protocol among `candidates`.
    pub fn vote<'a>(&'a self, candidates: &BTreeSet<&str>) -> Option<&'a str> {
        self.protocols
            .iter()
            .map(|p| p.name.as_str())
            .find(|n| candidates.contains(n))
    }
}

/// A member of a stable generation as its slot file keeps it (Kafka's
/// GroupMetadataValue member): enough to bring the member back after a
/// restart, so it keeps heartbeating and committing in its generation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredMember {
    pub member_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    /// The member's metadata for the generation's protocol (for consumers,
    /// its subscription); the other protocols it offered are not kept.
    #[serde(with = "hex_bytes")]
    pub subscription: Bytes,
    #[serde(with = "hex_bytes")]
    pub assignment: Bytes,
}

/// A generation whose leader's assignment was stored: what a restart
/// brings back as a Stable group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StableGeneration {
    pub generation: i32,
    pub protocol_name: Option<String>,
    pub leader: Option<String>,
    pub members: Vec<StoredMember>,
}

/// Protocol bytes as a hex string: JSON has no bytes, and an array of
/// numbers would be three times longer.
mod hex_bytes {
    use bytes::Bytes;
    use serde::{de::Error, Deserialize, Deserializer, Serializer};

    const DIGITS: &[u8; 16] = b"0123456789abcdef";

    pub fn serialize<S: Serializer>(bytes: &Bytes, s: S) -> Result<S::Ok, S::Error> {
        let mut text = String::with_capacity(bytes.len() * 2);
        for b in bytes.iter() {
            text.push(DIGITS[(b >> 4) as usize] as char);
            text.push(DIGITS[(b & 0xf) as usize] as char);
        }
        s.serialize_str(&text)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Bytes, D::Error> {
        let text = String::deserialize(d)?;
        let digit = |c: u8| -> Result<u8, D::Error> {
            (c as char)
                .to_digit(16)
                .map(|v| v as u8)
                .ok_or_else(|| D::Error::custom("not a hex digit"))
        };
        let raw = text.as_bytes();
        if raw.len() % 2 != 0 {
            return Err(D::Error::custom("odd number of hex digits"));
        }
        raw.chunks(2)
            .map(|pair| Ok(digit(pair[0])? << 4 | digit(pair[1])?))
            .collect::<Result<Vec<u8>, D::Error>>()
            .map(Bytes::from)
    }
}
