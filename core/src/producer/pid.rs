//! Producer id arithmetic. PIDs are never reused: each broker owns a slice
//! of the id space, `(broker_id + 1) * 2^40 + local`, and hands out `local`
//! in blocks whose end is persisted before any id of the block is used, so
//! a crash can only skip ids forward.

/// Ids per persisted block.
pub const PID_BLOCK_SIZE: i64 = 1000;

const SLICE_BITS: u32 = 40;

/// The producer id for `local` in `broker_id`'s slice. `+ 1` keeps broker 0
/// clear of the low ids other allocators hand out.
pub fn pid_for(broker_id: i32, local: i64) -> i64 {
    ((i64::from(broker_id) + 1) << SLICE_BITS) + local
}

/// The `local` values a broker may use: its slice must not reach the next
/// broker's.
pub fn local_pid_range() -> std::ops::Range<i64> {
    0..(1i64 << SLICE_BITS)
}

/// A block of ids being handed out: `next..end` remain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PidBlock {
    pub next: i64,
    pub end: i64,
}

impl PidBlock {
    /// The block that starts where the persisted allocation ended. The
    /// caller must persist `block.end` before taking ids from it.
    pub fn starting_at(start: i64) -> PidBlock {
        PidBlock {
            next: start,
            end: start + PID_BLOCK_SIZE,
        }
    }

    /// The next local id, or `None` when the block is used up.
    pub fn take(&mut self) -> Option<i64> {
        (self.next < self.end).then(|| {
            self.next += 1;
            self.next - 1
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pid_slices_of_brokers_never_overlap() {
        let r = local_pid_range();
        assert!(pid_for(0, r.end - 1) < pid_for(1, 0));
        assert!(pid_for(0, 0) > 0);
        assert_eq!(pid_for(2, 5), (3 << 40) + 5);
    }

    #[test]
    fn a_block_hands_out_each_id_once_then_runs_dry() {
        let mut b = PidBlock::starting_at(2000);
        let ids: Vec<i64> = std::iter::from_fn(|| b.take()).collect();
        assert_eq!(ids.len() as i64, PID_BLOCK_SIZE);
        assert_eq!(ids[0], 2000);
        assert_eq!(*ids.last().unwrap(), 2999);
        assert_eq!(b.take(), None);
    }
}
