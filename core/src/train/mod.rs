//! The training loop: micro-batches x accumulation, clipping, AdamW with cosine decay,
//! validation without autodiff, checkpoints, periodic memory cleanup. It reports through
//! [`EventSink`] and prints nothing.
//!
//! A run of one kind of training ([`RunTask`]) is a [`TaskTrainer`]: made
//! ([`trainer`]), planned before its networks exist ([`planning`]), stepped ([`steps`]),
//! recovered from an out-of-memory step ([`recovery`]), evaluated ([`evaluate`]) and saved
//! ([`saving`]), with a moving average of its weights where asked ([`average`]); front-ends hold the task-erased [`crate::registry::Trainer`]. Every model
//! configuration is a task ([`patches`]).

pub mod average;
mod control;
pub mod drawn;
mod evaluate;
mod patches;
mod planning;
mod recovery;
pub mod run_task;
mod saving;
pub mod schedule;
mod steps;
mod timing;
mod trainer;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use burn::optim::ModuleOptimizer;
use burn::tensor::Device;
use headroom_datasets::{FileError, PatchError};

pub use crate::config::{ConfigError, DatasetSource, ResumeChanges, RunLength, TrainConfig};
pub use average::WeightAverage;
pub use evaluate::evaluate_saved;
pub use patches::PatchData;
pub use planning::plan_task;
pub use run_task::{BuiltIn, EvalBatches, RunTask, TaskData};

use crate::backend::BackendError;
use crate::budget::Budget;
use crate::checkpoint::CheckpointError;
use crate::data::{DataError, LoaderOptions, Normalization};
use crate::eval::{self, ClipScore};
use crate::events::{EvaluationReport, Event, Results};
use crate::memory::MemoryMeter;
use crate::model::{ModelError, SpectrogramModel};
use crate::plan::{Calibration, Plan, Planning, PlanningError, ReadAhead};
use crate::readback::ReadbackError;
use crate::setting::{Described, PlainWords, Setting, Wording};
use crate::step;

/// Out-of-memory recoveries in a row before a run stops: each re-plans the micro-batch from
/// what was measured, so three that all fail mean the budget is far below what the plan
/// measured.
pub const MAX_RECOVERIES_IN_A_ROW: u32 = 3;

