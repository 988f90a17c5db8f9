//! One process per broker id on a data directory.
//!
//! Two processes serving one broker id would both heartbeat its file and
//! both believe they own its partitions and coordinators. `kaas serve` takes
//! an exclusive lock on `__cluster/brokers/kaas-<id>.lock` before it opens
//! anything and holds it for its whole life; a second process with that id
//! finds the lock taken and refuses to start. The kernel drops the lock when
//! the process dies, kill -9 included, so a restart is never blocked by a
//! crashed predecessor. On NFS the lock is an NFSv4 (or NLM) lock, which the
//! server releases when the dead client's lease expires.

use kaas_core::layout::BROKERS_DIR;
use std::fs::{File, OpenOptions, TryLockError};
use std::path::Path;

/// The lock held while the process serves `broker_id`; dropping it (at
/// exit) releases it.
pub struct BrokerLock {
    _file: File,
}

pub fn acquire(data_dir: &Path, broker_id: i32) -> Result<BrokerLock, String> {
    let dir = data_dir.join(BROKERS_DIR);
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let path = dir.join(format!("kaas-{broker_id}.lock"));
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(BrokerLock { _file: file }),
        Err(TryLockError::WouldBlock) => Err(format!(
            "broker id {broker_id} is already served by another process on {} (it holds {}); give this broker another --broker-id",
            data_dir.display(),
            path.display()
        )),
        Err(TryLockError::Error(e)) => Err(format!("cannot lock {}: {e}", path.display())),
    }
}
