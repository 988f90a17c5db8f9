//! What the cleaner needs to know about one batch, read once from the
//! [`RecordBatch`] so both passes decide from plain data.

use bytes::Bytes;
use std::fmt;

use crate::compression::MAX_DECOMPRESSED_BATCH_BYTES;
use crate::record::{
    record_spans, Compression, ControlType, FilterError, RecordBatch, RecordError,
};

/// One batch as the cleaner sees it: header facts and what each record is
/// (offset, key, whether it has a value). A compressed batch is read
/// through its decompressed twin ([`RecordBatch::decompressed`]).
///
/// Built with [`BatchView::of`]. Keys are zero-copy slices of the batch's
/// (decompressed) bytes; the [`KeyMap`](super::KeyMap) copies the ones it
/// keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchView {
    /// Offset of the batch's first offset slot (`baseOffset`).
    pub base_offset: i64,
    /// `baseOffset + lastOffsetDelta`: kept by every rewrite.
    pub last_offset: i64,
    /// Bytes the batch takes in the log.
    pub size: usize,
    /// `-1` for a batch from a plain producer.
    pub producer_id: i64,
    /// The producer's epoch (`-1` for a plain producer).
    pub producer_epoch: i16,
    /// The batch belongs to a transaction (data or marker).
    pub is_transactional: bool,
    /// The horizon an earlier pass stamped (KIP-534), if any.
    pub delete_horizon_ms: Option<i64>,
    /// What the batch holds.
    pub content: BatchContent,
}

/// The part of a batch the decision depends on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchContent {
    /// A data batch and its records, in order.
    Data(Vec<ViewRecord>),
    /// A control batch. `marker` is the type its (first)
    /// record names, `None` if it has no records: an earlier pass emptied it
    /// and kept only its header. `record_count` and `records_size` let the
    /// decision rewrite it whole and account for it.
    Control {
        /// The control type, `None` for an emptied control batch.
        marker: Option<ControlType>,
        /// Records in the batch (one for a marker, zero once emptied).
        record_count: usize,
        /// Bytes of its records.
        records_size: usize,
    },
    /// A compressed batch whose records cannot be read: its codec is
    /// unknown, its data does not decompress, or it decompresses to more
    /// than [`MAX_DECOMPRESSED_BATCH_BYTES`]. The cleaner keeps it whole
    /// and untouched, and its keys are not in the key map (earlier records
    /// with the same keys are then kept too: less compaction, never lost
    /// data).
    Opaque {
        /// The header's control bit.
        is_control: bool,
    },
}

/// One record of a data batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewRecord {
    /// The record's offset (base offset + its offset delta).
    pub offset: i64,
    /// `None` for a record without a key, which a compacted log does not
    /// keep.
    pub key: Option<Bytes>,
    /// False for a tombstone (null value).
    pub has_value: bool,
    /// Bytes the record takes in the batch, for the summary's estimate.
    pub size: usize,
}

/// Why a batch could not be read for cleaning. The batch passed its CRC
/// check when stored, so this means a damaged segment: the caller should
/// stop cleaning the partition rather than guess.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ViewError {
    /// A record could not be decoded.
    Record(RecordError),
    /// A record's framing is broken.
    Framing(FilterError),
    /// A control batch whose record key is not `version i16, type i16`.
    ControlKey,
}

impl fmt::Display for ViewError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ViewError::Record(e) => write!(f, "unreadable record: {e}"),
            ViewError::Framing(e) => write!(f, "unreadable record framing: {e}"),
            ViewError::ControlKey => write!(f, "control record key is not a control type"),
        }
    }
}

impl std::error::Error for ViewError {}

impl BatchView {
    /// Reads `batch` for the cleaner: decodes every record, of a compressed
    /// batch through its decompressed twin; a compressed batch that cannot
    /// be decompressed is [`BatchContent::Opaque`].
    pub fn of(batch: &RecordBatch) -> Result<BatchView, ViewError> {
        Ok(BatchView {
            base_offset: batch.base_offset(),
            last_offset: batch.last_offset(),
            size: batch.size(),
            producer_id: batch.producer_id(),
            producer_epoch: batch.producer_epoch(),
            is_transactional: batch.is_transactional(),
            delete_horizon_ms: batch.delete_horizon_ms(),
            content: content_of(batch)?,
        })
    }

    /// The offset right after the batch.
    pub fn next_offset(&self) -> i64 {
        self.last_offset.saturating_add(1)
    }

    /// True for a control batch (readable or not).
    pub fn is_control(&self) -> bool {
        match &self.content {
            BatchContent::Control { .. } => true,
            BatchContent::Opaque { is_control } => *is_control,
            BatchContent::Data(_) => false,
        }
    }

    /// True if the batch carries a producer id (idempotent or transactional).
    pub fn has_producer_id(&self) -> bool {
        self.producer_id >= 0
    }

    /// Number of records, when they can be read.
    pub fn record_count(&self) -> Option<usize> {
        match &self.content {
            BatchContent::Data(records) => Some(records.len()),
            BatchContent::Control { record_count, .. } => Some(*record_count),
            BatchContent::Opaque { .. } => None,
        }
    }
}

fn content_of(batch: &RecordBatch) -> Result<BatchContent, ViewError> {
    if batch.compression() != Compression::None {
        return Ok(match batch.decompressed(MAX_DECOMPRESSED_BATCH_BYTES) {
            Ok(plain) => content_of_plain(&plain)?,
            Err(_) => opaque(batch),
        });
    }
    content_of_plain(batch)
}

/// A batch the cleaner cannot read: kept whole.
fn opaque(batch: &RecordBatch) -> BatchContent {
    BatchContent::Opaque {
        is_control: batch.is_control(),
    }
}

fn content_of_plain(batch: &RecordBatch) -> Result<BatchContent, ViewError> {
    let spans = match record_spans(batch) {
        Ok(spans) => spans,
        Err(FilterError::Compressed(_)) => return Ok(opaque(batch)),
        Err(e) => return Err(ViewError::Framing(e)),
    };
    let records = batch
        .records()
        .collect::<Result<Vec<_>, _>>()
        .map_err(ViewError::Record)?;
    if batch.is_control() {
        let marker = match records.first() {
            None => None,
            Some(r) => Some(control_type(r.key.as_deref())?),
        };
        return Ok(BatchContent::Control {
            marker,
            record_count: records.len(),
            records_size: spans.iter().map(|s| s.len()).sum(),
        });
    }
    Ok(BatchContent::Data(
        records
            .into_iter()
            .zip(&spans)
            .map(|(r, span)| ViewRecord {
                offset: r.offset,
                key: r.key,
                has_value: r.value.is_some(),
                size: span.len(),
            })
            .collect(),
    ))
}

/// The type a control record's key names: `version i16, type i16`.
fn control_type(key: Option<&[u8]>) -> Result<ControlType, ViewError> {
    let bytes = key
        .and_then(|k| k.get(2..4))
        .and_then(|b| <[u8; 2]>::try_from(b).ok())
        .ok_or(ViewError::ControlKey)?;
    Ok(ControlType::from_id(i16::from_be_bytes(bytes)))
}
