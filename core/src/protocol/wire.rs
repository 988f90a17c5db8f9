//! Primitive encodings of the Kafka protocol.
//!
//! `Reader` decodes from a `Bytes` frame without copying record data: `bytes`
//! and `records` fields come back as slices of the frame. Every length read
//! from the wire is checked against the bytes that remain *before* anything
//! is allocated, so a hostile length prefix is a decode error, never an
//! allocation (the bug class of KAFKA-14063).

use bytes::{BufMut, Bytes, BytesMut};
use std::fmt;

/// Why a request could not be decoded. Every variant maps to closing the
/// connection or answering INVALID_REQUEST; none is a panic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// Fewer bytes remain than the field needs.
    UnexpectedEof { needed: usize, remaining: usize },
    /// A length prefix that is negative (and not the null marker) or larger
    /// than what remains of the frame.
    InvalidLength(i64),
    /// A varint longer than its type allows.
    InvalidVarint,
    /// A string that is not UTF-8.
    InvalidUtf8,
    /// Null where this version does not allow null.
    NullNotAllowed(&'static str),
    /// An API key kaas does not know.
    UnknownApiKey(i16),
    /// A version of a known API that kaas does not decode.
    UnsupportedVersion { api_key: i16, version: i16 },
    /// Bytes left over after the message body.
    TrailingBytes(usize),
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::UnexpectedEof { needed, remaining } => {
                write!(
                    f,
                    "unexpected end of frame: needed {needed} bytes, {remaining} remain"
                )
            }
            DecodeError::InvalidLength(n) => write!(f, "invalid length prefix {n}"),
            DecodeError::InvalidVarint => write!(f, "varint too long"),
            DecodeError::InvalidUtf8 => write!(f, "string is not valid UTF-8"),
            DecodeError::NullNotAllowed(field) => write!(f, "null not allowed for {field}"),
            DecodeError::UnknownApiKey(k) => write!(f, "unknown api key {k}"),
            DecodeError::UnsupportedVersion { api_key, version } => {
                write!(f, "unsupported version {version} of api key {api_key}")
            }
            DecodeError::TrailingBytes(n) => write!(f, "{n} unexpected trailing bytes"),
        }
    }
}

impl std::error::Error for DecodeError {}

/// Why a message could not be encoded: the value does not fit the version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EncodeError {
    /// Null in a field that this version cannot carry as null.
    NullNotAllowed(&'static str),
    /// A string or array too long for its length prefix.
    TooLong(&'static str),
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EncodeError::NullNotAllowed(field) => write!(f, "null not allowed for {field}"),
            EncodeError::TooLong(field) => write!(f, "{field} too long for its length prefix"),
        }
    }
}

impl std::error::Error for EncodeError {}

/// A 128-bit Kafka UUID (topic ids). All-zero is Kafka's "no id".
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Uuid(pub [u8; 16]);

impl Uuid {
    pub const ZERO: Uuid = Uuid([0; 16]);

    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }

    pub fn as_u128(&self) -> u128 {
        u128::from_be_bytes(self.0)
    }

    pub fn from_u128(v: u128) -> Uuid {
        Uuid(v.to_be_bytes())
    }
}

impl fmt::Display for Uuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.as_u128())
    }
}

/// A tagged field that this version of kaas does not know: kept as raw bytes
/// so it survives a decode/encode round trip.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawTaggedField {
    pub tag: u32,
    pub data: Bytes,
}

/// Decodes primitives from a frame.
pub struct Reader {
    buf: Bytes,
    pos: usize,
}

/// Elements are pushed as they decode, so a claimed array length only
/// reserves this many slots up front; the rest grows with real input.
const MAX_PREALLOCATED_ELEMENTS: usize = 256;

impl Reader {
    pub fn new(buf: Bytes) -> Reader {
        Reader { buf, pos: 0 }
    }

    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// Everything not yet consumed, as a zero-copy slice.
    pub fn rest(&mut self) -> Bytes {
        let rest = self.buf.slice(self.pos..);
        self.pos = self.buf.len();
        rest
    }

