//! The history of the consumer group and the rules it must satisfy.
//!
//! Group members report their OffsetCommits (sent, and how they were
//! answered), the answers of their OffsetFetches, every assignment a
//! SyncGroup handed them and every assignment a leader handed in. Pure
//! bookkeeping, unit-tested without madsim; events are ordered by a logical
//! clock (the simulation runs on one thread, so recording order is real
//! order).
//!
//! Rules:
//! - **Committed offsets are durable.** An OffsetFetch sent after an
//!   OffsetCommit was acknowledged returns that commit's offset or one
//!   committed later, whatever restarts happened in between. Precisely: the
//!   answer `v` must come from a commit `c` (of offset `v`, sent before the
//!   answer arrived, not refused) that is not *known overwritten*: `c` is
//!   known overwritten when another commit, acknowledged before the fetch
//!   was sent, was itself sent after `c` was acknowledged (the broker then
//!   applied it after `c`). And `-1` (nothing committed) is only right if no
//!   commit was acknowledged before the fetch.
//!
//!   This is "offsets never go backwards" minus what the classic protocol
//!   itself allows: a new owner may read the previous owner's offset while
//!   that owner's last commit is still being written, resume from it and
//!   commit less than that last commit. The workload never resets offsets.
//! - **One owner per partition per generation.** Every SyncGroup answer is
//!   recorded with the generation and the leader its member joined under (a
//!   restarted coordinator may hand out a generation number again, but only
//!   one that was never stored, so never answered to a SyncGroup; the
//!   leader is kept in the key all the same). No partition goes to two
//!   members under one (generation, leader), and each member gets exactly
//!   what that leader assigned it.
//! - At the end, every committed offset is within the final log: members
//!   only commit positions they fetched, and fetches only return durable
//!   data.
//! - **A zombie's refused commit is never visible.** Zombies (members whose
//!   generation moved on, still committing with their old generation and
//!   member id) tag each commit's metadata with [`zombie_tag`], and an
//!   OffsetFetch answers the metadata stored with the offset, so an answer
//!   names the commit that wrote it: a refused one, or one with another
//!   offset, is a violation, and an untagged answer is explained by the
//!   members' own commits only.
//! - **A zombie's commit is accepted only while its generation may still be
//!   current.** Kafka takes a member's commit only at the group's current
//!   generation (`ClassicGroup.validateOffsetCommit`: ILLEGAL_GENERATION
//!   otherwise), and a generation a SyncGroup answered is stored and never
//!   goes back (a restart restores it, or a later one). So a zombie commit
//!   of generation G accepted though a SyncGroup had answered a generation
//!   above G before it was sent is a violation. One accepted before then is
//!   legitimate: the coordinator may still have the member in G (it has
//!   not noticed the crash, or it is waiting in PreparingRebalance for the
//!   member to rejoin), and a restart may restore G with the member.

use std::collections::BTreeMap;

/// Logical time: the order events were recorded in.
pub type Tick = u64;

/// How an OffsetCommit of one partition ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CommitOutcome {
    /// Sent, no answer yet.
    Pending,
    /// Answered with success at this tick, in this broker incarnation.
    Acked { at: Tick, incarnation: u64 },
    /// Answered with an error that means it was not applied (a stale
    /// generation, an unknown member, a rebalance in progress).
    Refused,
    /// No answer (the connection failed or timed out) or a coordinator
    /// error: it may have been applied, even later.
    Unknown,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Commit {
    offset: i64,
    sent: Tick,
    outcome: CommitOutcome,
    /// The zombie commit it is (an index into `zombie_commits`); `None`
    /// for a live member's.
    zombie: Option<usize>,
}

/// The metadata a zombie commit carries (`n`: its index among zombie
/// commits), so that an OffsetFetch answering it names it.
pub fn zombie_tag(n: usize) -> String {
    format!("{ZOMBIE_TAG_PREFIX}{n}")
}

const ZOMBIE_TAG_PREFIX: &str = "zombie-commit-";

