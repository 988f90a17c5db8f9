//! Framing: every request and response is an i32 length followed by that
//! many bytes. The length is checked against the configured maximum before
//! a single byte of the body is buffered.

use super::header::{response_header_version, ResponseHeader};
use super::messages::ResponseBody;
use super::wire::{EncodeError, Writer};
use bytes::{BufMut, Bytes, BytesMut};

/// Kafka's default `socket.request.max.bytes`.
pub const DEFAULT_MAX_FRAME_BYTES: usize = 100 * 1024 * 1024;

/// Largest request of any API but Produce. Only Produce carries bulk data;
/// every other request decodes into structures that can take ~30 times
/// their wire size (an empty string is one byte on the wire and a 24-byte
/// `String` in memory), so their frames are held to a size no real client
/// comes near.
pub const DEFAULT_MAX_NON_PRODUCE_FRAME_BYTES: usize = 8 * 1024 * 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// A negative or zero length: not a Kafka client.
    InvalidLength(i32),
    /// Larger than the maximum frame size.
    TooLarge { len: usize, max: usize },
    /// A request other than Produce larger than the limit for those.
    TooLargeForApi {
        api_key: i16,
        len: usize,
        max: usize,
    },
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::InvalidLength(n) => write!(f, "invalid frame length {n}"),
            FrameError::TooLarge { len, max } => {
                write!(f, "frame of {len} bytes exceeds the maximum of {max}")
            }
            FrameError::TooLargeForApi { api_key, len, max } => write!(
                f,
                "api key {api_key} request of {len} bytes exceeds the {max}-byte maximum of non-Produce requests"
            ),
        }
    }
}

impl std::error::Error for FrameError {}

/// Validates a frame's length prefix. A request needs at least the fixed
/// part of its header (api key, version, correlation id: 8 bytes).
pub fn frame_length(prefix: [u8; 4], max: usize) -> Result<usize, FrameError> {
    let len = i32::from_be_bytes(prefix);
    if len < 8 {
        return Err(FrameError::InvalidLength(len));
    }
    let len = len as usize;
    if len > max {
        return Err(FrameError::TooLarge { len, max });
    }
    Ok(len)
}

/// Checks a frame's length against the limit of its API, known from the
/// first two bytes of the body, before the rest is buffered.
pub fn check_api_frame_length(
    api_key: i16,
    len: usize,
    max_non_produce: usize,
) -> Result<(), FrameError> {
    if api_key != super::messages::produce_request::API_KEY && len > max_non_produce {
        return Err(FrameError::TooLargeForApi {
            api_key,
            len,
            max: max_non_produce,
        });
    }
    Ok(())
}

/// Encodes a whole response frame (length prefix, header, body).
pub fn encode_response(
    api_key: i16,
    api_version: i16,
    correlation_id: i32,
    body: &ResponseBody,
) -> Result<Bytes, EncodeError> {
    let mut buf = BytesMut::with_capacity(256);
    buf.put_i32(0);
    {
        let mut w = Writer::new(&mut buf);
        let header = ResponseHeader { correlation_id };
        header.encode(&mut w, response_header_version(api_key, api_version))?;
        body.encode(&mut w, api_version)?;
    }
    let len = (buf.len() - 4) as i32;
    buf[0..4].copy_from_slice(&len.to_be_bytes());
    Ok(buf.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_produce_may_use_frames_above_the_non_produce_limit() {
        assert!(check_api_frame_length(0, 50 << 20, 8 << 20).is_ok());
        assert!(check_api_frame_length(3, 8 << 20, 8 << 20).is_ok());
        assert_eq!(
            check_api_frame_length(3, (8 << 20) + 1, 8 << 20),
            Err(FrameError::TooLargeForApi {
                api_key: 3,
                len: (8 << 20) + 1,
                max: 8 << 20
            })
        );
    }

    #[test]
    fn frame_length_is_checked_before_allocation() {
        assert_eq!(frame_length(100i32.to_be_bytes(), 1000), Ok(100));
        assert_eq!(
            frame_length((-1i32).to_be_bytes(), 1000),
            Err(FrameError::InvalidLength(-1))
        );
        assert_eq!(
            frame_length(3i32.to_be_bytes(), 1000),
            Err(FrameError::InvalidLength(3))
        );
        assert_eq!(
            frame_length(i32::MAX.to_be_bytes(), 1000),
            Err(FrameError::TooLarge {
                len: i32::MAX as usize,
                max: 1000
            })
        );
    }
}
