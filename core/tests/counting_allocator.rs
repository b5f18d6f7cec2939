//! The counting allocator, alone in its own test binary: unit tests run on parallel threads
//! whose allocations would blur the count (CI once saw 1.2 MB freed mid-measure).

use headroom_core::memory::alloc::{self, CountingAllocator};

#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator(std::alloc::System);

#[test]
fn peak_sees_a_known_allocation_and_allocated_returns_after_free() {
    const MIB: usize = 1 << 20;
    let block_bytes = 64 * MIB;
    alloc::reset_peak();
    let before = alloc::allocated();
    let block = vec![1u8; block_bytes];
    let during = alloc::allocated();
    std::hint::black_box(&block);
    drop(block);
    let after = alloc::allocated();

    // The harness's own thread may allocate a little meanwhile (seen: 900 bytes, and once
    // 1.2 MB freed); the block is what matters.
    const SLACK: usize = 64 << 10;
    assert!(alloc::is_installed());
    assert!(
        during.abs_diff(before + block_bytes) <= SLACK,
        "allocated rose by {} for a block of {block_bytes}",
        during - before
    );
    assert!(
        alloc::peak() >= during,
        "peak {} below {during}",
        alloc::peak()
    );
    assert!(
        after.abs_diff(before) <= SLACK,
        "freeing returns the block: {before} before, {after} after"
    );
}
