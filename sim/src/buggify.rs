//! The seed's buggify plan and its injector (issue 13 item 6): which of the
//! broker's buggify points (`kaas_net::buggify::Site`) fire in this seed, how
//! often, and what they do.
//!
//! Half the seeds buggify. Such a seed enables each site with a chance of
//! one in two, each at a rate of its own (0.5 %, 2 % or 6 % of the times
//! the broker passes it). A firing point delays (half the time: up to two
//! seconds, now and then past a lease or a request timeout), fails as its
//! IO would (a third), or crashes the broker right there (the rest): the
//! injector wakes the fault driver, which kills that broker at once while
//! the point holds it, and the crash then goes as every other (unsynced
//! data lost or torn, the broker restarted).
//!
//! Everything is drawn from rngs of the plan's own, seeded by the seed (and
//! the broker and its incarnation), never from the simulation's: a seed
//! that does not buggify runs exactly as before, and one that does replays
//! exactly. Points fire only during the fault phase; the liveness phase
//! runs without them.

use kaas_net::buggify::Site;
#[cfg(madsim)]
use kaas_net::buggify::{Fault, Injector};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
#[cfg(madsim)]
use std::time::Duration;
use tokio::sync::Notify;

/// Which sites fire in a seed, at what rate (per mille of passes).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BuggifyPlan {
    pub sites: BTreeMap<Site, u32>,
}

impl BuggifyPlan {
    /// The plan of seed `seed`, from an rng of its own.
    pub fn draw(seed: u64) -> BuggifyPlan {
        let mut rng = SmallRng::seed_from_u64(seed ^ 0x6275_6767_6966_7921);
        let mut sites = BTreeMap::new();
        if rng.gen_bool(0.5) {
            for &site in Site::ALL {
                if rng.gen_bool(0.5) {
                    sites.insert(site, [5, 20, 60][rng.gen_range(0..3)]);
                }
            }
        }
        BuggifyPlan { sites }
    }

    pub fn is_empty(&self) -> bool {
        self.sites.is_empty()
    }
}

/// How often each site fired in a seed (what each fire did, the coverage
/// marks count: `BuggifyDelayedAPoint` and its two siblings).
pub type BuggifyStats = BTreeMap<Site, u64>;

/// One broker's side of the plan.
#[derive(Default)]
struct BrokerPoints {
    /// Its points fire only while this holds (its fault driver runs).
    active: AtomicBool,
    /// A point asked for its crash, and the fault driver has not killed
    /// it for that yet.
    crash_pending: AtomicBool,
    crash_wanted: Notify,
}

/// The plan, shared by every broker incarnation's injector and the fault
/// driver.
pub struct Buggifier {
    plan: BuggifyPlan,
    /// Seeds each incarnation's injector (madsim builds only).
    #[cfg_attr(not(madsim), allow(dead_code))]
    seed: u64,
    brokers: Vec<BrokerPoints>,
    #[cfg_attr(not(madsim), allow(dead_code))]
    incarnations: AtomicU64,
    stats: Mutex<BuggifyStats>,
}

impl Buggifier {
    /// The plan of `seed`, or none with `KAAS_SIM_BUGGIFY=off` (to tell
    /// whether a failing seed needs its buggify points).
    pub fn new(seed: u64, brokers: usize) -> Arc<Buggifier> {
        let off = std::env::var("KAAS_SIM_BUGGIFY").is_ok_and(|v| v == "off");
        Arc::new(Buggifier {
            plan: if off {
                BuggifyPlan::default()
            } else {
                BuggifyPlan::draw(seed)
            },
            seed,
            brokers: (0..brokers)
                .map(|_| BrokerPoints {
                    active: AtomicBool::new(true),
                    ..Default::default()
                })
                .collect(),
            incarnations: AtomicU64::new(0),
            stats: Mutex::new(BuggifyStats::default()),
        })
    }

    pub fn plan(&self) -> &BuggifyPlan {
        &self.plan
    }

    /// The buggify points of a new incarnation of `broker`.
    #[cfg(madsim)]
    pub fn points(self: &Arc<Self>, broker: usize) -> kaas_net::buggify::Buggify {
        if self.plan.is_empty() {
            return kaas_net::buggify::Buggify::none();
        }
        let n = self.incarnations.fetch_add(1, Ordering::Relaxed);
        let rng = SmallRng::seed_from_u64(self.seed ^ (n << 8) ^ broker as u64 ^ 0x5eed);
        kaas_net::buggify::Buggify::with(Arc::new(SeedInjector {
            shared: self.clone(),
            broker,
            rng: Mutex::new(rng),
        }))
    }

    /// No point of `broker` fires from now on: its fault driver is done.
    /// Whether a point had asked for its crash meanwhile (the driver must
    /// still kill it: the point holds the broker until then).
    pub fn stop(&self, broker: usize) -> bool {
        let Some(b) = self.brokers.get(broker) else {
            return false;
        };
        b.active.store(false, Ordering::Relaxed);
        b.crash_pending.swap(false, Ordering::Relaxed)
    }

    /// Resolves when a point asks for `broker`'s crash.
    pub async fn crash_wanted(&self, broker: usize) {
        let Some(b) = self.brokers.get(broker) else {
            return std::future::pending().await;
        };
        while !b.crash_pending.swap(false, Ordering::Relaxed) {
            b.crash_wanted.notified().await;
        }
    }

    pub fn stats(&self) -> BuggifyStats {
        self.stats.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

#[cfg(madsim)]
struct SeedInjector {
    shared: Arc<Buggifier>,
    broker: usize,
    rng: Mutex<SmallRng>,
}

#[cfg(madsim)]
impl Injector for SeedInjector {
    fn at(&self, site: Site) -> Option<Fault> {
        let rate = *self.shared.plan.sites.get(&site)?;
        let points = self.shared.brokers.get(self.broker)?;
        if !points.active.load(Ordering::Relaxed) {
            return None;
        }
        let mut rng = self.rng.lock().unwrap_or_else(|p| p.into_inner());
        if rng.gen_range(0..1000) >= rate {
            return None;
        }
        let roll = rng.gen_range(0..6);
        let fault = match roll {
            0..=2 => {
                // Mostly short; one in five past a request timeout or a
                // lease.
                let ms = if rng.gen_ratio(1, 5) {
                    rng.gen_range(2_000..=12_000)
                } else {
                    rng.gen_range(1..=2_000)
                };
                Fault::Delay(Duration::from_millis(ms))
            }
            3 | 4 => Fault::Fail,
            _ => Fault::Crash,
        };
        drop(rng);
        *self
            .shared
            .stats
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(site)
            .or_default() += 1;
        if fault == Fault::Crash {
            points.crash_pending.store(true, Ordering::Relaxed);
            points.crash_wanted.notify_one();
        }
        tracing::debug!(broker = self.broker, site = site.name(), ?fault, "buggify");
        Some(fault)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_the_seeds_buggify_and_a_plan_is_the_seeds_own() {
        let plans: Vec<BuggifyPlan> = (0..200).map(BuggifyPlan::draw).collect();
        let buggified = plans.iter().filter(|p| !p.is_empty()).count();
        assert!((70..=130).contains(&buggified), "{buggified} of 200");
        assert_eq!(BuggifyPlan::draw(17), BuggifyPlan::draw(17));
        for &site in Site::ALL {
            assert!(
                plans.iter().any(|p| p.sites.contains_key(&site)),
                "no plan enables {site:?}"
            );
        }
    }
}
