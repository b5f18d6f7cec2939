//! A counting global allocator: the CPU twin of `torch.cuda.memory_allocated` and
//! `max_memory_allocated`. CPU backends keep tensors in host memory, so bytes handed out
//! by the allocator are what a training step costs there.
//!
//! A binary opts in with
//! `#[global_allocator] static ALLOC: CountingAllocator = CountingAllocator;`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

static ALLOCATED: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// Wraps the system allocator and counts live bytes and their high-water mark.
pub struct CountingAllocator;

impl CountingAllocator {
    fn grew(size: usize) {
        let now = ALLOCATED.fetch_add(size, Ordering::Relaxed) + size;
        PEAK.fetch_max(now, Ordering::Relaxed);
        if !INSTALLED.load(Ordering::Relaxed) {
            INSTALLED.store(true, Ordering::Relaxed);
        }
    }

    fn shrank(size: usize) {
        ALLOCATED.fetch_sub(size, Ordering::Relaxed);
    }
}

// SAFETY: every call is forwarded unchanged to `System`; the counters only observe sizes.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            Self::grew(layout.size());
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            Self::grew(layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        Self::shrank(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            Self::shrank(layout.size());
            Self::grew(new_size);
        }
        new
    }
}

/// Whether the running binary counts allocations (it has allocated through the counter).
pub fn is_installed() -> bool {
    INSTALLED.load(Ordering::Relaxed)
}

/// Bytes allocated now.
pub fn allocated() -> usize {
    ALLOCATED.load(Ordering::Relaxed)
}

/// Most bytes allocated at once since the last [`reset_peak`].
pub fn peak() -> usize {
    PEAK.load(Ordering::Relaxed)
}

/// Starts a new peak window at the current allocation.
pub fn reset_peak() {
    PEAK.store(ALLOCATED.load(Ordering::Relaxed), Ordering::Relaxed);
}

// Tested in `core/tests/counting_allocator.rs`: a binary of its own, so no other test's
// thread allocates while it measures.
