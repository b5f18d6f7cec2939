//! The flags of a training run (`train`, and what `plan` shares with it): the run, its
//! dataset and loader, the step's split and the memory settings.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use headroom_core::budget::DEFAULT_FRACTION;
use headroom_core::precision::Precision;
use headroom_datasets::PatchPlacement;

use super::device::{Backend, DeviceArg};

#[derive(ValueEnum, Debug, Clone, Copy)]
pub enum Placement {
    Even,
    Random,
}

impl From<Placement> for PatchPlacement {
    fn from(p: Placement) -> Self {
        match p {
            Placement::Even => PatchPlacement::Even,
            Placement::Random => PatchPlacement::Random,
        }
    }
}

#[derive(Args, Debug, Clone, Default)]
pub struct TrainArgs {
    /// A run file (TOML; every run writes its own as OUT/run.toml): its settings fill the
    /// run's as these flags do, and flags given beside it win. An unknown key is an error.
    #[arg(long, conflicts_with = "resume")]
    pub config: Option<PathBuf>,
    /// The flags given on the command line, by id: what beside --config overrides the file
    /// (`args::parse` fills it from clap's matches).
    #[arg(skip)]
    pub given: Vec<String>,
    /// Backend to train on [default: auto] (ndarray is far slower than flex; see docs/BENCHMARKS.md).
    #[arg(long, value_enum)]
    pub backend: Option<Backend>,
    /// The model to train (`trainer-cli models` lists them) [default: vq-patch-ae]; a
    /// resumed run keeps its own.
    #[arg(long)]
    pub model: Option<String>,
    /// The speech recogniser's size (with --model asr-transformer): large is seed 002's
    /// d_model 256 with 12 encoder and 6 decoder layers [default: tiny].
    #[arg(long, value_enum)]
    pub asr_size: Option<AsrSizeArg>,
    /// The GAN's size (with --model spec-gan): seed is seed 000's whole spectrograms, 128
    /// mel bands x 1,292 frames, seed-96 its 96-band fallback [default: small, 64 x 64
    /// patches].
    #[arg(long, value_enum)]
    pub gan_size: Option<GanSizeArg>,
    #[command(flatten)]
    pub classifier: ClassifierArgs,
    #[command(flatten)]
    pub sashimi: SashimiArgs,
    /// Where to train, as the seed documents say it: cpu, cuda or wgpu, or one device as
    /// `trainer-cli probe` lists it (cuda:1, wgpu:0).
    #[arg(long)]
    pub device: Option<DeviceArg>,
    #[command(flatten)]
    pub split: SplitArgs,
    /// Frames between consecutive patches of a spectrogram.
    #[arg(long)]
    pub stride: Option<usize>,
    /// Where the run of patches sits in a spectrogram: centred, or random each time.
    #[arg(long, value_enum)]
    pub placement: Option<Placement>,
    /// Passes over the train split.
    #[arg(long, conflicts_with = "steps")]
    pub epochs: Option<u64>,
    /// Optimizer steps (instead of --epochs).
    #[arg(long)]
    pub steps: Option<u64>,
    /// Peak learning rate (cosine decay to 0).
    #[arg(long)]
    pub lr: Option<f64>,
    /// Global gradient-norm clipping threshold.
    #[arg(long, alias = "clip_norm")]
    pub clip_norm: Option<f64>,
    /// Keep an exponential moving average of the weights with this decay (such as 0.999, as
    /// seed 004's recipe keeps one): validation, evaluation, pictures and `generate` use the
    /// average; it is saved in each checkpoint, and the planner counts its copy of the
    /// parameters.
    #[arg(long, value_name = "DECAY")]
    pub ema: Option<f64>,
    #[arg(long)]
    pub seed: Option<u64>,
    /// Run directory: checkpoints go to OUT/checkpoints, OUT/checkpoint.json names the newest
    /// [default: a new runs/run-<unix time>, or the --resume run's directory].
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Continue the run saved in this directory (a run's --out, or one of its checkpoints).
    #[arg(long)]
    pub resume: Option<PathBuf>,
    /// Write a checkpoint every N steps (and at the end).
    #[arg(long, alias = "checkpoint_every")]
    pub checkpoint_every: Option<u64>,
    /// Validate every N steps (and at the end).
    #[arg(long, alias = "validate_every")]
    pub validate_every: Option<u64>,
    /// Ask the device to return cached memory every N steps (0: never).
    #[arg(long, alias = "empty_cache_every", alias = "empty_cache_frequency")]
    pub empty_cache_every: Option<u64>,
    /// Stop after this many steps in total, with a checkpoint; --resume continues.
    #[arg(long)]
    pub stop_after: Option<u64>,
    /// Synthetic dataset: clips per machine ID in the train split.
    #[arg(long, conflicts_with = "data_root")]
    pub train_clips_per_id: Option<usize>,
    /// Synthetic dataset: number of machine IDs.
    #[arg(long, conflicts_with = "data_root")]
    pub machine_ids: Option<u32>,
    #[command(flatten)]
    pub data: DataArgs,
    #[command(flatten)]
    pub loader: LoaderArgs,
    /// Threads for the CPU backends (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Skip scoring the test split at the end.
    #[arg(long)]
    pub no_eval: bool,
    #[command(flatten)]
    pub memory: MemoryArgs,
    /// Train with the given (or default) micro-batch, patches and accumulation as they are:
    /// no calibration and no dry-run. The budget guard and out-of-memory recovery still work.
    #[arg(long)]
    pub no_plan: bool,
    /// One JSON object per line per event, instead of progress bars.
    #[arg(long)]
    pub json: bool,
}

/// Where the clips come from [default: the built-in synthetic dataset].
#[derive(Args, Debug, Clone, Default)]
pub struct DataArgs {
    /// A dataset in the DCASE 2020 Task 2 layout: ROOT/<machine_type>/{train,test}/ with
    /// normal_id_XX_NNNNNNNN.wav (or .npy spectrograms) files.
    #[arg(long, alias = "data_root")]
    pub data_root: Option<PathBuf>,
    /// Only this machine type (fan, pump, slider, valve, ToyCar, ToyConveyor, ...)
    /// [default: every type under --data-root].
    #[arg(long, alias = "machine_type", requires = "data_root")]
    pub machine_type: Option<String>,
    /// The speech recogniser's train recordings (with --model asr-transformer): a manifest
    /// (.tsv or .jsonl lines of audio path, transcript and optional duration in seconds) or a
    /// folder in the LibriSpeech layout (*.trans.txt beside FLAC or WAV files). WAV and FLAC
    /// at another rate than 16 kHz are resampled, and the run says how many were.
    #[arg(long, conflicts_with = "data_root")]
    pub speech_train: Option<PathBuf>,
    /// Its validation recordings, listed the same ways [default: every 10th train utterance
    /// held out].
    #[arg(long, requires = "speech_train")]
    pub speech_validation: Option<PathBuf>,
    /// Its test recordings, listed the same ways [default: none; the run is scored on its
    /// validation split].
    #[arg(long, requires = "speech_train")]
    pub speech_test: Option<PathBuf>,
    #[command(flatten)]
    pub features: FeatureArgs,
}

/// How recordings become log-mel features (the challenge baseline's settings by default).
#[derive(Args, Debug, Clone, Copy, Default)]
pub struct FeatureArgs {
    /// Mel bands [default: 64]; the default model takes 64.
    #[arg(long, alias = "n_mels", value_parser = parse_n_mels)]
    pub n_mels: Option<usize>,
    /// The dataset's sample rate in Hz [default: 16000]; files at another rate are an error
    /// unless --resample is given.
    #[arg(long, alias = "sample_rate")]
    pub sample_rate: Option<u32>,
    /// Resample recordings at another rate instead of rejecting them.
    #[arg(long)]
    pub resample: bool,
}

/// The recogniser's presets, as `--asr-size` takes them.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsrSizeArg {
    Tiny,
    Small,
    Medium,
    Large,
}

