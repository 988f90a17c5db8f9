//! The leader-epoch checkpoint of a partition (`leader-epoch-checkpoint`,
//! Kafka's name and text layout): where each leader epoch's log starts.
//!
//! ```text
//! 0                 version
//! 2                 number of entries
//! 0 0               epoch, start offset
//! 3 1200
//! ```
//!
//! A leader writes only segment files named with its own epoch
//! (`kaas_core::layout::SegmentId`). When a new leader takes a partition
//! over at epoch E, it records (E, end of the log it found) durably before
//! its first append; from then on the files of an older epoch are read only
//! below the start of the epoch after it ([`file_reach`]), so whatever a
//! deposed leader (a zombie) still appends to its own files lies past that
//! point and is never read. No checkpoint means the directory has only ever
//! had one leader epoch: every file is read.
//!
//! Pure rules; the log (`kaas_net::log`) reads and writes the file through
//! the volume.

use std::fmt;

/// One entry: leader epoch `epoch` wrote the offsets from `start_offset`
/// up to the next entry's start offset (the log end for the last entry).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct EpochEntry {
    pub epoch: i32,
    pub start_offset: i64,
}

impl EpochEntry {
    pub fn new(epoch: i32, start_offset: i64) -> EpochEntry {
        EpochEntry {
            epoch,
            start_offset,
        }
    }
}

/// The only checkpoint version there is (Kafka's too).
pub const CHECKPOINT_VERSION: i32 = 0;

/// Why a checkpoint file could not be read. The file is replaced
/// atomically, so any of these is outside damage: the partition must not
/// guess which epochs' files to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckpointError {
    /// Not UTF-8 text.
    NotText,
    /// The file ends before the line it needs (1-based line number).
    Missing { line: usize },
    /// A version other than [`CHECKPOINT_VERSION`].
    UnknownVersion(String),
    /// Line `line` is not what that line must hold.
    Malformed { line: usize },
    /// More entry lines than the count said.
    TooManyEntries { declared: usize },
    /// Entry at `line` does not come after the one before it (epochs and
    /// start offsets both strictly increase) or is negative.
    OutOfOrder { line: usize },
}

impl fmt::Display for CheckpointError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CheckpointError::NotText => write!(f, "leader-epoch checkpoint is not text"),
            CheckpointError::Missing { line } => {
                write!(f, "leader-epoch checkpoint ends before line {line}")
            }
            CheckpointError::UnknownVersion(v) => {
                write!(f, "leader-epoch checkpoint has unknown version {v:?}")
            }
            CheckpointError::Malformed { line } => {
                write!(f, "leader-epoch checkpoint line {line} is malformed")
            }
            CheckpointError::TooManyEntries { declared } => write!(
                f,
                "leader-epoch checkpoint has more than the {declared} entries it declares"
            ),
            CheckpointError::OutOfOrder { line } => write!(
                f,
                "leader-epoch checkpoint entry on line {line} is negative or out of order"
            ),
        }
    }
}

impl std::error::Error for CheckpointError {}

/// The file's content for `entries`.
pub fn encode_checkpoint(entries: &[EpochEntry]) -> Vec<u8> {
    let mut out = format!("{CHECKPOINT_VERSION}\n{}\n", entries.len());
    for e in entries {
        out.push_str(&format!("{} {}\n", e.epoch, e.start_offset));
    }
    out.into_bytes()
}

