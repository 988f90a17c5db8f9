//! What clients saw of partition leadership in a multi-broker seed, and the
//! rules it must satisfy (`docs/simulation.md`, "Several brokers").
//!
//! Clients report every Metadata answer (who answered, and per partition
//! the leader and leader epoch it named), every batch a fetch returned
//! (its offsets and the `partition_leader_epoch` stamped on it) and every
//! acknowledged produce (which broker answered). Rules:
//!
//! - **Epochs only grow.** For one client and one answering broker, the
//!   epoch Metadata names for a partition never goes back. (Different
//!   brokers may lag each other by a heartbeat, so a client, like Kafka's,
//!   keeps the newest epoch it has seen and ignores older answers; each
//!   broker's own answers must never go back.)
//! - **Batches in the log are in epoch order.** Within a fetch answer and
//!   in the final read, the batches of a partition, by offset, carry
//!   non-decreasing leader epochs; and a batch fetched twice (during the
//!   run, at the end) carries the same epoch and ends at the same offset
//!   both times.
//! - **One leader per epoch.** No two Metadata answers name different
//!   leaders for one partition at one epoch; every acknowledged produce
//!   came from the broker that holds the epoch stamped on its batch (the
//!   holder named by that epoch's claim file on the volume), so no two
//!   brokers ever acknowledge writes of one partition at one epoch.
//! - **Vacuity.** A multi-broker seed should see a partition move: a
//!   leader epoch above 0, or a leader change, in some client's view. A
//!   seed that does not is reported (`NO MOVE` on its line, counted in the
//!   run's summary), so a regression to "nothing ever moves" shows.

use std::collections::{BTreeMap, BTreeSet};

/// Counters for the seed's report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct ClusterStats {
    pub metadata_answers: u64,
    /// Partitions named without a leader (LEADER_NOT_AVAILABLE).
    pub leaderless_answers: u64,
    /// Times a client's view of a partition's leader changed to another
    /// broker.
    pub leader_changes_seen: u64,
    /// The highest leader epoch any client saw (Metadata or a batch).
    pub max_epoch_seen: i32,
    /// Produce or fetch answers NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE,
    /// FENCED_LEADER_EPOCH or UNKNOWN_LEADER_EPOCH: a client that followed
    /// stale metadata and was sent on.
    pub redirects: u64,
    pub acks_checked: u64,
    /// Acknowledgements of resent idempotent batches by a leader of a
    /// later epoch than the batch's (duplicates found across a takeover).
    pub duplicates_across_epochs: u64,
    /// FindCoordinator answers naming a coordinator (group, transactional
    /// and exactly-once clients).
    pub coordinator_lookups: u64,
    /// Times a lookup named another broker than the previous lookup of
    /// the same key: a coordinator slot moved (or a lagging broker named
    /// the old holder).
    pub coordinator_moves: u64,
}

/// One batch as a fetch returned it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FetchedBatch {
    pub base_offset: i64,
    pub last_offset: i64,
    pub leader_epoch: i32,
}

#[derive(Debug, Default)]
pub struct ClusterHistory {
    /// (client, answering broker, partition) -> newest epoch it named.
    metadata_epochs: BTreeMap<(String, i32, i32), i32>,
    /// (partition, epoch) -> the leader Metadata named for it.
    metadata_leaders: BTreeMap<(i32, i32), i32>,
    /// (client, partition) -> the leader the client's view names.
    views: BTreeMap<(String, i32), i32>,
    /// (partition, base offset) -> the batch there, as first fetched.
    batches: BTreeMap<(i32, i64), FetchedBatch>,
    /// (key type, key) -> the broker the last lookup named.
    coordinators: BTreeMap<(i8, String), i32>,
    /// (partition, base offset, answering broker, answer to a resend of an
    /// idempotent batch) of every successful produce answer.
    acks: BTreeSet<(i32, i64, i32, bool)>,
    violations: Vec<String>,
    pub stats: ClusterStats,
}

impl ClusterHistory {
    /// A Metadata answer from broker `answered_by` to `client` named
    /// `leader` (-1: none) at `epoch` (-1: no claim yet) for `partition`.
    pub fn metadata(
        &mut self,
        client: &str,
        answered_by: i32,
        partition: i32,
        leader: i32,
        epoch: i32,
    ) {
        self.stats.metadata_answers += 1;
        if leader < 0 {
            self.stats.leaderless_answers += 1;
        }
        if epoch >= 0 {
            self.stats.max_epoch_seen = self.stats.max_epoch_seen.max(epoch);
            let key = (client.to_string(), answered_by, partition);
            let newest = self.metadata_epochs.entry(key).or_insert(epoch);
            if epoch < *newest {
                self.violations.push(format!(
                    "partition {partition}: broker {answered_by} told {client} leader epoch {epoch} after it had told it {newest}"
                ));
            }
            *newest = (*newest).max(epoch);
        }
        if leader >= 0 && epoch >= 0 {
            let named = *self
                .metadata_leaders
                .entry((partition, epoch))
                .or_insert(leader);
            if named != leader {
                self.violations.push(format!(
                    "partition {partition} epoch {epoch}: broker {answered_by} named broker {leader} its leader, an earlier answer named broker {named}"
                ));
            }
        }
    }

