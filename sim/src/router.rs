//! Where a client sends a partition's requests: its leader, as Metadata
//! names it.
//!
//! With one broker there is nothing to look up: every request goes to it,
//! and the router neither asks for Metadata nor draws from the
//! simulation's rng, so single-broker seeds run exactly as before routing
//! existed. With several, it behaves as Kafka's clients do: Metadata from
//! a bootstrap broker drawn at random, each partition's requests to the
//! leader it names, and after NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE,
//! FENCED_LEADER_EPOCH or a lost connection the caller
//! [`invalidate`](Router::invalidate)s and the next lookup asks again
//! (the caller backs off between attempts, bounded as before). Like
//! Kafka's `Metadata.updateLatestMetadata`, an answer naming an older
//! leader epoch than the client already knows for a partition is ignored
//! (brokers may lag each other by a heartbeat); every answer is reported
//! to the [`ClusterHistory`](crate::cluster_history::ClusterHistory).

use crate::workload::{Shared, CONNECT_TIMEOUT, REQUEST_TIMEOUT, TOPIC};
use kaas_core::protocol::messages::{metadata_request, MetadataRequest};
use kaas_core::protocol::{ErrorCode, RequestBody, ResponseBody};
use kaas_net::client::Connection;
use madsim::rand::{thread_rng, Rng};
use madsim::time::timeout;
use std::collections::BTreeMap;
use std::net::SocketAddr;

const METADATA_VERSION: i16 = 9;

/// A partition's leader as the client knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Leader {
    pub broker: i32,
    pub addr: SocketAddr,
    /// The leader epoch Metadata named (-1 with one broker: unchecked).
    pub epoch: i32,
}

pub struct Router {
    client: String,
    /// The topic whose partitions it routes. Only [`TOPIC`]'s answers go
    /// to the cluster history, whose rules are per partition of that
    /// topic.
    topic: String,
    /// Broker `i`'s address at index `i`: the bootstrap list.
    brokers: Vec<SocketAddr>,
    /// Per partition: the newest epoch known and its leader, if it has one.
    leaders: BTreeMap<i32, (i32, Option<Leader>)>,
    /// Metadata must be asked again before the next lookup.
    stale: bool,
    conn: Option<(i32, Connection)>,
}

impl Router {
    /// A router for `client` over the brokers at `brokers` (broker `i` at
    /// index `i`), for the partitions of [`TOPIC`].
    pub fn new(client: impl Into<String>, brokers: &[SocketAddr]) -> Router {
        Router::for_topic(client, brokers, TOPIC)
    }

    /// A router for the partitions of `topic`.
    pub fn for_topic(client: impl Into<String>, brokers: &[SocketAddr], topic: &str) -> Router {
        Router {
            client: client.into(),
            topic: topic.to_string(),
            brokers: brokers.to_vec(),
            leaders: BTreeMap::new(),
            stale: true,
            conn: None,
        }
    }

    pub fn multi(&self) -> bool {
        self.brokers.len() > 1
    }

    pub fn client(&self) -> &str {
        &self.client
    }

    /// The topic whose partitions it routes.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The address of broker `id`.
    pub fn addr_of(&self, id: i32) -> Option<SocketAddr> {
        usize::try_from(id)
            .ok()
            .and_then(|i| self.brokers.get(i))
            .copied()
    }

    /// Every broker's address, broker `i` at index `i`.
    pub fn brokers(&self) -> &[SocketAddr] {
        &self.brokers
    }

    /// The leader of `partition`, asking Metadata first if the view is
    /// stale; `None` if no live leader is known (the caller backs off and
    /// asks again).
    pub async fn leader(&mut self, partition: i32, shared: &Shared) -> Option<Leader> {
        if !self.multi() {
            return Some(Leader {
                broker: 0,
                addr: self.brokers[0],
                epoch: -1,
            });
        }
        if self.stale || !self.leaders.contains_key(&partition) {
            self.refresh(shared).await;
        }
        let leader = self.leaders.get(&partition).and_then(|(_, l)| *l);
        match leader {
            Some(l) if self.topic == TOPIC => {
                shared.cluster().followed(&self.client, partition, l.broker)
            }
            Some(_) => {}
            None => self.stale = true,
        }
        leader
    }

