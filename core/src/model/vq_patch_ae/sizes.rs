//! What a step of the default model holds, as its shapes say: parameters, and the activations
//! autodiff keeps per patch in each form of the layers. The planner's analytic breakdown.

use serde::{Deserialize, Serialize};

use super::VqAutoencoderConfig;
use crate::backend::BackendKind;
use crate::model::AnalyticStep;
use crate::precision::Precision;

/// Parameters of the default model, as PyTorch counts them.
pub(super) fn parameter_count(model: &VqAutoencoderConfig) -> u64 {
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
    /// flex's kernels: the six hidden layers keep their output once.
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

    /// How many copies of each hidden layer's activation autodiff keeps: its output, and
    /// its pre-activation where the ReLU is burn's.
    fn copies(self) -> u64 {
        match self {
            Self::Plain => 2,
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
    let hidden: u64 = forms.copies() * hidden.iter().sum::<u64>();
    let latent = map(c, 8);
    let quantizer = 2 * map(c, 8);
    let reconstruction = map(1, 64);
    let loss = map(1, 64);
    hidden + latent + quantizer + reconstruction + loss
}

impl VqAutoencoderConfig {
    /// The analytic sizes of a step of `patches` patches computed in `forms`.
    pub fn analytic_with(&self, forms: StepForms, patches: usize) -> AnalyticStep {
        const F32: u64 = 4;
        let p = patches as u64;
        let latent_positions = p * 8 * 8;
        let distances = if forms.distance_matrix() {
            latent_positions * self.codes as u64 * F32
        } else {
            0
        };
        AnalyticStep {
            parameters: parameter_count(self) * F32,
            activations: p * activation_floats_per_patch(self, forms) * F32,
            data: p * 64 * 64 * F32 + distances,
        }
    }
}
