//! This broker's membership in the cluster on the shared volume: its own
//! heartbeat and lease, and what it has read of the others'.
//!
//! The state here is pure bookkeeping around the rules of
//! `kaas_core::cluster::membership`; the volume reads and writes are in
//! [`super::heartbeat`], which feeds it. All times are readings of this
//! broker's monotonic clock (`Clock::monotonic_ms`), never wall time.

use kaas_core::cluster::membership::{
    self as rules, BrokerRecord, LeaseBounds, Observed, Renewal, BROKER_RECORD_VERSION,
};
use kaas_core::cluster::{Claim, RELEASED};
use std::collections::BTreeMap;
use std::sync::Mutex;

/// A broker clients may be sent to: listed in Metadata and DescribeCluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveBroker {
    pub id: i32,
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
    /// Handing over before it stops: nothing is placed on it.
    pub leaving: bool,
}

impl LiveBroker {
    fn of(record: &BrokerRecord) -> LiveBroker {
        LiveBroker {
            id: record.broker_id,
            host: record.host.clone(),
            port: i32::from(record.port),
            rack: record.rack.clone(),
            leaving: record.leaving,
        }
    }
}

/// Another broker, as read from its file.
#[derive(Debug, Clone)]
struct Peer {
    observed: Observed,
    /// The newest record read (where clients reach it), `None` until one
    /// was read.
    record: Option<BrokerRecord>,
}

#[derive(Debug)]
struct Own {
    /// The record of the next heartbeat, its counter at the last one written.
    record: BrokerRecord,
    /// Write start of the last heartbeat that became durable while the
    /// lease held (`renew_lease`); `None` before the first.
    lease_from: Option<i64>,
    /// When the heartbeat that began the current lease (the first of this
    /// life, or the first after a lapse) became durable: claims wait for
    /// it to be visible to everyone (`lease_settled`).
    lease_began: Option<i64>,
    /// How many times the lease ran out before a heartbeat renewed it.
    lapses: u64,
    /// Up to which lapse the broker has let go of what it held
    /// ([`Membership::let_go_after_lapses`]); it acts for nothing while
    /// this lags `lapses`.
    lapses_let_go: u64,
    /// This life has not yet made an ownership round with a settled lease
    /// (nor lapsed): its own newest claims, left by its previous life, may
    /// be served again at their epoch in that round if it is alone
    /// ([`Membership::resuming`]).
    first_round: bool,
}

/// This broker's view of the cluster's membership.
#[derive(Debug)]
pub struct Membership {
    bounds: LeaseBounds,
    own: Mutex<Own>,
    peers: Mutex<BTreeMap<i32, Peer>>,
    /// The newest claim seen on each item (by `ownership::item_key`): a
    /// claim not seen before is a sign of its holder's life.
    claims_seen: Mutex<BTreeMap<String, Claim>>,
}

impl Membership {
    /// The membership of a broker that has not written a heartbeat yet.
    /// `incarnation` must differ at every start (it is random).
    pub fn new(
        broker_id: i32,
        host: &str,
        port: u16,
        rack: Option<String>,
        bounds: LeaseBounds,
        incarnation: u64,
    ) -> Membership {
        Membership {
            bounds,
            own: Mutex::new(Own {
                record: BrokerRecord {
                    version: BROKER_RECORD_VERSION,
                    broker_id,
                    host: host.to_string(),
                    port,
                    rack,
                    incarnation,
                    heartbeat: 0,
                    lease_ms: bounds.lease_ms,
                    leaving: false,
                },
                lease_from: None,
                lease_began: None,
                lapses: 0,
                lapses_let_go: 0,
                first_round: true,
            }),
            peers: Mutex::new(BTreeMap::new()),
            claims_seen: Mutex::new(BTreeMap::new()),
        }
    }

    fn own(&self) -> std::sync::MutexGuard<'_, Own> {
        self.own.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn peers(&self) -> std::sync::MutexGuard<'_, BTreeMap<i32, Peer>> {
        self.peers.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn bounds(&self) -> LeaseBounds {
        self.bounds
    }

    pub fn broker_id(&self) -> i32 {
        self.own().record.broker_id
    }

    /// The record to write now: the counter moves on with every attempt,
    /// written or not, so no two writes of one life carry the same count.
    pub fn next_heartbeat(&self) -> BrokerRecord {
        let mut own = self.own();
        own.record.heartbeat = own.record.heartbeat.saturating_add(1);
        own.record.clone()
    }

