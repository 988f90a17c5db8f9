//! Per-seed parameters (swarm testing): each seed draws its own shape of
//! workload and faults, so a run of many seeds covers many combinations
//! instead of one configuration many times.

use crate::low_acks::Acks;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimParams {
    /// Partitions of the topic (the broker's auto-create default).
    pub partitions: i32,
    /// Concurrent producers, one connection each.
    pub producers: usize,
    pub max_records_per_batch: u32,
    /// Pause between a producer's batches.
    pub producer_think_ms: u64,
    /// `segment.bytes`: small values make segments roll (and sealed-segment
    /// recovery run) during the run.
    pub segment_bytes: u64,
    /// The broker's default `segment.ms` and `segment.jitter.ms`: short
    /// ones make segments roll by time (by record timestamps, and by the
    /// clock after a recovery) during the run.
    pub segment_ms: (i64, i64),
    /// How long faults are injected.
    pub fault_phase: Duration,
    /// Range of an fsync's simulated duration.
    pub sync_latency: (Duration, Duration),
    /// Longest time the broker stays up between crashes.
    pub max_uptime: Duration,
    /// Longest time the broker stays down.
    pub max_downtime: Duration,
    /// Chance (percent) that a crash is a power cut at a random volume
    /// operation rather than a kill at a random time.
    pub power_cut_percent: u32,
    /// Chance (percent) that, instead, an fsync fails (with Linux's
    /// semantics, see `SimVolume`) some time before the crash.
    pub fsync_failure_percent: u32,
    /// Chance (percent) that the client-broker link is clogged for a while
    /// during an uptime (requests stall, clients time out and retry).
    pub clog_percent: u32,
    /// A power cut fires within this many volume mutations of being armed.
    pub max_ops_before_cut: u64,
    /// Chance (percent) that a crash keeps a torn prefix of unsynced data.
    pub torn_percent: u32,
    /// Chance (percent) that a broker kill is a kill -9 of its process
    /// alone, the page cache kept (`SimVolume::kill_process`), rather than
    /// a power loss or a host crash: the restarted broker reads back data
    /// it never synced, and a later power loss may still take it.
    pub process_kill_percent: u32,
    /// How many of the producers are idempotent (the others are plain
    /// producers, at the acks level `plain_acks` gives each).
    pub idempotent_producers: usize,
    /// Each plain producer slot's acks level ([`SimParams::with_acks`]).
    pub plain_acks: [Acks; MAX_PRODUCERS],
    /// max.in.flight of idempotent producers, per partition (1..=5, the
    /// broker remembers 5 batches per producer).
    pub max_in_flight: usize,
    /// Chance (percent) that an idempotent producer drops its connection
    /// right after a successful answer, as if the answer was lost on the
    /// way: the retry must be answered as a duplicate at the same offset.
    pub lose_answer_percent: u32,
    /// Chance (percent) that an idempotent producer resets its identity
    /// (new producer id, or a local epoch bump) when it gets through to the
    /// broker after an outage. The first outage always resets with a new id.
    pub reset_percent: u32,
    /// Chance (percent) that a reset abandons the unacknowledged batches (an
    /// application restart) instead of first getting them acknowledged.
    pub abandon_percent: u32,
    /// Chance (percent) that a reset bumps the epoch locally (the Java
    /// client since KIP-360) instead of asking for a new producer id.
    pub epoch_bump_percent: u32,
    /// The acks=all timeout idempotent producers ask for: when shorter than
    /// an fsync, batches are appended but answered REQUEST_TIMED_OUT.
    pub idempotent_ack_timeout_ms: i32,
    /// Consumers in the consumer group (0: no group this seed).
    pub group_members: usize,
    /// Their session timeout; the broker's minimum is lowered to allow it.
    pub session_timeout_ms: i32,
    /// group.initial.rebalance.delay.ms.
    pub initial_rebalance_delay_ms: i64,
    /// How often a member commits its positions (0: after every fetch).
    pub commit_interval_ms: u64,
    /// Mean lifetime of a member incarnation before it crashes or leaves
    /// (`None`: members live until the end).
    pub member_lifetime_ms: Option<u64>,
    /// Chance (percent) that a group member whose generation moved on
    /// (fenced, replaced, gone) leaves a zombie behind: a task that keeps
    /// fetching its old partitions and committing with its old generation
    /// and member id (`group_member::Zombie`). Drawn by
    /// [`with_zombie_members`](Self::with_zombie_members).
    pub group_zombie_percent: u32,
    /// Attempts a plain acks=all or acks=1 producer makes at a batch before
    /// it gives the batch up, as a client does when `delivery.timeout.ms`
    /// runs out: a batch given up after an attempt reached a broker has an
    /// unknown outcome, one no attempt of which connected failed
    /// (`checker::GaveUp`). Drawn by
    /// [`with_plain_requests`](Self::with_plain_requests).
    pub plain_produce_attempts: u32,
    /// Whether a plain producer's request carries batches for several
    /// partitions of the main topic, as real clients batch them (one
    /// request per broker), rather than one. Drawn by
    /// [`with_plain_requests`](Self::with_plain_requests).
    pub multi_partition_produce: bool,
    /// Whether those requests also carry batches for partitions of the
    /// main topic's twin (`checker::TWIN_TOPIC`), checked by a history of
    /// its own: several topics in one request under the main checker.
    /// Only in seeds with multi-partition requests. Drawn by
    /// [`with_plain_requests`](Self::with_plain_requests).
    pub twin_topic: bool,
    /// Transactional producer slots (0: no transactions this seed). Each
    /// writes the transactional topic under its own transactional id.
    pub txn_producers: usize,
    /// Chance (percent) that a transaction is aborted rather than
    /// committed.
    pub txn_abort_percent: u32,
    /// Chance (percent), per transaction, that a zombie starts: a second
    /// instance with the same transactional id, which fences the first.
    pub txn_zombie_percent: u32,
    /// Chance (percent) that a producer stops mid-transaction and comes
    /// back later as a new instance: the reaper (or the new instance's
    /// InitProducerId) must abort what it left open.
    pub txn_stall_percent: u32,
    /// The transaction timeout the transactional producers ask for.
    pub txn_timeout_ms: i32,
    /// The one the exactly-once loop asks for: never shortened, as a loop
    /// whose transactions outlast their timeout is reaped every time and
    /// never commits (in Kafka as here).
    pub eos_txn_timeout_ms: i32,
    /// Chance (percent) that a transactional producer instance speaks
    /// transaction version 2 (KIP-890 part 2: Produce v12 adds partitions
    /// implicitly, EndTxn v5 bumps the epoch at every end), as the Java
    /// client 4.x does; the others speak version 1 (AddPartitionsToTxn,
    /// EndTxn v3). Drawn by [`with_txn_timers`](Self::with_txn_timers).
    pub txn_v2_percent: u32,
    /// `transactional.id.expiration.ms` (0: Kafka's week): in a third of
    /// the seeds each, 1 s or 3 s, so ids idle between a producer's
    /// instances expire and come back with a fresh producer id. Expiry
    /// runs every `txn_timer_ms`. Drawn by
    /// [`with_txn_timers`](Self::with_txn_timers).
    pub txn_id_expiration_ms: i64,
    /// How often the coordinator's reaper and marker reconcile run
    /// (`transaction.abort.timed.out.transaction.cleanup.interval.ms`).
    /// Drawn with short timeouts by [`with_txn_timers`](Self::with_txn_timers),
    /// so the reaper meets EndTxn, InitProducerId and the completion of a
    /// prepared transaction in flight.
    pub txn_timer_ms: i64,
    /// Whether an exactly-once consume-transform-produce loop runs
    /// (`crate::eos`): it reads its input topic, writes its output topic
    /// and commits its input offsets in the same transactions.
    pub eos: bool,
    /// Chance (percent) that the loop aborts a transaction (its input is
    /// then read again).
    pub eos_abort_percent: u32,
    /// Chance (percent), per transaction, that the loop's instance stops
    /// mid-transaction and a new instance takes over.
    pub eos_stall_percent: u32,
    /// Chance (percent) that a stopped instance is only paused: it comes
    /// back as a zombie and tries to finish its transaction.
    pub eos_zombie_percent: u32,
    /// Brokers sharing the one volume (1 in most seeds; 2 or 3 in a third
    /// of them, see `docs/simulation.md`), every workload routed as
    /// Kafka's clients route.
    pub brokers: usize,
    /// The brokers' lease (`--lease-ms`) in a multi-broker seed: short, so
    /// partitions move several times within the fault phase.
    pub lease_ms: i64,
    /// Multi-broker seeds: the chance, every few leases, that one broker
    /// is cut off from the volume for a while (its clients still reach
    /// it).
    pub volume_partition_percent: u32,
    /// Multi-broker seeds: how stale a broker's cached directory listing
    /// may be (an NFS client's `acdirmax`; `SimVolume::set_listing_cache`),
    /// always under [`VOLUME_STALENESS_BOUND_MS`], which is what the
    /// brokers' bounds assume of the volume.
    pub listing_cache_ms: u64,
    /// Multi-broker seeds: the volume-staleness bound the brokers are
    /// configured with (`LeaseBounds::volume_staleness_ms`):
    /// [`VOLUME_STALENESS_BOUND_MS`], or longer in the seeds whose file
    /// views are slow (`attr_cache_ms` above two heartbeat intervals).
    pub volume_staleness_bound_ms: i64,
    /// Multi-broker seeds: how long after another broker replaced a file
    /// by a rename a broker that looked its name up before may still read
    /// the old version (an NFS client's attribute and name caches;
    /// `SimVolume::set_attr_cache`; 0: lookups exact), always under
    /// `volume_staleness_bound_ms`.
    pub attr_cache_ms: u64,
    /// The codec of the plain and idempotent producers' batches, a
    /// `Compression` id (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd): drawn by
    /// [`with_compression`](Self::with_compression).
    pub codec: u8,
    /// `producer.id.expiration.ms` (0: Kafka's day): in half the seeds 1 s
    /// or 3 s, run every 250 ms, so partitions forget idle producers while
    /// their retries, late copies and next batches are still coming. Drawn
    /// by [`with_producer_expiry`](Self::with_producer_expiry).
    pub producer_id_expiration_ms: i64,
    /// The compacted-topic workload this seed (`crate::compact`), if any:
    /// a keyed producer and a reader on a topic the cleaner cleans.
    pub compaction: Option<CompactionParams>,
    /// Deletion from the main topic this seed (`crate::retention`), if
    /// any: a DeleteRecords actor, and a short `retention.ms` on the topic.
    pub retention: Option<RetentionParams>,
}

