//! Recovering from an out-of-memory step without losing it: the micro-batch is re-planned
//! from what was measured (by length: every bucket's cap halved), the effective batch kept,
//! and the step redone.

use crate::config::TrainConfig;
use crate::events::{Event, EventSink, RecoveryReport};
use crate::plan::{PlanningError, ReadAhead};
use crate::readback::LocalFuture;
use crate::step;

use super::run_task::{RunTask, TaskData};
use super::{MAX_RECOVERIES_IN_A_ROW, TaskTrainer, TrainError, counted};

/// The micro-batch after an out-of-memory step when nothing better is known (the device
/// failed without a reading): half, rounded up.
pub(super) fn halve(micro_batch: usize) -> Option<usize> {
    (micro_batch > 1).then(|| micro_batch.div_ceil(2))
}

/// The largest micro-batch below `failed` whose peak in this run fits `budget`: the peak the
/// failed step reached here, moved by what the measured steps say a micro-batch of the
/// other size costs more or less (step, read-ahead, and the summed gradients a step split
/// into several micro-batches holds), with the planner's margin on the step. `None` when
/// not even one spectrogram fits.
pub(super) fn refit_micro_batch(
    memory: &crate::plan::MemoryModel,
    read_ahead: ReadAhead,
    config: &TrainConfig,
    failed: usize,
    failed_peak: u64,
    budget: u64,
) -> Option<usize> {
    let n = config.n_patches;
    let cost = memory.cost(config.precision, config.checkpointing)?;
    let clips = config.clips_per_step();
    // A step that was one micro-batch and now accumulates holds one more set of gradients,
    // as the planner's predictions count it.
    let at = |mb: usize| {
        cost.at(mb * n)
            + read_ahead.bytes(mb) as f64
            + memory.summed_gradient_bytes(clips.div_ceil(mb))
    };
    let base = failed_peak as f64 - at(failed);
    (1..failed).rev().find(|&mb| {
        let step = cost.at(mb * n);
        base + at(mb) + memory.margin * step <= budget as f64
    })
}

