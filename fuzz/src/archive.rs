//! A tiny archive format for a fuzzed volume: entries of
//! `[path index u8][length u16 BE][content]`. Paths come from a fixed table
//! of the files the broker reads at startup, so mutations spend their time
//! on contents, not on inventing names the broker would ignore.

use kaas_core::layout;
use std::sync::LazyLock;

/// The files a broker opening the volume looks at: the cluster file, topic
/// files (topic `t` with partitions 0 and 1, topic `u`), `t-0`'s segments,
/// indexes, log start offset and producer snapshot, the PID block file, a
/// partition directory with no topic file (removed at startup), group
/// slot files, and `t-0`'s leader-epoch checkpoints (the shared name and
/// epoch 1's) and a later epoch's segment.
///
/// The table is the archive format: index `i` means the same file in every
/// committed corpus input, so entries are only ever appended. The names come
/// from `kaas_core::layout`, so an index keeps meaning the same file if the
/// layout changes.
pub static PATHS: LazyLock<Vec<String>> = LazyLock::new(|| {
    let t0 = layout::partition_dir("t", 0);
    let t1 = layout::partition_dir("t", 1);
    vec![
        layout::CLUSTER_FILE.to_string(),
        layout::topic_file("t"),
        layout::topic_file("u"),
        layout::segment_path(&t0, 0, 0),
        layout::index_path(&t0, 0, 0),
        layout::segment_path(&t0, 100, 0),
        layout::index_path(&t0, 100, 0),
        layout::log_start_offset_path(&t0, 0),
        layout::log_start_offset_path(&t0, 2),
        layout::producer_snapshot_path(&t0, 0),
        layout::segment_path(&t1, 0, 0),
        layout::producer_snapshot_path(&t1, 0),
        layout::segment_path(&layout::partition_dir("u", 0), 0, 0),
        layout::producer_id_block_file(0),
        layout::segment_path(&layout::partition_dir("x", 0), 0, 0),
        layout::topic_file("bad name"),
        layout::txn_index_path(&t0, 0, 0),
        // Group slot files: slot 24 holds "g" (fnv1a("g") % 50), slot 0 is
        // another slot (a file naming the wrong slot must be refused).
        layout::group_slot_file(24, 0),
        layout::group_slot_file(0, 0),
        // Leader epochs: `t-0`'s checkpoint and a segment of a later epoch
        // where the epoch-0 segments end (with its index).
        layout::leader_epoch_checkpoint_path(&t0, 0),
        layout::segment_path(&t0, 200, 1),
        layout::index_path(&t0, 200, 1),
        // Epoch 1's own checkpoint (one file per epoch since 2026-12-06;
        // index 19 is the name every epoch shared before).
        layout::leader_epoch_checkpoint_path(&t0, 1),
    ]
});

/// The (path, content) entries of an archive. A later entry for the same
/// path replaces an earlier one; a truncated last entry keeps what is there.
pub fn decode(mut data: &[u8]) -> Vec<(&'static str, &[u8])> {
    let mut out = Vec::new();
    while let Some((&index, rest)) = data.split_first() {
        let Some((len, rest)) = rest.split_first_chunk::<2>() else {
            break;
        };
        let len = usize::from(u16::from_be_bytes(*len)).min(rest.len());
        let paths: &'static [String] = &PATHS;
        let path = paths[usize::from(index) % paths.len()].as_str();
        out.push((path, &rest[..len]));
        data = &rest[len..];
    }
    out
}

/// Encodes entries; `None` if a path is not in [`PATHS`] or a content is
/// longer than 65535 bytes.
pub fn encode<'a>(entries: impl IntoIterator<Item = (&'a str, &'a [u8])>) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    for (path, content) in entries {
        let index = PATHS.iter().position(|p| p == path)?;
        out.push(u8::try_from(index).ok()?);
        out.extend_from_slice(&u16::try_from(content.len()).ok()?.to_be_bytes());
        out.extend_from_slice(content);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_path_has_one_index_byte_of_its_own() {
        assert!(PATHS.len() <= 256);
        let unique: std::collections::BTreeSet<_> = PATHS.iter().collect();
        assert_eq!(unique.len(), PATHS.len());
    }
}
