//! The TCP front end: accept connections, read frames, answer in order.
//!
//! Requests on one connection are answered in the order they arrived, and
//! each sees the effects of every request before it, as Kafka's one request
//! at a time does. One exception, for throughput: while a Produce waits for
//! its appends to become durable (acks=all), the connection reads and
//! handles the next request if that is a Produce too, so a producer's
//! pipelined batches (up to 5 in flight for idempotent clients) share
//! fsyncs instead of waiting for one each in turn. Their appends still run
//! in arrival order, so sequence numbers meet the log in the order sent.
//! Any other request waits until everything before it is answered. A slow
//! long-poll Fetch therefore holds up only its own connection.
//!
//! Limits shared by every connection of a listener live in
//! [`ServerLimits`]: how many connections may be open (in total and per
//! client address) and how many request bytes may be buffered but not yet
//! answered.

use crate::broker::Broker;
use crate::config::BrokerConfig;
use crate::handlers::{self, Outcome};
use bytes::BytesMut;
use kaas_core::protocol::frame::{check_api_frame_length, encode_response, frame_length};
use kaas_core::protocol::messages::produce_request;
use kaas_core::protocol::{decode_request, Request, RequestHeader};
use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch, Semaphore, SemaphorePermit};

/// The body of a large frame is read in steps of at most this much, so
/// memory grows with bytes actually received, not with a claimed length.
const READ_CHUNK: usize = 1 << 20;

/// Bytes read from a connection at once: several small pipelined frames
/// (a length prefix, an API key and a body each) in one receive instead of
/// three receives per frame.
const READ_BUFFER: usize = 8 << 10;

/// Answers one connection may owe while it reads ahead (Produce requests
/// waiting for durability): more than clients pipeline (5), and still a
/// bound on what one connection holds beyond the request budget.
const MAX_IN_FLIGHT: usize = 8;

/// Refused connections are logged at warn for the first few and then once
/// every this many, so a connection flood cannot flood the log too.
const REFUSAL_LOG_EVERY: u64 = 1_000;

/// The limits one listener enforces across all its connections, with gauges
/// of what is in use (for tests and, later, metrics).
#[derive(Debug)]
pub struct ServerLimits {
    max_connections: usize,
    max_connections_per_ip: usize,
    connections: Mutex<Connections>,
    refused: AtomicU64,
    /// Permits are bytes of request frames buffered and not yet answered.
    request_budget: u32,
    request_permits: Semaphore,
    /// Sum of the lengths of the frames currently admitted, counted apart
    /// from the semaphore so that tests check the semaphore's effect rather
    /// than read back its own arithmetic.
    queued_bytes: AtomicUsize,
    peak_queued_bytes: AtomicUsize,
}

#[derive(Debug, Default)]
struct Connections {
    total: usize,
    per_ip: HashMap<IpAddr, usize>,
}

/// Why a new connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `max_connections` are open.
    TooManyConnections,
    /// `max_connections_per_ip` are open from this address.
    TooManyFromAddress,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Refusal::TooManyConnections => "max connections reached",
            Refusal::TooManyFromAddress => "max connections per address reached",
        })
    }
}

impl ServerLimits {
    /// Limits from the broker's configuration. A budget of 0 would admit
    /// nothing, so it counts as 1 (a frame larger than the budget still
    /// goes through alone).
    pub fn new(config: &BrokerConfig) -> Arc<ServerLimits> {
        let budget = config
            .queued_max_request_bytes
            .clamp(1, Semaphore::MAX_PERMITS.min(u32::MAX as usize) as u32);
        Arc::new(ServerLimits {
            max_connections: config.max_connections,
            max_connections_per_ip: config.max_connections_per_ip,
            connections: Mutex::new(Connections::default()),
            refused: AtomicU64::new(0),
            request_budget: budget,
            request_permits: Semaphore::new(budget as usize),
            queued_bytes: AtomicUsize::new(0),
            peak_queued_bytes: AtomicUsize::new(0),
        })
    }

