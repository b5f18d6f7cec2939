//! What a step costs by length, fitted to steps measured at several lengths: the model
//! planning by length ([`super::lengths`]) sizes each bucket by, and recovery reads.

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::events::planned::StepMeasurement;
use crate::lengths::{self, BUCKETS, LengthBucket, LengthBuckets, LengthCost, Padding};
use crate::split::Split;

/// Epochs of the train lengths, shuffled, over which a plan predicts the run's padding,
/// speed and peak: the peak is the largest micro-batch the packing makes, and a few epochs
/// meet most of the combinations of long utterances a run's steps draw.
pub const PREDICTED_EPOCHS: u64 = 4;

/// What a task's steps cost by length: bytes of a single micro-batch's step and seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LengthModel {
    pub bytes: LengthCost,
    pub seconds: LengthCost,
    /// f32 bytes of the summed gradients a step of several micro-batches holds.
    pub accumulation_bytes: u64,
    pub margin: f64,
    /// On a device pool that carves pages (cubecl): the bytes by its pages instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pages: Option<PagedBytes>,
    /// Every step measured, as a single micro-batch's bytes ([`Self::step_bytes`]: the
    /// fit's error near each, and none below it at or past its shape). Empty in models kept
    /// before, which add the fit's largest shortfall to every prediction instead.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub measured: Vec<MeasuredBytes>,
    /// Input bytes per padded frame that a step of several micro-batches holds for every
    /// micro-batch beside the one running, where it reads them all before the first runs
    /// (a contrastive step's cached gradients); 0 where it reads each as it runs it.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub held_input_bytes_per_frame: f64,
}

fn is_zero(value: &f64) -> bool {
    *value == 0.0
}

/// A step's bytes measured at its shape: one micro-batch of `examples` of `frames`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MeasuredBytes {
    pub examples: usize,
    pub frames: usize,
    pub bytes: f64,
}

impl LengthModel {
    /// Fits the measured steps that carry their lengths (a step of several micro-batches
    /// read as one of its micro-batch plus the summed gradients), on `threads` threads
    /// (a CPU's pool; 1 on a device). `margin`: the relative margin on every prediction.
    /// `held_input_bytes_per_frame`: [`Self::held_input_bytes_per_frame`].
    ///
    /// The bytes are fitted to the steps of at most [`FITTED_FRAMES`] times the longest
    /// frames measured, and to those of examples at most [`SHORT`] of it however many:
    /// calibration's, which span the shapes a run's steps mostly take.
    /// A step's peak is the largest of several moments (the convolutions' per-thread scratch
    /// early, every activation later), so no one polynomial follows it from one example to
    /// a whole step of the longest: fitted to the wide steps a plan's dry-runs measure as
    /// well, it was 5-6 MiB over every step of the recogniser's default run (+10.8% median,
    /// 2026-12-07, 5d6fe5e). Those steps correct the fit near their own shapes instead.
    pub fn fit(
        measurements: &[StepMeasurement],
        accumulation_bytes: u64,
        margin: f64,
        threads: usize,
        held_input_bytes_per_frame: f64,
    ) -> Option<Self> {
        let at_length: Vec<&StepMeasurement> =
            measurements.iter().filter(|m| m.frames.is_some()).collect();
        let points = |value: &dyn Fn(&StepMeasurement) -> f64| -> Vec<(usize, usize, f64)> {
            at_length
                .iter()
                .map(|m| (m.patches, m.frames.unwrap_or(1), value(m)))
                .collect()
        };
        let held = move |m: &StepMeasurement| {
            if m.micro_batches > 1 {
                accumulation_bytes
            } else {
                0
            }
        };
        // A measured step of several micro-batches held some of the others' inputs beside
        // the micro-batch that set its peak ([`held_beside`]): the last, beside every
        // other's, where it is as large as the first; else the first, whose more examples
        // outweigh the inputs beside the last.
        let inputs = |m: &StepMeasurement| {
            let step = m.step_examples.unwrap_or(m.micro_batches * m.patches);
            let sizes = Split::of_step(step, m.patches, 1).micro_batch_sizes();
            let at = match (sizes.first(), sizes.last()) {
                (Some(first), Some(last)) if first == last => sizes.len() - 1,
                _ => 0,
            };
            let others = held_beside(&sizes, at) * m.frames.unwrap_or(1);
            (held_input_bytes_per_frame * others as f64) as u64
        };
        let single = |m: &StepMeasurement| m.peak_bytes.saturating_sub(held(m) + inputs(m)) as f64;
        // Only single micro-batches time a micro-batch.
        let timed: Vec<(usize, usize, f64)> = at_length
            .iter()
            .filter(|m| m.micro_batches == 1)
            .map(|m| (m.patches, m.frames.unwrap_or(1), m.seconds))
            .collect();
        let mut seconds = LengthCost::fit(&timed)?;
        // Time is predicted, not guaranteed: no shortfall.
        seconds.shortfall = 0.0;
        let all = points(&single);
        let longest = all.iter().map(|&(_, t, _)| t).max().unwrap_or(1);
        let narrow: Vec<(usize, usize, f64)> = all
            .iter()
            .copied()
            .filter(|&(n, t, _)| n * t <= FITTED_FRAMES * longest || t <= longest.div_ceil(SHORT))
            .collect();
        let fitted = if narrow.len() >= MIN_FITTED {
            &narrow
        } else {
            &all
        };
        let mut bytes = LengthCost::fit_on_threads(fitted, threads)?;
        // The steps measured take the shortfall's place: each corrects the fit near it.
        bytes.shortfall = 0.0;
        Some(Self {
            bytes,
            seconds,
            accumulation_bytes,
            margin,
            pages: PagedBytes::fit(&at_length, held),
            held_input_bytes_per_frame,
            measured: all
                .iter()
                .map(|&(examples, frames, bytes)| MeasuredBytes {
                    examples,
                    frames,
                    bytes,
                })
                .collect(),
        })
    }

