//! The loop: steps of micro-batches until the run's length or a stop, with validation,
//! checkpoints, memory cleanups and the task's warm-up end on the way.

use web_time::Instant;

use crate::budget::Budget;
use crate::events::{Event, EventSink, PhaseReport, StepReport};
use crate::readback::LocalFuture;
#[cfg(not(target_arch = "wasm32"))]
use crate::readback::block_on;
use crate::step;

use super::run_task::{RunTask, TaskData};
use super::{TaskTrainer, TrainError, control, every, schedule};

impl<T: RunTask> TaskTrainer<T> {
    /// Trains until the run length is reached or a stop is asked for. Always ends with a
    /// validation pass and, when there is an output directory, a checkpoint.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn run(&mut self, sink: &mut dyn EventSink) -> Result<(), TrainError> {
        block_on(self.run_async(sink))
    }

    /// [`TaskTrainer::run`], awaited.
    pub fn run_async<'a>(
        &'a mut self,
        sink: &'a mut dyn EventSink,
    ) -> LocalFuture<'a, Result<(), TrainError>> {
        Box::pin(async move {
            let started = Instant::now();
            for event in self.pending.drain(..) {
                sink.emit(event);
            }
            sink.emit(Event::Dataset(self.dataset_report()));
            sink.emit(Event::Config(self.run_info()));
            let clips_per_step = self.config.clips_per_step() as u64;
            let mut stopped_early = false;
            let mut recoveries = 0u32;
            while self.step < self.total_steps {
                if control::stop_before_next(&self.options, self.step).await {
                    stopped_early = true;
                    break;
                }
                let report = match self.train_step().await {
                    Ok(report) => report,
                    Err(TrainError::Step(error)) if error.is_out_of_memory() => {
                        recoveries += 1;
                        self.recover(error, recoveries, sink).await?;
                        continue;
                    }
                    Err(other) => return Err(other),
                };
                recoveries = 0;
                let step = self.step;
                sink.emit(Event::Step(report));

                if every(step, self.config.empty_cache_every) {
                    self.meter.cleanup();
                    sink.emit(Event::MemoryCleanup { step });
                }
                let completed = self.epoch_of(step * clips_per_step);
                if completed > self.epoch_of((step - 1) * clips_per_step) {
                    sink.emit(Event::Epoch {
                        epoch: completed,
                        step,
                    });
                }
                let last = step == self.total_steps;
                if every(step, self.config.validate_every) && !last {
                    sink.emit(self.validation_event().await?);
                    self.draw_picture(sink).await?;
                }
                if every(step, self.config.checkpoint_every) && !last {
                    self.checkpoint(sink)?;
                }
            }
            if self.data.validation_examples() > 0 {
                sink.emit(self.validation_event().await?);
                self.draw_picture(sink).await?;
            }
            self.checkpoint(sink)?;
            sink.emit(Event::Finished {
                step: self.step,
                total_steps: self.total_steps,
                stopped_early,
                elapsed_s: started.elapsed().as_secs_f64(),
                host_peak_bytes: crate::memory::host_peak_bytes(),
            });
            Ok(())
        })
    }

    /// A validation pass, with the most memory it held.
    fn validation_event<'a>(&'a mut self) -> LocalFuture<'a, Result<Event, TrainError>> {
        Box::pin(async move {
            self.meter.reset_peak();
            let loss = self.validation_loss_async().await?;
            Ok(Event::Validation {
                step: self.step,
                loss,
                mem_peak_bytes: Some(self.meter.sample().peak_bytes),
            })
        })
    }

    /// The epoch that position `position` of the train stream falls in.
    fn epoch_of(&self, position: u64) -> u64 {
        position / self.data.train_examples().max(1) as u64
    }

    pub(super) fn train_step<'a>(&'a mut self) -> LocalFuture<'a, Result<StepReport, TrainError>> {
        Box::pin(async move {
            let warmup = self.config.quantizer_warmup_steps.unwrap_or(0);
            // Outside the step's time and memory window: drawing the codebook is set-up.
            if self.step == warmup {
                self.end_warm_up().await?;
            }
            let started = Instant::now();
            let c = &self.config;
            let lr = schedule::cosine_lr(c.lr, c.min_lr, self.step, self.total_steps);
            let first = self.step * c.clips_per_step() as u64;
            // By length: the step's examples, sorted by the stream, packed by their lengths.
            // Examples of every length report their padding either way.
            let lengths = self.data.lengths_at(first, c.clips_per_step());
            // Each phase's micro-batch sizes: by length, or the run's split, every phase alike;
            // or each phase its own of the same step.
            let cuts: Vec<Vec<usize>> = match &c.length_buckets {
                Some(buckets) => vec![buckets.pack(&lengths)],
                None if c.phase_micro_batches.is_empty() => vec![c.split().micro_batch_sizes()],
                None => (0..self.task.phases().len())
                    .map(|phase| c.phase_split(phase).micro_batch_sizes())
                    .collect(),
            };
            // What the step reports: its one cut, or the run's own split where phases cut apart.
            let sizes = match cuts.as_slice() {
                [one] => one.clone(),
                _ => c.split().micro_batch_sizes(),
            };
            let padding = (!lengths.is_empty()).then(|| crate::lengths::padding(&lengths, &sizes));
            let predicted_peak_bytes = self.predicted_peak(&lengths, &sizes);
            // One micro-batch at a time, as the plan measured. A file that fails to read ends
            // the micro-batches early; the step then refuses to update (Incomplete), and the
            // file's error is what the run reports.
            let mut read_error = None;
            let data = &mut self.data;
            let device = &self.device;
            self.meter.reset_peak();
            let settings = step::StepSettings {
                step_examples: c.effective_batch(),
                lr,
                clip_norm: c.clip_norm,
                warming_up: self.step < warmup,
                precision: c.precision,
            };
            let networks = self.networks.clone();
            let stepped = match cuts.as_slice() {
                [sizes] => {
                    // Read as the step consumes them: one micro-batch's input at a time.
                    let micro_batches =
                        read_micro_batches(data, device, first, sizes, &mut read_error);
                    step::optimizer_step(
                        &self.task,
                        networks,
                        &mut self.optimizer,
                        micro_batches,
                        settings,
                        &mut self.meter,
                    )
                    .await
                }
                // The step's examples are read once, in the first phase's cut, and held until
                // the last phase (as `optimizer_step` holds a shared cut's); each later phase
                // cuts them its own way, or reads them again where the task cannot.
                cuts => {
                    let mut read = |sizes: &[usize]| -> Vec<T::Batch> {
                        read_micro_batches(data, device, first, sizes, &mut read_error).collect()
                    };
                    let task = &self.task;
                    let n_patches = c.n_patches;
                    let mut first: Option<Vec<T::Batch>> = None;
                    step::phased_step(
                        task,
                        networks,
                        &mut self.optimizer,
                        |phase| {
                            let Some(read_once) = &first else {
                                let batches = read(&cuts[phase]);
                                first = Some(batches.clone());
                                return batches;
                            };
                            if cuts[phase] == cuts[0] {
                                return read_once.clone();
                            }
                            let examples: Vec<usize> =
                                cuts[phase].iter().map(|&n| n * n_patches).collect();
                            // A read that failed part-way leaves the phase short: it is refused
                            // (Incomplete) and the read's error reported, as in the first phase.
                            let held: usize = read_once.iter().map(|b| task.examples_in(b)).sum();
                            if held != examples.iter().sum::<usize>() {
                                return read_once.clone();
                            }
                            task.recut(read_once, &examples)
                                .unwrap_or_else(|| read(&cuts[phase]))
                        },
                        settings,
                        &mut self.meter,
                    )
                    .await
                }
            };
            if let Some(error) = read_error {
                return Err(error);
            }
            let (networks, outcome) = stepped?;
            if let Some(phase) = outcome.phases.iter().find(|p| !p.loss.is_finite()) {
                return Err(TrainError::NonFinite {
                    step: self.step + 1,
                    loss: phase.loss,
                });
            }
            let phases = self.phase_reports(&outcome, &cuts);
            let outcome = outcome.first();
            self.networks = networks;
            if let Some(average) = &mut self.average {
                average.update(&self.networks);
            }
            self.step += 1;
            let memory = self.meter.sample();
            let seconds = started.elapsed().as_secs_f64();
            Ok(StepReport {
                step: self.step,
                total_steps: self.total_steps,
                epoch: self.epoch_of(first),
                loss: outcome.loss,
                reconstruction_loss: outcome.reported,
                lr,
                grad_norm: outcome.grad_norm,
                patches_per_s: c.effective_batch() as f64 / seconds,
                step_ms: seconds * 1e3,
                micro_batch: sizes.iter().copied().max().unwrap_or(c.micro_batch),
                accumulation: sizes.len(),
                mem_allocated_bytes: memory.allocated_bytes,
                mem_peak_bytes: memory.peak_bytes,
                mem_reserved_bytes: memory.reserved_bytes,
                mem_budget_bytes: self.meter.budget().and_then(Budget::bytes),
                phases,
                padding,
                predicted_peak_bytes,
            })
        })
    }

    /// One phase: its figures are the step's; several: each is reported beside them, with
    /// its cut (`cuts`: each phase's micro-batch sizes, or one for all) and its prediction
    /// while the run keeps the plan's.
    fn phase_reports(&self, outcome: &step::StepOutcome, cuts: &[Vec<usize>]) -> Vec<PhaseReport> {
        let names = self.task.phases();
        if names.len() < 2 {
            return Vec::new();
        }
        let planned = self
            .plan
            .as_ref()
            .filter(|plan| plan.phases.len() == names.len())
            .filter(|_| self.config.length_buckets.is_none());
        names
            .iter()
            .zip(&outcome.phases)
            .enumerate()
            .map(|(index, (name, phase))| {
                let sizes = cuts.get(index).unwrap_or(&cuts[0]);
                let micro_batch = sizes.iter().copied().max().unwrap_or(0);
                let predicted_peak_bytes = planned.and_then(|plan| {
                    let own = &plan.phases[index];
                    (self.config.phase_split(index).micro_batch == own.micro_batch)
                        .then_some(own.predicted_peak_bytes)
                });
                PhaseReport {
                    phase: (*name).to_string(),
                    loss: phase.loss,
                    grad_norm: phase.grad_norm,
                    micro_batch,
                    accumulation: sizes.len(),
                    peak_bytes: phase.peak_bytes,
                    predicted_peak_bytes,
                }
            })
            .collect()
    }

    /// What the plan predicts a step of micro-batches of `sizes` reaches: by length, the
    /// model at each micro-batch's examples and longest (`lengths` sorted, as packed); for a
    /// fixed split, the plan's peak while the run keeps the plan's split.
    fn predicted_peak(&self, lengths: &[usize], sizes: &[usize]) -> Option<u64> {
        let steady = self.steady_peak(lengths, sizes)?;
        // A fresh run's first step has no AdamW moments yet (two f32 values a parameter,
        // made by its update, after the peak), and its weights' average still shares the
        // weights' storage; calibration measured warm steps, which hold both.
        if self.step > 0 {
            return Some(steady);
        }
        let parameters = self.task.parameters();
        let first = 8 * parameters + super::WeightAverage::bytes(self.config.ema, parameters);
        Some(steady.saturating_sub(first))
    }

    /// [`Self::predicted_peak`] of a step after the first.
    fn steady_peak(&self, lengths: &[usize], sizes: &[usize]) -> Option<u64> {
        let plan = self.plan.as_ref()?;
        let by_length = self.calibration.as_ref().and_then(|c| c.lengths.as_ref());
        match (
            &plan.lengths,
            by_length,
            self.config.length_buckets.is_some(),
        ) {
            (Some(planned), Some(model), true) => {
                Some(planned.beside_bytes + model.packed_bytes(lengths, sizes))
            }
            (None, _, false) => {
                let c = &self.config;
                (c.micro_batch == plan.micro_batch && c.accumulation == plan.accumulation)
                    .then_some(plan.predicted_peak_bytes)
            }
            _ => None,
        }
    }

    /// Ends the task's warm-up on the device without autodiff; outside the step's time and
    /// memory window, as set-up is.
    fn end_warm_up<'a>(&'a mut self) -> LocalFuture<'a, Result<(), TrainError>> {
        Box::pin(async move {
            let plain = self.device.clone().without_autodiff();
            let networks = self.networks.clone();
            self.networks = self
                .task
                .end_warm_up(networks, &self.data, &plain, self.config.seed)
                .await?;
            Ok(())
        })
    }
}

/// The micro-batches of `sizes` examples from stream position `first` on, read as they are
/// taken; the first that fails to read ends them, its error left in `read_error`.
fn read_micro_batches<'a, D: TaskData>(
    data: &'a mut D,
    device: &'a burn::tensor::Device,
    first: u64,
    sizes: &'a [usize],
    read_error: &'a mut Option<TrainError>,
) -> impl Iterator<Item = D::Batch> + 'a {
    sizes.iter().scan(first, move |position, &count| {
        match data.micro_batch(*position, count, device) {
            Ok(batch) => {
                *position += count as u64;
                Some(batch)
            }
            Err(error) => {
                *read_error = Some(error);
                None
            }
        }
    })
}
