//! Models: the API the engine trains through ([`SpectrogramModel`], [`ModelConfig`]), the
//! built-in networks, and the layer forms they share.
//!
//! Built in: `vq-patch-ae` ([`VqAutoencoder`], the default, `shared/MODEL.md`), `dcase-ae`
//! ([`DcaseAe`], the DCASE 2020 Task 2 baseline) and `id-classifier` ([`IdClassifier`], the
//! DCASE 2021 Task 2 baseline's machine-ID classifier). A network of one's own implements the two
//! traits and trains through [`crate::train::Trainer`] (docs/MODELS.md).

mod api;
pub(crate) use api::unit_noise;
pub mod asr;
pub mod cpu_forms;
#[cfg(feature = "flex")]
pub mod cpu_kernels;
pub mod dcase_ae;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub mod gpu_layers;
pub mod id_classifier;
pub mod layers;
pub mod nearest_code;
#[cfg(any(feature = "flex", feature = "wgpu", feature = "cuda"))]
mod output_only;
mod params;
pub mod sashimi;
pub mod vq_patch_ae;

pub use api::{
    AnalyticStep, DefaultBatch, Machine, ModelConfig, ModelError, ModelInfo, ModelSpec,
    NamedConfig, PatchShape, Patches, SpectrogramModel, StepLoss,
};
pub use dcase_ae::{DcaseAe, DcaseAeConfig};
pub use id_classifier::{IdClassifier, IdClassifierConfig};
pub use layers::LayerForms;
pub(crate) use layers::relu_if;
pub use params::{flat_parameters, largest_difference, untracked};
pub use vq_patch_ae::{VqAutoencoder, VqAutoencoderConfig, VqLoss, VqOutput};
