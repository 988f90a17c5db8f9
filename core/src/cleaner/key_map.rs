//! Pass 1: the latest offset of every key in the dirty section.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

use super::txn::TxnTracker;
use super::view::{BatchContent, BatchView};
use crate::partition::AbortedTxn;

/// What the map charges per key on top of the key's own bytes: the offset,
/// the boxed slice's pointer and length, and the tree's per-entry share.
/// An estimate; it only has to keep the map's real size near the budget.
pub const ENTRY_OVERHEAD_BYTES: usize = 48;

/// Key -> latest offset over the dirty section, built batch by batch.
///
/// Keys are stored whole (no hash: two keys never collide, unlike Kafka's
/// MD5-keyed map) in an ordered map, which keeps lookups `O(log n)` whatever
/// keys producers choose. Only data batches count: control batches and
/// batches of aborted transactions add no keys, and nor do compressed
/// batches that cannot be decompressed (their records cannot be read).
///
/// The map stops when the next batch's new keys would overflow the byte
/// budget. It stops at that batch's boundary, so the section it covers,
/// `[first dirty, end())`, is whole batches, and `end()` is where this
/// round of cleaning stops; the rest stays dirty for the next round. The
/// first batch is always taken, so a round always makes progress (the
/// budget can be exceeded by that one batch's keys).
#[derive(Debug, Clone)]
pub struct KeyMap {
    entries: BTreeMap<Box<[u8]>, i64>,
    dirty: Range<i64>,
    budget: usize,
    used: usize,
    end: i64,
    mapped_batches: usize,
    full: bool,
    txns: TxnTracker,
}

/// What [`KeyMap::add`] did with a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapStep {
    /// The batch is in the map's section now; go on.
    Mapped,
    /// The budget is full: this batch and every later one stay dirty for
    /// the next round. Stop reading.
    Full,
    /// The batch is not in the dirty section (it ends before it, or does
    /// not end before its end): ignored.
    Outside,
}

impl KeyMap {
    /// An empty map for the dirty section `dirty` (`first dirty offset ..
    /// end of the cleanable range`), holding at most about `budget_bytes`
    /// (see [`ENTRY_OVERHEAD_BYTES`]). `aborted` are the aborted
    /// transactions of the partition that overlap the section (more is
    /// harmless: entries that ended before a batch are ignored at it).
    pub fn with_budget(budget_bytes: usize, dirty: Range<i64>, aborted: &[AbortedTxn]) -> KeyMap {
        KeyMap {
            entries: BTreeMap::new(),
            end: dirty.start,
            dirty,
            budget: budget_bytes,
            used: 0,
            mapped_batches: 0,
            full: false,
            txns: TxnTracker::new(aborted),
        }
    }

    /// Adds the next batch of the dirty section, in offset order.
    pub fn add(&mut self, batch: &BatchView) -> MapStep {
        if self.full {
            return MapStep::Full;
        }
        if batch.next_offset() <= self.dirty.start || batch.next_offset() > self.dirty.end {
            return MapStep::Outside;
        }
        let keys = match &batch.content {
            BatchContent::Data(records) => {
                if self.txns.on_data(batch) {
                    Vec::new()
                } else {
                    records
                        .iter()
                        .filter(|r| r.offset >= self.dirty.start)
                        .filter_map(|r| r.key.as_deref().map(|key| (key, r.offset)))
                        .collect()
                }
            }
            BatchContent::Control { marker, .. } => {
                self.txns.on_control(batch, *marker);
                Vec::new()
            }
            BatchContent::Opaque { .. } => {
                self.txns.on_opaque(batch);
                Vec::new()
            }
        };
        let cost = self.cost_of_new(&keys);
        // A batch without new keys costs nothing and always fits.
        let overflows = cost > 0 && self.used.saturating_add(cost) > self.budget;
        if overflows && self.mapped_batches > 0 {
            self.full = true;
            return MapStep::Full;
        }
        for (key, offset) in keys {
            self.entries.insert(key.into(), offset);
        }
        self.used = self.used.saturating_add(cost);
        self.end = batch.next_offset();
        self.mapped_batches += 1;
        MapStep::Mapped
    }

    /// The latest offset of `key` in the mapped section.
    pub fn get(&self, key: &[u8]) -> Option<i64> {
        self.entries.get(key).copied()
    }

    /// The end (exclusive) of the mapped section: this round cleans the log
    /// below it, and the next round's dirty section starts here (the new
    /// cleaner checkpoint). The first dirty offset until a batch is mapped.
    pub fn end(&self) -> i64 {
        self.end
    }

    /// True once the budget stopped the map before the end of the section.
    pub fn is_full(&self) -> bool {
        self.full
    }

    /// Number of distinct keys.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True if no key was mapped.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Bytes charged against the budget so far.
    pub fn bytes_used(&self) -> usize {
        self.used
    }

    /// What the keys not yet in the map cost, each distinct key once.
    fn cost_of_new(&self, keys: &[(&[u8], i64)]) -> usize {
        let new: BTreeSet<&[u8]> = keys
            .iter()
            .map(|&(key, _)| key)
            .filter(|key| !self.entries.contains_key(*key))
            .collect();
        new.iter()
            .map(|key| key.len().saturating_add(ENTRY_OVERHEAD_BYTES))
            .fold(0, usize::saturating_add)
    }
}
