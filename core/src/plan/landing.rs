//! Calibrating where the plan lands. Calibration measures small steps (a few MiB) and the
//! memory model extrapolates from them, but a step's bytes per patch are not the same at
//! every size: on flex the default model takes 1.9 MiB a patch between 4 and 16 patches and
//! 2.4 MiB beyond 90, so a plan of 112 patches was predicted 14% under, and its first
//! dry-run measured 296 MiB of a 256 MiB budget (on a GPU that dry-run is a real allocation
//! past the budget). Before the first dry-run of a plan far past the largest step
//! measured, one step of three quarters of its micro-batch is measured and learnt: the
//! dry-run's prediction is then a short step from a measurement, and a step that size stays
//! inside the budget even when the extrapolation was a quarter under.

use super::calibrate::{Calibration, CalibrationError, Cut, learn, measure_cut_step};
use super::search::Plan;
use crate::backend::Target;
use crate::readback::LocalFuture;
use crate::task::TrainingTask;

/// How far past the largest measured step a plan may land before a step nearer it is
/// measured: within twice, the extrapolation has held (bench/plan_inrun).
const FAR: usize = 2;

/// The share of the plan's micro-batch the step near it takes.
const NEAR: (usize, usize) = (3, 4);

/// The patches a step near `plan` measures, where the plan is far from every measured step
/// of its kind (precision, checkpointing); `None` where it is near one, or cut by phases
/// (a task of several phases measures each phase's cut in its dry-run).
pub fn near_patches(calibration: &Calibration, plan: &Plan) -> Option<usize> {
    if !plan.phases.is_empty() {
        return None;
    }
    let largest = calibration
        .measurements
        .iter()
        .filter(|m| m.precision == plan.precision && m.checkpointing == plan.checkpointing)
        .map(|m| m.patches)
        .max()?;
    let patches = plan.patches_per_micro_batch();
    let n = plan.n_patches.max(1);
    let near = (plan.micro_batch * NEAR.0 / NEAR.1).max(1) * n;
    (patches > FAR * largest && near > largest).then_some(near)
}

/// Measures and learns a step near `plan` where [`near_patches`] asks for one, cut as the
/// plan's dry-run will be (two micro-batches where it accumulates). A step the device refuses
/// is left to the dry-run, which halves.
pub fn calibrate_near<'a, T: TrainingTask>(
    target: Target,
    task: &'a T,
    calibration: &'a mut Calibration,
    plan: &'a Plan,
) -> LocalFuture<'a, Result<(), CalibrationError>> {
    Box::pin(async move {
        let Some(patches) = near_patches(calibration, plan) else {
            return Ok(());
        };
        let cut = Cut::even(task, patches, plan.accumulation.min(2));
        match measure_cut_step(target, task, &cut, plan.precision, plan.checkpointing).await {
            Ok(measured) => {
                learn(calibration, measured);
                Ok(())
            }
            Err(CalibrationError::Step(error)) if error.device_refusal().is_some() => Ok(()),
            Err(other) => Err(other),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::planned::StepMeasurement;
    use crate::precision::Precision;

    fn step(patches: usize, precision: Precision) -> StepMeasurement {
        StepMeasurement {
            patches,
            checkpointing: false,
            precision,
            peak_bytes: (patches as u64) << 20,
            seconds: 0.01,
            micro_batches: 1,
            frames: None,
            pages: None,
            phases: Vec::new(),
            step_examples: None,
        }
    }

    fn plan(micro_batch: usize, n_patches: usize, precision: Precision) -> Plan {
        Plan {
            micro_batch,
            n_patches,
            accumulation: 2,
            checkpointing: false,
            precision,
            effective_batch: 2 * micro_batch * n_patches,
            predicted_peak_bytes: 0,
            budget_bytes: 1 << 30,
            predicted_patches_per_s: 1.0,
            reason: String::new(),
            lengths: None,
            phases: Vec::new(),
        }
    }

    #[test]
    fn a_far_plan_is_measured_at_three_quarters_of_its_micro_batch() {
        let steps = vec![
            step(4, Precision::F32),
            step(16, Precision::F32),
            step(64, Precision::F16),
        ];
        let calibration = super::super::calibrate::fit(crate::BackendKind::Flex, steps, 0);
        // 28 x 4 = 112 patches, seven times the largest f32 step: 21 x 4 measured first.
        assert_eq!(
            near_patches(&calibration, &plan(28, 4, Precision::F32)),
            Some(84)
        );
        // Within twice the largest measured step: no extra step.
        assert_eq!(
            near_patches(&calibration, &plan(8, 4, Precision::F32)),
            None
        );
        // Of another kind, against that kind's steps: f16 measured up to 64 patches.
        assert_eq!(
            near_patches(&calibration, &plan(28, 4, Precision::F16)),
            None
        );
        assert_eq!(
            near_patches(&calibration, &plan(40, 4, Precision::F16)),
            Some(120)
        );
    }
}
