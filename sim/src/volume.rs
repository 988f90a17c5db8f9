//! `SimVolume`: the shared volume in memory, with crash semantics.
//!
//! The model, and why it is shaped this way:
//!
//! - Files are inodes; directory entries name them. Replacing a file
//!   (`write_atomic`) or removing it unlinks the old inode, but handles that
//!   are already open keep reading it, as on a POSIX file system. The log
//!   relies on exactly that (a sealed segment's index is replaced, then
//!   reopened).
//! - Each inode has content plus a *synced* length: `data[..synced]` is what
//!   a crash keeps for certain, the rest is the unsynced tail. Appends grow
//!   the tail; `sync` makes all of it durable; `truncate` is durable at once
//!   (the `SegmentFile` contract says it syncs). Segment files are append-only
//!   apart from truncation, so "a durable prefix plus a tail" is exact, not
//!   an approximation.
//! - Directory entries have their own durability, as on a local file
//!   system: every directory is kept twice, as it is and as it was at its
//!   last sync ([`Volume::sync_dir`], or the first sync of a segment
//!   `open_segment` created). A power loss brings every directory back to
//!   its synced entries: a create, rename or removal not synced is undone,
//!   and a file whose name did not survive is gone. `write_atomic` and
//!   `create_exclusive` are not the volume's own: they are the trait's
//!   composites (a temporary written and synced, then renamed or linked,
//!   then the directory synced), the very steps `LocalVolume` runs, so a
//!   step missing there shows here as a lost or empty file after a crash.
//!   On NFS ([`set_entries_durable_at_once`](SimVolume::set_entries_durable_at_once),
//!   the multi-broker seeds) the server commits a directory operation
//!   before it replies, so entries are durable the moment they change.
//! - `link` (the publication inside `create_exclusive`) checks the name
//!   and creates it in one step under the volume's lock, so of concurrent
//!   creators exactly one wins.
//! - [`crash`](SimVolume::crash) is the power failure the harness applies
//!   between killing a broker and restarting it: every unsynced byte is
//!   lost. [`crash_torn`](SimVolume::crash_torn) instead keeps a seeded
//!   random prefix of each unsynced tail, sometimes ending in zeros (the
//!   size reached the disk before the data did), which is what exercises
//!   recovery's torn-tail truncation.
//! - A crash starts a new *generation*: segment handles opened before it
//!   fail every later call, so state held by a killed broker can never write
//!   into its successor's files.
//! - [`kill_process`](SimVolume::kill_process) is a kill -9 of the broker
//!   process alone: the machine and its page cache live on, so every
//!   unsynced byte stays readable and stays unsynced (a later `crash*`, the
//!   power failure, can still lose it). That is what a restarted broker
//!   finds when it reads back data it never synced: recovery must sync
//!   what it will rely on. A new generation, as for a crash.
//!   [`kill_process_on_nfs`](SimVolume::kill_process_on_nfs) is the same
//!   kill of one broker of several: its files close, and its NFS client
//!   writes their dirty pages back on close, so its unsynced tail becomes
//!   every broker's to read, still unsynced on the server.
//! - [`power_cut_after`](SimVolume::power_cut_after) arms a power cut at an
//!   exact operation: from that operation on, everything fails until the
//!   harness calls `crash*`. Volume calls take no simulated time, so a kill
//!   at a random *time* rarely lands between two of them (a segment and its
//!   index, say); a cut at a random *operation* does, and can also land
//!   inside startup recovery.
//! - fsync latency is not the volume's: the broker's IO runner
//!   (`crate::env::SimIo`) lets simulated time pass for an fsync.
//! - Faults without a crash: [`set_fault_hook`](SimVolume::set_fault_hook)
//!   lets the harness fail chosen operations (the buggify seam). A failed
//!   fsync has Linux's semantics ("fsyncgate"): the bytes it should have
//!   written look clean afterwards, a later fsync succeeds, and a crash
//!   still loses them (zeroes them: the file size did reach the disk).
//!
//! - Several brokers: the harness of a multi-broker seed tells the volume
//!   which broker issues each operation ([`set_caller`](SimVolume::set_caller),
//!   madsim's current node). With it the volume records which brokers
//!   wrote each file ([`writers`](SimVolume::writers), for the "one writer
//!   per file and epoch" rule) and can cut one broker off
//!   ([`set_unreachable`](SimVolume::set_unreachable)): its operations
//!   fail with an IO error while the others' go on, as an NFS client cut
//!   off from its server sees them (see `crate::env::SimIo` for the ones
//!   that wait instead).
//!
//! - Each broker's NFS directory-listing cache
//!   ([`set_listing_cache`](SimVolume::set_listing_cache)): a broker may
//!   be answered a listing up to a seeded age old, missing what other
//!   brokers created or removed since, as an NFS client's `acdirmax` lets
//!   it; its own changes it sees at once.
//!
//! - Each broker's unsynced appends are its own NFS client's dirty pages:
//!   the broker reads them, no other broker does until an fsync writes
//!   them back ([`Inode::visible_len`]; another broker's fsync cannot
//!   write them), and [`crash_host`](SimVolume::crash_host), one broker's
//!   kill, loses them (or keeps a seeded prefix that was written back)
//!   while every other broker's data stays.
//!
//! - Each broker's NFS name and attribute caches
//!   ([`set_attr_cache`](SimVolume::set_attr_cache)): a broker that looked
//!   a name up may go on reading the file it found there for up to a
//!   seeded age after another broker replaced it by a rename
//!   (`write_atomic`), as a client whose cached attributes have not timed
//!   out does; its own renames it sees at once. Negative lookups are not
//!   cached, so a name created (exclusively or not) or removed is seen
//!   exactly by every broker.
//!
//! Not modelled yet: stale attributes of a file a broker holds open while
//! another writes it (kaas never reads a file another broker is writing
//! except at a takeover, which opens it afresh: close-to-open), and a
//! server that keeps unstable writes in memory past their `WRITE` (a power
//! cut models the server's crash).

use bytes::Bytes;
use kaas_net::volume::{is_temporary, temporary_beside, SegmentFile, Volume};
use rand::{Rng, RngCore};
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::watch;

/// An operation a fault hook may fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultPoint {
    Read,
    WriteNew,
    Link,
    List,
    CreateDir,
    SyncDir,
    Remove,
    RemoveDirAll,
    Rename,
    OpenSegment,
    Append,
    ReadAt,
    Sync,
    Truncate,
}

/// Decides whether an operation on a path fails, and how. Must be
/// deterministic (draw from the simulation's seeded rng).
pub type FaultHook = Box<dyn FnMut(&FaultContext<'_>) -> Option<io::Error> + Send>;

/// Which broker (its index) issues the operation running now; `None` for
/// anyone else (the harness, the checkers).
pub type CallerId = Box<dyn Fn() -> Option<usize> + Send>;

/// What a fault hook is told about the operation it may fail.
#[derive(Debug, Clone, Copy)]
pub struct FaultContext<'a> {
    pub point: FaultPoint,
    pub path: &'a str,
    /// For operations on an open file: its length and how many of those
    /// bytes are not synced yet (lets a hook aim at, say, an fsync that
    /// covers data, or one of a nearly full segment).
    pub len: u64,
    pub unsynced: u64,
}

/// What a crash did to the unsynced data.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CrashReport {
    /// Files that had unsynced bytes.
    pub files_with_unsynced: u64,
    /// Unsynced bytes that were lost.
    pub bytes_dropped: u64,
    /// Unsynced bytes that survived (torn crashes only).
    pub bytes_kept: u64,
    /// Surviving bytes that were replaced by zeros.
    pub bytes_zeroed: u64,
    /// Bytes zeroed because their fsync had failed (see `Inode::poisoned`).
    pub bytes_poisoned: u64,
    /// Directory entries undone: created, renamed or removed but never
    /// synced into their directory.
    pub entries_undone: u64,
}

/// Running totals, for reports and for gates against vacuous runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VolumeStats {
    pub mutations: u64,
    pub appends: u64,
    pub bytes_appended: u64,
    pub syncs: u64,
    pub truncates: u64,
    /// Cuts of a file about to be removed ([`SegmentFile::free_tail`]).
    pub tails_freed: u64,
    pub renames: u64,
    pub crashes: u64,
    /// Crashes of one broker's host ([`SimVolume::crash_host`]).
    pub host_crashes: u64,
    /// Kills of a broker process that kept the page cache
    /// ([`SimVolume::kill_process`], [`SimVolume::kill_process_on_nfs`]).
    pub process_kills: u64,
    pub power_cuts: u64,
    pub injected_faults: u64,
    /// Operations failed because their broker could not reach the volume.
    pub unreachable_failures: u64,
    /// Listings a broker was answered from its cache that differed from
    /// the directory as it was ([`SimVolume::set_listing_cache`]).
    pub stale_listings: u64,
    /// Lookups by name a broker was answered with a file version another
    /// broker had since replaced ([`SimVolume::set_attr_cache`]).
    pub stale_file_views: u64,
}

/// The error payload of a failure the fault hook injected.
#[derive(Debug)]
struct InjectedFault(String);

impl std::fmt::Display for InjectedFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "injected fault: {}", self.0)
    }
}

impl std::error::Error for InjectedFault {}

#[derive(Debug, Default)]
struct Inode {
    data: Vec<u8>,
    /// `data[..synced]` survives any crash (except poisoned ranges).
    synced: usize,
    /// Ranges whose fsync failed. Linux then marks the dirty pages clean
    /// anyway ("fsyncgate"): reads still see the data, a later fsync
    /// succeeds, but the disk never got it, so a crash zeroes these bytes.
    poisoned: Vec<(usize, usize)>,
    /// The broker whose client holds the unsynced tail `data[synced..]`,
    /// when a broker appended it (see [`Inode::visible_len`]).
    dirty_by: Option<usize>,
    /// Where the latest append began (a write a power failure can tear
    /// mid-way, [`SimVolume::crash_tearing_last_writes`]).
    last_append: usize,
}

impl Inode {
    /// An fsync by `caller`: it writes back the caller's own dirty pages;
    /// another client's it cannot reach.
    fn sync(&mut self, caller: Option<usize>, stats: &mut VolumeStats) {
        if self.visible_len(caller) == self.data.len() {
            self.synced = self.data.len();
            self.dirty_by = None;
        }
        stats.syncs += 1;
    }

    /// An fsync failed with `e`. An injected failure has the kernel's
    /// semantics: the unsynced bytes are dropped from the dirty set, so
    /// they look durable to later fsyncs but a crash loses them.
    fn failed_sync(&mut self, e: &io::Error) {
        let injected = e.get_ref().is_some_and(|inner| inner.is::<InjectedFault>());
        if injected && self.data.len() > self.synced {
            self.poisoned.push((self.synced, self.data.len()));
            self.synced = self.data.len();
            self.dirty_by = None;
        }
    }

    /// How much of the file `caller` sees. A broker's unsynced appends
    /// are dirty pages in its own NFS client: it reads them, nobody else
    /// does until an fsync writes them to the server (close-to-open: kaas
    /// reopens, or reads a length, only after its writer synced), and a
    /// crash of its host loses them ([`SimVolume::crash_host`]).
    fn visible_len(&self, caller: Option<usize>) -> usize {
        match (self.dirty_by, caller) {
            (Some(writer), Some(reader)) if writer != reader => self.synced,
            _ => self.data.len(),
        }
    }
}

struct State {
    /// Every directory; "" is the root and always exists.
    dirs: BTreeSet<String>,
    /// Directory entries of files.
    files: BTreeMap<String, u64>,
    /// `dirs` and `files` as a power loss leaves them: each directory's
    /// entries as of its last sync.
    durable: Entries,
    /// Directories whose entries may differ from their durable ones: an
    /// entry in them changed since their last sync, or they were created
    /// (a directory of a name that existed before may still hold that
    /// one's durable entries). Syncing any other is a no-op and costs
    /// nothing, where a partition's directory holds thousands of segment
    /// files in small-segment seeds and is synced at every roll.
    unsynced_dirs: BTreeSet<String>,
    /// Directory operations are durable when they return (an NFS server's),
    /// not only once their directory is synced (a local file system's).
    entries_durable_at_once: bool,
    /// Numbers hidden temporaries (`Volume::temporary_name`).
    temporaries: u64,
    /// Inodes, including unlinked ones still reachable from open handles
    /// (dropped at the next crash, when those handles die).
    inodes: BTreeMap<u64, Inode>,
    next_inode: u64,
    generation: u64,
    /// A power cut happened: every operation fails until the next crash.
    frozen: bool,
    /// Mutations left before an armed power cut.
    cut_after: Option<u64>,
    fault_hook: Option<FaultHook>,
    stats: VolumeStats,
    caller: Option<CallerId>,
    /// Per file: the brokers that changed it, and how.
    writers: BTreeMap<String, BTreeSet<(usize, FaultPoint)>>,
    /// Each broker's cached directory listings, when NFS's are modelled.
    listings: Option<ListingCache>,
    /// Each broker's cached name lookups, when NFS's are modelled.
    names: Option<NameCache>,
}

