//! The patch task as the run loop drives it: every [`ModelConfig`] reads log-mel
//! spectrograms of the DCASE splits (or the built-in synthetic set), trains on random patches
//! of them, is validated on every patch of its held-out clips and scored for anomalies on the
//! test split.

use burn::module::Module;
use burn::tensor::Device;
use headroom_datasets::{PatchShape, PatchSpec};

use crate::config::TrainConfig;
use crate::data::clip_patches;
use crate::data::{self, LoaderOptions, Normalization, PatchBatch, RunData, TrainStream};
use crate::eval::{self, ScoreSettings};
use crate::events::DatasetReport;
use crate::model::{DefaultBatch, ModelConfig, ModelInfo, Patches, SpectrogramModel};
use crate::plan::ReadAhead;
use crate::precision::Precision;
use crate::readback::{self, LocalFuture};

use super::run_task::{BuiltIn, EvalBatches, RunTask, TaskData};
use super::{Evaluation, TrainError};

impl<C: ModelConfig> RunTask for C {
    type Data = PatchData;

    fn open(
        self,
        config: &TrainConfig,
        loader: &LoaderOptions,
    ) -> Result<(Self, PatchData), TrainError> {
        let data = PatchData::open(config, loader, self.input())?;
        Ok((self, data))
    }

    fn for_data(self, data: &PatchData) -> Result<Self, TrainError> {
        Ok(self.for_machines(&data.run.machines)?)
    }

    fn default_warm_up_steps(&self, total_steps: u64) -> u64 {
        ModelConfig::default_warm_up_steps(self, total_steps)
    }

    /// The model's own warm-up end, given every train clip's patches in order.
    fn end_warm_up<'a>(
        &'a self,
        model: C::Model,
        data: &'a PatchData,
        device: &'a Device,
        seed: u64,
    ) -> LocalFuture<'a, Result<C::Model, TrainError>> {
        Box::pin(async move {
            let mut read_error = None;
            let mut clips = data.run.train.iter();
            let mut patches = std::iter::from_fn(|| {
                let &clip = clips.next()?;
                match data.patches_of(clip) {
                    Ok(batch) => Some(batch.to_tensor(device)),
                    Err(error) => {
                        read_error = Some(error);
                        None
                    }
                }
            });
            let model = model
                .end_warm_up(&mut patches as &mut dyn Iterator<Item = Patches>, seed)
                .await;
            if let Some(error) = read_error {
                return Err(error);
            }
            Ok(model?)
        })
    }

    /// Every patch of each held-out clip, weighted by its patches.
    fn validation_loss<'a>(
        &'a self,
        model: &'a C::Model,
        data: &'a PatchData,
        device: &'a Device,
        batches: &'a EvalBatches,
    ) -> LocalFuture<'a, Result<f64, TrainError>> {
        Box::pin(async move {
            let model = model.valid();
            let (mut sum, mut n) = (0.0, 0usize);
            for &clip in &data.run.validation {
                let batch = data.patches_of(clip)?;
                for part in batch.chunks(batches.examples) {
                    let patches = part.patches;
                    let loss = model.loss(part.to_tensor(device), Precision::F32, false);
                    sum += readback::scalar(loss.total).await? as f64 * patches as f64;
                    n += patches;
                }
            }
            Ok(sum / n.max(1) as f64)
        })
    }

    /// A clip's score is the mean of its patches' (at the scoring stride); AUC and pAUC per
    /// machine type and ID.
    fn evaluate<'a>(
        &'a self,
        model: &'a C::Model,
        data: &'a PatchData,
        device: &'a Device,
        batches: &'a EvalBatches,
        mut skipped: Vec<String>,
    ) -> LocalFuture<'a, Result<Evaluation, TrainError>> {
        Box::pin(async move {
            let settings = ScoreSettings {
                shape: data.spec.shape,
                stride: data.eval_stride,
                chunk: batches.examples,
                workers: data.run.loader.workers,
                on_bad_file: data.run.loader.on_bad_file,
            };
            let run = &data.run;
            let scores = eval::clip_scores(
                &model.valid(),
                device,
                &run.store,
                &run.classes,
                &run.test,
                &data.normalization,
                settings,
                &mut skipped,
            )
            .await?;
            let mut report = eval::report(&scores);
            report.skipped = skipped;
            Ok(Evaluation::Anomaly { report, scores })
        })
    }
}

impl<C: ModelConfig> BuiltIn for C {
    fn info(&self) -> ModelInfo {
        ModelInfo {
            name: <C as ModelConfig>::NAME,
            summary: C::SUMMARY,
            parameters: self.parameter_count(),
            input: self.input(),
            default_batch: ModelConfig::default_batch(self),
        }
    }

    fn default_batch(&self) -> DefaultBatch {
        ModelConfig::default_batch(self)
    }

    fn configure(&self, config: &mut TrainConfig) {
        config.set_model(self);
    }
}

/// A patch run's data: the clips by split, the patch settings, the normalization and, once
/// planned, the train stream.
pub struct PatchData {
    run: RunData,
    /// The model's patch and the run's patches per spectrogram, stride and placement.
    spec: PatchSpec,
    /// Frames between the patches a test clip is scored on.
    eval_stride: usize,
    seed: u64,
    normalization: Normalization,
    /// The train split, read ahead; made once the split is known.
    stream: Option<TrainStream>,
}

