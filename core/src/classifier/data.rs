//! The classifier's data: the patch task's (each patch with its machine's class) and, where
//! generated patches are mixed in, each patch's draw: the noise its generated patch comes
//! from and whether it replaces the real one, with probability the run's share. The draws
//! are made on the host by stream position, as the GAN's noise is
//! ([`crate::train::drawn`]).

use std::ops::Range;

use burn::tensor::{Device, Tensor, TensorData};
use rand::Rng;

use super::ClassifierConfig;
use super::networks::{ClassifierBatch, GeneratedDraw};
use crate::config::TrainConfig;
use crate::gan::data::normal;
use crate::model::Patches;
use crate::train::drawn::{DrawnPatches, PatchDraws, position_rng};

/// The draws come from their own seed beside the run's, so that they are not the GAN's
/// noise when both runs keep the default seed.
const DRAW_SEED: u64 = 0x6a09_e667_f3bc_c908;

/// A classifier run's data.
pub type ClassifierData = DrawnPatches<GeneratedDraws>;

/// What a patch's draw is made of.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Draws {
    pub latent: usize,
    /// The probability that a patch is replaced by a generated one.
    pub share: f64,
}

/// The draws of a classifier run: none without a generator.
pub struct GeneratedDraws {
    pub seed: u64,
    pub draws: Option<Draws>,
}

/// For each of the `n_patches` patches of the spectrogram at stream position `position`:
/// whether it is replaced (1) or kept (0), then its `latent` noise values.
pub fn draws_of(seed: u64, position: u64, n_patches: usize, draws: Draws) -> (Vec<f32>, Vec<f32>) {
    let mut rng = position_rng(seed ^ DRAW_SEED, position);
    let replaced = (0..n_patches)
        .map(|_| f32::from(rng.random::<f64>() < draws.share))
        .collect();
    (replaced, normal(&mut rng, n_patches * draws.latent))
}

impl PatchDraws for GeneratedDraws {
    type Batch = ClassifierBatch;

    /// Draws for the generated patches of the run's task as it was sized for the data (its
    /// generator's noise size is read from the GAN's checkpoint after the data is opened).
    fn stream(&mut self, config: &TrainConfig) {
        self.draws = config
            .model
            .config::<ClassifierConfig>()
            .ok()
            .and_then(|task| task.generated)
            .map(|g| Draws {
                latent: g.shape.latent,
                share: g.share,
            });
    }

    fn batch(
        &self,
        real: Patches,
        positions: Range<u64>,
        n_patches: usize,
        device: &Device,
    ) -> ClassifierBatch {
        let generated = self.draws.map(|draws| {
            let n = positions.clone().count() * n_patches;
            let mut replaced = Vec::with_capacity(n);
            let mut noise = Vec::with_capacity(n * draws.latent);
            for position in positions {
                let (r, z) = draws_of(self.seed, position, n_patches, draws);
                replaced.extend(r);
                noise.extend(z);
            }
            GeneratedDraw {
                noise: Tensor::from_data(TensorData::new(noise, [n, draws.latent]), device),
                replaced: Tensor::from_data(TensorData::new(replaced, [n]), device),
            }
        });
        ClassifierBatch {
            real: real.values,
            classes: real.classes,
            generated,
        }
    }
}
