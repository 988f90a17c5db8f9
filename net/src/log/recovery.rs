//! Startup: from the files in a partition directory back to segments.
//!
//! The flusher writes a rolled segment's index only after fsyncing the
//! segment, so an index whose trailer matches the segment size is trusted
//! without reading the segment. Any other segment may end in a torn write:
//! every batch is framed and CRC-checked, the file is cut at the first one
//! that fails, and its index is rebuilt from the same scan. A segment that
//! lost its tail ends the log (the segments after it are dropped: they were
//! never durable), so offsets stay dense.

use std::collections::BTreeSet;
use std::io;
use std::sync::Arc;

use super::fail_stop::fail_stop;
use super::index::read_trailer;
use super::scan::{BatchReader, Step, RECOVERY_CHUNK};
use super::segment::{BatchMeta, Segment};
use super::LogConfig;
use crate::volume::{SegmentFile, Volume};
use kaas_core::layout::{self, Entry};
use kaas_core::partition::txn_index::decode_index;

pub(crate) struct Recovered {
    /// Sealed segments, oldest first.
    pub sealed: Vec<Segment>,
    pub active: Segment,
    pub log_start_offset: i64,
}

pub(crate) fn recover(volume: &dyn Volume, dir: &str, config: &LogConfig) -> io::Result<Recovered> {
    volume.create_dir_all(dir)?;
    let mut bases = BTreeSet::new();
    let mut index_bases = Vec::new();
    let mut txn_index_bases = Vec::new();
    for name in volume.list(dir)? {
        match layout::classify(&name) {
            Entry::Segment(base) => {
                bases.insert(base);
            }
            Entry::Index(base) => index_bases.push(base),
            Entry::TxnIndex(base) => txn_index_bases.push(base),
            Entry::Other => {}
        }
    }
    // An index without its segment is left over from a deletion that
    // crashed half-way; it must not be mistaken for a later segment's.
    for base in index_bases.into_iter().filter(|b| !bases.contains(b)) {
        volume.remove(&layout::index_path(dir, base))?;
    }
    // The listing says which segments have an aborted index, so the
    // (many) segments without one cost no lookup on the volume below.
    let (txn_indexed, orphans): (BTreeSet<i64>, Vec<i64>) = {
        let (kept, orphans): (Vec<i64>, Vec<i64>) =
            txn_index_bases.into_iter().partition(|b| bases.contains(b));
        (kept.into_iter().collect(), orphans)
    };
    for base in orphans {
        volume.remove(&layout::txn_index_path(dir, base))?;
    }

    let mut log_start_offset = read_log_start_offset(volume, dir)?;
    let mut bases: Vec<i64> = bases.into_iter().collect();
    // Finish deletions DeleteRecords persisted but did not complete: a
    // segment is entirely below the log start when the next one starts at
    // or before it.
    while bases.len() >= 2 && bases[1] <= log_start_offset {
        delete_segment_files(volume, dir, bases[0])?;
        bases.remove(0);
    }

    let mut sealed = Vec::with_capacity(bases.len());
    let mut active = None;
    for (i, &base) in bases.iter().enumerate() {
        let file = volume.open_segment(&layout::segment_path(dir, base), false)?;
        let Some(&next_base) = bases.get(i + 1) else {
            let segment = scan_segment(file, base, config)?;
            // Whatever survived is made durable now, so that the durable
            // offset can start at the end offset.
            segment.file.sync()?;
            active = Some(segment);
            break;
        };
        if let Some(segment) = load_indexed(volume, dir, base, file.clone())? {
            sealed.push(segment);
            continue;
        }
        // No index: the segment was rolled, but the flusher had not both
        // fsynced it and written its index when the broker stopped. Scan
        // and keep what survived.
        tracing::warn!(dir, base, "segment without a valid index; scanning it");
        let mut segment = scan_segment(file, base, config)?;
        segment.file.sync()?;
        if segment.next_offset == next_base {
            segment.seal(volume, &layout::index_path(dir, base))?;
            sealed.push(segment);
            continue;
        }
        // It lost its tail, so the log ends here. The later segments hold
        // offsets after the hole; none of it was durable (the flusher
        // fsyncs a rolled segment before any later one counts), so nothing
        // acknowledged goes with them.
        tracing::warn!(
            dir,
            base,
            end = segment.next_offset,
            next_base,
            "segment ends before the next one starts; dropping the segments after it"
        );
        for &later in &bases[i + 1..] {
            delete_segment_files(volume, dir, later)?;
        }
        active = Some(segment);
        break;
    }

    let mut active = match active {
        Some(active) if active.next_offset >= log_start_offset => active,
        other => {
            // No segments, or (defensively) every surviving batch is below
            // the persisted log start: start an empty log at the log start.
            for segment in sealed.drain(..).chain(other) {
                delete_segment_files(volume, dir, segment.base_offset)?;
            }
            let file = volume.open_segment(&layout::segment_path(dir, log_start_offset), true)?;
            if !file.is_empty() {
                file.truncate(0)?;
            }
            Segment::empty(log_start_offset, file)
        }
    };
    let first_base = sealed.first().unwrap_or(&active).base_offset;
    log_start_offset = log_start_offset.max(first_base);
    for segment in sealed.iter_mut().chain(std::iter::once(&mut active)) {
        if txn_indexed.contains(&segment.base_offset) {
            load_txn_index(volume, dir, segment)?;
        }
    }
    Ok(Recovered {
        sealed,
        active,
        log_start_offset,
    })
}

