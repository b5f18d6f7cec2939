//! What a step costs by its examples and their length, fitted to measured steps.

use serde::{Deserialize, Serialize};

/// `value = a + m (e t + f t^2) + n (d + b t + c t^2)` for `n` examples of `t` frames, where
/// `m` = min(`n`, threads): fitted by least squares to measured steps, and raised by what it
/// fell short of any of them. `e` and `f` are what grows with the length and the threads at
/// work but not with the examples past them: the scratch each thread takes for its share of
/// a step (a convolution's unfolded matrix, an attention head's score gradients). The CPU
/// kernels make one scratch per thread that has a piece of the work, so a step of one
/// example holds one where a step of eight on two threads holds two
/// (`model::cpu_kernels::per_thread`). On a device `threads` is 1: the term is once a step.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LengthCost {
    pub fixed: f64,
    /// What each example costs whatever its length (its transcript's tokens, its masks).
    #[serde(default)]
    pub per_example: f64,
    pub per_frame: f64,
    pub per_frame_squared: f64,
    /// What the longest example's frames cost once per thread at work.
    #[serde(default)]
    pub per_length: f64,
    #[serde(default)]
    pub per_length_squared: f64,
    /// The most a measurement exceeded the fit: added to every prediction, so that none
    /// is below a step measured at its size.
    pub shortfall: f64,
    /// Threads that share a step's examples, each with its scratch (1 on a device, and in
    /// models kept before threads were counted).
    #[serde(default = "one_thread", skip_serializing_if = "is_one")]
    pub threads: usize,
}

fn one_thread() -> usize {
    1
}

fn is_one(threads: &usize) -> bool {
    *threads == 1
}

/// The fit's features of `n` examples of `t` frames on `threads` (frames in thousands keeps
/// the normal equations well scaled).
fn features(n: usize, t: usize, threads: usize) -> [f64; TERMS] {
    let busy = n.min(threads.max(1)) as f64;
    let (n, t) = (n as f64, t as f64 / 1e3);
    [1.0, n, n * t, n * t * t, busy * t, busy * t * t]
}

/// The fit's terms: fixed, per example, per example-frame and its square, per frame and
/// its square (per thread at work).
const TERMS: usize = 6;

impl LengthCost {
    pub fn at(&self, examples: usize, frames: usize) -> f64 {
        let busy = examples.min(self.threads.max(1)) as f64;
        let (n, t) = (examples as f64, frames as f64);
        self.fixed
            + busy * (self.per_length * t + self.per_length_squared * t * t)
            + n * (self.per_example + self.per_frame * t + self.per_frame_squared * t * t)
            + self.shortfall
    }

    /// [`Self::at`] without the shortfall: the least-squares fit alone.
    pub fn fitted(&self, examples: usize, frames: usize) -> f64 {
        self.at(examples, frames) - self.shortfall
    }

    /// The least-squares fit to `(examples, frames, value)`, its coefficients kept at zero
    /// or above (a negative cost is noise on a small term): of the fits of every subset of
    /// the terms whose coefficients are, the closest.
    pub fn fit(points: &[(usize, usize, f64)]) -> Option<Self> {
        Self::fit_within(points, &[])
    }

    /// As [`Self::fit`], of steps on `threads` threads ([`Self::threads`]).
    pub fn fit_on_threads(points: &[(usize, usize, f64)], threads: usize) -> Option<Self> {
        Self::fit_bounded(points, &[], threads)
    }

    /// As [`Self::fit`], of the fits that stay at or under each of `bounds` (shapes whose
    /// value is known to be at most so much): a value measured at one length only leaves
    /// how it grows with length to the fewest terms, which may put the whole of it on the
    /// examples; bounds at other lengths tell those fits apart. The closest fit that passes
    /// them, or the closest of all when none does.
    pub fn fit_within(
        points: &[(usize, usize, f64)],
        bounds: &[(usize, usize, f64)],
    ) -> Option<Self> {
        Self::fit_bounded(points, bounds, 1)
    }

