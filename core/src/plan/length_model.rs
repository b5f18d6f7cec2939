//! What a step costs by length, fitted to steps measured at several lengths: the model
//! planning by length ([`super::lengths`]) sizes each bucket by, and recovery reads.

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::events::planned::StepMeasurement;
use crate::lengths::{self, BUCKETS, LengthBucket, LengthBuckets, LengthCost, Padding};

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
}

impl LengthModel {
    /// Fits the measured steps that carry their lengths (a step of several micro-batches
    /// read as one of its micro-batch plus the summed gradients).
    /// `margin`: the relative margin on every prediction.
    pub fn fit(
        measurements: &[StepMeasurement],
        accumulation_bytes: u64,
        margin: f64,
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
        let single = |m: &StepMeasurement| m.peak_bytes.saturating_sub(held(m)) as f64;
        // Only single micro-batches time a micro-batch.
        let timed: Vec<(usize, usize, f64)> = at_length
            .iter()
            .filter(|m| m.micro_batches == 1)
            .map(|m| (m.patches, m.frames.unwrap_or(1), m.seconds))
            .collect();
        let mut seconds = LengthCost::fit(&timed)?;
        // Time is predicted, not guaranteed: no shortfall.
        seconds.shortfall = 0.0;
        Some(Self {
            bytes: LengthCost::fit(&points(&single))?,
            seconds,
            accumulation_bytes,
            margin,
            pages: PagedBytes::fit(&at_length, held),
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
        // The shortfall (the most a measured step exceeded the fit) and the margin each
        // cover what the fit misses: the larger of the two, not both, so a prediction is
        // neither below a measured step nor padded twice.
        let fit = self.bytes.at(examples, frames) - self.bytes.shortfall;
        let covered = (fit * (1.0 + self.margin)).max(fit + self.bytes.shortfall);
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
    /// `sizes`: its largest micro-batch's, each at its longest example.
    pub fn packed_bytes(&self, lengths: &[usize], sizes: &[usize]) -> u64 {
        let accumulating = sizes.len() > 1;
        lengths::micro_batches(lengths, sizes)
            .map(|batch| {
                let longest = batch.last().copied().unwrap_or(0);
                self.step_bytes(batch.len(), longest, accumulating)
            })
            .max()
            .unwrap_or(0)
    }

    /// The most examples of `frames` (at most `most`) whose step fits in `available` bytes;
    /// 0 when not one does.
    pub fn cap(&self, frames: usize, available: u64, most: usize, accumulating: bool) -> usize {
        most_that_fits(most.max(1), |n| {
            self.step_bytes(n, frames, accumulating) <= available
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
        let mut buckets = Vec::with_capacity(edges.len());
        for frames in edges {
            let alone = self.cap(frames, available, effective_batch, false);
            // A bucket that cannot hold a whole step accumulates, and holds the gradients.
            let examples = if alone >= effective_batch {
                alone
            } else {
                self.cap(frames, available, effective_batch, true)
            };
            if examples == 0 {
                let longest = lengths.iter().copied().max().unwrap_or(frames);
                return Err(self.step_bytes(1, longest, effective_batch > 1));
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
    pub fn peak(&self, buckets: &LengthBuckets, effective_batch: usize) -> u64 {
        buckets
            .buckets
            .iter()
            .map(|b| self.step_bytes(b.examples, b.frames, b.examples < effective_batch))
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
