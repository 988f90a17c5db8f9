//! Decoding a whole request frame: header, then the body of the API and
//! version the header names, checked against what the broker serves.
//!
//! This is the one path every byte a client sends goes through, so it is a
//! pure function of the frame: the TCP server calls it, and so does the
//! `request_frame` fuzz target (fuzz/), which therefore exercises exactly
//! what the server decodes.

use super::header::RequestHeader;
use super::messages::RequestBody;
use super::wire::{DecodeError, Reader};
use bytes::Bytes;
use std::fmt;

/// A request whose header and body both decoded.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub header: RequestHeader,
    pub body: RequestBody,
    /// Bytes left after the body. Kafka ignores them (librdkafka's Metadata
    /// v13 "all topics" request carries three), and so do we.
    pub trailing: usize,
}

/// Why a frame is not a request the broker can handle.
#[derive(Debug, Clone, PartialEq)]
pub enum RequestError {
    /// The header itself does not decode: nothing can be answered.
    Header(DecodeError),
    /// An API key the broker does not serve.
    UnsupportedApi(RequestHeader),
    /// A version outside the range the broker serves for this API.
    UnsupportedVersion {
        header: RequestHeader,
        min: i16,
        max: i16,
    },
    /// The header decoded but the body does not.
    Body {
        header: RequestHeader,
        error: DecodeError,
    },
}

impl RequestError {
    /// The header, when it decoded.
    pub fn header(&self) -> Option<&RequestHeader> {
        match self {
            RequestError::Header(_) => None,
            RequestError::UnsupportedApi(header)
            | RequestError::UnsupportedVersion { header, .. }
            | RequestError::Body { header, .. } => Some(header),
        }
    }
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestError::Header(e) => write!(f, "bad request header: {e}"),
            RequestError::UnsupportedApi(h) => write!(f, "unsupported api key {}", h.api_key),
            RequestError::UnsupportedVersion { header, min, max } => write!(
                f,
                "unsupported version {} of api key {} (serving {min}..={max})",
                header.api_version, header.api_key
            ),
            RequestError::Body { header, error } => {
                write!(
                    f,
                    "cannot decode api key {} v{}: {error}",
                    header.api_key, header.api_version
                )
            }
        }
    }
}

impl std::error::Error for RequestError {}

/// Decodes `frame` (a request without its length prefix). `supported` gives
/// the inclusive version range the broker serves for an API key, `None` for
/// an API it does not serve; only those versions are decoded.
pub fn decode_request(
    frame: Bytes,
    supported: impl Fn(i16) -> Option<(i16, i16)>,
) -> Result<Request, RequestError> {
    let mut r = Reader::new(frame);
    let header = RequestHeader::decode(&mut r).map_err(RequestError::Header)?;
    let Some((min, max)) = supported(header.api_key) else {
        return Err(RequestError::UnsupportedApi(header));
    };
    if !(min..=max).contains(&header.api_version) {
        return Err(RequestError::UnsupportedVersion { header, min, max });
    }
    match RequestBody::decode(header.api_key, header.api_version, &mut r) {
        Ok(body) => Ok(Request {
            header,
            body,
            trailing: r.remaining(),
        }),
        Err(error) => Err(RequestError::Body { header, error }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::messages::{api_versions_request, metadata_request, MetadataRequest};
    use crate::protocol::wire::Writer;
    use bytes::BytesMut;

    fn serves_metadata_and_api_versions(key: i16) -> Option<(i16, i16)> {
        match key {
            metadata_request::API_KEY => Some((0, 12)),
            api_versions_request::API_KEY => Some((0, 3)),
            _ => None,
        }
    }

    fn frame(key: i16, version: i16, body: Option<&RequestBody>, extra: &[u8]) -> Bytes {
        let mut buf = BytesMut::new();
        let mut w = Writer::new(&mut buf);
        let header = RequestHeader {
            api_key: key,
            api_version: version,
            correlation_id: 9,
            client_id: Some("t".into()),
            unknown_tagged_fields: Vec::new(),
        };
        header.encode(&mut w).unwrap();
        if let Some(body) = body {
            body.encode(&mut w, version).unwrap();
        }
        w.raw(extra);
        buf.freeze()
    }

    #[test]
    fn a_served_version_decodes_and_trailing_bytes_are_counted_not_refused() {
        let body = RequestBody::Metadata(MetadataRequest::default());
        let req = decode_request(
            frame(3, 4, Some(&body), &[1, 2, 3]),
            serves_metadata_and_api_versions,
        )
        .unwrap();
        assert_eq!(req.body, body);
        assert_eq!(req.header.correlation_id, 9);
        assert_eq!(req.trailing, 3);
    }

    #[test]
    fn unserved_api_and_version_are_refused_with_their_header() {
        let err =
            decode_request(frame(0, 9, None, &[]), serves_metadata_and_api_versions).unwrap_err();
        assert!(matches!(err, RequestError::UnsupportedApi(ref h) if h.api_key == 0));
        // Version 13 exists in the schema but is not served here.
        let err =
            decode_request(frame(3, 13, None, &[]), serves_metadata_and_api_versions).unwrap_err();
        assert!(matches!(
            err,
            RequestError::UnsupportedVersion {
                min: 0,
                max: 12,
                ..
            }
        ));
        assert_eq!(err.header().map(|h| h.correlation_id), Some(9));
    }

    #[test]
    fn an_undecodable_body_or_header_is_an_error_not_a_panic() {
        // A Metadata v4 body claiming an array of i32::MAX topics.
        let err = decode_request(
            frame(3, 4, None, &[0x7f, 0xff, 0xff, 0xff]),
            serves_metadata_and_api_versions,
        )
        .unwrap_err();
        assert!(matches!(
            err,
            RequestError::Body {
                error: DecodeError::InvalidLength(_),
                ..
            }
        ));
        let err = decode_request(
            Bytes::from_static(&[0, 3, 0]),
            serves_metadata_and_api_versions,
        )
        .unwrap_err();
        assert!(matches!(err, RequestError::Header(_)));
    }
}