impl From<AsrSizeArg> for headroom_core::speech::AsrSize {
    fn from(size: AsrSizeArg) -> Self {
        use headroom_core::speech::AsrSize;
        match size {
            AsrSizeArg::Tiny => AsrSize::Tiny,
            AsrSizeArg::Small => AsrSize::Small,
            AsrSizeArg::Medium => AsrSize::Medium,
            AsrSizeArg::Large => AsrSize::Large,
        }
    }
}

/// The classifier's settings (with --model spec-classifier).
#[derive(Args, Debug, Clone, Default)]
pub struct ClassifierArgs {
    /// The classifier's network (with --model spec-classifier): vit, a small vision
    /// transformer over 8 x 8 tiles, or cnn, a plain CNN [default: vit].
    #[arg(long, value_enum)]
    pub classifier: Option<ClassifierArchArg>,
    /// A spec-gan run (its folder or a checkpoint) whose generator makes patches that a
    /// second classifier learns from beside the real ones (with --model spec-classifier):
    /// the results put both classifiers' accuracy side by side.
    #[arg(long)]
    pub generator: Option<PathBuf>,
    /// The share of the second classifier's train patches that are generated, above 0 and
    /// at most 1 (with --generator) [default: 0.5].
    #[arg(long)]
    pub generated_share: Option<f64>,
    /// A contrastive model's negatives (with --model speech-clap): step, every other pair
    /// of the optimizer step whatever the micro-batch (gradient caching); micro-batch, only
    /// the pair's own micro-batch's, as plain accumulation gives [default: step].
    #[arg(long, value_enum)]
    pub negatives: Option<NegativesArg>,
}

