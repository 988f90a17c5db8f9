//! Startup: from the files in a partition directory back to segments.
//!
//! The flusher writes a rolled segment's index only after fsyncing the
//! segment, so an index whose trailer matches the segment size is trusted
//! without reading the segment. Any other segment may end in a torn write:
//! every batch is framed and CRC-checked, the file is cut at the first one
//! that fails, and its index is rebuilt from the same scan. A segment that
//! lost its tail ends the log (the segments after it are dropped: they were
//! never durable), so offsets stay dense.
//!
//! That is for the files of the leader epoch opening the log. Files of an
//! older epoch (named with it, `kaas_core::layout::SegmentId`) are only
//! read, never cut or indexed on the volume: their leader may still be
//! appending to them. The leader-epoch checkpoint says up to which offset
//! each is read (`kaas_core::partition::leader_epochs::file_reach`); what
//! lies past it is not part of the log. Opening at a newer epoch than any
//! in the directory is a takeover: the older epochs' log ends at its last
//! valid batch, that end is recorded in the checkpoint durably, and a new
//! segment of the new epoch starts there.

use std::collections::BTreeSet;
use std::io;
use std::sync::Arc;

use super::fail_stop::fail_stop;
use super::index::{read_any_trailer, read_trailer};
use super::scan::{BatchReader, Step, RECOVERY_CHUNK};
use super::segment::{BatchMeta, Segment};
use super::{invalid_data, LogConfig};
use crate::volume::{SegmentFile, Volume};
use kaas_core::deliberate_bugs::{planted, Bug};
use kaas_core::layout::{self, Entry, LogStart, SegmentId};
use kaas_core::partition::leader_epochs::{
    assign_epoch, checkpoint_epochs, decode_checkpoint, encode_checkpoint, file_reach,
    log_start_epochs, open_as, trim_before_log_start, EpochEntry, FileReach, OpenAs,
};
use kaas_core::partition::txn_index::{decode_index, plausible_entries, ENTRY_BYTES};

pub(crate) struct Recovered {
    /// Sealed segments, oldest first.
    pub sealed: Vec<Segment>,
    pub active: Segment,
    pub log_start_offset: i64,
    /// The checkpoint as it now is on the volume (empty: none, the
    /// partition has had one leader epoch only).
    pub leader_epochs: Vec<EpochEntry>,
}

/// How a segment file is scanned.
#[derive(Debug, Clone, Copy)]
enum Scan {
    /// This epoch's own file: an invalid tail is cut off.
    Own,
    /// An older epoch's file: read up to the first invalid batch or the
    /// first at or past `end`, and frozen there; the file is not changed.
    Older { end: Option<i64> },
}

