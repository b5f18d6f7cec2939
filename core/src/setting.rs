//! The settings of a run as core's messages name them, and how a front-end words them: core
//! says "the learning rate", the CLI `--lr`, the page `lr=`. An error that tells the user
//! what to change renders through a [`Wording`] ([`crate::train::TrainError::describe`]);
//! its `Display` uses core's own words, so that nothing core prints names a flag.

use headroom_datasets::dcase::LayoutError;
use headroom_datasets::{FileError, FileProblem, PatchError};

/// A setting of a run as core names it in errors and refusals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    Model,
    LearningRate,
    ClipNorm,
    Seed,
    Stride,
    /// The stride test clips are scored at: only a hand-edited saved configuration sets it.
    ScoringStride,
    MicroBatch,
    Accumulation,
    PatchesPerSpectrogram,
    Placement,
    EffectiveBatch,
    MachineIds,
    TrainClipsPerId,
    TestClipsPerId,
    /// The memory budget in bytes.
    MemoryBudget,
    /// The memory budget as a share of the device's free memory.
    MemoryFraction,
    /// Training without the planner, the split chosen by hand.
    PlannerOff,
    /// Where a run writes its checkpoints.
    OutDir,
    /// Continuing a saved run (followed by its directory).
    Resume,
    /// Leaving unreadable files out of the run instead of stopping.
    SkipBadFiles,
    /// Converting clips of another sample rate.
    Resample,
    /// The dataset's sample rate (followed by a rate).
    SampleRate,
    /// The folder of a dataset in the DCASE layout.
    DataRoot,
    /// The speech recogniser's train recordings (a manifest or a LibriSpeech folder).
    SpeechTrain,
    /// The speech recogniser's preset size.
    AsrSize,
    /// The GAN's preset size.
    GanSize,
    /// The SaShiMi model's preset size.
    SashimiSize,
    /// A waveform model's crop, in samples.
    SampleLen,
    /// How a waveform model's samples become levels.
    Quantizer,
    /// A waveform model's folder of recordings.
    Waveforms,
    /// The decay of the weights' moving average.
    Ema,
    /// A waveform model's recordings taken as two channels interleaved.
    Stereo,
    /// The components of a waveform model's mixture-of-logistics head.
    Mixtures,
    /// The classifier's network.
    ClassifierArch,
    /// The GAN run whose generator a classifier mixes patches from.
    Generator,
    /// The share of a classifier's train patches that are generated.
    GeneratedShare,
    /// Which pairs a contrastive model's pairs are contrasted with.
    Negatives,
    /// One machine type of the dataset's folder.
    MachineType,
    /// The mel bands of the recordings' features.
    NMels,
    /// The run's length in optimizer steps.
    Steps,
    /// The run's length in passes over the train split.
    Epochs,
    CheckpointEvery,
    ValidateEvery,
    EmptyCacheEvery,
    /// The compute precision.
    Precision,
    /// Gradient checkpointing, on or off.
    Checkpointing,
}

