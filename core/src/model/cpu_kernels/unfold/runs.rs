//! How a batch is shared over rayon's threads by the unfolding kernels: runs of samples,
//! each with its own weight-gradient partial sum, and each task's working matrices.

use rayon::prelude::*;

use super::super::per_thread::PerThread;
use super::super::sum_partials;
use super::super::unwritten::Unwritten;

/// How a batch is cut into runs of samples, each summing its own weight-gradient partial
/// sum. The runs are fixed by the batch's shape whatever the thread count: each run sums
/// its samples in order, then the runs' sums are added in order, so a gradient is the same
/// on every run and with any number of threads (a training run is reproducible from its
/// seed).
///
/// A run's samples of few positions are multiplied as one matrix, side by side: a 4 x 4
/// map made one GEMM per sample of inner dimension 16, each re-reading the whole weight
/// gradient and repacking the weight (the GAN discriminator's last layer, 3% of its FLOPs,
/// took 35% of its gradients' time). Wide samples are multiplied one by one: their copies
/// side by side would cost more than they give.
#[derive(Debug, Clone, Copy)]
pub(super) struct Run {
    /// Samples per partial sum.
    pub(super) samples: usize,
    /// Samples per GEMM: `samples`, or 1.
    pub(super) together: usize,
}

/// Positions side by side in a run's matrix, at least; and runs per batch, at least, where
/// the batch has the samples, so that the threads have runs to share.
const RUN_POSITIONS: usize = 256;
const RUNS: usize = 8;

impl Run {
    pub(super) fn of(n: usize, positions: usize) -> Self {
        let wanted = RUN_POSITIONS.div_ceil(positions.max(1)).max(2);
        let samples = wanted.min(n.div_ceil(RUNS)).max(1);
        Self {
            samples,
            together: if positions < RUN_POSITIONS {
                samples
            } else {
                1
            },
        }
    }

    /// Runs `per_group(first sample, samples, their dx, the run's dw partial, scratch)`
    /// over a batch of `n` samples, a group of `together` samples at a time, on rayon's
    /// threads, one run per task; returns the weight gradient.
    pub(super) fn over_batch(
        &self,
        n: usize,
        dx_len: usize,
        scratch: impl Fn() -> Scratch + Sync + Send,
        dw_len: usize,
        dx: Option<&mut Unwritten>,
        per_group: impl Fn(usize, usize, Option<&mut [f32]>, &mut [f32], &mut Scratch) + Sync,
    ) -> Vec<f32> {
        let (samples, together) = (self.samples, self.together);
        let mut partials = Unwritten::new(n.div_ceil(samples) * dw_len);
        let groups = |run: usize| {
            let first = run * samples;
            (first..(first + samples).min(n))
                .step_by(together)
                .map(move |g| (g, together.min(n - g).min(first + samples - g)))
        };
        let scratches = PerThread::new(n.div_ceil(samples.max(1)), &scratch);
        match dx {
            Some(dx) => partials
                .par_chunks_mut(dw_len)
                .zip(dx.par_chunks_mut(samples * dx_len))
                .enumerate()
                .for_each(|(run, (dw, dx))| {
                    scratches.with(|s| {
                        for ((first, count), dx) in
                            groups(run).zip(dx.chunks_mut(together * dx_len))
                        {
                            per_group(first, count, Some(dx), dw, s);
                        }
                    })
                }),
            None => partials
                .par_chunks_mut(dw_len)
                .enumerate()
                .for_each(|(run, dw)| {
                    scratches.with(|s| {
                        for (first, count) in groups(run) {
                            per_group(first, count, None, dw, s);
                        }
                    })
                }),
        }
        sum_partials(&partials.written(), dw_len)
    }
}

/// A thread's working matrices for one call: a run's unfolded matrix (`rows x columns`) and
/// the other side of its products (`channels x columns`), its samples side by side. Each
/// made by `sized` ([`PerThread`]), never a prototype cloned: the prototype would be held
/// beside the clones, one more unfolded matrix in the step's peak.
pub(super) struct Scratch {
    pub(super) cols: Vec<f32>,
    pub(super) other: Vec<f32>,
}

impl Scratch {
    /// For `run`'s groups of samples of `positions` each: `other` only where a group is
    /// several samples (one sample's is the sample itself).
    pub(super) fn sized(rows: usize, channels: usize, run: Run, positions: usize) -> Self {
        let columns = run.together * positions;
        let other = if run.together > 1 {
            channels * columns
        } else {
            0
        };
        Self {
            cols: vec![0.0; rows * columns],
            other: vec![0.0; other],
        }
    }
}
