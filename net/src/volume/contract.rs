//! The `Volume` contract as executable checks, run against every
//! implementation: `LocalVolume` (net/src/volume/local.rs tests), the
//! simulator's `SimVolume` (sim/src/volume.rs tests) and the fuzz targets'
//! in-memory volume (fuzz/tests/volume_contract.rs).
//!
//! The log, the broker and the coordinators are written against the trait;
//! the simulator and the fuzzers only prove something about the real
//! system if their volumes behave like the real one wherever kaas can tell.
//! One function per property, each taking a factory of fresh, empty
//! volumes; a violation panics with what was expected. [`run_all`] runs
//! them all. Crash and NFS semantics are not part of it: only the
//! simulator models them, and its own tests check them.

use super::Volume;
use std::any::Any;
use std::io;
use std::sync::{Arc, Barrier};

/// A fresh, empty volume, and whatever must live as long as it does (a
/// temporary directory, say).
pub struct Fresh {
    pub volume: Arc<dyn Volume>,
    pub keep_alive: Box<dyn Any>,
}

impl Fresh {
    pub fn new(volume: Arc<dyn Volume>) -> Fresh {
        Fresh::keeping(volume, ())
    }

    pub fn keeping(volume: Arc<dyn Volume>, keep_alive: impl Any) -> Fresh {
        Fresh {
            volume,
            keep_alive: Box::new(keep_alive),
        }
    }
}

/// Makes a fresh volume for each property.
pub type Factory<'a> = &'a dyn Fn() -> Fresh;

/// Every property, each on a fresh volume.
pub fn run_all(fresh: Factory<'_>) {
    read_of_a_missing_file_is_none(fresh);
    write_atomic_replaces_the_whole_file(fresh);
    write_atomic_temporaries_never_appear_in_list(fresh);
    list_is_sorted_and_a_missing_directory_is_empty(fresh);
    create_dir_all_is_idempotent(fresh);
    remove_and_remove_dir_all_are_idempotent(fresh);
    remove_dir_all_refuses_the_root(fresh);
    paths_escaping_the_root_are_refused(fresh);
    open_segment_without_create_on_a_missing_file_is_not_found(fresh);
    segment_appends_reads_and_truncates(fresh);
    free_tail_cuts_a_file_and_never_grows_it(fresh);
    segment_reopens_with_its_content(fresh);
    replaced_or_removed_files_stay_readable_through_open_handles(fresh);
    create_exclusive_creates_once_and_keeps_the_first_content(fresh);
    create_exclusive_has_exactly_one_winner_among_concurrent_creators(fresh);
    rename_moves_a_file_and_replaces_the_target(fresh);
    rename_of_a_missing_file_is_not_found(fresh);
    rename_keeps_open_handles_on_the_file_they_opened(fresh);
    rename_replaces_atomically_for_a_racing_reader(fresh);
    write_new_creates_only_a_free_name(fresh);
    link_adds_a_name_only_if_it_is_free(fresh);
    create_dir_needs_its_parent_and_says_whether_it_created(fresh);
    syncs_ask_for_an_existing_file_and_tolerate_a_missing_directory(fresh);
    temporaries_are_never_listed(fresh);
}

pub fn free_tail_cuts_a_file_and_never_grows_it(fresh: Factory<'_>) {
    let f = fresh();
    let v = f.volume.as_ref();
    ok(v.create_dir_all("s"), "create s");
    let seg = ok(v.open_segment("s/0.log", true), "create segment");
    ok(seg.append(b"hello world"), "append");
    ok(seg.sync(), "sync");
    ok(seg.free_tail(20), "free past the end");
    assert_eq!(seg.len(), 11, "freeing past the end changes nothing");
    ok(seg.free_tail(5), "free");
    assert_eq!(seg.len(), 5);
    assert_eq!(ok(seg.read_at(0, 100), "read"), &b"hello"[..]);
    let other = ok(v.open_segment("s/0.log", false), "reopen");
    assert_eq!(other.len(), 5, "another handle sees the cut");
    assert_eq!(content(v, "s/0.log").as_deref(), Some(&b"hello"[..]));
    ok(seg.free_tail(0), "free the rest");
    assert!(seg.is_empty());
    ok(v.remove("s/0.log"), "remove");
    assert_eq!(content(v, "s/0.log"), None);
}

