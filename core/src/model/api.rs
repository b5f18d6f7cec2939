//! What the engine needs from a network, and nothing more: the input it takes, its loss, its
//! per-patch anomaly score and, where it can say, the sizes of a step. The trainer,
//! planner, checkpoints and scoring are written against these two traits, so a model defined
//! outside Headroom trains, plans and scores like the built-in ones.
//!
//! Why traits with an associated config rather than one trait object: burn's `Module` (what
//! the optimizer, gradients and records work on) is not object-safe, and a run's model is
//! fixed when it starts, so the engine is generic over the model and front-ends choose it by
//! name once (`crate::registry`).

use burn::module::Module;
use burn::tensor::{Device, Distribution, Int, Tensor, TensorData};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

pub use headroom_datasets::PatchShape;

use crate::backend::BackendKind;
use crate::precision::Precision;
use crate::setting::{Described, PlainWords, Setting, Wording};

/// What one micro-batch gives a model: patches of normalised log-mel spectrograms (a patch is
/// every mel band by a few consecutive frames: 64 x 64 for the default model, a 128 x 5
/// frame stack for the DCASE baseline), and the machine ID each patch's clip was recorded
/// from, as a class index.
#[derive(Debug, Clone)]
pub struct Patches {
    /// `[n, 1, mels, frames]`.
    pub values: Tensor<4>,
    /// `[n]`: the class of each patch's machine ID (0 where the run has no classes).
    pub classes: Tensor<1, Int>,
}

impl Patches {
    /// Patches with no class information (every class 0).
    pub fn unlabelled(values: Tensor<4>) -> Self {
        let n = values.dims()[0];
        let classes = Tensor::zeros([n], &values.device());
        Self { values, classes }
    }

    /// `n` patches of unit noise with random classes among `classes`: what the planner
    /// measures steps with.
    pub fn random(shape: PatchShape, classes: usize, n: usize, device: &Device) -> Self {
        let values = unit_noise([n, 1, shape.mels, shape.frames], device);
        let labels: Vec<i64> = (0..n).map(|i| (i % classes.max(1)) as i64).collect();
        let classes = Tensor::from_data(TensorData::new(labels, [n]), device);
        Self { values, classes }
    }

    pub fn len(&self) -> usize {
        self.values.dims()[0]
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Standard normal values of `shape`. On the CPU drawn on the host a batch at once, each
/// batch of the process from its own seed (its order in the process): burn's
/// `Tensor::random` there samples one element at a time through an f64 normal and a ChaCha12
/// generator, 15 ns a value, a fifth of a `dcase-ae` bench step at 64 x 8 (whose PyTorch
/// twin draws its batch with `torch.randn` in the step too). Devices draw their own.
pub(crate) fn unit_noise(shape: [usize; 4], device: &Device) -> Tensor<4> {
    use rand10::{RngExt, SeedableRng};
    use std::sync::atomic::{AtomicU64, Ordering};
    static BATCHES: AtomicU64 = AtomicU64::new(0);
    if !super::cpu_forms::is_cpu(device) {
        return Tensor::random(shape, Distribution::Normal(0.0, 1.0), device);
    }
    let mut rng = rand10::rngs::SmallRng::seed_from_u64(BATCHES.fetch_add(1, Ordering::Relaxed));
    let count = shape.iter().product();
    let values: Vec<f32> = (0..count)
        .map(|_| rng.sample(rand_distr::StandardNormal))
        .collect();
    Tensor::from_data(TensorData::new(values, shape), device)
}

/// The loss of one micro-batch.
#[derive(Debug, Clone)]
pub struct StepLoss {
    /// What the step differentiates: a mean over the micro-batch's patches.
    pub total: Tensor<1>,
    /// The term reported beside it (the reconstruction error of an autoencoder).
    pub reported: Tensor<1>,
}

/// Bytes a step holds by what holds them, as far as the network's shapes say: the plan's
/// breakdown. What the measured peak holds beyond these is the backend's overhead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AnalyticStep {
    /// The parameters (gradients are as many, AdamW's moments twice as many).
    pub parameters: u64,
    /// What autodiff keeps for backward.
    pub activations: u64,
    /// The micro-batch's input and the model's other per-patch buffers.
    pub data: u64,
}

/// A network Headroom trains: a burn module with a loss and an anomaly score.
pub trait SpectrogramModel: Module + Clone + std::fmt::Debug + Send + 'static {
    type Config: ModelConfig<Model = Self>;

