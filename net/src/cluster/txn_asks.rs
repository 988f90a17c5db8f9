//! The coordinator queue on the volume (`kaas_core::txn::coordinator_queue`):
//! [`ask`] puts a question to the transaction coordinator on another broker
//! and waits for its answer; [`serve_once`] (run by the marker watcher)
//! answers the questions queued for this broker as local requests would be
//! answered.

use crate::broker::Broker;
use crate::entropy;
use crate::env::IoKind;
use kaas_core::layout::{
    txn_answer_dir, txn_answer_file, txn_ask_dir, txn_ask_file, txn_ask_of_file, TXN_ASKS_DIR,
};
use kaas_core::protocol::ErrorCode;
use kaas_core::txn::coordinator_queue::{
    error_of_answer, AskKind, CoordinatorAnswer, CoordinatorAsk, COORDINATOR_QUEUE_VERSION,
};
use std::io;
use std::sync::Arc;
use std::time::Duration;

/// How long an asker waits for the coordinator: then the request gets a
/// retriable answer and the client asks again.
const ANSWER_WAIT_MS: i64 = 5_000;

/// How often an asker looks for its answer.
const POLL_MS: u64 = 20;

/// What to ask.
pub struct Question<'a> {
    pub kind: AskKind,
    pub transactional_id: &'a str,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub partitions: &'a [(String, i32)],
    pub groups: &'a [String],
}

fn storage(e: io::Error) -> ErrorCode {
    tracing::warn!(error = %e, "coordinator queue volume error");
    ErrorCode::CoordinatorNotAvailable
}

/// The live broker holding the transaction slot of `transactional_id`, if
/// it is another broker: the one to ask.
pub fn remote_coordinator(broker: &Broker, transactional_id: &str) -> Option<i32> {
    let slot = kaas_core::cluster::coordinator_slot(transactional_id);
    let claim = broker.transactions.slot_claim(slot)?;
    let live = broker.membership.live_ids(broker.env.clock.monotonic_ms());
    (claim.broker_id != broker.config.broker_id && live.contains(&claim.broker_id))
        .then_some(claim.broker_id)
}

/// Asks coordinator `coordinator` and returns its decision.
/// COORDINATOR_NOT_AVAILABLE when it did not answer in time.
pub async fn ask(broker: &Arc<Broker>, coordinator: i32, q: Question<'_>) -> Result<(), ErrorCode> {
    let me = broker.config.broker_id;
    let nonce = entropy::random_u64();
    let asked = CoordinatorAsk {
        version: COORDINATOR_QUEUE_VERSION,
        from: me,
        nonce,
        kind: q.kind,
        transactional_id: q.transactional_id.to_string(),
        producer_id: q.producer_id,
        producer_epoch: q.producer_epoch,
        partitions: q.partitions.to_vec(),
        groups: q.groups.to_vec(),
    };
    let bytes = asked.encode().map_err(|_| ErrorCode::UnknownServerError)?;
    let volume = broker.volume.clone();
    broker
        .env
        .blocking(IoKind::Fsync, move || {
            volume.create_dir_all(&txn_ask_dir(coordinator))?;
            volume.write_atomic(&txn_ask_file(coordinator, nonce), &bytes)
        })
        .await
        .map_err(storage)?;
    let deadline = broker.env.clock.monotonic_ms() + ANSWER_WAIT_MS;
    let answer = loop {
        let volume = broker.volume.clone();
        let read = broker
            .env
            .blocking(IoKind::Buffered, move || {
                volume.read(&txn_answer_file(me, nonce))
            })
            .await
            .map_err(storage)?;
        if let Some(bytes) = read {
            break CoordinatorAnswer::decode(&bytes, nonce)
                .map(|a| error_of_answer(a.error_code))
                .unwrap_or(Err(ErrorCode::UnknownServerError));
        }
        if broker.env.clock.monotonic_ms() >= deadline {
            break Err(ErrorCode::CoordinatorNotAvailable);
        }
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    };
    // The ask goes either way; its answer is the coordinator's to remove.
    let volume = broker.volume.clone();
    let _ = broker
        .env
        .blocking(IoKind::Buffered, move || {
            volume.remove(&txn_ask_file(coordinator, nonce))
        })
        .await;
    answer
}

