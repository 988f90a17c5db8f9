//! One simulated run: a broker node, a client node, a fault driver and the
//! final check. Runs inside a madsim runtime; [`crate::runner`] creates one
//! per seed.
//!
//! The broker node runs exactly what `kaas serve` runs (`Broker::open` on
//! the volume, the retention task, `server::serve`) on the simulated
//! network, at 10.0.0.1:9092 — an address inside madsim, no real traffic.

use crate::buggify::{Buggifier, BuggifyStats};
use crate::checker::{History, IdempotenceStats, OutcomeStats, PartitionLog};
use crate::cluster_history::ClusterStats;
use crate::cluster_history::FetchedBatch;
use crate::compact_history::CompactStats;
use crate::env::{SimClock, SimIo};
use crate::eos_history::EosStats;
use crate::group_history::GroupStats;
use crate::low_acks::{Acks, LowAcksStats};
use crate::one_owner::{LiveBrokers, OneOwner, OneOwnerStats};
use crate::params::{SimParams, CLOCK_SKEW_BOUND_MS, MAX_CLOCK_OFFSET_MS, MAX_DRIFT_PPM};
use crate::poll_history::{FinalLogs, PollStats};
use crate::retention_history::RetentionStats;
use crate::txn_history::TxnStats;
use crate::volume::{CrashReport, FaultPoint, SimVolume};
use crate::workload::{self, PlainTopic, Shared, TWIN_TOPIC};
use crate::writers::{self, WriterStats};
use crate::{
    aborted_index, compact, eos, eos_input, eos_observer, group_member, idempotent, retention, txn,
};
use kaas_core::cluster::membership::LeaseBounds;
use kaas_core::layout;
use kaas_core::record::{split_batches, Tail};
use kaas_core::topic_config::cleanup_compacts;
use kaas_net::broker::Isolation;
use kaas_net::config::{BrokerConfig, LogDefaults};
use kaas_net::env::Env;
use kaas_net::volume::Volume;
use kaas_net::witness::Witness;
use kaas_net::Broker;
use madsim::rand::{thread_rng, Rng};
use madsim::runtime::Handle;
use madsim::task::NodeId;
use madsim::time::{sleep, timeout, Instant};
use std::collections::BTreeMap;
use std::fmt;
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::sync::watch;

pub const BROKER_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
pub const CLIENT_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
pub const BROKER_ADDR: SocketAddr = SocketAddr::new(BROKER_IP, 9092);

/// A seed must acknowledge at least this many records to count.
pub const MIN_ACKED_RECORDS: usize = 100;
/// A seed that draws the twin topic must acknowledge this many of its
/// records to count.
pub const MIN_TWIN_ACKED_RECORDS: usize = 20;
/// ... this many idempotent batches, if it has idempotent producers;
pub const MIN_IDEMPOTENT_BATCHES: u64 = 20;
/// ... and this many retries the broker answered as duplicates;
pub const MIN_CONFIRMED_DUPLICATES: u64 = 1;
/// ... and take producer ids from this many allocator blocks (each broker
/// incarnation starts a new block, so ids come from several incarnations).
pub const MIN_PID_BLOCKS: usize = 2;
/// With a consumer group: this many acknowledged offset commits,
pub const MIN_COMMITS: u64 = 3;
/// ... assignments in this many generations,
pub const MIN_GENERATIONS: usize = 2;
/// ... and this many committed offsets read back after a broker restart.
pub const MIN_OFFSETS_READ_AFTER_RESTART: u64 = 1;
/// ... and, when zombie members woke (a later generation was stored after
/// their own), this many of their commits refused and then checked
/// invisible by a later OffsetFetch.
pub const MIN_ZOMBIE_REFUSALS_CHECKED: u64 = 1;
/// ... and crash the broker at least this often.
pub const MIN_CRASHES: u64 = 1;
/// With transactional producers: this many transactions committed,
pub const MIN_TXN_COMMITS: u64 = 3;
/// ... this many aborted (acknowledged aborts, fences, abandoned ones),
pub const MIN_TXN_ABORTS: u64 = 1;
/// ... and, when the seed drew zombies, this many fences.
pub const MIN_TXN_FENCES: u64 = 1;
/// With the exactly-once loop: this many transactions committed,
pub const MIN_EOS_COMMITS: u64 = 3;
/// ... this many instances resumed from offsets another one committed,
pub const MIN_EOS_RESUMES: u64 = 1;
/// ... and this many committed offsets above 0 checked against the output.
pub const MIN_EOS_OBSERVATIONS: u64 = 1;
/// With the compacted topic: this many records acknowledged on it,
pub const MIN_COMPACT_RECORDS: u64 = 50;
/// ... and this many reads of it.
pub const MIN_COMPACT_READS: u64 = 3;
/// With an acks=1 producer: this many of its acknowledgements checked
/// against the final log;
pub const MIN_LEADER_ACKS: u64 = 20;
/// ... with an acks=0 producer: this many of its records in the final log.
pub const MIN_UNACKNOWLEDGED_FOUND: u64 = 20;
/// With DeleteRecords: this many acknowledged,
pub const MIN_DELETES_ACKED: u64 = 3;
/// ... and, with any deletion, this many log starts above 0 in answers
/// checked against what was acknowledged and shown before,
pub const MIN_LOG_STARTS_CHECKED: u64 = 1;
/// ... and, with retention.ms, this many records aged out of the final log.
pub const MIN_RECORDS_AGED_OUT: u64 = 1;
/// The longest a message held by a clogged link may still take to arrive
/// after the link clears: madsim retries it with a backoff capped at 10 s.
const CLOGGED_DELIVERY_BOUND: Duration = Duration::from_secs(11);

/// How long one step of the final read-back may take once faults have
/// stopped (each step also stops at what is left of [`LIVENESS_BOUND`]).
const LIVENESS_DEADLINE: Duration = Duration::from_secs(120);
/// Issue 13 item 9's stated bound: from the end of the faults, with every
/// broker up and the volume healed, everything must have settled within
/// this much simulated time — every producer drained, every prepared
/// transaction completed and every open one aborted by the reaper, every
/// acknowledged record read back (at read_committed where transactions
/// write), and the group caught up with the log end and its final offsets
/// read. Exceeding it fails the seed. Seeds settle in a few seconds to a
/// minute (the batch summary counts those that took over a minute).
pub const LIVENESS_BOUND: Duration = Duration::from_secs(240);
/// How long to wait for an armed power cut or fsync failure before
/// crashing anyway.
const FAULT_WAIT: Duration = Duration::from_secs(5);

/// What the fault driver did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultStats {
    pub crashes: u64,
    /// Crashes that were power cuts at a volume operation.
    pub power_cuts: u64,
    /// Crashes preceded by a failed fsync.
    pub fsync_failures: u64,
    /// Times the client-broker link was clogged.
    pub clogs: u64,
    /// Times a broker was cut off from the volume (multi-broker seeds).
    pub volume_partitions: u64,
    /// Crashes that kept a torn prefix of unsynced data.
    pub torn_crashes: u64,
    pub unsynced_bytes_dropped: u64,
    pub unsynced_bytes_kept: u64,
    pub bytes_zeroed: u64,
    /// Broker crashes of a multi-broker seed whose host held unsynced
    /// writes (lost with it, or partly written back).
    pub host_crashes_with_unsynced: u64,
    /// Kills of the broker process alone, the page cache kept
    /// (`SimVolume::kill_process`): counted in `crashes` too.
    pub process_kills: u64,
    /// ... of them that left unsynced bytes in the page cache for the
    /// restarted broker to read,
    pub process_kills_with_unsynced: u64,
    /// ... how many such bytes,
    pub unsynced_bytes_kept_by_process_kills: u64,
    /// ... and power losses that came next, while the restarted broker ran
    /// (single-broker seeds): what it read back and did not sync is lost.
    pub power_losses_after_process_kills: u64,
}

impl FaultStats {
    /// Counts a power failure of the volume: every unsynced byte lost, or
    /// with `torn` a prefix of it kept.
    fn power_failed(&mut self, torn: bool, report: &CrashReport) {
        self.torn_crashes += u64::from(torn);
        self.unsynced_bytes_dropped += report.bytes_dropped;
        self.unsynced_bytes_kept += report.bytes_kept;
        self.bytes_zeroed += report.bytes_zeroed + report.bytes_poisoned;
    }

    /// Counts a broker process killed with the page cache kept.
    fn process_killed(&mut self, report: &CrashReport) {
        self.crashes += 1;
        self.process_kills += 1;
        if report.files_with_unsynced > 0 {
            self.process_kills_with_unsynced += 1;
            // Counted here, by the harness: the broker cannot know.
            kaas_core::coverage::hit(kaas_core::coverage::Mark::ProcessKillKeptUnsyncedData);
        }
        self.unsynced_bytes_kept_by_process_kills += report.bytes_kept;
    }
}

/// A passing seed's numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeedReport {
    pub seed: u64,
    pub params: SimParams,
    pub faults: FaultStats,
    pub records_acked: usize,
    pub batches_abandoned: u64,
    pub produce_errors: u64,
    pub multi_partition_requests: u64,
    /// Produce requests that carried batches for [`TWIN_TOPIC`] too.
    pub multi_topic_requests: u64,
    /// Records of [`TWIN_TOPIC`] acknowledged, each checked in its final log.
    pub twin_records_acked: usize,
    /// Records of [`TWIN_TOPIC`] the tailing consumer read during the run
    /// (its fetches ask for both topics), not counting the final read.
    pub twin_records_fetched: u64,
    /// Aborted-index entries held to the batches of their partition's log
    /// at the end ([`check_aborted_indexes`]).
    pub aborted_index_entries: u64,
    /// Multi-broker seeds: gate admissions held to the other brokers'
    /// gates at the same instant (`one_owner`).
    pub one_owner: OneOwnerStats,
    pub records_fetched: u64,
    pub final_records: usize,
    pub duplicates: usize,
    pub idem: IdempotenceStats,
    pub pid_blocks: usize,
    pub groups: GroupStats,
    pub generations: usize,
    pub txns: TxnStats,
    pub eos: EosStats,
    pub compact: CompactStats,
    /// What the acks=1 and acks=0 rules compared.
    pub low_acks: LowAcksStats,
    /// The acks=all batches given up: indeterminate, or never sent.
    pub outcomes: OutcomeStats,
    /// What the deletion rules compared.
    pub retention: RetentionStats,
    /// What the poll-order rules compared.
    pub polls: PollStats,
    /// Multi-broker seeds: what clients saw of leadership, and the claims
    /// on the volume.
    pub cluster: ClusterStats,
    pub claims: ClaimStats,
    pub writers: WriterStats,
    pub syncs: u64,
    /// Volume operations failed because their broker was cut off.
    pub volume_unreachable_failures: u64,
    /// Volume IO jobs of a cut-off broker that waited and ran after the
    /// link healed.
    pub volume_late_io: u64,
    /// Listings a broker was answered from its stale cache.
    pub stale_listings: u64,
    /// Lookups by name a broker was answered with a version another broker
    /// had replaced (`SimVolume::set_attr_cache`).
    pub stale_file_views: u64,
    /// Files a cleaning replaced that were cut before their removal
    /// (`SegmentFile::free_tail`): a crash then may leave one cut.
    pub tails_freed: u64,
    /// Whether the seed buggifies, and what its points did.
    pub buggifying: bool,
    pub buggify: BuggifyStats,
    pub simulated: Duration,
    /// From the end of the faults to the last liveness check: at most
    /// [`LIVENESS_BOUND`].
    pub settled: Duration,
    /// The vacuity gates this seed fell short of, each with its counts.
    pub vacuous: Vec<String>,
    /// Equal between two runs of a seed iff they behaved the same.
    pub fingerprint: u64,
}