/// The first step of the composites: a new file, never over another.
pub fn write_new_creates_only_a_free_name(fresh: Factory<'_>) {
    let f = fresh();
    let v = f.volume.as_ref();
    ok(v.create_dir_all("d"), "create d");
    ok(v.write_new("d/n", b"new"), "write_new");
    assert_eq!(content(v, "d/n").as_deref(), Some(&b"new"[..]));
    assert_eq!(
        v.write_new("d/n", b"again").err().map(|e| e.kind()),
        Some(io::ErrorKind::AlreadyExists)
    );
    assert_eq!(content(v, "d/n").as_deref(), Some(&b"new"[..]), "untouched");
    assert!(
        v.write_new("missing/n", b"x").is_err(),
        "the parent must exist"
    );
}

/// `create_exclusive`'s publication: a second name for the same file,
/// refused if the name is taken.
pub fn link_adds_a_name_only_if_it_is_free(fresh: Factory<'_>) {
    let f = fresh();
    let v = f.volume.as_ref();
    ok(v.create_dir_all("d"), "create d");
    ok(v.write_new("d/src", b"claim"), "write_new");
    ok(v.write_atomic("d/taken", b"first"), "write_atomic");
    // A source has one name before its link (LocalVolume reads a link
    // count of 2 after EEXIST as its own retried link).
    assert_eq!(
        v.link("d/src", "d/taken").err().map(|e| e.kind()),
        Some(io::ErrorKind::AlreadyExists)
    );
    ok(v.link("d/src", "d/dst"), "link");
    assert_eq!(content(v, "d/dst").as_deref(), Some(&b"claim"[..]));
    assert_eq!(
        content(v, "d/src").as_deref(),
        Some(&b"claim"[..]),
        "both names"
    );
    assert_eq!(content(v, "d/taken").as_deref(), Some(&b"first"[..]));
    assert_eq!(
        v.link("d/none", "d/other").err().map(|e| e.kind()),
        Some(io::ErrorKind::NotFound)
    );
}

pub fn create_dir_needs_its_parent_and_says_whether_it_created(fresh: Factory<'_>) {
    let f = fresh();
    let v = f.volume.as_ref();
    assert_eq!(
        v.create_dir("a/b").err().map(|e| e.kind()),
        Some(io::ErrorKind::NotFound)
    );
    assert!(ok(v.create_dir("a"), "create a"));
    assert!(!ok(v.create_dir("a"), "create a again"));
    assert!(ok(v.create_dir("a/b"), "create a/b"));
    ok(v.write_atomic("a/f", b"x"), "write a/f");
    assert!(v.create_dir("a/f").is_err(), "a file's name is taken");
    assert_eq!(names(v, "a"), ["b", "f"]);
}

pub fn syncs_ask_for_an_existing_file_and_tolerate_a_missing_directory(fresh: Factory<'_>) {
    let f = fresh();
    let v = f.volume.as_ref();
    ok(v.create_dir_all("d"), "create d");
    ok(v.write_new("d/f", b"x"), "write_new");
    ok(v.sync_file("d/f"), "sync_file");
    ok(v.sync_dir("d"), "sync_dir");
    ok(v.sync_dir(""), "sync the root");
    ok(
        v.sync_dir("gone"),
        "a missing directory has nothing to sync",
    );
    assert_eq!(
        v.sync_file("d/none").err().map(|e| e.kind()),
        Some(io::ErrorKind::NotFound)
    );
}

/// Whatever made it, a name with the temporary marker is never listed,
/// and temporary names are fresh each time.
pub fn temporaries_are_never_listed(fresh: Factory<'_>) {
    let f = fresh();
    let v = f.volume.as_ref();
    ok(v.create_dir_all("d"), "create d");
    let (a, b) = (
        ok(v.temporary_name("d/f"), "a name"),
        ok(v.temporary_name("d/f"), "another"),
    );
    assert_ne!(a, b);
    assert!(a.starts_with("d/") && super::is_temporary(&a[2..]), "{a}");
    ok(v.write_new(&a, b"left by a crash"), "write_new");
    ok(v.write_atomic("d/f", b"f"), "write_atomic");
    assert_eq!(names(v, "d"), ["f"]);
}