/// The entries of a checkpoint file. Anything but exactly what
/// [`encode_checkpoint`] writes (a trailing newline optional) is a typed
/// error; no input panics.
pub fn decode_checkpoint(data: &[u8]) -> Result<Vec<EpochEntry>, CheckpointError> {
    let text = std::str::from_utf8(data).map_err(|_| CheckpointError::NotText)?;
    let mut lines = text.strip_suffix('\n').unwrap_or(text).split('\n');
    let version = lines.next().ok_or(CheckpointError::Missing { line: 1 })?;
    if version != CHECKPOINT_VERSION.to_string() {
        return Err(CheckpointError::UnknownVersion(
            version.chars().take(16).collect(),
        ));
    }
    let declared: usize = lines
        .next()
        .ok_or(CheckpointError::Missing { line: 2 })?
        .parse()
        .map_err(|_| CheckpointError::Malformed { line: 2 })?;
    // Never trust the count for an allocation: a garbled count would ask
    // for any amount of memory.
    let mut entries: Vec<EpochEntry> = Vec::new();
    for i in 0..declared {
        let line = i + 3;
        let text = lines.next().ok_or(CheckpointError::Missing { line })?;
        let (epoch, start) = text
            .split_once(' ')
            .ok_or(CheckpointError::Malformed { line })?;
        let entry = EpochEntry {
            epoch: epoch
                .parse()
                .map_err(|_| CheckpointError::Malformed { line })?,
            start_offset: start
                .parse()
                .map_err(|_| CheckpointError::Malformed { line })?,
        };
        let in_order = entries
            .last()
            .is_none_or(|p| entry.epoch > p.epoch && entry.start_offset > p.start_offset);
        if entry.epoch < 0 || entry.start_offset < 0 || !in_order {
            return Err(CheckpointError::OutOfOrder { line });
        }
        entries.push(entry);
    }
    if lines.next().is_some() {
        return Err(CheckpointError::TooManyEntries { declared });
    }
    Ok(entries)
}

/// Records that leader epoch `epoch` starts at `start_offset`, as Kafka's
/// `LeaderEpochFileCache.assign` does: nothing changes if `epoch` is already
/// the last entry at or before that offset; otherwise every entry of an
/// epoch at or above `epoch`, or starting at or after `start_offset`, goes
/// (a later epoch that wrote nothing is replaced by the one taking over at
/// the same offset) and the new entry ends the list. Returns whether the
/// entries changed (the file must then be rewritten).
pub fn assign_epoch(entries: &mut Vec<EpochEntry>, epoch: i32, start_offset: i64) -> bool {
    if entries
        .last()
        .is_some_and(|l| l.epoch == epoch && l.start_offset <= start_offset)
    {
        return false;
    }
    entries.retain(|e| e.epoch < epoch && e.start_offset < start_offset);
    entries.push(EpochEntry::new(epoch, start_offset));
    true
}

/// After retention or DeleteRecords moved the log start: entries starting
/// at or below `log_start` go, except the last of them, which now starts
/// at `log_start` (its epoch still wrote the first offsets left). Kafka's
/// `truncateFromStart`. Returns whether the entries changed.
pub fn trim_before_log_start(entries: &mut Vec<EpochEntry>, log_start: i64) -> bool {
    let below = entries.partition_point(|e| e.start_offset <= log_start);
    let Some(last_below) = below.checked_sub(1) else {
        return false;
    };
    let kept = EpochEntry::new(entries[last_below].epoch, log_start);
    if below == 1 && entries[0] == kept {
        return false;
    }
    entries.drain(..below);
    entries.insert(0, kept);
    true
}

/// How much of a segment file created by leader epoch `file_epoch` belongs
/// to the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileReach {
    /// All of it, up to the log end: the newest epoch's files (or every
    /// file, while the partition has no checkpoint).
    ToLogEnd,
    /// Only the offsets below this one, where the next epoch starts:
    /// anything past it was appended by a leader already deposed.
    Below(i64),
    /// None of it: an epoch the checkpoint does not list (it wrote nothing
    /// before the next one took over, or only offsets retention removed).
    Unread,
}

/// Which epochs' files are read, and up to which offset.
pub fn file_reach(entries: &[EpochEntry], file_epoch: i32) -> FileReach {
    if entries.is_empty() {
        return FileReach::ToLogEnd;
    }
    match entries.iter().position(|e| e.epoch == file_epoch) {
        None => FileReach::Unread,
        Some(i) => match entries.get(i + 1) {
            None => FileReach::ToLogEnd,
            Some(next) => FileReach::Below(next.start_offset),
        },
    }
}

/// How a leader at epoch `opening` relates to a partition directory whose
/// checkpoint holds `entries` and whose newest segment file was created at
/// `newest_file_epoch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenAs {
    /// Nothing newer than `opening` wrote here: recover as a restart does
    /// (cut its own torn tail, go on appending to its own files).
    SameEpoch,
    /// An older epoch wrote here: take over. Its files are only read; the
    /// log it left ends at the last valid batch, where `opening` starts.
    Takeover { previous: i32 },
    /// A newer epoch wrote here: this leader was deposed and must not open.
    Deposed { newest: i32 },
}

