//! Shared set-up of the integration tests: a real broker on an ephemeral
//! 127.0.0.1 port over a temporary directory.

pub mod configs;

use kaas_net::server::ServerLimits;
use kaas_net::volume::LocalVolume;
use kaas_net::{Broker, BrokerConfig};
use std::net::SocketAddr;
use std::sync::Arc;

pub struct TestBroker {
    /// Kept alive for the test: dropping it deletes the data.
    pub _dir: tempfile::TempDir,
    pub addr: SocketAddr,
    pub broker: Arc<Broker>,
    /// The listener's connection and request-budget limits, with their gauges.
    #[allow(dead_code)] // not every test binary reads them
    pub limits: Arc<ServerLimits>,
}

/// Starts a broker; `configure` adjusts its configuration first.
pub async fn start_broker(configure: impl FnOnce(&mut BrokerConfig)) -> TestBroker {
    start_broker_in(tempfile::tempdir().expect("temp dir"), configure).await
}

/// Starts a broker on `dir` (a restart, when another broker used it before).
#[allow(dead_code)] // not every test binary restarts
pub async fn start_broker_in(
    dir: tempfile::TempDir,
    configure: impl FnOnce(&mut BrokerConfig),
) -> TestBroker {
    let (listener, addr, broker) = open_broker(dir.path(), configure).await;
    let limits = ServerLimits::new(&broker.config);
    tokio::spawn(kaas_net::server::serve_with_limits(
        broker.clone(),
        listener,
        limits.clone(),
        std::future::pending(),
    ));
    TestBroker {
        _dir: dir,
        addr,
        broker,
        limits,
    }
}

/// A broker serving a directory it shares with others (a cluster on one
/// volume); [`stop`](SharedBroker::stop) ends its listener.
#[allow(dead_code)] // only the cluster tests share a directory
pub struct SharedBroker {
    pub addr: SocketAddr,
    pub broker: Arc<Broker>,
    stop: tokio::sync::oneshot::Sender<()>,
    served: tokio::task::JoinHandle<()>,
}

#[allow(dead_code)]
impl SharedBroker {
    /// Stops serving and drops the broker, as a crash would stop it: its
    /// background tasks end with it, so its heartbeat stops.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.served.await;
        let weak = Arc::downgrade(&self.broker);
        drop(self.broker);
        // Connection tasks let go of the broker as their sockets close.
        for _ in 0..200 {
            if weak.strong_count() == 0 {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("the stopped broker is still referenced");
    }
}

/// Starts a broker on `dir`, which other brokers may share.
#[allow(dead_code)]
pub async fn start_shared_broker(
    dir: &std::path::Path,
    configure: impl FnOnce(&mut BrokerConfig),
) -> SharedBroker {
    let (listener, addr, broker) = open_broker(dir, configure).await;
    let limits = ServerLimits::new(&broker.config);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(kaas_net::server::serve_with_limits(
        broker.clone(),
        listener,
        limits,
        async move {
            let _ = stopped.await;
        },
    ));
    SharedBroker {
        addr,
        broker,
        stop,
        served,
    }
}

/// Binds an ephemeral 127.0.0.1 port and opens a broker on `dir` advertising it.
async fn open_broker(
    dir: &std::path::Path,
    configure: impl FnOnce(&mut BrokerConfig),
) -> (tokio::net::TcpListener, SocketAddr, Arc<Broker>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("local addr");
    let mut config = BrokerConfig::new(addr);
    configure(&mut config);
    let volume = Arc::new(LocalVolume::new(dir).expect("volume"));
    let broker = Broker::open(config, volume, kaas_net::env::Env::system()).expect("broker");
    (listener, addr, broker)
}

/// A runtime of its own, for a test that restarts a broker: dropping it
/// ends the broker and every task of it, as a process exit would.
#[allow(dead_code)] // not every test binary restarts
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// The wall clock in ms, for record timestamps. Records must be stamped as
/// real producers stamp them: a test record stamped at 1970 followed by a
/// transaction marker (which the broker stamps with its clock) rolls the
/// segment by `segment.ms`, in Kafka as in kaas.
#[allow(dead_code)] // not every test binary builds records
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