fn ok<T>(result: io::Result<T>, what: &str) -> T {
    result.unwrap_or_else(|e| panic!("{what}: {e}"))
}

fn content(v: &dyn Volume, path: &str) -> Option<Vec<u8>> {
    ok(v.read(path), &format!("read {path}")).map(|b| b.to_vec())
}

fn names(v: &dyn Volume, dir: &str) -> Vec<String> {
    ok(v.list(dir), &format!("list {dir:?}"))
}

pub fn read_of_a_missing_file_is_none(fresh: Factory<'_>) {
    let f = fresh();
    let v = f.volume.as_ref();
    assert_eq!(content(v, "missing"), None);
    assert_eq!(content(v, "no/such/dir/file"), None);
    ok(v.create_dir_all("d"), "create d");
    assert_eq!(content(v, "d/missing"), None);
}

pub fn write_atomic_replaces_the_whole_file(fresh: Factory<'_>) {
    let f = fresh();
    let v = f.volume.as_ref();
    ok(v.create_dir_all("a/b"), "create a/b");
    ok(
        v.write_atomic("a/b/f.json", b"a longer first content"),
        "write",
    );
    ok(v.write_atomic("a/b/f.json", b"two"), "replace");
    assert_eq!(
        content(v, "a/b/f.json").as_deref(),
        Some(&b"two"[..]),
        "the new content, whole, with nothing left of the old"
    );
    ok(v.write_atomic("a/b/empty", b""), "write an empty file");
    assert_eq!(content(v, "a/b/empty").as_deref(), Some(&b""[..]));
    assert!(
        v.write_atomic("nope/f", b"x").is_err(),
        "the parent directory must exist"
    );
    assert_eq!(names(v, "a/b"), ["empty", "f.json"]);
}

/// A lister racing a writer sees the file, never a temporary of it.
pub fn write_atomic_temporaries_never_appear_in_list(fresh: Factory<'_>) {
    const WRITES: usize = 200;
    let f = fresh();
    let v = f.volume.as_ref();
    ok(v.create_dir_all("d"), "create d");
    ok(v.write_atomic("d/f", b"0"), "first write");
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..WRITES {
                ok(v.write_atomic("d/f", i.to_string().as_bytes()), "write");
            }
            done.store(true, std::sync::atomic::Ordering::Release);
        });
        // Bounded by the writer: it finishes after WRITES replacements.
        while !done.load(std::sync::atomic::Ordering::Acquire) {
            assert_eq!(names(v, "d"), ["f"], "only the file itself is listed");
        }
    });
    assert_eq!(
        content(v, "d/f"),
        Some((WRITES - 1).to_string().into_bytes())
    );
}

pub fn list_is_sorted_and_a_missing_directory_is_empty(fresh: Factory<'_>) {
    let f = fresh();
    let v = f.volume.as_ref();
    assert!(names(v, "nope").is_empty());
    assert!(names(v, "no/such").is_empty());
    ok(v.create_dir_all("d/sub"), "create d/sub");
    for name in ["c", "a", "b", "B", "a0"] {
        ok(v.write_atomic(&format!("d/{name}"), b""), "write");
    }
    ok(v.write_atomic("d/sub/deeper", b""), "write");
    assert_eq!(
        names(v, "d"),
        ["B", "a", "a0", "b", "c", "sub"],
        "byte order, directories included, nothing from below them"
    );
    assert_eq!(names(v, ""), ["d"], "the root lists like any directory");
}

