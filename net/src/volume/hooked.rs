//! A volume that asks a hook before every operation that waits for the
//! disk, for tests that fail such an operation or hold it.
//!
//! One wrapper instead of a hand-written delegating `Volume` per test: the
//! hook sees which wait it is and the path, and either lets it through
//! (`Ok`), fails it (`Err`), or blocks until the test lets it go. It can
//! also leave names out of listings, as an NFS client's stale cached
//! directory listing does while lookups by name stay exact
//! ([`hiding_from_listings`](HookedVolume::hiding_from_listings)).

use super::{SegmentFile, Volume};
use bytes::Bytes;
use std::io;
use std::sync::Arc;

/// An operation that waits for the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiskWait<'a> {
    /// `SegmentFile::sync` of the file at this path.
    Sync(&'a str),
    /// `Volume::write_atomic` of this path.
    WriteAtomic(&'a str),
    /// `Volume::create_exclusive` of this path.
    CreateExclusive(&'a str),
    /// `Volume::rename` onto this path (the name it publishes).
    Rename(&'a str),
    /// `Volume::sync_dir` of this directory.
    SyncDir(&'a str),
    /// `SegmentFile::free_tail` of the file at this path (freeing blocks
    /// is disk work on a volume that discards them).
    FreeTail(&'a str),
}

/// Called before each [`DiskWait`]; an error fails the operation.
pub type Hook = Arc<dyn Fn(DiskWait<'_>) -> io::Result<()> + Send + Sync>;

/// Says which entry names listings leave out.
pub type Hidden = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// `inner` with `hook` in front of its disk waits.
pub struct HookedVolume<V> {
    pub inner: V,
    hook: Hook,
    hidden: Option<Hidden>,
}

impl<V: Volume> HookedVolume<V> {
    pub fn new(
        inner: V,
        hook: impl Fn(DiskWait<'_>) -> io::Result<()> + Send + Sync + 'static,
    ) -> Self {
        HookedVolume {
            inner,
            hook: Arc::new(hook),
            hidden: None,
        }
    }

    /// Listings leave out the entries (last path components) for which
    /// `hidden` is true.
    pub fn hiding_from_listings(
        mut self,
        hidden: impl Fn(&str) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.hidden = Some(Arc::new(hidden));
        self
    }
}

struct HookedFile {
    inner: Arc<dyn SegmentFile>,
    path: String,
    hook: Hook,
}

impl SegmentFile for HookedFile {
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn append(&self, data: &[u8]) -> io::Result<u64> {
        self.inner.append(data)
    }
    fn read_at(&self, pos: u64, len: usize) -> io::Result<Bytes> {
        self.inner.read_at(pos, len)
    }
    fn start_write_back(&self, from: u64, len: u64) {
        self.inner.start_write_back(from, len);
    }
    fn sync(&self) -> io::Result<()> {
        (self.hook)(DiskWait::Sync(&self.path))?;
        self.inner.sync()
    }
    fn truncate(&self, len: u64) -> io::Result<()> {
        self.inner.truncate(len)
    }
    fn free_tail(&self, len: u64) -> io::Result<()> {
        (self.hook)(DiskWait::FreeTail(&self.path))?;
        self.inner.free_tail(len)
    }
}

impl<V: Volume> Volume for HookedVolume<V> {
    fn read(&self, path: &str) -> io::Result<Option<Bytes>> {
        self.inner.read(path)
    }
    fn write_atomic(&self, path: &str, data: &[u8]) -> io::Result<()> {
        (self.hook)(DiskWait::WriteAtomic(path))?;
        self.inner.write_atomic(path, data)
    }
    fn create_exclusive(&self, path: &str, data: &[u8]) -> io::Result<()> {
        (self.hook)(DiskWait::CreateExclusive(path))?;
        self.inner.create_exclusive(path, data)
    }
    fn list(&self, dir: &str) -> io::Result<Vec<String>> {
        let mut names = self.inner.list(dir)?;
        if let Some(hidden) = &self.hidden {
            names.retain(|name| !hidden(name));
        }
        Ok(names)
    }
    fn create_dir_all(&self, dir: &str) -> io::Result<()> {
        self.inner.create_dir_all(dir)
    }
    fn temporary_name(&self, path: &str) -> io::Result<String> {
        self.inner.temporary_name(path)
    }
    fn write_new(&self, path: &str, data: &[u8]) -> io::Result<()> {
        self.inner.write_new(path, data)
    }
    fn sync_file(&self, path: &str) -> io::Result<()> {
        self.inner.sync_file(path)
    }
    fn link(&self, from: &str, to: &str) -> io::Result<()> {
        self.inner.link(from, to)
    }
    fn create_dir(&self, dir: &str) -> io::Result<bool> {
        self.inner.create_dir(dir)
    }
    fn sync_dir(&self, dir: &str) -> io::Result<()> {
        (self.hook)(DiskWait::SyncDir(dir))?;
        self.inner.sync_dir(dir)
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        (self.hook)(DiskWait::Rename(to))?;
        self.inner.rename(from, to)
    }
    fn remove(&self, path: &str) -> io::Result<()> {
        self.inner.remove(path)
    }
    fn remove_dir_all(&self, dir: &str) -> io::Result<()> {
        self.inner.remove_dir_all(dir)
    }
    fn open_segment(&self, path: &str, create: bool) -> io::Result<Arc<dyn SegmentFile>> {
        Ok(Arc::new(HookedFile {
            inner: self.inner.open_segment(path, create)?,
            path: path.to_string(),
            hook: self.hook.clone(),
        }))
    }
}
