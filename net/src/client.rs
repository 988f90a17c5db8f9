//! A minimal Kafka client over kaas's own codec, for tests and for the
//! simulator's workload actors.
//!
//! One request at a time per [`Connection`]: write a frame, read its
//! response. It only uses `tokio::net::TcpStream` and the `tokio::io`
//! extension traits, which madsim-tokio re-exports (madsim's simulated
//! `TcpStream` implements tokio's `AsyncRead`/`AsyncWrite`), so the same code
//! talks to a real broker and to a simulated one.
//!
//! Nothing read from the network is trusted: a bad length prefix, a
//! response for another correlation id or an undecodable body is a
//! [`ClientError`], never a panic. After any error the connection's byte
//! stream may be out of step with its requests, so the connection refuses
//! further use and the caller reconnects.

use bytes::{BufMut, Bytes, BytesMut};
use kaas_core::protocol::frame::DEFAULT_MAX_FRAME_BYTES;
use kaas_core::protocol::header::response_header_version;
use kaas_core::protocol::{
    DecodeError, EncodeError, Reader, RequestBody, RequestHeader, ResponseBody, ResponseHeader,
    Writer,
};
use std::fmt;
use std::io;
use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Client id sent in request headers unless the caller picks another.
pub const DEFAULT_CLIENT_ID: &str = "kaas-client";

/// Why a request failed.
#[derive(Debug)]
pub enum ClientError {
    /// Connecting, writing or reading failed, or the peer closed.
    Io(io::Error),
    /// The request could not be encoded at the requested version.
    Encode(EncodeError),
    /// The response header or body could not be decoded.
    Decode(DecodeError),
    /// The response length prefix is negative or above the limit.
    InvalidFrameLength(i32),
    /// The response answers another request.
    CorrelationMismatch { expected: i32, got: i32 },
    /// An earlier request on this connection failed or was cancelled part
    /// way (e.g. by a timeout), so the byte stream is out of step.
    Desynchronized,
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Io(e) => write!(f, "i/o error: {e}"),
            ClientError::Encode(e) => write!(f, "cannot encode request: {e}"),
            ClientError::Decode(e) => write!(f, "cannot decode response: {e}"),
            ClientError::InvalidFrameLength(n) => write!(f, "invalid response frame length {n}"),
            ClientError::CorrelationMismatch { expected, got } => {
                write!(f, "response correlation id {got}, expected {expected}")
            }
            ClientError::Desynchronized => {
                write!(
                    f,
                    "connection unusable after an earlier failed or cancelled request"
                )
            }
        }
    }
}

impl std::error::Error for ClientError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ClientError::Io(e) => Some(e),
            ClientError::Encode(e) => Some(e),
            ClientError::Decode(e) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for ClientError {
    fn from(e: io::Error) -> Self {
        ClientError::Io(e)
    }
}

impl From<EncodeError> for ClientError {
    fn from(e: EncodeError) -> Self {
        ClientError::Encode(e)
    }
}

impl From<DecodeError> for ClientError {
    fn from(e: DecodeError) -> Self {
        ClientError::Decode(e)
    }
}

/// Encodes a whole request frame: length prefix, header, body.
///
/// Exposed so a caller can keep the exact bytes of a request and resend
/// them (an idempotent producer's retry) with [`Connection::send_raw_frame`].
pub fn encode_request(
    api_key: i16,
    api_version: i16,
    correlation_id: i32,
    client_id: Option<&str>,
    body: &RequestBody,
) -> Result<Bytes, EncodeError> {
    let mut buf = BytesMut::with_capacity(256);
    buf.put_i32(0);
    {
        let mut w = Writer::new(&mut buf);
        let header = RequestHeader {
            api_key,
            api_version,
            correlation_id,
            client_id: client_id.map(str::to_owned),
            unknown_tagged_fields: Vec::new(),
        };
        header.encode(&mut w)?;
        body.encode(&mut w, api_version)?;
    }
    let len = i32::try_from(buf.len() - 4).map_err(|_| EncodeError::TooLong("request frame"))?;
    buf[0..4].copy_from_slice(&len.to_be_bytes());
    Ok(buf.freeze())
}

/// A Produce request for one batch to one partition: what tests and
/// simulation workloads send most.
pub fn single_partition_produce(
    topic: &str,
    partition: i32,
    records: Bytes,
    acks: i16,
    timeout_ms: i32,
) -> RequestBody {
    produce_to_partitions(topic, [(partition, records)], acks, timeout_ms)
}

