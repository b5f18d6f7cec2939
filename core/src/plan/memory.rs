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

use crate::backend::BackendKind;
use crate::model::VqAutoencoderConfig;
use crate::probe::Precision;

const F32: u64 = 4;
const PATCH: u64 = 64;

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
                LinearCost::fit(p[i - 1], p[i])
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
    /// Relative margin added to every prediction, so that a prediction errs high.
    pub margin: f64,
}

impl MemoryModel {
    /// Predicted peak bytes of a step with `patches` patches per micro-batch; `None` for a
    /// combination that was not measured.
    pub fn predict(
        &self,
        patches: usize,
        precision: Precision,
        checkpointing: bool,
    ) -> Option<u64> {
        let cost = self.cost(precision, checkpointing)?;
        Some((cost.at(patches).max(0.0) * (1.0 + self.margin)).ceil() as u64)
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

/// Where a step's bytes go, by the model's shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Breakdown {
    pub parameters: u64,
    pub gradients: u64,
    /// AdamW's first and second moments.
    pub optimizer: u64,
    /// What autodiff keeps for backward, for the micro-batch.
    pub activations: u64,
    /// The micro-batch's input patches and the quantizer's distance matrix (none where
    /// wgpu's nearest-code kernel runs); in a run's plan on a CPU also the train stream's
    /// read-ahead.
    pub data: u64,
    /// The measured prediction minus the parts above (allocator and kernel workspaces).
    pub overhead: u64,
    /// In use before training: the dataset on a CPU, nothing on a GPU.
    pub resident: u64,
    /// Budget minus the prediction (and minus what was resident before training).
    pub free: u64,
}

/// Parameters of the default model, as PyTorch counts them.
pub fn parameter_count(model: &VqAutoencoderConfig) -> u64 {
    let conv = |i: u64, o: u64, k: u64| i * o * k * k + o;
    let c = model.latent_channels as u64;
    conv(1, 32, 3)
        + conv(32, 64, 3)
        + conv(64, 96, 3)
        + conv(96, c, 3)
        + model.codes as u64 * c
        + conv(c, 96, 4)
        + conv(96, 64, 4)
        + conv(64, 32, 4)
        + conv(32, 1, 3)
}

/// How a backend computes the model, as far as memory goes: which forms of its layers and
/// quantizer run (`model::LayerForms::Auto` picks them per device).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepForms {
    /// burn's layers: a convolution keeps its input and the ReLU after it its own input,
    /// so each hidden activation is held twice; the quantizer builds its distance matrix.
    Plain,
    /// flex's kernels: the six hidden layers but the first keep their output once.
    FlexKernels,
    /// cubecl's output-only layers (all six hidden layers once); `nearest_code_kernel`
    /// where wgpu's quantizer kernel replaces the distance matrix.
    CubeLayers { nearest_code_kernel: bool },
}

impl StepForms {
    /// The forms a training step on `backend` in `precision` runs (flex's kernels are
    /// f32 only; the quantizer is f32 in every precision).
    pub fn of(backend: BackendKind, precision: Precision) -> Self {
        match backend {
            BackendKind::Flex if precision == Precision::F32 => Self::FlexKernels,
            BackendKind::Flex => Self::Plain,
            BackendKind::Wgpu => Self::CubeLayers {
                nearest_code_kernel: true,
            },
            BackendKind::Cuda => Self::CubeLayers {
                nearest_code_kernel: false,
            },
            BackendKind::Ndarray => Self::Plain,
        }
    }

    /// How many copies of hidden layer `i` (0-5: enc1, enc2, enc3, dec1, dec2, dec3) autodiff
    /// keeps: its output, and its pre-activation where the ReLU is burn's.
    fn copies(self, layer: usize) -> u64 {
        match self {
            Self::Plain => 2,
            Self::FlexKernels if layer == 0 => 2,
            Self::FlexKernels | Self::CubeLayers { .. } => 1,
        }
    }

