//! A counting global allocator: the CPU twin of `torch.cuda.memory_allocated` and
//! `max_memory_allocated`. CPU backends keep tensors in host memory, so bytes handed out
//! by the allocator are what a training step costs there.
//!
//! A binary opts in with
//! `#[global_allocator] static ALLOC: CountingAllocator = CountingAllocator(System);`.

use std::alloc::{GlobalAlloc, Layout, System};

use super::large_blocks;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

static ALLOCATED: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
/// The most ever live at once (never reset): bounds the kept large blocks.
static HIGH_WATER: AtomicUsize = AtomicUsize::new(0);
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// Wraps an allocator (the system's by default) and counts live bytes and their high-water
/// mark.
pub struct CountingAllocator<A = System>(pub A);

impl<A: GlobalAlloc> CountingAllocator<A> {
    /// A kept block for `layout`, after releasing the kept blocks that would let the
    /// process pass its high-water mark.
    fn kept_block(&self, layout: Layout) -> Option<*mut u8> {
        let live = ALLOCATED.load(Ordering::Relaxed);
        let high_water = HIGH_WATER.load(Ordering::Relaxed).max(live + layout.size());
        let (found, release) = large_blocks::take(layout, live, high_water);
        for (ptr, layout) in release.into_iter().flatten() {
            // SAFETY: a kept block, allocated by the inner allocator with this layout.
            unsafe { self.0.dealloc(ptr, layout) };
        }
        found
    }
}

impl<A> CountingAllocator<A> {
    fn grew(size: usize) {
        let now = ALLOCATED.fetch_add(size, Ordering::Relaxed) + size;
        PEAK.fetch_max(now, Ordering::Relaxed);
        HIGH_WATER.fetch_max(now, Ordering::Relaxed);
        if !INSTALLED.load(Ordering::Relaxed) {
            INSTALLED.store(true, Ordering::Relaxed);
        }
    }

    fn shrank(size: usize) {
        ALLOCATED.fetch_sub(size, Ordering::Relaxed);
    }
}

// SAFETY: every block comes from the inner allocator and goes back to it with the layout
// it was allocated with; a kept block (large_blocks) is handed out again only for exactly
// that layout, and only once. The counters only observe sizes.
unsafe impl<A: GlobalAlloc> GlobalAlloc for CountingAllocator<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let ptr = self.kept_block(layout).unwrap_or_else(|| {
            let ptr = unsafe { self.0.alloc(layout) };
            large_blocks::advise_huge_pages(ptr, layout.size());
            ptr
        });
        if !ptr.is_null() {
            Self::grew(layout.size());
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let ptr = match self.kept_block(layout) {
            // SAFETY: a kept block of exactly this layout, owned by no one else.
            Some(ptr) => unsafe {
                ptr.write_bytes(0, layout.size());
                ptr
            },
            None => {
                let ptr = unsafe { self.0.alloc_zeroed(layout) };
                large_blocks::advise_huge_pages(ptr, layout.size());
                ptr
            }
        };
        if !ptr.is_null() {
            Self::grew(layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let live = ALLOCATED
            .load(Ordering::Relaxed)
            .saturating_sub(layout.size());
        let high_water = HIGH_WATER.load(Ordering::Relaxed);
        if let Some((ptr, layout)) = large_blocks::keep(ptr, layout, live, high_water) {
            unsafe { self.0.dealloc(ptr, layout) };
        }
        Self::shrank(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let new = unsafe { self.0.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            Self::shrank(layout.size());
            Self::grew(new_size);
        }
        new
    }
}

/// Asks the C allocator to keep freed memory for the next allocation instead of handing it
/// back to the kernel. A training step frees and reallocates the same large buffers every
/// step; by default glibc serves buffers over 128 KiB-32 MiB with `mmap` and unmaps them on
/// free, so each step pays page faults to refill them and, with two or more threads, TLB
/// shootdowns on every unmap. Measured on the flex step (docs/BENCHMARKS-HISTORY.md): 1.4-1.7x
/// more patches/s, same peak RSS; mimalloc gave the same speed with 40-70% more RSS.
///
/// Blocks glibc will not keep (over 32 MiB) are kept by the counting allocator itself
/// ([`large_blocks`]), on every platform; on Linux a fresh one is also backed by 2 MiB
/// pages ([`large_blocks::advise_huge_pages`]): at 1024 patches a step faulted 4.8 GB in
/// 4 KiB pages, 40% of its CPU time in the kernel.
///
/// Call it first thing in `main`. The process's resident memory then stays at its peak
/// until exit, which a trainer reaches anyway every step.
pub fn keep_freed_memory() {
    large_blocks::enable();
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // glibc's largest mmap threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX); larger
        // values are refused. Buffers above it still come from mmap.
        const MMAP_THRESHOLD_MAX: libc::c_int = 32 << 20;
        // SAFETY: mallopt only changes allocator tunables; called before other threads
        // allocate, and glibc takes its own lock anyway.
        let (mmap, trim) = unsafe {
            (
                libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX),
                libc::mallopt(libc::M_TRIM_THRESHOLD, libc::c_int::MAX),
            )
        };
        if mmap == 0 || trim == 0 {
            tracing::debug!("mallopt refused a setting (mmap {mmap}, trim {trim})");
        }
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

/// Raises the peak to at least `bytes`: an outer window's peak, restored after an inner
/// window (one phase of a step) was measured apart.
pub fn raise_peak(bytes: usize) {
    PEAK.fetch_max(bytes, Ordering::Relaxed);
}

/// Starts a new peak window at the current allocation.
pub fn reset_peak() {
    PEAK.store(ALLOCATED.load(Ordering::Relaxed), Ordering::Relaxed);
}

// Tested in `core/tests/counting_allocator.rs`: a binary of its own, so no other test's
// thread allocates while it measures.
