//! What a training run is asked to do. Saved inside every checkpoint, so a resumed run
//! continues the same run.

use headroom_datasets::{FeatureSettings, PatchPlacement, PatchShape, PatchSpec, SyntheticConfig};
use serde::{Deserialize, Serialize};

use crate::backend::{BackendKind, DeviceTarget, Target};
use crate::lengths::LengthBuckets;
use crate::model::{ModelConfig, ModelSpec};
use crate::precision::Precision;
pub use crate::setting::Setting;
use crate::setting::{Described, PlainWords, Wording};
use crate::split::Split;

/// Where the clips come from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DatasetSource {
    /// The built-in synthetic machine sounds, regenerated from their seed.
    Synthetic(SyntheticConfig),
    /// Files in the DCASE 2020 Task 2 layout (`ROOT/<machine_type>/{train,test}/`).
    Dcase {
        root: std::path::PathBuf,
        /// One machine type, or every type under the root.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        machine_type: Option<String>,
        features: FeatureSettings,
    },
}

impl DatasetSource {
    /// The mel bands its features have.
    pub fn mels(&self) -> usize {
        match self {
            DatasetSource::Synthetic(s) => s.n_mels,
            DatasetSource::Dcase { features, .. } => features.logmel.n_mels,
        }
    }

    /// The same recordings with features of `mels` mel bands.
    pub fn with_mels(mut self, mels: usize) -> Self {
        match &mut self {
            DatasetSource::Synthetic(s) => s.n_mels = mels,
            DatasetSource::Dcase { features, .. } => features.logmel.n_mels = mels,
        }
        self
    }

    /// The built-in clips made long enough to hold `frames` frames (a GAN patch as long as
    /// seed 000's whole 30 s spectrogram); recordings stay as they are.
    pub fn with_frames_at_least(mut self, frames: usize) -> Self {
        if let DatasetSource::Synthetic(s) = &mut self {
            // librosa's centred frames: 1 + samples / hop.
            let hop = headroom_datasets::logmel::LogMelConfig::default().hop;
            let samples = frames.saturating_sub(1) * hop;
            let seconds = (samples as f64 / f64::from(s.sample_rate) * 10.0).ceil() / 10.0;
            if f64::from(s.seconds) < seconds {
                s.seconds = seconds as f32;
            }
        }
        self
    }

    /// How events and logs name the source.
    pub fn describe(&self) -> String {
        match self {
            DatasetSource::Synthetic(_) => "synthetic".into(),
            DatasetSource::Dcase { root, .. } => root.display().to_string(),
        }
    }
}

impl Default for DatasetSource {
    fn default() -> Self {
        DatasetSource::Synthetic(SyntheticConfig::default())
    }
}