impl SeedReport {
    /// The counters a batch of seeds adds up in its summary
    /// (`crate::batch`), by name: what the seeds did and what was done to
    /// them. Zero for a workload the seed did not run.
    pub fn tallies(&self) -> Vec<(&'static str, u64)> {
        let count = |n: usize| n as u64;
        let (f, t, e, g) = (&self.faults, &self.txns, &self.eos, &self.groups);
        vec![
            ("multi-broker seeds", u64::from(self.params.multi_broker())),
            ("broker crashes", f.crashes),
            ("power cuts", f.power_cuts),
            ("torn crashes", f.torn_crashes),
            ("process kills", f.process_kills),
            (
                "process kills that kept unsynced data",
                f.process_kills_with_unsynced,
            ),
            (
                "power losses after a process kill",
                f.power_losses_after_process_kills,
            ),
            ("fsync failures", f.fsync_failures),
            ("clogged links", f.clogs),
            ("volume partitions", f.volume_partitions),
            (
                "host crashes that lost unsynced writes",
                f.host_crashes_with_unsynced,
            ),
            ("stale listings answered", self.stale_listings),
            ("stale file versions read", self.stale_file_views),
            (
                "replaced segment files cut before removal",
                self.tails_freed,
            ),
            ("ownership takeovers", self.claims.takeovers),
            ("records acknowledged", count(self.records_acked)),
            ("acks=1 records acknowledged", self.low_acks.leader_acked),
            (
                "acks=1 records lost by a power loss",
                self.low_acks.leader_lost,
            ),
            (
                "acks=0 records in the final log",
                self.low_acks.unacknowledged_found,
            ),
            (
                "produce requests for several partitions",
                self.multi_partition_requests,
            ),
            ("produce requests for two topics", self.multi_topic_requests),
            (
                "records of the twin topic acknowledged",
                count(self.twin_records_acked),
            ),
            (
                "records of the twin topic fetched during the run",
                self.twin_records_fetched,
            ),
            (
                "aborted-index entries checked against their log",
                self.aborted_index_entries,
            ),
            (
                "gate admissions held to another broker's gate",
                self.one_owner.compared,
            ),
            (
                "acks=all batches given up, outcome unknown",
                self.outcomes.batches_unknown,
            ),
            (
                "of their records, in the final log",
                self.outcomes.unknown_found,
            ),
            (
                "acks=all batches given up, never sent",
                self.outcomes.batches_never_sent,
            ),
            (
                "seeds that delete records",
                u64::from(self.params.retention.is_some()),
            ),
            ("DeleteRecords acknowledged", self.retention.deletes_acked),
            (
                "records deleted as asked",
                self.retention.deleted_by_request,
            ),
            (
                "records aged out by retention.ms",
                self.retention.deleted_by_age,
            ),
            (
                "poll answers compared with the final log",
                self.polls.answers_compared,
            ),
            ("polled offsets checked", self.polls.offsets_checked),
            (
                "poll seeks back to a committed offset",
                self.polls.seeks_back,
            ),
            ("idempotent resends", self.idem.resends),
            (
                "InitProducerId answers treated as lost",
                self.idem.inits_lost,
            ),
            (
                "InitProducerId requests never answered",
                self.idem.inits_unknown,
            ),
            ("duplicates confirmed", self.idem.duplicates_confirmed),
            (
                "late old-epoch batches refused",
                self.idem.stale_epochs_refused,
            ),
            (
                "retries appended again after an expiry",
                self.idem.appended_again_after_expiry,
            ),
            (
                "sequence errors after an expiry",
                self.idem.sequence_errors_after_expiry,
            ),
            ("transactions committed", t.commits_acked),
            ("transactions aborted", t.aborts_acked),
            ("transactions fenced", t.fenced),
            ("zombie producers", t.zombies),
            ("EndTxn retries", t.end_retries),
            ("transactions left open at the stop", t.left_to_reaper),
            ("of them aborted by the reaper", t.reaped_after_stop),
            ("transactions ended at version 2", t.v2_ends),
            (
                "read_uncommitted records past the last stable offset",
                t.uncommitted_read_past_the_lso,
            ),
            (
                "transactional records read uncommitted at the end",
                t.final_uncommitted_records,
            ),
            (
                "of them of transactions that did not commit",
                t.final_uncommitted_not_committed,
            ),
            (
                "aborted batches dropped by read_committed",
                t.aborted_batches_dropped + t.final_aborted_batches_dropped,
            ),
            (
                "read_committed answers with open data held back",
                t.open_data_hidden,
            ),
            ("transactional grant pairs compared", t.grant_pairs_compared),
            ("EOS transactions committed", e.commits_acked),
            ("EOS transactions aborted", e.aborts_acked),
            (
                "EOS offset observations during a commit",
                e.observations_in_flight,
            ),
            (
                "EOS output records read uncommitted, not committed",
                e.final_uncommitted_not_committed,
            ),
            (
                "EOS input copies appended after the drain",
                e.late_input_copies,
            ),
            (
                "compacted topics",
                u64::from(self.params.compaction.is_some()),
            ),
            (
                "compacted reads that showed cleaning",
                self.compact.reads_with_gaps,
            ),
            ("group generations", count(self.generations)),
            ("group member crashes", g.member_crashes),
            ("zombie members", g.zombies),
            (
                "zombie commits refused, checked invisible",
                g.zombie_refusals_checked,
            ),
            (
                "zombie commits accepted in their generation",
                g.zombie_commits_accepted,
            ),
            ("per-epoch files with one writer", self.writers.epoch_files),
            ("seeds that buggify", u64::from(self.buggifying)),
            (
                "seeds settled over a minute after the faults",
                u64::from(self.settled > Duration::from_secs(60)),
            ),
            ("fsyncs", self.syncs),
        ]
    }
}