impl<T: RunTask> TaskTrainer<T> {
    /// After an out-of-memory step: free what it held, split the effective batch finer, and
    /// let the loop redo the step. Nothing of the model or optimizer changed (see
    /// [`step::StepError`]), so the redone step is the step a smaller plan would have run.
    pub(super) fn recover<'a>(
        &'a mut self,
        error: step::StepError,
        in_a_row: u32,
        sink: &'a mut dyn EventSink,
    ) -> LocalFuture<'a, Result<(), TrainError>> {
        Box::pin(async move {
            self.meter.cleanup();
            let c = &self.config;
            let n = c.n_patches;
            // A task of several phases cut apart shrinks only the phase that ran out; the
            // others keep their micro-batches (a shared cut becomes each phase's own first).
            // On a device pool the phases share its pages, and the step shrinks as one (the
            // planner cuts them alike there: `plan::calibrate::fit`).
            let pooled = !c.backend.is_host();
            let phase = error
                .phase()
                .filter(|_| c.length_buckets.is_none() && !pooled)
                .filter(|&p| p < self.task.phases().len());
            let mut phase_mbs = match phase {
                Some(_) if c.phase_micro_batches.is_empty() => {
                    vec![c.micro_batch; self.task.phases().len()]
                }
                Some(_) => c.phase_micro_batches.clone(),
                None => Vec::new(),
            };
            let (mb, acc) = match phase {
                Some(p) => (phase_mbs[p], c.phase_split(p).accumulation),
                None => (c.micro_batch, c.accumulation),
            };
            let mut halved_buckets = None;
            let next = if in_a_row > MAX_RECOVERIES_IN_A_ROW {
                None
            } else if let Some(buckets) = &c.length_buckets {
                // By length: every bucket's cap halves, and the step is packed again.
                halved_buckets = buckets.halved();
                halved_buckets.as_ref().map(|b| b.longest_cap())
            } else {
                self.recovery_micro_batch(&error, mb, phase).await?
            };
            let Some(to_mb) = next else {
                let saved = match self.checkpoint(sink) {
                    Ok(()) if self.options.out_dir.is_some() => Some(self.step),
                    _ => None,
                };
                return Err(TrainError::OutOfMemory {
                    step: self.step + 1,
                    recoveries: in_a_row - 1,
                    micro_batch: mb,
                    n_patches: n,
                    detail: error.to_string(),
                    saved,
                });
            };
            tracing::warn!(step = self.step + 1, %error, to_mb, "out of memory; shrinking the micro-batch");
            match phase {
                Some(p) => {
                    phase_mbs[p] = to_mb;
                    self.config.set_phase_micro_batches(&phase_mbs);
                }
                None => self.config.set_micro_batch(to_mb),
            }
            if halved_buckets.is_some() {
                self.config.length_buckets = halved_buckets;
            }
            self.data.stream(&self.config, &self.options.loader);
            let to_accumulation = match phase {
                Some(p) => self.config.phase_split(p).accumulation,
                None => self.config.accumulation,
            };
            sink.emit(Event::Recovery(RecoveryReport {
                step: self.step + 1,
                error: error.to_string(),
                from_micro_batch: mb,
                to_micro_batch: to_mb,
                n_patches: n,
                from_accumulation: acc,
                to_accumulation,
                effective_batch: self.config.effective_batch(),
                in_a_row,
                phase: phase.map(|p| self.task.phases()[p].to_string()),
            }));
            Ok(())
        })
    }

    /// The micro-batch to redo an out-of-memory step with: re-planned from the measured
    /// steps (the run's own kind of step, calibrated now when the run was not planned; the
    /// phase's own where `phase` ran out) and the peak this step reached, or half when the
    /// device failed without a reading.
    pub(super) fn recovery_micro_batch<'a>(
        &'a mut self,
        error: &'a step::StepError,
        micro_batch: usize,
        phase: Option<usize>,
    ) -> LocalFuture<'a, Result<Option<usize>, TrainError>> {
        Box::pin(async move {
            let step::StepError::OverBudget(over) = error.cause() else {
                return Ok(halve(micro_batch));
            };
            // What calibrating leaves allocated (flex keeps some of it) is held beside every
            // later step: the failed peak is moved up by it.
            let mut grown = 0;
            if self.calibration.is_none() {
                let before = self.meter.sample().allocated_bytes;
                let calibration = crate::plan::calibrate::calibrate_only(
                    self.config.target(),
                    &self.task,
                    self.config.precision,
                    self.config.checkpointing,
                )
                .await
                .map_err(PlanningError::from)?;
                self.calibration = Some(calibration);
                // Calibrating filled the run's device pool; the redone step is measured against
                // the budget from what the pool holds, so those pages go back first.
                self.meter.cleanup();
                grown = self.meter.sample().allocated_bytes.saturating_sub(before);
            }
            let Some(calibration) = &self.calibration else {
                return Ok(halve(micro_batch));
            };
            let read_ahead = counted(
                &self.config,
                self.data.read_ahead(&self.config, &self.options.loader),
            );
            let memory = phase
                .and_then(|p| calibration.phases.get(p))
                .unwrap_or(&calibration.memory);
            Ok(refit_micro_batch(
                memory,
                read_ahead,
                &self.config,
                micro_batch,
                over.peak_bytes + grown,
                over.budget_bytes,
            )
            .or_else(|| halve(micro_batch)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{MeasuredCost, MemoryModel};
    use crate::precision::Precision;

    /// 1,000 bytes a patch; a step of 8 spectrograms of one patch reached 10,000 bytes and
    /// the budget is 9,000. Leaving out the summed gradients a split step holds, 7 fits
    /// exactly; with them (1,500 bytes), 7 + 1 and 6 + 2 do not, 5 + 3 does.
    #[test]
    fn a_recovery_counts_the_gradients_a_split_step_sums() {
        let mut memory = MemoryModel {
            plain: MeasuredCost::new([(0, 0.0), (16, 16_000.0)]),
            checkpointed: None,
            half: None,
            accumulation_bytes: 0,
            margin: 0.0,
        };
        let config = TrainConfig {
            micro_batch: 8,
            n_patches: 1,
            accumulation: 1,
            precision: Precision::F32,
            checkpointing: false,
            ..TrainConfig::default()
        };
        let refit = |memory: &MemoryModel| {
            refit_micro_batch(memory, ReadAhead::NONE, &config, 8, 10_000, 9_000)
        };
        assert_eq!(refit(&memory), Some(7));
        memory.accumulation_bytes = 1_500;
        assert_eq!(refit(&memory), Some(5));
        assert_eq!(
            refit_micro_batch(&memory, ReadAhead::NONE, &config, 8, 10_000, 1_000),
            None,
            "not one spectrogram fits"
        );
    }
}
