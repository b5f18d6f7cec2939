//! One run as a user asks for it, whichever front-end they ask through: `trainer-cli train`'s
//! flags, the desktop app's choices and the page's address each fill a [`RunSpec`] and hand it
//! here. Core turns it into the run's configuration ([`RunSpec::train_config`]), the
//! planner's request ([`RunSpec::planning`]), the budget's source ([`RunSpec::budget_source`])
//! and, for a resumed run, what it may change ([`RunSpec::resume`]); the front-ends only
//! collect input and word core's answers. `None` everywhere: the engine's default.

pub mod file;
mod models;
mod resolved;
mod resume;
#[cfg(feature = "run-files")]
pub mod writing;

use std::path::PathBuf;

use headroom_datasets::{FeatureSettings, PatchPlacement};
use serde::{Deserialize, Serialize};

use crate::budget::BudgetSource;
use crate::budget::simulated::{self, UnknownDevice};
use crate::classifier::{ClassifierArch, ClassifierConfig};
use crate::config::{DatasetSource, RunLength, TrainConfig};
use crate::contrastive::{ContrastiveConfig, Negatives};
use crate::gan::{GanConfig, GanSize};
use crate::model::{DefaultBatch, ModelConfig, ModelError, VqAutoencoderConfig};
use crate::plan::{Fixed, Planning, RequestError};
use crate::precision::Precision;
use crate::registry::info_of;
use crate::setting::{Described, PlainWords, Setting, Wording};
use crate::speech::{AsrConfig, AsrSize, SpeechFiles};
use crate::{BackendKind, Target};

/// The speech recogniser's name: the model its recordings and size settings are for.
const RECOGNISER: &str = <AsrConfig as crate::model::NamedConfig>::NAME;
const GAN: &str = <GanConfig as crate::model::NamedConfig>::NAME;
const CLASSIFIER: &str = <ClassifierConfig as crate::model::NamedConfig>::NAME;
const CONTRASTIVE: &str = <ContrastiveConfig as crate::model::NamedConfig>::NAME;
const SASHIMI: &str = <crate::waveform::SashimiConfig as crate::model::NamedConfig>::NAME;

pub use resume::{Change, Refusal, ResumeError, Resumed};

/// What a run is asked to be. A run file (`trainer-cli train --config run.toml`, the desktop
/// app's run files) is this in TOML: an unknown key is an error, not a setting left out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RunSpec {
    /// A built-in model's name (`registry::built_in`).
    pub model: Option<String>,
    /// The backend asked for (`None`: Headroom chooses), as the user named it: the front-end
    /// resolves it into the [`Target`] a run is given.
    pub backend: Option<BackendKind>,
    /// The device asked for, as `trainer-cli train --device` takes it: cpu, cuda, wgpu, or one
    /// device as `trainer-cli probe` lists it (cuda:1, wgpu:0). Kept as given, so that a run
    /// file re-runs on another machine.
    pub device: Option<String>,
    pub data: DataSpec,
    pub split: SplitSpec,
    pub memory: MemorySpec,
    /// Plan the split (`true`), or train the split given, the model's defaults filling it.
    pub planner: bool,
    pub length: Option<RunLength>,
    pub lr: Option<f64>,
    pub clip_norm: Option<f64>,
    /// The decay of a moving average of the weights the run is measured with.
    pub ema: Option<f64>,
    pub seed: Option<u64>,
    pub checkpoint_every: Option<u64>,
    pub validate_every: Option<u64>,
    pub empty_cache_every: Option<u64>,
    /// The speech recogniser's preset size.
    pub asr_size: Option<AsrSize>,
    /// The GAN's preset size.
    pub gan_size: Option<GanSize>,
    /// The classifier's network and the generated patches it mixes in.
    pub classifier: ClassifierSpec,
    /// A contrastive model's negatives.
    pub negatives: Option<Negatives>,
    /// The SaShiMi model's size and crop.
    pub sashimi: SashimiSpec,
}

/// A `sashimi` run's own settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SashimiSpec {
    pub size: Option<crate::waveform::SashimiSize>,
    /// Samples in one example.
    pub sample_len: Option<usize>,
    /// How samples become the 256 levels.
    pub quantizer: Option<headroom_datasets::waveform::Quantizer>,
    /// A folder of WAV and FLAC recordings instead of the built-in spoken digits, taken at
    /// the data's sample rate (16 kHz unless given; another rate converted with resampling).
    pub waveforms: Option<PathBuf>,
    /// A discretized mixture of logistics head of this many components instead of the
    /// 256-way categorical one.
    pub mixtures: Option<usize>,
    /// The recordings' two channels interleaved instead of mixed down.
    pub stereo: bool,
}