impl fmt::Display for SeedReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = &self.params;
        write!(
            f,
            "seed {}: ok | acked {} records, final log {} ({} duplicates), {} abandoned batches, {} produce errors, {} fetched | ",
            self.seed,
            self.records_acked,
            self.final_records,
            self.duplicates,
            self.batches_abandoned,
            self.produce_errors,
            self.records_fetched,
        )?;
        let o = &self.polls;
        write!(
            f,
            "polls: {} consumers, {} answers ({} compared, {} began in the batch below, {} above the offset asked), {} offsets checked, {} absent from the final log, {} seeks to a committed offset ({} back), {} resets | ",
            o.consumers,
            o.answers,
            o.answers_compared,
            o.began_below,
            o.began_above,
            o.offsets_checked,
            o.offsets_absent,
            o.seeks_committed,
            o.seeks_back,
            o.resets,
        )?;
        if self.buggifying {
            let fires: Vec<String> = self
                .buggify
                .iter()
                .map(|(s, n)| format!("{} {n}", s.name()))
                .collect();
            write!(f, "buggify: fired at {} | ", fires.join(", "))?;
        }
        if p.idempotent_producers > 0 {
            let i = &self.idem;
            write!(
                f,
                "idempotent: {} batches acked, {} resends, {} duplicates confirmed ({} answers lost), {} sequence errors, {} resets ({} epoch bumps, {} late old-epoch batches refused, {} batches abandoned), {} pids from {} blocks, {} retries appended again and {} sequence errors after an expiry | ",
                i.batches_acked,
                i.resends,
                i.duplicates_confirmed,
                i.answers_lost,
                i.sequence_errors,
                i.resets,
                i.epoch_bumps,
                i.stale_epochs_refused,
                i.batches_abandoned,
                i.pids_granted,
                self.pid_blocks,
                i.appended_again_after_expiry,
                i.sequence_errors_after_expiry,
            )?;
        }
        if p.runs_plain_at(Acks::Leader) || p.runs_plain_at(Acks::None) {
            let l = &self.low_acks;
            write!(
                f,
                "low acks: acks=1 {} acked ({} kept, {} lost by a power loss, {} deleted, {} records read), acks=0 {} of {} in the final log ({} read), {} records within their send counts | ",
                l.leader_acked,
                l.leader_kept,
                l.leader_lost,
                l.leader_deleted,
                l.leader_read,
                l.unacknowledged_found,
                l.unacknowledged_sent,
                l.unacknowledged_read,
                l.sends_compared,
            )?;
        }
        if let Some(r) = &p.retention {
            let d = &self.retention;
            write!(
                f,
                "retention: {} DeleteRecords ({} acked, {} refused, {} unknown; every {} ms), {} log starts checked ({} above 0), {} resets to the earliest offset, {} records deleted as asked, {} aged out (retention.ms {}), final logs start at {} in all | ",
                d.deletes_sent,
                d.deletes_acked,
                d.deletes_refused,
                d.deletes_unknown,
                r.delete_every_ms,
                d.starts_checked,
                d.starts_above_zero,
                d.resets,
                d.deleted_by_request,
                d.deleted_by_age,
                r.retention_ms,
                d.final_start_total,
            )?;
        }
        if p.group_members > 0 {
            let g = &self.groups;
            write!(
                f,
                "group: {} generations, {} joins, {} commits acked ({} refused, {} unknown), {} offsets read after a restart, {} member crashes, {} leaves, {} consumed | ",
                self.generations,
                g.joins,
                g.commits_acked,
                g.commits_refused,
                g.commits_unknown,
                g.offsets_read_after_restart,
                g.member_crashes,
                g.member_leaves,
                g.records_consumed,
            )?;
            if p.group_zombie_percent > 0 {
                write!(
                    f,
                    "zombie members: {} ({} %), {} commits, {} refused ({} checked invisible), {} accepted in their generation, {} unknown | ",
                    g.zombies,
                    p.group_zombie_percent,
                    g.zombie_commits_sent,
                    g.zombie_commits_refused,
                    g.zombie_refusals_checked,
                    g.zombie_commits_accepted,
                    g.zombie_commits_unknown,
                )?;
            }
        }
        if p.txn_producers > 0 {
            let t = &self.txns;
            write!(
                f,
                "txn: {} begun, {} committed ({} commits unknown, {} of them found committed), {} aborted ({} acked, {} fenced, {} abandoned), {} zombies, {} fences seen, {} inits, {} produce retries, {} refusals, {} EndTxn retries, {} ended at version 2, {} records read during the run, {} at the end, aborted batches dropped {} + {} at the end, {} answers with open data held back, {} grant pairs compared, read_uncommitted {} records during the run ({} past the last stable offset) and {} at the end ({} not committed, {} cleaned away), settled {} ms after the stop ({} left open, {} of them aborted by the reaper) | ",
                t.begun,
                t.commits_acked,
                t.commits_unknown,
                t.unknown_found_committed,
                t.aborts_acked + t.fenced + t.abandoned,
                t.aborts_acked,
                t.fenced,
                t.abandoned,
                t.zombies,
                t.fences_seen,
                t.inits,
                t.produce_retries,
                t.produce_refusals,
                t.end_retries,
                t.v2_ends,
                t.records_read_during_run,
                t.final_records,
                t.aborted_batches_dropped,
                t.final_aborted_batches_dropped,
                t.open_data_hidden,
                t.grant_pairs_compared,
                t.uncommitted_read_during_run,
                t.uncommitted_read_past_the_lso,
                t.final_uncommitted_records,
                t.final_uncommitted_not_committed,
                t.uncommitted_cleaned_away,
                t.settled_ms,
                t.left_to_reaper,
                t.reaped_after_stop,
            )?;
        }
        if p.eos {
            let e = &self.eos;
            write!(
                f,
                "eos: {} input records, {} begun, {} committed ({} unknown), {} aborted, {} fenced, {} stalls ({} zombies), {} inits, {} resumes, {} unstable, {} records transformed, {} offset observations ({} during a commit), {} output records ({} acknowledged; at read_uncommitted {}, {} of them not committed) | ",
                e.input_acked,
                e.begun,
                e.commits_acked,
                e.commits_unknown,
                e.aborts_acked,
                e.fenced,
                e.stalls,
                e.zombies,
                e.inits,
                e.resumes,
                e.unstable,
                e.records_transformed,
                e.observations,
                e.observations_in_flight,
                e.final_records,
                e.outputs_acked,
                e.final_uncommitted_records,
                e.final_uncommitted_not_committed,
            )?;
        }
        if let Some(d) = &p.compaction {
            let c = &self.compact;
            write!(
                f,
                "compact: {} records acked, {} reads, {} of them with records cleaned away, {} absences \
                 ({} keys, {} % tombstones, codec {}, segment {} B / {} ms, dirty ratio 0.{:02}, delete retention {} ms, lag {} ms, cleaner every {} ms) | ",
                c.acked,
                c.reads,
                c.reads_with_gaps,
                c.removed,
                d.keys,
                d.tombstone_percent,
                d.codec,
                d.segment_bytes,
                d.segment_ms,
                d.dirty_ratio_percent,
                d.delete_retention_ms,
                d.min_lag_ms,
                d.cleaner_backoff_ms,
            )?;
        }
        if p.multi_broker() {
            let c = &self.cluster;
            let moved = c.max_epoch_seen > 0 || c.leader_changes_seen > 0;
            // Seeds whose coordinator workloads never saw their
            // coordinator move say so, and the run counts them.
            let coordinated = p.group_members > 0 || p.txn_producers > 0 || p.eos;
            let coordinator_moved = !coordinated || c.coordinator_moves > 0;
            write!(
                f,
                "cluster: {} brokers (lease {} ms), {}{} leader changes seen, max epoch {}, {} takeovers and {} releases on the volume, {} redirects, {} metadata answers ({} leaderless), {} acks checked against their epoch's holder ({} duplicates answered by a later leader), {} coordinator lookups ({}{} moves seen), {} volume partitions ({} operations failed, {} ran late), {} stale listings (cached up to {} ms), {} stale file versions read (up to {} ms after their replacement), {} host crashes lost unsynced writes, {} per-epoch files with one writer ({} claims, {} truncated by another) | ",
                p.brokers,
                p.lease_ms,
                if moved { "" } else { "NO MOVE, " },
                c.leader_changes_seen,
                c.max_epoch_seen,
                self.claims.takeovers,
                self.claims.releases,
                c.redirects,
                c.metadata_answers,
                c.leaderless_answers,
                c.acks_checked,
                c.duplicates_across_epochs,
                c.coordinator_lookups,
                if coordinator_moved {
                    ""
                } else {
                    "NO COORDINATOR MOVE, "
                },
                c.coordinator_moves,
                self.faults.volume_partitions,
                self.volume_unreachable_failures,
                self.volume_late_io,
                self.stale_listings,
                listing_cache_ms(p),
                self.stale_file_views,
                attr_cache_ms(p),
                self.faults.host_crashes_with_unsynced,
                self.writers.epoch_files,
                self.writers.claims,
                self.writers.foreign_truncations,
            )?;
        }
        if !self.vacuous.is_empty() {
            write!(f, "VACUOUS: {} | ", self.vacuous.join("; "))?;
        }
        write!(
            f,
            "{} crashes ({} power cuts, {} fsync failures, {} torn: {} unsynced bytes dropped, {} kept, {} zeroed; {} process kills, {} kept unsynced data ({} bytes), {} followed by a power loss), {} clogs, {} fsyncs | \
             {} partitions, {} producers ({} idempotent, {} in flight), {} group members, segment {} B / {} ms | {:?} simulated, settled {:?} after the faults | fingerprint {:016x}",
            self.faults.crashes,
            self.faults.power_cuts,
            self.faults.fsync_failures,
            self.faults.torn_crashes,
            self.faults.unsynced_bytes_dropped,
            self.faults.unsynced_bytes_kept,
            self.faults.bytes_zeroed,
            self.faults.process_kills,
            self.faults.process_kills_with_unsynced,
            self.faults.unsynced_bytes_kept_by_process_kills,
            self.faults.power_losses_after_process_kills,
            self.faults.clogs,
            self.syncs,
            p.partitions,
            p.producers,
            p.idempotent_producers,
            p.max_in_flight,
            p.group_members,
            p.segment_bytes,
            p.segment_ms.0,
            self.simulated,
            self.settled,
            self.fingerprint,
        )
    }
}

/// Broker failures the broker node itself reports (it cannot panic the
/// run: a failed start must show up in the report with its cause).
type BrokerErrors = Arc<Mutex<Vec<String>>>;

/// The broker node's main task, run again on every restart. `id`: the
/// broker's index (its volume link may be cut).
async fn run_broker(
    id: usize,
    config: BrokerConfig,
    volume: SimVolume,
    env: Env,
    errors: BrokerErrors,
    live: LiveBrokers,
) {
    let injected_before = volume.stats().injected_faults;
    let report = |what: String| {
        // A broker that cannot start because the volume is gone (a power
        // cut) or failing (an injected error) does the right thing by not
        // starting. Any other failure to start is a bug.
        if !volume.is_frozen() && volume.stats().injected_faults == injected_before {
            errors.lock().unwrap_or_else(|p| p.into_inner()).push(what);
        }
    };
    let listener = match tokio::net::TcpListener::bind(config.listen).await {
        Ok(l) => l,
        Err(e) => return report(format!("cannot listen on {}: {e}", config.listen)),
    };
    let broker = loop {
        match Broker::open(config.clone(), Arc::new(volume.clone()), env.clone()) {
            Ok(b) => break b,
            // Cut off from the volume: a broker cannot start, and its
            // supervisor starts it again once the volume answers.
            Err(_) if volume.is_unreachable(id) => {
                let mut cut = volume.watch_unreachable();
                let _ = cut.wait_for(|c| !c.contains(&id)).await;
            }
            Err(e) => return report(format!("Broker::open failed: {e}")),
        }
    };
    live.lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(id, Arc::downgrade(&broker));
    tokio::spawn(broker.clone().run_retention());
    tokio::spawn(broker.clone().run_cleaner());
    kaas_net::server::serve(broker, listener, std::future::pending()).await;
}

/// Broker `id`'s address: the single broker keeps 10.0.0.1; in a
/// multi-broker seed broker `i` is 10.0.1.(i+1), each its own node.
pub fn broker_addr(params: &SimParams, id: usize) -> SocketAddr {
    if params.multi_broker() {
        SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 1, 1 + id as u8)), 9092)
    } else {
        BROKER_ADDR
    }
}

fn broker_config(params: &SimParams, id: usize) -> BrokerConfig {
    let mut config = BrokerConfig::new(broker_addr(params, id));
    if params.multi_broker() {
        config.broker_id = id as i32;
        config.lease = LeaseBounds {
            lease_ms: params.lease_ms,
            clock_skew_ms: CLOCK_SKEW_BOUND_MS,
            volume_staleness_ms: params.volume_staleness_bound_ms,
        };
    }
    config.default_partitions = params.partitions;
    config.log = LogDefaults {
        segment_bytes: params.segment_bytes,
        roll_ms: params.segment_ms.0,
        roll_jitter_ms: params.segment_ms.1,
        // Nothing may be deleted behind the checker's back.
        retention_ms: -1,
        retention_bytes: -1,
        ..LogDefaults::default()
    };
    if let Some(c) = params.compaction {
        config.log.cleaner_backoff_ms = c.cleaner_backoff_ms;
    }
    // The main topic's own retention.ms (CreateTopics, `retention`) must
    // act within the run; every other topic keeps the -1 above.
    if let Some(r) = params.retention {
        config.log.retention_check_interval_ms = r.check_interval_ms;
    }
    // Short sessions and rebalance delays, so that rebalances happen within
    // the simulated minute.
    config.group.min_session_timeout_ms = 100;
    config.group.initial_rebalance_delay_ms = params.initial_rebalance_delay_ms;
    // The reaper and the marker reconcile run every 100 ms to 1 s, so that
    // transactions past their timeout are aborted, and prepared ones
    // completed, within the run, and the reaper races the producers.
    config.txn.abort_timed_out_interval_ms = params.txn_timer_ms;
    if params.txn_id_expiration_ms > 0 {
        config.txn.id_expiration_ms = params.txn_id_expiration_ms;
        config.txn.remove_expired_interval_ms = params.txn_timer_ms;
    }
    // Partitions forget idle producers within the run (expiry runs with
    // retention's periodic pass).
    if params.producer_id_expiration_ms > 0 {
        config.producer_id_expiration_ms = params.producer_id_expiration_ms;
        config.log.retention_check_interval_ms = config.log.retention_check_interval_ms.min(250);
    }
    config
}

/// A uniformly random duration in `[0, max]`, microsecond grained.
fn random_up_to(max: Duration) -> Duration {
    let max = u64::try_from(max.as_micros()).unwrap_or(u64::MAX);
    Duration::from_micros(thread_rng().gen_range(0..=max))
}

/// How a crash is brought about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CrashKind {
    /// Kill at a random moment: between requests, or while an fsync is
    /// in flight (the volume gives fsyncs a simulated duration).
    Timed,
    /// Power cut at an exact volume operation: lands between an append and
    /// its fsync, between a segment and its index, inside recovery.
    PowerCut,
    /// An fsync fails (its bytes silently lost, as on Linux), the broker
    /// keeps running for a while, then dies.
    FsyncFailure,
}

