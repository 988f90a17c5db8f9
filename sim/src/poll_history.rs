//! Poll order within one consumer (Jepsen's "non-monotonic or skipping
//! polls"): what each consumer's fetch answers delivered, partition by
//! partition, compared with the consumer's own earlier answers as they
//! arrive and with the final log at the end.
//!
//! The consumers (`workload::consumer`, `txn::txn_consumer` at both
//! isolation levels, the group members and their zombies in
//! `group_member`) record every fetch answer
//! they take (a partition answered without an error): the offset asked
//! for, the batches it held, the offsets delivered to the application (at
//! read_committed: without aborted transactions' records and control
//! batches) and the offset the position moves to. They also record every
//! move of their position that is not an answer's, as a [`Seek`]: the
//! first position on a partition, a group member resuming from committed
//! offsets, a reset to the log start after OFFSET_OUT_OF_RANGE. Nothing
//! else may move a position, so the rules below are exact:
//!
//! As answers arrive, per consumer and partition:
//! - an answer asks for the consumer's position: the previous answer's next
//!   offset, or the last seek's target. Asking below it is a position
//!   going back; asking above it leaves a gap, checked at the end as a
//!   skip;
//! - its batches are in offset order, none overlapping, and the first
//!   holds the requested offset or starts above it (Kafka answers whole
//!   batches, so the first may start below the offset asked for; the
//!   client drops the records below it, as the Java consumer does): a
//!   batch ending below the requested offset is an answer going back;
//! - the offsets delivered strictly increase, within an answer and across
//!   answers, from the offset asked for and below the next offset; only a
//!   seek may take them back.
//!
//! At the end, against the final log of what the consumer reads (the final
//! read of `sim`; for the transactional topic's consumers, what the final
//! read of `simtx` at their isolation level delivered): an answer covers
//! `[requested, next offset)`, and every record of the final log in that
//! range must be among the offsets it delivered. A record missing from
//! the final log needs no delivery: deleted below the log start, cleaned
//! away by compaction, of an aborted transaction or a control batch at
//! read_committed, or past a torn tail and never acknowledged. The gap
//! between an answer's next offset and the next answer's requested offset
//! (with no seek between) is checked the same way. A seek's jump is not
//! checked here: its target comes from an OffsetFetch answer or a
//! ListOffsets answer, which `group_history` and `retention_history`
//! check.
//!
//! Pure bookkeeping, unit-tested without madsim.

use bytes::Bytes;
use std::collections::BTreeMap;

/// A seed must compare at least this many answers with the final log,
pub const MIN_ANSWERS_COMPARED: u64 = 20;
/// ... and find this many of the final logs' offsets within their ranges
/// (or as many as the final logs hold records, if fewer: a `retention.ms`
/// of 3 s leaves a few dozen).
pub const MIN_OFFSETS_CHECKED: u64 = 100;

/// Skips reported one by one per consumer and partition; the rest are
/// counted in one more message.
const SKIPS_SHOWN: usize = 3;

/// A consumer, as [`PollHistory::consumer`] numbered it.
pub type ConsumerId = usize;

/// Which final log a consumer's answers are judged against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reading {
    /// The main topic at read_uncommitted (the tailing consumer, the
    /// group's members): every record of the final log.
    Main,
    /// The transactional topic at read_committed: the records the final
    /// read_committed read delivered.
    TxnCommitted,
    /// The transactional topic at read_uncommitted: the records the final
    /// read_uncommitted read delivered (aborted transactions' included).
    TxnUncommitted,
}

/// Offset-ordered (offset, value) records per partition.
pub type Logs = BTreeMap<i32, Vec<(i64, Bytes)>>;

/// The final logs the consumers are judged against, one per [`Reading`].
#[derive(Debug, Clone, Copy)]
pub struct FinalLogs<'a> {
    pub main: &'a Logs,
    pub txn_committed: &'a Logs,
    pub txn_uncommitted: &'a Logs,
}

impl<'a> FinalLogs<'a> {
    fn of(&self, reading: Reading) -> &'a Logs {
        match reading {
            Reading::Main => self.main,
            Reading::TxnCommitted => self.txn_committed,
            Reading::TxnUncommitted => self.txn_uncommitted,
        }
    }

    fn records(&self) -> u64 {
        [self.main, self.txn_committed, self.txn_uncommitted]
            .iter()
            .flat_map(|l| l.values())
            .map(|l| l.len() as u64)
            .sum()
    }
}