    /// Predicted peak bytes of a step's micro-batch of `examples` of `frames`, with the
    /// margin; `accumulating`: the step holds summed gradients beside it.
    pub fn step_bytes(&self, examples: usize, frames: usize, accumulating: bool) -> u64 {
        let held = if accumulating {
            self.accumulation_bytes
        } else {
            0
        };
        // Pages are whole: the margin goes on what is beside them only (the spread covers
        // the steps measured in the pages).
        if let Some(pages) = &self.pages {
            return pages.step_bytes(examples, frames, held, self.margin);
        }
        let fit = self.bytes.fitted(examples, frames);
        if self.measured.is_empty() {
            // A model kept before: the shortfall (the most a measured step exceeded the
            // fit) or the margin, the larger.
            let covered = (fit * (1.0 + self.margin)).max(fit + self.bytes.shortfall);
            return (covered + held as f64).ceil() as u64;
        }
        let near = near_error(&self.measured, &self.bytes, examples, frames);
        // Past the widest step measured the fit reaches further than anything checked it:
        // the margin grows with how far (speech-clap's dry-run of 111 x 271 at 256 MiB, 27%
        // wider than any measured, came 2.3% over the fit where the margin was 2%,
        // 2026-12-07).
        let widest = self
            .measured
            .iter()
            .map(|m| (m.examples * m.frames) as f64)
            .fold(1.0, f64::max);
        let beyond = ((examples * frames) as f64 / widest).ln().clamp(0.0, 2.0);
        let margin = self.margin * (1.0 + beyond);
        let mut covered = fit * (1.0 + near) * (1.0 + margin);
        // Bytes grow with examples and frames, and the fit falls further short the further
        // it reaches: never below a step measured at or under this shape, nor below the fit
        // grown from it as from where it was measured.
        for m in &self.measured {
            if m.examples <= examples && m.frames <= frames {
                let there = self.bytes.fitted(m.examples, m.frames);
                let grown = if there > 0.0 { fit / there } else { 1.0 };
                covered = covered.max(m.bytes * grown.max(1.0) * (1.0 + margin));
            }
        }
        (covered + held as f64).ceil() as u64
    }

