//! Planning by length, for examples of every length (utterances): what a step holds grows
//! with examples x frames and, through attention, with frames squared, so one count per
//! micro-batch either wastes most of the budget on short examples or runs out on long ones.
//! The planner measures steps at several lengths, fits the memory (and time) of a micro-batch
//! of `n` examples `t` frames long as `a + n (d + b t + c t^2)` ([`LengthModel`]), and gives each length bucket of
//! the run's own lengths the most examples that fit ([`LengthBuckets`]). The dry-run runs the
//! longest bucket and the one of most padded frames; each becomes a point of the fit.
//!
//! The effective batch stays a number of examples per optimizer step, held exactly: each
//! step's examples are packed into as many micro-batches as their lengths need, and each
//! micro-batch's loss is weighted by its share of the step.

use super::calibrate::{self, CalibrationError, MEMORY_MARGIN, measure_accumulating_step};
use super::search::PlanError;
use super::{Calibration, MAX_DRY_RUNS, PlanRequest, Planning, PlanningError, Prepared, RunShare};
use crate::backend::Target;
use crate::events::planned::{LengthPlan, Plan, StepMeasurement};
use crate::events::{DryRunReport, Event, EventSink};
use crate::lengths::{LengthBucket, LengthBuckets};

pub use super::length_model::{LengthModel, PREDICTED_EPOCHS};
pub use crate::lengths::LengthCost;
use crate::precision::Precision;
use crate::task::TrainingTask;

/// Steps measured at lengths: one and two examples of the longest (the fixed part and the
/// per-example part there), two at half, four at a quarter and eight at an eighth of it
/// (the curve, and what an example costs whatever its length), and sixteen at a sixteenth:
/// a micro-batch as wide as a step of short examples, which the narrower points
/// under-predicted by up to a fifth (bench/speech_inrun at a5ed5fe). Each holds about as
/// many frames as one example of the longest, so none needs much more memory than it.
fn calibration_points(longest: usize) -> [(usize, usize); 6] {
    [
        (1, longest),
        (2, longest),
        (2, longest.div_ceil(2)),
        (4, longest.div_ceil(4)),
        (8, longest.div_ceil(8)),
        (16, longest.div_ceil(16)),
    ]
}

async fn measure_at<T: TrainingTask>(
    target: Target,
    task: &T,
    examples: usize,
    frames: usize,
    micro_batches: usize,
) -> Result<StepMeasurement, CalibrationError> {
    let at = task.at_length(frames).unwrap_or_else(|| task.clone());
    let mut m =
        measure_accumulating_step(target, &at, examples, micro_batches, Precision::F32, false)
            .await?;
    m.frames = Some(frames);
    Ok(m)
}

/// Steps of `task` measured at lengths up to `longest` frames: what its model by length is
/// fitted to ([`LengthModel::fit`]).
pub async fn calibrate<T: TrainingTask>(
    target: Target,
    task: &T,
    longest: usize,
) -> Result<Vec<StepMeasurement>, CalibrationError> {
    // The first step in a process sets up what stays for its life; not the step's cost.
    measure_at(target, task, 1, longest.div_ceil(4), 1).await?;
    let mut measurements = Vec::new();
    for (examples, frames) in calibration_points(longest) {
        measurements.push(measure_at(target, task, examples, frames, 1).await?);
    }
    Ok(measurements)
}

/// Whether `request` leaves the split to a length plan: micro-batch and accumulation open,
/// f32 without checkpointing (what planning by length measures). Otherwise the run is a
/// fixed count per micro-batch, planned at its longest example.
pub fn applies(request: &PlanRequest) -> bool {
    let f = &request.fixed;
    f.micro_batch.is_none()
        && f.accumulation.is_none()
        && f.checkpointing != Some(true)
        && f.precision.is_none_or(|p| p == Precision::F32)
}