    /// A heartbeat whose write started at `written_at` is durable at
    /// `durable_at`: the lease runs from its start, unless it had already
    /// run out (then it is a new lease, and the count of lapses grows).
    pub fn heartbeat_durable(&self, written_at: i64, durable_at: i64) -> Renewal {
        let mut own = self.own();
        let renewal =
            rules::renew_lease(own.lease_from, written_at, durable_at, self.bounds.lease_ms);
        if matches!(renewal, Renewal::Lapsed { .. }) {
            if own.lease_from.is_some() {
                own.lapses += 1;
            }
            own.lease_began = Some(durable_at);
        }
        own.lease_from = Some(written_at);
        renewal
    }

    /// Whether this broker's lease holds at `now`, and it has let go of
    /// what it held before its last lapse: it may act for what it owns only
    /// then.
    pub fn may_act(&self, now: i64) -> bool {
        let own = self.own();
        let holds = rules::owner_may_act(own.lease_from, now, self.bounds.lease_ms);
        rules::may_act_after_lapses(holds, own.lapses, own.lapses_let_go)
    }

    /// The count of lapses, if the last of them has not been let go of
    /// yet ([`let_go_after_lapses`](Self::let_go_after_lapses)): the
    /// ownership round's cue to close everything it held.
    pub fn lapses_to_let_go(&self) -> Option<u64> {
        let own = self.own();
        (own.lapses_let_go < own.lapses).then_some(own.lapses)
    }

    /// Everything held before lapse number `lapses` has been let go of
    /// (the ownership round closed it): the broker may act again for what
    /// it holds, that is, for what it won since.
    pub fn let_go_after_lapses(&self, lapses: u64) {
        let mut own = self.own();
        own.lapses_let_go = own.lapses_let_go.max(lapses);
    }

    /// Whether this broker may claim items at `now`: its current lease is
    /// visible to every other broker (`lease_settled`), or it has read no
    /// other broker's record.
    pub fn settled(&self, now: i64) -> bool {
        // One lock at a time: `alone` takes `own` too.
        let alone = self.alone();
        let began = self.own().lease_began;
        rules::lease_settled(began, now, &self.bounds, alone)
    }

    /// It has read no other broker's record (nor seen another's file).
    fn alone(&self) -> bool {
        let me = self.broker_id();
        self.peers().keys().all(|&id| id == me)
    }

    /// How long from `now` until [`settled`](Self::settled) turns true
    /// (on this broker's clock), if it is false now and will.
    pub fn settles_in_ms(&self, now: i64) -> Option<u64> {
        if self.settled(now) {
            return None;
        }
        let at = rules::lease_settles_at(self.own().lease_began, &self.bounds)?;
        u64::try_from(at.saturating_sub(now)).ok()
    }

    /// Whether this life may still serve its own newest claims at their
    /// epoch (`next_step`'s `just_started`): from its start until its
    /// first ownership round with a settled lease, or its first lapse, and
    /// only while it is alone on the volume (`resumes_its_claims`): among
    /// others a restart wins new epochs.
    pub fn resuming(&self) -> bool {
        let first_round = self.own().first_round;
        rules::resumes_its_claims(first_round, self.alone())
    }

    /// The first settled round is done (or the lease lapsed): from now on
    /// an item not served here is won at a new epoch.
    pub fn resumed(&self) {
        self.own().first_round = false;
    }

    /// How many times this broker's lease ran out since it started.
    pub fn lapses(&self) -> u64 {
        self.own().lapses
    }

    /// Folds a read of broker `id`'s file into what is known of it: `read`
    /// is its record, or `None` when the file was missing or unreadable.
    /// Call only after a read that reached the volume.
    pub fn observe(&self, id: i32, read: Option<&BrokerRecord>, now: i64) {
        let mut peers = self.peers();
        let previous = peers.get(&id).map(|p| p.observed);
        let observed = rules::observe(previous, read, now);
        let entry = peers.entry(id).or_insert(Peer {
            observed,
            record: None,
        });
        entry.observed = observed;
        if let Some(r) = read {
            if observed.beat == Some(r.beat()) {
                entry.record = Some(r.clone());
            }
        }
    }

