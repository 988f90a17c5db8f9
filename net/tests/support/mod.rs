//! Shared set-up of the integration tests: a real broker on an ephemeral
//! 127.0.0.1 port over a temporary directory.

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
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("local addr");
    let mut config = BrokerConfig::new(addr);
    configure(&mut config);
    let volume = Arc::new(LocalVolume::new(dir.path()).expect("volume"));
    let broker = Broker::open(config, volume, kaas_net::env::Env::system()).expect("broker");
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
