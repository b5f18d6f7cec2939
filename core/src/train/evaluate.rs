//! What a run is measured by (its task's validation loss and evaluation), for a run in
//! memory or a saved checkpoint.

use crate::checkpoint::CheckpointFiles;
use crate::config::TrainConfig;
use crate::data::LoaderOptions;
use crate::readback::LocalFuture;
#[cfg(not(target_arch = "wasm32"))]
use crate::readback::block_on;

use super::run_task::{EvalBatches, RunTask, TaskData};
use super::{Evaluation, TaskTrainer, TrainError};

impl<T: RunTask> TaskTrainer<T> {
    /// Mean loss over the held-out examples, evaluated without autodiff.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn validation_loss(&self) -> Result<f64, TrainError> {
        block_on(self.validation_loss_async())
    }

    /// [`TaskTrainer::validation_loss`], awaited.
    pub fn validation_loss_async<'a>(&'a self) -> LocalFuture<'a, Result<f64, TrainError>> {
        Box::pin(async move {
            let device = self.device.clone().without_autodiff();
            self.task
                .validation_loss(
                    &self.measured_model(),
                    &self.data,
                    &device,
                    &EvalBatches::of(&self.config),
                )
                .await
        })
    }

    /// What the run is measured by on its test split (for a model: per-clip anomaly scores
    /// and their AUC and pAUC per machine type and ID).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn evaluate(&self) -> Result<Evaluation, TrainError> {
        block_on(self.evaluate_async())
    }

    /// [`TaskTrainer::evaluate`], awaited.
    pub fn evaluate_async<'a>(&'a self) -> LocalFuture<'a, Result<Evaluation, TrainError>> {
        Box::pin(async move {
            let device = self.device.clone().without_autodiff();
            // Train files left out were reported when the run started; these are the test's.
            self.task
                .evaluate(
                    &self.measured_model(),
                    &self.data,
                    &device,
                    &EvalBatches::of(&self.config),
                    Vec::new(),
                )
                .await
        })
    }
}

/// Scores `config`'s test split with the networks of task `T` saved in `files` (their
/// weights' moving average where the run kept one), standardised as the saved run was.
pub fn evaluate_saved<'a, T: RunTask>(
    files: CheckpointFiles,
    dir: &'a std::path::Path,
    config: TrainConfig,
    loader: LoaderOptions,
) -> LocalFuture<'a, Result<Evaluation, TrainError>> {
    Box::pin(async move {
        let device = config.target().training_device(false)?;
        let loaded = files.decode_task(dir, &device, |task: &T| {
            (task.networks(&device), task.optimizer())
        })?;
        let task: T = config.model.config()?;
        let (task, mut data) = task.open(&config, &loader)?;
        data.keep_normalization(loaded.state.normalization);
        let plain = device.without_autodiff();
        let skipped = data.skipped();
        task.evaluate(
            loaded.average.as_ref().unwrap_or(&loaded.model),
            &data,
            &plain,
            &EvalBatches::of(&config),
            skipped,
        )
        .await
    })
}
