//! The memory model of a training step: what the planner predicts before it runs anything.
//!
//! Two layers. The analytic breakdown names where the bytes go (parameters, gradients,
//! AdamW's two moments, the activations autodiff keeps per patch, the input batch, the
//! quantizer's distance matrix), from the model's layer shapes. The prediction itself comes
//! from measurements: real steps at several micro-batch sizes on the device, read as
//! straight segments between them ([`MeasuredCost`]); what the measured total holds beyond
//! the analytic parts is the backend's overhead (allocator rounding, im2col buffers,
//! kernels' workspaces), which no layer table knows.
//!
//! Segments, not one line: a step's peak is the largest of its moments, each holding some
//! bytes whatever the batch and some per patch, and a maximum of lines is convex. On flex the
//! cost per patch is 2.09 MiB between 4 and 16 patches and 2.42 MiB from 32 patches on
//! (exactly linear from 32 to 512), so a line through two small calibration steps fell 11%
//! under at the sizes large budgets plan. The planner's
//! dry-run adds its own step as a point, so a prediction at the plan's size rests on a
//! measurement there (docs/PLANNER.md).

use serde::{Deserialize, Serialize};

pub use crate::events::planned::Breakdown;
use crate::model::AnalyticStep;
use crate::precision::Precision;

/// `fixed + per_patch x patches`, in bytes or seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LinearCost {
    pub fixed: f64,
    pub per_patch: f64,
}

impl LinearCost {
    /// The line through two measurements `(patches, cost)`. A negative slope (noise on a
    /// flat cost) is read as flat at the larger measurement, so predictions never fall
    /// below what was seen.
    pub fn fit(a: (usize, f64), b: (usize, f64)) -> Self {
        let ((pa, ca), (pb, cb)) = if a.0 <= b.0 { (a, b) } else { (b, a) };
        if pb == pa {
            return Self {
                fixed: ca.max(cb),
                per_patch: 0.0,
            };
        }
        let per_patch = ((cb - ca) / (pb - pa) as f64).max(0.0);
        let fixed = if per_patch == 0.0 {
            ca.max(cb)
        } else {
            ca - per_patch * pa as f64
        };
        Self { fixed, per_patch }
    }

    pub fn at(&self, patches: usize) -> f64 {
        self.fixed + self.per_patch * patches as f64
    }
}

/// A cost measured in one precision.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct HalfCost<C = LinearCost> {
    pub precision: Precision,
    pub cost: C,
}

/// Bytes measured at several sizes `(patches, bytes)`: between two measured sizes the
/// straight segment joining them, beyond the ends the nearest segment carried on, with the
/// same rule as [`LinearCost::fit`] (a falling segment is read as flat). One point is flat.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct MeasuredCost {
    /// Sorted by patches, one per size.
    pub points: Vec<(usize, f64)>,
}

impl MeasuredCost {
    pub fn new(points: impl IntoIterator<Item = (usize, f64)>) -> Self {
        let mut cost = Self::default();
        for (patches, bytes) in points {
            cost.insert(patches, bytes);
        }
        cost
    }

    /// Adds a measurement; one at a size already measured replaces it (the newer step saw
    /// the process as it is now).
    pub fn insert(&mut self, patches: usize, bytes: f64) {
        match self.points.binary_search_by_key(&patches, |p| p.0) {
            Ok(i) => self.points[i].1 = bytes,
            Err(i) => self.points.insert(i, (patches, bytes)),
        }
    }

    /// The segment a size is read on.
    pub fn segment(&self, patches: usize) -> LinearCost {
        let p = &self.points;
        match p.len() {
            0 => LinearCost {
                fixed: 0.0,
                per_patch: 0.0,
            },
            1 => LinearCost {
                fixed: p[0].1,
                per_patch: 0.0,
            },
            n => {
                let i = p.partition_point(|q| q.0 < patches).clamp(1, n - 1);
                let segment = LinearCost::fit(p[i - 1], p[i]);
                // Beyond the last point, never a slope below the segment before: a peak is a
                // maximum of lines, so its slopes only grow, and a flatter last segment is a
                // noisy measurement that would under-predict every larger size.
                if patches > p[n - 1].0 && n >= 3 {
                    let before = LinearCost::fit(p[n - 3], p[n - 2]);
                    if before.per_patch > segment.per_patch {
                        let (last, bytes) = p[n - 1];
                        return LinearCost {
                            fixed: bytes - before.per_patch * last as f64,
                            per_patch: before.per_patch,
                        };
                    }
                }
                segment
            }
        }
    }

