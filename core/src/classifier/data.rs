//! The classifier's data: the patch task's (clips by split, patches streamed as the plan
//! splits each step, each with its machine's class) and, where generated patches are mixed
//! in, each patch's draw: the noise its generated patch comes from and whether it replaces
//! the real one, with probability the run's share.
//!
//! The draws are a function of the run's seed and the stream position of the spectrogram
//! each patch is cut from, drawn on the host, as the GAN's noise is (`crate::gan`): the same
//! however the plan cuts a step, and the same in a resumed run.

use burn::tensor::{Device, Tensor, TensorData};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::ClassifierConfig;
use super::networks::{ClassifierBatch, GeneratedDraw};
use crate::config::TrainConfig;
use crate::data::{LoaderOptions, Normalization};
use crate::events::DatasetReport;
use crate::gan::data::normal;
use crate::plan::ReadAhead;
use crate::train::{PatchData, TaskData, TrainError};

/// The draws come from their own seed beside the run's, so that they are not the GAN's
/// noise when both runs keep the default seed.
const DRAW_SEED: u64 = 0x6a09_e667_f3bc_c908;

/// What a patch's draw is made of.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Draws {
    pub latent: usize,
    /// The probability that a patch is replaced by a generated one.
    pub share: f64,
}

/// A classifier run's data.
pub struct ClassifierData {
    pub(super) patches: PatchData,
    draws: Option<Draws>,
    seed: u64,
    /// Patches cut from each spectrogram of a step.
    n_patches: usize,
}

impl ClassifierData {
    pub(super) fn new(patches: PatchData, config: &TrainConfig) -> Self {
        Self {
            patches,
            draws: None,
            seed: config.seed,
            n_patches: config.n_patches,
        }
    }
}

/// For each of the `n_patches` patches of the spectrogram at stream position `position`:
/// whether it is replaced (1) or kept (0), then its `latent` noise values.
pub fn draws_of(seed: u64, position: u64, n_patches: usize, draws: Draws) -> (Vec<f32>, Vec<f32>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ DRAW_SEED);
    rng.set_stream(position);
    let replaced = (0..n_patches)
        .map(|_| f32::from(rng.random::<f64>() < draws.share))
        .collect();
    (replaced, normal(&mut rng, n_patches * draws.latent))
}

impl TaskData for ClassifierData {
    type Batch = ClassifierBatch;

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

    /// Draws for the generated patches of the run's task as it was sized for the data (its
    /// generator's noise size is read from the GAN's checkpoint after the data is opened).
    fn stream(&mut self, config: &TrainConfig, loader: &LoaderOptions) {
        self.n_patches = config.n_patches;
        self.draws = config
            .model
            .config::<ClassifierConfig>()
            .ok()
            .and_then(|task| task.generated)
            .map(|g| Draws {
                latent: g.shape.latent,
                share: g.share,
            });
        self.patches.stream(config, loader);
    }

    fn micro_batch(
        &mut self,
        first: u64,
        count: usize,
        device: &Device,
    ) -> Result<ClassifierBatch, TrainError> {
        let real = self.patches.micro_batch(first, count, device)?;
        let generated = self.draws.map(|draws| {
            let n = count * self.n_patches;
            let mut replaced = Vec::with_capacity(n);
            let mut noise = Vec::with_capacity(n * draws.latent);
            for position in first..first + count as u64 {
                let (r, z) = draws_of(self.seed, position, self.n_patches, draws);
                replaced.extend(r);
                noise.extend(z);
            }
            GeneratedDraw {
                noise: Tensor::from_data(TensorData::new(noise, [n, draws.latent]), device),
                replaced: Tensor::from_data(TensorData::new(replaced, [n]), device),
            }
        });
        Ok(ClassifierBatch {
            real: real.values,
            classes: real.classes,
            generated,
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
