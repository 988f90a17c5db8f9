//! Topic metadata files (`kaas_core::layout::topic_file`).
//!
//! One file per topic, written atomically (tmp + fsync + rename) by the broker
//! that administers it. The topic id is minted at creation, so a deleted and
//! re-created topic is a different topic to every client that cached the id.

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
}

impl TopicFile {
    pub fn id(&self) -> Option<Uuid> {
        u128::from_str_radix(&self.topic_id, 16)
            .ok()
            .map(Uuid::from_u128)
    }
}

pub fn path(name: &str) -> String {
    layout::topic_file(name)
}

pub fn write(volume: &dyn Volume, file: &TopicFile) -> io::Result<()> {
    volume.create_dir_all(TOPIC_FILES_DIR)?;
    let json = serde_json::to_vec_pretty(file).map_err(io::Error::other)?;
    volume.write_atomic(&path(&file.name), &json)
}

/// Creates a new topic's file: fails with `AlreadyExists` if a topic of
/// that name exists, even one another broker created a moment ago.
pub fn create(volume: &dyn Volume, file: &TopicFile) -> io::Result<()> {
    volume.create_dir_all(TOPIC_FILES_DIR)?;
    let json = serde_json::to_vec_pretty(file).map_err(io::Error::other)?;
    volume.create_exclusive(&path(&file.name), &json)
}

/// The file of topic `name`, if it exists and is valid.
pub fn read(volume: &dyn Volume, name: &str) -> io::Result<Option<TopicFile>> {
    let Some(bytes) = volume.read(&path(name))? else {
        return Ok(None);
    };
    Ok(parse(name, &bytes))
}

fn parse(name: &str, bytes: &[u8]) -> Option<TopicFile> {
    match serde_json::from_slice::<TopicFile>(bytes) {
        Ok(f) if f.name == name && f.partitions > 0 && f.id().is_some() => Some(f),
        Ok(_) => {
            tracing::error!(file = %path(name), "topic file is inconsistent; ignoring it");
            None
        }
        Err(e) => {
            tracing::error!(file = %path(name), error = %e, "topic file does not parse; ignoring it");
            None
        }
    }
}

/// Every topic file on the volume. A file that does not parse is reported
/// and skipped rather than taking the broker down: its partitions stay on
/// disk untouched for an operator to inspect.
pub fn read_all(volume: &dyn Volume) -> io::Result<Vec<TopicFile>> {
    let mut out = Vec::new();
    for entry in volume.list(TOPIC_FILES_DIR)? {
        let Some(name) = layout::topic_of_file(&entry) else {
            continue;
        };
        out.extend(read(volume, name)?);
    }
    Ok(out)
}