/// Whether opening at `opening` is a restart, a takeover or too late.
pub fn open_as(entries: &[EpochEntry], newest_file_epoch: Option<i32>, opening: i32) -> OpenAs {
    let newest = entries.last().map(|e| e.epoch).max(newest_file_epoch);
    match newest {
        None => OpenAs::SameEpoch,
        Some(n) if n == opening => OpenAs::SameEpoch,
        Some(n) if n < opening => OpenAs::Takeover { previous: n },
        Some(n) => OpenAs::Deposed { newest: n },
    }
}

/// The leader epochs whose log-start file an opening at `opening` may
/// read, newest first: the log start that counts is the greatest epoch's
/// file at or below the opening's own.
///
/// Each epoch writes only its own file (as with segments), and an epoch
/// that opens the log after another writes its file before its checkpoint
/// entry, carrying the start it read. So a deposed leader that still
/// deletes writes a file no later opening reads, and cannot move back (or
/// forward) a start its successors have recorded. The candidates: the
/// opening's own epoch, the one it takes over from, the checkpoint's, the
/// listed files', and 0, whose name every epoch shared before files were
/// per epoch. The newest epoch that opened after another is always among
/// them (it is in the checkpoint), even when a stale listing hides its
/// file: the caller looks them up by name, in this order.
pub fn log_start_epochs(
    opening: i32,
    previous: Option<i32>,
    entries: &[EpochEntry],
    listed: &[i32],
) -> Vec<i32> {
    let known = std::iter::once(opening)
        .chain(previous)
        .chain(entries.iter().map(|e| e.epoch))
        .chain(listed.iter().copied())
        .chain(std::iter::once(0));
    let mut epochs: Vec<i32> = known.filter(|&e| (0..=opening).contains(&e)).collect();
    epochs.sort_unstable_by(|a, b| b.cmp(a));
    epochs.dedup();
    epochs
}

/// How far below its own epoch an opening looks up by name checkpoints
/// its listing does not show ([`checkpoint_epochs`]). A stale listing
/// hides only names created within the directory cache's age, in which a
/// partition changes hands a few times at most; the bound keeps a bogus
/// epoch from costing an opening billions of lookups.
pub const CHECKPOINT_PROBES: i32 = 64;

/// The leader epochs whose checkpoint an opening at `opening` may read,
/// newest first: the checkpoint that counts is the greatest epoch's at or
/// below the opening's own.
///
/// An epoch that takes a partition over writes its own checkpoint file,
/// durably, before its first segment, and only that epoch ever rewrites it
/// (to trim entries below the log start). So a successor never reads an
/// older version of a file another broker replaced, which an NFS client's
/// attribute cache may serve: it reads a file written once, by name. It
/// must still find that name when its listing is stale and hides it: every
/// epoch from the opening's own down to the newest one the listing shows
/// (a checkpoint's, or a segment file's: an epoch that took over wrote its
/// checkpoint before its first segment) is looked up by name, at most
/// [`CHECKPOINT_PROBES`] of them, then the listed checkpoints below that,
/// then epoch 0's, whose name every epoch shared before files were per
/// epoch. Listed epochs above the opening's are not candidates: they
/// depose it ([`open_as`]).
pub fn checkpoint_epochs(
    opening: i32,
    listed_checkpoints: &[i32],
    listed_segments: &[i32],
) -> Vec<i32> {
    let at_or_below = |e: &i32| (0..=opening).contains(e);
    let newest_listed = listed_checkpoints
        .iter()
        .chain(listed_segments)
        .copied()
        .filter(at_or_below)
        .max()
        .unwrap_or(0);
    let lowest_probe = newest_listed.max(opening.saturating_sub(CHECKPOINT_PROBES));
    let mut listed: Vec<i32> = listed_checkpoints
        .iter()
        .copied()
        .filter(|e| at_or_below(e) && *e < lowest_probe)
        .collect();
    listed.sort_unstable_by(|a, b| b.cmp(a));
    let mut epochs: Vec<i32> = (lowest_probe..=opening).rev().collect();
    epochs.extend(listed);
    epochs.push(0);
    epochs.dedup();
    epochs
}

