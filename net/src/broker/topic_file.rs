//! Topic metadata files (`kaas_core::layout::topic_version_file`).
//!
//! A topic is born as version 0, `<topic>.json`, created exclusively by the
//! broker that served the CreateTopics (one winner among brokers creating
//! the same name). Every later change (CreatePartitions, AlterConfigs,
//! IncrementalAlterConfigs) creates the next version, `<topic>@<N>.json`,
//! exclusively too, and never rewrites a file in place: each version has
//! exactly one writer, and of two brokers changing one topic at once only
//! one wins version N; the other reads the winner's file, applies its
//! change on top of it (or refuses it, validated against the new state) and
//! tries N+1. Readers take the newest version carrying the topic id of
//! version 0; the writer of version N removes the version it replaced once
//! N is durable. The topic id is minted at creation, so a deleted and
//! re-created topic is a different topic to every client that cached the
//! id, and a deleted incarnation's leftover versions are never read as the
//! new one's.

use crate::volume::Volume;
use kaas_core::layout::{self, TOPIC_FILES_DIR};
use kaas_core::protocol::Uuid;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopicFile {
    pub name: String,
    /// Hex of the 128-bit topic id.
    pub topic_id: String,
    pub partitions: i32,
    #[serde(default)]
    pub configs: BTreeMap<String, String>,
    /// Which version of the topic's metadata this is; 0 as created (and
    /// for files written before versions existed).
    #[serde(default)]
    pub version: u32,
}

impl TopicFile {
    pub fn id(&self) -> Option<Uuid> {
        u128::from_str_radix(&self.topic_id, 16)
            .ok()
            .map(Uuid::from_u128)
    }
}

/// A topic's newest metadata, and the version a change must create next.
#[derive(Debug, Clone, PartialEq)]
pub struct Current {
    pub file: TopicFile,
    /// One past the highest version of this name on the volume, whatever
    /// incarnation wrote it, so a change never collides with a deleted
    /// incarnation's leftover.
    pub next_version: u32,
}

use super::versions::{self, READ_ATTEMPTS};

/// The path of version 0, whose existence is the topic's.
pub fn path(name: &str) -> String {
    layout::topic_file(name)
}

/// Creates a new topic's file (version 0): fails with `AlreadyExists` if a
/// topic of that name exists, even one another broker created a moment ago.
pub fn create(volume: &dyn Volume, file: &TopicFile) -> io::Result<()> {
    debug_assert_eq!(file.version, 0);
    volume.create_dir_all(TOPIC_FILES_DIR)?;
    volume.create_exclusive(&path(&file.name), &encode(file)?)
}

/// Publishes a change: `next` (built on `current`, with
/// `next.version == current.next_version`) is created exclusively. Fails
/// with `AlreadyExists` when another broker published that version first:
/// the caller reads again and rebuilds its change on the winner's. Once
/// `next` is durable, the version `versions::KEPT_VERSIONS` older is removed (best
/// effort: a leftover is never read, the newest version wins).
pub fn publish(volume: &dyn Volume, current: &Current, next: &TopicFile) -> io::Result<()> {
    if next.version != current.next_version || next.topic_id != current.file.topic_id {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a topic change must be the next version of the same topic",
        ));
    }
    versions::publish(
        volume,
        |v| layout::topic_version_file(&next.name, v),
        next.version,
        &encode(next)?,
    )
}

/// Removes topic `name`: version 0 first (from then on the topic does not
/// exist for any reader), durably, then its later versions. A crash in
/// between leaves versions nobody reads (their id is the deleted topic's).
/// The removal must be durable before the caller removes the partitions:
/// a topic file that a power loss brought back would name partitions
/// whose records are gone.
pub fn remove(volume: &dyn Volume, name: &str, topic_id: &str) -> io::Result<()> {
    volume.remove(&path(name))?;
    volume.sync_dir(TOPIC_FILES_DIR)?;
    let entries = volume.list(TOPIC_FILES_DIR)?;
    for version in versions_by_topic(&entries).remove(name).unwrap_or_default() {
        let file = layout::topic_version_file(name, version);
        // Only this incarnation's: a topic of the same name created since
        // version 0 went keeps its own versions.
        let ours = volume
            .read(&file)?
            .and_then(|bytes| parse(name, version, &bytes))
            .is_some_and(|f| f.topic_id == topic_id);
        if ours {
            volume.remove(&file)?;
        }
    }
    Ok(())
}

/// The newest metadata of topic `name`, if it exists.
pub fn read(volume: &dyn Volume, name: &str) -> io::Result<Option<TopicFile>> {
    Ok(read_current(volume, name)?.map(|c| c.file))
}

/// The newest metadata of topic `name` and the version to create next.
pub fn read_current(volume: &dyn Volume, name: &str) -> io::Result<Option<Current>> {
    for _ in 0..READ_ATTEMPTS {
        let entries = volume.list(TOPIC_FILES_DIR)?;
        let versions = versions_by_topic(&entries).remove(name).unwrap_or_default();
        match resolve(volume, name, &versions)? {
            Resolved::Found(current) => return beyond_the_listing(volume, current).map(Some),
            Resolved::Absent => return Ok(None),
            Resolved::Replaced => continue,
        }
    }
    Err(replaced_too_often(name))
}

