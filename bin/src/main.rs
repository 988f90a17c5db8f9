//! `kaas`: the broker binary.

mod broker_lock;

use clap::{Parser, Subcommand};
use kaas_core::cluster::membership::LeaseBounds;
use kaas_core::group::GroupConfig;
use kaas_core::txn::TxnConfig;
use kaas_net::config::{
    BrokerConfig, LogDefaults, DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_CONNECTIONS_PER_IP,
    DEFAULT_QUEUED_MAX_REQUEST_BYTES, DEFAULT_TRANSACTION_VERSION, TRANSACTION_VERSIONS,
};
use kaas_net::volume::LocalVolume;
use kaas_net::Broker;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Parser)]
#[command(
    name = "kaas",
    version,
    about = "A Kafka-wire-compatible broker on a shared volume"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the broker.
    Serve(ServeArgs),
}

#[derive(Parser)]
struct ServeArgs {
    /// Directory holding the logs and cluster state (the shared volume).
    #[arg(long, default_value = "./kaas-data")]
    data_dir: PathBuf,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:9092")]
    listen: SocketAddr,
    /// host:port clients should connect to (defaults to --listen).
    #[arg(long)]
    advertised: Option<String>,
    /// This broker's id, unique among the brokers sharing --data-dir; a
    /// second process with the same id on the same directory refuses to
    /// start.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(i32).range(0..))]
    broker_id: i32,
    /// The rack clients see for this broker (Kafka's broker.rack).
    #[arg(long)]
    rack: Option<String>,
    /// How long a broker acts for what it owns after starting a heartbeat
    /// that became durable, in ms. It heartbeats three times per lease; a
    /// dead broker's partitions and coordinators move after lease + clock
    /// skew bound + volume staleness bound (docs/cluster.md).
    #[arg(long, default_value_t = LeaseBounds::default().lease_ms, value_parser = clap::value_parser!(i64).range(1..))]
    lease_ms: i64,
    /// How much two brokers' clocks may disagree about the length of one
    /// lease wait (rate drift, not offset), in ms.
    #[arg(long, default_value_t = LeaseBounds::default().clock_skew_ms, value_parser = clap::value_parser!(i64).range(0..))]
    clock_skew_bound_ms: i64,
    /// How long a durable write to --data-dir may stay invisible to another
    /// broker (NFS attribute caching: at least acregmax), in ms.
    #[arg(long, default_value_t = LeaseBounds::default().volume_staleness_ms, value_parser = clap::value_parser!(i64).range(0..))]
    volume_staleness_bound_ms: i64,
    /// Create topics on first use by Metadata or Produce.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    auto_create_topics: bool,
    /// Partitions of auto-created topics (Kafka's num.partitions).
    #[arg(long, default_value_t = 1)]
    default_partitions: i32,
    /// Largest request accepted, in bytes (Kafka's socket.request.max.bytes).
    #[arg(long, default_value_t = kaas_core::protocol::frame::DEFAULT_MAX_FRAME_BYTES)]
    max_frame_bytes: usize,
    /// Largest request of any API but Produce, in bytes (decoded requests
    /// can take ~30 times their size in memory; only Produce carries bulk data).
    #[arg(long, default_value_t = kaas_core::protocol::frame::DEFAULT_MAX_NON_PRODUCE_FRAME_BYTES)]
    max_non_produce_frame_bytes: usize,
    /// Most client connections open at once; more are accepted and closed
    /// at once (Kafka's max.connections, there unlimited). Needs as many
    /// file descriptors: `kaas serve` raises its soft open-file limit to the
    /// hard limit and warns if that is too low for this.
    #[arg(long, default_value_t = DEFAULT_MAX_CONNECTIONS as u32, value_parser = clap::value_parser!(u32).range(1..))]
    max_connections: u32,
    /// Most connections open at once from one client address; more are
    /// accepted and closed at once (Kafka's max.connections.per.ip, there
    /// unlimited).
    #[arg(long, default_value_t = DEFAULT_MAX_CONNECTIONS_PER_IP as u32, value_parser = clap::value_parser!(u32).range(1..))]
    max_connections_per_ip: u32,
    /// Bytes of requests read but not yet answered, over all connections
    /// (Kafka's queued.max.request.bytes, there unlimited). A connection
    /// whose next request does not fit stops reading until it does; a
    /// request larger than this is served alone. At most 4294967295.
    #[arg(long, default_value_t = DEFAULT_QUEUED_MAX_REQUEST_BYTES, value_parser = clap::value_parser!(u32).range(1..))]
    queued_max_request_bytes: u32,
    /// Segment size before a roll (log.segment.bytes).
    #[arg(long, default_value_t = LogDefaults::default().segment_bytes)]
    segment_bytes: u64,
    /// Default time before the active segment rolls, in ms (log.roll.ms;
    /// a topic's segment.ms overrides it).
    #[arg(long, default_value_t = LogDefaults::default().roll_ms, value_parser = clap::value_parser!(i64).range(1..))]
    log_roll_ms: i64,
    /// Default most a segment's roll jitter takes off the roll time, in ms
    /// (log.roll.jitter.ms; a topic's segment.jitter.ms overrides it).
    #[arg(long, default_value_t = LogDefaults::default().roll_jitter_ms, value_parser = clap::value_parser!(i64).range(0..))]
    log_roll_jitter_ms: i64,
    /// Default retention time in ms, -1 for none (log.retention.ms).
    #[arg(long, default_value_t = LogDefaults::default().retention_ms)]
    retention_ms: i64,
    /// Default retention size per partition in bytes, -1 for none (log.retention.bytes).
    #[arg(long, default_value_t = LogDefaults::default().retention_bytes)]
    retention_bytes: i64,
    /// How often retention runs, in ms.
    #[arg(long, default_value_t = LogDefaults::default().retention_check_interval_ms)]
    retention_check_interval_ms: u64,
    /// How often the log cleaner looks at the compacted partitions this
    /// broker leads, in ms (log.cleaner.backoff.ms).
    #[arg(long, default_value_t = LogDefaults::default().cleaner_backoff_ms)]
    log_cleaner_backoff_ms: u64,
    /// Bytes of keys one cleaning round of a partition maps; a larger dirty
    /// section is cleaned over several rounds (log.cleaner.dedupe.buffer.size).
    #[arg(long, default_value_t = LogDefaults::default().cleaner_dedupe_buffer_bytes)]
    log_cleaner_dedupe_buffer_size: usize,
    /// The log cleaner's I/O budget, bytes read plus written per second;
    /// 0 for unlimited (log.cleaner.io.max.bytes.per.second).
    #[arg(long, default_value_t = LogDefaults::default().cleaner_io_max_bytes_per_second)]
    log_cleaner_io_max_bytes_per_second: u64,
    /// How long the first rebalance of an empty group waits for more
    /// members (group.initial.rebalance.delay.ms).
    #[arg(long, default_value_t = GroupConfig::default().initial_rebalance_delay_ms)]
    group_initial_rebalance_delay_ms: i64,
    /// Smallest session timeout a member may ask for (group.min.session.timeout.ms).
    #[arg(long, default_value_t = GroupConfig::default().min_session_timeout_ms)]
    group_min_session_timeout_ms: i32,
    /// Largest session timeout a member may ask for (group.max.session.timeout.ms).
    #[arg(long, default_value_t = GroupConfig::default().max_session_timeout_ms)]
    group_max_session_timeout_ms: i32,
    /// How long an empty group's offsets are kept (offsets.retention.minutes).
    #[arg(long, default_value_t = GroupConfig::default().offsets_retention_ms / 60_000)]
    offsets_retention_minutes: i64,
    /// How often expired offsets are removed (offsets.retention.check.interval.ms).
    #[arg(long, default_value_t = GroupConfig::default().offsets_retention_check_interval_ms)]
    offsets_retention_check_interval_ms: i64,
    /// Longest transaction timeout a producer may ask for (transaction.max.timeout.ms).
    #[arg(long, default_value_t = TxnConfig::default().max_timeout_ms)]
    transaction_max_timeout_ms: i32,
    /// How often transactions past their timeout are aborted and prepared
    /// ones completed (transaction.abort.timed.out.transaction.cleanup.interval.ms).
    #[arg(long, default_value_t = TxnConfig::default().abort_timed_out_interval_ms)]
    transaction_abort_timed_out_transaction_cleanup_interval_ms: i64,
    /// How long an idle transactional id is kept (transactional.id.expiration.ms).
    #[arg(long, default_value_t = TxnConfig::default().id_expiration_ms)]
    transactional_id_expiration_ms: i64,
    /// How often expired transactional ids are removed
    /// (transaction.remove.expired.transaction.cleanup.interval.ms).
    #[arg(long, default_value_t = TxnConfig::default().remove_expired_interval_ms)]
    transaction_remove_expired_transaction_cleanup_interval_ms: i64,
    /// The finalized level of the transaction.version feature ApiVersions
    /// answers, 1 or 2. Clients use transaction version 2 (KIP-890 part 2:
    /// an epoch bump at every transaction end, Produce adding its partition
    /// itself) only at 2; at 1 they add partitions with AddPartitionsToTxn
    /// and end with EndTxn v4 or older. The broker serves both either way.
    #[arg(long, default_value_t = DEFAULT_TRANSACTION_VERSION, value_parser = parse_transaction_version)]
    transaction_version: i16,
}

