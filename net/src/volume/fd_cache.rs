//! `LocalVolume`'s segment handles and the bounded cache of their file
//! descriptors.
//!
//! Every partition keeps its active segment open, and every sealed segment
//! and its index stay open for fetches. With one descriptor per handle,
//! some ten thousand partitions exhaust the default descriptor limit and
//! topic creation fails with "Too many open files". So a handle
//! (`LocalSegment`) is a path, an identity and a tracked length; its
//! descriptor lives in this cache, opened on demand and closed again when
//! more than `capacity` are open, least recently used first.
//!
//! The rules, and why:
//!
//! - **The tracked length is authoritative.** Appends write at it and
//!   reads clamp to it, as before; a reopen never re-reads the size, so a
//!   closed-and-reopened descriptor changes nothing a caller can see.
//! - **A reopen is `O_RDWR` without create, of the same file.** The handle
//!   remembers the file's identity (device, inode and, where the file
//!   system reports one, birth time) from when it was opened, and a reopen
//!   must find the same identity at the path; otherwise the operation
//!   fails with [`StaleHandle`] (kind `NotFound`) instead of reading or
//!   writing some other file that now has the name.
//! - **Dirty descriptors are pinned.** Linux reports a writeback error only
//!   to descriptors open when it happened; closing one that still has
//!   appended-but-not-fsynced bytes could lose the fsync error that must
//!   stop the partition. So a handle counts its appends, records how many
//!   its last successful fsync covered, and is never evicted while the two
//!   differ. Only clean descriptors are closed. (A failed fsync leaves the
//!   handle dirty, hence pinned, for the rest of its life; the log stops
//!   using such a file anyway.)
//! - **Replaced and removed files keep reading the old inode** (the log
//!   relies on it: a sealed segment's index is replaced and reopened;
//!   retention removes files a fetch may still read). The choice: when the
//!   volume itself unlinks or replaces a path (`remove`, `remove_dir_all`,
//!   `write_atomic`, and both names of a `rename`), every handle on that
//!   path whose descriptor is open at that moment is pinned, so it keeps
//!   the old inode until the handle is dropped, exactly as without a
//!   cache. A handle whose descriptor had
//!   already been closed is marked unlinked, and its next operation fails
//!   with [`StaleHandle`]. We do not reopen closed descriptors to pin them:
//!   deleting a topic unlinks every partition of it while its handles are
//!   still alive, and reopening them all at once would hit the very limit
//!   this cache exists to respect. Pinning only what is open never raises
//!   the number of open descriptors. A file changed behind the volume's
//!   back (an operator, another broker on the same NFS volume) is caught by
//!   the identity check on reopen.
//! - **The limit is a target for clean descriptors.** Pinned ones (dirty,
//!   or holding an unlinked inode) are never closed, so the count can pass
//!   `capacity` by the number of partitions with unsynced appends (the
//!   flusher syncs them promptly) plus handles to unlinked files still in
//!   use. If opening still fails with EMFILE/ENFILE (the process holds
//!   other descriptors: sockets), every clean descriptor is closed and the
//!   open is tried once more.
//!
//! Descriptors are closed outside the cache's lock (a close can flush on
//! NFS), and an operation in flight keeps its descriptor alive through an
//! `Arc` even if the cache evicts it meanwhile.

use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use super::SegmentFile;

/// "Too many open files" for the process and for the system (Linux and the
/// BSDs agree on both numbers).
const EMFILE: i32 = 24;
const ENFILE: i32 = 23;

/// A segment handle's file is no longer the one it opened, and its
/// descriptor had been closed by the cache, so it cannot be reached.
#[derive(Debug)]
pub struct StaleHandle {
    pub path: PathBuf,
    pub reason: &'static str,
}

impl std::fmt::Display for StaleHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {}, and the open-file cache had closed this handle's descriptor",
            self.path.display(),
            self.reason
        )
    }
}

impl std::error::Error for StaleHandle {}

fn stale(path: &Path, reason: &'static str) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        StaleHandle {
            path: path.to_path_buf(),
            reason,
        },
    )
}

