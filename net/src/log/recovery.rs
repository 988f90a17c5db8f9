//! Startup: from the files in a partition directory back to segments.
//!
//! Sealed segments were fsynced when they were rolled and their index
//! written after that, so an index whose trailer matches the segment size is
//! trusted without reading the segment. The active (last) segment may end in
//! a torn write: every batch is framed and CRC-checked, and the file is cut
//! at the first one that fails; its index is rebuilt from the same scan.

use std::collections::BTreeSet;
use std::io;
use std::sync::Arc;

use super::index::read_trailer;
use super::layout::{self, Entry};
use super::scan::{BatchReader, Step, RECOVERY_CHUNK};
use super::segment::{BatchMeta, Segment};
use super::LogConfig;
use crate::volume::{SegmentFile, Volume};

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
    for name in volume.list(dir)? {
        match layout::classify(&name) {
            Entry::Segment(base) => {
                bases.insert(base);
            }
            Entry::Index(base) => index_bases.push(base),
            Entry::Other => {}
        }
    }
    // An index without its segment is left over from a deletion that
    // crashed half-way; it must not be mistaken for a later segment's.
    for base in index_bases.into_iter().filter(|b| !bases.contains(b)) {
        volume.remove(&layout::index_path(dir, base))?;
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
    if let Some((&active_base, sealed_bases)) = bases.split_last() {
        for &base in sealed_bases {
            if let Some(segment) = load_sealed(volume, dir, base, config)? {
                sealed.push(segment);
            }
        }
        let file = volume.open_segment(&layout::segment_path(dir, active_base), false)?;
        let segment = scan_segment(file, active_base, config)?;
        // Whatever survived is made durable now, so that the durable offset
        // can start at the end offset.
        segment.file.sync()?;
        active = Some(segment);
    }

    let active = match active {
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
    volume.remove(&layout::index_path(dir, base))
}

/// A sealed segment from its index, or rebuilt by scanning it. `None` if no
/// valid batch is left in it (its files are then removed).
fn load_sealed(
    volume: &dyn Volume,
    dir: &str,
    base: i64,
    config: &LogConfig,
) -> io::Result<Option<Segment>> {
    let file = volume.open_segment(&layout::segment_path(dir, base), false)?;
    let index_path = layout::index_path(dir, base);
    match volume.open_segment(&index_path, false) {
        Ok(index_file) => {
            if let Some((trailer, entries)) = read_trailer(index_file.as_ref(), file.len())? {
                return Ok(Some(Segment::sealed(
                    base, file, index_file, trailer, entries,
                )));
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    tracing::warn!(dir, base, "missing or inconsistent index; rebuilding");
    let mut segment = scan_segment(file, base, config)?;
    if segment.is_empty() {
        delete_segment_files(volume, dir, base)?;
        return Ok(None);
    }
    segment.seal(volume, &index_path)?;
    Ok(Some(segment))
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
