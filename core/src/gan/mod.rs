//! A conditional spectrogram GAN as a kind of training (seed 000): a generator
//! of log-mel patches per class (the machine ID of the built-in and DCASE data) and a
//! discriminator, trained in two phases of each optimizer step, the discriminator's then
//! the generator's, each planned with its own micro-batch and accumulation (`crate::plan`,
//! `Plan::phases`).
//!
//! The loss is the hinge loss with a spectrally normalised, projection discriminator
//! ([`networks`]). Why not R1 or a gradient penalty: they need the gradient of a gradient,
//! which burn's autodiff does not take; spectral normalisation needs only the weights'
//! largest singular values, and hinge with it trains stably (SNGAN, BigGAN).
//!
//! Quality over training ([`quality`]): the Fréchet distance between held-out real patches
//! and generated ones of the same class, in a feature space of each patch's mel-band
//! profile, averaged over the classes: the run's validation figure. The test figures add how
//! often a generated patch's nearest real class centroid is its own class.

pub(crate) mod data;
pub mod grid;
pub mod networks;
pub mod quality;
mod run_task;
#[cfg(test)]
mod tests;

use burn::optim::{AdamWConfig, GradientsParams, ModuleOptimizer};
use burn::tensor::{Device, Distribution, Gradients, Int, Tensor, TensorData};
use serde::{Deserialize, Serialize};

use crate::backend::BackendKind;
use crate::config::{RunLength, TrainConfig};
use crate::model::{AnalyticStep, DefaultBatch, ModelInfo, ModelSpec, NamedConfig, PatchShape};
use crate::model::{Machine, StepLoss};
use crate::precision::Precision;
use crate::task::{StepContext, TrainingTask};
use crate::train::BuiltIn;

pub use data::{GanData, GanNoise};
pub use networks::{GanBatch, GanNetworks};
pub use run_task::held_out_patches;

/// The networks' sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GanShape {
    /// The patch generated and judged, in mel bands and frames.
    pub mels: usize,
    pub frames: usize,
    /// Noise values per generated patch.
    pub latent: usize,
    /// The discriminator's first channels (doubling to 8x), and an eighth of the
    /// generator's first (halving back to 1x).
    pub width: usize,
}

impl GanShape {
    /// The CPU default: 64 x 64 patches of the built-in set.
    pub const SMALL: GanShape = GanShape {
        mels: 64,
        frames: 64,
        latent: 64,
        width: 16,
    };

    /// The generator's first map, in mel bands and frames: a sixteenth of the patch's,
    /// rounded up (its output is cropped to the patch).
    pub fn start(&self) -> [usize; 2] {
        let side = 1 << networks::LAYERS;
        [
            self.mels.div_ceil(side).max(1),
            self.frames.div_ceil(side).max(1),
        ]
    }

    /// Trainable values of both networks for `classes` classes.
    pub fn parameters(&self, classes: usize) -> u64 {
        let [m, f] = self.start();
        let (latent, w) = (self.latent, self.width);
        let classes = classes.max(1);
        // Generator: embedding, projection, four transposed convolutions with their group
        // norms, the output convolution.
        let mut generator = classes * latent + (2 * latent + 1) * 8 * w * m * f;
        let mut channels = 8 * w;
        for layer in 0..networks::LAYERS {
            let out = if layer + 1 < networks::LAYERS {
                channels / 2
            } else {
                channels
            };
            generator += channels * out * 16 + out + 2 * out;
            channels = out;
        }
        generator += channels * 9 + 1;
        // Discriminator: four convolutions, the score, the class embeddings.
        let mut discriminator = 0;
        let (mut inputs, mut outputs) = (1, w);
        for _ in 0..networks::LAYERS {
            discriminator += inputs * outputs * 16 + outputs;
            inputs = outputs;
            outputs *= 2;
        }
        discriminator += inputs + 1 + classes * inputs;
        (generator + discriminator) as u64
    }

    /// Values each network's layers hold per example for backward, roughly: the analytic
    /// account beside calibration's measurements.
    fn activations_per_example(&self) -> u64 {
        let mut values = 0;
        let (mut mels, mut frames) = (self.mels, self.frames);
        let mut channels = self.width;
        for _ in 0..networks::LAYERS {
            mels = mels.div_ceil(2);
            frames = frames.div_ceil(2);
            values += 3 * channels * mels * frames;
            channels *= 2;
        }
        // The discriminator sees real and generated patches; the generator's maps mirror it.
        (3 * values) as u64
    }
}