/// Plans `task` by length over examples of `lengths` (train and validation); `request`'s
/// resident bytes are raised to what is in use once calibrated. Calibrates at several
/// lengths, buckets, and dry-runs the longest bucket and the widest until both
/// fit. Reports a `dry_run` event per measured step and the `plan` event.
pub async fn prepare<T: TrainingTask>(
    target: Target,
    task: &T,
    planning: &Planning,
    request: &PlanRequest,
    share: RunShare,
    lengths: &[usize],
    sink: &mut dyn EventSink,
) -> Result<Prepared, PlanningError> {
    let longest = lengths.iter().copied().max().unwrap_or(1);
    let effective_batch = request.effective_batch.max(1);
    // What a step of several micro-batches holds beside one micro-batch's step: the summed
    // gradients and, for a step cut by gradient caching, its cache.
    let gradient_bytes = task.parameters() * 4 + task.cache_bytes(effective_batch);
    let mut measurements = calibrate(target, task, longest).await?;
    // After calibrating, as `super::prepare` reads it: what the process set up in its
    // first steps is in use for its life, and the measured steps start from it.
    let resident = request.resident_bytes.max(super::in_use_now(target));
    let beside = resident + share.read_ahead.bytes(effective_batch);
    let available = request.budget_bytes.saturating_sub(beside);
    let mut last = String::from("the buckets changed with every step measured");
    // Padded frames a micro-batch may hold once the device refused a bucket whatever the
    // budget (a tensor past its largest buffer): half of the refused bucket's.
    let mut most_frames: Option<usize> = None;
    // A plan is taken once its longest and widest buckets were measured and the model,
    // refitted to those steps, still gives it. A refusal measured nothing, so it does not
    // use up a try.
    let (mut attempt, mut refusals) = (0, 0);
    'tries: while attempt < MAX_DRY_RUNS + 1 + refusals {
        attempt += 1;
        let model = LengthModel::fit(&measurements, gradient_bytes, MEMORY_MARGIN)
            .ok_or_else(|| PlanningError::DryRunsFailed("no step was measured".into()))?;
        let mut buckets = model
            .buckets(lengths, effective_batch, available)
            .map_err(|needed| PlanError::DoesNotFit {
                smallest: format!("one example of the longest, {longest} frames"),
                needed,
                available,
                budget: request.budget_bytes,
                resident,
                longest_fitting: model.longest_alone(available, effective_batch > 1, longest),
            })?;
        if let Some(most) = most_frames {
            for bucket in &mut buckets.buckets {
                bucket.examples = bucket.examples.min(most / bucket.frames);
            }
            if buckets.buckets.iter().any(|b| b.examples == 0) {
                return Err(PlanningError::DryRunsFailed(last));
            }
        }
        let accumulating = |b: &LengthBucket| b.examples < effective_batch;
        let mut checks: Vec<LengthBucket> = buckets.buckets.last().copied().into_iter().collect();
        checks.extend(
            buckets
                .widest()
                .filter(|w| Some(w) != buckets.buckets.last()),
        );
        checks.retain(|b| {
            !measurements.iter().any(|m| {
                m.frames == Some(b.frames)
                    && m.patches == b.examples
                    && (m.micro_batches > 1) == accumulating(b)
            })
        });
        if checks.is_empty() {
            return Ok(accept(
                target,
                task,
                planning,
                effective_batch,
                buckets,
                model,
                measurements,
                (resident, beside),
                lengths,
                sink,
            ));
        }
        if attempt > MAX_DRY_RUNS + refusals {
            break;
        }
        for bucket in checks {
            let micro_batches = if accumulating(&bucket) { 2 } else { 1 };
            let predicted =
                beside + model.step_bytes(bucket.examples, bucket.frames, accumulating(&bucket));
            let report = |measured_peak_bytes, fits, refused| DryRunReport {
                attempt,
                micro_batch: bucket.examples,
                n_patches: 1,
                accumulation: effective_batch.div_ceil(bucket.examples),
                checkpointing: false,
                precision: Precision::F32,
                predicted_peak_bytes: predicted,
                measured_peak_bytes,
                budget_bytes: request.budget_bytes,
                fits,
                frames: Some(bucket.frames),
                refused,
                phases: Vec::new(),
            };
            let m = match measure_at(target, task, bucket.examples, bucket.frames, micro_batches)
                .await
            {
                Ok(m) => m,
                Err(CalibrationError::Step(error)) => {
                    let Some(refused) = error.device_refusal() else {
                        return Err(CalibrationError::Step(error).into());
                    };
                    sink.emit(Event::DryRun(report(0, false, Some(refused.clone()))));
                    last = format!(
                        "{} examples of {} frames, refused by the device: {refused}",
                        bucket.examples, bucket.frames
                    );
                    most_frames = Some(bucket.examples * bucket.frames / 2);
                    refusals += 1;
                    continue 'tries;
                }
                Err(other) => return Err(other.into()),
            };
            let measured_peak = beside + m.peak_bytes;
            let fits = measured_peak <= request.budget_bytes;
            sink.emit(Event::DryRun(report(measured_peak, fits, None)));
            if !fits {
                last = format!(
                    "{} examples of {} frames, measured {} of {}",
                    bucket.examples,
                    bucket.frames,
                    crate::size::human(measured_peak),
                    crate::size::human(request.budget_bytes)
                );
            }
            measurements.push(m);
        }
    }
    Err(PlanningError::DryRunsFailed(last))
}