fn read_log_start_offset(volume: &dyn Volume, dir: &str) -> io::Result<i64> {
    let Some(data) = volume.read(&layout::log_start_offset_path(dir))? else {
        return Ok(0);
    };
    Ok(layout::decode_log_start_offset(&data).unwrap_or_else(|| {
        // Written atomically, so this is outside damage. Falling back to
        // the first segment only re-exposes records DeleteRecords hid.
        tracing::warn!(
            dir,
            "unreadable log-start-offset file; using the first segment"
        );
        0
    }))
}

pub(crate) fn delete_segment_files(volume: &dyn Volume, dir: &str, base: i64) -> io::Result<()> {
    // Segment first: a crash in between leaves an orphan index, which the
    // next startup removes; the reverse would force a needless rebuild.
    volume.remove(&layout::segment_path(dir, base))?;
    volume.remove(&layout::index_path(dir, base))?;
    volume.remove(&layout::txn_index_path(dir, base))
}

/// Reads a segment's `.txnindex`, if it has one, into the segment. A torn
/// last entry (a crash during its append) is cut off; which entries are
/// kept is decided once the producer replay is known
/// (`PartitionLog::rebuild_aborted`).
fn load_txn_index(volume: &dyn Volume, dir: &str, segment: &mut Segment) -> io::Result<()> {
    let path = layout::txn_index_path(dir, segment.base_offset);
    let file = match volume.open_segment(&path, false) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let len = usize::try_from(file.len())
        .map_err(|_| super::invalid_data(format!("{path}: too large")))?;
    let bytes = file.read_at(0, len)?;
    let (entries, torn) =
        decode_index(&bytes).map_err(|e| super::invalid_data(format!("{path}: {e:?}")))?;
    if torn > 0 {
        tracing::warn!(dir, path, torn, "truncating torn aborted-index entry");
        file.truncate((len - torn) as u64)?;
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
    base: i64,
    file: Arc<dyn SegmentFile>,
) -> io::Result<Option<Segment>> {
    let index_path = layout::index_path(dir, base);
    match volume.open_segment(&index_path, false) {
        Ok(index_file) => Ok(read_trailer(index_file.as_ref(), file.len())?
            .map(|(trailer, entries)| Segment::sealed(base, file, index_file, trailer, entries))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Scans a segment from the start, validating every batch, truncating the
/// file at the first invalid one, and rebuilding the in-memory index.
pub(crate) fn scan_segment(
    file: Arc<dyn SegmentFile>,
    base: i64,
    config: &LogConfig,
) -> io::Result<Segment> {
    let mut segment = Segment::empty(base, file.clone());
    let mut reader = BatchReader::new(file.as_ref(), 0, RECOVERY_CHUNK);
    let bad_tail = loop {
        match reader.next_step()? {
            Step::Batch { position, batch } => {
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
    if let Some((position, problem)) = bad_tail {
        tracing::warn!(
            segment = base,
            position,
            len = file.len(),
            problem,
            "truncating invalid segment tail"
        );
        file.truncate(position)?;
    }
    Ok(segment)
}
