//! Producer state on the volume: a snapshot per leader epoch
//! (`kaas_core::layout::producer_snapshot_path`) plus a replay of the log
//! after the snapshot's offset.

use crate::log::PartitionLog;
use crate::volume::Volume;
use kaas_core::layout::{producer_snapshot_epoch, producer_snapshot_path};
use kaas_core::partition::{aborted_index_entry, epoch_snapshot_is_trusted};
use kaas_core::producer::{decode_snapshot, encode_snapshot, ProducerTable};
use kaas_core::record::split_batches;
use std::io;

/// Reads at most this much log per step of the recovery replay.
const REPLAY_CHUNK: usize = 1 << 20;

/// Writes a snapshot the partition's rules released (atomically, durably),
/// under the name of the leader epoch writing it.
pub fn write(volume: &dyn Volume, dir: &str, epoch: i32, bytes: &[u8]) -> io::Result<()> {
    volume.write_atomic(&producer_snapshot_path(dir, epoch), bytes)
}

/// What the partition directory holds of producer snapshots: the trusted
/// one of highest offset (its table and offset), or why none is.
enum Found {
    Used(ProducerTable, i64),
    Absent,
    /// A snapshot of the current epoch exists but cannot be used (ahead of
    /// the log, or unreadable): it must be replaced before any append.
    Replace,
}

/// Picks the snapshot to start from. Each epoch's snapshot speaks only for
/// its epoch's log (`epoch_snapshot_is_trusted`); of those trusted, the one
/// furthest along wins. Another epoch's unusable snapshot is left alone:
/// it is not this leader's file, and is never trusted again.
fn find_snapshot(volume: &dyn Volume, log: &PartitionLog) -> io::Result<Found> {
    let current = log.leader_epoch();
    let mut best: Option<(ProducerTable, i64)> = None;
    let mut replace = false;
    for name in volume.list(log.dir())? {
        let Some(epoch) = producer_snapshot_epoch(&name) else {
            continue;
        };
        let Some(bytes) = volume.read(&producer_snapshot_path(log.dir(), epoch))? else {
            continue;
        };
        match decode_snapshot(&bytes) {
            Ok((table, offset))
                if epoch_snapshot_is_trusted(
                    log.leader_epochs(),
                    epoch,
                    offset,
                    log.end_offset(),
                ) =>
            {
                if best.as_ref().is_none_or(|(_, o)| offset > *o) {
                    best = Some((table, offset));
                }
            }
            Ok((_, offset)) => {
                tracing::warn!(
                    dir = log.dir(),
                    epoch,
                    offset,
                    end = log.end_offset(),
                    "producer snapshot is beyond its epoch's log; not using it"
                );
                replace |= epoch == current;
            }
            Err(e) => {
                tracing::warn!(dir = log.dir(), epoch, error = %e, "producer snapshot unreadable; not using it");
                replace |= epoch == current;
            }
        }
    }
    Ok(match best {
        // A newer usable one of this epoch is written at the next flush;
        // an unusable one of this epoch must go now (see `recover`).
        Some((table, offset)) if !replace => Found::Used(table, offset),
        Some(_) => Found::Replace,
        None if replace => Found::Replace,
        None => Found::Absent,
    })
}

