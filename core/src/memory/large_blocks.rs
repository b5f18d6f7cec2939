//! Freed blocks too large for the C allocator to keep, kept here for the next allocation
//! of the same size.
//!
//! glibc serves every block over 32 MiB (its largest mmap threshold, which `mallopt` cannot
//! raise) with its own `mmap` and unmaps it on free. At micro-batch 64 the model's largest
//! activations are 33.5 MB, so each step faulted them in again page by page: the
//! transpose convolution producing one took 86 ms instead of 23 (docs/BENCHMARKS.md). A
//! training step allocates the same sizes every step, so an exact-size cache of a few
//! blocks serves them; the process's resident memory stays at what the step already used.

use std::alloc::Layout;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// Blocks at least this large are kept.
pub const LARGE: usize = 32 << 20;
const SLOTS: usize = 16;

static ENABLED: AtomicBool = AtomicBool::new(false);
static CACHE: Mutex<Slots> = Mutex::new(Slots {
    blocks: [None; SLOTS],
    clock: 0,
});

#[derive(Clone, Copy)]
struct Block {
    /// The block's address (a pointer is not `Send`; the cache owns the block).
    address: usize,
    size: usize,
    align: usize,
    /// When it was freed, for evicting the oldest.
    freed_at: u64,
}

struct Slots {
    blocks: [Option<Block>; SLOTS],
    clock: u64,
}

/// Starts keeping large blocks (see [`super::alloc::keep_freed_memory`]).
pub fn enable() {
    ENABLED.store(true, Ordering::Relaxed);
}

fn slots() -> std::sync::MutexGuard<'static, Slots> {
    CACHE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A kept block of exactly `layout`, if there is one.
pub fn take(layout: Layout) -> Option<*mut u8> {
    if layout.size() < LARGE || !ENABLED.load(Ordering::Relaxed) {
        return None;
    }
    let mut slots = slots();
    let slot = slots
        .blocks
        .iter_mut()
        .find(|b| b.is_some_and(|b| b.size == layout.size() && b.align == layout.align()))?;
    slot.take().map(|b| b.address as *mut u8)
}

/// Keeps a freed block. Returns the block the caller must free instead: none when it was
/// kept in a free slot, the oldest kept block when the slots were full, or the block
/// itself when it is not large or keeping is off.
pub fn keep(ptr: *mut u8, layout: Layout) -> Option<(*mut u8, Layout)> {
    if layout.size() < LARGE || !ENABLED.load(Ordering::Relaxed) {
        return Some((ptr, layout));
    }
    let mut slots = slots();
    slots.clock += 1;
    let block = Block {
        address: ptr as usize,
        size: layout.size(),
        align: layout.align(),
        freed_at: slots.clock,
    };
    if let Some(free) = slots.blocks.iter_mut().find(|b| b.is_none()) {
        *free = Some(block);
        return None;
    }
    let oldest = slots
        .blocks
        .iter_mut()
        .min_by_key(|b| b.map_or(0, |b| b.freed_at))?;
    let evicted = oldest.replace(block)?;
    // SAFETY: the evicted block was allocated with this size and alignment.
    let layout = unsafe { Layout::from_size_align_unchecked(evicted.size, evicted.align) };
    Some((evicted.address as *mut u8, layout))
}

/// Bytes held in kept blocks.
pub fn kept_bytes() -> usize {
    slots().blocks.iter().flatten().map(|b| b.size).sum()
}