/// Which zombie commit an OffsetFetch answer's metadata names: `Ok(None)`
/// for a live member's (untagged), `Err` for a tag that does not parse.
fn zombie_named(metadata: Option<&str>) -> Result<Option<usize>, String> {
    match metadata.and_then(|m| m.strip_prefix(ZOMBIE_TAG_PREFIX)) {
        None => Ok(None),
        Some(n) => n
            .parse()
            .map(Some)
            .map_err(|_| format!("metadata {metadata:?} names no zombie commit")),
    }
}

/// A zombie's OffsetCommit of one partition, beyond what [`Commit`] keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ZombieCommit {
    id: CommitId,
    member: String,
    generation: i32,
    /// The newest generation a SyncGroup had answered when it was sent.
    stored_when_sent: i32,
    /// The error the broker refused it with, and when.
    refused: Option<(i16, Tick)>,
}

/// How the broker answered a zombie's commit of one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZombieAnswer {
    Accepted {
        incarnation: u64,
    },
    /// Any error but a coordinator's "busy" ones: not applied.
    Refused(i16),
    /// No answer, or a coordinator error: it may have been applied.
    Unknown,
}

/// Identifies a commit for [`GroupHistory::commit_answered`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommitId {
    partition: i32,
    index: usize,
}

/// One OffsetFetch answer for one partition.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Fetch {
    member: String,
    sent: Tick,
    answered: Tick,
    /// Broker incarnation when it was sent.
    incarnation: u64,
    value: i64,
    /// The zombie commit its metadata names, if any.
    zombie: Option<usize>,
}

/// Counters for the report and the vacuity gates.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupStats {
    pub joins: u64,
    /// SyncGroup answers with an assignment.
    pub assignments: u64,
    pub commits_sent: u64,
    pub commits_acked: u64,
    pub commits_refused: u64,
    pub commits_unknown: u64,
    pub offset_fetches: u64,
    /// OffsetFetch answers (sent after a broker crash) that returned an
    /// offset whose commit was acknowledged before that crash (0 included:
    /// had the commit been lost, the answer would be -1).
    pub offsets_read_after_restart: u64,
    pub heartbeats: u64,
    pub rebalances_seen: u64,
    pub member_crashes: u64,
    pub member_leaves: u64,
    pub records_consumed: u64,
    /// Zombies that woke (a later generation stored) and committed with
    /// their old one.
    pub zombies: u64,
    pub zombie_commits_sent: u64,
    /// Refused (any error but a coordinator's busy ones).
    pub zombie_commits_refused: u64,
    /// Refused, and an OffsetFetch of the partition was sent after the
    /// refusal (the final read at least): each of those answers would have
    /// named the commit had the broker applied it and nothing overwritten
    /// it. Exact once `check_final` ran.
    pub zombie_refusals_checked: u64,
    /// Accepted while their generation may still have been current.
    pub zombie_commits_accepted: u64,
    pub zombie_commits_unknown: u64,
}

#[derive(Debug, Default)]
pub struct GroupHistory {
    clock: Tick,
    commits: BTreeMap<i32, Vec<Commit>>,
    fetches: BTreeMap<i32, Vec<Fetch>>,
    /// (generation, leader) -> partition -> owner.
    owners: BTreeMap<(i32, String), BTreeMap<i32, String>>,
    /// (generation, leader) -> member -> what the leader assigned it.
    plans: BTreeMap<(i32, String), BTreeMap<String, Vec<i32>>>,
    /// The highest generation a SyncGroup answered: stored, so the
    /// coordinator's generation is at least this from then on.
    newest_stored_generation: i32,
    zombie_commits: Vec<ZombieCommit>,
    violations: Vec<String>,
    /// A running estimate of `stats.offsets_read_after_restart` (which is
    /// exact only once `check_final` knows every commit's fate).
    reads_after_restart: u64,
    pub stats: GroupStats,
}

impl GroupHistory {
    pub fn new() -> GroupHistory {
        GroupHistory::default()
    }

    /// The current logical time; advances on every call.
    pub fn tick(&mut self) -> Tick {
        self.clock += 1;
        self.clock
    }

    pub fn violation(&mut self, message: String) {
        self.violations.push(message);
    }

    pub fn violations(&self) -> &[String] {
        &self.violations
    }

