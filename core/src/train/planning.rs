//! Planning a run before its model exists, so that the dry-run measures the step alone; and
//! planning a resumed run, which keeps its effective batch.

use crate::config::TrainConfig;
use crate::data::{LoaderOptions, OnBadFile};
use crate::events::{Event, EventSink};
use crate::memory::MemoryMeter;
use crate::plan::{PhasePins, PlanError, Planning, PlanningError, Prepared, RunShare};
use crate::readback::LocalFuture;

use super::run_task::{RunTask, TaskData};
use super::timing::{self, Store};
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
pub(super) fn plan_run<'a, T: RunTask>(
    config: &'a mut TrainConfig,
    task: &'a T,
    data: &'a T::Data,
    options: &'a RunOptions,
) -> LocalFuture<'a, Result<Planned, TrainError>> {
    Box::pin(async move {
        let Some(planning) = &options.planning else {
            return Ok(Planned::default());
        };
        let mut events = Vec::new();
        let store = timing::store(options);
        let prepared = prepare_run(
            config,
            task,
            data,
            planning,
            &options.loader,
            store,
            &mut events,
        )
        .await?;
        Ok(Planned {
            prepared: Some(prepared),
            events,
        })
    })
}

/// Times a fresh run leaves out examples that no plan can hold and plans again: the length
/// model refitted at the shorter longest may still find the new longest too long.
const LEAVE_OUT_ROUNDS: usize = 3;

/// The task fitted to `data` and a fresh run's plan ([`prepare_run`], its events to
/// `sink`). With bad files left out rather than failed on, the examples longer than any
/// plan within the budget can hold are left out too (listed with the skipped files;
/// `PlanError::DoesNotFit` says how long an example one step can hold is), and the task is
/// fitted and planned again without them; otherwise the error names the longest.
pub(super) fn fit_and_plan<'a, T: RunTask>(
    config: &'a mut TrainConfig,
    task: T,
    data: &'a mut T::Data,
    planning: &'a Planning,
    loader: &'a LoaderOptions,
    store: Option<&'a Store>,
    sink: &'a mut dyn EventSink,
) -> LocalFuture<'a, Result<(T, Prepared), TrainError>> {
    Box::pin(async move {
        let mut task = task.for_data(data)?;
        let mut rounds = 0;
        loop {
            let prepared = match prepare_run(config, &task, data, planning, loader, store, sink)
                .await
            {
                // One crop too long: the longest that fits, measured.
                Err(TrainError::CropDoesNotFit {
                    sample_len,
                    longest: Some(guess),
                    error,
                }) => {
                    let longest = longest_crop(config, &task, data, planning, loader, guess).await;
                    return Err(TrainError::CropDoesNotFit {
                        sample_len,
                        longest,
                        error,
                    });
                }
                other => other,
            };
            let fitting = match &prepared {
                Err(TrainError::LongestDoesNotFit {
                    error:
                        PlanningError::Plan(PlanError::DoesNotFit {
                            longest_fitting: Some(frames),
                            ..
                        }),
                    ..
                }) if loader.on_bad_file == OnBadFile::Skip && rounds < LEAVE_OUT_ROUNDS => *frames,
                _ => return prepared.map(|prepared| (task, prepared)),
            };
            rounds += 1;
            // With every train example left out there is nothing to train: the error, which
            // names the longest and what the budget leaves, says more.
            let left_out = data.leave_out_longer_than(fitting);
            if left_out == 0 || data.train_examples() == 0 {
                return prepared.map(|prepared| (task, prepared));
            }
            // The dataset report lists each one with the skipped files; no warning on top.
            tracing::info!(
                left_out,
                longest = fitting,
                "examples longer than any plan can hold are left out"
            );
            task = task.for_data(data)?;
        }
    })
}

/// Rounds of measuring a shorter crop for one that fits: a guess from a crop's per-example
/// memory errs long where the FFT's size (a power of two) does not shrink with the crop.
const CROP_ROUNDS: usize = 5;

/// A crop that fits, from `guess` down: each guess planned (calibrated and dry-run at its
/// length) as a run of it would be; the next from that plan's own per-example memory, and
/// at least a tenth shorter. `None` when no guess fits within [`CROP_ROUNDS`]. The crop
/// found is within about a tenth of the longest.
fn longest_crop<'a, T: RunTask>(
    config: &'a TrainConfig,
    task: &'a T,
    data: &'a T::Data,
    planning: &'a Planning,
    loader: &'a LoaderOptions,
    guess: usize,
) -> LocalFuture<'a, Option<usize>> {
    Box::pin(async move {
        let multiple = task.crop()?.multiple.max(1);
        let mut guess = guess;
        for _ in 0..CROP_ROUNDS {
            let shorter = task.at_crop(guess)?;
            let mut config = config.clone();
            let mut quiet = |_: Event| {};
            let planned = prepare_run(
                &mut config,
                &shorter,
                data,
                planning,
                loader,
                None,
                &mut quiet,
            );
            match planned.await {
                Ok(_) => return Some(guess),
                Err(TrainError::CropDoesNotFit {
                    longest: Some(next),
                    ..
                }) => guess = next.min(guess * 9 / 10) / multiple * multiple,
                Err(_) => return None,
            }
            if guess == 0 {
                return None;
            }
        }
        None
    })
}