    /// The brokers known to exist: every peer ever read, alive or not.
    pub fn known_peers(&self) -> Vec<i32> {
        self.peers().keys().copied().collect()
    }

    /// The live brokers at `now`, by id: this one, and every other whose
    /// record changed within the silence bound.
    pub fn live(&self, now: i64) -> Vec<LiveBroker> {
        let mut live = vec![LiveBroker::of(&self.own().record)];
        let self_id = live[0].id;
        for (id, peer) in self.peers().iter() {
            if *id == self_id || !rules::is_live(&peer.observed, now, &self.bounds) {
                continue;
            }
            if let Some(record) = &peer.record {
                live.push(LiveBroker::of(record));
            }
        }
        live.sort_by_key(|b| b.id);
        live
    }

    /// The ids of [`live`](Self::live).
    pub fn live_ids(&self, now: i64) -> Vec<i32> {
        self.live(now).iter().map(|b| b.id).collect()
    }

    /// The live brokers items may be placed on: all but the leaving ones.
    pub fn placement_ids(&self, now: i64) -> Vec<i32> {
        rules::placement_candidates(self.live(now).iter().map(|b| (b.id, b.leaving)))
    }

    /// Announces that this broker is leaving: every heartbeat from now on
    /// says so, and its own placement leaves it out, so its next ownership
    /// round releases what others can take (graceful shutdown, drain).
    pub fn set_leaving(&self) {
        self.own().record.leaving = true;
    }

    pub fn is_leaving(&self) -> bool {
        self.own().record.leaving
    }

    /// The controller Metadata and DescribeCluster name.
    pub fn controller_id(&self, now: i64) -> i32 {
        let live = self.live_ids(now);
        rules::controller_id(&live).unwrap_or_else(|| self.broker_id())
    }

    /// Starts watching broker `id` (named by a claim, say) if it is not
    /// known yet: the heartbeat round reads its file from now on, and its
    /// silence counts from `now`, since nothing was read of it before.
    pub fn watch(&self, id: i32, now: i64) {
        if id == self.broker_id() {
            return;
        }
        self.peers().entry(id).or_insert(Peer {
            observed: rules::observe(None, None, now),
            record: None,
        });
    }

    /// Notes `claim` as the newest on `item`. One not seen there before
    /// (another broker's new epoch) shows its holder alive now
    /// ([`rules::saw_new_claim`]): its silence counts from here.
    pub fn saw_claim(&self, item: String, claim: Claim, now: i64) {
        let before = self
            .claims_seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(item, claim);
        if before == Some(claim)
            || claim.broker_id == RELEASED
            || claim.broker_id == self.broker_id()
        {
            return;
        }
        if let Some(peer) = self.peers().get_mut(&claim.broker_id) {
            peer.observed = rules::saw_new_claim(peer.observed, now);
        }
    }

