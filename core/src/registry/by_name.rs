//! Planning and scoring by the name a configuration or a checkpoint records, as front-ends
//! ask for them.

use crate::backend::Target;
use crate::checkpoint::CheckpointFiles;
use crate::config::{DatasetSource, TrainConfig};
use crate::data::LoaderOptions;
use crate::events::EventSink;
use crate::plan::{Planning, Prepared};
use crate::readback::LocalFuture;
#[cfg(not(target_arch = "wasm32"))]
use crate::readback::block_on;
use crate::train::{Evaluation, TrainError, evaluate_saved, plan_task};

use super::{BuiltIn, WithTask, with_saved};

/// The plan a fresh run of `config` would train with, made as [`super::Trainer::new`] makes
/// it, without training: what `trainer-cli plan` shows (`crate::train::plan_task`).
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
    impl<'a> WithTask for PlanOnly<'a> {
        type Output = LocalFuture<'a, Result<Prepared, TrainError>>;
        fn run<T: BuiltIn>(self, task: T) -> Self::Output {
            let PlanOnly {
                config,
                planning,
                loader,
                sink,
            } = self;
            Box::pin(plan_task(config, task, planning, loader, sink))
        }
    }
    let spec = config.model.clone();
    with_saved(
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

/// Scores the test split of `source` (or of the run's own dataset) with the networks saved
/// at `path`, as `trainer-cli eval` does. Features are read with the run's settings, so a
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
        files: CheckpointFiles,
        dir: &'a std::path::Path,
        config: TrainConfig,
        loader: LoaderOptions,
    }
    impl<'a> WithTask for Evaluate<'a> {
        type Output = LocalFuture<'a, Result<Evaluation, TrainError>>;
        fn run<T: BuiltIn>(self, _: T) -> Self::Output {
            Box::pin(evaluate_saved::<T>(
                self.files,
                self.dir,
                self.config,
                self.loader,
            ))
        }
    }
    let (files, dir) = CheckpointFiles::read(path)?;
    let mut config = files.state(&dir)?.config;
    if let Some(target) = target {
        config.backend = target.backend;
        config.device = target.device;
    }
    if let Some(source) = source {
        config.dataset = source;
    }
    let spec = config.model.clone();
    with_saved(
        &spec,
        Evaluate {
            files,
            dir: &dir,
            config,
            loader,
        },
    )?
    .await
}
