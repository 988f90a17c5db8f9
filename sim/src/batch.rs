//! What a batch of seeds did, added up: the summary `scripts/sim` prints
//! at the end of a run, and the coverage marks no seed hit.
//!
//! Each passing seed's child process reports its counters
//! ([`SeedReport::tallies`](crate::harness::SeedReport::tallies)) and the
//! coverage marks the broker's code hit ([`kaas_core::coverage`]); the
//! parent adds them here. A batch that never crashed a broker mid-
//! transaction, or never sent a zombie batch where the new epoch had not
//! written, proved less than its seed count suggests: the summary says so.

use kaas_core::coverage::Mark;
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// How many of a batch's `seeds` may pass vacuously: short of a vacuity
/// gate (a seed with transactional producers that committed fewer than
/// three transactions, say) while every checker held. A gate asks each seed
/// for events its draw may not produce, so a big enough sweep always finds
/// a few such seeds (4 of seeds 0-999); what must not happen is a workload
/// or a fault that stops reaching its path in many seeds at once. So the
/// bound is 2 % of the batch, rounded down: none in a batch below 50 seeds,
/// and so none when one seed is replayed.
pub fn vacuous_seed_limit(seeds: u64) -> u64 {
    seeds / 50
}

/// What one passing seed reported besides its line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SeedCounts {
    /// (counter, value), in the report's order.
    pub tallies: Vec<(String, u64)>,
    /// (mark name, hits), every mark.
    pub marks: Vec<(String, u64)>,
    /// The vacuity gates the seed fell short of, each with its counts.
    pub vacuous: Vec<String>,
}

const FIELD_SEP: char = ';';

/// `name=value;name=value` (names may hold spaces, never `;` or `=`).
pub fn encode_counts(counts: &[(String, u64)]) -> String {
    counts
        .iter()
        .map(|(n, v)| format!("{n}={v}"))
        .collect::<Vec<_>>()
        .join(&FIELD_SEP.to_string())
}

/// `a;b` (items never hold `;`).
pub fn encode_list(items: &[String]) -> String {
    items.join(&FIELD_SEP.to_string())
}

/// The inverse of [`encode_list`].
pub fn decode_list(s: &str) -> Vec<String> {
    s.split(FIELD_SEP)
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(str::to_string)
        .collect()
}

/// The inverse of [`encode_counts`]; a malformed field is skipped.
pub fn decode_counts(s: &str) -> Vec<(String, u64)> {
    s.split(FIELD_SEP)
        .filter_map(|field| {
            let (name, value) = field.rsplit_once('=')?;
            Some((name.trim().to_string(), value.trim().parse().ok()?))
        })
        .collect()
}

/// A total over the seeds, and how many seeds contributed to it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Total {
    sum: u64,
    seeds: u64,
}

impl Total {
    fn add(&mut self, value: u64) {
        self.sum = self.sum.saturating_add(value);
        self.seeds += u64::from(value > 0);
    }
}

/// The batch so far.
#[derive(Debug, Clone, Default)]
pub struct BatchSummary {
    passed: u64,
    failed: u64,
    /// Counter names in first-seen order, and their totals.
    order: Vec<String>,
    tallies: BTreeMap<String, Total>,
    marks: BTreeMap<String, Total>,
    /// Passing seeds short of a vacuity gate, and the gates.
    vacuous: BTreeMap<u64, Vec<String>>,
}

impl BatchSummary {
    pub fn passed(&mut self, seed: u64, counts: &SeedCounts) {
        self.passed += 1;
        if !counts.vacuous.is_empty() {
            self.vacuous.insert(seed, counts.vacuous.clone());
        }
        for (name, value) in &counts.tallies {
            if !self.tallies.contains_key(name) {
                self.order.push(name.clone());
            }
            self.tallies.entry(name.clone()).or_default().add(*value);
        }
        for (name, hits) in &counts.marks {
            self.marks.entry(name.clone()).or_default().add(*hits);
        }
    }

    pub fn failed(&mut self) {
        self.failed += 1;
    }

    pub fn seeds(&self) -> u64 {
        self.passed + self.failed
    }

