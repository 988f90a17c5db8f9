//! Buggify points: the places the design calls dangerous, where the
//! simulator may inject a delay, a failure or a crash (FoundationDB's
//! BUGGIFY, issue 13 item 6; docs/simulation.md "Buggify points").
//!
//! A point is one line at its site, `env.buggify.at(Site::MarkerWrite).await?`
//! (or its error mapped to the site's own). Outside the simulator
//! ([`Buggify`] without `cfg(madsim)`) it is an empty async call that
//! always answers `Ok`. Under madsim the simulator gives each broker
//! incarnation an [`Injector`] that decides, from the seed, which sites are
//! enabled and how often they fire:
//! - [`Fault::Delay`]: the site waits first (a slow disk, a descheduled
//!   thread, a GC pause before a lease renewal);
//! - [`Fault::Fail`]: the site fails as its IO would (an `io::Error`),
//!   and the broker's own handling of that failure runs;
//! - [`Fault::Crash`]: the broker dies exactly there: the injector tells
//!   the simulator to kill this broker, and the site never returns (the
//!   kill drops it where it waits), so nothing after the point runs.

use std::io;

kaas_core::named_enum! {
    /// A buggify point, named for the step it precedes.
    pub enum Site {
        /// A coordinator slot's state write (group or transaction slot: a
        /// journal round, or a snapshot that replaces the journal).
        SlotStateWrite,
        /// InitProducerId's bumped epoch is durable; the fence of the old
        /// epoch on this broker's partitions and the answer follow.
        EpochBumpPersisted,
        /// A COMMIT or ABORT marker is about to be appended to a partition.
        MarkerWrite,
        /// A marker was appended, not yet durable.
        MarkerAppended,
        /// Every marker of a prepared transaction is durable; its offsets and
        /// Complete* follow.
        PrepareToComplete,
        /// A producer-state snapshot is about to be written.
        SnapshotWrite,
        /// The producer id allocator is about to persist a new block's end.
        PidBlockWrite,
        /// A broker is about to write its heartbeat (its lease renewal).
        LeaseRenewal,
        /// An aborted-index (`.txnindex`) entry was appended, not yet durable.
        TxnIndexAppended,
        /// The reaper's pass found a transaction past its timeout; its
        /// decision on the durable entry follows (a descheduled reaper: the
        /// producer may end the transaction or bump its epoch in between).
        ReaperDecision,
    }
}

/// What a point does when it fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Wait this long first.
    Delay(std::time::Duration),
    /// Fail as the site's IO would.
    Fail,
    /// Die here: the injector has asked the simulator to kill this
    /// broker; the site waits for the kill.
    Crash,
}

/// Decides whether a point fires (the simulator's, one per broker
/// incarnation).
#[cfg(madsim)]
pub trait Injector: Send + Sync {
    fn at(&self, site: Site) -> Option<Fault>;
}

/// The broker's buggify points: inert outside the simulator.
#[derive(Clone, Default)]
pub struct Buggify {
    #[cfg(madsim)]
    injector: Option<std::sync::Arc<dyn Injector>>,
}

impl Buggify {
    /// Points that never fire.
    pub fn none() -> Buggify {
        Buggify::default()
    }

    /// Points that fire as `injector` decides.
    #[cfg(madsim)]
    pub fn with(injector: std::sync::Arc<dyn Injector>) -> Buggify {
        Buggify {
            injector: Some(injector),
        }
    }

    /// The point at `site`: `Ok` at once unless the simulator's injector
    /// fires it.
    #[inline]
    pub async fn at(&self, site: Site) -> io::Result<()> {
        #[cfg(madsim)]
        if let Some(fault) = self.injector.as_ref().and_then(|i| i.at(site)) {
            use kaas_core::coverage::{hit, Mark};
            match fault {
                Fault::Delay(d) => {
                    hit(Mark::BuggifyDelayedAPoint);
                    tokio::time::sleep(d).await
                }
                Fault::Fail => {
                    hit(Mark::BuggifyFailedAPoint);
                    return Err(io::Error::other(format!(
                        "buggify: a failure injected at {}",
                        site.name()
                    )));
                }
                Fault::Crash => {
                    hit(Mark::BuggifyCrashedAtAPoint);
                    std::future::pending::<()>().await
                }
            }
        }
        #[cfg(not(madsim))]
        let _ = site;
        Ok(())
    }

    /// [`at`](Self::at) for a site whose failure is a Kafka error: `code`.
    pub async fn at_or(
        &self,
        site: Site,
        code: kaas_core::protocol::ErrorCode,
    ) -> Result<(), kaas_core::protocol::ErrorCode> {
        self.at(site).await.map_err(|_| code)
    }
}

impl std::fmt::Debug for Buggify {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Buggify")
    }
}
