//! Where a client of the group, transactional and exactly-once workloads
//! sends each request, and its connections.
//!
//! With one broker everything goes to it over one connection, exactly as
//! these actors did before several brokers existed: nothing is looked up
//! and nothing is drawn from the simulation's rng, so single-broker seeds
//! keep their fingerprints. With several, a client behaves as Kafka's do:
//!
//! - Coordinator requests (InitProducerId, AddPartitionsToTxn, EndTxn,
//!   JoinGroup, OffsetCommit, ...) go to the coordinator FindCoordinator
//!   named. The lookup is sent to a live broker drawn at random. An answer
//!   NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE or
//!   COORDINATOR_LOAD_IN_PROGRESS, or a lost connection, forgets the
//!   coordinator, and the next request looks it up again (the actor backs
//!   off between attempts, as it always did).
//! - Partition requests (Produce, Fetch) go to the partition's leader
//!   through a [`Router`] per topic, which asks Metadata again after a
//!   redirecting error.
//!
//! Every coordinator a lookup names is reported to the
//! [`ClusterHistory`](crate::cluster_history::ClusterHistory), which
//! counts the moves and checks the answer names a broker of the cluster
//! at its own address.

use crate::router::{redirects, Leader, Router};
use crate::txn::{fetch_at, PartitionRead};
use crate::workload::{
    ensure_connected, fetch_at_epochs, fetch_once, round_trip, FetchedPartition, RequestError,
    Shared, REQUEST_TIMEOUT, TOPIC,
};
use bytes::Bytes;
use kaas_core::protocol::messages::{find_coordinator_request, FindCoordinatorRequest};
use kaas_core::protocol::{ErrorCode, RequestBody, ResponseBody};
use kaas_net::broker::Isolation;
use kaas_net::client::Connection;
use madsim::rand::{thread_rng, Rng};
use madsim::time::timeout;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

const FIND_COORDINATOR_VERSION: i16 = 3;

/// Coordinator key types.
pub const KEY_GROUP: i8 = 0;
pub const KEY_TRANSACTION: i8 = 1;

/// A coordinator key: its type and the group or transactional id.
pub type CoordinatorKey = (i8, String);

pub(crate) struct Routes {
    client: String,
    /// Broker `i`'s address at index `i`.
    brokers: Vec<SocketAddr>,
    conns: BTreeMap<SocketAddr, Option<Connection>>,
    /// Per topic.
    routers: BTreeMap<String, Router>,
    /// The coordinator each key's last lookup named.
    coordinators: BTreeMap<CoordinatorKey, SocketAddr>,
    /// The last request failed to connect (it was never sent).
    not_connected: bool,
}

impl Routes {
    pub(crate) fn new(client: impl Into<String>, brokers: &[SocketAddr]) -> Routes {
        Routes {
            client: client.into(),
            brokers: brokers.to_vec(),
            conns: BTreeMap::new(),
            routers: BTreeMap::new(),
            coordinators: BTreeMap::new(),
            not_connected: false,
        }
    }

    pub(crate) fn multi(&self) -> bool {
        self.brokers.len() > 1
    }

    /// Every broker, broker `i` at index `i`.
    pub(crate) fn brokers(&self) -> &[SocketAddr] {
        &self.brokers
    }

    /// The first broker: the only one of a single-broker seed.
    pub(crate) fn first(&self) -> SocketAddr {
        self.brokers[0]
    }

    /// The connection to `addr` (`None` until made).
    pub(crate) fn conn(&mut self, addr: SocketAddr) -> &mut Option<Connection> {
        self.conns.entry(addr).or_default()
    }

    /// Drops every connection (an instance that stops mid-way).
    pub(crate) fn disconnect_all(&mut self) {
        self.conns.clear();
    }

    /// Drops the connection to `addr`: after an error its byte stream may
    /// be out of step.
    pub(crate) fn disconnect(&mut self, addr: SocketAddr) {
        self.conns.remove(&addr);
    }

    /// One request to `addr`, its connection dropped on any failure.
    pub(crate) async fn send(
        &mut self,
        addr: SocketAddr,
        api_key: i16,
        version: i16,
        body: &RequestBody,
    ) -> Result<ResponseBody, RequestError> {
        self.send_within(addr, REQUEST_TIMEOUT, api_key, version, body)
            .await
    }