/// Newer versions than the listing showed, looked up by name: a listing
/// may be stale (an NFS client's cached directory), a lookup is exact, and
/// a change built on an old version would only lose its race for the next
/// one again and again.
fn beyond_the_listing(volume: &dyn Volume, mut current: Current) -> io::Result<Current> {
    let name = current.file.name.clone();
    loop {
        let next = current.next_version;
        let Some(bytes) = volume.read(&layout::topic_version_file(&name, next))? else {
            return Ok(current);
        };
        current.next_version = next.saturating_add(1);
        if let Some(file) = parse(&name, next, &bytes) {
            if file.topic_id == current.file.topic_id {
                current.file = file;
            }
        }
    }
}

/// Every topic's newest metadata. A file that does not parse is reported
/// and skipped rather than taking the broker down: its partitions stay on
/// disk untouched for an operator to inspect.
pub fn read_all(volume: &dyn Volume) -> io::Result<Vec<TopicFile>> {
    let entries = volume.list(TOPIC_FILES_DIR)?;
    let mut out = Vec::new();
    for (name, versions) in versions_by_topic(&entries) {
        match resolve(volume, name, &versions)? {
            Resolved::Found(current) => out.push(current.file),
            Resolved::Absent => {}
            Resolved::Replaced => out.extend(read(volume, name)?),
        }
    }
    Ok(out)
}

enum Resolved {
    Found(Current),
    /// No version 0 (never created, or deleted), or it is invalid.
    Absent,
    /// A listed version was gone when read: a newer one replaced it since
    /// the listing, so list again.
    Replaced,
}

/// Picks topic `name`'s newest valid version of the incarnation version 0
/// names. `versions`: every version of the name listed, newest first.
fn resolve(volume: &dyn Volume, name: &str, versions: &[u32]) -> io::Result<Resolved> {
    if versions.last() != Some(&0) {
        return Ok(Resolved::Absent);
    }
    let Some(bytes) = volume.read(&path(name))? else {
        return Ok(Resolved::Absent);
    };
    let Some(base) = parse(name, 0, &bytes) else {
        return Ok(Resolved::Absent);
    };
    let next_version = versions[0].saturating_add(1);
    for &version in versions.iter().filter(|&&v| v > 0) {
        let Some(bytes) = volume.read(&layout::topic_version_file(name, version))? else {
            return Ok(Resolved::Replaced);
        };
        match parse(name, version, &bytes) {
            Some(file) if file.topic_id == base.topic_id => {
                return Ok(Resolved::Found(Current { file, next_version }))
            }
            // A deleted incarnation's leftover, or a file that does not
            // parse (reported): an older version of this one may follow.
            _ => continue,
        }
    }
    Ok(Resolved::Found(Current {
        file: base,
        next_version,
    }))
}

/// The topic files listed, by topic name, each with its versions newest
/// first (so version 0, when listed, comes last).
fn versions_by_topic(entries: &[String]) -> BTreeMap<&str, Vec<u32>> {
    let mut by_topic: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
    for entry in entries {
        if let Some((name, version)) = layout::topic_version_of_file(entry) {
            by_topic.entry(name).or_default().push(version);
        }
    }
    for versions in by_topic.values_mut() {
        versions.sort_unstable_by(|a, b| b.cmp(a));
    }
    by_topic
}

fn encode(file: &TopicFile) -> io::Result<Vec<u8>> {
    serde_json::to_vec_pretty(file).map_err(io::Error::other)
}

fn parse(name: &str, version: u32, bytes: &[u8]) -> Option<TopicFile> {
    let file = layout::topic_version_file(name, version);
    match serde_json::from_slice::<TopicFile>(bytes) {
        Ok(f) if f.name == name && f.version == version && f.partitions > 0 && f.id().is_some() => {
            Some(f)
        }
        Ok(_) => {
            tracing::error!(%file, "topic file is inconsistent; ignoring it");
            None
        }
        Err(e) => {
            tracing::error!(%file, error = %e, "topic file does not parse; ignoring it");
            None
        }
    }
}

