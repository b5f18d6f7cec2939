//! A kernel's working buffers made once for the whole call, as many as its pieces of work
//! can use at once.
//!
//! rayon's `for_each_init` makes its value once per piece of work it splits off, several
//! per thread in a call, and each of the unfolding kernels' buffers was allocated and zeroed
//! every time: 2.8% of a flex training step of the default model at 16 x 1 was spent zeroing
//! them (perf, `Scratch::sized` and rayon's `MapInitConsumer`).

use std::sync::Mutex;

use rayon::prelude::*;

use super::unwritten::Unwritten;

/// As many values as a call's pieces of work can use at once: one per pool thread, or one
/// per piece where there are fewer pieces. Made before the call rather than as each thread
/// first asks, so that what a call holds does not move with how rayon shares it out: made
/// as asked, a step of the tiny recogniser on two utterances of 373 frames held 15.1 or
/// 17.3 MB as one or both threads took part (2-core AMD EPYC, 2026-12-02), and a plan
/// measured at the lower would be short at the higher.
pub(crate) struct PerThread<T, F> {
    free: Mutex<Vec<T>>,
    make: F,
}

impl<T, F: Fn() -> T> PerThread<T, F> {
    /// Values by `make` for a call of `pieces` pieces of work on the current pool.
    pub(crate) fn new(pieces: usize, make: F) -> Self {
        let count = rayon::current_num_threads().min(pieces);
        Self {
            free: Mutex::new((0..count).map(|_| make()).collect()),
            make,
        }
    }

    /// `work` on a free value, given back after; on a new one when none is free (rayon runs
    /// other pieces on a thread while a piece further up its stack waits).
    pub(crate) fn with<R>(&self, work: impl FnOnce(&mut T) -> R) -> R {
        let free = self.free.lock().ok().and_then(|mut free| free.pop());
        let mut value = free.unwrap_or_else(&self.make);
        let done = work(&mut value);
        if let Ok(mut free) = self.free.lock() {
            free.push(value);
        }
        done
    }
}

/// Makes `n` samples' outputs of `sample_len` values each, in groups of `together` samples
/// on rayon's threads: `work(first sample, count, their outputs, scratch)` per group, each
/// thread's scratch made once by `scratch`.
pub(crate) fn outputs_in_groups<T: Send>(
    n: usize,
    sample_len: usize,
    together: usize,
    scratch: impl Fn() -> T + Sync,
    work: impl Fn(usize, usize, &mut [f32], &mut T) + Sync,
) -> Vec<f32> {
    let mut y = Unwritten::new(n * sample_len);
    let scratches = PerThread::new(n.div_ceil(together.max(1)), &scratch);
    y.par_chunks_mut((together * sample_len).max(1))
        .enumerate()
        .for_each(|(group, out)| {
            let count = out.len() / sample_len.max(1);
            scratches.with(|s| work(group * together, count, out, s))
        });
    y.written()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Three values for three threads, made before the call and none after, however rayon
    /// shares the pieces out; fewer pieces, fewer values.
    #[test]
    fn the_values_are_made_before_the_call_one_per_thread() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        let made = AtomicUsize::new(0);
        let make = || {
            made.fetch_add(1, Ordering::Relaxed);
            vec![0usize; 4]
        };
        let sums = pool.install(|| {
            let buffers = PerThread::new(1000, make);
            assert_eq!(made.load(Ordering::Relaxed), 3);
            (0..1000)
                .into_par_iter()
                .map(|i| {
                    buffers.with(|buffer| {
                        buffer[i % 4] += 1;
                        i
                    })
                })
                .sum::<usize>()
        });
        assert_eq!(sums, 999 * 1000 / 2);
        assert_eq!(
            made.load(Ordering::Relaxed),
            3,
            "no value made during the call"
        );
        pool.install(|| PerThread::new(2, make));
        assert_eq!(made.into_inner(), 5, "two pieces, two values");
    }

    #[test]
    fn with_none_free_a_call_gets_a_value() {
        let buffers = PerThread::new(0, || vec![1.0f32; 3]);
        let len = buffers.with(|b| b.len());
        assert_eq!(len, 3);
    }
}
