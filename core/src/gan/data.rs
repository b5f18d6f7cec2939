//! The GAN's data: the patch task's, each micro-batch with the noise its generated patches
//! are drawn from, drawn on the host by stream position ([`crate::train::drawn`]).

use std::ops::Range;

use burn::tensor::{Device, Tensor, TensorData};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::networks::GanBatch;
use crate::model::Patches;
use crate::train::drawn::{DrawnPatches, PatchDraws, position_rng};

/// A GAN run's data.
pub type GanData = DrawnPatches<GanNoise>;

/// The noise a GAN run draws for each patch.
pub struct GanNoise {
    pub latent: usize,
    pub seed: u64,
}

/// Two noise rows (the discriminator phase's, then the generator phase's) for each of the
/// `n_patches` patches of the spectrogram at stream position `position`.
pub fn noise_of(seed: u64, position: u64, n_patches: usize, latent: usize) -> Vec<f32> {
    normal(&mut position_rng(seed, position), 2 * n_patches * latent)
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

impl PatchDraws for GanNoise {
    type Batch = GanBatch;

    fn batch(
        &self,
        real: Patches,
        positions: Range<u64>,
        n_patches: usize,
        device: &Device,
    ) -> GanBatch {
        let (n, latent) = (positions.clone().count() * n_patches, self.latent);
        let mut discriminator = Vec::with_capacity(n * latent);
        let mut generator = Vec::with_capacity(n * latent);
        for position in positions {
            let noise = noise_of(self.seed, position, n_patches, latent);
            let (d, g) = noise.split_at(n_patches * latent);
            discriminator.extend_from_slice(d);
            generator.extend_from_slice(g);
        }
        let tensor =
            |values: Vec<f32>| Tensor::from_data(TensorData::new(values, [n, latent]), device);
        GanBatch {
            real: real.values,
            classes: real.classes,
            discriminator_noise: tensor(discriminator),
            generator_noise: tensor(generator),
        }
    }
}