    /// Why the batch fails as vacuous, if more of its seeds passed
    /// vacuously than [`vacuous_seed_limit`] allows.
    pub fn too_vacuous(&self) -> Option<String> {
        let limit = vacuous_seed_limit(self.seeds());
        let count = self.vacuous.len() as u64;
        (count > limit).then(|| {
            format!(
                "{count} of {} seeds passed vacuously (at most {limit} may): a workload or fault stopped reaching its path\n{}",
                self.seeds(),
                self.vacuous_lines()
            )
        })
    }

    /// `seed N: gate; gate`, a line each, in seed order.
    fn vacuous_lines(&self) -> String {
        self.vacuous
            .iter()
            .map(|(seed, gates)| format!("seed {seed}: {}\n", gates.join("; ")))
            .collect()
    }

    /// Marks no passing seed hit, in declaration order.
    pub fn never_hit(&self) -> Vec<Mark> {
        Mark::ALL
            .iter()
            .copied()
            .filter(|m| self.marks.get(m.name()).is_none_or(|t| t.sum == 0))
            .collect()
    }

    /// The `required` marks no passing seed hit.
    pub fn missing(&self, required: &[Mark]) -> Vec<Mark> {
        let never = self.never_hit();
        required
            .iter()
            .copied()
            .filter(|m| never.contains(m))
            .collect()
    }

    /// The `required` counters no passing seed counted above zero, or that
    /// no seed reported at all (a counter renamed without its requirement).
    pub fn missing_counts<'a>(&self, required: &[&'a str]) -> Vec<&'a str> {
        required
            .iter()
            .copied()
            .filter(|name| self.tallies.get(*name).is_none_or(|t| t.sum == 0))
            .collect()
    }

    /// The summary table, with the run's real time and parallelism.
    pub fn table(&self, elapsed: Duration, jobs: usize) -> Table<'_> {
        Table {
            summary: self,
            elapsed,
            jobs,
        }
    }
}

/// [`BatchSummary::table`]'s display.
pub struct Table<'a> {
    summary: &'a BatchSummary,
    elapsed: Duration,
    jobs: usize,
}