    /// Takes a connection slot for a client at `ip`; the slot is given back
    /// when the returned guard drops, however the connection ends.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<ConnectionSlot, Refusal> {
        // An IPv4 client reaching a dual-stack listener shows up as
        // ::ffff:a.b.c.d; count it under its IPv4 address.
        let ip = ip.to_canonical();
        let mut c = self.lock_connections();
        if c.total >= self.max_connections {
            return Err(Refusal::TooManyConnections);
        }
        let from_ip = c.per_ip.entry(ip).or_insert(0);
        if *from_ip >= self.max_connections_per_ip {
            return Err(Refusal::TooManyFromAddress);
        }
        *from_ip += 1;
        c.total += 1;
        Ok(ConnectionSlot {
            limits: self.clone(),
            ip,
        })
    }

    fn lock_connections(&self) -> MutexGuard<'_, Connections> {
        // The counters are updated in one step under the lock, so a panic
        // elsewhere cannot leave them half-written: keep using them.
        self.connections
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Connections open now (admitted and not yet ended).
    pub fn open_connections(&self) -> usize {
        self.lock_connections().total
    }

    /// Connections refused since start.
    pub fn refused_connections(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// The budget of queued request bytes, in bytes.
    pub fn request_budget(&self) -> usize {
        self.request_budget as usize
    }

    /// Bytes of request frames admitted and not yet answered.
    pub fn queued_request_bytes(&self) -> usize {
        self.queued_bytes.load(Ordering::Relaxed)
    }

    /// The most [`Self::queued_request_bytes`] has ever been.
    pub fn peak_queued_request_bytes(&self) -> usize {
        self.peak_queued_bytes.load(Ordering::Relaxed)
    }

    /// Waits until a frame of `len` bytes fits in the budget and takes it.
    /// A frame larger than the whole budget takes all of it (and so waits
    /// until nothing else is queued) rather than waiting forever.
    async fn reserve(&self, len: usize) -> Result<QueuedRequest<'_>, String> {
        let permits = len.min(self.request_budget as usize) as u32;
        let permit = self
            .request_permits
            .acquire_many(permits)
            .await
            .map_err(|e| format!("request budget closed: {e}"))?;
        let now = self.queued_bytes.fetch_add(len, Ordering::Relaxed) + len;
        self.peak_queued_bytes.fetch_max(now, Ordering::Relaxed);
        Ok(QueuedRequest {
            limits: self,
            len,
            _permit: permit,
        })
    }
}

/// A connection's place in [`ServerLimits`]; dropping it frees the place.
#[derive(Debug)]
pub struct ConnectionSlot {
    limits: Arc<ServerLimits>,
    ip: IpAddr,
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        let mut c = self.limits.lock_connections();
        c.total = c.total.saturating_sub(1);
        if let Some(n) = c.per_ip.get_mut(&self.ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                // Forget the address: the map holds only open ones.
                c.per_ip.remove(&self.ip);
            }
        }
    }
}

/// One request frame's share of the request budget, held from before its
/// body is read until its response is written (or it is dropped).
struct QueuedRequest<'a> {
    limits: &'a ServerLimits,
    len: usize,
    /// Released after `drop` below has lowered the gauge, so the gauge never
    /// shows less than the permits taken.
    _permit: SemaphorePermit<'a>,
}

impl Drop for QueuedRequest<'_> {
    fn drop(&mut self) {
        self.limits
            .queued_bytes
            .fetch_sub(self.len, Ordering::Relaxed);
    }
}

/// Accepts connections until `shutdown` completes, with the limits of the
/// broker's configuration.
pub async fn serve(broker: Arc<Broker>, listener: TcpListener, shutdown: impl Future<Output = ()>) {
    let limits = ServerLimits::new(&broker.config);
    serve_with_limits(broker, listener, limits, shutdown).await
}

/// Accepts connections until `shutdown` completes, under `limits` (which the
/// caller keeps to read its gauges).
pub async fn serve_with_limits(
    broker: Arc<Broker>,
    listener: TcpListener,
    limits: Arc<ServerLimits>,
    shutdown: impl Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => match limits.admit(peer.ip()) {
                    Ok(slot) => {
                        let _ = stream.set_nodelay(true);
                        let broker = broker.clone();
                        let limits = limits.clone();
                        tokio::spawn(async move {
                            serve_connection(&broker, &limits, stream, peer).await;
                            drop(slot);
                        });
                    }
                    Err(refusal) => {
                        // As Kafka does: accept, then close at once. The
                        // client sees the close rather than a hung connect.
                        drop(stream);
                        let n = limits.refused.fetch_add(1, Ordering::Relaxed) + 1;
                        if n <= 10 || n.is_multiple_of(REFUSAL_LOG_EVERY) {
                            tracing::warn!(%peer, %refusal, refused_so_far = n, "refusing connection");
                        } else {
                            tracing::debug!(%peer, %refusal, "refusing connection");
                        }
                    }
                },
                Err(e) => {
                    // Out of file descriptors and similar: keep serving the
                    // connections we have; back off before accepting again.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            }
        }
    }
}