/// How records leave the main topic while the faults run (a third of the
/// seeds; [`SimParams::with_retention`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionParams {
    /// Pause between DeleteRecords requests (0: no DeleteRecords actor,
    /// the seed retains by time instead).
    pub delete_every_ms: u64,
    /// The topic's `retention.ms` (-1: no time retention). Short, so that
    /// sealed segments age out within the fault phase.
    pub retention_ms: i64,
    /// The broker's `log.retention.check.interval.ms`.
    pub check_interval_ms: u64,
}

/// The compacted topic's shape and its cleaner's pace (a third of the
/// seeds; [`SimParams::with_compaction`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactionParams {
    /// Distinct keys written: few, so most records are soon superseded.
    pub keys: u32,
    /// The topic's `segment.bytes` and `segment.ms`: small, so segments
    /// seal (and become cleanable) within the run.
    pub segment_bytes: u64,
    pub segment_ms: i64,
    /// `min.cleanable.dirty.ratio`, in hundredths.
    pub dirty_ratio_percent: u32,
    /// `delete.retention.ms`: short ones let tombstones go within the run.
    pub delete_retention_ms: i64,
    /// `min.compaction.lag.ms`.
    pub min_lag_ms: i64,
    /// The broker's `log.cleaner.backoff.ms`.
    pub cleaner_backoff_ms: u64,
    /// Chance (percent) that a record is a tombstone.
    pub tombstone_percent: u32,
    /// The producer's codec (`Compression` id): cleaned batches are
    /// written back with it.
    pub codec: u8,
    /// Pause between full reads.
    pub read_every_ms: u64,
    /// The transactional workload's topic is compacted too (with these
    /// configs, each record keyed by its unique value): the cleaner must
    /// remove aborted records and keep markers as long as read_committed
    /// needs them.
    pub txn_topic: bool,
}

