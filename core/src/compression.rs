//! The compression codecs of v2 record batches (attribute bits 0-2), in the
//! framing Kafka's clients and brokers use for each:
//!
//! | id | codec  | what the records section holds |
//! | -- | ------ | ------------------------------ |
//! | 1  | gzip   | a gzip stream (RFC 1952; members may follow one another) |
//! | 2  | snappy | written in xerial/snappy-java's stream framing (below); a bare raw snappy block is read too, as librdkafka may write one |
//! | 3  | lz4    | an LZ4 frame (magic `04 22 4D 18`) |
//! | 4  | zstd   | a zstd frame |
//!
//! The xerial framing: the 8-byte magic `82 'S' 'N' 'A' 'P' 'P' 'Y' 00`,
//! a version `i32` and a minimum compatible version `i32` (both 1,
//! big-endian), then blocks, each an `i32` big-endian length and a raw
//! snappy block of that length.
//!
//! Decompression is bounded: whatever the input claims, no more than
//! `limit` bytes of output are produced, and an input that would give more
//! is [`CompressionError::TooLarge`] (a decompression bomb costs at most
//! `limit` bytes of memory). A broken input is [`CompressionError::Corrupt`];
//! no input panics. Everything here is in memory: no IO.

use std::fmt;
use std::io::{Read, Write};

use crate::record::Compression;

/// The most a batch's records may take once decompressed, for the broker's
/// own reads of compressed batches (the log cleaner, the key check of a
/// compacted topic). Kafka reads a compressed batch as a stream, one record
/// at a time, and bounds nothing overall; kaas holds the decompressed
/// records of one batch at once, so it bounds them: 64 times the default
/// `max.message.bytes` (1 MiB), far more than producers' batches reach
/// (`batch.size` is 16 KiB by default, librdkafka's 1 MB).
pub const MAX_DECOMPRESSED_BATCH_BYTES: usize = 64 << 20;

/// The largest zstd window accepted (log2: 64 MiB): no frame makes the
/// decoder reserve more than the output bound itself. zstd's own default
/// limit is 128 MiB; only the highest levels on inputs larger than any
/// batch ask for more than 8 MiB.
const ZSTD_WINDOW_LOG_MAX: u32 = 26;

/// The level kaas writes zstd at: zstd's and Kafka's default.
const ZSTD_LEVEL: i32 = 3;

/// What xerial's framing begins with.
const XERIAL_MAGIC: [u8; 8] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];
/// Magic, version and minimum compatible version.
const XERIAL_HEADER_LEN: usize = 16;
/// The block size snappy-java writes (32 KiB); any size is read.
const XERIAL_BLOCK: usize = 32 * 1024;

/// Why records could not be compressed or decompressed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompressionError {
    /// The codec is none kaas knows (attribute bits 5-7), or `None`.
    Unsupported(Compression),
    /// The input is not a valid stream of the codec.
    Corrupt {
        /// The codec.
        codec: Compression,
        /// What the decoder found wrong.
        detail: String,
    },
    /// The output would be larger than the limit.
    TooLarge {
        /// The codec.
        codec: Compression,
        /// The limit, in bytes.
        limit: usize,
    },
}

impl fmt::Display for CompressionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CompressionError::Unsupported(c) => write!(f, "unsupported compression {c:?}"),
            CompressionError::Corrupt { codec, detail } => {
                write!(f, "corrupt {codec:?} data: {detail}")
            }
            CompressionError::TooLarge { codec, limit } => {
                write!(f, "{codec:?} data decompresses to more than {limit} bytes")
            }
        }
    }
}

impl std::error::Error for CompressionError {}

fn corrupt(codec: Compression, detail: impl fmt::Display) -> CompressionError {
    CompressionError::Corrupt {
        codec,
        detail: detail.to_string(),
    }
}

