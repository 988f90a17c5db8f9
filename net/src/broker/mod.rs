//! The broker's state: topics, their partitions, and the cluster identity.
//!
//! Handlers ask the broker for partitions and topic facts; the broker owns the
//! topic files on the volume and the background tasks (one group-commit
//! flusher per partition, and retention).

pub mod dynamic_config;
pub mod ownership;
mod partition;
mod producer_ids;
mod producer_state;
mod seat;
mod slots;
mod topic_file;
mod versions;

pub use partition::{
    partition_dir, CleanerSettings, FetchedData, Isolation, OpenPartition, Partition,
};
pub use producer_ids::ProducerIdManager;
pub use seat::{Leadership, Seat};
pub use topic_file::TopicFile;

use crate::cluster::Membership;
use crate::config::{BrokerConfig, LogDefaults};
use crate::coordinator::GroupCoordinator;
use crate::entropy;
use crate::env::{Env, IoKind};
use crate::log::LogConfig;
use crate::slot_store::MovingSlots;
use crate::transactions::TxnCoordinator;
use crate::volume::Volume;
use crate::witness::Owned;
use kaas_core::cluster::placement::Item;
use kaas_core::cluster::{self, Claim, ClusterView, Step};
use kaas_core::layout::{self, CLUSTER_FILE, PARTITIONS_DIR, TOPIC_FILES_DIR};
use kaas_core::produce::TimestampBounds;
use kaas_core::protocol::{ErrorCode, Uuid};
use kaas_core::topic_config::{
    self, MAX_MESSAGE_BYTES, RETENTION_BYTES, RETENTION_MS, SEGMENT_BYTES,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, RwLock};
use tokio::sync::watch;

/// A topic as currently served. Immutable: a change (more partitions)
/// installs a new `Topic` that shares the existing seats. Every broker
/// knows every partition; each is open only on its leader.
pub struct Topic {
    pub name: String,
    pub id: Uuid,
    pub configs: BTreeMap<String, String>,
    pub partitions: Vec<Arc<Seat>>,
    /// The version of the topic's metadata file this reflects
    /// (`topic_file`): the ownership round follows newer ones.
    pub version: u32,
}

impl Topic {
    pub fn partition(&self, index: i32) -> Option<&Arc<Seat>> {
        usize::try_from(index)
            .ok()
            .and_then(|i| self.partitions.get(i))
    }
}

/// Why a topic could not be created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminError {
    pub code: ErrorCode,
    pub message: String,
}

impl AdminError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> AdminError {
        AdminError {
            code,
            message: message.into(),
        }
    }
}

#[derive(Serialize, Deserialize)]
struct ClusterFile {
    cluster_id: String,
}

/// The dynamic layers of the broker's configs as installed, and the log
/// defaults they make.
pub struct DynamicState {
    /// Set for this broker alone (its own file).
    pub per_broker: dynamic_config::Configs,
    /// The cluster-wide default, and the version of it read.
    pub cluster_default: dynamic_config::Configs,
    pub default_version: u32,
    /// The effective log defaults: `config.log` overlaid by the dynamic
    /// default, then by `per_broker`.
    pub log: LogDefaults,
}

pub struct Broker {
    pub config: BrokerConfig,
    pub volume: Arc<dyn Volume>,
    /// This broker's clock and IO runner.
    pub env: Env,
    /// Who this broker is, for the ownership gate.
    view: ClusterView,
    /// Its heartbeat and lease, and the other brokers it has read.
    pub membership: Arc<Membership>,
    /// The epoch bumps its coordinator made, and those others made, so a
    /// zombie is fenced on every broker (`net::cluster::fences`).
    fences: Arc<crate::cluster::fences::FenceExchange>,
    pub cluster_id: String,
    topics: RwLock<BTreeMap<String, Arc<Topic>>>,
    /// Serializes topic administration (create, delete, add partitions) so
    /// the topic files have one writer at a time.
    admin: tokio::sync::Mutex<()>,
    /// The dynamic broker configs and the log defaults they make. Read on
    /// the hot path (every Produce's `max.message.bytes`, every log opened
    /// or retention round): a read lock held for a copy of the `Arc`,
    /// contended only by a config change, which holds the write lock just
    /// to swap the `Arc`.
    dynamic: RwLock<Arc<DynamicState>>,
    /// Serializes dynamic broker config changes: this broker's file has one
    /// writer, and a cluster default change is read, decided and published
    /// one at a time here.
    config_admin: tokio::sync::Mutex<()>,
    /// The start-up and built-in layers under the dynamic ones
    /// (`dynamic_config::static_layer`, `default_layer`).
    static_layer: dynamic_config::Configs,
    default_layer: dynamic_config::Configs,
    /// Bumped whenever any high watermark moves: long-poll fetches wait on it.
    progress: Arc<watch::Sender<u64>>,
    /// Hands out producer ids, never the same one twice.
    pub producer_ids: ProducerIdManager,
    /// Consumer groups and their committed offsets.
    /// Handlers reach it through [`group_coordinator`](Self::group_coordinator).
    pub groups: Arc<GroupCoordinator>,
    /// Transactional ids and their transactions. Handlers reach it through
    /// [`txn_coordinator`](Self::txn_coordinator).
    pub transactions: Arc<TxnCoordinator>,
    /// Heartbeats go on while this lives (`cluster::run_heartbeats`): they
    /// stop with the broker, as they would with its process.
    _alive: Arc<()>,
}

/// Whether the topic a partition directory's entry (`<topic>-<index>`)
/// names still has its file, looked up by name. The listing of the topic
/// files is one broker's cached view, which may lag another broker's
/// create by more than the listing of the partition directories does;
/// removing a partition on that listing's word deleted a live topic's
/// acknowledged records (simulator seed 19 with listings kept 5 s,
/// `KAAS_SIM_LISTING_CACHE_MS`). A lookup by name is exact. A file that
/// exists but does not parse keeps its partitions too: an operator
/// inspects them (`topic_file::read_all`).
fn topic_file_exists(volume: &dyn Volume, entry: &str) -> io::Result<bool> {
    let Some((topic, _)) = layout::partition_of_entry(entry) else {
        return Ok(false);
    };
    Ok(volume.read(&topic_file::path(topic))?.is_some())
}

