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
    /// The rack clients see in Metadata and DescribeCluster (`broker.rack`).
    pub rack: Option<String>,
    /// The lease and the bounds every ownership decision on the shared
    /// volume is made with (`kaas_core::cluster::membership`).
    pub lease: kaas_core::cluster::membership::LeaseBounds,
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
    /// Transaction coordinator settings (`transaction.*`,
    /// `transactional.id.*`).
    pub txn: kaas_core::txn::TxnConfig,
    /// Most client connections open at once; a connection over the cap is
    /// accepted and closed at once (Kafka's `max.connections`).
    pub max_connections: usize,
    /// Most connections open at once from one client address (Kafka's
    /// `max.connections.per.ip`).
    pub max_connections_per_ip: usize,
    /// Budget of request bytes read but not yet answered, across all
    /// connections (Kafka's `queued.max.request.bytes`). A connection waits,
    /// without reading, until its next frame fits.
    pub queued_max_request_bytes: u32,
    /// The finalized level of the `transaction.version` feature ApiVersions
    /// answers (1 or 2, `DEFAULT_TRANSACTION_VERSION`): clients speak
    /// transaction version 2 (EndTxn v5, Produce v12's implicit add) only
    /// when it is 2.
    pub transaction_version: i16,
}

/// Kafka leaves `max.connections` unlimited; an unlimited broker runs out of
/// file descriptors and memory under a connection flood and then fails every
/// client, so kaas caps it. Ten thousand is far more than a broker's real
/// clients need (each producer or consumer holds one or a few connections)
/// and well under the file descriptor limit of a tuned host.
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;

/// One client address may hold a tenth of the total: a leaking or hostile
/// client (or one NAT in front of many) cannot take every slot, while
/// hundreds of well-behaved clients behind one address still fit.
pub const DEFAULT_MAX_CONNECTIONS_PER_IP: usize = 1_000;

/// Kafka's `queued.max.request.bytes` defaults to unlimited; kaas bounds the
/// request bodies it buffers to 512 MiB, room for five requests of the
/// largest allowed size (100 MiB) or hundreds of typical 1 MiB Produce
/// batches, so that memory stays bounded however many clients send at once.
pub const DEFAULT_QUEUED_MAX_REQUEST_BYTES: u32 = 512 * 1024 * 1024;

/// Kafka 4.x formats a new cluster at `transaction.version` 2 (KIP-890 part 2).
pub const DEFAULT_TRANSACTION_VERSION: i16 = 2;

/// The `transaction.version` levels kaas can finalize (its supported range's
/// upper part: level 0 is that of a cluster older than the feature, which no
/// client of a kaas broker needs).
pub const TRANSACTION_VERSIONS: std::ops::RangeInclusive<i16> = 1..=2;

/// Broker-wide defaults of the per-topic log configs (Kafka's `log.*`).
#[derive(Debug, Clone)]
pub struct LogDefaults {
    pub segment_bytes: u64,
    /// The topics' default `segment.ms` (Kafka's `log.roll.ms`, else
    /// `log.roll.hours`, 168).
    pub roll_ms: i64,
    /// The topics' default `segment.jitter.ms` (Kafka's
    /// `log.roll.jitter.ms`, 0).
    pub roll_jitter_ms: i64,
    pub retention_ms: i64,
    pub retention_bytes: i64,
    pub max_message_bytes: i32,
    /// How often retention runs.
    pub retention_check_interval_ms: u64,
    /// How often the log cleaner looks at the compacted partitions this
    /// broker leads (Kafka's `log.cleaner.backoff.ms`).
    pub cleaner_backoff_ms: u64,
    /// How much of a partition's dirty section one cleaning round maps
    /// (the key map's budget; Kafka's `log.cleaner.dedupe.buffer.size`).
    pub cleaner_dedupe_buffer_bytes: usize,
    /// The cleaner's I/O budget: it pauses long enough to keep its reads
    /// and writes, and the removal of the files a round replaced, under
    /// this rate; 0 is unlimited (Kafka's
    /// `log.cleaner.io.max.bytes.per.second`, unlimited by default there).
    pub cleaner_io_max_bytes_per_second: u64,
}

impl Default for LogDefaults {
    fn default() -> Self {
        LogDefaults {
            segment_bytes: 1 << 30,
            roll_ms: kaas_core::partition::segment_roll::DEFAULT_SEGMENT_MS,
            roll_jitter_ms: 0,
            retention_ms: 7 * 24 * 60 * 60 * 1000,
            retention_bytes: -1,
            // Kafka's default message.max.bytes.
            max_message_bytes: 1_048_588,
            retention_check_interval_ms: 60_000,
            cleaner_backoff_ms: 15_000,
            cleaner_dedupe_buffer_bytes: 32 << 20,
            cleaner_io_max_bytes_per_second: 64 << 20,
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
            rack: None,
            lease: kaas_core::cluster::membership::LeaseBounds::default(),
            auto_create_topics: true,
            default_partitions: 1,
            max_frame_bytes: DEFAULT_MAX_FRAME_BYTES,
            max_non_produce_frame_bytes:
                kaas_core::protocol::frame::DEFAULT_MAX_NON_PRODUCE_FRAME_BYTES,
            log: LogDefaults::default(),
            producer_id_expiration_ms: kaas_core::producer::DEFAULT_PRODUCER_ID_EXPIRATION_MS,
            capture_dir: None,
            group: kaas_core::group::GroupConfig::default(),
            txn: kaas_core::txn::TxnConfig::default(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_per_ip: DEFAULT_MAX_CONNECTIONS_PER_IP,
            queued_max_request_bytes: DEFAULT_QUEUED_MAX_REQUEST_BYTES,
            transaction_version: DEFAULT_TRANSACTION_VERSION,
        }
    }
}
