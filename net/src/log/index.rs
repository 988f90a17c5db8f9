//! The sparse per-segment index.
//!
//! One 16-byte entry (`relative offset u32, file position u32, max timestamp
//! before i64`, big-endian) about every `index_interval_bytes` of batches.
//! An entry points at the start of a batch; `max_timestamp_before` is the
//! largest batch max timestamp strictly before that position in the segment,
//! so both lookups are a binary search over monotonic keys:
//! - by offset: the last entry whose offset is `<=` the target;
//! - by timestamp: the last entry whose `max_timestamp_before` is `<` the
//!   target (no batch before it can qualify).
//!
//! The active segment's index lives in memory. Sealing writes it once, plus a
//! trailer entry (`end offset, segment size, segment max timestamp`) that
//! lets startup trust a sealed segment without scanning it; from then on
//! lookups binary-search the file with small reads instead of holding every
//! sealed index in memory.

use bytes::{BufMut, Bytes};
use std::io;
use std::sync::Arc;

use super::invalid_data;
use crate::volume::SegmentFile;

pub(crate) const ENTRY_LEN: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IndexEntry {
    pub relative_offset: u32,
    pub position: u32,
    pub max_timestamp_before: i64,
}

impl IndexEntry {
    fn put(&self, out: &mut Vec<u8>) {
        out.put_u32(self.relative_offset);
        out.put_u32(self.position);
        out.put_i64(self.max_timestamp_before);
    }

    pub fn decode(bytes: &[u8]) -> Option<IndexEntry> {
        let field = |range: std::ops::Range<usize>| bytes.get(range);
        Some(IndexEntry {
            relative_offset: u32::from_be_bytes(field(0..4)?.try_into().ok()?),
            position: u32::from_be_bytes(field(4..8)?.try_into().ok()?),
            max_timestamp_before: i64::from_be_bytes(field(8..16)?.try_into().ok()?),
        })
    }
}

/// Encodes entries followed by the trailer, as stored in a `.index` file.
pub(crate) fn encode(entries: &[IndexEntry], trailer: IndexEntry) -> Vec<u8> {
    let mut out = Vec::with_capacity((entries.len() + 1) * ENTRY_LEN);
    for entry in entries.iter().chain(std::iter::once(&trailer)) {
        entry.put(&mut out);
    }
    out
}

/// Where a segment's index entries are.
pub(crate) enum SegmentIndex {
    /// Active segment: entries kept as they are appended.
    Memory(Vec<IndexEntry>),
    /// Sealed segment: the `.index` file (entries then trailer).
    Sealed {
        file: Arc<dyn SegmentFile>,
        entries: u64,
    },
}

impl SegmentIndex {
    fn count(&self) -> u64 {
        match self {
            SegmentIndex::Memory(entries) => entries.len() as u64,
            SegmentIndex::Sealed { entries, .. } => *entries,
        }
    }

    fn get(&self, i: u64) -> io::Result<IndexEntry> {
        match self {
            SegmentIndex::Memory(entries) => usize::try_from(i)
                .ok()
                .and_then(|i| entries.get(i))
                .copied()
                .ok_or_else(|| invalid_data("index entry out of bounds")),
            SegmentIndex::Sealed { file, .. } => {
                let bytes: Bytes = file.read_at(i * ENTRY_LEN as u64, ENTRY_LEN)?;
                IndexEntry::decode(&bytes).ok_or_else(|| invalid_data("short index entry"))
            }
        }
    }

    /// The last entry for which `before(entry)` holds, given that `before`
    /// is true for a prefix of the entries.
    fn last_where(&self, before: impl Fn(&IndexEntry) -> bool) -> io::Result<Option<IndexEntry>> {
        let (mut lo, mut hi) = (0u64, self.count());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if before(&self.get(mid)?) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        match lo {
            0 => Ok(None),
            n => self.get(n - 1).map(Some),
        }
    }

    /// The entry to start scanning from to find `relative_offset`.
    pub fn floor_for_offset(&self, relative_offset: u32) -> io::Result<Option<IndexEntry>> {
        self.last_where(|e| e.relative_offset <= relative_offset)
    }

    /// The entry to start scanning from to find the first batch whose max
    /// timestamp is `>= timestamp`.
    pub fn floor_for_timestamp(&self, timestamp: i64) -> io::Result<Option<IndexEntry>> {
        self.last_where(|e| e.max_timestamp_before < timestamp)
    }
}

/// A sealed `.index` file's trailer, if the file is well formed and matches
/// a segment of `segment_len` bytes. Anything else means: rebuild.
pub(crate) fn read_trailer(
    file: &dyn SegmentFile,
    segment_len: u64,
) -> io::Result<Option<(IndexEntry, u64)>> {
    Ok(read_any_trailer(file)?.filter(|(t, _)| u64::from(t.position) == segment_len))
}

/// A well-formed `.index` file's trailer and entry count (the trailer
/// included), whatever segment length it describes.
pub(crate) fn read_any_trailer(file: &dyn SegmentFile) -> io::Result<Option<(IndexEntry, u64)>> {
    let len = file.len();
    let entries = len / ENTRY_LEN as u64;
    // A torn index (not whole entries) is rebuilt rather than trusted.
    if entries == 0 || entries * ENTRY_LEN as u64 != len {
        return Ok(None);
    }
    let bytes = file.read_at(len - ENTRY_LEN as u64, ENTRY_LEN)?;
    Ok(IndexEntry::decode(&bytes)
        .filter(|t| t.relative_offset != 0)
        .map(|t| (t, entries)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(relative_offset: u32, position: u32, ts: i64) -> IndexEntry {
        IndexEntry {
            relative_offset,
            position,
            max_timestamp_before: ts,
        }
    }

    #[test]
    fn floor_lookups_pick_the_last_entry_not_past_the_target() {
        let index = SegmentIndex::Memory(vec![
            entry(10, 100, 5),
            entry(20, 200, 9),
            entry(30, 300, 9),
        ]);
        assert_eq!(index.floor_for_offset(5).unwrap(), None);
        assert_eq!(index.floor_for_offset(10).unwrap(), Some(entry(10, 100, 5)));
        assert_eq!(index.floor_for_offset(29).unwrap(), Some(entry(20, 200, 9)));
        assert_eq!(index.floor_for_offset(99).unwrap(), Some(entry(30, 300, 9)));
        assert_eq!(index.floor_for_timestamp(5).unwrap(), None);
        assert_eq!(
            index.floor_for_timestamp(9).unwrap(),
            Some(entry(10, 100, 5))
        );
        assert_eq!(
            index.floor_for_timestamp(10).unwrap(),
            Some(entry(30, 300, 9))
        );
    }

    #[test]
    fn encoded_entries_decode_back() {
        let bytes = encode(&[entry(1, 2, -3)], entry(4, 5, 6));
        assert_eq!(bytes.len(), 2 * ENTRY_LEN);
        assert_eq!(IndexEntry::decode(&bytes), Some(entry(1, 2, -3)));
        assert_eq!(IndexEntry::decode(&bytes[16..]), Some(entry(4, 5, 6)));
        assert_eq!(IndexEntry::decode(&bytes[..15]), None);
    }
}
