//! File names inside a partition directory now live in `kaas_core::layout`,
//! with every other volume path; this re-export keeps the log's modules
//! unchanged until they import it from there.

pub use kaas_core::layout::partition_dir;
pub(crate) use kaas_core::layout::{
    classify, decode_log_start_offset, encode_log_start_offset, index_path, log_start_offset_path,
    segment_path, Entry,
};
