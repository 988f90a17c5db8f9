//! A compressed batch and its uncompressed twin: the same header (offsets,
//! producer fields, timestamps, record count, every attribute bit but the
//! codec's) over the records decompressed. What reads a compressed batch's
//! records (the log cleaner, the key check of a compacted topic) reads the
//! twin; what the cleaner rewrites is compressed back with the batch's own
//! codec.

use bytes::{BufMut, BytesMut};

use super::batch::{
    finish_header, Compression, RecordBatch, ATTRIBUTES, BATCH_HEADER_LEN, COMPRESSION_MASK,
};
use crate::compression::{compress, decompress, CompressionError};

impl RecordBatch {
    /// This batch with its records decompressed (at most `limit` bytes of
    /// them) and the codec bits cleared; an uncompressed batch as it is.
    pub fn decompressed(&self, limit: usize) -> Result<RecordBatch, CompressionError> {
        let codec = self.compression();
        if codec == Compression::None {
            return Ok(self.clone());
        }
        let records = decompress(codec, self.records_section(), limit)?;
        Ok(self.with_records_section(Compression::None, &records))
    }

    /// This uncompressed batch with its records compressed by `codec` (the
    /// codec bits set to it). A batch without records, or one already
    /// compressed, is returned as it is: Kafka writes a batch emptied by
    /// the cleaner uncompressed.
    pub fn compressed_with(&self, codec: Compression) -> Result<RecordBatch, CompressionError> {
        if self.compression() != Compression::None
            || codec == Compression::None
            || self.record_count() == 0
        {
            return Ok(self.clone());
        }
        let records = compress(codec, self.records_section())?;
        Ok(self.with_records_section(codec, &records))
    }

    /// The bytes after the header: the records, compressed or not.
    pub(crate) fn records_section(&self) -> &[u8] {
        self.as_bytes().get(BATCH_HEADER_LEN..).unwrap_or(&[])
    }

    /// The header with the codec bits set to `codec`, over `records`;
    /// length and CRC made right.
    fn with_records_section(&self, codec: Compression, records: &[u8]) -> RecordBatch {
        let mut out = BytesMut::with_capacity(BATCH_HEADER_LEN + records.len());
        out.put_slice(self.as_bytes().get(..BATCH_HEADER_LEN).unwrap_or(&[]));
        let attributes = (self.attributes() & !COMPRESSION_MASK) | i16::from(codec.id());
        if let Some(field) = out.get_mut(ATTRIBUTES..ATTRIBUTES + 2) {
            field.copy_from_slice(&attributes.to_be_bytes());
        }
        out.put_slice(records);
        finish_header(&mut out);
        RecordBatch::from_built(out.freeze())
    }
}

#[cfg(test)]
mod tests {
    use crate::compression::MAX_DECOMPRESSED_BATCH_BYTES;
    use crate::record::{BatchBuilder, Compression, NewRecord, Record, RecordBatch};

    const CODECS: [Compression; 4] = Compression::CODECS;

    fn sample() -> RecordBatch {
        BatchBuilder::transactional(7, 3, 100)
            .with_base_offset(1_000)
            .with_partition_leader_epoch(5)
            .push_record(NewRecord::new(5_000, Some(b"a"), Some(b"1")).header("h", Some(b"x")))
            .record(4_000, Some(b"b"), None)
            .record(6_000, None, Some(b"3"))
            .build()
    }

    fn records(batch: &RecordBatch) -> Vec<Record> {
        batch.records().collect::<Result<_, _>>().unwrap()
    }

    #[test]
    fn a_compressed_batch_decompresses_to_its_uncompressed_twin() {
        let plain = sample();
        for codec in CODECS {
            let packed = plain.compressed_with(codec).unwrap();
            assert_eq!(packed.validate(), Ok(()));
            assert_eq!(packed.compression(), codec);
            assert_eq!(packed.attributes() & !0x07, plain.attributes());
            assert_eq!(
                (packed.base_offset(), packed.last_offset_delta()),
                (1_000, 2)
            );
            assert_eq!(packed.producer_id(), 7);
            assert_eq!(packed.base_timestamp(), plain.base_timestamp());
            assert_eq!(packed.max_timestamp(), plain.max_timestamp());
            assert!(packed.records().next().unwrap().is_err(), "records unread");
            let twin = packed.decompressed(MAX_DECOMPRESSED_BATCH_BYTES).unwrap();
            assert_eq!(twin, plain, "{codec:?}: byte for byte");
            assert_eq!(records(&twin).len(), 3);
        }
    }

    #[test]
    fn an_uncompressed_or_empty_batch_is_not_compressed() {
        let plain = sample();
        assert_eq!(plain.decompressed(0).unwrap(), plain);
        let empty = plain.empty_header();
        assert_eq!(empty.compressed_with(Compression::Zstd).unwrap(), empty);
        assert_eq!(plain.compressed_with(Compression::None).unwrap(), plain);
    }

    #[test]
    fn decompressing_past_the_limit_is_an_error() {
        let packed = sample().compressed_with(Compression::Lz4).unwrap();
        assert!(packed.decompressed(10).is_err());
    }
}