/// Arms the volume's fault hook to fail the `n`-th fsync from now that
/// has data to sync, and returns a receiver that changes when it has.
/// With `nearly_full` set, only an fsync of a segment near `segment_bytes`
/// counts: that is where a roll fsyncs the old segment, a different code
/// path from the group-commit flusher.
fn arm_fsync_failure(
    volume: &SimVolume,
    n: u64,
    nearly_full: Option<u64>,
) -> watch::Receiver<bool> {
    let (fired, rx) = watch::channel(false);
    let mut left = n;
    volume.set_fault_hook(Some(Box::new(move |c| {
        let aimed = c.point == FaultPoint::Sync
            && c.unsynced > 0
            && matches!(layout::classify_path(c.path), layout::Entry::Segment(_))
            && nearly_full.is_none_or(|segment| c.len * 4 >= segment * 3);
        if !aimed || *fired.borrow() {
            return None;
        }
        if left > 0 {
            left -= 1;
            return None;
        }
        fired.send_replace(true);
        Some(std::io::Error::other("simulated EIO on fsync"))
    })));
    rx
}

/// Whether the run already did the work that only crashes make possible
/// (a committed offset that the next restart must keep, producer ids from
/// two broker incarnations), and enough of the rest.
fn crash_gates_met(params: &SimParams, shared: &Shared) -> bool {
    if shared.history().acked_records() < MIN_ACKED_RECORDS {
        return false;
    }
    let group = params.group_members == 0
        || shared.groups().reads_after_restart() >= MIN_OFFSETS_READ_AFTER_RESTART;
    // A member that came and went must be followed by a second generation
    // (the final gate). With several brokers a member's crash late in the
    // fault phase, with its partitions given to nobody, left one
    // generation (seed 169); the faults go on until a rebalance happened.
    // Multi-broker seeds only, so single-broker ones run as they did.
    let generations = !params.multi_broker() || params.group_members == 0 || {
        let g = shared.groups();
        g.stats.member_crashes + g.stats.member_leaves == 0 || g.generations() >= MIN_GENERATIONS
    };
    // A seed whose zombies woke goes on until one was fenced; the final
    // read then checks that refusal (`MIN_ZOMBIE_REFUSALS_CHECKED`).
    let zombies = params.group_members == 0 || {
        let g = shared.groups();
        g.stats.zombies == 0 || g.stats.zombie_commits_refused > 0
    };
    let idempotent =
        params.idempotent_producers == 0 || shared.history().pid_blocks() >= MIN_PID_BLOCKS;
    let txns = params.txn_producers == 0 || {
        let t = shared.txns();
        t.stats.commits_acked >= MIN_TXN_COMMITS
            && t.aborted() >= MIN_TXN_ABORTS
            && (params.txn_zombie_percent == 0 || t.stats.fences_seen >= MIN_TXN_FENCES)
    };
    let eos = !params.eos || {
        let e = shared.eos().stats;
        e.commits_acked >= MIN_EOS_COMMITS
            && e.resumes >= MIN_EOS_RESUMES
            && e.observations >= MIN_EOS_OBSERVATIONS
    };
    // A seed that deletes goes on until deletions were acknowledged and an
    // answer showed a log start above 0.
    let deletes = params.retention.is_none_or(|r| {
        let d = shared.history().retention.stats;
        (r.delete_every_ms == 0 || d.deletes_acked >= MIN_DELETES_ACKED)
            && d.starts_above_zero >= MIN_LOG_STARTS_CHECKED
    });
    group && generations && zombies && idempotent && txns && eos && deletes
}

/// How stale a broker's listings may be: the seed's draw, or
/// `KAAS_SIM_LISTING_CACHE_MS` to break the brokers' staleness assumption
/// on purpose (a mutation run: do the checkers notice? docs/simulation.md).
fn listing_cache_ms(params: &SimParams) -> u64 {
    std::env::var("KAAS_SIM_LISTING_CACHE_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(params.listing_cache_ms)
}

/// How long a broker may read a file another replaced as it was: the
/// seed's draw, or `KAAS_SIM_ATTR_CACHE_MS` to break the brokers'
/// staleness assumption on purpose (a mutation run, as
/// [`listing_cache_ms`]).
fn attr_cache_ms(params: &SimParams) -> u64 {
    std::env::var("KAAS_SIM_ATTR_CACHE_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(params.attr_cache_ms)
}

/// Kills and restarts the broker at seeded moments until `fault_phase`
/// has passed (longer if `crash_gates_met` says so, up to three times as
/// long),
/// wiping the volume's unsynced data at each crash. Leaves the broker
/// running.
async fn drive_faults(
    handle: &Handle,
    broker: NodeId,
    volume: &SimVolume,
    params: &SimParams,
    shared: &Shared,
    buggifier: &Buggifier,
) -> FaultStats {
    let mut stats = FaultStats::default();
    let mut cuts = volume.watch_power_cuts();
    let end = Instant::now() + params.fault_phase;
    // A hostile schedule can keep the group or the idempotent producers
    // from doing what the gates ask (a rebalance needs several seconds
    // between crashes and clogs); such a seed runs its faults longer rather
    // than fail as vacuous.
    let hard_end = end + params.fault_phase * 2;
    // The last kill kept the page cache: the next may be a power loss soon
    // after the restart, before the broker synced what it read back.
    let mut after_process_kill = false;
    while Instant::now() < end || (Instant::now() < hard_end && !crash_gates_met(params, shared)) {
        let roll = thread_rng().gen_range(0..100);
        let kind = if roll < params.power_cut_percent {
            CrashKind::PowerCut
        } else if roll < params.power_cut_percent + params.fsync_failure_percent {
            CrashKind::FsyncFailure
        } else {
            CrashKind::Timed
        };
        // Drawn only after a process kill, so seeds without them draw as
        // before.
        let power_loss_soon = after_process_kill && thread_rng().gen_bool(0.5);
        // A buggify point may ask for the broker's crash at any moment:
        // it is killed at once, the point still holding it.
        let scheduled = async {
            match kind {
                CrashKind::PowerCut => {
                    // Sometimes armed at once (the cut then often lands in
                    // recovery), sometimes after the broker got going.
                    sleep(random_up_to(params.max_uptime / 2)).await;
                    let ops = thread_rng().gen_range(0..params.max_ops_before_cut);
                    cuts.borrow_and_update();
                    volume.power_cut_after(ops);
                    if timeout(FAULT_WAIT, cuts.changed()).await.is_ok() {
                        stats.power_cuts += 1;
                    } else {
                        volume.disarm_power_cut();
                    }
                }
                CrashKind::FsyncFailure => {
                    let nearly_full = thread_rng().gen_bool(0.5).then_some(params.segment_bytes);
                    let mut fired =
                        arm_fsync_failure(volume, thread_rng().gen_range(0..10), nearly_full);
                    if timeout(FAULT_WAIT, fired.wait_for(|f| *f)).await.is_ok() {
                        stats.fsync_failures += 1;
                        // Let the broker run on with the failed partition: it
                        // must not acknowledge anything that fsync covered.
                        sleep(random_up_to(params.max_uptime)).await;
                    }
                    volume.set_fault_hook(None);
                }
                CrashKind::Timed if power_loss_soon => {
                    // Long enough for recovery and a few requests, short
                    // enough that little was synced since.
                    sleep(params.max_uptime / 20 + random_up_to(params.max_uptime / 5)).await;
                }
                CrashKind::Timed => {
                    // At least a tenth of the maximum, so a seed with short
                    // uptimes still gets requests through.
                    sleep(params.max_uptime / 10 + random_up_to(params.max_uptime * 9 / 10)).await;
                }
            }
        };
        // `biased`: no draw from tokio's own rng, which every other
        // `select!` of the seed shares.
        let buggified = tokio::select! {
            biased;
            () = scheduled => false,
            () = buggifier.crash_wanted(0) => true,
        };
        if buggified {
            volume.disarm_power_cut();
            volume.set_fault_hook(None);
        }
        let kill = Kill {
            at_a_point: buggified,
            power_loss_only: kind != CrashKind::Timed || power_loss_soon,
        };
        let kept =
            crash_and_restart(handle, broker, volume, params, shared, kill, &mut stats).await;
        if after_process_kill && !kept {
            stats.power_losses_after_process_kills += 1;
        }
        after_process_kill = kept;
    }
    // No point fires from now on; one that asked for a crash since the
    // last kill holds the broker until it is killed.
    if buggifier.stop(0) {
        let kill = Kill {
            at_a_point: true,
            power_loss_only: false,
        };
        crash_and_restart(handle, broker, volume, params, shared, kill, &mut stats).await;
    }
    stats
}

/// What a kill of a single-broker seed may do to the volume.
#[derive(Debug, Clone, Copy)]
struct Kill {
    /// A buggify point asked for it (it may tear the write the point
    /// followed).
    at_a_point: bool,
    /// It must be a power loss: a power cut froze the volume, a failed
    /// fsync left bytes that look clean in the page cache (a process kill
    /// would let the restarted broker read and trust them, which kaas does
    /// not defend against: docs/simulation.md), or it is the power loss
    /// due after a process kill.
    power_loss_only: bool,
}

/// Whether crashes at buggify points tear the writes they follow (unless
/// `KAAS_SIM_TEAR_AT_POINTS=0`).
fn tear_at_points() -> bool {
    std::env::var("KAAS_SIM_TEAR_AT_POINTS").map_or(true, |v| v != "0")
}

/// Kills the broker of a single-broker seed and restarts it after a
/// seeded downtime. The kill is a power failure (the volume loses, or
/// tears, every unsynced byte) or, with the seed's `process_kill_percent`
/// unless `kill` rules it out, a kill of the process alone that keeps the
/// page cache. A crash a buggify point asked for (`at_a_point`) tears,
/// half the time, the very writes the point followed, inside themselves
/// (`KAAS_SIM_TEAR_AT_POINTS=0` turns that off). Returns whether the page
/// cache was kept.
async fn crash_and_restart(
    handle: &Handle,
    broker: NodeId,
    volume: &SimVolume,
    params: &SimParams,
    shared: &Shared,
    kill: Kill,
    stats: &mut FaultStats,
) -> bool {
    handle.kill(broker);
    shared.incarnation.fetch_add(1, Relaxed);
    let mid_write = kill.at_a_point && tear_at_points() && thread_rng().gen_bool(0.5);
    let process_kill = !mid_write && !kill.power_loss_only && draws_a_process_kill(params);
    if process_kill {
        stats.process_killed(&volume.kill_process());
    } else {
        // Counted before the volume drops anything: an acks=1 record sent
        // before this may be lost, one sent after may not.
        for plain in [PlainTopic::Main, PlainTopic::Twin] {
            shared.history_of(plain).low_acks.power_lost();
        }
        let torn = mid_write || thread_rng().gen_range(0..100) < params.torn_percent;
        let report: CrashReport = if mid_write {
            volume.crash_tearing_last_writes(&mut thread_rng())
        } else if torn {
            volume.crash_torn(&mut thread_rng())
        } else {
            volume.crash()
        };
        stats.crashes += 1;
        stats.power_failed(torn, &report);
    }
    sleep(random_up_to(params.max_downtime)).await;
    handle.restart(broker);
    process_kill
}

/// Whether a kill is of the process alone, with the seed's share. Draws
/// nothing in a seed without process kills, so its schedule is as before.
fn draws_a_process_kill(params: &SimParams) -> bool {
    params.process_kill_percent > 0 && thread_rng().gen_range(0..100) < params.process_kill_percent
}

/// One broker of a multi-broker seed, as its fault driver sees it.
struct Host<'a> {
    handle: &'a Handle,
    node: NodeId,
    index: usize,
    volume: &'a SimVolume,
    shared: &'a Shared,
    /// Held (shared) from kill to restart, so a power cut finds every
    /// broker up.
    gate: &'a tokio::sync::RwLock<()>,
    stats: &'a Mutex<FaultStats>,
}

impl Host<'_> {
    /// Its host dies (its unsynced writes lost, or torn) or, with the
    /// seed's `process_kill_percent`, its process alone (its dirty pages
    /// written back on close, unsynced), and the broker
    /// restarts after a short outage or a long one (one to three leases:
    /// long enough for the others to take its items over).
    async fn crash_and_restart(&self, params: &SimParams, long_outage: Duration) {
        let _down = self.gate.read().await;
        self.handle.kill(self.node);
        self.shared.incarnation.fetch_add(1, Relaxed);
        if draws_a_process_kill(params) {
            let report = self.volume.kill_process_on_nfs(self.index);
            let mut s = self.stats.lock().unwrap_or_else(|p| p.into_inner());
            s.process_killed(&report);
        } else {
            self.host_crashed(params);
        }
        let downtime = if thread_rng().gen_bool(0.5) {
            long_outage + random_up_to(long_outage * 2)
        } else {
            random_up_to(params.max_downtime)
        };
        sleep(downtime).await;
        self.handle.restart(self.node);
    }

    /// Its host died: its unsynced writes are lost, or with the seed's
    /// torn share a written-back prefix of them survives.
    fn host_crashed(&self, params: &SimParams) {
        let torn = thread_rng().gen_range(0..100) < params.torn_percent;
        let report = if torn {
            self.volume.crash_host(self.index, Some(&mut thread_rng()))
        } else {
            self.volume.crash_host(self.index, None)
        };
        let mut s = self.stats.lock().unwrap_or_else(|p| p.into_inner());
        s.crashes += 1;
        s.host_crashes_with_unsynced += u64::from(report.files_with_unsynced > 0);
        s.unsynced_bytes_dropped += report.bytes_dropped;
        s.unsynced_bytes_kept += report.bytes_kept;
    }
}