pub(crate) fn recover(
    volume: &dyn Volume,
    dir: &str,
    config: &LogConfig,
    epoch: i32,
) -> io::Result<Recovered> {
    volume.create_dir_all(dir)?;
    let mut ids = BTreeSet::new();
    let mut index_ids = Vec::new();
    let mut txn_index_ids = Vec::new();
    let mut cleaned = Cleaned::default();
    let mut start_files = Vec::new();
    let mut checkpoint_files = Vec::new();
    for name in volume.list(dir)? {
        match layout::classify(&name) {
            Entry::Segment(id) => {
                ids.insert(id);
            }
            Entry::Index(id) => index_ids.push(id),
            Entry::TxnIndex(id) => txn_index_ids.push(id),
            Entry::CleanedSegment(id, by) => {
                // The segment is in the log even once its original is gone.
                ids.insert(id);
                cleaned.copies.insert((id, by));
            }
            Entry::CleanedIndex(id, by) => {
                cleaned.indexes.insert((id, by));
            }
            Entry::Cleaning(id, by) => {
                // Never renamed into place: an interrupted cleaning.
                volume.remove(&layout::cleaning_path(dir, id, by))?;
            }
            Entry::Other => {
                start_files.extend(layout::log_start_epoch(&name));
                checkpoint_files.extend(layout::leader_epoch_checkpoint_epoch(&name));
            }
        }
    }
    let listed = Listing {
        segments: ids.clone(),
        opening_epoch: epoch,
    };
    let segment_epochs: Vec<i32> = ids
        .iter()
        .map(|id| id.epoch)
        .chain(cleaned.copies.iter().map(|&(_, by)| by))
        .collect();
    let (mut entries, checkpoint_read) = read_checkpoint(
        volume,
        dir,
        &checkpoint_epochs(epoch, &checkpoint_files, &segment_epochs),
    )?;
    let mut checkpoint_by = checkpoint_read;
    // A newer epoch's checkpoint deposes this opening as its segments do.
    let newest_file = segment_epochs
        .iter()
        .chain(&checkpoint_files)
        .copied()
        .max();
    let previous = match open_as(&entries, newest_file, epoch) {
        OpenAs::SameEpoch => None,
        OpenAs::Takeover { previous } => Some(previous),
        OpenAs::Deposed { newest } => {
            return Err(io::Error::other(format!(
                "{dir}: leader epoch {newest} has written here; epoch {epoch} may not open it"
            )))
        }
    };

    // Which files are the log, and each one up to which offset (`None`:
    // to its end). A file wholly past its epoch's end, or of an epoch the
    // checkpoint does not list, holds only a deposed leader's late writes:
    // nobody reads it, so it goes.
    let mut read: Vec<(SegmentId, Option<i64>)> = Vec::with_capacity(ids.len());
    for id in ids {
        match file_reach(&entries, id.epoch) {
            FileReach::ToLogEnd => read.push((id, None)),
            FileReach::Below(end) if id.base_offset < end => read.push((id, Some(end))),
            FileReach::Below(_) | FileReach::Unread => {
                tracing::info!(
                    dir,
                    ?id,
                    "removing a segment outside its leader epoch's log"
                );
                cleaned.delete_segment(volume, dir, id)?;
            }
        }
    }
    let is_read = |id: &SegmentId| read.iter().any(|(r, _)| r == id);
    // An index without its segment is left over from a deletion that
    // crashed half-way; it must not be mistaken for a later segment's.
    for id in index_ids.iter().filter(|id| !is_read(id)) {
        volume.remove(&layout::index_path(dir, id.base_offset, id.epoch))?;
    }
    // A segment's aborted index is the newest of those at its base offset
    // written by its own epoch or a later one (a later leader rewrites an
    // older epoch's index under its own epoch, never in the older file);
    // every other `.txnindex` is an orphan. The listing says which segments
    // have one, so the (many) without cost no lookup on the volume below.
    let mut txn_indexed: Vec<(SegmentId, i32)> = Vec::new();
    for &(id, _) in &read {
        let newest = txn_index_ids
            .iter()
            .filter(|t| t.base_offset == id.base_offset && t.epoch >= id.epoch && t.epoch <= epoch)
            .map(|t| t.epoch)
            .max();
        if let Some(newest) = newest {
            txn_indexed.push((id, newest));
        }
    }
    for t in &txn_index_ids {
        let used = txn_indexed
            .iter()
            .any(|(id, e)| id.base_offset == t.base_offset && *e == t.epoch);
        if !used {
            volume.remove(&layout::txn_index_path(dir, t.base_offset, t.epoch))?;
        }
    }

    let start_epochs = log_start_epochs(epoch, previous, &entries, &start_files);
    let (mut recorded, mut recorded_by) = read_log_start(volume, dir, &start_epochs)?;
    if let Some(first) = recorded.first_segment {
        // The first segment a deletion left, or an opening found, must be
        // listed unless it is gone: a listing staler than the bound would
        // otherwise move the log start past records nobody deleted.
        refuse_unlisted(
            volume,
            dir,
            &listed,
            first.base_offset,
            first.epoch..=first.epoch,
        )?;
    }
    let mut log_start_offset = if planted(Bug::LogStartForgottenOnRecovery) {
        0
    } else {
        recorded.offset
    };
    // Finish deletions DeleteRecords persisted but did not complete: a
    // segment is entirely below the log start when the next one starts at
    // or before it.
    while read.len() >= 2 && read[1].0.base_offset <= log_start_offset {
        cleaned.delete_segment(volume, dir, read[0].0)?;
        read.remove(0);
    }

    let mut segments: Vec<Segment> = Vec::with_capacity(read.len());
    for (i, &(id, limit)) in read.iter().enumerate() {
        let next_base = read.get(i + 1).map(|(next, _)| next.base_offset);
        if let Some(segment) = cleaned.take(volume, dir, id, epoch, config, next_base.or(limit))? {
            // The cleaned copy ends where the segment did (it keeps the
            // last batch, as a bare header if need be), so the log stays
            // contiguous; anything else is damage, not a lost tail.
            let end = next_base.or(limit);
            if end.is_some_and(|end| segment.next_offset != end) {
                return Err(invalid_data(format!(
                    "{dir}: the cleaned copy of segment {id:?} ends at {}, not at {end:?}",
                    segment.next_offset
                )));
            }
            segments.push(segment);
            continue;
        }
        let file =
            volume.open_segment(&layout::segment_path(dir, id.base_offset, id.epoch), false)?;
        let own = id.epoch == epoch;
        if !own {
            // Where this file's part of the log must end: at the next
            // segment, or where the next epoch starts, whichever is first.
            let end = match (limit, next_base) {
                (Some(l), Some(n)) => Some(l.min(n)),
                (l, n) => l.or(n),
            };
            let segment = match end {
                Some(end) => load_indexed_older(volume, dir, id, file.clone(), end)?,
                None => None,
            };
            let segment = match segment {
                Some(segment) => segment,
                None => {
                    let segment = scan_segment(file, id, config, Scan::Older { end })?;
                    // What the older leader wrote may not be durable; it is
                    // part of this log now, and the checkpoint about to
                    // name where its epoch ends must not outlive it.
                    segment.file.sync()?;
                    segment
                }
            };
            let reached = segment.next_offset;
            if let Some(l) = limit.filter(|&l| reached < l.min(next_base.unwrap_or(l))) {
                // The checkpoint promises this epoch's log up to `l`, and a
                // later epoch's offsets follow from there: a hole here is
                // damage, and guessing would serve or merge the wrong data.
                return Err(invalid_data(format!(
                    "{dir}: segment {id:?} of an older leader epoch ends at {reached}, \
                     before its epoch's end {l} in the checkpoint"
                )));
            }
            segments.push(segment);
            if next_base.is_some_and(|n| reached != n) {
                let next_epoch = read[i + 1].0.epoch;
                refuse_unlisted(volume, dir, &listed, reached, id.epoch..=next_epoch)?;
                // The older epoch's log lost its tail here (its leader
                // crashed before those segments were durable): it ends
                // here, and the rest never was part of it.
                tracing::warn!(
                    dir,
                    ?id,
                    end = reached,
                    "older epoch's log ends before its next segment"
                );
                for &(later, _) in &read[i + 1..] {
                    cleaned.delete_segment(volume, dir, later)?;
                }
                break;
            }
            continue;
        }
        let Some(next_base) = next_base else {
            let segment = scan_segment(file, id, config, Scan::Own)?;
            // Whatever survived is made durable now, so that the durable
            // offset can start at the end offset: after a process kill the
            // tail may be in the page cache only.
            if !planted(Bug::RecoveredTailNotSynced) {
                segment.file.sync()?;
            }
            segments.push(segment);
            break;
        };
        if let Some(segment) = load_indexed(volume, dir, id, file.clone())? {
            segments.push(segment);
            continue;
        }
        // No index: the segment was rolled, but the flusher had not both
        // fsynced it and written its index when the broker stopped. Scan
        // and keep what survived.
        tracing::warn!(dir, ?id, "segment without a valid index; scanning it");
        let mut segment = scan_segment(file, id, config, Scan::Own)?;
        segment.file.sync()?;
        if segment.next_offset == next_base {
            segment.seal(volume, &layout::index_path(dir, id.base_offset, id.epoch))?;
            segments.push(segment);
            continue;
        }
        // It lost its tail, so the log ends here. The later segments hold
        // offsets after the hole; none of it was durable (the flusher
        // fsyncs a rolled segment before any later one counts), so nothing
        // acknowledged goes with them.
        refuse_unlisted(
            volume,
            dir,
            &listed,
            segment.next_offset,
            id.epoch..=id.epoch,
        )?;
        tracing::warn!(
            dir,
            ?id,
            end = segment.next_offset,
            next_base,
            "segment ends before the next one starts; dropping the segments after it"
        );
        for &(later, _) in &read[i + 1..] {
            cleaned.delete_segment(volume, dir, later)?;
        }
        segments.push(segment);
        break;
    }

    if segments
        .last()
        .is_some_and(|last| last.next_offset < log_start_offset)
    {
        // Defensively: every surviving batch is below the persisted log
        // start. Start an empty log at the log start.
        for segment in segments.drain(..) {
            cleaned.delete_segment(volume, dir, segment.id())?;
        }
    }
    cleaned.remove_unused(volume, dir)?;
    let first_base = segments.first().map(|s| s.base_offset);
    log_start_offset = log_start_offset.max(first_base.unwrap_or(log_start_offset));
    // Where the listed log ends, no older epoch may have a segment the
    // listing did not show: the end this opening records for them (and
    // appends from) would cut it off.
    let end = segments.last().map_or(log_start_offset, |l| l.next_offset);
    let listed_epoch = segments
        .last()
        .map(|l| l.epoch)
        .into_iter()
        .chain(entries.last().map(|e| e.epoch))
        .max()
        .unwrap_or(0);
    refuse_unlisted(
        volume,
        dir,
        &listed,
        end,
        listed_epoch..=epoch.saturating_sub(1),
    )?;

    let mut changed = false;
    let active = match segments.pop() {
        Some(active) if active.epoch == epoch && active.frozen_len.is_none() => active,
        last => {
            // The log ends in an older epoch's file, or there is none:
            // appends go to a new file of this epoch at the log end. When
            // an older epoch wrote here, this is a takeover: the
            // checkpoint records where this epoch starts, durably, before
            // this epoch's first file exists.
            let start = last.as_ref().map_or(log_start_offset, |l| l.next_offset);
            let older_epochs = last.is_some() || !entries.is_empty() || previous.is_some();
            if older_epochs {
                if entries.is_empty() {
                    // A directory from before checkpoints: one epoch wrote
                    // all of it, from the log start.
                    let old = previous.unwrap_or(epoch);
                    changed |= assign_epoch(&mut entries, old, log_start_offset);
                }
                changed |= assign_epoch(&mut entries, epoch, start);
            }
            changed |= trim_before_log_start(&mut entries, log_start_offset);
            if older_epochs && recorded_by != Some(epoch) {
                // This epoch's own log start, before the checkpoint names
                // the epoch: from here on an opening reads this file, never
                // the older epoch's, which its deposed leader may still
                // write (a deletion it will not acknowledge).
                let first = segments
                    .first()
                    .or(last.as_ref())
                    .map_or(SegmentId::new(start, epoch), Segment::id);
                let own = LogStart {
                    offset: log_start_offset,
                    first_segment: Some(first),
                };
                write_log_start(volume, dir, epoch, &own)?;
                (recorded, recorded_by) = (own, Some(epoch));
            }
            if changed {
                write_checkpoint(volume, dir, epoch, &entries)?;
                checkpoint_by = Some(epoch);
                changed = false;
            }
            segments.extend(last);
            let file = volume.open_segment(&layout::segment_path(dir, start, epoch), true)?;
            if !file.is_empty() {
                file.truncate(0)?;
            }
            Segment::empty(start, epoch, file)
        }
    };
    changed |= trim_before_log_start(&mut entries, log_start_offset);
    if changed {
        write_checkpoint(volume, dir, epoch, &entries)?;
        checkpoint_by = Some(epoch);
    }
    let mut sealed = segments;
    let mut active = active;
    let start = LogStart {
        offset: log_start_offset,
        first_segment: Some(sealed.first().unwrap_or(&active).id()),
    };
    if start != recorded || recorded_by != Some(epoch) {
        // A new partition, a directory from before the first segment was
        // recorded, an opening that changed the front, or the first one at
        // this epoch: from here on a listing that hides the first segment
        // is refused (above), and this epoch reads its own file.
        write_log_start(volume, dir, epoch, &start)?;
    }
    for &older in start_files.iter().filter(|&&e| e < epoch) {
        // Superseded by this epoch's file, which is durable: no opening at
        // this epoch or later reads them again.
        volume.remove(&layout::log_start_offset_path(dir, older))?;
    }
    if checkpoint_by == Some(epoch) {
        // Superseded the same way by this epoch's durable checkpoint: the
        // listed ones, and the one read, which a stale listing may hide.
        let older: BTreeSet<i32> = checkpoint_files
            .into_iter()
            .chain(checkpoint_read)
            .filter(|&e| e < epoch)
            .collect();
        for older in older {
            volume.remove(&layout::leader_epoch_checkpoint_path(dir, older))?;
        }
    }
    for segment in sealed.iter_mut().chain(std::iter::once(&mut active)) {
        let id = segment.id();
        if let Some(&(_, written_by)) = txn_indexed.iter().find(|(t, _)| *t == id) {
            load_txn_index(volume, dir, segment, written_by, written_by == epoch)?;
        }
    }
    // Their data is synced above; their names may be in the page cache only.
    crate::volume::sync_names_read_back(volume, dir)?;
    Ok(Recovered {
        sealed,
        active,
        log_start_offset,
        leader_epochs: entries,
    })
}

