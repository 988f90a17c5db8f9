//! The producer fence log on the volume (`kaas_core::cluster::fences`):
//! this broker's outbound log of the epoch bumps its transaction
//! coordinator made, and what it has read of the others'.
//!
//! Written and read in the ownership round after each heartbeat, so a bump
//! reaches partitions other brokers lead within about two heartbeat
//! intervals; inotify would not see another NFS client's writes, so the
//! logs are polled.

use crate::volume::Volume;
use kaas_core::cluster::fences::{fences_to_apply, record_fence, Fence, FenceLog};
use kaas_core::layout::{producer_fence_file, PRODUCER_FENCES_DIR};
use std::collections::BTreeMap;
use std::io;
use std::sync::{Mutex, MutexGuard};

#[derive(Debug, Default)]
struct Inner {
    /// The newest fence this broker issued per producer id: its log.
    own: BTreeMap<i64, Fence>,
    /// Whether `own` changed since it was last written.
    own_dirty: bool,
    /// Every fence known, this broker's and the others': applied to a
    /// partition when this broker starts leading it.
    known: BTreeMap<i64, Fence>,
}

#[derive(Debug)]
pub struct FenceExchange {
    broker_id: i32,
    inner: Mutex<Inner>,
}

impl FenceExchange {
    pub fn new(broker_id: i32) -> FenceExchange {
        FenceExchange {
            broker_id,
            inner: Mutex::new(Inner::default()),
        }
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// This broker's coordinator bumped `producer_id` to `epoch`.
    pub fn issued(&self, producer_id: i64, epoch: i16, at_ms: i64) {
        let fence = Fence {
            producer_id,
            epoch,
            at_ms,
        };
        let mut inner = self.inner();
        if record_fence(&mut inner.own, fence) {
            inner.own_dirty = true;
        }
        record_fence(&mut inner.known, fence);
    }

    /// Every fence known (to apply to a partition just taken).
    pub fn known(&self) -> Vec<Fence> {
        self.inner().known.values().copied().collect()
    }

    /// Loads this broker's own log from its previous life, so a restart
    /// does not drop the fences it issued. Blocks on the volume.
    pub fn load_own(&self, volume: &dyn Volume) -> io::Result<()> {
        let Some(bytes) = volume.read(&producer_fence_file(self.broker_id))? else {
            return Ok(());
        };
        match FenceLog::decode(&bytes, self.broker_id) {
            Ok(log) => {
                let mut inner = self.inner();
                for f in log.fences {
                    record_fence(&mut inner.own, f);
                    record_fence(&mut inner.known, f);
                }
            }
            Err(e) => tracing::warn!(error = %e, "ignoring this broker's unreadable fence log"),
        }
        Ok(())
    }

    /// Writes this broker's log if it changed (dropping fences issued
    /// before `keep_since_ms`), then reads the others' and returns the
    /// fences newer than known, to apply to the partitions led here. A log
    /// that cannot be read is skipped until the next round. Blocks on the
    /// volume.
    pub fn exchange(&self, volume: &dyn Volume, keep_since_ms: i64) -> io::Result<Vec<Fence>> {
        let to_write = {
            let mut inner = self.inner();
            inner.own_dirty.then(|| {
                inner.own.retain(|_, f| f.at_ms >= keep_since_ms);
                inner.own_dirty = false;
                FenceLog::of(self.broker_id, &inner.own, keep_since_ms)
            })
        };
        if let Some(log) = to_write {
            volume.create_dir_all(PRODUCER_FENCES_DIR)?;
            let written = log.encode().map_err(io::Error::other).and_then(|bytes| {
                volume.write_atomic(&producer_fence_file(self.broker_id), &bytes)
            });
            if let Err(e) = written {
                self.inner().own_dirty = true;
                return Err(e);
            }
        }
        let mut fresh = Vec::new();
        for name in volume.list(PRODUCER_FENCES_DIR)? {
            let Some(broker) = name
                .strip_prefix("from-")
                .and_then(|n| n.strip_suffix(".json"))
                .and_then(|n| n.parse::<i32>().ok())
                .filter(|b| *b != self.broker_id)
            else {
                continue;
            };
            let bytes = match volume.read(&producer_fence_file(broker)) {
                Ok(Some(bytes)) => bytes,
                Ok(None) => continue,
                Err(e) => {
                    tracing::warn!(broker, error = %e, "cannot read a fence log");
                    continue;
                }
            };
            match FenceLog::decode(&bytes, broker) {
                Ok(log) => fresh.extend(fences_to_apply(&mut self.inner().known, &log)),
                Err(e) => tracing::warn!(broker, error = %e, "ignoring a fence log"),
            }
        }
        Ok(fresh)
    }
}

#[cfg(test)]
#[cfg(not(madsim))]
mod tests {
    use super::*;
    use crate::volume::LocalVolume;

    #[test]
    fn a_bump_at_one_broker_reaches_the_others_once() {
        let dir = tempfile::tempdir().unwrap();
        let v = LocalVolume::new(dir.path()).unwrap();
        let (a, b) = (FenceExchange::new(0), FenceExchange::new(1));
        a.issued(42, 3, 1_000);
        assert!(a.exchange(&v, 0).unwrap().is_empty(), "nothing from others");
        let got = b.exchange(&v, 0).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].producer_id, got[0].epoch), (42, 3));
        assert!(b.exchange(&v, 0).unwrap().is_empty(), "applied once");
        assert_eq!(b.known().len(), 1, "kept for partitions taken later");

        // A restart of broker 0 keeps what it issued in its log.
        let a2 = FenceExchange::new(0);
        a2.load_own(&v).unwrap();
        a2.issued(43, 1, 2_000);
        a2.exchange(&v, 0).unwrap();
        let c = FenceExchange::new(2);
        let mut seen: Vec<_> = c
            .exchange(&v, 0)
            .unwrap()
            .iter()
            .map(|f| f.producer_id)
            .collect();
        seen.sort();
        assert_eq!(seen, vec![42, 43]);
    }
}
