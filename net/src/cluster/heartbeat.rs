//! The heartbeat round: write this broker's record, read everyone else's.
//!
//! One round is blocking volume work (run it on the IO runner). It reads the
//! clock itself, around the write, because the lease runs from the moment the
//! write *started* and is renewed only if the write became durable in time
//! (`kaas_core::cluster::membership::renew_lease`).

use super::membership::Membership;
use crate::env::Clock;
use crate::volume::Volume;
use kaas_core::cluster::membership::{BrokerRecord, Renewal};
use kaas_core::layout::{broker_file, broker_of_file, BROKERS_DIR};
use std::collections::BTreeSet;
use std::io;

/// Writes this broker's next heartbeat durably and folds it into its lease.
/// An error leaves the lease as it was: it runs out unless a later write
/// succeeds in time.
pub fn write_own(
    volume: &dyn Volume,
    clock: &dyn Clock,
    membership: &Membership,
) -> io::Result<Renewal> {
    let record = membership.next_heartbeat();
    let bytes = record.encode().map_err(io::Error::other)?;
    let started = clock.monotonic_ms();
    volume.write_atomic(&broker_file(record.broker_id), &bytes)?;
    let durable = clock.monotonic_ms();
    Ok(membership.heartbeat_durable(started, durable))
}

/// Reads the record of every other broker with a file, and of every one
/// watched, into `membership`. A read that fails shows nothing about its
/// broker and is skipped; a file that is missing, or holds something that
/// is not that broker's record, counts as no news.
pub fn read_peers(
    volume: &dyn Volume,
    clock: &dyn Clock,
    membership: &Membership,
) -> io::Result<()> {
    let self_id = membership.broker_id();
    let mut ids: BTreeSet<i32> = volume
        .list(BROKERS_DIR)?
        .iter()
        .filter_map(|name| broker_of_file(name))
        .collect();
    ids.extend(membership.known_peers());
    ids.remove(&self_id);
    for id in ids {
        let bytes = match volume.read(&broker_file(id)) {
            Ok(bytes) => bytes,
            Err(e) => {
                tracing::warn!(broker = id, error = %e, "cannot read a broker's record");
                continue;
            }
        };
        let record = bytes.and_then(|b| match BrokerRecord::decode(&b, id) {
            Ok(r) => Some(r),
            Err(e) => {
                tracing::warn!(broker = id, error = %e, "ignoring a broker's record");
                None
            }
        });
        membership.observe(id, record.as_ref(), clock.monotonic_ms());
    }
    Ok(())
}

/// One whole round: the own heartbeat first (so the lease is fresh before
/// anything is decided from the reads), then the others.
pub fn round(volume: &dyn Volume, clock: &dyn Clock, membership: &Membership) -> io::Result<()> {
    let renewal = write_own(volume, clock, membership);
    match &renewal {
        Ok(Renewal::Lapsed { .. }) if membership.lapses() > 0 => {
            tracing::warn!(
                lapses = membership.lapses(),
                "the lease ran out before a heartbeat renewed it"
            )
        }
        Err(e) => tracing::warn!(error = %e, "cannot write the heartbeat"),
        _ => {}
    }
    let read = read_peers(volume, clock, membership);
    renewal.and(read)
}

#[cfg(test)]
#[cfg(not(madsim))]
mod tests {
    use super::*;
    use crate::env::SystemClock;
    use crate::volume::LocalVolume;
    use kaas_core::cluster::membership::LeaseBounds;

    const BOUNDS: LeaseBounds = LeaseBounds {
        lease_ms: 60_000,
        clock_skew_ms: 1_000,
        volume_staleness_ms: 1_000,
    };

    fn member(id: i32, incarnation: u64) -> Membership {
        Membership::new(id, "127.0.0.1", 9092 + id as u16, None, BOUNDS, incarnation)
    }

    #[test]
    fn brokers_on_one_volume_see_each_other_and_ignore_stray_files() {
        let dir = tempfile::tempdir().unwrap();
        let v = LocalVolume::new(dir.path()).unwrap();
        v.create_dir_all(BROKERS_DIR).unwrap();
        v.write_atomic(&format!("{BROKERS_DIR}/kaas-5.json"), b"not json")
            .unwrap();
        v.write_atomic(&format!("{BROKERS_DIR}/notes.txt"), b"x")
            .unwrap();
        let clock = SystemClock::new();
        let (a, b) = (member(1, 11), member(2, 22));
        round(&v, &clock, &a).unwrap();
        round(&v, &clock, &b).unwrap();
        round(&v, &clock, &a).unwrap();
        let now = clock.monotonic_ms();
        assert_eq!(a.live_ids(now), vec![1, 2]);
        assert_eq!(b.live_ids(now), vec![1, 2]);
        assert_eq!(a.live(now)[1].port, 9094);
        assert!(a.may_act(now) && b.may_act(now));
        assert_eq!(
            a.known_peers(),
            vec![2, 5],
            "the bad file is watched, not listed"
        );
    }

    #[test]
    fn a_heartbeat_counts_up_within_one_life() {
        let dir = tempfile::tempdir().unwrap();
        let v = LocalVolume::new(dir.path()).unwrap();
        v.create_dir_all(BROKERS_DIR).unwrap();
        let clock = SystemClock::new();
        let a = member(3, 33);
        round(&v, &clock, &a).unwrap();
        round(&v, &clock, &a).unwrap();
        let bytes = v.read(&broker_file(3)).unwrap().unwrap();
        let r = BrokerRecord::decode(&bytes, 3).unwrap();
        assert_eq!((r.incarnation, r.heartbeat), (33, 2));
    }
}
