//! The GAN's data: the patch task's (clips by split, patches streamed as the plan splits each
//! step), each micro-batch with the noise its generated patches are drawn from.
//!
//! The noise is a function of the run's seed and the stream position of the spectrogram
//! each patch is cut from, drawn on the host: a step's noise is the same however its phases
//! cut it, and a resumed run draws what the uninterrupted run drew, which the device's
//! random state (not saved in a checkpoint) would not give.

use burn::tensor::{Device, Tensor, TensorData};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::networks::GanBatch;
use crate::config::TrainConfig;
use crate::data::{LoaderOptions, Normalization};
use crate::events::DatasetReport;
use crate::plan::ReadAhead;
use crate::train::{PatchData, TaskData, TrainError};

/// A GAN run's data.
pub struct GanData {
    pub(super) patches: PatchData,
    latent: usize,
    seed: u64,
    /// Patches cut from each spectrogram of a step.
    n_patches: usize,
}

impl GanData {
    pub(super) fn new(patches: PatchData, config: &TrainConfig, latent: usize) -> Self {
        Self {
            patches,
            latent,
            seed: config.seed,
            n_patches: config.n_patches,
        }
    }
}

/// Two noise rows (the discriminator phase's, then the generator phase's) for each of the
/// `n_patches` patches of the spectrogram at stream position `position`.
pub fn noise_of(seed: u64, position: u64, n_patches: usize, latent: usize) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(position);
    normal(&mut rng, 2 * n_patches * latent)
}

/// `len` standard normal draws by the Box-Muller transform: two uniforms give two normals.
/// By hand because the rand_distr in the dependency tree is built for another rand.
pub(crate) fn normal(rng: &mut ChaCha8Rng, len: usize) -> Vec<f32> {
    let mut values = Vec::with_capacity(len + 1);
    while values.len() < len {
        // (0, 1]: the logarithm stays finite.
        let u1 = 1.0 - rng.random::<f64>();
        let u2 = rng.random::<f64>();
        let radius = (-2.0 * u1.ln()).sqrt();
        let angle = std::f64::consts::TAU * u2;
        values.push((radius * angle.cos()) as f32);
        values.push((radius * angle.sin()) as f32);
    }
    values.truncate(len);
    values
}

impl TaskData for GanData {
    type Batch = GanBatch;

    fn check(&mut self) -> Result<(), TrainError> {
        self.patches.check()
    }

    fn train_examples(&self) -> usize {
        self.patches.train_examples()
    }

    fn validation_examples(&self) -> usize {
        self.patches.validation_examples()
    }

    fn test_examples(&self) -> usize {
        self.patches.test_examples()
    }

    fn resident(&self) -> bool {
        self.patches.resident()
    }

    fn read_ahead(&self, config: &TrainConfig, loader: &LoaderOptions) -> ReadAhead {
        self.patches.read_ahead(config, loader)
    }

    fn stream(&mut self, config: &TrainConfig, loader: &LoaderOptions) {
        self.n_patches = config.n_patches;
        self.patches.stream(config, loader);
    }

    fn micro_batch(
        &mut self,
        first: u64,
        count: usize,
        device: &Device,
    ) -> Result<GanBatch, TrainError> {
        let real = self.patches.micro_batch(first, count, device)?;
        let (n, latent) = (count * self.n_patches, self.latent);
        let mut discriminator = Vec::with_capacity(n * latent);
        let mut generator = Vec::with_capacity(n * latent);
        for position in first..first + count as u64 {
            let noise = noise_of(self.seed, position, self.n_patches, latent);
            let (d, g) = noise.split_at(self.n_patches * latent);
            discriminator.extend_from_slice(d);
            generator.extend_from_slice(g);
        }
        let tensor =
            |values: Vec<f32>| Tensor::from_data(TensorData::new(values, [n, latent]), device);
        Ok(GanBatch {
            real: real.values,
            classes: real.classes,
            discriminator_noise: tensor(discriminator),
            generator_noise: tensor(generator),
        })
    }

    fn normalization(&self) -> Normalization {
        self.patches.normalization()
    }

    fn keep_normalization(&mut self, normalization: Normalization) {
        self.patches.keep_normalization(normalization);
    }

    fn report(&self, config: &TrainConfig, loader: &LoaderOptions) -> DatasetReport {
        self.patches.report(config, loader)
    }

    fn skipped(&self) -> Vec<String> {
        self.patches.skipped()
    }
}
