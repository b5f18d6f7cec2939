//! Command-line flags. Kebab-case, with the seed documents' snake_case spellings accepted
//! as aliases so their commands work as written.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use headroom_core::budget_source::DEFAULT_FRACTION;
use headroom_core::choose;
use headroom_core::model::{ModelConfig, VqAutoencoderConfig};
use headroom_core::precision::Precision;
use headroom_core::{BackendKind, Target};
use headroom_datasets::PatchPlacement;

#[derive(Parser, Debug)]
#[command(
    name = "trainer-cli",
    version,
    about = "Headroom: train spectrogram models without running out of memory"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Train a model (default: the VQ patch autoencoder; see `models`); with no flags, on
    /// the built-in synthetic dataset, on the device --backend auto picks.
    Train(Box<TrainArgs>),
    /// Time training steps of a model on random patches (one JSON line with --json).
    Bench(BenchArgs),
    /// Show the plan a run would train with and its memory breakdown, or (--what-if) the plans
    /// for common GPUs and this CPU.
    Plan(Box<PlanArgs>),
    /// List the devices Headroom could train on, their memory, and what --backend auto picks.
    Probe(ProbeArgs),
    /// Write the built-in synthetic dataset as WAV files in the DCASE 2020 Task 2 layout.
    Synth(SynthArgs),
    /// Compute the log-mel spectrogram of one WAV file and save it as [n_mels, frames] .npy.
    Features(FeaturesArgs),
    /// Score a dataset's test clips with a trained model: the challenge's per-clip score files
    /// and AUC/pAUC per machine type and ID (table, CSV and JSON).
    Eval(Box<EvalArgs>),
    /// List the models --model takes, with their parameter counts and inputs.
    Models(ModelsArgs),
    /// The GPU half of `probe`, run in a child process so a driver fault cannot take the
    /// caller down.
    #[command(name = "__probe-gpus", hide = true)]
    ProbeGpusChild(ChildArgs),
}

impl Default for Command {
    fn default() -> Self {
        Command::Train(Box::default())
    }
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// Let Headroom choose (and say why).
    Auto,
    Flex,
    Ndarray,
    Wgpu,
    Cuda,
}

/// A backend, resolved: what auto chose, why, and the probed device behind it.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub kind: BackendKind,
    pub reason: Option<String>,
    pub device: Option<headroom_core::probe::DeviceReport>,
}

impl Resolved {
    pub fn target(&self) -> Target {
        Target {
            backend: self.kind,
            device: self.device.as_ref().and_then(|d| d.target),
        }
    }
}

impl Backend {
    /// The backend to use, and the reason when Headroom chose it: auto probes the machine
    /// and, when a GPU fits, times a few steps of the default model on it and on the CPU.
    pub fn resolve(self) -> Resolved {
        self.resolve_for(VqAutoencoderConfig::NAME)
    }

    /// As [`Backend::resolve`], timing the built-in model `model`, the one the run trains.
    pub fn resolve_for(self, model: &str) -> Resolved {
        match self {
            Backend::Auto => {
                let report = crate::probe::machine(
                    std::time::Duration::from_secs(20),
                    crate::probe::AUTO_SETTINGS,
                );
                let choice = choose::decide(choose::choose(&report), |device| {
                    choose::quick_benchmark(device, model)
                });
                Resolved {
                    kind: choice.backend,
                    reason: Some(choice.reason),
                    device: choice.device,
                }
            }
            named => Resolved {
                kind: named.into(),
                reason: None,
                device: None,
            },
        }
    }
}

impl From<Backend> for BackendKind {
    fn from(b: Backend) -> Self {
        match b {
            // Only reached for a named backend: auto is resolved by probing.
            Backend::Auto => BackendKind::Flex,
            Backend::Flex => BackendKind::Flex,
            Backend::Ndarray => BackendKind::Ndarray,
            Backend::Wgpu => BackendKind::Wgpu,
            Backend::Cuda => BackendKind::Cuda,
        }
    }
}

