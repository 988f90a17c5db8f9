//! Counting what a piece of code allocates, to check the decode path's
//! memory bound: a hostile length prefix must never turn into a large
//! allocation (KAFKA-14063), so decoding a frame may allocate at most a
//! small multiple of the frame's size.
//!
//! The global allocator of every binary linking this crate forwards to the
//! system allocator and, on a thread inside [`measure`], tracks the peak of
//! live bytes allocated since the measurement started and the largest
//! single allocation. Counters are thread-local (const-initialised `Cell`s,
//! which need no allocation or destructor), so tests running in parallel do
//! not disturb each other.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Meter;

#[global_allocator]
static METER: Meter = Meter;

thread_local! {
    static ACTIVE: Cell<bool> = const { Cell::new(false) };
    /// Net bytes allocated since the measurement started (frees of older
    /// memory can drive it below zero).
    static LIVE: Cell<i64> = const { Cell::new(0) };
    static PEAK: Cell<i64> = const { Cell::new(0) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn on_alloc(size: usize) {
    let _ = ACTIVE.try_with(|active| {
        if active.get() {
            let live = LIVE.with(|l| {
                let v = l.get().saturating_add(size as i64);
                l.set(v);
                v
            });
            PEAK.with(|p| p.set(p.get().max(live)));
            LARGEST.with(|m| m.set(m.get().max(size)));
        }
    });
}

fn on_free(size: usize) {
    let _ = ACTIVE.try_with(|active| {
        if active.get() {
            LIVE.with(|l| l.set(l.get().saturating_sub(size as i64)));
        }
    });
}

// SAFETY: every call is forwarded unchanged to the system allocator; the
// bookkeeping touches only thread-local `Cell`s and never allocates.
unsafe impl GlobalAlloc for Meter {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as ours.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            on_alloc(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as ours.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            on_alloc(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) };
        on_free(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as ours.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            on_free(layout.size());
            on_alloc(new_size);
        }
        p
    }
}

/// What a measured closure allocated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// Highest net number of bytes live at once during the call.
    pub peak_bytes: usize,
    /// The largest single allocation.
    pub largest_bytes: usize,
}

/// Runs `f` and reports its allocations on this thread. Not reentrant.
pub fn measure<R>(f: impl FnOnce() -> R) -> (R, Usage) {
    LIVE.with(|l| l.set(0));
    PEAK.with(|p| p.set(0));
    LARGEST.with(|m| m.set(0));
    ACTIVE.with(|a| a.set(true));
    let out = f();
    ACTIVE.with(|a| a.set(false));
    let usage = Usage {
        peak_bytes: usize::try_from(PEAK.with(Cell::get)).unwrap_or(0),
        largest_bytes: LARGEST.with(Cell::get),
    };
    (out, usage)
}
