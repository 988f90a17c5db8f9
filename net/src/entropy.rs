//! The one place the driver draws randomness (topic ids, cluster ids,
//! member ids, broker incarnations). Time comes from the broker's injected clock
//! (`crate::env::Clock`). Under madsim the entropy comes from madsim's
//! seeded rng, so a simulation replays exactly.

use kaas_core::protocol::Uuid;

/// A fresh random UUID that is neither zero nor Kafka's reserved metadata
/// topic id (1), the two ids clients treat specially.
pub fn random_uuid() -> Uuid {
    loop {
        let id = Uuid::from_u128(random_u128());
        if id.as_u128() > 1 {
            return id;
        }
    }
}

/// 128 random bits. Under madsim they come from its seeded rng: rand's
/// `thread_rng` seeds itself through a raw `getrandom` syscall that madsim
/// cannot intercept, which would put real entropy into a replayed run.
fn random_u128() -> u128 {
    #[cfg(madsim)]
    let bits = madsim::rand::random();
    #[cfg(not(madsim))]
    let bits = rand::random();
    bits
}

/// 64 random bits (a broker's incarnation).
pub fn random_u64() -> u64 {
    random_u128() as u64
}
