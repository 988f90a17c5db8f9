//! One scenario's run against one broker: its connection, its names, and
//! the transcript of what it observed.
//!
//! A scenario never learns which broker it talks to. Everything that is
//! random by nature on either side (producer ids, member ids, topic ids,
//! the names this run made unique) is replaced by a stable alias before it
//! is written down, so the two transcripts are equal exactly when a client
//! could not tell the brokers apart.

use crate::transcript::Transcript;
use kaas_core::protocol::messages::{api_versions_request, ApiVersionsRequest};
use kaas_core::protocol::{RequestBody, ResponseBody, Uuid};
use kaas_net::client::{ClientError, Connection};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

/// How long one request may take before the broker counts as not
/// answering. Long polls in scenarios wait at most a few seconds.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The versions both brokers serve: api key -> (min, max) of the overlap.
pub type Versions = BTreeMap<i16, (i16, i16)>;

/// Why a scenario ended early. What the broker did (closed the
/// connection, gave an answer the scenario could not go on from) is
/// already in the transcript; the text is for the report.
#[derive(Debug, Clone)]
pub struct Stop(pub String);

pub type Step<T = ()> = Result<T, Stop>;

/// What came back for one request.
#[derive(Debug)]
pub enum Answer {
    Body(ResponseBody),
    /// The broker closed the connection (or it failed) instead of answering.
    Closed,
    /// No answer within [`REQUEST_TIMEOUT`].
    Timeout,
    /// An answer our codec cannot read.
    Undecodable(String),
}

impl Answer {
    /// What a client sees when there is no body: the same for both brokers
    /// whatever the OS said.
    pub fn outcome(&self) -> Value {
        match self {
            Answer::Body(_) => json!("answered"),
            Answer::Closed => json!("connection closed"),
            Answer::Timeout => json!("no answer"),
            Answer::Undecodable(_) => json!("undecodable answer"),
        }
    }
}

pub struct Session {
    addr: SocketAddr,
    conn: Option<Connection>,
    /// Prefix that makes this run's names unique on a broker that may have
    /// seen earlier runs.
    prefix: String,
    aliases: HashMap<(&'static str, String), String>,
    /// Topic ids learnt from Metadata, for the versions that address
    /// topics by id.
    pub(crate) topic_ids: HashMap<String, Uuid>,
    alias_counts: HashMap<&'static str, usize>,
    /// The first epoch seen of each producer id, for epochs written down
    /// relative to it (observe::producer).
    pub(crate) first_epochs: HashMap<i64, i16>,
    versions: Versions,
    /// Versions a scenario fixed for an API (the version sweeps), used
    /// instead of the highest common one.
    pinned: HashMap<i16, i16>,
    /// Base of the record timestamps this scenario writes (ms, whole
    /// seconds); observations give timestamps relative to it.
    pub t0: i64,
    pub transcript: Transcript,
}

impl Session {
    pub fn new(addr: SocketAddr, prefix: String, versions: Versions, t0: i64) -> Session {
        Session {
            addr,
            conn: None,
            prefix,
            aliases: HashMap::new(),
            topic_ids: HashMap::new(),
            alias_counts: HashMap::new(),
            first_epochs: HashMap::new(),
            versions,
            pinned: HashMap::new(),
            t0,
            transcript: Transcript::default(),
        }
    }

    /// A topic, group or transactional id unique to this run and scenario.
    pub fn name(&self, short: &str) -> String {
        format!("{}-{short}", self.prefix)
    }

    /// A name from a response, written down as the scenario knows it.
    pub fn local(&self, full: &str) -> String {
        match full.strip_prefix(&self.prefix) {
            Some(rest) => rest.trim_start_matches('-').to_owned(),
            None => format!("<foreign {full}>"),
        }
    }

    /// A stable stand-in for a value that is random by nature: the first
    /// distinct value of a kind is `kind1`, the next `kind2`, ...
    /// Negative numbers (`-1`: none) stay as they are.
    pub fn alias(&mut self, kind: &'static str, value: impl ToString) -> Value {
        let value = value.to_string();
        if value.starts_with('-') || value.is_empty() {
            return json!(value);
        }
        if let Some(a) = self.aliases.get(&(kind, value.clone())) {
            return json!(a);
        }
        let n = self.alias_counts.entry(kind).or_insert(0);
        *n += 1;
        let a = format!("{kind}{n}");
        self.aliases.insert((kind, value), a.clone());
        json!(a)
    }

    /// A second client of the same broker, with its own connection, for a
    /// scenario that needs two requests in flight at once. What it observes
    /// goes into its own transcript; [`absorb`](Self::absorb) appends it.
    pub fn side(&self) -> Session {
        let mut side = Session::new(
            self.addr,
            self.prefix.clone(),
            self.versions.clone(),
            self.t0,
        );
        side.topic_ids = self.topic_ids.clone();
        side
    }

    pub fn absorb(&mut self, side: Session) {
        for e in side.transcript.entries {
            self.transcript.push(e.step, e.value);
        }
    }

    /// Writes down one observation.
    pub fn observe(&mut self, step: impl Into<String>, value: Value) {
        self.transcript.push(step.into(), value);
    }