/// Why a consumer's position moved other than by an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seek {
    /// Its first position on the partition (offset 0 for the tailing
    /// consumers; a zombie member starts where its member was).
    Start,
    /// A group member resuming from the committed offset (after it joined
    /// a generation): back or forward, wherever the commit was.
    Committed,
    /// OFFSET_OUT_OF_RANGE below the log start: moved to the log start
    /// ListOffsets EARLIEST answered.
    Reset,
}

/// One partition of one fetch answer, as the consumer took it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Answer {
    pub partition: i32,
    /// The offset the fetch asked for.
    pub requested: i64,
    /// Every batch the answer held, (base offset, last offset), in answer
    /// order: those the client dropped (aborted, control, below the
    /// requested offset) included.
    pub batches: Vec<(i64, i64)>,
    /// The offsets of the records delivered to the application, in order.
    pub delivered: Vec<i64>,
    /// Where the answer moves the position (the requested offset if it
    /// held nothing).
    pub next_offset: i64,
}

/// What the rules compared, for the report and the vacuity gate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PollStats {
    pub consumers: u64,
    /// Answers recorded.
    pub answers: u64,
    /// Answers whose range (`[requested, next offset)`, not empty) was
    /// compared with the final log.
    pub answers_compared: u64,
    /// Offsets of the final log within those ranges (each one had to be
    /// delivered).
    pub offsets_checked: u64,
    /// Offsets within those ranges the final log does not hold: deleted,
    /// cleaned, aborted, control batches.
    pub offsets_absent: u64,
    /// Answers whose first batch began below the offset asked for (it held
    /// it).
    pub began_below: u64,
    /// Answers whose first delivered record lay above the offset asked for.
    pub began_above: u64,
    /// Seeks to a committed offset,
    pub seeks_committed: u64,
    /// ... of them below the position the consumer had reached.
    pub seeks_back: u64,
    /// Resets to the log start.
    pub resets: u64,
}

/// A range of offsets a consumer moved over, with what it delivered there.
#[derive(Debug)]
struct Span {
    from: i64,
    to: i64,
    delivered: Vec<i64>,
    /// `Some(next offset)`: an answer's range; `None`: a gap between two
    /// answers.
    answer_next: Option<i64>,
}

#[derive(Debug, Default)]
struct PartitionPolls {
    /// Where the next answer must ask from (`None` before any seek).
    position: Option<i64>,
    /// The last offset delivered since the last seek.
    last_delivered: Option<i64>,
    spans: Vec<Span>,
}

#[derive(Debug)]
struct Consumer {
    name: String,
    reading: Reading,
    partitions: BTreeMap<i32, PartitionPolls>,
}

/// See the module documentation.
#[derive(Debug, Default)]
pub struct PollHistory {
    consumers: Vec<Consumer>,
    violations: Vec<String>,
    pub stats: PollStats,
}

/// The offsets in a violation message: the first few, and how many.
fn show(offsets: &[i64]) -> String {
    const SHOWN: usize = 8;
    let head: Vec<String> = offsets.iter().take(SHOWN).map(i64::to_string).collect();
    if offsets.len() > SHOWN {
        format!("[{}, ... ({} in all)]", head.join(", "), offsets.len())
    } else {
        format!("[{}]", head.join(", "))
    }
}

impl PollHistory {
    pub fn new() -> PollHistory {
        PollHistory::default()
    }

    /// A new consumer named `name` (for messages) reading as `reading`.
    pub fn consumer(&mut self, name: impl Into<String>, reading: Reading) -> ConsumerId {
        self.consumers.push(Consumer {
            name: name.into(),
            reading,
            partitions: BTreeMap::new(),
        });
        self.stats.consumers += 1;
        self.consumers.len() - 1
    }

    /// Violations found as answers arrived.
    pub fn violations(&self) -> &[String] {
        &self.violations
    }

    /// Consumer `id` moved its position on `partition` to `to`, for `why`.
    pub fn seek(&mut self, id: ConsumerId, partition: i32, to: i64, why: Seek) {
        let Some(c) = self.consumers.get_mut(id) else {
            return;
        };
        let p = c.partitions.entry(partition).or_default();
        match why {
            Seek::Start => {}
            Seek::Committed => {
                self.stats.seeks_committed += 1;
                let reached = p.position.unwrap_or(0);
                self.stats.seeks_back += u64::from(p.position.is_some() && to < reached);
            }
            Seek::Reset => self.stats.resets += 1,
        }
        p.position = Some(to);
        p.last_delivered = None;
    }