    /// [`send`](Self::send) with its own bound on the answer's wait (a
    /// JoinGroup waits for the rebalance).
    pub(crate) async fn send_within(
        &mut self,
        addr: SocketAddr,
        wait: Duration,
        api_key: i16,
        version: i16,
        body: &RequestBody,
    ) -> Result<ResponseBody, RequestError> {
        let conn = self.conns.entry(addr).or_default();
        let c = match ensure_connected(conn, addr).await {
            Ok(c) => c,
            Err(e) => {
                self.not_connected = true;
                return Err(RequestError::Network(e));
            }
        };
        self.not_connected = false;
        let result = match timeout(wait, c.send(api_key, version, body)).await {
            Ok(Ok(b)) => Ok(b),
            Ok(Err(e)) => Err(RequestError::of(e)),
            Err(_) => Err(RequestError::Network("timed out".into())),
        };
        if result.is_err() {
            self.disconnect(addr);
        }
        result
    }

    /// Whether the last request failed because no connection could be
    /// made (it was never sent).
    pub(crate) fn not_connected(&self) -> bool {
        self.not_connected
    }

    /// One encoded request frame to `addr`; see [`round_trip`].
    pub(crate) async fn round_trip(
        &mut self,
        addr: SocketAddr,
        frame: &[u8],
    ) -> Result<Bytes, RequestError> {
        round_trip(self.conn(addr), addr, frame).await
    }

    /// A request for the coordinator of `key`: to the one broker, or to
    /// the coordinator a lookup named (looked up first if none is known).
    pub(crate) async fn ask_coordinator(
        &mut self,
        key: &CoordinatorKey,
        api_key: i16,
        version: i16,
        body: &RequestBody,
        shared: &Shared,
    ) -> Result<ResponseBody, RequestError> {
        self.ask_coordinator_within(key, REQUEST_TIMEOUT, api_key, version, body, shared)
            .await
    }

    /// [`ask_coordinator`](Self::ask_coordinator) with its own bound on the
    /// answer's wait.
    pub(crate) async fn ask_coordinator_within(
        &mut self,
        key: &CoordinatorKey,
        wait: Duration,
        api_key: i16,
        version: i16,
        body: &RequestBody,
        shared: &Shared,
    ) -> Result<ResponseBody, RequestError> {
        if !self.multi() {
            return self
                .send_within(self.first(), wait, api_key, version, body)
                .await;
        }
        let addr = match self.coordinators.get(key) {
            Some(&a) => a,
            None => self.find_coordinator(key, shared).await?,
        };
        let result = self.send_within(addr, wait, api_key, version, body).await;
        let moved = match &result {
            Ok(body) => coordinator_moved(body),
            Err(_) => true,
        };
        if moved {
            self.coordinators.remove(key);
        }
        result
    }

    /// Looks the coordinator of `key` up (multi-broker only): asks a
    /// broker drawn at random, remembers the answer.
    pub(crate) async fn find_coordinator(
        &mut self,
        key: &CoordinatorKey,
        shared: &Shared,
    ) -> Result<SocketAddr, RequestError> {
        let asked = self.brokers[thread_rng().gen_range(0..self.brokers.len())];
        let body = RequestBody::FindCoordinator(FindCoordinatorRequest {
            key: key.1.clone(),
            key_type: key.0,
            ..Default::default()
        });
        let answer = self
            .send(
                asked,
                find_coordinator_request::API_KEY,
                FIND_COORDINATOR_VERSION,
                &body,
            )
            .await?;
        let ResponseBody::FindCoordinator(r) = answer else {
            return Err(RequestError::Malformed(format!(
                "FindCoordinator answered {answer:?}"
            )));
        };
        if r.error_code != ErrorCode::None.code() {
            return Err(RequestError::Network(format!(
                "FindCoordinator: error {}",
                r.error_code
            )));
        }
        let named = usize::try_from(r.node_id)
            .ok()
            .and_then(|i| self.brokers.get(i))
            .copied();
        let at = format!("{}:{}", r.host, r.port);
        match named {
            Some(addr) if addr.to_string() == at => {
                shared
                    .cluster()
                    .coordinator_named(&self.client, key, r.node_id);
                self.coordinators.insert(key.clone(), addr);
                Ok(addr)
            }
            _ => Err(RequestError::Malformed(format!(
                "FindCoordinator for {key:?} named node {} at {at}, not a broker of the cluster",
                r.node_id
            ))),
        }
    }