/// A contrastive model's negatives, as `--negatives` takes them.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum NegativesArg {
    Step,
    MicroBatch,
}

impl From<NegativesArg> for headroom_core::contrastive::Negatives {
    fn from(negatives: NegativesArg) -> Self {
        use headroom_core::contrastive::Negatives;
        match negatives {
            NegativesArg::Step => Negatives::Step,
            NegativesArg::MicroBatch => Negatives::MicroBatch,
        }
    }
}

impl ClassifierArgs {
    pub fn spec(&self) -> headroom_core::spec::ClassifierSpec {
        headroom_core::spec::ClassifierSpec {
            arch: self.classifier.map(Into::into),
            generator: self.generator.clone(),
            generated_share: self.generated_share,
        }
    }
}

/// The classifier's networks, as `--classifier` takes them.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClassifierArchArg {
    Vit,
    Cnn,
}

impl From<ClassifierArchArg> for headroom_core::classifier::ClassifierArch {
    fn from(arch: ClassifierArchArg) -> Self {
        use headroom_core::classifier::ClassifierArch;
        match arch {
            ClassifierArchArg::Vit => ClassifierArch::Vit,
            ClassifierArchArg::Cnn => ClassifierArch::Cnn,
        }
    }
}

/// The GAN's presets, as `--gan-size` takes them.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum GanSizeArg {
    Small,
    Seed,
    #[value(name = "seed-96")]
    Seed96,
}

impl From<GanSizeArg> for headroom_core::gan::GanSize {
    fn from(size: GanSizeArg) -> Self {
        use headroom_core::gan::GanSize;
        match size {
            GanSizeArg::Small => GanSize::Small,
            GanSizeArg::Seed => GanSize::Seed,
            GanSizeArg::Seed96 => GanSize::Seed96,
        }
    }
}

/// The SaShiMi model's own settings (with --model sashimi).
#[derive(Args, Debug, Clone, Default)]
pub struct SashimiArgs {
    /// The SaShiMi model's size (with --model sashimi): seed is seed 004's d_model 64, 8
    /// layers, pool [4, 4] [default: small].
    #[arg(long, value_enum)]
    pub sashimi_size: Option<SashimiSizeArg>,
    /// Samples in one example of a waveform model (with --model sashimi), a multiple of 16:
    /// the seed's 16000, 128000 or 131072 [default: 16000].
    #[arg(long)]
    pub sample_len: Option<usize>,
    /// How samples become 256 levels (with --model sashimi): mu-law, fine near silence as
    /// SaShiMi's SC09 quantises speech, or linear [default: mu-law].
    #[arg(long, value_enum)]
    pub quantizer: Option<QuantizerArg>,
    /// A folder of WAV and FLAC recordings for a waveform model (with --model sashimi)
    /// instead of the built-in spoken digits: train/, validation/ (or valid/, val/) and test/
    /// subfolders where it has them, else its files in name order with the last twentieth
    /// for test and the one before for validation. At --sample-rate (16000 unless given);
    /// files at another rate are an error unless --resample is given.
    #[arg(long)]
    pub waveforms: Option<PathBuf>,
    /// A discretized mixture of logistics head of N components (with --model sashimi), as
    /// seed 004's SaShiMi trains with 6, instead of the 256-way categorical head.
    #[arg(long, value_name = "N")]
    pub mixtures: Option<usize>,
    /// Take the recordings' two channels interleaved, left then right, as seed 004's loader
    /// takes stereo (with --waveforms; a crop of --sample-len holds half as many frames, and a
    /// mono file's channel is taken twice) instead of mixed down to mono.
    #[arg(long, requires = "waveforms")]
    pub stereo: bool,
}

