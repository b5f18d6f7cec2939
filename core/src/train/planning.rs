//! Planning a run before its model exists, so that the dry-run measures the step alone; and
//! planning a resumed run, which keeps its effective batch.

use crate::config::TrainConfig;
use crate::data::LoaderOptions;
use crate::events::{Event, EventSink};
use crate::memory::MemoryMeter;
use crate::model::{ModelConfig, WithModel, with_model};
use crate::plan::{PlanError, Planning, PlanningError, Prepared, RunShare};
use crate::readback::LocalFuture;
#[cfg(not(target_arch = "wasm32"))]
use crate::readback::block_on;

use super::run_task::{RunTask, TaskData};
use super::{RunOptions, TrainError, counted};

/// What planning left for the run: the plan, the measurements it rests on (recovery
/// re-plans from them), and its events, emitted when the run starts.
#[derive(Default)]
pub(super) struct Planned {
    pub(super) prepared: Option<Prepared>,
    pub(super) events: Vec<Event>,
}

/// Plans the run when asked, before its networks exist, so that the dry-run measures the
/// step alone; the config takes the plan's micro-batch, patches, accumulation and
/// checkpointing. `data`: the run's, checked (its read-ahead counts).
pub(super) async fn plan_run<T: RunTask>(
    config: &mut TrainConfig,
    task: &T,
    data: &T::Data,
    options: &RunOptions,
) -> Result<Planned, TrainError> {
    let Some(planning) = &options.planning else {
        return Ok(Planned::default());
    };
    let mut events = Vec::new();
    let prepared = prepare_run(config, task, data, planning, &options.loader, &mut events).await?;
    Ok(Planned {
        prepared: Some(prepared),
        events,
    })
}

/// Plans with what the run will hold beside its steps, and gives `config` the plan's split.
pub(super) async fn prepare_run<T: RunTask>(
    config: &mut TrainConfig,
    task: &T,
    data: &T::Data,
    planning: &Planning,
    loader: &LoaderOptions,
    sink: &mut dyn EventSink,
) -> Result<Prepared, TrainError> {
    let plain = config.target().device()?;
    let share = RunShare {
        resident_bytes: MemoryMeter::new(config.backend, &plain)
            .sample()
            .allocated_bytes,
        read_ahead: counted(config, data.read_ahead(config, loader)),
    };
    let prepared = crate::plan::prepare(config.target(), task, planning, share, sink).await?;
    let plan = &prepared.plan;
    config.set_split(plan.split());
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
                let (task, mut data) = model.open(&config, loader)?;
                data.check()?;
                let task = task.for_data(&data)?;
                prepare_run(&mut config, &task, &data, planning, loader, sink).await
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

/// Planning for a resumed run: it keeps its effective batch and patches per spectrogram
/// (they decide what each step reads), and first tries its saved split, unless the user
/// named another; only when that does not fit is the split planned afresh.
pub(super) async fn replan_resumed<T: RunTask>(
    config: &mut TrainConfig,
    task: &T,
    data: &T::Data,
    options: &RunOptions,
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
    match plan_run(config, task, data, &with(saved)).await {
        Err(TrainError::Planning(PlanningError::Plan(PlanError::DoesNotFit { .. })))
            if saved != keep =>
        {
            plan_run(config, task, data, &with(keep)).await
        }
        other => other,
    }
}