    /// Consumer `id` took `answer`; checks it against what it took before.
    pub fn answer(&mut self, id: ConsumerId, answer: Answer) {
        let Some(c) = self.consumers.get_mut(id) else {
            return;
        };
        self.stats.answers += 1;
        let Answer {
            partition,
            requested,
            batches,
            delivered,
            next_offset,
        } = answer;
        let who = format!("{}, partition {partition}", c.name);
        let mut problems = Vec::new();
        let p = c.partitions.entry(partition).or_default();
        match p.position {
            None => problems.push(format!(
                "polled from {requested} without a position (no seek before its first fetch)"
            )),
            Some(position) if requested < position => problems.push(format!(
                "fetched from {requested}, below its position {position}, with no seek: its position went back"
            )),
            Some(position) if requested > position => p.spans.push(Span {
                from: position,
                to: requested,
                delivered: Vec::new(),
                answer_next: None,
            }),
            Some(_) => {}
        }
        if let Some(&(base, last)) = batches.first() {
            if last < requested {
                problems.push(format!(
                    "a fetch from {requested} was answered from a batch at {base}..={last}, wholly below the offset asked for: the answer went back"
                ));
            }
            self.stats.began_below += u64::from(base < requested && last >= requested);
        }
        for pair in batches.windows(2) {
            let ((b0, l0), (b1, l1)) = (pair[0], pair[1]);
            if b1 <= l0 || l1 < b1 {
                problems.push(format!(
                    "a fetch from {requested} answered batch {b1}..={l1} after batch {b0}..={l0}: not in offset order"
                ));
            }
        }
        if let Some(&(base, last)) = batches.iter().find(|(b, l)| l < b) {
            problems.push(format!(
                "a fetch from {requested} answered a batch {base}..={last} ending before it begins"
            ));
        }
        let mut previous = p.last_delivered;
        for &o in &delivered {
            if previous.is_some_and(|prev| o <= prev) {
                problems.push(format!(
                    "delivered offset {o} after offset {} with no seek between (a fetch from {requested}): not increasing",
                    previous.unwrap_or_default()
                ));
            }
            if o < requested || o >= next_offset {
                problems.push(format!(
                    "a fetch from {requested} (next offset {next_offset}) delivered offset {o}, outside the range it answered"
                ));
            }
            previous = Some(o);
        }
        if next_offset < requested {
            problems.push(format!(
                "a fetch from {requested} moved the position back to {next_offset}"
            ));
        }
        self.stats.began_above += u64::from(delivered.first().is_some_and(|&o| o > requested));
        p.last_delivered = previous;
        p.position = Some(next_offset.max(requested));
        if next_offset > requested {
            p.spans.push(Span {
                from: requested,
                to: next_offset,
                delivered,
                answer_next: Some(next_offset),
            });
        }
        self.violations.extend(
            problems
                .into_iter()
                .map(|m| format!("poll order: {who}: {m}")),
        );
    }

    /// The end: every range a consumer moved over, compared with the final
    /// log it reads ([`FinalLogs`]). Returns every violation, those found
    /// as answers arrived first.
    pub fn check_final(&mut self, finals: &FinalLogs) -> Vec<String> {
        let mut out = self.violations.clone();
        let empty = Vec::new();
        for c in &self.consumers {
            let logs = finals.of(c.reading);
            for (&partition, p) in &c.partitions {
                let log = logs.get(&partition).unwrap_or(&empty);
                let (mut skips, mut skipped) = (0usize, 0usize);
                for span in &p.spans {
                    let lo = log.partition_point(|(o, _)| *o < span.from);
                    let hi = log.partition_point(|(o, _)| *o < span.to);
                    let in_log = &log[lo..hi];
                    let missing: Vec<i64> = in_log
                        .iter()
                        .map(|(o, _)| *o)
                        .filter(|o| span.delivered.binary_search(o).is_err())
                        .collect();
                    self.stats.offsets_checked += in_log.len() as u64;
                    self.stats.offsets_absent +=
                        u64::try_from(span.to - span.from).unwrap_or(0) - in_log.len() as u64;
                    if span.answer_next.is_some() {
                        self.stats.answers_compared += 1;
                    }
                    if missing.is_empty() {
                        continue;
                    }
                    skips += 1;
                    skipped += missing.len();
                    if skips > SKIPS_SHOWN {
                        continue;
                    }
                    let what = match span.answer_next {
                        Some(next) => format!(
                            "the answer to a fetch from {} (next offset {next}, delivered {}) skipped",
                            span.from,
                            show(&span.delivered)
                        ),
                        None => format!(
                            "the next fetch asked from {}, past its position {}, and so skipped",
                            span.to, span.from
                        ),
                    };
                    out.push(format!(
                        "poll order: {}, partition {partition}: {what} offsets {} of the final log",
                        c.name,
                        show(&missing)
                    ));
                }
                if skips > SKIPS_SHOWN {
                    out.push(format!(
                        "poll order: {}, partition {partition}: {skips} skips in all, {skipped} offsets of the final log never delivered",
                        c.name
                    ));
                }
            }
        }
        out
    }
}