/// The seeds' `--device`: `cpu`, `cuda`, `wgpu`, or one device as `trainer-cli probe` lists
/// it (`cuda:1`, `wgpu:0`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceArg {
    pub kind: Backend,
    /// The probe's selector, when one device was named.
    pub selector: Option<String>,
}

impl std::str::FromStr for DeviceArg {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let lower = s.trim().to_ascii_lowercase();
        let (kind, index) = match lower.split_once(':') {
            Some((kind, index)) => (kind.to_string(), Some(index.to_string())),
            None => (lower.clone(), None),
        };
        let backend = match kind.as_str() {
            "cpu" if index.is_none() => Backend::Flex,
            "cuda" => Backend::Cuda,
            "wgpu" => Backend::Wgpu,
            _ => {
                return Err(format!(
                    "{s:?} is not a device; write cpu, cuda, wgpu, or one from `trainer-cli probe` such as wgpu:0"
                ));
            }
        };
        if let Some(i) = &index
            && i.parse::<usize>().is_err()
        {
            return Err(format!(
                "{s:?}: the device number must be a whole number, as in {kind}:0"
            ));
        }
        Ok(Self {
            kind: backend,
            selector: index.map(|_| lower),
        })
    }
}

impl DeviceArg {
    /// How the user wrote it, normalised: `cpu`, `cuda`, `wgpu:1`.
    pub fn label(&self) -> String {
        match (&self.selector, self.kind) {
            (Some(s), _) => s.clone(),
            (None, Backend::Flex) => "cpu".to_string(),
            (None, kind) => BackendKind::from(kind).name().to_string(),
        }
    }

    /// The backend `--device` means on its own.
    pub fn backend(&self) -> Backend {
        self.kind
    }

    /// Whether `--backend` agrees with it.
    pub fn accepts(&self, backend: Backend) -> bool {
        match self.kind {
            Backend::Flex => matches!(backend, Backend::Flex | Backend::Ndarray),
            kind => kind == backend,
        }
    }

