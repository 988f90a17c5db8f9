//! Membership and leases of brokers sharing one volume (DESIGN.md §6).
//!
//! Each broker writes one file, `__cluster/brokers/kaas-<id>.json`
//! ([`crate::layout::broker_file`]), holding a [`BrokerRecord`]: where clients
//! reach it, its incarnation (random per start) and a heartbeat counter that
//! grows with every write. Nobody else writes that file; the others only read
//! it. The record holds the lease *duration* the broker promises, never a lease
//! end time: an end time would be on the writer's clock, which no other broker
//! can read. Only durations measured on one broker's own monotonic clock are
//! compared, and only with other readings of that same clock.
//!
//! # Why an owner stops before anyone may claim its items
//!
//! Let `L` be the lease, `K` the clock-skew bound and `S` the volume staleness
//! bound ([`LeaseBounds`]). Owner `B` starts writing heartbeat `k` at real time
//! `T`; observer `O` first reads `k` at `F`, and `F >= T` because nothing can
//! be read before it is written.
//! - `B` acts only while its own clock says `now < T + L`
//!   ([`owner_may_act`]); `K` bounds how much the two clocks' rates may
//!   disagree over `O`'s whole wait, so measured on `O`'s clock `B` stops by
//!   `T + L + K`.
//! - A lease that lapsed is lost for good ([`renew_lease`]): a heartbeat that
//!   becomes durable only after the lease it meant to extend ran out does not
//!   revive it; `B` must win its items again at new epochs.
//! - `O` claims only when, at `C >= F + L + K + S` on its own clock, it still
//!   reads `k` ([`may_claim`]). Every write is visible within `S`, so no newer
//!   heartbeat became durable before `C - S >= T + L + K`: `B`'s lease ran out
//!   with no renewal in time, so by the rule above `B` stopped by `T + L + K`,
//!   at least `S` before `O` may claim.
//!
//! If a bound is violated (a clock drifts by more than `K`, the volume serves
//! data older than `S`, or the owner pauses between checking its lease and
//! writing), two brokers may both believe they own an item for a moment. The
//! claim itself stays safe: the successor must win epoch `E + 1` by exclusive
//! create, atomic on the volume, so each epoch has one owner; the old owner's
//! late writes land in files named with epoch `E`, which nobody reads once
//! `E + 1` exists. The newest epoch wins; the cost of a violated bound is a
//! stale owner's writes being refused or unread, never two logs merged.

use crate::deliberate_bugs::{planted, Bug};
use serde::{Deserialize, Serialize};
use std::fmt;

/// The format of a broker record; a reader refuses any other.
pub const BROKER_RECORD_VERSION: u32 = 1;

/// What a broker writes to its own registration file at every heartbeat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerRecord {
    pub version: u32,
    pub broker_id: i32,
    /// Where clients reach this broker (Metadata, FindCoordinator).
    pub host: String,
    pub port: u16,
    pub rack: Option<String>,
    /// Random at every start: tells a restarted broker apart from its
    /// previous life even if its counter starts over.
    pub incarnation: u64,
    /// Grows by one with every write within an incarnation: an observer
    /// sees the broker alive only by seeing this change.
    pub heartbeat: u64,
    /// The lease this broker promises to respect, on its own clock.
    pub lease_ms: i64,
    /// The broker is shutting down or draining: it is still alive, but
    /// nothing is placed on it any more ([`placement_candidates`]), so what
    /// it releases is taken by the others at once. Absent in records of
    /// brokers that never left (the field came after version 1).
    #[serde(default)]
    pub leaving: bool,
}

/// Why a broker record could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BrokerRecordError {
    /// Not JSON, or not a broker record.
    Parse(String),
    UnknownVersion(u32),
    /// The file of one broker holds another broker's record.
    WrongBroker {
        expected: i32,
        found: i32,
    },
    /// A record no broker would write: an empty host or a lease that is not
    /// positive.
    Invalid(&'static str),
}

impl fmt::Display for BrokerRecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BrokerRecordError::Parse(e) => write!(f, "not a broker record: {e}"),
            BrokerRecordError::UnknownVersion(v) => write!(f, "unknown broker record version {v}"),
            BrokerRecordError::WrongBroker { expected, found } => {
                write!(f, "the record of broker {expected} names broker {found}")
            }
            BrokerRecordError::Invalid(why) => write!(f, "invalid broker record: {why}"),
        }
    }
}

impl std::error::Error for BrokerRecordError {}

impl BrokerRecord {
    pub fn encode(&self) -> Result<Vec<u8>, serde_json::Error> {
        serde_json::to_vec_pretty(self)
    }