    /// The version of `api_key` to use: the pinned one, else the highest
    /// both brokers serve.
    pub fn version(&self, api_key: i16) -> Step<i16> {
        if let Some(&v) = self.pinned.get(&api_key) {
            return Ok(v);
        }
        self.versions
            .get(&api_key)
            .map(|&(_, max)| max)
            .ok_or_else(|| Stop(format!("api {api_key} is not served by both brokers")))
    }

    /// The highest version both brokers serve, whatever is pinned: for the
    /// unobserved waits, which must not change behaviour with the version
    /// under test (Metadata before v4 creates the topics it asks about).
    pub fn latest_version(&self, api_key: i16) -> Step<i16> {
        self.versions
            .get(&api_key)
            .map(|&(_, max)| max)
            .ok_or_else(|| Stop(format!("api {api_key} is not served by both brokers")))
    }

    /// Uses `version` of `api_key` from now on (`None`: the highest again).
    pub fn pin(&mut self, api_key: i16, version: Option<i16>) {
        match version {
            Some(v) => self.pinned.insert(api_key, v),
            None => self.pinned.remove(&api_key),
        };
    }

    /// The overlap of both brokers' version ranges of `api_key`.
    pub fn version_range(&self, api_key: i16) -> Option<(i16, i16)> {
        self.versions.get(&api_key).copied()
    }

    async fn connection(&mut self) -> Result<&mut Connection, ClientError> {
        if self.conn.is_none() {
            let c = Connection::connect(self.addr).await?;
            self.conn = Some(c.with_client_id(Some("kaas-diff")));
        }
        self.conn.as_mut().ok_or(ClientError::Desynchronized)
    }

    /// Sends `body` at `version` and returns whatever came back. After
    /// anything but an answer the connection is dropped; the next request
    /// opens a new one, as a client would.
    pub async fn try_call(&mut self, version: i16, body: &RequestBody) -> Answer {
        let api_key = body.api_key();
        let sent = async {
            let conn = self.connection().await?;
            conn.send(api_key, version, body).await
        };
        let answer = match tokio::time::timeout(REQUEST_TIMEOUT, sent).await {
            Err(_) => Answer::Timeout,
            Ok(Ok(body)) => Answer::Body(body),
            Ok(Err(ClientError::Decode(e))) => Answer::Undecodable(e.to_string()),
            Ok(Err(_)) => Answer::Closed,
        };
        if !matches!(answer, Answer::Body(_)) {
            self.conn = None;
        }
        answer
    }

    /// Like [`try_call`](Self::try_call), for a scenario that cannot go on
    /// without an answer: anything else is written down and ends it.
    pub async fn call(&mut self, version: i16, body: RequestBody) -> Step<ResponseBody> {
        let api_key = body.api_key();
        match self.try_call(version, &body).await {
            Answer::Body(b) => Ok(b),
            other => {
                let what = other.outcome();
                self.observe(format!("api {api_key} v{version}"), what.clone());
                let detail = match other {
                    Answer::Undecodable(e) => e,
                    _ => String::new(),
                };
                Err(Stop(format!("api {api_key} v{version}: {what} {detail}")))
            }
        }
    }

    /// Sends a request that gets no answer (Produce with acks=0).
    pub async fn send_oneway(&mut self, version: i16, body: RequestBody) -> Step {
        let api_key = body.api_key();
        let sent = async {
            let conn = self.connection().await?;
            conn.send_oneway(api_key, version, &body).await
        };
        match tokio::time::timeout(REQUEST_TIMEOUT, sent).await {
            Ok(Ok(())) => Ok(()),
            _ => {
                self.conn = None;
                self.observe(format!("api {api_key} v{version}"), json!("send failed"));
                Err(Stop(format!("api {api_key} v{version}: send failed")))
            }
        }
    }
}

/// Asks a broker which versions of which APIs it serves (ApiVersions v3,
/// falling back to v0 as clients do).
pub async fn api_versions(addr: SocketAddr) -> Result<BTreeMap<i16, (i16, i16)>, String> {
    let mut last = String::new();
    for version in [3, 0] {
        let mut conn = Connection::connect(addr)
            .await
            .map_err(|e| format!("connect {addr}: {e}"))?
            .with_client_id(Some("kaas-diff"));
        let body = RequestBody::ApiVersions(ApiVersionsRequest {
            client_software_name: "kaas-diff".into(),
            client_software_version: "0".into(),
            ..Default::default()
        });
        match conn
            .send(api_versions_request::API_KEY, version, &body)
            .await
        {
            Ok(ResponseBody::ApiVersions(r)) if r.error_code == 0 => {
                return Ok(r
                    .api_keys
                    .iter()
                    .map(|k| (k.api_key, (k.min_version, k.max_version)))
                    .collect());
            }
            Ok(other) => last = format!("ApiVersions v{version}: {other:?}"),
            Err(e) => last = format!("ApiVersions v{version}: {e}"),
        }
    }
    Err(last)
}

/// The versions both brokers serve.
pub fn overlap(a: &BTreeMap<i16, (i16, i16)>, b: &BTreeMap<i16, (i16, i16)>) -> Versions {
    a.iter()
        .filter_map(|(k, &(amin, amax))| {
            let &(bmin, bmax) = b.get(k)?;
            let (min, max) = (amin.max(bmin), amax.min(bmax));
            (min <= max).then_some((*k, (min, max)))
        })
        .collect()
}

/// The machine's wall clock in milliseconds (both brokers run here and
/// stamp with it).
pub fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