/// A Produce request for one batch to each of several partitions of
/// `topic`, (partition, records) in request order, as clients batch them
/// per broker.
pub fn produce_to_partitions(
    topic: &str,
    batches: impl IntoIterator<Item = (i32, Bytes)>,
    acks: i16,
    timeout_ms: i32,
) -> RequestBody {
    produce_to_topics([(topic, batches.into_iter().collect())], acks, timeout_ms)
}

/// A Produce request for several topics at once, each with its
/// (partition, records) batches, topics and partitions in request order:
/// what a client sends a broker that leads partitions of more than one
/// topic it writes.
pub fn produce_to_topics<'a>(
    topics: impl IntoIterator<Item = (&'a str, Vec<(i32, Bytes)>)>,
    acks: i16,
    timeout_ms: i32,
) -> RequestBody {
    use kaas_core::protocol::messages::{produce_request, ProduceRequest};
    RequestBody::Produce(ProduceRequest {
        acks,
        timeout_ms,
        topic_data: topics
            .into_iter()
            .map(|(topic, batches)| produce_request::TopicProduceData {
                name: topic.into(),
                partition_data: batches
                    .into_iter()
                    .map(|(index, records)| produce_request::PartitionProduceData {
                        index,
                        records: Some(records),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    })
}

/// A Fetch of one partition from `offset` (up to 1 MiB), checking the
/// client's view of the leader epoch (`-1`: unchecked): the Fetch tests and
/// workloads send most.
pub fn single_partition_fetch(
    topic: &str,
    partition: i32,
    offset: i64,
    current_leader_epoch: i32,
    max_wait_ms: i32,
) -> RequestBody {
    use kaas_core::protocol::messages::{fetch_request, FetchRequest};
    RequestBody::Fetch(FetchRequest {
        replica_id: -1,
        max_wait_ms,
        min_bytes: 1,
        max_bytes: 1 << 20,
        topics: vec![fetch_request::FetchTopic {
            topic: topic.into(),
            partitions: vec![fetch_request::FetchPartition {
                partition,
                fetch_offset: offset,
                partition_max_bytes: 1 << 20,
                current_leader_epoch,
                log_start_offset: -1,
                last_fetched_epoch: -1,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    })
}

/// Decodes a response frame's content (without its length prefix) as the
/// answer to `api_key` at `api_version` with `correlation_id`.
pub fn decode_response(
    api_key: i16,
    api_version: i16,
    correlation_id: i32,
    frame: Bytes,
) -> Result<ResponseBody, ClientError> {
    let mut r = Reader::new(frame);
    let header = ResponseHeader::decode(&mut r, response_header_version(api_key, api_version))?;
    if header.correlation_id != correlation_id {
        return Err(ClientError::CorrelationMismatch {
            expected: correlation_id,
            got: header.correlation_id,
        });
    }
    let body = ResponseBody::decode(api_key, api_version, &mut r)?;
    r.finish()?;
    Ok(body)
}

/// The correlation id of a request frame (with its length prefix), if the
/// frame is long enough to hold one.
pub fn frame_correlation_id(frame: &[u8]) -> Option<i32> {
    let bytes = frame.get(8..12)?;
    Some(i32::from_be_bytes(bytes.try_into().ok()?))
}

/// One connection to a broker.
pub struct Connection {
    stream: TcpStream,
    peer: SocketAddr,
    client_id: Option<String>,
    next_correlation_id: i32,
    max_response_bytes: usize,
    /// Set while a request is between its first write and the end of its
    /// response. Still set when the next request starts means the previous
    /// one was abandoned half-way (an error, or its future was dropped by a
    /// timeout), so the stream can no longer be trusted.
    in_flight: bool,
}

impl Connection {
    /// Connects to `addr`.
    pub async fn connect(addr: SocketAddr) -> io::Result<Connection> {
        let stream = TcpStream::connect(addr).await?;
        // Requests are small and answered one at a time: do not let Nagle
        // hold them back.
        stream.set_nodelay(true)?;
        Ok(Connection {
            stream,
            peer: addr,
            client_id: Some(DEFAULT_CLIENT_ID.to_owned()),
            next_correlation_id: 0,
            max_response_bytes: DEFAULT_MAX_FRAME_BYTES,
            in_flight: false,
        })
    }

    /// Sets the client id of later requests (`None` sends a null id).
    pub fn with_client_id(mut self, client_id: Option<&str>) -> Self {
        self.client_id = client_id.map(str::to_owned);
        self
    }

    /// Sets the largest response frame accepted; a larger length prefix is
    /// an error before anything is allocated for it.
    pub fn with_max_response_bytes(mut self, max: usize) -> Self {
        self.max_response_bytes = max;
        self
    }

    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// The correlation id the next [`send`](Self::send) will use.
    pub fn next_correlation_id(&self) -> i32 {
        self.next_correlation_id
    }

    /// Takes a correlation id for a request the caller encodes itself.
    pub fn take_correlation_id(&mut self) -> i32 {
        let id = self.next_correlation_id;
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1);
        id
    }

    /// Sends `body` as `api_key` at `version` and waits for its response.
    ///
    /// Not for Produce with acks=0, which gets no response: use
    /// [`send_oneway`](Self::send_oneway).
    pub async fn send(
        &mut self,
        api_key: i16,
        version: i16,
        body: &RequestBody,
    ) -> Result<ResponseBody, ClientError> {
        let correlation_id = self.take_correlation_id();
        let frame = encode_request(
            api_key,
            version,
            correlation_id,
            self.client_id.as_deref(),
            body,
        )?;
        let response = self.send_raw_frame(&frame).await?;
        let decoded = decode_response(api_key, version, correlation_id, response);
        if decoded.is_err() {
            // The frame boundary is intact, but a peer that answers
            // something we cannot read is not worth talking to further.
            self.in_flight = true;
        }
        decoded
    }

    /// Sends a request that gets no response (Produce with acks=0).
    pub async fn send_oneway(
        &mut self,
        api_key: i16,
        version: i16,
        body: &RequestBody,
    ) -> Result<(), ClientError> {
        let correlation_id = self.take_correlation_id();
        let frame = encode_request(
            api_key,
            version,
            correlation_id,
            self.client_id.as_deref(),
            body,
        )?;
        self.begin()?;
        self.write_frame(&frame).await?;
        self.in_flight = false;
        Ok(())
    }

    /// Writes `frame` exactly as given (length prefix included) and returns
    /// the next response frame without its length prefix.
    ///
    /// For retries that must resend the very same bytes; decode the answer
    /// with [`decode_response`] and [`frame_correlation_id`].
    pub async fn send_raw_frame(&mut self, frame: &[u8]) -> Result<Bytes, ClientError> {
        self.begin()?;
        self.write_frame(frame).await?;
        let response = self.read_frame().await?;
        self.in_flight = false;
        Ok(response)
    }

    fn begin(&mut self) -> Result<(), ClientError> {
        if self.in_flight {
            return Err(ClientError::Desynchronized);
        }
        self.in_flight = true;
        Ok(())
    }

    async fn write_frame(&mut self, frame: &[u8]) -> Result<(), ClientError> {
        self.stream.write_all(frame).await?;
        // A real socket sends on write; madsim's simulated one only on
        // flush. Flushing is a no-op on a real socket, so always do it.
        self.stream.flush().await?;
        Ok(())
    }

    async fn read_frame(&mut self) -> Result<Bytes, ClientError> {
        let mut prefix = [0u8; 4];
        self.stream.read_exact(&mut prefix).await?;
        let claimed = i32::from_be_bytes(prefix);
        let len = usize::try_from(claimed)
            .ok()
            .filter(|&n| n >= 4 && n <= self.max_response_bytes)
            .ok_or(ClientError::InvalidFrameLength(claimed))?;
        // Grow with what arrives rather than trusting the claimed length
        // for one big allocation.
        let mut buf = BytesMut::with_capacity(len.min(64 * 1024));
        while buf.len() < len {
            let want = (len - buf.len()) as u64;
            let n = (&mut self.stream).take(want).read_buf(&mut buf).await?;
            if n == 0 {
                return Err(ClientError::Io(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!(
                        "connection closed mid-response ({} of {len} bytes)",
                        buf.len()
                    ),
                )));
            }
        }
        Ok(buf.freeze())
    }
}

#[cfg(test)]
#[cfg(not(madsim))]
mod tests {
    use super::*;
    use crate::config::BrokerConfig;
    use crate::volume::LocalVolume;
    use crate::Broker;
    use kaas_core::protocol::messages::*;
    use kaas_core::record::BatchBuilder;
    use std::sync::Arc;

    async fn start_broker() -> (tempfile::TempDir, SocketAddr) {
        let dir = tempfile::tempdir().unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let volume = Arc::new(LocalVolume::new(dir.path()).unwrap());
        let broker =
            Broker::open(BrokerConfig::new(addr), volume, crate::env::Env::system()).unwrap();
        tokio::spawn(crate::server::serve(
            broker,
            listener,
            std::future::pending(),
        ));
        (dir, addr)
    }

    fn produce_body(topic: &str, value: &[u8]) -> RequestBody {
        let batch = BatchBuilder::new().record(1, None, Some(value)).build();
        single_partition_produce(topic, 0, batch.into_bytes(), -1, 5000)
    }

    #[tokio::test]
    async fn api_versions_round_trip_with_increasing_correlation_ids() {
        let (_dir, addr) = start_broker().await;
        let mut conn = Connection::connect(addr).await.unwrap();
        for expected in 0..3 {
            assert_eq!(conn.next_correlation_id(), expected);
            let body = RequestBody::ApiVersions(ApiVersionsRequest::default());
            match conn
                .send(api_versions_request::API_KEY, 3, &body)
                .await
                .unwrap()
            {
                ResponseBody::ApiVersions(resp) => {
                    assert_eq!(resp.error_code, 0);
                    assert!(resp
                        .api_keys
                        .iter()
                        .any(|k| k.api_key == produce_request::API_KEY));
                }
                other => panic!("unexpected response {other:?}"),
            }
        }
    }

    #[tokio::test]
    async fn produce_then_fetch_and_resend_the_same_frame() {
        let (_dir, addr) = start_broker().await;
        let mut conn = Connection::connect(addr).await.unwrap();
        let base_offset = |body: ResponseBody| match body {
            ResponseBody::Produce(resp) => {
                let p = &resp.responses[0].partition_responses[0];
                assert_eq!(p.error_code, 0);
                p.base_offset
            }
            other => panic!("unexpected response {other:?}"),
        };
        let first = conn
            .send(produce_request::API_KEY, 9, &produce_body("t", b"a"))
            .await
            .unwrap();
        assert_eq!(base_offset(first), 0);

        // The same bytes twice: a plain producer's retry appends again.
        let id = conn.take_correlation_id();
        let frame = encode_request(
            produce_request::API_KEY,
            9,
            id,
            Some("raw"),
            &produce_body("t", b"b"),
        )
        .unwrap();
        assert_eq!(frame_correlation_id(&frame), Some(id));
        for expected in [1, 2] {
            let raw = conn.send_raw_frame(&frame).await.unwrap();
            let body = decode_response(produce_request::API_KEY, 9, id, raw).unwrap();
            assert_eq!(base_offset(body), expected);
        }

        let fetch = single_partition_fetch("t", 0, 0, -1, 0);
        match conn.send(fetch_request::API_KEY, 12, &fetch).await.unwrap() {
            ResponseBody::Fetch(resp) => {
                let p = &resp.responses[0].partitions[0];
                assert_eq!((p.error_code, p.high_watermark), (0, 3));
                let values: Vec<Bytes> =
                    kaas_core::record::split_batches(p.records.clone().unwrap())
                        .flat_map(|b| {
                            b.records()
                                .map(|r| r.unwrap().value.unwrap())
                                .collect::<Vec<_>>()
                        })
                        .collect();
                assert_eq!(values, vec![&b"a"[..], b"b", b"b"]);
            }
            other => panic!("unexpected response {other:?}"),
        }
    }

    #[tokio::test]
    async fn mismatched_correlation_id_is_an_error_and_poisons_the_connection() {
        let (_dir, addr) = start_broker().await;
        let mut conn = Connection::connect(addr).await.unwrap();
        let body = RequestBody::ApiVersions(ApiVersionsRequest::default());
        let frame = encode_request(api_versions_request::API_KEY, 3, 7, None, &body).unwrap();
        let raw = conn.send_raw_frame(&frame).await.unwrap();
        assert!(matches!(
            decode_response(api_versions_request::API_KEY, 3, 8, raw),
            Err(ClientError::CorrelationMismatch {
                expected: 8,
                got: 7
            })
        ));
        // A request abandoned half-way leaves the connection unusable.
        conn.in_flight = true;
        assert!(matches!(
            conn.send(api_versions_request::API_KEY, 3, &body).await,
            Err(ClientError::Desynchronized)
        ));
    }

    #[test]
    fn decode_response_rejects_garbage_without_panicking() {
        for garbage in [&b""[..], b"\x00\x00", b"\x00\x00\x00\x01\xff\xff\xff\xff"] {
            assert!(decode_response(3, 12, 1, Bytes::copy_from_slice(garbage)).is_err());
        }
    }
}