/// How long to train.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunLength {
    Steps(u64),
    Epochs(u64),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainConfig {
    pub backend: BackendKind,
    /// Which device of the backend (`--device wgpu:1`); `None`: its default device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<DeviceTarget>,
    /// Spectrograms per micro-batch (seed 001's `--batch_size`).
    pub micro_batch: usize,
    pub n_patches: usize,
    pub stride: usize,
    pub placement: PatchPlacement,
    /// Micro-batches per optimizer step.
    pub accumulation: usize,
    /// Spectrograms per optimizer step when `micro_batch` does not divide it: the last
    /// micro-batch takes the rest, so a planner can fill a budget with any micro-batch.
    /// `None`: `micro_batch x accumulation`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_clips: Option<usize>,
    /// For examples of every length (utterances): how many a micro-batch of each length
    /// may hold, packed anew every step (`crate::lengths`); then `micro_batch` is the
    /// longest bucket's and `accumulation` the most micro-batches a step can take.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub length_buckets: Option<LengthBuckets>,
    /// A task of several phases planned phase by phase (a GAN's discriminator and
    /// generator): each phase's spectrograms per micro-batch of the same step, in the
    /// task's order, `micro_batch` being the smallest; empty: every phase takes
    /// `micro_batch`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub phase_micro_batches: Vec<usize>,
    /// burn's balanced gradient checkpointing (seed 001's `--use_gradient_checkpointing`).
    #[serde(default)]
    pub checkpointing: bool,
    /// Encoder and decoder compute precision (mixed precision: parameters, gradients and
    /// optimizer state stay f32).
    #[serde(default)]
    pub precision: Precision,
    pub length: RunLength,
    pub lr: f64,
    pub min_lr: f64,
    /// Global gradient-norm clipping; `None` turns it off.
    pub clip_norm: Option<f64>,
    /// The decay of an exponential moving average of the weights that the run validates,
    /// evaluates and generates with (`crate::train::WeightAverage`); `None`: no average.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ema: Option<f64>,
    pub seed: u64,
    /// Write a checkpoint every N steps (and always at the end); 0: only at the end.
    pub checkpoint_every: u64,
    /// Validate every N steps (and at the end); 0: only at the end.
    pub validate_every: u64,
    /// Ask the device to return cached memory every N steps; 0: never.
    pub empty_cache_every: u64,
    /// One train clip in this many is held out for validation.
    pub validation_every_nth_clip: usize,
    /// Optimizer steps of the model's warm-up objective before its own loss takes over: for
    /// the default model, encoder and decoder without the quantizer, whose latents then seed
    /// the codebook (`SpectrogramModel::end_warm_up`). `None`: the model's default
    /// (`ModelConfig::default_warm_up_steps`), fixed when the run starts.
    pub quantizer_warmup_steps: Option<u64>,
    /// Stride between the patches a test clip is scored on.
    pub eval_stride: usize,
    /// The network and its configuration (`--model`); runs saved before models had names
    /// read as the default model.
    #[serde(default)]
    pub model: ModelSpec,
    pub dataset: DatasetSource,
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            backend: BackendKind::Flex,
            device: None,
            micro_batch: 8,
            n_patches: 4,
            stride: 32,
            placement: PatchPlacement::Random,
            accumulation: 1,
            step_clips: None,
            length_buckets: None,
            phase_micro_batches: Vec::new(),
            checkpointing: false,
            precision: Precision::F32,
            length: RunLength::Epochs(16),
            lr: 1e-3,
            min_lr: 0.0,
            clip_norm: Some(1.0),
            ema: None,
            seed: 42,
            checkpoint_every: 0,
            validate_every: 0,
            empty_cache_every: 10,
            validation_every_nth_clip: 10,
            quantizer_warmup_steps: None,
            eval_stride: 32,
            model: ModelSpec::default(),
            dataset: DatasetSource::default(),
        }
    }
}

/// What a resumed run may change from the saved one: where and how long it runs, and how often
/// it checkpoints, validates and empties the device's cache, and where its recordings are now.
/// What it learns from (the data, the step's size, the learning rate, the seed) stays the saved
/// run's; the planner may split the step differently (`RunOptions::planning`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResumeChanges {
    pub target: Option<Target>,
    pub length: Option<RunLength>,
    pub checkpoint_every: Option<u64>,
    pub validate_every: Option<u64>,
    pub empty_cache_every: Option<u64>,
    /// The saved run's folder of recordings, found at another path (a page's run saves only
    /// the picked folder's name).
    pub data_root: Option<std::path::PathBuf>,
}