    /// An OffsetCommit of `offset` for `partition` is about to be sent.
    pub fn commit_sent(&mut self, partition: i32, offset: i64) -> CommitId {
        self.stats.commits_sent += 1;
        self.push_commit(partition, offset, None)
    }

    fn push_commit(&mut self, partition: i32, offset: i64, zombie: Option<usize>) -> CommitId {
        let sent = self.tick();
        let list = self.commits.entry(partition).or_default();
        list.push(Commit {
            offset,
            sent,
            outcome: CommitOutcome::Pending,
            zombie,
        });
        CommitId {
            partition,
            index: list.len() - 1,
        }
    }

    /// How a commit ended. `Acked`'s tick is filled in here.
    pub fn commit_answered(&mut self, id: CommitId, outcome: CommitOutcome) {
        match outcome {
            CommitOutcome::Acked { .. } => self.stats.commits_acked += 1,
            CommitOutcome::Refused => self.stats.commits_refused += 1,
            CommitOutcome::Unknown => self.stats.commits_unknown += 1,
            CommitOutcome::Pending => {}
        }
        self.set_outcome(id, outcome);
    }

    fn set_outcome(&mut self, id: CommitId, outcome: CommitOutcome) {
        let outcome = match outcome {
            CommitOutcome::Acked { incarnation, .. } => CommitOutcome::Acked {
                at: self.tick(),
                incarnation,
            },
            other => other,
        };
        if let Some(c) = self
            .commits
            .get_mut(&id.partition)
            .and_then(|l| l.get_mut(id.index))
        {
            c.outcome = outcome;
        }
    }

    /// A zombie (`member`, fenced out of or past `generation`) is about to
    /// commit `offset` for `partition`: the commit's id and the metadata it
    /// must carry.
    pub fn zombie_commit_sent(
        &mut self,
        partition: i32,
        offset: i64,
        member: &str,
        generation: i32,
    ) -> (usize, String) {
        self.stats.zombie_commits_sent += 1;
        let n = self.zombie_commits.len();
        let id = self.push_commit(partition, offset, Some(n));
        self.zombie_commits.push(ZombieCommit {
            id,
            member: member.to_string(),
            generation,
            stored_when_sent: self.newest_stored_generation,
            refused: None,
        });
        (n, zombie_tag(n))
    }

    /// How the broker answered zombie commit `n`. An acceptance after a
    /// newer generation was stored is a violation at once.
    pub fn zombie_commit_answered(&mut self, n: usize, answer: ZombieAnswer) {
        let Some(z) = self.zombie_commits.get(n).cloned() else {
            return self.violation(format!("zombie commit {n} was never sent"));
        };
        let outcome = match answer {
            ZombieAnswer::Accepted { incarnation } => {
                if z.stored_when_sent > z.generation {
                    self.violation(format!(
                        "partition {}: a zombie commit by member {} with generation {} was accepted, but generation {} had been stored (a SyncGroup answered it) before it was sent: Kafka accepts a member's commit only at the group's current generation (ClassicGroup.validateOffsetCommit, ILLEGAL_GENERATION), and a stored generation never goes back",
                        z.id.partition, z.member, z.generation, z.stored_when_sent
                    ));
                } else {
                    self.stats.zombie_commits_accepted += 1;
                }
                CommitOutcome::Acked { at: 0, incarnation }
            }
            ZombieAnswer::Refused(code) => {
                self.stats.zombie_commits_refused += 1;
                let at = self.tick();
                if let Some(z) = self.zombie_commits.get_mut(n) {
                    z.refused = Some((code, at));
                }
                CommitOutcome::Refused
            }
            ZombieAnswer::Unknown => {
                self.stats.zombie_commits_unknown += 1;
                CommitOutcome::Unknown
            }
        };
        self.set_outcome(z.id, outcome);
    }