pub fn create_dir_all_is_idempotent(fresh: Factory<'_>) {
    let f = fresh();
    let v = f.volume.as_ref();
    ok(v.create_dir_all("x/y/z"), "create");
    ok(v.create_dir_all("x/y/z"), "create again");
    ok(v.create_dir_all("x/y"), "create a parent that exists");
    ok(v.write_atomic("x/y/z/f", b"kept"), "write below");
    ok(
        v.create_dir_all("x/y/z"),
        "create over a non-empty directory",
    );
    assert_eq!(content(v, "x/y/z/f").as_deref(), Some(&b"kept"[..]));
    assert_eq!(names(v, "x"), ["y"]);
    assert_eq!(names(v, "x/y"), ["z"]);
}

pub fn remove_and_remove_dir_all_are_idempotent(fresh: Factory<'_>) {
    let f = fresh();
    let v = f.volume.as_ref();
    ok(v.create_dir_all("t/p"), "create t/p");
    ok(v.create_dir_all("u"), "create u");
    ok(v.write_atomic("t/p/f", b"x"), "write");
    ok(v.write_atomic("t/p/g", b"y"), "write");
    ok(v.write_atomic("u/f", b"z"), "write");
    ok(v.remove("t/p/f"), "remove");
    ok(v.remove("t/p/f"), "remove a removed file");
    ok(v.remove("nope/f"), "remove in a missing directory");
    assert_eq!(content(v, "t/p/f"), None);
    assert_eq!(names(v, "t/p"), ["g"]);
    ok(v.remove_dir_all("t"), "remove_dir_all");
    ok(
        v.remove_dir_all("t"),
        "remove_dir_all of a removed directory",
    );
    ok(
        v.remove_dir_all("nope/deeper"),
        "remove_dir_all of a missing one",
    );
    assert_eq!(content(v, "t/p/g"), None);
    assert!(names(v, "t").is_empty());
    assert!(names(v, "t/p").is_empty());
    assert_eq!(names(v, ""), ["u"], "siblings are untouched");
    assert_eq!(content(v, "u/f").as_deref(), Some(&b"z"[..]));
}

/// A path that names the root itself is refused: removing it would take
/// every topic and cluster file with it.
pub fn remove_dir_all_refuses_the_root(fresh: Factory<'_>) {
    let f = fresh();
    let v = f.volume.as_ref();
    ok(v.create_dir_all("keep"), "create keep");
    ok(v.write_atomic("keep/f", b"x"), "write");
    for root in ["", ".", "./", "./."] {
        assert_eq!(
            v.remove_dir_all(root).err().map(|e| e.kind()),
            Some(io::ErrorKind::InvalidInput),
            "remove_dir_all({root:?})"
        );
    }
    assert_eq!(content(v, "keep/f").as_deref(), Some(&b"x"[..]));
}

/// Parts of paths come from topic names: nothing may reach outside.
pub fn paths_escaping_the_root_are_refused(fresh: Factory<'_>) {
    let f = fresh();
    let v = f.volume.as_ref();
    ok(v.create_dir_all("a"), "create a");
    ok(v.write_atomic("a/f", b"stays"), "write a/f");
    for path in ["../x", "/etc/passwd", "a/../../x", "a/../x", ".."] {
        let results: [(&str, io::Result<()>); 10] = [
            ("read", v.read(path).map(drop)),
            ("write_atomic", v.write_atomic(path, b"")),
            ("create_exclusive", v.create_exclusive(path, b"")),
            ("list", v.list(path).map(drop)),
            ("create_dir_all", v.create_dir_all(path)),
            ("remove", v.remove(path)),
            ("remove_dir_all", v.remove_dir_all(path)),
            ("open_segment", v.open_segment(path, true).map(drop)),
            ("rename from", v.rename(path, "a/g")),
            ("rename to", v.rename("a/f", path)),
        ];
        for (op, result) in results {
            assert_eq!(
                result.err().map(|e| e.kind()),
                Some(io::ErrorKind::InvalidInput),
                "{op} {path:?} must be refused"
            );
        }
    }
    assert_eq!(content(v, "a/f").as_deref(), Some(&b"stays"[..]));
    assert_eq!(names(v, "a"), ["f"]);
}