/// A `spec-classifier` run's own settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClassifierSpec {
    pub arch: Option<ClassifierArch>,
    /// A `spec-gan` run (its folder or one of its checkpoints) whose generator makes the
    /// patches a second classifier learns from beside the real ones.
    pub generator: Option<PathBuf>,
    /// The share of that classifier's train patches that are generated.
    pub generated_share: Option<f64>,
}

impl Default for RunSpec {
    fn default() -> Self {
        Self {
            model: None,
            backend: None,
            device: None,
            data: DataSpec::default(),
            split: SplitSpec::default(),
            memory: MemorySpec::default(),
            planner: true,
            length: None,
            lr: None,
            clip_norm: None,
            ema: None,
            seed: None,
            checkpoint_every: None,
            validate_every: None,
            empty_cache_every: None,
            asr_size: None,
            gan_size: None,
            classifier: ClassifierSpec::default(),
            negatives: None,
            sashimi: SashimiSpec::default(),
        }
    }
}

/// Where the clips come from: recordings under `root`, else the built-in dataset.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DataSpec {
    /// A folder in the DCASE layout.
    pub root: Option<PathBuf>,
    /// The recordings': one machine type of the folder.
    pub machine_type: Option<String>,
    /// The recordings': their features' mel bands, which must be the model's.
    pub n_mels: Option<usize>,
    /// The recordings': their sample rate in Hz.
    pub sample_rate: Option<u32>,
    /// The recordings': convert another sample rate instead of rejecting the file.
    pub resample: bool,
    /// The built-in dataset's machine IDs.
    pub machine_ids: Option<u32>,
    /// The built-in dataset's train clips per machine ID.
    pub train_clips_per_id: Option<usize>,
    /// The built-in dataset's normal, and anomalous, test clips per machine ID.
    pub test_clips_per_id: Option<usize>,
    /// The speech recogniser's recordings, by split, instead of its generated corpus.
    pub speech: Option<SpeechFiles>,
}

/// How a step is split and its patches cut, where the user fixes it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SplitSpec {
    pub micro_batch: Option<usize>,
    pub n_patches: Option<usize>,
    pub accumulation: Option<usize>,
    pub stride: Option<usize>,
    pub placement: Option<PatchPlacement>,
}

/// The planner's inputs beside the split.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MemorySpec {
    pub budget: BudgetSpec,
    /// The share of the device's free memory a budget from free memory takes.
    pub fraction: f64,
    /// Patches per optimizer step, kept whatever the split.
    pub effective_batch: Option<usize>,
    pub checkpointing: Option<bool>,
    pub precision: Option<Precision>,
}

impl Default for MemorySpec {
    fn default() -> Self {
        Self {
            budget: BudgetSpec::default(),
            fraction: crate::budget::DEFAULT_FRACTION,
            effective_batch: None,
            checkpointing: None,
            precision: None,
        }
    }
}

/// Where the memory budget comes from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum BudgetSpec {
    /// The training device's free memory x the fraction.
    #[default]
    FreeMemory,
    Given {
        bytes: u64,
    },
    /// A known GPU's memory (`budget::simulated`), by name.
    Simulated {
        device: String,
    },
}

/// A run that cannot be what was asked.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}", self.describe(&PlainWords))]
pub enum SpecError {
    /// A setting of recordings given for the built-in dataset.
    ForRecordings(Setting),
    /// A size of the built-in dataset given for recordings.
    ForBuiltIn(Setting),
    /// Features of other mel bands than the model reads.
    MelsDoNotFit {
        asked: usize,
        model: String,
        mels: usize,
    },
    EffectiveBatchWithoutPlanner,
    /// A setting of the speech recogniser's (its recordings, its size) for another model.
    ForRecogniser {
        setting: Setting,
        model: String,
    },
    /// A setting of the GAN's (its size) for another model.
    ForGan {
        setting: Setting,
        model: String,
    },
    /// A setting of the classifier's (its network, its generator) for another model.
    ForClassifier {
        setting: Setting,
        model: String,
    },
    /// The negatives of a contrastive model for another model.
    ForContrastive(String),
    /// A setting of the SaShiMi model's (its size, its crop) for another model.
    ForSashimi {
        setting: Setting,
        model: String,
    },
    /// A crop the network cannot pool: the reason, with the nearest lengths it can.
    SampleLen(String),
    /// A mixture head of no components.
    NoMixtures,
    /// Stereo asked for the built-in digits, which are mono.
    StereoWithoutRecordings,
    /// A share of generated patches without a generator, or outside (0, 1].
    GeneratedShare(Option<f64>),
    /// Speech recordings and a setting of machine sounds (the data root, their sizes).
    SpeechWith(Setting),
    /// Waveform recordings and a setting of another kind of data.
    WaveformsWith(Setting),
    Model(ModelError),
    Request(RequestError),
    UnknownDevice(UnknownDevice),
}

