//! Whether the consumer group settled (issue 13 item 9, "every group
//! stabilises"): once the faults are over and the members' commits have
//! caught up with the log, the coordinator must describe the group as
//! Stable with every partition assigned to exactly one member, and it must
//! stay so across a quiet interval: the same members with the same
//! partitions, and no newer generation handed out meanwhile. A group that
//! keeps rebalancing still commits between rebalances, so the commits
//! alone (the catch-up wait) cannot tell it from a settled one.
//!
//! Pure: the workload (`group_member::await_settled_group`) feeds it each
//! DescribeGroups answer with the newest generation a SyncGroup answered.

use std::collections::BTreeMap;

/// What one DescribeGroups answer showed, with the newest generation the
/// members were handed at that moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Described {
    pub state: String,
    /// Member id -> the partitions of its assignment, sorted.
    pub members: BTreeMap<String, Vec<i32>>,
    pub generation: i32,
}

/// Why `described` does not show a settled group of `partitions`
/// partitions, if it does not.
pub fn unsettled(described: &Described, partitions: i32) -> Option<String> {
    if described.state != "Stable" {
        return Some(format!("the group is {}", described.state));
    }
    if described.members.is_empty() {
        return Some("the group has no members".to_string());
    }
    let mut owners: BTreeMap<i32, &str> = BTreeMap::new();
    for (member, assigned) in &described.members {
        for &p in assigned {
            if !(0..partitions).contains(&p) {
                return Some(format!(
                    "{member} is assigned partition {p}, which does not exist"
                ));
            }
            if let Some(other) = owners.insert(p, member) {
                return Some(format!("partition {p} is assigned to {other} and {member}"));
            }
        }
    }
    let unassigned: Vec<i32> = (0..partitions)
        .filter(|p| !owners.contains_key(p))
        .collect();
    if !unassigned.is_empty() {
        return Some(format!("partitions {unassigned:?} are assigned to nobody"));
    }
    None
}

/// The wait for a settled group: the same settled answer, held for
/// `quiet_ms` of the observer's time.
#[derive(Debug)]
pub struct Settling {
    partitions: i32,
    quiet_ms: i64,
    /// The settled answer the quiet interval runs from, and since when.
    since: Option<(i64, Described)>,
    /// Why the last answer did not count (for the liveness message).
    why_not: String,
    /// Answers seen, and how often a settled answer was followed by a
    /// different one (a rebalance, a member gone).
    pub answers: u64,
    pub restarts: u64,
}

impl Settling {
    pub fn new(partitions: i32, quiet_ms: i64) -> Settling {
        Settling {
            partitions,
            quiet_ms,
            since: None,
            why_not: "no answer yet".to_string(),
            answers: 0,
            restarts: 0,
        }
    }

    /// Folds one answer at `now_ms` in; true once the group has shown the
    /// same settled answer for the whole quiet interval.
    pub fn observe(&mut self, described: Described, now_ms: i64) -> bool {
        self.answers += 1;
        if let Some(why) = unsettled(&described, self.partitions) {
            if self.since.take().is_some() {
                self.restarts += 1;
            }
            self.why_not = why;
            return false;
        }
        match &self.since {
            Some((from, held)) if *held == described => {
                if now_ms - from >= self.quiet_ms {
                    return true;
                }
                self.why_not = format!(
                    "settled for {} ms of the {} ms required",
                    now_ms - from,
                    self.quiet_ms
                );
            }
            Some((_, held)) => {
                self.restarts += 1;
                self.why_not = format!(
                    "the settled group changed: generation {} {:?}, then generation {} {:?}",
                    held.generation, held.members, described.generation, described.members
                );
                self.since = Some((now_ms, described));
            }
            None => {
                self.why_not = "settled, the quiet interval just began".to_string();
                self.since = Some((now_ms, described));
            }
        }
        false
    }

    /// What kept the group from counting as settled, as of the last answer.
    pub fn why_not(&self) -> &str {
        &self.why_not
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn described(state: &str, members: &[(&str, &[i32])], generation: i32) -> Described {
        Described {
            state: state.to_string(),
            members: members
                .iter()
                .map(|(m, p)| (m.to_string(), p.to_vec()))
                .collect(),
            generation,
        }
    }

    #[test]
    fn a_settled_group_is_stable_with_every_partition_assigned_once() {
        assert_eq!(
            unsettled(&described("Stable", &[("a", &[0, 1]), ("b", &[2])], 3), 3),
            None
        );
        for (d, why) in [
            (
                described("PreparingRebalance", &[("a", &[0, 1, 2])], 3),
                "the group is PreparingRebalance",
            ),
            (described("Stable", &[], 3), "the group has no members"),
            (
                described("Stable", &[("a", &[0, 1]), ("b", &[1, 2])], 3),
                "partition 1 is assigned to a and b",
            ),
            (
                described("Stable", &[("a", &[0])], 3),
                "partitions [1, 2] are assigned to nobody",
            ),
            (
                described("Stable", &[("a", &[0, 1, 2, 3])], 3),
                "a is assigned partition 3, which does not exist",
            ),
        ] {
            assert_eq!(unsettled(&d, 3).as_deref(), Some(why));
        }
    }

    #[test]
    fn a_group_settles_only_once_one_settled_answer_holds_for_the_quiet_interval() {
        let stable = described("Stable", &[("a", &[0]), ("b", &[1])], 4);
        let mut s = Settling::new(2, 1_000);
        assert!(!s.observe(stable.clone(), 0));
        assert!(!s.observe(stable.clone(), 999));
        assert!(s.observe(stable.clone(), 1_000));
        assert_eq!(s.restarts, 0);

        // A newer generation with the same assignment restarts the
        // interval: the group rebalanced in between.
        let mut s = Settling::new(2, 1_000);
        assert!(!s.observe(stable.clone(), 0));
        let next = Described {
            generation: 5,
            ..stable.clone()
        };
        assert!(!s.observe(next.clone(), 800));
        assert!(!s.observe(next.clone(), 1_700));
        assert!(s.observe(next, 1_800));
        assert_eq!(s.restarts, 1);

        // So does an answer that is not settled at all.
        let mut s = Settling::new(2, 1_000);
        assert!(!s.observe(stable.clone(), 0));
        assert!(!s.observe(described("PreparingRebalance", &[], 4), 500));
        assert!(!s.observe(stable.clone(), 900));
        assert!(!s.observe(stable.clone(), 1_800));
        assert!(s.observe(stable, 1_900));
        assert_eq!(s.restarts, 1);
        assert_eq!(s.answers, 5);
    }

    #[test]
    fn a_group_that_keeps_rebalancing_never_settles() {
        let mut s = Settling::new(1, 1_000);
        for (i, now) in (0..100i32).map(|i| (i, i64::from(i) * 300)) {
            let d = described("Stable", &[("a", &[0])], i / 3);
            assert!(!s.observe(d, now), "at {now}");
        }
        assert!(
            s.why_not().starts_with("the settled group changed"),
            "{}",
            s.why_not()
        );
    }
}