    /// Reads the record in broker `expected_broker`'s file, refusing one
    /// that is not what its name says.
    pub fn decode(bytes: &[u8], expected_broker: i32) -> Result<BrokerRecord, BrokerRecordError> {
        let r: BrokerRecord =
            serde_json::from_slice(bytes).map_err(|e| BrokerRecordError::Parse(e.to_string()))?;
        if r.version != BROKER_RECORD_VERSION {
            return Err(BrokerRecordError::UnknownVersion(r.version));
        }
        if r.broker_id != expected_broker {
            return Err(BrokerRecordError::WrongBroker {
                expected: expected_broker,
                found: r.broker_id,
            });
        }
        if r.host.is_empty() {
            return Err(BrokerRecordError::Invalid("empty host"));
        }
        if r.lease_ms <= 0 {
            return Err(BrokerRecordError::Invalid("lease is not positive"));
        }
        Ok(r)
    }

    /// Which life of the broker this record is, and how far it has counted.
    pub fn beat(&self) -> Beat {
        Beat {
            incarnation: self.incarnation,
            heartbeat: self.heartbeat,
        }
    }
}

/// The bounds every lease decision is made with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseBounds {
    /// How long a broker may act after starting a durable heartbeat write.
    pub lease_ms: i64,
    /// How much two brokers' monotonic clocks may disagree about the length
    /// of an observer's whole wait, lease + skew + staleness (rate drift,
    /// not offset: offsets are never compared).
    pub clock_skew_ms: i64,
    /// How long a durable write may stay invisible to another broker
    /// (NFS attribute and data caching).
    pub volume_staleness_ms: i64,
}

impl Default for LeaseBounds {
    /// A 10 s lease, as long as the reaper's period, so a dead broker's items
    /// move within one of its cycles; 1 s of skew is 10% of a lease, far above
    /// real clock drift; 3 s covers NFS close-to-open revalidation with the
    /// default minimum attribute cache time (acregmin = 3 s).
    fn default() -> Self {
        LeaseBounds {
            lease_ms: 10_000,
            clock_skew_ms: 1_000,
            volume_staleness_ms: 3_000,
        }
    }
}

impl LeaseBounds {
    /// How long an observer must see a broker's record unchanged before it
    /// treats it as gone, for a broker promising `lease_ms`: the longer of
    /// its promise and ours, since it stops only at its own lease end.
    fn silence_ms(&self, lease_ms: i64) -> i64 {
        let staleness = if planted(Bug::LeaseIgnoresStaleness) {
            0
        } else {
            self.volume_staleness_ms
        };
        lease_ms
            .max(self.lease_ms)
            .saturating_add(self.clock_skew_ms)
            .saturating_add(staleness)
    }
}

/// An owner acts only until the start of its last durably written heartbeat
/// plus the lease, on its own monotonic clock. The start, not the end, of
/// the write: an observer may see the write as soon as it begins. `None`
/// (no heartbeat durable yet in this life, or the lease lapsed) never acts.
pub fn owner_may_act(last_heartbeat_written_at: Option<i64>, now: i64, lease_ms: i64) -> bool {
    last_heartbeat_written_at.is_some_and(|at| now < at.saturating_add(lease_ms))
}

/// Whether an owner under a lease that holds (`lease_holds`) may act for
/// what it holds: only once it has let go of everything it held before its
/// last lapse (`lapses_let_go` has caught up with `lapses`). A late
/// heartbeat starts a new lease at once ([`renew_lease`]), but what the
/// broker held under the lapsed one may have been claimed by others
/// meanwhile; until its ownership round has closed those holdings, its
/// gates would admit requests for items a successor serves (found by the
/// simulator's ownership witness, seed 427: a gate admitted a partition at
/// epoch 3 for the moment between the lapsed heartbeat and the round,
/// while the successor served epoch 4).
pub fn may_act_after_lapses(lease_holds: bool, lapses: u64, lapses_let_go: u64) -> bool {
    lease_holds && lapses_let_go >= lapses
}

/// Whether a broker whose current lease began with a heartbeat durable at
/// `began_durable_at` (its own clock; the first of this life, or the first
/// after a lapse) may claim items at `now`: only from `S + K` after it.
///
/// Until then an observer may still read the heartbeat the broker's
/// previous life (or its lapsed lease) wrote last, count it gone, and claim
/// the next epoch of an item the broker is about to serve again: both would
/// act at once, and what the older epoch acknowledged past the newer one's
/// start would never be read (simulator seed 944, with file views 150 ms
/// stale). From `S` after the new heartbeat is durable every observer reads
/// it, and a new life or a higher count restarts its silence clock
/// ([`observe`]); `K` covers the two clocks' rates over that wait. A broker
/// that has read no other broker's record (`alone`) waits for nobody: an
/// observer that appears later watches it for a whole silence bound before
/// it may claim, and reads the new heartbeat long before that.
pub fn lease_settled(
    began_durable_at: Option<i64>,
    now: i64,
    bounds: &LeaseBounds,
    alone: bool,
) -> bool {
    lease_settles_at(began_durable_at, bounds).is_some_and(|at| alone || now >= at)
}

