//! What a run is measured by: the validation loss, and the test split's anomaly scores with
//! AUC/pAUC, for a run in memory or a saved checkpoint.

use burn::tensor::Device;

use crate::backend::Target;
use crate::checkpoint;
use crate::config::{DatasetSource, TrainConfig};
use crate::data::{self, LoaderOptions, RunData};
use crate::data::{Normalization, clip_patches};
use crate::eval::{self, ScoreSettings};
use crate::model::{ModelConfig, SpectrogramModel, WithModel, with_model};
use crate::precision::Precision;
#[cfg(not(target_arch = "wasm32"))]
use crate::readback::block_on;
use crate::readback::{self, LocalFuture};

use super::{Evaluation, ModelTrainer, TrainError};

impl<M: SpectrogramModel> ModelTrainer<M> {
    /// Every patch of clip `clip` at the run's stride, with its class: how validation and the
    /// warm-up's end see a clip.
    pub(super) fn patches_of(&self, clip: usize) -> Result<crate::data::PatchBatch, TrainError> {
        let spectrogram = self.data.store.read(clip)?;
        let class = self.data.classes.get(clip).copied().unwrap_or(0);
        let shape = self.model_config.input();
        Ok(clip_patches(
            &spectrogram,
            shape,
            self.config.stride,
            class,
            &self.normalization,
        )?)
    }

    /// Patches scored at once: a training micro-batch's worth, which a forward pass without
    /// autodiff holds in less memory than the plan gave a training step.
    fn eval_chunk(&self) -> usize {
        self.config.split().patches_per_micro_batch().max(1)
    }

    /// Mean loss over the held-out clips, evaluated without autodiff.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn validation_loss(&self) -> Result<f64, TrainError> {
        block_on(self.validation_loss_async())
    }

    /// [`ModelTrainer::validation_loss`], awaited.
    pub async fn validation_loss_async(&self) -> Result<f64, TrainError> {
        let model = self.model.valid();
        let device = self.device.clone().without_autodiff();
        let (mut sum, mut n) = (0.0, 0usize);
        for &clip in &self.data.validation {
            let batch = self.patches_of(clip)?;
            for part in batch.chunks(self.eval_chunk()) {
                let patches = part.patches;
                let loss = model.loss(part.to_tensor(&device), Precision::F32, false);
                sum += readback::scalar(loss.total).await? as f64 * patches as f64;
                n += patches;
            }
        }
        Ok(sum / n.max(1) as f64)
    }

    /// Scores the test split (per-clip mean patch error) and its AUC and pAUC per machine
    /// type and ID.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn evaluate(&self) -> Result<Evaluation, TrainError> {
        block_on(self.evaluate_async())
    }

    /// [`ModelTrainer::evaluate`], awaited.
    pub async fn evaluate_async(&self) -> Result<Evaluation, TrainError> {
        let settings = ScoreSettings {
            shape: self.model_config.input(),
            stride: self.config.eval_stride,
            chunk: self.eval_chunk(),
            workers: self.options.loader.workers,
            on_bad_file: self.options.loader.on_bad_file,
        };
        let device = self.device.clone().without_autodiff();
        // Train files left out were reported when the run started; these are the test's.
        score_test_split(
            &self.model,
            &device,
            &self.data,
            &self.normalization,
            settings,
            Vec::new(),
        )
        .await
    }
}

/// Scores the test split of `source` (or of the run's own dataset) with the model saved at
/// `path`, as `trainer-cli eval` does. Features are read with the run's settings, so a
/// model is scored on what it was trained on.
#[cfg(not(target_arch = "wasm32"))]
pub fn evaluate_checkpoint(
    path: &std::path::Path,
    source: Option<DatasetSource>,
    target: Option<Target>,
    loader: LoaderOptions,
) -> Result<Evaluation, TrainError> {
    block_on(evaluate_checkpoint_async(path, source, target, loader))
}

/// [`evaluate_checkpoint`], awaited.
pub async fn evaluate_checkpoint_async(
    path: &std::path::Path,
    source: Option<DatasetSource>,
    target: Option<Target>,
    loader: LoaderOptions,
) -> Result<Evaluation, TrainError> {
    struct Evaluate<'a> {
        path: &'a std::path::Path,
        config: TrainConfig,
        loader: LoaderOptions,
    }
    impl<'a> WithModel for Evaluate<'a> {
        type Output = LocalFuture<'a, Result<Evaluation, TrainError>>;
        fn run<C: ModelConfig>(self, model: C) -> Self::Output {
            Box::pin(async move {
                let Evaluate {
                    path,
                    config,
                    loader,
                } = self;
                let device = config.target().training_device(false)?;
                let loaded = checkpoint::load::<C>(path, &device)?;
                let data = data::open(&config, &loader)?;
                let plain = device.without_autodiff();
                let settings = ScoreSettings {
                    shape: model.input(),
                    stride: config.eval_stride,
                    chunk: config.split().patches_per_micro_batch().max(1),
                    workers: loader.workers,
                    on_bad_file: loader.on_bad_file,
                };
                let skipped = data.skipped.clone();
                let normalization = loaded.state.normalization;
                score_test_split(
                    &loaded.model,
                    &plain,
                    &data,
                    &normalization,
                    settings,
                    skipped,
                )
                .await
            })
        }
    }
    let state = checkpoint::read_state(path)?;
    let mut config = state.config;
    if let Some(target) = target {
        config.backend = target.backend;
        config.device = target.device;
    }
    if let Some(source) = source {
        config.dataset = source;
    }
    let spec = config.model.clone();
    with_model(
        &spec,
        Evaluate {
            path,
            config,
            loader,
        },
    )?
    .await
}

/// Scores `data`'s test clips; `skipped` lists files already left out.
async fn score_test_split<M: SpectrogramModel>(
    model: &M,
    device: &Device,
    data: &RunData,
    normalization: &Normalization,
    settings: ScoreSettings,
    mut skipped: Vec<String>,
) -> Result<Evaluation, TrainError> {
    let scores = eval::clip_scores(
        &model.valid(),
        device,
        &data.store,
        &data.classes,
        &data.test,
        normalization,
        settings,
        &mut skipped,
    )
    .await?;
    let mut report = eval::report(&scores);
    report.skipped = skipped;
    Ok(Evaluation { report, scores })
}