    /// The most examples of `over`'s frames a micro-batch may hold after `over` was measured
    /// past `available` bytes, on a paged pool ([`PagedBytes::most_after_over`]); `None`
    /// elsewhere.
    pub fn most_after_over(&self, over: &StepMeasurement, available: u64) -> Option<usize> {
        let held = if over.micro_batches > 1 {
            self.accumulation_bytes
        } else {
            0
        };
        self.pages
            .as_ref()?
            .most_after_over(over, held, self.margin, available)
    }

    /// Predicted peak bytes of a step of `lengths` (sorted) packed in micro-batches of
    /// `sizes`: its largest micro-batch's, each at its longest example, with the inputs of
    /// others that are held beside it where the step holds them
    /// ([`Self::held_input_bytes_per_frame`], [`held_beside`]).
    pub fn packed_bytes(&self, lengths: &[usize], sizes: &[usize]) -> u64 {
        let accumulating = sizes.len() > 1;
        let padded: Vec<usize> = lengths::micro_batches(lengths, sizes)
            .map(|batch| batch.len() * batch.last().copied().unwrap_or(0))
            .collect();
        lengths::micro_batches(lengths, sizes)
            .enumerate()
            .map(|(i, batch)| {
                let longest = batch.last().copied().unwrap_or(0);
                let others = if accumulating {
                    held_beside(&padded, i)
                } else {
                    0
                };
                self.step_bytes(batch.len(), longest, accumulating) + self.held_inputs(others)
            })
            .max()
            .unwrap_or(0)
    }

    /// Bytes of the held inputs of `frames` padded frames beside the running micro-batch.
    pub fn held_inputs(&self, frames: usize) -> u64 {
        (self.held_input_bytes_per_frame * frames as f64).ceil() as u64
    }

    /// Predicted peak bytes of a full micro-batch of `examples` of `frames` in a step of
    /// `effective_batch` examples of `typical` frames: what the step holds beside it where
    /// it accumulates (the others' inputs at `typical`, or `frames` when less: all of them,
    /// as beside a step's last micro-batch, [`held_beside`]).
    pub fn bucket_bytes(
        &self,
        examples: usize,
        frames: usize,
        effective_batch: usize,
        typical: usize,
    ) -> u64 {
        let accumulating = examples < effective_batch;
        let others = effective_batch.saturating_sub(examples) * typical.min(frames);
        self.step_bytes(examples, frames, accumulating) + self.held_inputs(others)
    }

    /// The most examples of `frames` (at most `most`) whose step fits in `available` bytes;
    /// 0 when not one does.
    /// `accumulating`: beside a step's summed gradients, and the inputs it holds for the
    /// rest of a step of `most` examples of `typical` frames.
    pub fn cap(
        &self,
        frames: usize,
        available: u64,
        most: usize,
        accumulating: bool,
        typical: usize,
    ) -> usize {
        most_that_fits(most.max(1), |n| {
            let step = if accumulating { most.max(n + 1) } else { n };
            self.bucket_bytes(n, frames, step, typical) <= available
        })
    }

    /// The longest example shorter than `longest` frames that a micro-batch holds alone in
    /// `available` bytes (`accumulating`: beside a step's summed gradients); `None` when
    /// not even one frame does.
    pub fn longest_alone(
        &self,
        available: u64,
        accumulating: bool,
        longest: usize,
    ) -> Option<usize> {
        // Bytes grow with frames (every term of the fit is non-negative).
        let frames = most_that_fits(longest.saturating_sub(1), |frames| {
            self.step_bytes(1, frames, accumulating) <= available
        });
        (frames > 0).then_some(frames)
    }