/// The plan for `buckets`, with its calibration: the memory model at the longest length
/// (what a fixed count would be planned by, and what the breakdown reads) and the model by
/// length.
#[allow(clippy::too_many_arguments)]
fn accept<T: TrainingTask>(
    target: Target,
    task: &T,
    planning: &Planning,
    effective_batch: usize,
    buckets: LengthBuckets,
    model: LengthModel,
    measurements: Vec<StepMeasurement>,
    (resident, beside): (u64, u64),
    lengths: &[usize],
    sink: &mut dyn EventSink,
) -> Prepared {
    let longest = buckets.buckets.last().map_or(1, |b| b.frames);
    let at_longest: Vec<StepMeasurement> = measurements
        .iter()
        .filter(|m| m.frames == Some(longest) && m.micro_batches == 1)
        .cloned()
        .collect();
    let mut calibration: Calibration =
        calibrate::fit(target.backend, at_longest, model.accumulation_bytes);
    calibration.measurements = measurements;
    calibration.lengths = Some(model);
    let predicted = model.epochs(&buckets, lengths, effective_batch, PREDICTED_EPOCHS);
    let padding = predicted.padding;
    let most_bytes = beside + model.peak(&buckets, effective_batch);
    let cap = buckets.longest_cap();
    let shortest = buckets.buckets.first().copied();
    let plan = Plan {
        micro_batch: cap,
        n_patches: 1,
        accumulation: effective_batch.div_ceil(cap),
        checkpointing: false,
        precision: Precision::F32,
        effective_batch,
        predicted_peak_bytes: beside + predicted.step_bytes,
        budget_bytes: planning.budget_bytes,
        predicted_patches_per_s: predicted.examples_per_s,
        reason: format!(
            "by length: from {} of the shortest to {} of the longest ({longest} frames) per \
             micro-batch, {effective_batch} per step; {:.0}% padding predicted",
            shortest.map_or(cap, |b| b.examples),
            cap,
            padding.share() * 100.0
        ),
        lengths: Some(LengthPlan {
            buckets,
            predicted_padding: padding.share(),
            most_bytes,
            beside_bytes: beside,
        }),
        phases: Vec::new(),
    };
    let breakdown = super::breakdown_of(task, &plan, resident, &calibration);
    sink.emit(Event::Plan(super::report(&plan, breakdown, &calibration)));
    Prepared {
        plan,
        breakdown,
        calibration,
    }
}
