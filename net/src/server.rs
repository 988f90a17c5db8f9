//! The TCP front end: accept connections, read frames, answer in order.
//!
//! Requests on one connection are handled one at a time and answered in
//! the order they arrived, as Kafka does (a client pipelines by sending
//! ahead; the broker reads the next frame only after answering). A slow
//! long-poll Fetch therefore holds up only its own connection.

use crate::broker::Broker;
use crate::handlers::{self, Outcome};
use bytes::BytesMut;
use kaas_core::protocol::frame::{check_api_frame_length, encode_response, frame_length};
use kaas_core::protocol::{decode_request, Request};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;

/// The body of a large frame is read in steps of at most this much, so
/// memory grows with bytes actually received, not with a claimed length.
const READ_CHUNK: usize = 1 << 20;

/// Accepts connections until `shutdown` completes.
pub async fn serve(broker: Arc<Broker>, listener: TcpListener, shutdown: impl Future<Output = ()>) {
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    tokio::spawn(run_connection(broker.clone(), stream, peer));
                }
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

/// Serves one client connection until it closes or misbehaves.
pub async fn run_connection<S>(broker: Arc<Broker>, stream: S, peer: SocketAddr)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (mut rd, mut wr) = tokio::io::split(stream);
    let max = broker.config.max_frame_bytes;
    loop {
        let frame = match read_frame(&mut rd, max, broker.config.max_non_produce_frame_bytes).await
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
                let outcome = handlers::dispatch(&broker, &header, body).await;
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
            Outcome::Silent => {}
            Outcome::Close(reason) => {
                tracing::info!(%peer, api_key = header.api_key, version = header.api_version, %reason, "closing connection");
                return;
            }
        }
    }
}

/// Reads one frame; `Ok(None)` on a clean close between frames.
async fn read_frame<R: AsyncRead + Unpin>(
    rd: &mut R,
    max: usize,
    max_non_produce: usize,
) -> Result<Option<bytes::Bytes>, String> {
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
    Ok(Some(buf.freeze()))
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