    /// The view may be wrong (an error named a partition's leader as
    /// moved, or a broker could not be reached): ask again before the next
    /// lookup. Epochs known are kept, so an older answer is still ignored.
    pub fn invalidate(&mut self) {
        self.stale = true;
    }

    /// Any broker to send a request that any broker answers
    /// (InitProducerId): a partition leader if one is known, else a
    /// bootstrap broker at random.
    pub fn any_broker(&self) -> i32 {
        if !self.multi() {
            return 0;
        }
        self.leaders
            .values()
            .find_map(|(_, l)| l.map(|l| l.broker))
            .unwrap_or_else(|| thread_rng().gen_range(0..self.brokers.len()) as i32)
    }

    async fn refresh(&mut self, shared: &Shared) {
        if self.conn.is_none() {
            let id = thread_rng().gen_range(0..self.brokers.len());
            match timeout(CONNECT_TIMEOUT, Connection::connect(self.brokers[id])).await {
                Ok(Ok(c)) => self.conn = Some((id as i32, c.with_client_id(Some("sim-router")))),
                _ => return,
            }
        }
        let Some((answered_by, conn)) = self.conn.as_mut() else {
            return;
        };
        let answered_by = *answered_by;
        let body = RequestBody::Metadata(MetadataRequest {
            topics: Some(vec![metadata_request::MetadataRequestTopic {
                name: Some(self.topic.clone()),
                ..Default::default()
            }]),
            allow_auto_topic_creation: true,
            ..Default::default()
        });
        let answer = timeout(
            REQUEST_TIMEOUT,
            conn.send(metadata_request::API_KEY, METADATA_VERSION, &body),
        )
        .await;
        let resp = match answer {
            Ok(Ok(ResponseBody::Metadata(resp))) => resp,
            _ => {
                // Another bootstrap broker next time.
                self.conn = None;
                return;
            }
        };
        let known: BTreeMap<i32, SocketAddr> = resp
            .brokers
            .iter()
            .filter_map(|b| {
                let ip = b.host.parse().ok()?;
                Some((b.node_id, SocketAddr::new(ip, u16::try_from(b.port).ok()?)))
            })
            .collect();
        let mut cluster = shared.cluster();
        for topic in resp
            .topics
            .iter()
            .filter(|t| t.name.as_deref() == Some(self.topic.as_str()))
        {
            if topic.error_code != ErrorCode::None.code() {
                continue;
            }
            for p in &topic.partitions {
                let (partition, epoch) = (p.partition_index, p.leader_epoch);
                if self.topic == TOPIC {
                    cluster.metadata(&self.client, answered_by, partition, p.leader_id, epoch);
                }
                let newest = self.leaders.get(&partition).map_or(-1, |(e, _)| *e);
                if epoch < newest {
                    continue;
                }
                let leader = (p.error_code == ErrorCode::None.code() && p.leader_id >= 0)
                    .then(|| known.get(&p.leader_id))
                    .flatten()
                    .map(|&addr| Leader {
                        broker: p.leader_id,
                        addr,
                        epoch,
                    });
                self.leaders.insert(partition, (epoch, leader));
            }
        }
        self.stale = false;
    }
}

/// Errors that mean the client followed a stale view of leadership.
pub fn redirects(code: i16) -> bool {
    [
        ErrorCode::NotLeaderOrFollower,
        ErrorCode::LeaderNotAvailable,
        ErrorCode::FencedLeaderEpoch,
        ErrorCode::UnknownLeaderEpoch,
        ErrorCode::UnknownTopicOrPartition,
    ]
    .iter()
    .any(|c| c.code() == code)
}