    /// An OffsetFetch sent at `sent` (a [`tick`](Self::tick) taken just
    /// before sending, in broker incarnation `incarnation`) answered `value`
    /// with `metadata` for `partition`. Checked at the end, when every
    /// commit's fate is known.
    pub fn offset_fetched(
        &mut self,
        member: &str,
        partition: i32,
        sent: Tick,
        incarnation: u64,
        value: i64,
        metadata: Option<&str>,
    ) {
        self.stats.offset_fetches += 1;
        let zombie = match zombie_named(metadata) {
            Ok(z) => z,
            Err(why) => {
                self.violation(format!(
                    "partition {partition}: OffsetFetch by {member} answered {value}: {why}"
                ));
                None
            }
        };
        let answered = self.tick();
        let before_restart = self.commits.get(&partition).is_some_and(|cs| {
            cs.iter().any(|c| {
                c.offset == value
                    && matches!(c.outcome, CommitOutcome::Acked { incarnation: i, .. } if i < incarnation)
            })
        });
        self.reads_after_restart += u64::from(before_restart);
        self.fetches.entry(partition).or_default().push(Fetch {
            member: member.to_string(),
            sent,
            answered,
            incarnation,
            value,
            zombie,
        });
    }

    /// The leader of `generation` handed in `plan` (member -> partitions).
    /// A plan nobody received may be replaced: the coordinator answers a
    /// generation's SyncGroups only once it is stored, so a crash before
    /// that forgets the generation and a restarted coordinator may form
    /// the same number again, under the same (restored) leader.
    pub fn planned(&mut self, generation: i32, leader: &str, plan: BTreeMap<String, Vec<i32>>) {
        let key = (generation, leader.to_string());
        if let Some(earlier) = self.plans.get(&key) {
            if *earlier != plan && self.owners.contains_key(&key) {
                self.violations.push(format!(
                    "generation {generation} leader {leader}: handed in two different assignments: {earlier:?} and {plan:?}"
                ));
            }
            if self.owners.contains_key(&key) {
                return;
            }
        }
        self.plans.insert(key, plan);
    }

    /// SyncGroup gave `member` the `partitions` in `generation`, whose
    /// JoinGroup answer named `leader`.
    pub fn assigned(&mut self, generation: i32, leader: &str, member: &str, partitions: &[i32]) {
        self.stats.assignments += 1;
        self.newest_stored_generation = self.newest_stored_generation.max(generation);
        let key = (generation, leader.to_string());
        match self.plans.get(&key).map(|p| p.get(member)) {
            None => self.violations.push(format!(
                "generation {generation}: {member} got {partitions:?} but its leader {leader} never handed in an assignment"
            )),
            Some(planned) => {
                let planned = planned.map(Vec::as_slice).unwrap_or_default();
                if planned != partitions {
                    self.violations.push(format!(
                        "generation {generation} leader {leader}: {member} got {partitions:?}, the leader assigned it {planned:?}"
                    ));
                }
            }
        }
        let owners = self.owners.entry(key).or_default();
        for &p in partitions {
            if let Some(other) = owners.insert(p, member.to_string()) {
                if other != member {
                    self.violations.push(format!(
                        "generation {generation} leader {leader}: partition {p} owned by both {other} and {member}"
                    ));
                }
            }
        }
    }

    /// The highest offset an acknowledged commit of `partition` carried
    /// (-1 if none).
    pub fn acked_end(&self, partition: i32) -> i64 {
        self.commits
            .get(&partition)
            .into_iter()
            .flatten()
            .filter(|c| matches!(c.outcome, CommitOutcome::Acked { .. }))
            .map(|c| c.offset)
            .max()
            .unwrap_or(-1)
    }

    /// How many OffsetFetch answers so far returned an offset committed in
    /// an earlier broker incarnation: the run already checked that a
    /// restart keeps committed offsets. (An estimate for deciding whether
    /// to keep injecting faults; the report's count is `check_final`'s.)
    pub fn reads_after_restart(&self) -> u64 {
        self.reads_after_restart
    }

    /// The highest generation a SyncGroup answered (0 before any: the
    /// first rebalance forms generation 1).
    pub fn newest_stored_generation(&self) -> i32 {
        self.newest_stored_generation
    }

    /// Distinct (generation, leader) pairs that handed out assignments.
    pub fn generations(&self) -> usize {
        self.owners.len()
    }