impl Described for SpecError {
    fn describe(&self, words: &dyn Wording) -> String {
        let data_root = words.setting(Setting::DataRoot);
        match self {
            SpecError::ForRecordings(setting) => format!(
                "{} describes the recordings under {data_root}; the built-in dataset has its own",
                words.setting(*setting)
            ),
            SpecError::ForBuiltIn(setting) => format!(
                "{} sizes the built-in dataset; the recordings under {data_root} have their own",
                words.setting(*setting)
            ),
            SpecError::MelsDoNotFit { asked, model, mels } => format!(
                "{} does not fit {}, which reads {mels} mel bands; leave {} out",
                words.given(Setting::NMels, &asked.to_string()),
                words.given(Setting::Model, model),
                words.setting(Setting::NMels)
            ),
            SpecError::EffectiveBatchWithoutPlanner => format!(
                "{} needs the planner to split it; with {} give {}, {} and {}",
                words.setting(Setting::EffectiveBatch),
                words.setting(Setting::PlannerOff),
                words.setting(Setting::MicroBatch),
                words.setting(Setting::PatchesPerSpectrogram),
                words.setting(Setting::Accumulation)
            ),
            SpecError::ForRecogniser { setting, model } => format!(
                "{} is for {}; {} does not take it",
                words.setting(*setting),
                if *setting == Setting::SpeechTrain {
                    format!(
                        "{} or {}",
                        words.given(Setting::Model, RECOGNISER),
                        words.given(Setting::Model, CONTRASTIVE)
                    )
                } else {
                    words.given(Setting::Model, RECOGNISER)
                },
                words.given(Setting::Model, model)
            ),
            SpecError::ForGan { setting, model } => format!(
                "{} is for {}; {} does not take it",
                words.setting(*setting),
                words.given(Setting::Model, GAN),
                words.given(Setting::Model, model)
            ),
            SpecError::ForClassifier { setting, model } => format!(
                "{} is for {}; {} does not take it",
                words.setting(*setting),
                words.given(Setting::Model, CLASSIFIER),
                words.given(Setting::Model, model)
            ),
            SpecError::ForContrastive(model) => format!(
                "{} is for {}; {} does not take it",
                words.setting(Setting::Negatives),
                words.given(Setting::Model, CONTRASTIVE),
                words.given(Setting::Model, model)
            ),
            SpecError::ForSashimi { setting, model } => format!(
                "{} is for {}; {} does not take it",
                words.setting(*setting),
                words.given(Setting::Model, SASHIMI),
                words.given(Setting::Model, model)
            ),
            SpecError::SampleLen(reason) => {
                format!("{}: {reason}", words.setting(Setting::SampleLen))
            }
            SpecError::StereoWithoutRecordings => format!(
                "{} interleaves the channels of {}; the built-in spoken digits are mono",
                words.setting(Setting::Stereo),
                words.setting(Setting::Waveforms)
            ),
            SpecError::NoMixtures => format!(
                "{} takes 1 component or more (the seed's 6); leave it out for the 256-way \
                 categorical head",
                words.setting(Setting::Mixtures)
            ),
            SpecError::GeneratedShare(None) => format!(
                "{} needs {}, the spec-gan run whose generator makes the patches",
                words.setting(Setting::GeneratedShare),
                words.setting(Setting::Generator)
            ),
            SpecError::GeneratedShare(Some(share)) => format!(
                "{} is a share of the train patches: above 0 and at most 1",
                words.given(Setting::GeneratedShare, &share.to_string())
            ),
            SpecError::SpeechWith(setting) => format!(
                "{} describes machine sounds; a speech run reads {} alone",
                words.setting(*setting),
                words.setting(Setting::SpeechTrain)
            ),
            SpecError::WaveformsWith(setting) => format!(
                "{} describes another kind of data; a waveform run reads {} alone (with {} and \
                 {})",
                words.setting(*setting),
                words.setting(Setting::Waveforms),
                words.setting(Setting::SampleRate),
                words.setting(Setting::Resample)
            ),
            SpecError::Model(error) => error.describe(words),
            SpecError::Request(error) => error.describe(words),
            SpecError::UnknownDevice(error) => error.to_string(),
        }
    }
}

