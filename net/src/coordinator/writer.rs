//! The per-slot writer: group commit for coordinator state files.

use super::GroupCoordinator;
use crate::env::IoKind;
use kaas_core::layout::group_slot_file;
use kaas_core::protocol::ErrorCode;
use std::io;
use std::sync::Arc;

impl GroupCoordinator {
    /// Drains slot `slot`'s queue: each round takes everything queued so
    /// far, applies it to a copy of the durable state, writes the file once,
    /// then installs the copy and answers the waiting requests. Ops queued
    /// during a write go into the next round. Exits when the queue is empty.
    pub(super) async fn run_writer(self: Arc<Self>, slot: u32) {
        loop {
            let (ops, done, mut next) = {
                let mut inner = self.lock();
                let Some(state) = inner.core.slot(slot).cloned() else {
                    return;
                };
                let q = &mut inner.queues[slot as usize];
                if q.ops.is_empty() && q.done.is_empty() {
                    q.writing = false;
                    return;
                }
                (
                    std::mem::take(&mut q.ops),
                    std::mem::take(&mut q.done),
                    state,
                )
            };
            let mut changed = false;
            for op in &ops {
                changed |= next.apply(op);
            }
            let written = if changed {
                next.version += 1;
                self.write(slot, &next).await
            } else {
                Ok(())
            };
            let mut inner = self.lock();
            let now = self.env.now_ms();
            let result = match written {
                Ok(()) => {
                    if changed {
                        inner.core.install_slot(next, now);
                    }
                    Ok(())
                }
                Err(e) => {
                    tracing::error!(slot, error = %e, "cannot write group slot file; its changes are refused");
                    // Deletions already forgot their groups in memory; the
                    // slot still has their offsets, so bring them back.
                    if let Some(current) = inner.core.slot(slot).cloned() {
                        inner.core.install_slot(current, now);
                    }
                    // As Kafka answers when its log append fails on storage:
                    // the client looks up the coordinator again and retries.
                    Err(ErrorCode::NotCoordinator)
                }
            };
            for tx in done {
                let _ = tx.send(result);
            }
        }
    }

    async fn write(&self, slot: u32, state: &kaas_core::group::SlotState) -> io::Result<()> {
        let bytes = state.encode().map_err(io::Error::other)?;
        let volume = self.volume.clone();
        let path = group_slot_file(slot);
        // The write fsyncs: it runs on the IO runner, off the async workers.
        self.env
            .blocking(IoKind::Fsync, move || volume.write_atomic(&path, &bytes))
            .await
    }
}