impl fmt::Display for Table<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.summary;
        let secs = self.elapsed.as_secs_f64();
        // Seeds a minute for each core the run used: the figure
        // docs/performance.md records.
        let per_core_minute = if secs > 0.0 {
            s.seeds() as f64 * 60.0 / secs / self.jobs.max(1) as f64
        } else {
            0.0
        };
        writeln!(
            f,
            "summary: {} seeds, {} passed, {} failed, {:.1} s real, {} jobs, {:.0} seeds per minute per core",
            s.seeds(),
            s.passed,
            s.failed,
            secs,
            self.jobs,
            per_core_minute
        )?;
        writeln!(
            f,
            "  {:<42} {:>12} {:>8}",
            "passing seeds' totals", "total", "seeds"
        )?;
        for name in &s.order {
            let t = s.tallies.get(name).copied().unwrap_or_default();
            writeln!(f, "  {name:<42} {:>12} {:>8}", t.sum, t.seeds)?;
        }
        writeln!(
            f,
            "  {:<42} {:>12} {:>8}",
            "coverage marks", "hits", "seeds"
        )?;
        for m in Mark::ALL {
            let t = s.marks.get(m.name()).copied().unwrap_or_default();
            let note = if t.sum == 0 { "   NEVER HIT" } else { "" };
            writeln!(f, "  {:<42} {:>12} {:>8}{note}", m.name(), t.sum, t.seeds)?;
        }
        writeln!(
            f,
            "  vacuous seeds: {} (at most {} may)",
            s.vacuous.len(),
            vacuous_seed_limit(s.seeds())
        )?;
        write!(f, "{}", s.vacuous_lines())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(tallies: &[(&str, u64)], marks: &[(Mark, u64)]) -> SeedCounts {
        SeedCounts {
            tallies: tallies.iter().map(|(n, v)| (n.to_string(), *v)).collect(),
            marks: marks
                .iter()
                .map(|(m, v)| (m.name().to_string(), *v))
                .collect(),
            vacuous: Vec::new(),
        }
    }

    fn vacuous(gate: &str) -> SeedCounts {
        SeedCounts {
            vacuous: vec![gate.to_string()],
            ..SeedCounts::default()
        }
    }

    #[test]
    fn a_batch_may_hold_two_vacuous_seeds_in_a_hundred_and_a_replay_none() {
        let mut replay = BatchSummary::default();
        replay.passed(359, &vacuous("1 crashes (need 2)"));
        let why = replay.too_vacuous().expect("a lone vacuous seed fails");
        assert!(why.contains("seed 359: 1 crashes (need 2)"), "{why}");

        let mut batch = BatchSummary::default();
        for seed in 0..300 {
            if seed % 50 == 0 {
                batch.passed(seed, &vacuous("0 transactions aborted (need 1)"));
            } else {
                batch.passed(seed, &SeedCounts::default());
            }
        }
        assert_eq!(batch.too_vacuous(), None, "6 of 300 may");
        batch.passed(300, &vacuous("0 transactions aborted (need 1)"));
        batch.failed();
        assert!(
            batch.too_vacuous().is_some(),
            "7 of 302 may not: 302 / 50 = 6"
        );
    }

    #[test]
    fn gates_survive_their_encoding() {
        let gates = vec!["1 crashes (need 2)".to_string(), "x (need 3)".to_string()];
        assert_eq!(decode_list(&encode_list(&gates)), gates);
        assert!(decode_list("").is_empty());
    }

    #[test]
    fn counts_survive_their_encoding_names_with_spaces_included() {
        let c = counts(&[("broker crashes", 3), ("fsyncs", 0)], &[]);
        assert_eq!(decode_counts(&encode_counts(&c.tallies)), c.tallies);
        assert_eq!(
            decode_counts("a=1;junk;b=x;c = 2"),
            vec![("a".into(), 1), ("c".into(), 2)]
        );
    }

    #[test]
    fn a_required_count_is_missing_when_zero_everywhere_or_never_reported() {
        let mut b = BatchSummary::default();
        b.passed(0, &counts(&[("reaped", 0), ("refused", 3)], &[]));
        b.passed(1, &counts(&[("reaped", 0), ("refused", 0)], &[]));
        assert_eq!(
            b.missing_counts(&["reaped", "refused", "renamed"]),
            vec!["reaped", "renamed"]
        );
        b.passed(2, &counts(&[("reaped", 1)], &[]));
        assert_eq!(b.missing_counts(&["reaped", "refused"]), Vec::<&str>::new());
    }

    #[test]
    fn totals_add_up_and_count_the_seeds_that_contributed() {
        let mut b = BatchSummary::default();
        b.passed(
            0,
            &counts(&[("crashes", 2)], &[(Mark::TornSegmentTailCut, 1)]),
        );
        b.passed(
            1,
            &counts(&[("crashes", 0)], &[(Mark::TornSegmentTailCut, 4)]),
        );
        b.failed();
        assert_eq!(b.seeds(), 3);
        assert_eq!(b.tallies["crashes"], Total { sum: 2, seeds: 1 });
        assert_eq!(
            b.marks[Mark::TornSegmentTailCut.name()],
            Total { sum: 5, seeds: 2 }
        );
        let table = b.table(Duration::from_secs(60), 2).to_string();
        assert!(table.contains("3 seeds, 2 passed, 1 failed"), "{table}");
        assert!(table.contains("2 seeds per minute per core"), "{table}");
    }

    #[test]
    fn a_mark_no_seed_hit_is_reported_and_missing_if_required() {
        let mut b = BatchSummary::default();
        b.passed(
            0,
            &counts(
                &[],
                &[(Mark::TornSegmentTailCut, 1), (Mark::TornJournalTailCut, 0)],
            ),
        );
        let never = b.never_hit();
        assert!(!never.contains(&Mark::TornSegmentTailCut));
        assert!(never.contains(&Mark::TornJournalTailCut));
        assert!(
            never.contains(&Mark::StaleListingRefused),
            "a mark never reported was never hit"
        );
        assert_eq!(
            b.missing(&[Mark::TornSegmentTailCut, Mark::TornJournalTailCut]),
            vec![Mark::TornJournalTailCut]
        );
        assert!(b
            .table(Duration::ZERO, 1)
            .to_string()
            .contains("TornJournalTailCut"));
    }
}