/// Serves one client connection until it closes or misbehaves, with a
/// request budget of its own (the fuzz target's entry point; a listener
/// shares one budget between its connections).
pub async fn run_connection<S>(broker: Arc<Broker>, stream: S, peer: SocketAddr)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let limits = ServerLimits::new(&broker.config);
    serve_connection(&broker, &limits, stream, peer).await
}

async fn serve_connection<S>(
    broker: &Arc<Broker>,
    limits: &ServerLimits,
    stream: S,
    peer: SocketAddr,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (rd, wr) = tokio::io::split(stream);
    let rd = BufReader::with_capacity(READ_BUFFER, rd);
    let (answers, owed) = mpsc::channel(MAX_IN_FLIGHT);
    let (written_tx, written) = watch::channel(0u64);
    let reader = read_requests(broker, limits, rd, peer, answers, written);
    let writer = write_answers(wr, owed, written_tx, peer);
    tokio::pin!(reader, writer);
    tokio::select! {
        // The connection broke or an answer closes it: stop reading.
        () = &mut writer => {}
        // No more requests: answer those read, then close.
        () = &mut reader => (&mut writer).await,
    }
}

/// A request read and handled, whose answer is owed in arrival order.
struct Owed<'a> {
    header: RequestHeader,
    outcome: Outcome,
    /// Its share of the request budget, given back once answered.
    _queued: QueuedRequest<'a>,
}

/// Reads frames and handles them in arrival order, passing each outcome to
/// the writer. `written` counts the answers the writer has finished.
async fn read_requests<'a, R: AsyncRead + Unpin>(
    broker: &Arc<Broker>,
    limits: &'a ServerLimits,
    mut rd: R,
    peer: SocketAddr,
    answers: mpsc::Sender<Owed<'a>>,
    mut written: watch::Receiver<u64>,
) {
    let max = broker.config.max_frame_bytes;
    let mut read = 0u64;
    loop {
        let (frame, queued) = match read_frame(
            &mut rd,
            max,
            broker.config.max_non_produce_frame_bytes,
            limits,
        )
        .await
        {
            Ok(Some(frame)) => frame,
            Ok(None) => return,
            Err(reason) => {
                tracing::info!(%peer, %reason, "closing connection");
                return;
            }
        };
        capture_frame(broker.config.capture_dir.as_deref(), &frame);
        let (header, outcome) = match decode_request(frame, handlers::supported_versions) {
            Ok(Request {
                header,
                body,
                trailing,
            }) => {
                if trailing > 0 {
                    tracing::debug!(
                        api_key = header.api_key,
                        version = header.api_version,
                        trailing,
                        "ignoring trailing request bytes"
                    );
                }
                // Only a Produce may run ahead of answers still owed.
                if header.api_key != produce_request::API_KEY
                    && written.wait_for(|&w| w >= read).await.is_err()
                {
                    return;
                }
                let outcome = handlers::dispatch(broker, &header, body, peer).await;
                (header, outcome)
            }
            Err(e) => match e.header() {
                Some(header) => (header.clone(), handlers::refuse(&e)),
                None => {
                    tracing::info!(%peer, error = %e, "closing connection");
                    return;
                }
            },
        };
        let closes = matches!(outcome, Outcome::Close(_));
        let owed = Owed {
            header,
            outcome,
            _queued: queued,
        };
        if answers.send(owed).await.is_err() || closes {
            return;
        }
        read += 1;
    }
}