/// Answers every ask queued for this broker that has no answer yet.
pub async fn serve_once(broker: &Arc<Broker>) -> io::Result<()> {
    let me = broker.config.broker_id;
    let volume = broker.volume.clone();
    let asks = broker
        .env
        .blocking(IoKind::Buffered, move || {
            let mut asks = Vec::new();
            for name in volume.list(&txn_ask_dir(me))? {
                let Some(nonce) = txn_ask_of_file(&name) else {
                    continue;
                };
                let Some(bytes) = volume.read(&txn_ask_file(me, nonce))? else {
                    continue;
                };
                match CoordinatorAsk::decode(&bytes) {
                    Ok(ask) if ask.nonce == nonce => {
                        if volume.read(&txn_answer_file(ask.from, nonce))?.is_none() {
                            asks.push(ask);
                        }
                    }
                    Ok(_) => {
                        tracing::warn!(file = %name, "an ask in another ask's file; ignoring it")
                    }
                    Err(e) => tracing::warn!(file = %name, error = %e, "ignoring an ask"),
                }
            }
            Ok(asks)
        })
        .await?;
    for ask in asks {
        let decided = decide(broker, &ask).await;
        let answer = CoordinatorAnswer {
            version: COORDINATOR_QUEUE_VERSION,
            nonce: ask.nonce,
            by: me,
            error_code: decided.err().unwrap_or(ErrorCode::None).code(),
        };
        let bytes = answer.encode().map_err(io::Error::other)?;
        let volume = broker.volume.clone();
        broker
            .env
            .blocking(IoKind::Fsync, move || {
                volume.create_dir_all(&txn_answer_dir(ask.from))?;
                volume.write_atomic(&txn_answer_file(ask.from, ask.nonce), &bytes)
            })
            .await?;
    }
    Ok(())
}

/// What a local request would have been answered.
async fn decide(broker: &Arc<Broker>, ask: &CoordinatorAsk) -> Result<(), ErrorCode> {
    let id = ask.transactional_id.as_str();
    let coordinator = broker.txn_coordinator(id)?;
    match ask.kind {
        AskKind::Add => {
            coordinator
                .add_to_transaction(
                    id,
                    ask.producer_id,
                    ask.producer_epoch,
                    &ask.partitions,
                    &ask.groups,
                )
                .await
        }
        AskKind::VerifyPartitions => ask
            .partitions
            .iter()
            .try_for_each(|p| coordinator.verify(id, ask.producer_id, ask.producer_epoch, p)),
        AskKind::VerifyGroup => ask
            .groups
            .iter()
            .try_for_each(|g| coordinator.verify_group(id, ask.producer_id, ask.producer_epoch, g)),
    }
}

/// Removes answers this broker wrote whose ask is gone (the asker read
/// them, or gave up).
pub async fn collect_answers(broker: &Arc<Broker>) -> io::Result<()> {
    let me = broker.config.broker_id;
    let volume = broker.volume.clone();
    broker
        .env
        .blocking(IoKind::Buffered, move || {
            for dir in volume.list(&format!("{TXN_ASKS_DIR}/answers"))? {
                let Some(asker) = dir.strip_prefix("to-").and_then(|a| a.parse::<i32>().ok())
                else {
                    continue;
                };
                for name in volume.list(&txn_answer_dir(asker))? {
                    let Some(nonce) = txn_ask_of_file(&name) else {
                        continue;
                    };
                    let Some(bytes) = volume.read(&txn_answer_file(asker, nonce))? else {
                        continue;
                    };
                    let mine = CoordinatorAnswer::decode(&bytes, nonce).is_ok_and(|a| a.by == me);
                    if mine && volume.read(&txn_ask_file(me, nonce))?.is_none() {
                        volume.remove(&txn_answer_file(asker, nonce))?;
                    }
                }
            }
            Ok(())
        })
        .await
}