/// The quantisers, as `--quantizer` takes them.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuantizerArg {
    MuLaw,
    Linear,
}

impl From<QuantizerArg> for headroom_datasets::waveform::Quantizer {
    fn from(quantizer: QuantizerArg) -> Self {
        use headroom_datasets::waveform::Quantizer;
        match quantizer {
            QuantizerArg::MuLaw => Quantizer::MuLaw,
            QuantizerArg::Linear => Quantizer::Linear,
        }
    }
}

impl SashimiArgs {
    pub fn spec(&self) -> headroom_core::spec::SashimiSpec {
        headroom_core::spec::SashimiSpec {
            size: self.sashimi_size.map(Into::into),
            sample_len: self.sample_len,
            quantizer: self.quantizer.map(Into::into),
            waveforms: self.waveforms.clone(),
            mixtures: self.mixtures,
            stereo: self.stereo,
        }
    }
}

/// The SaShiMi model's presets, as `--sashimi-size` takes them.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum SashimiSizeArg {
    Small,
    Seed,
}

impl From<SashimiSizeArg> for headroom_core::waveform::SashimiSize {
    fn from(size: SashimiSizeArg) -> Self {
        use headroom_core::waveform::SashimiSize;
        match size {
            SashimiSizeArg::Small => SashimiSize::Small,
            SashimiSizeArg::Seed => SashimiSize::Seed,
        }
    }
}

fn parse_n_mels(s: &str) -> Result<usize, String> {
    match s.trim() {
        "64" => Ok(64),
        "128" => Ok(128),
        _ => Err(format!(
            "{s:?}: the baseline's frontend takes 64 or 128 mel bands"
        )),
    }
}

impl FeatureArgs {
    pub fn settings(&self) -> headroom_datasets::FeatureSettings {
        let mut s = headroom_datasets::FeatureSettings::default();
        if let Some(n) = self.n_mels {
            s.logmel.n_mels = n;
        }
        if let Some(sr) = self.sample_rate {
            s.logmel.sample_rate = sr;
        }
        s.resample = self.resample;
        s
    }
}

/// How clips are read from disk.
#[derive(Args, Debug, Clone)]
pub struct LoaderArgs {
    /// Micro-batches read ahead of the one training (seed 003's prefetch factor).
    #[arg(long, default_value_t = 2)]
    pub prefetch: usize,
    /// Threads that decode audio, compute features and cut patches.
    #[arg(long, default_value_t = 2)]
    pub loader_workers: usize,
    /// Host memory the loader may hold, e.g. 512MiB: read-ahead, plus the dataset's
    /// spectrograms when they all fit in half of it (else they stream from disk every epoch).
    #[arg(long, default_value = "1GiB")]
    pub host_memory: String,
    /// A folder for the log-mel features of recordings, reused across runs and epochs.
    #[arg(long)]
    pub cache: Option<PathBuf>,
    /// What to do with an unreadable or misnamed file: stop (fail) or leave it out (skip);
    /// skipped files are listed at the end.
    #[arg(long, value_enum, default_value_t = BadFile::Fail)]
    pub on_bad_file: BadFile,
}

impl Default for LoaderArgs {
    fn default() -> Self {
        Self {
            prefetch: 2,
            loader_workers: 2,
            host_memory: "1GiB".into(),
            cache: None,
            on_bad_file: BadFile::Fail,
        }
    }
}

