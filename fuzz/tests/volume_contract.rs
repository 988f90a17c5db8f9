//! The fuzz targets' in-memory volume keeps the `Volume` contract, so what
//! the state-file targets find about the broker's recovery holds on the
//! real volume too.

use kaas_fuzz::mem_volume::MemVolume;
use kaas_net::volume::contract::{run_all, Fresh};
use std::sync::Arc;

#[test]
fn mem_volume_meets_the_volume_contract() {
    run_all(&|| Fresh::new(Arc::new(MemVolume::new())));
}