    /// The loss of one micro-batch, computed in `precision` where the model supports mixed
    /// precision (it may ignore it). `warming_up`: the run is in the model's warm-up steps
    /// ([`ModelConfig::default_warm_up_steps`]).
    fn loss(&self, batch: Patches, precision: Precision, warming_up: bool) -> StepLoss;

    /// Anomaly score of each patch, `[n]`, higher for more anomalous; a clip's score is the
    /// mean over its patches. Called without autodiff.
    fn patch_scores(&self, batch: Patches) -> Tensor<1>;

    /// What happens when the warm-up ends, given the train split's patches on a device
    /// without autodiff (the VQ autoencoder draws its codebook from its encoder's outputs);
    /// `seed` makes any draw reproducible. `async` because reading values back from a device
    /// is (`crate::readback`).
    // The engine awaits on one thread, so the future need not be `Send`.
    #[allow(async_fn_in_trait)]
    async fn end_warm_up(
        self,
        _train: &mut dyn Iterator<Item = Patches>,
        _seed: u64,
    ) -> Result<Self, crate::readback::ReadbackError> {
        Ok(self)
    }
}

/// A model's configuration: what a checkpoint records and `--model` names.
pub trait ModelConfig:
    Clone + std::fmt::Debug + PartialEq + Serialize + DeserializeOwned + Default + Send + Sync + 'static
{
    type Model: SpectrogramModel<Config = Self>;

    /// The name `--model` takes and checkpoints record.
    const NAME: &'static str;
    /// One line for `trainer-cli models`.
    const SUMMARY: &'static str;

    fn init(&self, device: &Device) -> Self::Model;

    /// The patch the model reads; the run's log-mel has its `mels` bands.
    fn input(&self) -> PatchShape;

    /// Parameters, as PyTorch counts them.
    fn parameter_count(&self) -> u64;

    /// The analytic sizes of a step with `patches` patches per micro-batch on `backend`.
    fn analytic_step(
        &self,
        backend: BackendKind,
        precision: Precision,
        patches: usize,
    ) -> AnalyticStep;

    /// The configuration for a dataset whose train split holds these machines (type and
    /// ID, sorted: a patch's class is its machine's index here); a model that learns the IDs
    /// sizes its output here and refuses a dataset it cannot learn from.
    fn for_machines(self, _machines: &[Machine]) -> Result<Self, ModelError> {
        Ok(self)
    }

    /// The classes the model tells apart (1: it learns none).
    fn classes(&self) -> usize {
        1
    }

    /// Frames between the patches a train spectrogram gives a step (`--stride`): the
    /// default half a patch apart.
    fn training_stride(&self) -> usize {
        (self.input().frames / 2).max(1)
    }

    /// Frames between the patches a test clip is scored on: every patch is scored, the
    /// default half a patch apart.
    fn scoring_stride(&self) -> usize {
        (self.input().frames / 2).max(1)
    }

    /// Warm-up steps for a run of `total_steps` when none were asked for; 0: no warm-up.
    fn default_warm_up_steps(&self, _total_steps: u64) -> u64 {
        0
    }

    /// A step when the user gives no batch flags: spectrograms per step and patches from
    /// each, the planner's preferred patch count. The effective batch is their product.
    fn default_batch(&self) -> DefaultBatch {
        DefaultBatch {
            spectrograms: 8,
            patches: 4,
        }
    }
}

