//! `keep_freed_memory` makes glibc reuse a freed large buffer instead of unmapping it, so
//! refilling it costs no page faults. Its own test binary: it changes the process allocator.

#![cfg(all(target_os = "linux", target_env = "gnu"))]

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
/// then freed together at the end of the step.
fn faults_of_steps() -> i64 {
    let before = minor_faults();
    for round in 0..10u8 {
        let activations: Vec<Vec<u8>> = (0..32).map(|_| vec![round + 1; 2 << 20]).collect();
        std::hint::black_box(&activations);
    }
    minor_faults() - before
}

#[test]
fn freed_buffers_are_reused_without_page_faults() {
    // glibc's default hands the freed top of the heap back to the kernel at the end of
    // every round, so each round faults its 64 MiB in again (16,384 pages).
    let default = faults_of_steps();
    headroom_core::memory::alloc::keep_freed_memory();
    faults_of_steps(); // brings the buffers into the heap once
    let kept = faults_of_steps();
    assert!(
        default > 5 * 16_384,
        "glibc's default should fault in every round: {default} faults"
    );
    // Not zero: a test runs on a spawned thread, whose glibc arena still releases a heap
    // that falls wholly free (measured: about 5,000 faults here against 160,000).
    assert!(
        kept * 10 < default,
        "freed memory was not kept: {kept} faults against {default} by default"
    );
}
