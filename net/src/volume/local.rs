//! `Volume` on the OS file system, rooted at one directory.
//!
//! Segment handles do not own a file descriptor each: they share a bounded
//! cache of them (see `fd_cache`), so the number of partitions is not
//! limited by the process's open-file limit.

use bytes::Bytes;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::fd_cache::{FdCache, LocalSegment};
use super::{is_temporary, temporary_beside, SegmentFile, Volume};

/// Bounds of the default open-file cache size: at least enough for a small
/// broker to run without reopening, at most what any real limit allows.
const MIN_DEFAULT_OPEN_FILES: usize = 64;
const MAX_DEFAULT_OPEN_FILES: usize = 1 << 20;

/// The default number of segment files a `LocalVolume` keeps open: half the
/// process's soft `RLIMIT_NOFILE` as it is when the volume is created
/// (the other half is left for sockets, state files being written and
/// everything else), at least 64. Raising the limit before starting the
/// broker (`ulimit -n`) raises the cache with it.
pub fn default_open_file_limit() -> usize {
    match rlimit::getrlimit(rlimit::Resource::NOFILE) {
        Ok((soft, _hard)) => usize::try_from(soft / 2)
            .unwrap_or(MAX_DEFAULT_OPEN_FILES)
            .clamp(MIN_DEFAULT_OPEN_FILES, MAX_DEFAULT_OPEN_FILES),
        // No limit to read (not expected on Unix): the common default
        // soft limit is 1024.
        Err(_) => 512,
    }
}

/// The volume on a local (or NFS-mounted) directory.
pub struct LocalVolume {
    root: PathBuf,
    /// Random per volume instance: makes temporary names unique across
    /// brokers sharing the volume (process ids are not: every broker in a
    /// container may be pid 1).
    tmp_tag: u64,
    /// Makes temporary names unique when two tasks replace files in the
    /// same directory at once.
    tmp_counter: AtomicU64,
    /// The descriptors of every segment handle opened through this volume.
    files: Arc<FdCache>,
}

impl LocalVolume {
    /// A volume rooted at `root`, created if missing, keeping at most
    /// [`default_open_file_limit`] segment files open.
    pub fn new(root: impl Into<PathBuf>) -> io::Result<Self> {
        Self::with_open_file_limit(root, default_open_file_limit())
    }

    /// A volume that keeps at most `limit` (at least 1) idle segment files
    /// open; handles beyond that reopen their file when next used. Files
    /// with unsynced appends, and files the volume removed while a handle
    /// had them open, are never closed, so they may take the count past
    /// `limit` (see `fd_cache`).
    pub fn with_open_file_limit(root: impl Into<PathBuf>, limit: usize) -> io::Result<Self> {
        let root = root.into();
        fs::create_dir_all(&root)?;
        Ok(LocalVolume {
            root,
            tmp_tag: crate::entropy::random_uuid().as_u128() as u64,
            tmp_counter: AtomicU64::new(0),
            files: FdCache::new(limit),
        })
    }

    /// How many idle segment files this volume keeps open at most.
    pub fn open_file_limit(&self) -> usize {
        self.files.capacity()
    }

    /// Segment files open right now (for tests and diagnostics).
    pub fn open_files(&self) -> usize {
        self.files.open_files()
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Resolves a volume path, refusing anything that could escape the root
    /// (absolute paths, `..`), since parts of paths come from topic names.
    fn resolve(&self, path: &str) -> io::Result<PathBuf> {
        let relative = Path::new(path);
        for component in relative.components() {
            match component {
                Component::Normal(_) | Component::CurDir => {}
                _ => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("volume path {path:?} must be relative and stay below the root"),
                    ))
                }
            }
        }
        Ok(self.root.join(relative))
    }
}

/// Makes directory entries (creates, renames, removals) durable.
fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

fn parent_of(path: &Path) -> io::Result<&Path> {
    path.parent().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} has no parent directory", path.display()),
        )
    })
}