/// `--transaction-version`: one of the levels kaas can finalize.
fn parse_transaction_version(s: &str) -> Result<i16, String> {
    match s.parse::<i16>() {
        Ok(level) if TRANSACTION_VERSIONS.contains(&level) => Ok(level),
        _ => Err(format!(
            "the transaction version is {} or {} (KIP-890: 2 bumps the producer epoch at every transaction end), not '{s}'",
            TRANSACTION_VERSIONS.start(),
            TRANSACTION_VERSIONS.end()
        )),
    }
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = match cli.command {
        Command::Serve(args) => runtime.block_on(serve(args)),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn serve(args: ServeArgs) -> Result<(), String> {
    let mut config = BrokerConfig::new(args.listen);
    config.broker_id = args.broker_id;
    config.rack = args.rack.clone().filter(|r| !r.is_empty());
    config.lease = LeaseBounds {
        lease_ms: args.lease_ms,
        clock_skew_ms: args.clock_skew_bound_ms,
        volume_staleness_ms: args.volume_staleness_bound_ms,
    };
    config.auto_create_topics = args.auto_create_topics;
    config.default_partitions = args.default_partitions.max(1);
    config.max_frame_bytes = args.max_frame_bytes;
    config.max_non_produce_frame_bytes = args.max_non_produce_frame_bytes;
    config.max_connections = args.max_connections as usize;
    config.max_connections_per_ip = args.max_connections_per_ip as usize;
    config.queued_max_request_bytes = args.queued_max_request_bytes;
    config.transaction_version = args.transaction_version;
    raise_open_file_limit(config.max_connections);
    // Request capture for the fuzz corpus (scripts/fuzz-capture); off unless set.
    config.capture_dir = std::env::var_os("KAAS_CAPTURE_DIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from);
    if let Some(dir) = &config.capture_dir {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        tracing::warn!(dir = %dir.display(), "capturing every request frame (KAAS_CAPTURE_DIR)");
    }
    config.log = LogDefaults {
        segment_bytes: args.segment_bytes,
        roll_ms: args.log_roll_ms,
        roll_jitter_ms: args.log_roll_jitter_ms,
        retention_ms: args.retention_ms,
        retention_bytes: args.retention_bytes,
        retention_check_interval_ms: args.retention_check_interval_ms,
        cleaner_backoff_ms: args.log_cleaner_backoff_ms,
        cleaner_dedupe_buffer_bytes: args.log_cleaner_dedupe_buffer_size,
        cleaner_io_max_bytes_per_second: args.log_cleaner_io_max_bytes_per_second,
        ..LogDefaults::default()
    };
    config.group = GroupConfig {
        initial_rebalance_delay_ms: args.group_initial_rebalance_delay_ms.max(0),
        min_session_timeout_ms: args.group_min_session_timeout_ms,
        max_session_timeout_ms: args.group_max_session_timeout_ms,
        offsets_retention_ms: args.offsets_retention_minutes.saturating_mul(60_000),
        offsets_retention_check_interval_ms: args.offsets_retention_check_interval_ms.max(1),
        ..GroupConfig::default()
    };
    config.txn = TxnConfig {
        max_timeout_ms: args.transaction_max_timeout_ms,
        id_expiration_ms: args.transactional_id_expiration_ms,
        abort_timed_out_interval_ms: args
            .transaction_abort_timed_out_transaction_cleanup_interval_ms
            .max(1),
        remove_expired_interval_ms: args
            .transaction_remove_expired_transaction_cleanup_interval_ms
            .max(1),
    };
    if let Some(adv) = &args.advertised {
        let (host, port) = adv
            .rsplit_once(':')
            .ok_or_else(|| format!("--advertised {adv}: expected host:port"))?;
        config.advertised_host = host.to_string();
        config.advertised_port = port
            .parse()
            .map_err(|_| format!("--advertised {adv}: bad port"))?;
    }
    std::fs::create_dir_all(&args.data_dir)
        .map_err(|e| format!("cannot create {}: {e}", args.data_dir.display()))?;
    let _broker_lock = broker_lock::acquire(&args.data_dir, args.broker_id)?;
    let volume = Arc::new(
        LocalVolume::new(&args.data_dir)
            .map_err(|e| format!("cannot open {}: {e}", args.data_dir.display()))?,
    );
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let broker = Broker::open(config, volume, kaas_net::env::Env::system())
        .map_err(|e| format!("cannot open {}: {e}", args.data_dir.display()))?;
    tokio::spawn(broker.clone().run_retention());
    tokio::spawn(broker.clone().run_cleaner());
    #[cfg(unix)]
    tokio::spawn(drain_on_sigusr1(broker.clone()));
    tracing::info!(listen = %args.listen, data_dir = %args.data_dir.display(), cluster_id = %broker.cluster_id, "kaas is serving");
    kaas_net::server::serve(broker.clone(), listener, shutdown_signal()).await;
    tracing::info!("shutting down: handing over to the other brokers, then flushing");
    broker.hand_over().await;
    broker.flush_all().await;
    Ok(())
}

/// File descriptors kept free for what is not a client connection: log
/// segments and their indexes, state files, the listener.
const NON_CONNECTION_FDS: u64 = 1_024;

/// Raises the soft open-file limit to the hard limit: every connection and
/// every open log segment is a file descriptor, and the usual soft default
/// (1024) would make accept fail long before `--max-connections`. Failing to
/// raise it is not fatal (the broker still serves, with fewer connections),
/// so it is only a warning.
#[cfg(unix)]
fn raise_open_file_limit(max_connections: usize) {
    let old = match rlimit::Resource::NOFILE.get() {
        Ok((soft, _hard)) => soft,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the open-file limit (RLIMIT_NOFILE)");
            return;
        }
    };
    let new = match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(new) if new > old => {
            tracing::info!(
                old,
                new,
                "open-file limit (RLIMIT_NOFILE) raised to the hard limit"
            );
            new
        }
        Ok(_) => {
            tracing::info!(
                limit = old,
                "open-file limit (RLIMIT_NOFILE) already at the hard limit"
            );
            old
        }
        Err(e) => {
            tracing::warn!(old, error = %e, "cannot raise the open-file limit (RLIMIT_NOFILE)");
            old
        }
    };
    let wanted = (max_connections as u64).saturating_add(NON_CONNECTION_FDS);
    if new < wanted {
        tracing::warn!(
            limit = new,
            max_connections,
            "the open-file limit is below --max-connections plus {NON_CONNECTION_FDS} for logs: \
             accepts will fail before the connection cap is reached; raise the hard limit \
             (ulimit -Hn, LimitNOFILE=) or lower --max-connections"
        );
    }
}

#[cfg(not(unix))]
fn raise_open_file_limit(_max_connections: usize) {}

/// `kill -USR1` drains the broker: it announces it is leaving and hands
/// every partition and coordinator slot to the other brokers at once, then
/// keeps running with nothing placed on it (clients are sent elsewhere),
/// until it is stopped. A restart makes it a full member again.
#[cfg(unix)]
async fn drain_on_sigusr1(broker: Arc<Broker>) {
    let Ok(mut usr1) =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined1())
    else {
        return;
    };
    while usr1.recv().await.is_some() {
        tracing::info!("SIGUSR1: draining: handing everything over to the other brokers");
        broker.hand_over().await;
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}
