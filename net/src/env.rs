//! What the broker takes from the world it runs in: a clock, and a place to
//! run work that blocks on the volume.
//!
//! Both are handed to [`Broker::open`](crate::Broker::open) as an [`Env`]:
//! `kaas serve` passes [`Env::system`]; the simulation gives every broker a
//! clock of its own (seeded offset and drift, so leases and timeouts can
//! disagree between brokers as they do on real machines) and an IO runner
//! that lets simulated time pass for an fsync. Nothing else in `net` reads
//! time, and nothing in `net` blocks an async worker thread on the volume:
//! every such call goes through [`Env::blocking`].

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;

/// Time as one broker sees it.
pub trait Clock: Send + Sync {
    /// Wall time in milliseconds since the Unix epoch: what is written into
    /// records, state files and group timestamps.
    fn wall_ms(&self) -> i64;
    /// Milliseconds since an arbitrary origin, never going back: request
    /// deadlines (and, with many brokers, leases).
    fn monotonic_ms(&self) -> i64;
}

/// The machine's clock. Under madsim both readings are intercepted and are
/// simulated time.
#[derive(Debug, Clone, Copy)]
pub struct SystemClock {
    origin: tokio::time::Instant,
}

impl SystemClock {
    pub fn new() -> SystemClock {
        SystemClock {
            origin: tokio::time::Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        SystemClock::new()
    }
}

impl Clock for SystemClock {
    fn wall_ms(&self) -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0)
    }

    fn monotonic_ms(&self) -> i64 {
        i64::try_from(self.origin.elapsed().as_millis()).unwrap_or(i64::MAX)
    }
}

/// What a blocking job waits on, so a runner can model its cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoKind {
    /// Waits for the disk: an fsync, an atomic replace (tmp + fsync +
    /// rename), a directory sync.
    Fsync,
    /// Page-cache reads and writes, opens, removals, listings.
    Buffered,
    /// An append at the end of an open log file (a record batch, a
    /// marker, an aborted-index entry): a copy into the page cache, shorter
    /// than the two thread hand-offs a blocking-pool job costs. The
    /// production runner runs it in place; a segment roll (a file created)
    /// rides along, once per segment.
    Append,
}

/// A job for the runner: runs once, wherever the runner puts it.
pub type Job = Box<dyn FnOnce() + Send>;

/// Runs blocking volume work away from the async worker threads.
pub trait IoRunner: Send + Sync {
    /// Runs `job`; the future resolves once it has run. A runner that can no
    /// longer run jobs (its runtime is shutting down) drops the job, and
    /// the caller sees an error.
    fn run(&self, kind: IoKind, job: Job) -> Pin<Box<dyn Future<Output = ()> + Send>>;
}

/// tokio's blocking pool: the production runner. Appends run in place
/// (see [`IoKind::Append`]): with 32 transactional producers a blocking-pool
/// job per append was 16 of the about 26 hand-offs of each transaction,
/// and the broker spent most of its CPU in the scheduler and futexes
/// (docs/performance.md).
#[derive(Debug, Default, Clone, Copy)]
pub struct BlockingPool;

impl IoRunner for BlockingPool {
    fn run(&self, kind: IoKind, job: Job) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        if kind == IoKind::Append {
            job();
            return Box::pin(async {});
        }
        // madsim marks spawn_blocking deprecated (it runs the closure in
        // place); the simulation uses its own runner anyway.
        #[cfg_attr(madsim, allow(deprecated))]
        let handle = tokio::task::spawn_blocking(job);
        Box::pin(async move {
            let _ = handle.await;
        })
    }
}

/// Runs each job in place, on the calling task: for volumes that never
/// block (in memory), where a hop to another thread would only add
/// nondeterminism (the fuzz targets run the broker on paused time).
#[derive(Debug, Default, Clone, Copy)]
pub struct InPlace;

impl IoRunner for InPlace {
    fn run(&self, _kind: IoKind, job: Job) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        job();
        Box::pin(async {})
    }
}

/// The broker's clock and IO runner.
#[derive(Clone)]
pub struct Env {
    pub clock: Arc<dyn Clock>,
    pub io: Arc<dyn IoRunner>,
    /// The buggify points' injector: inert but in the simulator.
    pub buggify: crate::buggify::Buggify,
    /// Reports of the ownership gates: inert but in the simulator.
    pub witness: crate::witness::Witness,
}

impl std::fmt::Debug for Env {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Env")
    }
}

impl Env {
    /// The real machine: system clock, tokio's blocking pool.
    pub fn system() -> Env {
        Env {
            clock: Arc::new(SystemClock::new()),
            io: Arc::new(BlockingPool),
            buggify: crate::buggify::Buggify::none(),
            witness: crate::witness::Witness::none(),
        }
    }

    /// The system clock with jobs run in place (see [`InPlace`]).
    pub fn in_place() -> Env {
        Env {
            clock: Arc::new(SystemClock::new()),
            io: Arc::new(InPlace),
            buggify: crate::buggify::Buggify::none(),
            witness: crate::witness::Witness::none(),
        }
    }

    /// Wall time in milliseconds since the Unix epoch.
    pub fn now_ms(&self) -> i64 {
        self.clock.wall_ms()
    }

    /// Sleeps until the clock's monotonic reading reaches `deadline_ms`.
    pub async fn sleep_until(&self, deadline_ms: i64) {
        let left = deadline_ms.saturating_sub(self.clock.monotonic_ms());
        if left > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(left as u64)).await;
        }
    }

    /// Runs `f` on the IO runner and returns what it returned.
    pub async fn blocking<T: Send + 'static>(
        &self,
        kind: IoKind,
        f: impl FnOnce() -> io::Result<T> + Send + 'static,
    ) -> io::Result<T> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.io
            .run(
                kind,
                Box::new(move || {
                    let _ = tx.send(f());
                }),
            )
            .await;
        rx.await
            .unwrap_or_else(|_| Err(io::Error::other("the IO runner dropped a job")))
    }
}

#[cfg(test)]
#[cfg(not(madsim))]
mod tests {
    use super::*;

    #[tokio::test]
    async fn blocking_returns_what_the_job_returned() {
        let env = Env::system();
        let v = env.blocking(IoKind::Buffered, || Ok(41 + 1)).await;
        assert_eq!(v.unwrap(), 42);
        let e = env
            .blocking(IoKind::Fsync, || -> io::Result<()> {
                Err(io::Error::other("disk"))
            })
            .await;
        assert_eq!(e.unwrap_err().to_string(), "disk");
    }

    /// A runner that never runs its jobs (a runtime shutting down) is an
    /// error for the caller, not a hang or a panic.
    #[tokio::test]
    async fn a_dropped_job_is_an_error() {
        struct Dropper;
        impl IoRunner for Dropper {
            fn run(&self, _: IoKind, job: Job) -> Pin<Box<dyn Future<Output = ()> + Send>> {
                drop(job);
                Box::pin(async {})
            }
        }
        let env = Env {
            clock: Arc::new(SystemClock::new()),
            io: Arc::new(Dropper),
            buggify: crate::buggify::Buggify::none(),
            witness: crate::witness::Witness::none(),
        };
        assert!(env.blocking(IoKind::Buffered, || Ok(())).await.is_err());
    }
}
