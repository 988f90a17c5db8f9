//! The producer fence log: how an epoch bump at one broker's transaction
//! coordinator fences the old epoch on partitions other brokers lead, with
//! no inter-broker RPC (DESIGN.md §6, seed 000).
//!
//! Each broker writes one file, `__cluster/producer_fences/from-<id>.json`
//! ([`crate::layout::producer_fence_file`]): the newest epoch it bumped each
//! producer id to. Nobody else writes it; every broker reads the others' and
//! fences, on the partitions it leads, each (producer id, epoch) newer than
//! it knew. Applying a fence twice, or an older one, changes nothing, so a
//! stale read of a log is harmless and a re-read after a crash is safe.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// The format of a fence log; a reader refuses any other.
pub const FENCE_LOG_VERSION: u32 = 1;

/// One producer's newest fenced epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fence {
    pub producer_id: i64,
    pub epoch: i16,
    /// Wall time of the bump (the writer's clock), for pruning only.
    pub at_ms: i64,
}

/// What one broker's fence log holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FenceLog {
    pub version: u32,
    pub broker_id: i32,
    pub fences: Vec<Fence>,
}

/// Why a fence log could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FenceLogError {
    Parse(String),
    UnknownVersion(u32),
    WrongBroker { expected: i32, found: i32 },
}

impl fmt::Display for FenceLogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FenceLogError::Parse(e) => write!(f, "not a fence log: {e}"),
            FenceLogError::UnknownVersion(v) => write!(f, "unknown fence log version {v}"),
            FenceLogError::WrongBroker { expected, found } => {
                write!(f, "the fence log of broker {expected} names broker {found}")
            }
        }
    }
}

impl std::error::Error for FenceLogError {}

impl FenceLog {
    /// The log a broker writes: its newest fence per producer id, in id
    /// order, without those older than `keep_since_ms` (a producer id idle
    /// that long has expired everywhere, so its fence can fence nothing).
    pub fn of(broker_id: i32, newest: &BTreeMap<i64, Fence>, keep_since_ms: i64) -> FenceLog {
        FenceLog {
            version: FENCE_LOG_VERSION,
            broker_id,
            fences: newest
                .values()
                .filter(|f| f.at_ms >= keep_since_ms)
                .copied()
                .collect(),
        }
    }

    pub fn encode(&self) -> Result<Vec<u8>, serde_json::Error> {
        serde_json::to_vec(self)
    }

    /// Reads the log in broker `expected_broker`'s file.
    pub fn decode(bytes: &[u8], expected_broker: i32) -> Result<FenceLog, FenceLogError> {
        let log: FenceLog =
            serde_json::from_slice(bytes).map_err(|e| FenceLogError::Parse(e.to_string()))?;
        if log.version != FENCE_LOG_VERSION {
            return Err(FenceLogError::UnknownVersion(log.version));
        }
        if log.broker_id != expected_broker {
            return Err(FenceLogError::WrongBroker {
                expected: expected_broker,
                found: log.broker_id,
            });
        }
        Ok(log)
    }
}

/// Records a fence in `known` (producer id -> newest fence) if it is newer
/// than what is known of that producer; returns whether it was.
pub fn record_fence(known: &mut BTreeMap<i64, Fence>, fence: Fence) -> bool {
    match known.get(&fence.producer_id) {
        Some(k) if k.epoch >= fence.epoch => false,
        _ => {
            known.insert(fence.producer_id, fence);
            true
        }
    }
}

/// The fences of `log` to apply: those newer than `known`, which is
/// brought up to date. A log read again, or an older one, yields nothing.
pub fn fences_to_apply(known: &mut BTreeMap<i64, Fence>, log: &FenceLog) -> Vec<Fence> {
    log.fences
        .iter()
        .filter(|f| record_fence(known, **f))
        .copied()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn fence(producer_id: i64, epoch: i16) -> Fence {
        Fence {
            producer_id,
            epoch,
            at_ms: 1_000,
        }
    }

    #[test]
    fn a_fence_log_round_trips_and_names_its_broker() {
        let mut known = BTreeMap::new();
        record_fence(&mut known, fence(7, 3));
        record_fence(&mut known, fence(5, 1));
        let log = FenceLog::of(2, &known, 0);
        assert_eq!(
            log.fences,
            vec![fence(5, 1), fence(7, 3)],
            "in producer id order"
        );
        let bytes = log.encode().unwrap();
        assert_eq!(FenceLog::decode(&bytes, 2), Ok(log));
        assert_eq!(
            FenceLog::decode(&bytes, 3),
            Err(FenceLogError::WrongBroker {
                expected: 3,
                found: 2
            })
        );
        let other = br#"{"version":9,"broker_id":2,"fences":[]}"#;
        assert_eq!(
            FenceLog::decode(other, 2),
            Err(FenceLogError::UnknownVersion(9))
        );
    }

    #[test]
    fn only_fences_newer_than_known_are_applied_and_a_re_read_applies_nothing() {
        let mut known = BTreeMap::new();
        let log = FenceLog {
            version: FENCE_LOG_VERSION,
            broker_id: 1,
            fences: vec![fence(5, 2), fence(7, 3)],
        };
        assert_eq!(fences_to_apply(&mut known, &log), log.fences);
        assert!(fences_to_apply(&mut known, &log).is_empty());
        let older = FenceLog {
            fences: vec![fence(5, 1), fence(7, 4)],
            ..log.clone()
        };
        assert_eq!(fences_to_apply(&mut known, &older), vec![fence(7, 4)]);
        assert_eq!(known[&5].epoch, 2);
    }

    #[test]
    fn fences_of_expired_producers_are_pruned_from_the_log() {
        let mut known = BTreeMap::new();
        record_fence(
            &mut known,
            Fence {
                at_ms: 10,
                ..fence(1, 1)
            },
        );
        record_fence(
            &mut known,
            Fence {
                at_ms: 50,
                ..fence(2, 1)
            },
        );
        assert_eq!(FenceLog::of(0, &known, 20).fences, vec![known[&2]]);
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic_the_fence_log_decoder(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = FenceLog::decode(&bytes, 0);
        }
    }
}
