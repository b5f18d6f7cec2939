//! `spec-classifier`: tells the machine ID from a log-mel patch (seed 000's second
//! network), with a small vision transformer over the patch's tiles or a plain CNN
//! ([`networks`]), trained on real patches and, optionally, with a GAN's generated patches
//! of each class mixed in at a set share.
//!
//! With a generator the run trains two classifiers side by side, in the two phases of each
//! optimizer step: one on the real patches alone, one on the same patches with each replaced
//! by a generated patch of its class with probability the share. Both see the same data in
//! the same order from the same start, so the accuracy each reaches on the real test split
//! is the measure of what the generated patches add. The generator is frozen: read from a
//! `spec-gan` run's checkpoint ([`generator`]) and saved in this run's checkpoints.

mod data;
pub mod generator;
pub mod networks;
mod run_task;
#[cfg(test)]
mod tests;

use std::path::PathBuf;
use std::sync::Arc;

use burn::optim::GradientsParams;
use burn::tensor::{Device, Distribution, Gradients, Int, Tensor, TensorData};
use serde::{Deserialize, Serialize};

use crate::backend::BackendKind;
use crate::config::{RunLength, TrainConfig};
use crate::gan::GanShape;
use crate::model::{AnalyticStep, DefaultBatch, Machine, ModelInfo, ModelSpec, NamedConfig};
use crate::model::{PatchShape, StepLoss};
use crate::precision::Precision;
use crate::task::{StepContext, TrainingTask};
use crate::train::BuiltIn;

pub use data::ClassifierData;
use networks::{Classifier, Renormalise};
pub use networks::{ClassifierArch, ClassifierBatch, ClassifierNetworks, GeneratedDraw};

/// The share of patches generated when a generator is given and no share is.
pub const DEFAULT_SHARE: f64 = 0.5;

/// Where generated patches come from and how many are mixed in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GeneratedPatches {
    /// The `spec-gan` run whose generator makes them, as the user named it.
    pub checkpoint: PathBuf,
    /// The probability that a train patch of the mixed classifier is a generated one.
    pub share: f64,
    /// The generator's sizes (read from its checkpoint).
    pub shape: GanShape,
    /// From the GAN run's normalisation to this run's (set with the weights).
    pub renormalise: Renormalise,
    /// The generator's weights, read once for a fresh run; a resumed run loads them from
    /// its own checkpoint.
    #[serde(skip)]
    pub weights: Option<Arc<Vec<u8>>>,
}

impl GeneratedPatches {
    /// Patches from the generator of the run saved at `checkpoint`, at `share`: read when
    /// the run sizes itself for its data.
    pub fn from(checkpoint: PathBuf, share: f64) -> Self {
        Self {
            checkpoint,
            share,
            shape: GanShape::SMALL,
            renormalise: Renormalise {
                scale: 1.0,
                shift: 0.0,
            },
            weights: None,
        }
    }
}

/// A classifier run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClassifierConfig {
    pub arch: ClassifierArch,
    pub patch: PatchShape,
    /// The machines it tells apart (set from the train split).
    pub machines: Vec<Machine>,
    pub generated: Option<GeneratedPatches>,
}

impl Default for ClassifierConfig {
    /// Four IDs of one machine type, as the built-in dataset has; a run sets the dataset's.
    fn default() -> Self {
        Self {
            arch: ClassifierArch::Vit,
            patch: PatchShape::SQUARE_64,
            machines: (0..4)
                .map(|id| Machine {
                    machine_type: "synthetic".into(),
                    machine_id: id,
                })
                .collect(),
            generated: None,
        }
    }
}

impl NamedConfig for ClassifierConfig {
    const NAME: &'static str = "spec-classifier";
}

/// The phases: one classifier, or two side by side.
const REAL_ONLY: &[&str] = &["real"];
const SIDE_BY_SIDE: &[&str] = &["real", "real + generated"];

impl ClassifierConfig {
    fn classes(&self) -> usize {
        self.machines.len().max(1)
    }

    fn renormalise(&self) -> Renormalise {
        self.generated.as_ref().map_or(
            Renormalise {
                scale: 1.0,
                shift: 0.0,
            },
            |g| g.renormalise,
        )
    }
}

impl TrainingTask for ClassifierConfig {
    type Networks = ClassifierNetworks;
    type Batch = ClassifierBatch;