pub fn open_segment_without_create_on_a_missing_file_is_not_found(fresh: Factory<'_>) {
    let f = fresh();
    let v = f.volume.as_ref();
    let kind = |r: io::Result<Arc<dyn super::SegmentFile>>| r.err().map(|e| e.kind());
    assert_eq!(
        kind(v.open_segment("s/0.log", false)),
        Some(io::ErrorKind::NotFound)
    );
    assert_eq!(
        kind(v.open_segment("s/0.log", true)),
        Some(io::ErrorKind::NotFound),
        "creating needs the directory"
    );
    ok(v.create_dir_all("s"), "create s");
    assert_eq!(
        kind(v.open_segment("s/0.log", false)),
        Some(io::ErrorKind::NotFound)
    );
    assert!(names(v, "s").is_empty(), "a failed open creates nothing");
}

pub fn segment_appends_reads_and_truncates(fresh: Factory<'_>) {
    let f = fresh();
    let v = f.volume.as_ref();
    ok(v.create_dir_all("s"), "create s");
    let seg = ok(v.open_segment("s/0.log", true), "create segment");
    assert_eq!(seg.len(), 0);
    assert!(seg.is_empty());
    assert_eq!(names(v, "s"), ["0.log"], "a created segment is listed");
    assert_eq!(ok(seg.append(b"hello"), "append"), 0);
    assert_eq!(ok(seg.append(b" world"), "append"), 5);
    assert_eq!(ok(seg.append(b""), "append nothing"), 11);
    assert_eq!(seg.len(), 11);
    ok(seg.sync(), "sync");
    assert_eq!(ok(seg.read_at(0, 11), "read"), &b"hello world"[..]);
    assert_eq!(ok(seg.read_at(6, 100), "read"), &b"world"[..], "clamped");
    assert_eq!(ok(seg.read_at(11, 10), "read"), &b""[..], "at the end");
    assert_eq!(ok(seg.read_at(50, 10), "read"), &b""[..], "past the end");
    assert_eq!(ok(seg.read_at(2, 0), "read"), &b""[..]);
    assert_eq!(
        ok(seg.read_at(0, usize::MAX), "read"),
        &b"hello world"[..],
        "a huge length is bounded by the file"
    );
    assert_eq!(
        content(v, "s/0.log").as_deref(),
        Some(&b"hello world"[..]),
        "whole-file reads see appends"
    );
    ok(seg.truncate(5), "truncate");
    assert_eq!(seg.len(), 5);
    assert_eq!(ok(seg.read_at(0, 100), "read"), &b"hello"[..]);
    assert_eq!(
        ok(seg.append(b"!"), "append"),
        5,
        "appends go at the new end"
    );
    assert_eq!(ok(seg.read_at(0, 100), "read"), &b"hello!"[..]);
}

pub fn segment_reopens_with_its_content(fresh: Factory<'_>) {
    let f = fresh();
    let v = f.volume.as_ref();
    ok(v.create_dir_all("s"), "create s");
    let seg = ok(v.open_segment("s/0.log", true), "create segment");
    ok(seg.append(b"kept"), "append");
    ok(seg.sync(), "sync");
    drop(seg);
    let again = ok(v.open_segment("s/0.log", false), "reopen");
    assert_eq!(again.len(), 4);
    assert_eq!(ok(again.read_at(0, 100), "read"), &b"kept"[..]);
    let created = ok(
        v.open_segment("s/0.log", true),
        "open with create on an existing file",
    );
    assert_eq!(
        ok(created.read_at(0, 100), "read"),
        &b"kept"[..],
        "create does not truncate"
    );
    ok(v.write_atomic("s/state", b"written whole"), "write");
    let state = ok(v.open_segment("s/state", false), "open a written file");
    assert_eq!(state.len(), 13);
    assert_eq!(ok(state.read_at(8, 100), "read"), &b"whole"[..]);
}