/// A volume's names: its directories and its files' entries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Entries {
    dirs: BTreeSet<String>,
    files: BTreeMap<String, u64>,
}

impl Entries {
    /// Drops everything strictly below `dir` (a directory that is gone).
    fn forget_below(&mut self, dir: &str) {
        forget_subtree(&mut self.files, &mut self.dirs, dir);
    }
}

/// Removes every file and directory strictly below `dir`, by range queries
/// over that subtree only.
fn forget_subtree(files: &mut BTreeMap<String, u64>, dirs: &mut BTreeSet<String>, dir: &str) {
    let subtree = child_prefix(dir);
    let gone: Vec<String> = below(files, &subtree).cloned().collect();
    for f in gone {
        files.remove(&f);
    }
    let gone: Vec<String> = below(dirs, &subtree).cloned().collect();
    for d in gone {
        dirs.remove(&d);
    }
}

/// What the keys of `dir`'s entries start with: `dir` and a slash, or
/// nothing for the root.
fn child_prefix(dir: &str) -> String {
    if dir.is_empty() {
        String::new()
    } else {
        format!("{dir}/")
    }
}

/// Directory listings as an NFS client caches them: a broker's `list` of a
/// directory is answered from what it listed there before, for up to
/// `max_age_ms` (the client's `acdirmax`), unless the broker itself
/// changed an entry there since (a client sees its own changes at once).
/// Other brokers' creations, removals and renames show up late; file
/// contents and single-name lookups stay exact (close-to-open consistency,
/// and kaas's required `lookupcache=none`; docs/cluster.md).
struct ListingCache {
    max_age_ms: u64,
    now_ms: Box<dyn Fn() -> u64 + Send>,
    /// (broker, directory) -> (when it was listed, what it held).
    entries: BTreeMap<(usize, String), (u64, Vec<String>)>,
}

/// Names as an NFS client's attribute and dentry caches hold them: a
/// broker that looked a name up resolves it to the file it found then
/// until it sees the change, and a change it did not make itself it sees
/// up to `max_age_ms` late (the client's `acregmax`/`acdirmax`). So when
/// another broker replaces the name by a rename (`write_atomic`), this
/// broker goes on reading the previous version for up to `max_age_ms`
/// after the replacement, never longer (the volume-staleness bound the
/// brokers assume). Only positive lookups are cached (`lookupcache=positive`):
/// a name this broker has not looked up, or that was removed, is looked
/// up at the server, so an exclusive create and a check that a name
/// exists (a successor's claim, docs/cluster.md) stay exact. Content
/// written in place follows [`Inode::visible_len`] (close-to-open), not
/// this cache.
struct NameCache {
    max_age_ms: u64,
    now_ms: Box<dyn Fn() -> u64 + Send>,
    /// path -> broker -> what that broker's last lookup of it found.
    seen: BTreeMap<String, BTreeMap<usize, SeenName>>,
}

/// The file a broker's lookup of a name last resolved to.
#[derive(Debug, Clone, Copy)]
struct SeenName {
    inode: u64,
    /// When another broker replaced it under the name (its view may lag
    /// by `max_age_ms` from then); `None` while it is the name's file.
    replaced_at: Option<u64>,
}

impl NameCache {
    /// Another broker than `renamer` replaced the file at `path`: every
    /// other broker's view of it is stale from now. A view already stale
    /// keeps its first replacement's time, so no version outlives its
    /// replacement by more than `max_age_ms`. The renamer sees its own
    /// rename at once.
    fn replaced(&mut self, path: &str, renamer: Option<usize>, new: u64) {
        let now = (self.now_ms)();
        let Some(views) = self.seen.get_mut(path) else {
            return;
        };
        for (broker, view) in views.iter_mut() {
            if Some(*broker) == renamer {
                *view = SeenName {
                    inode: new,
                    replaced_at: None,
                };
            } else if view.replaced_at.is_none() && view.inode != new {
                view.replaced_at = Some(now);
            }
        }
    }

    /// The name is gone at the server: every broker's next lookup of it
    /// goes there (negative lookups are not cached).
    fn forget(&mut self, path: &str) {
        self.seen.remove(path);
    }

    /// The names below `dir` are gone (a directory removed).
    fn forget_below(&mut self, dir: &str) {
        self.seen.retain(|p, _| p != dir && !is_below(p, dir));
    }
}

struct Inner {
    state: Mutex<State>,
    /// Counts power cuts, so the harness can wait for an armed one to fire.
    power_cuts: watch::Sender<u64>,
    /// Brokers cut off from the volume. A watch, so that an IO runner can
    /// wait for its broker's link to heal.
    unreachable: watch::Sender<BTreeSet<usize>>,
    /// IO jobs that waited for their broker's link and ran after it healed
    /// (counted by the brokers' IO runners).
    late_io: Arc<std::sync::atomic::AtomicU64>,
}

/// The in-memory volume. Cloning gives another handle to the same volume.
#[derive(Clone)]
pub struct SimVolume {
    inner: Arc<Inner>,
}

impl Default for SimVolume {
    fn default() -> Self {
        Self::new()
    }
}

fn err(kind: io::ErrorKind, msg: impl Into<String>) -> io::Error {
    io::Error::new(kind, msg.into())
}

/// Splits a volume path into its components, refusing what `LocalVolume`
/// refuses (absolute paths, `..`), so the simulator never accepts a path
/// the real volume would reject.
fn normalize(path: &str) -> io::Result<String> {
    if path.starts_with('/') {
        return Err(err(
            io::ErrorKind::InvalidInput,
            format!("volume path {path:?} must be relative"),
        ));
    }
    let mut parts = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                return Err(err(
                    io::ErrorKind::InvalidInput,
                    format!("volume path {path:?} must stay below the root"),
                ))
            }
            p => parts.push(p),
        }
    }
    Ok(parts.join("/"))
}

fn parent(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(dir, _)| dir)
}

/// The keys that start with `prefix` (everything below a directory, when
/// `prefix` is that directory and a slash), found by a range query.
fn below<'a, K: Keys>(keys: &'a K, prefix: &'a str) -> impl Iterator<Item = &'a String> + 'a {
    keys.keys_from(prefix)
        .take_while(move |k| k.starts_with(prefix))
}

/// The entries directly in the directory whose keys start with `prefix`
/// (the directory and a slash; "" for the root), in order. Each
/// subdirectory's subtree is jumped over by a new range query rather than
/// walked: every key below `prefix` + `name/` sorts before `prefix` +
/// `name0`, '0' being the character after '/'. A seed's volume holds
/// thousands of files, and listing or syncing one directory by walking
/// all of them was most of a multi-broker seed's time.
fn children<'a, K: Keys>(keys: &'a K, prefix: &str) -> Vec<&'a String> {
    let mut found = Vec::new();
    let mut from = prefix.to_string();
    'ranges: loop {
        for key in keys.keys_from(&from) {
            let Some(rest) = key.strip_prefix(prefix) else {
                break 'ranges;
            };
            match rest.find('/') {
                None if rest.is_empty() => {}
                None => found.push(key),
                Some(slash) => {
                    from = format!("{prefix}{}0", &rest[..slash]);
                    continue 'ranges;
                }
            }
        }
        break;
    }
    found
}

/// Sorted string keys that can be iterated from a starting point.
trait Keys {
    fn keys_from<'a>(&'a self, start: &str) -> Box<dyn Iterator<Item = &'a String> + 'a>;
}

impl<V> Keys for BTreeMap<String, V> {
    fn keys_from<'a>(&'a self, start: &str) -> Box<dyn Iterator<Item = &'a String> + 'a> {
        Box::new(self.range(start.to_string()..).map(|(k, _)| k))
    }
}

impl Keys for BTreeSet<String> {
    fn keys_from<'a>(&'a self, start: &str) -> Box<dyn Iterator<Item = &'a String> + 'a> {
        Box::new(self.range(start.to_string()..))
    }
}

/// True if `path` is strictly below `dir`.
fn is_below(path: &str, dir: &str) -> bool {
    dir.is_empty() && !path.is_empty()
        || path
            .strip_prefix(dir)
            .is_some_and(|rest| rest.starts_with('/'))
}

impl State {
    /// Every operation passes here first: a frozen volume fails everything,
    /// and the fault hook may fail this one.
    fn check(&mut self, point: FaultPoint, path: &str) -> io::Result<()> {
        self.check_file(point, path, (0, 0))
    }

    /// `check` for an operation on an open file of `(len, unsynced)` bytes.
    fn check_file(
        &mut self,
        point: FaultPoint,
        path: &str,
        (len, unsynced): (u64, u64),
    ) -> io::Result<()> {
        if self.frozen {
            return Err(err(
                io::ErrorKind::Other,
                "simulated power cut: the volume is gone",
            ));
        }
        if let Some(hook) = self.fault_hook.as_mut() {
            if let Some(e) = hook(&FaultContext {
                point,
                path,
                len,
                unsynced,
            }) {
                self.stats.injected_faults += 1;
                // Tagged so `sync` can tell an injected failure from a
                // power cut or a stale handle.
                return Err(io::Error::new(e.kind(), InjectedFault(e.to_string())));
            }
        }
        Ok(())
    }

    /// Like `check`, for operations that change the volume; counts down an
    /// armed power cut. Returns `true` if the cut fired now.
    fn check_mutation(
        &mut self,
        point: FaultPoint,
        path: &str,
        file: (u64, u64),
    ) -> io::Result<bool> {
        self.check_file(point, path, file)?;
        if let Some(left) = self.cut_after.as_mut() {
            if *left == 0 {
                self.cut_after = None;
                self.frozen = true;
                self.stats.power_cuts += 1;
                return Ok(true);
            }
            *left -= 1;
        }
        self.stats.mutations += 1;
        Ok(false)
    }

    /// Records that the broker issuing the operation changed `path` (a
    /// successful change only: a lost exclusive create wrote nothing).
    /// The broker issuing the operation running now, if one is.
    fn caller(&self) -> Option<usize> {
        self.caller.as_ref().and_then(|c| c())
    }

    fn wrote(&mut self, path: &str, point: FaultPoint) {
        if let Some(broker) = self.caller() {
            self.writers
                .entry(path.to_string())
                .or_default()
                .insert((broker, point));
        }
        if !matches!(point, FaultPoint::Append | FaultPoint::Truncate) {
            self.changed_entry(path);
        }
    }

    /// The broker issuing the operation changed the entry `path` (created,
    /// removed, replaced it): its own cached listing of the parent goes,
    /// and on NFS the change is durable at once.
    fn changed_entry(&mut self, path: &str) {
        let broker = self.caller.as_ref().and_then(|c| c());
        if let (Some(broker), Some(cache)) = (broker, self.listings.as_mut()) {
            cache.entries.remove(&(broker, parent(path).to_string()));
        }
        if self.entries_durable_at_once {
            self.sync_entry(path);
        } else {
            self.unsynced_dirs.insert(parent(path).to_string());
        }
    }

    /// Makes the one entry `path` durable as it is now. With entries
    /// durable at once every entry change passes here, so the rest of its
    /// directory is durable already: this is `sync_entries` of the parent
    /// without the walk over the siblings.
    fn sync_entry(&mut self, path: &str) {
        let durable = &mut self.durable;
        if let Some(&id) = self.files.get(path) {
            durable.dirs.remove(path);
            durable.files.insert(path.to_string(), id);
        } else if self.dirs.contains(path) {
            durable.files.remove(path);
            durable.dirs.insert(path.to_string());
        } else {
            durable.files.remove(path);
            if durable.dirs.remove(path) {
                durable.forget_below(path);
            }
        }
    }

    /// Makes the entries directly under `dir` durable as they are now
    /// (`dir` itself only if its own parent is synced too). A directory
    /// removed from it takes its durable subtree along.
    fn sync_entries(&mut self, dir: &str) {
        if !self.unsynced_dirs.remove(dir) {
            return;
        }
        let prefix = child_prefix(dir);
        let durable = &mut self.durable;
        // Only the entries that differ from the durable ones change: a sync
        // of a directory that holds many files (a partition's segments) is
        // frequent, and rebuilding every entry made it the simulator's
        // costliest volume call. (Not name by name through `sync_entry`:
        // comparing every name in both the durable and the current sets
        // made 40 seeds run 20 % slower, 64 s against 54 s.)
        let gone_dirs: Vec<String> = children(&durable.dirs, &prefix)
            .into_iter()
            .filter(|d| !self.dirs.contains(*d))
            .cloned()
            .collect();
        for d in &gone_dirs {
            durable.forget_below(d);
            durable.dirs.remove(d);
        }
        let gone_files: Vec<String> = children(&durable.files, &prefix)
            .into_iter()
            .filter(|f| !self.files.contains_key(*f))
            .cloned()
            .collect();
        for f in &gone_files {
            durable.files.remove(f);
        }
        for p in children(&self.files, &prefix) {
            if let Some(&id) = self.files.get(p) {
                if durable.files.get(p) != Some(&id) {
                    durable.files.insert(p.clone(), id);
                }
            }
        }
        for d in children(&self.dirs, &prefix) {
            if !durable.dirs.contains(d) {
                durable.dirs.insert(d.clone());
            }
        }
    }