    pub fn at(&self, patches: usize) -> f64 {
        self.segment(patches).at(patches)
    }

    /// Whether a step of exactly this size was measured.
    pub fn measured_at(&self, patches: usize) -> bool {
        self.points.iter().any(|p| p.0 == patches)
    }
}

/// Measured memory of a training step on one device, above what the process held before
/// the model existed (the dataset, on a CPU).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryModel {
    /// f32, no checkpointing.
    pub plain: MeasuredCost,
    /// f32 with burn's balanced gradient checkpointing; `None` when it was not measured.
    pub checkpointed: Option<MeasuredCost>,
    /// Mixed precision (f16 or bf16 compute), no checkpointing; `None` when the device has
    /// no half precision or it was not measured.
    #[serde(default)]
    pub half: Option<HalfCost<MeasuredCost>>,
    /// What a step of several micro-batches holds beyond one micro-batch's step: the
    /// gradients summed so far (f32, one per parameter).
    #[serde(default)]
    pub accumulation_bytes: u64,
    /// Relative margin added to every prediction, so that a prediction errs high.
    pub margin: f64,
}

impl MemoryModel {
    /// Predicted peak bytes of a step of one micro-batch of `patches` patches; `None` for a
    /// combination that was not measured.
    pub fn predict(
        &self,
        patches: usize,
        precision: Precision,
        checkpointing: bool,
    ) -> Option<u64> {
        self.predict_step(patches, 1, precision, checkpointing)
    }

    /// Predicted peak bytes of a step of `accumulation` micro-batches of `patches` patches.
    pub fn predict_step(
        &self,
        patches: usize,
        accumulation: usize,
        precision: Precision,
        checkpointing: bool,
    ) -> Option<u64> {
        let cost = self.cost(precision, checkpointing)?;
        let held = self.summed_gradient_bytes(accumulation);
        Some(((cost.at(patches).max(0.0) + held) * (1.0 + self.margin)).ceil() as u64)
    }

    /// What a step of `accumulation` micro-batches holds beyond one micro-batch's step: the
    /// summed gradients, once it has more than one.
    pub fn summed_gradient_bytes(&self, accumulation: usize) -> f64 {
        if accumulation > 1 {
            self.accumulation_bytes as f64
        } else {
            0.0
        }
    }

    /// The measured cost of one kind of step; `None` for a kind that was not measured.
    pub fn cost(&self, precision: Precision, checkpointing: bool) -> Option<&MeasuredCost> {
        match (precision, checkpointing) {
            (Precision::F32, false) => Some(&self.plain),
            (Precision::F32, true) => self.checkpointed.as_ref(),
            (p, false) => self
                .half
                .as_ref()
                .filter(|h| h.precision == p)
                .map(|h| &h.cost),
            (_, true) => None,
        }
    }

    /// Whether a step of this kind and size was measured (a calibration or dry-run step).
    pub fn measured_at(&self, patches: usize, precision: Precision, checkpointing: bool) -> bool {
        self.cost(precision, checkpointing)
            .is_some_and(|c| c.measured_at(patches))
    }

    /// The precisions this model can predict, f32 first.
    pub fn precisions(&self) -> Vec<Precision> {
        std::iter::once(Precision::F32)
            .chain(self.half.as_ref().map(|h| h.precision))
            .collect()
    }
}