/// Whether a broker that has just started may serve its own newest claims
/// again at their epochs, without winning new ones: only in its first
/// ownership round (`first_round`) and only while it has read no other
/// broker's record (`alone`). Among others a restart wins a new epoch of
/// each item by exclusive create, as after a lapse. An observer whose last
/// read of the broker's file predates the restart may have decided to
/// claim the next epoch of the same item on that read and create it later
/// (its round decides every item before it applies any); a claim kept at
/// the old epoch does not meet that create, so both would serve. A claim
/// won by create does: of two creates of one epoch exactly one succeeds,
/// and the observer that loses reads the broker's new claim, a sign of
/// its life ([`saw_new_claim`]). So an ownership decision may be applied
/// any time after the read it rests on, and nothing assumes a create
/// follows closely on its read. A broker alone on its volume keeps its
/// epochs, so a single broker serves epoch 0 for ever.
pub fn resumes_its_claims(first_round: bool, alone: bool) -> bool {
    first_round && alone
}

/// When a lease that began with a heartbeat durable at `began_durable_at`
/// settles among other brokers ([`lease_settled`]): `S + K` after it.
pub fn lease_settles_at(began_durable_at: Option<i64>, bounds: &LeaseBounds) -> Option<i64> {
    let settle_ms = bounds
        .volume_staleness_ms
        .saturating_add(bounds.clock_skew_ms);
    began_durable_at.map(|at| at.saturating_add(settle_ms))
}

/// The lease after a heartbeat that started at `written_at` became durable
/// at `durable_at` (both on the owner's monotonic clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal {
    /// The lease never ran out: it now runs from `written_at`, and the
    /// broker keeps every item it holds.
    Continued { written_at: i64 },
    /// The lease had run out before this heartbeat was durable (or there
    /// was none): others may have claimed the broker's items. It acts from
    /// `written_at` again, but only for items it wins anew at a new epoch.
    Lapsed { written_at: i64 },
}

/// A lease runs out for good: a heartbeat durable only after the lease it
/// was meant to extend ended does not extend it, because an observer may
/// have seen the broker silent for the whole bound and claimed its items
/// meanwhile (see the module comment).
pub fn renew_lease(
    current: Option<i64>,
    written_at: i64,
    durable_at: i64,
    lease_ms: i64,
) -> Renewal {
    if owner_may_act(current, durable_at, lease_ms) {
        Renewal::Continued { written_at }
    } else {
        Renewal::Lapsed { written_at }
    }
}

/// Which life of a broker, and how far its heartbeat has counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Beat {
    pub incarnation: u64,
    pub heartbeat: u64,
}

/// What one broker knows of another's liveness, on the observer's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observed {
    /// The newest beat read, `None` until a record was read at all.
    pub beat: Option<Beat>,
    /// The lease the observed broker promised (0 until known).
    pub lease_ms: i64,
    /// When the observer first read `beat` (or started watching).
    pub first_seen_at: i64,
    /// When the observer last read the file: what it read then is all a
    /// claim may rely on.
    pub read_at: i64,
}

/// Folds one read of a broker's file into what is known of it. The silence
/// clock restarts only on progress: a higher heartbeat in the same life, or
/// another life. A lower heartbeat in the same life is a stale read and
/// changes nothing; a missing or unreadable file (`None`) changes nothing
/// either, so a broker that vanishes is gone after the same bound as one
/// that stops writing. Call it after every read that reached the volume
/// (content or "no such file"), never after an I/O error: a failed read shows
/// nothing about the broker.
pub fn observe(previous: Option<Observed>, read: Option<&BrokerRecord>, now: i64) -> Observed {
    let Some(prev) = previous else {
        return Observed {
            beat: read.map(BrokerRecord::beat),
            lease_ms: read.map_or(0, |r| r.lease_ms),
            first_seen_at: now,
            read_at: now,
        };
    };
    let unchanged = Observed {
        read_at: now.max(prev.read_at),
        ..prev
    };
    let Some(record) = read else {
        return unchanged;
    };
    let beat = record.beat();
    let progressed = match prev.beat {
        None => true,
        Some(old) => old.incarnation != beat.incarnation || beat.heartbeat > old.heartbeat,
    };
    if progressed {
        Observed {
            beat: Some(beat),
            lease_ms: record.lease_ms,
            first_seen_at: now,
            read_at: now,
        }
    } else {
        unchanged
    }
}

/// A broker is live while the observer has seen its record change within
/// lease + skew bound + staleness bound, on the observer's own clock.
pub fn is_live(observed: &Observed, now: i64, bounds: &LeaseBounds) -> bool {
    now.saturating_sub(observed.first_seen_at) < bounds.silence_ms(observed.lease_ms)
}

