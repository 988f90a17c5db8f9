//! A pipelined connection: several requests written before their answers
//! are read, as the Java producer does up to max.in.flight.
//!
//! `kaas_net::client::Connection` allows one request at a time; the broker
//! answers the requests of one connection in the order it read them, so a
//! pipelined client only has to send frames and read answers in order. The
//! caller keeps track of which request each answer belongs to (and checks
//! the correlation id with `kaas_net::client::decode_response`).
//!
//! After any error, or a read cut short by a timeout, the byte stream may be
//! out of step: the caller drops the connection.

use bytes::{Bytes, BytesMut};
use kaas_core::protocol::frame::DEFAULT_MAX_FRAME_BYTES;
use std::io;
use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub struct Pipeline {
    stream: TcpStream,
}

impl Pipeline {
    pub async fn connect(addr: SocketAddr) -> io::Result<Pipeline> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Pipeline { stream })
    }

    /// Writes one whole request frame (length prefix included).
    pub async fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        self.stream.write_all(frame).await?;
        // madsim's socket only sends on flush (a no-op on a real one).
        self.stream.flush().await
    }

    /// Reads the next answer frame, without its length prefix. A length
    /// prefix out of bounds is an error, never an allocation.
    pub async fn recv(&mut self) -> io::Result<Bytes> {
        let mut prefix = [0u8; 4];
        self.stream.read_exact(&mut prefix).await?;
        let claimed = i32::from_be_bytes(prefix);
        let len = usize::try_from(claimed)
            .ok()
            .filter(|&n| (4..=DEFAULT_MAX_FRAME_BYTES).contains(&n))
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("invalid response frame length {claimed}"),
                )
            })?;
        let mut buf = BytesMut::with_capacity(len.min(64 * 1024));
        while buf.len() < len {
            let want = (len - buf.len()) as u64;
            if (&mut self.stream).take(want).read_buf(&mut buf).await? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!(
                        "connection closed mid-response ({} of {len} bytes)",
                        buf.len()
                    ),
                ));
            }
        }
        Ok(buf.freeze())
    }
}
