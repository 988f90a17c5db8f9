//! Every path kaas uses on the volume, and the parsers back from file names.
//!
//! One module names them all so that the layout in docs/architecture.md is
//! this file, two writers can never disagree about a name, and the
//! simulator, the fuzz targets and the broker build the same strings. Pure
//! string functions: no IO.
//!
//! ```text
//! topics/<topic>-<partition>/<base offset, 20 digits>[_<epoch, 10 digits>].log       segment
//! topics/<topic>-<partition>/<base offset, 20 digits>[_<epoch, 10 digits>].index     sparse index of a sealed segment
//! topics/<topic>-<partition>/<base offset, 20 digits>[_<epoch, 10 digits>].txnindex  aborted-transactions index
//! topics/<topic>-<partition>/leader-epoch-checkpoint[_<epoch, 10 digits>] where each leader epoch's log starts, one per epoch
//! topics/<topic>-<partition>/log-start-offset[_<epoch, 10 digits>] log start and first segment, one per leader epoch
//! topics/<topic>-<partition>/producer-state.snapshot            producer table as of an offset
//! __cluster/cluster.json                                        cluster id
//! __cluster/topics/<topic>.json                                 topic metadata, version 0 (writer: its creator)
//! __cluster/topics/<topic>@<version>.json                       a later version of it (writer: whoever created it)
//! __cluster/producer_ids/kaas-<broker>.json                     PID block end (writer: that broker)
//! __cluster/producer_fences/from-<broker>.json                  fence log (writer: that broker)
//! __cluster/txn_state/slot-<N>.json                             transaction slot snapshot (writer: slot owner)
//! __cluster/txn_state/slot-<N>.log                              its journal since the snapshot (writer: slot owner)
//! __cluster/group_state/slot-<N>.json                           group slot snapshot (writer: slot owner)
//! __cluster/group_state/slot-<N>.log                            its journal since the snapshot (writer: slot owner)
//! __cluster/marker_queue/to-<broker>/<pid>-<epoch>.json         markers another broker must write
//! __cluster/brokers/kaas-<broker>.json                          liveness / registration
//! __cluster/epochs/partitions/<topic>-<partition>/<epoch>       partition ownership epochs
//! __cluster/epochs/txn_slots/<slot>/<epoch>                     transaction coordinator epochs
//! __cluster/epochs/group_slots/<slot>/<epoch>                   group coordinator epochs
//! ```
//!
//! A segment file is named with the leader epoch that created it (see
//! [`SegmentId`]): a leader writes only its own epoch's files, so a deposed
//! leader that keeps appending (a zombie) never touches the files of its
//! successor, and the checkpoint says up to which offset each older epoch's
//! files are read. Epoch 0 is spelled without the `_<epoch>` part, so every
//! volume written before epochs existed is already in this layout.
//!
//! Topic names are restricted to `[a-zA-Z0-9._-]` (see `topic_name`), so
//! `<topic>-<partition>` never contains a `/` and never escapes its parent.

/// Digits of the zero-padded base offset in segment file names, so that
/// name order is offset order. 20 digits hold every non-negative `i64`.
const OFFSET_DIGITS: usize = 20;
const LOG_SUFFIX: &str = ".log";
const INDEX_SUFFIX: &str = ".index";
const TXN_INDEX_SUFFIX: &str = ".txnindex";
/// Between a segment's stem and the epoch of the leader that wrote a
/// cleaned copy of it (`kaas_net::log::cleaner`).
const CLEANED_MARK: &str = ".cleaned_";
const CLEANING_SUFFIX: &str = ".cleaning";
const LOG_START_OFFSET_FILE: &str = "log-start-offset";
const LEADER_EPOCH_CHECKPOINT_FILE: &str = "leader-epoch-checkpoint";
/// Between the base offset and the epoch in segment file names. It sorts
/// after the `.` that ends an epoch-0 name, so at one base offset the names
/// sort in epoch order too.
const EPOCH_SEPARATOR: char = '_';
const PRODUCER_SNAPSHOT_STEM: &str = "producer-state";
const PRODUCER_SNAPSHOT_SUFFIX: &str = ".snapshot";
const PRODUCER_SNAPSHOT_FILE: &str = "producer-state.snapshot";

/// Digits of the zero-padded epoch in ownership-epoch file names, so that
/// name order is epoch order. 10 digits hold every non-negative `i32`,
/// which is what Kafka's partition leader and coordinator epochs are.
const EPOCH_DIGITS: usize = 10;

// ------------------------------------------------------------------ partitions

/// Parent of every partition directory.
pub const PARTITIONS_DIR: &str = "topics";

/// The directory of a partition.
pub fn partition_dir(topic: &str, partition: i32) -> String {
    format!("{PARTITIONS_DIR}/{topic}-{partition}")
}

/// The directory of a partition, given the name of its entry under
/// [`PARTITIONS_DIR`] (as `Volume::list` returns it).
pub fn partition_dir_of_entry(entry: &str) -> String {
    format!("{PARTITIONS_DIR}/{entry}")
}

/// The topic and partition an entry under [`PARTITIONS_DIR`] names
/// (`<topic>-<index>`, as [`partition_dir`] writes it; a topic name may
/// hold `-` itself), or `None` for an entry of no partition.
pub fn partition_of_entry(entry: &str) -> Option<(&str, i32)> {
    let (topic, index) = entry.rsplit_once('-')?;
    let index = index.parse::<i32>().ok().filter(|i| *i >= 0)?;
    (!topic.is_empty()).then_some((topic, index))
}

/// Which segment a file belongs to: its base offset and the leader epoch
/// that created it. Ordered by offset, then epoch, which is also the order
/// of the file names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SegmentId {
    pub base_offset: i64,
    pub epoch: i32,
}

impl SegmentId {
    pub fn new(base_offset: i64, epoch: i32) -> SegmentId {
        SegmentId { base_offset, epoch }
    }

