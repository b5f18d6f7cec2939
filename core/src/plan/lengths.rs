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

use super::calibrate::{self, CalibrationError, MEMORY_MARGIN};
use super::search::PlanError;
use super::{Calibration, MAX_DRY_RUNS, PlanRequest, Planning, PlanningError, Prepared, RunShare};
use crate::backend::Target;
use crate::events::planned::{LengthPlan, Plan, StepMeasurement};
use crate::events::{DryRunReport, Event, EventSink};
use crate::lengths::{LengthBucket, LengthBuckets};
use crate::readback::LocalFuture;

pub use super::length_model::{LengthModel, PREDICTED_EPOCHS};
pub use crate::lengths::LengthCost;
use crate::precision::Precision;
use crate::task::TrainingTask;

mod measuring;
pub use measuring::{calibrate, held_input_bytes_per_frame, scratch_threads};
use measuring::{measure_at, measured_step};

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
pub fn prepare<'a, T: TrainingTask>(
    target: Target,
    task: &'a T,
    planning: &'a Planning,
    request: &'a PlanRequest,
    share: RunShare,
    lengths: &'a [usize],
    sink: &'a mut dyn EventSink,
) -> LocalFuture<'a, Result<Prepared, PlanningError>> {
    Box::pin(async move {
        let longest = lengths.iter().copied().max().unwrap_or(1);
        let effective_batch = request.effective_batch.max(1);
        // What a step of several micro-batches holds beside one micro-batch's step: the summed
        // gradients and, for a step cut by gradient caching, its cache.
        let gradient_bytes = task.parameters() * 4 + task.cache_bytes(effective_batch);
        let mut measurements = calibrate(target, task, longest, effective_batch).await?;
        let threads = scratch_threads(target);
        let held_inputs = held_input_bytes_per_frame(target, task, longest);
        let holds_inputs = held_inputs > 0.0;
        // After calibrating, as `super::prepare` reads it: what the process set up in its
        // first steps is in use for its life, and the measured steps start from it.
        let resident = share.resident(super::in_use_now(target));
        let beside = resident + share.read_ahead.bytes(effective_batch);
        let available = request.budget_bytes.saturating_sub(beside);
        let mut last = String::from("the buckets changed with every step measured");
        // Padded frames a micro-batch may hold once the device refused a bucket whatever the
        // budget (a tensor past its largest buffer): half of the refused bucket's.
        let mut most_frames: Option<usize> = None;
        // Each shape a dry-run measured over the budget, as (frames, the most examples a
        // micro-batch of at least those frames may hold after it). A refitted model may still
        // give that shape, as the paged model did before 40d345a (seed 003's 16 x 2,947 on an
        // H200: 14 pages of 69 MiB predicted, 15 of 68 taken, 1,029 MiB of 1,024): whatever
        // the model, a shape measured over is never planned again, nor a longer or wider one.
        let mut over: Vec<(usize, usize)> = Vec::new();
        // Every dry-run, for the error when none passes.
        let mut tried: Vec<String> = Vec::new();
        // A plan is taken once its longest and widest buckets were measured and the model,
        // refitted to those steps, still gives it. A refusal measured nothing, so it does not
        // use up a try.
        let (mut attempt, mut refusals, mut landings) = (0, 0, 0);
        // A dry-run over the budget cuts the shapes past it for good (`over`), so a try that
        // ends over still narrowed the plan: up to two more tries for that.
        let extra = |over: &[(usize, usize)]| over.len().min(OVER_TRIES);
        'tries: while attempt < MAX_DRY_RUNS + 1 + refusals + landings + extra(&over) {
            attempt += 1;
            let mut model = LengthModel::fit(
                &measurements,
                gradient_bytes,
                MEMORY_MARGIN,
                threads,
                held_inputs,
            )
            .ok_or_else(|| PlanningError::DryRunsFailed("no step was measured".into()))?;
            if let Some(timing) = planning.length_timing {
                model.seconds = timing;
            }
            tracing::debug!(attempt, ?model, ?measurements, "length model fitted");
            let mut buckets =
                model
                    .buckets(lengths, effective_batch, available)
                    .map_err(|needed| PlanError::DoesNotFit {
                        smallest: format!("one example of the longest, {longest} frames"),
                        needed,
                        available,
                        budget: request.budget_bytes,
                        resident,
                        longest_fitting: model.longest_alone(
                            available,
                            effective_batch > 1,
                            longest,
                        ),
                        per_example: 0,
                    })?;
            if !within_what_was_measured(&mut buckets, most_frames, &over) {
                return Err(PlanningError::DryRunsFailed(tried_so_far(&last, &tried)));
            }
            let accumulating = |b: &LengthBucket| b.examples < effective_batch;
            let mut checks: Vec<LengthBucket> =
                buckets.buckets.last().copied().into_iter().collect();
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
            if attempt > MAX_DRY_RUNS + refusals + landings + extra(&over) {
                break;
            }
            // Before a bucket far from every step measured at its length is dry-run, a
            // step of three quarters of it: learnt, it turns the dry-run's prediction into a
            // short step from a measurement. Measuring no step taken for the plan, it uses
            // up no try.
            let landing = checks
                .iter()
                .filter(|_| landings < MAX_LANDINGS)
                .find_map(|b| near_examples(&measurements, b).map(|near| (near, b.frames, b)));
            if let Some((near, frames, bucket)) = landing {
                // As the bucket's dry-run will: two micro-batches where its step accumulates.
                let step = if accumulating(bucket) {
                    measured_step(near, effective_batch, holds_inputs)
                } else {
                    near
                };
                match measure_at(target, task, near, frames, step).await {
                    Ok(m) => measurements.push(m),
                    // A step the device refuses is left to the dry-run, which halves.
                    Err(CalibrationError::Step(error)) if error.device_refusal().is_some() => {}
                    Err(other) => return Err(other.into()),
                }
                landings += 1;
                continue 'tries;
            }
            for bucket in checks {
                let step = measured_step(bucket.examples, effective_batch, holds_inputs);
                let sizes: Vec<usize> = [bucket.examples, step - bucket.examples]
                    .into_iter()
                    .filter(|&size| size > 0)
                    .collect();
                let predicted = beside + model.packed_bytes(&vec![bucket.frames; step], &sizes);
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
                let m = match measure_at(target, task, bucket.examples, bucket.frames, step).await {
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
                tried.push(format!(
                    "{} x {}: {} / {}",
                    bucket.examples,
                    bucket.frames,
                    crate::size::human(predicted),
                    crate::size::human(measured_peak)
                ));
                if !fits {
                    last = format!(
                        "{} examples of {} frames, measured {} of {}",
                        bucket.examples,
                        bucket.frames,
                        crate::size::human(measured_peak),
                        crate::size::human(request.budget_bytes)
                    );
                    // On a paged pool, refitted to this step, a page fewer than it took.
                    let by_pages = LengthModel::fit(
                        &[measurements.as_slice(), std::slice::from_ref(&m)].concat(),
                        gradient_bytes,
                        MEMORY_MARGIN,
                        threads,
                        held_inputs,
                    )
                    .and_then(|model| model.most_after_over(&m, available));
                    let most = fewer_after_over(bucket.examples, m.peak_bytes, available);
                    over.push((bucket.frames, most.min(by_pages.unwrap_or(most))));
                }
                measurements.push(m);
            }
        }
        Err(PlanningError::DryRunsFailed(tried_so_far(&last, &tried)))
    })
}

