//! Freed blocks too large for the C allocator to keep, kept here for the next allocation
//! of the same size.
//!
//! glibc serves every block over 32 MiB (its largest mmap threshold, which `mallopt` cannot
//! raise) with its own `mmap` and unmaps it on free. At micro-batch 64 the model's largest
//! activations are 33.5 MB, so each step faulted them in again page by page: the
//! transpose convolution producing one took 86 ms instead of 23 (docs/BENCHMARKS-HISTORY.md). A
//! training step allocates the same sizes every step, so an exact-size cache of a few
//! blocks serves them.
//!
//! Kept blocks are memory the process holds without using, so they are bounded: live bytes
//! plus kept bytes never pass the most the process has had live at once (its high-water
//! mark). A block that would pass it is released, and a new allocation that finds no block
//! of its size releases the oldest kept blocks first. So the cache does not raise the
//! process's peak; it only stops handing the same pages back and forth.

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

/// Kept blocks the caller must hand back to the inner allocator.
pub type Released = [Option<(*mut u8, Layout)>; SLOTS];

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

impl Block {
    fn into_parts(self) -> (*mut u8, Layout) {
        // SAFETY: the block was allocated with this size and alignment.
        let layout = unsafe { Layout::from_size_align_unchecked(self.size, self.align) };
        (self.address as *mut u8, layout)
    }
}

impl Slots {
    fn kept(&self) -> usize {
        self.blocks.iter().flatten().map(|b| b.size).sum()
    }

    /// The slot of the block freed longest ago.
    fn oldest(&self) -> Option<usize> {
        (0..SLOTS)
            .filter(|&i| self.blocks[i].is_some())
            .min_by_key(|&i| self.blocks[i].map_or(0, |b| b.freed_at))
    }
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

/// What a large allocation finds: a kept block of exactly its layout, or none, with the
/// kept blocks the caller must release first so that `live + kept + size` stays within
/// `high_water` (bytes live now and the most ever live, from the counting allocator).
pub fn take(layout: Layout, live: usize, high_water: usize) -> (Option<*mut u8>, Released) {
    // No allocation in here: this runs inside the global allocator.
    let mut release: Released = [None; SLOTS];
    if layout.size() < LARGE || !ENABLED.load(Ordering::Relaxed) {
        return (None, release);
    }
    let mut slots = slots();
    let found = slots
        .blocks
        .iter_mut()
        .find(|b| b.is_some_and(|b| b.size == layout.size() && b.align == layout.align()));
    if let Some(slot) = found {
        return (slot.take().map(|b| b.address as *mut u8), release);
    }
    for released in &mut release {
        if live + slots.kept() + layout.size() <= high_water {
            break;
        }
        let Some(oldest) = slots.oldest() else { break };
        *released = slots.blocks[oldest].take().map(Block::into_parts);
    }
    (None, release)
}

/// Keeps a freed block when `live` (bytes live after this free) plus the kept bytes stay
/// within `high_water`. Returns the block the caller must free instead: none when it was
/// kept in a free slot, the oldest kept block when the slots were full, or the block
/// itself when it is not large, keeping is off or it does not fit under the mark.
pub fn keep(
    ptr: *mut u8,
    layout: Layout,
    live: usize,
    high_water: usize,
) -> Option<(*mut u8, Layout)> {
    if layout.size() < LARGE || !ENABLED.load(Ordering::Relaxed) {
        return Some((ptr, layout));
    }
    let mut slots = slots();
    if live + slots.kept() + layout.size() > high_water {
        return Some((ptr, layout));
    }
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
    let oldest = slots.oldest()?;
    slots.blocks[oldest].replace(block).map(Block::into_parts)
}

/// Asks Linux to back a fresh large block with transparent huge pages (2 MiB) when the
/// system leaves that to the program (`transparent_hugepage/enabled` = `madvise`, the
/// common default). Each fault then maps 2 MiB instead of 4 KiB.
pub fn advise_huge_pages(ptr: *mut u8, size: usize) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if size >= LARGE && !ptr.is_null() && ENABLED.load(Ordering::Relaxed) {
        const PAGE: usize = 4096;
        let start = (ptr as usize).next_multiple_of(PAGE);
        let end = (ptr as usize + size) / PAGE * PAGE;
        if end > start {
            // SAFETY: a range of whole pages inside a block this process just mapped;
            // MADV_HUGEPAGE changes how it is backed, never its contents.
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = (ptr, size);
}

/// Bytes held in kept blocks.
pub fn kept_bytes() -> usize {
    slots().kept()
}
