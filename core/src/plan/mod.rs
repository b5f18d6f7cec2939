//! The memory planner: fit training into a budget while keeping the effective batch.
//!
//! [`calibrate`] measures real steps on the device, [`memory`] turns them into a prediction
//! and a breakdown, [`search`] picks the fastest configuration that fits, and [`prepare`]
//! checks the pick with a dry-run step at full size, backing off until one passes.

pub mod calibrate;
pub mod devices;
pub mod memory;
pub mod search;

use serde::{Deserialize, Serialize};

pub use calibrate::{Calibration, CalibrationError, StepMeasurement, calibrate, measure_step};
pub use memory::{Breakdown, HalfCost, LinearCost, MemoryModel, StepForms};
pub use search::{Fixed, Plan, PlanError, PlanRequest, SpeedModel, search};

use crate::backend::Target;
use crate::events::{DryRunReport, Event, EventSink, PlanReport};
use crate::model::{LayerForms, VqAutoencoderConfig};

/// Tries of the dry-run before giving up: each failure refits the model to what it measured.
pub const MAX_DRY_RUNS: usize = 4;

/// What a run asks of the planner.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Planning {
    pub budget_bytes: u64,
    /// Patches per optimizer step.
    pub effective_batch: usize,
    pub fixed: Fixed,
}

impl Planning {
    /// The search's request, with what is already in use on the device.
    pub fn request(&self, resident_bytes: u64) -> PlanRequest {
        PlanRequest {
            budget_bytes: self.budget_bytes,
            resident_bytes,
            effective_batch: self.effective_batch,
            fixed: self.fixed,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PlanningError {
    #[error(transparent)]
    Calibration(#[from] CalibrationError),
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error(
        "no plan passed its dry-run in {MAX_DRY_RUNS} tries; the last, {0}; lower the \
         effective batch or raise the budget"
    )]
    DryRunsFailed(String),
}

/// A checked plan and what it rests on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prepared {
    pub plan: Plan,
    pub breakdown: Breakdown,
    pub calibration: Calibration,
}

/// The planner's report for a plan, as an event carries it.
pub fn report(plan: &Plan, breakdown: Breakdown, calibration: &Calibration) -> PlanReport {
    PlanReport {
        plan: plan.clone(),
        breakdown,
        calibration: calibration.measurements.clone(),
    }
}

/// The breakdown of a plan's step.
pub fn breakdown_of(
    model: &VqAutoencoderConfig,
    plan: &Plan,
    resident_bytes: u64,
    calibration: &Calibration,
) -> Breakdown {
    let predicted = calibration
        .memory
        .predict(
            plan.patches_per_micro_batch(),
            plan.precision,
            plan.checkpointing,
        )
        .unwrap_or(0);
    let forms = match model.forms {
        LayerForms::Auto => StepForms::of(calibration.backend, plan.precision),
        LayerForms::Plain => StepForms::Plain,
    };
    memory::breakdown(
        model,
        forms,
        plan.patches_per_micro_batch(),
        predicted,
        resident_bytes,
        plan.budget_bytes,
    )
}

/// Calibrates on the device and searches, without the dry-run step that [`prepare`] adds.
pub fn unchecked(
    target: Target,
    model: &VqAutoencoderConfig,
    planning: &Planning,
    resident_bytes: u64,
) -> Result<Prepared, PlanningError> {
    let calibration = calibrate(target, model)?;
    let plan = search(
        &calibration.memory,
        &calibration.speed,
        &planning.request(resident_bytes),
    )?;
    let breakdown = breakdown_of(model, &plan, resident_bytes, &calibration);
    Ok(Prepared {
        plan,
        breakdown,
        calibration,
    })
}

/// Calibrates on the device, searches, and checks the plan with a real step at its size;
/// a step above the budget refits the memory line through what it measured and searches
/// again. Reports a `dry_run` event per try and the final `plan` event.
pub fn prepare(
    target: Target,
    model: &VqAutoencoderConfig,
    planning: &Planning,
    resident_bytes: u64,
    sink: &mut dyn EventSink,
) -> Result<Prepared, PlanningError> {
    let mut calibration = calibrate(target, model)?;
    let request = planning.request(resident_bytes);
    let mut last = String::new();
    for attempt in 1..=MAX_DRY_RUNS {
        let plan = search(&calibration.memory, &calibration.speed, &request)?;
        let patches = plan.patches_per_micro_batch();
        let measured = measure_step(target, model, patches, plan.precision, plan.checkpointing)?;
        let measured_peak = resident_bytes + measured.peak_bytes;
        let fits = measured_peak <= planning.budget_bytes;
        sink.emit(Event::DryRun(DryRunReport {
            attempt,
            micro_batch: plan.micro_batch,
            n_patches: plan.n_patches,
            accumulation: plan.accumulation,
            checkpointing: plan.checkpointing,
            precision: plan.precision,
            predicted_peak_bytes: plan.predicted_peak_bytes,
            measured_peak_bytes: measured_peak,
            budget_bytes: planning.budget_bytes,
            fits,
        }));
        if fits {
            let breakdown = breakdown_of(model, &plan, resident_bytes, &calibration);
            sink.emit(Event::Plan(report(&plan, breakdown, &calibration)));
            return Ok(Prepared {
                plan,
                breakdown,
                calibration,
            });
        }
        last = format!(
            "{}, measured {} of {}",
            plan.reason,
            crate::memory::human(measured_peak),
            crate::memory::human(planning.budget_bytes)
        );
        refit(&mut calibration, measured);
    }
    Err(PlanningError::DryRunsFailed(last))
}

/// Replaces the calibration point nearest to a failed dry-run's size with the dry-run
/// itself, so the next search sees the cost that was measured there.
fn refit(calibration: &mut Calibration, measured: StepMeasurement) {
    let ms = &mut calibration.measurements;
    let same_kind: Vec<usize> = (0..ms.len())
        .filter(|&i| {
            ms[i].checkpointing == measured.checkpointing && ms[i].precision == measured.precision
        })
        .collect();
    if let Some(&replace) = same_kind
        .iter()
        .max_by_key(|&&i| ms[i].patches.min(measured.patches))
    {
        ms[replace] = measured;
    } else {
        ms.push(measured);
    }
    let refitted = calibrate::fit(calibration.backend, ms.clone());
    // Only the memory line learns from a dry-run; its timing is one step, not a fit.
    calibration.memory = refitted.memory;
}