/// The `Compression` of codec id `id` (0 or anything unknown: none).
pub fn codec_of(id: u8) -> kaas_core::record::Compression {
    use kaas_core::record::Compression;
    match id {
        1..=4 => Compression::CODECS[usize::from(id - 1)],
        _ => Compression::None,
    }
}

/// The clock-skew bound of a multi-broker seed: brokers' clocks drift up to
/// `MAX_DRIFT_PPM` each, so two differ by at most 400 ppm, well under 1 ms
/// over a lease of 2 s; 50 ms leaves a wide margin.
pub const CLOCK_SKEW_BOUND_MS: i64 = 50;
/// The volume-staleness bound: how stale what a broker reads of the volume
/// may be. In multi-broker seeds each broker's directory listings are
/// cached for up to `listing_cache_ms`, and a file another broker replaced
/// may be read as it was for up to `attr_cache_ms`, both under this bound;
/// negative lookups, and content written in place once synced, are exact.
pub const VOLUME_STALENESS_BOUND_MS: i64 = 300;
/// How far a broker's wall clock may be from true time: each incarnation
/// reads it off by up to this much (the harness's `SimClock` offset), plus
/// its drift. Time retention judges record timestamps by that clock.
pub const MAX_CLOCK_OFFSET_MS: i64 = 5_000;
/// Most producers a seed draws (plain and idempotent together).
pub const MAX_PRODUCERS: usize = 3;
/// Largest clock drift of a simulated broker, parts per million.
pub const MAX_DRIFT_PPM: i64 = 200;

/// A plain producer's attempts at a batch when the seed draws no short
/// delivery timeout: enough that a batch is given up only if the broker
/// stays out of reach for the whole run.
pub const PLAIN_PRODUCE_ATTEMPTS: u32 = 40;

