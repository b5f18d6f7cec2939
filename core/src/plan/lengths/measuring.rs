//! The steps planning by length measures: calibration's, at several lengths, and the
//! dry-runs' and landings' of a plan's buckets.

use super::super::calibrate::{CalibrationError, Cut, measure_cut_step};
use crate::backend::Target;
use crate::events::planned::StepMeasurement;
use crate::plan::length_model::SHORT;
use crate::precision::Precision;
use crate::readback::LocalFuture;
use crate::task::{Coupling, TrainingTask};

#[cfg(doc)]
use super::{LengthCost, LengthModel};

/// Steps measured at lengths: one and two examples of the longest (the fixed part and the
/// per-example part there), two and four at half, four at a quarter and eight at an eighth
/// of it (the curve, and what an example costs whatever its length), and sixteen at a sixteenth:
/// a micro-batch as wide as a step of short examples, which the narrower points
/// under-predicted by up to a fifth (bench/speech_inrun at a5ed5fe). Each holds about as
/// many frames as one example of the longest, so none needs much more memory than it.
/// Four at half, beside two: on a CPU of several threads one example's step takes one
/// thread's scratch where two take two, so one and two of the longest alone read that
/// scratch as each example's, and the fit's largest shortfall, then added to every
/// prediction, grew with it (bench/speech_inrun, the recogniser's runs of 2026-11-27: worst
/// 6.3-9.6% with six points, 3.5-3.6% with seven; docs/BENCHMARKS.md).
///
/// On a CPU (`host`) two more. Three of the longest, past two threads' scratch: without it
/// the fit put the recogniser's third example of 2,947 frames at 18 MiB where it takes 26
/// (its fourth to eighth 30 each), and planned wide buckets of long utterances 5-23% short.
/// And the sixteenth as wide as a step (`widest` examples, when more than sixteen): the
/// fit's one step of many examples ([`LengthModel::fit`] takes it, [`SHORT`]), whose peak is
/// set by every activation and what each example costs whatever its length rather than by
/// the threads' scratch (without it speech-clap's steps of 64 short pairs were predicted up
/// to 8% short).
/// 2-core AMD EPYC, 2026-12-07.
fn calibration_points(longest: usize, host: bool, widest: usize) -> Vec<(usize, usize)> {
    let mut points = vec![
        (1, longest),
        (2, longest),
        (2, longest.div_ceil(2)),
        (4, longest.div_ceil(2)),
        (4, longest.div_ceil(4)),
        (8, longest.div_ceil(8)),
        (16, longest.div_ceil(16)),
    ];
    if host {
        points.insert(2, (3, longest));
        if widest > 16 {
            points.push((widest, longest.div_ceil(SHORT)));
        }
    }
    points
}

/// A step of `step_examples` examples of `frames` on `target`, in micro-batches of
/// `examples` (the last the remainder).
pub(super) fn measure_at<'a, T: TrainingTask>(
    target: Target,
    task: &'a T,
    examples: usize,
    frames: usize,
    step_examples: usize,
) -> LocalFuture<'a, Result<StepMeasurement, CalibrationError>> {
    Box::pin(async move {
        let at = task.at_length(frames).unwrap_or_else(|| task.clone());
        let cut = Cut::of_step(&at, examples, step_examples);
        let mut m = measure_cut_step(target, &at, &cut, Precision::F32, false).await?;
        m.frames = Some(frames);
        Ok(m)
    })
}

/// The examples of a measured step whose micro-batches hold `examples` each: one
/// micro-batch, or where a step of `effective_batch` accumulates, two. Where the step holds
/// every micro-batch's inputs (`holds_inputs`, on a CPU) the second is what a step has left:
/// two whole ones hold more inputs than any step of the run. Elsewhere both are whole, so
/// that the second holds a whole micro-batch beside the summed gradients, as a run's later
/// micro-batches do (and a device pool's model was fitted to such steps).
pub(super) fn measured_step(examples: usize, effective_batch: usize, holds_inputs: bool) -> usize {
    if examples >= effective_batch {
        examples
    } else if holds_inputs {
        (2 * examples).min(effective_batch)
    } else {
        2 * examples
    }
}

/// Steps of `task` measured at lengths up to `longest` frames, for steps of `widest`
/// examples: what its model by length is fitted to ([`LengthModel::fit`]).
pub fn calibrate<'a, T: TrainingTask>(
    target: Target,
    task: &'a T,
    longest: usize,
    widest: usize,
) -> LocalFuture<'a, Result<Vec<StepMeasurement>, CalibrationError>> {
    Box::pin(async move {
        // The first step in a process sets up what stays for its life; not the step's cost.
        measure_at(target, task, 1, longest.div_ceil(4), 1).await?;
        let mut measurements = Vec::new();
        for (examples, frames) in calibration_points(longest, target.backend.is_host(), widest) {
            measurements.push(measure_at(target, task, examples, frames, 1).await?);
        }
        Ok(measurements)
    })
}

/// Threads that each take a scratch of a step's examples on `target`: the CPU's pool, or
/// one on a device ([`LengthCost::threads`]).
pub fn scratch_threads(target: Target) -> usize {
    if target.backend.is_host() {
        rayon::current_num_threads()
    } else {
        1
    }
}

/// Input bytes per padded frame a step of `task` holds beside the running micro-batch on a
/// CPU, where it reads every micro-batch before the first runs (a contrastive step's cached
/// gradients: speech-clap's 64 pairs held 5-15 MiB of log-mel frames beside the running
/// micro-batch, 2026-12-07); 0 where it reads each as it runs it. On a device the pool's
/// pages are fitted to steps measured as a run takes them, and this stays 0.
pub fn held_input_bytes_per_frame<T: TrainingTask>(
    target: Target,
    task: &T,
    longest: usize,
) -> f64 {
    if task.coupling() != Coupling::Embeddings || !target.backend.is_host() {
        return 0.0;
    }
    let at = task.at_length(longest).unwrap_or_else(|| task.clone());
    at.step_memory(target.backend, Precision::F32, 1).data as f64 / longest.max(1) as f64
}
