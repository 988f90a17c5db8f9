//! The written scenarios, one module per area. Each is an async function
//! over a [`Session`] that sends requests and writes down what it sees;
//! it never knows which broker it talks to.

mod admin;
mod compaction;
mod fetch;
pub(crate) mod groups;
mod idempotence;
mod offsets;
mod produce;
mod transactions;
mod versions;

use crate::session::{Session, Step};
use std::future::Future;
use std::pin::Pin;

pub type BoxedRun<'a> = Pin<Box<dyn Future<Output = Step> + Send + 'a>>;
pub type Run = for<'a> fn(&'a mut Session) -> BoxedRun<'a>;

pub struct Scenario {
    pub name: &'static str,
    pub about: &'static str,
    pub run: Run,
}

/// Registers an `async fn(&mut Session) -> Step` as a scenario.
macro_rules! scenario {
    ($name:literal, $about:literal, $f:path) => {
        $crate::scenarios::Scenario {
            name: $name,
            about: $about,
            run: |s| Box::pin($f(s)),
        }
    };
}
pub(crate) use scenario;

/// Scenarios that run with no other scenario at once. Kafka answers
/// them differently when another client's request is handled at the same
/// moment: its partition leaders verify transactional writes with the
/// transaction coordinator in one batch per coordinator, and the whole
/// batch maps TRANSACTION_ABORTABLE to what the first request's version
/// understands (AddPartitionsToTxnManager), so an old Produce or
/// TxnOffsetCommit next to a new one may get the new one's error.
pub const ALONE: &[&str] = &["txn/produce-not-added", "txn/offset-commit-errors"];

/// Every scenario, in the order they run.
pub fn all() -> Vec<Scenario> {
    let mut v = Vec::new();
    v.extend(versions::scenarios());
    v.extend(produce::scenarios());
    v.extend(idempotence::scenarios());
    v.extend(fetch::scenarios());
    v.extend(offsets::scenarios());
    v.extend(admin::scenarios());
    v.extend(compaction::scenarios());
    v.extend(groups::scenarios());
    // Transactions (issue 10): written against Kafka 4.1.1 while kaas's
    // coordinator is being built; this one line registers them all.
    v.extend(transactions::scenarios());
    v
}