/// Clogs the client-broker link now and then until `fault_phase` has
/// passed: requests and responses stall in flight, some past the client's
/// timeout, so clients retry requests the broker may already have applied.
/// With several brokers, each clog picks one broker's link.
async fn clog_links(client: NodeId, brokers: Vec<NodeId>, params: SimParams) -> u64 {
    let net = madsim::net::NetSim::current();
    let end = Instant::now() + params.fault_phase;
    let mut clogs = 0;
    while Instant::now() < end {
        sleep(Duration::from_millis(thread_rng().gen_range(100..=2_000))).await;
        if thread_rng().gen_range(0..100) >= params.clog_percent {
            continue;
        }
        let broker = if brokers.len() > 1 {
            brokers[thread_rng().gen_range(0..brokers.len())]
        } else {
            brokers[0]
        };
        let (a, b) = if thread_rng().gen_bool(0.5) {
            (client, broker)
        } else {
            (broker, client)
        };
        net.clog_link(a, b);
        clogs += 1;
        // Mostly short stalls; one in five outlasts the client's request
        // timeout, so the client gives up on a request the broker may still
        // apply when the link clears.
        let stall = if thread_rng().gen_ratio(1, 5) {
            10_000..=12_000
        } else {
            10..=2_000
        };
        sleep(Duration::from_millis(thread_rng().gen_range(stall))).await;
        net.unclog_link(a, b);
    }
    clogs
}

/// Kills and restarts the brokers of a multi-broker seed, each on its own
/// schedule, until `fault_phase` has passed (longer, up to three times, if
/// `crash_gates_met` says so), and now and then cuts the shared volume's
/// power under all of them. Leaves every broker running.
///
/// A broker crash is its host dying: what its NFS client had not written
/// back to the server (its unsynced appends) is lost, or with the seed's
/// torn percentage a prefix of it survives; the other brokers' data stays
/// (`SimVolume::crash_host`). Half of the outages are long enough (one to three leases and a
/// bit) for the other brokers to count the broker gone and take its
/// partitions over; the rest are short, and the broker comes back to its
/// own claims. A power cut of the volume is the whole cluster's power
/// failure: it fires at a random volume operation, every broker dies, the
/// volume loses (or tears) every unsynced byte, and all restart.
async fn drive_cluster_faults(
    handle: &Handle,
    brokers: &[NodeId],
    volume: &SimVolume,
    params: &SimParams,
    shared: &Arc<Shared>,
    buggifier: &Arc<Buggifier>,
) -> FaultStats {
    let stats = Arc::new(Mutex::new(FaultStats::default()));
    // Held (shared) by a broker's kill-to-restart, (exclusively) by a
    // power cut, so that a cut finds every broker up and leaves every
    // broker up.
    let gate = Arc::new(tokio::sync::RwLock::new(()));
    let end = Instant::now() + params.fault_phase;
    let hard_end = end + params.fault_phase * 2;
    let long_outage = params.long_outage();
    let mut tasks = Vec::new();
    for (index, &node) in brokers.iter().enumerate() {
        let (handle, gate, stats, shared, volume, buggifier) = (
            handle.clone(),
            gate.clone(),
            stats.clone(),
            shared.clone(),
            volume.clone(),
            buggifier.clone(),
        );
        let params = *params;
        tasks.push(tokio::spawn(async move {
            let host = Host {
                handle: &handle,
                node,
                index,
                volume: &volume,
                shared: &shared,
                gate: &gate,
                stats: &stats,
            };
            while Instant::now() < end
                || (Instant::now() < hard_end && !crash_gates_met(&params, &shared))
            {
                let uptime = params.max_uptime / 10 + random_up_to(params.max_uptime * 9 / 10);
                // A buggify point may ask for this broker's crash sooner
                // (`biased`: no draw from tokio's shared rng).
                tokio::select! {
                    biased;
                    () = sleep(uptime) => {}
                    () = buggifier.crash_wanted(index) => {}
                }
                host.crash_and_restart(&params, long_outage).await;
            }
            // No point fires from now on; one that asked for a crash since
            // the last kill holds the broker until it is killed.
            if buggifier.stop(index) {
                host.crash_and_restart(&params, long_outage).await;
            }
        }));
    }
    if params.power_cut_percent > 0 {
        let (handle, gate, stats, shared, volume) = (
            handle.clone(),
            gate.clone(),
            stats.clone(),
            shared.clone(),
            volume.clone(),
        );
        let (params, brokers) = (*params, brokers.to_vec());
        tasks.push(tokio::spawn(async move {
            let mut cuts = volume.watch_power_cuts();
            // Rare: one cut per quarter of the fault phase at most.
            loop {
                sleep(params.fault_phase / 4 + random_up_to(params.fault_phase / 4)).await;
                if Instant::now() >= end {
                    break;
                }
                let _all = gate.write().await;
                cuts.borrow_and_update();
                volume.power_cut_after(thread_rng().gen_range(0..params.max_ops_before_cut));
                if timeout(FAULT_WAIT, cuts.changed()).await.is_err() {
                    volume.disarm_power_cut();
                    continue;
                }
                for &node in &brokers {
                    handle.kill(node);
                }
                shared.incarnation.fetch_add(1, Relaxed);
                let torn = thread_rng().gen_range(0..100) < params.torn_percent;
                let report = if torn {
                    volume.crash_torn(&mut thread_rng())
                } else {
                    volume.crash()
                };
                {
                    let mut s = stats.lock().unwrap_or_else(|p| p.into_inner());
                    s.crashes += brokers.len() as u64;
                    s.power_cuts += 1;
                    s.power_failed(torn, &report);
                }
                sleep(random_up_to(params.max_downtime)).await;
                for &node in &brokers {
                    handle.restart(node);
                }
            }
        }));
    }
    if params.volume_partition_percent > 0 {
        let (volume, stats) = (volume.clone(), stats.clone());
        let (params, n) = (*params, brokers.len());
        tasks.push(tokio::spawn(async move {
            cut_volume_links(&volume, &params, n, end, &stats).await;
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    let stats = *stats.lock().unwrap_or_else(|p| p.into_inner());
    stats
}

/// Now and then (every two to six leases, with the seed's drawn chance)
/// cuts one broker off from the volume while its clients still reach it:
/// half the time for under half a lease (it keeps its claims), half the
/// time for one to three leases (its lease lapses and the others take its
/// items over; when the link heals it must find it was deposed). Its
/// volume operations fail meanwhile, or wait (see `SimIo`), and those that
/// waited complete late, after the link heals.
async fn cut_volume_links(
    volume: &SimVolume,
    params: &SimParams,
    brokers: usize,
    end: Instant,
    stats: &Mutex<FaultStats>,
) {
    let lease = Duration::from_millis(params.lease_ms as u64);
    let long_outage = params.long_outage();
    loop {
        sleep(lease * 2 + random_up_to(lease * 4)).await;
        if Instant::now() >= end {
            break;
        }
        if thread_rng().gen_range(0..100) >= params.volume_partition_percent {
            continue;
        }
        let broker = thread_rng().gen_range(0..brokers);
        let cut_for = if thread_rng().gen_bool(0.5) {
            random_up_to(lease / 2)
        } else {
            long_outage + random_up_to(long_outage * 2)
        };
        tracing::debug!(broker, ?cut_for, "volume link cut");
        volume.set_unreachable(broker, true);
        stats
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .volume_partitions += 1;
        sleep(cut_for).await;
        volume.set_unreachable(broker, false);
        tracing::debug!(broker, "volume link healed");
    }
}

/// What the claim files on the volume show at the end of a multi-broker
/// seed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClaimStats {
    /// Epochs above 0 won by a broker: takeovers (of a gone broker's
    /// partition, or of a released one).
    pub takeovers: u64,
    /// Epochs written as released by a broker placement moved a partition
    /// away from.
    pub releases: u64,
}

/// Every partition a live broker leads, but those of compacted topics
/// (whose cleaner removes aborted records, and their markers once that is
/// safe), held to the aborted index its own batches imply
/// (`aborted_index::check`). Returns the violations and how many entries
/// were compared.
async fn check_aborted_indexes(live: &LiveBrokers) -> (Vec<String>, u64) {
    let brokers: Vec<Arc<Broker>> = live
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .values()
        .filter_map(Weak::upgrade)
        .collect();
    let (mut problems, mut entries) = (Vec::new(), 0);
    for broker in brokers {
        for topic in broker.topics() {
            if cleanup_compacts(&topic.configs) {
                continue;
            }
            for index in 0..topic.partitions.len() as i32 {
                // Led elsewhere, or not open: its leader's turn.
                let Ok(partition) = broker.partition(&topic.name, index, -1) else {
                    continue;
                };
                match partition
                    .with_log(|log| Ok(aborted_index::check(log)))
                    .await
                {
                    Ok(Ok(compared)) => entries += compared as u64,
                    Ok(Err(e)) => problems.push(format!("{} partition {index}: {e}", topic.name)),
                    Err(_) => {}
                }
            }
        }
    }
    (problems, entries)
}

/// The final read of `plain` (each partition from its leader with several
/// brokers): its logs, and with several brokers its batches with their
/// leader epochs. A failure is one of `problems`, and the logs are empty.
async fn read_plain_topic(
    plain: PlainTopic,
    params: SimParams,
    client: &madsim::runtime::NodeHandle,
    brokers: &[SocketAddr],
    shared: &Arc<Shared>,
    deadline: Duration,
    problems: &mut Vec<String>,
) -> Option<(
    BTreeMap<i32, PartitionLog>,
    BTreeMap<i32, Vec<FetchedBatch>>,
)> {
    let read = if params.multi_broker() {
        client
            .spawn(workload::read_everything_routed(
                params,
                plain,
                brokers.to_vec(),
                shared.clone(),
                deadline,
            ))
            .await
    } else {
        client
            .spawn(workload::read_everything(
                params,
                plain,
                BROKER_ADDR,
                shared.clone(),
                deadline,
            ))
            .await
            .map(|r| r.map(|logs| (logs, BTreeMap::new())))
    };
    match read {
        Ok(Ok(read)) => Some(read),
        Ok(Err(e)) => {
            problems.push(e);
            None
        }
        Err(_) => {
            problems.push(format!("the final reader of {} died", plain.name()));
            None
        }
    }
}

/// Every partition's claim files: (partition, epoch) -> the broker that
/// holds it, and how many takeovers and releases they record.
fn read_claims(volume: &SimVolume, partitions: i32) -> (BTreeMap<(i32, i32), i32>, ClaimStats) {
    let mut holders = BTreeMap::new();
    let mut stats = ClaimStats::default();
    for p in 0..partitions {
        let dir = layout::partition_epochs_dir(workload::TOPIC, p);
        for name in volume.list(&dir).unwrap_or_default() {
            let Some(epoch) = layout::parse_epoch_file(&name) else {
                continue;
            };
            let Ok(Some(bytes)) =
                volume.read(&layout::partition_epoch_file(workload::TOPIC, p, epoch))
            else {
                continue;
            };
            // {"broker_id":N}
            let text = String::from_utf8_lossy(&bytes);
            let Some(broker) = text
                .split(|c: char| !(c.is_ascii_digit() || c == '-'))
                .find_map(|t| t.parse::<i32>().ok())
            else {
                continue;
            };
            if broker == kaas_core::cluster::RELEASED {
                stats.releases += 1;
            } else {
                holders.insert((p, epoch), broker);
                if epoch > 0 {
                    stats.takeovers += 1;
                }
            }
        }
    }
    (holders, stats)
}

/// Why a seed failed, with what is needed to understand it.
#[derive(Debug, Clone)]
pub struct SeedFailure {
    pub seed: u64,
    pub problems: Vec<String>,
    pub context: String,
}

impl fmt::Display for SeedFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "seed {} FAILED:", self.seed)?;
        for p in &self.problems {
            writeln!(f, "  - {p}")?;
        }
        write!(f, "{}", self.context)
    }
}

