//! Pass 2: the fate of every batch from the log start to the end of the
//! mapped section, decided one batch at a time in offset order.

use super::fate::Fate;
use super::key_map::KeyMap;
use super::producers::ActiveProducers;
use super::summary::CleanSummary;
use super::txn::TxnTracker;
use super::view::{BatchContent, BatchView, ViewRecord};
use crate::deliberate_bugs::{planted, Bug};
use crate::partition::AbortedTxn;
use crate::record::ControlType;

/// The time a pass runs at, and the topic's `delete.retention.ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PassTime {
    /// Wall-clock time of the pass (what delete horizons are compared to).
    pub now_ms: i64,
    /// How long tombstones and markers stay readable once a pass has found
    /// them removable (`delete.retention.ms`).
    pub delete_retention_ms: i64,
}

impl PassTime {
    /// The horizon a batch first rewritten now gets: `now + retention`.
    pub fn new_horizon(&self) -> i64 {
        self.now_ms.saturating_add(self.delete_retention_ms)
    }

    /// True if `horizon` (a batch's) has passed.
    pub fn has_passed(&self, horizon: Option<i64>) -> bool {
        horizon.is_some_and(|h| self.now_ms >= h)
    }
}

/// Why one record goes, or that it stays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Kept,
    Superseded,
    Keyless,
    TombstoneExpired,
}

/// The decision of one cleaning pass, fed the batches from the log start
/// in offset order ([`next`](Self::next)); it keeps only the transaction
/// state of the walk, so segments of any size stream through it.
///
/// Batches that do not end before the key map's [`end`](KeyMap::end) are
/// past this round: they are [`Fate::KeepWhole`] (but still walked, so the
/// transaction state stays right for the caller that feeds the rest of the
/// last segment).
#[derive(Debug, Clone)]
pub struct Decider {
    map: KeyMap,
    producers: ActiveProducers,
    time: PassTime,
    txns: TxnTracker,
    summary: CleanSummary,
    aborted_to_index: Vec<AbortedTxn>,
}

impl Decider {
    /// A pass over the log with the key map of its dirty section.
    /// `aborted` are the aborted transactions from the log start to the
    /// map's end (the partition's whole aborted index is fine), `producers`
    /// the active producers when the pass starts. The decider owns both,
    /// so a driver can carry it from one step of a pass to the next.
    pub fn new(
        map: KeyMap,
        aborted: &[AbortedTxn],
        producers: ActiveProducers,
        time: PassTime,
    ) -> Decider {
        Decider {
            map,
            producers,
            time,
            txns: TxnTracker::new(aborted),
            summary: CleanSummary::default(),
            aborted_to_index: Vec::new(),
        }
    }

    /// The fate of the next batch.
    pub fn next(&mut self, batch: &BatchView) -> Fate {
        let fate = self.decide(batch);
        self.summary.count_batch(batch, &fate);
        fate
    }

    /// The key map the pass decides by.
    pub fn map(&self) -> &KeyMap {
        &self.map
    }

    /// What the pass did so far.
    pub fn summary(&self) -> &CleanSummary {
        &self.summary
    }

    /// The aborted transactions whose markers stay and whose data was still
    /// in the log this pass, in marker order: the entries of the cleaned
    /// segments' aborted-transaction indexes (each goes with the segment
    /// holding its marker, at `last_offset`). An aborted transaction whose
    /// data is gone needs no entry: there is nothing left to filter.
    pub fn aborted_to_index(&self) -> &[AbortedTxn] {
        &self.aborted_to_index
    }

    fn decide(&mut self, batch: &BatchView) -> Fate {
        if batch.next_offset() > self.map.end() {
            self.walk_past_the_round(batch);
            return Fate::KeepWhole;
        }
        match &batch.content {
            BatchContent::Data(records) => self.decide_data(batch, records),
            BatchContent::Control {
                marker,
                record_count,
                ..
            } => self.decide_control(batch, *marker, *record_count),
            BatchContent::Opaque { .. } => {
                self.walk_opaque(batch);
                Fate::KeepWhole
            }
        }
    }

    /// A data batch: aborted ones go whole; otherwise each record is kept
    /// or not, and a kept tombstone gives the batch its delete horizon.
    fn decide_data(&mut self, batch: &BatchView, records: &[ViewRecord]) -> Fate {
        if self.txns.on_data(batch) {
            self.summary.aborted_removed += count(records.len());
            return self.all_records_go(batch);
        }
        let mut keep = Vec::with_capacity(records.len());
        let mut kept_tombstone = false;
        for record in records {
            let verdict = self.verdict(batch, record);
            self.count_verdict(verdict);
            let kept = verdict == Verdict::Kept;
            kept_tombstone |= kept && !record.has_value;
            keep.push(kept);
        }
        if !keep.contains(&true) {
            return self.all_records_go(batch);
        }
        let new_delete_horizon =
            (kept_tombstone && batch.delete_horizon_ms.is_none()).then(|| self.time.new_horizon());
        if new_delete_horizon.is_none() && !keep.contains(&false) {
            return Fate::KeepWhole;
        }
        Fate::Rewrite {
            keep,
            new_delete_horizon,
        }
    }