/// POSIX semantics the log relies on: a sealed segment's index is replaced
/// and then reopened, and retention removes files a fetch may still read.
pub fn replaced_or_removed_files_stay_readable_through_open_handles(fresh: Factory<'_>) {
    let f = fresh();
    let v = f.volume.as_ref();
    ok(v.create_dir_all("p"), "create p");
    ok(v.write_atomic("p/idx", b"old"), "write");
    let old = ok(v.open_segment("p/idx", false), "open");
    ok(v.write_atomic("p/idx", b"new!"), "replace");
    assert_eq!(
        ok(old.read_at(0, 10), "read the replaced file"),
        &b"old"[..]
    );
    assert_eq!(old.len(), 3);
    let new = ok(v.open_segment("p/idx", false), "reopen");
    assert_eq!(ok(new.read_at(0, 10), "read"), &b"new!"[..]);
    ok(v.remove("p/idx"), "remove");
    assert_eq!(
        ok(new.read_at(0, 10), "read the removed file"),
        &b"new!"[..]
    );
    assert_eq!(content(v, "p/idx"), None);

    let seg = ok(v.open_segment("p/0.log", true), "create segment");
    ok(seg.append(b"batches"), "append");
    ok(seg.sync(), "sync");
    ok(v.remove_dir_all("p"), "remove the directory");
    assert_eq!(
        ok(seg.read_at(0, 100), "read below a removed directory"),
        &b"batches"[..]
    );
    assert!(names(v, "p").is_empty());
}

pub fn create_exclusive_creates_once_and_keeps_the_first_content(fresh: Factory<'_>) {
    let f = fresh();
    let v = f.volume.as_ref();
    ok(v.create_dir_all("e"), "create e");
    ok(v.create_exclusive("e/0000000001", b"first"), "create");
    assert_eq!(content(v, "e/0000000001").as_deref(), Some(&b"first"[..]));
    let again = v.create_exclusive("e/0000000001", b"second, longer");
    assert_eq!(
        again.err().map(|e| e.kind()),
        Some(io::ErrorKind::AlreadyExists)
    );
    assert_eq!(
        content(v, "e/0000000001").as_deref(),
        Some(&b"first"[..]),
        "the loser changes nothing"
    );
    ok(v.write_atomic("e/replaced", b"x"), "write");
    assert_eq!(
        v.create_exclusive("e/replaced", b"y")
            .err()
            .map(|e| e.kind()),
        Some(io::ErrorKind::AlreadyExists),
        "a file written any way counts"
    );
    ok(v.create_exclusive("e/empty", b""), "create an empty file");
    assert_eq!(content(v, "e/empty").as_deref(), Some(&b""[..]));
    assert!(
        v.create_exclusive("missing/1", b"x").is_err(),
        "the parent directory must exist"
    );
    assert_eq!(
        names(v, "e"),
        ["0000000001", "empty", "replaced"],
        "no temporaries are left or listed"
    );
    ok(v.remove("e/0000000001"), "remove");
    ok(
        v.create_exclusive("e/0000000001", b"after removal"),
        "a removed name can be created again",
    );
}

/// Brokers racing for the same epoch: exactly one wins, the content is the
/// winner's, and a reader never sees it partly written.
pub fn create_exclusive_has_exactly_one_winner_among_concurrent_creators(fresh: Factory<'_>) {
    const CREATORS: usize = 6;
    const ROUNDS: usize = 20;
    // Large enough that a non-atomic create would be seen half-written.
    const SIZE: usize = 64 * 1024;
    let f = fresh();
    let v = f.volume.as_ref();
    ok(v.create_dir_all("epochs"), "create epochs");
    for round in 0..ROUNDS {
        let path = format!("epochs/{round:010}");
        let barrier = Barrier::new(CREATORS + 1);
        let outcomes: Vec<(usize, io::Result<()>)> = std::thread::scope(|s| {
            let creators: Vec<_> = (0..CREATORS)
                .map(|i| {
                    let (barrier, path) = (&barrier, &path);
                    s.spawn(move || {
                        barrier.wait();
                        (i, v.create_exclusive(path, &vec![i as u8; SIZE]))
                    })
                })
                .collect();
            barrier.wait();
            // A reader racing the creators: nothing, or one whole content.
            for _ in 0..50 {
                if let Some(data) = content(v, &path) {
                    assert_eq!(
                        data.len(),
                        SIZE,
                        "round {round}: a partial file was visible"
                    );
                    assert!(
                        data.iter().all(|b| *b == data[0]),
                        "round {round}: a mix of contents was visible"
                    );
                }
            }
            creators
                .into_iter()
                .map(|c| c.join().expect("creator thread"))
                .collect()
        });
        let winners: Vec<usize> = outcomes
            .iter()
            .filter(|(_, r)| r.is_ok())
            .map(|(i, _)| *i)
            .collect();
        assert_eq!(winners.len(), 1, "round {round}: winners {winners:?}");
        for (i, r) in &outcomes {
            if let Err(e) = r {
                assert_eq!(
                    e.kind(),
                    io::ErrorKind::AlreadyExists,
                    "round {round}: creator {i} failed otherwise: {e}"
                );
            }
        }
        assert_eq!(
            content(v, &path),
            Some(vec![winners[0] as u8; SIZE]),
            "round {round}: the file holds the winner's content"
        );
    }
    assert_eq!(
        names(v, "epochs").len(),
        ROUNDS,
        "no temporaries are listed"
    );
}