    /// Fails unless the whole frame was consumed.
    pub fn finish(&self) -> Result<(), DecodeError> {
        match self.remaining() {
            0 => Ok(()),
            n => Err(DecodeError::TrailingBytes(n)),
        }
    }

    fn take(&mut self, n: usize) -> Result<&[u8], DecodeError> {
        if n > self.remaining() {
            return Err(DecodeError::UnexpectedEof {
                needed: n,
                remaining: self.remaining(),
            });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn take_array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    /// A zero-copy slice of the next `n` bytes.
    pub fn bytes(&mut self, n: usize) -> Result<Bytes, DecodeError> {
        if n > self.remaining() {
            return Err(DecodeError::UnexpectedEof {
                needed: n,
                remaining: self.remaining(),
            });
        }
        let s = self.buf.slice(self.pos..self.pos + n);
        self.pos += n;
        Ok(s)
    }

    pub fn bool(&mut self) -> Result<bool, DecodeError> {
        Ok(self.i8()? != 0)
    }
    pub fn i8(&mut self) -> Result<i8, DecodeError> {
        Ok(i8::from_be_bytes(self.take_array()?))
    }
    pub fn i16(&mut self) -> Result<i16, DecodeError> {
        Ok(i16::from_be_bytes(self.take_array()?))
    }
    pub fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_be_bytes(self.take_array()?))
    }
    pub fn i32(&mut self) -> Result<i32, DecodeError> {
        Ok(i32::from_be_bytes(self.take_array()?))
    }
    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_be_bytes(self.take_array()?))
    }
    pub fn i64(&mut self) -> Result<i64, DecodeError> {
        Ok(i64::from_be_bytes(self.take_array()?))
    }
    pub fn f64(&mut self) -> Result<f64, DecodeError> {
        Ok(f64::from_be_bytes(self.take_array()?))
    }
    pub fn uuid(&mut self) -> Result<Uuid, DecodeError> {
        Ok(Uuid(self.take_array()?))
    }

    /// Unsigned LEB128 varint of at most 32 bits.
    pub fn uvarint(&mut self) -> Result<u32, DecodeError> {
        let mut value: u32 = 0;
        for i in 0..5 {
            let b = self.take(1)?[0];
            if i == 4 && b > 0x0f {
                return Err(DecodeError::InvalidVarint);
            }
            value |= ((b & 0x7f) as u32) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(DecodeError::InvalidVarint)
    }

    /// Unsigned LEB128 varint of at most 64 bits.
    pub fn uvarlong(&mut self) -> Result<u64, DecodeError> {
        let mut value: u64 = 0;
        for i in 0..10 {
            let b = self.take(1)?[0];
            if i == 9 && b > 0x01 {
                return Err(DecodeError::InvalidVarint);
            }
            value |= ((b & 0x7f) as u64) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(DecodeError::InvalidVarint)
    }

    /// Zig-zag signed varint (record fields).
    pub fn varint(&mut self) -> Result<i32, DecodeError> {
        let v = self.uvarint()?;
        Ok(((v >> 1) as i32) ^ -((v & 1) as i32))
    }

    /// Zig-zag signed varlong (record fields).
    pub fn varlong(&mut self) -> Result<i64, DecodeError> {
        let v = self.uvarlong()?;
        Ok(((v >> 1) as i64) ^ -((v & 1) as i64))
    }

    /// A length prefix: `None` for null (-1), `Some(n)` with `n` checked
    /// against the remaining bytes when each element takes at least
    /// `min_elem` bytes. Compact lengths are stored as `n + 1`.
    fn length(&mut self, compact: bool, wide: bool) -> Result<Option<usize>, DecodeError> {
        let n: i64 = if compact {
            self.uvarint()? as i64 - 1
        } else if wide {
            self.i32()? as i64
        } else {
            self.i16()? as i64
        };
        if n < -1 {
            return Err(DecodeError::InvalidLength(n));
        }
        if n == -1 {
            return Ok(None);
        }
        if n as u64 > self.remaining() as u64 {
            return Err(DecodeError::InvalidLength(n));
        }
        Ok(Some(n as usize))
    }

    pub fn nullable_string(&mut self, compact: bool) -> Result<Option<String>, DecodeError> {
        match self.length(compact, false)? {
            None => Ok(None),
            Some(n) => {
                let raw = self.take(n)?;
                std::str::from_utf8(raw)
                    .map(|s| Some(s.to_owned()))
                    .map_err(|_| DecodeError::InvalidUtf8)
            }
        }
    }

    pub fn string(&mut self, compact: bool, field: &'static str) -> Result<String, DecodeError> {
        self.nullable_string(compact)?
            .ok_or(DecodeError::NullNotAllowed(field))
    }

    pub fn nullable_bytes(&mut self, compact: bool) -> Result<Option<Bytes>, DecodeError> {
        match self.length(compact, true)? {
            None => Ok(None),
            Some(n) => self.bytes(n).map(Some),
        }
    }

    pub fn bytes_field(
        &mut self,
        compact: bool,
        field: &'static str,
    ) -> Result<Bytes, DecodeError> {
        self.nullable_bytes(compact)?
            .ok_or(DecodeError::NullNotAllowed(field))
    }

    /// An array length, `None` for a null array. The count is bounded by
    /// the remaining bytes (every element takes at least one byte).
    pub fn array_len(&mut self, compact: bool) -> Result<Option<usize>, DecodeError> {
        self.length(compact, true)
    }

    /// A `Vec` sized for `n` decoded elements without trusting `n`.
    pub fn vec_for<T>(n: usize) -> Vec<T> {
        Vec::with_capacity(n.min(MAX_PREALLOCATED_ELEMENTS))
    }

    /// Reads the tagged-field section: calls `known` for each tag, which
    /// returns `Ok(false)` for a tag it does not know; those are kept raw.
    pub fn tagged_fields(
        &mut self,
        mut known: impl FnMut(u32, &mut Reader) -> Result<bool, DecodeError>,
    ) -> Result<Vec<RawTaggedField>, DecodeError> {
        let count = self.uvarint()? as usize;
        if count > self.remaining() {
            return Err(DecodeError::InvalidLength(count as i64));
        }
        let mut unknown = Vec::new();
        for _ in 0..count {
            let tag = self.uvarint()?;
            let size = self.uvarint()? as usize;
            let data = self.bytes(size)?;
            let mut sub = Reader::new(data.clone());
            if !known(tag, &mut sub)? {
                unknown.push(RawTaggedField { tag, data });
            }
        }
        // The protocol wants ascending tags, but Kafka's reader accepts any
        // order, and so do we. Kept in the order `Writer::tagged_fields`
        // writes them (stable, by tag), so a decoded message re-encodes and
        // decodes back to an equal value.
        unknown.sort_by_key(|f| f.tag);
        Ok(unknown)
    }
}

/// Encodes primitives into a growing buffer.
pub struct Writer<'a> {
    pub buf: &'a mut BytesMut,
}

