//! An in-memory `Volume` for the state-file targets: the broker's real
//! recovery code reads fuzzed files through it. No crash or NFS semantics
//! (that is the simulator's job); just files, directories and segments,
//! with the path rules and results of the `Volume` contract
//! (`kaas_net::volume::contract`, run against it in tests/volume_contract.rs).

use bytes::Bytes;
use kaas_net::volume::{is_temporary, temporary_beside, SegmentFile, Volume};
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard};

#[derive(Default)]
pub struct MemVolume {
    inner: Mutex<Inner>,
    /// Numbers the hidden temporaries of the composite writes.
    temporaries: std::sync::atomic::AtomicU64,
}

#[derive(Default)]
struct Inner {
    files: BTreeMap<String, Arc<MemFile>>,
    dirs: BTreeSet<String>,
}

/// One file; whole-file writes replace its content.
#[derive(Default)]
pub struct MemFile {
    data: Mutex<Vec<u8>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn parent(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(dir, _)| dir)
}

fn invalid(path: &str, why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("volume path {path:?} {why}"),
    )
}

/// The canonical form of a volume path, refusing what `LocalVolume` refuses
/// (absolute paths, `..`): the broker's code must not pass here with a path
/// the real volume would reject.
fn normalize(path: &str) -> io::Result<String> {
    if path.starts_with('/') {
        return Err(invalid(path, "must be relative"));
    }
    let mut parts = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => return Err(invalid(path, "must stay below the root")),
            p => parts.push(p),
        }
    }
    Ok(parts.join("/"))
}

/// Children of a directory are found by this prefix of their paths.
fn child_prefix(dir: &str) -> String {
    if dir.is_empty() {
        String::new()
    } else {
        format!("{dir}/")
    }
}

impl Inner {
    fn require_free(&self, path: &str) -> io::Result<()> {
        if path.is_empty() || self.files.contains_key(path) || self.dirs.contains(path) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{path:?} already exists"),
            ));
        }
        Ok(())
    }

    fn require_parent(&self, path: &str) -> io::Result<()> {
        let dir = parent(path);
        if dir.is_empty() || self.dirs.contains(dir) {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{path}: no directory {dir:?}"),
            ))
        }
    }
}

impl MemVolume {
    pub fn new() -> MemVolume {
        MemVolume::default()
    }

    /// Puts a file (and its parent directories) in place.
    pub fn put(&self, path: &str, data: &[u8]) {
        let mut inner = lock(&self.inner);
        add_dirs(&mut inner.dirs, parent(path));
        inner.files.insert(
            path.to_string(),
            Arc::new(MemFile {
                data: Mutex::new(data.to_vec()),
            }),
        );
    }

    /// Every file and its content, by path.
    pub fn files(&self) -> BTreeMap<String, Vec<u8>> {
        lock(&self.inner)
            .files
            .iter()
            .map(|(k, f)| (k.clone(), lock(&f.data).clone()))
            .collect()
    }
}

/// The keys starting with `prefix`, found by a range query (the broker
/// creates thousands of partitions; a scan per call would be quadratic).
fn under<'a>(keys: &'a impl Ranged, prefix: &'a str) -> impl Iterator<Item = &'a String> + 'a {
    keys.from(prefix).take_while(move |k| k.starts_with(prefix))
}

/// Sorted string keys that can be iterated from a starting point.
trait Ranged {
    fn from<'a>(&'a self, start: &str) -> Box<dyn Iterator<Item = &'a String> + 'a>;
}

impl<V> Ranged for BTreeMap<String, V> {
    fn from<'a>(&'a self, start: &str) -> Box<dyn Iterator<Item = &'a String> + 'a> {
        Box::new(
            self.range::<str, _>((Bound::Included(start), Bound::Unbounded))
                .map(|(k, _)| k),
        )
    }
}

impl Ranged for BTreeSet<String> {
    fn from<'a>(&'a self, start: &str) -> Box<dyn Iterator<Item = &'a String> + 'a> {
        Box::new(self.range::<str, _>((Bound::Included(start), Bound::Unbounded)))
    }
}

fn add_dirs(dirs: &mut BTreeSet<String>, dir: &str) {
    let mut d = dir;
    while !d.is_empty() {
        dirs.insert(d.to_string());
        d = parent(d);
    }
}

impl Volume for MemVolume {
    fn read(&self, path: &str) -> io::Result<Option<Bytes>> {
        let path = normalize(path)?;
        let file = lock(&self.inner).files.get(&path).cloned();
        Ok(file.map(|f| Bytes::from(lock(&f.data).clone())))
    }

    fn temporary_name(&self, path: &str) -> io::Result<String> {
        let n = self
            .temporaries
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        temporary_beside(path, 0, n)
    }

    /// A new file object: handles opened on a name it later replaces
    /// keep reading what they opened.
    fn write_new(&self, path: &str, data: &[u8]) -> io::Result<()> {
        let path = normalize(path)?;
        let mut inner = lock(&self.inner);
        inner.require_parent(&path)?;
        inner.require_free(&path)?;
        inner.files.insert(
            path,
            Arc::new(MemFile {
                data: Mutex::new(data.to_vec()),
            }),
        );
        Ok(())
    }

