//! The memory planner: fit training into a budget while keeping the effective batch.
//!
//! [`calibrate`] measures real steps on the device, [`memory`] turns them into a prediction
//! and a breakdown, [`search`] picks the fastest configuration that fits, and [`prepare`]
//! checks the pick with a dry-run step at full size, backing off until one passes.

#[cfg(not(target_arch = "wasm32"))]
pub mod cache;
pub mod calibrate;
mod dry_run;
mod landing;
pub mod length_model;
pub mod lengths;
pub mod memory;
pub mod read_ahead;
pub mod search;
pub mod shipped;

use serde::{Deserialize, Serialize};

pub use calibrate::{
    Calibration, CalibrationError, Cut, StepMeasurement, calibrate, calibration_patches, learn,
    measure_accumulating_step, measure_cut_step, measure_step,
};
pub use dry_run::prepare;
pub use memory::{Breakdown, HalfCost, LinearCost, MeasuredCost, MemoryModel};
pub use read_ahead::ReadAhead;
pub use search::{DeviceCap, Fixed, PhasePins, Plan, PlanError, PlanRequest, SpeedModel, search};

use crate::backend::Target;
use crate::config::Setting;
use crate::events::planned::PhasePlan;
use crate::events::{EventSink, PlanReport};
use crate::memory::MemoryMeter;
use crate::model::DefaultBatch;
use crate::readback::LocalFuture;
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
    /// The time model a plan by length packs each step's examples by, where it is given:
    /// a resumed run's own, or one an earlier run of this build measured on this device
    /// (`crate::train::RunOptions::timings`). Packing follows the timings, and timings
    /// measured anew differ from run to run, so two runs of one seed computed different
    /// sums; `None`: the calibration's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub length_timing: Option<crate::lengths::LengthCost>,
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
            length_timing: None,
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
    /// What the run will hold beside its steps that is not in use yet: the weights' moving
    /// average (`crate::train::WeightAverage::bytes`).
    #[serde(default)]
    pub held_bytes: u64,
}

impl RunShare {
    /// What a step finds in use: the larger of what was in use before planning and
    /// `in_use_now`, and what the run will hold beside it.
    pub fn resident(&self, in_use_now: u64) -> u64 {
        self.resident_bytes.max(in_use_now) + self.held_bytes
    }
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
    let resident = share.resident(0);
    let request = request_for(task, planning, resident, share.read_ahead)?;
    let plan = search_phases(task, calibration, &request)?;
    let breakdown = breakdown_of(task, &plan, resident, calibration);
    Ok((plan, breakdown))
}

/// Calibrates on the device and searches, without the dry-run step that [`prepare`] adds.
pub async fn unchecked<T: TrainingTask>(
    target: Target,
    task: &T,
    planning: &Planning,
    share: RunShare,
) -> Result<Prepared, PlanningError> {
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
        let request = request_for(task, planning, share.resident(0), share.read_ahead)?;
        if lengths.is_empty() || task.at_length(1).is_none() || !lengths::applies(&request) {
            return prepare(target, task, planning, share, sink).await;
        }
        lengths::prepare(target, task, planning, &request, share, lengths, sink).await
    })
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