/// The first (partition, offset) where a final log is not dense.
fn first_hole(logs: &BTreeMap<i32, PartitionLog>) -> Option<(i32, i64)> {
    logs.iter().find_map(|(&p, log)| {
        // Dense from the log's first offset (its start, 0 unless records
        // were deleted).
        let first = log.first()?.0;
        let i = log
            .iter()
            .enumerate()
            .position(|(i, (offset, _))| *offset != first + i as i64)?;
        Some((p, first + i as i64))
    })
}

/// The batches stored around `offset` in a partition's segment files, read
/// straight from the volume: what recovery and fetches had to work with.
fn dump_batches(volume: &SimVolume, partition: i32, offset: i64) -> String {
    let dir = layout::partition_dir(workload::TOPIC, partition);
    let mut out = format!("batches of partition {partition} near offset {offset}:\n");
    for name in volume
        .list(&dir)
        .unwrap_or_default()
        .into_iter()
        .filter(|n| matches!(layout::classify(n), layout::Entry::Segment(_)))
    {
        let Ok(Some(data)) = volume.read(&format!("{dir}/{name}")) else {
            continue;
        };
        let mut batches = split_batches(data);
        for batch in batches.by_ref() {
            if (batch.base_offset() - offset).abs() <= 20 {
                let valid = batch
                    .validate()
                    .map_or_else(|e| e.to_string(), |()| "valid".into());
                let _ = writeln!(
                    out,
                    "  {name}: offsets {}..={} ({} bytes, {valid})",
                    batch.base_offset(),
                    batch.last_offset(),
                    batch.size()
                );
            }
        }
        if !matches!(batches.tail(), Tail::Clean) {
            let _ = writeln!(
                out,
                "  {name}: ends with {:?} at byte {}",
                batches.tail(),
                batches.position()
            );
        }
    }
    out
}

/// The low-acks gates the seed fell short of: a producer at acks=1 or
/// acks=0 whose records the checker never compared.
fn low_acks_shortfalls(params: &SimParams, stats: &LowAcksStats) -> Vec<String> {
    let mut short = Vec::new();
    if params.runs_plain_at(Acks::Leader) && stats.leader_acked < MIN_LEADER_ACKS {
        short.push(format!(
            "{} acks=1 acknowledgements checked (need {MIN_LEADER_ACKS})",
            stats.leader_acked
        ));
    }
    if params.runs_plain_at(Acks::None) && stats.unacknowledged_found < MIN_UNACKNOWLEDGED_FOUND {
        short.push(format!(
            "{} acks=0 records in the final log (need {MIN_UNACKNOWLEDGED_FOUND})",
            stats.unacknowledged_found
        ));
    }
    short
}

/// The deletion gates the seed fell short of.
fn retention_shortfalls(params: &SimParams, stats: &RetentionStats) -> Vec<String> {
    let mut short = Vec::new();
    let Some(r) = params.retention else {
        return short;
    };
    if r.delete_every_ms > 0 && stats.deletes_acked < MIN_DELETES_ACKED {
        short.push(format!(
            "{} DeleteRecords acknowledged (need {MIN_DELETES_ACKED})",
            stats.deletes_acked
        ));
    }
    if stats.starts_above_zero < MIN_LOG_STARTS_CHECKED {
        short.push(format!(
            "{} log starts above 0 checked (need {MIN_LOG_STARTS_CHECKED})",
            stats.starts_above_zero
        ));
    }
    if r.retention_ms >= 0 && stats.deleted_by_age < MIN_RECORDS_AGED_OUT {
        short.push(format!(
            "{} records aged out by retention.ms (need {MIN_RECORDS_AGED_OUT})",
            stats.deleted_by_age
        ));
    }
    short
}

