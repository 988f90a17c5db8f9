//! Producer state on the volume: `<partition dir>/producer-state.snapshot`
//! plus a replay of the log after the snapshot's offset.

use crate::log::PartitionLog;
use crate::volume::Volume;
use kaas_core::producer::{decode_snapshot, encode_snapshot, ProducerTable};
use kaas_core::record::split_batches;
use std::io;

/// Reads at most this much log per step of the recovery replay.
const REPLAY_CHUNK: usize = 1 << 20;

fn snapshot_path(dir: &str) -> String {
    format!("{dir}/producer-state.snapshot")
}

/// Writes the table as of the log end (atomically, durably).
pub fn save(volume: &dyn Volume, log: &PartitionLog, table: &ProducerTable) -> io::Result<()> {
    volume.write_atomic(
        &snapshot_path(log.dir()),
        &encode_snapshot(table, log.end_offset()),
    )
}

/// Rebuilds the producer table of a just-opened log: the snapshot, if it is
/// readable and not ahead of the log (a snapshot written at a roll can cover
/// a batch that a crash then took back), then every batch after it.
pub fn recover(volume: &dyn Volume, log: &PartitionLog, now_ms: i64) -> io::Result<ProducerTable> {
    let (mut table, from) = match volume.read(&snapshot_path(log.dir()))? {
        Some(bytes) => match decode_snapshot(&bytes) {
            Ok((table, offset)) if offset <= log.end_offset() => {
                (table, offset.max(log.log_start_offset()))
            }
            Ok((_, offset)) => {
                tracing::warn!(
                    dir = log.dir(),
                    offset,
                    end = log.end_offset(),
                    "producer snapshot is ahead of the log; rebuilding from the log"
                );
                (ProducerTable::new(), log.log_start_offset())
            }
            Err(e) => {
                tracing::warn!(dir = log.dir(), error = %e, "producer snapshot unreadable; rebuilding from the log");
                (ProducerTable::new(), log.log_start_offset())
            }
        },
        None => (ProducerTable::new(), log.log_start_offset()),
    };
    let end = log.end_offset();
    let mut offset = from;
    while offset < end {
        let read = log
            .read(offset, REPLAY_CHUNK, end)
            .map_err(|e| io::Error::other(e.to_string()))?;
        if read.records.is_empty() {
            break;
        }
        for batch in split_batches(read.records) {
            if batch.last_offset() >= offset {
                table.replay(&batch, now_ms);
            }
        }
        offset = read.next_offset;
    }
    Ok(table)
}