impl<'a> Writer<'a> {
    pub fn new(buf: &'a mut BytesMut) -> Writer<'a> {
        Writer { buf }
    }

    pub fn bool(&mut self, v: bool) {
        self.buf.put_i8(v as i8)
    }
    pub fn i8(&mut self, v: i8) {
        self.buf.put_i8(v)
    }
    pub fn i16(&mut self, v: i16) {
        self.buf.put_i16(v)
    }
    pub fn u16(&mut self, v: u16) {
        self.buf.put_u16(v)
    }
    pub fn i32(&mut self, v: i32) {
        self.buf.put_i32(v)
    }
    pub fn u32(&mut self, v: u32) {
        self.buf.put_u32(v)
    }
    pub fn i64(&mut self, v: i64) {
        self.buf.put_i64(v)
    }
    pub fn f64(&mut self, v: f64) {
        self.buf.put_f64(v)
    }
    pub fn uuid(&mut self, v: &Uuid) {
        self.buf.put_slice(&v.0)
    }
    pub fn raw(&mut self, v: &[u8]) {
        self.buf.put_slice(v)
    }

    pub fn uvarint(&mut self, mut v: u32) {
        while v >= 0x80 {
            self.buf.put_u8((v as u8) | 0x80);
            v >>= 7;
        }
        self.buf.put_u8(v as u8)
    }

    pub fn uvarlong(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.buf.put_u8((v as u8) | 0x80);
            v >>= 7;
        }
        self.buf.put_u8(v as u8)
    }

