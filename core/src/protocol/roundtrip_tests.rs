//! encode ∘ decode is the identity for every message and every version:
//! random values with every field of the version set are encoded, decoded,
//! compared, and encoded again to the same bytes.

use super::messages::{RequestBody, ResponseBody, APIS};
use super::sample::Gen;
use super::wire::{Reader, Writer};
use bytes::BytesMut;

const SAMPLES_PER_VERSION: u64 = 24;

#[test]
fn every_request_and_response_version_round_trips() {
    let mut checked = 0;
    for &(key, name, lo, hi, _) in APIS {
        for version in lo..=hi {
            for seed in 0..SAMPLES_PER_VERSION {
                let mut g = Gen::new(seed ^ ((key as u64) << 32) ^ ((version as u64) << 16));
                let req = RequestBody::sample(&mut g, key, version).unwrap();
                let mut buf = BytesMut::new();
                req.encode(&mut Writer::new(&mut buf), version)
                    .unwrap_or_else(|e| panic!("{name} v{version} request encode: {e}"));
                let bytes = buf.freeze();
                let mut r = Reader::new(bytes.clone());
                let back = RequestBody::decode(key, version, &mut r)
                    .unwrap_or_else(|e| panic!("{name} v{version} request decode: {e}"));
                r.finish().unwrap();
                assert_eq!(back, req, "{name} v{version} request");
                let mut again = BytesMut::new();
                back.encode(&mut Writer::new(&mut again), version).unwrap();
                assert_eq!(again.freeze(), bytes, "{name} v{version} request bytes");

                let resp = ResponseBody::sample(&mut g, key, version).unwrap();
                let mut buf = BytesMut::new();
                resp.encode(&mut Writer::new(&mut buf), version)
                    .unwrap_or_else(|e| panic!("{name} v{version} response encode: {e}"));
                let bytes = buf.freeze();
                let mut r = Reader::new(bytes.clone());
                let back = ResponseBody::decode(key, version, &mut r)
                    .unwrap_or_else(|e| panic!("{name} v{version} response decode: {e}"));
                r.finish().unwrap();
                assert_eq!(back, resp, "{name} v{version} response");
                checked += 1;
            }
        }
    }
    assert!(checked > 1000, "only {checked} samples checked");
}

#[test]
fn truncated_frames_never_panic() {
    for &(key, _, lo, hi, _) in APIS {
        for version in lo..=hi {
            let mut g = Gen::new(7);
            let req = RequestBody::sample(&mut g, key, version).unwrap();
            let mut buf = BytesMut::new();
            req.encode(&mut Writer::new(&mut buf), version).unwrap();
            let bytes = buf.freeze();
            for cut in 0..bytes.len() {
                let mut r = Reader::new(bytes.slice(..cut));
                let _ = RequestBody::decode(key, version, &mut r);
            }
        }
    }
}
