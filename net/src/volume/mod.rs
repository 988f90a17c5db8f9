//! The `Volume` seam: the only way kaas touches the shared volume.
//!
//! Operations mirror what the substrate (a local directory or NFS) really
//! offers: whole-file reads, directory listing, renames, removal, and
//! append-only segment handles. `LocalVolume` implements it on the OS file
//! system; the simulator implements it in memory with crash and
//! NFS-staleness semantics. Paths are relative to the volume root and
//! always use `/`. [`contract`] states the trait's promises as checks that
//! every implementation's tests run.
//!
//! Directory durability is explicit. A directory entry (a name created,
//! renamed in or out, removed) survives a power loss only once its
//! directory has been synced: by [`Volume::sync_dir`], by the first `sync`
//! of a segment `open_segment` created, or inside the three composites
//! that promise durability on return ([`Volume::write_atomic`],
//! [`Volume::create_exclusive`], [`Volume::create_dir_all`]). The
//! composites are written once, here, over the primitives, so the
//! simulator, which loses unsynced entries at a power loss, runs the very
//! sequence of steps (temporary written and synced, renamed or linked,
//! directory synced) that `LocalVolume` runs.

pub mod contract;
mod fd_cache;
pub mod hooked;
mod local;

pub use fd_cache::StaleHandle;
pub use local::{default_open_file_limit, LocalVolume};

use bytes::Bytes;
use kaas_core::deliberate_bugs::{planted, Bug};
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
    /// Asks for the `len` bytes at `from` to start on their way to the disk
    /// now, without waiting for them and without making them durable: a
    /// big file written in steps (a cleaned copy) then reaches its `sync`
    /// with little left to flush, and the flushes of other files meanwhile
    /// do not queue behind all of it at once. A hint: it may do nothing,
    /// and an error it would meet shows at the next `sync`.
    fn start_write_back(&self, from: u64, len: u64) {
        let _ = (from, len);
    }
    /// Cuts the file to `len` bytes (torn-tail recovery) and makes that durable.
    fn truncate(&self, len: u64) -> io::Result<()>;
    /// Cuts the file to `len` bytes (nothing if it is no longer) without
    /// making that durable: a file about to be removed gives its blocks
    /// back a piece at a time rather than all at its removal (on a file
    /// system that discards what it frees, freeing 16 MiB at once holds
    /// the device, and every fsync queued behind it, for about 15 ms).
    /// Only for a file out of the log that nothing reads any more: a
    /// reader would find it cut. After a crash it may be whole or cut.
    fn free_tail(&self, len: u64) -> io::Result<()>;
}

/// The shared volume.
pub trait Volume: Send + Sync + 'static {
    /// The whole content of a file, or `None` if it does not exist.
    fn read(&self, path: &str) -> io::Result<Option<Bytes>>;
    /// Names of the entries directly under `dir` (empty if it does not
    /// exist), sorted so callers never depend on file-system order. Hidden
    /// temporaries ([`is_temporary`]) are left out.
    fn list(&self, dir: &str) -> io::Result<Vec<String>>;
    /// A fresh name for a hidden temporary beside `path`, unique among
    /// every temporary of every broker sharing the volume
    /// ([`temporary_beside`]).
    fn temporary_name(&self, path: &str) -> io::Result<String>;
    /// Creates the file `path`, which must not exist
    /// (`ErrorKind::AlreadyExists` otherwise), holding `data`. Neither its
    /// content nor its name is durable yet ([`Volume::sync_file`],
    /// [`Volume::sync_dir`]). The parent directory must exist.
    fn write_new(&self, path: &str, data: &[u8]) -> io::Result<()>;
    /// Makes the content of the file `path` durable (`fsync`); its name is
    /// its directory's business.
    fn sync_file(&self, path: &str) -> io::Result<()>;
    /// Gives the file `from` the further name `to`, only if nothing of that
    /// name exists (`ErrorKind::AlreadyExists` otherwise, leaving it
    /// untouched): `link(2)`, atomic against every other creator of `to`,
    /// on another machine sharing the volume (NFS) too. Not durable until
    /// `to`'s directory is synced.
    fn link(&self, from: &str, to: &str) -> io::Result<()>;
    /// Renames file `from` to `to`, atomically replacing any file named
    /// `to`. Both must be in one existing directory's tree on this
    /// volume; `from` must exist (`ErrorKind::NotFound` otherwise).
    /// Handles opened on the replaced `to` keep reading the file they
    /// opened; handles opened on `from` keep the file too, though a caller
    /// should reopen it by its new name. Not durable until both
    /// directories are synced: a power loss before that may undo it.
    fn rename(&self, from: &str, to: &str) -> io::Result<()>;
    /// Removes one file; removing a missing file is not an error. Not
    /// durable until its directory is synced: a power loss before that
    /// may bring the file back.
    fn remove(&self, path: &str) -> io::Result<()>;
    /// Removes a directory and everything below it; a missing one is not
    /// an error. Not durable until its parent is synced.
    fn remove_dir_all(&self, dir: &str) -> io::Result<()>;
    /// Creates one directory, whose parent must exist. `Ok(false)` if it
    /// already existed. Not durable until its parent is synced.
    fn create_dir(&self, dir: &str) -> io::Result<bool>;
    /// Makes every entry directly under `dir` durable as it is now: what
    /// was created, renamed in or out, or removed there. A missing
    /// directory has nothing to sync and is not an error.
    fn sync_dir(&self, dir: &str) -> io::Result<()>;
    /// Opens (creating if `create`) an append-only file. Opening a missing
    /// file without `create` fails with `ErrorKind::NotFound`. A created
    /// file's directory entry is durable once the file's first `sync` (or
    /// `truncate`) returns: the volume syncs the directory then, because
    /// creating a segment must not wait for the disk, since it happens
    /// under the partition's append lane.
    fn open_segment(&self, path: &str, create: bool) -> io::Result<Arc<dyn SegmentFile>>;

    /// Replaces `path` atomically and durably: the content goes into a
    /// hidden temporary, synced, which is renamed over `path`, and the
    /// directory is synced. A power loss leaves the old content or the new,
    /// never a mix and never an empty file. The parent directory must exist.
    fn write_atomic(&self, path: &str, data: &[u8]) -> io::Result<()> {
        let temporary = self.temporary_name(path)?;
        let published =
            write_synced(self, &temporary, data).and_then(|()| self.rename(&temporary, path));
        if let Err(e) = published {
            // Best effort: a leftover temporary is hidden by `list` anyway.
            let _ = self.remove(&temporary);
            return Err(e);
        }
        sync_dir_of(self, path)
    }

    /// Creates `path` holding `data`, durably, only if nothing of that name
    /// exists; otherwise fails with `ErrorKind::AlreadyExists` and leaves
    /// the existing file untouched. Atomic against every other creator of
    /// the same name, in this process or on another machine sharing the
    /// volume (NFS included): of concurrent callers exactly one succeeds.
    /// The content appears whole or not at all: it is written and synced
    /// under a hidden temporary, then published by [`Volume::link`] (not by
    /// `rename`, which would replace). This is how an owner claims the next
    /// ownership epoch (`kaas_core::layout::*_epoch_file`). The parent
    /// directory must exist.
    fn create_exclusive(&self, path: &str, data: &[u8]) -> io::Result<()> {
        let temporary = self.temporary_name(path)?;
        if let Err(e) = write_synced(self, &temporary, data) {
            let _ = self.remove(&temporary);
            return Err(e);
        }
        let linked = self.link(&temporary, path);
        // The winner's name stays linked to the same file; the temporary
        // name goes either way (best effort: `list` hides leftovers).
        let _ = self.remove(&temporary);
        linked?;
        sync_dir_of(self, path)
    }

    /// Creates `dir` and its parents, durably: each directory created is
    /// synced into its parent before anything is created in it.
    fn create_dir_all(&self, dir: &str) -> io::Result<()> {
        let dir = dir.trim_end_matches('/');
        if dir.is_empty() || dir == "." {
            return Ok(());
        }
        let created = match self.create_dir(dir) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                self.create_dir_all(parent_dir(dir))?;
                self.create_dir(dir)?
            }
            other => other?,
        };
        if created {
            self.sync_dir(parent_dir(dir))?;
        }
        Ok(())
    }
}