/// A claim this observer sees for the first time (a new epoch on an
/// item) is a sign of life of its holder: the holder won it by an
/// exclusive create at most the staleness bound before it could be seen,
/// and acts with it for a lease from then. So the holder's silence counts
/// from the sighting, as after a heartbeat it wrote, even when the
/// observer's last read of its file is older. Without this a broker that
/// restarted after a long outage and won new epochs on its items at once
/// could have them taken over an instant later by an observer whose last
/// read of its heartbeat predated the restart (simulator seed 682: the
/// restarted coordinator answered AddPartitionsToTxn from memory while its
/// successor held the slot).
pub fn saw_new_claim(observed: Observed, now: i64) -> Observed {
    Observed {
        first_seen_at: observed.first_seen_at.max(now),
        ..observed
    }
}

/// An item held by a broker may be claimed by another only once that
/// broker is not live *as of the observer's last read* of its file: the
/// safety argument (module comment) rests on what a read showed, so time
/// passing without a read proves nothing (the broker may have renewed
/// meanwhile). Read the file, [`observe`], then ask. The claim itself is
/// still an exclusive create of the next epoch, which only one claimant wins.
pub fn may_claim(owner: &Observed, bounds: &LeaseBounds) -> bool {
    !is_live(owner, owner.read_at, bounds)
}

/// The brokers items may be placed on: the live ones that are not leaving.
/// A leaving broker stays live (it still serves until it has handed over),
/// but placing nothing on it lets the others claim what it releases
/// without waiting out its lease.
pub fn placement_candidates<'a>(live: impl IntoIterator<Item = (i32, bool)> + 'a) -> Vec<i32> {
    live.into_iter()
        .filter(|(_, leaving)| !leaving)
        .map(|(id, _)| id)
        .collect()
}