impl PatchData {
    /// The run's dataset indexed for patches of `shape`, reading nothing yet: what every
    /// task that learns from patches of the DCASE splits (or the built-in set) opens.
    pub fn open(
        config: &TrainConfig,
        loader: &LoaderOptions,
        shape: PatchShape,
    ) -> Result<Self, TrainError> {
        Ok(PatchData {
            run: data::open(config, loader)?,
            spec: config.patch_spec(shape),
            eval_stride: config.eval_stride,
            seed: config.seed,
            normalization: Normalization {
                mean: 0.0,
                std: 1.0,
            },
            stream: None,
        })
    }

    /// The clips by split, their classes and machines.
    pub fn run(&self) -> &RunData {
        &self.run
    }

    /// The patch the run's examples have.
    pub fn shape(&self) -> PatchShape {
        self.spec.shape
    }

    /// Every patch of clip `clip` at the run's stride, with its class: how validation and the
    /// warm-up's end see a clip.
    pub fn patches_of(&self, clip: usize) -> Result<PatchBatch, TrainError> {
        let spectrogram = self.run.store.read(clip)?;
        let class = self.run.classes.get(clip).copied().unwrap_or(0);
        Ok(clip_patches(
            &spectrogram,
            self.spec.shape,
            self.spec.stride,
            class,
            &self.normalization,
        )?)
    }
}

impl TaskData for PatchData {
    type Batch = Patches;

    fn check(&mut self) -> Result<(), TrainError> {
        self.normalization = self.run.check(self.spec)?;
        Ok(())
    }

    fn train_examples(&self) -> usize {
        self.run.train.len()
    }

    fn validation_examples(&self) -> usize {
        self.run.validation.len()
    }

    fn test_examples(&self) -> usize {
        self.run.test.len()
    }

    fn resident(&self) -> bool {
        self.run.store.is_resident()
    }

    fn read_ahead(&self, config: &TrainConfig, loader: &LoaderOptions) -> ReadAhead {
        read_ahead(loader, self.resident(), config, self.spec.shape)
    }

    fn stream(&mut self, config: &TrainConfig, loader: &LoaderOptions) {
        let depth = self.read_ahead(config, loader).clips(config.micro_batch);
        self.spec = config.patch_spec(self.spec.shape);
        match &mut self.stream {
            Some(stream) => stream.set_depth(depth),
            None => {
                self.stream = Some(TrainStream::new(
                    self.run.store.clone(),
                    self.run.train.clone(),
                    self.run.classes.clone(),
                    self.spec,
                    self.seed,
                    self.normalization,
                    loader.workers,
                    depth,
                ))
            }
        }
    }

    fn micro_batch(
        &mut self,
        first: u64,
        count: usize,
        device: &Device,
    ) -> Result<Patches, TrainError> {
        let stream = self.stream.as_mut().ok_or(TrainError::NotStreaming)?;
        Ok(stream.batch(first, count)?.to_tensor(device))
    }

    fn normalization(&self) -> Normalization {
        self.normalization
    }

    fn keep_normalization(&mut self, normalization: Normalization) {
        self.normalization = normalization;
    }

    fn report(&self, config: &TrainConfig, loader: &LoaderOptions) -> DatasetReport {
        let clips = self.run.store.clips();
        let mut machine_types: Vec<String> = clips.iter().map(|c| c.machine_type.clone()).collect();
        machine_types.dedup();
        DatasetReport {
            source: config.dataset.describe(),
            machine_types,
            train_clips: self.run.train.len(),
            validation_clips: self.run.validation.len(),
            test_clips: self.run.test.len(),
            resident: self.resident(),
            host_memory_bytes: loader.host_memory_bytes,
            skipped: self.run.skipped.clone(),
        }
    }

    fn skipped(&self) -> Vec<String> {
        self.run.skipped.clone()
    }
}

/// What the train stream holds while reading ahead, as the planner counts it: each
/// spectrogram read ahead holds its patches and, when the spectrograms are not resident, the
/// loader's workers each hold a clip being decoded. The depth is bounded by the loader's
/// host memory (half of it when the spectrograms are resident and use the other half).
fn read_ahead(
    loader: &LoaderOptions,
    resident: bool,
    config: &TrainConfig,
    shape: PatchShape,
) -> ReadAhead {
    let patch_bytes = (shape.values() * 4) as u64;
    let bytes_per_clip = config.n_patches as u64 * patch_bytes;
    // A 10-second clip's log-mel (313 frames) plus its decoded audio.
    let reading = (shape.mels * 313 * 4 + 160_000 * 4) as u64;
    let (share, per_clip) = if resident {
        (loader.host_memory_bytes / 2, bytes_per_clip)
    } else {
        (loader.host_memory_bytes, bytes_per_clip + reading)
    };
    ReadAhead {
        micro_batches: loader.prefetch.max(1),
        bytes_per_clip,
        max_clips: (share / per_clip.max(1)).max(1) as usize,
        reading_bytes: if resident {
            0
        } else {
            loader.workers.max(1) as u64 * reading
        },
    }
}