    /// Buckets for a run of examples of `lengths`, `effective_batch` per step, in
    /// `available` bytes beside what is resident; `Err` with the bytes one example of the
    /// longest needs when not even that fits.
    pub fn buckets(
        &self,
        lengths: &[usize],
        effective_batch: usize,
        available: u64,
    ) -> Result<LengthBuckets, u64> {
        let edges = lengths::edges(lengths, BUCKETS);
        let typical = typical_length(lengths);
        let mut buckets = Vec::with_capacity(edges.len());
        for frames in edges {
            let alone = self.cap(frames, available, effective_batch, false, typical);
            // A bucket that cannot hold a whole step accumulates, and holds the gradients.
            let examples = if alone >= effective_batch {
                alone
            } else {
                self.cap(frames, available, effective_batch, true, typical)
            };
            if examples == 0 {
                let longest = lengths.iter().copied().max().unwrap_or(frames);
                return Err(self.bucket_bytes(1, longest, effective_batch, typical));
            }
            buckets.push(LengthBucket { frames, examples });
        }
        // A longer bucket never holds more than a shorter one.
        for i in (0..buckets.len().saturating_sub(1)).rev() {
            buckets[i].examples = buckets[i].examples.max(buckets[i + 1].examples);
        }
        Ok(LengthBuckets {
            buckets,
            seconds: Some(self.seconds),
        })
    }

    /// A what-if: the buckets for `lengths` in `available` bytes and what their epochs are
    /// predicted to do; `by_time`: steps packed by this model's time (else each micro-batch
    /// as full as its bucket allows, for a device whose time it does not know). `Err` with
    /// the bytes one example of the longest needs when not even that fits.
    pub fn plan(
        &self,
        lengths: &[usize],
        effective_batch: usize,
        available: u64,
        by_time: bool,
    ) -> Result<(LengthBuckets, Predicted), u64> {
        let mut buckets = self.buckets(lengths, effective_batch, available)?;
        if !by_time {
            buckets.seconds = None;
        }
        let predicted = self.epochs(&buckets, lengths, effective_batch, PREDICTED_EPOCHS);
        Ok((buckets, predicted))
    }

    /// The predicted peak over every bucket's full micro-batch.
    /// `lengths`: the run's, whose mean is what the other examples of a step are taken to
    /// be ([`Self::bucket_bytes`]).
    pub fn peak(&self, buckets: &LengthBuckets, effective_batch: usize, lengths: &[usize]) -> u64 {
        let typical = typical_length(lengths);
        buckets
            .buckets
            .iter()
            .map(|b| self.bucket_bytes(b.examples, b.frames, effective_batch, typical))
            .max()
            .unwrap_or(0)
    }

    /// What `epochs` epochs of `lengths` in shuffled steps of `effective_batch`, each sorted
    /// and packed by `buckets` as a run packs them, are predicted to pad, run and reach.
    pub fn epochs(
        &self,
        buckets: &LengthBuckets,
        lengths: &[usize],
        effective_batch: usize,
        epochs: u64,
    ) -> Predicted {
        let mut predicted = Predicted::default();
        let mut seconds = 0.0;
        for epoch in 0..epochs {
            let mut order = lengths.to_vec();
            order.shuffle(&mut ChaCha8Rng::seed_from_u64(epoch));
            for step in order.chunks(effective_batch.max(1)) {
                let mut step = step.to_vec();
                step.sort_unstable();
                let sizes = buckets.pack(&step);
                predicted.padding.add(lengths::padding(&step, &sizes));
                for batch in lengths::micro_batches(&step, &sizes) {
                    let longest = batch.last().copied().unwrap_or(0);
                    seconds += self.seconds.at(batch.len(), longest).max(0.0);
                }
                predicted.step_bytes = predicted.step_bytes.max(self.packed_bytes(&step, &sizes));
            }
        }
        if seconds > 0.0 {
            predicted.examples_per_s = (lengths.len() as u64 * epochs) as f64 / seconds;
        }
        predicted
    }
}

/// How far past the longest frames measured (in examples x frames) a step may be and still
/// be fitted: calibration's widest, three of the longest on a CPU.
pub const FITTED_FRAMES: usize = 3;

