//! `keep_freed_memory` makes glibc reuse a freed large buffer instead of unmapping it, so
//! refilling it costs no page faults. Its own test binary: it changes the process allocator.

#![cfg(all(target_os = "linux", target_env = "gnu"))]

use headroom_core::memory::alloc::CountingAllocator;
use headroom_core::memory::large_blocks;

// As in the binaries, with the cache of blocks over 32 MiB that keep_freed_memory enables.
#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator(std::alloc::System);

/// Minor page faults of this process so far.
fn minor_faults() -> i64 {
    // SAFETY: getrusage fills the struct it is given.
    unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        assert_eq!(libc::getrusage(libc::RUSAGE_SELF, &mut usage), 0);
        usage.ru_minflt
    }
}

/// Page faults of ten rounds of a training step's pattern: many buffers alive together,
/// then freed together at the end of the step, and two larger than glibc ever keeps.
fn faults_of_steps() -> i64 {
    let before = minor_faults();
    for round in 0..10u8 {
        let activations: Vec<Vec<u8>> = (0..32).map(|_| vec![round + 1; 2 << 20]).collect();
        let large: Vec<Vec<u8>> = (0..2).map(|_| vec![round + 1; 40 << 20]).collect();
        std::hint::black_box((&activations, &large));
    }
    minor_faults() - before
}

#[test]
fn freed_buffers_are_reused_without_page_faults() {
    // glibc's default hands the freed top of the heap back to the kernel at the end of
    // every round and unmaps the 40 MiB blocks, so each round faults 144 MiB in again
    // (36,864 pages).
    let default = faults_of_steps();
    headroom_core::memory::alloc::keep_freed_memory();
    faults_of_steps(); // brings the buffers into the heap once
    let kept = faults_of_steps();
    assert!(
        default > 5 * 36_864,
        "glibc's default should fault in every round: {default} faults"
    );
    // Not zero: a test runs on a spawned thread, whose glibc arena still releases a heap
    // that falls wholly free (measured: about 5,000 faults here against 370,000).
    assert!(
        kept * 20 < default,
        "freed memory was not kept: {kept} faults against {default} by default"
    );

    // Blocks glibc never keeps (over 32 MiB) come back from the counting allocator's
    // cache, the same block for the same size.
    let block = vec![1u8; 40 << 20];
    let address = block.as_ptr();
    drop(block);
    assert!(large_blocks::kept_bytes() >= 40 << 20);
    // The same size comes back as the same block, zeroed when asked.
    let again = vec![0u8; 40 << 20];
    assert_eq!(again.as_ptr(), address);
    assert!(again.iter().all(|&b| b == 0));
    // A size never freed is not served from the cache.
    let other = vec![2u8; 48 << 20];
    assert_ne!(other.as_ptr(), address);

    drop((again, other));

    // Kept blocks never let the process pass its high-water mark: three blocks freed, then
    // a larger one of a new size releases them instead of adding to them.
    let blocks: Vec<Vec<u8>> = (40..43).map(|mib| vec![3u8; mib << 20]).collect();
    drop(blocks);
    assert!(large_blocks::kept_bytes() >= 123 << 20);
    let larger = vec![4u8; 140 << 20];
    assert!(
        large_blocks::kept_bytes() < 40 << 20,
        "{} bytes kept beside a new 140 MiB block",
        large_blocks::kept_bytes()
    );
    drop(larger);

    // A fresh large block is backed by 2 MiB pages where the system leaves that to the
    // program (`madvise`, as here) or does it anyway (`always`).
    let thp =
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    if thp.contains("[never]") || thp.is_empty() {
        eprintln!("transparent huge pages are off on this system: nothing to check");
        return;
    }
    // Larger than anything before, and than glibc's thread-arena heaps (64 MiB), so that
    // it is a fresh mapping and not memory this test already faulted in.
    let before = minor_faults();
    let fresh = vec![5u8; 200 << 20];
    let faults = minor_faults() - before;
    // The middle: madvise covers whole pages only, so the first page is a mapping of its own.
    let huge = anon_huge_kib(fresh.as_ptr() as usize + (100 << 20));
    assert!(
        huge > 0,
        "no huge pages behind a fresh 200 MiB block ({thp})"
    );
    // 51,200 faults with 4 KiB pages; 100 with 2 MiB ones, plus the block's unaligned ends.
    assert!(faults < 51_200 / 10, "{faults} faults to fill 200 MiB");
    drop(fresh);
}

/// `AnonHugePages` of the mapping that holds `address`, from /proc/self/smaps.
fn anon_huge_kib(address: usize) -> u64 {
    let smaps = std::fs::read_to_string("/proc/self/smaps").expect("/proc/self/smaps");
    let mut inside = false;
    for line in smaps.lines() {
        if let Some((range, _)) = line.split_once(' ')
            && let Some((start, end)) = range.split_once('-')
            && let (Ok(start), Ok(end)) = (
                usize::from_str_radix(start, 16),
                usize::from_str_radix(end, 16),
            )
        {
            inside = (start..end).contains(&address);
        } else if inside && let Some(kib) = line.strip_prefix("AnonHugePages:") {
            return kib
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .unwrap_or(0);
        }
    }
    0
}