impl ResumeChanges {
    pub fn apply(&self, config: &mut TrainConfig) {
        if let Some(target) = self.target {
            config.backend = target.backend;
            config.device = target.device;
        }
        if let Some(length) = self.length {
            config.length = length;
        }
        if let Some(n) = self.checkpoint_every {
            config.checkpoint_every = n;
        }
        if let Some(n) = self.validate_every {
            config.validate_every = n;
        }
        if let Some(n) = self.empty_cache_every {
            config.empty_cache_every = n;
        }
        if let (Some(moved), DatasetSource::Dcase { root, .. }) =
            (&self.data_root, &mut config.dataset)
        {
            *root = moved.clone();
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
#[error("{}", self.describe(&PlainWords))]
pub enum ConfigError {
    Zero(Setting),
    NotPositive {
        setting: Setting,
        value: f64,
    },
    UnevenSplit {
        step_clips: usize,
        micro_batch: usize,
        accumulation: usize,
        expected: usize,
    },
    /// A moving average's decay outside (0, 1).
    Decay(f64),
}

impl Described for ConfigError {
    fn describe(&self, words: &dyn Wording) -> String {
        match self {
            ConfigError::Zero(setting) => {
                format!("{} must be at least 1 (got 0)", words.setting(*setting))
            }
            ConfigError::NotPositive { setting, value } => format!(
                "{} must be a positive finite number (got {value})",
                words.setting(*setting)
            ),
            ConfigError::UnevenSplit {
                step_clips,
                micro_batch,
                accumulation,
                expected,
            } => format!(
                "a step of {step_clips} spectrograms cannot be split into {accumulation} \
                 micro-batches of at most {micro_batch}; use {} {expected}",
                words.setting(Setting::Accumulation)
            ),
            ConfigError::Decay(decay) => format!(
                "{} is the share of the average kept at each step: above 0 and below 1, \
                 such as 0.999 (got {decay})",
                words.setting(Setting::Ema)
            ),
        }
    }
}

impl TrainConfig {
    pub fn target(&self) -> Target {
        Target {
            backend: self.backend,
            device: self.device,
        }
    }

    /// Trains `model` instead: the features take the mel bands its patches have, and patches
    /// are drawn and scored at its strides.
    pub fn set_model<C: ModelConfig>(&mut self, model: &C) {
        let batch = model.default_batch();
        self.micro_batch = batch.spectrograms;
        self.n_patches = batch.patches;
        self.accumulation = 1;
        self.step_clips = None;
        self.dataset = self.dataset.clone().with_mels(model.input().mels);
        self.stride = model.training_stride();
        self.eval_stride = model.scoring_stride();
        self.model = ModelSpec::of(model);
    }

    /// How train clips are cut into patches of the model's `shape`.
    pub fn patch_spec(&self, shape: PatchShape) -> PatchSpec {
        PatchSpec {
            n_patches: self.n_patches,
            stride: self.stride,
            placement: self.placement,
            shape,
        }
    }

    /// How each step is split.
    pub fn split(&self) -> Split {
        Split {
            micro_batch: self.micro_batch,
            n_patches: self.n_patches,
            accumulation: self.accumulation,
            step_clips: self.step_clips,
        }
    }

    /// Trains with `split` from now on.
    pub fn set_split(&mut self, split: Split) {
        self.micro_batch = split.micro_batch;
        self.n_patches = split.n_patches;
        self.accumulation = split.accumulation;
        self.step_clips = split.step_clips;
    }

    /// Patches per optimizer step.
    pub fn effective_batch(&self) -> usize {
        self.split().effective_batch()
    }

    /// Spectrograms per optimizer step.
    pub fn clips_per_step(&self) -> usize {
        self.split().clips_per_step()
    }

    /// Splits the same step into micro-batches of at most `micro_batch` spectrograms, in
    /// every phase alike.
    pub fn set_micro_batch(&mut self, micro_batch: usize) {
        self.set_split(self.split().with_micro_batch(micro_batch));
        self.phase_micro_batches.clear();
    }

    /// How phase `phase` splits each step: its own micro-batch where the run cuts its phases
    /// apart, the run's split otherwise.
    pub fn phase_split(&self, phase: usize) -> Split {
        match self.phase_micro_batches.get(phase) {
            Some(&micro_batch) => self.split().with_micro_batch(micro_batch),
            None => self.split(),
        }
    }

    /// Cuts each phase's micro-batches its own way (`micro_batches`: spectrograms, one per
    /// phase in the task's order); the run's own split becomes the smallest, which fits
    /// every phase. Fewer than two: every phase alike.
    pub fn set_phase_micro_batches(&mut self, micro_batches: &[usize]) {
        match micro_batches.iter().min() {
            Some(&smallest) if micro_batches.len() > 1 => {
                self.set_split(self.split().with_micro_batch(smallest));
                self.phase_micro_batches = micro_batches
                    .iter()
                    .map(|&mb| self.split().with_micro_batch(mb).micro_batch)
                    .collect();
            }
            _ => self.phase_micro_batches.clear(),
        }
    }

    pub fn steps_per_epoch(&self, train_clips: usize) -> u64 {
        train_clips.div_ceil(self.clips_per_step().max(1)).max(1) as u64
    }

    pub fn total_steps(&self, train_clips: usize) -> u64 {
        match self.length {
            RunLength::Steps(steps) => steps,
            RunLength::Epochs(epochs) => {
                (epochs * train_clips as u64).div_ceil(self.clips_per_step().max(1) as u64)
            }
        }
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        for (setting, value) in [
            (Setting::MicroBatch, self.micro_batch),
            (Setting::PatchesPerSpectrogram, self.n_patches),
            (Setting::Stride, self.stride),
            (Setting::Accumulation, self.accumulation),
            (Setting::ScoringStride, self.eval_stride),
        ]
        .into_iter()
        .chain(
            self.phase_micro_batches
                .iter()
                .map(|&mb| (Setting::MicroBatch, mb)),
        ) {
            if value == 0 {
                return Err(ConfigError::Zero(setting));
            }
        }
        let positive = |setting, value: f64| {
            if value.is_finite() && value > 0.0 {
                Ok(())
            } else {
                Err(ConfigError::NotPositive { setting, value })
            }
        };
        positive(Setting::LearningRate, self.lr)?;
        if let Some(c) = self.clip_norm {
            positive(Setting::ClipNorm, c)?;
        }
        if let Some(decay) = self.ema
            && !(decay > 0.0 && decay < 1.0)
        {
            return Err(ConfigError::Decay(decay));
        }
        if let Some(clips) = self.step_clips {
            let expected = clips.div_ceil(self.micro_batch);
            if clips == 0 || expected != self.accumulation {
                return Err(ConfigError::UnevenSplit {
                    step_clips: clips,
                    micro_batch: self.micro_batch,
                    accumulation: self.accumulation,
                    expected,
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn effective_batch_and_run_length() {
        let config = TrainConfig {
            micro_batch: 16,
            n_patches: 1,
            accumulation: 8,
            length: RunLength::Epochs(2),
            ..TrainConfig::default()
        };
        assert_eq!(config.effective_batch(), 128);
        assert_eq!(config.steps_per_epoch(300), 3);
        assert_eq!(config.total_steps(300), 5);
        let zero = TrainConfig {
            accumulation: 0,
            ..config
        };
        assert_eq!(
            zero.validate(),
            Err(ConfigError::Zero(Setting::Accumulation)),
            "an error names the setting, not a front-end's flag"
        );
    }

    #[test]
    fn a_step_splits_into_any_micro_batch_and_keeps_its_spectrograms() {
        let mut config = TrainConfig {
            micro_batch: 8,
            n_patches: 4,
            accumulation: 4,
            ..TrainConfig::default()
        };
        config.set_micro_batch(10);
        assert_eq!(config.split().micro_batch_sizes(), vec![10, 10, 10, 2]);
        assert_eq!((config.accumulation, config.effective_batch()), (4, 128));
        config.validate().unwrap();
        config.set_micro_batch(16);
        assert_eq!(config.split().micro_batch_sizes(), vec![16, 16]);
        assert_eq!(config.step_clips, None);
        let broken = TrainConfig {
            step_clips: Some(32),
            accumulation: 3,
            ..config
        };
        assert!(matches!(
            broken.validate(),
            Err(ConfigError::UnevenSplit { expected: 2, .. })
        ));
    }

    #[test]
    fn each_phase_cuts_the_same_step_its_own_way() {
        let mut config = TrainConfig {
            micro_batch: 32,
            n_patches: 1,
            accumulation: 1,
            ..TrainConfig::default()
        };
        config.set_phase_micro_batches(&[32, 12]);
        assert_eq!(config.split().micro_batch_sizes(), vec![12, 12, 8]);
        assert_eq!(config.phase_split(0).micro_batch_sizes(), vec![32]);
        assert_eq!(config.phase_split(1).micro_batch_sizes(), vec![12, 12, 8]);
        assert_eq!(config.effective_batch(), 32);
        config.validate().unwrap();
        // A phase's micro-batch larger than the step is the whole step.
        config.set_phase_micro_batches(&[64, 16]);
        assert_eq!(config.phase_micro_batches, vec![32, 16]);
        // A count given for every phase replaces the phases' own.
        config.set_micro_batch(8);
        assert!(config.phase_micro_batches.is_empty());
        assert_eq!(config.phase_split(1).micro_batch_sizes(), vec![8; 4]);
    }
}
