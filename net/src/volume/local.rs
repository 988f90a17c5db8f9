//! `Volume` on the OS file system, rooted at one directory.

use bytes::Bytes;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::{SegmentFile, Volume};

/// Marks in-flight `write_atomic` temporaries; `list` hides them so a crash
/// mid-write never shows callers a half-written name.
const TMP_MARKER: &str = ".kaas-tmp-";

/// The volume on a local (or NFS-mounted) directory.
pub struct LocalVolume {
    root: PathBuf,
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
        let dir = parent_of(&target)?;
        let name = target
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
        let n = self.tmp_counter.fetch_add(1, Ordering::Relaxed);
        let tmp = dir.join(format!("{TMP_MARKER}{name}-{}-{n}", std::process::id()));
        let written = (|| {
            let mut file = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
            file.write_all(data)?;
            file.sync_all()?;
            fs::rename(&tmp, &target)
        })();
        if let Err(e) = written {
            // Best effort: a leftover temporary is hidden by `list` anyway.
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
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

    fn volume() -> (tempfile::TempDir, LocalVolume) {
        let dir = tempfile::tempdir().unwrap();
        let volume = LocalVolume::new(dir.path()).unwrap();
        (dir, volume)
    }

    #[test]
    fn write_atomic_replaces_and_read_returns_content() {
        let (_dir, v) = volume();
        v.create_dir_all("a/b").unwrap();
        assert_eq!(v.read("a/b/f.json").unwrap(), None);
        v.write_atomic("a/b/f.json", b"one").unwrap();
        v.write_atomic("a/b/f.json", b"two").unwrap();
        assert_eq!(v.read("a/b/f.json").unwrap().unwrap(), &b"two"[..]);
        assert_eq!(v.list("a/b").unwrap(), vec!["f.json".to_string()]);
    }

    #[test]
    fn list_is_sorted_hides_temporaries_and_tolerates_missing_dirs() {
        let (dir, v) = volume();
        assert!(v.list("nope").unwrap().is_empty());
        v.create_dir_all("d").unwrap();
        for name in ["c", "a", "b"] {
            v.write_atomic(&format!("d/{name}"), b"").unwrap();
        }
        fs::write(dir.path().join("d").join(format!("{TMP_MARKER}x")), b"").unwrap();
        assert_eq!(v.list("d").unwrap(), vec!["a", "b", "c"]);
    }

    #[test]
    fn paths_cannot_escape_the_root() {
        let (_dir, v) = volume();
        assert!(v.read("../etc/passwd").is_err());
        assert!(v.read("/etc/passwd").is_err());
        assert!(v.write_atomic("a/../../x", b"").is_err());
    }

    #[test]
    fn remove_is_idempotent() {
        let (_dir, v) = volume();
        v.create_dir_all("t/p").unwrap();
        v.write_atomic("t/p/f", b"x").unwrap();
        v.remove("t/p/f").unwrap();
        v.remove("t/p/f").unwrap();
        v.remove_dir_all("t").unwrap();
        v.remove_dir_all("t").unwrap();
        assert!(v.list("t").unwrap().is_empty());
    }

    #[test]
    fn segment_appends_reads_truncates_and_reopens() {
        let (_dir, v) = volume();
        v.create_dir_all("s").unwrap();
        assert!(v.open_segment("s/0.log", false).is_err());
        let seg = v.open_segment("s/0.log", true).unwrap();
        assert_eq!(seg.append(b"hello").unwrap(), 0);
        assert_eq!(seg.append(b" world").unwrap(), 5);
        assert_eq!(seg.len(), 11);
        seg.sync().unwrap();
        assert_eq!(seg.read_at(6, 100).unwrap(), &b"world"[..]);
        assert_eq!(seg.read_at(50, 10).unwrap(), &b""[..]);
        seg.truncate(5).unwrap();
        assert_eq!(seg.len(), 5);
        assert_eq!(seg.append(b"!").unwrap(), 5);
        drop(seg);
        let seg = v.open_segment("s/0.log", true).unwrap();
        assert_eq!(seg.read_at(0, usize::MAX).unwrap(), &b"hello!"[..]);
    }
}
