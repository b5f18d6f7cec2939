//! The memory planner: fit training into a budget while keeping the effective batch.
//!
//! [`calibrate`] measures real steps on the device, [`memory`] turns them into a prediction
//! and a breakdown, [`search`] picks the fastest configuration that fits, and [`prepare`]
//! checks the pick with a dry-run step at full size, backing off until one passes.

#[cfg(not(target_arch = "wasm32"))]
pub mod cache;
pub mod calibrate;
mod landing;
pub mod length_model;
pub mod lengths;
pub mod memory;
pub mod read_ahead;
pub mod search;
pub mod shipped;

use crate::readback::LocalFuture;
use serde::{Deserialize, Serialize};

pub use calibrate::{
    Calibration, CalibrationError, Cut, StepMeasurement, calibrate, calibration_patches, learn,
    measure_accumulating_step, measure_cut_step, measure_step,
};
pub use memory::{Breakdown, HalfCost, LinearCost, MeasuredCost, MemoryModel};
pub use read_ahead::ReadAhead;
pub use search::{DeviceCap, Fixed, PhasePins, Plan, PlanError, PlanRequest, SpeedModel, search};

use crate::backend::Target;
use crate::config::Setting;
use crate::events::planned::PhasePlan;
use crate::events::{DryRunReport, Event, EventSink, PhaseDryRun, PlanReport};
use crate::memory::MemoryMeter;
use crate::model::DefaultBatch;
use crate::setting::{Described, PlainWords, Wording};
use crate::task::{Coupling, TrainingTask};

/// Tries of the dry-run before giving up: each failure refits the model to what it measured.
pub const MAX_DRY_RUNS: usize = 4;

/// What a run asks of the planner.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Planning {
    pub budget_bytes: u64,
    /// Patches per optimizer step.
    pub effective_batch: usize,
    pub fixed: Fixed,
    /// Patches per spectrogram to prefer when throughput ties and none is fixed: the
    /// model's default (`ModelConfig::default_batch`); `None` prefers 4.
    #[serde(default)]
    pub preferred_n_patches: Option<usize>,
}

/// A request the planner cannot take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.describe(&PlainWords))]
pub enum RequestError {
    Zero(Setting),
}

impl Described for RequestError {
    fn describe(&self, words: &dyn Wording) -> String {
        let RequestError::Zero(setting) = self;
        format!("{} must be at least 1 (got 0)", words.setting(*setting))
    }
}

impl Planning {
    /// The request every front-end makes: the effective batch asked for, or else the one the
    /// fixed parts describe (the model's `defaults` where a part is left open); every part
    /// given is a constraint the plan keeps.
    pub fn new(
        budget_bytes: u64,
        effective_batch: Option<usize>,
        fixed: Fixed,
        defaults: DefaultBatch,
    ) -> Result<Self, RequestError> {
        for (part, value) in [
            (Setting::MicroBatch, fixed.micro_batch),
            (Setting::PatchesPerSpectrogram, fixed.n_patches),
            (Setting::Accumulation, fixed.accumulation),
            (Setting::EffectiveBatch, effective_batch),
        ] {
            if value == Some(0) {
                return Err(RequestError::Zero(part));
            }
        }
        let effective_batch = effective_batch.unwrap_or(
            fixed.micro_batch.unwrap_or(defaults.spectrograms)
                * fixed.n_patches.unwrap_or(defaults.patches)
                * fixed.accumulation.unwrap_or(1),
        );
        Ok(Self {
            budget_bytes,
            effective_batch,
            fixed,
            preferred_n_patches: Some(defaults.patches),
        })
    }