/// Runs one seed to completion in the current madsim runtime.
pub async fn run_seed() -> Result<SeedReport, SeedFailure> {
    let handle = Handle::current();
    let seed = handle.seed();
    let started = Instant::now();
    let params = SimParams::draw(&mut thread_rng())
        .with_cluster(seed)
        .with_roll(seed)
        .with_compaction(seed)
        .with_retention(seed)
        .with_process_kills(seed)
        .with_acks(seed)
        .with_zombie_members(seed)
        .with_plain_requests(seed)
        .with_txn_timers(seed)
        .with_compression(seed)
        .with_producer_expiry(seed);
    // Expiries the brokers of an earlier run in this process recorded are
    // not this run's.
    kaas_core::coverage::clear_producer_expiries();
    let volume = SimVolume::new();
    let broker_errors: BrokerErrors = Arc::default();
    let live_brokers: LiveBrokers = Arc::default();
    let buggifier = Buggifier::new(seed, params.brokers);
    // With several brokers every gate's admission is held to the others'
    // gates at that instant (`one_owner`); one broker has nobody to meet.
    let one_owner = OneOwner::new(live_brokers.clone());
    let witness = if params.multi_broker() {
        Witness::with(one_owner.clone())
    } else {
        Witness::none()
    };

    let sync_latency = params.sync_latency;
    // Up to 5 s off true wall time, up to 200 ppm drift: a broker's
    // timestamps and deadlines must not depend on its clock being right.
    // (With several brokers the lease's clock-skew bound covers the drift.)
    let params_clock = (MAX_CLOCK_OFFSET_MS, MAX_DRIFT_PPM);
    let broker_nodes: Vec<_> = (0..params.brokers)
        .map(|id| {
            let config = broker_config(&params, id);
            let (volume, errors, buggifier, live, witness) = (
                volume.clone(),
                broker_errors.clone(),
                buggifier.clone(),
                live_brokers.clone(),
                witness.clone(),
            );
            let name = if params.multi_broker() {
                format!("broker-{id}")
            } else {
                "broker".to_string()
            };
            handle
                .create_node()
                .name(name)
                .ip(config.listen.ip())
                .init(move || {
                    // Each incarnation gets its own clock (a restarted
                    // machine reads its clock afresh) and fsync latencies.
                    let mut rng = thread_rng();
                    let clock = SimClock::new(
                        rng.gen_range(-params_clock.0..=params_clock.0),
                        rng.gen_range(-params_clock.1..=params_clock.1),
                    );
                    let mut io = SimIo::new(sync_latency, rng.gen());
                    if params.multi_broker() {
                        io = io.with_link(id, volume.watch_unreachable(), volume.late_io_counter());
                    }
                    let env = Env {
                        clock: Arc::new(clock),
                        io: Arc::new(io),
                        buggify: buggifier.points(id),
                        witness: witness.clone(),
                    };
                    run_broker(
                        id,
                        config.clone(),
                        volume.clone(),
                        env,
                        errors.clone(),
                        live.clone(),
                    )
                })
                .build()
        })
        .collect();
    let brokers: Vec<SocketAddr> = (0..params.brokers)
        .map(|id| broker_addr(&params, id))
        .collect();
    if params.multi_broker() {
        // Before any broker runs (nodes start at the next await): the
        // volume learns which broker issues each operation.
        let nodes: Vec<NodeId> = broker_nodes.iter().map(|n| n.id()).collect();
        volume.set_caller(Some(Box::new(move || {
            let node = madsim::plugin::node();
            nodes.iter().position(|&n| n == node)
        })));
        // Shared over NFS, whose server commits directory operations
        // before replying; one broker's volume is a local file system's,
        // where an entry is durable once its directory is synced.
        volume.set_entries_durable_at_once(true);
        let origin = tokio::time::Instant::now();
        let elapsed_ms = move || u64::try_from(origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        volume.set_listing_cache(listing_cache_ms(&params), Box::new(elapsed_ms));
        volume.set_attr_cache(attr_cache_ms(&params), Box::new(elapsed_ms));
    }
    let client = handle.create_node().name("client").ip(CLIENT_IP).build();

    let shared = Arc::new(Shared::default());
    let mut problems = Vec::new();
    // Events the seed's draw should have produced and did not: the seed's
    // checkers compared less than they could. Not a failure of the seed; the
    // batch bounds how many of its seeds may be vacuous
    // (`batch::BatchSummary::too_vacuous`).
    let mut vacuous: Vec<String> = Vec::new();
    if params.compaction.is_some() {
        let created = client
            .spawn(compact::create_topics(
                params,
                brokers.clone(),
                shared.clone(),
            ))
            .await;
        if created.is_err() {
            problems.push("the compacted topics' creator died".to_string());
        }
    }
    if params.retention.is_some() {
        // Before any producer's first request would auto-create the topic
        // with the defaults.
        let created = client
            .spawn(retention::create_topic(
                params,
                brokers.clone(),
                shared.clone(),
            ))
            .await;
        if created.is_err() {
            problems.push("the main topic's creator died".to_string());
        }
    }
    let plain = params.producers - params.idempotent_producers;
    let producers: Vec<_> = (0..params.producers)
        .map(|id| {
            if id < plain {
                client.spawn(workload::producer(
                    id,
                    params,
                    brokers.clone(),
                    shared.clone(),
                ))
            } else {
                client.spawn(idempotent::idempotent_producer(
                    id,
                    params,
                    brokers.clone(),
                    shared.clone(),
                ))
            }
        })
        .collect();
    for plain in [PlainTopic::Main, PlainTopic::Twin] {
        shared.history_of(plain).set_brokers(params.brokers as i32);
    }
    shared
        .txns()
        .set_ids_expire(params.txn_id_expiration_ms > 0);
    let deleter = client.spawn(retention::deleter(params, brokers.clone(), shared.clone()));
    let consumer = client.spawn(workload::consumer(params, brokers.clone(), shared.clone()));
    let txn_producers: Vec<_> = (0..params.txn_producers)
        .map(|slot| {
            client.spawn(txn::txn_producer(
                slot,
                params,
                brokers.clone(),
                shared.clone(),
            ))
        })
        .collect();
    // The transactional topic is tailed at both isolation levels.
    let mut txn_consumers = Vec::new();
    if params.txn_producers > 0 {
        for isolation in [Isolation::ReadCommitted, Isolation::ReadUncommitted] {
            let consumer = txn::txn_consumer(params, brokers.clone(), shared.clone(), isolation);
            txn_consumers.push((isolation, client.spawn(consumer)));
        }
    }
    let eos_tasks = params.eos.then(|| {
        (
            client.spawn(eos_input::eos_input_producer(
                params,
                brokers.clone(),
                shared.clone(),
            )),
            client.spawn(eos::eos_loop(params, brokers.clone(), shared.clone())),
            client.spawn(eos_observer::offset_observer(
                params,
                brokers.clone(),
                shared.clone(),
            )),
        )
    });
    let compact_tasks = params.compaction.is_some().then(|| {
        (
            client.spawn(compact::compact_producer(
                params,
                brokers.clone(),
                shared.clone(),
            )),
            client.spawn(compact::compact_reader(
                params,
                brokers.clone(),
                shared.clone(),
            )),
        )
    });
    let members: Vec<_> = (0..params.group_members)
        .map(|slot| {
            client.spawn(group_member::group_member(
                slot,
                params,
                brokers.clone(),
                shared.clone(),
            ))
        })
        .collect();

    let node_ids: Vec<NodeId> = broker_nodes.iter().map(|n| n.id()).collect();
    let clogger = handle.create_node().name("chaos").build().spawn(clog_links(
        client.id(),
        node_ids.clone(),
        params,
    ));
    let mut faults = if params.multi_broker() {
        drive_cluster_faults(&handle, &node_ids, &volume, &params, &shared, &buggifier).await
    } else {
        drive_faults(&handle, node_ids[0], &volume, &params, &shared, &buggifier).await
    };
    match clogger.await {
        Ok(clogs) => faults.clogs = clogs,
        Err(_) => problems.push("the link clogger died".to_string()),
    }

    // Liveness phase: no more faults. Producers finish their batches, the
    // consumer stops, and everything acknowledged must be readable; the
    // group (no more member churn) must consume and commit up to the end
    // of every partition.
    shared.faults_over.store(true, Relaxed);
    let liveness_started = Instant::now();
    // Each final step waits at most its own deadline and what is left of
    // the bound.
    let step_deadline =
        || LIVENESS_DEADLINE.min(LIVENESS_BOUND.saturating_sub(liveness_started.elapsed()));
    shared.stop_producing.store(true, Relaxed);
    for p in producers {
        if p.await.is_err() {
            problems.push("a producer task died".to_string());
        }
    }
    if deleter.await.is_err() {
        problems.push("the DeleteRecords actor died".to_string());
    }
    for p in txn_producers {
        if p.await.is_err() {
            problems.push("a transactional producer task died".to_string());
        }
    }
    // madsim retries a message sent into a clogged link with a backoff
    // that grows to 10 s, so a request may reach its broker that long
    // after the last clog cleared, after its producer gave up on it (seed
    // 28, once producers gave batches up: an append 4.4 s after the final
    // read began, which the group members still running then read). The
    // final reads wait until nothing can still be on its way.
    if faults.clogs > 0 {
        sleep(CLOGGED_DELIVERY_BOUND).await;
    }
    let compact_reader = match compact_tasks {
        Some((producer, reader)) => {
            if producer.await.is_err() {
                problems.push("the compacted topic's producer died".to_string());
            }
            Some(reader)
        }
        None => None,
    };
    let eos_tasks = match eos_tasks {
        Some((input, eos_loop, observer)) => {
            if input.await.is_err() {
                problems.push("the EOS input producer died".to_string());
            }
            Some((eos_loop, observer))
        }
        None => None,
    };
    shared.stop_fetching.store(true, Relaxed);
    if consumer.await.is_err() {
        problems.push("the consumer task died".to_string());
    }
    if let Some(r) = compact_reader {
        if r.await.is_err() {
            problems.push("the compacted topic's reader died".to_string());
        }
    }
    for (isolation, c) in txn_consumers {
        if c.await.is_err() {
            problems.push(format!(
                "the {} transactional consumer task died",
                isolation.name()
            ));
        }
    }
    // The input is final: the exactly-once loop drains it and stops, and
    // so does its observer.
    if let Some((eos_loop, observer)) = eos_tasks {
        if eos_loop.await.is_err() {
            problems.push("the exactly-once loop died".to_string());
            shared.eos_done.store(true, Relaxed);
        }
        if observer.await.is_err() {
            problems.push("the offset observer died".to_string());
        }
    }
    let txn_logs = if params.txn_producers > 0 {
        match client
            .spawn(txn::final_read(
                params,
                brokers.clone(),
                shared.clone(),
                step_deadline(),
            ))
            .await
        {
            Ok(Ok(logs)) => Some(logs),
            Ok(Err(e)) => {
                problems.push(e);
                None
            }
            Err(_) => {
                problems.push("the final read_committed reader died".to_string());
                None
            }
        }
    } else {
        Some(Default::default())
    };
    // The final reads count as fetches too.
    let twin_records_fetched = shared.history_of(PlainTopic::Twin).stats.records_fetched;
    // `sim`, then its twin in the seeds that write one.
    let mut plain_reads = Vec::new();
    for plain in [PlainTopic::Main, PlainTopic::Twin] {
        if plain == PlainTopic::Main || params.twin_topic {
            let deadline = step_deadline();
            plain_reads.push(
                read_plain_topic(
                    plain,
                    params,
                    &client,
                    &brokers,
                    &shared,
                    deadline,
                    &mut problems,
                )
                .await,
            );
        }
    }
    let mut plain_reads = plain_reads.into_iter();
    // A final read that failed is reported as such (a liveness failure),
    // and the checks that compare with it are skipped: with nothing read,
    // every acknowledged record would be reported lost as well.
    let main_read = plain_reads.next().flatten();
    let main_read_ok = main_read.is_some();
    let (logs, final_batches) = main_read.unwrap_or_default();
    let twin_read = plain_reads.next().flatten();
    let twin_read_ok = twin_read.is_some();
    let twin_logs = twin_read.map(|(logs, _)| logs).unwrap_or_default();
    let txn_read_ok = txn_logs.is_some();
    let txn_logs = txn_logs.unwrap_or_default();
    let eos_read = if params.eos {
        match client
            .spawn(eos_observer::final_read(
                params,
                brokers.clone(),
                shared.clone(),
                step_deadline(),
            ))
            .await
        {
            Ok(Ok(read)) => Some(read),
            Ok(Err(e)) => {
                problems.push(e);
                None
            }
            Err(_) => {
                problems.push("the final EOS reader died".to_string());
                None
            }
        }
    } else {
        None
    };
    if params.compaction.is_some() {
        match client
            .spawn(compact::final_read(
                params,
                brokers.clone(),
                shared.clone(),
                step_deadline(),
            ))
            .await
        {
            Ok(Ok(())) => {}
            Ok(Err(e)) => problems.push(e),
            Err(_) => problems.push("the compacted topic's final reader died".to_string()),
        }
    }
    // Each final log runs from its log start (0 unless records were
    // deleted) to its end.
    let log_ends: BTreeMap<i32, i64> = {
        let history = shared.history();
        (0..params.partitions)
            .map(|p| {
                let len = logs.get(&p).map_or(0, |l| l.len() as i64);
                (p, history.retention.start_of(p) + len)
            })
            .collect()
    };
    if params.group_members > 0 && main_read_ok {
        let wait = step_deadline();
        let give_up = Instant::now() + wait;
        loop {
            let behind: Vec<(i32, i64, i64)> = {
                let groups = shared.groups();
                log_ends
                    .iter()
                    .map(|(&p, &end)| (p, groups.acked_end(p), end))
                    .filter(|&(_, committed, end)| committed < end)
                    .collect()
            };
            if behind.is_empty() {
                break;
            }
            if Instant::now() >= give_up {
                problems.push(format!(
                    "liveness: {wait:?} after the final reads, the group's commits are still behind the log end (partition, committed, end): {behind:?}"
                ));
                break;
            }
            sleep(Duration::from_millis(100)).await;
        }
    }
    if params.group_members > 0 {
        // Two sessions: a member gone for good is dropped after one, and a
        // coordinator that rebalances by itself does it within one.
        let quiet = Duration::from_millis(2 * params.session_timeout_ms as u64);
        let settled = client
            .spawn(group_member::await_settled_group(
                params,
                brokers.clone(),
                shared.clone(),
                quiet,
                step_deadline(),
            ))
            .await;
        match settled {
            Ok(Ok(())) => {}
            Ok(Err(e)) => problems.push(e),
            Err(_) => problems.push("the group's settle watcher died".to_string()),
        }
    }
    shared.stop_group.store(true, Relaxed);
    for m in members {
        if m.await.is_err() {
            problems.push("a group member task died".to_string());
        }
    }

    if params.group_members > 0 {
        let read = client
            .spawn(group_member::read_final_offsets(
                params,
                brokers.clone(),
                shared.clone(),
                step_deadline(),
            ))
            .await;
        match read {
            Ok(Ok(())) => {}
            Ok(Err(e)) => problems.push(e),
            Err(_) => problems.push("the final offset reader died".to_string()),
        }
    }

    let settled = liveness_started.elapsed();
    if settled > LIVENESS_BOUND {
        problems.push(format!(
            "liveness: everything settled only {settled:?} after the faults, beyond the bound of {LIVENESS_BOUND:?}"
        ));
    }

    let (index_problems, aborted_index_entries) = check_aborted_indexes(&live_brokers).await;
    problems.extend(index_problems);
    problems.extend(one_owner.violations());
    let history = shared.history();
    let mut groups = shared.groups();
    problems.extend(groups.check_final(main_read_ok.then_some(&log_ends)));
    problems.extend(
        broker_errors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|e| format!("broker: {e}")),
    );
    problems.extend(history.check_final(params.partitions, main_read_ok.then_some(&logs)));
    let twin = shared.history_of(PlainTopic::Twin);
    if params.twin_topic {
        problems.extend(
            twin.check_final(params.partitions, twin_read_ok.then_some(&twin_logs))
                .into_iter()
                .map(|v| format!("{TWIN_TOPIC}: {v}")),
        );
    }
    let poll_stats = shared.polls().check_seed(
        &FinalLogs {
            main: &logs,
            txn_committed: &txn_logs.committed,
            txn_uncommitted: &txn_logs.uncommitted,
        },
        &mut problems,
        &mut vacuous,
    );
    let mut txns = shared.txns();
    if params.txn_producers > 0 || params.eos {
        // The loop's InitProducerId answers are in this history too.
        problems.extend(txns.check_final(
            txn_read_ok.then_some(&txn_logs.committed),
            history.granted_pids(),
        ));
    }
    if params.txn_producers > 0 {
        let compacted = params.compaction.is_some_and(|c| c.txn_topic);
        if txn_read_ok {
            problems.extend(txns.check_uncommitted(
                &txn_logs.committed,
                &txn_logs.uncommitted,
                compacted,
            ));
        }
        let t = txns.stats;
        if t.commits_acked < MIN_TXN_COMMITS {
            vacuous.push(format!(
                "{} transactions committed (need {MIN_TXN_COMMITS})",
                t.commits_acked
            ));
        }
        if txns.aborted() < MIN_TXN_ABORTS {
            vacuous.push(format!(
                "{} transactions aborted (need {MIN_TXN_ABORTS})",
                txns.aborted()
            ));
        }
        if params.txn_zombie_percent > 0 && t.zombies > 0 && t.fences_seen < MIN_TXN_FENCES {
            vacuous.push(format!(
                "{} zombies but {} fences (need {MIN_TXN_FENCES})",
                t.zombies, t.fences_seen
            ));
        }
    }
    let mut cluster = shared.cluster();
    let mut claims = ClaimStats::default();
    let mut writer_stats = WriterStats::default();
    if params.multi_broker() {
        let (holders, c) = read_claims(&volume, params.partitions);
        claims = c;
        problems.extend(cluster.check_final(&final_batches, &holders));
        let (violations, w) = writers::check_one_writer_per_epoch(&volume.writers());
        problems.extend(violations);
        writer_stats = w;
    }
    let mut compact_history = shared.compact();
    let compact_stats = compact_history.check();
    problems.extend(compact_history.violations().iter().cloned());
    if params.compaction.is_some() {
        if compact_stats.acked < MIN_COMPACT_RECORDS {
            vacuous.push(format!(
                "{} records acknowledged on the compacted topic (need {MIN_COMPACT_RECORDS})",
                compact_stats.acked
            ));
        }
        if compact_stats.reads < MIN_COMPACT_READS {
            vacuous.push(format!(
                "{} reads of the compacted topic (need {MIN_COMPACT_READS})",
                compact_stats.reads
            ));
        }
    }
    let mut eos_history = shared.eos();
    if let Some(read) = &eos_read {
        problems.extend(eos_history.check_final(&read.input, &read.output, &read.committed));
        problems.extend(eos_history.check_uncommitted(&read.output, &read.output_uncommitted));
    }
    if params.eos {
        let e = eos_history.stats;
        if e.commits_acked < MIN_EOS_COMMITS {
            vacuous.push(format!(
                "{} EOS transactions committed (need {MIN_EOS_COMMITS})",
                e.commits_acked
            ));
        }
        if e.resumes < MIN_EOS_RESUMES {
            vacuous.push(format!(
                "{} EOS instances resumed from committed offsets (need {MIN_EOS_RESUMES})",
                e.resumes
            ));
        }
        if e.observations < MIN_EOS_OBSERVATIONS {
            vacuous.push(format!(
                "{} committed EOS offsets checked against the output (need {MIN_EOS_OBSERVATIONS})",
                e.observations
            ));
        }
    }
    // Gates against vacuous passes: a seed that did no work or never
    // crashed the broker proves nothing.
    if history.acked_records() < MIN_ACKED_RECORDS {
        vacuous.push(format!(
            "only {} records acknowledged (need {MIN_ACKED_RECORDS})",
            history.acked_records()
        ));
    }
    // The twin topic gets a share of the main topic's requests' batches.
    if params.twin_topic && twin.acked_records() < MIN_TWIN_ACKED_RECORDS {
        vacuous.push(format!(
            "only {} records of {TWIN_TOPIC} acknowledged (need {MIN_TWIN_ACKED_RECORDS})",
            twin.acked_records()
        ));
    }
    if faults.crashes < MIN_CRASHES {
        vacuous.push(format!("{} crashes (need {MIN_CRASHES})", faults.crashes));
    }
    if params.idempotent_producers > 0 {
        let i = &history.idem;
        if i.batches_acked < MIN_IDEMPOTENT_BATCHES {
            vacuous.push(format!(
                "only {} idempotent batches acknowledged (need {MIN_IDEMPOTENT_BATCHES})",
                i.batches_acked
            ));
        }
        if i.duplicates_confirmed < MIN_CONFIRMED_DUPLICATES {
            vacuous.push(format!(
                "{} retries answered as duplicates (need {MIN_CONFIRMED_DUPLICATES})",
                i.duplicates_confirmed
            ));
        }
        if history.pid_blocks() < MIN_PID_BLOCKS {
            vacuous.push(format!(
                "producer ids from {} allocator blocks (need {MIN_PID_BLOCKS})",
                history.pid_blocks()
            ));
        }
    }
    if params.group_members > 0 {
        let g = &groups.stats;
        if g.commits_acked < MIN_COMMITS {
            vacuous.push(format!(
                "{} offset commits acknowledged (need {MIN_COMMITS})",
                g.commits_acked
            ));
        }
        // A restart costs no rebalance (membership is stored), so only
        // members that come and go make a second generation.
        let min_generations = if g.member_crashes + g.member_leaves > 0 {
            MIN_GENERATIONS
        } else {
            1
        };
        if groups.generations() < min_generations {
            vacuous.push(format!(
                "assignments in {} generations (need {min_generations})",
                groups.generations()
            ));
        }
        if g.offsets_read_after_restart < MIN_OFFSETS_READ_AFTER_RESTART {
            vacuous.push(format!(
                "{} committed offsets read back after a restart (need {MIN_OFFSETS_READ_AFTER_RESTART})",
                g.offsets_read_after_restart
            ));
        }
        // Zombies wake only once their group moved on, which a seed
        // without member churn or rebalances never does (as with
        // `min_generations`); the batch's tally counts the seeds they woke in.
        if g.zombies > 0 && g.zombie_refusals_checked < MIN_ZOMBIE_REFUSALS_CHECKED {
            vacuous.push(format!(
                "{} zombie commits refused and checked invisible (need {MIN_ZOMBIE_REFUSALS_CHECKED})",
                g.zombie_refusals_checked
            ));
        }
    }
    let low_acks = history.low_acks_stats(&logs);
    vacuous.extend(low_acks_shortfalls(&params, &low_acks));
    let retention_stats = history.retention_stats(params.partitions, &logs);
    vacuous.extend(retention_shortfalls(&params, &retention_stats));
    for _ in 0..low_acks.leader_lost {
        kaas_core::coverage::hit(kaas_core::coverage::Mark::LowAcksRecordLostByACrash);
    }
    let (final_records, duplicates) = History::summarize(&logs);
    if !problems.is_empty() {
        problems.extend(vacuous.iter().map(|v| format!("vacuous: {v}")));
        return Err(SeedFailure {
            seed,
            problems,
            context: format!(
                "params: {params:?}\nfaults: {faults:?}\nhistory: {:?}\nlow acks: {low_acks:?}\nretention: {retention_stats:?}\nidempotence: {:?}\ntransactions: {:?}\neos: {:?}\ncompacted topic: {:?}\ngroup: {:?}\nfinal logs: {} records\nvolume:\n{}{}",
                history.stats,
                history.idem,
                txns.stats,
                eos_history.stats,
                compact_stats,
                groups.stats,
                final_records,
                volume.describe(),
                first_hole(&logs).map_or_else(String::new, |(p, o)| dump_batches(&volume, p, o)),
            ),
        });
    }
    Ok(SeedReport {
        seed,
        params,
        faults,
        records_acked: history.acked_records(),
        batches_abandoned: history.stats.batches_abandoned,
        produce_errors: history.stats.produce_errors,
        multi_partition_requests: history.stats.multi_partition_requests,
        multi_topic_requests: history.stats.multi_topic_requests,
        twin_records_acked: twin.acked_records(),
        twin_records_fetched,
        aborted_index_entries,
        one_owner: one_owner.stats(),
        records_fetched: history.stats.records_fetched,
        final_records,
        duplicates,
        idem: history.idem,
        pid_blocks: history.pid_blocks(),
        groups: groups.stats,
        generations: groups.generations(),
        txns: txns.stats,
        eos: eos_history.stats,
        compact: compact_stats,
        low_acks,
        outcomes: history.outcome_stats(&logs),
        retention: retention_stats,
        polls: poll_stats,
        cluster: cluster.stats,
        claims,
        writers: writer_stats,
        syncs: volume.stats().syncs,
        volume_unreachable_failures: volume.stats().unreachable_failures,
        volume_late_io: volume.late_io_counter().load(Relaxed),
        stale_listings: volume.stats().stale_listings,
        stale_file_views: volume.stats().stale_file_views,
        tails_freed: volume.stats().tails_freed,
        buggifying: !buggifier.plan().is_empty(),
        buggify: buggifier.stats(),
        simulated: started.elapsed(),
        settled,
        vacuous,
        fingerprint: history.fingerprint(&logs, &{
            let mut extra = format!(
                "{} {} {}",
                groups.describe(),
                txns.fingerprint(&txn_logs.committed, &txn_logs.uncommitted),
                eos_history.fingerprint(eos_read.as_ref().map(|r| &r.output))
            );
            if params.compaction.is_some() {
                // Only then, for the same reason as below.
                extra.push_str(&format!(" {compact_stats:?}"));
            }
            if params.twin_topic {
                // Only then, for the same reason as below.
                extra.push_str(&format!(" {}", twin.fingerprint(&twin_logs, "")));
            }
            if params.multi_broker() {
                // Only then: single-broker fingerprints stay as they were.
                extra.push_str(&format!(
                    " {} {claims:?} {writer_stats:?}",
                    cluster.describe()
                ));
            }
            extra
        }),
    })
}