#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error("{}", self.describe(&PlainWords))]
    Patch(#[from] PatchError),
    #[error(transparent)]
    Data(#[from] DataError),
    #[error(transparent)]
    File(#[from] FileError),
    #[error("{}", self.describe(&PlainWords))]
    OutDirInUse { dir: PathBuf, step: u64 },
    #[error("the train split is empty after holding out validation clips; use a larger dataset")]
    EmptyTrainSplit,
    /// What a kind of training found wrong in its own terms (a transcript with characters
    /// its vocabulary lacks).
    #[error("{0}")]
    Task(String),
    /// A micro-batch asked for before the loop started the train stream: a bug.
    #[error("the train stream was read before it was started (a bug in Headroom)")]
    NotStreaming,
    #[error(
        "a web page cannot read a checkpoint back from WebGPU yet (burn's records read \
         synchronously, which a browser forbids); train with backend=cpu to download one"
    )]
    CheckpointOnWebGpu,
    #[error("{}", self.describe(&PlainWords))]
    NonFinite { step: u64, loss: f64 },
    #[error(transparent)]
    Planning(#[from] PlanningError),
    /// Not even one of the run's longest examples fits the budget: it, by name.
    #[error("{}", self.describe(&PlainWords))]
    LongestDoesNotFit {
        example: String,
        error: PlanningError,
    },
    /// Not even one crop of the asked length fits the budget: the length, and the longest
    /// that would.
    #[error("{}", self.describe(&PlainWords))]
    CropDoesNotFit {
        sample_len: usize,
        longest: Option<usize>,
        error: PlanningError,
    },
    #[error(transparent)]
    Step(#[from] step::StepError),
    #[error(transparent)]
    Readback(#[from] ReadbackError),
    #[error(transparent)]
    Score(#[from] eval::ScoreError),
    #[error("{}", self.describe(&PlainWords))]
    OutOfMemory {
        step: u64,
        recoveries: u32,
        micro_batch: usize,
        n_patches: usize,
        detail: String,
        /// The step a checkpoint saved before the run stopped, when it has somewhere to go.
        saved: Option<u64>,
    },
}

impl Described for TrainError {
    fn describe(&self, words: &dyn Wording) -> String {
        let say = |setting| words.setting(setting);
        match self {
            TrainError::Config(e) => e.describe(words),
            TrainError::Checkpoint(e) => e.describe(words),
            TrainError::Model(e) => e.describe(words),
            TrainError::Patch(e) => format!(
                "the dataset does not fit the patch settings: {}",
                e.describe(words)
            ),
            TrainError::Data(e) => e.describe(words),
            TrainError::File(e) => e.describe(words),
            TrainError::Planning(e) => e.describe(words),
            TrainError::LongestDoesNotFit { example, error } => format!(
                "{example} is longer than any plan can hold: {}; or leave it out of its \
                 listing (or cut it)",
                error.describe(words)
            ),
            TrainError::CropDoesNotFit {
                sample_len,
                longest,
                error,
            } => format!(
                "a crop of {sample_len} samples does not fit the budget at one crop a \
                 micro-batch with every lever: {}; {}",
                error.describe(words),
                match longest {
                    Some(len) => format!(
                        "a crop of {len} samples fits this budget, planned and dry-run at that \
                         length ({})",
                        words.given(Setting::SampleLen, &len.to_string())
                    ),
                    None => "no shorter crop tried fits it either".into(),
                }
            ),
            TrainError::OutDirInUse { dir, step } => format!(
                "{} already holds a run (checkpoint at step {step}); continue it ({}), or \
                 choose another {}",
                dir.display(),
                words.given(Setting::Resume, &dir.display().to_string()),
                say(Setting::OutDir)
            ),
            TrainError::NonFinite { step, loss } => format!(
                "the loss became {loss} at step {step}; lower {} or check the data for NaN/inf \
                 values",
                say(Setting::LearningRate)
            ),
            TrainError::OutOfMemory {
                step,
                recoveries,
                micro_batch,
                n_patches,
                detail,
                saved,
            } => {
                let saved = match saved {
                    Some(saved) => format!(
                        "Step {saved} is saved; continue it with {}. ",
                        say(Setting::Resume)
                    ),
                    None => String::new(),
                };
                format!(
                    "out of memory at step {step} after {recoveries} recoveries in a row, at \
                     micro-batch {micro_batch} x {n_patches} patches: {detail}. {saved}Raise \
                     {}, free device memory, or lower {}",
                    say(Setting::MemoryBudget),
                    say(Setting::EffectiveBatch)
                )
            }
            other => other.to_string(),
        }
    }
}

/// Run-time options that are not part of the run's identity.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Where checkpoints go; `None` writes none.
    pub out_dir: Option<PathBuf>,
    /// Stop (with a checkpoint) once this many steps are done in total.
    pub stop_after: Option<u64>,
    /// Set from another thread to stop at the next step boundary, with a checkpoint.
    pub stop: Option<Arc<AtomicBool>>,
    /// While set from another thread, the run waits at the next step boundary (a GUI's
    /// pause); a stop still ends it.
    pub pause: Option<Arc<AtomicBool>>,
    /// Plan micro-batch, patches, accumulation and checkpointing before training (the
    /// config's values for those are replaced, its effective batch is not).
    pub planning: Option<Planning>,
    /// Measured memory above this is out-of-memory: the run recovers by shrinking its
    /// micro-batch. Shared, so it can change while the run goes.
    pub budget: Option<Budget>,
    /// How clips are read: workers, read-ahead, host memory, bad files, feature cache.
    pub loader: LoaderOptions,
    /// Where a plan by length keeps the timings it packs steps by, for the next run of this
    /// build on this device and model: a fresh run packs by what the first one measured, so
    /// that two runs of one seed compute the same sums (`plan::Planning::length_timing`).
    /// `None`: each run packs by its own calibration.
    #[cfg(not(target_arch = "wasm32"))]
    pub timings: Option<crate::plan::cache::CalibrationCache>,
}

/// What a run is measured by on held-out data ([`RunTask::evaluate`]).
#[derive(Debug, Clone)]
pub enum Evaluation {
    /// The patch task's: each test clip's anomaly score, and AUC/pAUC per machine type and
    /// ID.
    Anomaly {
        report: EvaluationReport,
        scores: Vec<ClipScore>,
    },
    /// Any other task's figures.
    Results(Results),
}

impl Evaluation {
    /// The event that reports it.
    pub fn event(&self) -> Event {
        match self {
            Evaluation::Anomaly { report, .. } => Event::Evaluation(report.clone()),
            Evaluation::Results(results) => Event::Results(results.clone()),
        }
    }

    /// `results.csv`, as `trainer-cli eval --out` writes it and the page offers it.
    pub fn csv(&self) -> String {
        match self {
            Evaluation::Anomaly { report, .. } => eval::results_csv(report),
            Evaluation::Results(results) => results.csv(),
        }
    }

    /// The anomaly report, when the run scored anomalies.
    pub fn anomaly(&self) -> Option<&EvaluationReport> {
        match self {
            Evaluation::Anomaly { report, .. } => Some(report),
            Evaluation::Results(_) => None,
        }
    }
}

/// Whether a periodic action with period `n` (0: never) falls on `step`.
fn every(step: u64, n: u64) -> bool {
    n > 0 && step.is_multiple_of(n)
}

/// The read-ahead as the budget sees it: host memory counts on the CPU backends only.
fn counted(config: &TrainConfig, read_ahead: ReadAhead) -> ReadAhead {
    if config.backend.is_host() {
        read_ahead
    } else {
        ReadAhead::NONE
    }
}

/// Where a run starts from: fresh, or a checkpoint.
struct Start<N> {
    device: Device,
    networks: N,
    optimizer: ModuleOptimizer,
    /// The weights' moving average, where the run keeps one.
    average: Option<WeightAverage>,
    step: u64,
    /// A resumed run's saved normalization; a fresh run fits its own.
    normalization: Option<Normalization>,
}

/// A run of task `T`: what a library user with a kind of training of their own trains with
/// (front-ends hold the task-erased [`crate::registry::Trainer`]).
pub struct TaskTrainer<T: RunTask> {
    config: TrainConfig,
    /// The task's configuration, as `config.model` records it.
    task: T,
    options: RunOptions,
    device: Device,
    networks: T::Networks,
    optimizer: ModuleOptimizer,
    /// The weights' moving average (`--ema`), which validation, evaluation and pictures use.
    average: Option<WeightAverage>,
    step: u64,
    total_steps: u64,
    /// The splits; the train split streamed as the plan splits each step.
    data: T::Data,
    meter: MemoryMeter,
    plan: Option<Plan>,
    /// What the plan measured; an out-of-memory step re-plans from it.
    calibration: Option<Calibration>,
    /// Planning events, emitted when the run starts.
    pending: Vec<Event>,
}

/// A run of model `M`: the patch task of its configuration.
pub type ModelTrainer<M> = TaskTrainer<<M as SpectrogramModel>::Config>;