    /// The search's request, with what is already in use on the device and what the run's
    /// read-ahead will hold beside its steps.
    pub fn request(&self, resident_bytes: u64, read_ahead: ReadAhead) -> PlanRequest {
        PlanRequest {
            budget_bytes: self.budget_bytes,
            resident_bytes,
            effective_batch: self.effective_batch,
            fixed: self.fixed,
            read_ahead,
            preferred_n_patches: self.preferred_n_patches,
            device_cap: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PlanningError {
    #[error(transparent)]
    Calibration(#[from] CalibrationError),
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error("{}", self.describe(&PlainWords))]
    Coupled { accumulation: usize },
    #[error("{}", self.describe(&PlainWords))]
    WholeItems { n_patches: usize },
    #[error("{}", self.describe(&PlainWords))]
    DryRunsFailed(String),
}

impl Described for PlanningError {
    fn describe(&self, words: &dyn Wording) -> String {
        match self {
            PlanningError::Calibration(e) => e.describe(words),
            PlanningError::Plan(e) => e.describe(words),
            PlanningError::Coupled { accumulation } => format!(
                "this task's loss couples every example of a step, so its steps cannot be \
                 accumulated over micro-batches, and {} {accumulation} was asked; leave it \
                 open or make it 1",
                words.setting(Setting::Accumulation)
            ),
            PlanningError::WholeItems { n_patches } => format!(
                "this task trains on whole items (utterances), not patches of them, and {} \
                 {n_patches} was asked; leave it open or make it 1",
                words.setting(Setting::PatchesPerSpectrogram)
            ),
            PlanningError::DryRunsFailed(last) => format!(
                "no plan passed its dry-run in {MAX_DRY_RUNS} tries; the last, {last}; lower {} \
                 or raise {}",
                words.setting(Setting::EffectiveBatch),
                words.setting(Setting::MemoryBudget)
            ),
        }
    }
}

/// The search's request for `task`: a task whose loss couples a step's examples is planned
/// without accumulation (a step is one micro-batch), and refused if one was asked for.
fn request_for<T: TrainingTask>(
    task: &T,
    planning: &Planning,
    resident_bytes: u64,
    read_ahead: ReadAhead,
) -> Result<PlanRequest, PlanningError> {
    let mut request = planning.request(resident_bytes, read_ahead);
    if !task.cut_into_patches() {
        match request.fixed.n_patches {
            Some(n_patches) if n_patches > 1 => {
                return Err(PlanningError::WholeItems { n_patches });
            }
            _ => request.fixed.n_patches = Some(1),
        }
    }
    if task.coupling() == Coupling::WholeStep {
        match request.fixed.accumulation {
            Some(accumulation) if accumulation > 1 => {
                return Err(PlanningError::Coupled { accumulation });
            }
            _ => request.fixed.accumulation = Some(1),
        }
    }
    Ok(request)
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

/// The breakdown of a plan's step; what the plan predicts beyond the step and the resident
/// bytes (the read-ahead) shows as data.
pub fn breakdown_of<T: TrainingTask>(
    task: &T,
    plan: &Plan,
    resident_bytes: u64,
    calibration: &Calibration,
) -> Breakdown {
    let predicted = calibration
        .memory
        .predict_step(
            plan.patches_per_micro_batch(),
            plan.accumulation,
            plan.precision,
            plan.checkpointing,
        )
        .unwrap_or(0);
    let beside = plan
        .predicted_peak_bytes
        .saturating_sub(resident_bytes + predicted);
    let step = task.step_memory(
        calibration.backend,
        plan.precision,
        plan.patches_per_micro_batch(),
    );
    let mut b = memory::breakdown(step, predicted, resident_bytes, plan.budget_bytes);
    b.data += beside;
    b.free = b.free.saturating_sub(beside);
    b
}

/// What a run holds beside its steps: in use before the plan (the dataset on a CPU) and the
/// read-ahead, which grows with the micro-batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RunShare {
    pub resident_bytes: u64,
    pub read_ahead: ReadAhead,
}

/// Bytes in use on the device now: after calibration this holds what the process set up
/// for its life in its first steps (thread pools, kernels' per-thread buffers), which the
/// run's steps find in place and the calibration steps measured from.
fn in_use_now(target: Target) -> u64 {
    target
        .device()
        .map(|device| {
            let mut meter = MemoryMeter::new(target.backend, &device);
            meter.cleanup();
            meter.sample().allocated_bytes
        })
        .unwrap_or(0)
}

/// The plan for `planning` from a calibration already measured, and its breakdown, without
/// the device: what a front-end previews while the user changes the request, and what a
/// what-if table lists per device. `share`: what the run holds beside its steps (nothing,
/// for a preview before the dataset is open).
pub fn from_calibration<T: TrainingTask>(
    task: &T,
    calibration: &Calibration,
    planning: &Planning,
    share: RunShare,
) -> Result<(Plan, Breakdown), PlanningError> {
    let request = request_for(task, planning, share.resident_bytes, share.read_ahead)?;
    let plan = search_phases(task, calibration, &request)?;
    let breakdown = breakdown_of(task, &plan, share.resident_bytes, calibration);
    Ok((plan, breakdown))
}

/// Calibrates on the device and searches, without the dry-run step that [`prepare`] adds.
pub fn unchecked<'a, T: TrainingTask>(
    target: Target,
    task: &'a T,
    planning: &'a Planning,
    share: RunShare,
) -> LocalFuture<'a, Result<Prepared, PlanningError>> {
    Box::pin(async move {
        let calibration = calibrate(target, task).await?;
        let share = RunShare {
            resident_bytes: share.resident_bytes.max(in_use_now(target)),
            ..share
        };
        let (plan, breakdown) = from_calibration(task, &calibration, planning, share)?;
        Ok(Prepared {
            plan,
            breakdown,
            calibration,
        })
    })
}

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
        let resident = share.resident_bytes.max(in_use_now(target));
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

/// The search for `task`: one split for every phase, then, for a task of several phases
/// measured by phase, each phase's own split of the same effective batch within the
/// budget, at the precision, checkpointing and patches of the shared split (which fits
/// every phase, so no phase's own is smaller). The plan's own split is the phase's of
/// fewest examples a micro-batch: every phase fits in it, and it is what a run that cuts
/// every phase alike steps with (the trainer's loop, until it reads each phase's cut). Its
/// prediction is the largest phase's.
pub fn search_phases<T: TrainingTask>(
    task: &T,
    calibration: &Calibration,
    request: &PlanRequest,
) -> Result<Plan, PlanError> {
    let shared = search(&calibration.memory, &calibration.speed, request)?;
    let names = task.phases();
    if calibration.phases.len() != names.len() || names.len() < 2 {
        return Ok(shared);
    }
    let mut pinned = *request;
    pinned.fixed.precision = Some(shared.precision);
    pinned.fixed.checkpointing = Some(shared.checkpointing);
    pinned.fixed.n_patches = Some(shared.n_patches);
    let mut phases = Vec::with_capacity(names.len());
    for (index, (name, memory)) in names.iter().zip(&calibration.phases).enumerate() {
        let mut pinned = pinned;
        if let Some(mb) = request.fixed.phase_micro_batches.get(index) {
            pinned.fixed.micro_batch = Some(mb);
        }
        let own = search(memory, &calibration.speed, &pinned)?;
        phases.push(PhasePlan {
            phase: (*name).to_string(),
            micro_batch: own.micro_batch,
            accumulation: own.accumulation,
            predicted_peak_bytes: own.predicted_peak_bytes,
        });
    }
    let words: Vec<String> = phases
        .iter()
        .map(|p| format!("{} {} x {}", p.phase, p.micro_batch, p.accumulation))
        .collect();
    let smallest = phases
        .iter()
        .min_by_key(|p| p.micro_batch)
        .map_or((shared.micro_batch, shared.accumulation), |p| {
            (p.micro_batch, p.accumulation)
        });
    Ok(Plan {
        micro_batch: smallest.0,
        accumulation: smallest.1,
        predicted_peak_bytes: phases
            .iter()
            .map(|p| p.predicted_peak_bytes)
            .max()
            .unwrap_or(shared.predicted_peak_bytes),
        reason: format!(
            "{}; each phase its own: {}",
            shared.reason,
            words.join(", ")
        ),
        phases,
        ..shared
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

/// [`prepare`] for a run whose examples have `lengths` (train and validation; none: all one
/// size): planned by length ([`lengths::prepare`]) where the task measures by length and
/// the request leaves the split open, else a fixed count per micro-batch as [`prepare`].
pub fn prepare_by_length<'a, T: TrainingTask>(
    target: Target,
    task: &'a T,
    planning: &'a Planning,
    share: RunShare,
    lengths: &'a [usize],
    sink: &'a mut dyn EventSink,
) -> LocalFuture<'a, Result<Prepared, PlanningError>> {
    Box::pin(async move {
        // What is in use is read after calibrating, by whichever planner runs.
        let request = request_for(task, planning, share.resident_bytes, share.read_ahead)?;
        if lengths.is_empty() || task.at_length(1).is_none() || !lengths::applies(&request) {
            return prepare(target, task, planning, share, sink).await;
        }
        lengths::prepare(target, task, planning, &request, share, lengths, sink).await
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

#[cfg(test)]
mod tests {
    use super::*;

    const DEFAULTS: DefaultBatch = DefaultBatch {
        spectrograms: 8,
        patches: 4,
    };

    #[test]
    fn the_effective_batch_is_the_asked_one_or_the_split_with_the_models_defaults() {
        let fixed = Fixed {
            micro_batch: Some(2),
            accumulation: Some(3),
            ..Fixed::default()
        };
        let planning = Planning::new(1 << 30, None, fixed, DEFAULTS).unwrap();
        assert_eq!(planning.effective_batch, 2 * 4 * 3);
        assert_eq!(planning.fixed, fixed);
        assert_eq!(planning.preferred_n_patches, Some(4));
        let asked = Planning::new(1 << 30, Some(64), fixed, DEFAULTS).unwrap();
        assert_eq!(asked.effective_batch, 64);
        let open = Planning::new(1 << 30, None, Fixed::default(), DEFAULTS).unwrap();
        assert_eq!(open.effective_batch, 32);
    }

    #[test]
    fn a_part_of_zero_is_refused_by_name() {
        let fixed = Fixed {
            n_patches: Some(0),
            ..Fixed::default()
        };
        assert_eq!(
            Planning::new(1, None, fixed, DEFAULTS),
            Err(RequestError::Zero(Setting::PatchesPerSpectrogram))
        );
        assert_eq!(
            Planning::new(1, Some(0), Fixed::default(), DEFAULTS),
            Err(RequestError::Zero(Setting::EffectiveBatch))
        );
    }
}