/// The GAN's presets by name: `small` the CPU default on 64 x 64 patches; `seed` seed
/// 000's whole spectrograms, 128 mel bands x 1,292 frames (30 s at 22,050 Hz, hop 512),
/// with DCGAN's 100 noise values and 64-wide networks; `seed-96` the same with the 96 mel
/// bands the seed falls back to on an 8 GiB GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GanSize {
    Small,
    Seed,
    Seed96,
}

impl GanSize {
    pub fn shape(self) -> GanShape {
        let seed = |mels| GanShape {
            mels,
            frames: 1292,
            latent: 100,
            width: 64,
        };
        match self {
            GanSize::Small => GanShape::SMALL,
            GanSize::Seed => seed(128),
            GanSize::Seed96 => seed(96),
        }
    }
}

/// A GAN run: its networks' sizes, the classes it generates (the train split's machines,
/// saved with every checkpoint), and the generator's learning rate beside the step's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GanConfig {
    pub shape: GanShape,
    pub machines: Vec<Machine>,
    /// The generator's learning rate as a share of the run's (the discriminator's): below 1,
    /// the two time-scale rule (TTUR), the discriminator learning faster. 1 by default: on
    /// the built-in set equal rates of 2e-4 learned the harmonics within 600 steps.
    pub generator_lr_share: f64,
}

impl Default for GanConfig {
    /// Four IDs of one machine type, as the built-in dataset has; a run sets the dataset's.
    fn default() -> Self {
        Self {
            shape: GanShape::SMALL,
            machines: (0..4)
                .map(|id| Machine {
                    machine_type: "synthetic".into(),
                    machine_id: id,
                })
                .collect(),
            generator_lr_share: 1.0,
        }
    }
}

impl GanConfig {
    pub(crate) fn classes(&self) -> usize {
        self.machines.len().max(1)
    }

    fn patch(&self) -> PatchShape {
        PatchShape {
            mels: self.shape.mels,
            frames: self.shape.frames,
        }
    }
}

impl NamedConfig for GanConfig {
    const NAME: &'static str = "spec-gan";
}

/// The phases, in order.
const DISCRIMINATOR: usize = 0;
const PHASES: &[&str] = &["discriminator", "generator"];

impl TrainingTask for GanConfig {
    type Networks = GanNetworks;
    type Batch = GanBatch;