impl From<ModelError> for SpecError {
    fn from(error: ModelError) -> Self {
        SpecError::Model(error)
    }
}

impl From<RequestError> for SpecError {
    fn from(error: RequestError) -> Self {
        SpecError::Request(error)
    }
}

/// A setting given replaces the default in `slot`.
fn given<T>(slot: &mut T, value: Option<T>) {
    if let Some(value) = value {
        *slot = value;
    }
}

impl RunSpec {
    /// The model the run trains: the one named, else the default.
    pub fn model_name(&self) -> &str {
        self.model
            .as_deref()
            .unwrap_or(<VqAutoencoderConfig as ModelConfig>::NAME)
    }

    /// The clips the spec names: the recordings under the data root, else the built-in
    /// dataset at its sizes. A setting of the other kind of dataset is refused, so that a
    /// misplaced one does not go unnoticed.
    pub fn dataset(&self) -> Result<DatasetSource, SpecError> {
        let d = &self.data;
        let for_recordings = [
            (Setting::MachineType, d.machine_type.is_some()),
            (Setting::NMels, d.n_mels.is_some()),
            (Setting::SampleRate, d.sample_rate.is_some()),
            (Setting::Resample, d.resample),
        ];
        let for_built_in = [
            (Setting::MachineIds, d.machine_ids.is_some()),
            (Setting::TrainClipsPerId, d.train_clips_per_id.is_some()),
            (Setting::TestClipsPerId, d.test_clips_per_id.is_some()),
        ];
        let waveforms = self.sashimi.waveforms.is_some();
        // A waveform run's recordings take the sample rate and resampling, and refuse the rest
        // in their own words (`sashimi_into`).
        let for_recordings = for_recordings.map(|(setting, given)| (setting, given && !waveforms));
        let Some(root) = &d.root else {
            if let Some((setting, _)) = for_recordings.iter().find(|(_, given)| *given) {
                return Err(SpecError::ForRecordings(*setting));
            }
            let mut source = TrainConfig::default().dataset;
            if let DatasetSource::Synthetic(synthetic) = &mut source {
                given(&mut synthetic.machine_ids, d.machine_ids);
                given(&mut synthetic.train_per_id, d.train_clips_per_id);
                if let Some(n) = d.test_clips_per_id {
                    synthetic.test_normal_per_id = n;
                    synthetic.test_anomaly_per_id = n;
                }
            }
            return Ok(source);
        };
        if let Some((setting, _)) = for_built_in.iter().find(|(_, given)| *given) {
            return Err(SpecError::ForBuiltIn(*setting));
        }
        let mut features = FeatureSettings::default();
        given(&mut features.logmel.n_mels, d.n_mels);
        given(&mut features.logmel.sample_rate, d.sample_rate);
        features.resample = d.resample;
        Ok(DatasetSource::Dcase {
            root: root.clone(),
            machine_type: d.machine_type.clone(),
            features,
        })
    }

    /// The configuration of a new run on `target`: the dataset, the named model (its mel
    /// bands, strides and default split), then every setting given.
    pub fn train_config(&self, target: Target) -> Result<TrainConfig, SpecError> {
        let mut c = TrainConfig {
            backend: target.backend,
            device: target.device,
            dataset: self.dataset()?,
            ..TrainConfig::default()
        };
        // First, so that the settings below override the model's split and strides.
        if let Some(name) = &self.model {
            crate::registry::configure(&mut c, name)?;
            self.gan_into(&mut c)?;
            self.classifier_into(&mut c)?;
            self.negatives_into(&mut c)?;
            let mels = c.dataset.mels();
            if let Some(asked) = self.data.n_mels
                && asked != mels
            {
                return Err(SpecError::MelsDoNotFit {
                    asked,
                    model: name.clone(),
                    mels,
                });
            }
        }
        if self.model.is_none() {
            // The default model takes no GAN size: said as for any other model.
            self.gan_into(&mut c)?;
            self.classifier_into(&mut c)?;
            self.negatives_into(&mut c)?;
        }
        self.recogniser_into(&mut c)?;
        self.sashimi_into(&mut c)?;
        let split = &self.split;
        given(&mut c.micro_batch, split.micro_batch);
        given(&mut c.n_patches, split.n_patches);
        given(&mut c.accumulation, split.accumulation);
        given(&mut c.stride, split.stride);
        given(&mut c.placement, split.placement);
        // With the planner these are constraints the plan keeps; without it, the run's.
        c.checkpointing = self.memory.checkpointing.unwrap_or(false);
        c.precision = self.memory.precision.unwrap_or_default();
        given(&mut c.length, self.length);
        given(&mut c.lr, self.lr);
        given(&mut c.clip_norm, self.clip_norm.map(Some));
        given(&mut c.ema, self.ema.map(Some));
        given(&mut c.seed, self.seed);
        given(&mut c.checkpoint_every, self.checkpoint_every);
        given(&mut c.validate_every, self.validate_every);
        given(&mut c.empty_cache_every, self.empty_cache_every);
        Ok(c)
    }