impl SimParams {
    pub fn draw(rng: &mut impl Rng) -> SimParams {
        let group_members = [0, 0, 2, 3, 4][rng.gen_range(0..5)];
        // A rebalance takes a dozen round trips plus the initial delay, and a
        // member only learns of a restart when a request fails: with uptimes
        // of a few hundred milliseconds a group never forms again and its
        // seed checks nothing, so seeds with a group get the longer ones.
        let uptime_ms = if group_members > 0 {
            [1_000, 3_000][rng.gen_range(0..2)]
        } else {
            [300, 1_000, 3_000][rng.gen_range(0..3)]
        };
        let max_uptime = Duration::from_millis(uptime_ms);
        let producers = rng.gen_range(1..=MAX_PRODUCERS);
        // Swarm: no idempotent producer, a mix, or only idempotent ones.
        let idempotent_percent = [0, 50, 100][rng.gen_range(0..3)];
        let idempotent_producers = (0..producers)
            .filter(|_| rng.gen_range(0..100) < idempotent_percent)
            .count();
        let drawn = SimParams {
            partitions: rng.gen_range(1..=3),
            producers,
            max_records_per_batch: rng.gen_range(1..=8),
            producer_think_ms: [0, 5, 20][rng.gen_range(0..3)],
            segment_bytes: [1024, 8 * 1024, 1 << 30][rng.gen_range(0..3)],
            segment_ms: (kaas_core::partition::segment_roll::DEFAULT_SEGMENT_MS, 0),
            fault_phase: Duration::from_secs(rng.gen_range(20..=40)),
            sync_latency: [
                (Duration::from_micros(20), Duration::from_micros(200)),
                (Duration::from_millis(1), Duration::from_millis(5)),
                (Duration::from_millis(2), Duration::from_millis(30)),
            ][rng.gen_range(0..3)],
            max_uptime,
            // At most a third of the uptime: the broker must get work done.
            max_downtime: max_uptime / [3, 10, 100][rng.gen_range(0..3)],
            power_cut_percent: [0, 40, 70][rng.gen_range(0..3)],
            fsync_failure_percent: [0, 20, 60][rng.gen_range(0..3)],
            clog_percent: [0, 0, 25][rng.gen_range(0..3)],
            max_ops_before_cut: [10, 100, 500][rng.gen_range(0..3)],
            torn_percent: [0, 50, 90][rng.gen_range(0..3)],
            process_kill_percent: 0,
            idempotent_producers,
            plain_acks: [Acks::All; MAX_PRODUCERS],
            max_in_flight: rng.gen_range(1..=5),
            lose_answer_percent: [1, 5, 15][rng.gen_range(0..3)],
            reset_percent: [10, 40, 100][rng.gen_range(0..3)],
            abandon_percent: [0, 30, 70][rng.gen_range(0..3)],
            epoch_bump_percent: [0, 50, 100][rng.gen_range(0..3)],
            idempotent_ack_timeout_ms: [10, 100, 5_000][rng.gen_range(0..3)],
            group_members,
            // Group timings scale with the broker's uptime, for the same
            // reason. A crashed member holds up the next rebalance for its
            // whole session timeout.
            session_timeout_ms: (uptime_ms * [1, 2, 3][rng.gen_range(0..3)]) as i32,
            initial_rebalance_delay_ms: (uptime_ms / [1_000_000, 10, 5][rng.gen_range(0..3)])
                as i64,
            // 0: after every fetch, as applications that commit each poll.
            commit_interval_ms: [0, uptime_ms / 20, uptime_ms / 8][rng.gen_range(0..3)],
            member_lifetime_ms: [None, Some(uptime_ms * 4), Some(uptime_ms * 12)]
                [rng.gen_range(0..3)],
            group_zombie_percent: 0,
            plain_produce_attempts: PLAIN_PRODUCE_ATTEMPTS,
            multi_partition_produce: false,
            twin_topic: false,
            // Drawn last, so the draws above are those of seeds before
            // transactions existed.
            txn_producers: [0, 1, 2][rng.gen_range(0..3)],
            txn_abort_percent: [10, 30, 50][rng.gen_range(0..3)],
            txn_zombie_percent: [0, 3, 10][rng.gen_range(0..3)],
            txn_stall_percent: [0, 2, 8][rng.gen_range(0..3)],
            txn_timeout_ms: [2_000, 4_000][rng.gen_range(0..2)],
            eos_txn_timeout_ms: 0,
            txn_v2_percent: 0,
            txn_id_expiration_ms: 0,
            txn_timer_ms: 1_000,
            // Drawn after the transactional ones, for the same reason.
            eos: rng.gen_range(0..3) > 0,
            eos_abort_percent: [5, 20][rng.gen_range(0..2)],
            eos_stall_percent: [3, 6, 12][rng.gen_range(0..3)],
            eos_zombie_percent: [0, 50, 100][rng.gen_range(0..3)],
            brokers: 1,
            lease_ms: 0,
            volume_partition_percent: 0,
            listing_cache_ms: 0,
            volume_staleness_bound_ms: VOLUME_STALENESS_BOUND_MS,
            attr_cache_ms: 0,
            compaction: None,
            retention: None,
            codec: 0,
            producer_id_expiration_ms: 0,
        };
        SimParams {
            eos_txn_timeout_ms: drawn.txn_timeout_ms,
            ..drawn
        }
    }