    /// The leader of `topic`'s `partition` (the one broker, or as Metadata
    /// names it); `None` if no live leader is known.
    pub(crate) async fn leader(
        &mut self,
        topic: &str,
        partition: i32,
        shared: &Shared,
    ) -> Option<Leader> {
        let client = format!("{}/{topic}", self.client);
        let brokers = &self.brokers;
        let router = self
            .routers
            .entry(topic.to_string())
            .or_insert_with(|| Router::for_topic(client, brokers, topic));
        router.leader(partition, shared).await
    }

    /// A partition request to `topic` was answered `code`, or (`None`)
    /// got no answer: a redirect or a lost connection makes the next
    /// lookup ask Metadata again.
    pub(crate) fn partition_outcome(&mut self, topic: &str, code: Option<i16>, shared: &Shared) {
        if !self.multi() {
            return;
        }
        let stale = match code {
            None => true,
            Some(c) if redirects(c) => {
                shared.cluster().redirected();
                true
            }
            Some(_) => false,
        };
        if stale {
            if let Some(r) = self.routers.get_mut(topic) {
                r.invalidate();
            }
        }
    }

    /// One encoded produce frame for `topic`'s `partition`, to its leader.
    /// `Err(Network)` if no leader is known.
    pub(crate) async fn produce(
        &mut self,
        topic: &str,
        partition: i32,
        frame: &[u8],
        shared: &Shared,
    ) -> Result<Bytes, RequestError> {
        if !self.multi() {
            return self.round_trip(self.first(), frame).await;
        }
        let Some(leader) = self.leader(topic, partition, shared).await else {
            return Err(RequestError::Network(format!(
                "{topic} partition {partition}: no live leader known"
            )));
        };
        let result = self.round_trip(leader.addr, frame).await;
        if result.is_err() {
            self.partition_outcome(topic, None, shared);
        }
        result
    }

    /// One read_committed fetch of `positions` of `topic`
    /// ([`fetch_isolated`](Self::fetch_isolated)).
    pub(crate) async fn fetch_committed(
        &mut self,
        topic: &str,
        positions: &BTreeMap<i32, i64>,
        max_wait_ms: i32,
        shared: &Shared,
    ) -> Result<Vec<PartitionRead>, RequestError> {
        self.fetch_isolated(
            topic,
            positions,
            max_wait_ms,
            shared,
            Isolation::ReadCommitted,
        )
        .await
    }

    /// One fetch of `positions` of `topic` at `isolation`: with several
    /// brokers, one request per leader at the leader epoch the router
    /// knows (as Kafka's consumer sends it); a partition without a known leader
    /// or whose request failed is answered with error -1, as if its
    /// broker had said UNKNOWN_SERVER_ERROR (the caller retries it).
    pub(crate) async fn fetch_isolated(
        &mut self,
        topic: &str,
        positions: &BTreeMap<i32, i64>,
        max_wait_ms: i32,
        shared: &Shared,
        isolation: Isolation,
    ) -> Result<Vec<PartitionRead>, RequestError> {
        if !self.multi() {
            let addr = self.first();
            let none = BTreeMap::new();
            let conn = self.conn(addr);
            return fetch_at(conn, addr, topic, positions, &none, max_wait_ms, isolation).await;
        }
        type Asked = (BTreeMap<i32, i64>, BTreeMap<i32, i32>);
        let mut by_leader: BTreeMap<SocketAddr, Asked> = BTreeMap::new();
        let mut out = Vec::new();
        for (&p, &offset) in positions {
            match self.leader(topic, p, shared).await {
                Some(l) => {
                    let asked = by_leader.entry(l.addr).or_default();
                    asked.0.insert(p, offset);
                    asked.1.insert(p, l.epoch);
                }
                None => out.push(PartitionRead::failed(p, offset)),
            }
        }
        for (addr, (asked, epochs)) in by_leader {
            let conn = self.conn(addr);
            match fetch_at(conn, addr, topic, &asked, &epochs, max_wait_ms, isolation).await {
                Ok(parts) => {
                    for part in parts {
                        self.partition_outcome(topic, Some(part.error_code), shared);
                        out.push(part);
                    }
                }
                Err(RequestError::Malformed(e)) => return Err(RequestError::Malformed(e)),
                Err(RequestError::Network(_)) => {
                    self.partition_outcome(topic, None, shared);
                    out.extend(asked.iter().map(|(&p, &o)| PartitionRead::failed(p, o)));
                }
            }
        }
        out.sort_by_key(|r| r.partition);
        Ok(out)
    }
}