    fn distance_matrix(self) -> bool {
        !matches!(
            self,
            Self::CubeLayers {
                nearest_code_kernel: true
            }
        )
    }
}

/// Floats autodiff keeps per patch: each hidden layer's output (twice where burn's ReLU
/// keeps the pre-activation too, see [`StepForms`]), the latent, its quantized copy, the
/// reconstruction and the reconstruction error the loss differentiates.
pub fn activation_floats_per_patch(model: &VqAutoencoderConfig, forms: StepForms) -> u64 {
    let c = model.latent_channels as u64;
    let map = |channels: u64, side: u64| channels * side * side;
    let hidden = [
        map(32, 32),
        map(64, 16),
        map(96, 8),
        map(96, 16),
        map(64, 32),
        map(32, 64),
    ];
    let hidden: u64 = (0..6).map(|i| forms.copies(i) * hidden[i]).sum();
    let latent = map(c, 8);
    let quantizer = 2 * map(c, 8);
    let reconstruction = map(1, 64);
    let loss = map(1, 64);
    hidden + latent + quantizer + reconstruction + loss
}

/// The breakdown of a step with `patches` per micro-batch, its overhead taken from the
/// measured prediction.
pub fn breakdown(
    model: &VqAutoencoderConfig,
    forms: StepForms,
    patches: usize,
    predicted: u64,
    resident: u64,
    budget: u64,
) -> Breakdown {
    let p = patches as u64;
    let parameters = parameter_count(model) * F32;
    let latent_positions = p * 8 * 8;
    let distances = if forms.distance_matrix() {
        latent_positions * model.codes as u64 * F32
    } else {
        0
    };
    let data = p * PATCH * PATCH * F32 + distances;
    let mut b = Breakdown {
        parameters,
        gradients: parameters,
        optimizer: 2 * parameters,
        activations: p * activation_floats_per_patch(model, forms) * F32,
        data,
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
            margin: 0.02,
        };
        assert_eq!(model.predict(10, Precision::F32, false), Some(204));
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

    #[test]
    fn the_analytic_count_matches_the_built_model() {
        assert_eq!(parameter_count(&VqAutoencoderConfig::default()), 392_193);
    }

    /// burn's layers keep each hidden activation twice; the output-only forms once; the
    /// nearest-code kernel drops the distance matrix.
    #[test]
    fn the_forms_change_what_a_patch_keeps() {
        let model = VqAutoencoderConfig::default();
        let hidden_once =
            32 * 32 * 32 + 64 * 16 * 16 + 96 * 8 * 8 + 96 * 16 * 16 + 64 * 32 * 32 + 32 * 64 * 64;
        let plain = activation_floats_per_patch(&model, StepForms::Plain);
        let cube = StepForms::of(BackendKind::Wgpu, Precision::F32);
        assert_eq!(
            plain - activation_floats_per_patch(&model, cube),
            hidden_once
        );
        let flex =
            activation_floats_per_patch(&model, StepForms::of(BackendKind::Flex, Precision::F32));
        assert_eq!(plain - flex, hidden_once - 32 * 32 * 32);
        assert_eq!(
            StepForms::of(BackendKind::Flex, Precision::F16),
            StepForms::Plain
        );
        assert_eq!(StepForms::of(BackendKind::Wgpu, Precision::F16), cube);
        let with = breakdown(&model, StepForms::Plain, 10, 0, 0, 0);
        let without = breakdown(&model, cube, 10, 0, 0, 0);
        assert_eq!(with.data - without.data, 10 * 64 * 512 * 4);
    }

    #[test]
    fn the_breakdown_adds_up_to_the_prediction_and_the_budget() {
        let model = VqAutoencoderConfig::default();
        let predicted = 200 << 20;
        let b = breakdown(&model, StepForms::Plain, 32, predicted, 50 << 20, 1 << 30);
        let parts = b.parameters + b.gradients + b.optimizer + b.activations + b.data + b.overhead;
        assert_eq!(parts, predicted);
        assert_eq!(b.free, (1 << 30) - (250 << 20));
    }
}