/// The breakdown of a step from the model's analytic sizes, its overhead taken from the
/// measured prediction.
pub fn breakdown(step: AnalyticStep, predicted: u64, resident: u64, budget: u64) -> Breakdown {
    let mut b = Breakdown {
        parameters: step.parameters,
        gradients: step.parameters,
        optimizer: 2 * step.parameters,
        activations: step.activations,
        data: step.data,
        overhead: 0,
        resident,
        free: budget.saturating_sub(resident + predicted),
    };
    let named = b.parameters + b.gradients + b.optimizer + b.activations + b.data;
    b.overhead = predicted.saturating_sub(named);
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_through_two_measurements_predicts_between_and_beyond() {
        let cost = LinearCost::fit((16, 1_000.0 + 16.0 * 50.0), (4, 1_000.0 + 4.0 * 50.0));
        assert!((cost.fixed - 1_000.0).abs() < 1e-9);
        assert!((cost.per_patch - 50.0).abs() < 1e-9);
        assert!((cost.at(64) - 4_200.0).abs() < 1e-9);
    }

    #[test]
    fn a_falling_measurement_never_predicts_less_than_was_seen() {
        let cost = LinearCost::fit((4, 1_000.0), (8, 990.0));
        assert_eq!(cost.per_patch, 0.0);
        assert_eq!(cost.at(1), 1_000.0);
    }

    #[test]
    fn the_margin_only_raises_predictions_and_checkpointing_needs_a_measurement() {
        let model = MemoryModel {
            plain: MeasuredCost::new([(0, 100.0), (10, 200.0)]),
            checkpointed: None,
            half: Some(HalfCost {
                precision: Precision::F16,
                cost: MeasuredCost::new([(0, 100.0), (10, 150.0)]),
            }),
            accumulation_bytes: 50,
            margin: 0.02,
        };
        assert_eq!(model.predict(10, Precision::F32, false), Some(204));
        assert_eq!(
            model.predict_step(10, 3, Precision::F32, false),
            Some(255),
            "an accumulating step holds the summed gradients too"
        );
        assert_eq!(model.predict(10, Precision::F32, true), None);
        assert_eq!(model.predict(10, Precision::F16, false), Some(153));
        assert_eq!(model.predict(10, Precision::Bf16, false), None);
        assert_eq!(model.precisions(), [Precision::F32, Precision::F16]);
    }

    /// The shape flex measured: 2.09 MiB a patch up to 16 patches, 2.42 from 32 on. Each
    /// size is read on the segment around it, and beyond the last point on the last segment.
    #[test]
    fn a_measured_cost_reads_each_size_between_its_neighbours() {
        let mib = |x: f64| x * 1_048_576.0;
        let mut cost = MeasuredCost::new([(16, mib(44.1)), (4, mib(19.0))]);
        assert_eq!(cost.points[0].0, 4, "sorted");
        // From the two small steps alone, 256 patches is predicted 11% low.
        let line_only = cost.at(256);
        cost.insert(64, mib(159.4));
        cost.insert(512, mib(1242.7));
        assert!((cost.at(10) - mib(31.55)).abs() < mib(0.01));
        assert!(
            (cost.at(256) - mib(623.7)).abs() < mib(0.5),
            "{}",
            cost.at(256) / mib(1.0)
        );
        assert!(line_only < 0.9 * cost.at(256));
        assert!((cost.at(1024) - mib(2480.9)).abs() < mib(1.0));
        assert!((cost.at(1) - mib(12.7)).abs() < mib(0.1));
        assert!(cost.measured_at(64) && !cost.measured_at(63));
        cost.insert(64, mib(160.0));
        assert_eq!(
            cost.points.len(),
            4,
            "a size measured again replaces its point"
        );
        assert_eq!(MeasuredCost::new([(8, 5.0)]).at(100), 5.0);
        assert_eq!(MeasuredCost::new([(4, 10.0), (8, 9.0)]).at(100), 10.0);
    }

    /// A last segment flatter than the one before it (a noisy point) is not carried on:
    /// beyond it, the earlier slope from the last point.
    #[test]
    fn a_flatter_last_segment_does_not_lower_larger_sizes() {
        let cost = MeasuredCost::new([(4, 40.0), (16, 160.0), (64, 500.0)]);
        // 10 a patch before 16, 7.1 after: beyond 64, 10 a patch from 500.
        assert!((cost.at(100) - 860.0).abs() < 1e-9);
        // Between the points, each segment as measured.
        assert!((cost.at(40) - 330.0).abs() < 1e-9);
        // A steeper last segment is carried on as it is.
        let convex = MeasuredCost::new([(4, 40.0), (16, 160.0), (64, 800.0)]);
        assert!((convex.at(100) - (800.0 + 36.0 * 640.0 / 48.0)).abs() < 1e-9);
    }

    #[test]
    fn the_breakdown_adds_up_to_the_prediction_and_the_budget() {
        let step = AnalyticStep {
            parameters: 10 << 20,
            activations: 100 << 20,
            data: 20 << 20,
        };
        let predicted = 200 << 20;
        let b = breakdown(step, predicted, 50 << 20, 1 << 30);
        let parts = b.parameters + b.gradients + b.optimizer + b.activations + b.data + b.overhead;
        assert_eq!(parts, predicted);
        assert_eq!(b.free, (1 << 30) - (250 << 20));
    }
}
