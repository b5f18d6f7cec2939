//! Making a run: fresh, or from a checkpoint (on disk or in memory), its data opened and
//! checked, planned, and its stream set up; and what the run says of itself.

use crate::budget::Budget;
use crate::checkpoint::{self, CheckpointFiles};
use crate::config::{ConfigError, ResumeChanges, Setting, TrainConfig};
use crate::data::TrainStream;
use crate::data::{self, RunData};
use crate::events::{DatasetReport, RunInfo};
use crate::memory::MemoryMeter;
use crate::model::{ModelConfig, ModelSpec, SpectrogramModel};
use crate::plan::Plan;
#[cfg(not(target_arch = "wasm32"))]
use crate::readback::block_on;

use super::planning::{Planned, plan_run, replan_resumed};
use super::read_ahead::read_ahead;
use super::{ModelTrainer, RunOptions, Start, TrainError};

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
        let mut data = data::open(&config, &options.loader)?;
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
        let mut data = data::open(&config, &options.loader)?;
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
            return Err(ConfigError::Zero(Setting::MicroBatch).into());
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
}