/// The controller Metadata and DescribeCluster name: the lowest live broker
/// id, a choice every broker makes alike from the same live set.
pub fn controller_id(live: &[i32]) -> Option<i32> {
    live.iter().copied().min()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn record(heartbeat: u64) -> BrokerRecord {
        BrokerRecord {
            version: BROKER_RECORD_VERSION,
            broker_id: 2,
            host: "10.0.0.2".into(),
            port: 9092,
            rack: Some("a".into()),
            incarnation: 0xdead_beef_0000_0001,
            heartbeat,
            lease_ms: 10_000,
            leaving: false,
        }
    }

    #[test]
    fn a_leaving_broker_is_live_but_no_placement_candidate() {
        assert_eq!(
            placement_candidates([(1, false), (2, true), (3, false)]),
            vec![1, 3]
        );
        assert!(placement_candidates([(2, true)]).is_empty());
        // Records written before the field existed are not leaving.
        let old = br#"{"version":1,"broker_id":2,"host":"h","port":1,"rack":null,"incarnation":1,"heartbeat":1,"lease_ms":10}"#;
        assert!(!BrokerRecord::decode(old, 2).unwrap().leaving);
    }

    #[test]
    fn a_broker_record_round_trips_and_names_its_broker() {
        let r = record(7);
        let bytes = r.encode().unwrap();
        assert_eq!(BrokerRecord::decode(&bytes, 2), Ok(r.clone()));
        // u64 incarnations above 2^53 survive JSON exactly.
        let big = BrokerRecord {
            incarnation: u64::MAX,
            rack: None,
            ..r.clone()
        };
        assert_eq!(BrokerRecord::decode(&big.encode().unwrap(), 2), Ok(big));
        assert_eq!(
            BrokerRecord::decode(&bytes, 3),
            Err(BrokerRecordError::WrongBroker {
                expected: 3,
                found: 2
            })
        );
    }

    #[test]
    fn a_broker_record_of_another_version_or_invalid_is_refused() {
        let newer = BrokerRecord {
            version: BROKER_RECORD_VERSION + 1,
            ..record(1)
        };
        assert_eq!(
            BrokerRecord::decode(&newer.encode().unwrap(), 2),
            Err(BrokerRecordError::UnknownVersion(BROKER_RECORD_VERSION + 1))
        );
        let no_lease = BrokerRecord {
            lease_ms: 0,
            ..record(1)
        };
        assert!(matches!(
            BrokerRecord::decode(&no_lease.encode().unwrap(), 2),
            Err(BrokerRecordError::Invalid(_))
        ));
        let no_host = BrokerRecord {
            host: String::new(),
            ..record(1)
        };
        assert!(matches!(
            BrokerRecord::decode(&no_host.encode().unwrap(), 2),
            Err(BrokerRecordError::Invalid(_))
        ));
        assert!(matches!(
            BrokerRecord::decode(b"{\"version\":1}", 2),
            Err(BrokerRecordError::Parse(_))
        ));
        // A port out of range is a parse error, not a wrap-around.
        let text = String::from_utf8(record(1).encode().unwrap()).unwrap();
        let bad_port = text.replace("9092", "70000");
        assert!(matches!(
            BrokerRecord::decode(bad_port.as_bytes(), 2),
            Err(BrokerRecordError::Parse(_))
        ));
    }

    #[test]
    fn an_owner_acts_only_until_its_last_durable_heartbeat_start_plus_the_lease() {
        assert!(!owner_may_act(None, 0, 10_000));
        assert!(owner_may_act(Some(1_000), 1_000, 10_000));
        assert!(owner_may_act(Some(1_000), 10_999, 10_000));
        assert!(!owner_may_act(Some(1_000), 11_000, 10_000));
        // No overflow near the end of the clock's range.
        assert!(!owner_may_act(Some(i64::MAX - 1), i64::MAX, 10_000));
    }

    #[test]
    fn a_broker_whose_lease_lapsed_acts_for_nothing_until_it_let_go_of_what_it_held() {
        assert!(may_act_after_lapses(true, 0, 0));
        assert!(!may_act_after_lapses(false, 0, 0));
        // Renewed after a lapse, its old holdings not closed yet: nothing.
        assert!(!may_act_after_lapses(true, 1, 0));
        assert!(may_act_after_lapses(true, 1, 1));
        assert!(!may_act_after_lapses(true, 3, 2));
        assert!(!may_act_after_lapses(false, 3, 3));
    }

    #[test]
    fn a_new_lease_claims_nothing_until_every_observer_reads_it() {
        let bounds = LeaseBounds {
            lease_ms: 1_000,
            clock_skew_ms: 50,
            volume_staleness_ms: 300,
        };
        // No lease yet: nothing, alone or not.
        assert!(!lease_settled(None, 5_000, &bounds, false));
        assert!(!lease_settled(None, 5_000, &bounds, true));
        // Durable at 1_000: observers may read the older heartbeat until
        // 1_300, and the clocks may disagree by 50 over that.
        assert!(!lease_settled(Some(1_000), 1_000, &bounds, false));
        assert!(!lease_settled(Some(1_000), 1_349, &bounds, false));
        assert!(lease_settled(Some(1_000), 1_350, &bounds, false));
        // Nobody else's record read: nobody can be counting it gone.
        assert!(lease_settled(Some(1_000), 1_000, &bounds, true));
        // No overflow near the end of the clock's range.
        assert!(!lease_settled(
            Some(i64::MAX - 1),
            i64::MAX - 1,
            &bounds,
            false
        ));
    }

    #[test]
    fn a_restart_among_others_wins_new_epochs_rather_than_resuming() {
        // Alone on the volume, its first round serves its claims again.
        assert!(resumes_its_claims(true, true));
        // Among others it wins new epochs by create, from the first round.
        assert!(!resumes_its_claims(true, false));
        // After the first round (or a lapse) nothing is resumed.
        assert!(!resumes_its_claims(false, true));
        assert!(!resumes_its_claims(false, false));
    }

    #[test]
    fn a_lapsed_lease_is_not_revived_by_a_late_heartbeat() {
        // Durable while the lease from 1_000 still runs: it continues.
        assert_eq!(
            renew_lease(Some(1_000), 9_000, 10_999, 10_000),
            Renewal::Continued { written_at: 9_000 }
        );
        // Started in time but durable only at the lease end: lapsed, even
        // though 9_000 + lease would still be in the future.
        assert_eq!(
            renew_lease(Some(1_000), 9_000, 11_000, 10_000),
            Renewal::Lapsed { written_at: 9_000 }
        );
        // The first heartbeat of a life holds nothing yet.
        assert_eq!(
            renew_lease(None, 0, 5, 10_000),
            Renewal::Lapsed { written_at: 0 }
        );
    }

    #[test]
    fn an_observer_restarts_the_silence_clock_only_on_progress() {
        let first = observe(None, Some(&record(5)), 100);
        assert_eq!(first.first_seen_at, 100);
        assert_eq!(first.lease_ms, 10_000);
        // The same beat, a stale lower one, or no file: only the read
        // time moves.
        for (read, at) in [(Some(record(5)), 200), (Some(record(4)), 300), (None, 400)] {
            let o = observe(Some(first), read.as_ref(), at);
            assert_eq!(
                o,
                Observed {
                    read_at: at,
                    ..first
                }
            );
        }
        // A higher beat restarts it.
        let later = observe(Some(first), Some(&record(6)), 500);
        assert_eq!(later.first_seen_at, 500);
        assert_eq!(later.beat.map(|b| b.heartbeat), Some(6));
        // A new life restarts it even with a lower counter.
        let reborn = BrokerRecord {
            incarnation: 42,
            ..record(0)
        };
        let after_restart = observe(Some(later), Some(&reborn), 600);
        assert_eq!(after_restart.first_seen_at, 600);
        assert_eq!(after_restart.beat.map(|b| b.incarnation), Some(42));
        // Never read: watched from the first look.
        let unseen = observe(None, None, 700);
        assert_eq!(unseen.beat, None);
        assert_eq!(unseen.first_seen_at, 700);
    }

    #[test]
    fn a_broker_is_live_until_lease_plus_skew_plus_staleness_of_silence() {
        let bounds = LeaseBounds::default();
        let seen = observe(None, Some(&record(1)), 1_000);
        let bound = 10_000 + 1_000 + 3_000;
        assert!(is_live(&seen, 1_000, &bounds));
        assert!(is_live(&seen, 1_000 + bound - 1, &bounds));
        assert!(!is_live(&seen, 1_000 + bound, &bounds));
        // A broker promising a longer lease than ours is waited for longer.
        let long = BrokerRecord {
            lease_ms: 30_000,
            ..record(1)
        };
        let seen_long = observe(None, Some(&long), 1_000);
        assert!(is_live(&seen_long, 1_000 + bound, &bounds));
        assert!(!is_live(&seen_long, 1_000 + 34_000, &bounds));
        // One never read is given the same bound from the first look.
        let unseen = observe(None, None, 1_000);
        assert!(is_live(&unseen, 1_000 + bound - 1, &bounds));
        assert!(!is_live(&unseen, 1_000 + bound, &bounds));
    }

    #[test]
    fn a_claim_seen_for_the_first_time_is_a_sign_of_its_holders_life() {
        let bounds = LeaseBounds::default();
        // Silent since 0 as far as the heartbeat file shows: claimable at
        // 14,000 ...
        let silent = observe(
            Some(observe(None, Some(&record(1)), 0)),
            Some(&record(1)),
            14_000,
        );
        assert!(may_claim(&silent, &bounds));
        // ... unless a new claim of the holder was seen at 14,000: it
        // restarted and won an epoch after the file was last read.
        let sighted = saw_new_claim(silent, 14_000);
        assert!(!may_claim(&sighted, &bounds));
        // It counts as a heartbeat would: a full bound of silence after it.
        assert!(!may_claim(
            &observe(Some(sighted), Some(&record(1)), 27_999),
            &bounds
        ));
        assert!(may_claim(
            &observe(Some(sighted), Some(&record(1)), 28_000),
            &bounds
        ));
        // An older sighting moves nothing back.
        assert_eq!(saw_new_claim(sighted, 5_000), sighted);
    }

    #[test]
    fn an_item_may_be_claimed_only_once_its_owner_is_not_live() {
        let bounds = LeaseBounds::default();
        let seen = observe(None, Some(&record(1)), 0);
        assert!(!may_claim(
            &observe(Some(seen), Some(&record(1)), 13_999),
            &bounds
        ));
        assert!(may_claim(
            &observe(Some(seen), Some(&record(1)), 14_000),
            &bounds
        ));
        assert!(may_claim(&observe(Some(seen), None, 14_000), &bounds));
        // A heartbeat read just before the claim puts it off again.
        let refreshed = observe(Some(seen), Some(&record(2)), 13_999);
        assert!(!may_claim(
            &observe(Some(refreshed), Some(&record(2)), 14_000),
            &bounds
        ));
    }

    #[test]
    fn a_claim_rests_on_the_last_read_not_on_time_passing() {
        let bounds = LeaseBounds::default();
        let seen = observe(None, Some(&record(1)), 0);
        // Long after, but not read since: the broker may have renewed.
        assert!(!is_live(&seen, 60_000, &bounds));
        assert!(!may_claim(&seen, &bounds));
        // An older read folded in late does not move the read time back.
        let read = observe(Some(seen), None, 14_000);
        assert_eq!(observe(Some(read), None, 5_000).read_at, 14_000);
        assert!(may_claim(&read, &bounds));
    }

    #[test]
    fn the_controller_is_the_lowest_live_broker_id() {
        assert_eq!(controller_id(&[]), None);
        assert_eq!(controller_id(&[3, 1, 2]), Some(1));
        assert_eq!(controller_id(&[7]), Some(7));
    }

    /// The lease argument of the module comment, checked on a model: an
    /// owner with its own clock writes heartbeats (each taking a while to
    /// become durable, sometimes longer than a lease) and an observer with
    /// another clock polls the file, seeing each write at any moment from
    /// its start to the staleness bound after it is durable. The clocks have
    /// their own offsets (never compared) and rates (within what the skew
    /// bound covers). Real time is in microseconds.
    #[derive(Debug, Clone)]
    struct Scenario {
        /// Owner: (pause before the next write starts, write duration) in ms.
        writes: Vec<(i64, i64)>,
        /// When each write becomes visible after it starts, as a fraction
        /// (per mille) of its duration plus the staleness.
        visible: Vec<i64>,
        /// How long the volume really hides a durable write, in ms.
        staleness_ms: i64,
        /// Clock offsets in ms and rates in parts per thousand of real time.
        owner_clock: (i64, i64),
        observer_clock: (i64, i64),
        poll_ms: i64,
        /// How long after the read it decided on the observer's exclusive
        /// create lands, in ms (its round decides every item first).
        create_delay_ms: i64,
    }

    fn scenario() -> impl Strategy<Value = Scenario> {
        // Rates within 3% of real time: over the observer's wait of 14 s
        // the two clocks then disagree by less than the 1 s skew bound.
        // Each value is drawn at its extremes as often as in between, since
        // that is where a wrong bound shows.
        let rate = prop_oneof![Just(970i64), Just(1_030i64), 970i64..=1_030];
        let clock = (-1_000_000i64..1_000_000, rate);
        let ms = |max: i64| prop_oneof![1i64..100, 1..max];
        let visible = prop_oneof![Just(0i64), Just(1_000i64), 0i64..=1_000];
        (
            proptest::collection::vec((ms(12_000), ms(15_000)), 1..12),
            proptest::collection::vec(visible, 12),
            clock.clone(),
            clock,
            ms(3_000),
            prop_oneof![Just(0i64), ms(20_000)],
        )
            .prop_map(
                |(writes, visible, owner_clock, observer_clock, poll_ms, create_delay_ms)| {
                    Scenario {
                        writes,
                        visible,
                        staleness_ms: LeaseBounds::default().volume_staleness_ms,
                        owner_clock,
                        observer_clock,
                        poll_ms,
                        create_delay_ms,
                    }
                },
            )
    }

    /// How the owner gets its item back after its lease lapsed (a lapse,
    /// or a restart: both start a new lease).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Rewin {
        /// Its own claim served again at its epoch as soon as the new lease
        /// begins (what a restart did before simulator seed 944).
        ResumeAtOnce,
        /// The same, once the new lease has settled (`lease_settled`;
        /// before a restart among others won new epochs).
        ResumeSettled,
        /// The next epoch won by exclusive create once the new lease has
        /// settled (`resumes_its_claims`: a restart among others, a lapse).
        CreateSettled,
        /// The next epoch won by exclusive create at once.
        CreateAtOnce,
    }

    /// Plays a scenario and returns the first moment (real microseconds)
    /// the observer acts on its claim while the owner still acts on the
    /// item, if any. The observer claims the epoch after the one it read
    /// when it started watching, by an exclusive create `create_delay_ms`
    /// after the read it decided on; after each lapse the owner wins the
    /// item back as `rewin` says. An owner that resumes its epoch checks
    /// for a newer claim first (`ownership::win`), so only a resume before
    /// the observer's create acts; of two creates of one epoch the first
    /// wins and the other acts on nothing.
    fn first_overlap(s: &Scenario, bounds: &LeaseBounds, rewin: Rewin) -> Option<i64> {
        let lease = bounds.lease_ms;
        let read = |(offset, rate): (i64, i64), real_us: i64| offset + real_us * rate / 1_000_000;
        // The first real instant at which a clock reads `ms` or more.
        let real_at =
            |(offset, rate): (i64, i64), ms: i64| ((ms - offset) * 1_000_000 + rate - 1) / rate;
        // Owner: each write starts, becomes durable, and extends or lapses
        // the lease; collect the real intervals it may act in.
        let mut real = 0i64;
        let mut lease_from: Option<i64> = None;
        // (won at, epoch, acting from, acting until), real microseconds.
        let mut acting: Vec<(i64, i32, i64, i64)> = Vec::new();
        // Every epoch the owner won by create, with when.
        let mut created: Vec<(i64, i32)> = Vec::new();
        let (mut won_at, mut epoch) = (0i64, 0i32);
        let mut visible: Vec<(i64, u64)> = Vec::new();
        for (k, &(pause, took)) in s.writes.iter().enumerate() {
            real += pause * 1_000;
            let start = real;
            real += took * 1_000;
            let durable = real;
            let span = took + s.staleness_ms;
            visible.push((start + span * s.visible[k % s.visible.len()], k as u64));
            let written_at = read(s.owner_clock, start);
            match renew_lease(lease_from, written_at, read(s.owner_clock, durable), lease) {
                Renewal::Continued { written_at } => lease_from = Some(written_at),
                // Its first heartbeat starts its lease, and it wins the item
                // right then (nobody watches it yet).
                Renewal::Lapsed { written_at } if k == 0 => {
                    lease_from = Some(written_at);
                    won_at = durable;
                }
                // Later, what it held is lost: it wins the item back.
                Renewal::Lapsed { written_at } => {
                    lease_from = Some(written_at);
                    let durable_at = read(s.owner_clock, durable);
                    let settles = matches!(rewin, Rewin::ResumeSettled | Rewin::CreateSettled);
                    let settled = lease_settles_at(Some(durable_at), bounds)
                        .filter(|_| settles)
                        .unwrap_or(durable_at);
                    won_at = real_at(s.owner_clock, settled).max(durable);
                    if matches!(rewin, Rewin::CreateSettled | Rewin::CreateAtOnce) {
                        epoch += 1;
                        created.push((won_at, epoch));
                    }
                }
            }
            let until = real_at(s.owner_clock, written_at + lease);
            assert!(!owner_may_act(
                lease_from,
                read(s.owner_clock, until),
                lease
            ));
            let from = durable.max(won_at);
            if until > from {
                acting.push((won_at, epoch, from, until));
            }
        }
        // The observer learns the item is the owner's from its epoch file,
        // written once the owner's first heartbeat is durable; from then on
        // it polls, reading the newest heartbeat visible, until it may claim.
        let mut obs: Option<Observed> = None;
        let mut t = (s.writes[0].0 + s.writes[0].1) * 1_000;
        while t < real + 60_000_000 {
            let newest = visible
                .iter()
                .filter(|(at, _)| *at <= t)
                .map(|&(_, k)| k)
                .max();
            let now = read(s.observer_clock, t);
            let o = observe(obs, newest.map(record).as_ref(), now);
            obs = Some(o);
            if may_claim(&o, bounds) {
                // It creates epoch 1: lost if the owner created it first.
                let create = t + s.create_delay_ms * 1_000;
                if created.iter().any(|&(at, e)| e == 1 && at < create) {
                    return None;
                }
                // Won: the owner's epoch-0 acting that began before the
                // create and lasts past it overlaps; one that would begin
                // after it finds the newer claim and follows.
                return acting
                    .iter()
                    .any(|&(won, e, _, until)| e == 0 && won < create && until > create)
                    .then_some(create);
            }
            t += s.poll_ms * 1_000;
        }
        None
    }

    /// The tightest case the bounds allow: the owner's clock 3% slow, the
    /// observer's 3% fast; the observer reads heartbeat 0 as it starts, and
    /// heartbeat 1, durable just inside the lease, only after the full
    /// staleness.
    fn tightest() -> Scenario {
        Scenario {
            writes: vec![(0, 1), (9_700, 100)],
            visible: vec![0, 1_000],
            staleness_ms: 3_000,
            owner_clock: (5_000, 970),
            observer_clock: (-7_000, 1_030),
            poll_ms: 10,
            create_delay_ms: 0,
        }
    }

    #[test]
    fn each_lease_bound_is_needed() {
        let bounds = LeaseBounds::default();
        assert_eq!(
            first_overlap(&tightest(), &bounds, Rewin::CreateSettled),
            None
        );
        let no_skew = LeaseBounds {
            clock_skew_ms: 0,
            ..bounds
        };
        assert!(first_overlap(&tightest(), &no_skew, Rewin::CreateSettled).is_some());
        let no_staleness = LeaseBounds {
            volume_staleness_ms: 0,
            ..bounds
        };
        assert!(first_overlap(&tightest(), &no_staleness, Rewin::CreateSettled).is_some());
    }

    /// The owner's lease lapses (its second heartbeat starts 12 s after
    /// the first) and the observer reads that heartbeat only after the full
    /// staleness, counts the owner gone and claims the next epoch.
    fn lapse(create_delay_ms: i64) -> Scenario {
        Scenario {
            writes: vec![(0, 1), (12_000, 1), (3_000, 1), (3_000, 1)],
            visible: vec![0, 1_000],
            staleness_ms: 3_000,
            owner_clock: (0, 1_000),
            observer_clock: (0, 1_000),
            poll_ms: 10,
            create_delay_ms,
        }
    }

    /// Serving its epoch again as soon as the new lease begins, the owner
    /// acts while the observer, still reading the old heartbeat, claims;
    /// waiting for the lease to settle, it finds the observer's claim
    /// instead, as long as the observer creates right after its read.
    #[test]
    fn a_lapsed_owner_wins_its_items_again_only_once_its_lease_has_settled() {
        let bounds = LeaseBounds::default();
        assert!(first_overlap(&lapse(0), &bounds, Rewin::ResumeAtOnce).is_some());
        assert_eq!(
            first_overlap(&lapse(0), &bounds, Rewin::ResumeSettled),
            None
        );
    }

    /// An observer's create that lands a while after the read it decided on
    /// (4 s here) meets a resume at the old epoch too late, settled or not:
    /// both act. Won by create, the epoch goes to one of them.
    #[test]
    fn a_restart_among_others_wins_new_epochs_so_a_late_create_cannot_overlap_it() {
        let bounds = LeaseBounds::default();
        assert!(first_overlap(&lapse(4_000), &bounds, Rewin::ResumeSettled).is_some());
        assert_eq!(
            first_overlap(&lapse(4_000), &bounds, Rewin::CreateSettled),
            None
        );
        assert_eq!(
            first_overlap(&lapse(4_000), &bounds, Rewin::CreateAtOnce),
            None
        );
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic_the_broker_record_decoder(
            bytes in proptest::collection::vec(any::<u8>(), 0..300),
            edit in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..8),
        ) {
            let _ = BrokerRecord::decode(&bytes, 2);
            // Also a valid record with bytes overwritten, which reaches the
            // checks after parsing far more often than noise does.
            let mut near = record(3).encode().unwrap();
            for (i, b) in edit {
                let n = near.len();
                near[i % n] = b;
            }
            let _ = BrokerRecord::decode(&near, 2);
        }

        #[test]
        fn an_owner_stops_before_an_observer_may_claim(s in scenario()) {
            prop_assert_eq!(first_overlap(&s, &LeaseBounds::default(), Rewin::CreateSettled), None);
        }
    }
}