    /// `model` at the sizes the spec asks for (`--gan-size`), as a run of it would train it:
    /// what a plan made without a run (a what-if, a plan without a dry-run) is for.
    pub fn sized<T: crate::train::BuiltIn>(&self, model: T) -> Result<T, SpecError> {
        let c = &self.classifier;
        let sashimi = self.sashimi != SashimiSpec::default();
        if self.gan_size.is_none() && c.arch.is_none() && c.generator.is_none() && !sashimi {
            return Ok(model);
        }
        let mut c = TrainConfig::default();
        model.configure(&mut c);
        self.gan_into(&mut c)?;
        self.classifier_into(&mut c)?;
        self.sashimi_into(&mut c)?;
        Ok(c.model.config()?)
    }

    /// Gives `c`'s GAN the size asked for, with that size's batch, features and strides
    /// (`BuiltIn::configure`); only the GAN takes it.
    fn gan_into(&self, c: &mut TrainConfig) -> Result<(), SpecError> {
        let Some(size) = self.gan_size else {
            return Ok(());
        };
        if self.model_name() != GAN {
            return Err(SpecError::ForGan {
                setting: Setting::GanSize,
                model: self.model_name().to_string(),
            });
        }
        let task = GanConfig {
            shape: size.shape(),
            ..c.model.config()?
        };
        crate::train::BuiltIn::configure(&task, c);
        Ok(())
    }

    /// Where the budget comes from: the device's free memory is measured by the front-end
    /// that knows how (a probe, a browser's WebAssembly memory).
    pub fn budget_source(&self) -> Result<BudgetSource, SpecError> {
        Ok(match &self.memory.budget {
            BudgetSpec::FreeMemory => BudgetSource::FreeMemory,
            BudgetSpec::Given { bytes } => BudgetSource::Given(*bytes),
            BudgetSpec::Simulated { device } => {
                BudgetSource::Simulated(simulated::find(device).map_err(SpecError::UnknownDevice)?)
            }
        })
    }

    /// The planner's request for a budget of `budget_bytes`, `None` with the planner off:
    /// the effective batch asked for (else the split given, the model's default where it is
    /// open), every part given kept as a constraint. A resumed run keeps its own effective
    /// batch and patch count over these.
    pub fn planning(&self, budget_bytes: u64) -> Result<Option<Planning>, SpecError> {
        if !self.planner {
            if self.memory.effective_batch.is_some() {
                return Err(SpecError::EffectiveBatchWithoutPlanner);
            }
            return Ok(None);
        }
        let defaults = info_of(self.model_name())?.default_batch;
        self.planning_for(budget_bytes, defaults).map(Some)
    }

    /// The planner's request for a model whose default step is `defaults`, as
    /// [`Self::planning`] builds it: for a model that is not built in by name.
    pub fn planning_for(
        &self,
        budget_bytes: u64,
        defaults: DefaultBatch,
    ) -> Result<Planning, SpecError> {
        let fixed = Fixed {
            micro_batch: self.split.micro_batch,
            n_patches: self.split.n_patches,
            accumulation: self.split.accumulation,
            checkpointing: self.memory.checkpointing,
            precision: self.memory.precision,
            ..Fixed::default()
        };
        Ok(Planning::new(
            budget_bytes,
            self.memory.effective_batch,
            fixed,
            defaults,
        )?)
    }
}

#[cfg(test)]
mod sashimi_tests;
#[cfg(test)]
mod tests;