/// The first steps of the composites: a new file whose content is durable
/// before any name but its temporary one points at it. Without the sync, a
/// power loss after the rename could leave the name on an empty file.
fn write_synced<V: Volume + ?Sized>(volume: &V, path: &str, data: &[u8]) -> io::Result<()> {
    volume.write_new(path, data)?;
    if planted(Bug::TemporaryNotSynced) {
        return Ok(());
    }
    volume.sync_file(path)
}

/// The last step of the composites: the name they published survives a
/// power loss only once its directory is synced.
fn sync_dir_of<V: Volume + ?Sized>(volume: &V, path: &str) -> io::Result<()> {
    if planted(Bug::DirectoryNotSynced) {
        return Ok(());
    }
    volume.sync_dir(parent_dir(path))
}

/// Makes durable the names of the files in `dir` that a broker has just
/// read back at startup or takeover and will rely on. A process killed
/// before the first sync of a file it created leaves that name in the
/// page cache only (a segment's name is synced by the first sync of the
/// handle that created it), and the next process opens the file as an
/// existing one, so none of its own syncs would ever make the name
/// durable: a power loss would then take the whole file, synced records
/// and all. One directory sync, once per opening, closes that.
pub fn sync_names_read_back<V: Volume + ?Sized>(volume: &V, dir: &str) -> io::Result<()> {
    if planted(Bug::ReadBackNamesNotSynced) {
        return Ok(());
    }
    volume.sync_dir(dir)
}

/// Names of hidden temporaries start with this: `write_atomic` and
/// `create_exclusive` write their content under such a name first, and
/// every `list` leaves them out, so no caller ever sees a half-made file
/// by name, even one a crash left behind.
pub const TEMPORARY_MARKER: &str = ".kaas-tmp-";

/// Whether a directory entry is a hidden temporary (see [`TEMPORARY_MARKER`]).
pub fn is_temporary(name: &str) -> bool {
    name.starts_with(TEMPORARY_MARKER)
}

/// A hidden temporary's path beside `path`: `tag` tells apart the volume
/// instances sharing the volume (brokers), `n` the temporaries of one.
pub fn temporary_beside(path: &str, tag: u64, n: u64) -> io::Result<String> {
    let (dir, name) = match path.rsplit_once('/') {
        Some((dir, name)) => (Some(dir), name),
        None => (None, path),
    };
    if name.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("volume path {path:?} has no file name"),
        ));
    }
    let temporary = format!("{TEMPORARY_MARKER}{name}-{tag:016x}-{n}");
    Ok(match dir {
        Some(dir) => format!("{dir}/{temporary}"),
        None => temporary,
    })
}

/// The directory holding `path` ("" for the root).
pub fn parent_dir(path: &str) -> &str {
    path.trim_end_matches('/')
        .rsplit_once('/')
        .map_or("", |(dir, _)| dir)
}
