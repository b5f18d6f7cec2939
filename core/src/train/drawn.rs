//! Patches with host draws: the patch task's data (clips by split, patches streamed as the
//! plan splits each step) where each micro-batch also carries values drawn on the host for
//! each of its spectrograms, such as a GAN's noise or which patches a classifier replaces
//! by generated ones.
//!
//! The draws are a function of the run's seed and the stream position of the spectrogram a
//! patch is cut from: a step draws the same however the plan cuts it, and a resumed run
//! draws what the uninterrupted run drew, which the device's random state (not saved in a
//! checkpoint) would not give.

use std::ops::Range;

use burn::tensor::Device;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::patches::PatchData;
use super::run_task::TaskData;
use super::{TrainConfig, TrainError};
use crate::data::{LoaderOptions, Normalization};
use crate::events::DatasetReport;
use crate::model::Patches;
use crate::plan::ReadAhead;

/// What a task draws beside its patches, and the micro-batch it makes of both.
pub trait PatchDraws {
    type Batch;

    /// Takes what the draws depend on from the run's task as it was sized for the data
    /// (streaming starts after that).
    fn stream(&mut self, _config: &TrainConfig) {}

    /// The micro-batch of `real` patches, `n_patches` cut from each spectrogram at the
    /// stream positions `positions`.
    fn batch(
        &self,
        real: Patches,
        positions: Range<u64>,
        n_patches: usize,
        device: &Device,
    ) -> Self::Batch;
}

/// The random stream for the spectrogram at stream position `position`, under `seed`.
pub fn position_rng(seed: u64, position: u64) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(position);
    rng
}

/// A run's patches and what its task draws for them.
pub struct DrawnPatches<D> {
    pub patches: PatchData,
    pub draws: D,
    /// Patches cut from each spectrogram of a step.
    n_patches: usize,
}

impl<D> DrawnPatches<D> {
    pub fn new(patches: PatchData, draws: D, config: &TrainConfig) -> Self {
        Self {
            patches,
            draws,
            n_patches: config.n_patches,
        }
    }
}

impl<D: PatchDraws> TaskData for DrawnPatches<D> {
    type Batch = D::Batch;

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
        self.draws.stream(config);
        self.patches.stream(config, loader);
    }

    fn micro_batch(
        &mut self,
        first: u64,
        count: usize,
        device: &Device,
    ) -> Result<D::Batch, TrainError> {
        let real = self.patches.micro_batch(first, count, device)?;
        let positions = first..first + count as u64;
        Ok(self.draws.batch(real, positions, self.n_patches, device))
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