    /// Checks every OffsetFetch answer, and the last committed offsets
    /// against the final log ends (`log_ends`: partition -> record count;
    /// `None` when the final read failed). Returns every violation, those
    /// found during the run included.
    pub fn check_final(&mut self, log_ends: Option<&BTreeMap<i32, i64>>) -> Vec<String> {
        let mut violations = self.violations.clone();
        let mut read_after_restart = 0;
        for (&partition, fetches) in &self.fetches {
            let empty = Vec::new();
            let commits = self.commits.get(&partition).unwrap_or(&empty);
            for f in fetches {
                if let Some(why) = self.refused_zombie_commit_shown(f) {
                    violations.push(format!(
                        "partition {partition}: OffsetFetch by {} answered {}: {why}",
                        f.member, f.value
                    ));
                    continue;
                }
                match explain(commits, f) {
                    Ok(Some(c)) => {
                        if let CommitOutcome::Acked { incarnation, .. } = c.outcome {
                            if incarnation < f.incarnation {
                                read_after_restart += 1;
                            }
                        }
                    }
                    Ok(None) => {}
                    Err(why) => violations.push(format!(
                        "partition {partition}: OffsetFetch by {} answered {}: {why}",
                        f.member, f.value
                    )),
                }
            }
        }
        self.stats.offsets_read_after_restart = read_after_restart;
        self.stats.zombie_refusals_checked = self.zombie_refusals_checked();
        let Some(log_ends) = log_ends else {
            return violations;
        };
        for (&partition, fetches) in &self.fetches {
            let end = log_ends.get(&partition).copied().unwrap_or(0);
            if let Some(f) = fetches.iter().find(|f| f.value > end) {
                violations.push(format!(
                    "partition {partition}: committed offset {} (read by {}) is beyond the end of the final log ({end})",
                    f.value, f.member
                ));
            }
        }
        violations
    }

    /// Why fetch `f` shows a zombie commit the broker refused, if it does.
    fn refused_zombie_commit_shown(&self, f: &Fetch) -> Option<String> {
        let z = self.zombie_commits.get(f.zombie?)?;
        let (code, _) = z.refused?;
        Some(format!(
            "its metadata names zombie commit {} (member {}, generation {}), which the broker refused with error {code}: a refused commit became visible",
            f.zombie?, z.member, z.generation
        ))
    }

    /// Refused zombie commits that an OffsetFetch of their partition sent
    /// after the refusal checked.
    fn zombie_refusals_checked(&self) -> u64 {
        let checked = |z: &&ZombieCommit| {
            z.refused.is_some_and(|(_, at)| {
                self.fetches
                    .get(&z.id.partition)
                    .is_some_and(|fs| fs.iter().any(|f| f.sent > at))
            })
        };
        self.zombie_commits.iter().filter(checked).count() as u64
    }

    /// A fingerprint input: everything recorded.
    pub fn describe(&self) -> String {
        format!(
            "{:?} {:?} {:?} {:?} {:?} {:?}",
            self.commits, self.fetches, self.owners, self.plans, self.zombie_commits, self.stats
        )
    }
}

