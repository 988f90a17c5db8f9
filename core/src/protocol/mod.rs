//! The Kafka wire protocol: framing, headers, error codes and the codec of
//! every message kaas serves.
//!
//! The message codec in `messages` is generated from Kafka's JSON schemas by
//! `scripts/codegen/generate.py`; the primitives it is built on are in `wire`.

pub mod error;
pub mod frame;
pub mod header;
pub mod messages;
pub mod request;
#[cfg(any(test, feature = "sample"))]
pub mod sample;
pub mod wire;

pub use error::ErrorCode;
pub use header::{RequestHeader, ResponseHeader};
pub use messages::{RequestBody, ResponseBody};
pub use request::{decode_request, Request, RequestError};
pub use wire::{DecodeError, EncodeError, Reader, Uuid, Writer};

#[cfg(test)]
mod roundtrip_tests;