    /// A FindCoordinator answer to `client` named broker `broker` the
    /// coordinator of `key`.
    pub fn coordinator_named(&mut self, client: &str, key: &(i8, String), broker: i32) {
        self.stats.coordinator_lookups += 1;
        let before = self.coordinators.insert(key.clone(), broker);
        if before.is_some_and(|b| b != broker) {
            self.stats.coordinator_moves += 1;
            tracing::debug!(client, ?key, broker, "coordinator moved");
        }
    }

    /// `client` now sends `partition`'s requests to `leader`.
    pub fn followed(&mut self, client: &str, partition: i32, leader: i32) {
        let before = self.views.insert((client.to_string(), partition), leader);
        if before.is_some_and(|b| b != leader) {
            self.stats.leader_changes_seen += 1;
        }
    }

    /// A request was answered with an error that sends the client to
    /// another leader.
    pub fn redirected(&mut self) {
        self.stats.redirects += 1;
    }

    /// A produce of `partition` answered by broker `broker` succeeded at
    /// `base_offset`. `resend`: the answer is to an idempotent batch sent
    /// more than once, which a later leader may answer as a duplicate of
    /// what an earlier one appended.
    pub fn acked(&mut self, partition: i32, base_offset: i64, broker: i32, resend: bool) {
        self.acks.insert((partition, base_offset, broker, resend));
    }

    /// The batches one fetch answer (or the final read) returned for
    /// `partition`, in the order returned.
    pub fn fetched(&mut self, client: &str, partition: i32, batches: &[FetchedBatch]) {
        let mut previous: Option<FetchedBatch> = None;
        for b in batches {
            self.stats.max_epoch_seen = self.stats.max_epoch_seen.max(b.leader_epoch);
            if let Some(p) = previous {
                if b.leader_epoch < p.leader_epoch {
                    self.violations.push(format!(
                        "partition {partition}: {client} fetched the batch at {} with leader epoch {} after the batch at {} with epoch {}",
                        b.base_offset, b.leader_epoch, p.base_offset, p.leader_epoch
                    ));
                }
            }
            previous = Some(*b);
            let first = *self.batches.entry((partition, b.base_offset)).or_insert(*b);
            if first != *b {
                self.violations.push(format!(
                    "partition {partition}: {client} fetched a batch at {} with leader epoch {} ending at {}, an earlier fetch had epoch {} ending at {}",
                    b.base_offset, b.leader_epoch, b.last_offset, first.leader_epoch, first.last_offset
                ));
            }
        }
    }

    /// Whether some client saw a partition move.
    pub fn saw_a_move(&self) -> bool {
        self.stats.max_epoch_seen > 0 || self.stats.leader_changes_seen > 0
    }

    /// The final rules. `final_batches`: every partition's batches as the
    /// final read returned them (already fed to [`fetched`](Self::fetched));
    /// `holders`: (partition, epoch) -> the broker its claim file names.
    pub fn check_final(
        &mut self,
        final_batches: &BTreeMap<i32, Vec<FetchedBatch>>,
        holders: &BTreeMap<(i32, i32), i32>,
    ) -> Vec<String> {
        let mut violations = self.violations.clone();
        for (&partition, batches) in final_batches {
            for pair in batches.windows(2) {
                if pair[1].leader_epoch < pair[0].leader_epoch {
                    violations.push(format!(
                        "partition {partition}: the final log has the batch at {} with leader epoch {} after the batch at {} with epoch {}",
                        pair[1].base_offset, pair[1].leader_epoch, pair[0].base_offset, pair[0].leader_epoch
                    ));
                }
            }
        }
        // (partition, epoch) -> brokers that acknowledged appending it.
        let mut ackers: BTreeMap<(i32, i32), BTreeSet<i32>> = BTreeMap::new();
        for &(partition, offset, broker, resend) in &self.acks {
            let Some(batch) = final_batches.get(&partition).and_then(|bs| {
                bs.iter()
                    .find(|b| b.base_offset <= offset && offset <= b.last_offset)
            }) else {
                // Not in the final log: the record rules report that.
                continue;
            };
            self.stats.acks_checked += 1;
            let epoch = batch.leader_epoch;
            // A resent idempotent batch may be answered as a duplicate by a
            // later leader: the batch keeps the epoch it was appended at.
            let later_leader = resend
                && holders
                    .range((partition, epoch + 1)..=(partition, i32::MAX))
                    .any(|(_, &h)| h == broker);
            if later_leader {
                self.stats.duplicates_across_epochs += 1;
                continue;
            }
            ackers.entry((partition, epoch)).or_default().insert(broker);
            match holders.get(&(partition, epoch)) {
                Some(&holder) if holder == broker => {}
                Some(&holder) => violations.push(format!(
                    "partition {partition} offset {offset}: acknowledged by broker {broker}, but its batch carries leader epoch {epoch}, which broker {holder} holds"
                )),
                None => violations.push(format!(
                    "partition {partition} offset {offset}: acknowledged by broker {broker} in a batch of leader epoch {epoch}, which no claim file names"
                )),
            }
        }
        for ((partition, epoch), brokers) in ackers {
            if brokers.len() > 1 {
                violations.push(format!(
                    "partition {partition} epoch {epoch}: writes acknowledged by several brokers {brokers:?}"
                ));
            }
        }
        if violations.len() > 20 {
            let more = violations.len() - 20;
            violations.truncate(20);
            violations.push(format!("... and {more} more"));
        }
        violations
    }