/// A step of examples this many times shorter than the longest is fitted however many it
/// holds: calibration's widest step (`lengths::measuring`) is of a sixteenth of the longest,
/// and without it the fit is made to steps of at most 16 examples and takes nothing per
/// example. speech-clap's text tower costs about 90 kB a pair whatever the audio's length,
/// and its steps of 35 to 51 pairs came 3% short by the median in a default run (2026-12-07,
/// 2fadd44); with it calibration's every step is fitted within 2.1%.
pub const SHORT: usize = 16;

/// Fewer fitted steps than this and every step measured is fitted.
const MIN_FITTED: usize = 3;

/// How near a measured step must be to correct a prediction, in natural logs of the
/// examples and of the frames: a step at 4/3 of either counts 71% as much as one at the
/// shape itself, one at twice either 15%.
const NEAR: f64 = 0.5;

/// What the fit alone is taken to weigh against the steps measured near a shape: far from
/// every one, a prediction is the fit's.
const FIT_WEIGHT: f64 = 0.1;

/// The fit's relative error near `examples` x `frames`: the measured steps' own, each
/// weighted by how near it is (a Gaussian in log examples and log frames).
fn near_error(measured: &[MeasuredBytes], fit: &LengthCost, examples: usize, frames: usize) -> f64 {
    let (n, t) = (examples.max(1) as f64, frames.max(1) as f64);
    let (mut weighted, mut weights) = (0.0, FIT_WEIGHT);
    for m in measured {
        let fitted = fit.fitted(m.examples, m.frames);
        if fitted <= 0.0 {
            continue;
        }
        let distance =
            (n / m.examples.max(1) as f64).ln().powi(2) + (t / m.frames.max(1) as f64).ln().powi(2);
        let weight = (-distance / (NEAR * NEAR)).exp();
        weighted += weight * (m.bytes / fitted - 1.0);
        weights += weight;
    }
    weighted / weights
}

/// What is held beside micro-batch `at` of a step that reads every micro-batch's inputs
/// before the first runs (a contrastive step's cached gradients, `crate::step::cached`), of
/// each micro-batch's `sizes` (examples, or padded frames): the last runs first, with its
/// graph kept, beside every other's; each other then runs again in order, beside those
/// after it but the last, whose inputs went with its graph. speech-clap's steps of several
/// micro-batches were predicted up to 9% over when every one was taken to run beside all
/// the others (bench/speech_inrun at 128 MiB, 2026-12-07, 3da2571).
fn held_beside(sizes: &[usize], at: usize) -> usize {
    match sizes.len().checked_sub(1) {
        Some(last) if at == last => sizes[..last].iter().sum(),
        Some(last) if at < last => sizes[at + 1..last].iter().sum(),
        _ => 0,
    }
}

/// The mean of `lengths`, rounded up: the frames a step's other examples are taken to have
/// where it holds their inputs (a step's share of long examples is a bucket's to bound).
fn typical_length(lengths: &[usize]) -> usize {
    lengths.iter().sum::<usize>().div_ceil(lengths.len().max(1))
}

/// The most `n` in `1..=most` that `fits`, which holds up to some `n` and not past it (a
/// step's bytes grow with its examples and its frames); 0 when not even 1 does.
fn most_that_fits(most: usize, fits: impl Fn(usize) -> bool) -> usize {
    if most == 0 || !fits(1) {
        return 0;
    }
    let (mut lo, mut hi) = (1, most);
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if fits(mid) { lo = mid } else { hi = mid - 1 }
    }
    lo
}

/// What a length plan's steps are predicted to do over whole epochs.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Predicted {
    pub padding: Padding,
    pub examples_per_s: f64,
    /// The largest step's bytes (beside what is resident): the peak a run is predicted to
    /// reach, where every bucket full is the most it may.
    pub step_bytes: u64,
}

mod paged;
pub use paged::{PagedBytes, page_for};

#[cfg(test)]
mod tests;
