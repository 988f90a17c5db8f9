//! A tiny archive format for a fuzzed volume: entries of
//! `[path index u8][length u16 BE][content]`. Paths come from a fixed table
//! of the files the broker reads at startup, so mutations spend their time
//! on contents, not on inventing names the broker would ignore.

/// The files a broker opening the volume looks at: the cluster file, topic
/// files (topic `t` with partitions 0 and 1, topic `u`), `t-0`'s segments,
/// indexes, log start offset and producer snapshot, the PID block file, a
/// partition directory with no topic file (removed at startup), and group
/// slot files.
pub const PATHS: &[&str] = &[
    "__cluster/cluster.json",
    "__cluster/topics/t.json",
    "__cluster/topics/u.json",
    "topics/t-0/00000000000000000000.log",
    "topics/t-0/00000000000000000000.index",
    "topics/t-0/00000000000000000100.log",
    "topics/t-0/00000000000000000100.index",
    "topics/t-0/log-start-offset",
    "topics/t-0/producer-state.snapshot",
    "topics/t-1/00000000000000000000.log",
    "topics/t-1/producer-state.snapshot",
    "topics/u-0/00000000000000000000.log",
    "__cluster/producer_ids/kaas-0.json",
    "topics/x-0/00000000000000000000.log",
    "__cluster/topics/bad name.json",
    "topics/t-0/00000000000000000000.txnindex",
    // Group slot files: slot 24 holds "g" (fnv1a("g") % 50), slot 0 is
    // another slot (a file naming the wrong slot must be refused).
    "__cluster/group_state/slot-24.json",
    "__cluster/group_state/slot-0.json",
];

/// The (path, content) entries of an archive. A later entry for the same
/// path replaces an earlier one; a truncated last entry keeps what is there.
pub fn decode(mut data: &[u8]) -> Vec<(&'static str, &[u8])> {
    let mut out = Vec::new();
    while let Some((&index, rest)) = data.split_first() {
        let Some((len, rest)) = rest.split_first_chunk::<2>() else {
            break;
        };
        let len = usize::from(u16::from_be_bytes(*len)).min(rest.len());
        let path = PATHS[usize::from(index) % PATHS.len()];
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
        let index = PATHS.iter().position(|p| *p == path)?;
        out.push(u8::try_from(index).ok()?);
        out.extend_from_slice(&u16::try_from(content.len()).ok()?.to_be_bytes());
        out.extend_from_slice(content);
    }
    Some(out)
}
