//! What a simulated broker takes from its world: its own clock and an IO
//! runner on simulated time (`kaas_net::env`).
//!
//! - [`SimClock`]: the simulation's time seen through a seeded offset (the
//!   broker's wall clock is that far from true time) and drift (it runs that
//!   many parts per million fast or slow), so that brokers disagree about
//!   time as real machines do. Leases and request deadlines read it.
//! - [`SimIo`]: runs a blocking job in place (the simulated volume never
//!   blocks) after letting a seeded simulated duration pass for an fsync,
//!   so appends arrive while an fsync is in flight (group commit groups
//!   something) and timed kills land between an append and its fsync.
//!   In a multi-broker seed it also knows its broker's link to the volume
//!   ([`SimIo::with_link`]): while the link is cut, its jobs wait, and run
//!   when it heals, as IO on an NFS `hard` mount does (the operations the
//!   broker makes outside the runner fail instead: see `SimVolume`).

use kaas_net::env::{Clock, IoKind, IoRunner, Job};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

/// True simulated wall time, as the client nodes read it.
pub fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// One broker's clock.
pub struct SimClock {
    origin: tokio::time::Instant,
    /// Wall time at `origin`, offset included.
    wall_at_origin_ms: i64,
    drift_ppm: i64,
}

impl SimClock {
    /// A clock `offset_ms` away from the simulation's wall time, running
    /// `drift_ppm` parts per million fast (negative: slow).
    pub fn new(offset_ms: i64, drift_ppm: i64) -> SimClock {
        let wall = wall_ms();
        SimClock {
            origin: tokio::time::Instant::now(),
            wall_at_origin_ms: wall + offset_ms,
            drift_ppm,
        }
    }

    fn elapsed_ms(&self) -> i64 {
        let real = i64::try_from(self.origin.elapsed().as_millis()).unwrap_or(i64::MAX);
        real.saturating_add(real.saturating_mul(self.drift_ppm) / 1_000_000)
    }
}

impl Clock for SimClock {
    fn wall_ms(&self) -> i64 {
        self.wall_at_origin_ms.saturating_add(self.elapsed_ms())
    }

    fn monotonic_ms(&self) -> i64 {
        self.elapsed_ms()
    }
}

/// The IO runner of a simulated broker.
pub struct SimIo {
    /// Range of an fsync's simulated duration, in microseconds.
    fsync_us: (u64, u64),
    rng: Mutex<SmallRng>,
    /// This broker's index and the set of brokers cut off from the volume.
    link: Option<Link>,
}

/// A broker's link to the volume, as its IO runner sees it.
#[derive(Clone)]
struct Link {
    broker: usize,
    unreachable: watch::Receiver<BTreeSet<usize>>,
    /// Jobs that waited for the link and ran late.
    late: Arc<AtomicU64>,
}

impl SimIo {
    /// fsyncs take a duration drawn uniformly from `[min, max]` with an rng
    /// seeded by `seed`.
    pub fn new(fsync: (Duration, Duration), seed: u64) -> SimIo {
        let us = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        SimIo {
            fsync_us: (us(fsync.0), us(fsync.1).max(us(fsync.0))),
            rng: Mutex::new(SmallRng::seed_from_u64(seed)),
            link: None,
        }
    }

    /// Jobs wait while broker `broker` is in the set `unreachable` names
    /// (its volume link is cut), then run, counted in `late`: the late IO
    /// of a hard mount.
    pub fn with_link(
        mut self,
        broker: usize,
        unreachable: watch::Receiver<BTreeSet<usize>>,
        late: Arc<AtomicU64>,
    ) -> SimIo {
        self.link = Some(Link {
            broker,
            unreachable,
            late,
        });
        self
    }

    fn latency(&self, kind: IoKind) -> Duration {
        match kind {
            IoKind::Buffered | IoKind::Append => Duration::ZERO,
            IoKind::Fsync => {
                let (min, max) = self.fsync_us;
                let mut rng = self.rng.lock().unwrap_or_else(|p| p.into_inner());
                Duration::from_micros(rng.gen_range(min..=max))
            }
        }
    }
}

impl IoRunner for SimIo {
    fn run(&self, kind: IoKind, job: Job) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        let latency = self.latency(kind);
        let link = self.link.clone();
        Box::pin(async move {
            if !latency.is_zero() {
                tokio::time::sleep(latency).await;
            }
            // Checked last, with no await before the job runs: a job never
            // starts while its broker is cut off.
            if let Some(mut link) = link {
                let me = link.broker;
                if link.unreachable.borrow().contains(&me) {
                    let _ = link.unreachable.wait_for(|cut| !cut.contains(&me)).await;
                    link.late.fetch_add(1, Ordering::Relaxed);
                }
            }
            job();
        })
    }
}