/// `input` decompressed with `codec`, at most `limit` bytes of it.
pub fn decompress(
    codec: Compression,
    input: &[u8],
    limit: usize,
) -> Result<Vec<u8>, CompressionError> {
    match codec {
        Compression::Gzip => read_bounded(codec, flate2::read::MultiGzDecoder::new(input), limit),
        Compression::Snappy => decompress_snappy(input, limit),
        Compression::Lz4 => read_bounded(codec, lz4_flex::frame::FrameDecoder::new(input), limit),
        Compression::Zstd => {
            let mut decoder =
                zstd::stream::read::Decoder::with_buffer(input).map_err(|e| corrupt(codec, e))?;
            decoder
                .window_log_max(ZSTD_WINDOW_LOG_MAX)
                .map_err(|e| corrupt(codec, e))?;
            read_bounded(codec, decoder, limit)
        }
        Compression::None | Compression::Unknown(_) => Err(CompressionError::Unsupported(codec)),
    }
}

/// `input` compressed with `codec`, in the framing Kafka writes (see the
/// module doc).
pub fn compress(codec: Compression, input: &[u8]) -> Result<Vec<u8>, CompressionError> {
    let failed = |e: std::io::Error| corrupt(codec, e);
    match codec {
        Compression::Gzip => {
            let mut encoder =
                flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            encoder.write_all(input).map_err(failed)?;
            encoder.finish().map_err(failed)
        }
        Compression::Snappy => compress_snappy(input),
        Compression::Lz4 => {
            // Kafka's frame: 64 KiB independent blocks, no checksums but
            // the header's, no content size.
            let info = lz4_flex::frame::FrameInfo::new()
                .block_size(lz4_flex::frame::BlockSize::Max64KB)
                .block_mode(lz4_flex::frame::BlockMode::Independent);
            let mut encoder = lz4_flex::frame::FrameEncoder::with_frame_info(info, Vec::new());
            encoder.write_all(input).map_err(failed)?;
            encoder.finish().map_err(|e| corrupt(codec, e))
        }
        Compression::Zstd => zstd::stream::encode_all(input, ZSTD_LEVEL).map_err(failed),
        Compression::None | Compression::Unknown(_) => Err(CompressionError::Unsupported(codec)),
    }
}

/// Reads `reader` to its end, failing once more than `limit` bytes came
/// out: the output never grows past `limit + 1` bytes.
fn read_bounded(
    codec: Compression,
    reader: impl Read,
    limit: usize,
) -> Result<Vec<u8>, CompressionError> {
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    let mut out = Vec::new();
    reader
        .take(cap)
        .read_to_end(&mut out)
        .map_err(|e| corrupt(codec, e))?;
    if out.len() > limit {
        return Err(CompressionError::TooLarge { codec, limit });
    }
    Ok(out)
}

/// Snappy as Kafka reads it: xerial-framed if it starts with xerial's
/// magic, a raw snappy block otherwise.
fn decompress_snappy(input: &[u8], limit: usize) -> Result<Vec<u8>, CompressionError> {
    match input.strip_prefix(&XERIAL_MAGIC[..]) {
        Some(_) if input.len() >= XERIAL_HEADER_LEN => {
            let blocks = input.get(XERIAL_HEADER_LEN..).unwrap_or(&[]);
            decompress_xerial_blocks(blocks, limit)
        }
        _ => {
            let mut out = Vec::new();
            decompress_snappy_block(input, &mut out, limit)?;
            Ok(out)
        }
    }
}

fn decompress_xerial_blocks(mut blocks: &[u8], limit: usize) -> Result<Vec<u8>, CompressionError> {
    let codec = Compression::Snappy;
    let mut out = Vec::new();
    while !blocks.is_empty() {
        let (len, rest) = blocks
            .split_first_chunk::<4>()
            .ok_or_else(|| corrupt(codec, "a block length is cut short"))?;
        let len = usize::try_from(i32::from_be_bytes(*len))
            .map_err(|_| corrupt(codec, "a negative block length"))?;
        let block = rest
            .get(..len)
            .ok_or_else(|| corrupt(codec, "a block is cut short"))?;
        decompress_snappy_block(block, &mut out, limit)?;
        blocks = rest.get(len..).unwrap_or(&[]);
    }
    Ok(out)
}

