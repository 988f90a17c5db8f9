//! How much memory decoding takes per byte of frame, on frames built to be
//! the worst case: long arrays of the smallest elements (empty compact
//! strings, structs of empty fields), where each wire byte becomes a whole
//! Rust value. docs/fuzzing.md quotes the ratios; the assertion is the
//! bound the `request_frame` target enforces on every input.

use bytes::Bytes;
use kaas_core::protocol::decode_request;
use kaas_fuzz::alloc_meter::measure;
use kaas_fuzz::targets::decode_budget;

/// A flexible-version request: header v2 (client id "x", no tags), then
/// `body_prefix`, a compact array of `n` copies of `element`, `suffix`.
fn frame(key: i16, version: i16, prefix: &[u8], n: usize, element: &[u8], suffix: &[u8]) -> Bytes {
    let mut f = Vec::new();
    f.extend_from_slice(&key.to_be_bytes());
    f.extend_from_slice(&version.to_be_bytes());
    f.extend_from_slice(&7i32.to_be_bytes());
    f.extend_from_slice(&[0, 1, b'x', 0]);
    f.extend_from_slice(prefix);
    let mut len = (n + 1) as u32;
    while len >= 0x80 {
        f.push((len as u8) | 0x80);
        len >>= 7;
    }
    f.push(len as u8);
    for _ in 0..n {
        f.extend_from_slice(element);
    }
    f.extend_from_slice(suffix);
    Bytes::from(f)
}

#[test]
fn decoding_allocates_a_bounded_multiple_of_the_frame() {
    let n = 200_000;
    let cases = [
        // DescribeGroups v5: groups = [compact string], include_authorized_operations, tags.
        (
            "DescribeGroups v5, empty group ids",
            frame(15, 5, &[], n, &[1], &[0, 0]),
        ),
        // DeleteGroups v2: groups_names = [compact string], tags.
        (
            "DeleteGroups v2, empty group ids",
            frame(42, 2, &[], n, &[1], &[0]),
        ),
        // LeaveGroup v5: group id "", members = [{member_id "", instance id null, reason null, tags}], tags.
        (
            "LeaveGroup v5, empty members",
            frame(13, 5, &[1], n, &[1, 0, 0, 0], &[0]),
        ),
        // Metadata v12: topics = [{topic id, name null, tags}], auto create, authorized ops, tags.
        (
            "Metadata v12, topics by id",
            frame(3, 12, &[], n, &[0; 18], &[0, 0, 0]),
        ),
    ];
    for (name, f) in cases {
        let len = f.len();
        let (result, usage) = measure(|| decode_request(f, kaas_net::handlers::supported_versions));
        assert!(result.is_ok(), "{name}: {:?}", result.err());
        let ratio = usage.peak_bytes as f64 / len as f64;
        eprintln!(
            "{name}: {len} bytes -> peak {} bytes ({ratio:.1}x), largest allocation {}",
            usage.peak_bytes, usage.largest_bytes
        );
        assert!(
            usage.peak_bytes <= decode_budget(len),
            "{name}: {ratio:.1}x"
        );
    }
}
