//! The training loop: micro-batches x accumulation, clipping, AdamW with cosine decay,
//! validation without autodiff, checkpoints, periodic memory cleanup. It reports through
//! [`EventSink`] and prints nothing.

mod control;
pub mod schedule;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use web_time::Instant;

use burn::optim::ModuleOptimizer;
use burn::tensor::Device;
use headroom_datasets::{FileError, PatchError, PatchShape};

pub use crate::config::{ConfigError, DatasetSource, ResumeChanges, RunLength, TrainConfig};

use crate::backend::{BackendError, Target};
use crate::checkpoint::{self, CheckpointError, CheckpointFiles, CheckpointState, RngState};
use crate::data::{Normalization, TrainStream, clip_patches};
use crate::dataset::{self, DataError, LoaderOptions, RunData};
use crate::eval::{self, ClipScore, ScoreSettings};
use crate::events::{
    DatasetReport, EvaluationReport, Event, EventSink, RecoveryReport, RunInfo, StepReport,
};
use crate::memory::{Budget, MemoryMeter};
use crate::model::{
    ModelConfig, ModelError, ModelSpec, Patches, SpectrogramModel, WithModel, with_model,
};
use crate::plan::{
    Calibration, Plan, PlanError, Planning, PlanningError, Prepared, ReadAhead, RunShare,
};
use crate::precision::Precision;
#[cfg(not(target_arch = "wasm32"))]
use crate::readback::block_on;
use crate::readback::{self, LocalFuture, ReadbackError};
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
    #[error("the dataset does not fit the patch settings: {0}")]
    Patch(#[from] PatchError),
    #[error(transparent)]
    Data(#[from] DataError),
    #[error(transparent)]
    File(#[from] FileError),
    #[error(
        "{} already holds a run (checkpoint at step {step}); continue it with --resume {0}, \
         or choose another --out",
        dir.display()
    )]
    OutDirInUse { dir: PathBuf, step: u64 },
    #[error("the train split is empty after holding out validation clips; use a larger dataset")]
    EmptyTrainSplit,
    #[error(
        "a web page cannot read a checkpoint back from WebGPU yet (burn's records read \
         synchronously, which a browser forbids); train with backend=cpu to download one"
    )]
    CheckpointOnWebGpu,
    #[error(
        "the loss became {loss} at step {step}; lower --lr or check the data for NaN/inf values"
    )]
    NonFinite { step: u64, loss: f64 },
    #[error(transparent)]
    Planning(#[from] PlanningError),
    #[error(transparent)]
    Step(#[from] step::StepError),
    #[error(transparent)]
    Readback(#[from] ReadbackError),
    #[error(transparent)]
    Score(#[from] eval::ScoreError),
    #[error(
        "out of memory at step {step} after {recoveries} recoveries in a row, at micro-batch \
         {micro_batch} x {n_patches} patches: {detail}. {saved}Raise --memory-budget, \
         free device memory, or lower the effective batch"
    )]
    OutOfMemory {
        step: u64,
        recoveries: u32,
        micro_batch: usize,
        n_patches: usize,
        detail: String,
        saved: String,
    },
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
}

/// Scores of the test split: per clip, and AUC/pAUC per machine type and ID.
#[derive(Debug, Clone)]
pub struct Evaluation {
    pub report: EvaluationReport,
    pub scores: Vec<ClipScore>,
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

/// Whether a periodic action with period `n` (0: never) falls on `step`.
fn every(step: u64, n: u64) -> bool {
    n > 0 && step.is_multiple_of(n)
}

/// Where a run starts from: fresh, or a checkpoint.
struct Start<M> {
    device: Device,
    model: M,
    optimizer: ModuleOptimizer,
    step: u64,
    normalization: Normalization,
}

/// A run of model `M`: what a library user with a network of their own trains with
/// (front-ends hold the model-erased [`Trainer`]).
pub struct ModelTrainer<M: SpectrogramModel> {
    config: TrainConfig,
    /// The model's configuration, as `config.model` records it.
    model_config: M::Config,
    options: RunOptions,
    device: Device,
    model: M,
    optimizer: ModuleOptimizer,
    step: u64,
    total_steps: u64,
    normalization: Normalization,
    /// The train split, read ahead; `data` also holds validation and test, scored whole.
    stream: TrainStream,
    data: RunData,
    meter: MemoryMeter,
    plan: Option<Plan>,
    /// What the plan measured; an out-of-memory step re-plans from it.
    calibration: Option<Calibration>,
    /// Planning events, emitted when the run starts.
    pending: Vec<Event>,
}

/// What planning left for the run: the plan, the measurements it rests on (recovery
/// re-plans from them), and its events, emitted when the run starts.
#[derive(Default)]
struct Planned {
    prepared: Option<Prepared>,
    events: Vec<Event>,
}

/// Plans the run when asked, before its model exists, so that the dry-run measures the
/// step alone; the config takes the plan's micro-batch, patches, accumulation and
/// checkpointing. `resident_store`: whether the spectrograms stay in host memory.
async fn plan_run<C: ModelConfig>(
    config: &mut TrainConfig,
    model: &C,
    options: &RunOptions,
    resident_store: bool,
) -> Result<Planned, TrainError> {
    let Some(planning) = &options.planning else {
        return Ok(Planned::default());
    };
    let mut events = Vec::new();
    let prepared = prepare_run(
        config,
        model,
        planning,
        &options.loader,
        resident_store,
        &mut events,
    )
    .await?;
    Ok(Planned {
        prepared: Some(prepared),
        events,
    })
}

/// Plans with what the run will hold beside its steps, and gives `config` the plan's split.
async fn prepare_run<C: ModelConfig>(
    config: &mut TrainConfig,
    model: &C,
    planning: &Planning,
    loader: &LoaderOptions,
    resident_store: bool,
    sink: &mut dyn EventSink,
) -> Result<Prepared, TrainError> {
    let plain = config.target().device()?;
    let share = RunShare {
        resident_bytes: MemoryMeter::new(config.backend, &plain)
            .sample()
            .allocated_bytes,
        read_ahead: read_ahead_counted(config, model.input(), loader, resident_store),
    };
    let prepared = crate::plan::prepare(config.target(), model, planning, share, sink).await?;
    let plan = &prepared.plan;
    config.n_patches = plan.n_patches;
    config.step_clips = Some(plan.effective_batch / plan.n_patches);
    config.set_micro_batch(plan.micro_batch);
    config.checkpointing = plan.checkpointing;
    config.precision = plan.precision;
    Ok(prepared)
}

/// The plan a fresh run of `config` would train with, made as [`Trainer::new`] makes it (the
/// dataset opened and checked first, so its memory and the read-ahead count), without
/// training: what `trainer-cli plan` shows. Reports the `dry_run` and `plan` events.
#[cfg(not(target_arch = "wasm32"))]
pub fn plan_only(
    config: TrainConfig,
    planning: &Planning,
    loader: &LoaderOptions,
    sink: &mut dyn EventSink,
) -> Result<Prepared, TrainError> {
    block_on(plan_only_async(config, planning, loader, sink))
}

/// [`plan_only`], awaited.
pub async fn plan_only_async(
    config: TrainConfig,
    planning: &Planning,
    loader: &LoaderOptions,
    sink: &mut dyn EventSink,
) -> Result<Prepared, TrainError> {
    struct PlanOnly<'a> {
        config: TrainConfig,
        planning: &'a Planning,
        loader: &'a LoaderOptions,
        sink: &'a mut dyn EventSink,
    }
    impl<'a> WithModel for PlanOnly<'a> {
        type Output = LocalFuture<'a, Result<Prepared, TrainError>>;
        fn run<C: ModelConfig>(self, model: C) -> Self::Output {
            Box::pin(async move {
                let PlanOnly {
                    mut config,
                    planning,
                    loader,
                    sink,
                } = self;
                config.validate()?;
                let mut data = dataset::open(&config, loader)?;
                data.check(config.patch_spec(model.input()))?;
                let model = model.for_machines(&data.machines)?;
                let resident = data.store.is_resident();
                prepare_run(&mut config, &model, planning, loader, resident, sink).await
            })
        }
    }
    let spec = config.model.clone();
    with_model(
        &spec,
        PlanOnly {
            config,
            planning,
            loader,
            sink,
        },
    )?
    .await
}

/// The read-ahead as the budget sees it: host memory counts on the CPU backends only.
fn read_ahead_counted(
    config: &TrainConfig,
    shape: PatchShape,
    loader: &LoaderOptions,
    resident: bool,
) -> ReadAhead {
    if config.backend.is_host() {
        read_ahead(loader, resident, config, shape)
    } else {
        ReadAhead::NONE
    }
}

/// Planning for a resumed run: it keeps its effective batch and patches per spectrogram
/// (they decide what each step reads), and first tries its saved split, unless the user
/// named another; only when that does not fit is the split planned afresh.
async fn replan_resumed<C: ModelConfig>(
    config: &mut TrainConfig,
    model: &C,
    options: &RunOptions,
    resident_store: bool,
) -> Result<Planned, TrainError> {
    let Some(asked) = options.planning else {
        return Ok(Planned::default());
    };
    let mut keep = asked;
    keep.effective_batch = config.effective_batch();
    keep.fixed.n_patches = Some(config.n_patches);
    let mut saved = keep;
    saved.fixed.micro_batch = asked.fixed.micro_batch.or(Some(config.micro_batch));
    saved.fixed.checkpointing = asked.fixed.checkpointing.or(Some(config.checkpointing));
    saved.fixed.precision = asked.fixed.precision.or(Some(config.precision));
    let with = |planning| RunOptions {
        planning: Some(planning),
        loader: options.loader.clone(),
        ..RunOptions::default()
    };
    match plan_run(config, model, &with(saved), resident_store).await {
        Err(TrainError::Planning(PlanningError::Plan(PlanError::DoesNotFit { .. })))
            if saved != keep =>
        {
            plan_run(config, model, &with(keep), resident_store).await
        }
        other => other,
    }
}

/// The micro-batch after an out-of-memory step when nothing better is known (the device
/// failed without a reading): half, rounded up.
fn halve(micro_batch: usize) -> Option<usize> {
    (micro_batch > 1).then(|| micro_batch.div_ceil(2))
}

/// The largest micro-batch below `failed` whose peak in this run fits `budget`: the peak the
/// failed step reached here, moved by what the measured steps say a micro-batch of the
/// other size costs more or less (step, read-ahead, and the summed gradients a step split
/// into several micro-batches holds), with the planner's margin on the step. `None` when
/// not even one spectrogram fits.
fn refit_micro_batch(
    memory: &crate::plan::MemoryModel,
    read_ahead: ReadAhead,
    config: &TrainConfig,
    failed: usize,
    failed_peak: u64,
    budget: u64,
) -> Option<usize> {
    let n = config.n_patches;
    let cost = memory.cost(config.precision, config.checkpointing)?;
    let clips = config.clips_per_step();
    // A step that was one micro-batch and now accumulates holds one more set of gradients,
    // as the planner's predictions count it.
    let at = |mb: usize| {
        cost.at(mb * n)
            + read_ahead.bytes(mb) as f64
            + memory.summed_gradient_bytes(clips.div_ceil(mb))
    };
    let base = failed_peak as f64 - at(failed);
    (1..failed).rev().find(|&mb| {
        let step = cost.at(mb * n);
        base + at(mb) + memory.margin * step <= budget as f64
    })
}

impl<M: SpectrogramModel> ModelTrainer<M> {
    /// A fresh run of `config`, whose `model` names `M` (`ModelSpec::of`).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn new(config: TrainConfig, options: RunOptions) -> Result<Self, TrainError> {
        block_on(Self::new_async(config, options))
    }

    /// [`ModelTrainer::new`], awaited.
    pub async fn new_async(config: TrainConfig, options: RunOptions) -> Result<Self, TrainError> {
        config.validate()?;
        let model_config: M::Config = config.model.config()?;
        // A fresh run never writes over another run's checkpoints.
        if let Some(dir) = &options.out_dir
            && let Ok(state) = checkpoint::read_state(dir)
        {
            return Err(TrainError::OutDirInUse {
                dir: dir.clone(),
                step: state.step,
            });
        }
        let mut data = dataset::open(&config, &options.loader)?;
        let normalization = data.check(config.patch_spec(model_config.input()))?;
        let model_config = model_config.for_machines(&data.machines)?;
        let mut config = config;
        config.model = ModelSpec::of(&model_config);
        let resident = data.store.is_resident();
        let planned = plan_run(&mut config, &model_config, &options, resident).await?;
        let device = config.target().training_device(config.checkpointing)?;
        device.seed(config.seed);
        let model = model_config.init(&device);
        let start = Start {
            device,
            model,
            optimizer: checkpoint::new_optimizer(),
            step: 0,
            normalization,
        };
        Self::assemble(config, model_config, options, start, data, planned)
    }

    /// Continues the run saved at `path`, with the `changes` a resumed run may make (a longer
    /// run, another device, other checkpoint and validation intervals); the planner in
    /// `options` may split its steps differently, the effective batch kept.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn resume(
        path: &std::path::Path,
        changes: &ResumeChanges,
        options: RunOptions,
    ) -> Result<Self, TrainError> {
        block_on(Self::resume_async(path, changes, options))
    }

    /// [`ModelTrainer::resume`], awaited.
    pub async fn resume_async(
        path: &std::path::Path,
        changes: &ResumeChanges,
        options: RunOptions,
    ) -> Result<Self, TrainError> {
        let (files, dir) = CheckpointFiles::read(path)?;
        Self::resume_files_async(files, &dir, changes, options).await
    }

    /// [`ModelTrainer::resume_async`] from a checkpoint's files already in memory (a page's
    /// upload); `name` is what errors call the checkpoint.
    pub async fn resume_files_async(
        files: CheckpointFiles,
        name: &std::path::Path,
        changes: &ResumeChanges,
        options: RunOptions,
    ) -> Result<Self, TrainError> {
        let mut config = files.state(name)?.config;
        let model_config: M::Config = config.model.config()?;
        changes.apply(&mut config);
        let mut data = dataset::open(&config, &options.loader)?;
        // The same check as at the start, so the same bad files are left out; the
        // normalization stays the saved one.
        data.check(config.patch_spec(model_config.input()))?;
        // A resumed run may be planned again (another device, another budget).
        let resident = data.store.is_resident();
        let planned = replan_resumed(&mut config, &model_config, &options, resident).await?;
        let device = config.target().training_device(config.checkpointing)?;
        let loaded = files.decode::<M::Config>(name, &device)?;
        let start = Start {
            device,
            model: loaded.model,
            optimizer: loaded.optimizer,
            step: loaded.state.step,
            normalization: loaded.state.normalization,
        };
        Self::assemble(config, model_config, options, start, data, planned)
    }

    fn assemble(
        config: TrainConfig,
        model_config: M::Config,
        options: RunOptions,
        start: Start<M>,
        data: RunData,
        planned: Planned,
    ) -> Result<Self, TrainError> {
        let Planned {
            prepared,
            events: pending,
        } = planned;
        let (plan, calibration) = match prepared {
            Some(p) => (Some(p.plan), Some(p.calibration)),
            None => (None, None),
        };
        let Start {
            device,
            model,
            optimizer,
            step,
            normalization,
        } = start;
        if data.train.is_empty() {
            return Err(TrainError::EmptyTrainSplit);
        }
        let shape = model_config.input();
        let depth = read_ahead(&options.loader, data.store.is_resident(), &config, shape)
            .clips(config.micro_batch);
        let stream = TrainStream::new(
            data.store.clone(),
            data.train.clone(),
            data.classes.clone(),
            config.patch_spec(shape),
            config.seed,
            normalization,
            options.loader.workers,
            depth,
        );
        let total_steps = config.total_steps(stream.len());
        let mut config = config;
        config
            .quantizer_warmup_steps
            .get_or_insert(model_config.default_warm_up_steps(total_steps));
        let meter = MemoryMeter::new(config.backend, &device).with_budget(options.budget.clone());
        Ok(Self {
            config,
            model_config,
            options,
            device,
            model,
            optimizer,
            step,
            total_steps,
            normalization,
            stream,
            data,
            meter,
            plan,
            calibration,
            pending,
        })
    }

    /// The plan the run trains with, when it was planned.
    pub fn plan(&self) -> Option<&Plan> {
        self.plan.as_ref()
    }

    /// Splits each step into micro-batches of at most `micro_batch` spectrograms from the
    /// next step on; the step itself, and so the run, stays the same (seed 002's resume with
    /// a smaller batch and more accumulation).
    pub fn set_micro_batch(&mut self, micro_batch: usize) -> Result<(), TrainError> {
        if micro_batch == 0 {
            return Err(ConfigError::Zero {
                name: "--batch-size",
            }
            .into());
        }
        self.config.set_micro_batch(micro_batch);
        Ok(())
    }

    pub fn config(&self) -> &TrainConfig {
        &self.config
    }

    pub fn model(&self) -> &M {
        &self.model
    }

    pub fn step(&self) -> u64 {
        self.step
    }

    pub fn total_steps(&self) -> u64 {
        self.total_steps
    }

    pub fn run_info(&self) -> RunInfo {
        let c = &self.config;
        RunInfo {
            model: c.model.name.clone(),
            backend: c.backend.name().to_string(),
            device: crate::probe::describe_device(c.backend, &self.device),
            micro_batch: c.micro_batch,
            accumulation: c.accumulation,
            n_patches: c.n_patches,
            stride: c.stride,
            effective_batch: c.effective_batch(),
            total_steps: self.total_steps,
            start_step: self.step,
            steps_per_epoch: c.steps_per_epoch(self.stream.len()),
            lr: c.lr,
            seed: c.seed,
            train_clips: self.stream.len(),
            validation_clips: self.data.validation.len(),
            test_clips: self.data.test.len(),
            // As PyTorch counts them: trainable values, not BatchNorm's running statistics.
            parameters: self.model_config.parameter_count() as usize,
            memory_source: self.meter.source(),
            precision: c.precision.name().into(),
            checkpointing: c.checkpointing,
            budget_bytes: self.meter.budget().and_then(Budget::bytes),
            predicted_peak_bytes: self.plan.as_ref().map(|p| p.predicted_peak_bytes),
        }
    }

    /// Trains until the run length is reached or a stop is asked for. Always ends with a
    /// validation pass and, when there is an output directory, a checkpoint.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn run(&mut self, sink: &mut dyn EventSink) -> Result<(), TrainError> {
        block_on(self.run_async(sink))
    }

    /// [`ModelTrainer::run`], awaited.
    pub async fn run_async(&mut self, sink: &mut dyn EventSink) -> Result<(), TrainError> {
        let started = Instant::now();
        for event in self.pending.drain(..) {
            sink.emit(event);
        }
        sink.emit(Event::Dataset(self.dataset_report()));
        sink.emit(Event::Config(self.run_info()));
        let clips_per_step = self.config.clips_per_step() as u64;
        let mut stopped_early = false;
        let mut recoveries = 0u32;
        while self.step < self.total_steps {
            if control::stop_before_next(&self.options, self.step).await {
                stopped_early = true;
                break;
            }
            let report = match self.train_step().await {
                Ok(report) => report,
                Err(TrainError::Step(error)) if error.is_out_of_memory() => {
                    recoveries += 1;
                    self.recover(error, recoveries, sink).await?;
                    continue;
                }
                Err(other) => return Err(other),
            };
            recoveries = 0;
            let step = self.step;
            sink.emit(Event::Step(report));

            if every(step, self.config.empty_cache_every) {
                self.meter.cleanup();
                sink.emit(Event::MemoryCleanup { step });
            }
            let completed = self.stream.epoch_of(step * clips_per_step);
            if completed > self.stream.epoch_of((step - 1) * clips_per_step) {
                sink.emit(Event::Epoch {
                    epoch: completed,
                    step,
                });
            }
            let last = step == self.total_steps;
            if every(step, self.config.validate_every) && !last {
                sink.emit(Event::Validation {
                    step,
                    loss: self.validation_loss_async().await?,
                });
            }
            if every(step, self.config.checkpoint_every) && !last {
                self.checkpoint(sink)?;
            }
        }
        if !self.data.validation.is_empty() {
            sink.emit(Event::Validation {
                step: self.step,
                loss: self.validation_loss_async().await?,
            });
        }
        self.checkpoint(sink)?;
        sink.emit(Event::Finished {
            step: self.step,
            total_steps: self.total_steps,
            stopped_early,
            elapsed_s: started.elapsed().as_secs_f64(),
            host_peak_bytes: crate::memory::host_peak_bytes(),
        });
        Ok(())
    }

    /// After an out-of-memory step: free what it held, split the effective batch finer, and
    /// let the loop redo the step. Nothing of the model or optimizer changed (see
    /// [`step::StepError`]), so the redone step is the step a smaller plan would have run.
    async fn recover(
        &mut self,
        error: step::StepError,
        in_a_row: u32,
        sink: &mut dyn EventSink,
    ) -> Result<(), TrainError> {
        self.meter.cleanup();
        let c = &self.config;
        let (mb, n, acc) = (c.micro_batch, c.n_patches, c.accumulation);
        let next = if in_a_row <= MAX_RECOVERIES_IN_A_ROW {
            self.recovery_micro_batch(&error, mb).await?
        } else {
            None
        };
        let Some(to_mb) = next else {
            let saved = match self.checkpoint(sink) {
                Ok(()) if self.options.out_dir.is_some() => {
                    format!("Step {} is saved; continue with --resume. ", self.step)
                }
                _ => String::new(),
            };
            return Err(TrainError::OutOfMemory {
                step: self.step + 1,
                recoveries: in_a_row - 1,
                micro_batch: mb,
                n_patches: n,
                detail: error.to_string(),
                saved,
            });
        };
        tracing::warn!(step = self.step + 1, %error, to_mb, "out of memory; shrinking the micro-batch");
        self.config.set_micro_batch(to_mb);
        let depth = read_ahead(
            &self.options.loader,
            self.data.store.is_resident(),
            &self.config,
            self.model_config.input(),
        )
        .clips(to_mb);
        self.stream.set_depth(depth);
        sink.emit(Event::Recovery(RecoveryReport {
            step: self.step + 1,
            error: error.to_string(),
            from_micro_batch: mb,
            to_micro_batch: to_mb,
            n_patches: n,
            from_accumulation: acc,
            to_accumulation: self.config.accumulation,
            effective_batch: self.config.effective_batch(),
            in_a_row,
        }));
        Ok(())
    }

    /// The micro-batch to redo an out-of-memory step with: re-planned from the measured
    /// steps (the run's own kind of step, calibrated now when the run was not planned) and
    /// the peak this step reached, or half when the device failed without a reading.
    async fn recovery_micro_batch(
        &mut self,
        error: &step::StepError,
        micro_batch: usize,
    ) -> Result<Option<usize>, TrainError> {
        let step::StepError::OverBudget(over) = error else {
            return Ok(halve(micro_batch));
        };
        if self.calibration.is_none() {
            let calibration = crate::plan::calibrate::calibrate_only(
                self.config.target(),
                &self.model_config,
                self.config.precision,
                self.config.checkpointing,
            )
            .await
            .map_err(PlanningError::from)?;
            self.calibration = Some(calibration);
            // Calibrating filled the run's device pool; the redone step is measured against
            // the budget from what the pool holds, so those pages go back first.
            self.meter.cleanup();
        }
        let Some(calibration) = &self.calibration else {
            return Ok(halve(micro_batch));
        };
        let read_ahead = read_ahead_counted(
            &self.config,
            self.model_config.input(),
            &self.options.loader,
            self.data.store.is_resident(),
        );
        Ok(refit_micro_batch(
            &calibration.memory,
            read_ahead,
            &self.config,
            micro_batch,
            over.peak_bytes,
            over.budget_bytes,
        )
        .or_else(|| halve(micro_batch)))
    }

    async fn train_step(&mut self) -> Result<StepReport, TrainError> {
        let warmup = self.config.quantizer_warmup_steps.unwrap_or(0);
        // Outside the step's time and memory window: drawing the codebook is set-up.
        if self.step == warmup {
            self.end_warm_up().await?;
        }
        let started = Instant::now();
        let c = &self.config;
        let lr = schedule::cosine_lr(c.lr, c.min_lr, self.step, self.total_steps);
        let first = self.step * c.clips_per_step() as u64;
        let sizes = c.micro_batch_sizes();
        // One micro-batch at a time, as the plan measured. A file that fails to read ends
        // the micro-batches early; the step then refuses to update (Incomplete), and the
        // file's error is what the run reports.
        let mut read_error = None;
        let stream = &mut self.stream;
        let device = &self.device;
        let micro_batches = sizes.iter().scan(first, |position, &count| {
            match stream.batch(*position, count) {
                Ok(batch) => {
                    *position += count as u64;
                    Some(batch.to_tensor(device))
                }
                Err(error) => {
                    read_error = Some(error);
                    None
                }
            }
        });
        self.meter.reset_peak();
        let settings = step::StepSettings {
            step_patches: c.effective_batch(),
            lr,
            clip_norm: c.clip_norm,
            warming_up: self.step < warmup,
            precision: c.precision,
        };
        let model = self.model.clone();
        let stepped = step::optimizer_step(
            model,
            &mut self.optimizer,
            micro_batches,
            settings,
            &mut self.meter,
        )
        .await;
        if let Some(error) = read_error {
            return Err(error.into());
        }
        let (model, outcome) = stepped?;
        if !outcome.loss.is_finite() {
            return Err(TrainError::NonFinite {
                step: self.step + 1,
                loss: outcome.loss,
            });
        }
        self.model = model;
        self.step += 1;
        let memory = self.meter.sample();
        let seconds = started.elapsed().as_secs_f64();
        Ok(StepReport {
            step: self.step,
            total_steps: self.total_steps,
            epoch: self.stream.epoch_of(first),
            loss: outcome.loss,
            reconstruction_loss: outcome.reconstruction_loss,
            lr,
            grad_norm: outcome.grad_norm,
            patches_per_s: c.effective_batch() as f64 / seconds,
            step_ms: seconds * 1e3,
            micro_batch: c.micro_batch,
            accumulation: c.accumulation,
            mem_allocated_bytes: memory.allocated_bytes,
            mem_peak_bytes: memory.peak_bytes,
            mem_reserved_bytes: memory.reserved_bytes,
            mem_budget_bytes: self.meter.budget().and_then(Budget::bytes),
        })
    }

    /// Every patch of clip `clip` at the run's stride, with its class: how validation and the
    /// warm-up's end see a clip.
    fn patches_of(&self, clip: usize) -> Result<crate::data::PatchBatch, TrainError> {
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

    /// Ends the model's warm-up with the train split's patches, read in order on the device
    /// without autodiff; outside the step's time and memory window, as set-up is.
    async fn end_warm_up(&mut self) -> Result<(), TrainError> {
        let plain = self.device.clone().without_autodiff();
        let mut read_error = None;
        let mut clips = self.data.train.iter();
        let mut patches = std::iter::from_fn(|| {
            let &clip = clips.next()?;
            match self.patches_of(clip) {
                Ok(batch) => Some(batch.to_tensor(&plain)),
                Err(error) => {
                    read_error = Some(error);
                    None
                }
            }
        });
        let model = self
            .model
            .clone()
            .end_warm_up(
                &mut patches as &mut dyn Iterator<Item = Patches>,
                self.config.seed,
            )
            .await;
        if let Some(error) = read_error {
            return Err(error);
        }
        self.model = model?;
        Ok(())
    }

    /// Patches scored at once: a training micro-batch's worth, which a forward pass without
    /// autodiff holds in less memory than the plan gave a training step.
    fn eval_chunk(&self) -> usize {
        (self.config.micro_batch * self.config.n_patches).max(1)
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

    /// What the run reads, and how.
    pub fn dataset_report(&self) -> DatasetReport {
        let clips = self.data.store.clips();
        let mut machine_types: Vec<String> = clips.iter().map(|c| c.machine_type.clone()).collect();
        machine_types.dedup();
        DatasetReport {
            source: self.config.dataset.describe(),
            machine_types,
            train_clips: self.data.train.len(),
            validation_clips: self.data.validation.len(),
            test_clips: self.data.test.len(),
            resident: self.data.store.is_resident(),
            host_memory_bytes: self.options.loader.host_memory_bytes,
            skipped: self.data.skipped.clone(),
        }
    }

    fn checkpoint(&mut self, sink: &mut dyn EventSink) -> Result<(), TrainError> {
        let Some(out) = &self.options.out_dir else {
            return Ok(());
        };
        let path = checkpoint::save(out, &self.checkpoint_state(), &self.model, &self.optimizer)?;
        sink.emit(Event::Checkpoint {
            step: self.step,
            path: path.display().to_string(),
        });
        Ok(())
    }

    /// The checkpoint of the run as it stands, in memory (what a web page offers as
    /// downloads); the files `--out` gets at a checkpoint.
    pub fn checkpoint_files(&self) -> Result<CheckpointFiles, TrainError> {
        if cfg!(target_arch = "wasm32") && !self.config.backend.is_host() {
            return Err(TrainError::CheckpointOnWebGpu);
        }
        let dir = std::path::Path::new("checkpoint");
        Ok(CheckpointFiles::encode(
            &self.checkpoint_state(),
            &self.model,
            &self.optimizer,
            dir,
        )?)
    }

    fn checkpoint_state(&self) -> CheckpointState {
        CheckpointState {
            format_version: 1,
            step: self.step,
            total_steps: self.total_steps,
            config: self.config.clone(),
            normalization: self.normalization,
            rng: RngState {
                seed: self.config.seed,
                stream_position: self.step * self.config.clips_per_step() as u64,
            },
            param_ids: checkpoint::param_ids(&self.model),
        }
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
                let data = dataset::open(&config, &loader)?;
                let plain = device.without_autodiff();
                let settings = ScoreSettings {
                    shape: model.input(),
                    stride: config.eval_stride,
                    chunk: (config.micro_batch * config.n_patches).max(1),
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

/// What front-ends drive: a run, whichever model it trains (through [`Trainer`]). Each
/// method is [`ModelTrainer`]'s of the same name.
pub trait Run {
    /// [`ModelTrainer::run_async`].
    fn run_async<'a>(
        &'a mut self,
        sink: &'a mut dyn EventSink,
    ) -> LocalFuture<'a, Result<(), TrainError>>;
    fn evaluate_async(&self) -> LocalFuture<'_, Result<Evaluation, TrainError>>;
    fn validation_loss_async(&self) -> LocalFuture<'_, Result<f64, TrainError>>;
    #[cfg(not(target_arch = "wasm32"))]
    fn run(&mut self, sink: &mut dyn EventSink) -> Result<(), TrainError> {
        block_on(self.run_async(sink))
    }
    #[cfg(not(target_arch = "wasm32"))]
    fn evaluate(&self) -> Result<Evaluation, TrainError> {
        block_on(self.evaluate_async())
    }
    #[cfg(not(target_arch = "wasm32"))]
    fn validation_loss(&self) -> Result<f64, TrainError> {
        block_on(self.validation_loss_async())
    }
    fn set_micro_batch(&mut self, micro_batch: usize) -> Result<(), TrainError>;
    fn config(&self) -> &TrainConfig;
    fn plan(&self) -> Option<&Plan>;
    fn step(&self) -> u64;
    fn total_steps(&self) -> u64;
    fn run_info(&self) -> RunInfo;
    /// Every parameter value in visiting order: for comparing runs.
    fn parameters(&self) -> Vec<f32>;
    /// [`ModelTrainer::checkpoint_files`].
    fn checkpoint_files(&self) -> Result<CheckpointFiles, TrainError>;
}

impl<M: SpectrogramModel> Run for ModelTrainer<M> {
    fn run_async<'a>(
        &'a mut self,
        sink: &'a mut dyn EventSink,
    ) -> LocalFuture<'a, Result<(), TrainError>> {
        Box::pin(ModelTrainer::run_async(self, sink))
    }
    fn evaluate_async(&self) -> LocalFuture<'_, Result<Evaluation, TrainError>> {
        Box::pin(ModelTrainer::evaluate_async(self))
    }
    fn validation_loss_async(&self) -> LocalFuture<'_, Result<f64, TrainError>> {
        Box::pin(ModelTrainer::validation_loss_async(self))
    }
    fn set_micro_batch(&mut self, micro_batch: usize) -> Result<(), TrainError> {
        ModelTrainer::set_micro_batch(self, micro_batch)
    }
    fn config(&self) -> &TrainConfig {
        ModelTrainer::config(self)
    }
    fn plan(&self) -> Option<&Plan> {
        ModelTrainer::plan(self)
    }
    fn step(&self) -> u64 {
        ModelTrainer::step(self)
    }
    fn total_steps(&self) -> u64 {
        ModelTrainer::total_steps(self)
    }
    fn run_info(&self) -> RunInfo {
        ModelTrainer::run_info(self)
    }
    fn parameters(&self) -> Vec<f32> {
        crate::model::flat_parameters(&self.model)
    }
    fn checkpoint_files(&self) -> Result<CheckpointFiles, TrainError> {
        ModelTrainer::checkpoint_files(self)
    }
}