/// How far past the examples of every step measured at its length a bucket may be before
/// a step nearer it is measured, and the share of the bucket that step takes (as
/// `super::landing` does for plans of fixed patches).
const FAR: usize = 2;
const NEAR: (usize, usize) = (3, 4);

/// Steps near a bucket a plan measures at most (each refit may move the buckets).
const MAX_LANDINGS: usize = 3;

/// The examples of a step near `bucket` to measure before its dry-run, where every step
/// measured at its length holds under `1 / FAR` of its examples (calibration measures
/// eighth and sixteenth lengths, so a bucket of short examples is a long extrapolation:
/// speech-clap's first dry-run of 128 x 271 frames was predicted at 255.6 MiB and measured
/// 288.4, over a 256 MiB budget); `None` where one is near or the bucket is two examples
/// or fewer (the calibration's own sizes).
fn near_examples(measurements: &[StepMeasurement], bucket: &LengthBucket) -> Option<usize> {
    let near = bucket.examples * NEAR.0 / NEAR.1;
    let measured_near = measurements
        .iter()
        .any(|m| m.frames == Some(bucket.frames) && m.patches * FAR >= bucket.examples);
    (bucket.examples > 2 && near >= 2 && !measured_near).then_some(near)
}

/// Tries beyond [`MAX_DRY_RUNS`] that dry-runs over the budget may add, one each: the tiny
/// recogniser at 300 MiB on lavapipe measured 5 then 4 of the longest over and had no try
/// left for the 3 that fitted.
const OVER_TRIES: usize = 2;

