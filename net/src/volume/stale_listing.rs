//! A volume whose listings leave out some names, as an NFS client's stale
//! cached directory listing does, while lookups by name stay exact (tests
//! of what kaas does with a listing staler than its staleness bound).

use super::{SegmentFile, Volume};
use bytes::Bytes;
use std::io;
use std::sync::Arc;

pub struct StaleListing {
    pub inner: Arc<dyn Volume>,
    /// Entry names (the last path component) that listings leave out.
    pub hidden: Vec<String>,
}

impl Volume for StaleListing {
    fn read(&self, path: &str) -> io::Result<Option<Bytes>> {
        self.inner.read(path)
    }
    fn write_atomic(&self, path: &str, data: &[u8]) -> io::Result<()> {
        self.inner.write_atomic(path, data)
    }
    fn create_exclusive(&self, path: &str, data: &[u8]) -> io::Result<()> {
        self.inner.create_exclusive(path, data)
    }
    fn list(&self, dir: &str) -> io::Result<Vec<String>> {
        let mut names = self.inner.list(dir)?;
        names.retain(|n| !self.hidden.contains(n));
        Ok(names)
    }
    fn create_dir_all(&self, dir: &str) -> io::Result<()> {
        self.inner.create_dir_all(dir)
    }
    fn remove(&self, path: &str) -> io::Result<()> {
        self.inner.remove(path)
    }
    fn remove_dir_all(&self, dir: &str) -> io::Result<()> {
        self.inner.remove_dir_all(dir)
    }
    fn open_segment(&self, path: &str, create: bool) -> io::Result<Arc<dyn SegmentFile>> {
        self.inner.open_segment(path, create)
    }
}