    fn fit_bounded(
        points: &[(usize, usize, f64)],
        bounds: &[(usize, usize, f64)],
        threads: usize,
    ) -> Option<Self> {
        let threads = threads.max(1);
        if points.is_empty() {
            return None;
        }
        let mut best: Option<(bool, f64, [f64; TERMS])> = None;
        // The fixed term always; the others in or out, fewest first: a simpler cost that
        // fits as closely extrapolates better, and wins ties.
        let mut masks: Vec<u8> = (0..1 << (TERMS - 1)).collect();
        masks.sort_by_key(|m| m.count_ones());
        for mask in masks {
            let subset: Vec<usize> = std::iter::once(0)
                .chain((1..TERMS).filter(|i| mask & (1 << (i - 1)) != 0))
                .collect();
            let Some(coefficients) = least_squares(points, &subset, threads) else {
                continue;
            };
            if coefficients.iter().any(|&c| c < 0.0) {
                continue;
            }
            let within = bounds.iter().all(|&(n, t, most)| {
                let x = features(n, t, threads);
                (0..TERMS).map(|i| x[i] * coefficients[i]).sum::<f64>() <= most * (1.0 + 1e-9)
            });
            let residual: f64 = points
                .iter()
                .map(|&(n, t, v)| {
                    let x = features(n, t, threads);
                    (v - (0..TERMS).map(|i| x[i] * coefficients[i]).sum::<f64>()).powi(2)
                })
                .sum();
            // A fit within the bounds beats any outside them, then the closer.
            let better = best.is_none_or(|(w, r, _)| {
                (within && !w) || (within == w && residual < r * (1.0 - 1e-9) - 1e-9)
            });
            if better {
                best = Some((within, residual, coefficients));
            }
        }
        let (_, _, [a, d, b, c, e, f]) = best?;
        let mut cost = Self {
            fixed: a,
            per_example: d,
            per_frame: b / 1e3,
            per_frame_squared: c / 1e6,
            per_length: e / 1e3,
            per_length_squared: f / 1e6,
            shortfall: 0.0,
            threads,
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
fn least_squares(
    points: &[(usize, usize, f64)],
    subset: &[usize],
    threads: usize,
) -> Option<[f64; TERMS]> {
    let k = subset.len();
    if points.len() < k {
        return None;
    }
    // The normal equations, [X'X | X'y], solved by elimination with partial pivoting.
    let mut m = vec![vec![0.0; k + 1]; k];
    for &(n, t, v) in points {
        let x = features(n, t, threads);
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
    let mut coefficients = [0.0; TERMS];
    for (i, &f) in subset.iter().enumerate() {
        coefficients[f] = m[i][k] / m[i][i];
    }
    Some(coefficients)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values at one length fit an allocation per example as well as one growing with
    /// length (the fewest terms win, here one 10x over at a tenth of the length): bounds at
    /// other lengths tell them apart, and a fit that no bound allows is still a fit.
    #[test]
    fn bounds_at_other_lengths_pick_how_a_cost_grows_with_length() {
        // An attention-like allocation: 8 bytes per example-frame squared.
        let at = |n: usize, t: usize| 8.0 * (n * t * t) as f64;
        let points = [(1, 3_000, at(1, 3_000)), (2, 3_000, at(2, 3_000))];
        let free = LengthCost::fit(&points).unwrap();
        assert!(
            free.at(64, 300) > 5.0 * at(64, 300),
            "unbounded: {}",
            free.at(64, 300)
        );
        let bounds = [(16, 375, at(16, 375) * 1.5), (64, 300, at(64, 300) * 1.5)];
        let bounded = LengthCost::fit_within(&points, &bounds).unwrap();
        for (n, t) in [(64, 300), (128, 600), (4, 3_000)] {
            let (got, want) = (bounded.at(n, t), at(n, t));
            assert!(
                (got - want).abs() <= want * 1e-6,
                "{n} x {t}: {got} against {want}"
            );
        }
        let impossible = [(64, 300, 0.0)];
        assert_eq!(LengthCost::fit_within(&points, &impossible), Some(free));
    }
}