/// Which commit explains fetch `f`'s answer (`None` for "nothing
/// committed"), or why none can. Of several, the one acknowledged in the
/// earliest broker incarnation.
fn explain<'a>(commits: &'a [Commit], f: &Fetch) -> Result<Option<&'a Commit>, String> {
    let acked_before =
        |c: &&Commit| matches!(c.outcome, CommitOutcome::Acked { at, .. } if at < f.sent);
    // The latest send of a commit acknowledged before the fetch was sent:
    // every commit acknowledged before that send is known overwritten.
    let newest_acked = commits.iter().filter(acked_before).max_by_key(|c| c.sent);
    if f.value == -1 {
        return match newest_acked {
            None => Ok(None),
            Some(c) => Err(format!(
                "nothing committed, but offset {} was acknowledged before the fetch",
                c.offset
            )),
        };
    }
    let overwritten_before = newest_acked.map_or(0, |c| c.sent);
    // The metadata is stored with the offset: the answer's writer is the
    // commit its metadata names (a zombie's), or a live member's.
    let candidates: Vec<&Commit> = commits
        .iter()
        .filter(|c| c.offset == f.value && c.sent < f.answered && c.zombie == f.zombie)
        .filter(|c| c.outcome != CommitOutcome::Refused)
        .collect();
    if candidates.is_empty() {
        return Err(match f.zombie {
            Some(n) => format!("its metadata names zombie commit {n}, which did not commit this offset before the answer"),
            None => "an offset no commit sent before the answer carried (or only refused ones)".into(),
        });
    }
    candidates
        .into_iter()
        .filter(|c| !matches!(c.outcome, CommitOutcome::Acked { at, .. } if at < overwritten_before))
        .min_by_key(|c| match c.outcome {
            CommitOutcome::Acked { incarnation, .. } => incarnation,
            _ => u64::MAX,
        })
        .map(Some)
        .ok_or_else(|| {
            format!(
                "offsets went backwards: commit of {} was acknowledged before the fetch, and sent after every commit of {} was acknowledged",
                newest_acked.map_or(-1, |c| c.offset),
                f.value
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ack(h: &mut GroupHistory, partition: i32, offset: i64, incarnation: u64) -> CommitId {
        let id = h.commit_sent(partition, offset);
        h.commit_answered(id, CommitOutcome::Acked { at: 0, incarnation });
        id
    }

    fn fetch(h: &mut GroupHistory, partition: i32, incarnation: u64, value: i64) {
        let sent = h.tick();
        h.offset_fetched("m", partition, sent, incarnation, value, Some(""));
    }

    /// A zombie of `generation` commits `offset` to partition 0.
    fn zombie_commit(
        h: &mut GroupHistory,
        offset: i64,
        generation: i32,
        answer: ZombieAnswer,
    ) -> String {
        let (n, tag) = h.zombie_commit_sent(0, offset, "z", generation);
        h.zombie_commit_answered(n, answer);
        tag
    }

    fn fetch_tagged(h: &mut GroupHistory, value: i64, tag: &str) {
        let sent = h.tick();
        h.offset_fetched("m", 0, sent, 0, value, Some(tag));
    }

    /// Generation 2 handed out (its SyncGroup answered): stored.
    fn store_generation(h: &mut GroupHistory, generation: i32) {
        h.planned(
            generation,
            "a",
            BTreeMap::from([("a".to_string(), vec![0])]),
        );
        h.assigned(generation, "a", "a", &[0]);
    }

    fn ends() -> BTreeMap<i32, i64> {
        BTreeMap::from([(0, 1000), (1, 1000)])
    }

    #[test]
    fn reading_the_latest_acknowledged_commit_passes_and_counts_restarts() {
        let mut h = GroupHistory::new();
        fetch(&mut h, 0, 0, -1);
        ack(&mut h, 0, 10, 0);
        fetch(&mut h, 0, 0, 10);
        ack(&mut h, 0, 20, 0);
        fetch(&mut h, 0, 1, 20);
        assert_eq!(h.check_final(Some(&ends())), Vec::<String>::new());
        assert_eq!(h.stats.offsets_read_after_restart, 1);
        assert_eq!((h.acked_end(0), h.acked_end(1)), (20, -1));
        assert_eq!(h.reads_after_restart(), 1);
        // A committed 0 read back after a restart counts: lost, it would
        // have read back as -1.
        ack(&mut h, 1, 0, 1);
        fetch(&mut h, 1, 2, 0);
        assert_eq!(h.check_final(Some(&ends())), Vec::<String>::new());
        assert_eq!(h.stats.offsets_read_after_restart, 2);
    }

    #[test]
    fn an_older_commit_after_a_newer_one_was_acknowledged_fails() {
        let mut h = GroupHistory::new();
        ack(&mut h, 0, 10, 0);
        ack(&mut h, 0, 20, 0);
        fetch(&mut h, 0, 1, 10);
        let v = h.check_final(Some(&ends()));
        assert!(v.iter().any(|m| m.contains("went backwards")), "{v:?}");
    }

    #[test]
    fn losing_every_commit_fails() {
        let mut h = GroupHistory::new();
        ack(&mut h, 1, 10, 0);
        fetch(&mut h, 1, 1, -1);
        let v = h.check_final(Some(&ends()));
        assert!(v.iter().any(|m| m.contains("nothing committed")), "{v:?}");
    }

    #[test]
    fn an_offset_nobody_committed_or_only_a_refused_commit_fails() {
        let mut h = GroupHistory::new();
        let id = h.commit_sent(0, 7);
        h.commit_answered(id, CommitOutcome::Refused);
        fetch(&mut h, 0, 0, 7);
        fetch(&mut h, 0, 0, 8);
        let v = h.check_final(Some(&ends()));
        assert_eq!(
            v.iter().filter(|m| m.contains("no commit sent")).count(),
            2,
            "{v:?}"
        );
    }

    #[test]
    fn a_commit_with_unknown_outcome_may_land_late_and_overlapping_commits_race() {
        let mut h = GroupHistory::new();
        // A commit of 5 times out; 9 is acknowledged; the stale 5 lands.
        let stale = h.commit_sent(0, 5);
        h.commit_answered(stale, CommitOutcome::Unknown);
        ack(&mut h, 0, 9, 0);
        fetch(&mut h, 0, 0, 5);
        // Two owners' commits overlap in time: either may be read.
        let a = h.commit_sent(1, 30);
        let b = h.commit_sent(1, 25);
        h.commit_answered(
            a,
            CommitOutcome::Acked {
                at: 0,
                incarnation: 0,
            },
        );
        h.commit_answered(
            b,
            CommitOutcome::Acked {
                at: 0,
                incarnation: 0,
            },
        );
        fetch(&mut h, 1, 0, 25);
        fetch(&mut h, 1, 0, 30);
        assert_eq!(h.check_final(Some(&ends())), Vec::<String>::new());
    }

    #[test]
    fn a_committed_offset_beyond_the_log_fails() {
        let mut h = GroupHistory::new();
        ack(&mut h, 0, 2000, 0);
        fetch(&mut h, 0, 0, 2000);
        let v = h.check_final(Some(&ends()));
        assert!(v.iter().any(|m| m.contains("beyond the end")), "{v:?}");
        // With no final log (its read failed) there is no end to be beyond.
        assert_eq!(h.check_final(None), Vec::<String>::new());
    }

    #[test]
    fn two_owners_in_one_generation_or_an_assignment_the_leader_did_not_make_fail() {
        let mut h = GroupHistory::new();
        let plan = BTreeMap::from([("a".to_string(), vec![0]), ("b".to_string(), vec![1])]);
        h.planned(3, "a", plan);
        h.assigned(3, "a", "a", &[0]);
        h.assigned(3, "a", "b", &[1]);
        assert!(h.violations().is_empty(), "{:?}", h.violations());
        // The same generation number under another leader (a restarted
        // coordinator) is another generation.
        h.planned(3, "c", BTreeMap::from([("c".to_string(), vec![0, 1])]));
        h.assigned(3, "c", "c", &[0, 1]);
        assert!(h.violations().is_empty(), "{:?}", h.violations());
        assert_eq!(h.generations(), 2);
        // A plan nobody received may be handed in again differently (its
        // generation was forgotten by a crash); once received, it may not.
        h.planned(5, "a", BTreeMap::from([("a".to_string(), vec![0])]));
        h.planned(5, "a", BTreeMap::from([("a".to_string(), vec![0, 1])]));
        h.assigned(5, "a", "a", &[0, 1]);
        assert!(h.violations().is_empty(), "{:?}", h.violations());
        h.planned(5, "a", BTreeMap::from([("a".to_string(), vec![1])]));
        assert!(h
            .violations()
            .iter()
            .any(|m| m.contains("handed in two different assignments")));
        h.assigned(3, "a", "b", &[0]);
        assert!(h
            .violations()
            .iter()
            .any(|m| m.contains("owned by both a and b")));
        assert!(h
            .violations()
            .iter()
            .any(|m| m.contains("the leader assigned it [1]")));
        h.assigned(4, "z", "z", &[0]);
        assert!(h.violations().iter().any(|m| m.contains("never handed in")));
    }

    #[test]
    fn a_refused_zombie_commit_never_becomes_visible() {
        let mut h = GroupHistory::new();
        ack(&mut h, 0, 10, 0);
        let refused = zombie_commit(&mut h, 5, 1, ZombieAnswer::Refused(22));
        fetch(&mut h, 0, 0, 10);
        assert_eq!(h.check_final(Some(&ends())), Vec::<String>::new());
        assert_eq!(h.stats.zombie_refusals_checked, 1);
        fetch_tagged(&mut h, 5, &refused);
        let v = h.check_final(Some(&ends()));
        assert!(
            v.iter()
                .any(|m| m.contains("refused with error 22: a refused commit became visible")),
            "{v:?}"
        );
    }

    #[test]
    fn an_answer_is_explained_only_by_the_commit_its_metadata_names() {
        let mut h = GroupHistory::new();
        // A zombie's legitimately accepted 5 does not explain a live
        // member's (untagged) 5, nor a live 7 a zombie-tagged 7.
        let accepted = zombie_commit(&mut h, 5, 0, ZombieAnswer::Accepted { incarnation: 0 });
        fetch_tagged(&mut h, 5, &accepted);
        assert_eq!(h.check_final(Some(&ends())), Vec::<String>::new());
        fetch(&mut h, 0, 0, 5);
        ack(&mut h, 0, 7, 0);
        fetch_tagged(&mut h, 7, &accepted);
        fetch_tagged(&mut h, 7, "zombie-commit-x");
        let v = h.check_final(Some(&ends()));
        assert!(v.iter().any(|m| m.contains("no commit sent")), "{v:?}");
        assert!(
            v.iter()
                .any(|m| m.contains("names zombie commit 0, which did not commit this offset")),
            "{v:?}"
        );
        assert!(
            v.iter().any(|m| m.contains("names no zombie commit")),
            "{v:?}"
        );
    }

    #[test]
    fn a_zombie_commit_accepted_after_a_newer_generation_was_stored_fails() {
        let mut h = GroupHistory::new();
        store_generation(&mut h, 1);
        // Generation 1 may still be current: accepted legitimately.
        zombie_commit(&mut h, 5, 1, ZombieAnswer::Accepted { incarnation: 0 });
        assert!(h.violations().is_empty(), "{:?}", h.violations());
        assert_eq!(h.stats.zombie_commits_accepted, 1);
        // Sent before generation 2 was stored: still legitimate.
        let (n, _) = h.zombie_commit_sent(0, 5, "z", 1);
        store_generation(&mut h, 2);
        h.zombie_commit_answered(n, ZombieAnswer::Accepted { incarnation: 0 });
        assert!(h.violations().is_empty(), "{:?}", h.violations());
        zombie_commit(&mut h, 5, 1, ZombieAnswer::Accepted { incarnation: 0 });
        assert!(
            h.violations()
                .iter()
                .any(|m| m.contains("generation 1 was accepted, but generation 2 had been stored")),
            "{:?}",
            h.violations()
        );
        assert_eq!(h.stats.zombie_commits_accepted, 2);
    }

    #[test]
    fn a_zombie_refusal_counts_as_checked_only_once_a_later_fetch_read_its_partition() {
        let mut h = GroupHistory::new();
        fetch(&mut h, 0, 0, -1);
        zombie_commit(&mut h, 5, 1, ZombieAnswer::Refused(25));
        zombie_commit(&mut h, 6, 1, ZombieAnswer::Unknown);
        fetch(&mut h, 1, 0, -1);
        assert_eq!(h.check_final(Some(&ends())), Vec::<String>::new());
        assert_eq!(h.stats.zombie_refusals_checked, 0);
        fetch(&mut h, 0, 0, -1);
        assert_eq!(h.check_final(Some(&ends())), Vec::<String>::new());
        assert_eq!(h.stats.zombie_refusals_checked, 1);
        assert_eq!(
            (
                h.stats.zombie_commits_sent,
                h.stats.zombie_commits_refused,
                h.stats.zombie_commits_unknown
            ),
            (2, 1, 1)
        );
    }
}