    /// A power loss: each directory goes back to its synced entries, and
    /// only what hangs from the root through synced entries is left.
    /// Returns how many entries that undid.
    fn revert_entries(&mut self) -> u64 {
        let durable = &self.durable;
        let mut dirs = BTreeSet::from([String::new()]);
        // Sorted, so a parent comes before its children.
        for d in &durable.dirs {
            if dirs.contains(parent(d)) {
                dirs.insert(d.clone());
            }
        }
        let files: BTreeMap<String, u64> = durable
            .files
            .iter()
            .filter(|(p, _)| dirs.contains(parent(p)))
            .map(|(p, id)| (p.clone(), *id))
            .collect();
        // Names whose entry a power loss changes: created, removed or
        // pointed at another file since their directory's sync.
        let changed_files = self
            .files
            .keys()
            .chain(files.keys().filter(|p| !self.files.contains_key(*p)))
            .filter(|p| self.files.get(*p) != files.get(*p))
            .count();
        let undone = (changed_files + dirs.symmetric_difference(&self.dirs).count()) as u64;
        self.durable = Entries {
            dirs: dirs.clone(),
            files: files.clone(),
        };
        self.dirs = dirs;
        self.files = files;
        self.unsynced_dirs.clear();
        undone
    }

    /// `fresh`, the listing of `dir` as it is, or what the calling broker's
    /// cache still holds of it ([`ListingCache`]).
    fn listing_seen(&mut self, dir: &str, fresh: Vec<String>) -> Vec<String> {
        let broker = self.caller.as_ref().and_then(|c| c());
        let (Some(broker), Some(cache)) = (broker, self.listings.as_mut()) else {
            return fresh;
        };
        let now = (cache.now_ms)();
        let key = (broker, dir.to_string());
        if let Some((at, cached)) = cache.entries.get(&key) {
            if now.saturating_sub(*at) < cache.max_age_ms {
                let cached = cached.clone();
                if cached != fresh {
                    self.stats.stale_listings += 1;
                }
                return cached;
            }
        }
        cache.entries.insert(key, (now, fresh.clone()));
        fresh
    }

    /// The file the calling broker's lookup of `path` finds: the server's,
    /// or, within its cache's age, the version it saw before another
    /// broker replaced it ([`NameCache`]). `None` if the server has no
    /// such file (negative lookups are exact).
    fn resolve(&mut self, path: &str) -> Option<u64> {
        let current = *self.files.get(path)?;
        let broker = self.caller();
        let (Some(broker), Some(cache)) = (broker, self.names.as_mut()) else {
            return current.into();
        };
        let now = (cache.now_ms)();
        let views = cache.seen.entry(path.to_string()).or_default();
        if let Some(view) = views.get(&broker) {
            let within = view
                .replaced_at
                .is_some_and(|at| now.saturating_sub(at) < cache.max_age_ms);
            // A crash may have dropped the old inode with its last handle.
            if within && view.inode != current && self.inodes.contains_key(&view.inode) {
                self.stats.stale_file_views += 1;
                kaas_core::coverage::hit(kaas_core::coverage::Mark::StaleFileViewRead);
                tracing::debug!(broker, path, "stale file view");
                return Some(view.inode);
            }
        }
        views.insert(
            broker,
            SeenName {
                inode: current,
                replaced_at: None,
            },
        );
        Some(current)
    }

    /// Fails with `AlreadyExists` if `path` names a file or a directory.
    fn require_free(&self, path: &str) -> io::Result<()> {
        if path.is_empty() || self.dirs.contains(path) || self.files.contains_key(path) {
            return Err(err(
                io::ErrorKind::AlreadyExists,
                format!("{path:?} already exists"),
            ));
        }
        Ok(())
    }

    fn require_dir(&self, dir: &str, path: &str) -> io::Result<()> {
        if self.dirs.contains(dir) {
            Ok(())
        } else {
            Err(err(
                io::ErrorKind::NotFound,
                format!("{path}: directory {dir:?} does not exist"),
            ))
        }
    }

    /// Adds `inode` under a fresh number.
    fn new_inode(&mut self, inode: Inode) -> u64 {
        let id = self.next_inode;
        self.next_inode += 1;
        self.inodes.insert(id, inode);
        id
    }
}

impl SimVolume {
    pub fn new() -> SimVolume {
        let state = State {
            dirs: BTreeSet::from([String::new()]),
            files: BTreeMap::new(),
            durable: Entries {
                dirs: BTreeSet::from([String::new()]),
                files: BTreeMap::new(),
            },
            unsynced_dirs: BTreeSet::new(),
            entries_durable_at_once: false,
            temporaries: 0,
            inodes: BTreeMap::new(),
            next_inode: 0,
            generation: 0,
            frozen: false,
            cut_after: None,
            fault_hook: None,
            stats: VolumeStats::default(),
            caller: None,
            writers: BTreeMap::new(),
            listings: None,
            names: None,
        };
        SimVolume {
            inner: Arc::new(Inner {
                state: Mutex::new(state),
                power_cuts: watch::Sender::new(0),
                unreachable: watch::Sender::new(BTreeSet::new()),
                late_io: Arc::default(),
            }),
        }
    }

    /// Directory operations become durable when they return, as an NFS
    /// server makes them (it commits CREATE, REMOVE, RENAME and LINK to
    /// stable storage before replying), instead of once their directory
    /// is synced, as on a local file system. The multi-broker seeds share
    /// the volume over NFS.
    pub fn set_entries_durable_at_once(&self, at_once: bool) {
        let mut state = self.state();
        state.entries_durable_at_once = at_once;
        if at_once {
            state.unsynced_dirs.clear();
            state.durable = Entries {
                dirs: state.dirs.clone(),
                files: state.files.clone(),
            };
        }
    }

    /// Tells the volume how to know which broker issues an operation.
    /// Models each broker's NFS directory-listing cache ([`ListingCache`]):
    /// a listing is answered from the caller's cache for up to
    /// `max_age_ms` of `now_ms` (the simulation's clock). Needs a caller
    /// ([`set_caller`](Self::set_caller)); 0 turns it off.
    pub fn set_listing_cache(&self, max_age_ms: u64, now_ms: Box<dyn Fn() -> u64 + Send>) {
        self.state().listings = (max_age_ms > 0).then(|| ListingCache {
            max_age_ms,
            now_ms,
            entries: BTreeMap::new(),
        });
    }

    /// Models each broker's NFS name and attribute caches ([`NameCache`]):
    /// a broker that looked a name up may read, for up to `max_age_ms` of
    /// `now_ms` after another broker replaced it by a rename, the version
    /// it found before. Needs a caller ([`set_caller`](Self::set_caller));
    /// 0 turns it off (every lookup exact).
    pub fn set_attr_cache(&self, max_age_ms: u64, now_ms: Box<dyn Fn() -> u64 + Send>) {
        self.state().names = (max_age_ms > 0).then(|| NameCache {
            max_age_ms,
            now_ms,
            seen: BTreeMap::new(),
        });
    }

    pub fn set_caller(&self, caller: Option<CallerId>) {
        self.state().caller = caller;
    }

    /// Cuts broker `broker` off from the volume (`true`), or heals its
    /// link. While cut off its operations fail (and its IO runner's jobs
    /// wait); the other brokers' go on.
    pub fn set_unreachable(&self, broker: usize, cut: bool) {
        self.inner.unreachable.send_modify(|s| {
            if cut {
                s.insert(broker);
            } else {
                s.remove(&broker);
            }
        });
    }

    /// Whether broker `broker` is cut off from the volume now.
    pub fn is_unreachable(&self, broker: usize) -> bool {
        self.inner.unreachable.borrow().contains(&broker)
    }

    /// A receiver of the set of brokers cut off, for an IO runner to wait
    /// on.
    pub fn watch_unreachable(&self) -> watch::Receiver<BTreeSet<usize>> {
        self.inner.unreachable.subscribe()
    }

    /// The counter of IO jobs that ran late, after their broker's link
    /// healed: an IO runner adds to it.
    pub fn late_io_counter(&self) -> Arc<std::sync::atomic::AtomicU64> {
        self.inner.late_io.clone()
    }

    /// Per file: the brokers that changed it (created, appended to,
    /// replaced, truncated, removed), and how.
    pub fn writers(&self) -> BTreeMap<String, BTreeSet<(usize, FaultPoint)>> {
        self.state().writers.clone()
    }

