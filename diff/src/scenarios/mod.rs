//! The written scenarios, one module per area. Each is an async function
//! over a [`Session`] that sends requests and writes down what it sees;
//! it never knows which broker it talks to.

mod admin;
mod fetch;
pub(crate) mod groups;
mod idempotence;
mod offsets;
mod produce;
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

/// Every scenario, in the order they run.
pub fn all() -> Vec<Scenario> {
    let mut v = Vec::new();
    v.extend(versions::scenarios());
    v.extend(produce::scenarios());
    v.extend(idempotence::scenarios());
    v.extend(fetch::scenarios());
    v.extend(offsets::scenarios());
    v.extend(admin::scenarios());
    v.extend(groups::scenarios());
    v
}
