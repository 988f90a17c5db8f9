//! Files that change by versions (a topic's metadata, the cluster-wide
//! dynamic broker default): version N is created exclusively, so of two
//! brokers changing one at once only one wins N and the other rebuilds on
//! the winner's; the last `KEPT_VERSIONS` stay so that a reader whose
//! listing lags finds the newer ones by name.

use crate::volume::Volume;
use std::io;

/// Versions kept besides the newest: a reader whose listing lags behind
/// finds the newer ones by name as long as the one it listed is among
/// them. These files change rarely; a handful of small files.
pub const KEPT_VERSIONS: u32 = 16;

/// How often a reader lists again when a version it listed was removed
/// under it (a newer one replaced it). Each retry follows a completed
/// change, so this bounds only a pathological stream of them.
pub const READ_ATTEMPTS: usize = 8;

/// Creates `version` (at `path_of(version)`) exclusively: `AlreadyExists`
/// when another broker created it first. Once it is durable, the version
/// `KEPT_VERSIONS` older is removed (best effort: a leftover is never read,
/// the newest version wins; version 0 is never removed here).
pub fn publish(
    volume: &dyn Volume,
    path_of: impl Fn(u32) -> String,
    version: u32,
    bytes: &[u8],
) -> io::Result<()> {
    volume.create_exclusive(&path_of(version), bytes)?;
    if let Some(old) = version.checked_sub(KEPT_VERSIONS).filter(|&v| v > 0) {
        let replaced = path_of(old);
        if let Err(e) = volume.remove(&replaced) {
            tracing::warn!(file = %replaced, error = %e, "cannot remove a replaced version");
        }
    }
    Ok(())
}