    /// The file-name stem: the zero-padded base offset, then `_` and the
    /// zero-padded epoch unless the epoch is 0.
    fn stem(&self) -> String {
        let base = self.base_offset;
        match self.epoch {
            0 => format!("{base:0OFFSET_DIGITS$}"),
            epoch => format!("{base:0OFFSET_DIGITS$}{EPOCH_SEPARATOR}{epoch:0EPOCH_DIGITS$}"),
        }
    }
}

/// The segment file starting at `base_offset`, created by leader `epoch`,
/// in partition directory `dir`.
pub fn segment_path(dir: &str, base_offset: i64, epoch: i32) -> String {
    format!(
        "{dir}/{}{LOG_SUFFIX}",
        SegmentId::new(base_offset, epoch).stem()
    )
}

/// The sparse index of that segment.
pub fn index_path(dir: &str, base_offset: i64, epoch: i32) -> String {
    format!(
        "{dir}/{}{INDEX_SUFFIX}",
        SegmentId::new(base_offset, epoch).stem()
    )
}

/// The aborted-transactions index of that segment.
pub fn txn_index_path(dir: &str, base_offset: i64, epoch: i32) -> String {
    format!(
        "{dir}/{}{TXN_INDEX_SUFFIX}",
        SegmentId::new(base_offset, epoch).stem()
    )
}

/// A cleaned copy of segment `id` (compaction), written by the leader at
/// `by`: the same offsets, fewer records. Named for both epochs: the
/// segment's, because it stands in for that file in the log, and the
/// cleaner's, because a leader writes only files of its own epoch.
pub fn cleaned_segment_path(dir: &str, id: SegmentId, by: i32) -> String {
    format!(
        "{dir}/{}{CLEANED_MARK}{by:0EPOCH_DIGITS$}{LOG_SUFFIX}",
        id.stem()
    )
}

/// Where that cleaned copy is written before it is complete: synced, it
/// is renamed to [`cleaned_segment_path`], so a copy under its final name
/// is always whole. One left over from a crash is removed at the next
/// opening.
pub fn cleaning_path(dir: &str, id: SegmentId, by: i32) -> String {
    format!(
        "{dir}/{}{CLEANED_MARK}{by:0EPOCH_DIGITS$}{CLEANING_SUFFIX}",
        id.stem()
    )
}

/// The sparse index of that cleaned copy, written after the copy is in
/// place. Like a segment's, a missing or torn one is rebuilt by a scan.
pub fn cleaned_index_path(dir: &str, id: SegmentId, by: i32) -> String {
    format!(
        "{dir}/{}{CLEANED_MARK}{by:0EPOCH_DIGITS$}{INDEX_SUFFIX}",
        id.stem()
    )
}

/// The leader-epoch checkpoint the partition's leader at `epoch` writes:
/// where each leader epoch's log starts
/// (`kaas_core::partition::leader_epochs`). Each epoch writes its own
/// file, as with segments and log-start files: a successor finds its
/// predecessor's by name, never an older version of one shared file that
/// an NFS client's cache may still hold. Epoch 0 keeps the name every
/// epoch shared before (epoch 0 itself never takes a partition over, so
/// never writes one).
pub fn leader_epoch_checkpoint_path(dir: &str, epoch: i32) -> String {
    match epoch {
        0 => format!("{dir}/{LEADER_EPOCH_CHECKPOINT_FILE}"),
        epoch => {
            format!("{dir}/{LEADER_EPOCH_CHECKPOINT_FILE}{EPOCH_SEPARATOR}{epoch:0EPOCH_DIGITS$}")
        }
    }
}

/// The leader epoch whose checkpoint is named `name` (an entry of a
/// partition directory), `None` for any other name. One spelling per
/// epoch, as [`leader_epoch_checkpoint_path`] writes it.
pub fn leader_epoch_checkpoint_epoch(name: &str) -> Option<i32> {
    per_epoch_name(name, LEADER_EPOCH_CHECKPOINT_FILE)
}

/// The log start (and first segment) the partition's leader at `epoch`
/// persists before each deletion. Each leader epoch writes its own file, as
/// with segments: a deposed leader still deleting writes only its own
/// epoch's, which nobody reads once a successor has opened the log (an
/// opening reads the greatest epoch's file at or below its own). Epoch 0
/// keeps the name every epoch shared before.
pub fn log_start_offset_path(dir: &str, epoch: i32) -> String {
    match epoch {
        0 => format!("{dir}/{LOG_START_OFFSET_FILE}"),
        epoch => format!("{dir}/{LOG_START_OFFSET_FILE}{EPOCH_SEPARATOR}{epoch:0EPOCH_DIGITS$}"),
    }
}

/// The leader epoch whose log-start file is named `name` (an entry of a
/// partition directory), `None` for any other name. One spelling per
/// epoch, as [`log_start_offset_path`] writes it.
pub fn log_start_epoch(name: &str) -> Option<i32> {
    per_epoch_name(name, LOG_START_OFFSET_FILE)
}

/// The epoch of `name` if it is `stem` (epoch 0) or `stem_<epoch>` with a
/// positive zero-padded epoch.
fn per_epoch_name(name: &str, stem: &str) -> Option<i32> {
    if name == stem {
        return Some(0);
    }
    let epoch = name.strip_prefix(stem)?.strip_prefix(EPOCH_SEPARATOR)?;
    parse_epoch_file(epoch).filter(|&e| e > 0)
}

/// The producer-state snapshot a partition's leader at `epoch` writes:
/// each epoch its own file, as with segments, so a deposed leader's late
/// snapshot never replaces its successor's. Epoch 0 keeps the name it had
/// before epochs were named.
pub fn producer_snapshot_path(dir: &str, epoch: i32) -> String {
    match epoch {
        0 => format!("{dir}/{PRODUCER_SNAPSHOT_FILE}"),
        epoch => format!(
            "{dir}/{PRODUCER_SNAPSHOT_STEM}{EPOCH_SEPARATOR}{epoch:0EPOCH_DIGITS$}{PRODUCER_SNAPSHOT_SUFFIX}"
        ),
    }
}