impl LoaderArgs {
    pub fn options(&self) -> anyhow::Result<headroom_core::data::LoaderOptions> {
        use anyhow::Context;
        anyhow::ensure!(self.prefetch >= 1, "--prefetch must be at least 1 (got 0)");
        anyhow::ensure!(
            self.loader_workers >= 1,
            "--loader-workers must be at least 1 (got 0)"
        );
        let host_memory_bytes = headroom_core::size::parse_size(&self.host_memory)
            .with_context(|| format!("--host-memory {:?}", self.host_memory))?;
        Ok(headroom_core::data::LoaderOptions {
            workers: self.loader_workers,
            prefetch: self.prefetch,
            host_memory_bytes,
            on_bad_file: match self.on_bad_file {
                BadFile::Fail => headroom_core::data::OnBadFile::Fail,
                BadFile::Skip => headroom_core::data::OnBadFile::Skip,
            },
            cache: self.cache.clone(),
            files: None,
        })
    }
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadFile {
    Fail,
    Skip,
}

/// How a step is split, when the user fixes it; the planner chooses what is left out.
#[derive(Args, Debug, Clone, Default)]
pub struct SplitArgs {
    /// Spectrograms per micro-batch [default: planned].
    #[arg(long, alias = "batch_size")]
    pub batch_size: Option<usize>,
    /// Patches taken from each spectrogram [default: planned, preferring 4].
    #[arg(long, alias = "n_patches")]
    pub n_patches: Option<usize>,
    /// Micro-batches whose gradients are summed before each optimizer step [default: planned].
    #[arg(
        long,
        alias = "gradient_accumulation_steps",
        alias = "gradient-accumulation"
    )]
    pub gradient_accumulation_steps: Option<usize>,
}

/// The planner's inputs, shared by `train` and `plan`.
#[derive(Args, Debug, Clone)]
pub struct MemoryArgs {
    /// Memory the run may use, e.g. 2GiB or 512MiB; measured usage above it is treated as
    /// out-of-memory [default: the device's free memory x --memory-fraction].
    #[arg(
        long,
        alias = "memory_budget",
        alias = "memory",
        conflicts_with = "simulate_device"
    )]
    pub memory_budget: Option<String>,
    /// Plan for this GPU's memory (rtx3070-laptop, rtx3060, t4, rtx3090, a100-40gb, a100-80gb, h100),
    /// and enforce it as the budget.
    #[arg(long, alias = "simulate_device")]
    pub simulate_device: Option<String>,
    /// Share of the device's free memory a run plans for (seed 003's cap).
    #[arg(long, alias = "memory_fraction", default_value_t = DEFAULT_FRACTION)]
    pub memory_fraction: f64,
    /// Patches per optimizer step, kept whatever the split [default: micro-batch x patches x
    /// accumulation, from the flags given or their defaults].
    #[arg(long, alias = "effective_batch")]
    pub effective_batch: Option<usize>,
    /// Recompute cheap activations in backward instead of keeping them (seed 001's flag)
    /// [default: the planner decides].
    #[arg(
        long,
        alias = "use_gradient_checkpointing",
        conflicts_with = "no_gradient_checkpointing"
    )]
    pub use_gradient_checkpointing: bool,
    /// Never use gradient checkpointing.
    #[arg(long)]
    pub no_gradient_checkpointing: bool,
    /// Compute precision of encoder and decoder: f32, or mixed precision f16/bf16 with f32
    /// parameters (seed 001's AMP) [default: the planner decides, f32 unless half fits a
    /// larger micro-batch at no loss of speed].
    #[arg(long)]
    pub precision: Option<Precision>,
}

impl Default for MemoryArgs {
    fn default() -> Self {
        Self {
            memory_budget: None,
            simulate_device: None,
            memory_fraction: DEFAULT_FRACTION,
            effective_batch: None,
            use_gradient_checkpointing: false,
            no_gradient_checkpointing: false,
            precision: None,
        }
    }
}

impl MemoryArgs {
    pub fn checkpointing(&self) -> Option<bool> {
        match (
            self.use_gradient_checkpointing,
            self.no_gradient_checkpointing,
        ) {
            (true, _) => Some(true),
            (_, true) => Some(false),
            _ => None,
        }
    }
}
