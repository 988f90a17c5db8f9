//! The ownership witness: every time one of the broker's ownership gates
//! lets a request (or a background task) act on an item it owns, the
//! simulator may look at every other broker at that same instant (issue 13
//! item 11, docs/simulation.md "One owner at a time").
//!
//! The lease rules (`kaas_core::cluster::membership`) promise that an
//! owner stops acting before anyone may claim what it holds. Nothing a
//! client sees shows that promise broken by itself: a successor's claim is
//! an exclusive create, so a stale owner's late writes are refused or never
//! read, and the cost of two owners at once is a moment of wasted work.
//! The witness checks the promise itself, in simulated real time, where
//! each broker's clock runs at its own rate: when one broker's gate admits
//! an item, no other broker's gate may admit it too.
//!
//! A gate reports with [`Witness::admitted`], after its own decision and
//! without changing it. Outside the simulator ([`Witness`] without
//! `cfg(madsim)`) that is an empty call; under madsim the simulator
//! installs an [`Observer`] per broker incarnation.

/// An item a broker owns, as its gate names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owned<'a> {
    Partition { topic: &'a str, index: i32 },
    GroupSlot(u32),
    TxnSlot(u32),
}

impl std::fmt::Display for Owned<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Owned::Partition { topic, index } => write!(f, "partition {topic}-{index}"),
            Owned::GroupSlot(slot) => write!(f, "group slot {slot}"),
            Owned::TxnSlot(slot) => write!(f, "transaction slot {slot}"),
        }
    }
}

/// What the simulator does with a gate's report: the broker's id, the item
/// and the epoch of the claim its gate admitted it at.
#[cfg(madsim)]
pub trait Observer: Send + Sync {
    fn admitted(&self, broker_id: i32, item: Owned<'_>, epoch: i32);
}

/// The broker's ownership witness: inert outside the simulator.
#[derive(Clone, Default)]
pub struct Witness {
    #[cfg(madsim)]
    observer: Option<std::sync::Arc<dyn Observer>>,
}

impl Witness {
    /// A witness that reports to nobody.
    pub fn none() -> Witness {
        Witness::default()
    }

    /// A witness that reports to `observer`.
    #[cfg(madsim)]
    pub fn with(observer: std::sync::Arc<dyn Observer>) -> Witness {
        Witness {
            observer: Some(observer),
        }
    }

    /// Broker `broker_id`'s gate admitted `item` at the claim of `epoch`.
    #[inline]
    pub fn admitted(&self, broker_id: i32, item: Owned<'_>, epoch: i32) {
        #[cfg(madsim)]
        if let Some(o) = &self.observer {
            o.admitted(broker_id, item, epoch);
        }
        #[cfg(not(madsim))]
        let _ = (broker_id, item, epoch);
    }
}

impl std::fmt::Debug for Witness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Witness")
    }
}
