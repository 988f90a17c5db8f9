//! `Volume` on the OS file system, rooted at one directory.

use bytes::Bytes;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::{SegmentFile, Volume};

/// Marks in-flight temporaries of `write_atomic` and `create_exclusive`;
/// `list` hides them so a crash mid-write never shows callers a
/// half-written name.
const TMP_MARKER: &str = ".kaas-tmp-";

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
}

impl LocalVolume {
    /// A volume rooted at `root`, created if missing.
    pub fn new(root: impl Into<PathBuf>) -> io::Result<Self> {
        let root = root.into();
        fs::create_dir_all(&root)?;
        Ok(LocalVolume {
            root,
            tmp_tag: crate::clock::random_uuid().as_u128() as u64,
            tmp_counter: AtomicU64::new(0),
        })
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

    /// A fresh temporary name beside `target` (hidden from `list`), and the
    /// directory both are in.
    fn temporary_for<'a>(&self, target: &'a Path) -> io::Result<(PathBuf, &'a Path)> {
        let dir = parent_of(target)?;
        let name = target
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
        let n = self.tmp_counter.fetch_add(1, Ordering::Relaxed);
        let tmp = dir.join(format!("{TMP_MARKER}{name}-{:016x}-{n}", self.tmp_tag));
        Ok((tmp, dir))
    }
}

/// Writes a new file `path` (which must not exist) and fsyncs it.
fn write_new_durably(path: &Path, data: &[u8]) -> io::Result<()> {
    let mut file = OpenOptions::new().write(true).create_new(true).open(path)?;
    file.write_all(data)?;
    file.sync_all()
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

    fn write_atomic(&self, path: &str, data: &[u8]) -> io::Result<()> {
        let target = self.resolve(path)?;
        let (tmp, dir) = self.temporary_for(&target)?;
        let written = write_new_durably(&tmp, data).and_then(|()| fs::rename(&tmp, &target));
        if let Err(e) = written {
            // Best effort: a leftover temporary is hidden by `list` anyway.
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
        sync_dir(dir)
    }

    /// The whole content goes into a hidden temporary first, fsynced, and
    /// is then published under `path` by `link(2)`, which fails with EEXIST
    /// if the name exists, atomically on the NFS server too (unlike
    /// `O_EXCL` on old NFS clients, and unlike `rename`, which would
    /// replace). A reader therefore sees no file or the whole file.
    fn create_exclusive(&self, path: &str, data: &[u8]) -> io::Result<()> {
        let target = self.resolve(path)?;
        let (tmp, dir) = self.temporary_for(&target)?;
        if let Err(e) = write_new_durably(&tmp, data) {
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
        let linked = match fs::hard_link(&tmp, &target) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                // Over NFS a LINK whose reply was lost is retried, and the
                // retry finds the name taken by our own first attempt. The
                // temporary's link count tells: 2 means the name is ours
                // (the recipe of open(2)'s O_EXCL notes).
                match fs::metadata(&tmp) {
                    Ok(meta) if meta.nlink() == 2 => Ok(()),
                    _ => Err(e),
                }
            }
            other => other,
        };
        // The winner's name stays linked to the same inode; the temporary
        // name goes either way (best effort: `list` hides leftovers).
        let _ = fs::remove_file(&tmp);
        linked?;
        sync_dir(dir)
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
                if !name.starts_with(TMP_MARKER) {
                    names.push(name);
                }
            }
        }
        names.sort();
        Ok(names)
    }

    fn create_dir_all(&self, dir: &str) -> io::Result<()> {
        let path = self.resolve(dir)?;
        if path.is_dir() {
            return Ok(());
        }
        fs::create_dir_all(&path)?;
        // The new entry must survive a crash before files in it are relied on.
        sync_dir(parent_of(&path)?)
    }

    fn remove(&self, path: &str) -> io::Result<()> {
        let path = self.resolve(path)?;
        ignore_not_found(fs::remove_file(&path))?;
        ignore_not_found(sync_dir(parent_of(&path)?))
    }

    fn remove_dir_all(&self, dir: &str) -> io::Result<()> {
        let path = self.resolve(dir)?;
        ignore_not_found(fs::remove_dir_all(&path))?;
        ignore_not_found(sync_dir(parent_of(&path)?))
    }

    fn open_segment(&self, path: &str, create: bool) -> io::Result<Arc<dyn SegmentFile>> {
        let path = self.resolve(path)?;
        let mut options = OpenOptions::new();
        options.read(true).write(true);
        let (file, created) = if create {
            match options.clone().create_new(true).open(&path) {
                Ok(file) => (file, true),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => (options.open(&path)?, false),
                Err(e) => return Err(e),
            }
        } else {
            (options.open(&path)?, false)
        };
        if created {
            sync_dir(parent_of(&path)?)?;
        }
        let len = file.metadata()?.len();
        Ok(Arc::new(LocalSegment {
            file,
            len: AtomicU64::new(len),
            writer: Mutex::new(()),
        }))
    }
}