    /// The record rule: the latest record of its key stays (a key the map
    /// does not know has no later record in the dirty section), a tombstone
    /// only until its batch's delete horizon, a keyless record never.
    fn verdict(&self, batch: &BatchView, record: &ViewRecord) -> Verdict {
        let Some(key) = record.key.as_deref() else {
            return Verdict::Keyless;
        };
        if self
            .map
            .get(key)
            .is_some_and(|latest| record.offset < latest)
        {
            return Verdict::Superseded;
        }
        if !record.has_value && self.time.has_passed(batch.delete_horizon_ms) {
            return Verdict::TombstoneExpired;
        }
        Verdict::Kept
    }

    /// A transaction marker goes once no batch of its transaction is left
    /// and its delete horizon has passed; it gets that horizon on the first
    /// pass that finds its transaction empty. An ABORT marker stays
    /// ([`marker_may_go`]). An emptied control batch goes unless it must
    /// stay.
    fn decide_control(
        &mut self,
        batch: &BatchView,
        marker: Option<ControlType>,
        record_count: usize,
    ) -> Fate {
        let facts = self.txns.on_control(batch, marker);
        if let Some(aborted) = facts.aborted_with_data {
            self.aborted_to_index.push(aborted);
        }
        let done = facts.transaction_is_empty && marker_may_go(marker);
        let removable = done && self.time.has_passed(batch.delete_horizon_ms);
        if record_count == 0 || removable {
            self.summary.markers_removed += count(record_count);
            return self.all_records_go(batch);
        }
        if done && batch.delete_horizon_ms.is_none() {
            return Fate::Rewrite {
                keep: vec![true; record_count],
                new_delete_horizon: Some(self.time.new_horizon()),
            };
        }
        Fate::KeepWhole
    }

    /// Every record of `batch` goes: the batch goes too, unless it holds an
    /// active producer's last entry, or it is the last batch of the round
    /// (so the cleaned log still ends where the round did, as Kafka keeps
    /// it); then its header stays.
    fn all_records_go(&self, batch: &BatchView) -> Fate {
        let must_stay =
            self.producers.holds_last_entry(batch) || batch.next_offset() == self.map.end();
        match (must_stay, batch.record_count()) {
            (false, _) => Fate::Drop,
            // Already a bare header: nothing to rewrite.
            (true, Some(0)) => Fate::KeepWhole,
            (true, _) => Fate::KeepEmpty,
        }
    }

    /// A compressed batch that cannot be read stays whole; the walk still
    /// has to know about it.
    fn walk_opaque(&mut self, batch: &BatchView) {
        if let Some(aborted) = self.txns.on_opaque(batch) {
            self.aborted_to_index.push(aborted);
        }
    }

    /// A batch past the round stays whole; it is walked like any other so
    /// its transactions' markers are judged (and indexed) right.
    fn walk_past_the_round(&mut self, batch: &BatchView) {
        let aborted = match &batch.content {
            BatchContent::Data(_) => {
                self.txns.on_data(batch);
                None
            }
            BatchContent::Control { marker, .. } => {
                self.txns.on_control(batch, *marker).aborted_with_data
            }
            BatchContent::Opaque { .. } => self.txns.on_opaque(batch),
        };
        self.aborted_to_index.extend(aborted);
    }

    fn count_verdict(&mut self, verdict: Verdict) {
        let counter = match verdict {
            Verdict::Kept => return,
            Verdict::Superseded => &mut self.summary.records_superseded,
            Verdict::Keyless => &mut self.summary.keyless_removed,
            Verdict::TombstoneExpired => &mut self.summary.tombstones_removed,
        };
        *counter += 1;
    }
}

/// Whether a transaction marker may ever be removed (KIP-98: a marker
/// outlives its data, then its delete horizon). A COMMIT marker may. An
/// ABORT marker may not in kaas: Kafka drops its aborted-index entry in the
/// same pass that drops the marker, but a cleaned segment here keeps its
/// original aborted index, and a read_committed consumer handed an entry
/// whose marker is gone takes every later batch of that producer for
/// aborted (found by the simulator: committed transactions vanished from
/// read_committed after cleaning). It costs one small batch per aborted
/// transaction.
pub fn marker_may_go(marker: Option<ControlType>) -> bool {
    !matches!(marker, Some(ControlType::Abort)) || planted(Bug::AbortMarkerCleanedAway)
}

fn count(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}
