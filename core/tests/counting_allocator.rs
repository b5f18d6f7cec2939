//! The counting allocator, alone in its own test binary: unit tests run on parallel threads
//! whose allocations would blur a byte-exact count (CI once saw 1.2 MB freed mid-measure).

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

    assert!(alloc::is_installed());
    assert_eq!(during - before, block_bytes, "allocated rose by the block");
    assert!(
        alloc::peak() >= during,
        "peak {} below {during}",
        alloc::peak()
    );
    assert_eq!(after, before, "freeing returns the block");
}