    fn phases(&self) -> &'static [&'static str] {
        if self.generated.is_some() {
            SIDE_BY_SIDE
        } else {
            REAL_ONLY
        }
    }

    /// f32 throughout: the networks do not compute in half precision yet.
    fn mixed_precision(&self) -> bool {
        false
    }

    fn networks(&self, device: &Device) -> ClassifierNetworks {
        let classes = self.classes();
        let classifier = || Classifier::new(self.arch, self.patch, classes, device);
        ClassifierNetworks {
            real: classifier(),
            mixed: self.generated.as_ref().map(|_| classifier()),
            generator: self.generated.as_ref().map(|g| {
                generator::generator_on(
                    &g.shape,
                    classes,
                    g.weights.as_deref().map(|w| &w[..]),
                    device,
                )
            }),
        }
    }

    fn examples_in(&self, batch: &ClassifierBatch) -> usize {
        batch.real.dims()[0]
    }

    fn measuring_batch(&self, examples: usize, device: &Device) -> ClassifierBatch {
        let classes: Vec<i64> = (0..examples).map(|i| (i % self.classes()) as i64).collect();
        ClassifierBatch {
            // On the CPU drawn on the host, as the twin's `torch.randn` (burn's draws one
            // value at a time: 5-10% of a bench step).
            real: crate::model::unit_noise(
                [examples, 1, self.patch.mels, self.patch.frames],
                device,
            ),
            classes: Tensor::<1, Int>::from_data(TensorData::new(classes, [examples]), device),
            generated: self.generated.as_ref().map(|g| GeneratedDraw {
                noise: Tensor::random(
                    [examples, g.shape.latent],
                    Distribution::Normal(0.0, 1.0),
                    device,
                ),
                replaced: Tensor::random([examples], Distribution::Bernoulli(g.share), device),
            }),
        }
    }

    fn loss(
        &self,
        networks: &ClassifierNetworks,
        phase: usize,
        batch: ClassifierBatch,
        _: StepContext,
    ) -> StepLoss {
        // The same choice of network as `phase_gradients`: phase 1 exists only beside a
        // mixed classifier.
        let total = match (phase, &networks.mixed) {
            (1, Some(mixed)) => networks.mixed_loss(mixed, batch, self.renormalise()),
            _ => networks.real.loss(batch.real, batch.classes),
        };
        StepLoss {
            reported: total.clone(),
            total,
        }
    }

    /// Every part of a micro-batch is one row per example: joined and cut again.
    fn recut(
        &self,
        batches: &[ClassifierBatch],
        examples: &[usize],
    ) -> Option<Vec<ClassifierBatch>> {
        let real = Tensor::cat(batches.iter().map(|b| b.real.clone()).collect(), 0);
        let classes = Tensor::cat(batches.iter().map(|b| b.classes.clone()).collect(), 0);
        let generated: Option<Vec<GeneratedDraw>> =
            batches.iter().map(|b| b.generated.clone()).collect();
        let generated = generated.map(|draws| GeneratedDraw {
            noise: Tensor::cat(draws.iter().map(|d| d.noise.clone()).collect(), 0),
            replaced: Tensor::cat(draws.iter().map(|d| d.replaced.clone()).collect(), 0),
        });
        let mut start = 0;
        let mut cut = Vec::with_capacity(examples.len());
        for &n in examples {
            cut.push(ClassifierBatch {
                real: real.clone().narrow(0, start, n),
                classes: classes.clone().narrow(0, start, n),
                generated: generated.as_ref().map(|g| GeneratedDraw {
                    noise: g.noise.clone().narrow(0, start, n),
                    replaced: g.replaced.clone().narrow(0, start, n),
                }),
            });
            start += n;
        }
        Some(cut)
    }

    /// Each phase steps its own classifier; the generator is never stepped.
    fn phase_gradients(
        &self,
        networks: &ClassifierNetworks,
        phase: usize,
        mut grads: Gradients,
    ) -> GradientsParams {
        match (phase, &networks.mixed) {
            (1, Some(mixed)) => GradientsParams::from_module(&mut grads, mixed),
            _ => GradientsParams::from_module(&mut grads, &networks.real),
        }
    }

    /// Both classifiers' trainable values; the frozen generator has no gradients.
    fn parameters(&self) -> u64 {
        let one = self.arch.parameters(self.patch, self.classes());
        if self.generated.is_some() {
            2 * one
        } else {
            one
        }
    }

    fn step_memory(&self, _: BackendKind, _: Precision, examples: usize) -> AnalyticStep {
        let patch = (self.patch.mels * self.patch.frames) as u64;
        let n = examples as u64;
        let (generator, draws) = self.generated.as_ref().map_or((0, 0), |g| {
            let weights = g.shape.parameters(self.classes());
            (4 * weights, 4 * n * (g.shape.latent as u64 + 1 + 2 * patch))
        });
        AnalyticStep {
            parameters: 4 * self.parameters(),
            activations: 4 * n * self.arch.activations_per_example(self.patch),
            // The frozen generator's weights, and its patches, counted as data: they take
            // no gradients or optimizer state.
            data: 4 * n * patch + generator + draws,
        }
    }
}

impl BuiltIn for ClassifierConfig {
    fn info(&self) -> ModelInfo {
        ModelInfo {
            name: Self::NAME,
            summary: "machine-ID classifier (small vision transformer, or a plain CNN) on \
                      real log-mel patches, and beside it one trained with a spec-gan \
                      generator's patches mixed in: accuracy with and without",
            parameters: self.parameters(),
            input: self.patch,
            default_batch: self.default_batch(),
        }
    }

    fn default_batch(&self) -> DefaultBatch {
        DefaultBatch {
            spectrograms: 8,
            patches: 4,
        }
    }

    fn configure(&self, config: &mut TrainConfig) {
        let batch = self.default_batch();
        config.micro_batch = batch.spectrograms;
        config.n_patches = batch.patches;
        config.accumulation = 1;
        config.step_clips = None;
        config.phase_micro_batches.clear();
        config.dataset = config.dataset.clone().with_mels(self.patch.mels);
        config.stride = (self.patch.frames / 2).max(1);
        config.eval_stride = self.patch.frames / 2;
        config.lr = 1e-3;
        config.length = RunLength::Steps(300);
        config.validate_every = 100;
        config.model = ModelSpec::of(self);
    }
}