impl Routes {
    /// One fetch of `positions` of [`TOPIC`] (read_uncommitted), as
    /// [`fetch_once`] does with one broker; with several, one request per
    /// leader at the epoch the router knows, every batch reported to the
    /// cluster history, and a partition without a known leader or whose
    /// request failed answered with error -1 (the caller retries it).
    pub(crate) async fn fetch(
        &mut self,
        positions: &BTreeMap<i32, i64>,
        max_wait_ms: i32,
        shared: &Shared,
    ) -> Result<Vec<FetchedPartition>, RequestError> {
        if !self.multi() {
            let addr = self.first();
            return fetch_once(
                self.conn(addr),
                addr,
                TOPIC,
                positions,
                max_wait_ms,
                Isolation::ReadUncommitted,
            )
            .await;
        }
        type Asked = (BTreeMap<i32, i64>, BTreeMap<i32, i32>);
        let mut by_leader: BTreeMap<SocketAddr, Asked> = BTreeMap::new();
        let mut out = Vec::new();
        for (&p, &offset) in positions {
            match self.leader(TOPIC, p, shared).await {
                Some(l) => {
                    let asked = by_leader.entry(l.addr).or_default();
                    asked.0.insert(p, offset);
                    asked.1.insert(p, l.epoch);
                }
                None => out.push(FetchedPartition::failed(p, offset)),
            }
        }
        for (addr, (asked, epochs)) in by_leader {
            match fetch_at_epochs(
                self.conn(addr),
                addr,
                TOPIC,
                &asked,
                &epochs,
                max_wait_ms,
                Isolation::ReadUncommitted,
            )
            .await
            {
                Ok(parts) => {
                    for part in parts {
                        self.partition_outcome(TOPIC, Some(part.error_code), shared);
                        shared
                            .cluster()
                            .fetched(&self.client, part.partition, &part.batches);
                        out.push(part);
                    }
                }
                Err(RequestError::Malformed(e)) => return Err(RequestError::Malformed(e)),
                Err(RequestError::Network(_)) => {
                    self.partition_outcome(TOPIC, None, shared);
                    out.extend(asked.iter().map(|(&p, &o)| FetchedPartition::failed(p, o)));
                }
            }
        }
        out.sort_by_key(|r| r.partition);
        Ok(out)
    }
}

/// Whether an answer says the coordinator is elsewhere or not ready:
/// look it up again before the next request.
pub fn coordinator_moved(body: &ResponseBody) -> bool {
    let codes: Vec<i16> = match body {
        ResponseBody::InitProducerId(r) => vec![r.error_code],
        ResponseBody::EndTxn(r) => vec![r.error_code],
        ResponseBody::AddOffsetsToTxn(r) => vec![r.error_code],
        ResponseBody::AddPartitionsToTxn(r) => r
            .results_by_topic_v3_and_below
            .iter()
            .flat_map(|t| t.results_by_partition.iter())
            .map(|p| p.partition_error_code)
            .collect(),
        ResponseBody::TxnOffsetCommit(r) => r
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter())
            .map(|p| p.error_code)
            .collect(),
        ResponseBody::OffsetCommit(r) => r
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter())
            .map(|p| p.error_code)
            .collect(),
        ResponseBody::OffsetFetch(r) => std::iter::once(r.error_code)
            .chain(
                r.topics
                    .iter()
                    .flat_map(|t| t.partitions.iter())
                    .map(|p| p.error_code),
            )
            .collect(),
        ResponseBody::JoinGroup(r) => vec![r.error_code],
        ResponseBody::SyncGroup(r) => vec![r.error_code],
        ResponseBody::Heartbeat(r) => vec![r.error_code],
        ResponseBody::LeaveGroup(r) => vec![r.error_code],
        ResponseBody::DescribeTransactions(r) => {
            r.transaction_states.iter().map(|s| s.error_code).collect()
        }
        ResponseBody::DescribeGroups(r) => r.groups.iter().map(|g| g.error_code).collect(),
        _ => Vec::new(),
    };
    codes.iter().any(|&c| {
        c == ErrorCode::NotCoordinator.code()
            || c == ErrorCode::CoordinatorNotAvailable.code()
            || c == ErrorCode::CoordinatorLoadInProgress.code()
    })
}