/// A run of the built-in model its configuration names (`TrainConfig::model`): what the
/// CLI and the GUI hold. A network of one's own trains through [`ModelTrainer`].
/// Its methods are [`Run`]'s, reached through `Deref`.
pub struct Trainer(Box<dyn Run>);

impl Trainer {
    /// A fresh run.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn new(config: TrainConfig, options: RunOptions) -> Result<Self, TrainError> {
        block_on(Self::new_async(config, options))
    }

    /// [`Trainer::new`], awaited.
    pub async fn new_async(config: TrainConfig, options: RunOptions) -> Result<Self, TrainError> {
        struct New(TrainConfig, RunOptions);
        impl WithModel for New {
            type Output = LocalFuture<'static, Result<Trainer, TrainError>>;
            fn run<C: ModelConfig>(self, _: C) -> Self::Output {
                Box::pin(async move {
                    let trainer = ModelTrainer::<C::Model>::new_async(self.0, self.1).await?;
                    Ok(Trainer(Box::new(trainer)))
                })
            }
        }
        let spec = config.model.clone();
        with_model(&spec, New(config, options))?.await
    }

    /// Continues the run saved at `path` (see [`ModelTrainer::resume`]).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn resume(
        path: &std::path::Path,
        changes: &ResumeChanges,
        options: RunOptions,
    ) -> Result<Self, TrainError> {
        block_on(Self::resume_async(path, changes, options))
    }

    /// [`Trainer::resume`], awaited.
    pub async fn resume_async(
        path: &std::path::Path,
        changes: &ResumeChanges,
        options: RunOptions,
    ) -> Result<Self, TrainError> {
        let (files, dir) = CheckpointFiles::read(path)?;
        Self::resume_files_async(files, &dir, changes, options).await
    }

    /// Continues the run whose checkpoint files are in memory (see
    /// [`ModelTrainer::resume_files_async`]); `name` is what errors call the checkpoint.
    pub async fn resume_files_async(
        files: CheckpointFiles,
        name: &std::path::Path,
        changes: &ResumeChanges,
        options: RunOptions,
    ) -> Result<Self, TrainError> {
        struct Resume<'a>(
            CheckpointFiles,
            &'a std::path::Path,
            &'a ResumeChanges,
            RunOptions,
        );
        impl<'a> WithModel for Resume<'a> {
            type Output = LocalFuture<'a, Result<Trainer, TrainError>>;
            fn run<C: ModelConfig>(self, _: C) -> Self::Output {
                Box::pin(async move {
                    let Resume(files, name, changes, options) = self;
                    let trainer =
                        ModelTrainer::<C::Model>::resume_files_async(files, name, changes, options)
                            .await?;
                    Ok(Trainer(Box::new(trainer)))
                })
            }
        }
        let spec = files.state(name)?.config.model;
        with_model(&spec, Resume(files, name, changes, options))?.await
    }
}

