//! Making a run: fresh, or from a checkpoint (on disk or in memory), its data opened and
//! checked, planned, and its stream set up; and what the run says of itself.

use crate::budget::Budget;
use crate::checkpoint::{self, CheckpointFiles};
use crate::config::{ConfigError, ResumeChanges, Setting, TrainConfig};
use crate::events::{DatasetReport, RunInfo};
use crate::memory::MemoryMeter;
use crate::model::ModelSpec;
use crate::plan::Plan;
use crate::readback::LocalFuture;
#[cfg(not(target_arch = "wasm32"))]
use crate::readback::block_on;

use super::planning::{Planned, fit_and_plan, replan_resumed};
use super::run_task::{RunTask, TaskData};
use super::{RunOptions, Start, TaskTrainer, TrainError, WeightAverage};

impl<T: RunTask> TaskTrainer<T> {
    /// A fresh run of `config`, whose `model` names `T` (`ModelSpec::of`).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn new(config: TrainConfig, options: RunOptions) -> Result<Self, TrainError> {
        block_on(Self::new_async(config, options))
    }

    /// [`TaskTrainer::new`], awaited.
    pub fn new_async(
        config: TrainConfig,
        options: RunOptions,
    ) -> LocalFuture<'static, Result<Self, TrainError>> {
        Box::pin(async move {
            config.validate()?;
            let task: T = config.model.config()?;
            // A fresh run never writes over another run's checkpoints.
            if let Some(dir) = &options.out_dir
                && let Ok(state) = checkpoint::read_state(dir)
            {
                return Err(TrainError::OutDirInUse {
                    dir: dir.clone(),
                    step: state.step,
                });
            }
            let (task, mut data) = task.open(&config, &options.loader)?;
            data.check()?;
            let mut config = config;
            let (task, planned) = match &options.planning {
                Some(planning) => {
                    let mut events = Vec::new();
                    let (task, prepared) = fit_and_plan(
                        &mut config,
                        task,
                        &mut data,
                        planning,
                        &options.loader,
                        super::timing::store(&options),
                        &mut events,
                    )
                    .await?;
                    let prepared = Some(prepared);
                    (task, Planned { prepared, events })
                }
                None => (task.for_data(&data)?, Planned::default()),
            };
            config.model = ModelSpec::of(&task);
            let device = config.target().training_device(config.checkpointing)?;
            device.seed(config.seed);
            let networks = task.networks(&device);
            let start = Start {
                device,
                average: config.ema.map(|decay| WeightAverage::new(&networks, decay)),
                networks,
                optimizer: task.optimizer(),
                step: 0,
                normalization: None,
            };
            Self::assemble(config, task, options, start, data, planned)
        })
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

    /// [`TaskTrainer::resume`], awaited.
    pub fn resume_async<'a>(
        path: &'a std::path::Path,
        changes: &'a ResumeChanges,
        options: RunOptions,
    ) -> LocalFuture<'a, Result<Self, TrainError>> {
        Box::pin(async move {
            let (files, dir) = CheckpointFiles::read(path)?;
            Self::resume_files_async(files, &dir, changes, options).await
        })
    }

    /// [`TaskTrainer::resume_async`] from a checkpoint's files already in memory (a page's
    /// upload); `name` is what errors call the checkpoint.
    pub fn resume_files_async<'a>(
        files: CheckpointFiles,
        name: &'a std::path::Path,
        changes: &'a ResumeChanges,
        options: RunOptions,
    ) -> LocalFuture<'a, Result<Self, TrainError>> {
        Box::pin(async move {
            let mut config = files.state(name)?.config;
            let task: T = config.model.config()?;
            changes.apply(&mut config);
            let (task, mut data) = task.open(&config, &options.loader)?;
            // The same check as at the start, so the same bad files are left out; the
            // normalization stays the saved one.
            data.check()?;
            // A resumed run may be planned again (another device, another budget).
            let planned = replan_resumed(&mut config, &task, &data, &options).await?;
            let device = config.target().training_device(config.checkpointing)?;
            let loaded = files.decode_task(name, &device, |task: &T| {
                (task.networks(&device), task.optimizer())
            })?;
            let average = match (config.ema, &loaded.average) {
                (None, _) => None,
                (Some(decay), Some(saved)) => Some(WeightAverage::new(saved, decay)),
                (Some(_), None) => {
                    return Err(TrainError::Task(format!(
                        "{} keeps a moving average of its weights, but the checkpoint has no \
                         average.safetensors; copy the whole checkpoint directory",
                        name.display()
                    )));
                }
            };
            let start = Start {
                device,
                average,
                networks: loaded.model,
                optimizer: loaded.optimizer,
                step: loaded.state.step,
                normalization: Some(loaded.state.normalization),
            };
            Self::assemble(config, task, options, start, data, planned)
        })
    }

    fn assemble(
        config: TrainConfig,
        task: T,
        options: RunOptions,
        start: Start<T::Networks>,
        mut data: T::Data,
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
            networks,
            optimizer,
            average,
            step,
            normalization,
        } = start;
        if data.train_examples() == 0 {
            return Err(TrainError::EmptyTrainSplit);
        }
        if let Some(saved) = normalization {
            data.keep_normalization(saved);
        }
        data.stream(&config, &options.loader);
        let total_steps = config.total_steps(data.train_examples());
        let mut config = config;
        config
            .quantizer_warmup_steps
            .get_or_insert(task.default_warm_up_steps(total_steps));
        let meter = MemoryMeter::new(config.backend, &device).with_budget(options.budget.clone());
        Ok(Self {
            config,
            task,
            options,
            device,
            networks,
            optimizer,
            average,
            step,
            total_steps,
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
    /// a smaller batch and more accumulation). A count given so replaces a plan by length.
    pub fn set_micro_batch(&mut self, micro_batch: usize) -> Result<(), TrainError> {
        if micro_batch == 0 {
            return Err(ConfigError::Zero(Setting::MicroBatch).into());
        }
        self.config.set_micro_batch(micro_batch);
        if self.config.length_buckets.take().is_some() {
            self.data.stream(&self.config, &self.options.loader);
        }
        Ok(())
    }

    pub fn config(&self) -> &TrainConfig {
        &self.config
    }

    /// The networks as they stand (the model, for a model's run).
    pub fn model(&self) -> &T::Networks {
        &self.networks
    }

    /// The networks the run is measured and draws with: the weights' moving average where
    /// the run keeps one, else the networks as they stand.
    pub fn measured_model(&self) -> std::borrow::Cow<'_, T::Networks> {
        match &self.average {
            Some(average) => std::borrow::Cow::Owned(average.applied(&self.networks)),
            None => std::borrow::Cow::Borrowed(&self.networks),
        }
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
            steps_per_epoch: c.steps_per_epoch(self.data.train_examples()),
            lr: c.lr,
            seed: c.seed,
            train_clips: self.data.train_examples(),
            validation_clips: self.data.validation_examples(),
            test_clips: self.data.test_examples(),
            // As PyTorch counts them: trainable values, not BatchNorm's running statistics.
            parameters: self.task.parameters() as usize,
            memory_source: self.meter.source(),
            precision: c.precision.name().into(),
            checkpointing: c.checkpointing,
            budget_bytes: self.meter.budget().and_then(Budget::bytes),
            predicted_peak_bytes: self.plan.as_ref().map(|p| p.predicted_peak_bytes),
            length_buckets: c.length_buckets.clone(),
            step_words: self.task.step_words(c),
        }
    }

    /// What the run reads, and how.
    pub fn dataset_report(&self) -> DatasetReport {
        self.data.report(&self.config, &self.options.loader)
    }
}
