//! File names inside a partition directory.

/// Digits of the zero-padded base offset in segment file names, so that
/// name order is offset order.
const OFFSET_DIGITS: usize = 20;
const LOG_SUFFIX: &str = ".log";
const INDEX_SUFFIX: &str = ".index";
const LOG_START_OFFSET_FILE: &str = "log-start-offset";

/// The directory of a partition on the volume.
pub fn partition_dir(topic: &str, partition: i32) -> String {
    format!("topics/{topic}-{partition}")
}

pub(crate) fn segment_path(dir: &str, base_offset: i64) -> String {
    format!("{dir}/{base_offset:0OFFSET_DIGITS$}{LOG_SUFFIX}")
}

pub(crate) fn index_path(dir: &str, base_offset: i64) -> String {
    format!("{dir}/{base_offset:0OFFSET_DIGITS$}{INDEX_SUFFIX}")
}

pub(crate) fn log_start_offset_path(dir: &str) -> String {
    format!("{dir}/{LOG_START_OFFSET_FILE}")
}

/// What a directory entry is, judged by its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Entry {
    Segment(i64),
    Index(i64),
    Other,
}

pub(crate) fn classify(name: &str) -> Entry {
    if let Some(base) = name.strip_suffix(LOG_SUFFIX).and_then(parse_base) {
        Entry::Segment(base)
    } else if let Some(base) = name.strip_suffix(INDEX_SUFFIX).and_then(parse_base) {
        Entry::Index(base)
    } else {
        Entry::Other
    }
}

fn parse_base(digits: &str) -> Option<i64> {
    if digits.len() != OFFSET_DIGITS || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The persisted log start offset file: one decimal number.
pub(crate) fn encode_log_start_offset(offset: i64) -> Vec<u8> {
    format!("{offset}\n").into_bytes()
}

pub(crate) fn decode_log_start_offset(data: &[u8]) -> Option<i64> {
    std::str::from_utf8(data)
        .ok()?
        .trim()
        .parse()
        .ok()
        .filter(|o: &i64| *o >= 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_sort_in_offset_order_and_parse_back() {
        let a = segment_path("d", 9);
        let b = segment_path("d", 10);
        assert!(a < b);
        assert_eq!(a, "d/00000000000000000009.log");
        assert_eq!(classify("00000000000000000010.log"), Entry::Segment(10));
        assert_eq!(classify("00000000000000000010.index"), Entry::Index(10));
        assert_eq!(classify("0010.log"), Entry::Other);
        assert_eq!(classify("99999999999999999999.log"), Entry::Other);
        assert_eq!(classify("log-start-offset"), Entry::Other);
    }

    #[test]
    fn log_start_offset_round_trips_and_rejects_garbage() {
        assert_eq!(
            decode_log_start_offset(&encode_log_start_offset(42)),
            Some(42)
        );
        assert_eq!(decode_log_start_offset(b"-1"), None);
        assert_eq!(decode_log_start_offset(b"x"), None);
        assert_eq!(decode_log_start_offset(&[0xff]), None);
    }
}