    /// Whether broker `id`'s items may be claimed by this broker: it is not
    /// live as of the last read of its file. A broker not watched yet may
    /// not be claimed from: nothing was read of it.
    pub fn may_claim_from(&self, id: i32) -> bool {
        self.peers()
            .get(&id)
            .is_some_and(|peer| rules::may_claim(&peer.observed, &self.bounds))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUNDS: LeaseBounds = LeaseBounds {
        lease_ms: 1_000,
        clock_skew_ms: 100,
        volume_staleness_ms: 300,
    };

    fn membership(id: i32) -> Membership {
        Membership::new(id, "h", 9092, None, BOUNDS, 7)
    }

    fn record(id: i32, heartbeat: u64) -> BrokerRecord {
        BrokerRecord {
            version: BROKER_RECORD_VERSION,
            broker_id: id,
            host: format!("b{id}"),
            port: 9000 + id as u16,
            rack: Some("r".into()),
            incarnation: 1,
            heartbeat,
            lease_ms: BOUNDS.lease_ms,
            leaving: false,
        }
    }

    #[test]
    fn a_broker_acts_only_within_the_lease_of_its_last_durable_heartbeat() {
        let m = membership(1);
        assert!(!m.may_act(0), "no heartbeat yet");
        assert_eq!(m.next_heartbeat().heartbeat, 1);
        assert_eq!(
            m.heartbeat_durable(10, 15),
            Renewal::Lapsed { written_at: 10 }
        );
        assert!(m.may_act(1_009));
        assert!(!m.may_act(1_010));
        assert_eq!(m.lapses(), 0, "the first lease is not a lapse");
        // A heartbeat durable after the lease ran out starts a new one.
        m.next_heartbeat();
        assert_eq!(
            m.heartbeat_durable(1_005, 1_011),
            Renewal::Lapsed { written_at: 1_005 }
        );
        assert_eq!(m.lapses(), 1);
        // Renewed, but nothing is acted for until the ownership round has
        // let go of what the lapsed lease held.
        assert!(!m.may_act(1_100));
        assert_eq!(m.lapses_to_let_go(), Some(1));
        m.let_go_after_lapses(1);
        assert_eq!(m.lapses_to_let_go(), None);
        assert!(m.may_act(1_100));
        m.next_heartbeat();
        assert_eq!(
            m.heartbeat_durable(1_500, 1_600),
            Renewal::Continued { written_at: 1_500 }
        );
        assert!(m.may_act(1_600));
    }

    #[test]
    fn the_live_set_holds_this_broker_and_peers_heard_from_within_the_bound() {
        let m = membership(2);
        m.observe(1, Some(&record(1, 1)), 0);
        m.observe(3, Some(&record(3, 1)), 0);
        assert_eq!(m.live_ids(0), vec![1, 2, 3]);
        assert_eq!(m.controller_id(0), 1);
        let b1 = &m.live(0)[0];
        assert_eq!((b1.host.as_str(), b1.port), ("b1", 9001));
        // Broker 3 keeps beating, broker 1 falls silent.
        m.observe(1, Some(&record(1, 1)), 1_000);
        m.observe(3, Some(&record(3, 2)), 1_000);
        assert_eq!(m.live_ids(1_399), vec![1, 2, 3]);
        assert_eq!(m.live_ids(1_400), vec![2, 3]);
        assert_eq!(m.controller_id(1_400), 2);
        assert!(!m.may_claim_from(1), "not read silent for the bound yet");
        m.observe(1, None, 1_400);
        assert!(m.may_claim_from(1));
        assert!(!m.may_claim_from(3));
    }

    #[test]
    fn a_file_read_but_never_valid_lists_no_broker() {
        let m = membership(0);
        m.observe(5, None, 0);
        assert_eq!(m.live_ids(0), vec![0]);
        assert_eq!(m.known_peers(), vec![5]);
        assert!(!m.may_claim_from(5), "silent for less than the bound");
        m.observe(5, None, 1_400);
        assert!(m.may_claim_from(5));
    }

    #[test]
    fn a_broker_named_only_by_a_claim_is_claimed_from_after_the_bound_of_watching() {
        let m = membership(0);
        assert!(!m.may_claim_from(9), "never read");
        m.watch(9, 100);
        m.observe(9, None, 1_499);
        assert!(!m.may_claim_from(9));
        m.observe(9, None, 1_500);
        assert!(m.may_claim_from(9));
        m.watch(0, 0);
        assert_eq!(m.known_peers(), vec![9], "a broker never watches itself");
    }

    /// Seed 682: a broker whose heartbeat this one last read before its
    /// restart wins a new epoch; seeing that claim restarts its silence,
    /// and the same claim seen again (or a released one) does not.
    #[test]
    fn a_new_claim_puts_off_a_takeover_from_its_holder() {
        let m = membership(1);
        m.observe(5, Some(&record(5, 1)), 0);
        let silence = BOUNDS.lease_ms + BOUNDS.clock_skew_ms + BOUNDS.volume_staleness_ms;
        m.observe(5, Some(&record(5, 1)), silence);
        assert!(m.may_claim_from(5), "silent for the whole bound");
        let claim = Claim {
            broker_id: 5,
            epoch: 2,
        };
        m.saw_claim("t:41".into(), claim, silence);
        assert!(!m.may_claim_from(5), "its new claim shows it alive");
        m.observe(5, Some(&record(5, 1)), 2 * silence);
        assert!(m.may_claim_from(5), "silent for a bound since the claim");
        m.saw_claim("t:41".into(), claim, 2 * silence);
        m.saw_claim(
            "t:40".into(),
            Claim {
                broker_id: RELEASED,
                epoch: 3,
            },
            2 * silence,
        );
        assert!(
            m.may_claim_from(5),
            "a claim seen before, or a released one, shows nothing"
        );
    }
}
