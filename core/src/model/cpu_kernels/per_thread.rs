//! A kernel's working buffers made once per rayon thread for the whole call.
//!
//! rayon's `for_each_init` makes its value once per piece of work it splits off, several
//! per thread in a call, and each of the unfolding kernels' buffers was allocated and zeroed
//! every time: 2.8% of a flex training step of the default model at 16 x 1 was spent zeroing
//! them (perf, `Scratch::sized` and rayon's `MapInitConsumer`).

use std::sync::Mutex;

use rayon::prelude::*;

use super::unwritten::Unwritten;

pub(crate) struct PerThread<T> {
    slots: Vec<Mutex<Option<T>>>,
}

impl<T> PerThread<T> {
    /// Slots for the current pool's threads, each empty until its thread first asks.
    pub(crate) fn new() -> Self {
        Self {
            slots: (0..rayon::current_num_threads())
                .map(|_| Mutex::new(None))
                .collect(),
        }
    }

    /// `work` on this thread's value, made by `make` the first time. A thread outside the
    /// pool, or one whose value is in use further up its stack (rayon runs other tasks while
    /// a task waits), gets a value of its own for this call.
    pub(crate) fn with<R>(&self, make: impl FnOnce() -> T, work: impl FnOnce(&mut T) -> R) -> R {
        let slot = rayon::current_thread_index()
            .and_then(|i| self.slots.get(i))
            .and_then(|slot| slot.try_lock().ok());
        match slot {
            Some(mut value) => work(value.get_or_insert_with(make)),
            None => work(&mut make()),
        }
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
    let scratches = PerThread::new();
    y.par_chunks_mut((together * sample_len).max(1))
        .enumerate()
        .for_each(|(group, out)| {
            let count = out.len() / sample_len.max(1);
            scratches.with(&scratch, |s| work(group * together, count, out, s))
        });
    y.written()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn each_thread_makes_its_value_once() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        let made = AtomicUsize::new(0);
        let sums = pool.install(|| {
            let buffers = PerThread::new();
            (0..1000)
                .into_par_iter()
                .map(|i| {
                    buffers.with(
                        || {
                            made.fetch_add(1, Ordering::Relaxed);
                            vec![0usize; 4]
                        },
                        |buffer| {
                            buffer[i % 4] += 1;
                            i
                        },
                    )
                })
                .sum::<usize>()
        });
        assert_eq!(sums, 999 * 1000 / 2);
        let made = made.into_inner();
        assert!((1..=3).contains(&made), "{made} values for 3 threads");
    }

    #[test]
    fn outside_a_pool_each_call_gets_a_value() {
        let buffers = PerThread::<Vec<f32>>::new();
        let len = buffers.with(|| vec![1.0; 3], |b| b.len());
        assert_eq!(len, 3);
    }
}
