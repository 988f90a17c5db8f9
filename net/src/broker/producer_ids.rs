//! The producer id allocator and its file
//! (`kaas_core::layout::producer_id_block_file`).
//!
//! The file records where the next block starts; everything below it may
//! have been handed out. A block's end is persisted (tmp + fsync + rename)
//! before any id of it is used, so a crash at any point only skips ids
//! forward. The broker is the file's only writer.

use crate::buggify::Site;
use crate::env::{Env, IoKind};
use crate::volume::Volume;
use kaas_core::deliberate_bugs::{planted, Bug};
use kaas_core::layout::{producer_id_block_file, PRODUCER_IDS_DIR};
use kaas_core::producer::{local_pid_range, pid_for, PidBlock};
use serde::{Deserialize, Serialize};
use std::io;
use std::sync::Arc;

#[derive(Serialize, Deserialize)]
struct BlockFile {
    next_block_start: i64,
}

pub struct ProducerIdManager {
    volume: Arc<dyn Volume>,
    env: Env,
    broker_id: i32,
    block: tokio::sync::Mutex<Option<PidBlock>>,
}

impl ProducerIdManager {
    pub fn new(volume: Arc<dyn Volume>, env: Env, broker_id: i32) -> ProducerIdManager {
        ProducerIdManager {
            volume,
            env,
            broker_id,
            block: tokio::sync::Mutex::new(None),
        }
    }

    fn path(&self) -> String {
        producer_id_block_file(self.broker_id)
    }

    /// A producer id no one has had before. Requests wait here while a new
    /// block's end is written (on the IO runner); the async lock is held
    /// across that write so no id of the block is handed out before it is
    /// durable.
    pub async fn next(&self) -> io::Result<i64> {
        let mut block = self.block.lock().await;
        if let Some(local) = block.as_mut().and_then(PidBlock::take) {
            return Ok(pid_for(self.broker_id, local));
        }
        self.env.buggify.at(Site::PidBlockWrite).await?;
        let volume = self.volume.clone();
        let (path, broker_id) = (self.path(), self.broker_id);
        let mut fresh = self
            .env
            .blocking(IoKind::Fsync, move || {
                reserve_next_block(volume.as_ref(), &path, broker_id)
            })
            .await?;
        let local = fresh
            .take()
            .ok_or_else(|| io::Error::other("empty producer id block"))?;
        *block = Some(fresh);
        Ok(pid_for(self.broker_id, local))
    }
}

/// Reads where the next block starts and persists the end of that block
/// before returning it.
fn reserve_next_block(volume: &dyn Volume, path: &str, broker_id: i32) -> io::Result<PidBlock> {
    let start = match volume.read(path)? {
        Some(bytes) => {
            serde_json::from_slice::<BlockFile>(&bytes)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{path}: {e}")))?
                .next_block_start
        }
        None => 0,
    };
    let fresh = PidBlock::starting_at(start);
    if start < 0 || fresh.end > local_pid_range().end {
        return Err(io::Error::other(format!(
            "producer id space of broker {broker_id} is exhausted"
        )));
    }
    volume.create_dir_all(PRODUCER_IDS_DIR)?;
    let next_block_start = if planted(Bug::PidBlockNotAdvanced) {
        start
    } else {
        fresh.end
    };
    let json = serde_json::to_vec(&BlockFile { next_block_start }).map_err(io::Error::other)?;
    volume.write_atomic(path, &json)?;
    Ok(fresh)
}

#[cfg(test)]
#[cfg(not(madsim))]
mod tests {
    use super::*;
    use crate::volume::LocalVolume;
    use kaas_core::producer::PID_BLOCK_SIZE;
    use std::collections::BTreeSet;

    #[tokio::test]
    async fn a_restart_at_any_point_never_yields_a_pid_twice() {
        let dir = tempfile::tempdir().unwrap();
        let volume: Arc<dyn Volume> = Arc::new(LocalVolume::new(dir.path()).unwrap());
        let mut seen = BTreeSet::new();
        // Restart after varying numbers of allocations, including mid-block
        // and exactly at a block boundary.
        for allocations in [
            1,
            7,
            PID_BLOCK_SIZE as usize,
            3,
            PID_BLOCK_SIZE as usize + 1,
        ] {
            let manager = ProducerIdManager::new(volume.clone(), crate::env::Env::system(), 2);
            for _ in 0..allocations {
                let pid = manager.next().await.unwrap();
                assert!(seen.insert(pid), "pid {pid} handed out twice");
                assert!(pid >= pid_for(2, 0) && pid < pid_for(3, 0));
            }
        }
    }
}