/// Rebuilds the producer table of a just-opened log: the snapshot, if it is
/// readable and trusted (`kaas_core::partition::snapshot_is_trusted`), then
/// every batch after it. Returns the table and the offset of the snapshot
/// now on the volume, if any.
///
/// The aborted index is made to match the log on the way
/// (`PartitionLog::rebuild_aborted`): the abort markers the replay meets
/// give the entries from the replay start on. That happens before a
/// replacement snapshot is written: the snapshot moves the next start's
/// replay past those markers, after which their entries are trusted as
/// they are on the volume.
///
/// A snapshot that is not used is replaced by one of the rebuilt table
/// before anything can be appended. Left in place, a snapshot ahead of the
/// log would be trusted at a later restart, once the log has grown past its
/// offset: its batches that a crash took back would then answer retries
/// as duplicates at offsets that now hold other records. (Kafka's
/// truncateAndReload deletes such snapshots for the same reason.)
pub fn recover(
    volume: &dyn Volume,
    log: &mut PartitionLog,
    now_ms: i64,
) -> io::Result<(ProducerTable, Option<i64>)> {
    let (mut table, used, replace) = match find_snapshot(volume, log)? {
        Found::Used(table, offset) => (table, Some(offset), false),
        Found::Absent => (ProducerTable::new(), None, false),
        Found::Replace => (ProducerTable::new(), None, true),
    };
    let from = used.map_or(log.log_start_offset(), |o| o.max(log.log_start_offset()));
    let end = log.end_offset();
    let mut offset = from;
    let mut rebuilt = Vec::new();
    while offset < end {
        let read = log
            .read(offset, REPLAY_CHUNK, end)
            .map_err(|e| io::Error::other(e.to_string()))?;
        if read.records.is_empty() {
            break;
        }
        for batch in split_batches(read.records) {
            if batch.last_offset() < offset {
                continue;
            }
            if let Some(completed) = table.replay(&batch, now_ms) {
                rebuilt.extend(aborted_index_entry(&completed, table.first_open_offset()));
            }
        }
        if read.next_offset <= offset {
            // Damaged batch offsets (a sealed segment is trusted without a
            // scan) can make the read return the same batches forever: a
            // broker that never finishes starting. Fail like any other
            // unreadable log instead.
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{}: the log does not advance past offset {offset}",
                    log.dir()
                ),
            ));
        }
        offset = read.next_offset;
    }
    log.rebuild_aborted(from, &rebuilt)?;
    let written = if replace {
        // The recovered log is durable, so this snapshot is exact.
        let epoch = log.leader_epoch();
        write(volume, log.dir(), epoch, &encode_snapshot(&table, end))?;
        Some(end)
    } else {
        used
    };
    Ok((table, written))
}

#[cfg(test)]
#[cfg(not(madsim))]
mod tests {
    use super::*;
    use crate::log::LogConfig;
    use crate::volume::LocalVolume;
    use kaas_core::record::{BatchBuilder, NewRecord};
    use std::sync::Arc;

    /// Found by the `state_files` fuzz target: in a sealed segment, a batch
    /// whose lastOffsetDelta claims far more offsets than it has, followed
    /// by one whose base offset lies past the end, made every replay step
    /// stop at the same offset, and the broker hung at startup.
    #[test]
    fn replay_of_a_log_that_does_not_advance_is_an_error_not_a_hang() {
        let dir = tempfile::tempdir().unwrap();
        let volume: Arc<dyn Volume> = Arc::new(LocalVolume::new(dir.path()).unwrap());
        let batch = |seq: i32| {
            let mut b = BatchBuilder::idempotent(7, 0, seq);
            for i in 0..10u8 {
                b.push(NewRecord::new(0, None, Some(&[i])));
            }
            b.build()
        };
        let size = batch(0).size();
        let config = LogConfig {
            segment_bytes: 10 * size as u64,
            ..LogConfig::default()
        };
        let log_dir = "topics/t-0".to_string();
        {
            let mut log = PartitionLog::open(volume.clone(), log_dir.clone(), config, 0).unwrap();
            for i in 0..12 {
                log.append_batch(&batch(i * 10)).unwrap();
            }
            log.sync().unwrap();
            assert_eq!(log.segment_count(), 2);
        }
        // Damage the sealed first segment: batch 3 claims 2^28 offsets
        // (lastOffsetDelta at byte 23), batch 8 starts far past the end.
        let path = dir.path().join("topics/t-0/00000000000000000000.log");
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[3 * size + 23..3 * size + 27].copy_from_slice(&(1i32 << 28).to_be_bytes());
        bytes[8 * size..8 * size + 8].copy_from_slice(&(1i64 << 59).to_be_bytes());
        std::fs::write(&path, bytes).unwrap();

        let mut log = PartitionLog::open(volume.clone(), log_dir, config, 0).unwrap();
        let err = recover(volume.as_ref(), &mut log, 0).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    }
}