    /// For the determinism fingerprint.
    pub fn describe(&self) -> String {
        format!(
            "{:?} {} {} {}",
            self.stats,
            self.acks.len(),
            self.batches.len(),
            self.metadata_leaders.len()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(base: i64, last: i64, epoch: i32) -> FetchedBatch {
        FetchedBatch {
            base_offset: base,
            last_offset: last,
            leader_epoch: epoch,
        }
    }

    #[test]
    fn a_clean_history_passes_and_counts_moves() {
        let mut h = ClusterHistory::default();
        h.metadata("c", 0, 0, 0, 0);
        h.followed("c", 0, 0);
        h.acked(0, 0, 0, false);
        h.metadata("c", 1, 0, 1, 1);
        h.followed("c", 0, 1);
        h.acked(0, 2, 1, false);
        // A resend answered as a duplicate by the next leader.
        h.acked(0, 0, 1, true);
        let log = vec![batch(0, 1, 0), batch(2, 2, 1)];
        h.fetched("final", 0, &log);
        let holders = BTreeMap::from([((0, 0), 0), ((0, 1), 1)]);
        let finals = BTreeMap::from([(0, log)]);
        assert_eq!(h.check_final(&finals, &holders), Vec::<String>::new());
        assert!(h.saw_a_move());
        assert_eq!(h.stats.leader_changes_seen, 1);
        assert_eq!(h.stats.acks_checked, 3);
        assert_eq!(h.stats.duplicates_across_epochs, 1);
    }

    #[test]
    fn nothing_moving_is_visible() {
        let mut h = ClusterHistory::default();
        h.metadata("c", 0, 0, 0, 0);
        h.followed("c", 0, 0);
        h.followed("c", 0, 0);
        assert!(!h.saw_a_move());
    }

    #[test]
    fn an_epoch_going_back_in_one_brokers_answers_fails() {
        let mut h = ClusterHistory::default();
        h.metadata("c", 0, 0, 0, 3);
        h.metadata("c", 1, 0, 1, 2);
        assert!(h.violations.is_empty(), "another broker may lag");
        h.metadata("c", 0, 0, 0, 2);
        assert!(h.violations[0].contains("leader epoch 2 after it had told it 3"));
    }

    #[test]
    fn two_leaders_named_for_one_epoch_fail() {
        let mut h = ClusterHistory::default();
        h.metadata("c", 0, 0, 0, 1);
        h.metadata("d", 1, 0, 1, 1);
        assert!(h.violations[0].contains("an earlier answer named broker 0"));
    }

    #[test]
    fn batches_out_of_epoch_order_or_changed_fail() {
        let mut h = ClusterHistory::default();
        h.fetched("c", 0, &[batch(0, 1, 2), batch(2, 3, 1)]);
        assert!(h.violations[0].contains("with leader epoch 1 after"));
        let mut h = ClusterHistory::default();
        h.fetched("c", 0, &[batch(0, 1, 1)]);
        h.fetched("final", 0, &[batch(0, 1, 2)]);
        assert!(h.violations[0].contains("an earlier fetch had epoch 1"));
        let mut h = ClusterHistory::default();
        let finals = BTreeMap::from([(0, vec![batch(0, 0, 3), batch(1, 1, 2)])]);
        let v = h.check_final(&finals, &BTreeMap::new());
        assert!(v.iter().any(|m| m.contains("the final log has")), "{v:?}");
    }

    #[test]
    fn an_ack_from_a_broker_not_holding_the_epoch_fails() {
        let mut h = ClusterHistory::default();
        h.acked(0, 0, 0, false);
        h.acked(0, 1, 1, false);
        // A resend does not excuse a broker that never led a later epoch.
        h.acked(0, 0, 2, true);
        let finals = BTreeMap::from([(0, vec![batch(0, 1, 4)])]);
        let holders = BTreeMap::from([((0, 4), 1)]);
        let v = h.check_final(&finals, &holders);
        assert!(
            v.iter()
                .any(|m| m.contains("acknowledged by broker 0, but its batch carries leader epoch 4, which broker 1 holds")),
            "{v:?}"
        );
        assert!(v.iter().any(|m| m.contains("several brokers")), "{v:?}");
        assert!(
            v.iter().any(|m| m.contains("acknowledged by broker 2")),
            "{v:?}"
        );
    }
}