    /// Draws the cluster shape of seed `seed`: how many brokers share the
    /// volume, and their lease. Drawn last, and from an rng of its own
    /// seeded by the seed rather than from `draw`'s, so that a seed that
    /// stays single-broker consumes nothing more from the simulation's rng
    /// and runs exactly as it did before multi-broker seeds existed. Of the
    /// workloads `draw` chose, each coordinator one (group, transactional
    /// producers, exactly-once loop) stays with a chance of two in three.
    pub fn with_cluster(mut self, seed: u64) -> SimParams {
        let mut rng = SmallRng::seed_from_u64(seed ^ 0x6b61_6173_636c_7573);
        let brokers = [1, 1, 1, 1, 2, 3][rng.gen_range(0..6)];
        if brokers > 1 {
            self.brokers = brokers;
            self.lease_ms = [1_000, 1_500, 2_000][rng.gen_range(0..3)];
            // A broker must stay up for a few leases: a partition moves
            // only once another broker has been up long enough to count
            // the holder silent for lease + skew + staleness. Short outages
            // (the holder is back before anyone counts it gone) are at most
            // half a lease; the fault driver adds long ones.
            let lease = Duration::from_millis(self.lease_ms as u64);
            self.max_uptime = lease * [3, 5][rng.gen_range(0..2)];
            self.max_downtime = lease / 2;
            // Drawn after the rest, so that adding it left those draws
            // as they were.
            self.volume_partition_percent = [0, 40, 80][rng.gen_range(0..3)];
            // Each coordinator workload the draw chose stays in two seeds
            // of three: with every broker crashing every few seconds and
            // its slots moving, a seed running all of them needs up to
            // three times its fault phase to meet their gates, and CI's
            // hundred seeds must stay within their time.
            if rng.gen_range(0..3) == 0 {
                self.group_members = 0;
            }
            if rng.gen_range(0..3) == 0 {
                self.txn_producers = 0;
            }
            if rng.gen_range(0..3) == 0 {
                self.eos = false;
            }
            // As in `draw`: a rebalance takes a dozen round trips, the
            // initial delay and, after a member crashed, its session, and a
            // coordinator's restart loses the members still joining; a group
            // whose coordinator's broker restarts every few seconds never
            // forms again (seed 310 with three leases). Set after the
            // draws, so they stay as they were.
            if self.group_members > 0 {
                self.max_uptime = lease * 5;
            }
            // After the others, so they stay as they were.
            self.listing_cache_ms = [50, 150, 290][rng.gen_range(0..3)];
            // The last draw, so the others stay as they were. Up to the
            // bound, as the listing cache (it was capped at 100 ms while
            // seeds 237 and 944 failed above it; docs/simulation.md).
            self.attr_cache_ms = [0, 100, 290][rng.gen_range(0..3)];
            // Drawn after it, so the others stay as they were. In a
            // quarter of the seeds file views are slow: a replaced file
            // is read as it was for longer than two heartbeat intervals
            // plus the skew, and the brokers are configured with a bound
            // above that, as an operator of such a volume would. Only
            // then does an owner's renewal stay hidden from an observer
            // until after its count of lease + skew has run out, the case
            // the staleness term of the silence bound exists for
            // (`LeaseIgnoresStaleness`, docs/simulation.md "One owner at
            // a time"): with views staler than a heartbeat interval at
            // most, the observer's next read shows the renewal first.
            if rng.gen_range(0..4) == 0 {
                let interval = self.lease_ms / 3;
                let beyond = [100, 200, 300][rng.gen_range(0..3)];
                let stale = 2 * interval + CLOCK_SKEW_BOUND_MS + beyond;
                self.attr_cache_ms = stale as u64;
                self.volume_staleness_bound_ms = stale + 100;
                // The silence bound grows by about a lease: brokers stay
                // up twice as long, so items still move.
                self.max_uptime *= 2;
            }
        }
        self
    }

    /// Draws the seed's `segment.ms` (and jitter), from an rng of its own
    /// seeded by the seed, as [`with_cluster`](Self::with_cluster) does, so
    /// that every other draw, and the simulation's rng, stay as they were
    /// before segments rolled by time. Half the seeds keep Kafka's week.
    pub fn with_roll(mut self, seed: u64) -> SimParams {
        let mut rng = SmallRng::seed_from_u64(seed ^ 0x6b61_6173_726f_6c6c);
        let week = kaas_core::partition::segment_roll::DEFAULT_SEGMENT_MS;
        self.segment_ms = [(week, 0), (week, 0), (200, 0), (1_000, 500)][rng.gen_range(0..4)];
        self
    }

    /// Draws the seed's compacted-topic workload: in a third of the seeds,
    /// from an rng of its own seeded by the seed, as
    /// [`with_roll`](Self::with_roll) does, so that the other seeds, and
    /// every other draw, stay as they were before it existed.
    pub fn with_compaction(mut self, seed: u64) -> SimParams {
        let mut rng = SmallRng::seed_from_u64(seed ^ 0x6b61_6173_636d_7074);
        if rng.gen_range(0..3) != 0 {
            return self;
        }
        self.compaction = Some(CompactionParams {
            keys: rng.gen_range(8..=32),
            segment_bytes: [1_024, 4_096, 16_384][rng.gen_range(0..3)],
            segment_ms: [
                kaas_core::partition::segment_roll::DEFAULT_SEGMENT_MS,
                300,
                2_000,
            ][rng.gen_range(0..3)],
            dirty_ratio_percent: rng.gen_range(1..=10),
            delete_retention_ms: [0, 500, 86_400_000][rng.gen_range(0..3)],
            min_lag_ms: [0, 0, 200][rng.gen_range(0..3)],
            cleaner_backoff_ms: [250, 500, 1_500][rng.gen_range(0..3)],
            tombstone_percent: [0, 10, 30][rng.gen_range(0..3)],
            // None, gzip, snappy, lz4, zstd.
            codec: [0, 0, 1, 2, 3, 4][rng.gen_range(0..6)],
            read_every_ms: [200, 1_000][rng.gen_range(0..2)],
            txn_topic: self.txn_producers > 0 && rng.gen_range(0..2) == 0,
        });
        self
    }

