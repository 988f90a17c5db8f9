//! A partition's seat in a topic: led by this broker (its log open here),
//! or led elsewhere (by the newest claim this broker read, if any).
//!
//! Every broker knows every partition of every topic; only the leader has
//! it open. A seat changes hands only in the ownership round
//! (`Broker::reconcile`), which opens a partition it won, closes one it was
//! deposed from or released, and records who else leads the rest.

use super::partition::Partition;
use kaas_core::cluster::Claim;
use std::sync::{Arc, RwLock};

/// Who leads a partition, as this broker knows it.
#[derive(Clone)]
pub enum Leadership {
    /// Led here: the open partition (its claim is its leader epoch).
    Here(Arc<Partition>),
    /// Led by the newest claim read (`None`: none read yet, or none exists).
    Elsewhere(Option<Claim>),
}

pub struct Seat {
    pub index: i32,
    leadership: RwLock<Leadership>,
}

impl Seat {
    pub fn new(index: i32, leadership: Leadership) -> Seat {
        Seat {
            index,
            leadership: RwLock::new(leadership),
        }
    }

    pub fn leadership(&self) -> Leadership {
        self.leadership
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The partition, if this broker leads it.
    pub fn led(&self) -> Option<Arc<Partition>> {
        match self.leadership() {
            Leadership::Here(p) => Some(p),
            Leadership::Elsewhere(_) => None,
        }
    }

    /// The newest claim known: this broker's if it leads the partition.
    pub fn leader(&self) -> Option<Claim> {
        match self.leadership() {
            Leadership::Here(p) => Some(p.leader()),
            Leadership::Elsewhere(c) => c,
        }
    }

    /// Installs `next`, returning what it replaces.
    pub(crate) fn replace(&self, next: Leadership) -> Leadership {
        let mut guard = self.leadership.write().unwrap_or_else(|p| p.into_inner());
        std::mem::replace(&mut *guard, next)
    }
}