    pub fn varint(&mut self, v: i32) {
        self.uvarint(((v << 1) ^ (v >> 31)) as u32)
    }

    pub fn varlong(&mut self, v: i64) {
        self.uvarlong(((v << 1) ^ (v >> 63)) as u64)
    }

    fn length(
        &mut self,
        n: Option<usize>,
        compact: bool,
        wide: bool,
        field: &'static str,
    ) -> Result<(), EncodeError> {
        match (n, compact) {
            (None, true) => self.uvarint(0),
            (None, false) if wide => self.i32(-1),
            (None, false) => self.i16(-1),
            (Some(n), true) => {
                let n = u32::try_from(n).ok().and_then(|n| n.checked_add(1));
                self.uvarint(n.ok_or(EncodeError::TooLong(field))?)
            }
            (Some(n), false) if wide => {
                self.i32(i32::try_from(n).map_err(|_| EncodeError::TooLong(field))?)
            }
            (Some(n), false) => {
                self.i16(i16::try_from(n).map_err(|_| EncodeError::TooLong(field))?)
            }
        }
        Ok(())
    }

    pub fn nullable_string(
        &mut self,
        v: Option<&str>,
        compact: bool,
        field: &'static str,
    ) -> Result<(), EncodeError> {
        self.length(v.map(str::len), compact, false, field)?;
        if let Some(s) = v {
            self.raw(s.as_bytes());
        }
        Ok(())
    }

    pub fn string(
        &mut self,
        v: &str,
        compact: bool,
        field: &'static str,
    ) -> Result<(), EncodeError> {
        self.nullable_string(Some(v), compact, field)
    }

    pub fn nullable_bytes(
        &mut self,
        v: Option<&[u8]>,
        compact: bool,
        field: &'static str,
    ) -> Result<(), EncodeError> {
        self.length(v.map(<[u8]>::len), compact, true, field)?;
        if let Some(b) = v {
            self.raw(b);
        }
        Ok(())
    }

    pub fn bytes(
        &mut self,
        v: &[u8],
        compact: bool,
        field: &'static str,
    ) -> Result<(), EncodeError> {
        self.nullable_bytes(Some(v), compact, field)
    }

    pub fn array_len(
        &mut self,
        n: Option<usize>,
        compact: bool,
        field: &'static str,
    ) -> Result<(), EncodeError> {
        self.length(n, compact, true, field)
    }

    /// Writes a tagged-field section. `fields` must hold each present
    /// field's tag and encoded value; they are written in ascending tag
    /// order as the protocol requires.
    pub fn tagged_fields(&mut self, mut fields: Vec<(u32, Bytes)>) -> Result<(), EncodeError> {
        fields.sort_by_key(|(tag, _)| *tag);
        self.uvarint(
            u32::try_from(fields.len()).map_err(|_| EncodeError::TooLong("tagged fields"))?,
        );
        for (tag, data) in fields {
            self.uvarint(tag);
            self.uvarint(
                u32::try_from(data.len()).map_err(|_| EncodeError::TooLong("tagged field"))?,
            );
            self.raw(&data);
        }
        Ok(())
    }
}

