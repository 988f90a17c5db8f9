//! Random message values for round-trip tests and fuzzing.
//!
//! A tiny self-contained generator (splitmix64) so that `sample` needs no
//! dependency and the same seed always gives the same message.

use bytes::Bytes;

pub struct Gen {
    state: u64,
}

impl Gen {
    pub fn new(seed: u64) -> Gen {
        Gen { state: seed }
    }

    pub fn u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn bool(&mut self) -> bool {
        self.u64() & 1 == 1
    }
    pub fn int8(&mut self) -> i8 {
        self.u64() as i8
    }
    pub fn int16(&mut self) -> i16 {
        self.u64() as i16
    }
    pub fn uint16(&mut self) -> u16 {
        self.u64() as u16
    }
    pub fn int32(&mut self) -> i32 {
        self.u64() as i32
    }
    pub fn uint32(&mut self) -> u32 {
        self.u64() as u32
    }
    pub fn int64(&mut self) -> i64 {
        self.u64() as i64
    }
    pub fn float64(&mut self) -> f64 {
        (self.u64() % 1_000_000) as f64 / 7.0
    }
    pub fn uuid(&mut self) -> crate::protocol::wire::Uuid {
        crate::protocol::wire::Uuid::from_u128(((self.u64() as u128) << 64) | self.u64() as u128)
    }
    /// A short length for arrays, strings and bytes.
    pub fn count(&mut self) -> usize {
        (self.u64() % 4) as usize
    }
    /// Whether a nullable field should be null this time.
    pub fn null(&mut self) -> bool {
        self.u64().is_multiple_of(4)
    }
    pub fn string(&mut self) -> String {
        let n = self.count() * 3;
        (0..n)
            .map(|_| char::from(b'a' + (self.u64() % 26) as u8))
            .collect()
    }
    pub fn bytes(&mut self) -> Bytes {
        let n = self.count() * 5;
        (0..n).map(|_| self.u64() as u8).collect::<Vec<u8>>().into()
    }
}
