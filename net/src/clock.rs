//! The one place the driver reads time and entropy.
//!
//! Core logic takes `now_ms` and randomness as arguments; the driver gets
//! them here. Under madsim both calls are intercepted and become simulated
//! time and seeded randomness, so a simulation replays exactly.

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
        let id = Uuid::from_u128(rand::random::<u128>());
        if id.as_u128() > 1 {
            return id;
        }
    }
}
