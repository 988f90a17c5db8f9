//! The exactly-once loop's input: a plain acks=all producer writing small
//! batches to [`EOS_INPUT_TOPIC`] while faults run. The loop has its own
//! input, rather than the plain producers' topic, so that its share of a
//! seed's run time stays small whatever those producers' throughput.
//!
//! Without idempotence a retried batch may be in the log twice: each copy
//! is an input record of its own (the loop's rules are about input
//! offsets), so that is fine.

use crate::eos_history::EOS_INPUT_TOPIC;
use crate::params::SimParams;
use crate::routes::Routes;
use crate::workload::{retriable, Backoff, RequestError, Shared, PRODUCE_VERSION};
use bytes::Bytes;
use kaas_core::protocol::messages::produce_request;
use kaas_core::protocol::ResponseBody;
use kaas_core::record::{BatchBuilder, NewRecord};
use kaas_net::client::{decode_response, encode_request, single_partition_produce};
use madsim::rand::{thread_rng, Rng};
use madsim::time::sleep;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

const PRODUCE_TIMEOUT_MS: i32 = 5_000;
/// A batch is given up (maybe written, maybe not) after this many attempts.
const MAX_ATTEMPTS: u32 = 40;

/// Produces input batches until the producers are told to stop.
pub async fn eos_input_producer(params: SimParams, brokers: Vec<SocketAddr>, shared: Arc<Shared>) {
    let mut routes = Routes::new("eos-input", &brokers);
    let mut backoff = Backoff::new();
    let mut batch_no: i32 = 0;
    while !shared.stop_producing.load(Ordering::Relaxed) {
        let (partition, count, think) = {
            let mut rng = thread_rng();
            (
                rng.gen_range(0..params.partitions),
                rng.gen_range(1..=8),
                Duration::from_millis(rng.gen_range(20..=200)),
            )
        };
        let mut builder = BatchBuilder::new();
        let now = crate::env::wall_ms();
        for r in 0..count {
            builder.push(NewRecord::new(
                now,
                None,
                Some(&Bytes::from(format!("in-b{batch_no}-r{r}"))),
            ));
        }
        let body = single_partition_produce(
            EOS_INPUT_TOPIC,
            partition,
            builder.build().into_bytes(),
            -1,
            PRODUCE_TIMEOUT_MS,
        );
        let frame = match encode_request(
            produce_request::API_KEY,
            PRODUCE_VERSION,
            batch_no,
            Some("sim-eos-input"),
            &body,
        ) {
            Ok(f) => f,
            Err(e) => {
                shared
                    .eos()
                    .violation(format!("EOS input: cannot encode a produce request: {e}"));
                return;
            }
        };
        for _ in 0..MAX_ATTEMPTS {
            let sent = routes
                .produce(EOS_INPUT_TOPIC, partition, &frame, &shared)
                .await;
            let code = match sent {
                Ok(response) => {
                    match decode_response(
                        produce_request::API_KEY,
                        PRODUCE_VERSION,
                        batch_no,
                        response,
                    )
                    .map_err(RequestError::of)
                    .and_then(|b| error_code(b, partition))
                    {
                        Ok(code) => code,
                        Err(RequestError::Malformed(e)) => {
                            shared
                                .eos()
                                .violation(format!("EOS input: malformed produce answer: {e}"));
                            routes.disconnect_all();
                            -1
                        }
                        Err(RequestError::Network(_)) => -1,
                    }
                }
                Err(_) => -1,
            };
            if code != -1 {
                routes.partition_outcome(EOS_INPUT_TOPIC, Some(code), &shared);
            }
            if code == 0 {
                shared.eos().stats.input_acked += count as u64;
                backoff.reset();
                break;
            }
            if code != -1 && !retriable(code) {
                shared.eos().violation(format!(
                    "EOS input: produce failed with non-retriable error {code}"
                ));
                break;
            }
            backoff.wait().await;
        }
        batch_no += 1;
        sleep(think).await;
    }
}

/// The error code of the one partition a produce carried.
fn error_code(body: ResponseBody, partition: i32) -> Result<i16, RequestError> {
    let ResponseBody::Produce(resp) = body else {
        return Err(RequestError::Malformed(
            "produce answered with another response type".into(),
        ));
    };
    resp.responses
        .iter()
        .filter(|t| t.name == EOS_INPUT_TOPIC)
        .flat_map(|t| &t.partition_responses)
        .find(|p| p.index == partition)
        .map(|p| p.error_code)
        .ok_or_else(|| {
            RequestError::Malformed(format!("produce response lacks partition {partition}"))
        })
}