/// Plans with what the run will hold beside its steps, and gives `config` the plan's split.
pub(super) fn prepare_run<'a, T: RunTask>(
    config: &'a mut TrainConfig,
    task: &'a T,
    data: &'a T::Data,
    planning: &'a Planning,
    loader: &'a LoaderOptions,
    store: Option<&'a Store>,
    sink: &'a mut dyn EventSink,
) -> LocalFuture<'a, Result<Prepared, TrainError>> {
    Box::pin(async move {
        let plain = config.target().device()?;
        let share = RunShare {
            resident_bytes: MemoryMeter::new(config.backend, &plain)
                .sample()
                .allocated_bytes,
            read_ahead: counted(config, data.read_ahead(config, loader)),
            held_bytes: super::WeightAverage::bytes(config.ema, task.parameters()),
        };
        let lengths = data.lengths();
        let saved = config.length_buckets.clone();
        let mut planning = *planning;
        // A run packs by the timings it was planned with: a resumed run's own (saved with
        // its config), else those an earlier run of this build measured here.
        let kept = timing::key(config, task, &plain, &lengths, store);
        if planning.length_timing.is_none() {
            planning.length_timing = config
                .length_buckets
                .as_ref()
                .and_then(|buckets| buckets.seconds)
                .or_else(|| kept.as_ref().and_then(timing::Kept::read));
        }
        let prepared =
            crate::plan::prepare_by_length(config.target(), task, &planning, share, &lengths, sink)
                .await
                .map_err(|error| match (&error, data.longest(), task.crop()) {
                    // A plan by length that cannot hold one longest example names it.
                    (PlanningError::Plan(PlanError::DoesNotFit { .. }), Some(example), _)
                        if !lengths.is_empty() =>
                    {
                        TrainError::LongestDoesNotFit { example, error }
                    }
                    // A crop too long for one a micro-batch: the longest that fits.
                    (
                        PlanningError::Plan(PlanError::DoesNotFit {
                            needed,
                            per_example,
                            available,
                            ..
                        }),
                        _,
                        Some(crop),
                    ) => TrainError::CropDoesNotFit {
                        sample_len: crop.len,
                        longest: crop.longest_fitting(*needed, *per_example, *available),
                        error,
                    },
                    _ => error.into(),
                })?;
        let plan = &prepared.plan;
        if let (None, Some(kept), Some(seconds)) = (
            planning.length_timing,
            &kept,
            plan.lengths.as_ref().and_then(|l| l.buckets.seconds),
        ) {
            kept.write(&seconds);
        }
        config.set_split(plan.split());
        let phases: Vec<usize> = plan.phases.iter().map(|p| p.micro_batch).collect();
        config.set_phase_micro_batches(&phases);
        config.length_buckets = plan.lengths.as_ref().map(|l| l.buckets.clone());
        // A resumed run keeps the buckets it was packing by where the new plan allows them,
        // as it keeps its saved split: planned again under another budget, the caps moved,
        // and so did the micro-batches of the steps left (the run's config event says which
        // buckets it packs by).
        if let (Some(saved), Some(planned)) = (saved, &config.length_buckets)
            && saved != *planned
            && saved.within(planned)
        {
            tracing::info!(
                saved = %saved.words(),
                "a plan by length allows the run's saved buckets: kept"
            );
            config.length_buckets = Some(saved);
        }
        config.checkpointing = plan.checkpointing;
        config.precision = plan.precision;
        Ok(prepared)
    })
}

/// The plan a fresh run of task `task` on `config` would train with, made as
/// [`super::TaskTrainer::new`] makes it (the dataset opened and checked first, so its memory
/// and the read-ahead count), without training. Reports the `dry_run` and `plan` events.
pub fn plan_task<'a, T: RunTask>(
    mut config: TrainConfig,
    task: T,
    planning: &'a Planning,
    loader: &'a LoaderOptions,
    sink: &'a mut dyn EventSink,
) -> LocalFuture<'a, Result<Prepared, TrainError>> {
    Box::pin(async move {
        config.validate()?;
        let (task, mut data) = task.open(&config, loader)?;
        data.check()?;
        fit_and_plan(&mut config, task, &mut data, planning, loader, None, sink)
            .await
            .map(|(_, prepared)| prepared)
    })
}

/// Planning for a resumed run: it keeps its effective batch and patches per spectrogram
/// (they decide what each step reads), and first tries its saved split, unless the user
/// named another; only when that does not fit is the split planned afresh.
pub(super) fn replan_resumed<'a, T: RunTask>(
    config: &'a mut TrainConfig,
    task: &'a T,
    data: &'a T::Data,
    options: &'a RunOptions,
) -> LocalFuture<'a, Result<Planned, TrainError>> {
    Box::pin(async move {
        let Some(asked) = options.planning else {
            return Ok(Planned::default());
        };
        let mut keep = asked;
        keep.effective_batch = config.effective_batch();
        keep.fixed.n_patches = Some(config.n_patches);
        let mut saved = keep;
        // A run split by length is planned by length again unless a count is named.
        saved.fixed.micro_batch = asked
            .fixed
            .micro_batch
            .or((config.length_buckets.is_none()).then_some(config.micro_batch));
        // A run whose phases were cut apart tries each phase's own cut again.
        if asked.fixed.micro_batch.is_none() {
            saved.fixed.phase_micro_batches = PhasePins::of(&config.phase_micro_batches);
        }
        saved.fixed.checkpointing = asked.fixed.checkpointing.or(Some(config.checkpointing));
        saved.fixed.precision = asked.fixed.precision.or(Some(config.precision));
        let with = |planning| RunOptions {
            planning: Some(planning),
            loader: options.loader.clone(),
            #[cfg(not(target_arch = "wasm32"))]
            timings: options.timings.clone(),
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
    })
}