/// What makes a file the same file across a close and a reopen.
#[derive(Debug, Clone, Copy)]
struct Identity {
    dev: u64,
    ino: u64,
    /// Birth time where the file system has one (statx): tells apart a new
    /// file that was given a freed inode number.
    born: Option<SystemTime>,
}

impl Identity {
    fn of(meta: &Metadata) -> Identity {
        Identity {
            dev: meta.dev(),
            ino: meta.ino(),
            born: meta.created().ok(),
        }
    }

    fn same_file(&self, other: &Identity) -> bool {
        self.dev == other.dev
            && self.ino == other.ino
            && match (self.born, other.born) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            }
    }
}

struct Slot {
    path: PathBuf,
    identity: Identity,
    fd: Option<Arc<File>>,
    /// Key in `CacheState::lru` while the slot is evictable.
    lru_tick: Option<u64>,
    /// Appends (and truncations) started through this handle.
    writes: u64,
    /// `writes` as of the last successful fsync.
    synced: u64,
    /// The volume unlinked the path while the descriptor was open: it is
    /// the only way to the file now, so it stays open.
    holds_unlinked: bool,
    /// The volume unlinked the path while the descriptor was closed: the
    /// file is unreachable.
    unlinked: bool,
}

impl Slot {
    fn dirty(&self) -> bool {
        self.writes != self.synced
    }

    fn evictable(&self) -> bool {
        self.fd.is_some() && !self.dirty() && !self.holds_unlinked
    }
}

struct CacheState {
    capacity: usize,
    next_id: u64,
    tick: u64,
    /// Slots whose descriptor is open.
    open: usize,
    slots: HashMap<u64, Slot>,
    /// Evictable slots by last use, oldest first.
    lru: BTreeMap<u64, u64>,
    /// Slots by path, to find the handles of a path being unlinked. Path
    /// order is component-wise, so everything below a directory is one
    /// range.
    by_path: BTreeMap<PathBuf, BTreeSet<u64>>,
}

impl CacheState {
    /// Marks `id` most recently used and files it by whether it may be
    /// evicted now.
    fn touch(&mut self, id: u64) {
        self.tick += 1;
        let tick = self.tick;
        let Some(slot) = self.slots.get_mut(&id) else {
            return;
        };
        if let Some(old) = slot.lru_tick.take() {
            self.lru.remove(&old);
        }
        if slot.evictable() {
            slot.lru_tick = Some(tick);
            self.lru.insert(tick, id);
        }
    }

    /// Closes least recently used clean descriptors until at most `keep`
    /// are open (or none is left to close), sparing `spare`: the handle
    /// whose operation asked is about to use its descriptor, and closing
    /// it would only make its next operation reopen. Returns the closed
    /// ones, to be dropped after the lock is released.
    fn evict_down_to(&mut self, keep: usize, spare: Option<u64>) -> Vec<Arc<File>> {
        let excess = self.open.saturating_sub(keep);
        let victims: Vec<(u64, u64)> = self
            .lru
            .iter()
            .filter(|(_, id)| Some(**id) != spare)
            .take(excess)
            .map(|(tick, id)| (*tick, *id))
            .collect();
        let mut closed = Vec::with_capacity(victims.len());
        for (tick, id) in victims {
            self.lru.remove(&tick);
            if let Some(slot) = self.slots.get_mut(&id) {
                slot.lru_tick = None;
                if let Some(fd) = slot.fd.take() {
                    self.open -= 1;
                    closed.push(fd);
                }
            }
        }
        closed
    }

    fn ids_at(&self, path: &Path, below: bool) -> Vec<u64> {
        self.by_path
            .range::<Path, _>((std::ops::Bound::Included(path), std::ops::Bound::Unbounded))
            .take_while(|(p, _)| {
                if below {
                    p.starts_with(path)
                } else {
                    p.as_path() == path
                }
            })
            .flat_map(|(_, ids)| ids.iter().copied())
            .collect()
    }
}