/// Encodes one tagged field's value into its own buffer.
pub fn encode_tagged(
    f: impl FnOnce(&mut Writer<'_>) -> Result<(), EncodeError>,
) -> Result<Bytes, EncodeError> {
    let mut buf = BytesMut::new();
    f(&mut Writer::new(&mut buf))?;
    Ok(buf.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip_uvarint(v: u32) -> u32 {
        let mut buf = BytesMut::new();
        Writer::new(&mut buf).uvarint(v);
        Reader::new(buf.freeze()).uvarint().unwrap()
    }

    #[test]
    fn varints_round_trip_at_the_edges() {
        for v in [0, 1, 127, 128, 16383, 16384, u32::MAX] {
            assert_eq!(roundtrip_uvarint(v), v);
        }
        for v in [0i64, -1, 1, i64::MIN, i64::MAX, 300, -300] {
            let mut buf = BytesMut::new();
            Writer::new(&mut buf).varlong(v);
            assert_eq!(Reader::new(buf.freeze()).varlong().unwrap(), v);
        }
        for v in [0i32, -1, 1, i32::MIN, i32::MAX] {
            let mut buf = BytesMut::new();
            Writer::new(&mut buf).varint(v);
            assert_eq!(Reader::new(buf.freeze()).varint().unwrap(), v);
        }
    }

    #[test]
    fn overlong_varint_is_an_error() {
        let mut r = Reader::new(Bytes::from_static(&[0xff, 0xff, 0xff, 0xff, 0xff, 0x01]));
        assert_eq!(r.uvarint(), Err(DecodeError::InvalidVarint));
    }

    #[test]
    fn length_prefix_beyond_frame_is_an_error_not_an_allocation() {
        // An array claiming i32::MAX elements in a 4-byte frame.
        let mut r = Reader::new(Bytes::from_static(&[0x7f, 0xff, 0xff, 0xff]));
        assert_eq!(
            r.array_len(false),
            Err(DecodeError::InvalidLength(i32::MAX as i64))
        );
        let mut r = Reader::new(Bytes::from_static(&[0x00, 0x05, b'a']));
        assert_eq!(r.nullable_string(false), Err(DecodeError::InvalidLength(5)));
    }

    #[test]
    fn null_and_negative_lengths() {
        let mut r = Reader::new(Bytes::from_static(&[0xff, 0xff]));
        assert_eq!(r.nullable_string(false), Ok(None));
        let mut r = Reader::new(Bytes::from_static(&[0xff, 0xfe]));
        assert_eq!(
            r.nullable_string(false),
            Err(DecodeError::InvalidLength(-2))
        );
        let mut r = Reader::new(Bytes::from_static(&[0x00]));
        assert_eq!(r.nullable_bytes(true), Ok(None));
    }

    /// Found by the `roundtrip` fuzz target: unknown tagged fields out of
    /// tag order decoded into a Vec in wire order, but encode sorts them, so
    /// a decoded request re-encoded to a different value.
    #[test]
    fn tagged_fields_out_of_order_round_trip_to_an_equal_value() {
        // Tags 7, 2, 7 on the wire, none of them known.
        let wire = [3u8, 7, 1, b'a', 2, 0, 7, 1, b'b'];
        let mut r = Reader::new(Bytes::copy_from_slice(&wire));
        let decoded = r.tagged_fields(|_, _| Ok(false)).unwrap();
        let mut buf = BytesMut::new();
        Writer::new(&mut buf)
            .tagged_fields(decoded.iter().map(|f| (f.tag, f.data.clone())).collect())
            .unwrap();
        let again = Reader::new(buf.freeze())
            .tagged_fields(|_, _| Ok(false))
            .unwrap();
        assert_eq!(again, decoded);
        let tags: Vec<u32> = decoded.iter().map(|f| f.tag).collect();
        assert_eq!(tags, [2, 7, 7]);
        assert_eq!(decoded[1].data, Bytes::from_static(b"a"));
    }

    #[test]
    fn unknown_tagged_fields_are_kept_raw() {
        let mut buf = BytesMut::new();
        Writer::new(&mut buf)
            .tagged_fields(vec![
                (7, Bytes::from_static(b"xy")),
                (2, Bytes::from_static(b"z")),
            ])
            .unwrap();
        let mut r = Reader::new(buf.freeze());
        let unknown = r.tagged_fields(|tag, _| Ok(tag == 2)).unwrap();
        assert_eq!(
            unknown,
            vec![RawTaggedField {
                tag: 7,
                data: Bytes::from_static(b"xy")
            }]
        );
        assert!(r.is_empty());
    }
}