/// OffsetForLeaderEpoch (KIP-101, KIP-279, KIP-320), as Kafka's
/// `LeaderEpochFileCache.endOffsetFor` answers: for the latest epoch, that
/// epoch and `end_offset` (the caller passes the high watermark: with one
/// copy of the data, nothing above it exists for a client); for an older
/// epoch, the largest known epoch at or below it and the start of the next
/// larger known epoch; for one older than every known epoch, the asked
/// epoch and the first known epoch's start (its data was deleted). `None`
/// (answered -1/-1) for a negative epoch or one newer than the latest.
/// Without a checkpoint the partition has had only `current` since
/// `log_start`.
pub fn epoch_end_offset(
    entries: &[EpochEntry],
    current: i32,
    log_start: i64,
    end_offset: i64,
    asked: i32,
) -> Option<(i32, i64)> {
    let implicit = [EpochEntry::new(current, log_start)];
    let entries = if entries.is_empty() {
        &implicit[..]
    } else {
        entries
    };
    let latest = entries.last()?;
    if asked < 0 || asked > latest.epoch {
        return None;
    }
    if asked == latest.epoch {
        return Some((asked, end_offset));
    }
    let higher = entries.iter().find(|e| e.epoch > asked)?;
    match entries.iter().rev().find(|e| e.epoch <= asked) {
        Some(floor) => Some((floor.epoch, higher.start_offset)),
        None => Some((asked, higher.start_offset)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_opening_looks_up_by_name_the_checkpoints_its_listing_may_hide() {
        // A takeover at 7: the listing shows checkpoints 3 and 5 and
        // segments of epoch 5, but 6 may have taken over since and be
        // hidden. 7, 6 and 5 are looked up by name, then 3, then the
        // shared epoch-0 name. 9 (a successor's) is not a candidate.
        assert_eq!(
            checkpoint_epochs(7, &[3, 5, 9], &[2, 5]),
            vec![7, 6, 5, 3, 0]
        );
        // A listing that shows no checkpoint: down to the newest segment's
        // epoch (it wrote its checkpoint before that segment, if any).
        assert_eq!(checkpoint_epochs(4, &[], &[1, 2]), vec![4, 3, 2, 0]);
        // Nothing listed: every epoch down to 0.
        assert_eq!(checkpoint_epochs(2, &[], &[]), vec![2, 1, 0]);
        // One broker, epoch 0: the one name there ever was.
        assert_eq!(checkpoint_epochs(0, &[0], &[0]), vec![0]);
        // A stale listing cannot cost more than the bound of lookups.
        let far = checkpoint_epochs(i32::MAX, &[1], &[]);
        assert_eq!(far.len(), CHECKPOINT_PROBES as usize + 3);
        assert_eq!(far[..2], [i32::MAX, i32::MAX - 1]);
        assert_eq!(far[far.len() - 2..], [1, 0]);
    }

    #[test]
    fn the_log_start_read_is_the_greatest_epochs_at_or_below_the_openings() {
        let entries = [EpochEntry::new(2, 0), EpochEntry::new(5, 40)];
        // A takeover at 7 from 5: its own first, then 5 (checkpoint and
        // previous), 3 (listed), 2, and the shared epoch-0 name last. A
        // newer epoch's file (9, a successor's) is never read.
        assert_eq!(
            log_start_epochs(7, Some(5), &entries, &[3, 9, 5]),
            vec![7, 5, 3, 2, 0]
        );
        // The newest epoch that opened is found although the listing hides
        // its file: the checkpoint names it.
        assert_eq!(
            log_start_epochs(6, Some(5), &entries, &[]),
            vec![6, 5, 2, 0]
        );
        // One broker, epoch 0 only: the one file it always had.
        assert_eq!(log_start_epochs(0, None, &[], &[0]), vec![0]);
    }

    fn e(epoch: i32, start: i64) -> EpochEntry {
        EpochEntry::new(epoch, start)
    }

    #[test]
    fn a_checkpoint_round_trips_in_kafkas_layout() {
        let entries = vec![e(0, 0), e(3, 1200), e(4, 1300)];
        let bytes = encode_checkpoint(&entries);
        assert_eq!(bytes, b"0\n3\n0 0\n3 1200\n4 1300\n");
        assert_eq!(decode_checkpoint(&bytes), Ok(entries));
        assert_eq!(decode_checkpoint(&encode_checkpoint(&[])), Ok(vec![]));
        // Kafka's writer ends without a trailing newline on some versions.
        assert_eq!(decode_checkpoint(b"0\n1\n2 5"), Ok(vec![e(2, 5)]));
    }

    #[test]
    fn a_damaged_checkpoint_is_a_typed_error() {
        use CheckpointError::*;
        let cases: &[(&[u8], CheckpointError)] = &[
            (b"", UnknownVersion(String::new())),
            (b"\xff", NotText),
            (b"1\n0\n", UnknownVersion("1".into())),
            (b"0\n", Missing { line: 2 }),
            (b"0\nx\n", Malformed { line: 2 }),
            (b"0\n2\n0 0\n", Missing { line: 4 }),
            (b"0\n1\n0\n", Malformed { line: 3 }),
            (b"0\n1\n0 x\n", Malformed { line: 3 }),
            (b"0\n1\n0 0\n1 5\n", TooManyEntries { declared: 1 }),
            (b"0\n2\n1 0\n1 5\n", OutOfOrder { line: 4 }),
            (b"0\n2\n1 5\n2 5\n", OutOfOrder { line: 4 }),
            (b"0\n1\n-1 0\n", OutOfOrder { line: 3 }),
            (b"0\n1\n0 -3\n", OutOfOrder { line: 3 }),
            (b"0\n18446744073709551615\n", Missing { line: 3 }),
        ];
        for (bytes, want) in cases {
            assert_eq!(
                decode_checkpoint(bytes).as_ref(),
                Err(want),
                "{:?}",
                String::from_utf8_lossy(bytes)
            );
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_checkpoint_decoder() {
        // A deterministic sweep of short inputs over the characters that
        // matter, plus every prefix of a valid file.
        let alphabet = b"01 -\n9x";
        for len in 0..6u32 {
            for n in 0..(alphabet.len() as u64).pow(len) {
                let mut k = n;
                let bytes: Vec<u8> = (0..len)
                    .map(|_| {
                        let c = alphabet[(k % alphabet.len() as u64) as usize];
                        k /= alphabet.len() as u64;
                        c
                    })
                    .collect();
                let _ = decode_checkpoint(&bytes);
            }
        }
        let valid = encode_checkpoint(&[e(0, 0), e(7, 99)]);
        for cut in 0..valid.len() {
            let _ = decode_checkpoint(&valid[..cut]);
        }
    }

    #[test]
    fn assigning_an_epoch_appends_it_and_drops_entries_it_supersedes() {
        let mut entries = vec![];
        assert!(assign_epoch(&mut entries, 0, 0));
        assert!(assign_epoch(&mut entries, 2, 100));
        assert_eq!(entries, vec![e(0, 0), e(2, 100)]);
        // The same epoch again, later: nothing to record.
        assert!(!assign_epoch(&mut entries, 2, 150));
        // An epoch that wrote nothing is replaced by the next one at its
        // start offset.
        assert!(assign_epoch(&mut entries, 3, 100));
        assert_eq!(entries, vec![e(0, 0), e(3, 100)]);
        // Epochs and offsets only grow: a new entry removes what it
        // contradicts.
        assert!(assign_epoch(&mut entries, 4, 50));
        assert_eq!(entries, vec![e(0, 0), e(4, 50)]);
        assert!(assign_epoch(&mut entries, 1, 200));
        assert_eq!(entries, vec![e(0, 0), e(1, 200)]);
    }

    #[test]
    fn trimming_below_the_log_start_keeps_the_epoch_of_the_first_offset_left() {
        let mut entries = vec![e(0, 0), e(2, 100), e(5, 300)];
        assert!(!trim_before_log_start(&mut entries, 0));
        assert!(trim_before_log_start(&mut entries, 150));
        assert_eq!(entries, vec![e(2, 150), e(5, 300)]);
        assert!(!trim_before_log_start(&mut entries, 150));
        assert!(
            !trim_before_log_start(&mut entries, 120),
            "never moves back"
        );
        assert!(trim_before_log_start(&mut entries, 300));
        assert_eq!(entries, vec![e(5, 300)]);
        assert!(trim_before_log_start(&mut entries, 900));
        assert_eq!(entries, vec![e(5, 900)]);
        let mut none = vec![];
        assert!(!trim_before_log_start(&mut none, 10));
    }

    #[test]
    fn an_older_epochs_files_are_read_only_below_the_next_epochs_start() {
        let entries = [e(0, 0), e(2, 100), e(5, 300)];
        assert_eq!(file_reach(&entries, 0), FileReach::Below(100));
        assert_eq!(file_reach(&entries, 2), FileReach::Below(300));
        assert_eq!(file_reach(&entries, 5), FileReach::ToLogEnd);
        assert_eq!(file_reach(&entries, 1), FileReach::Unread);
        assert_eq!(file_reach(&entries, 6), FileReach::Unread);
        // No checkpoint: one epoch ever, every file is the log.
        assert_eq!(file_reach(&[], 0), FileReach::ToLogEnd);
        assert_eq!(file_reach(&[], 3), FileReach::ToLogEnd);
    }

    #[test]
    fn opening_at_a_newer_epoch_is_a_takeover_and_at_an_older_one_is_refused() {
        assert_eq!(open_as(&[], None, 0), OpenAs::SameEpoch);
        assert_eq!(open_as(&[], None, 4), OpenAs::SameEpoch);
        assert_eq!(open_as(&[], Some(0), 0), OpenAs::SameEpoch);
        assert_eq!(open_as(&[], Some(0), 1), OpenAs::Takeover { previous: 0 });
        let entries = [e(0, 0), e(2, 100)];
        assert_eq!(open_as(&entries, Some(0), 2), OpenAs::SameEpoch);
        assert_eq!(open_as(&entries, Some(2), 2), OpenAs::SameEpoch);
        assert_eq!(
            open_as(&entries, Some(2), 3),
            OpenAs::Takeover { previous: 2 }
        );
        assert_eq!(open_as(&entries, Some(0), 1), OpenAs::Deposed { newest: 2 });
        // A file of a newer epoch than the checkpoint's last counts too.
        assert_eq!(open_as(&entries, Some(3), 2), OpenAs::Deposed { newest: 3 });
    }

    #[test]
    fn an_epoch_ends_where_the_next_known_epoch_starts() {
        let entries = [e(1, 10), e(3, 100), e(5, 300)];
        let end = |asked| epoch_end_offset(&entries, 5, 10, 400, asked);
        assert_eq!(end(5), Some((5, 400)), "the latest epoch ends at the end");
        assert_eq!(end(3), Some((3, 300)));
        assert_eq!(end(4), Some((3, 300)), "the largest known epoch below");
        assert_eq!(end(2), Some((1, 100)));
        assert_eq!(end(1), Some((1, 100)));
        assert_eq!(
            end(0),
            Some((0, 10)),
            "older than every known epoch: the first known start (Kafka's answer)"
        );
        assert_eq!(end(6), None, "newer than the latest");
        assert_eq!(end(-1), None);
    }

    /// The answers a partition gave before leader changes existed (one
    /// epoch, no checkpoint) stay the same.
    #[test]
    fn without_a_checkpoint_the_current_epoch_ends_at_the_end_offset() {
        assert_eq!(epoch_end_offset(&[], 0, 0, 7, 0), Some((0, 7)));
        assert_eq!(epoch_end_offset(&[], 0, 0, 7, 1), None);
        assert_eq!(epoch_end_offset(&[], 0, 0, 7, -1), None);
        assert_eq!(epoch_end_offset(&[], 2, 4, 7, 2), Some((2, 7)));
        assert_eq!(epoch_end_offset(&[], 2, 4, 7, 1), Some((1, 4)));
    }
}