/// Fails the opening if a segment of one of `epochs` starts at `offset`
/// although the directory listing did not show it. Segments are contiguous,
/// so the file that follows a log ending at `offset` is named
/// `<offset>_<epoch>`, and the log's first segment is named in the
/// log-start file; a lookup by such a name is exact where a listing
/// may be stale (an NFS client's cached directory, up to its `acdirmax`,
/// if that exceeds `--volume-staleness-bound-ms`). Believing such a listing
/// would cut the older leader's log short and append over acknowledged
/// records (or, for the first segment, move the log start past them);
/// refusing keeps them, and the ownership round opens the
/// partition again once the listing caught up: a violated bound costs
/// availability, not data.
fn refuse_unlisted(
    volume: &dyn Volume,
    dir: &str,
    listing: &Listing,
    offset: i64,
    epochs: std::ops::RangeInclusive<i32>,
) -> io::Result<()> {
    for epoch in epochs {
        let id = SegmentId::new(offset, epoch);
        if listing.segments.contains(&id) {
            continue;
        }
        // The segment itself, or a cleaned copy that replaced it (by its
        // epoch or a later one, up to the opening's).
        let names = std::iter::once(layout::segment_path(dir, offset, epoch)).chain(
            (epoch..=listing.opening_epoch).map(|by| layout::cleaned_segment_path(dir, id, by)),
        );
        for path in names {
            match volume.open_segment(&path, false) {
                Ok(_) => {
                    kaas_core::coverage::hit(kaas_core::coverage::Mark::StaleListingRefused);
                    return Err(io::Error::other(format!(
                        "{path} exists but the listing of {dir} did not show it (a stale \
                         directory listing: is the volume's directory cache longer than \
                         --volume-staleness-bound-ms?); not opening the partition on it"
                    )));
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}

/// The segments a directory listing showed (by original or cleaned copy),
/// and the epoch opening the log.
struct Listing {
    segments: BTreeSet<SegmentId>,
    opening_epoch: i32,
}

/// The cleaned copies of segments a listing showed
/// (`kaas_net::log::cleaner`), and which of them the log now uses.
#[derive(Default)]
struct Cleaned {
    copies: BTreeSet<(SegmentId, i32)>,
    indexes: BTreeSet<(SegmentId, i32)>,
    /// Copies (`false`) and indexes (`true`) the log uses.
    used: BTreeSet<(SegmentId, i32, bool)>,
}

impl Cleaned {
    /// The segment `id` as its newest cleaned copy, if it has one written
    /// by the opening epoch or an older one. A copy under its final name is
    /// whole (the cleaner syncs it before the rename), so it is the
    /// segment, through its index if that matches it, else by a scan that
    /// changes nothing (up to `end`, where the segment must end). The swap
    /// is finished here: the original's files and every other copy go.
    fn take(
        &mut self,
        volume: &dyn Volume,
        dir: &str,
        id: SegmentId,
        opening_epoch: i32,
        config: &LogConfig,
        end: Option<i64>,
    ) -> io::Result<Option<Segment>> {
        let Some(by) = self
            .copies
            .iter()
            .filter(|(c, by)| *c == id && *by <= opening_epoch)
            .map(|&(_, by)| by)
            .max()
        else {
            return Ok(None);
        };
        let file = volume.open_segment(&layout::cleaned_segment_path(dir, id, by), false)?;
        let indexed = if self.indexes.contains(&(id, by)) {
            let index = volume.open_segment(&layout::cleaned_index_path(dir, id, by), false)?;
            read_trailer(index.as_ref(), file.len())?.map(|(trailer, entries)| {
                self.used.insert((id, by, true));
                Segment::sealed(
                    id.base_offset,
                    id.epoch,
                    file.clone(),
                    index,
                    trailer,
                    entries,
                )
            })
        } else {
            None
        };
        let mut segment = match indexed {
            Some(segment) => segment,
            None => scan_segment(file, id, config, Scan::Older { end })?,
        };
        segment.cleaned_by = Some(by);
        // Never written again, by anyone.
        segment.freeze(segment.file.len());
        self.used.insert((id, by, false));
        volume.remove(&layout::segment_path(dir, id.base_offset, id.epoch))?;
        volume.remove(&layout::index_path(dir, id.base_offset, id.epoch))?;
        Ok(Some(segment))
    }

    /// Removes segment `id`'s files, its cleaned copies included.
    fn delete_segment(&self, volume: &dyn Volume, dir: &str, id: SegmentId) -> io::Result<()> {
        delete_segment_files(volume, dir, id)?;
        for &(_, by) in self.copies.iter().filter(|(c, _)| *c == id) {
            delete_cleaned_files(volume, dir, id, by)?;
        }
        Ok(())
    }

    /// Removes every cleaned copy and index the log does not use: copies
    /// superseded by a newer one, of segments that are gone, and indexes
    /// that do not match their copy.
    fn remove_unused(&self, volume: &dyn Volume, dir: &str) -> io::Result<()> {
        for &(id, by) in &self.copies {
            if !self.used.contains(&(id, by, false)) {
                volume.remove(&layout::cleaned_segment_path(dir, id, by))?;
            }
        }
        for &(id, by) in &self.indexes {
            if !self.used.contains(&(id, by, true)) {
                volume.remove(&layout::cleaned_index_path(dir, id, by))?;
            }
        }
        Ok(())
    }
}

/// Removes a cleaned copy of segment `id` written at epoch `by`, and its
/// index (the copy first: an index without its copy counts for nothing).
pub(crate) fn delete_cleaned_files(
    volume: &dyn Volume,
    dir: &str,
    id: SegmentId,
    by: i32,
) -> io::Result<()> {
    volume.remove(&layout::cleaned_segment_path(dir, id, by))?;
    volume.remove(&layout::cleaned_index_path(dir, id, by))
}

/// The entries of the first checkpoint of `epochs` (newest first,
/// `checkpoint_epochs`) that exists, and the epoch that wrote it; none if
/// there is no checkpoint. An unreadable one is an error: without it,
/// which files (and how much of each) are the log is unknown, and guessing
/// could serve a deposed leader's writes.
fn read_checkpoint(
    volume: &dyn Volume,
    dir: &str,
    epochs: &[i32],
) -> io::Result<(Vec<EpochEntry>, Option<i32>)> {
    for &epoch in epochs {
        let path = layout::leader_epoch_checkpoint_path(dir, epoch);
        if let Some(data) = volume.read(&path)? {
            let entries =
                decode_checkpoint(&data).map_err(|e| invalid_data(format!("{path}: {e}")))?;
            return Ok((entries, Some(epoch)));
        }
    }
    Ok((Vec::new(), None))
}

/// Writes the checkpoint of the leader at `epoch`, its own file,
/// atomically and durably.
fn write_checkpoint(
    volume: &dyn Volume,
    dir: &str,
    epoch: i32,
    entries: &[EpochEntry],
) -> io::Result<()> {
    volume.write_atomic(
        &layout::leader_epoch_checkpoint_path(dir, epoch),
        &encode_checkpoint(entries),
    )
}

/// The recorded log start, and the epoch whose file held it: the first of
/// `epochs` (newest first) that has a file. Offset 0 and no first segment if
/// none does (a partition kaas has not opened yet).
fn read_log_start(
    volume: &dyn Volume,
    dir: &str,
    epochs: &[i32],
) -> io::Result<(LogStart, Option<i32>)> {
    let none = LogStart {
        offset: 0,
        first_segment: None,
    };
    for &epoch in epochs {
        let Some(data) = volume.read(&layout::log_start_offset_path(dir, epoch))? else {
            continue;
        };
        let start = layout::decode_log_start(&data).unwrap_or_else(|| {
            // Written atomically, so this is outside damage. Falling back
            // to the first segment only re-exposes records DeleteRecords
            // hid.
            tracing::warn!(
                dir,
                epoch,
                "unreadable log-start-offset file; using the first segment"
            );
            none
        });
        return Ok((start, Some(epoch)));
    }
    Ok((none, None))
}

/// Persists `start` as the log start of the leader at `epoch`, atomically
/// and durably.
pub(crate) fn write_log_start(
    volume: &dyn Volume,
    dir: &str,
    epoch: i32,
    start: &LogStart,
) -> io::Result<()> {
    volume.write_atomic(
        &layout::log_start_offset_path(dir, epoch),
        &layout::encode_log_start(start),
    )
}

pub(crate) fn delete_segment_files(
    volume: &dyn Volume,
    dir: &str,
    id: SegmentId,
) -> io::Result<()> {
    let (base, epoch) = (id.base_offset, id.epoch);
    // Segment first: a crash in between leaves an orphan index, which the
    // next startup removes; the reverse would force a needless rebuild.
    // (An aborted index a later epoch wrote for this segment is such an
    // orphan too.)
    volume.remove(&layout::segment_path(dir, base, epoch))?;
    volume.remove(&layout::index_path(dir, base, epoch))?;
    volume.remove(&layout::txn_index_path(dir, base, epoch))
}

/// Reads a segment's `.txnindex` (the one epoch `written_by` wrote) into
/// the segment. A torn last entry (a crash during its append) is cut off
/// if the file is `own`; which entries are kept is decided once the
/// producer replay is known (`PartitionLog::rebuild_aborted`). An older
/// epoch's file is only read: entries for markers past the segment's end
/// there are a deposed leader's and are dropped.
fn load_txn_index(
    volume: &dyn Volume,
    dir: &str,
    segment: &mut Segment,
    written_by: i32,
    own: bool,
) -> io::Result<()> {
    let path = layout::txn_index_path(dir, segment.base_offset, written_by);
    let file = match volume.open_segment(&path, false) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let len =
        usize::try_from(file.len()).map_err(|_| invalid_data(format!("{path}: too large")))?;
    let bytes = file.read_at(0, len)?;
    let (mut entries, torn) =
        decode_index(&bytes).map_err(|e| invalid_data(format!("{path}: {e:?}")))?;
    // Entries past the segment's end are a deposed leader's (an older
    // epoch's file) or were torn by a crash, as is anything after them.
    let plausible = plausible_entries(&entries, segment.base_offset, segment.next_offset);
    let dropped = entries.len() - plausible;
    entries.truncate(plausible);
    if own && (torn > 0 || dropped > 0) {
        tracing::warn!(
            dir,
            path,
            torn,
            dropped,
            "truncating torn aborted-index entries"
        );
        file.truncate((plausible * ENTRY_BYTES) as u64)?;
    }
    segment.aborted = entries;
    segment.txn_index = Some(fail_stop(file));
    Ok(())
}

/// A sealed segment described by an index whose trailer matches it, or
/// `None` if the index is missing or does not match.
fn load_indexed(
    volume: &dyn Volume,
    dir: &str,
    id: SegmentId,
    file: Arc<dyn SegmentFile>,
) -> io::Result<Option<Segment>> {
    let index_path = layout::index_path(dir, id.base_offset, id.epoch);
    match volume.open_segment(&index_path, false) {
        Ok(index_file) => Ok(read_trailer(index_file.as_ref(), file.len())?.map(
            |(trailer, entries)| {
                Segment::sealed(id.base_offset, id.epoch, file, index_file, trailer, entries)
            },
        )),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// An older epoch's sealed segment through its index, if the index ends
/// exactly at `end` (the next segment, or its epoch's end) at a position
/// within the file: its leader wrote the index once the bytes below were
/// durable, and appends since (past `end`) do not change them. Frozen at
/// that position. `None`: scan it instead.
fn load_indexed_older(
    volume: &dyn Volume,
    dir: &str,
    id: SegmentId,
    file: Arc<dyn SegmentFile>,
    end: i64,
) -> io::Result<Option<Segment>> {
    let index_path = layout::index_path(dir, id.base_offset, id.epoch);
    let index_file = match volume.open_segment(&index_path, false) {
        Ok(index_file) => index_file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let Some((trailer, entries)) = read_any_trailer(index_file.as_ref())? else {
        return Ok(None);
    };
    let position = u64::from(trailer.position);
    let ends_at = id
        .base_offset
        .checked_add(i64::from(trailer.relative_offset));
    if ends_at != Some(end) || position > file.len() {
        return Ok(None);
    }
    let mut segment = Segment::sealed(id.base_offset, id.epoch, file, index_file, trailer, entries);
    segment.freeze(position);
    Ok(Some(segment))
}

/// Scans a segment from the start, validating every batch, and rebuilds
/// its in-memory index. An own segment is truncated at the first invalid
/// batch; an older epoch's is frozen there (or at the first batch at or
/// past its end), untouched.
fn scan_segment(
    file: Arc<dyn SegmentFile>,
    id: SegmentId,
    config: &LogConfig,
    scan: Scan,
) -> io::Result<Segment> {
    let base = id.base_offset;
    let mut segment = Segment::empty(base, id.epoch, file.clone());
    // The length now: an older epoch's leader may still be appending.
    let len = file.len();
    let mut reader = BatchReader::new(file.as_ref(), 0, len, RECOVERY_CHUNK);
    let end = match scan {
        Scan::Own => None,
        Scan::Older { end } => end,
    };
    let stop = loop {
        match reader.next_step()? {
            Step::Batch { position, batch } => {
                if end.is_some_and(|end| batch.next_offset() > end) {
                    // Past the epoch's end (or the next segment): not this
                    // log's, whether valid or not.
                    break Some((position, "past the end of its epoch".to_string()));
                }
                let problem = if let Err(e) = batch.validate() {
                    Some(e.to_string())
                } else if batch.base_offset() < segment.next_offset {
                    Some(format!(
                        "batch offset {} below expected {}",
                        batch.base_offset(),
                        segment.next_offset
                    ))
                } else if segment.relative(batch.next_offset()).is_none()
                    || u32::try_from(position).is_err()
                {
                    Some("batch does not fit the segment index".to_string())
                } else {
                    None
                };
                if let Some(problem) = problem {
                    break Some((position, problem));
                }
                segment.track(BatchMeta::of(&batch, position), config.index_interval_bytes)?;
            }
            Step::End => break None,
            Step::Partial { position } => break Some((position, "torn batch".to_string())),
            Step::Corrupt { position, error } => break Some((position, error.to_string())),
        }
    };
    match scan {
        Scan::Own => {
            if let Some((position, problem)) = stop {
                tracing::warn!(
                    segment = base,
                    position,
                    len = file.len(),
                    problem,
                    "truncating invalid segment tail"
                );
                kaas_core::coverage::hit(kaas_core::coverage::Mark::TornSegmentTailCut);
                file.truncate(position)?;
            }
        }
        Scan::Older { .. } => {
            let position = match stop {
                Some((position, problem)) => {
                    tracing::info!(
                        segment = ?id,
                        position,
                        len = file.len(),
                        problem,
                        "an older epoch's segment is read up to here"
                    );
                    position
                }
                None => len,
            };
            segment.freeze(position);
        }
    }
    Ok(segment)
}