    /// Fails the operation if the broker issuing it is cut off.
    fn reachable(&self, state: &mut State) -> io::Result<()> {
        let Some(broker) = state.caller.as_ref().and_then(|c| c()) else {
            return Ok(());
        };
        if self.inner.unreachable.borrow().contains(&broker) {
            state.stats.unreachable_failures += 1;
            return Err(err(
                io::ErrorKind::Other,
                format!("broker {broker} cannot reach the volume (simulated network partition)"),
            ));
        }
        Ok(())
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Every update below completes before the guard drops; a panic
        // in a fault hook cannot leave the tables half-changed.
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs a mutation's check and, if an armed power cut fires on it,
    /// tells waiters (after the lock is released) and fails the operation.
    fn mutation(&self, state: &mut State, point: FaultPoint, path: &str) -> io::Result<()> {
        self.file_mutation(state, point, path, (0, 0))
    }

    fn file_mutation(
        &self,
        state: &mut State,
        point: FaultPoint,
        path: &str,
        file: (u64, u64),
    ) -> io::Result<()> {
        if state.check_mutation(point, path, file)? {
            self.inner.power_cuts.send_modify(|n| *n += 1);
            return Err(err(io::ErrorKind::Other, "simulated power cut"));
        }
        Ok(())
    }

    /// Power failure: drops every unsynced byte, kills every open handle.
    pub fn crash(&self) -> CrashReport {
        self.crash_with(None)
    }

    /// Power failure with torn writes: each file keeps a random prefix of
    /// its unsynced tail (none, some or all of it), and the kept part
    /// sometimes ends in zeros instead of the data written there.
    pub fn crash_torn(&self, rng: &mut dyn RngCore) -> CrashReport {
        self.crash_with(Some(rng))
    }

    /// Power failure in the middle of the latest writes: every unsynced
    /// byte reached the disk but for a random suffix of each file's latest
    /// append, which reads as zeros (the file's size was durable, the last
    /// sectors of its data not). The crash a buggify point asks for at a
    /// write: the write it follows torn inside itself, as a 34-byte
    /// aborted-index entry is torn with its producer id whole and its
    /// offsets zeroed.
    pub fn crash_tearing_last_writes(&self, rng: &mut dyn RngCore) -> CrashReport {
        let mut state = self.state();
        let mut report = CrashReport::default();
        for inode in state.inodes.values_mut() {
            let unsynced = inode.data.len() - inode.synced;
            if unsynced == 0 {
                continue;
            }
            report.files_with_unsynced += 1;
            let start = inode.last_append.max(inode.synced);
            let torn = inode.data.len() - start;
            let zeroed = if torn > 0 { rng.gen_range(1..=torn) } else { 0 };
            let end = inode.data.len();
            inode.data[end - zeroed..].fill(0);
            inode.synced = end;
            inode.dirty_by = None;
            report.bytes_kept += unsynced as u64;
            report.bytes_zeroed += zeroed as u64;
        }
        drop(state);
        // The rest as any power failure: every unsynced byte is now
        // written (torn as above), so nothing more is lost.
        let mut rest = self.crash_with(None);
        rest.files_with_unsynced = report.files_with_unsynced;
        rest.bytes_kept = report.bytes_kept;
        rest.bytes_zeroed += report.bytes_zeroed;
        rest
    }

    fn crash_with(&self, mut rng: Option<&mut dyn RngCore>) -> CrashReport {
        let mut state = self.state();
        let mut report = CrashReport {
            entries_undone: state.revert_entries(),
            ..CrashReport::default()
        };
        let reachable: BTreeSet<u64> = state.files.values().copied().collect();
        state.inodes.retain(|id, _| reachable.contains(id));
        // Every client went down with the power: their caches are empty.
        if let Some(names) = state.names.as_mut() {
            names.seen.clear();
        }
        for inode in state.inodes.values_mut() {
            for (start, end) in std::mem::take(&mut inode.poisoned) {
                let end = end.min(inode.synced);
                if start < end {
                    inode.data[start..end].fill(0);
                    report.bytes_poisoned += (end - start) as u64;
                }
            }
            let unsynced = inode.data.len() - inode.synced;
            if unsynced == 0 {
                continue;
            }
            report.files_with_unsynced += 1;
            let (keep, zeroed) = match rng.as_mut() {
                None => (0, 0),
                Some(rng) => {
                    let keep = match rng.gen_range(0..3) {
                        0 => 0,
                        1 => rng.gen_range(0..=unsynced),
                        _ => unsynced,
                    };
                    let zeroed = if keep > 0 && rng.gen_ratio(1, 4) {
                        rng.gen_range(1..=keep)
                    } else {
                        0
                    };
                    (keep, zeroed)
                }
            };
            let end = inode.synced + keep;
            inode.data.truncate(end);
            inode.data[end - zeroed..].fill(0);
            // What is on the disk after the reboot stays there.
            inode.synced = end;
            inode.dirty_by = None;
            report.bytes_dropped += (unsynced - keep) as u64;
            report.bytes_kept += keep as u64;
            report.bytes_zeroed += zeroed as u64;
        }
        state.generation += 1;
        state.frozen = false;
        state.cut_after = None;
        state.stats.crashes += 1;
        report
    }

    /// One broker's host dies (kill -9, or its machine): what its NFS
    /// client had not written back to the server is lost, every other
    /// broker's data stays. With `rng`, a seeded prefix of each of its
    /// unsynced tails had been written back before the crash and survives
    /// (never zeros: the server stores what it was sent). The server does
    /// not crash, so open handles of the other brokers live on; the dead
    /// broker's went with its node.
    pub fn crash_host(&self, broker: usize, mut rng: Option<&mut dyn RngCore>) -> CrashReport {
        let mut state = self.state();
        let mut report = CrashReport::default();
        // Its NFS client's caches died with the host.
        if let Some(names) = state.names.as_mut() {
            for views in names.seen.values_mut() {
                views.remove(&broker);
            }
        }
        for inode in state.inodes.values_mut() {
            if inode.dirty_by != Some(broker) {
                continue;
            }
            let unsynced = inode.data.len() - inode.synced;
            report.files_with_unsynced += 1;
            let keep = rng.as_mut().map_or(0, |rng| match rng.gen_range(0..3) {
                0 => 0,
                1 => rng.gen_range(0..=unsynced),
                _ => unsynced,
            });
            let end = inode.synced + keep;
            inode.data.truncate(end);
            inode.synced = end;
            inode.dirty_by = None;
            report.bytes_dropped += (unsynced - keep) as u64;
            report.bytes_kept += keep as u64;
        }
        state.stats.host_crashes += 1;
        report
    }

    /// The broker process of a single-broker seed dies (kill -9) and its
    /// machine does not: every unsynced byte stays in the page cache,
    /// readable by the next process and still unsynced, so a later power
    /// failure ([`crash`](Self::crash)) can lose it. Handles opened before
    /// the kill fail every later call (a new generation: the dead process's
    /// state can never write into its successor's files), and inodes only
    /// those handles reached go with them. The report counts what stayed
    /// unsynced (`bytes_kept`); nothing is dropped or zeroed.
    pub fn kill_process(&self) -> CrashReport {
        let mut state = self.state();
        // Named now, or by a directory entry a power loss would bring back.
        let reachable: BTreeSet<u64> = state
            .files
            .values()
            .chain(state.durable.files.values())
            .copied()
            .collect();
        state.inodes.retain(|id, _| reachable.contains(id));
        let report = unsynced_kept(state.inodes.values(), |_| true);
        state.generation += 1;
        state.stats.process_kills += 1;
        report
    }

    /// Broker `broker`'s process of a multi-broker seed dies, its machine
    /// and the NFS server do not. Its files are closed, and an NFS client
    /// writes a file's dirty pages back to the server on close
    /// (close-to-open): its unsynced tail becomes visible to every broker
    /// but stays unsynced on the server, which a later power failure of
    /// the volume ([`crash`](Self::crash)) can still lose. No new
    /// generation: that would kill the other brokers' handles, which live
    /// on; the dead broker's handles went with its node, as in
    /// [`crash_host`](Self::crash_host).
    pub fn kill_process_on_nfs(&self, broker: usize) -> CrashReport {
        let mut state = self.state();
        let report = unsynced_kept(state.inodes.values(), |i| i.dirty_by == Some(broker));
        for inode in state.inodes.values_mut() {
            if inode.dirty_by == Some(broker) {
                inode.dirty_by = None;
            }
        }
        state.stats.process_kills += 1;
        report
    }

    /// Arms a power cut: the `ops`-th mutation from now (0 = the next one)
    /// fails and freezes the volume until the next crash.
    pub fn power_cut_after(&self, ops: u64) {
        self.state().cut_after = Some(ops);
    }

    /// Disarms a power cut that has not fired.
    pub fn disarm_power_cut(&self) {
        self.state().cut_after = None;
    }

    /// True while a power cut has frozen the volume.
    pub fn is_frozen(&self) -> bool {
        self.state().frozen
    }

    /// A receiver that changes whenever a power cut fires.
    pub fn watch_power_cuts(&self) -> watch::Receiver<u64> {
        self.inner.power_cuts.subscribe()
    }

    /// Installs (or removes) the fault hook.
    pub fn set_fault_hook(&self, hook: Option<FaultHook>) {
        self.state().fault_hook = hook;
    }

    pub fn stats(&self) -> VolumeStats {
        self.state().stats
    }

    /// `(length, synced length)` of a file, for tests and failure reports.
    pub fn file_lengths(&self, path: &str) -> Option<(usize, usize)> {
        let path = normalize(path).ok()?;
        let state = self.state();
        let inode = state.inodes.get(state.files.get(&path)?)?;
        Some((inode.data.len(), inode.synced))
    }

    /// Every file with its length and synced length, for failure reports.
    pub fn describe(&self) -> String {
        let state = self.state();
        let mut out = String::new();
        for (path, id) in &state.files {
            if let Some(inode) = state.inodes.get(id) {
                out.push_str(&format!(
                    "{path}: {} bytes ({} synced)\n",
                    inode.data.len(),
                    inode.synced
                ));
            }
        }
        out
    }
}

/// What a process kill left unsynced in the page cache, of the inodes
/// `whose` picks: kept (readable), neither dropped nor zeroed.
fn unsynced_kept<'a>(
    inodes: impl Iterator<Item = &'a Inode>,
    whose: impl Fn(&Inode) -> bool,
) -> CrashReport {
    let mut report = CrashReport::default();
    for inode in inodes.filter(|i| whose(i) && i.data.len() > i.synced) {
        report.files_with_unsynced += 1;
        report.bytes_kept += (inode.data.len() - inode.synced) as u64;
    }
    report
}

impl Volume for SimVolume {
    fn read(&self, path: &str) -> io::Result<Option<Bytes>> {
        let path = normalize(path)?;
        let mut state = self.state();
        self.reachable(&mut state)?;
        state.check(FaultPoint::Read, &path)?;
        if state.dirs.contains(&path) {
            return Err(err(
                io::ErrorKind::Other,
                format!("{path:?} is a directory"),
            ));
        }
        let Some(id) = state.resolve(&path) else {
            return Ok(None);
        };
        let caller = state.caller();
        Ok(state
            .inodes
            .get(&id)
            .map(|inode| Bytes::copy_from_slice(&inode.data[..inode.visible_len(caller)])))
    }

    fn temporary_name(&self, path: &str) -> io::Result<String> {
        let path = normalize(path)?;
        let mut state = self.state();
        state.temporaries += 1;
        temporary_beside(&path, 0, state.temporaries)
    }

    /// A new inode whose whole content is an unsynced tail (the caller's
    /// dirty pages), under a name that is not durable yet.
    fn write_new(&self, path: &str, data: &[u8]) -> io::Result<()> {
        let path = normalize(path)?;
        let mut state = self.state();
        self.reachable(&mut state)?;
        self.mutation(&mut state, FaultPoint::WriteNew, &path)?;
        state.require_dir(parent(&path), &path)?;
        state.require_free(&path)?;
        let inode = Inode {
            data: data.to_vec(),
            dirty_by: state.caller().filter(|_| !data.is_empty()),
            ..Inode::default()
        };
        let id = state.new_inode(inode);
        state.files.insert(path.clone(), id);
        state.wrote(&path, FaultPoint::WriteNew);
        Ok(())
    }

    /// The same fsync as a handle's ([`SegmentFile::sync`]), of the file
    /// the name points at now.
    fn sync_file(&self, path: &str) -> io::Result<()> {
        let path = normalize(path)?;
        let mut state = self.state();
        self.reachable(&mut state)?;
        let Some(&id) = state.files.get(&path) else {
            return Err(err(
                io::ErrorKind::NotFound,
                format!("{path} does not exist"),
            ));
        };
        let file = state.inodes.get(&id).map_or((0, 0), |i| {
            (i.data.len() as u64, (i.data.len() - i.synced) as u64)
        });
        let checked = self.file_mutation(&mut state, FaultPoint::Sync, &path, file);
        let caller = state.caller();
        let State { inodes, stats, .. } = &mut *state;
        if let Some(inode) = inodes.get_mut(&id) {
            match &checked {
                Ok(()) => inode.sync(caller, stats),
                Err(e) => inode.failed_sync(e),
            }
        }
        checked
    }

    /// The name check and the creation are one step under the volume's
    /// lock: of concurrent creators exactly one wins.
    fn link(&self, from: &str, to: &str) -> io::Result<()> {
        let (from, to) = (normalize(from)?, normalize(to)?);
        let mut state = self.state();
        self.reachable(&mut state)?;
        self.mutation(&mut state, FaultPoint::Link, &to)?;
        let Some(&id) = state.files.get(&from) else {
            return Err(err(
                io::ErrorKind::NotFound,
                format!("{from} does not exist"),
            ));
        };
        state.require_dir(parent(&to), &to)?;
        state.require_free(&to)?;
        state.files.insert(to.clone(), id);
        state.wrote(&to, FaultPoint::Link);
        Ok(())
    }

    fn list(&self, dir: &str) -> io::Result<Vec<String>> {
        let dir = normalize(dir)?;
        let mut state = self.state();
        self.reachable(&mut state)?;
        state.check(FaultPoint::List, &dir)?;
        if state.files.contains_key(&dir) {
            return Err(err(
                io::ErrorKind::Other,
                format!("{dir:?} is not a directory"),
            ));
        }
        if !state.dirs.contains(&dir) {
            return Ok(Vec::new());
        }
        let prefix = child_prefix(&dir);
        let mut names: Vec<String> = children(&state.files, &prefix)
            .into_iter()
            .chain(children(&state.dirs, &prefix))
            .map(|p| p[prefix.len()..].to_string())
            .filter(|name| !is_temporary(name))
            .collect();
        names.sort();
        Ok(state.listing_seen(&dir, names))
    }

    fn create_dir(&self, dir: &str) -> io::Result<bool> {
        let dir = normalize(dir)?;
        let mut state = self.state();
        self.reachable(&mut state)?;
        if state.dirs.contains(&dir) {
            // Nothing to do; not a mutation, as in `LocalVolume`.
            state.check(FaultPoint::CreateDir, &dir)?;
            return Ok(false);
        }
        self.mutation(&mut state, FaultPoint::CreateDir, &dir)?;
        state.require_dir(parent(&dir), &dir)?;
        state.require_free(&dir)?;
        state.dirs.insert(dir.clone());
        state.changed_entry(&dir);
        if !state.entries_durable_at_once {
            state.unsynced_dirs.insert(dir);
        }
        Ok(true)
    }

    fn sync_dir(&self, dir: &str) -> io::Result<()> {
        let dir = normalize(dir)?;
        let mut state = self.state();
        self.reachable(&mut state)?;
        self.mutation(&mut state, FaultPoint::SyncDir, &dir)?;
        state.sync_entries(&dir);
        Ok(())
    }