/// The log cleaner's publication: a complete copy written under one name
/// is renamed to the name readers look for, replacing what was there.
pub fn rename_moves_a_file_and_replaces_the_target(fresh: Factory<'_>) {
    let f = fresh();
    let v = f.volume.as_ref();
    ok(v.create_dir_all("p"), "create p");
    ok(v.write_atomic("p/a.tmp", b"copied"), "write");
    ok(v.rename("p/a.tmp", "p/a"), "rename to a new name");
    assert_eq!(content(v, "p/a").as_deref(), Some(&b"copied"[..]));
    assert_eq!(content(v, "p/a.tmp"), None, "the old name is gone");
    assert_eq!(names(v, "p"), ["a"], "and not listed");

    let seg = ok(v.open_segment("p/b.tmp", true), "create segment");
    ok(seg.append(b"a shorter"), "append");
    ok(seg.sync(), "sync");
    drop(seg);
    ok(v.write_atomic("p/a", b"a longer old content"), "write");
    ok(v.rename("p/b.tmp", "p/a"), "rename over an existing file");
    assert_eq!(
        content(v, "p/a").as_deref(),
        Some(&b"a shorter"[..]),
        "the new content, whole, with nothing left of the old"
    );
    assert_eq!(content(v, "p/b.tmp"), None);
    assert_eq!(names(v, "p"), ["a"]);
    let reopened = ok(v.open_segment("p/a", false), "open the renamed file");
    assert_eq!(reopened.len(), 9);
    assert_eq!(ok(reopened.read_at(0, 100), "read"), &b"a shorter"[..]);
    drop(reopened);

    ok(v.rename("p/a", "./p/a"), "rename onto itself");
    assert_eq!(
        content(v, "p/a").as_deref(),
        Some(&b"a shorter"[..]),
        "renaming a file onto itself changes nothing"
    );

    ok(v.create_dir_all("q/r"), "create q/r");
    ok(
        v.rename("p/a", "q/r/moved"),
        "rename into another directory",
    );
    assert_eq!(content(v, "q/r/moved").as_deref(), Some(&b"a shorter"[..]));
    assert!(names(v, "p").is_empty());
    assert_eq!(names(v, "q/r"), ["moved"]);

    assert!(
        v.rename("q/r/moved", "missing/x").is_err(),
        "the target's directory must exist"
    );
    assert!(
        v.rename("q/r", "q/x").is_err(),
        "a directory is not a file to rename"
    );
    ok(v.create_dir_all("q/d"), "create q/d");
    assert!(
        v.rename("q/r/moved", "q/d").is_err(),
        "a directory is not replaced by a file"
    );
    assert_eq!(
        content(v, "q/r/moved").as_deref(),
        Some(&b"a shorter"[..]),
        "a failed rename moves nothing"
    );
    assert_eq!(names(v, "q"), ["d", "r"]);
    assert!(names(v, "q/d").is_empty());
}