    /// Nothing to make durable: this volume has no crashes. The file
    /// must exist, as for a real fsync.
    fn sync_file(&self, path: &str) -> io::Result<()> {
        let path = normalize(path)?;
        if lock(&self.inner).files.contains_key(&path) {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{path} does not exist"),
            ))
        }
    }

    fn link(&self, from: &str, to: &str) -> io::Result<()> {
        let (from, to) = (normalize(from)?, normalize(to)?);
        let mut inner = lock(&self.inner);
        let file = inner.files.get(&from).cloned().ok_or_else(|| {
            io::Error::new(io::ErrorKind::NotFound, format!("{from} does not exist"))
        })?;
        inner.require_parent(&to)?;
        inner.require_free(&to)?;
        inner.files.insert(to, file);
        Ok(())
    }

    fn list(&self, dir: &str) -> io::Result<Vec<String>> {
        let dir = normalize(dir)?;
        let inner = lock(&self.inner);
        let prefix = child_prefix(&dir);
        let children = under(&inner.files, &prefix)
            .chain(under(&inner.dirs, &prefix))
            .filter_map(|p| p.strip_prefix(&prefix))
            .filter(|rest| !rest.is_empty() && !rest.contains('/') && !is_temporary(rest))
            .map(str::to_string)
            .collect::<BTreeSet<_>>();
        Ok(children.into_iter().collect())
    }

    fn create_dir(&self, dir: &str) -> io::Result<bool> {
        let dir = normalize(dir)?;
        let mut inner = lock(&self.inner);
        if inner.dirs.contains(&dir) || dir.is_empty() {
            return Ok(false);
        }
        inner.require_parent(&dir)?;
        inner.require_free(&dir)?;
        inner.dirs.insert(dir);
        Ok(true)
    }

    /// Nothing to do: this volume has no crashes.
    fn sync_dir(&self, dir: &str) -> io::Result<()> {
        normalize(dir).map(drop)
    }

    /// Moves the file object: handles opened on `from` keep it, and those
    /// on a replaced `to` keep the old one.
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        let (from, to) = (normalize(from)?, normalize(to)?);
        let mut inner = lock(&self.inner);
        if inner.dirs.contains(&from) || from.is_empty() {
            return Err(io::Error::other(format!("{from:?} is a directory")));
        }
        if !inner.files.contains_key(&from) {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{from} does not exist"),
            ));
        }
        inner.require_parent(&to)?;
        if to.is_empty() || inner.dirs.contains(&to) {
            return Err(io::Error::other(format!("{to:?} is a directory")));
        }
        if let Some(file) = inner.files.remove(&from) {
            inner.files.insert(to, file);
        }
        Ok(())
    }

    fn remove(&self, path: &str) -> io::Result<()> {
        let path = normalize(path)?;
        lock(&self.inner).files.remove(&path);
        Ok(())
    }

    fn remove_dir_all(&self, dir: &str) -> io::Result<()> {
        let dir = normalize(dir)?;
        if dir.is_empty() {
            return Err(invalid(&dir, "is the root; refusing to remove it"));
        }
        let prefix = child_prefix(&dir);
        let mut inner = lock(&self.inner);
        let files: Vec<String> = under(&inner.files, &prefix).cloned().collect();
        for f in files {
            inner.files.remove(&f);
        }
        let dirs: Vec<String> = under(&inner.dirs, &prefix).cloned().collect();
        for d in dirs {
            inner.dirs.remove(&d);
        }
        inner.dirs.remove(&dir);
        Ok(())
    }

    fn open_segment(&self, path: &str, create: bool) -> io::Result<Arc<dyn SegmentFile>> {
        let path = normalize(path)?;
        let mut inner = lock(&self.inner);
        if let Some(f) = inner.files.get(&path) {
            return Ok(f.clone());
        }
        if !create {
            return Err(io::Error::new(io::ErrorKind::NotFound, path));
        }
        inner.require_parent(&path)?;
        let f = Arc::new(MemFile::default());
        inner.files.insert(path, f.clone());
        Ok(f)
    }
}

impl SegmentFile for MemFile {
    fn len(&self) -> u64 {
        lock(&self.data).len() as u64
    }

    fn append(&self, data: &[u8]) -> io::Result<u64> {
        let mut d = lock(&self.data);
        let pos = d.len() as u64;
        d.extend_from_slice(data);
        Ok(pos)
    }

    fn read_at(&self, pos: u64, len: usize) -> io::Result<Bytes> {
        let d = lock(&self.data);
        let start = usize::try_from(pos).unwrap_or(usize::MAX).min(d.len());
        let end = start.saturating_add(len).min(d.len());
        Ok(Bytes::copy_from_slice(&d[start..end]))
    }

    fn sync(&self) -> io::Result<()> {
        Ok(())
    }

    fn free_tail(&self, len: u64) -> io::Result<()> {
        self.truncate(len)
    }

    fn truncate(&self, len: u64) -> io::Result<()> {
        let mut d = lock(&self.data);
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        if len < d.len() {
            d.truncate(len);
        }
        Ok(())
    }
}
