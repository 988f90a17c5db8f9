//! One owner at a time, witnessed in simulated real time (issue 13 item
//! 11; docs/simulation.md "One owner at a time").
//!
//! Every time a broker's ownership gate admits an item (a partition, a
//! group slot, a transaction slot: `kaas_net::witness`), this observer
//! asks every other live broker whether its own gate would admit the same
//! item at that same instant. Each broker answers from its own clock, its
//! own lease and its own holdings, so the check needs no model of the
//! clocks: two "yes" answers at one instant mean two brokers believed they
//! owned the item at once, which the lease rules exist to prevent.
//!
//! Nothing a client can see shows such an overlap by itself: the
//! successor's claim is an exclusive create, so the stale owner's flushes
//! and slot writes find it and acknowledge nothing, and the overlap costs
//! only wasted work. A lease bound that leaves out the volume's staleness
//! (`LeaseIgnoresStaleness`) or a claim resumed from a stale listing
//! (`NewestClaimFromTheListing`) shows here, and only here.

use kaas_net::witness::{Observer, Owned};
use kaas_net::Broker;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Weak};

/// Each broker's latest incarnation, by index: the harness registers it
/// once it opened. Weak: a killed incarnation's tasks are dropped with its
/// node, and with them the broker, so only live ones upgrade.
pub type LiveBrokers = Arc<Mutex<BTreeMap<usize, Weak<Broker>>>>;

/// At most this many overlaps are described in a seed's report (all are
/// counted).
const DESCRIBED: usize = 5;

/// What the witness compared and found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct OneOwnerStats {
    /// Admissions by one broker's gate compared with another live broker's
    /// gate at the same instant.
    pub compared: u64,
    /// Of those, how many found the other broker's gate admitting too.
    pub overlaps: u64,
}

#[derive(Default)]
struct Findings {
    stats: OneOwnerStats,
    described: Vec<String>,
}

/// The observer the harness installs in every broker of a multi-broker
/// seed.
pub struct OneOwner {
    live: LiveBrokers,
    findings: Mutex<Findings>,
}

impl OneOwner {
    pub fn new(live: LiveBrokers) -> Arc<OneOwner> {
        Arc::new(OneOwner {
            live,
            findings: Mutex::default(),
        })
    }

    fn findings(&self) -> std::sync::MutexGuard<'_, Findings> {
        self.findings.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn stats(&self) -> OneOwnerStats {
        self.findings().stats
    }

    /// The overlaps found, as violations of the seed (the first few
    /// described, the rest counted).
    pub fn violations(&self) -> Vec<String> {
        let findings = self.findings();
        let mut out = findings.described.clone();
        let more = findings.stats.overlaps as usize - findings.described.len();
        if more > 0 {
            out.push(format!(
                "one owner at a time: {more} more admissions met another broker's gate admitting the same item"
            ));
        }
        out
    }
}

impl Observer for OneOwner {
    fn admitted(&self, broker_id: i32, item: Owned<'_>, epoch: i32) {
        // Upgraded outside the registry's lock: a broker's gate may run
        // while the harness registers another.
        let others: Vec<(usize, Arc<Broker>)> = self
            .live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|(&id, _)| id as i32 != broker_id)
            .filter_map(|(&id, b)| b.upgrade().map(|b| (id, b)))
            .collect();
        for (other, broker) in others {
            let theirs = broker.admits(item);
            let mut findings = self.findings();
            findings.stats.compared += 1;
            let Some(their_epoch) = theirs else { continue };
            findings.stats.overlaps += 1;
            if findings.described.len() < DESCRIBED {
                findings.described.push(format!(
                    "one owner at a time: broker {broker_id}'s gate admitted {item} at epoch {epoch} \
                     while broker {other}'s gate admits it at epoch {their_epoch}, its lease holding \
                     on its own clock: two owners at once"
                ));
            }
        }
    }
}