pub fn rename_of_a_missing_file_is_not_found(fresh: Factory<'_>) {
    let f = fresh();
    let v = f.volume.as_ref();
    let kind = |r: io::Result<()>| r.err().map(|e| e.kind());
    ok(v.create_dir_all("d"), "create d");
    ok(v.write_atomic("d/kept", b"x"), "write");
    assert_eq!(
        kind(v.rename("d/missing", "d/kept")),
        Some(io::ErrorKind::NotFound)
    );
    assert_eq!(
        kind(v.rename("d/missing", "d/new")),
        Some(io::ErrorKind::NotFound)
    );
    assert_eq!(
        kind(v.rename("nope/missing", "d/new")),
        Some(io::ErrorKind::NotFound),
        "in a missing directory too"
    );
    ok(v.write_atomic("d/gone", b"y"), "write");
    ok(v.remove("d/gone"), "remove");
    assert_eq!(
        kind(v.rename("d/gone", "d/kept")),
        Some(io::ErrorKind::NotFound),
        "a removed file"
    );
    assert_eq!(
        content(v, "d/kept").as_deref(),
        Some(&b"x"[..]),
        "the target is untouched"
    );
    assert_eq!(names(v, "d"), ["kept"], "nothing was created");
}

/// POSIX semantics, as for `write_atomic`: a handle open on the replaced
/// target keeps reading the file it opened, and a handle open on the
/// renamed file keeps that file under its new name.
pub fn rename_keeps_open_handles_on_the_file_they_opened(fresh: Factory<'_>) {
    let f = fresh();
    let v = f.volume.as_ref();
    ok(v.create_dir_all("p"), "create p");
    let old = ok(v.open_segment("p/0.log", true), "create segment");
    ok(old.append(b"old"), "append");
    ok(old.sync(), "sync");
    ok(v.write_atomic("p/0.log.cleaned", b"new!"), "write");
    ok(v.rename("p/0.log.cleaned", "p/0.log"), "rename over it");
    assert_eq!(
        ok(old.read_at(0, 10), "read the replaced file"),
        &b"old"[..]
    );
    assert_eq!(old.len(), 3);
    let new = ok(v.open_segment("p/0.log", false), "reopen");
    assert_eq!(ok(new.read_at(0, 10), "read"), &b"new!"[..]);
    assert_eq!(content(v, "p/0.log").as_deref(), Some(&b"new!"[..]));

    ok(v.write_atomic("p/a", b"moved"), "write");
    let moved = ok(v.open_segment("p/a", false), "open");
    ok(v.rename("p/a", "p/b"), "rename it away");
    assert_eq!(
        ok(moved.read_at(0, 10), "read the renamed file"),
        &b"moved"[..]
    );
    assert_eq!(content(v, "p/b").as_deref(), Some(&b"moved"[..]));
    assert_eq!(content(v, "p/a"), None);
    assert_eq!(
        ok(old.read_at(0, 10), "read the replaced file again"),
        &b"old"[..]
    );
}

/// A reader racing the renames sees the old file or the new one, whole,
/// never no file: the name is replaced in one step.
pub fn rename_replaces_atomically_for_a_racing_reader(fresh: Factory<'_>) {
    const RENAMES: usize = 200;
    let f = fresh();
    let v = f.volume.as_ref();
    ok(v.create_dir_all("d"), "create d");
    ok(v.write_atomic("d/f", &[0; 64]), "first write");
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 1..=RENAMES {
                ok(v.write_atomic("d/f.new", &[i as u8; 64]), "write");
                ok(v.rename("d/f.new", "d/f"), "rename");
            }
            done.store(true, std::sync::atomic::Ordering::Release);
        });
        // Bounded by the writer: it finishes after RENAMES renames.
        while !done.load(std::sync::atomic::Ordering::Acquire) {
            let data = content(v, "d/f").expect("the target never goes missing");
            assert_eq!(data.len(), 64, "a whole file");
            assert!(data.iter().all(|b| *b == data[0]), "one file, not a mix");
        }
    });
    assert_eq!(content(v, "d/f"), Some(vec![RENAMES as u8; 64]));
    assert_eq!(names(v, "d"), ["f"]);
}