/// The leader epoch whose producer snapshot is named `name` (an entry of a
/// partition directory), `None` for any other name. One spelling per
/// epoch, as [`producer_snapshot_path`] writes it.
pub fn producer_snapshot_epoch(name: &str) -> Option<i32> {
    if name == PRODUCER_SNAPSHOT_FILE {
        return Some(0);
    }
    let epoch = name
        .strip_prefix(PRODUCER_SNAPSHOT_STEM)?
        .strip_prefix(EPOCH_SEPARATOR)?
        .strip_suffix(PRODUCER_SNAPSHOT_SUFFIX)?;
    parse_epoch_file(epoch).filter(|&e| e > 0)
}

/// What an entry of a partition directory is, judged by its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    Segment(SegmentId),
    Index(SegmentId),
    /// A segment's aborted-transactions index.
    TxnIndex(SegmentId),
    /// A cleaned copy of a segment, and the epoch that wrote it.
    CleanedSegment(SegmentId, i32),
    /// The index of a cleaned copy.
    CleanedIndex(SegmentId, i32),
    /// A cleaned copy still being written (or left by a crash).
    Cleaning(SegmentId, i32),
    Other,
}

/// Classifies a file name (not a path) found in a partition directory.
pub fn classify(name: &str) -> Entry {
    if let Some((id, by)) = name.strip_suffix(LOG_SUFFIX).and_then(parse_cleaned) {
        Entry::CleanedSegment(id, by)
    } else if let Some((id, by)) = name.strip_suffix(INDEX_SUFFIX).and_then(parse_cleaned) {
        Entry::CleanedIndex(id, by)
    } else if let Some((id, by)) = name.strip_suffix(CLEANING_SUFFIX).and_then(parse_cleaned) {
        Entry::Cleaning(id, by)
    } else if let Some(id) = name.strip_suffix(LOG_SUFFIX).and_then(parse_stem) {
        Entry::Segment(id)
    } else if let Some(id) = name.strip_suffix(INDEX_SUFFIX).and_then(parse_stem) {
        Entry::Index(id)
    } else if let Some(id) = name.strip_suffix(TXN_INDEX_SUFFIX).and_then(parse_stem) {
        Entry::TxnIndex(id)
    } else {
        Entry::Other
    }
}

/// A cleaned copy's stem: a segment's stem, [`CLEANED_MARK`] and the
/// cleaner's epoch.
fn parse_cleaned(stem: &str) -> Option<(SegmentId, i32)> {
    let (segment, by) = stem.split_once(CLEANED_MARK)?;
    Some((parse_stem(segment)?, parse_epoch_file(by)?))
}

/// Classifies the last component of a volume path.
pub fn classify_path(path: &str) -> Entry {
    classify(path.rsplit('/').next().unwrap_or(path))
}

/// The segment a file-name stem names: a base offset alone (epoch 0), or a
/// base offset, `_` and an epoch of exactly [`EPOCH_DIGITS`] digits that is
/// not 0 (epoch 0 has one spelling only, so names and segments map one to
/// one).
pub fn parse_stem(stem: &str) -> Option<SegmentId> {
    match stem.split_once(EPOCH_SEPARATOR) {
        None => Some(SegmentId::new(parse_base(stem)?, 0)),
        Some((base, epoch)) => {
            let epoch = parse_epoch_file(epoch).filter(|&e| e > 0)?;
            Some(SegmentId::new(parse_base(base)?, epoch))
        }
    }
}

/// The base offset spelled by exactly [`OFFSET_DIGITS`] decimal digits.
pub fn parse_base(digits: &str) -> Option<i64> {
    if digits.len() != OFFSET_DIGITS || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// What a partition's `log-start-offset` file records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogStart {
    /// The low watermark: no offset below it is served.
    pub offset: i64,
    /// The log's first segment when the file was written: every deletion
    /// (DeleteRecords and retention alike) records the segment that will
    /// be first before it removes any file, and an opening that finds the
    /// first segment changed records it too. A lookup by this name tells a
    /// segment a stale directory listing hides from one that was deleted,
    /// which the log start alone cannot. `None` in files written before
    /// kaas recorded it.
    pub first_segment: Option<SegmentId>,
}

/// The content of the log start offset file: the offset, then the first
/// segment's base offset and epoch, as decimal numbers on one line.
pub fn encode_log_start(start: &LogStart) -> Vec<u8> {
    match start.first_segment {
        Some(first) => format!("{} {} {}\n", start.offset, first.base_offset, first.epoch),
        None => format!("{}\n", start.offset),
    }
    .into_bytes()
}

/// The log start in a file's content: one non-negative number (as kaas
/// wrote it before it recorded the first segment), or three. `None` for
/// anything else.
pub fn decode_log_start(data: &[u8]) -> Option<LogStart> {
    let text = std::str::from_utf8(data).ok()?;
    let mut numbers = text.split_ascii_whitespace();
    let offset: i64 = numbers.next()?.parse().ok().filter(|o| *o >= 0)?;
    let first_segment = match (numbers.next(), numbers.next()) {
        (None, _) => None,
        (Some(base), Some(epoch)) => Some(SegmentId::new(
            base.parse()
                .ok()
                .filter(|b: &i64| (0..=offset).contains(b))?,
            epoch.parse().ok().filter(|e: &i32| *e >= 0)?,
        )),
        (Some(_), None) => return None,
    };
    if numbers.next().is_some() {
        return None;
    }
    Some(LogStart {
        offset,
        first_segment,
    })
}

// --------------------------------------------------------------- cluster files

/// Parent of every file that is not partition data.
pub const CLUSTER_DIR: &str = "__cluster";

/// The cluster id.
pub const CLUSTER_FILE: &str = "__cluster/cluster.json";

/// Topic metadata files.
pub const TOPIC_FILES_DIR: &str = "__cluster/topics";

/// The metadata file of topic `name` as created (version 0). Its
/// existence is the topic's: deleting a topic removes it first.
pub fn topic_file(name: &str) -> String {
    topic_version_file(name, 0)
}