/// A configuration a run records by name (`ModelSpec`): a model's, or another kind of
/// training's.
pub trait NamedConfig:
    Clone + std::fmt::Debug + PartialEq + Serialize + DeserializeOwned + Default + Send + 'static
{
    /// The name a run spec's `model` takes and checkpoints record.
    const NAME: &'static str;
}

impl<C: ModelConfig> NamedConfig for C {
    const NAME: &'static str = <C as ModelConfig>::NAME;
}

/// A model's step when the user gives no batch flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DefaultBatch {
    /// Spectrograms per optimizer step.
    pub spectrograms: usize,
    /// Patches cut from each spectrogram.
    pub patches: usize,
}

impl DefaultBatch {
    /// Patches per optimizer step.
    pub fn effective_batch(&self) -> usize {
        self.spectrograms * self.patches
    }
}

/// One machine of a dataset: its type and ID.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Machine {
    pub machine_type: String,
    pub machine_id: u32,
}

/// A run's model as saved: its name and its configuration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelSpec {
    pub name: String,
    pub config: serde_json::Value,
}

impl ModelSpec {
    pub fn of<C: NamedConfig>(config: &C) -> Self {
        Self {
            name: C::NAME.to_string(),
            config: serde_json::to_value(config).unwrap_or(serde_json::Value::Null),
        }
    }

    /// The configuration, when this is model (or task) `C`.
    pub fn config<C: NamedConfig>(&self) -> Result<C, ModelError> {
        if self.name != C::NAME {
            return Err(ModelError::Mismatch {
                saved: self.name.clone(),
                asked: C::NAME.to_string(),
            });
        }
        serde_json::from_value(self.config.clone()).map_err(|e| ModelError::Config {
            name: self.name.clone(),
            reason: e.to_string(),
        })
    }
}

impl Default for ModelSpec {
    fn default() -> Self {
        Self::of(&super::VqAutoencoderConfig::default())
    }
}

impl<'de> Deserialize<'de> for ModelSpec {
    /// Runs saved before models had names hold the VQ autoencoder's configuration itself.
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(deserializer)?;
        match (value.get("name"), value.get("config")) {
            (Some(serde_json::Value::String(name)), Some(config)) => Ok(Self {
                name: name.clone(),
                config: config.clone(),
            }),
            _ => Ok(Self {
                name: <super::VqAutoencoderConfig as ModelConfig>::NAME.to_string(),
                config: value,
            }),
        }
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ModelError {
    #[error("unknown model {name:?}; the models are: {known}")]
    Unknown { name: String, known: String },
    #[error("{}", self.describe(&PlainWords))]
    Mismatch { saved: String, asked: String },
    /// A model that tells a machine type's IDs apart, on a dataset with one ID of some type.
    #[error("{}", self.describe(&PlainWords))]
    OneId {
        model: &'static str,
        /// The machine types with one ID, or "the dataset" when it has no machines.
        alone: String,
    },
    #[error("the saved configuration of model {name} cannot be read: {reason}")]
    Config { name: String, reason: String },
    #[error("{0}")]
    Dataset(String),
}

impl Described for ModelError {
    fn describe(&self, words: &dyn Wording) -> String {
        let model = words.setting(Setting::Model);
        match self {
            ModelError::Mismatch { saved, asked } => format!(
                "this run or checkpoint holds the model {saved}, not {asked}; use {}, or start \
                 a new run for {asked}",
                words.given(Setting::Model, saved)
            ),
            ModelError::OneId { model: name, alone } => format!(
                "{name} learns to tell a machine type's IDs apart, and {alone} has only one ID \
                 in the train split; use a dataset with at least two IDs per machine type ({} \
                 2 or more for the built-in one), or another {model}",
                words.setting(Setting::MachineIds)
            ),
            other => other.to_string(),
        }
    }
}

/// One built-in model, as `trainer-cli models` lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelInfo {
    pub name: &'static str,
    pub summary: &'static str,
    pub parameters: u64,
    pub input: PatchShape,
    pub default_batch: DefaultBatch,
}