impl PollHistory {
    /// A seed's end ([`check_final`](Self::check_final) and the vacuity
    /// gate): violations go to `problems`, shortfalls to `vacuous`.
    pub fn check_seed(
        &mut self,
        finals: &FinalLogs,
        problems: &mut Vec<String>,
        vacuous: &mut Vec<String>,
    ) -> PollStats {
        problems.extend(self.check_final(finals));
        vacuous.extend(shortfalls(&self.stats, finals.records()));
        self.stats
    }
}

/// The vacuity gate: what a seed's poll-order check must have compared
/// (every seed runs the tailing consumer), its final logs holding
/// `final_records` records in all.
pub fn shortfalls(stats: &PollStats, final_records: u64) -> Vec<String> {
    let min_offsets = MIN_OFFSETS_CHECKED.min(final_records);
    let mut out = Vec::new();
    if stats.answers_compared < MIN_ANSWERS_COMPARED {
        out.push(format!(
            "{} poll answers compared with the final log (need {MIN_ANSWERS_COMPARED})",
            stats.answers_compared
        ));
    }
    if stats.offsets_checked < min_offsets {
        out.push(format!(
            "{} polled offsets checked against the final log (need {min_offsets})",
            stats.offsets_checked
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A final log holding `offsets`.
    fn log(offsets: impl IntoIterator<Item = i64>) -> Vec<(i64, Bytes)> {
        offsets
            .into_iter()
            .map(|o| (o, Bytes::from(format!("r{o}"))))
            .collect()
    }

    fn logs(p0: Vec<(i64, Bytes)>) -> BTreeMap<i32, Vec<(i64, Bytes)>> {
        BTreeMap::from([(0, p0)])
    }

    static NO_LOGS: Logs = BTreeMap::new();

    /// The final logs of the main topic and of the transactional topic at
    /// read_committed (no consumer of these tests reads it uncommitted).
    fn finals<'a>(main: &'a Logs, txn_committed: &'a Logs) -> FinalLogs<'a> {
        FinalLogs {
            main,
            txn_committed,
            txn_uncommitted: &NO_LOGS,
        }
    }

    /// An answer of one batch per record of `delivered` (read_uncommitted).
    fn answer(requested: i64, delivered: &[i64], next_offset: i64) -> Answer {
        Answer {
            partition: 0,
            requested,
            batches: delivered.iter().map(|&o| (o, o)).collect(),
            delivered: delivered.to_vec(),
            next_offset,
        }
    }

    /// A consumer of partition 0 at offset 0.
    fn started(reading: Reading) -> (PollHistory, ConsumerId) {
        let mut h = PollHistory::new();
        let c = h.consumer("consumer", reading);
        h.seek(c, 0, 0, Seek::Start);
        (h, c)
    }

    #[test]
    fn a_poll_that_skips_a_record_of_the_final_log_is_a_violation() {
        let (mut h, c) = started(Reading::Main);
        h.answer(c, answer(0, &[0, 1, 2], 3));
        // Asked from 3, answered from 5: one batch (3..=4) skipped.
        h.answer(c, answer(3, &[5, 6], 7));
        assert!(h.violations().is_empty(), "{:?}", h.violations());
        let v = h.check_final(&finals(&logs(log(0..7)), &BTreeMap::new()));
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].contains("skipped offsets [3, 4]"), "{v:?}");
        assert_eq!(h.stats.answers_compared, 2);
        assert_eq!(h.stats.offsets_checked, 7);
    }

    #[test]
    fn a_skip_over_offsets_the_final_log_lacks_is_no_violation() {
        let (mut h, c) = started(Reading::Main);
        h.answer(c, answer(0, &[0, 1, 2], 3));
        h.answer(c, answer(3, &[5, 6], 7));
        // 3 and 4 were never durable (a torn tail cut before any fetch
        // could see it, and the offsets never reused).
        let v = h.check_final(&finals(&logs(log([0, 1, 2, 5, 6])), &BTreeMap::new()));
        assert!(v.is_empty(), "{v:?}");
        assert_eq!(h.stats.offsets_absent, 2);
        assert_eq!(h.stats.began_above, 1);
    }

    #[test]
    fn a_record_left_out_between_two_delivered_ones_is_a_skip() {
        let (mut h, c) = started(Reading::Main);
        h.answer(c, answer(0, &[0, 1, 3], 4));
        let v = h.check_final(&finals(&logs(log(0..4)), &BTreeMap::new()));
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].contains("skipped offsets [2]"), "{v:?}");
    }

    #[test]
    fn records_after_the_last_delivered_one_up_to_the_next_offset_must_be_delivered() {
        let (mut h, c) = started(Reading::Main);
        // The position moved to 6, but 4 and 5 were never delivered.
        h.answer(c, answer(0, &[0, 1, 2, 3], 6));
        let v = h.check_final(&finals(&logs(log(0..6)), &BTreeMap::new()));
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].contains("skipped offsets [4, 5]"), "{v:?}");
    }

    #[test]
    fn records_compacted_away_are_not_skips() {
        let (mut h, c) = started(Reading::TxnCommitted);
        // The cleaner left 0, 4 and 9 of 0..10: the answer's batches hold
        // only those (an emptied batch in between).
        h.answer(
            c,
            Answer {
                partition: 0,
                requested: 0,
                batches: vec![(0, 2), (3, 7), (8, 9)],
                delivered: vec![0, 4, 9],
                next_offset: 10,
            },
        );
        let v = h.check_final(&finals(&BTreeMap::new(), &logs(log([0, 4, 9]))));
        assert!(v.is_empty(), "{v:?}");
        assert_eq!(h.stats.offsets_checked, 3);
        assert_eq!(h.stats.offsets_absent, 7);
    }

    /// 0..=2 an aborted transaction's batch, 3 its ABORT marker, 4..=5
    /// committed, 6 its COMMIT marker; a read_committed answer delivering
    /// only the committed records.
    fn aborted_then_committed() -> Answer {
        Answer {
            partition: 0,
            requested: 0,
            batches: vec![(0, 2), (3, 3), (4, 5), (6, 6)],
            delivered: vec![4, 5],
            next_offset: 7,
        }
    }

    #[test]
    fn aborted_records_and_control_batches_are_not_skips_at_read_committed() {
        let (mut h, c) = started(Reading::TxnCommitted);
        h.answer(c, aborted_then_committed());
        let v = h.check_final(&finals(&BTreeMap::new(), &logs(log([4, 5]))));
        assert!(v.is_empty(), "{v:?}");
        // The same answer judged against a final read that shows the first
        // transaction committed: it dropped committed records.
        let v = h.check_final(&finals(&BTreeMap::new(), &logs(log([0, 1, 2, 4, 5]))));
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].contains("skipped offsets [0, 1, 2]"), "{v:?}");
    }

    #[test]
    fn aborted_records_are_skips_at_read_uncommitted() {
        // The same answer as above, from a read_uncommitted consumer, is
        // judged against the final read_uncommitted read, which holds the
        // aborted transaction's records: they were skipped.
        let (mut h, c) = started(Reading::TxnUncommitted);
        h.answer(c, aborted_then_committed());
        let uncommitted = logs(log([0, 1, 2, 4, 5]));
        let committed = logs(log([4, 5]));
        let judged = FinalLogs {
            main: &NO_LOGS,
            txn_committed: &committed,
            txn_uncommitted: &uncommitted,
        };
        let v = h.check_final(&judged);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].contains("skipped offsets [0, 1, 2]"), "{v:?}");
        // Delivering them all passes.
        let (mut h, c) = started(Reading::TxnUncommitted);
        let all = Answer {
            delivered: vec![0, 1, 2, 4, 5],
            ..aborted_then_committed()
        };
        h.answer(c, all);
        assert!(h.check_final(&judged).is_empty());
    }

    #[test]
    fn records_deleted_below_the_log_start_are_not_skips() {
        let (mut h, c) = started(Reading::Main);
        h.answer(c, answer(0, &[0, 1, 2], 3));
        // OFFSET_OUT_OF_RANGE at 3: the log starts at 10 now.
        h.seek(c, 0, 10, Seek::Reset);
        h.answer(c, answer(10, &[10, 11], 12));
        let v = h.check_final(&finals(&logs(log(10..12)), &BTreeMap::new()));
        assert!(v.is_empty(), "{v:?}");
        assert_eq!(h.stats.resets, 1);
        assert_eq!(h.stats.offsets_checked, 2);
    }

    #[test]
    fn a_seek_back_to_a_committed_offset_is_not_a_regression() {
        let mut h = PollHistory::new();
        let c = h.consumer("member 0.0", Reading::Main);
        h.seek(c, 0, 0, Seek::Committed);
        h.answer(c, answer(0, &[0, 1, 2, 3, 4], 5));
        // A rebalance: the member resumes from the committed offset 2 and
        // delivers 2..=4 again.
        h.seek(c, 0, 2, Seek::Committed);
        h.answer(c, answer(2, &[2, 3, 4, 5], 6));
        assert!(h.violations().is_empty(), "{:?}", h.violations());
        assert!(h
            .check_final(&finals(&logs(log(0..6)), &BTreeMap::new()))
            .is_empty());
        assert_eq!(h.stats.seeks_committed, 2);
        assert_eq!(h.stats.seeks_back, 1);
    }

    #[test]
    fn a_position_that_goes_back_without_a_seek_is_a_violation() {
        let (mut h, c) = started(Reading::Main);
        h.answer(c, answer(0, &[0, 1, 2, 3, 4], 5));
        h.answer(c, answer(2, &[2, 3, 4], 5));
        assert_eq!(h.violations().len(), 2, "{:?}", h.violations());
        assert!(h.violations()[0].contains("its position went back"));
        assert!(h.violations()[1].contains("not increasing"));
    }

    #[test]
    fn an_answer_from_before_its_requested_offset_is_a_violation() {
        let (mut h, c) = started(Reading::Main);
        h.answer(c, answer(0, &[0, 1, 2, 3, 4, 5], 6));
        // Asked from 6, answered with the batch 2..=4 (the client drops its
        // records: they are below the offset asked for).
        h.answer(
            c,
            Answer {
                partition: 0,
                requested: 6,
                batches: vec![(2, 4)],
                delivered: vec![],
                next_offset: 6,
            },
        );
        assert_eq!(h.violations().len(), 1, "{:?}", h.violations());
        assert!(h.violations()[0].contains("the answer went back"));
    }

    #[test]
    fn an_answer_may_begin_in_the_batch_holding_the_requested_offset() {
        let (mut h, c) = started(Reading::Main);
        h.answer(c, answer(0, &[0, 1], 2));
        // The batch 0..=4 again, from 2: the client drops 0 and 1.
        h.answer(
            c,
            Answer {
                partition: 0,
                requested: 2,
                batches: vec![(0, 4), (5, 6)],
                delivered: vec![2, 3, 4, 5, 6],
                next_offset: 7,
            },
        );
        assert!(h.violations().is_empty(), "{:?}", h.violations());
        assert!(h
            .check_final(&finals(&logs(log(0..7)), &BTreeMap::new()))
            .is_empty());
        assert_eq!(h.stats.began_below, 1);
    }

    #[test]
    fn batches_out_of_offset_order_are_a_violation() {
        let (mut h, c) = started(Reading::Main);
        h.answer(
            c,
            Answer {
                partition: 0,
                requested: 0,
                batches: vec![(0, 3), (2, 5)],
                delivered: vec![0, 1, 2, 3, 4, 5],
                next_offset: 6,
            },
        );
        assert_eq!(h.violations().len(), 1, "{:?}", h.violations());
        assert!(h.violations()[0].contains("not in offset order"));
    }

    #[test]
    fn offsets_delivered_out_of_order_within_an_answer_are_a_violation() {
        let (mut h, c) = started(Reading::Main);
        h.answer(
            c,
            Answer {
                partition: 0,
                requested: 0,
                batches: vec![(0, 2)],
                delivered: vec![0, 2, 1],
                next_offset: 3,
            },
        );
        assert_eq!(h.violations().len(), 1, "{:?}", h.violations());
        assert!(h.violations()[0].contains("not increasing"));
    }

    #[test]
    fn a_delivered_offset_outside_the_answered_range_is_a_violation() {
        let (mut h, c) = started(Reading::Main);
        h.answer(c, answer(0, &[0, 1, 2], 2));
        assert_eq!(h.violations().len(), 1, "{:?}", h.violations());
        assert!(h.violations()[0].contains("outside the range"));
    }

    #[test]
    fn a_gap_between_answers_without_a_seek_is_checked_as_a_skip() {
        let (mut h, c) = started(Reading::Main);
        h.answer(c, answer(0, &[0, 1, 2], 3));
        h.answer(c, answer(5, &[5], 6));
        assert!(h.violations().is_empty(), "{:?}", h.violations());
        let v = h.check_final(&finals(&logs(log(0..6)), &BTreeMap::new()));
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].contains("past its position 3"), "{v:?}");
        assert!(v[0].contains("skipped offsets [3, 4]"), "{v:?}");
    }

    #[test]
    fn a_poll_without_a_position_is_a_violation() {
        let mut h = PollHistory::new();
        let c = h.consumer("consumer", Reading::Main);
        h.answer(c, answer(0, &[0], 1));
        assert_eq!(h.violations().len(), 1, "{:?}", h.violations());
        assert!(h.violations()[0].contains("without a position"));
    }

    #[test]
    fn consumers_and_partitions_are_judged_apart() {
        let mut h = PollHistory::new();
        let a = h.consumer("a", Reading::Main);
        let b = h.consumer("b", Reading::TxnCommitted);
        h.seek(a, 0, 0, Seek::Start);
        h.seek(a, 1, 0, Seek::Start);
        h.seek(b, 0, 0, Seek::Start);
        h.answer(a, answer(0, &[0, 1], 2));
        h.answer(
            a,
            Answer {
                partition: 1,
                ..answer(0, &[0], 1)
            },
        );
        // b reads another topic: its offsets 0 and 1 are its own.
        h.answer(b, answer(0, &[0, 1], 2));
        assert!(h.violations().is_empty(), "{:?}", h.violations());
        let main = BTreeMap::from([(0, log(0..2)), (1, log(0..1))]);
        let v = h.check_final(&finals(&main, &logs(log(0..2))));
        assert!(v.is_empty(), "{v:?}");
        assert_eq!(h.stats.answers_compared, 3);
        assert_eq!(h.stats.offsets_checked, 5);
    }

    #[test]
    fn an_empty_answer_covers_nothing() {
        let (mut h, c) = started(Reading::Main);
        h.answer(c, answer(0, &[], 0));
        h.answer(c, answer(0, &[0], 1));
        assert!(h.violations().is_empty(), "{:?}", h.violations());
        assert!(h
            .check_final(&finals(&logs(log(0..1)), &BTreeMap::new()))
            .is_empty());
        assert_eq!(h.stats.answers, 2);
        assert_eq!(h.stats.answers_compared, 1);
    }

    #[test]
    fn many_skips_are_reported_a_few_and_counted() {
        let (mut h, c) = started(Reading::Main);
        for i in 0..10 {
            h.answer(c, answer(3 * i, &[3 * i + 1, 3 * i + 2], 3 * i + 3));
        }
        let v = h.check_final(&finals(&logs(log(0..30)), &BTreeMap::new()));
        assert_eq!(v.len(), SKIPS_SHOWN + 1, "{v:?}");
        assert!(
            v[SKIPS_SHOWN].contains("10 skips in all, 10 offsets"),
            "{v:?}"
        );
    }

    #[test]
    fn a_seed_that_compared_nothing_is_vacuous() {
        let short = shortfalls(&PollStats::default(), 1_000);
        assert_eq!(short.len(), 2, "{short:?}");
        let enough = PollStats {
            answers_compared: MIN_ANSWERS_COMPARED,
            offsets_checked: MIN_OFFSETS_CHECKED,
            ..PollStats::default()
        };
        assert!(shortfalls(&enough, 1_000).is_empty());
        // Retention left 14 records: checking 28 offsets (two consumers
        // read them) is all there was to check.
        let few = PollStats {
            offsets_checked: 28,
            ..enough
        };
        assert!(shortfalls(&few, 14).is_empty());
        assert_eq!(shortfalls(&few, 1_000).len(), 1);
    }
}
