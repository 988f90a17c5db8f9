//! Per-seed parameters (swarm testing): each seed draws its own shape of
//! workload and faults, so a run of many seeds covers many combinations
//! instead of one configuration many times.

use rand::Rng;
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
}

impl SimParams {
    pub fn draw(rng: &mut impl Rng) -> SimParams {
        let max_uptime = Duration::from_millis([300, 1_000, 3_000][rng.gen_range(0..3)]);
        SimParams {
            partitions: rng.gen_range(1..=3),
            producers: rng.gen_range(1..=3),
            max_records_per_batch: rng.gen_range(1..=8),
            producer_think_ms: [0, 5, 20][rng.gen_range(0..3)],
            segment_bytes: [1024, 8 * 1024, 1 << 30][rng.gen_range(0..3)],
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
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    #[test]
    fn draws_are_reproducible_and_within_bounds() {
        for seed in 0..100 {
            let a = SimParams::draw(&mut SmallRng::seed_from_u64(seed));
            assert_eq!(a, SimParams::draw(&mut SmallRng::seed_from_u64(seed)));
            assert!((1..=3).contains(&a.partitions));
            assert!(a.producers >= 1 && a.max_records_per_batch >= 1);
            assert!(a.fault_phase >= Duration::from_secs(20));
            assert!(a.sync_latency.0 <= a.sync_latency.1);
        }
    }
}