/// Appends one raw snappy block to `out`, checking the length it declares
/// against what `limit` leaves before reserving anything.
fn decompress_snappy_block(
    block: &[u8],
    out: &mut Vec<u8>,
    limit: usize,
) -> Result<(), CompressionError> {
    let codec = Compression::Snappy;
    let len = snap::raw::decompress_len(block).map_err(|e| corrupt(codec, e))?;
    if len > limit.saturating_sub(out.len()) {
        return Err(CompressionError::TooLarge { codec, limit });
    }
    let start = out.len();
    out.resize(start + len, 0);
    let target = out.get_mut(start..).unwrap_or(&mut []);
    let written = snap::raw::Decoder::new()
        .decompress(block, target)
        .map_err(|e| corrupt(codec, e))?;
    out.truncate(start + written);
    Ok(())
}

/// Snappy in xerial's framing, in blocks of 32 KiB, as snappy-java (and so
/// Kafka) writes it.
fn compress_snappy(input: &[u8]) -> Result<Vec<u8>, CompressionError> {
    let codec = Compression::Snappy;
    let mut out = Vec::with_capacity(XERIAL_HEADER_LEN + input.len() / 2 + 64);
    out.extend_from_slice(&XERIAL_MAGIC);
    out.extend_from_slice(&1i32.to_be_bytes());
    out.extend_from_slice(&1i32.to_be_bytes());
    let mut encoder = snap::raw::Encoder::new();
    for chunk in input.chunks(XERIAL_BLOCK) {
        let block = encoder.compress_vec(chunk).map_err(|e| corrupt(codec, e))?;
        let len = i32::try_from(block.len()).map_err(|_| corrupt(codec, "block too large"))?;
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(&block);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const CODECS: [Compression; 4] = Compression::CODECS;

    /// Text that compresses well, longer than one snappy or lz4 block.
    fn sample(len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| b"the quick brown fox "[i % 20] ^ u8::from(i % 997 == 0))
            .collect()
    }

    #[test]
    fn every_codec_round_trips_in_its_kafka_framing() {
        for input in [Vec::new(), b"x".to_vec(), sample(200_000)] {
            for codec in CODECS {
                let packed = compress(codec, &input).unwrap();
                let unpacked = decompress(codec, &packed, input.len()).unwrap();
                assert_eq!(unpacked, input, "{codec:?}");
            }
        }
    }

    #[test]
    fn each_codec_writes_the_framing_kafka_writes() {
        let input = sample(100_000);
        let gzip = compress(Compression::Gzip, &input).unwrap();
        assert_eq!(gzip[..2], [0x1f, 0x8b], "a gzip stream");
        let snappy = compress(Compression::Snappy, &input).unwrap();
        assert_eq!(snappy[..8], XERIAL_MAGIC);
        assert_eq!(snappy[8..16], [0, 0, 0, 1, 0, 0, 0, 1], "versions 1 and 1");
        let lz4 = compress(Compression::Lz4, &input).unwrap();
        assert_eq!(lz4[..4], [0x04, 0x22, 0x4d, 0x18], "an LZ4 frame");
        // FLG: version 01, independent blocks, no checksums but the
        // header's, no content size; BD: 64 KiB blocks.
        assert_eq!(lz4[4..6], [0x60, 0x40]);
        let zstd = compress(Compression::Zstd, &input).unwrap();
        assert_eq!(zstd[..4], [0x28, 0xb5, 0x2f, 0xfd], "a zstd frame");
    }

    #[test]
    fn snappy_reads_a_raw_block_as_well_as_xerial_framing() {
        let input = sample(10_000);
        let raw = snap::raw::Encoder::new().compress_vec(&input).unwrap();
        assert_eq!(
            decompress(Compression::Snappy, &raw, 1 << 20).unwrap(),
            input
        );
    }

    #[test]
    fn gzip_reads_members_one_after_another() {
        let mut two = compress(Compression::Gzip, b"abc").unwrap();
        two.extend(compress(Compression::Gzip, b"def").unwrap());
        assert_eq!(decompress(Compression::Gzip, &two, 100).unwrap(), b"abcdef");
    }

    #[test]
    fn decompression_past_the_limit_is_too_large() {
        // A bomb: 16 MiB of zeros packs into a few KiB.
        let zeros = vec![0u8; 16 << 20];
        for codec in CODECS {
            let packed = compress(codec, &zeros).unwrap();
            assert!(packed.len() < 1 << 20, "{codec:?} packs zeros small");
            let limit = 1 << 20;
            assert_eq!(
                decompress(codec, &packed, limit),
                Err(CompressionError::TooLarge { codec, limit }),
                "{codec:?}"
            );
            assert_eq!(
                decompress(codec, &packed, zeros.len()).unwrap().len(),
                zeros.len()
            );
        }
    }

    #[test]
    fn a_snappy_block_claiming_more_than_the_limit_is_refused_before_allocating() {
        // A raw block's header is its length as a varint: claim 2 GiB.
        let claim = [0x80, 0x80, 0x80, 0x80, 0x08, 0x00];
        assert!(matches!(
            decompress(Compression::Snappy, &claim, 1 << 20),
            Err(CompressionError::TooLarge { .. })
        ));
        let mut framed = XERIAL_MAGIC.to_vec();
        framed.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 6]);
        framed.extend_from_slice(&claim);
        assert!(matches!(
            decompress(Compression::Snappy, &framed, 1 << 20),
            Err(CompressionError::TooLarge { .. })
        ));
    }

    #[test]
    fn corrupt_input_is_a_typed_error() {
        let input = sample(50_000);
        for codec in CODECS {
            let packed = compress(codec, &input).unwrap();
            let cut = &packed[..packed.len() / 2];
            assert!(
                matches!(
                    decompress(codec, cut, 1 << 20),
                    Err(CompressionError::Corrupt { .. })
                ),
                "{codec:?} cut in half"
            );
            assert!(matches!(
                decompress(codec, b"not compressed at all", 1 << 20),
                Err(CompressionError::Corrupt { .. })
            ));
        }
        let mut framed = XERIAL_MAGIC.to_vec();
        framed.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff]);
        assert!(matches!(
            decompress(Compression::Snappy, &framed, 1 << 20),
            Err(CompressionError::Corrupt { .. })
        ));
    }

    #[test]
    fn no_codec_is_not_a_codec() {
        assert_eq!(
            compress(Compression::None, b"x"),
            Err(CompressionError::Unsupported(Compression::None))
        );
        assert_eq!(
            decompress(Compression::Unknown(6), b"x", 10),
            Err(CompressionError::Unsupported(Compression::Unknown(6)))
        );
    }

    proptest! {
        #[test]
        fn arbitrary_input_never_panics_nor_exceeds_the_limit(
            codec in 0usize..4,
            bytes in proptest::collection::vec(any::<u8>(), 0..512),
            limit in 0usize..4096,
        ) {
            let codec = CODECS[codec];
            if let Ok(out) = decompress(codec, &bytes, limit) {
                prop_assert!(out.len() <= limit);
            }
        }

        #[test]
        fn arbitrary_input_round_trips(
            codec in 0usize..4,
            bytes in proptest::collection::vec(any::<u8>(), 0..70_000),
        ) {
            let codec = CODECS[codec];
            let packed = compress(codec, &bytes).unwrap();
            prop_assert_eq!(decompress(codec, &packed, bytes.len()).unwrap(), bytes);
        }
    }
}