impl Setting {
    /// The setting in plain words, for a message that names no flag.
    pub fn words(self) -> &'static str {
        match self {
            Setting::Model => "the model",
            Setting::LearningRate => "the learning rate",
            Setting::ClipNorm => "the gradient clipping norm",
            Setting::Seed => "the seed",
            Setting::Stride => "the stride between patches",
            Setting::ScoringStride => "the scoring stride in the run's saved configuration",
            Setting::MicroBatch => "the micro-batch",
            Setting::Accumulation => "the accumulation",
            Setting::PatchesPerSpectrogram => "the patches per spectrogram",
            Setting::Placement => "the patch placement",
            Setting::EffectiveBatch => "the effective batch",
            Setting::MachineIds => "the machine IDs",
            Setting::TrainClipsPerId => "the train clips per ID",
            Setting::TestClipsPerId => "the test clips per ID",
            Setting::MemoryBudget => "the memory budget",
            Setting::MemoryFraction => "the share of free memory it takes",
            Setting::PlannerOff => "the planner off",
            Setting::OutDir => "output directory",
            Setting::Resume => "resume",
            Setting::SkipBadFiles => "bad files skipped",
            Setting::Resample => "resampling",
            Setting::SampleRate => "the sample rate",
            Setting::DataRoot => "the data root",
            Setting::SpeechTrain => "the speech recordings",
            Setting::AsrSize => "the recogniser's size",
            Setting::GanSize => "the GAN's size",
            Setting::SashimiSize => "the SaShiMi model's size",
            Setting::SampleLen => "the crop's length in samples",
            Setting::Quantizer => "the quantiser",
            Setting::Waveforms => "the waveform recordings",
            Setting::Ema => "the weights' moving average",
            Setting::Stereo => "stereo",
            Setting::Mixtures => "the mixture head's components",
            Setting::ClassifierArch => "the classifier's network",
            Setting::Generator => "the generator's run",
            Setting::GeneratedShare => "the share of generated patches",
            Setting::Negatives => "the negatives",
            Setting::MachineType => "the machine type",
            Setting::NMels => "the mel bands",
            Setting::Steps => "the steps",
            Setting::Epochs => "the epochs",
            Setting::CheckpointEvery => "the checkpoint interval",
            Setting::ValidateEvery => "the validation interval",
            Setting::EmptyCacheEvery => "the interval of returning cached memory",
            Setting::Precision => "the precision",
            Setting::Checkpointing => "gradient checkpointing",
        }
    }
}

/// How a front-end names settings in core's messages.
pub trait Wording {
    /// The words for `setting`: a flag, an address key, a field's label.
    fn setting(&self, setting: Setting) -> String;

    /// `setting` given as `value`: "--lr 0.5", "`lr=0.5`".
    fn given(&self, setting: Setting, value: &str) -> String {
        format!("{} {value}", self.setting(setting))
    }
}

/// An error that names the settings that fix it, rendered in a front-end's words; its
/// `Display` is this in [`PlainWords`].
pub trait Described {
    fn describe(&self, words: &dyn Wording) -> String;
}

/// Core's own words ([`Setting::words`]): what every core error's `Display` uses.
#[derive(Debug, Clone, Copy, Default)]
pub struct PlainWords;

impl Wording for PlainWords {
    fn setting(&self, setting: Setting) -> String {
        setting.words().to_string()
    }
}

impl Described for PatchError {
    fn describe(&self, words: &dyn Wording) -> String {
        let (patches, stride) = (
            words.setting(Setting::PatchesPerSpectrogram),
            words.setting(Setting::Stride),
        );
        match self {
            PatchError::TooLong {
                n_patches,
                stride: frames_apart,
                span,
                frames,
            } => format!(
                "{n_patches} patches with stride {frames_apart} span {span} frames, but the \
                 spectrogram has only {frames}; lower {patches} or {stride}"
            ),
            PatchError::Zero {
                n_patches,
                stride: given,
            } => format!("{patches} and {stride} must be at least 1 (got {n_patches} and {given})"),
            other => other.to_string(),
        }
    }
}

impl Described for FileError {
    fn describe(&self, words: &dyn Wording) -> String {
        match &self.problem {
            FileProblem::SampleRate { found, expected } => format!(
                "{}: sample rate {found} Hz, but the dataset's is {expected} Hz; convert it ({}), \
                 or set {} if every file has that rate",
                self.path.display(),
                words.setting(Setting::Resample),
                words.given(Setting::SampleRate, &found.to_string()),
            ),
            FileProblem::Patch(patch) => {
                format!("{}: {}", self.path.display(), patch.describe(words))
            }
            _ => self.to_string(),
        }
    }
}

impl Described for LayoutError {
    fn describe(&self, words: &dyn Wording) -> String {
        match self {
            LayoutError::Io { path, source } => format!(
                "{}: {source}; {} must be a folder in the DCASE layout",
                path.display(),
                words.setting(Setting::DataRoot)
            ),
            other => other.to_string(),
        }
    }
}