/// A segment (or index) file. Writes are positional at the tracked length,
/// so a failed partial append is simply overwritten by the next one and
/// readers never see past the last complete append.
struct LocalSegment {
    file: File,
    /// Bytes completely appended; published after each write.
    len: AtomicU64,
    /// Serialises appends and truncation; readers do not take it.
    writer: Mutex<()>,
}

impl LocalSegment {
    fn lock_writer(&self) -> std::sync::MutexGuard<'_, ()> {
        // The guarded state is `()`: a panic elsewhere cannot leave it
        // inconsistent, so a poisoned lock is safe to reuse.
        self.writer.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl SegmentFile for LocalSegment {
    fn len(&self) -> u64 {
        self.len.load(Ordering::Acquire)
    }

    fn append(&self, data: &[u8]) -> io::Result<u64> {
        let _guard = self.lock_writer();
        let pos = self.len.load(Ordering::Acquire);
        self.file.write_all_at(data, pos)?;
        self.len.store(pos + data.len() as u64, Ordering::Release);
        Ok(pos)
    }

    fn read_at(&self, pos: u64, len: usize) -> io::Result<Bytes> {
        let available = self.len().saturating_sub(pos);
        // Bound the allocation by what exists, not by what was asked for.
        let want = usize::try_from(available).map_or(len, |a| a.min(len));
        let mut buf = vec![0u8; want];
        let mut filled = 0;
        while filled < want {
            match self.file.read_at(&mut buf[filled..], pos + filled as u64) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        buf.truncate(filled);
        Ok(Bytes::from(buf))
    }

    fn sync(&self) -> io::Result<()> {
        // fdatasync covers the file size too, which is all an append changes.
        self.file.sync_data()
    }

    fn truncate(&self, len: u64) -> io::Result<()> {
        let _guard = self.lock_writer();
        self.file.set_len(len)?;
        self.file.sync_all()?;
        self.len.store(len, Ordering::Release);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::volume::contract::{self, Fresh};

    fn volume() -> (tempfile::TempDir, LocalVolume) {
        let dir = tempfile::tempdir().unwrap();
        let volume = LocalVolume::new(dir.path()).unwrap();
        (dir, volume)
    }

    #[test]
    fn meets_the_volume_contract() {
        contract::run_all(&|| {
            let (dir, volume) = volume();
            Fresh::keeping(Arc::new(volume), dir)
        });
    }

    #[test]
    fn leftover_temporaries_of_a_crash_are_not_listed() {
        let (dir, v) = volume();
        v.create_dir_all("d").unwrap();
        v.write_atomic("d/a", b"").unwrap();
        fs::write(dir.path().join("d").join(format!("{TMP_MARKER}a-0-0")), b"").unwrap();
        assert_eq!(v.list("d").unwrap(), vec!["a"]);
    }

    #[test]
    fn create_exclusive_leaves_no_temporary_on_disk() {
        let (dir, v) = volume();
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