impl Broker {
    /// Opens the broker on `volume`: reads the topic files, recovers every
    /// partition log and starts the flushers. Must run inside the runtime;
    /// blocks on the volume while it recovers (nothing is served yet).
    pub fn open(
        config: BrokerConfig,
        volume: Arc<dyn Volume>,
        env: Env,
    ) -> io::Result<Arc<Broker>> {
        volume.create_dir_all(TOPIC_FILES_DIR)?;
        volume.create_dir_all(PARTITIONS_DIR)?;
        let cluster_id = load_or_create_cluster_id(volume.as_ref())?;
        let membership = Arc::new(Membership::new(
            config.broker_id,
            &config.advertised_host,
            u16::try_from(config.advertised_port).map_err(|_| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("advertised port {} is not a port", config.advertised_port),
                )
            })?,
            config.rack.clone(),
            config.lease,
            entropy::random_u64(),
        ));
        // The first heartbeat before anything else: the lease every claim
        // below rests on, and the others' records for Metadata.
        volume.create_dir_all(layout::BROKERS_DIR)?;
        crate::cluster::heartbeat::round(volume.as_ref(), env.clock.as_ref(), &membership)?;
        if !membership.settled(env.clock.monotonic_ms()) {
            tracing::info!(
                peers = ?membership.known_peers(),
                "other brokers may still count this one's previous life: it takes items only once its lease has settled"
            );
        }
        // Heartbeats go on from now, also while the rest of the start takes
        // its items (however many): the lease must not run out meanwhile.
        let alive = Arc::new(());
        let rounds = Arc::new(tokio::sync::Notify::new());
        crate::cluster::wake_when_settled(&env, &membership, &rounds);
        tokio::spawn(crate::cluster::run_heartbeats(
            volume.clone(),
            env.clone(),
            membership.clone(),
            Arc::downgrade(&alive),
            rounds.clone(),
        ));
        let producer_ids = ProducerIdManager::new(volume.clone(), env.clone(), config.broker_id);
        let groups = crate::coordinator::GroupCoordinator::open(
            volume.clone(),
            env.clone(),
            membership.clone(),
            config.group.clone(),
        )?;
        let transactions = TxnCoordinator::open(
            volume.clone(),
            env.clone(),
            membership.clone(),
            config.txn.clone(),
        )?;
        volume.create_dir_all(layout::BROKER_CONFIGS_DIR)?;
        let per_broker = dynamic_config::read_own(volume.as_ref(), config.broker_id)?;
        let cluster_default = dynamic_config::read_default(volume.as_ref())?;
        let static_layer = dynamic_config::static_layer(&config.log);
        let default_layer = dynamic_config::default_layer();
        let dynamic = make_state(
            &config.log,
            &static_layer,
            &default_layer,
            per_broker,
            cluster_default.configs,
            cluster_default.version,
        );
        let broker = Arc::new(Broker {
            view: ClusterView::single(config.broker_id),
            membership,
            fences: Arc::new(crate::cluster::fences::FenceExchange::new(config.broker_id)),
            producer_ids,
            groups,
            transactions,
            config,
            volume,
            env,
            cluster_id,
            topics: RwLock::new(BTreeMap::new()),
            admin: tokio::sync::Mutex::new(()),
            dynamic: RwLock::new(Arc::new(dynamic)),
            config_admin: tokio::sync::Mutex::new(()),
            static_layer,
            default_layer,
            progress: Arc::new(watch::Sender::new(0)),
            _alive: alive,
        });
        // Fences issued in an earlier life, and those of the others: a
        // partition opened below is fenced against all of them.
        broker.fences.load_own(broker.volume.as_ref())?;
        let _ = broker
            .fences
            .exchange(broker.volume.as_ref(), broker.fence_horizon_ms());
        // Coordinator slots placed here are taken now, as partitions are
        // below; later ones move in the ownership round (`reconcile`).
        broker.take_slots_at_start()?;
        // Listed before the topic files are read: a topic's file is created
        // before any of its directories, so a directory listed here whose
        // file is missing below is a deletion's leftover, not a topic
        // another broker is creating right now.
        let dirs = broker.volume.list(PARTITIONS_DIR)?;
        let files = topic_file::read_all(broker.volume.as_ref())?;
        let mut known_dirs = std::collections::BTreeSet::new();
        for file in files {
            let Some(id) = file.id() else { continue };
            let take = taker(&broker, &file.configs);
            let mut partitions = Vec::new();
            for index in 0..file.partitions {
                known_dirs.insert(partition_dir(&file.name, index));
                let taken = match take(&file.name, index) {
                    Ok(taken) => taken,
                    // An opening refused (a stale listing hid a newer
                    // segment) or failed costs this partition only, not
                    // the broker's start: the ownership round takes it
                    // again once the listing has caught up (simulator
                    // seed 1222; `take_slot_at_start` does the same).
                    Err(e) => {
                        tracing::warn!(topic = %file.name, partition = index, error = %e, "cannot open a partition at start; the ownership round retries");
                        TakenPartition::Elsewhere(None)
                    }
                };
                partitions.push(Arc::new(Seat::new(index, broker.start_taken(taken))));
            }
            tracing::info!(topic = %file.name, partitions = file.partitions, "recovered topic");
            let topic = Topic {
                name: file.name.clone(),
                id,
                configs: file.configs,
                partitions,
                version: file.version,
            };
            broker.topics_mut().insert(file.name, Arc::new(topic));
        }
        // Partition directories without a topic file are leftovers of a
        // deletion that crashed half-way: the topic file is removed first.
        for entry in dirs {
            let dir = layout::partition_dir_of_entry(&entry);
            if known_dirs.contains(&dir) || topic_file_exists(broker.volume.as_ref(), &entry)? {
                continue;
            }
            tracing::warn!(%dir, "removing partition directory of a deleted topic");
            broker.volume.remove_dir_all(&dir)?;
        }
        // Started once the partitions are open: its first pass completes
        // the transactions a crash left prepared.
        tokio::spawn(crate::transactions::run_timers(Arc::downgrade(&broker)));
        tokio::spawn(crate::cluster::run_ownership(
            Arc::downgrade(&broker),
            rounds,
        ));
        tokio::spawn(crate::cluster::markers::run_watcher(Arc::downgrade(
            &broker,
        )));
        Ok(broker)
    }

    fn topics_mut(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, Arc<Topic>>> {
        self.topics.write().unwrap_or_else(|p| p.into_inner())
    }

    fn topics_read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Arc<Topic>>> {
        self.topics.read().unwrap_or_else(|p| p.into_inner())
    }

    /// The dynamic configs as installed now.
    pub fn dynamic_state(&self) -> Arc<DynamicState> {
        self.dynamic
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The effective broker-wide log defaults: the start-up ones
    /// (`config.log`) overlaid by the dynamic cluster default, then by this
    /// broker's own dynamic configs.
    pub fn log_defaults(&self) -> LogDefaults {
        self.dynamic_state().log.clone()
    }

    /// Runs `f` on this broker's config layers (for describing them and
    /// for the defaults of topic configs).
    pub fn with_config_layers<R>(
        &self,
        f: impl FnOnce(&kaas_core::broker_config::Layers<'_>) -> R,
    ) -> R {
        let state = self.dynamic_state();
        f(&kaas_core::broker_config::Layers {
            per_broker: &state.per_broker,
            cluster_default: &state.cluster_default,
            static_broker: &self.static_layer,
            default: &self.default_layer,
        })
    }

    pub fn log_config(&self, configs: &BTreeMap<String, String>) -> LogConfig {
        let d = &self.log_defaults();
        LogConfig {
            segment_bytes: topic_config::get_i64(configs, SEGMENT_BYTES, d.segment_bytes as i64)
                .max(14) as u64,
            index_interval_bytes: topic_config::get_i64(
                configs,
                topic_config::INDEX_INTERVAL_BYTES,
                LogConfig::default().index_interval_bytes as i64,
            )
            .max(0) as u64,
            segment_ms: topic_config::get_i64(configs, topic_config::SEGMENT_MS, d.roll_ms).max(1),
            segment_jitter_ms: topic_config::get_i64(
                configs,
                topic_config::SEGMENT_JITTER_MS,
                d.roll_jitter_ms,
            )
            .max(0),
        }
    }

    /// (retention.bytes, retention.ms) of a topic; (-1, -1), keep
    /// everything, when its cleanup.policy does not delete.
    pub fn retention(&self, topic: &Topic) -> (i64, i64) {
        if !topic_config::cleanup_deletes(&topic.configs) {
            return (-1, -1);
        }
        let d = &self.log_defaults();
        (
            topic_config::get_i64(&topic.configs, RETENTION_BYTES, d.retention_bytes),
            topic_config::get_i64(&topic.configs, RETENTION_MS, d.retention_ms),
        )
    }

    /// How far a record's CreateTime may be from this broker's clock on
    /// `topic` (`message.timestamp.before.max.ms` / `after.max.ms`).
    pub fn timestamp_bounds(&self, topic: &Topic) -> TimestampBounds {
        TimestampBounds {
            before_max_ms: topic_config::get_i64(
                &topic.configs,
                topic_config::TIMESTAMP_BEFORE_MAX_MS,
                i64::MAX,
            ),
            after_max_ms: topic_config::get_i64(
                &topic.configs,
                topic_config::TIMESTAMP_AFTER_MAX_MS,
                topic_config::DEFAULT_TIMESTAMP_AFTER_MAX_MS,
            ),
        }
    }

    pub fn max_message_bytes(&self, topic: &Topic) -> i64 {
        topic_config::get_i64(
            &topic.configs,
            MAX_MESSAGE_BYTES,
            self.log_defaults().max_message_bytes as i64,
        )
    }

    /// What a partition taken (or not) becomes: a partition opened here
    /// has its flusher started.
    fn start_taken(&self, taken: TakenPartition) -> Leadership {
        match taken {
            TakenPartition::Opened(partition) => {
                let partition: Arc<Partition> = Arc::from(partition);
                // Bumps made anywhere while another broker led it.
                for f in self.fences.known() {
                    partition.fence_producer(f.producer_id, f.epoch);
                }
                tokio::spawn(partition.clone().run_flusher());
                Leadership::Here(partition)
            }
            TakenPartition::Elsewhere(claim) => Leadership::Elsewhere(claim),
        }
    }

    /// Takes partitions `range` of a topic whose file is written: those
    /// placed here are claimed and opened (on the IO runner), the others
    /// are left to their brokers' next ownership round.
    async fn take_partitions(
        &self,
        file: &TopicFile,
        range: std::ops::Range<i32>,
    ) -> Result<Vec<Arc<Seat>>, AdminError> {
        let take = taker(self, &file.configs);
        let name = file.name.clone();
        let taken = self
            .env
            .blocking(IoKind::Fsync, move || {
                range
                    .map(|index| take(&name, index).map(|t| (index, t)))
                    .collect::<io::Result<Vec<_>>>()
            })
            .await
            .map_err(|e| AdminError::new(ErrorCode::KafkaStorageError, e.to_string()))?;
        Ok(taken
            .into_iter()
            .map(|(index, t)| Arc::new(Seat::new(index, self.start_taken(t))))
            .collect())
    }

    pub fn topic(&self, name: &str) -> Option<Arc<Topic>> {
        self.topics_read().get(name).cloned()
    }

    pub fn topic_by_id(&self, id: Uuid) -> Option<Arc<Topic>> {
        self.topics_read().values().find(|t| t.id == id).cloned()
    }

    pub fn topics(&self) -> Vec<Arc<Topic>> {
        self.topics_read().values().cloned().collect()
    }

    /// The ownership gate for partitions: the one way a handler or a
    /// background task reaches a partition of a topic it resolved. Answers
    /// UNKNOWN_TOPIC_OR_PARTITION for a partition the topic does not have,
    /// NOT_LEADER_OR_FOLLOWER if this broker does not lead it, and
    /// FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH if the client's leader
    /// epoch (`-1`: unchecked) is not ours (`kaas_core::cluster`).
    pub fn gate(
        &self,
        topic: &Topic,
        index: i32,
        current_leader_epoch: i32,
    ) -> Result<Arc<Partition>, ErrorCode> {
        let partition = self.led_here(topic, index)?;
        let epoch = partition.leader().epoch;
        cluster::check_leader_epoch(epoch, current_leader_epoch)?;
        let item = Owned::Partition {
            topic: &topic.name,
            index,
        };
        self.env.witness.admitted(self.view.self_id, item, epoch);
        Ok(partition)
    }

    /// The gate's ownership test for a partition, whatever epoch a client
    /// names: led here, under a lease that holds.
    fn led_here(&self, topic: &Topic, index: i32) -> Result<Arc<Partition>, ErrorCode> {
        let seat = topic
            .partition(index)
            .ok_or(ErrorCode::UnknownTopicOrPartition)?;
        let partition = seat.led().ok_or(ErrorCode::NotLeaderOrFollower)?;
        if !self.may_act() {
            return Err(ErrorCode::NotLeaderOrFollower);
        }
        cluster::check_partition_access(&self.view, partition.leader(), -1)?;
        Ok(partition)
    }

    /// The epoch of the claim at which this broker's gate would admit
    /// `item` now, if it would: what the simulator's ownership witness
    /// compares across brokers (`crate::witness`). Changes nothing.
    pub fn admits(&self, item: Owned<'_>) -> Option<i32> {
        match item {
            Owned::Partition { topic, index } => {
                let topic = self.topic(topic)?;
                let partition = self.led_here(&topic, index).ok()?;
                Some(partition.leader().epoch)
            }
            Owned::GroupSlot(slot) => self.slot_held_here(self.groups.serving(slot), slot).ok(),
            Owned::TxnSlot(slot) => self
                .slot_held_here(self.transactions.serving(slot), slot)
                .ok(),
        }
    }

    /// The gates' ownership test for a coordinator slot served here at
    /// `served`: under a lease that holds. The claim's epoch. Only a slot
    /// served counts: a newest claim naming this broker that it does not
    /// serve (a restart among others follows its previous life's claim
    /// until it wins a new one) has no state here to act on, and the
    /// simulator's ownership witness found such a gate admitting while
    /// the successor served the slot.
    fn slot_held_here(&self, served: Option<Claim>, slot: u32) -> Result<i32, ErrorCode> {
        let claim = served.ok_or(ErrorCode::NotCoordinator)?;
        let epoch = cluster::check_slot_access(&self.view, slot, claim)?;
        if !self.may_act() {
            return Err(ErrorCode::NotCoordinator);
        }
        Ok(epoch)
    }

    /// Whether this broker's lease holds now: it serves nothing it owns
    /// once its lease ran out (`kaas_core::cluster::membership`).
    pub fn may_act(&self) -> bool {
        self.membership.may_act(self.env.clock.monotonic_ms())
    }

    /// [`gate`](Self::gate) for a topic named in a request.
    pub fn partition(
        &self,
        topic: &str,
        index: i32,
        current_leader_epoch: i32,
    ) -> Result<Arc<Partition>, ErrorCode> {
        let topic = self
            .topic(topic)
            .ok_or(ErrorCode::UnknownTopicOrPartition)?;
        self.gate(&topic, index, current_leader_epoch)
    }

    /// The ownership gate for coordinator slots: the group coordinator, if
    /// this broker owns the slot of `group_id`; NOT_COORDINATOR otherwise,
    /// so the client looks the coordinator up again.
    pub fn group_coordinator(&self, group_id: &str) -> Result<&Arc<GroupCoordinator>, ErrorCode> {
        let slot = cluster::coordinator_slot(group_id);
        let epoch = self.slot_held_here(self.groups.serving(slot), slot)?;
        self.env
            .witness
            .admitted(self.view.self_id, Owned::GroupSlot(slot), epoch);
        Ok(&self.groups)
    }

    /// The ownership gate for transaction slots: the transaction
    /// coordinator, if this broker owns the slot of `transactional_id`;
    /// NOT_COORDINATOR otherwise.
    pub fn txn_coordinator(
        &self,
        transactional_id: &str,
    ) -> Result<&Arc<TxnCoordinator>, ErrorCode> {
        let slot = cluster::coordinator_slot(transactional_id);
        let epoch = self.slot_held_here(self.transactions.serving(slot), slot)?;
        self.env
            .witness
            .admitted(self.view.self_id, Owned::TxnSlot(slot), epoch);
        Ok(&self.transactions)
    }

    /// A producer's epoch was bumped to `epoch` at its coordinator: every
    /// partition this broker leads forgets the older epoch's batches and
    /// refuses them from now on (the cross-partition fence), also where
    /// the new epoch has not written yet.
    pub fn fence_producer(&self, producer_id: i64, epoch: i16) {
        for (_, partition) in self.led_partitions() {
            partition.fence_producer(producer_id, epoch);
        }
        // The partitions other brokers lead learn it from this broker's
        // fence log, written at its next ownership round.
        self.fences.issued(producer_id, epoch, self.env.now_ms());
    }

    /// Fences older than this (wall ms) are dropped from the fence log: a
    /// producer idle for `producer.id.expiration.ms` is forgotten by every
    /// partition anyway, so its fence could fence nothing.
    fn fence_horizon_ms(&self) -> i64 {
        self.env
            .now_ms()
            .saturating_sub(self.config.producer_id_expiration_ms)
    }

    /// Writes this broker's fence log if it changed and applies the other
    /// brokers' new fences to the partitions it leads (after every
    /// heartbeat).
    pub async fn exchange_fences(&self) {
        let (volume, fences) = (self.volume.clone(), self.fences.clone());
        let horizon = self.fence_horizon_ms();
        let exchanged = self
            .env
            .blocking(IoKind::Fsync, move || {
                fences.exchange(volume.as_ref(), horizon)
            })
            .await;
        match exchanged {
            Ok(fresh) => {
                for f in fresh {
                    for (_, partition) in self.led_partitions() {
                        partition.fence_producer(f.producer_id, f.epoch);
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "fence log exchange failed"),
        }
    }

    /// Every partition this broker leads right now, for background work
    /// (retention, clean shutdown): through the same gate as requests.
    pub fn led_partitions(&self) -> Vec<(Arc<Topic>, Arc<Partition>)> {
        let mut led = Vec::new();
        for topic in self.topics() {
            for index in 0..topic.partitions.len() as i32 {
                if let Ok(p) = self.gate(&topic, index, -1) {
                    led.push((topic.clone(), p));
                }
            }
        }
        led
    }

    /// A receiver that changes whenever any high watermark moves.
    pub fn watch_progress(&self) -> watch::Receiver<u64> {
        self.progress.subscribe()
    }

    /// Checks a CreateTopics request without creating anything.
    pub fn validate_new_topic(
        &self,
        name: &str,
        partitions: i32,
        replication_factor: i16,
        configs: &BTreeMap<String, String>,
    ) -> Result<(), AdminError> {
        kaas_core::topic_name::validate_topic_name(name)
            .map_err(|m| AdminError::new(ErrorCode::InvalidTopicException, m))?;
        if self.topic(name).is_some() {
            return Err(AdminError::new(
                ErrorCode::TopicAlreadyExists,
                format!("Topic '{name}' already exists."),
            ));
        }
        topic_config::check_partition_count(partitions)
            .map_err(|m| AdminError::new(ErrorCode::InvalidPartitions, m))?;
        if replication_factor == 0 || replication_factor < -1 {
            return Err(AdminError::new(
                ErrorCode::InvalidReplicationFactor,
                "Replication factor must be larger than 0.",
            ));
        }
        if replication_factor > 1 {
            return Err(AdminError::new(
                ErrorCode::InvalidReplicationFactor,
                format!("Unable to replicate the partition {replication_factor} time(s): The target replication factor of {replication_factor} cannot be reached because only 1 broker(s) are registered."),
            ));
        }
        for (k, v) in configs {
            topic_config::validate(k, Some(v))
                .map_err(|m| AdminError::new(ErrorCode::InvalidConfig, m))?;
        }
        Ok(())
    }

    /// Creates a topic: partitions first, then the topic file, so a crash in
    /// between leaves only directories that the next start removes.
    pub async fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        replication_factor: i16,
        configs: BTreeMap<String, String>,
    ) -> Result<Arc<Topic>, AdminError> {
        let _admin = self.admin.lock().await;
        self.validate_new_topic(name, partitions, replication_factor, &configs)?;
        let id = entropy::random_uuid();
        let file = TopicFile {
            name: name.to_string(),
            topic_id: format!("{:032x}", id.as_u128()),
            partitions,
            configs: configs.clone(),
            version: 0,
        };
        // The topic file first, created exclusively: of brokers creating
        // one name at once exactly one succeeds, and a directory never
        // exists before its topic's file (see `open`'s sweep).
        let volume = self.volume.clone();
        let created = file.clone();
        self.env
            .blocking(IoKind::Fsync, move || {
                topic_file::create(volume.as_ref(), &created)
            })
            .await
            .map_err(|e| match e.kind() {
                io::ErrorKind::AlreadyExists => AdminError::new(
                    ErrorCode::TopicAlreadyExists,
                    format!("Topic '{name}' already exists."),
                ),
                _ => AdminError::new(ErrorCode::KafkaStorageError, e.to_string()),
            })?;
        let seats = self.take_partitions(&file, 0..partitions).await?;
        let topic = Arc::new(Topic {
            name: name.to_string(),
            id,
            configs,
            partitions: seats,
            version: 0,
        });
        self.topics_mut().insert(name.to_string(), topic.clone());
        tracing::info!(topic = name, partitions, %id, "created topic");
        Ok(topic)
    }

    /// Auto-creation on Metadata or Produce: creates with the defaults if the
    /// broker allows it; returns the topic if it exists afterwards.
    pub async fn get_or_auto_create(&self, name: &str) -> Result<Arc<Topic>, ErrorCode> {
        if let Some(t) = self.topic(name) {
            return Ok(t);
        }
        // Another broker may have created it since the last round.
        if let Some(t) = self.install_from_volume(name).await? {
            return Ok(t);
        }
        if !self.config.auto_create_topics {
            return Err(ErrorCode::UnknownTopicOrPartition);
        }
        match self
            .create_topic(name, self.config.default_partitions, -1, BTreeMap::new())
            .await
        {
            Ok(t) => Ok(t),
            Err(e) if e.code == ErrorCode::TopicAlreadyExists => self
                .install_from_volume(name)
                .await?
                .ok_or(ErrorCode::UnknownTopicOrPartition),
            Err(e) => Err(e.code),
        }
    }

    /// Installs topic `name` from its file, if the volume has one (another
    /// broker created it): the partitions placed here are taken.
    async fn install_from_volume(&self, name: &str) -> Result<Option<Arc<Topic>>, ErrorCode> {
        let _admin = self.admin.lock().await;
        if let Some(t) = self.topic(name) {
            return Ok(Some(t));
        }
        let volume = self.volume.clone();
        let wanted = name.to_string();
        let file = self
            .env
            .blocking(IoKind::Buffered, move || {
                topic_file::read(volume.as_ref(), &wanted)
            })
            .await
            .map_err(storage_error)?;
        match file {
            Some(file) => self.install(file).await.map(Some).map_err(|e| e.code),
            None => Ok(None),
        }
    }

    /// Serves a topic read from its file. The caller holds `admin`.
    async fn install(&self, file: TopicFile) -> Result<Arc<Topic>, AdminError> {
        let id = file.id().ok_or_else(|| {
            AdminError::new(ErrorCode::KafkaStorageError, "topic file without an id")
        })?;
        let seats = self.take_partitions(&file, 0..file.partitions).await?;
        let topic = Arc::new(Topic {
            name: file.name.clone(),
            id,
            configs: file.configs,
            partitions: seats,
            version: file.version,
        });
        self.topics_mut().insert(file.name, topic.clone());
        Ok(topic)
    }

    /// The ownership round, run after every heartbeat: topics other brokers
    /// created, grew or deleted are followed, and every partition is
    /// brought in line with the ownership rule
    /// (`kaas_core::cluster::next_step`): taken where it is placed here and
    /// free (or its holder gone), released where placement moved it to
    /// another live broker, closed at once where another broker won a newer
    /// epoch; coordinator slots alike (`slots`). After a lease lapse
    /// everything led here is closed first, to be won again at new epochs.
    pub async fn reconcile(&self) {
        let _admin = self.admin.lock().await;
        if let Some(lapses) = self.membership.lapses_to_let_go() {
            // First, with no await in between: until it is done the gates
            // admit nothing (`Membership::may_act`), though the late
            // heartbeat renewed the lease.
            self.let_go_after_a_lapse();
            self.membership.let_go_after_lapses(lapses);
            self.membership.resumed();
        }
        // A start among other brokers takes nothing until its lease has
        // settled, and then wins new epochs of its own items by create; a
        // start alone serves them again at their epochs in its first round
        // (`Decider::resuming`).
        let settled = self.membership.settled(self.env.clock.monotonic_ms());
        let volume = self.volume.clone();
        let files = match self
            .env
            .blocking(IoKind::Buffered, move || {
                topic_file::read_all(volume.as_ref())
            })
            .await
        {
            Ok(files) => files,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the topic files");
                return;
            }
        };
        let on_volume: BTreeMap<String, TopicFile> =
            files.into_iter().map(|f| (f.name.clone(), f)).collect();
        for topic in self.topics() {
            let same = on_volume
                .get(&topic.name)
                .is_some_and(|f| f.id() == Some(topic.id));
            if !same {
                tracing::info!(topic = %topic.name, "topic deleted by another broker");
                self.topics_mut().remove(&topic.name);
                for seat in &topic.partitions {
                    if let Some(p) = seat.led() {
                        p.close();
                    }
                }
            }
        }
        for (name, file) in on_volume {
            let result = match self.topic(&name) {
                None => self.install(file).await.map(|_| ()),
                Some(t) if file.version > t.version => self.follow(&t, file).await.map(|_| ()),
                Some(_) => Ok(()),
            };
            if let Err(e) = result {
                tracing::warn!(topic = %name, error = %e.message, "cannot follow a topic");
            }
        }
        for topic in self.topics() {
            for seat in &topic.partitions {
                if let Err(e) = self.reconcile_seat(&topic, seat).await {
                    tracing::warn!(topic = %topic.name, partition = seat.index, error = %e, "ownership round failed");
                }
            }
        }
        self.reconcile_slots().await;
        if settled {
            self.membership.resumed();
        }
        drop(_admin);
        self.follow_dynamic_default().await;
    }

    /// After a lease lapse, every partition led and every slot served here
    /// is closed, to be won again at new epochs: others may have claimed
    /// them while the lease was out.
    fn let_go_after_a_lapse(&self) {
        for topic in self.topics() {
            for seat in &topic.partitions {
                if let Some(p) = seat.led() {
                    tracing::warn!(topic = %topic.name, partition = seat.index, "lease lapsed: partition let go of");
                    p.close_moved();
                    seat.replace(Leadership::Elsewhere(Some(p.leader())));
                }
            }
        }
        self.let_go_of_slots_after_a_lapse();
    }

    /// One partition's part of [`reconcile`](Self::reconcile).
    async fn reconcile_seat(&self, topic: &Topic, seat: &Seat) -> io::Result<()> {
        let led = seat.led();
        let serving = led.as_ref().map(|p| p.leader());
        let (volume, clock, membership) = (
            self.volume.clone(),
            self.env.clock.clone(),
            self.membership.clone(),
        );
        let (name, index) = (topic.name.clone(), seat.index);
        let (newest, step) = self
            .env
            .blocking(IoKind::Buffered, move || {
                let newest = ownership::newest(
                    volume.as_ref(),
                    &layout::partition_epochs_dir(&name, index),
                    &|epoch| layout::partition_epoch_file(&name, index, epoch),
                )?;
                let decider = ownership::Decider::at(&membership, clock.monotonic_ms());
                let item = Item::Partition {
                    topic: &name,
                    partition: index,
                };
                Ok((newest, decider.step(&item, newest, serving)))
            })
            .await?;
        match (step, led) {
            (Step::Keep, _) => {}
            (Step::Depose, Some(p)) => {
                tracing::warn!(topic = %topic.name, partition = seat.index, ?newest, "another broker leads the partition now");
                p.close_moved();
                seat.replace(Leadership::Elsewhere(newest));
            }
            (Step::Release, Some(p)) => {
                // Durable first (acks=1 writes included), then refuse, then
                // hand over: the next leader reads all it was told.
                if let Err(code) = p.shut_down().await {
                    tracing::warn!(topic = %topic.name, partition = seat.index, ?code, "released partition did not flush");
                }
                p.close_moved();
                let held = p.leader();
                seat.replace(Leadership::Elsewhere(Some(held)));
                self.release_partition(&topic.name, index, held).await?;
                tracing::info!(topic = %topic.name, partition = seat.index, epoch = held.epoch, "released the partition to its new place");
            }
            (Step::Claim(_), None) => {
                let take = taker(self, &topic.configs);
                let name = topic.name.clone();
                let taken = self
                    .env
                    .blocking(IoKind::Fsync, move || take(&name, index))
                    .await?;
                if let TakenPartition::Opened(p) = &taken {
                    tracing::info!(topic = %topic.name, partition = seat.index, epoch = p.leader().epoch, "took the partition over");
                }
                seat.replace(self.start_taken(taken));
            }
            (Step::Release, None) => {
                // A claim of its own it does not serve (closed after a lease
                // lapse, or left by its previous life), on a partition placed
                // elsewhere: handed over, or that broker would wait for it.
                seat.replace(Leadership::Elsewhere(newest));
                if let Some(held) = newest {
                    self.release_partition(&topic.name, index, held).await?;
                    tracing::info!(topic = %topic.name, partition = seat.index, epoch = held.epoch, "released a partition it no longer served");
                }
            }
            (_, None) => {
                seat.replace(Leadership::Elsewhere(newest));
            }
            (_, Some(_)) => {}
        }
        Ok(())
    }

    /// Writes the release of partition `index` of `topic` after `held`
    /// (the next epoch, held by nobody), on the IO runner.
    async fn release_partition(&self, topic: &str, index: i32, held: Claim) -> io::Result<()> {
        let volume = self.volume.clone();
        let name = topic.to_string();
        self.env
            .blocking(IoKind::Fsync, move || {
                ownership::release(
                    volume.as_ref(),
                    &layout::partition_epochs_dir(&name, index),
                    &|epoch| layout::partition_epoch_file(&name, index, epoch),
                    held,
                )
            })
            .await
    }

    /// Deletes a topic: the topic file goes first (the point of no return),
    /// then the partitions.
    pub async fn delete_topic(&self, name: &str) -> Result<Uuid, AdminError> {
        let _admin = self.admin.lock().await;
        let topic = self.topic(name).ok_or_else(|| {
            AdminError::new(
                ErrorCode::UnknownTopicOrPartition,
                "This server does not host this topic.",
            )
        })?;
        let volume = self.volume.clone();
        let (doomed, id) = (name.to_string(), format!("{:032x}", topic.id.as_u128()));
        self.env
            .blocking(IoKind::Fsync, move || {
                topic_file::remove(volume.as_ref(), &doomed, &id)
            })
            .await
            .map_err(|e| AdminError::new(ErrorCode::KafkaStorageError, e.to_string()))?;
        self.topics_mut().remove(name);
        let mut dirs = Vec::new();
        for seat in &topic.partitions {
            if let Some(p) = seat.led() {
                p.close();
            }
            dirs.push(partition_dir(name, seat.index));
            dirs.push(layout::partition_epochs_dir(name, seat.index));
        }
        let volume = self.volume.clone();
        self.env
            .blocking(IoKind::Fsync, move || {
                dirs.iter().try_for_each(|d| volume.remove_dir_all(d))
            })
            .await
            .map_err(|e| AdminError::new(ErrorCode::KafkaStorageError, e.to_string()))?;
        tracing::info!(topic = name, id = %topic.id, "deleted topic");
        Ok(topic.id)
    }

    /// Raises a topic's partition count to `count`.
    pub async fn create_partitions(
        &self,
        name: &str,
        count: i32,
        validate_only: bool,
    ) -> Result<(), AdminError> {
        self.change_topic(name, validate_only, |file| {
            let current = file.partitions;
            if count < current {
                return Err(AdminError::new(
                    ErrorCode::InvalidPartitions,
                    format!("Topic currently has {current} partitions, which is higher than the requested {count}."),
                ));
            }
            if count == current {
                return Err(AdminError::new(
                    ErrorCode::InvalidPartitions,
                    format!("Topic already has {current} partitions."),
                ));
            }
            topic_config::check_partition_count(count)
                .map_err(|m| AdminError::new(ErrorCode::InvalidPartitions, m))?;
            Ok(TopicFile {
                partitions: count,
                ..file.clone()
            })
        })
        .await
        .map(|_| ())
    }

    /// Replaces topic `name`'s configs with what `configs` makes of them
    /// (AlterConfigs, IncrementalAlterConfigs): validated, published as the
    /// topic's next version and applied at once on this broker (the others
    /// follow in their ownership round).
    pub async fn alter_topic_configs<F>(
        &self,
        name: &str,
        validate_only: bool,
        configs: F,
    ) -> Result<(), AdminError>
    where
        F: Fn(&BTreeMap<String, String>) -> Result<BTreeMap<String, String>, AdminError>,
    {
        self.change_topic(name, validate_only, |file| {
            Ok(TopicFile {
                configs: configs(&file.configs)?,
                ..file.clone()
            })
        })
        .await
        .map(|_| ())
    }

    /// Changes topic `name`'s metadata: `change` builds the next version
    /// from the newest one on the volume (another broker may have changed
    /// the topic since this one last looked), refusing what does not apply
    /// to it. The version is created exclusively (`topic_file::publish`);
    /// when another broker published it first, the change is built again
    /// on the winner's, so two brokers' changes never overwrite each other.
    async fn change_topic<F>(
        &self,
        name: &str,
        validate_only: bool,
        change: F,
    ) -> Result<Arc<Topic>, AdminError>
    where
        F: Fn(&TopicFile) -> Result<TopicFile, AdminError>,
    {
        /// Each lost race means another broker's change landed, so this
        /// bounds only a burst of concurrent changes to one topic.
        const ATTEMPTS: usize = 8;
        let _admin = self.admin.lock().await;
        let unknown = || {
            AdminError::new(
                ErrorCode::UnknownTopicOrPartition,
                "This server does not host this topic.",
            )
        };
        let storage = |e: io::Error| AdminError::new(ErrorCode::KafkaStorageError, e.to_string());
        let topic = self.topic(name).ok_or_else(unknown)?;
        for _ in 0..ATTEMPTS {
            let volume = self.volume.clone();
            let wanted = name.to_string();
            let current = self
                .env
                .blocking(IoKind::Buffered, move || {
                    topic_file::read_current(volume.as_ref(), &wanted)
                })
                .await
                .map_err(storage)?
                .filter(|c| c.file.id() == Some(topic.id))
                .ok_or_else(unknown)?;
            let next = TopicFile {
                version: current.next_version,
                ..change(&current.file)?
            };
            if validate_only {
                return Ok(topic);
            }
            let volume = self.volume.clone();
            let published = next.clone();
            let outcome = self
                .env
                .blocking(IoKind::Fsync, move || {
                    topic_file::publish(volume.as_ref(), &current, &published)
                })
                .await;
            match outcome {
                Ok(()) => {
                    tracing::info!(topic = name, version = next.version, "changed topic");
                    return self.follow(&topic, next).await;
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(storage(e)),
            }
        }
        Err(AdminError::new(
            ErrorCode::NotController,
            format!("Topic {name} kept changing on other brokers; try again."),
        ))
    }

    /// Serves a newer version of a topic's metadata: partitions it added
    /// are taken (where placed here), and its configs apply at once,
    /// including to the logs already open. The caller holds `admin`.
    async fn follow(&self, topic: &Topic, file: TopicFile) -> Result<Arc<Topic>, AdminError> {
        let current = topic.partitions.len() as i32;
        let mut partitions = topic.partitions.clone();
        if file.partitions > current {
            partitions.extend(
                self.take_partitions(&file, current..file.partitions)
                    .await?,
            );
        }
        if file.configs != topic.configs {
            let config = self.log_config(&file.configs);
            for p in topic.partitions.iter().filter_map(|seat| seat.led()) {
                p.apply_log_config(&config).await;
            }
        }
        let updated = Arc::new(Topic {
            name: topic.name.clone(),
            id: topic.id,
            configs: file.configs,
            partitions,
            version: file.version,
        });
        self.topics_mut()
            .insert(topic.name.clone(), updated.clone());
        Ok(updated)
    }

    /// Changes a BROKER resource's dynamic configs (AlterConfigs,
    /// IncrementalAlterConfigs): `per_broker` for this broker's own set,
    /// else the cluster-wide default. `change` builds the next set from the
    /// current one, refusing what does not apply (`validate_only` stops
    /// there). This broker's set is its own file, written whole; the
    /// default is published as its next version, created exclusively, and
    /// rebuilt on the winner's when another broker published that version
    /// first. The result applies here at once (new segments, retention,
    /// `max.message.bytes`, the cleaner's next round, the open logs' roll
    /// settings); the other brokers follow a default in their next
    /// ownership round.
    pub async fn alter_broker_configs<F>(
        &self,
        per_broker: bool,
        validate_only: bool,
        change: F,
    ) -> Result<(), AdminError>
    where
        F: Fn(&dynamic_config::Configs) -> Result<dynamic_config::Configs, AdminError>,
    {
        /// As `change_topic`'s: each lost race is another broker's change.
        const ATTEMPTS: usize = 8;
        let _config_admin = self.config_admin.lock().await;
        let storage = |e: io::Error| AdminError::new(ErrorCode::KafkaStorageError, e.to_string());
        if per_broker {
            let state = self.dynamic_state();
            let next = change(&state.per_broker)?;
            if validate_only {
                return Ok(());
            }
            let (volume, id, written) = (self.volume.clone(), self.config.broker_id, next.clone());
            self.env
                .blocking(IoKind::Fsync, move || {
                    dynamic_config::write_own(volume.as_ref(), id, &written)
                })
                .await
                .map_err(storage)?;
            tracing::info!(configs = ?next, "changed this broker's dynamic configs");
            self.install_dynamic(next, state.cluster_default.clone(), state.default_version)
                .await;
            return Ok(());
        }
        for _ in 0..ATTEMPTS {
            let volume = self.volume.clone();
            let current = self
                .env
                .blocking(IoKind::Buffered, move || {
                    dynamic_config::read_default(volume.as_ref())
                })
                .await
                .map_err(storage)?;
            let next = change(&current.configs)?;
            if validate_only {
                return Ok(());
            }
            let (volume, read, published) = (self.volume.clone(), current.clone(), next.clone());
            let outcome = self
                .env
                .blocking(IoKind::Fsync, move || {
                    dynamic_config::publish_default(volume.as_ref(), &read, &published)
                })
                .await;
            match outcome {
                Ok(version) => {
                    tracing::info!(version, configs = ?next, "changed the cluster's dynamic broker default");
                    let own = self.dynamic_state().per_broker.clone();
                    self.install_dynamic(own, next, version).await;
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(storage(e)),
            }
        }
        Err(AdminError::new(
            ErrorCode::NotController,
            "The cluster's broker default kept changing on other brokers; try again.",
        ))
    }

    /// Follows a cluster default another broker changed (the ownership
    /// round's part): a newer version read is installed and applied.
    async fn follow_dynamic_default(&self) {
        let _config_admin = self.config_admin.lock().await;
        let volume = self.volume.clone();
        let read = self
            .env
            .blocking(IoKind::Buffered, move || {
                dynamic_config::read_default(volume.as_ref())
            })
            .await;
        let state = self.dynamic_state();
        match read {
            Ok(current) if current.version > state.default_version => {
                tracing::info!(
                    version = current.version,
                    "following the cluster's dynamic broker default"
                );
                self.install_dynamic(state.per_broker.clone(), current.configs, current.version)
                    .await;
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the cluster's dynamic broker default")
            }
        }
    }

    /// Installs new dynamic layers and applies the log defaults they make
    /// to the logs open here (their roll settings; the rest is read at
    /// use). The caller holds `config_admin`.
    async fn install_dynamic(
        &self,
        per_broker: dynamic_config::Configs,
        cluster_default: dynamic_config::Configs,
        default_version: u32,
    ) {
        let state = make_state(
            &self.config.log,
            &self.static_layer,
            &self.default_layer,
            per_broker,
            cluster_default,
            default_version,
        );
        // Under `admin`, so a topic change applying its configs to the same
        // logs (`follow`) runs wholly before or after this.
        let _admin = self.admin.lock().await;
        *self.dynamic.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(state);
        for (topic, p) in self.led_partitions() {
            p.apply_log_config(&self.log_config(&topic.configs)).await;
        }
    }

    /// Applies retention to every partition this broker leads (the
    /// periodic task's body).
    pub async fn apply_retention(&self, now_ms: i64) {
        for (topic, p) in self.led_partitions() {
            let (bytes, ms) = self.retention(&topic);
            let result = p
                .apply_retention(now_ms, bytes, ms, self.config.producer_id_expiration_ms)
                .await;
            if let Err(code) = result {
                tracing::error!(topic = %topic.name, partition = p.index, ?code, "retention failed");
            }
        }
    }

    /// The cleaner's settings for `topic`, if it is compacted.
    pub fn cleaner_settings(&self, topic: &Topic) -> Option<CleanerSettings> {
        if !topic_config::cleanup_compacts(&topic.configs) {
            return None;
        }
        let (delete_retention_ms, compaction) = topic_config::compaction(&topic.configs);
        let d = &self.log_defaults();
        Some(CleanerSettings {
            delete_retention_ms,
            compaction,
            key_map_bytes: d.cleaner_dedupe_buffer_bytes,
            io_bytes_per_second: Some(d.cleaner_io_max_bytes_per_second).filter(|r| *r > 0),
        })
    }

    /// One pass of the log cleaner over the compacted partitions this
    /// broker leads (the periodic task's body). Each partition's round
    /// goes through its gate; a round that fails is logged and tried again
    /// at the next pass.
    pub async fn clean_compacted(&self, now_ms: i64) {
        for (topic, p) in self.led_partitions() {
            let Some(settings) = self.cleaner_settings(&topic) else {
                continue;
            };
            match p.clean(now_ms, &settings).await {
                Ok(Some(round)) => tracing::info!(
                    topic = %topic.name,
                    partition = p.index,
                    copies = round.copies,
                    superseded = round.summary.records_superseded,
                    tombstones = round.summary.tombstones_removed,
                    aborted = round.summary.aborted_removed,
                    markers = round.summary.markers_removed,
                    bytes_read = round.bytes_read,
                    bytes_written = round.bytes_written,
                    elapsed_ms = round.elapsed_ms,
                    "cleaned"
                ),
                Ok(None) => {}
                Err(code) => {
                    tracing::warn!(topic = %topic.name, partition = p.index, ?code, "cleaning failed")
                }
            }
        }
    }

    /// Runs the log cleaner every `cleaner_backoff_ms` until the broker is
    /// dropped; the pause is read again each round, so a dynamic change
    /// applies from the next one.
    pub async fn run_cleaner(self: Arc<Self>) {
        loop {
            let every =
                std::time::Duration::from_millis(self.log_defaults().cleaner_backoff_ms.max(1));
            tokio::time::sleep(every).await;
            self.clean_compacted(self.env.now_ms()).await;
        }
    }

    /// Runs retention every `retention_check_interval_ms` until the broker
    /// is dropped.
    pub async fn run_retention(self: Arc<Self>) {
        let every =
            std::time::Duration::from_millis(self.config.log.retention_check_interval_ms.max(1));
        loop {
            tokio::time::sleep(every).await;
            self.apply_retention(self.env.now_ms()).await;
        }
    }

    /// Graceful hand-over before a shutdown (or a drain): announces that
    /// this broker is leaving, in a heartbeat made durable at once, then
    /// runs the ownership round, which releases everything another live
    /// broker can take (placement leaves a leaving broker out), flushed
    /// first. The others claim what was released at their next round,
    /// without waiting out this broker's lease. Alone, it keeps everything
    /// (nobody could take it) and [`flush_all`](Self::flush_all) does the
    /// rest.
    pub async fn hand_over(&self) {
        self.membership.set_leaving();
        let (volume, clock, membership) = (
            self.volume.clone(),
            self.env.clock.clone(),
            self.membership.clone(),
        );
        let announced = self
            .env
            .blocking(IoKind::Fsync, move || {
                crate::cluster::heartbeat::round(volume.as_ref(), clock.as_ref(), &membership)
            })
            .await;
        if let Err(e) = announced {
            // Without the announcement the others would not place what is
            // released elsewhere; they take it after the lease instead.
            tracing::warn!(error = %e, "cannot announce the hand-over; the lease will run out instead");
            return;
        }
        self.reconcile().await;
    }

    /// Clean shutdown: fsyncs every partition and writes its producer
    /// snapshot, so the next start replays nothing.
    pub async fn flush_all(&self) {
        for (topic, p) in self.led_partitions() {
            if let Err(code) = p.shut_down().await {
                tracing::warn!(topic = %topic.name, partition = p.index, ?code, "partition did not shut down cleanly");
            }
        }
    }
}

/// A partition after the ownership rule was applied to it.
enum TakenPartition {
    /// Won (or kept) here, and opened.
    Opened(Box<Partition>),
    /// Led by the newest claim, another broker's or nobody's.
    Elsewhere(Option<Claim>),
}

/// A function that takes partitions of a topic with `configs` where the
/// ownership rule says so, opening those it wins; it carries what it needs
/// from the broker so it can run on the IO runner.
fn taker(
    broker: &Broker,
    configs: &BTreeMap<String, String>,
) -> impl Fn(&str, i32) -> io::Result<TakenPartition> + Send + 'static {
    let volume = broker.volume.clone();
    let env = broker.env.clone();
    let progress = broker.progress.clone();
    let config = broker.log_config(configs);
    let membership = broker.membership.clone();
    move |topic: &str, index: i32| {
        let decider = ownership::Decider::at(&membership, env.clock.monotonic_ms());
        let taken = ownership::take(
            volume.as_ref(),
            &layout::partition_epochs_dir(topic, index),
            &|epoch| layout::partition_epoch_file(topic, index, epoch),
            &decider,
            &Item::Partition {
                topic,
                partition: index,
            },
        )?;
        let Some(leader) = taken.won else {
            return Ok(TakenPartition::Elsewhere(taken.after));
        };
        Partition::open(
            volume.clone(),
            env.clone(),
            progress.clone(),
            OpenPartition {
                topic,
                index,
                config,
                leader,
            },
        )
        .map(|p| TakenPartition::Opened(Box::new(p)))
    }
}

/// The dynamic layers `per_broker` and `cluster_default` over the start-up
/// and built-in ones, and the log defaults they make.
fn make_state(
    start: &LogDefaults,
    static_layer: &dynamic_config::Configs,
    default_layer: &dynamic_config::Configs,
    per_broker: dynamic_config::Configs,
    cluster_default: dynamic_config::Configs,
    default_version: u32,
) -> DynamicState {
    let log = dynamic_config::effective(
        start,
        &kaas_core::broker_config::Layers {
            per_broker: &per_broker,
            cluster_default: &cluster_default,
            static_broker: static_layer,
            default: default_layer,
        },
    );
    DynamicState {
        per_broker,
        cluster_default,
        default_version,
        log,
    }
}

fn storage_error(e: io::Error) -> ErrorCode {
    tracing::error!(error = %e, "volume error");
    ErrorCode::KafkaStorageError
}

fn load_or_create_cluster_id(volume: &dyn Volume) -> io::Result<String> {
    if let Some(bytes) = volume.read(CLUSTER_FILE)? {
        let file: ClusterFile = serde_json::from_slice(&bytes)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        return Ok(file.cluster_id);
    }
    // Kafka cluster ids are 22-character URL-safe base64 of a UUID.
    let id = entropy::random_uuid();
    let cluster_id = base64_url(&id.0);
    let json = serde_json::to_vec_pretty(&ClusterFile {
        cluster_id: cluster_id.clone(),
    })
    .map_err(io::Error::other)?;
    volume.write_atomic(CLUSTER_FILE, &json)?;
    Ok(cluster_id)
}

fn base64_url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, b)| acc | (*b as u32) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}
