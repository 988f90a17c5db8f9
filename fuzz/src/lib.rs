//! The bodies of the kaas fuzz targets.
//!
//! Each target in `fuzz_targets/` is one line calling a function here, so
//! the same code also runs on stable: `cargo test` in this directory replays
//! the committed corpus through every target (tests/corpus.rs), and
//! `seed_corpus` uses the helpers to write generated seeds.
//!
//! A target fails by panicking: every function here asserts the invariants
//! of what it drives, and any panic inside kaas code is a finding too (no
//! input from the network or the volume may cause one).

pub mod alloc_meter;
pub mod archive;
pub mod group_machine;
pub mod mem_volume;
pub mod producer_machine;
pub mod targets;

pub use targets::{broker_requests, record_batch, request_frame, roundtrip, state_files};

use bytes::Bytes;
use kaas_core::protocol::frame::frame_length;

/// The largest frame the targets accept, far above libFuzzer's input sizes.
pub const MAX_FRAME_BYTES: usize = 1 << 20;

/// Splits fuzz input into request frames the way the server reads a
/// connection: a 4-byte length prefix checked by `frame_length` (the same
/// check the server makes before reading a body), then that many bytes.
/// A prefix the check refuses ends the stream, as it ends a connection.
///
/// A frame whose body is cut short by the end of the input is decoded with
/// what is there: that is exactly the frame whose prefix had said the
/// shorter length, so no decodable input is lost, and the fuzzer can change
/// a body's length without having to fix up its prefix.
pub fn frames(data: &[u8]) -> Vec<Bytes> {
    let mut out = Vec::new();
    let mut rest = data;
    while let Some((prefix, body)) = rest.split_first_chunk::<4>() {
        let Ok(len) = frame_length(*prefix, MAX_FRAME_BYTES) else {
            break;
        };
        let take = len.min(body.len());
        out.push(Bytes::copy_from_slice(&body[..take]));
        rest = &body[take..];
    }
    out
}

/// Prefixes `frame` with its length: the on-the-wire form, which is how
/// captured and generated seeds are stored.
pub fn with_length_prefix(frame: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(frame.len() + 4);
    out.extend_from_slice(&(frame.len() as u32).to_be_bytes());
    out.extend_from_slice(frame);
    out
}

/// (e) The input of the `state_machines` target: one operation sequence
/// for the producer table and one for the group coordinator.
#[derive(arbitrary::Arbitrary, Debug)]
pub struct Script {
    pub producer: Vec<producer_machine::ProducerOp>,
    pub group: Vec<group_machine::GroupOp>,
}

pub fn state_machines(script: Script) {
    producer_machine::run(&script.producer);
    group_machine::run(&script.group);
}