impl std::ops::Deref for Trainer {
    type Target = dyn Run;
    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

impl std::ops::DerefMut for Trainer {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut *self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{MeasuredCost, MemoryModel};

    /// A web page's download: the checkpoint in memory is the one `--out` holds.
    #[test]
    fn the_checkpoint_in_memory_is_the_one_out_holds() {
        let mut config = TrainConfig {
            micro_batch: 2,
            n_patches: 2,
            accumulation: 1,
            length: RunLength::Steps(2),
            quantizer_warmup_steps: Some(1),
            validation_every_nth_clip: 0,
            ..TrainConfig::default()
        };
        config.dataset = DatasetSource::Synthetic(headroom_datasets::SyntheticConfig {
            machine_ids: 1,
            train_per_id: 4,
            test_normal_per_id: 1,
            test_anomaly_per_id: 1,
            ..Default::default()
        });
        let dir = tempfile::tempdir().unwrap();
        let mut run = Trainer::new(
            config,
            RunOptions {
                out_dir: Some(dir.path().to_path_buf()),
                ..RunOptions::default()
            },
        )
        .unwrap();
        run.run(&mut Vec::new()).unwrap();
        let (on_disk, _) = CheckpointFiles::read(dir.path()).unwrap();
        let in_memory = run.checkpoint_files().unwrap();
        assert_eq!(in_memory.state, on_disk.state);
        assert_eq!(in_memory.optimizer, on_disk.optimizer);
        assert_eq!(on_disk.state(dir.path()).unwrap().step, 2);
        // safetensors' header lists its metadata in a hash map's order: compare the weights.
        let device = crate::BackendKind::Flex.device().unwrap().autodiff();
        let weights = |files: &CheckpointFiles| {
            let loaded = files
                .clone()
                .decode::<crate::model::VqAutoencoderConfig>(dir.path(), &device)
                .unwrap();
            crate::model::flat_parameters(&loaded.model)
        };
        assert_eq!(weights(&in_memory), weights(&on_disk));
        assert_eq!(run.parameters(), weights(&in_memory));
    }

