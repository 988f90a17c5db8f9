//! The `Volume` seam: the only way kaas touches the shared volume.
//!
//! Operations mirror what the substrate (a local directory or NFS) really
//! offers: whole-file reads, atomic replace (tmp + fsync + rename), directory
//! listing, removal, and append-only segment handles. `LocalVolume` implements
//! it on the OS file system; the simulator implements it in memory with
//! crash and NFS-staleness semantics. Paths are relative to the volume root
//! and always use `/`. [`contract`] states the trait's promises as checks
//! that every implementation's tests run.

pub mod contract;
mod fd_cache;
pub mod hooked;
mod local;

pub use fd_cache::StaleHandle;
pub use local::{default_open_file_limit, LocalVolume};

use bytes::Bytes;
use std::io;
use std::sync::Arc;

/// An open, append-only log file (a segment or its index).
///
/// All methods take `&self` so one handle can be appended to by the
/// partition's writer while a flusher fsyncs it and fetches read from it.
pub trait SegmentFile: Send + Sync {
    /// Current length in bytes (everything appended, durable or not).
    fn len(&self) -> u64;
    /// True if nothing was appended yet.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Appends `data` at the end; returns the position it was written at.
    fn append(&self, data: &[u8]) -> io::Result<u64>;
    /// Reads up to `len` bytes starting at `pos` (fewer at end of file).
    fn read_at(&self, pos: u64, len: usize) -> io::Result<Bytes>;
    /// Makes every byte appended so far durable.
    fn sync(&self) -> io::Result<()>;
    /// Cuts the file to `len` bytes (torn-tail recovery) and makes that durable.
    fn truncate(&self, len: u64) -> io::Result<()>;
}

/// The shared volume.
pub trait Volume: Send + Sync + 'static {
    /// The whole content of a file, or `None` if it does not exist.
    fn read(&self, path: &str) -> io::Result<Option<Bytes>>;
    /// Replaces `path` atomically and durably: write a temporary file, fsync
    /// it, rename it over `path`, fsync the directory. The parent directory
    /// must exist. In-flight temporaries never appear in `list`.
    fn write_atomic(&self, path: &str, data: &[u8]) -> io::Result<()>;
    /// Creates `path` holding `data`, durably, only if nothing of that name
    /// exists; otherwise fails with `ErrorKind::AlreadyExists` and leaves the
    /// existing file untouched. Atomic against every other creator of the
    /// same name, in this process or on another machine sharing the volume
    /// (NFS included): of concurrent callers exactly one succeeds. The
    /// content appears whole or not at all: a reader never sees the winner's
    /// file partly written. This is how an owner claims the next ownership
    /// epoch (`kaas_core::layout::*_epoch_file`). The parent directory must
    /// exist. In-flight temporaries never appear in `list`.
    fn create_exclusive(&self, path: &str, data: &[u8]) -> io::Result<()>;
    /// Names of the entries directly under `dir` (empty if it does not exist),
    /// sorted so callers never depend on file-system order.
    fn list(&self, dir: &str) -> io::Result<Vec<String>>;
    /// Creates `dir` and its parents.
    fn create_dir_all(&self, dir: &str) -> io::Result<()>;
    /// Renames file `from` to `to`, atomically replacing any file named
    /// `to`, and makes the change durable (the directory is fsynced). Both
    /// must be in one existing directory's tree on this volume; `from`
    /// must exist (`ErrorKind::NotFound` otherwise). Handles opened on the
    /// replaced `to` keep reading the file they opened; handles opened on
    /// `from` keep the file too, though a caller should reopen it by its new
    /// name. The log cleaner publishes a durable, complete copy this way.
    fn rename(&self, from: &str, to: &str) -> io::Result<()>;
    /// Removes one file; removing a missing file is not an error.
    fn remove(&self, path: &str) -> io::Result<()>;
    /// Removes a directory and everything below it; a missing one is not an error.
    fn remove_dir_all(&self, dir: &str) -> io::Result<()>;
    /// Opens (creating if `create`) an append-only file. Opening a missing
    /// file without `create` fails with `ErrorKind::NotFound`. A created
    /// file's directory entry is durable once the file's first `sync` (or
    /// `truncate`) returns: creating a segment must not wait for the disk,
    /// since it happens under the partition's append lane.
    fn open_segment(&self, path: &str, create: bool) -> io::Result<Arc<dyn SegmentFile>>;
}
