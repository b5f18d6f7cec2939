//! The flags of the other commands: plan, bench, probe, models, synth, features, eval.

use std::path::PathBuf;

use clap::Args;
use headroom_core::precision::Precision;

use super::device::Backend;
use super::train::{DataArgs, FeatureArgs, LoaderArgs, MemoryArgs, SplitArgs};

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

#[derive(Args, Debug, Clone)]
pub struct PlanArgs {
    /// Backend to plan for [default: auto].
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: Backend,
    /// The model to plan for (`trainer-cli models`) [default: vq-patch-ae].
    #[arg(long)]
    pub model: Option<String>,
    /// The speech recogniser's size (with --model asr-transformer) [default: tiny].
    #[arg(long, value_enum)]
    pub asr_size: Option<super::train::AsrSizeArg>,
    /// The GAN's size (with --model spec-gan): seed for seed 000's 128 x 1,292
    /// spectrograms, seed-96 for its 96-band fallback [default: small].
    #[arg(long, value_enum)]
    pub gan_size: Option<super::train::GanSizeArg>,
    #[command(flatten)]
    pub classifier: super::train::ClassifierArgs,
    #[command(flatten)]
    pub sashimi: super::train::SashimiArgs,
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
    /// With --what-if: measure the calibrations again instead of reading the ones an
    /// earlier what-if of this build kept for this machine and model.
    #[arg(long, requires = "what_if")]
    pub recalibrate: bool,
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

#[derive(Args, Debug, Clone)]
pub struct GenerateArgs {
    /// A sashimi run's checkpoint, or its run directory (its latest checkpoint).
    #[arg(long)]
    pub checkpoint: std::path::PathBuf,
    /// Folder for the WAV files (sample-00.wav, ...); made if missing.
    #[arg(long)]
    pub out: std::path::PathBuf,
    /// Clips to make, drawn side by side.
    #[arg(long, default_value_t = 4)]
    pub clips: usize,
    /// Each clip's length in seconds, at the run's sample rate.
    #[arg(long, default_value_t = 1.0)]
    pub seconds: f64,
    /// Seed of the draws: the same checkpoint and seed make the same clips.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

#[derive(Args, Debug, Clone, Default)]
pub struct ModelsArgs {
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// Backend to time (auto probes the machine and says why it chose) [default: flex;
    /// auto with --report].
    #[arg(long, value_enum)]
    pub backend: Option<Backend>,
    /// The model to time (`trainer-cli models`) [default: vq-patch-ae].
    #[arg(long)]
    pub model: Option<String>,
    /// The speech recogniser's size (with --model asr-transformer) [default: tiny].
    #[arg(long, value_enum)]
    pub asr_size: Option<super::train::AsrSizeArg>,
    /// The classifier's network (with --model spec-classifier): vit or cnn [default: vit].
    #[arg(long, value_enum)]
    pub classifier: Option<super::train::ClassifierArchArg>,
    #[command(flatten)]
    pub sashimi: super::train::SashimiArgs,
    /// Each utterance's log-mel frames (with --model asr-transformer, whose examples vary
    /// in length) [default: the longest the model plans for].
    #[arg(long)]
    pub frames: Option<usize>,
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
    /// Timed optimizer steps [default: 20; 5 a model with --report].
    #[arg(long)]
    pub steps: Option<usize>,
    /// Untimed steps first [default: 3; 2 with --report].
    #[arg(long)]
    pub warmup: Option<usize>,
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
    /// Check Headroom on this machine and write what it found to FILE (JSON) with a table:
    /// each built-in model's step at its default batch, and the planner's predictions
    /// against real runs over a grid of budgets, beside the device's own count of its
    /// memory where the platform gives one (NVML). Attach the file to a bug report.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["profile", "memory_trace", "json", "model"])]
    pub report: Option<std::path::PathBuf>,
    /// With --report: the models timed, comma-separated [default: every built-in model].
    #[arg(long, value_delimiter = ',', requires = "report")]
    pub report_models: Vec<String>,
    /// With --report: the planner's grid as BUDGET:EFFECTIVE_BATCH cells, comma-separated
    /// [default: 128MiB:256,256MiB:512,512MiB:1024 on a CPU; 256MiB:512,1GiB:1024,4GiB:4096
    /// on a GPU, those that fit its free memory; 64MiB:64,128MiB:256 on a software adapter].
    #[arg(long, value_delimiter = ',', requires = "report")]
    pub report_cells: Vec<String>,
    /// With --report: the model the planner's runs train [default: vq-patch-ae].
    #[arg(long, requires = "report")]
    pub report_plan_model: Option<String>,
    /// With --report: optimizer steps each of the planner's runs trains.
    #[arg(long, default_value_t = 3, requires = "report")]
    pub report_run_steps: u64,
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
