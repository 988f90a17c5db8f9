//! Zig-zag varints as used inside v2 records (protobuf style, 7 bits per
//! byte, least significant group first).
//!
//! Kept private to `record`: the protocol codec has its own, and records
//! are the only place batch code needs them.

use bytes::BufMut;

/// Longest encoding of a 32-bit varint.
const MAX_VARINT_LEN: usize = 5;
/// Longest encoding of a 64-bit varlong.
const MAX_VARLONG_LEN: usize = 10;

pub(crate) fn put_varint(out: &mut impl BufMut, value: i32) {
    put_varlong(out, i64::from(value));
}

pub(crate) fn put_varlong(out: &mut impl BufMut, value: i64) {
    let mut zigzag = ((value << 1) ^ (value >> 63)) as u64;
    while zigzag >= 0x80 {
        out.put_u8((zigzag as u8 & 0x7f) | 0x80);
        zigzag >>= 7;
    }
    out.put_u8(zigzag as u8);
}

/// Decodes a varint at `*pos`, advancing it. `None` if the input ends or the
/// encoding is longer than 5 bytes or does not fit in an i32.
pub(crate) fn get_varint(buf: &[u8], pos: &mut usize) -> Option<i32> {
    let mut next = *pos;
    let raw = u32::try_from(get_unsigned(buf, &mut next, MAX_VARINT_LEN)?).ok()?;
    *pos = next;
    Some(((raw >> 1) as i32) ^ -((raw & 1) as i32))
}

/// Decodes a varlong at `*pos`, advancing it.
pub(crate) fn get_varlong(buf: &[u8], pos: &mut usize) -> Option<i64> {
    let raw = get_unsigned(buf, pos, MAX_VARLONG_LEN)?;
    Some(((raw >> 1) as i64) ^ -((raw & 1) as i64))
}

fn get_unsigned(buf: &[u8], pos: &mut usize, max_len: usize) -> Option<u64> {
    let mut value: u64 = 0;
    for i in 0..max_len {
        let byte = *buf.get(*pos + i)?;
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            *pos += i + 1;
            return Some(value);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_at_the_edges() {
        for v in [0, 1, -1, 63, -64, 64, 300, -300, i32::MAX, i32::MIN] {
            let mut buf = Vec::new();
            put_varint(&mut buf, v);
            let mut pos = 0;
            assert_eq!(get_varint(&buf, &mut pos), Some(v));
            assert_eq!(pos, buf.len());
        }
        for v in [0, -1, i64::MAX, i64::MIN, 1 << 40] {
            let mut buf = Vec::new();
            put_varlong(&mut buf, v);
            let mut pos = 0;
            assert_eq!(get_varlong(&buf, &mut pos), Some(v));
            assert_eq!(pos, buf.len());
        }
    }

    #[test]
    fn known_encodings_match_kafka() {
        let mut buf = Vec::new();
        put_varint(&mut buf, -1);
        put_varint(&mut buf, 1);
        put_varint(&mut buf, 64);
        assert_eq!(buf, [0x01, 0x02, 0x80, 0x01]);
    }

    #[test]
    fn truncated_and_overlong_encodings_are_rejected() {
        let mut pos = 0;
        assert_eq!(get_varint(&[0x80], &mut pos), None);
        assert_eq!(get_varint(&[0xff; 6], &mut pos), None);
        // Five bytes that overflow 32 bits.
        assert_eq!(get_varint(&[0xff, 0xff, 0xff, 0xff, 0x7f], &mut pos), None);
        assert_eq!(get_varlong(&[0xff; 11], &mut pos), None);
        assert_eq!(pos, 0);
    }
}
