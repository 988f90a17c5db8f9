//! The framing of a coordinator slot's journal (`slot-<N>.log`).
//!
//! A slot's durable state is its snapshot file (`slot-<N>.json`, replaced
//! whole and atomically) followed by its journal: each write round appends
//! one record holding the slot's whole new state and syncs the file. An
//! append and an `fdatasync` cost a fraction of an atomic replace (a
//! temporary, its fsync, a rename and a directory fsync), which is what
//! bounded the transaction coordinator's throughput. Whole states rather
//! than deltas keep recovery trivial (the last good record wins) and reuse
//! the snapshot's own codec; the journal is folded into a new snapshot once
//! it grows past a bound, so it never grows without limit.
//!
//! A record is `len: u32 BE | crc32c(payload): u32 BE | payload`, with a
//! payload never empty. A crash may leave a torn record at the tail;
//! [`scan`] stops at the first record that is short, empty or fails its
//! checksum, and the owner truncates the file there before appending
//! again, so a later record is never hidden behind a torn one. (An empty
//! payload is refused because a crash may also leave zeros where an
//! unsynced append was, and eight zero bytes read as a length of 0 with
//! the checksum of nothing, 0.)

/// Bytes before each payload: its length and its checksum.
pub const RECORD_HEADER_BYTES: usize = 8;

/// The largest payload a record may carry: a length above it is a torn or
/// corrupt header, not an allocation to attempt.
pub const MAX_RECORD_BYTES: usize = 64 << 20;

/// One journal record around `payload`; `None` if it is empty or too big
/// to frame.
pub fn encode_record(payload: &[u8]) -> Option<Vec<u8>> {
    if payload.is_empty() || payload.len() > MAX_RECORD_BYTES {
        return None;
    }
    let mut out = Vec::with_capacity(RECORD_HEADER_BYTES + payload.len());
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(&crc32c::crc32c(payload).to_be_bytes());
    out.extend_from_slice(payload);
    Some(out)
}

/// What a journal's bytes hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scan<'a> {
    /// The payload of the last whole, checksummed record, if any.
    pub last: Option<&'a [u8]>,
    /// The number of whole records.
    pub records: usize,
    /// Where the whole records end: everything after is a torn tail.
    pub valid_len: usize,
}

/// The whole records at the start of `bytes`, up to the first torn one.
pub fn scan(bytes: &[u8]) -> Scan<'_> {
    let mut at = 0;
    let mut last = None;
    let mut records = 0;
    while let Some(payload) = record_at(bytes, at) {
        last = Some(payload);
        records += 1;
        at += RECORD_HEADER_BYTES + payload.len();
    }
    Scan {
        last,
        records,
        valid_len: at,
    }
}

/// The payload of the record at `at`, if a whole, intact one starts there.
fn record_at(bytes: &[u8], at: usize) -> Option<&[u8]> {
    let header = bytes.get(at..at.checked_add(RECORD_HEADER_BYTES)?)?;
    let len = u32::from_be_bytes([header[0], header[1], header[2], header[3]]) as usize;
    let crc = u32::from_be_bytes([header[4], header[5], header[6], header[7]]);
    if len == 0 || len > MAX_RECORD_BYTES {
        return None;
    }
    let start = at + RECORD_HEADER_BYTES;
    let payload = bytes.get(start..start.checked_add(len)?)?;
    (crc32c::crc32c(payload) == crc).then_some(payload)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn journal(payloads: &[&[u8]]) -> Vec<u8> {
        payloads
            .iter()
            .flat_map(|p| encode_record(p).unwrap())
            .collect()
    }

    #[test]
    fn the_last_whole_record_wins() {
        let bytes = journal(&[b"one", b"two", b"3"]);
        let s = scan(&bytes);
        assert_eq!(s.last, Some(&b"3"[..]));
        assert_eq!(s.records, 3);
        assert_eq!(s.valid_len, bytes.len());
    }

    #[test]
    fn an_empty_journal_holds_nothing() {
        assert_eq!(
            scan(&[]),
            Scan {
                last: None,
                records: 0,
                valid_len: 0
            }
        );
    }

    #[test]
    fn a_flipped_bit_ends_the_journal_before_its_record() {
        let mut bytes = journal(&[b"one", b"two", b"three"]);
        let second = RECORD_HEADER_BYTES + 3;
        bytes[second + RECORD_HEADER_BYTES] ^= 1;
        let s = scan(&bytes);
        assert_eq!(s.last, Some(&b"one"[..]));
        assert_eq!(s.valid_len, second);
    }

    /// Found by the simulator once a transaction's Complete* was appended
    /// without a sync: a crash zeroed the unsynced tail, and the zeros read
    /// as an empty record whose checksum matched, hiding the torn state
    /// behind a record that does not decode.
    #[test]
    fn a_zeroed_tail_is_torn_not_an_empty_record() {
        let mut bytes = journal(&[b"one"]);
        bytes.extend_from_slice(&[0; RECORD_HEADER_BYTES + 5]);
        let s = scan(&bytes);
        assert_eq!(s.last, Some(&b"one"[..]));
        assert_eq!((s.records, s.valid_len), (1, RECORD_HEADER_BYTES + 3));
        assert_eq!(encode_record(b""), None, "never written");
    }

    #[test]
    fn a_huge_length_is_a_torn_header_not_an_allocation() {
        let mut bytes = journal(&[b"one"]);
        bytes.extend_from_slice(&u32::MAX.to_be_bytes());
        bytes.extend_from_slice(&[0; 4]);
        let s = scan(&bytes);
        assert_eq!(s.last, Some(&b"one"[..]));
        assert_eq!(s.valid_len, RECORD_HEADER_BYTES + 3);
    }

    proptest! {
        /// Whatever prefix of a journal a crash leaves, the scan finds
        /// exactly the records wholly inside it, and stops where they end.
        #[test]
        fn a_torn_tail_loses_only_the_torn_record(
            payloads in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..40), 0..8),
            cut in any::<prop::sample::Index>(),
        ) {
            let refs: Vec<&[u8]> = payloads.iter().map(|p| p.as_slice()).collect();
            let bytes = journal(&refs);
            let cut = cut.index(bytes.len() + 1);
            let s = scan(&bytes[..cut]);
            let mut end = 0;
            let mut whole = 0;
            for p in &payloads {
                if end + RECORD_HEADER_BYTES + p.len() > cut {
                    break;
                }
                end += RECORD_HEADER_BYTES + p.len();
                whole += 1;
            }
            prop_assert_eq!(s.records, whole);
            prop_assert_eq!(s.valid_len, end);
            prop_assert_eq!(s.last, whole.checked_sub(1).map(|i| payloads[i].as_slice()));
        }

        /// Garbage never panics the scan, and what it accepts is a run of
        /// well-formed records.
        #[test]
        fn garbage_scans_without_panicking(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let s = scan(&bytes);
            prop_assert!(s.valid_len <= bytes.len());
            prop_assert_eq!(scan(&bytes[..s.valid_len]).records, s.records);
        }
    }
}