/// Writes the answers in the order their requests arrived, waiting for
/// those that come later (a Produce's durability).
async fn write_answers<W: AsyncWrite + Unpin>(
    mut wr: W,
    mut owed: mpsc::Receiver<Owed<'_>>,
    written: watch::Sender<u64>,
    peer: SocketAddr,
) {
    let mut n = 0u64;
    while let Some(Owed {
        header,
        mut outcome,
        _queued,
    }) = owed.recv().await
    {
        while let Outcome::Later(later) = outcome {
            outcome = later.await;
        }
        match outcome {
            Outcome::Respond { body, version } => {
                let bytes = match encode_response(
                    header.api_key,
                    version,
                    header.correlation_id,
                    &body,
                ) {
                    Ok(b) => b,
                    Err(e) => {
                        tracing::error!(%peer, api_key = header.api_key, version, error = %e, "cannot encode response");
                        return;
                    }
                };
                // Flush: a no-op on a real socket, but madsim's simulated
                // one only sends what was written when flushed.
                if wr.write_all(&bytes).await.is_err() || wr.flush().await.is_err() {
                    return;
                }
            }
            Outcome::Silent | Outcome::Later(_) => {}
            Outcome::Close(reason) => {
                tracing::info!(%peer, api_key = header.api_key, version = header.api_version, %reason, "closing connection");
                return;
            }
        }
        n += 1;
        written.send_replace(n);
    }
}

/// Reads one frame, with its share of the request budget; `Ok(None)` on a
/// clean close between frames.
async fn read_frame<'a, R: AsyncRead + Unpin>(
    rd: &mut R,
    max: usize,
    max_non_produce: usize,
    limits: &'a ServerLimits,
) -> Result<Option<(bytes::Bytes, QueuedRequest<'a>)>, String> {
    let mut prefix = [0u8; 4];
    match rd.read_exact(&mut prefix).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.to_string()),
    }
    let len = frame_length(prefix, max).map_err(|e| e.to_string())?;
    // The API key opens the body: read it first and apply its limit
    // before buffering the rest.
    let mut key = [0u8; 2];
    rd.read_exact(&mut key).await.map_err(|e| e.to_string())?;
    check_api_frame_length(i16::from_be_bytes(key), len, max_non_produce)
        .map_err(|e| e.to_string())?;
    // Wait for room in the budget before buffering the body. Meanwhile this
    // connection reads nothing more, so a client sending faster than the
    // broker answers is held back by TCP flow control (backpressure).
    let queued = limits.reserve(len).await?;
    // A body that holds budget must keep arriving: a client that announces
    // a large frame and then stalls would otherwise pin its share of the
    // budget for as long as it keeps the connection open.
    let body = read_body(rd, key, len);
    match tokio::time::timeout(body_deadline(len), body).await {
        Ok(body) => Ok(Some((body?, queued))),
        Err(_) => Err(format!(
            "request body of {len} bytes not received within {:?}",
            body_deadline(len)
        )),
    }
}

/// How long the body of a `len`-byte frame may take to arrive: 30 s plus
/// one second per MiB (a client slower than 1 MiB/s on a large frame is
/// indistinguishable from one holding the budget hostage).
fn body_deadline(len: usize) -> std::time::Duration {
    std::time::Duration::from_secs(30 + (len >> 20) as u64)
}

async fn read_body<R: AsyncRead + Unpin>(
    rd: &mut R,
    key: [u8; 2],
    len: usize,
) -> Result<bytes::Bytes, String> {
    let mut buf = BytesMut::with_capacity(len.min(READ_CHUNK));
    buf.extend_from_slice(&key);
    while buf.len() < len {
        let want = (len - buf.len()).min(READ_CHUNK);
        buf.reserve(want);
        let n = (&mut *rd)
            .take(want as u64)
            .read_buf(&mut buf)
            .await
            .map_err(|e| e.to_string())?;
        if n == 0 {
            return Err(format!(
                "connection closed mid-frame ({} of {len} bytes)",
                buf.len()
            ));
        }
    }
    Ok(buf.freeze())
}