/// Version `version` of topic `name`'s metadata. Every change to a topic
/// (CreatePartitions, AlterConfigs) creates the next version exclusively
/// rather than rewriting the file in place, so each version has exactly one
/// writer and two brokers changing one topic at once cannot both win.
/// Version 0 is spelled without `@0`, as topic files were before versions.
/// `@` is not a topic name character, so a version never reads as a name.
pub fn topic_version_file(name: &str, version: u32) -> String {
    if version == 0 {
        format!("{TOPIC_FILES_DIR}/{name}.json")
    } else {
        format!("{TOPIC_FILES_DIR}/{name}@{version}.json")
    }
}

/// The topic and version named by an entry of [`TOPIC_FILES_DIR`], if it
/// is a topic file ([`topic_version_file`]).
pub fn topic_version_of_file(entry: &str) -> Option<(&str, u32)> {
    let stem = entry.strip_suffix(".json")?;
    let (name, version) = match stem.split_once('@') {
        None => (stem, 0),
        Some((name, digits)) => {
            // Spelled as written: no sign, no leading zero, never `@0`.
            if digits.starts_with('0') || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            (name, digits.parse().ok()?)
        }
    };
    (!name.is_empty() && !name.contains('@')).then_some((name, version))
}

/// The topic named by an entry of [`TOPIC_FILES_DIR`], if it is the
/// topic's version-0 file (the one whose existence is the topic's).
pub fn topic_of_file(entry: &str) -> Option<&str> {
    topic_version_of_file(entry).and_then(|(name, version)| (version == 0).then_some(name))
}

/// Dynamic broker configs (KIP-226): each broker's own, and the cluster
/// default's versions.
pub const BROKER_CONFIGS_DIR: &str = "__cluster/broker_configs";

/// The dynamic configs set for broker `broker` alone (a BROKER resource
/// named by its id). Its one writer is that broker, which replaces it whole
/// (`write_atomic`): another broker's id is refused before anything is
/// written, as Kafka refuses it.
pub fn broker_config_file(broker: i32) -> String {
    format!("{BROKER_CONFIGS_DIR}/kaas-{broker}.json")
}

/// Version `version` (1 and up) of the cluster-wide dynamic broker
/// default (the BROKER resource named ""). Any broker may change it, so,
/// as with topic versions, every change creates the next version
/// exclusively: each version has one writer, and of two brokers changing
/// the default at once one wins and the other rebuilds its change on the
/// winner's. No version on the volume means nothing is set.
pub fn broker_default_config_file(version: u32) -> String {
    format!("{BROKER_CONFIGS_DIR}/default@{version}.json")
}

