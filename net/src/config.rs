//! Broker configuration: what `kaas serve` is told on its command line.

use kaas_core::protocol::frame::DEFAULT_MAX_FRAME_BYTES;
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Debug, Clone)]
pub struct BrokerConfig {
    pub broker_id: i32,
    /// Address to bind.
    pub listen: SocketAddr,
    /// Host and port clients are told to connect to (defaults to `listen`).
    pub advertised_host: String,
    pub advertised_port: i32,
    /// Create a topic on first Metadata or Produce that names it.
    pub auto_create_topics: bool,
    /// Partition count of auto-created topics and of CreateTopics with -1.
    pub default_partitions: i32,
    /// Largest request frame accepted; larger ones close the connection
    /// before the body is read.
    pub max_frame_bytes: usize,
    /// Largest request of any API but Produce (see
    /// `kaas_core::protocol::frame::DEFAULT_MAX_NON_PRODUCE_FRAME_BYTES`).
    pub max_non_produce_frame_bytes: usize,
    /// Defaults for topic configs a topic does not set itself.
    pub log: LogDefaults,
    /// Producer state idle this long is forgotten (producer.id.expiration.ms).
    pub producer_id_expiration_ms: i64,
    /// Capture mode for the fuzz corpus: write every request frame received
    /// into this directory (`KAAS_CAPTURE_DIR`; off by default).
    pub capture_dir: Option<PathBuf>,
    /// Consumer group and committed-offset settings (`group.*`, `offsets.*`).
    pub group: kaas_core::group::GroupConfig,
}

/// Broker-wide defaults of the per-topic log configs (Kafka's `log.*`).
#[derive(Debug, Clone)]
pub struct LogDefaults {
    pub segment_bytes: u64,
    pub retention_ms: i64,
    pub retention_bytes: i64,
    pub max_message_bytes: i32,
    /// How often retention runs.
    pub retention_check_interval_ms: u64,
}

impl Default for LogDefaults {
    fn default() -> Self {
        LogDefaults {
            segment_bytes: 1 << 30,
            retention_ms: 7 * 24 * 60 * 60 * 1000,
            retention_bytes: -1,
            // Kafka's default message.max.bytes.
            max_message_bytes: 1_048_588,
            retention_check_interval_ms: 60_000,
        }
    }
}

impl BrokerConfig {
    pub fn new(listen: SocketAddr) -> BrokerConfig {
        BrokerConfig {
            broker_id: 0,
            listen,
            advertised_host: listen.ip().to_string(),
            advertised_port: listen.port() as i32,
            auto_create_topics: true,
            default_partitions: 1,
            max_frame_bytes: DEFAULT_MAX_FRAME_BYTES,
            max_non_produce_frame_bytes:
                kaas_core::protocol::frame::DEFAULT_MAX_NON_PRODUCE_FRAME_BYTES,
            log: LogDefaults::default(),
            producer_id_expiration_ms: kaas_core::producer::DEFAULT_PRODUCER_ID_EXPIRATION_MS,
            capture_dir: None,
            group: kaas_core::group::GroupConfig::default(),
        }
    }
}