    fn phases(&self) -> &'static [&'static str] {
        PHASES
    }

    /// f32 throughout: the networks do not compute in half precision yet.
    fn mixed_precision(&self) -> bool {
        false
    }

    fn networks(&self, device: &Device) -> GanNetworks {
        GanNetworks::new(&self.shape, self.classes(), device)
    }

    fn examples_in(&self, batch: &GanBatch) -> usize {
        batch.real.dims()[0]
    }

    fn measuring_batch(&self, examples: usize, device: &Device) -> GanBatch {
        let (mels, frames, latent) = (self.shape.mels, self.shape.frames, self.shape.latent);
        let noise = || Tensor::random([examples, latent], Distribution::Normal(0.0, 1.0), device);
        let classes: Vec<i64> = (0..examples).map(|i| (i % self.classes()) as i64).collect();
        GanBatch {
            real: crate::model::unit_noise([examples, 1, mels, frames], device),
            classes: Tensor::<1, Int>::from_data(TensorData::new(classes, [examples]), device),
            discriminator_noise: noise(),
            generator_noise: noise(),
        }
    }

    fn loss(
        &self,
        networks: &GanNetworks,
        phase: usize,
        batch: GanBatch,
        _: StepContext,
    ) -> StepLoss {
        let total = if phase == DISCRIMINATOR {
            networks.discriminator_loss(batch)
        } else {
            networks.generator_loss(batch)
        };
        StepLoss {
            reported: total.clone(),
            total,
        }
    }

    /// Every part of a micro-batch is one row per example: joined and cut again.
    fn recut(&self, batches: &[GanBatch], examples: &[usize]) -> Option<Vec<GanBatch>> {
        let join4 =
            |part: fn(&GanBatch) -> Tensor<4>| Tensor::cat(batches.iter().map(part).collect(), 0);
        let join2 =
            |part: fn(&GanBatch) -> Tensor<2>| Tensor::cat(batches.iter().map(part).collect(), 0);
        let real = join4(|b| b.real.clone());
        let classes = Tensor::cat(batches.iter().map(|b| b.classes.clone()).collect(), 0);
        let d_noise = join2(|b| b.discriminator_noise.clone());
        let g_noise = join2(|b| b.generator_noise.clone());
        let mut start = 0;
        let mut cut = Vec::with_capacity(examples.len());
        for &n in examples {
            let rows = start..start + n;
            cut.push(GanBatch {
                real: real.clone().narrow(0, start, n),
                classes: classes.clone().slice([rows]),
                discriminator_noise: d_noise.clone().narrow(0, start, n),
                generator_noise: g_noise.clone().narrow(0, start, n),
            });
            start += n;
        }
        Some(cut)
    }

    fn phase_gradients(
        &self,
        networks: &GanNetworks,
        phase: usize,
        mut grads: Gradients,
    ) -> GradientsParams {
        if phase == DISCRIMINATOR {
            GradientsParams::from_module(&mut grads, &networks.discriminator)
        } else {
            GradientsParams::from_module(&mut grads, &networks.generator)
        }
    }

    /// Adam with beta_1 0.5 and no weight decay, as DCGAN and SNGAN train: momentum of
    /// 0.9 lets one network overshoot the other's moves.
    fn optimizer(&self) -> ModuleOptimizer {
        AdamWConfig::new()
            .with_beta_1(0.5)
            .with_beta_2(0.999)
            .with_epsilon(1e-8)
            .with_weight_decay(0.0)
            .init()
    }

    fn learning_rate(&self, phase: usize, lr: f64) -> f64 {
        if phase == DISCRIMINATOR {
            lr
        } else {
            lr * self.generator_lr_share
        }
    }

    fn parameters(&self) -> u64 {
        self.shape.parameters(self.classes())
    }

    fn step_memory(&self, _: BackendKind, _: Precision, examples: usize) -> AnalyticStep {
        let patch = (self.shape.mels * self.shape.frames) as u64;
        AnalyticStep {
            parameters: 4 * self.parameters(),
            activations: 4 * examples as u64 * self.shape.activations_per_example(),
            data: 4 * examples as u64 * (patch + 2 * self.shape.latent as u64),
        }
    }
}

impl BuiltIn for GanConfig {
    fn info(&self) -> ModelInfo {
        ModelInfo {
            name: Self::NAME,
            summary: "conditional spectrogram GAN: a generator of log-mel patches per machine \
                      ID and a projection discriminator (hinge loss, spectral norm), trained \
                      in two phases each planned apart",
            parameters: self.parameters(),
            input: self.patch(),
            default_batch: self.default_batch(),
        }
    }

    /// Patches of the CPU default: 16 spectrograms x 4 patches. Whole spectrograms (a
    /// patch as long as the seed's): one each, 24 a step, the seed's batch on a 16 GiB GPU.
    fn default_batch(&self) -> DefaultBatch {
        if self.shape.frames > GanShape::SMALL.frames {
            DefaultBatch {
                spectrograms: 24,
                patches: 1,
            }
        } else {
            DefaultBatch {
                spectrograms: 16,
                patches: 4,
            }
        }
    }

    fn configure(&self, config: &mut TrainConfig) {
        let batch = self.default_batch();
        config.micro_batch = batch.spectrograms;
        config.n_patches = batch.patches;
        config.accumulation = 1;
        config.step_clips = None;
        config.phase_micro_batches.clear();
        config.dataset = config
            .dataset
            .clone()
            .with_mels(self.shape.mels)
            .with_frames_at_least(self.shape.frames);
        config.stride = (self.shape.frames / 2).max(1);
        config.eval_stride = self.shape.frames;
        // DCGAN's and SNGAN's rate; a GAN trains for steps rather than epochs, and its
        // quality figure is what validation measures, so it is measured along the way.
        config.lr = 2e-4;
        config.length = RunLength::Steps(600);
        config.validate_every = 100;
        config.model = ModelSpec::of(self);
    }
}
