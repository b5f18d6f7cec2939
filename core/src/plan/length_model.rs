//! What a step costs by length, fitted to steps measured at several lengths: the model
//! planning by length ([`super::lengths`]) sizes each bucket by, and recovery reads.

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::events::planned::StepMeasurement;
use crate::lengths::{self, BUCKETS, LengthBucket, LengthBuckets, Padding};

/// `value = a + n (d + b t + c t^2)` for `n` examples of `t` frames, fitted by least
/// squares to measured steps, and raised by what it fell short of any of them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LengthCost {
    pub fixed: f64,
    /// What each example costs whatever its length (its transcript's tokens, its masks).
    #[serde(default)]
    pub per_example: f64,
    pub per_frame: f64,
    pub per_frame_squared: f64,
    /// The most a measurement exceeded the fit: added to every prediction, so that none
    /// is below a step measured at its size.
    pub shortfall: f64,
}

/// The fit's features of `n` examples of `t` frames (frames in thousands keeps the normal
/// equations well scaled).
fn features(n: usize, t: usize) -> [f64; 4] {
    let (n, t) = (n as f64, t as f64 / 1e3);
    [1.0, n, n * t, n * t * t]
}

impl LengthCost {
    pub fn at(&self, examples: usize, frames: usize) -> f64 {
        let (n, t) = (examples as f64, frames as f64);
        self.fixed
            + n * (self.per_example + self.per_frame * t + self.per_frame_squared * t * t)
            + self.shortfall
    }

    /// The least-squares fit to `(examples, frames, value)`, its coefficients kept at zero
    /// or above (a negative cost is noise on a small term): of the fits of every subset of
    /// the terms whose coefficients are, the closest.
    pub fn fit(points: &[(usize, usize, f64)]) -> Option<Self> {
        if points.is_empty() {
            return None;
        }
        let mut best: Option<(f64, [f64; 4])> = None;
        // The fixed term always; the other three in or out, fewest first: a simpler cost
        // that fits as closely extrapolates better, and wins ties.
        let mut masks: Vec<u8> = (0..8).collect();
        masks.sort_by_key(|m| m.count_ones());
        for mask in masks {
            let subset: Vec<usize> = std::iter::once(0)
                .chain((1..4).filter(|i| mask & (1 << (i - 1)) != 0))
                .collect();
            let Some(coefficients) = least_squares(points, &subset) else {
                continue;
            };
            if coefficients.iter().any(|&c| c < 0.0) {
                continue;
            }
            let residual: f64 = points
                .iter()
                .map(|&(n, t, v)| {
                    let x = features(n, t);
                    (v - (0..4).map(|i| x[i] * coefficients[i]).sum::<f64>()).powi(2)
                })
                .sum();
            if best.is_none_or(|(r, _)| residual < r * (1.0 - 1e-9) - 1e-9) {
                best = Some((residual, coefficients));
            }
        }
        let (_, [a, d, b, c]) = best?;
        let mut cost = Self {
            fixed: a,
            per_example: d,
            per_frame: b / 1e3,
            per_frame_squared: c / 1e6,
            shortfall: 0.0,
        };
        cost.shortfall = points
            .iter()
            .map(|&(n, t, v)| v - cost.at(n, t))
            .fold(0.0, f64::max);
        Some(cost)
    }
}

/// Least squares over the features of `subset` (the others' coefficients zero); `None`
/// when the points do not determine them.
fn least_squares(points: &[(usize, usize, f64)], subset: &[usize]) -> Option<[f64; 4]> {
    let k = subset.len();
    if points.len() < k {
        return None;
    }
    // The normal equations, [X'X | X'y], solved by elimination with partial pivoting.
    let mut m = vec![vec![0.0; k + 1]; k];
    for &(n, t, v) in points {
        let x = features(n, t);
        for (i, &fi) in subset.iter().enumerate() {
            for (j, &fj) in subset.iter().enumerate() {
                m[i][j] += x[fi] * x[fj];
            }
            m[i][k] += x[fi] * v;
        }
    }
    let scale = m.iter().map(|row| row[0].abs()).fold(1.0, f64::max);
    for col in 0..k {
        let pivot = (col..k).max_by(|&a, &b| m[a][col].abs().total_cmp(&m[b][col].abs()))?;
        if m[pivot][col].abs() < 1e-12 * scale {
            return None;
        }
        m.swap(col, pivot);
        let pivot_row = m[col].clone();
        for (row, values) in m.iter_mut().enumerate() {
            if row != col {
                let factor = values[col] / pivot_row[col];
                for (value, p) in values.iter_mut().zip(&pivot_row).skip(col) {
                    *value -= factor * p;
                }
            }
        }
    }
    let mut coefficients = [0.0; 4];
    for (i, &f) in subset.iter().enumerate() {
        coefficients[f] = m[i][k] / m[i][i];
    }
    Some(coefficients)
}

/// What a task's steps cost by length: bytes of a single micro-batch's step and seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LengthModel {
    pub bytes: LengthCost,
    pub seconds: LengthCost,
    /// f32 bytes of the summed gradients a step of several micro-batches holds.
    pub accumulation_bytes: u64,
    pub margin: f64,
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
        let single = |m: &StepMeasurement| {
            let held = if m.micro_batches > 1 {
                accumulation_bytes
            } else {
                0
            };
            m.peak_bytes.saturating_sub(held) as f64
        };
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
        })
    }

    /// Predicted peak bytes of a step's micro-batch of `examples` of `frames`, with the
    /// margin; `accumulating`: the step holds summed gradients beside it.
    pub fn step_bytes(&self, examples: usize, frames: usize, accumulating: bool) -> u64 {
        let held = if accumulating {
            self.accumulation_bytes as f64
        } else {
            0.0
        };
        (self.bytes.at(examples, frames) * (1.0 + self.margin) + held).ceil() as u64
    }

    /// The most examples of `frames` (at most `most`) whose step fits in `available` bytes;
    /// 0 when not one does.
    pub fn cap(&self, frames: usize, available: u64, most: usize, accumulating: bool) -> usize {
        let fits = |n: usize| self.step_bytes(n, frames, accumulating) <= available;
        if !fits(1) {
            return 0;
        }
        let (mut lo, mut hi) = (1, most.max(1));
        while lo < hi {
            let mid = (lo + hi).div_ceil(2);
            if fits(mid) { lo = mid } else { hi = mid - 1 }
        }
        lo
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
        Ok(LengthBuckets { buckets })
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

    /// Padding and examples per second over an epoch of `lengths` in shuffled steps of
    /// `effective_batch`, each sorted and packed by `buckets`, as a run packs them.
    pub fn epoch(
        &self,
        buckets: &LengthBuckets,
        lengths: &[usize],
        effective_batch: usize,
    ) -> (Padding, f64) {
        let mut order = lengths.to_vec();
        order.shuffle(&mut ChaCha8Rng::seed_from_u64(0));
        let (mut padding, mut seconds) = (Padding::default(), 0.0);
        for step in order.chunks(effective_batch.max(1)) {
            let mut step = step.to_vec();
            step.sort_unstable();
            let sizes = buckets.pack(&step);
            padding.add(lengths::padding(&step, &sizes));
            let mut rest = step.as_slice();
            for size in sizes {
                let (batch, after) = rest.split_at(size);
                seconds += self
                    .seconds
                    .at(size, batch.last().copied().unwrap_or(0))
                    .max(0.0);
                rest = after;
            }
        }
        let per_s = if seconds > 0.0 {
            lengths.len() as f64 / seconds
        } else {
            0.0
        };
        (padding, per_s)
    }
}

#[cfg(test)]
mod tests;