/// Cuts each bucket to what the dry-runs allow: at most `most_frames` padded frames (once the
/// device refused a bucket), and at most the examples `over` leaves at its length or a
/// shorter one measured over the budget. False when a bucket is left no example.
fn within_what_was_measured(
    buckets: &mut LengthBuckets,
    most_frames: Option<usize>,
    over: &[(usize, usize)],
) -> bool {
    for bucket in &mut buckets.buckets {
        if let Some(most) = most_frames {
            bucket.examples = bucket.examples.min(most / bucket.frames);
        }
        for &(frames, most) in over {
            if bucket.frames >= frames {
                bucket.examples = bucket.examples.min(most);
            }
        }
    }
    buckets.buckets.iter().all(|b| b.examples > 0)
}

/// The most examples a micro-batch may hold after `examples` measured `measured` bytes over
/// the `available`: fewer, and as many fewer as the excess is a share of the step (a
/// model a page or two under its measurement would otherwise take a dry-run per example).
fn fewer_after_over(examples: usize, measured: u64, available: u64) -> usize {
    let scaled = (examples as f64 * available as f64 / measured.max(1) as f64).floor() as usize;
    scaled.min(examples.saturating_sub(1))
}

/// `last` (why the last dry-run did not pass) and every dry-run, predicted against measured.
fn tried_so_far(last: &str, tried: &[String]) -> String {
    if tried.is_empty() {
        return last.to_string();
    }
    format!(
        "{last} (the dry-runs, examples x frames: predicted / measured: {})",
        tried.join(", ")
    )
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
    calibration.lengths = Some(Box::new(model.clone()));
    let predicted = model.epochs(&buckets, lengths, effective_batch, PREDICTED_EPOCHS);
    let padding = predicted.padding;
    let most_bytes = beside + model.peak(&buckets, effective_batch, lengths);
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

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    /// Seed 003's contrastive model planned at 1 GiB for 128 pairs on an H200 (wgpu,
    /// bench/gpu_session's clap part at 3cda957): calibration's six steps, then three
    /// tries of the longest and widest buckets, the last two 1,029 MiB on the pool.
    fn h200_steps() -> Vec<StepMeasurement> {
        serde_json::from_str(include_str!("testdata/h200_speech_clap_1gib.json"))
            .expect("the measured steps parse")
    }

    /// The run's lengths at the buckets' resolution: 121 to 2,947 frames.
    fn lengths() -> Vec<usize> {
        (121..2947).step_by(7).chain([2947]).collect()
    }

    const GRADIENTS: u64 = 1_056_604 + 524_288;

    #[test]
    fn the_h200s_steps_are_predicted_at_or_above_what_the_pool_took() {
        let steps = h200_steps();
        let model = LengthModel::fit(&steps, GRADIENTS, 0.02, 1, 0.0).unwrap();
        // The steps in the largest pages, where a run's steps are carved (the paged model's
        // rule): the third try's two.
        for m in &steps[10..] {
            let (n, t) = (m.patches, m.frames.unwrap());
            let predicted = model.step_bytes(n, t, m.micro_batches > 1);
            assert!(
                predicted >= m.peak_bytes,
                "{n} x {t}: {predicted} predicted, {} taken",
                m.peak_bytes
            );
        }
        // 16 of the longest took 1,029 MiB: 15 is the most a 1 GiB plan holds.
        let buckets = model.buckets(&lengths(), 128, 1024 * MIB).unwrap();
        assert_eq!(buckets.buckets.last().map(|b| b.examples), Some(15));
    }

    /// Seed 003's calibration on an H200, 1 to 16 examples at lengths down to a sixteenth: a
    /// bucket of 128 at 271 frames is measured at 96 first, the longest bucket at two
    /// examples of its length (as calibrated) is not, nor is one once a step near it was.
    #[test]
    fn a_bucket_far_past_the_steps_measured_at_its_length_is_measured_near_first() {
        let mut steps = h200_steps()[..6].to_vec();
        let bucket = |examples, frames| LengthBucket { frames, examples };
        assert_eq!(near_examples(&steps, &bucket(128, 271)), Some(96));
        assert_eq!(near_examples(&steps, &bucket(4, 2947)), None);
        assert_eq!(near_examples(&steps, &bucket(6, 2947)), Some(4));
        assert_eq!(near_examples(&steps, &bucket(2, 271)), None);
        let mut near = steps[0].clone();
        (near.patches, near.frames) = (96, Some(271));
        steps.push(near);
        assert_eq!(near_examples(&steps, &bucket(128, 271)), None);
        assert_eq!(near_examples(&steps, &bucket(200, 271)), Some(150));
    }

    #[test]
    fn a_shape_measured_over_the_budget_is_never_planned_again() {
        let steps = h200_steps();
        let over = &steps[10];
        assert_eq!((over.patches, over.frames), (16, Some(2947)));
        let available = 1024 * MIB;
        assert!(over.peak_bytes > available);
        // Fitted to the steps before it, the model gave that shape.
        let before = LengthModel::fit(&steps[..10], GRADIENTS, 0.02, 1, 0.0).unwrap();
        let mut buckets = before.buckets(&lengths(), 128, available).unwrap();
        let cap = buckets.buckets.last().map_or(0, |b| b.examples);
        assert!(cap >= 16, "{cap}");
        let cut = fewer_after_over(16, over.peak_bytes, available);
        assert_eq!(cut, 15);
        assert!(within_what_was_measured(&mut buckets, None, &[(2947, cut)]));
        let longest = buckets.buckets.last().unwrap();
        assert_eq!((longest.frames, longest.examples), (2947, 15));
        // Shorter buckets keep what the model gives them.
        assert!(buckets.buckets[0].examples > 15);
    }

    /// Seed 003's 128 pairs at 1 GiB, the H200's steps again on lavapipe at 9e5ae2b (the
    /// same pool, the same pages): after 16 x 2,947 and 128 x 630 took 15 pages of 68 MiB
    /// where 14 fit, the tries went 124, 123 and 122 of 630 frames, each 15 pages again, and
    /// no plan was found. The cut after a step over a paged pool sheds that page at once.
    #[test]
    fn a_step_over_a_paged_pool_is_cut_a_page_at_once() {
        let steps = h200_steps();
        let available = 1024 * MIB;
        let model = LengthModel::fit(&steps, GRADIENTS, 0.02, 1, 0.0).unwrap();
        for (over, most) in [(&steps[10], 14), (&steps[11], 119)] {
            let pool = over.pages.unwrap();
            assert_eq!((pool.pages, pool.page_bytes), (15, 68 * MIB));
            let cut = model.most_after_over(over, available).unwrap();
            // At most the share of the examples that 14 of the 15 pages hold, and not far
            // below it (the fixed part of what is in use does not shrink with examples).
            assert!(
                (most - 3..=most).contains(&cut),
                "{} x {:?}: {cut}",
                over.patches,
                over.frames
            );
            // Where the excess alone would have cut one example (fewer_after_over).
            assert_eq!(
                fewer_after_over(over.patches, over.peak_bytes, available),
                over.patches - 1
            );
        }
        // Off a paged pool there is no such cut.
        let mut flat = steps[11].clone();
        flat.pages = None;
        let all: Vec<StepMeasurement> = steps
            .iter()
            .cloned()
            .map(|mut m| {
                m.pages = None;
                m
            })
            .collect();
        let cpu = LengthModel::fit(&all, GRADIENTS, 0.02, 1, 0.0).unwrap();
        assert_eq!(cpu.most_after_over(&flat, available), None);
    }

    #[test]
    fn a_step_far_over_takes_as_many_examples_fewer_as_its_excess() {
        // 68 of the longest measured 4.27 GiB of 4 GiB: 63, not 67 and three more tries.
        let measured = (4.27 * 1024.0 * MIB as f64) as u64;
        assert_eq!(fewer_after_over(68, measured, 4096 * MIB), 63);
        // Always at least one fewer, and none once one example was over.
        assert_eq!(fewer_after_over(100, 4096 * MIB + 1, 4096 * MIB), 99);
        assert_eq!(fewer_after_over(1, 2 * MIB, MIB), 0);
    }

    #[test]
    fn a_bucket_left_no_example_is_no_plan() {
        let mut buckets = LengthBuckets {
            buckets: vec![
                LengthBucket {
                    frames: 100,
                    examples: 8,
                },
                LengthBucket {
                    frames: 400,
                    examples: 2,
                },
            ],
            seconds: None,
        };
        assert!(within_what_was_measured(&mut buckets, Some(500), &[]));
        assert_eq!(buckets.buckets[0].examples, 5);
        assert!(!within_what_was_measured(&mut buckets, None, &[(300, 0)]));
    }
}
