//! Walking a buffer of concatenated batches.
//!
//! Used for the `records` field of a Produce request, for slices read from a
//! segment file (where the read may end mid-batch), and for torn-tail
//! recovery. The walk only frames batches; it never checks CRCs, so the
//! caller decides what a bad batch means in its context.

use bytes::Bytes;

use super::batch::{frame_batch, BatchError, Frame, RecordBatch};

/// How the walk ended, known once the iterator returned `None`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tail {
    /// Not finished yet: the iterator has not returned `None`.
    Pending,
    /// The buffer ended exactly after the last batch.
    Clean,
    /// The buffer ends inside a batch that starts at `position`. `needed` is
    /// that batch's full size if its length field was readable. Expected at
    /// the end of a size-limited read; a torn write during recovery.
    Partial {
        position: usize,
        needed: Option<usize>,
    },
    /// Bytes at `position` cannot start a batch (length or magic invalid).
    Corrupt { position: usize, error: BatchError },
}

/// Iterator over the batches in a buffer; see [`split_batches`].
#[derive(Debug, Clone)]
pub struct Batches {
    buf: Bytes,
    position: usize,
    tail: Tail,
}

/// Walks `buf` batch by batch. Each item is a zero-copy slice of `buf`.
pub fn split_batches(buf: Bytes) -> Batches {
    Batches {
        buf,
        position: 0,
        tail: Tail::Pending,
    }
}

impl Batches {
    /// Offset in the buffer right after the last batch yielded: the length
    /// of the prefix made of whole batches.
    pub fn position(&self) -> usize {
        self.position
    }

    /// How the walk ended; `Tail::Pending` until the iterator is exhausted.
    pub fn tail(&self) -> &Tail {
        &self.tail
    }

    /// The bytes not consumed yet (the partial or corrupt tail, once done).
    pub fn remaining(&self) -> Bytes {
        self.buf.slice(self.position.min(self.buf.len())..)
    }
}

impl Iterator for Batches {
    type Item = RecordBatch;

    fn next(&mut self) -> Option<RecordBatch> {
        if self.tail != Tail::Pending {
            return None;
        }
        let rest = self.buf.get(self.position..).unwrap_or(&[]);
        if rest.is_empty() {
            self.tail = Tail::Clean;
            return None;
        }
        match frame_batch(rest) {
            Frame::Complete(size) => {
                let end = self.position + size;
                match RecordBatch::from_framed(self.buf.slice(self.position..end)) {
                    Ok(batch) => {
                        self.position = end;
                        Some(batch)
                    }
                    Err(error) => {
                        self.tail = Tail::Corrupt {
                            position: self.position,
                            error,
                        };
                        None
                    }
                }
            }
            Frame::Incomplete { needed } => {
                self.tail = Tail::Partial {
                    position: self.position,
                    needed,
                };
                None
            }
            Frame::Corrupt(error) => {
                self.tail = Tail::Corrupt {
                    position: self.position,
                    error,
                };
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::BatchBuilder;
    use bytes::BytesMut;

    fn three_batches() -> (Bytes, Vec<usize>) {
        let mut buf = BytesMut::new();
        let mut sizes = Vec::new();
        for i in 0..3i64 {
            let b = BatchBuilder::new()
                .with_base_offset(i * 10)
                .record(i, None, Some(&vec![b'x'; 10 * i as usize + 1]))
                .build();
            sizes.push(b.size());
            buf.extend_from_slice(b.as_bytes());
        }
        (buf.freeze(), sizes)
    }

    #[test]
    fn splits_concatenated_batches_and_ends_clean() {
        let (buf, sizes) = three_batches();
        let mut it = split_batches(buf.clone());
        let offsets: Vec<i64> = it.by_ref().map(|b| b.base_offset()).collect();
        assert_eq!(offsets, vec![0, 10, 20]);
        assert_eq!(*it.tail(), Tail::Clean);
        assert_eq!(it.position(), sizes.iter().sum::<usize>());
        assert!(it.remaining().is_empty());
    }

    #[test]
    fn every_cut_point_yields_whole_batches_then_a_partial_tail() {
        let (buf, sizes) = three_batches();
        let boundaries: Vec<usize> = sizes
            .iter()
            .scan(0, |acc, s| {
                *acc += s;
                Some(*acc)
            })
            .collect();
        for cut in 0..buf.len() {
            let mut it = split_batches(buf.slice(..cut));
            let whole = it.by_ref().count();
            let expected_whole = boundaries.iter().filter(|&&b| b <= cut).count();
            assert_eq!(whole, expected_whole, "cut {cut}");
            if cut == 0 || boundaries.contains(&cut) {
                assert_eq!(*it.tail(), Tail::Clean, "cut {cut}");
            } else {
                assert!(
                    matches!(it.tail(), Tail::Partial { position, .. } if *position == it.position()),
                    "cut {cut}: {:?}",
                    it.tail()
                );
            }
        }
    }

    #[test]
    fn garbage_after_batches_is_reported_as_corrupt() {
        let (buf, sizes) = three_batches();
        let mut bytes = buf.to_vec();
        bytes.extend_from_slice(&[0u8; 70]);
        let mut it = split_batches(Bytes::from(bytes));
        assert_eq!(it.by_ref().count(), 3);
        assert_eq!(
            *it.tail(),
            Tail::Corrupt {
                position: sizes.iter().sum(),
                error: BatchError::BatchLengthTooSmall(0)
            }
        );
    }

    #[test]
    fn the_iterator_is_fused_after_the_tail() {
        let mut it = split_batches(Bytes::from_static(&[1, 2, 3]));
        assert!(it.next().is_none());
        assert!(it.next().is_none());
        assert_eq!(
            *it.tail(),
            Tail::Partial {
                position: 0,
                needed: None
            }
        );
    }
}