    /// 1,000 bytes a patch; a step of 8 spectrograms of one patch reached 10,000 bytes and
    /// the budget is 9,000. Leaving out the summed gradients a split step holds, 7 fits
    /// exactly; with them (1,500 bytes), 7 + 1 and 6 + 2 do not, 5 + 3 does.
    #[test]
    fn a_recovery_counts_the_gradients_a_split_step_sums() {
        let mut memory = MemoryModel {
            plain: MeasuredCost::new([(0, 0.0), (16, 16_000.0)]),
            checkpointed: None,
            half: None,
            accumulation_bytes: 0,
            margin: 0.0,
        };
        let config = TrainConfig {
            micro_batch: 8,
            n_patches: 1,
            accumulation: 1,
            precision: Precision::F32,
            checkpointing: false,
            ..TrainConfig::default()
        };
        let refit = |memory: &MemoryModel| {
            refit_micro_batch(memory, ReadAhead::NONE, &config, 8, 10_000, 9_000)
        };
        assert_eq!(refit(&memory), Some(7));
        memory.accumulation_bytes = 1_500;
        assert_eq!(refit(&memory), Some(5));
        assert_eq!(
            refit_micro_batch(&memory, ReadAhead::NONE, &config, 8, 10_000, 1_000),
            None,
            "not one spectrogram fits"
        );
    }
}