    /// Draws the seed's deletions from the main topic: in a third of the
    /// seeds, from an rng of its own seeded by the seed, as
    /// [`with_compaction`](Self::with_compaction) does, so that the other
    /// seeds, and every other draw, stay as they were before it existed.
    /// Each such seed runs DeleteRecords or time retention.
    pub fn with_retention(mut self, seed: u64) -> SimParams {
        let mut rng = SmallRng::seed_from_u64(seed ^ 0x6b61_6173_7265_746e);
        if rng.gen_range(0..3) != 0 {
            return self;
        }
        // One or the other: with both, DeleteRecords (a visit behind the
        // durable end) always runs ahead of a retention.ms of seconds, and
        // retention would never be the one to delete.
        let deletes = rng.gen_range(0..2) == 0;
        let retains = !deletes;
        self.retention = Some(RetentionParams {
            delete_every_ms: if deletes {
                [300, 1_000, 2_000][rng.gen_range(0..3)]
            } else {
                0
            },
            // Several seconds at least: the final read must still find
            // the newest records of the run to compare.
            retention_ms: if retains {
                [3_000, 8_000, 20_000][rng.gen_range(0..3)]
            } else {
                -1
            },
            check_interval_ms: [200, 1_000][rng.gen_range(0..2)],
        });
        if retains {
            // Retention takes sealed segments only: these must roll within
            // the run, whatever segment size the seed drew.
            self.segment_bytes = self.segment_bytes.min(8 * 1024);
        }
        self
    }

    /// Draws the seed's share of process kills (0, 30 or 60 %), from an
    /// rng of its own seeded by the seed, as [`with_roll`](Self::with_roll)
    /// does, so that every other draw stays as it was; a seed that draws 0
    /// runs its faults exactly as before process kills existed.
    pub fn with_process_kills(mut self, seed: u64) -> SimParams {
        let mut rng = SmallRng::seed_from_u64(seed ^ 0x6b61_6173_6b69_6c6c);
        self.process_kill_percent = [0, 30, 60][rng.gen_range(0..3)];
        self
    }

    /// Draws each plain producer slot's acks level, from an rng of its own
    /// seeded by the seed, as [`with_roll`](Self::with_roll) does, so that
    /// every other draw stays as it was. Slot 0 stays acks=all, so a seed
    /// keeps the acknowledged records its gates and checkers need; each
    /// other slot is acks=all half the time, else acks=1 or acks=0.
    pub fn with_acks(mut self, seed: u64) -> SimParams {
        let mut rng = SmallRng::seed_from_u64(seed ^ 0x6b61_6173_6163_6b73);
        for slot in self.plain_acks.iter_mut().skip(1) {
            *slot = [Acks::All, Acks::All, Acks::Leader, Acks::None][rng.gen_range(0..4)];
        }
        self
    }

    /// The acks level of plain producer `id`.
    pub fn acks_of(&self, id: usize) -> Acks {
        self.plain_acks.get(id).copied().unwrap_or(Acks::All)
    }

    /// Whether some plain producer runs at `acks`.
    pub fn runs_plain_at(&self, acks: Acks) -> bool {
        let plain = self.producers - self.idempotent_producers;
        (0..plain).any(|id| self.acks_of(id) == acks)
    }

    /// Draws the seed's share of zombie group members (0, 30 or 70 % of
    /// the incarnations whose generation moved on), from an rng of its
    /// own seeded by the seed, as [`with_roll`](Self::with_roll) does, so
    /// that every other draw stays as it was; a seed that draws 0 runs its
    /// group exactly as before zombies existed.
    pub fn with_zombie_members(mut self, seed: u64) -> SimParams {
        let mut rng = SmallRng::seed_from_u64(seed ^ 0x6b61_6173_7a6f_6d62);
        self.group_zombie_percent = [0, 30, 70][rng.gen_range(0..3)];
        self
    }

    /// Draws how plain producers send: in a third of the seeds they give a
    /// batch up after a few attempts, so that batches are given up during
    /// the faults, with outcomes the checker must treat as unknown (or,
    /// with no attempt connected, as failed); in half of them one request
    /// carries batches for several partitions, and in half of those also
    /// for partitions of a second topic. From an rng of its own
    /// seeded by the seed, as [`with_roll`](Self::with_roll) does, so that
    /// every other draw stays as it was.
    pub fn with_plain_requests(mut self, seed: u64) -> SimParams {
        let mut rng = SmallRng::seed_from_u64(seed ^ 0x6b61_6173_6465_6c76);
        self.plain_produce_attempts =
            [PLAIN_PRODUCE_ATTEMPTS, PLAIN_PRODUCE_ATTEMPTS, 3][rng.gen_range(0..3)];
        self.multi_partition_produce = rng.gen_range(0..2) == 0;
        // Drawn after the others, so that they stay as they were. Only
        // producers that wait for answers send several partitions at once.
        let twin = rng.gen_range(0..2) == 0;
        self.twin_topic = twin
            && self.multi_partition_produce
            && (self.runs_plain_at(Acks::All) || self.runs_plain_at(Acks::Leader));
        self
    }