/// Capture mode for the fuzz corpus (scripts/fuzz-capture): when the broker
/// was started with `KAAS_CAPTURE_DIR`, every request frame received is
/// written, length prefix included, to `<dir>/<api_key>-<version>-<n>.bin`.
/// Off (a no-op) unless configured, and always under the simulator.
fn capture_frame(dir: Option<&std::path::Path>, frame: &bytes::Bytes) {
    #[cfg(not(madsim))]
    if let Some(dir) = dir {
        use std::sync::atomic::{AtomicU64, Ordering};
        static CAPTURED: AtomicU64 = AtomicU64::new(0);
        let n = CAPTURED.fetch_add(1, Ordering::Relaxed);
        let field = |at: usize| {
            frame
                .get(at..at + 2)
                .map_or(-1, |b| i16::from_be_bytes([b[0], b[1]]))
        };
        let path = dir.join(format!("{}-{}-{n}.bin", field(0), field(2)));
        let mut bytes = Vec::with_capacity(frame.len() + 4);
        bytes.extend_from_slice(&(frame.len() as u32).to_be_bytes());
        bytes.extend_from_slice(frame);
        if let Err(e) = std::fs::write(&path, bytes) {
            tracing::warn!(path = %path.display(), error = %e, "cannot capture request frame");
        }
    }
    #[cfg(madsim)]
    let _ = (dir, frame);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn limits(max_connections: usize, per_ip: usize, budget: u32) -> Arc<ServerLimits> {
        let mut config = BrokerConfig::new(SocketAddr::from(([127, 0, 0, 1], 9092)));
        config.max_connections = max_connections;
        config.max_connections_per_ip = per_ip;
        config.queued_max_request_bytes = budget;
        ServerLimits::new(&config)
    }

    fn ip(last: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, last))
    }

    #[test]
    fn an_address_at_its_cap_is_refused_while_other_addresses_get_in() {
        let l = limits(10, 2, 1024);
        let a1 = l.admit(ip(1)).expect("first from .1");
        let _a2 = l.admit(ip(1)).expect("second from .1");
        assert_eq!(l.admit(ip(1)).err(), Some(Refusal::TooManyFromAddress));
        let _b = l.admit(ip(2)).expect("another address is not held back");
        assert_eq!(l.open_connections(), 3);
        drop(a1);
        let _a3 = l
            .admit(ip(1))
            .expect("a slot freed by a closed connection is reused");
    }

    #[test]
    fn the_total_cap_counts_every_address() {
        let l = limits(3, 2, 1024);
        let slots: Vec<_> = [1, 2, 3]
            .into_iter()
            .map(|i| l.admit(ip(i)).expect("under the cap"))
            .collect();
        assert_eq!(l.admit(ip(4)).err(), Some(Refusal::TooManyConnections));
        drop(slots);
        assert_eq!(l.open_connections(), 0);
        assert!(l.admit(ip(4)).is_ok());
    }

    #[test]
    fn an_ipv4_client_on_a_dual_stack_listener_counts_under_its_ipv4_address() {
        let l = limits(10, 1, 1024);
        let _v4 = l.admit(ip(1)).expect("first");
        let mapped = IpAddr::V6(Ipv4Addr::new(10, 0, 0, 1).to_ipv6_mapped());
        assert_eq!(l.admit(mapped).err(), Some(Refusal::TooManyFromAddress));
    }

    #[tokio::test]
    async fn a_frame_waits_until_it_fits_and_one_larger_than_the_budget_goes_alone() {
        let l = limits(10, 10, 100);
        let a = l.reserve(60).await.expect("fits");
        assert_eq!(l.queued_request_bytes(), 60);
        // 60 + 50 > 100: the second frame must wait for the first.
        let waiting = l.reserve(50);
        tokio::pin!(waiting);
        assert!(futures_poll_once(waiting.as_mut()).await.is_none());
        drop(a);
        let b = waiting.await.expect("fits once the first is answered");
        assert_eq!(l.queued_request_bytes(), 50);
        drop(b);
        // Larger than the whole budget: admitted when nothing else is queued.
        let huge = l.reserve(1_000).await.expect("no deadlock");
        assert_eq!(l.queued_request_bytes(), 1_000);
        drop(huge);
        assert_eq!(l.queued_request_bytes(), 0);
        assert_eq!(l.peak_queued_request_bytes(), 1_000);
    }

    /// Polls a future once: `Some` if it completed.
    async fn futures_poll_once<F: Future + Unpin>(f: F) -> Option<F::Output> {
        let mut f = f;
        std::future::poll_fn(|cx| {
            std::task::Poll::Ready(match std::pin::Pin::new(&mut f).poll(cx) {
                std::task::Poll::Ready(v) => Some(v),
                std::task::Poll::Pending => None,
            })
        })
        .await
    }
}
