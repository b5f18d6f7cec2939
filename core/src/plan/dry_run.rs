//! A plan checked with real steps: calibrate, search, then a dry-run at the plan's size,
//! each dry-run a new point of the memory model until a plan's own size was measured and
//! fits.

use super::calibrate::{Calibration, CalibrationError, Cut, StepMeasurement, learn};
use super::{
    DeviceCap, MAX_DRY_RUNS, Plan, Planning, PlanningError, Prepared, RunShare, breakdown_of,
    calibrate, in_use_now, landing, measure_cut_step, report, request_for, search_phases,
};
use crate::backend::Target;
use crate::events::{DryRunReport, Event, EventSink, PhaseDryRun};
use crate::readback::LocalFuture;
use crate::task::TrainingTask;

/// Calibrates on the device, searches, and checks the plan with a real step at its size.
/// Every dry-run becomes a point of the memory model, so the next search reads the plan's
/// size from a measurement there; a plan is taken once its own size was measured and it
/// still fits. Reports a `dry_run` event per measured step and the final `plan` event.
pub fn prepare<'a, T: TrainingTask>(
    target: Target,
    task: &'a T,
    planning: &'a Planning,
    share: RunShare,
    sink: &'a mut dyn EventSink,
) -> LocalFuture<'a, Result<Prepared, PlanningError>> {
    Box::pin(async move {
        let mut calibration = calibrate(target, task).await?;
        let resident = share.resident(in_use_now(target));
        let mut request = request_for(task, planning, resident, share.read_ahead)?;
        let first = search_phases(task, &calibration, &request)?;
        landing::calibrate_near(target, task, &mut calibration, &first).await?;
        let mut last = String::new();
        // The most recent measured plan that fitted: taken if the tries run out.
        let mut fallback: Option<Plan> = None;
        // A refusal halves the micro-batch without using up a try: it measured nothing, and
        // the device's largest buffer may be far below the first size tried.
        let (mut attempt, mut refusals) = (0, 0);
        while attempt < MAX_DRY_RUNS + refusals {
            attempt += 1;
            let plan = search_phases(task, &calibration, &request)?;
            let patches = plan.patches_per_micro_batch();
            if measured_at(&calibration, &plan) && attempt > 1 {
                return Ok(accept(task, plan, resident, calibration, sink));
            }
            // The run's step as it will be: a plan that accumulates is checked with two
            // micro-batches, the second holding the first's gradients.
            let beside = |micro_batch| resident + share.read_ahead.bytes(micro_batch);
            let report =
                |measured_peak_bytes, fits, refused, measured: Option<&StepMeasurement>| {
                    DryRunReport {
                        attempt,
                        micro_batch: plan.micro_batch,
                        n_patches: plan.n_patches,
                        accumulation: plan.accumulation,
                        checkpointing: plan.checkpointing,
                        precision: plan.precision,
                        predicted_peak_bytes: plan.predicted_peak_bytes,
                        measured_peak_bytes,
                        budget_bytes: planning.budget_bytes,
                        fits,
                        frames: None,
                        refused,
                        phases: plan
                            .phases
                            .iter()
                            .enumerate()
                            .map(|(index, phase)| PhaseDryRun {
                                phase: phase.phase.clone(),
                                micro_batch: phase.micro_batch,
                                predicted_peak_bytes: phase.predicted_peak_bytes,
                                measured_peak_bytes: measured
                                    .and_then(|m| m.phases.get(index))
                                    .map_or(0, |m| beside(phase.micro_batch) + m.peak_bytes),
                            })
                            .collect(),
                    }
                };
            let cut = if plan.phases.is_empty() {
                Cut::even(task, patches, plan.accumulation.min(2))
            } else {
                let n = plan.n_patches.max(1);
                let accumulating: Vec<bool> =
                    plan.phases.iter().map(|p| p.accumulation > 1).collect();
                Cut::per_phase(
                    plan.phases.iter().map(|p| p.micro_batch * n).collect(),
                    &accumulating,
                    plan.effective_batch,
                )
            };
            let measured = match measure_cut_step(
                target,
                task,
                &cut,
                plan.precision,
                plan.checkpointing,
            )
            .await
            {
                Ok(measured) => measured,
                Err(CalibrationError::Step(error)) => {
                    let Some(refused) = error.device_refusal() else {
                        return Err(CalibrationError::Step(error).into());
                    };
                    // The device refused this size whatever the budget: half of it is tried
                    // next, as a recovery would, and no larger micro-batch after.
                    sink.emit(Event::DryRun(report(0, false, Some(refused.clone()), None)));
                    last = format!("{}, refused by the device: {refused}", plan.reason);
                    let most_patches = patches / 2;
                    if most_patches < plan.n_patches {
                        return Err(PlanningError::DryRunsFailed(last));
                    }
                    request.device_cap = Some(DeviceCap {
                        refused_patches: patches,
                        most_patches,
                    });
                    refusals += 1;
                    continue;
                }
                Err(other) => return Err(other.into()),
            };
            let measured_peak = match plan.phases.as_slice() {
                [] => beside(plan.micro_batch) + measured.peak_bytes,
                // Each phase beside its own micro-batch's read-ahead.
                phases => phases
                    .iter()
                    .zip(&measured.phases)
                    .map(|(phase, m)| beside(phase.micro_batch) + m.peak_bytes)
                    .max()
                    .unwrap_or(0)
                    .max(beside(plan.micro_batch) + measured.peak_bytes),
            };
            let fits = measured_peak <= planning.budget_bytes;
            sink.emit(Event::DryRun(report(
                measured_peak,
                fits,
                None,
                Some(&measured),
            )));
            learn(&mut calibration, measured);
            if fits {
                fallback = Some(plan.clone());
            } else {
                last = format!(
                    "{}, measured {} of {}",
                    plan.reason,
                    crate::size::human(measured_peak),
                    crate::size::human(planning.budget_bytes)
                );
            }
        }
        // Out of tries: the last plan that fitted, re-predicted from what was measured.
        let refitted = search_phases(task, &calibration, &request)?;
        match fallback {
            Some(plan)
                if measured_at(&calibration, &refitted)
                    || (refitted.patches_per_micro_batch() <= plan.patches_per_micro_batch()
                        && refitted
                            .phases
                            .iter()
                            .zip(&plan.phases)
                            .all(|(now, then)| now.micro_batch <= then.micro_batch)) =>
            {
                Ok(accept(task, refitted, resident, calibration, sink))
            }
            _ => Err(PlanningError::DryRunsFailed(last)),
        }
    })
}

/// Whether every part of `plan` was measured at its own size: its split, and each phase's.
fn measured_at(calibration: &Calibration, plan: &Plan) -> bool {
    let n = plan.n_patches.max(1);
    if plan.phases.is_empty() {
        return calibration.memory.measured_at(
            plan.patches_per_micro_batch(),
            plan.precision,
            plan.checkpointing,
        );
    }
    plan.phases
        .iter()
        .zip(&calibration.phases)
        .all(|(phase, memory)| {
            memory.measured_at(phase.micro_batch * n, plan.precision, plan.checkpointing)
        })
}

/// Reports a plan whose size was measured, with its breakdown.
fn accept<T: TrainingTask>(
    task: &T,
    plan: Plan,
    resident: u64,
    calibration: Calibration,
    sink: &mut dyn EventSink,
) -> Prepared {
    let breakdown = breakdown_of(task, &plan, resident, &calibration);
    sink.emit(Event::Plan(report(&plan, breakdown, &calibration)));
    Prepared {
        plan,
        breakdown,
        calibration,
    }
}
