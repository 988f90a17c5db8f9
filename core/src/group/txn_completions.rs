//! Transaction ends applied to this coordinator's groups, for the
//! TxnOffsetCommits that wait on a transaction coordinator on another
//! broker.
//!
//! A TxnOffsetCommit whose transaction coordinator is another broker asks
//! it, through the volume, whether the group is in the producer's
//! transaction, and stages its offsets only once the answer is back. The
//! answer is older than the staging: the transaction may have ended
//! meanwhile and its staged offsets been completed here (a delayed
//! request, retried by its client long ago). Offsets staged after their
//! transaction's completion would be completed by the producer's next
//! transaction, moving the group's offsets back. So each completion is
//! numbered, the commit takes the number before it asks, and its staging
//! is refused as retriable if its producer's transaction was completed
//! since (`completed_since`), as a partition refuses a batch verified
//! before a marker it did not see.

use std::collections::HashMap;

/// How long a completion is remembered: longer than any remote question
/// waits for its answer (seconds), so no staging can outlive the memory of
/// a completion it raced.
pub const REMEMBERED_MS: i64 = 60_000;

#[derive(Debug, Clone, Default)]
pub struct TxnCompletions {
    /// The number of the last completion recorded.
    last: u64,
    /// Per producer id: the number of its last completion, and when.
    by_producer: HashMap<i64, (u64, i64)>,
    /// The map's size after the last pruning: it is pruned again once it
    /// has doubled, so pruning costs O(1) per completion on average.
    pruned_at_len: usize,
}

impl TxnCompletions {
    /// The number to take before asking a remote coordinator.
    pub fn mark(&self) -> u64 {
        self.last
    }

    /// A transaction of `producer_id` was completed here at `now_ms`.
    pub fn record(&mut self, producer_id: i64, now_ms: i64) {
        self.last += 1;
        self.by_producer.insert(producer_id, (self.last, now_ms));
        if self.by_producer.len() >= 2 * self.pruned_at_len.max(64) {
            self.by_producer
                .retain(|_, &mut (_, at)| now_ms - at < REMEMBERED_MS);
            self.pruned_at_len = self.by_producer.len();
        }
    }

    /// Whether a transaction of `producer_id` was completed after `mark`
    /// was taken.
    pub fn completed_since(&self, producer_id: i64, mark: u64) -> bool {
        self.by_producer
            .get(&producer_id)
            .is_some_and(|&(n, _)| n > mark)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_staging_verified_before_its_transactions_completion_is_refused() {
        let mut c = TxnCompletions::default();
        c.record(7, 0);
        let mark = c.mark();
        assert!(
            !c.completed_since(7, mark),
            "an earlier completion does not count"
        );
        c.record(8, 1);
        assert!(
            !c.completed_since(7, mark),
            "another producer's does not count"
        );
        c.record(7, 2);
        assert!(c.completed_since(7, mark));
        assert!(!c.completed_since(7, c.mark()));
    }

    #[test]
    fn completions_are_forgotten_only_after_they_can_no_longer_race() {
        let mut c = TxnCompletions::default();
        let mark = c.mark();
        c.record(1, 0);
        for pid in 2..10_000 {
            c.record(pid, REMEMBERED_MS - 1);
        }
        assert!(c.completed_since(1, mark), "still within the window");
        for pid in 10_000..30_000 {
            c.record(pid, 3 * REMEMBERED_MS);
        }
        assert!(!c.by_producer.contains_key(&1), "pruned once old");
        assert!(
            c.by_producer.len() < 30_000,
            "the map is bounded by the window"
        );
    }
}