fn replaced_too_often(name: &str) -> io::Error {
    io::Error::other(format!(
        "topic {name}'s metadata was replaced {READ_ATTEMPTS} times while being read"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::volume::LocalVolume;

    /// A fresh volume in a temporary directory (kept alive by the guard).
    fn volume() -> (tempfile::TempDir, LocalVolume) {
        let dir = tempfile::tempdir().unwrap();
        let v = LocalVolume::new(dir.path()).unwrap();
        (dir, v)
    }

    fn topic(name: &str, id: u128, partitions: i32) -> TopicFile {
        TopicFile {
            name: name.into(),
            topic_id: format!("{id:032x}"),
            partitions,
            configs: BTreeMap::new(),
            version: 0,
        }
    }

    /// Topic `t` created with 1 partition, then grown to each count of
    /// `counts` in turn, one version each.
    fn grown(v: &dyn Volume, counts: std::ops::RangeInclusive<i32>) {
        create(v, &topic("t", 1, 1)).unwrap();
        for partitions in counts {
            let current = read_current(v, "t").unwrap().unwrap();
            publish(
                v,
                &current,
                &changed(&current, |f| f.partitions = partitions),
            )
            .unwrap();
        }
    }

    fn changed(current: &Current, f: impl FnOnce(&mut TopicFile)) -> TopicFile {
        let mut next = current.file.clone();
        next.version = current.next_version;
        f(&mut next);
        next
    }

    #[test]
    fn each_change_is_a_new_version_and_the_newest_is_read() {
        let (_dir, v) = volume();
        grown(&v, 2..=4);
        let current = read_current(&v, "t").unwrap().unwrap();
        assert_eq!((current.file.version, current.file.partitions), (3, 4));
        assert_eq!(current.next_version, 4);
        assert_eq!(
            v.list(TOPIC_FILES_DIR).unwrap(),
            ["t.json", "t@1.json", "t@2.json", "t@3.json"],
            "the newest versions are kept"
        );
        assert_eq!(read_all(&v).unwrap(), vec![current.file]);
    }

    #[test]
    fn of_two_changes_built_on_one_version_only_one_is_published() {
        let (_dir, v) = volume();
        create(&v, &topic("t", 1, 1)).unwrap();
        let seen = read_current(&v, "t").unwrap().unwrap();
        let first = changed(&seen, |f| {
            f.configs.insert("retention.ms".into(), "1".into());
        });
        let second = changed(&seen, |f| f.partitions = 9);
        publish(&v, &seen, &first).unwrap();
        let lost = publish(&v, &seen, &second).unwrap_err();
        assert_eq!(lost.kind(), io::ErrorKind::AlreadyExists);
        // The loser rebuilds on the winner's version: both changes hold.
        let now = read_current(&v, "t").unwrap().unwrap();
        let again = changed(&now, |f| f.partitions = 9);
        publish(&v, &now, &again).unwrap();
        let last = read(&v, "t").unwrap().unwrap();
        assert_eq!(last.partitions, 9);
        assert_eq!(last.configs["retention.ms"], "1");
    }

    #[test]
    fn a_deleted_incarnations_leftover_versions_are_never_read_as_the_new_ones() {
        let (_dir, v) = volume();
        create(&v, &topic("t", 1, 1)).unwrap();
        let current = read_current(&v, "t").unwrap().unwrap();
        publish(&v, &current, &changed(&current, |f| f.partitions = 5)).unwrap();
        // A deletion that crashed after removing version 0.
        v.remove(&path("t")).unwrap();
        assert_eq!(read(&v, "t").unwrap(), None);
        assert_eq!(read_all(&v).unwrap(), vec![]);
        create(&v, &topic("t", 2, 3)).unwrap();
        let reborn = read_current(&v, "t").unwrap().unwrap();
        assert_eq!(
            (reborn.file.topic_id.clone(), reborn.file.partitions),
            (format!("{:032x}", 2), 3)
        );
        assert_eq!(reborn.next_version, 2, "numbered past the leftover");
        publish(&v, &reborn, &changed(&reborn, |f| f.partitions = 4)).unwrap();
        assert_eq!(read(&v, "t").unwrap().unwrap().partitions, 4);
        // Removing the new incarnation leaves nothing of it, and only it.
        remove(&v, "t", &format!("{:032x}", 2)).unwrap();
        assert_eq!(v.list(TOPIC_FILES_DIR).unwrap(), ["t@1.json"]);
    }

    #[test]
    fn only_the_newest_versions_are_kept() {
        let (_dir, v) = volume();
        grown(&v, 2..=30);
        let listed = v.list(TOPIC_FILES_DIR).unwrap();
        assert_eq!(
            listed.len(),
            1 + versions::KEPT_VERSIONS as usize,
            "{listed:?}"
        );
        assert!(
            listed.contains(&"t@29.json".to_string()) && listed.contains(&"t@14.json".to_string())
        );
        assert_eq!(read(&v, "t").unwrap().unwrap().partitions, 30);
    }

    #[test]
    fn versions_a_stale_listing_hides_are_found_by_name() {
        let (_dir, v) = volume();
        grown(&v, 2..=3);
        let stale = crate::volume::hooked::HookedVolume::new(v, |_| Ok(()))
            .hiding_from_listings(|name| name == "t@2.json");
        let current = read_current(&stale, "t").unwrap().unwrap();
        assert_eq!((current.file.version, current.file.partitions), (2, 3));
        assert_eq!(current.next_version, 3);
    }

    #[test]
    fn a_change_that_is_not_the_next_version_is_refused() {
        let (_dir, v) = volume();
        create(&v, &topic("t", 1, 1)).unwrap();
        let current = read_current(&v, "t").unwrap().unwrap();
        let mut skipping = changed(&current, |f| f.partitions = 2);
        skipping.version += 1;
        let e = publish(&v, &current, &skipping).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        let mut other = changed(&current, |f| f.partitions = 2);
        other.topic_id = format!("{:032x}", 7);
        assert!(publish(&v, &current, &other).is_err());
    }
}