    /// Moves the inode from `from` to `to`; a replaced `to` inode stays
    /// alive for the handles open on it. Neither the entries nor the data
    /// are made durable: the moved inode keeps its synced length (and its
    /// writer's dirty tail), and a power loss before the directory's sync
    /// undoes the move. For the one-writer record, `to` is written by
    /// the caller (`FaultPoint::Rename`) and `from` removed by it
    /// (`FaultPoint::Remove`: a name renamed away is gone like a removed
    /// one, which any broker may do to another's file).
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        let (from, to) = (normalize(from)?, normalize(to)?);
        let mut state = self.state();
        self.reachable(&mut state)?;
        self.mutation(&mut state, FaultPoint::Rename, &to)?;
        if from.is_empty() || state.dirs.contains(&from) {
            return Err(err(
                io::ErrorKind::Other,
                format!("{from:?} is a directory"),
            ));
        }
        let Some(&id) = state.files.get(&from) else {
            return Err(err(
                io::ErrorKind::NotFound,
                format!("{from} does not exist"),
            ));
        };
        state.require_dir(parent(&to), &to)?;
        if to.is_empty() || state.dirs.contains(&to) {
            return Err(err(io::ErrorKind::Other, format!("{to:?} is a directory")));
        }
        if from != to {
            state.files.remove(&from);
            let replaced = state.files.insert(to.clone(), id);
            let caller = state.caller();
            if let Some(names) = state.names.as_mut() {
                names.forget(&from);
                if replaced.is_some() {
                    names.replaced(&to, caller, id);
                }
            }
            state.wrote(&from, FaultPoint::Remove);
            state.wrote(&to, FaultPoint::Rename);
        }
        state.stats.renames += 1;
        Ok(())
    }

    fn remove(&self, path: &str) -> io::Result<()> {
        let path = normalize(path)?;
        let mut state = self.state();
        self.reachable(&mut state)?;
        self.mutation(&mut state, FaultPoint::Remove, &path)?;
        if state.dirs.contains(&path) {
            return Err(err(
                io::ErrorKind::Other,
                format!("{path:?} is a directory"),
            ));
        }
        if state.files.remove(&path).is_some() {
            if let Some(names) = state.names.as_mut() {
                names.forget(&path);
            }
            state.wrote(&path, FaultPoint::Remove);
        }
        Ok(())
    }

    fn remove_dir_all(&self, dir: &str) -> io::Result<()> {
        let dir = normalize(dir)?;
        if dir.is_empty() {
            return Err(err(
                io::ErrorKind::InvalidInput,
                "refusing to remove the volume root",
            ));
        }
        let mut state = self.state();
        self.reachable(&mut state)?;
        self.mutation(&mut state, FaultPoint::RemoveDirAll, &dir)?;
        if state.files.contains_key(&dir) {
            return Err(err(
                io::ErrorKind::Other,
                format!("{dir:?} is not a directory"),
            ));
        }
        let State { files, dirs, .. } = &mut *state;
        forget_subtree(files, dirs, &dir);
        dirs.remove(&dir);
        if let Some(names) = state.names.as_mut() {
            names.forget_below(&dir);
        }
        state.changed_entry(&dir);
        let broker = state.caller.as_ref().and_then(|c| c());
        if let (Some(broker), Some(cache)) = (broker, state.listings.as_mut()) {
            cache
                .entries
                .retain(|(b, d), _| *b != broker || (d != &dir && !is_below(d, &dir)));
        }
        Ok(())
    }

    fn open_segment(&self, path: &str, create: bool) -> io::Result<Arc<dyn SegmentFile>> {
        let path = normalize(path)?;
        let mut state = self.state();
        self.reachable(&mut state)?;
        let existing = state.resolve(&path);
        let created = existing.is_none() && create;
        let inode = match (existing, create) {
            (Some(id), _) => {
                state.check(FaultPoint::OpenSegment, &path)?;
                id
            }
            (None, false) => {
                state.check(FaultPoint::OpenSegment, &path)?;
                return Err(err(
                    io::ErrorKind::NotFound,
                    format!("{path} does not exist"),
                ));
            }
            (None, true) => {
                self.mutation(&mut state, FaultPoint::OpenSegment, &path)?;
                state.require_dir(parent(&path), &path)?;
                if path.is_empty() || state.dirs.contains(&path) {
                    return Err(err(
                        io::ErrorKind::Other,
                        format!("{path:?} is a directory"),
                    ));
                }
                let id = state.new_inode(Inode::default());
                state.files.insert(path.clone(), id);
                state.wrote(&path, FaultPoint::OpenSegment);
                id
            }
        };
        Ok(Arc::new(SimSegment {
            volume: self.clone(),
            path,
            inode,
            generation: state.generation,
            entry_unsynced: std::sync::atomic::AtomicBool::new(created),
        }))
    }
}

/// An open file. Its path is kept only for fault hooks and messages: after
/// a replace or remove it still refers to the inode it opened.
struct SimSegment {
    volume: SimVolume,
    path: String,
    inode: u64,
    generation: u64,
    /// This handle created its file, and no sync of it has returned yet:
    /// the first one syncs the directory too (the `open_segment` contract).
    entry_unsynced: std::sync::atomic::AtomicBool,
}

impl SimSegment {
    /// After a sync or truncate of this handle returned: the first one of a
    /// handle that created its file makes the file's name durable.
    fn entry_synced(&self) {
        if self
            .entry_unsynced
            .swap(false, std::sync::atomic::Ordering::AcqRel)
        {
            self.volume.state().sync_entries(parent(&self.path));
        }
    }

    /// Runs `f` on this handle's inode, failing if the handle outlived a
    /// crash (its broker is dead) or the fault hook says so.
    fn with_inode<T>(
        &self,
        point: FaultPoint,
        f: impl FnOnce(&mut Inode, &mut VolumeStats, Option<usize>) -> io::Result<T>,
    ) -> io::Result<T> {
        let mut state = self.volume.state();
        self.volume.reachable(&mut state)?;
        if state.generation != self.generation {
            return Err(err(
                io::ErrorKind::Other,
                format!(
                    "{}: handle opened before a crash or a process kill",
                    self.path
                ),
            ));
        }
        let file = state.inodes.get(&self.inode).map_or((0, 0), |i| {
            (i.data.len() as u64, (i.data.len() - i.synced) as u64)
        });
        match point {
            FaultPoint::ReadAt => state.check_file(point, &self.path, file)?,
            _ => self
                .volume
                .file_mutation(&mut state, point, &self.path, file)?,
        }
        let caller = state.caller();
        let State { inodes, stats, .. } = &mut *state;
        let inode = inodes.get_mut(&self.inode).ok_or_else(|| {
            err(
                io::ErrorKind::Other,
                format!("{}: inode vanished", self.path),
            )
        })?;
        let result = f(inode, stats, caller)?;
        if matches!(point, FaultPoint::Append | FaultPoint::Truncate) {
            state.wrote(&self.path, point);
        }
        Ok(result)
    }
}

impl SegmentFile for SimSegment {
    fn len(&self) -> u64 {
        let state = self.volume.state();
        let caller = state.caller();
        state
            .inodes
            .get(&self.inode)
            .map_or(0, |i| i.visible_len(caller) as u64)
    }

    fn append(&self, data: &[u8]) -> io::Result<u64> {
        self.with_inode(FaultPoint::Append, |inode, stats, caller| {
            let pos = inode.data.len() as u64;
            inode.last_append = inode.data.len();
            inode.data.extend_from_slice(data);
            if caller.is_some() && !data.is_empty() {
                inode.dirty_by = caller;
            }
            stats.appends += 1;
            stats.bytes_appended += data.len() as u64;
            Ok(pos)
        })
    }

    fn read_at(&self, pos: u64, len: usize) -> io::Result<Bytes> {
        self.with_inode(FaultPoint::ReadAt, |inode, _, caller| {
            let visible = inode.visible_len(caller);
            let start = usize::try_from(pos).map_or(visible, |p| p.min(visible));
            let end = start.saturating_add(len).min(visible);
            Ok(Bytes::copy_from_slice(&inode.data[start..end]))
        })
    }

    fn sync(&self) -> io::Result<()> {
        let result = self.with_inode(FaultPoint::Sync, |inode, stats, caller| {
            inode.sync(caller, stats);
            Ok(())
        });
        match &result {
            Ok(()) => self.entry_synced(),
            Err(e) => {
                let mut state = self.volume.state();
                if let Some(inode) = state.inodes.get_mut(&self.inode) {
                    inode.failed_sync(e);
                }
            }
        }
        result
    }

    fn truncate(&self, len: u64) -> io::Result<()> {
        self.with_inode(FaultPoint::Truncate, |inode, stats, _| {
            let len = usize::try_from(len)
                .map_err(|_| err(io::ErrorKind::InvalidInput, "length too large"))?;
            // Like set_len: shrinking cuts, growing pads with zeros; the
            // contract makes the result durable.
            inode.data.resize(len, 0);
            inode.synced = len;
            inode.dirty_by = None;
            stats.truncates += 1;
            Ok(())
        })?;
        self.entry_synced();
        Ok(())
    }