fn ignore_not_found(result: io::Result<()>) -> io::Result<()> {
    match result {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

impl Volume for LocalVolume {
    fn read(&self, path: &str) -> io::Result<Option<Bytes>> {
        match fs::read(self.resolve(path)?) {
            Ok(data) => Ok(Some(Bytes::from(data))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn temporary_name(&self, path: &str) -> io::Result<String> {
        let n = self.tmp_counter.fetch_add(1, Ordering::Relaxed);
        temporary_beside(path, self.tmp_tag, n)
    }

    fn write_new(&self, path: &str, data: &[u8]) -> io::Result<()> {
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(self.resolve(path)?)?
            .write_all(data)
    }

    /// `fsync` through a descriptor of its own: Linux writes back a file's
    /// dirty pages whichever descriptor asks.
    fn sync_file(&self, path: &str) -> io::Result<()> {
        File::open(self.resolve(path)?)?.sync_all()
    }

    /// `link(2)` fails with EEXIST if the name exists, atomically on the
    /// NFS server too (unlike `O_EXCL` on old NFS clients, and unlike
    /// `rename`, which would replace).
    fn link(&self, from: &str, to: &str) -> io::Result<()> {
        let source = self.resolve(from)?;
        match fs::hard_link(&source, self.resolve(to)?) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                // Over NFS a LINK whose reply was lost is retried, and the
                // retry finds the name taken by our own first attempt. The
                // source's link count tells: 2 means the name is ours (the
                // recipe of open(2)'s O_EXCL notes). Sources are always
                // fresh temporaries, so no other name shares them.
                match fs::metadata(&source) {
                    Ok(meta) if meta.nlink() == 2 => Ok(()),
                    _ => Err(e),
                }
            }
            other => other,
        }
    }

    fn list(&self, dir: &str) -> io::Result<Vec<String>> {
        let entries = match fs::read_dir(self.resolve(dir)?) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut names = Vec::new();
        for entry in entries {
            // Names that are not UTF-8 were not written by kaas; skip them.
            if let Ok(name) = entry?.file_name().into_string() {
                if !is_temporary(&name) {
                    names.push(name);
                }
            }
        }
        names.sort();
        Ok(names)
    }

    fn create_dir(&self, dir: &str) -> io::Result<bool> {
        let path = self.resolve(dir)?;
        match fs::create_dir(&path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && path.is_dir() => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn sync_dir(&self, dir: &str) -> io::Result<()> {
        ignore_not_found(sync_dir(&self.resolve(dir)?))
    }

    /// `rename(2)`. The fd cache is told about both names, as
    /// for `write_atomic` and `remove`: open descriptors on either are
    /// pinned, so their handles keep the inode they opened (the replaced
    /// `to`, or the moved `from`), and handles whose descriptor the cache
    /// had closed are marked unable to reach their file rather than reopen
    /// whatever has the name now.
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        let source = self.resolve(from)?;
        let target = self.resolve(to)?;
        // Files only: the cache is told about single names, not trees.
        if fs::symlink_metadata(&source)?.is_dir() {
            return Err(io::Error::other(format!("{from:?} is a directory")));
        }
        if source == target {
            // rename(2) of a name onto itself changes nothing; telling the
            // cache would strand handles on a file that is still there.
            return Ok(());
        }
        self.files.unlinking(&source, false);
        self.files.unlinking(&target, false);
        fs::rename(&source, &target)?;
        self.files.unlinked(&source, false);
        self.files.unlinked(&target, false);
        Ok(())
    }

    fn remove(&self, path: &str) -> io::Result<()> {
        let path = self.resolve(path)?;
        self.files.unlinking(&path, false);
        ignore_not_found(fs::remove_file(&path))?;
        self.files.unlinked(&path, false);
        Ok(())
    }

    fn remove_dir_all(&self, dir: &str) -> io::Result<()> {
        let path = self.resolve(dir)?;
        if path.components().eq(self.root.components()) {
            // "" or "." would take every topic and cluster file with it.
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "refusing to remove the volume root",
            ));
        }
        self.files.unlinking(&path, true);
        let removed = ignore_not_found(fs::remove_dir_all(&path));
        // Even a partial removal may have unlinked some files.
        self.files.unlinked(&path, true);
        removed
    }

    fn open_segment(&self, path: &str, create: bool) -> io::Result<Arc<dyn SegmentFile>> {
        let path = self.resolve(path)?;
        let mut options = OpenOptions::new();
        options.read(true).write(true);
        let open = |options: &OpenOptions| self.files.open_with_relief(|| options.open(&path));
        let (file, created) = if create {
            match open(options.clone().create_new(true)) {
                Ok(file) => (file, true),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => (open(&options)?, false),
                Err(e) => return Err(e),
            }
        } else {
            (open(&options)?, false)
        };
        let dir = parent_of(&path)?.to_path_buf();
        let segment = self.files.register(path, file)?;
        if created {
            // The new name becomes durable with the file's first fsync, not
            // here: a segment is created under the partition's append lane,
            // and no fsync may run there (the flusher's runs outside it).
            return Ok(Arc::new(NewSegment {
                inner: segment,
                dir,
                entry_durable: std::sync::atomic::AtomicBool::new(false),
            }));
        }
        Ok(Arc::new(segment))
    }
}

/// A segment file this volume created: its first successful `sync` also
/// fsyncs the directory, so the name is durable exactly when the data is.
struct NewSegment {
    inner: LocalSegment,
    dir: PathBuf,
    entry_durable: std::sync::atomic::AtomicBool,
}

impl SegmentFile for NewSegment {
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
        self.inner.sync()?;
        if !self
            .entry_durable
            .load(std::sync::atomic::Ordering::Acquire)
        {
            // A directory removed since (its topic was deleted) has no entry
            // left to make durable.
            ignore_not_found(sync_dir(&self.dir))?;
            self.entry_durable
                .store(true, std::sync::atomic::Ordering::Release);
        }
        Ok(())
    }

    fn truncate(&self, len: u64) -> io::Result<()> {
        self.inner.truncate(len)?;
        self.sync()
    }

    fn free_tail(&self, len: u64) -> io::Result<()> {
        self.inner.free_tail(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::volume::contract::{self, Fresh};

    fn volume_with_limit(limit: usize) -> (tempfile::TempDir, LocalVolume) {
        let dir = tempfile::tempdir().unwrap();
        let volume = LocalVolume::with_open_file_limit(dir.path(), limit).unwrap();
        (dir, volume)
    }

    fn fresh_with_limit(limit: usize) -> Fresh {
        let (dir, volume) = volume_with_limit(limit);
        Fresh::keeping(Arc::new(volume), dir)
    }

    #[test]
    fn meets_the_volume_contract() {
        contract::run_all(&|| fresh_with_limit(default_open_file_limit()));
    }

    /// With room for one idle descriptor, handles keep losing theirs and
    /// reopening: no caller may be able to tell.
    #[test]
    fn meets_the_volume_contract_with_one_open_file() {
        contract::run_all(&|| fresh_with_limit(1));
    }

    #[test]
    fn leftover_temporaries_of_a_crash_are_not_listed() {
        let (dir, v) = volume_with_limit(8);
        v.create_dir_all("d").unwrap();
        v.write_atomic("d/a", b"").unwrap();
        fs::write(
            dir.path()
                .join("d")
                .join(format!("{}a-0-0", crate::volume::TEMPORARY_MARKER)),
            b"",
        )
        .unwrap();
        assert_eq!(v.list("d").unwrap(), vec!["a"]);
    }

    #[test]
    fn create_exclusive_leaves_no_temporary_on_disk() {
        let (dir, v) = volume_with_limit(8);
        v.create_dir_all("e").unwrap();
        v.create_exclusive("e/1", b"won").unwrap();
        let lost = v.create_exclusive("e/1", b"lost").unwrap_err();
        assert_eq!(lost.kind(), io::ErrorKind::AlreadyExists);
        let on_disk: Vec<_> = fs::read_dir(dir.path().join("e"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(on_disk, ["1"], "not even hidden ones");
        let meta = fs::metadata(dir.path().join("e/1")).unwrap();
        assert_eq!(meta.nlink(), 1, "the temporary link is gone");
    }
}
