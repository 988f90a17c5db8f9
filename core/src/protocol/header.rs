//! Request and response headers.
//!
//! The header version is not on the wire: it follows from the API and its
//! version. Flexible versions use request header v2 (with tagged fields) and
//! response header v1; ApiVersions responses always use header v0, because a
//! client must be able to read the response before it knows what the broker
//! supports.

use super::messages::{api_versions_request, APIS};
use super::wire::{DecodeError, EncodeError, RawTaggedField, Reader, Writer};

/// Whether `version` of `api_key` is a flexible version (tagged fields,
/// compact encodings). Unknown APIs are treated as not flexible.
pub fn is_flexible(api_key: i16, version: i16) -> bool {
    APIS.iter()
        .find(|(key, ..)| *key == api_key)
        .is_some_and(|(_, _, _, _, flexible_from)| version >= *flexible_from)
}

pub fn request_header_version(api_key: i16, version: i16) -> i16 {
    if is_flexible(api_key, version) {
        2
    } else {
        1
    }
}

pub fn response_header_version(api_key: i16, version: i16) -> i16 {
    if api_key == api_versions_request::API_KEY {
        0
    } else if is_flexible(api_key, version) {
        1
    } else {
        0
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHeader {
    pub api_key: i16,
    pub api_version: i16,
    pub correlation_id: i32,
    pub client_id: Option<String>,
    pub unknown_tagged_fields: Vec<RawTaggedField>,
}

impl RequestHeader {
    /// Decodes the header that starts a request frame. The fixed part (api
    /// key, version, correlation id) is read first so that even a request
    /// for an unknown API can be answered or logged with its correlation id.
    pub fn decode(r: &mut Reader) -> Result<RequestHeader, DecodeError> {
        let api_key = r.i16()?;
        let api_version = r.i16()?;
        let correlation_id = r.i32()?;
        // The client id is a classic (non-compact) nullable string even in
        // header v2.
        let client_id = r.nullable_string(false)?;
        let unknown_tagged_fields = if request_header_version(api_key, api_version) >= 2 {
            r.tagged_fields(|_, _| Ok(false))?
        } else {
            Vec::new()
        };
        Ok(RequestHeader {
            api_key,
            api_version,
            correlation_id,
            client_id,
            unknown_tagged_fields,
        })
    }

    pub fn encode(&self, w: &mut Writer<'_>) -> Result<(), EncodeError> {
        w.i16(self.api_key);
        w.i16(self.api_version);
        w.i32(self.correlation_id);
        w.nullable_string(self.client_id.as_deref(), false, "RequestHeader.ClientId")?;
        if request_header_version(self.api_key, self.api_version) >= 2 {
            w.tagged_fields(
                self.unknown_tagged_fields
                    .iter()
                    .map(|f| (f.tag, f.data.clone()))
                    .collect(),
            )?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHeader {
    pub correlation_id: i32,
}

impl ResponseHeader {
    pub fn encode(&self, w: &mut Writer<'_>, header_version: i16) -> Result<(), EncodeError> {
        w.i32(self.correlation_id);
        if header_version >= 1 {
            w.tagged_fields(Vec::new())?;
        }
        Ok(())
    }

    pub fn decode(r: &mut Reader, header_version: i16) -> Result<ResponseHeader, DecodeError> {
        let correlation_id = r.i32()?;
        if header_version >= 1 {
            r.tagged_fields(|_, _| Ok(false))?;
        }
        Ok(ResponseHeader { correlation_id })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;

    #[test]
    fn api_versions_response_always_uses_header_v0() {
        assert_eq!(response_header_version(18, 3), 0);
        assert_eq!(response_header_version(18, 0), 0);
        assert_eq!(response_header_version(0, 9), 1);
        assert_eq!(response_header_version(0, 8), 0);
    }

    #[test]
    fn request_header_round_trips_in_both_versions() {
        for (key, version) in [(0i16, 8i16), (0, 9), (18, 3)] {
            let h = RequestHeader {
                api_key: key,
                api_version: version,
                correlation_id: 42,
                client_id: Some("rdkafka".into()),
                unknown_tagged_fields: Vec::new(),
            };
            let mut buf = BytesMut::new();
            h.encode(&mut Writer::new(&mut buf)).unwrap();
            let mut r = Reader::new(buf.freeze());
            assert_eq!(RequestHeader::decode(&mut r).unwrap(), h);
            assert!(r.is_empty());
        }
    }
}