    /// Draws the reaper's pace, in half the seeds a transaction timeout
    /// shorter than many transactions take, and the share of producers
    /// speaking transaction version 2, from an rng of its own
    /// seeded by the seed, as [`with_roll`](Self::with_roll) does, so that
    /// every other draw stays as it was. With a timeout of a few hundred
    /// milliseconds and a reaper pass every 100 ms, transactions are reaped
    /// while their EndTxn is in flight or being retried, while an
    /// InitProducerId of the same id is being written, right after an
    /// epoch bump, and between a prepare and its completion: the races of
    /// docs/transactions.md, counted by their coverage marks.
    pub fn with_txn_timers(mut self, seed: u64) -> SimParams {
        let mut rng = SmallRng::seed_from_u64(seed ^ 0x6b61_6173_7265_6170);
        self.txn_timer_ms = [100, 300, 1_000][rng.gen_range(0..3)];
        if rng.gen_range(0..2) == 0 {
            self.txn_timeout_ms = [250, 500, 1_000][rng.gen_range(0..3)];
        }
        // Version 2 bumps the epoch at every end: the reaper then always
        // decides right after an epoch bump.
        self.txn_v2_percent = [0, 50, 100][rng.gen_range(0..3)];
        self.txn_id_expiration_ms = [0, 1_000, 3_000][rng.gen_range(0..3)];
        self
    }

    /// Draws the plain and idempotent producers' codec (none in a third of
    /// the seeds, else one of Kafka's four), from an rng of its own seeded
    /// by the seed, as [`with_roll`](Self::with_roll) does, so that every
    /// other draw stays as it was. A compressed batch is one wrapper record
    /// on the wire: offsets, sequences, duplicates and recovery must come out
    /// the same as for plain ones.
    pub fn with_compression(mut self, seed: u64) -> SimParams {
        let mut rng = SmallRng::seed_from_u64(seed ^ 0x6b61_6173_7a69_7021);
        self.codec = [0, 0, 1, 2, 3, 4][rng.gen_range(0..6)];
        self
    }

    /// Draws the seed's `producer.id.expiration.ms`, from an rng of its own
    /// seeded by the seed, as [`with_roll`](Self::with_roll) does, so that
    /// every other draw stays as it was. A partition that forgets a producer
    /// takes its retry of a batch appended before as new (or refuses a
    /// sequence above 0 with UNKNOWN_PRODUCER_ID), as Kafka does: the
    /// checkers learn each expiry from the broker
    /// (`kaas_core::coverage::producer_expiries`) and allow that, and only
    /// that, past it.
    pub fn with_producer_expiry(mut self, seed: u64) -> SimParams {
        let mut rng = SmallRng::seed_from_u64(seed ^ 0x6b61_6173_7069_6478);
        self.producer_id_expiration_ms = [0, 0, 1_000, 3_000][rng.gen_range(0..4)];
        self
    }

    /// The producers' codec ([`codec`](Self::codec)).
    pub fn compression(&self) -> kaas_core::record::Compression {
        codec_of(self.codec)
    }

    /// An outage long enough for the others to count a broker gone (its
    /// lease, plus what its staleness bound adds above the usual one): a
    /// long crash, or a long cut of a volume link, lasts one to three.
    pub fn long_outage(&self) -> Duration {
        let extra = self.volume_staleness_bound_ms - VOLUME_STALENESS_BOUND_MS;
        Duration::from_millis((self.lease_ms + extra.max(0)) as u64)
    }

