//! The task-erased run front-ends hold: [`Trainer`] picks the built-in task a
//! configuration names and drives it through the [`Run`] trait.

use crate::checkpoint::CheckpointFiles;
use crate::config::{ResumeChanges, TrainConfig};
use crate::events::{EventSink, RunInfo};
use crate::plan::Plan;
use crate::readback::LocalFuture;
#[cfg(not(target_arch = "wasm32"))]
use crate::readback::block_on;
use crate::train::{Evaluation, RunOptions, RunTask, TaskTrainer, TrainError};

use super::{BuiltIn, WithTask, with_saved};

/// What front-ends drive: a run, whichever task it trains (through [`Trainer`]). Each
/// method is [`TaskTrainer`]'s of the same name.
pub trait Run {
    /// [`TaskTrainer::run_async`].
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
    /// [`TaskTrainer::checkpoint_files`].
    fn checkpoint_files(&self) -> Result<CheckpointFiles, TrainError>;
}

impl<T: RunTask> Run for TaskTrainer<T> {
    fn run_async<'a>(
        &'a mut self,
        sink: &'a mut dyn EventSink,
    ) -> LocalFuture<'a, Result<(), TrainError>> {
        Box::pin(TaskTrainer::run_async(self, sink))
    }
    fn evaluate_async(&self) -> LocalFuture<'_, Result<Evaluation, TrainError>> {
        Box::pin(TaskTrainer::evaluate_async(self))
    }
    fn validation_loss_async(&self) -> LocalFuture<'_, Result<f64, TrainError>> {
        Box::pin(TaskTrainer::validation_loss_async(self))
    }
    fn set_micro_batch(&mut self, micro_batch: usize) -> Result<(), TrainError> {
        TaskTrainer::set_micro_batch(self, micro_batch)
    }
    fn config(&self) -> &TrainConfig {
        TaskTrainer::config(self)
    }
    fn plan(&self) -> Option<&Plan> {
        TaskTrainer::plan(self)
    }
    fn step(&self) -> u64 {
        TaskTrainer::step(self)
    }
    fn total_steps(&self) -> u64 {
        TaskTrainer::total_steps(self)
    }
    fn run_info(&self) -> RunInfo {
        TaskTrainer::run_info(self)
    }
    fn parameters(&self) -> Vec<f32> {
        crate::model::flat_parameters(TaskTrainer::model(self))
    }
    fn checkpoint_files(&self) -> Result<CheckpointFiles, TrainError> {
        TaskTrainer::checkpoint_files(self)
    }
}

/// A run of the built-in task its configuration names (`TrainConfig::model`): what the
/// CLI and the GUI hold. A network or task of one's own trains through [`TaskTrainer`].
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
        impl WithTask for New {
            type Output = LocalFuture<'static, Result<Trainer, TrainError>>;
            fn run<T: BuiltIn>(self, _: T) -> Self::Output {
                Box::pin(async move {
                    let trainer = TaskTrainer::<T>::new_async(self.0, self.1).await?;
                    Ok(Trainer(Box::new(trainer)))
                })
            }
        }
        let spec = config.model.clone();
        with_saved(&spec, New(config, options))?.await
    }

    /// Continues the run saved at `path` (see [`TaskTrainer::resume`]).
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
    /// [`TaskTrainer::resume_files_async`]); `name` is what errors call the checkpoint.
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
        impl<'a> WithTask for Resume<'a> {
            type Output = LocalFuture<'a, Result<Trainer, TrainError>>;
            fn run<T: BuiltIn>(self, _: T) -> Self::Output {
                Box::pin(async move {
                    let Resume(files, name, changes, options) = self;
                    let trainer =
                        TaskTrainer::<T>::resume_files_async(files, name, changes, options).await?;
                    Ok(Trainer(Box::new(trainer)))
                })
            }
        }
        let spec = files.state(name)?.config.model;
        with_saved(&spec, Resume(files, name, changes, options))?.await
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