    fn free_tail(&self, len: u64) -> io::Result<()> {
        // Modelled as a cut that reached the disk at once. Of a crash's two
        // outcomes, whole or cut, the whole file is one never cut, which
        // every seed meets anyway; the cut is the one worth reaching.
        self.with_inode(FaultPoint::Truncate, |inode, stats, _| {
            let len = usize::try_from(len).unwrap_or(usize::MAX);
            if len < inode.data.len() {
                inode.data.truncate(len);
                inode.synced = inode.synced.min(len);
                inode.last_append = inode.last_append.min(len);
                inode.poisoned.retain(|&(from, _)| from < len);
                for range in &mut inode.poisoned {
                    range.1 = range.1.min(len);
                }
                stats.tails_freed += 1;
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    /// A volume whose operations are issued by the broker `who` holds.
    #[test]
    fn a_listing_cache_shows_other_brokers_changes_late_and_its_own_at_once() {
        let (v, who) = volume_with_caller();
        let clock = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let now = clock.clone();
        v.set_listing_cache(
            100,
            Box::new(move || now.load(std::sync::atomic::Ordering::SeqCst)),
        );
        let as_broker = |b: usize| who.store(b, std::sync::atomic::Ordering::SeqCst);
        let at = |ms: u64| clock.store(ms, std::sync::atomic::Ordering::SeqCst);
        as_broker(0);
        v.create_dir_all("d").unwrap();
        assert!(v.list("d").unwrap().is_empty());
        as_broker(1);
        assert!(
            v.list("d").unwrap().is_empty(),
            "broker 1 caches its listing"
        );
        v.create_exclusive("d/a", b"1").unwrap();
        assert_eq!(v.list("d").unwrap(), ["a"], "its own creation at once");
        as_broker(0);
        at(99);
        assert!(v.list("d").unwrap().is_empty(), "broker 0 sees it late");
        assert_eq!(
            v.read("d/a").unwrap().as_deref(),
            Some(&b"1"[..]),
            "lookups are exact"
        );
        at(100);
        assert_eq!(
            v.list("d").unwrap(),
            ["a"],
            "after max_age the listing is fresh"
        );
        as_broker(1);
        v.remove("d/a").unwrap();
        as_broker(0);
        at(150);
        assert_eq!(v.list("d").unwrap(), ["a"], "a removal shows late too");
        assert!(v.stats().stale_listings >= 2);
    }

    /// A volume with brokers' name caches of `max_age_ms`: the broker
    /// issuing operations and the clock are set through the closures.
    fn volume_with_attr_cache(max_age_ms: u64) -> (SimVolume, impl Fn(usize), impl Fn(u64)) {
        let (v, who) = volume_with_caller();
        let clock = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let now = clock.clone();
        v.set_attr_cache(
            max_age_ms,
            Box::new(move || now.load(std::sync::atomic::Ordering::SeqCst)),
        );
        let as_broker = move |b: usize| who.store(b, std::sync::atomic::Ordering::SeqCst);
        let at = move |ms: u64| clock.store(ms, std::sync::atomic::Ordering::SeqCst);
        (v, as_broker, at)
    }

    fn read_str(v: &SimVolume, path: &str) -> Option<String> {
        v.read(path)
            .unwrap()
            .map(|b| String::from_utf8_lossy(&b).into_owned())
    }

    /// Broker 0 writes "f" = "1", broker 1 reads it (caching the name),
    /// broker 0 replaces it with "2"; broker 0 is left issuing.
    fn seen_then_replaced(v: &SimVolume, as_broker: &impl Fn(usize)) {
        as_broker(0);
        v.write_atomic("f", b"1").unwrap();
        as_broker(1);
        assert_eq!(read_str(v, "f").as_deref(), Some("1"));
        as_broker(0);
        v.write_atomic("f", b"2").unwrap();
    }

    #[test]
    fn another_broker_reads_a_renamed_over_file_as_it_was_until_its_cache_ages_out() {
        let (v, as_broker, at) = volume_with_attr_cache(100);
        at(10);
        seen_then_replaced(&v, &as_broker);
        as_broker(1);
        at(109);
        assert_eq!(
            read_str(&v, "f").as_deref(),
            Some("1"),
            "stale within the age"
        );
        let stale = v.open_segment("f", false).unwrap();
        assert_eq!(
            &stale.read_at(0, 10).unwrap()[..],
            b"1",
            "an open resolves alike"
        );
        at(110);
        assert_eq!(read_str(&v, "f").as_deref(), Some("2"), "fresh after it");
        assert_eq!(v.stats().stale_file_views, 2);
    }

    #[test]
    fn the_renaming_broker_reads_its_own_replacement_at_once() {
        let (v, as_broker, _at) = volume_with_attr_cache(100);
        as_broker(0);
        v.write_atomic("f", b"old").unwrap();
        assert_eq!(read_str(&v, "f").as_deref(), Some("old"));
        as_broker(1);
        assert_eq!(read_str(&v, "f").as_deref(), Some("old"));
        v.write_atomic("f", b"new").unwrap();
        assert_eq!(read_str(&v, "f").as_deref(), Some("new"));
        as_broker(0);
        assert_eq!(
            read_str(&v, "f").as_deref(),
            Some("old"),
            "the other one lags"
        );
        v.write_atomic("f", b"newer").unwrap();
        assert_eq!(read_str(&v, "f").as_deref(), Some("newer"));
    }

    #[test]
    fn a_name_never_looked_up_before_is_read_as_the_server_has_it() {
        let (v, as_broker, _at) = volume_with_attr_cache(100);
        as_broker(0);
        v.write_atomic("f", b"1").unwrap();
        v.write_atomic("f", b"2").unwrap();
        as_broker(1);
        assert_eq!(read_str(&v, "f").as_deref(), Some("2"));
        as_broker(2);
        assert_eq!(read_str(&v, "g"), None, "a missing name is looked up");
        as_broker(0);
        v.write_atomic("g", b"new").unwrap();
        as_broker(2);
        assert_eq!(
            read_str(&v, "g").as_deref(),
            Some("new"),
            "negative lookups are not cached"
        );
        assert_eq!(v.stats().stale_file_views, 0);
    }

    #[test]
    fn an_exclusive_create_and_a_removal_are_seen_exactly_by_every_broker() {
        let (v, as_broker, _at) = volume_with_attr_cache(100);
        as_broker(1);
        assert_eq!(read_str(&v, "claim"), None);
        as_broker(0);
        v.create_exclusive("claim", b"0").unwrap();
        as_broker(1);
        assert_eq!(read_str(&v, "claim").as_deref(), Some("0"));
        let lost = v.create_exclusive("claim", b"1").unwrap_err();
        assert_eq!(lost.kind(), io::ErrorKind::AlreadyExists);
        as_broker(0);
        v.write_atomic("f", b"1").unwrap();
        as_broker(1);
        assert_eq!(read_str(&v, "f").as_deref(), Some("1"));
        as_broker(0);
        v.remove("f").unwrap();
        as_broker(1);
        assert_eq!(read_str(&v, "f"), None, "a removed name is gone at once");
        assert_eq!(v.stats().stale_file_views, 0);
    }

    #[test]
    fn no_version_outlives_its_replacement_by_more_than_the_cache_age() {
        let (v, as_broker, at) = volume_with_attr_cache(100);
        seen_then_replaced(&v, &as_broker);
        at(60);
        v.write_atomic("f", b"3").unwrap();
        as_broker(1);
        at(99);
        assert_eq!(read_str(&v, "f").as_deref(), Some("1"));
        at(100);
        assert_eq!(
            read_str(&v, "f").as_deref(),
            Some("3"),
            "version 1 was replaced at 0, not at 60"
        );
    }

    #[test]
    fn a_host_crash_empties_its_brokers_cache() {
        let (v, as_broker, _at) = volume_with_attr_cache(100);
        seen_then_replaced(&v, &as_broker);
        v.crash_host(1, None);
        as_broker(1);
        assert_eq!(read_str(&v, "f").as_deref(), Some("2"));
    }

    #[test]
    fn with_no_attribute_cache_every_lookup_is_exact() {
        let (v, as_broker, _at) = volume_with_attr_cache(0);
        seen_then_replaced(&v, &as_broker);
        as_broker(1);
        assert_eq!(read_str(&v, "f").as_deref(), Some("2"));
        assert_eq!(v.stats().stale_file_views, 0);
    }

    #[test]
    fn unsynced_appends_are_the_writers_alone_and_die_with_its_host() {
        let (v, who) = volume_with_caller();
        let as_broker = |b: usize| who.store(b, std::sync::atomic::Ordering::SeqCst);
        as_broker(0);
        v.create_dir_all("d").unwrap();
        let f = v.open_segment("d/s", true).unwrap();
        f.append(b"synced").unwrap();
        f.sync().unwrap();
        f.append(b"+dirty").unwrap();
        assert_eq!(f.len(), 12, "the writer reads its own dirty pages");
        as_broker(1);
        let g = v.open_segment("d/s", false).unwrap();
        assert_eq!(g.len(), 6, "another client sees what was written back");
        assert_eq!(&g.read_at(0, 100).unwrap()[..], b"synced");
        g.sync().unwrap();
        as_broker(0);
        assert_eq!(f.len(), 12, "another client's fsync cannot write them back");
        // A crash of another host changes nothing here.
        assert_eq!(v.crash_host(1, None).bytes_dropped, 0);
        assert_eq!(f.len(), 12);
        let report = v.crash_host(0, None);
        assert_eq!((report.files_with_unsynced, report.bytes_dropped), (1, 6));
        as_broker(1);
        assert_eq!(
            &g.read_at(0, 100).unwrap()[..],
            b"synced",
            "broker 1's handle lives on"
        );
        // Written back by the fsync: everyone sees it, no host crash loses it.
        as_broker(0);
        let f = v.open_segment("d/s", false).unwrap();
        f.append(b"+more").unwrap();
        f.sync().unwrap();
        assert_eq!(v.crash_host(0, None).bytes_dropped, 0);
        as_broker(1);
        assert_eq!(&g.read_at(0, 100).unwrap()[..], b"synced+more");
    }

    #[test]
    fn a_torn_host_crash_keeps_a_written_back_prefix_never_zeros() {
        use rand::SeedableRng;
        let (v, who) = volume_with_caller();
        who.store(2, std::sync::atomic::Ordering::SeqCst);
        v.create_dir_all("d").unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for round in 0..20u8 {
            let f = v.open_segment(&format!("d/s{round}"), true).unwrap();
            f.append(&[round + 1; 64]).unwrap();
            let report = v.crash_host(2, Some(&mut rng));
            assert_eq!(report.bytes_dropped + report.bytes_kept, 64);
            assert_eq!(report.bytes_zeroed, 0);
            let left = f.read_at(0, 64).unwrap();
            assert!(left.iter().all(|&b| b == round + 1), "{left:?}");
            assert_eq!(
                v.crash_host(2, None).bytes_dropped,
                0,
                "what survived is on the server"
            );
        }
    }

    fn volume_with_caller() -> (SimVolume, Arc<std::sync::atomic::AtomicUsize>) {
        let v = SimVolume::new();
        let who = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let w = who.clone();
        v.set_caller(Some(Box::new(move || {
            Some(w.load(std::sync::atomic::Ordering::Relaxed))
        })));
        (v, who)
    }

    #[test]
    fn a_broker_cut_off_fails_while_the_others_go_on() {
        let (v, who) = volume_with_caller();
        let f = v.open_segment("s", true).unwrap();
        f.append(b"a").unwrap();
        f.sync().unwrap();
        v.set_unreachable(0, true);
        assert!(v.is_unreachable(0) && !v.is_unreachable(1));
        assert!(f.append(b"b").is_err(), "an open file fails too");
        assert!(v.read("s").is_err());
        assert!(v.write_atomic("x", b"1").is_err());
        who.store(1, std::sync::atomic::Ordering::Relaxed);
        v.write_atomic("x", b"1").unwrap();
        assert_eq!(v.read("s").unwrap().unwrap().as_ref(), b"a");
        who.store(0, std::sync::atomic::Ordering::Relaxed);
        v.set_unreachable(0, false);
        f.append(b"c").unwrap();
        assert_eq!(v.read("s").unwrap().unwrap().as_ref(), b"ac");
        // The failed write_atomic counts twice: its temporary's write and
        // the removal of what it may have left.
        assert_eq!(v.stats().unreachable_failures, 4);
    }

    #[test]
    fn writers_are_recorded_per_file_and_broker() {
        let (v, who) = volume_with_caller();
        let f = v.open_segment("s", true).unwrap();
        f.append(b"a").unwrap();
        who.store(2, std::sync::atomic::Ordering::Relaxed);
        f.append(b"b").unwrap();
        v.write_atomic("x", b"1").unwrap();
        let w = v.writers();
        assert_eq!(
            w["s"],
            BTreeSet::from([
                (0, FaultPoint::OpenSegment),
                (0, FaultPoint::Append),
                (2, FaultPoint::Append)
            ])
        );
        assert_eq!(
            w["x"],
            BTreeSet::from([(2, FaultPoint::Rename)]),
            "write_atomic publishes by a rename"
        );
    }

    #[test]
    fn unsynced_appends_are_lost_on_crash_and_synced_ones_kept() {
        let v = SimVolume::new();
        v.create_dir_all("t/p").unwrap();
        let seg = v.open_segment("t/p/0.log", true).unwrap();
        assert_eq!(seg.append(b"durable").unwrap(), 0);
        seg.sync().unwrap();
        assert_eq!(seg.append(b"-lost").unwrap(), 7);
        assert_eq!(seg.read_at(0, 100).unwrap(), &b"durable-lost"[..]);
        let report = v.crash();
        assert_eq!((report.files_with_unsynced, report.bytes_dropped), (1, 5));
        let seg = v.open_segment("t/p/0.log", false).unwrap();
        assert_eq!(seg.read_at(0, 100).unwrap(), &b"durable"[..]);
    }

    #[test]
    fn handles_from_before_a_crash_are_dead() {
        let v = SimVolume::new();
        let seg = v.open_segment("f", true).unwrap();
        seg.append(b"x").unwrap();
        v.crash();
        assert!(seg.append(b"y").is_err());
        assert!(seg.sync().is_err());
        assert!(seg.read_at(0, 1).is_err());
        assert_eq!(v.file_lengths("f"), None, "its name was never synced");
    }

    /// A new file `path` holding `synced`, durable, then `tail`, not.
    fn with_tail(v: &SimVolume, path: &str, synced: &[u8], tail: &[u8]) -> Arc<dyn SegmentFile> {
        let seg = v.open_segment(path, true).unwrap();
        seg.append(synced).unwrap();
        seg.sync().unwrap();
        seg.append(tail).unwrap();
        seg
    }

    #[test]
    fn a_process_kill_keeps_unsynced_data_for_the_restarted_broker() {
        let v = SimVolume::new();
        let seg = with_tail(&v, "f", b"synced|", b"page cache");
        let gone = v.open_segment("gone", true).unwrap();
        v.remove("gone").unwrap();
        let report = v.kill_process();
        assert_eq!((report.files_with_unsynced, report.bytes_kept), (1, 10));
        assert_eq!((report.bytes_dropped, report.bytes_zeroed), (0, 0));
        assert!(seg.append(b"x").is_err(), "the dead process's handle");
        assert!(seg.sync().is_err());
        assert!(gone.read_at(0, 1).is_err());
        assert_eq!(v.state().inodes.len(), 1, "the unlinked inode went");
        let seg = v.open_segment("f", false).unwrap();
        assert_eq!(seg.read_at(0, 100).unwrap(), &b"synced|page cache"[..]);
        assert_eq!(v.file_lengths("f"), Some((17, 7)), "still unsynced");
        assert_eq!(v.stats().process_kills, 1);
        assert_eq!(v.stats().crashes, 0);
    }

    /// A replace not yet synced into its directory: the process kill keeps
    /// the old file, which the power loss after it brings back.
    #[test]
    fn a_process_kill_keeps_the_files_a_power_loss_would_bring_back() {
        let v = SimVolume::new();
        v.create_dir_all("d").unwrap();
        v.write_atomic("d/f", b"old").unwrap();
        v.write_new("d/tmp", b"new").unwrap();
        v.sync_file("d/tmp").unwrap();
        v.rename("d/tmp", "d/f").unwrap();
        v.kill_process();
        assert_eq!(v.read("d/f").unwrap().unwrap(), &b"new"[..]);
        v.crash();
        assert_eq!(v.read("d/f").unwrap().unwrap(), &b"old"[..]);
    }

    #[test]
    fn a_power_loss_after_a_process_kill_still_loses_what_was_never_synced() {
        let v = SimVolume::new();
        for name in ["a", "b"] {
            with_tail(&v, name, b"synced|", b"tail");
        }
        v.kill_process();
        // The restarted broker syncs what it read back of "b" only.
        v.open_segment("b", false).unwrap().sync().unwrap();
        let report = v.crash();
        assert_eq!((report.files_with_unsynced, report.bytes_dropped), (1, 4));
        assert_eq!(v.read("a").unwrap().unwrap(), &b"synced|"[..]);
        assert_eq!(v.read("b").unwrap().unwrap(), &b"synced|tail"[..]);
    }

    #[test]
    fn a_process_kill_on_nfs_writes_its_dirty_pages_back_unsynced() {
        let (v, who) = volume_with_caller();
        v.set_entries_durable_at_once(true);
        let as_broker = |b: usize| who.store(b, std::sync::atomic::Ordering::SeqCst);
        as_broker(0);
        with_tail(&v, "mine", b"synced|", b"dirty");
        as_broker(1);
        let theirs = v.open_segment("theirs", true).unwrap();
        theirs.append(b"other's").unwrap();
        assert_eq!(v.read("mine").unwrap().unwrap(), &b"synced|"[..]);
        let report = v.kill_process_on_nfs(0);
        assert_eq!((report.files_with_unsynced, report.bytes_kept), (1, 5));
        assert_eq!(
            v.read("mine").unwrap().unwrap(),
            &b"synced|dirty"[..],
            "written back on close: every broker reads it"
        );
        assert_eq!(v.file_lengths("mine"), Some((12, 7)), "but not synced");
        theirs.append(b"+").unwrap();
        assert_eq!(theirs.len(), 8, "the other brokers' handles live on");
        as_broker(2);
        assert_eq!(
            v.read("theirs").unwrap().unwrap(),
            &b""[..],
            "another broker's dirty pages stay its own"
        );
        let report = v.crash();
        assert_eq!(report.bytes_dropped, 5 + 8);
        assert_eq!(v.read("mine").unwrap().unwrap(), &b"synced|"[..]);
    }

    #[test]
    fn a_crash_tearing_the_last_write_zeroes_a_suffix_of_it_and_keeps_the_rest() {
        for seed in 0..64 {
            let v = SimVolume::new();
            let seg = v.open_segment("f", true).unwrap();
            seg.append(b"synced|").unwrap();
            seg.sync().unwrap();
            seg.append(b"earlier|").unwrap();
            seg.append(b"last write").unwrap();
            let report = v.crash_tearing_last_writes(&mut SmallRng::seed_from_u64(seed));
            let data = v.read("f").unwrap().unwrap();
            assert_eq!(data.len(), 25, "the size reached the disk");
            assert!(data.starts_with(b"synced|earlier|"));
            let zeroed = report.bytes_zeroed as usize;
            assert!((1..=10).contains(&zeroed), "only the last write is torn");
            assert!(b"last write".starts_with(&data[15..25 - zeroed]));
            assert!(data[25 - zeroed..].iter().all(|&b| b == 0));
            // On the disk now: a second crash keeps it.
            assert_eq!(v.crash().bytes_dropped, 0);
            assert_eq!(v.read("f").unwrap().unwrap(), data);
        }
    }

    #[test]
    fn torn_crash_keeps_a_prefix_of_the_unsynced_tail() {
        let mut kept_some = false;
        let mut dropped_some = false;
        let mut zeroed_some = false;
        for seed in 0..64 {
            let v = SimVolume::new();
            let seg = v.open_segment("f", true).unwrap();
            seg.append(b"synced|").unwrap();
            seg.sync().unwrap();
            seg.append(b"unsynced tail").unwrap();
            let report = v.crash_torn(&mut SmallRng::seed_from_u64(seed));
            assert_eq!(report.bytes_kept + report.bytes_dropped, 13);
            let data = v.read("f").unwrap().unwrap();
            assert!(
                data.starts_with(b"synced|"),
                "the synced prefix always survives"
            );
            let tail = &data[7..];
            let zeroed = report.bytes_zeroed as usize;
            let written = &tail[..tail.len() - zeroed];
            assert!(b"unsynced tail".starts_with(written));
            assert!(tail[tail.len() - zeroed..].iter().all(|&b| b == 0));
            kept_some |= report.bytes_kept > 0;
            dropped_some |= report.bytes_dropped > 0;
            zeroed_some |= zeroed > 0;
            // Whatever survived is on the disk now: a second crash keeps it.
            assert_eq!(v.crash().bytes_dropped, 0);
            assert_eq!(v.read("f").unwrap().unwrap(), data);
        }
        assert!(kept_some && dropped_some && zeroed_some);
    }

    #[test]
    fn truncate_is_durable_and_write_atomic_replaces_whole() {
        let v = SimVolume::new();
        let seg = v.open_segment("f", true).unwrap();
        seg.append(b"abcdef").unwrap();
        seg.truncate(3).unwrap();
        v.crash();
        assert_eq!(v.read("f").unwrap().unwrap(), &b"abc"[..]);
        v.write_atomic("g", b"one").unwrap();
        v.write_atomic("g", b"two").unwrap();
        v.crash();
        assert_eq!(v.read("g").unwrap().unwrap(), &b"two"[..]);
    }

    /// Neither the entry nor the data moves durably: what was not synced
    /// before the rename is still unsynced after it, and a power loss
    /// before the directory's sync undoes the rename itself.
    #[test]
    fn a_rename_is_undone_by_a_power_loss_until_its_directory_is_synced() {
        let v = SimVolume::new();
        v.create_dir_all("d").unwrap();
        let seg = v.open_segment("d/x.cleaning", true).unwrap();
        seg.append(b"synced").unwrap();
        seg.sync().unwrap();
        seg.append(b"|tail").unwrap();
        v.write_atomic("d/x", b"replaced").unwrap();
        let old = v.open_segment("d/x", false).unwrap();
        v.rename("d/x.cleaning", "d/x").unwrap();
        assert_eq!(v.file_lengths("d/x"), Some((11, 6)), "still unsynced");
        assert_eq!(v.file_lengths("d/x.cleaning"), None);
        assert_eq!(seg.append(b"!").unwrap(), 11, "the handle moved with it");
        assert_eq!(old.read_at(0, 100).unwrap(), &b"replaced"[..]);
        let report = v.crash();
        assert_eq!(
            report.entries_undone, 2,
            "x back to the old file, x.cleaning back"
        );
        assert_eq!(v.read("d/x").unwrap().unwrap(), &b"replaced"[..]);
        assert_eq!(v.read("d/x.cleaning").unwrap().unwrap(), &b"synced"[..]);

        v.rename("d/x.cleaning", "d/x").unwrap();
        v.sync_dir("d").unwrap();
        assert_eq!(v.crash().entries_undone, 0);
        assert_eq!(v.read("d/x").unwrap().unwrap(), &b"synced"[..]);
        assert_eq!(v.list("d").unwrap(), ["x"]);
    }

    /// Whatever a name's creation, it survives a power loss only once its
    /// directory is synced, and a directory only once its parent is.
    #[test]
    fn an_entry_never_synced_into_its_directory_is_gone_after_a_power_loss() {
        let v = SimVolume::new();
        v.create_dir_all("d").unwrap();
        v.write_new("d/whole", b"synced content").unwrap();
        v.open_segment("d/segment", true)
            .unwrap()
            .append(b"x")
            .unwrap();
        assert!(v.create_dir("d/sub").unwrap());
        v.write_new("d/sub/f", b"f").unwrap();
        v.sync_dir("d/sub").unwrap();
        v.write_atomic("d/sub/g", b"g").unwrap();
        let report = v.crash();
        assert_eq!(report.entries_undone, 3 + 2);
        assert!(v.list("d").unwrap().is_empty());
        assert_eq!(v.read("d/sub/g").unwrap(), None, "its directory went");

        assert!(v.create_dir("d/sub").unwrap());
        v.sync_dir("d").unwrap();
        v.write_atomic("d/sub/g", b"g").unwrap();
        assert_eq!(v.crash().entries_undone, 0);
        assert_eq!(v.read("d/sub/g").unwrap().unwrap(), &b"g"[..]);
    }

    /// A volume where `dir` (under `d`), durable with a synced file `f` in
    /// it, was then removed whole, nothing synced since.
    fn removed_directory_with_a_synced_file(dir: &str) -> SimVolume {
        let v = SimVolume::new();
        v.create_dir_all(dir).unwrap();
        v.sync_dir("").unwrap();
        v.sync_dir("d").unwrap();
        v.write_atomic(&format!("{dir}/f"), b"f").unwrap();
        v.sync_dir(dir).unwrap();
        v.remove_dir_all(dir).unwrap();
        v
    }

    /// A directory removed and created again under its name starts empty:
    /// syncing it (not its parent) makes that durable, so the synced
    /// entries of the one before do not come back with a power loss.
    #[test]
    fn a_directory_created_again_and_synced_keeps_none_of_the_old_ones_entries() {
        let v = removed_directory_with_a_synced_file("d/sub");
        assert!(v.create_dir("d/sub").unwrap());
        v.sync_dir("d/sub").unwrap();
        v.crash();
        assert_eq!(v.list("d").unwrap(), ["sub"], "d was not synced since");
        assert!(v.list("d/sub").unwrap().is_empty(), "f came back");
    }

    /// A directory replaced by a file, and the file synced into the
    /// parent, takes the directory's synced entries with it: a directory
    /// of that name made later does not find them after a power loss.
    #[test]
    fn a_directory_replaced_by_a_file_and_synced_leaves_none_of_its_entries() {
        let v = removed_directory_with_a_synced_file("d/x");
        v.write_atomic("d/x", b"a file now").unwrap();
        v.sync_dir("d").unwrap();
        v.remove("d/x").unwrap();
        assert!(v.create_dir("d/x").unwrap());
        v.sync_dir("d").unwrap();
        v.crash();
        assert_eq!(v.list("d").unwrap(), ["x"]);
        assert!(v.list("d/x").unwrap().is_empty(), "f came back");
    }

    /// `children` answers what walking every key would, jumping over
    /// subtrees: names sorting just before and after `name/` ('-', '.',
    /// '0') included.
    #[test]
    fn children_are_the_direct_entries_of_a_directory_and_nothing_below() {
        let keys: BTreeSet<String> = [
            "a", "a-b", "a.c", "a/x", "a/x/y", "a/x/y/z", "a/x-1", "a/x0", "a/y", "a0", "ab",
            "b/c", "b/c/d", "b0",
        ]
        .into_iter()
        .map(String::from)
        .collect();
        for dir in ["", "a", "a/x", "a/x/y", "b", "b/c", "none"] {
            let prefix = child_prefix(dir);
            let walked: Vec<&String> = keys
                .iter()
                .filter(|k| {
                    k.strip_prefix(&prefix)
                        .is_some_and(|rest| !rest.is_empty() && !rest.contains('/'))
                })
                .collect();
            assert_eq!(children(&keys, &prefix), walked, "{dir:?}");
        }
    }

    #[test]
    fn a_removal_not_synced_into_its_directory_is_undone_by_a_power_loss() {
        let v = SimVolume::new();
        v.create_dir_all("d").unwrap();
        v.write_atomic("d/a", b"a").unwrap();
        v.write_atomic("d/b", b"b").unwrap();
        v.remove("d/a").unwrap();
        v.remove_dir_all("d").unwrap();
        assert_eq!(v.crash().entries_undone, 3);
        assert_eq!(v.list("d").unwrap(), ["a", "b"]);
        v.remove("d/a").unwrap();
        v.sync_dir("d").unwrap();
        v.crash();
        assert_eq!(v.list("d").unwrap(), ["b"]);
    }

    /// The `open_segment` contract: a created file's name is durable once
    /// the file's first sync (or truncate) returns.
    #[test]
    fn a_created_segments_name_is_durable_with_its_first_sync() {
        let v = SimVolume::new();
        v.create_dir_all("p").unwrap();
        let seg = v.open_segment("p/0.log", true).unwrap();
        seg.append(b"batch").unwrap();
        seg.sync().unwrap();
        let other = v.open_segment("p/1.log", true).unwrap();
        other.truncate(0).unwrap();
        v.open_segment("p/2.log", true).unwrap();
        v.crash();
        assert_eq!(v.list("p").unwrap(), ["0.log", "1.log"]);
        assert_eq!(v.read("p/0.log").unwrap().unwrap(), &b"batch"[..]);
    }

    /// On NFS the server commits a directory operation before replying.
    #[test]
    fn entries_durable_at_once_survive_a_power_loss_unsynced() {
        let v = SimVolume::new();
        v.set_entries_durable_at_once(true);
        v.create_dir_all("d/e").unwrap();
        v.write_new("d/e/f", b"f").unwrap();
        v.sync_file("d/e/f").unwrap();
        v.write_new("d/e/unsynced", b"u").unwrap();
        v.write_atomic("d/gone", b"g").unwrap();
        v.remove("d/gone").unwrap();
        assert_eq!(v.crash().entries_undone, 0);
        assert_eq!(v.read("d/e/f").unwrap().unwrap(), &b"f"[..]);
        assert_eq!(
            v.read("d/e/unsynced").unwrap().unwrap(),
            &b""[..],
            "the name survives, its unsynced content does not"
        );
        assert_eq!(v.list("d").unwrap(), ["e"]);
    }

    /// `write_atomic` and `create_exclusive` are the trait's composites:
    /// a power cut at any one of their steps leaves the old content or the
    /// new, never a missing, empty or partial file.
    #[test]
    fn a_power_cut_at_any_step_of_an_atomic_write_leaves_old_or_new() {
        // Ten mutations cover both composites' steps and then some.
        for cut in 0..10 {
            let v = SimVolume::new();
            v.create_dir_all("d").unwrap();
            v.write_atomic("d/f", b"old").unwrap();
            v.power_cut_after(cut);
            let wrote = v.write_atomic("d/f", b"new content");
            let claimed = v.create_exclusive("d/claim", b"whole claim");
            v.crash();
            let f = v.read("d/f").unwrap().unwrap();
            match wrote {
                Ok(()) => assert_eq!(f, &b"new content"[..], "cut {cut}: acknowledged"),
                Err(_) => assert!(
                    f == b"old"[..] || f == b"new content"[..],
                    "cut {cut}: {f:?}"
                ),
            }
            match v.read("d/claim").unwrap() {
                Some(c) => assert_eq!(c, &b"whole claim"[..], "cut {cut}"),
                None => assert!(claimed.is_err(), "cut {cut}: an acknowledged claim is kept"),
            }
            assert!(
                v.list("d")
                    .unwrap()
                    .iter()
                    .all(|n| n == "f" || n == "claim"),
                "cut {cut}: no temporary is listed"
            );
        }
    }

    #[test]
    fn a_rename_can_be_failed_by_the_hook_and_stopped_by_a_power_cut() {
        let v = SimVolume::new();
        v.create_dir_all("d").unwrap();
        v.write_atomic("d/a", b"a").unwrap();
        v.write_atomic("d/b", b"b").unwrap();
        v.set_fault_hook(Some(Box::new(|c| {
            (c.point == FaultPoint::Rename && c.path == "d/b").then(|| io::Error::other("EIO"))
        })));
        let renames = v.stats().renames;
        assert!(v.rename("d/a", "d/b").is_err());
        assert_eq!(v.stats().injected_faults, 1);
        v.set_fault_hook(None);
        v.power_cut_after(0);
        assert!(v.rename("d/a", "d/b").is_err());
        assert!(v.is_frozen());
        v.crash();
        assert_eq!(v.read("d/a").unwrap().unwrap(), &b"a"[..]);
        assert_eq!(v.read("d/b").unwrap().unwrap(), &b"b"[..]);
        assert_eq!(v.stats().renames, renames, "nothing was moved");
    }

    /// A rename writes its target (onto another broker's file of an epoch
    /// it is a second writer) and removes its source (which any broker may
    /// do, as with `remove`); the caller's own listing sees both at once.
    #[test]
    fn a_rename_writes_its_target_and_removes_its_source() {
        use crate::writers::check_one_writer_per_epoch;
        let (v, who) = volume_with_caller();
        let as_broker = |b: usize| who.store(b, std::sync::atomic::Ordering::SeqCst);
        let dir = kaas_core::layout::partition_dir("t", 0);
        let seg = kaas_core::layout::segment_path(&dir, 0, 2);
        let (staged, moved) = (format!("{dir}/staged"), format!("{dir}/moved"));
        v.set_listing_cache(1_000, Box::new(|| 0));
        as_broker(0);
        v.create_dir_all(&dir).unwrap();
        v.write_atomic(&staged, b"x").unwrap();
        assert_eq!(v.list(&dir).unwrap(), ["staged"]);
        v.rename(&staged, &seg).unwrap();
        assert_eq!(
            v.list(&dir).unwrap(),
            [seg.rsplit('/').next().unwrap()],
            "the broker's own rename, at once"
        );
        let w = v.writers();
        assert_eq!(w[&seg], BTreeSet::from([(0, FaultPoint::Rename)]));
        assert!(w[&staged].contains(&(0, FaultPoint::Remove)));
        assert!(check_one_writer_per_epoch(&w).0.is_empty());
        as_broker(1);
        v.rename(&seg, &moved).unwrap();
        let (violations, _) = check_one_writer_per_epoch(&v.writers());
        assert!(
            violations.is_empty(),
            "renaming away is removing: {violations:?}"
        );
        v.write_atomic(&staged, b"y").unwrap();
        v.rename(&staged, &seg).unwrap();
        let (violations, _) = check_one_writer_per_epoch(&v.writers());
        assert_eq!(violations.len(), 1, "renaming onto it is writing it");
    }

    /// Path rules, listing, segments, POSIX handle semantics and
    /// exclusive create, as `LocalVolume` has them.
    #[test]
    fn meets_the_volume_contract() {
        kaas_net::volume::contract::run_all(&|| {
            kaas_net::volume::contract::Fresh::new(Arc::new(SimVolume::new()))
        });
    }

    /// One broker's cached view is the volume as it is: the contract holds
    /// for a broker behind a name cache (it sees its own changes at once).
    #[test]
    fn meets_the_volume_contract_behind_a_name_cache() {
        kaas_net::volume::contract::run_all(&|| {
            let (v, _who) = volume_with_caller();
            v.set_attr_cache(250, Box::new(|| 0));
            kaas_net::volume::contract::Fresh::new(Arc::new(v))
        });
    }

    #[test]
    fn an_exclusive_create_is_durable_at_once_and_can_be_failed_by_the_hook() {
        let v = SimVolume::new();
        v.create_dir_all("e").unwrap();
        v.create_exclusive("e/1", b"claimed").unwrap();
        assert_eq!(v.crash().bytes_dropped, 0);
        assert_eq!(v.read("e/1").unwrap().unwrap(), &b"claimed"[..]);
        v.set_fault_hook(Some(Box::new(|c| {
            (c.point == FaultPoint::Link).then(|| io::Error::other("EIO"))
        })));
        assert_eq!(
            v.create_exclusive("e/2", b"x").unwrap_err().kind(),
            io::ErrorKind::Other
        );
        v.set_fault_hook(None);
        assert_eq!(
            v.read("e/2").unwrap(),
            None,
            "a failed create leaves nothing"
        );
        v.power_cut_after(0);
        assert!(v.create_exclusive("e/2", b"x").is_err());
        v.crash();
        assert_eq!(
            v.read("e/2").unwrap(),
            None,
            "nor does one a power cut stopped"
        );
    }

    #[test]
    fn power_cut_fails_the_chosen_operation_and_everything_after() {
        let v = SimVolume::new();
        let cuts = v.watch_power_cuts();
        let seg = v.open_segment("f", true).unwrap();
        v.power_cut_after(2);
        seg.append(b"1").unwrap();
        seg.sync().unwrap();
        assert!(!v.is_frozen());
        assert!(seg.append(b"2").is_err(), "the third mutation is cut");
        assert!(v.is_frozen());
        assert!(cuts.has_changed().unwrap());
        assert!(v.read("f").is_err(), "a frozen volume fails reads too");
        assert!(seg.sync().is_err());
        v.crash();
        assert!(!v.is_frozen());
        assert_eq!(v.read("f").unwrap().unwrap(), &b"1"[..]);
        assert_eq!(v.stats().power_cuts, 1);
    }

    #[test]
    fn a_failed_fsync_loses_its_bytes_even_after_a_later_successful_one() {
        let v = SimVolume::new();
        let seg = v.open_segment("f", true).unwrap();
        seg.append(b"ok|").unwrap();
        seg.sync().unwrap();
        seg.append(b"lost").unwrap();
        v.set_fault_hook(Some(Box::new(|c| {
            (c.point == FaultPoint::Sync).then(|| io::Error::other("EIO"))
        })));
        assert!(seg.sync().is_err());
        v.set_fault_hook(None);
        seg.append(b"|later").unwrap();
        seg.sync().unwrap();
        assert_eq!(
            seg.read_at(0, 100).unwrap(),
            &b"ok|lost|later"[..],
            "reads still see the data"
        );
        assert_eq!(v.crash().bytes_poisoned, 4);
        assert_eq!(v.read("f").unwrap().unwrap(), &b"ok|\0\0\0\0|later"[..]);
    }

    #[test]
    fn fault_hook_fails_chosen_operations() {
        let v = SimVolume::new();
        // Fail only an fsync that has data to sync, as a harness aiming
        // at a group commit would.
        v.set_fault_hook(Some(Box::new(|c| {
            (c.point == FaultPoint::Sync && c.unsynced > 0 && c.path == "f")
                .then(|| io::Error::other("injected fsync failure"))
        })));
        let seg = v.open_segment("f", true).unwrap();
        seg.sync().unwrap();
        seg.append(b"xy").unwrap();
        assert!(seg.sync().is_err());
        v.set_fault_hook(None);
        seg.sync().unwrap();
        assert_eq!(v.stats().injected_faults, 1);
    }

    /// After a process kill the log's unsynced tail is still there to
    /// read; opening the log serves it (its end offset counts it durable),
    /// so the opening must sync it: a power loss later keeps all of it.
    #[test]
    fn reopening_a_log_makes_the_tail_it_read_back_durable() {
        use kaas_core::record::BatchBuilder;
        use kaas_net::log::{LogConfig, PartitionLog};
        let v = SimVolume::new();
        let arc: Arc<dyn Volume> = Arc::new(v.clone());
        let dir = kaas_core::layout::partition_dir("t", 0);
        let config = LogConfig::default();
        let mut log = PartitionLog::open(arc.clone(), dir.clone(), config, 0).unwrap();
        let batch = BatchBuilder::new().record(1, None, Some(b"v")).build();
        log.append_batch(&batch).unwrap();
        log.sync().unwrap();
        log.append_batch(&batch).unwrap();
        drop(log);
        assert_eq!(v.kill_process().files_with_unsynced, 1);
        let log = PartitionLog::open(arc.clone(), dir.clone(), config, 0).unwrap();
        assert_eq!(log.end_offset(), 2, "the page cache kept the tail");
        drop(log);
        assert_eq!(v.crash().bytes_dropped, 0, "the opening synced it");
        let log = PartitionLog::open(arc, dir, config, 0).unwrap();
        assert_eq!(log.end_offset(), 2);
    }

    /// A takeover opens a new epoch's segment; its broker was killed
    /// before the segment's first sync, so its name is in the page cache
    /// only. The next opening at that epoch reads it as an existing file,
    /// syncs the records in it, and must make its name durable too
    /// (`kaas_net::volume::sync_names_read_back`): a power loss later
    /// keeps the segment and the records the opening synced in it.
    #[test]
    fn reopening_a_log_makes_the_names_it_read_back_durable() {
        use kaas_core::record::BatchBuilder;
        use kaas_net::log::{LogConfig, PartitionLog};
        let v = SimVolume::new();
        let arc: Arc<dyn Volume> = Arc::new(v.clone());
        let dir = kaas_core::layout::partition_dir("t", 0);
        let config = LogConfig::default();
        let batch = BatchBuilder::new().record(1, None, Some(b"v")).build();
        let open = |epoch| PartitionLog::open(arc.clone(), dir.clone(), config, epoch).unwrap();
        let mut log = open(0);
        log.append_batch(&batch).unwrap();
        log.sync().unwrap();
        drop(log);
        let mut log = open(1);
        log.append_batch(&batch).unwrap();
        drop(log);
        v.kill_process();
        let log = open(1);
        assert_eq!(log.end_offset(), 2, "the page cache kept epoch 1's segment");
        drop(log);
        assert_eq!(v.crash().entries_undone, 0, "the opening synced its name");
        assert_eq!(open(1).end_offset(), 2);
    }

    /// The real partition log on this volume: a crash after an unsynced
    /// append loses exactly that append, and a torn tail is cut at the last
    /// whole batch.
    #[test]
    fn partition_log_recovers_from_crashes_on_the_sim_volume() {
        use kaas_core::record::BatchBuilder;
        use kaas_net::log::{LogConfig, PartitionLog};
        for seed in 0..32u64 {
            let v = SimVolume::new();
            let arc: Arc<dyn Volume> = Arc::new(v.clone());
            let config = LogConfig {
                segment_bytes: 300,
                ..LogConfig::default()
            };
            let batch = |i: u8| BatchBuilder::new().record(1, None, Some(&[i; 20])).build();
            let dir = kaas_core::layout::partition_dir("t", 0);
            let mut log = PartitionLog::open(arc.clone(), dir.clone(), config, 0).unwrap();
            for i in 0..10 {
                log.append_batch(&batch(i)).unwrap();
            }
            log.sync().unwrap();
            for i in 10..15 {
                log.append_batch(&batch(i)).unwrap();
            }
            drop(log);
            v.crash_torn(&mut SmallRng::seed_from_u64(seed));
            let log = PartitionLog::open(arc, dir, config, 0).unwrap();
            let end = log.end_offset();
            assert!((10..=15).contains(&end), "seed {seed}: end offset {end}");
            // Reads stop at segment boundaries: read on until the end.
            let mut values = Vec::new();
            let mut offset = 0;
            while offset < end {
                let read = log.read(offset, 1 << 20, end).unwrap();
                assert!(read.next_offset > offset, "seed {seed}: stuck at {offset}");
                offset = read.next_offset;
                values.extend(
                    kaas_core::record::split_batches(read.records)
                        .map(|b| b.records().next().unwrap().unwrap().value.unwrap()[0]),
                );
            }
            let expected: Vec<u8> = (0..end as u8).collect();
            assert_eq!(values, expected, "seed {seed}");
        }
    }
}
