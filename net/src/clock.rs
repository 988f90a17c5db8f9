//! The one place the driver reads time and entropy.
//!
//! Core logic takes `now_ms` and randomness as arguments; the driver gets
//! them here. Under madsim the clock is intercepted and becomes simulated
//! time, and entropy comes from madsim's seeded rng, so a simulation replays
//! exactly.

use kaas_core::protocol::Uuid;

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

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
