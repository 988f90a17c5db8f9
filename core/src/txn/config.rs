//! The transaction coordinator's settings (Kafka's `transaction.*` and
//! `transactional.id.*` broker configs, same defaults).

use super::rules::{DEFAULT_ID_EXPIRATION_MS, DEFAULT_MAX_TIMEOUT_MS};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnConfig {
    /// `transaction.max.timeout.ms`: the longest timeout a producer may ask
    /// for.
    pub max_timeout_ms: i32,
    /// `transactional.id.expiration.ms`: an idle id is forgotten after this.
    pub id_expiration_ms: i64,
    /// `transaction.abort.timed.out.transaction.cleanup.interval.ms`: how
    /// often the reaper looks for transactions past their timeout, and the
    /// marker reconcile finishes prepared ones.
    pub abort_timed_out_interval_ms: i64,
    /// `transaction.remove.expired.transaction.cleanup.interval.ms`: how
    /// often expired ids are removed.
    pub remove_expired_interval_ms: i64,
}

impl Default for TxnConfig {
    fn default() -> Self {
        TxnConfig {
            max_timeout_ms: DEFAULT_MAX_TIMEOUT_MS,
            id_expiration_ms: DEFAULT_ID_EXPIRATION_MS,
            abort_timed_out_interval_ms: 10_000,
            remove_expired_interval_ms: 3_600_000,
        }
    }
}