    /// Whether several brokers share the volume this seed.
    pub fn multi_broker(&self) -> bool {
        self.brokers > 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How many of seeds 0-299 draw parameters that `drew` holds for
    /// (every per-seed draw applied).
    fn seeds_of_300(drew: impl Fn(&SimParams) -> bool) -> usize {
        (0..300)
            .filter(|&s| {
                drew(
                    &SimParams::draw(&mut SmallRng::seed_from_u64(s))
                        .with_process_kills(s)
                        .with_zombie_members(s)
                        .with_compression(s),
                )
            })
            .count()
    }

    #[test]
    fn the_twin_topic_rides_on_multi_partition_requests_of_producers_that_wait() {
        let drawn: Vec<SimParams> = (0..300)
            .map(|s| {
                SimParams::draw(&mut SmallRng::seed_from_u64(s))
                    .with_acks(s)
                    .with_plain_requests(s)
            })
            .collect();
        let twins: Vec<&SimParams> = drawn.iter().filter(|p| p.twin_topic).collect();
        assert!(
            (25..=90).contains(&twins.len()),
            "{} of 300 seeds write the twin topic",
            twins.len()
        );
        assert!(twins.iter().all(|p| p.multi_partition_produce
            && (p.runs_plain_at(Acks::All) || p.runs_plain_at(Acks::Leader))));
    }

    #[test]
    fn draws_are_reproducible_and_within_bounds() {
        for seed in 0..100 {
            let a = SimParams::draw(&mut SmallRng::seed_from_u64(seed)).with_cluster(seed);
            assert_eq!(
                a,
                SimParams::draw(&mut SmallRng::seed_from_u64(seed)).with_cluster(seed)
            );
            assert!((1..=3).contains(&a.partitions));
            assert!(a.producers >= 1 && a.max_records_per_batch >= 1);
            assert!(a.fault_phase >= Duration::from_secs(20));
            assert!(a.sync_latency.0 <= a.sync_latency.1);
            assert!((1..=kaas_core::producer::MAX_CACHED_BATCHES).contains(&a.max_in_flight));
            assert!(a.group_members == 0 || a.group_members >= 2);
            assert!(a.idempotent_producers <= a.producers);
            assert!(a.txn_producers <= 2 && a.txn_abort_percent > 0);
            assert!(a.txn_timeout_ms >= 2_000);
            assert_eq!(a.eos_txn_timeout_ms, a.txn_timeout_ms);
            let timers = a.with_txn_timers(seed);
            assert!((250..=4_000).contains(&timers.txn_timeout_ms));
            assert!((100..=1_000).contains(&timers.txn_timer_ms));
            assert_eq!(timers.eos_txn_timeout_ms, a.eos_txn_timeout_ms);
            assert!(a.eos_stall_percent > 0 && a.eos_zombie_percent <= 100);
            assert!((1..=3).contains(&a.brokers));
            if a.multi_broker() {
                assert!((1_000..=2_000).contains(&a.lease_ms));
                assert!(a.volume_partition_percent <= 100);
                assert!(
                    a.listing_cache_ms > 0 && a.listing_cache_ms < VOLUME_STALENESS_BOUND_MS as u64,
                    "{a:?}"
                );
                assert!(
                    a.attr_cache_ms < a.volume_staleness_bound_ms as u64,
                    "{a:?}"
                );
                assert!(a.volume_staleness_bound_ms >= VOLUME_STALENESS_BOUND_MS);
                // The cluster draw may drop a workload, never add one.
                let single = SimParams::draw(&mut SmallRng::seed_from_u64(seed));
                assert!(a.group_members == 0 || a.group_members == single.group_members);
                assert!(a.txn_producers == 0 || a.txn_producers == single.txn_producers);
                assert!(!a.eos || single.eos);
            }
        }
        for codec in 1..=4 {
            let seeds = seeds_of_300(|p| p.codec == codec);
            assert!(
                (25..=75).contains(&seeds),
                "{seeds} of 300 seeds compress with codec {codec}"
            );
        }
        let killing = seeds_of_300(|p| p.process_kill_percent > 0);
        assert!(
            (150..=250).contains(&killing),
            "{killing} of 300 seeds kill processes"
        );
        let low_acks = |acks| {
            (0..1_000)
                .filter(|&s| {
                    SimParams::draw(&mut SmallRng::seed_from_u64(s))
                        .with_acks(s)
                        .runs_plain_at(acks)
                })
                .count()
        };
        let (leader, none) = (low_acks(Acks::Leader), low_acks(Acks::None));
        assert!(
            (60..=250).contains(&leader) && (60..=250).contains(&none),
            "of 1,000 seeds {leader} run acks=1 and {none} acks=0"
        );
        let zombies = seeds_of_300(|p| p.group_zombie_percent > 0);
        assert!(
            (150..=250).contains(&zombies),
            "{zombies} of 300 seeds leave zombie members"
        );
        let compacted = (0..300)
            .filter(|&s| {
                SimParams::draw(&mut SmallRng::seed_from_u64(s))
                    .with_compaction(s)
                    .compaction
                    .is_some()
            })
            .count();
        assert!(
            (60..=140).contains(&compacted),
            "{compacted} of 300 seeds compacted"
        );
        let retaining: Vec<RetentionParams> = (0..300)
            .filter_map(|s| {
                SimParams::draw(&mut SmallRng::seed_from_u64(s))
                    .with_retention(s)
                    .retention
            })
            .collect();
        assert!(
            (60..=140).contains(&retaining.len()),
            "{} of 300 seeds delete from the main topic",
            retaining.len()
        );
        assert!(retaining
            .iter()
            .all(|r| (r.delete_every_ms > 0) != (r.retention_ms > 0)));
        assert!(retaining.iter().any(|r| r.delete_every_ms == 0));
        assert!(retaining.iter().any(|r| r.retention_ms < 0));
        // Multi-broker seeds run every workload somewhere in the CI range.
        let multi: Vec<SimParams> = (0..100)
            .map(|s| SimParams::draw(&mut SmallRng::seed_from_u64(s)).with_cluster(s))
            .filter(SimParams::multi_broker)
            .collect();
        assert!(multi.iter().any(|p| p.group_members > 0));
        assert!(multi.iter().any(|p| p.txn_producers > 0));
        assert!(multi.iter().any(|p| p.eos));
        assert!(multi.iter().any(|p| p.volume_partition_percent > 0));
        assert!(multi.iter().any(|p| p.attr_cache_ms == 0));
        assert!(multi.iter().any(|p| p.attr_cache_ms > 0));
        // Slow views: staler than two heartbeat intervals plus the skew.
        let slow = multi
            .iter()
            .filter(|p| p.attr_cache_ms as i64 > 2 * (p.lease_ms / 3) + CLOCK_SKEW_BOUND_MS)
            .count();
        assert!(
            (3..=20).contains(&slow),
            "{slow} of {} multi-broker seeds with slow views",
            multi.len()
        );
        let multi = (0..300)
            .filter(|&s| {
                SimParams::draw(&mut SmallRng::seed_from_u64(s))
                    .with_cluster(s)
                    .multi_broker()
            })
            .count();
        assert!(
            (60..=140).contains(&multi),
            "{multi} of 300 seeds multi-broker"
        );
    }
}