    /// The named device, from the probe; an error lists the devices there are.
    pub fn resolve(&self) -> anyhow::Result<Resolved> {
        let Some(selector) = &self.selector else {
            return Ok(self.kind.resolve());
        };
        let report = crate::probe::machine(
            std::time::Duration::from_secs(20),
            crate::probe::AUTO_SETTINGS,
        );
        let listed = || {
            report
                .devices
                .iter()
                .filter(|d| d.usable && d.target.is_some())
                .map(|d| format!("{} ({})", d.selector, d.name))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let Some(device) = report.devices.iter().find(|d| &d.selector == selector) else {
            anyhow::bail!(
                "there is no device {selector} on this machine; devices Headroom can train on: cpu, {}",
                listed()
            );
        };
        if !device.usable || device.target.is_none() {
            anyhow::bail!(
                "{selector} ({}) cannot be trained on in this build: {}; usable devices: cpu, {}",
                device.name,
                device.notes.join("; "),
                listed()
            );
        }
        Ok(Resolved {
            kind: device.backend,
            reason: None,
            device: Some(device.clone()),
        })
    }
}

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
    /// Backend to train on [default: auto] (ndarray is far slower than flex; see docs/BENCHMARKS.md).
    #[arg(long, value_enum)]
    pub backend: Option<Backend>,
    /// The model to train (`trainer-cli models` lists them) [default: vq-patch-ae]; a
    /// resumed run keeps its own.
    #[arg(long)]
    pub model: Option<String>,
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
    pub fn options(&self) -> anyhow::Result<headroom_core::dataset::LoaderOptions> {
        use anyhow::Context;
        anyhow::ensure!(self.prefetch >= 1, "--prefetch must be at least 1 (got 0)");
        anyhow::ensure!(
            self.loader_workers >= 1,
            "--loader-workers must be at least 1 (got 0)"
        );
        let host_memory_bytes = headroom_core::memory::parse_size(&self.host_memory)
            .with_context(|| format!("--host-memory {:?}", self.host_memory))?;
        Ok(headroom_core::dataset::LoaderOptions {
            workers: self.loader_workers,
            prefetch: self.prefetch,
            host_memory_bytes,
            on_bad_file: match self.on_bad_file {
                BadFile::Fail => headroom_core::dataset::OnBadFile::Fail,
                BadFile::Skip => headroom_core::dataset::OnBadFile::Skip,
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

#[derive(Args, Debug)]
pub struct SynthArgs {
    /// The dataset's root folder; clips go to OUT/<machine-type>/{train,test}/.
    #[arg(long)]
    pub out: PathBuf,
    /// Folder name of the machine type.
    #[arg(long, default_value = "synthetic")]
    pub machine_type: String,
    /// Machine IDs [default: 4, as the built-in dataset].
    #[arg(long)]
    pub machine_ids: Option<u32>,
    /// Train clips per machine ID [default: 40].
    #[arg(long)]
    pub train_clips_per_id: Option<usize>,
    /// Normal and (as many) anomalous test clips per machine ID [default: 12].
    #[arg(long)]
    pub test_clips_per_id: Option<usize>,
    /// Seconds per clip [default: 10].
    #[arg(long)]
    pub seconds: Option<f32>,
    #[arg(long)]
    pub seed: Option<u64>,
}

#[derive(Args, Debug)]
pub struct FeaturesArgs {
    /// The recording (WAV: PCM or float, mono or stereo).
    pub input: PathBuf,
    /// Where to write the [n_mels, frames] float32 .npy file.
    #[arg(long)]
    pub out: PathBuf,
    #[command(flatten)]
    pub features: FeatureArgs,
}

#[derive(Args, Debug)]
pub struct EvalArgs {
    /// A run directory (its newest checkpoint) or one checkpoint directory.
    #[arg(long)]
    pub checkpoint: PathBuf,
    /// The model the checkpoint must hold [default: whichever it holds].
    #[arg(long)]
    pub model: Option<String>,
    /// Score this dataset's test clips [default: the run's own dataset]. Features are
    /// computed with the run's settings.
    #[arg(long, alias = "data_root")]
    pub data_root: Option<PathBuf>,
    /// Only this machine type [default: the run's, or every type under --data-root].
    #[arg(long, alias = "machine_type")]
    pub machine_type: Option<String>,
    /// Where the score files and results go.
    #[arg(long)]
    pub out: PathBuf,
    /// Backend to score on [default: the run's].
    #[arg(long, value_enum)]
    pub backend: Option<Backend>,
    #[command(flatten)]
    pub loader: LoaderArgs,
    /// Print the results as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
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
    /// Plan for this GPU's memory (rtx3070-laptop, t4, rtx3090, a100-40gb, a100-80gb, h100),
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

#[derive(Args, Debug, Clone)]
pub struct PlanArgs {
    /// Backend to plan for [default: auto].
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: Backend,
    /// The model to plan for (`trainer-cli models`) [default: vq-patch-ae].
    #[arg(long)]
    pub model: Option<String>,
    #[command(flatten)]
    pub memory: MemoryArgs,
    #[command(flatten)]
    pub split: SplitArgs,
    /// Synthetic dataset: clips per machine ID in the train split.
    #[arg(long, conflicts_with = "data_root")]
    pub train_clips_per_id: Option<usize>,
    /// Synthetic dataset: number of machine IDs.
    #[arg(long, conflicts_with = "data_root")]
    pub machine_ids: Option<u32>,
    /// The dataset the run would read: `plan` opens it as `train` does, so that the memory
    /// it holds and its read-ahead count as they will in the run.
    #[command(flatten)]
    pub data: DataArgs,
    #[command(flatten)]
    pub loader: LoaderArgs,
    /// The plans for common GPUs and this CPU, in one table; with --memory-budget, also the
    /// plan for a GPU that gives the run that much.
    #[arg(long, conflicts_with = "simulate_device")]
    pub what_if: bool,
    /// Plan for burn's own layers and quantizer instead of Headroom's forms and kernels
    /// (calibrating with them), to compare what each fits.
    #[arg(long)]
    pub plain_layers: bool,
    /// Skip the dry-run step that checks the plan.
    #[arg(long)]
    pub no_dry_run: bool,
    /// Measure real steps at these micro-batch sizes and compare with the memory model's
    /// predictions: spectrograms x patches, `c` for checkpointing, e.g. "1x4 8x4 8x4c 64x16".
    #[arg(long, conflicts_with = "what_if")]
    pub verify: Option<String>,
    #[arg(long)]
    pub threads: Option<usize>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug, Clone, Default)]
pub struct ModelsArgs {
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// Backend to time (auto probes the machine and says why it chose).
    #[arg(long, value_enum, default_value = "flex")]
    pub backend: Backend,
    /// The model to time (`trainer-cli models`) [default: vq-patch-ae].
    #[arg(long)]
    pub model: Option<String>,
    /// burn's balanced gradient checkpointing.
    #[arg(long, alias = "use_gradient_checkpointing")]
    pub use_gradient_checkpointing: bool,
    /// Compute precision: f32, or mixed precision f16/bf16.
    #[arg(long, default_value = "f32")]
    pub precision: Precision,
    /// Spectrograms per micro-batch (the reference script's --batch).
    #[arg(long, alias = "batch_size", alias = "batch", default_value_t = 16)]
    pub batch_size: usize,
    /// Patches per spectrogram (the reference script's --patches).
    #[arg(long, alias = "n_patches", alias = "patches", default_value_t = 1)]
    pub n_patches: usize,
    #[arg(
        long,
        alias = "gradient_accumulation_steps",
        alias = "accum",
        default_value_t = 1
    )]
    pub gradient_accumulation_steps: usize,
    /// Timed optimizer steps.
    #[arg(long, default_value_t = 20)]
    pub steps: usize,
    /// Untimed steps first.
    #[arg(long, default_value_t = 3)]
    pub warmup: usize,
    #[arg(long)]
    pub threads: Option<usize>,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Print one JSON line.
    #[arg(long)]
    pub json: bool,
    /// burn's own layers and quantizer instead of Headroom's forms and kernels (the CPU
    /// kernels on flex, the output-only layers and nearest-code kernel on wgpu), to compare
    /// the two.
    #[arg(long)]
    pub plain_layers: bool,
    /// Time each op of a step on its own (forward, backward for input and weight, quantizer,
    /// optimizer) instead of whole steps; --steps sets the repetitions per op.
    #[arg(long)]
    pub profile: bool,
    /// The memory of one step after each stage (each layer, the quantizer, loss, backward,
    /// optimizer): bytes in use, and reserved on a GPU, instead of timing steps.
    #[arg(long, conflicts_with = "profile")]
    pub memory_trace: bool,
}

#[derive(Args, Debug, Clone)]
pub struct ProbeArgs {
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Where no API reports a GPU's free memory, allocate up to this much in 128 MiB steps to
    /// find out (freed at once); the probe never takes more.
    #[arg(long, default_value = "1GiB")]
    pub allocation_cap: String,
    /// Never allocate GPU memory to measure it.
    #[arg(long)]
    pub no_allocation_probe: bool,
    /// Seconds the GPU drivers get to answer.
    #[arg(long, default_value_t = 20.0)]
    pub timeout: f64,
}

/// The hidden child probe's settings, passed by the parent.
#[derive(Args, Debug, Clone)]
pub struct ChildArgs {
    #[arg(long)]
    pub allocation_cap: Option<u64>,
    #[arg(long)]
    pub software_adapters: bool,
}
