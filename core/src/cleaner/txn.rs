//! Which transaction each batch belongs to, walking the log in offset order:
//! the aborted ones (from the aborted-transactions index) and the rest.
//!
//! Both passes need it: the key map must not learn keys from aborted
//! records, and the decision drops aborted batches and decides when a
//! transaction's marker may go (only once no batch of its transaction is
//! left, KIP-98's "a marker outlives its data").

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::view::BatchView;
use crate::partition::AbortedTxn;
use crate::record::ControlType;

/// An aborted transaction the walk is inside of, for its producer.
#[derive(Debug, Clone, Copy)]
struct OpenAbort {
    txn: AbortedTxn,
    /// A batch of it was met in this walk: its marker must stay.
    data_seen: bool,
}

/// What a control batch closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MarkerFacts {
    /// No batch of the transaction the marker closes was met in this walk
    /// (or it is an emptied control batch): once its delete horizon has
    /// passed, nothing needs the marker any more.
    pub transaction_is_empty: bool,
    /// The aborted transaction the marker closes, if it is one and its data
    /// is still in the log: it belongs in the cleaned segment's aborted
    /// index.
    pub aborted_with_data: Option<AbortedTxn>,
}

/// The walk's transaction state.
#[derive(Debug, Clone, Default)]
pub(crate) struct TxnTracker {
    /// Aborted transactions not reached yet, by first offset.
    pending: VecDeque<AbortedTxn>,
    /// Per producer, the aborted transaction the walk is inside of.
    aborted: BTreeMap<i64, OpenAbort>,
    /// Producers whose current (not aborted) transaction had a batch in
    /// this walk.
    committed_seen: BTreeSet<i64>,
}

impl TxnTracker {
    pub fn new(aborted: &[AbortedTxn]) -> TxnTracker {
        let mut pending: Vec<AbortedTxn> = aborted.to_vec();
        pending.sort_by_key(|a| (a.first_offset, a.producer_id));
        TxnTracker {
            pending: pending.into(),
            ..TxnTracker::default()
        }
    }

    /// A data batch: true if it belongs to an aborted transaction.
    pub fn on_data(&mut self, batch: &BatchView) -> bool {
        self.enter_aborted_up_to(batch);
        if !batch.is_transactional || !batch.has_producer_id() {
            return false;
        }
        match self.aborted.get_mut(&batch.producer_id) {
            Some(open) => {
                open.data_seen = true;
                true
            }
            None => {
                self.committed_seen.insert(batch.producer_id);
                false
            }
        }
    }

    /// A control batch: it ends its producer's transaction, whatever its
    /// type (see [`MarkerFacts`]). `marker` is `None` for an emptied or
    /// unreadable control batch.
    pub fn on_control(&mut self, batch: &BatchView, marker: Option<ControlType>) -> MarkerFacts {
        self.enter_aborted_up_to(batch);
        // A producer's control batch always closes its transaction. Ending
        // it here whatever the type (and not only on a readable ABORT, as
        // Kafka does) means an emptied or unreadable marker cannot leave an
        // aborted transaction open and take the producer's later committed
        // batches with it.
        let abort = self.aborted.remove(&batch.producer_id);
        let committed = self.committed_seen.remove(&batch.producer_id);
        let aborted_with_data = abort.filter(|a| a.data_seen).map(|a| a.txn);
        let transaction_is_empty = match marker {
            Some(ControlType::Abort) => aborted_with_data.is_none(),
            Some(ControlType::Commit) => !committed,
            // A control record kaas does not know: keep it.
            Some(ControlType::Other(_)) => false,
            // No records: an earlier pass already cleaned it.
            None => true,
        };
        MarkerFacts {
            transaction_is_empty,
            aborted_with_data,
        }
    }

    /// A compressed batch that cannot be read, kept whole: a data batch counts as met (its
    /// marker must stay), a control batch ends its producer's transaction.
    pub fn on_opaque(&mut self, batch: &BatchView) -> Option<AbortedTxn> {
        if batch.is_control() {
            // Its type cannot be read; only what it closes matters here,
            // since the batch is kept whatever it is.
            self.on_control(batch, None).aborted_with_data
        } else {
            self.on_data(batch);
            None
        }
    }

    /// Enters the aborted transactions that have begun by the end of
    /// `batch`. One that ended before the batch begins (its marker, which
    /// this walk never met, lies before the batch) is skipped, and an open
    /// one whose marker offset lies before the batch is closed: so aborted
    /// entries from outside the walked range, or whose markers an earlier
    /// pass removed, cannot mark later batches of the producer as aborted.
    fn enter_aborted_up_to(&mut self, batch: &BatchView) {
        while let Some(next) = self.pending.front().copied() {
            if next.first_offset > batch.last_offset {
                break;
            }
            self.pending.pop_front();
            if next.last_offset < batch.base_offset {
                continue;
            }
            let still_open = self
                .aborted
                .get(&next.producer_id)
                .is_some_and(|open| open.txn.last_offset >= next.first_offset);
            if !still_open {
                let open = OpenAbort {
                    txn: next,
                    data_seen: false,
                };
                self.aborted.insert(next.producer_id, open);
            }
        }
        if let Some(open) = self.aborted.get(&batch.producer_id) {
            if open.txn.last_offset < batch.base_offset {
                self.aborted.remove(&batch.producer_id);
            }
        }
    }
}