/// The version named by an entry of [`BROKER_CONFIGS_DIR`], if it is a
/// cluster-default file ([`broker_default_config_file`]).
pub fn broker_default_config_version(entry: &str) -> Option<u32> {
    let digits = entry.strip_prefix("default@")?.strip_suffix(".json")?;
    // Spelled as written: no sign, no leading zero, never 0.
    if digits.is_empty() || digits.starts_with('0') || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Producer id block files.
pub const PRODUCER_IDS_DIR: &str = "__cluster/producer_ids";

/// Where broker `broker`'s next producer id block starts.
pub fn producer_id_block_file(broker: i32) -> String {
    format!("{PRODUCER_IDS_DIR}/kaas-{broker}.json")
}

/// Producer fence logs.
pub const PRODUCER_FENCES_DIR: &str = "__cluster/producer_fences";

/// The fences broker `broker` has issued.
pub fn producer_fence_file(broker: i32) -> String {
    format!("{PRODUCER_FENCES_DIR}/from-{broker}.json")
}

/// Transaction coordinator slot files.
pub const TXN_STATE_DIR: &str = "__cluster/txn_state";

/// The snapshot of transaction coordinator slot `slot` at `epoch` (see
/// [`slot_snapshot_path`]).
pub fn txn_slot_file(slot: u32, epoch: i32) -> String {
    slot_snapshot_path(TXN_STATE_DIR, slot, epoch)
}

/// The journal of transaction slot `slot` at `epoch`: the rounds written
/// since its snapshot (see `slot_journal`).
pub fn txn_slot_journal(slot: u32, epoch: i32) -> String {
    slot_journal_path(TXN_STATE_DIR, slot, epoch)
}

/// Group coordinator slot files.
pub const GROUP_STATE_DIR: &str = "__cluster/group_state";

/// The state (offsets and their pending layer) of group slot `slot` at
/// `epoch`.
pub fn group_slot_file(slot: u32, epoch: i32) -> String {
    slot_snapshot_path(GROUP_STATE_DIR, slot, epoch)
}

/// The journal of group slot `slot` at `epoch` (see `slot_journal`).
pub fn group_slot_journal(slot: u32, epoch: i32) -> String {
    slot_journal_path(GROUP_STATE_DIR, slot, epoch)
}

/// A coordinator slot's snapshot at coordinator epoch `epoch`, in the
/// slot kind's `state_dir`. Every epoch writes files of its own, so a
/// deposed coordinator's late writes land where its successor never reads.
/// Epoch 0 keeps the name from before slot files were per epoch
/// (`slot-<N>.json`: a broker alone on its volume stays at epoch 0, and its
/// files are where they always were); later ones are `slot-<N>.e<E>.json`.
pub fn slot_snapshot_path(state_dir: &str, slot: u32, epoch: i32) -> String {
    format!("{state_dir}/{}.json", slot_stem(slot, epoch))
}

/// A coordinator slot's journal at `epoch` (named as
/// [`slot_snapshot_path`], ending `.log`).
pub fn slot_journal_path(state_dir: &str, slot: u32, epoch: i32) -> String {
    format!("{state_dir}/{}.log", slot_stem(slot, epoch))
}

fn slot_stem(slot: u32, epoch: i32) -> String {
    if epoch == 0 {
        format!("slot-{slot}")
    } else {
        format!("slot-{slot}.e{epoch}")
    }
}

/// The slot and epoch of an entry of a slot state directory: a snapshot or
/// journal named by [`slot_snapshot_path`] / [`slot_journal_path`]. `None`
/// for anything else (a temporary of an atomic write in flight, a name not
/// in canonical form).
pub fn slot_state_of_file(name: &str) -> Option<(u32, i32)> {
    let stem = name
        .strip_suffix(".json")
        .or_else(|| name.strip_suffix(".log"))?
        .strip_prefix("slot-")?;
    let (slot, epoch) = match stem.split_once(".e") {
        Some((slot, epoch)) => (slot, canonical_number(epoch)?),
        None => (stem, 0),
    };
    let slot: u32 = canonical_number(slot)?.try_into().ok()?;
    (epoch != 0 || !stem.contains('.')).then_some((slot, epoch))
}

/// A non-negative `i32` written without sign or leading zeros.
fn canonical_number(digits: &str) -> Option<i32> {
    let canonical = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'));
    canonical.then(|| digits.parse().ok()).flatten()
}

/// Transaction markers queued for other brokers.
pub const MARKER_QUEUE_DIR: &str = "__cluster/marker_queue";

/// The markers queued for broker `broker` to write.
pub fn marker_queue_dir(broker: i32) -> String {
    format!("{MARKER_QUEUE_DIR}/to-{broker}")
}

/// A queued marker ending the transaction of `producer_id` at `epoch`.
pub fn marker_file(broker: i32, producer_id: i64, epoch: i16) -> String {
    format!("{}/{producer_id}-{epoch}.json", marker_queue_dir(broker))
}

/// Acknowledgements of queued markers, addressed to coordinator `broker`.
pub fn marker_ack_dir(broker: i32) -> String {
    format!("{MARKER_QUEUE_DIR}/acks/to-{broker}")
}

/// Broker `by`'s acknowledgement of the markers coordinator `broker`
/// queued for it to end the transaction of `producer_id` at `epoch`.
pub fn marker_ack_file(broker: i32, producer_id: i64, epoch: i16, by: i32) -> String {
    format!(
        "{}/{producer_id}-{epoch}-from-{by}.json",
        marker_ack_dir(broker)
    )
}

/// Questions to the transaction coordinator on another broker
/// (`kaas_core::txn::coordinator_queue`).
pub const TXN_ASKS_DIR: &str = "__cluster/txn_asks";

/// Asks addressed to coordinator `broker`.
pub fn txn_ask_dir(broker: i32) -> String {
    format!("{TXN_ASKS_DIR}/to-{broker}")
}

/// The ask `nonce` to coordinator `broker`.
pub fn txn_ask_file(broker: i32, nonce: u64) -> String {
    format!("{}/{nonce}.json", txn_ask_dir(broker))
}

/// Answers addressed to asking broker `broker`.
pub fn txn_answer_dir(broker: i32) -> String {
    format!("{TXN_ASKS_DIR}/answers/to-{broker}")
}

/// The answer to ask `nonce` of broker `broker`.
pub fn txn_answer_file(broker: i32, nonce: u64) -> String {
    format!("{}/{nonce}.json", txn_answer_dir(broker))
}

/// The nonce an ask or answer file is named for.
pub fn txn_ask_of_file(name: &str) -> Option<u64> {
    name.strip_suffix(".json")?.parse().ok()
}

/// The (producer id, epoch) a queued marker file is named for.
pub fn marker_of_file(name: &str) -> Option<(i64, i16)> {
    let (pid, epoch) = name.strip_suffix(".json")?.rsplit_once('-')?;
    Some((pid.parse().ok()?, epoch.parse().ok()?))
}

/// Broker registrations.
pub const BROKERS_DIR: &str = "__cluster/brokers";

/// Broker `broker`'s registration and liveness file.
pub fn broker_file(broker: i32) -> String {
    format!("{BROKERS_DIR}/kaas-{broker}.json")
}

/// The broker whose registration file is named `name` (an entry of
/// [`BROKERS_DIR`]); `None` for anything else (a temporary of an atomic
/// write, a stray file), which membership ignores.
pub fn broker_of_file(name: &str) -> Option<i32> {
    let digits = name.strip_prefix("kaas-")?.strip_suffix(".json")?;
    // Only the canonical spelling `broker_file` writes: no sign, no
    // leading zero, so one broker has one file name.
    let canonical = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'));
    canonical.then(|| digits.parse().ok()).flatten()
}

// ---------------------------------------------------------- ownership epochs

/// Ownership epochs: one directory per owned item, one file per epoch,
/// created exclusively (`Volume::create_exclusive`), so only one broker can
/// take epoch E+1 and the newest file names the current owner.
pub const EPOCHS_DIR: &str = "__cluster/epochs";

/// The epoch files of a partition.
pub fn partition_epochs_dir(topic: &str, partition: i32) -> String {
    format!("{EPOCHS_DIR}/partitions/{topic}-{partition}")
}

/// The file that claims `epoch` of a partition.
pub fn partition_epoch_file(topic: &str, partition: i32, epoch: i32) -> String {
    epoch_file(&partition_epochs_dir(topic, partition), epoch)
}

/// The epoch files of transaction coordinator slot `slot`.
pub fn txn_slot_epochs_dir(slot: u32) -> String {
    format!("{EPOCHS_DIR}/txn_slots/{slot}")
}

/// The file that claims `epoch` of transaction coordinator slot `slot`.
pub fn txn_slot_epoch_file(slot: u32, epoch: i32) -> String {
    epoch_file(&txn_slot_epochs_dir(slot), epoch)
}

/// The epoch files of group coordinator slot `slot`.
pub fn group_slot_epochs_dir(slot: u32) -> String {
    format!("{EPOCHS_DIR}/group_slots/{slot}")
}

/// The file that claims `epoch` of group coordinator slot `slot`.
pub fn group_slot_epoch_file(slot: u32, epoch: i32) -> String {
    epoch_file(&group_slot_epochs_dir(slot), epoch)
}

fn epoch_file(dir: &str, epoch: i32) -> String {
    format!("{dir}/{epoch:0EPOCH_DIGITS$}")
}

/// The epoch an entry of an epochs directory claims; `None` for anything
/// that is not exactly [`EPOCH_DIGITS`] digits naming a non-negative `i32`
/// (a temporary of an exclusive create in flight, say).
pub fn parse_epoch_file(name: &str) -> Option<i32> {
    if name.len() != EPOCH_DIGITS || !name.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    name.parse().ok()
}

/// The newest epoch among the entries of an epochs directory.
pub fn latest_epoch<'a>(names: impl IntoIterator<Item = &'a str>) -> Option<i32> {
    names.into_iter().filter_map(parse_epoch_file).max()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partition_directory_entry_parses_back_to_its_topic_and_index() {
        let entry = |topic, index| {
            partition_dir(topic, index)
                .strip_prefix(&format!("{PARTITIONS_DIR}/"))
                .map(str::to_string)
                .unwrap()
        };
        assert_eq!(partition_of_entry(&entry("t", 0)), Some(("t", 0)));
        assert_eq!(
            partition_of_entry(&entry("my-topic-7", 12)),
            Some(("my-topic-7", 12))
        );
        assert_eq!(partition_of_entry("t"), None);
        assert_eq!(partition_of_entry("t-x"), None);
        assert_eq!(partition_of_entry("t-"), None);
        // A topic may end with `-` itself.
        assert_eq!(partition_of_entry("t--1"), Some(("t-", 1)));
        assert_eq!(partition_of_entry("-3"), None);
    }

    #[test]
    fn segment_names_sort_in_offset_order_and_parse_back() {
        let a = segment_path("d", 9, 0);
        let b = segment_path("d", 10, 0);
        assert!(a < b);
        assert_eq!(a, "d/00000000000000000009.log");
        assert_eq!(index_path("d", 10, 0), "d/00000000000000000010.index");
        assert_eq!(txn_index_path("d", 0, 0), "d/00000000000000000000.txnindex");
        let seg = |base, epoch| Entry::Segment(SegmentId::new(base, epoch));
        assert_eq!(classify("00000000000000000010.log"), seg(10, 0));
        assert_eq!(
            classify("00000000000000000010.index"),
            Entry::Index(SegmentId::new(10, 0))
        );
        assert_eq!(classify("0010.log"), Entry::Other);
        assert_eq!(classify("99999999999999999999.log"), Entry::Other);
        assert_eq!(classify("log-start-offset"), Entry::Other);
        assert_eq!(classify("leader-epoch-checkpoint"), Entry::Other);
        assert_eq!(
            classify("00000000000000000010.txnindex"),
            Entry::TxnIndex(SegmentId::new(10, 0))
        );
        assert_eq!(classify_path(&segment_path("topics/t-0", 7, 0)), seg(7, 0));
        assert_eq!(classify_path("00000000000000000007.log"), seg(7, 0));
        assert_eq!(
            classify_path("topics/t-0/00000000000000000007.log.x"),
            Entry::Other
        );
        assert_eq!(
            parse_base(&format!("{:020}", i64::MAX)),
            Some(i64::MAX),
            "every offset fits the name"
        );
        assert_eq!(parse_base("0000000000000000000+"), None);
    }

    /// Old data directories hold only epoch-less names: they are epoch 0,
    /// and epoch 0 is still written that way, so nothing is renamed.
    #[test]
    fn epoch_less_segment_names_are_epoch_0_and_epoch_0_is_written_without_one() {
        assert_eq!(
            classify("00000000000000000042.log"),
            Entry::Segment(SegmentId::new(42, 0))
        );
        assert_eq!(segment_path("d", 42, 0), "d/00000000000000000042.log");
        // Epoch 0 has one spelling only.
        assert_eq!(
            classify("00000000000000000042_0000000000.log"),
            Entry::Other
        );
    }

    #[test]
    fn segment_names_carry_their_epoch_and_parse_back() {
        assert_eq!(
            segment_path("d", 100, 3),
            "d/00000000000000000100_0000000003.log"
        );
        assert_eq!(
            index_path("d", 100, 3),
            "d/00000000000000000100_0000000003.index"
        );
        assert_eq!(
            txn_index_path("d", 100, 3),
            "d/00000000000000000100_0000000003.txnindex"
        );
        for base in [0, 1, 99, i64::MAX] {
            for epoch in [0, 1, 7, i32::MAX] {
                let id = SegmentId::new(base, epoch);
                assert_eq!(
                    classify_path(&segment_path("d", base, epoch)),
                    Entry::Segment(id)
                );
                assert_eq!(
                    classify_path(&index_path("d", base, epoch)),
                    Entry::Index(id)
                );
                assert_eq!(
                    classify_path(&txn_index_path("d", base, epoch)),
                    Entry::TxnIndex(id)
                );
            }
        }
        for bad in [
            "00000000000000000100_3.log",
            "00000000000000000100_00000000003.log",
            "00000000000000000100_-000000003.log",
            "00000000000000000100_9999999999.log",
            "00000000000000000100_0000000003_0000000004.log",
            "00000000000000000100-0000000003.log",
            "_0000000003.log",
        ] {
            assert_eq!(classify(bad), Entry::Other, "{bad}");
        }
    }

    #[test]
    fn cleaned_copies_name_their_segment_and_cleaner_and_parse_back() {
        for (id, by) in [(SegmentId::new(0, 0), 0), (SegmentId::new(42, 3), 7)] {
            let log = cleaned_segment_path("d", id, by);
            let index = cleaned_index_path("d", id, by);
            let temporary = cleaning_path("d", id, by);
            assert_eq!(classify_path(&log), Entry::CleanedSegment(id, by), "{log}");
            assert_eq!(
                classify_path(&index),
                Entry::CleanedIndex(id, by),
                "{index}"
            );
            assert_eq!(
                classify_path(&temporary),
                Entry::Cleaning(id, by),
                "{temporary}"
            );
        }
        for bad in [
            "00000000000000000042.cleaned_7.log",
            "00000000000000000042.cleaned_0000000007.txnindex",
            "0042.cleaned_0000000007.log",
            "00000000000000000042_0000000000.cleaned_0000000007.log",
        ] {
            assert!(
                !matches!(
                    classify(bad),
                    Entry::CleanedSegment(..) | Entry::CleanedIndex(..)
                ),
                "{bad}"
            );
        }
    }

    /// Name order is (offset, epoch) order, epoch-less names included: a
    /// listing sorted by name is the log in order.
    #[test]
    fn segment_names_sort_by_offset_then_epoch() {
        let ids = [
            SegmentId::new(100, 2),
            SegmentId::new(0, 0),
            SegmentId::new(100, 0),
            SegmentId::new(99, 5),
            SegmentId::new(100, 10),
            SegmentId::new(1_000, 1),
        ];
        let mut names: Vec<String> = ids
            .iter()
            .map(|id| segment_path("d", id.base_offset, id.epoch))
            .collect();
        names.sort();
        let parsed: Vec<SegmentId> = names
            .iter()
            .map(|n| match classify_path(n) {
                Entry::Segment(id) => id,
                other => panic!("{n}: {other:?}"),
            })
            .collect();
        let mut sorted = ids.to_vec();
        sorted.sort();
        assert_eq!(parsed, sorted);
    }

    #[test]
    fn producer_snapshot_names_carry_their_epoch_and_parse_back() {
        assert_eq!(producer_snapshot_path("d", 0), "d/producer-state.snapshot");
        assert_eq!(
            producer_snapshot_path("d", 3),
            "d/producer-state_0000000003.snapshot"
        );
        for epoch in [0, 1, 3, i32::MAX] {
            let path = producer_snapshot_path("d", epoch);
            let name = path.rsplit('/').next().unwrap();
            assert_eq!(producer_snapshot_epoch(name), Some(epoch), "{name}");
            assert_eq!(classify(name), Entry::Other);
        }
        for stray in [
            "producer-state_0000000000.snapshot",
            "producer-state_3.snapshot",
            "producer-state.snapshot.tmp",
            "producer-state_00000000x3.snapshot",
        ] {
            assert_eq!(producer_snapshot_epoch(stray), None, "{stray}");
        }
    }

    #[test]
    fn log_start_names_carry_their_epoch_and_parse_back() {
        assert_eq!(log_start_offset_path("d", 0), "d/log-start-offset");
        assert_eq!(
            log_start_offset_path("d", 3),
            "d/log-start-offset_0000000003"
        );
        for epoch in [0, 1, 3, i32::MAX] {
            let path = log_start_offset_path("d", epoch);
            let name = path.rsplit('/').next().unwrap();
            assert_eq!(log_start_epoch(name), Some(epoch), "{name}");
            assert_eq!(classify(name), Entry::Other);
        }
        for stray in [
            "log-start-offset_0000000000",
            "log-start-offset_3",
            "log-start-offset.tmp",
            "log-start-offset_0000000003.tmp",
            "log-start-offset_00000000x3",
        ] {
            assert_eq!(log_start_epoch(stray), None, "{stray}");
        }
    }

    #[test]
    fn leader_epoch_checkpoint_names_carry_their_epoch_and_parse_back() {
        assert_eq!(
            leader_epoch_checkpoint_path("d", 0),
            "d/leader-epoch-checkpoint"
        );
        assert_eq!(
            leader_epoch_checkpoint_path("d", 3),
            "d/leader-epoch-checkpoint_0000000003"
        );
        for epoch in [0, 1, 3, i32::MAX] {
            let path = leader_epoch_checkpoint_path("d", epoch);
            let name = path.rsplit('/').next().unwrap();
            assert_eq!(leader_epoch_checkpoint_epoch(name), Some(epoch), "{name}");
            assert_eq!(log_start_epoch(name), None, "{name}");
            assert_eq!(classify(name), Entry::Other);
        }
        for stray in [
            "leader-epoch-checkpoint_0000000000",
            "leader-epoch-checkpoint_3",
            "leader-epoch-checkpoint.tmp",
            "leader-epoch-checkpoint_0000000003.tmp",
            "log-start-offset_0000000003",
        ] {
            assert_eq!(leader_epoch_checkpoint_epoch(stray), None, "{stray}");
        }
    }

    #[test]
    fn log_start_offset_round_trips_and_rejects_garbage() {
        for first_segment in [None, Some(SegmentId::new(40, 3))] {
            let start = LogStart {
                offset: 42,
                first_segment,
            };
            assert_eq!(decode_log_start(&encode_log_start(&start)), Some(start));
        }
        // As kaas wrote it before it recorded the first segment.
        assert_eq!(
            decode_log_start(b"30\n").map(|s| (s.offset, s.first_segment)),
            Some((30, None))
        );
        for garbage in [
            &b"-1"[..],
            b"x",
            &[0xff],
            b"",
            b"42 40",
            b"42 40 3 1",
            b"42 43 3",
            b"42 40 -3",
        ] {
            assert_eq!(decode_log_start(garbage), None, "{garbage:?}");
        }
    }

    #[test]
    fn slot_state_files_name_their_slot_and_epoch_and_nothing_else_parses() {
        for (slot, epoch) in [(0, 0), (7, 0), (49, 1), (3, i32::MAX)] {
            for path in [
                slot_snapshot_path(TXN_STATE_DIR, slot, epoch),
                slot_journal_path(GROUP_STATE_DIR, slot, epoch),
            ] {
                let name = path.rsplit('/').next().unwrap();
                assert_eq!(slot_state_of_file(name), Some((slot, epoch)), "{name}");
            }
        }
        for stray in [
            "slot-1.json.tmp",
            "slot-1.e0.json",
            "slot-01.json",
            "slot-1.e01.log",
            "slot-1.e-2.log",
            "slot-.json",
            "slot-1.e.json",
            "slot-1.e2.txt",
            "slot-99999999999.json",
            "other.json",
        ] {
            assert_eq!(slot_state_of_file(stray), None, "{stray}");
        }
    }

    /// The names existing volumes already hold: changing one strands data.
    #[test]
    fn paths_match_the_documented_layout() {
        let dir = partition_dir("orders", 3);
        assert_eq!(dir, "topics/orders-3");
        assert_eq!(partition_dir_of_entry("orders-3"), dir);
        assert_eq!(
            log_start_offset_path(&dir, 0),
            "topics/orders-3/log-start-offset"
        );
        assert_eq!(
            leader_epoch_checkpoint_path(&dir, 0),
            "topics/orders-3/leader-epoch-checkpoint"
        );
        assert_eq!(
            producer_snapshot_path(&dir, 0),
            "topics/orders-3/producer-state.snapshot"
        );
        assert_eq!(CLUSTER_FILE, format!("{CLUSTER_DIR}/cluster.json"));
        assert_eq!(topic_file("orders"), "__cluster/topics/orders.json");
        assert_eq!(
            topic_version_file("orders", 12),
            "__cluster/topics/orders@12.json"
        );
        assert_eq!(
            producer_id_block_file(2),
            "__cluster/producer_ids/kaas-2.json"
        );
        assert_eq!(group_slot_file(7, 0), "__cluster/group_state/slot-7.json");
        assert_eq!(group_slot_journal(7, 0), "__cluster/group_state/slot-7.log");
        assert_eq!(txn_slot_file(49, 0), "__cluster/txn_state/slot-49.json");
        assert_eq!(txn_slot_file(49, 3), "__cluster/txn_state/slot-49.e3.json");
        assert_eq!(
            txn_slot_journal(49, 3),
            "__cluster/txn_state/slot-49.e3.log"
        );
        assert_eq!(
            producer_fence_file(1),
            "__cluster/producer_fences/from-1.json"
        );
        assert_eq!(
            marker_file(4, 1 << 40, 3),
            "__cluster/marker_queue/to-4/1099511627776-3.json"
        );
        assert_eq!(
            broker_config_file(3),
            "__cluster/broker_configs/kaas-3.json"
        );
        assert_eq!(
            broker_default_config_file(12),
            "__cluster/broker_configs/default@12.json"
        );
        assert_eq!(broker_default_config_version("default@12.json"), Some(12));
        for stray in [
            "default@0.json",
            "default@01.json",
            "default@.json",
            "default@-1.json",
            "default@1.json.tmp",
            "kaas-1.json",
        ] {
            assert_eq!(broker_default_config_version(stray), None, "{stray}");
        }
        assert_eq!(broker_file(0), "__cluster/brokers/kaas-0.json");
        for id in [0, 7, 42, i32::MAX] {
            let path = broker_file(id);
            let name = path.rsplit('/').next().unwrap();
            assert_eq!(broker_of_file(name), Some(id));
        }
        for stray in [
            "kaas-.json",
            "kaas--1.json",
            "kaas-07.json",
            "kaas-1.json.tmp",
            "kaas-99999999999.json",
            "other.json",
        ] {
            assert_eq!(broker_of_file(stray), None, "{stray}");
        }
        for path in [
            topic_file("t"),
            producer_id_block_file(0),
            producer_fence_file(0),
            txn_slot_file(0, 0),
            group_slot_file(0, 1),
            marker_file(0, 0, 0),
            broker_file(0),
            broker_config_file(0),
            broker_default_config_file(1),
            partition_epoch_file("t", 0, 0),
            txn_slot_epoch_file(0, 0),
            group_slot_epoch_file(0, 0),
        ] {
            assert!(path.starts_with("__cluster/"), "{path}");
        }
    }

    #[test]
    fn topic_files_parse_back_to_their_topic() {
        let path = topic_file("a.b_c-d");
        let entry = path.rsplit('/').next().unwrap();
        assert_eq!(topic_of_file(entry), Some("a.b_c-d"));
        assert_eq!(topic_of_file("t.json.tmp"), None);
        assert_eq!(topic_of_file(".json"), None);
    }

    #[test]
    fn epoch_files_sort_in_epoch_order_and_parse_back() {
        assert_eq!(
            partition_epoch_file("t", 2, 7),
            "__cluster/epochs/partitions/t-2/0000000007"
        );
        assert_eq!(
            group_slot_epoch_file(24, 1),
            "__cluster/epochs/group_slots/24/0000000001"
        );
        assert_eq!(
            txn_slot_epoch_file(3, 0),
            "__cluster/epochs/txn_slots/3/0000000000"
        );
        let mut names: Vec<String> = [10, 9, i32::MAX, 0, 100]
            .into_iter()
            .map(|e| group_slot_epoch_file(0, e))
            .collect();
        names.sort();
        let epochs: Vec<i32> = names
            .iter()
            .map(|p| parse_epoch_file(p.rsplit('/').next().unwrap()).unwrap())
            .collect();
        assert_eq!(epochs, vec![0, 9, 10, 100, i32::MAX]);
        assert_eq!(parse_epoch_file("9999999999"), None, "beyond i32");
        assert_eq!(parse_epoch_file("000000001"), None, "too short");
        assert_eq!(parse_epoch_file("00000000001"), None, "too long");
        assert_eq!(parse_epoch_file("+000000001"), None);
        assert_eq!(parse_epoch_file(".kaas-tmp-0000000001"), None);
        assert_eq!(
            latest_epoch(["0000000002", "junk", "0000000010", "0000000003"]),
            Some(10)
        );
        assert_eq!(latest_epoch([]), None);
    }

    #[test]
    fn topic_versions_parse_back_and_never_read_as_names() {
        for (name, version) in [("t", 0), ("orders.v1", 0), ("a-b_c.d", 7), ("t", u32::MAX)] {
            let path = topic_version_file(name, version);
            let entry = path.rsplit('/').next().unwrap();
            assert_eq!(
                topic_version_of_file(entry),
                Some((name, version)),
                "{entry}"
            );
            assert_eq!(topic_of_file(entry), (version == 0).then_some(name));
        }
        for stray in [
            ".json",
            "@1.json",
            "t@.json",
            "t@0.json",
            "t@01.json",
            "t@-1.json",
            "t@+1.json",
            "t@1@2.json",
            "t@99999999999.json",
            "t.json.tmp",
        ] {
            assert_eq!(topic_version_of_file(stray), None, "{stray}");
        }
    }
}