/// The cache; shared by a `LocalVolume` and every handle it opened.
pub(super) struct FdCache {
    state: Mutex<CacheState>,
}

impl FdCache {
    pub fn new(capacity: usize) -> Arc<FdCache> {
        Arc::new(FdCache {
            state: Mutex::new(CacheState {
                capacity: capacity.max(1),
                next_id: 0,
                tick: 0,
                open: 0,
                slots: HashMap::new(),
                lru: BTreeMap::new(),
                by_path: BTreeMap::new(),
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, CacheState> {
        // Every update completes before the guard drops (no IO under it),
        // so a poisoned lock still guards consistent tables.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn capacity(&self) -> usize {
        self.lock().capacity
    }

    /// Descriptors open now.
    pub fn open_files(&self) -> usize {
        self.lock().open
    }

    /// Runs `open`; if the process or system is out of descriptors, closes
    /// every clean one and tries once more.
    pub fn open_with_relief(&self, open: impl Fn() -> io::Result<File>) -> io::Result<File> {
        match open() {
            Err(e) if matches!(e.raw_os_error(), Some(EMFILE | ENFILE)) => {
                let closed = self.lock().evict_down_to(0, None);
                let freed = closed.len();
                drop(closed);
                if freed == 0 {
                    return Err(e);
                }
                tracing::warn!(
                    freed,
                    "out of file descriptors; closed every idle segment file"
                );
                open()
            }
            other => other,
        }
    }

    /// Takes over `file`, just opened at `path`, as a new handle.
    pub fn register(self: &Arc<Self>, path: PathBuf, file: File) -> io::Result<LocalSegment> {
        let meta = file.metadata()?;
        let identity = Identity::of(&meta);
        let closed;
        let id = {
            let mut guard = self.lock();
            let st = &mut *guard;
            let id = st.next_id;
            st.next_id += 1;
            st.by_path.entry(path.clone()).or_default().insert(id);
            st.slots.insert(
                id,
                Slot {
                    path: path.clone(),
                    identity,
                    fd: Some(Arc::new(file)),
                    lru_tick: None,
                    writes: 0,
                    synced: 0,
                    holds_unlinked: false,
                    unlinked: false,
                },
            );
            st.open += 1;
            st.touch(id);
            let keep = st.capacity;
            closed = st.evict_down_to(keep, Some(id));
            id
        };
        drop(closed);
        Ok(LocalSegment {
            cache: self.clone(),
            id,
            path,
            len: AtomicU64::new(meta.len()),
            writer: Mutex::new(()),
        })
    }

    /// Before the volume unlinks or replaces `path` (and, if `below`,
    /// everything under it): pins every open descriptor on it, so handles
    /// keep the inode they opened.
    pub fn unlinking(&self, path: &Path, below: bool) {
        self.pin_or_mark(path, below, false);
    }

    /// After the unlink: pins descriptors reopened meanwhile, and marks
    /// handles without one as unable to reach their file.
    pub fn unlinked(&self, path: &Path, below: bool) {
        self.pin_or_mark(path, below, true);
    }

    fn pin_or_mark(&self, path: &Path, below: bool, done: bool) {
        let mut st = self.lock();
        for id in st.ids_at(path, below) {
            if let Some(slot) = st.slots.get_mut(&id) {
                if slot.fd.is_some() {
                    slot.holds_unlinked = true;
                } else if done {
                    slot.unlinked = true;
                }
            }
            st.touch(id);
        }
    }

    /// The descriptor of handle `id`, reopened if the cache had closed it.
    /// A `write` is counted before the descriptor is handed out, which pins
    /// it until an fsync covers the write. Returns the write count too.
    fn fd(&self, id: u64, write: bool) -> io::Result<(Arc<File>, u64)> {
        let (path, expected) = {
            let mut guard = self.lock();
            let st = &mut *guard;
            let slot = st.slots.get_mut(&id).ok_or_else(unknown_handle)?;
            match slot.fd.clone() {
                Some(fd) => {
                    if write {
                        slot.writes += 1;
                    }
                    let writes = slot.writes;
                    st.touch(id);
                    return Ok((fd, writes));
                }
                None if slot.unlinked => {
                    return Err(stale(&slot.path, "the volume removed or replaced the file"))
                }
                None => (slot.path.clone(), slot.identity),
            }
        };
        // Opened without the lock: other handles keep working meanwhile.
        let file = self
            .open_with_relief(|| OpenOptions::new().read(true).write(true).open(&path))
            .map_err(|e| match e.kind() {
                io::ErrorKind::NotFound => stale(&path, "the file was removed"),
                _ => e,
            })?;
        if !Identity::of(&file.metadata()?).same_file(&expected) {
            return Err(stale(&path, "the path now names a different file"));
        }
        let (result, spare, closed) = {
            let mut guard = self.lock();
            let st = &mut *guard;
            let slot = st.slots.get_mut(&id).ok_or_else(unknown_handle)?;
            let (fd, spare) = match slot.fd.clone() {
                // Another operation reopened it first; ours is not needed.
                Some(fd) => (fd, Some(file)),
                None => {
                    let fd = Arc::new(file);
                    slot.fd = Some(fd.clone());
                    // Opened before an unlink that found no descriptor to
                    // pin (the identity check passed): this one holds the
                    // unlinked file now.
                    slot.holds_unlinked |= slot.unlinked;
                    st.open += 1;
                    (fd, None)
                }
            };
            if write {
                slot.writes += 1;
            }
            let writes = slot.writes;
            st.touch(id);
            let keep = st.capacity;
            ((fd, writes), spare, st.evict_down_to(keep, Some(id)))
        };
        drop((spare, closed));
        Ok(result)
    }

    /// Writes up to `writes` are durable: unpins the descriptor unless
    /// another write started since.
    fn synced(&self, id: u64, writes: u64) {
        let mut st = self.lock();
        if let Some(slot) = st.slots.get_mut(&id) {
            slot.synced = slot.synced.max(writes);
        }
        st.touch(id);
    }

    fn release(&self, id: u64) {
        let fd = {
            let mut st = self.lock();
            let Some(mut slot) = st.slots.remove(&id) else {
                return;
            };
            if let Some(tick) = slot.lru_tick.take() {
                st.lru.remove(&tick);
            }
            if let Some(ids) = st.by_path.get_mut(&slot.path) {
                ids.remove(&id);
                if ids.is_empty() {
                    st.by_path.remove(&slot.path);
                }
            }
            let fd = slot.fd.take();
            if fd.is_some() {
                st.open -= 1;
            }
            fd
        };
        drop(fd);
    }
}

fn unknown_handle() -> io::Error {
    io::Error::other("segment handle is not in the open-file cache")
}

/// A segment (or index) file. Writes are positional at the tracked length,
/// so a failed partial append is simply overwritten by the next one and
/// readers never see past the last complete append.
pub(super) struct LocalSegment {
    cache: Arc<FdCache>,
    id: u64,
    path: PathBuf,
    /// Bytes completely appended; published after each write.
    len: AtomicU64,
    /// Serialises appends and truncation; readers do not take it.
    writer: Mutex<()>,
}

impl LocalSegment {
    fn lock_writer(&self) -> MutexGuard<'_, ()> {
        // The guarded state is `()`: a panic elsewhere cannot leave it
        // inconsistent, so a poisoned lock is safe to reuse.
        self.writer.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for LocalSegment {
    fn drop(&mut self) {
        self.cache.release(self.id);
    }
}

impl SegmentFile for LocalSegment {
    fn len(&self) -> u64 {
        self.len.load(Ordering::Acquire)
    }

    fn append(&self, data: &[u8]) -> io::Result<u64> {
        let _guard = self.lock_writer();
        let pos = self.len.load(Ordering::Acquire);
        let (file, _) = self.cache.fd(self.id, true)?;
        file.write_all_at(data, pos)?;
        self.len.store(pos + data.len() as u64, Ordering::Release);
        Ok(pos)
    }

    fn read_at(&self, pos: u64, len: usize) -> io::Result<Bytes> {
        let available = self.len().saturating_sub(pos);
        // Bound the allocation by what exists, not by what was asked for.
        let want = usize::try_from(available).map_or(len, |a| a.min(len));
        if want == 0 {
            return Ok(Bytes::new());
        }
        let (file, _) = self.cache.fd(self.id, false)?;
        let mut buf = vec![0u8; want];
        let mut filled = 0;
        while filled < want {
            match file.read_at(&mut buf[filled..], pos + filled as u64) {
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
        // Taken under the writer lock, no append is half done: the count
        // covers exactly the writes whose bytes this fsync will cover.
        let (file, writes) = {
            let _guard = self.lock_writer();
            self.cache.fd(self.id, false)?
        };
        // fdatasync covers the file size too, which is all an append changes.
        file.sync_data()?;
        self.cache.synced(self.id, writes);
        Ok(())
    }

    fn start_write_back(&self, from: u64, len: u64) {
        // POSIX_FADV_DONTNEED starts the write-back of the range's dirty
        // pages and waits for none of it (Linux's `mm/fadvise.c`); it
        // then drops only pages already clean, and the pages just queued
        // are not yet, so a reader of the fresh copy still finds them
        // cached. No durability rests on it, so a failure is ignored.
        let Some(len) = std::num::NonZeroU64::new(len) else {
            return;
        };
        if let Ok((file, _)) = self.cache.fd(self.id, false) {
            let _ = rustix::fs::fadvise(&*file, from, Some(len), rustix::fs::Advice::DontNeed);
        }
    }

    fn free_tail(&self, len: u64) -> io::Result<()> {
        let _guard = self.lock_writer();
        if len >= self.len.load(Ordering::Acquire) {
            return Ok(());
        }
        // Not counted as a write: a cut has no write-back whose error a
        // later fsync must see (ftruncate reports its own), so it leaves
        // the descriptor as clean, and as free to close, as it was.
        let (file, _) = self.cache.fd(self.id, false)?;
        file.set_len(len)?;
        self.len.store(len, Ordering::Release);
        Ok(())
    }

    fn truncate(&self, len: u64) -> io::Result<()> {
        let _guard = self.lock_writer();
        let (file, writes) = self.cache.fd(self.id, true)?;
        file.set_len(len)?;
        file.sync_all()?;
        self.len.store(len, Ordering::Release);
        self.cache.synced(self.id, writes);
        Ok(())
    }
}

impl std::fmt::Debug for LocalSegment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalSegment")
            .field("path", &self.path)
            .field("len", &self.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::StaleHandle;
    use crate::volume::{LocalVolume, SegmentFile, Volume};
    use std::io;
    use std::sync::Arc;

    fn volume(limit: usize) -> (tempfile::TempDir, LocalVolume) {
        let dir = tempfile::tempdir().unwrap();
        let volume = LocalVolume::with_open_file_limit(dir.path(), limit).unwrap();
        volume.create_dir_all("p").unwrap();
        (dir, volume)
    }

    fn is_stale(e: &io::Error) -> bool {
        e.kind() == io::ErrorKind::NotFound
            && e.get_ref().is_some_and(|inner| inner.is::<StaleHandle>())
    }

    #[test]
    fn idle_segments_share_a_bounded_number_of_descriptors() {
        let (_dir, v) = volume(4);
        let segments: Vec<Arc<dyn SegmentFile>> = (0..20)
            .map(|i| {
                let seg = v.open_segment(&format!("p/{i}.log"), true).unwrap();
                seg.append(format!("first {i}").as_bytes()).unwrap();
                seg.sync().unwrap();
                seg
            })
            .collect();
        assert!(v.open_files() <= 4, "{} open", v.open_files());
        for round in 0..3 {
            for seg in &segments {
                seg.append(format!("|{round}").as_bytes()).unwrap();
                seg.sync().unwrap();
                assert!(v.open_files() <= 4, "{} open", v.open_files());
            }
        }
        for (i, seg) in segments.iter().enumerate() {
            let expected = format!("first {i}|0|1|2");
            assert_eq!(seg.len(), expected.len() as u64);
            assert_eq!(seg.read_at(0, 100).unwrap(), expected.as_bytes());
            assert_eq!(
                v.read(&format!("p/{i}.log")).unwrap().unwrap(),
                expected.as_bytes()
            );
        }
        drop(segments);
        assert_eq!(v.open_files(), 0, "dropped handles close their files");
    }

    /// Closing a descriptor with dirty pages could lose the writeback
    /// error its fsync must report.
    #[test]
    fn a_segment_with_unsynced_appends_keeps_its_descriptor_until_synced() {
        let (_dir, v) = volume(1);
        let dirty = v.open_segment("p/dirty.log", true).unwrap();
        dirty.append(b"unsynced").unwrap();
        let _idle: Vec<_> = (0..3)
            .map(|i| v.open_segment(&format!("p/{i}.log"), true).unwrap())
            .collect();
        assert_eq!(
            v.open_files(),
            2,
            "the dirty file stays open beside the one idle file allowed"
        );
        dirty.sync().unwrap();
        let _more = v.open_segment("p/more.log", true).unwrap();
        assert_eq!(v.open_files(), 1, "once synced it may be closed");
        assert_eq!(dirty.read_at(0, 100).unwrap(), &b"unsynced"[..]);
    }

    #[test]
    fn a_range_started_on_its_way_to_disk_reads_back_whole_and_is_still_unsynced() {
        let (_dir, v) = volume(1);
        let copy = v.open_segment("p/copy.log", true).unwrap();
        let data: Vec<u8> = (0..=255u8).cycle().take(3 << 20).collect();
        for chunk in data.chunks(1 << 20) {
            let at = copy.append(chunk).unwrap();
            copy.start_write_back(at, chunk.len() as u64);
        }
        copy.start_write_back(0, 0);
        assert_eq!(copy.len(), data.len() as u64);
        let _idle: Vec<_> = (0..3)
            .map(|i| v.open_segment(&format!("p/{i}.log"), true).unwrap())
            .collect();
        assert_eq!(
            v.open_files(),
            2,
            "a write-back promises nothing: the copy keeps its descriptor until synced"
        );
        assert_eq!(copy.read_at(0, data.len()).unwrap(), &data[..]);
    }

    #[test]
    fn a_reopened_handle_appends_at_its_tracked_length() {
        let (dir, v) = volume(1);
        let seg = v.open_segment("p/0.log", true).unwrap();
        seg.append(b"abc").unwrap();
        seg.sync().unwrap();
        let _other = v.open_segment("p/1.log", true).unwrap();
        assert_eq!(seg.append(b"def").unwrap(), 3);
        seg.truncate(5).unwrap();
        let _again = v.open_segment("p/2.log", true).unwrap();
        assert_eq!(seg.append(b"!").unwrap(), 5);
        seg.sync().unwrap();
        assert_eq!(
            std::fs::read(dir.path().join("p/0.log")).unwrap(),
            b"abcde!"
        );
    }

    /// A handle whose descriptor the cache had closed cannot reach a file
    /// the volume replaced: it fails rather than read the new file.
    #[test]
    fn a_closed_handle_to_a_replaced_or_removed_file_fails_clearly() {
        let (_dir, v) = volume(1);
        v.write_atomic("p/idx", b"old").unwrap();
        let idx = v.open_segment("p/idx", false).unwrap();
        let seg = v.open_segment("p/0.log", true).unwrap();
        let _other = v.open_segment("p/1.log", true).unwrap();
        assert_eq!(v.open_files(), 1, "both handles above lost their files");
        v.write_atomic("p/idx", b"new!").unwrap();
        let err = idx.read_at(0, 10).unwrap_err();
        assert!(is_stale(&err), "{err}");
        v.remove("p/0.log").unwrap();
        let err = seg.append(b"x").unwrap_err();
        assert!(is_stale(&err), "{err}");
        assert!(err.to_string().contains("p/0.log"), "{err}");
    }

    /// The same for `rename`, on both of its names: a closed handle on the
    /// replaced target or on the renamed source fails rather than reopen
    /// whatever file has its name now; an open one keeps its file.
    #[test]
    fn a_closed_handle_to_a_renamed_or_renamed_over_file_fails_clearly() {
        let (_dir, v) = volume(1);
        v.write_atomic("p/0.log", b"old").unwrap();
        v.write_atomic("p/1.log", b"moved").unwrap();
        let target = v.open_segment("p/0.log", false).unwrap();
        let source = v.open_segment("p/1.log", false).unwrap();
        let _other = v.open_segment("p/2.log", true).unwrap();
        assert_eq!(v.open_files(), 1, "both handles above lost their files");
        v.write_atomic("p/new", b"new!").unwrap();
        v.rename("p/new", "p/0.log").unwrap();
        let err = target.read_at(0, 10).unwrap_err();
        assert!(is_stale(&err), "{err}");
        v.rename("p/1.log", "p/3.log").unwrap();
        v.write_atomic("p/1.log", b"another").unwrap();
        let err = source.read_at(0, 10).unwrap_err();
        assert!(is_stale(&err), "{err}");

        let open = v.open_segment("p/3.log", false).unwrap();
        open.append(b"+").unwrap();
        v.rename("p/3.log", "p/4.log").unwrap();
        let _more = v.open_segment("p/5.log", true).unwrap();
        open.sync().unwrap();
        assert_eq!(open.read_at(0, 10).unwrap(), &b"moved+"[..]);
        assert_eq!(v.read("p/4.log").unwrap().unwrap(), &b"moved+"[..]);
        assert_eq!(v.read("p/0.log").unwrap().unwrap(), &b"new!"[..]);
    }

    /// Another broker or an operator replacing a file is caught by the
    /// identity check when the handle reopens.
    #[test]
    fn a_file_changed_behind_the_volumes_back_is_detected_on_reopen() {
        let (dir, v) = volume(1);
        let seg = v.open_segment("p/0.log", true).unwrap();
        seg.append(b"ours").unwrap();
        seg.sync().unwrap();
        let gone = v.open_segment("p/1.log", true).unwrap();
        let _other = v.open_segment("p/2.log", true).unwrap();
        let replacement = dir.path().join("p/replacement");
        std::fs::write(&replacement, b"theirs").unwrap();
        std::fs::rename(&replacement, dir.path().join("p/0.log")).unwrap();
        std::fs::remove_file(dir.path().join("p/1.log")).unwrap();
        let err = seg.read_at(0, 10).unwrap_err();
        assert!(is_stale(&err), "{err}");
        assert!(err.to_string().contains("different file"), "{err}");
        let err = gone.sync().unwrap_err();
        assert!(is_stale(&err), "{err}");
        assert!(err.to_string().contains("removed"), "{err}");
    }

    /// Handles whose descriptor is open when the volume unlinks their file
    /// keep it, however small the cache: pinning never needs a reopen.
    #[test]
    fn open_handles_keep_unlinked_files_past_the_limit() {
        let (_dir, v) = volume(1);
        let segments: Vec<_> = (0..3)
            .map(|i| {
                let seg = v.open_segment(&format!("p/{i}.log"), true).unwrap();
                seg.append(&[i as u8; 4]).unwrap();
                seg
            })
            .collect();
        assert_eq!(v.open_files(), 3, "unsynced, so none was closed");
        v.remove_dir_all("p").unwrap();
        for seg in &segments {
            seg.sync().unwrap();
        }
        let _fresh = {
            v.create_dir_all("q").unwrap();
            v.open_segment("q/0.log", true).unwrap()
        };
        for (i, seg) in segments.iter().enumerate() {
            assert_eq!(seg.read_at(0, 10).unwrap(), &[i as u8; 4][..]);
        }
        assert_eq!(v.open_files(), 4);
        drop(segments);
        assert_eq!(v.open_files(), 1);
    }
}
