//! kaas-net: the real driver of kaas.
//!
//! It owns everything with side effects: the TCP server, the request
//! handlers, the `Volume` on the OS file system, the partition logs and the
//! timers. The rules it enforces live in `kaas_core`.

pub mod broker;
pub mod buggify;
pub mod client;
pub mod cluster;
pub mod config;
pub mod coordinator;
pub mod entropy;
pub mod env;
pub mod handlers;
pub mod log;
pub mod server;
pub mod slot_store;
pub mod transactions;
pub mod volume;
pub mod witness;

pub use broker::Broker;
pub use config::BrokerConfig;
