//! One optimizer step of any training task ([`crate::task`]): each phase's micro-batches
//! with accumulated gradients, global-norm clipping, then AdamW. Shared by training, the
//! planner's measurements and the benchmarks, so all measure the same work.

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::{GradientsAccumulator, GradientsParams, ModuleOptimizer};
use burn::tensor::{Device, Tensor};

use crate::budget::OverBudget;
use crate::memory::{MemoryMeter, MemorySource};
use crate::model::StepLoss;
use crate::precision::Precision;
use crate::readback::{self, LocalFuture, ReadbackError};
use crate::task::{Coupling, StepContext, TrainingTask};

/// A step's micro-batches, read one at a time as the step takes them.
type MicroBatches<'a, B> = Box<dyn Iterator<Item = B> + 'a>;

/// Each phase's micro-batches of a step, made when the phase starts.
type PhaseMicroBatches<'a, B> = Box<dyn FnMut(usize) -> Vec<B> + 'a>;

/// Why a step could not finish. Nothing of the networks or the optimizer has changed when
/// one of these comes back: a phase's update runs only after every micro-batch of it has
/// succeeded, and a step of several phases keeps its updates only when all succeeded.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StepError {
    /// The measured peak passed the run's budget.
    #[error(transparent)]
    OverBudget(#[from] OverBudget),
    /// The device reported an error (cubecl's `Err` from `sync`), e.g. out of memory.
    #[error("the device failed during the step: {0}")]
    Device(String),
    /// Fewer examples arrived than the step is made of (the data ran dry); the optimizer
    /// was not stepped.
    #[error("the step received {seen} of its {expected} examples")]
    Incomplete { seen: usize, expected: usize },
    /// A task whose loss couples a step's examples was given a step of several
    /// micro-batches, whose summed gradients would not be the step's.
    #[error(
        "this task's loss couples every example of a step, so a step cannot be split into \
         micro-batches; train with accumulation 1, or let the planner choose"
    )]
    Coupled,
    /// A step of several phases failed in one of them (`index` in the task's order): what
    /// recovery shrinks is that phase's micro-batch.
    #[error("in the {phase} phase: {error}")]
    InPhase {
        phase: &'static str,
        index: usize,
        error: Box<StepError>,
    },
}

/// On the web, a failed allocation surfaces on the next read: the device's words decide,
/// as for a failed `sync`.
impl From<ReadbackError> for StepError {
    fn from(error: ReadbackError) -> Self {
        StepError::Device(error.0)
    }
}

impl StepError {
    /// The error itself, whichever phase it came from.
    pub fn cause(&self) -> &StepError {
        match self {
            StepError::InPhase { error, .. } => error.cause(),
            other => other,
        }
    }

    /// The phase (its index in the task's order) of a step of several phases that failed.
    pub fn phase(&self) -> Option<usize> {
        match self {
            StepError::InPhase { index, .. } => Some(*index),
            _ => None,
        }
    }

    /// Whether a smaller micro-batch could help.
    pub fn is_out_of_memory(&self) -> bool {
        match self.cause() {
            StepError::InPhase { .. } => false,
            StepError::OverBudget(_) => true,
            StepError::Incomplete { .. } | StepError::Coupled => false,
            StepError::Device(reason) => {
                let r = reason.to_ascii_lowercase();
                !r.contains("poisoned")
                    && (r.contains("memory") || r.contains("alloc") || r.contains("oom"))
            }
        }
    }

    /// When the device itself refused the step (out of its memory, or an allocation larger
    /// than its largest buffer), what it said, in one line: cubecl's report is a chain of
    /// skipped kernels around the one line that names the allocation.
    pub fn device_refusal(&self) -> Option<String> {
        let StepError::Device(reason) = self.cause() else {
            return None;
        };
        if !self.is_out_of_memory() {
            return None;
        }
        let line = reason
            .lines()
            .map(str::trim)
            .find(|line| line.to_ascii_lowercase().contains("alloc"))
            .or_else(|| reason.lines().next())
            .unwrap_or_default();
        // cubecl's `BufferTooBig`: no page the device allocates can hold it, at any budget.
        let too_big = line
            .strip_prefix("can't allocate buffer of size:")
            .and_then(|size| size.trim().parse::<u64>().ok());
        Some(match too_big {
            Some(bytes) => format!(
                "a buffer of {} is larger than the device's largest",
                crate::size::human(bytes)
            ),
            None => line.to_string(),
        })
    }
}

/// What one phase of a step measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PhaseOutcome {
    /// Mean total loss over the micro-batches.
    pub loss: f64,
    /// Mean of the task's reported term (the reconstruction error of an autoencoder).
    pub reported: f64,
    /// Global norm of the phase's gradients before clipping.
    pub grad_norm: f64,
    /// The most memory the phase held (above nothing: the meter's reading), measured apart
    /// from the other phases; the step's peak where it has one phase.
    pub peak_bytes: u64,
    /// f32 bytes of the gradients the phase applies: what it holds summed while it
    /// accumulates (its own network's, not every network's).
    pub gradient_bytes: u64,
}

/// What a step measured: each phase's figures, in the task's order.
#[derive(Debug, Clone, PartialEq)]
pub struct StepOutcome {
    pub phases: Vec<PhaseOutcome>,
}

impl StepOutcome {
    /// The first phase's figures: what a step's event reports.
    pub fn first(&self) -> PhaseOutcome {
        self.phases[0]
    }
}

/// Gradients of one micro-batch in phase `phase`, its loss weighted by its share of the
/// step's examples (seed 003's loss / accumulation when micro-batches are equal) so that
/// summing the micro-batch gradients gives the gradient of the mean over all of them.
pub fn micro_batch_gradients<'a, T: TrainingTask>(
    task: &'a T,
    networks: &'a T::Networks,
    phase: usize,
    batch: T::Batch,
    step_examples: usize,
    context: StepContext,
    meter: &'a mut MemoryMeter,
) -> LocalFuture<'a, Result<(GradientsParams, f64, f64), StepError>> {
    Box::pin(async move {
        let share = task.examples_in(&batch) as f64 / step_examples.max(1) as f64;
        let StepLoss { total, reported } = task.loss(networks, phase, batch, context);
        let precision = context.precision;
        // The loss scale is undone on the summed gradients (see `optimizer_step`).
        let scaled = total.mul_scalar(share as f32 * precision.loss_scale());
        let device = scaled.device();
        // Every activation is alive now.
        sample_device_pool(&device, meter).await?;
        let grads = scaled.backward();
        // cubecl reports an allocation that failed here, as an error rather than a panic later.
        readback::settle(&device).await?;
        let total = readback::scalar(scaled).await? as f64 / precision.loss_scale() as f64;
        let reported = readback::scalar(reported).await? as f64 * share;
        Ok((
            task.phase_gradients(networks, phase, grads),
            total,
            reported,
        ))
    })
}

/// On a device pool, which keeps no high-water mark, runs the work queued so far and reads
/// the pool, so that the step's peak includes what is alive now; elsewhere nothing.
pub(crate) async fn sample_device_pool(
    device: &Device,
    meter: &mut MemoryMeter,
) -> Result<(), StepError> {
    if meter.source() == MemorySource::DevicePool {
        readback::settle(device).await?;
        meter.sample();
    }
    Ok(())
}

/// Runs the micro-batches of one phase of a step and returns their summed gradients. Stops
/// at the first micro-batch whose peak passes the meter's budget.
pub fn accumulate_gradients<'a, T: TrainingTask>(
    task: &'a T,
    networks: &'a T::Networks,
    phase: usize,
    micro_batches: impl IntoIterator<Item = T::Batch> + 'a,
    step_examples: usize,
    context: StepContext,
    meter: &'a mut MemoryMeter,
) -> LocalFuture<'a, Result<(GradientsParams, f64, f64), StepError>> {
    let micro_batches: MicroBatches<'a, T::Batch> = Box::new(micro_batches.into_iter());
    gradients_of(
        task,
        networks,
        phase,
        micro_batches,
        step_examples,
        context,
        meter,
    )
}

/// [`accumulate_gradients`] of read micro-batches.
fn gradients_of<'a, T: TrainingTask>(
    task: &'a T,
    networks: &'a T::Networks,
    phase: usize,
    micro_batches: MicroBatches<'a, T::Batch>,
    step_examples: usize,
    context: StepContext,
    meter: &'a mut MemoryMeter,
) -> LocalFuture<'a, Result<(GradientsParams, f64, f64), StepError>> {
    Box::pin(async move {
        if task.coupling() == Coupling::Embeddings {
            let batches: Vec<T::Batch> = micro_batches.collect();
            if batches.len() > 1 {
                return cached::cached_gradients(
                    task,
                    networks,
                    phase,
                    batches,
                    step_examples,
                    context,
                    meter,
                )
                .await;
            }
            // The whole step in one micro-batch: an ordinary step, one forward.
            return each_micro_batch(
                task,
                networks,
                phase,
                Box::new(batches.into_iter()),
                step_examples,
                context,
                meter,
            )
            .await;
        }
        each_micro_batch(
            task,
            networks,
            phase,
            micro_batches,
            step_examples,
            context,
            meter,
        )
        .await
    })
}

/// [`accumulate_gradients`] micro-batch by micro-batch, each gradient its share of the
/// step's.
fn each_micro_batch<'a, T: TrainingTask>(
    task: &'a T,
    networks: &'a T::Networks,
    phase: usize,
    micro_batches: MicroBatches<'a, T::Batch>,
    step_examples: usize,
    context: StepContext,
    meter: &'a mut MemoryMeter,
) -> LocalFuture<'a, Result<(GradientsParams, f64, f64), StepError>> {
    Box::pin(async move {
        let mut accumulator = GradientsAccumulator::<T::Networks>::new();
        let (mut loss, mut reported) = (0.0, 0.0);
        let mut seen = 0;
        for (index, batch) in micro_batches.enumerate() {
            if index > 0 && task.coupling() == Coupling::WholeStep {
                return Err(StepError::Coupled);
            }
            seen += task.examples_in(&batch);
            let (grads, l, r) =
                micro_batch_gradients(task, networks, phase, batch, step_examples, context, meter)
                    .await?;
            meter.check()?;
            accumulator.accumulate(networks, grads);
            loss += l;
            reported += r;
        }
        // A partial step would be a different step: losses are weighted by the whole step.
        if seen != step_examples {
            return Err(StepError::Incomplete {
                seen,
                expected: step_examples,
            });
        }
        Ok((accumulator.grads(), loss, reported))
    })
}

/// How one optimizer step runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepSettings {
    /// Examples in the whole step, over all its micro-batches.
    pub step_examples: usize,
    pub lr: f64,
    pub clip_norm: Option<f64>,
    /// The task's warm-up objective ([`StepContext::warming_up`]).
    pub warming_up: bool,
    /// The networks' compute precision; parameters and optimizer stay f32.
    pub precision: Precision,
}

/// One whole optimizer step: each of the task's phases in turn, over the step's
/// micro-batches, then the optimizer on the phase's gradients. A task of several phases
/// holds the micro-batches (its inputs, not their activations) until its last phase.
pub fn optimizer_step<'a, T: TrainingTask>(
    task: &'a T,
    networks: T::Networks,
    optimizer: &'a mut ModuleOptimizer,
    micro_batches: impl IntoIterator<Item = T::Batch> + 'a,
    settings: StepSettings,
    meter: &'a mut MemoryMeter,
) -> LocalFuture<'a, Result<(T::Networks, StepOutcome), StepError>> {
    let micro_batches: MicroBatches<'a, T::Batch> = Box::new(micro_batches.into_iter());
    step_of(task, networks, optimizer, micro_batches, settings, meter)
}

/// [`optimizer_step`] of read micro-batches.
fn step_of<'a, T: TrainingTask>(
    task: &'a T,
    networks: T::Networks,
    optimizer: &'a mut ModuleOptimizer,
    micro_batches: MicroBatches<'a, T::Batch>,
    settings: StepSettings,
    meter: &'a mut MemoryMeter,
) -> LocalFuture<'a, Result<(T::Networks, StepOutcome), StepError>> {
    Box::pin(async move {
        if task.phases().len() == 1 {
            let (next, figures) =
                phase_step(task, networks, 0, optimizer, micro_batches, settings, meter).await?;
            return Ok((
                next,
                StepOutcome {
                    phases: vec![figures],
                },
            ));
        }
        let batches: Vec<T::Batch> = micro_batches.collect();
        phases_of(
            task,
            networks,
            optimizer,
            Box::new(move |_| batches.clone()),
            settings,
            meter,
        )
        .await
    })
}

/// [`optimizer_step`] with each phase's own micro-batches of the step's examples
/// (`micro_batches(phase)`): a phase that holds less per example (a GAN's discriminator
/// beside its generator) takes larger micro-batches, and every phase still sees the
/// whole step. Each phase's peak is measured apart ([`PhaseOutcome::peak_bytes`]).
pub fn phased_step<'a, T: TrainingTask>(
    task: &'a T,
    networks: T::Networks,
    optimizer: &'a mut ModuleOptimizer,
    micro_batches: impl FnMut(usize) -> Vec<T::Batch> + 'a,
    settings: StepSettings,
    meter: &'a mut MemoryMeter,
) -> LocalFuture<'a, Result<(T::Networks, StepOutcome), StepError>> {
    phases_of(
        task,
        networks,
        optimizer,
        Box::new(micro_batches),
        settings,
        meter,
    )
}

/// [`phased_step`] with its micro-batches' maker boxed.
fn phases_of<'a, T: TrainingTask>(
    task: &'a T,
    networks: T::Networks,
    optimizer: &'a mut ModuleOptimizer,
    mut micro_batches: PhaseMicroBatches<'a, T::Batch>,
    settings: StepSettings,
    meter: &'a mut MemoryMeter,
) -> LocalFuture<'a, Result<(T::Networks, StepOutcome), StepError>> {
    Box::pin(async move {
        let phases = task.phases().len();
        let mut outcome = StepOutcome {
            phases: Vec::with_capacity(phases),
        };
        // The earlier phases' updates reach the optimizer's state before a later phase may
        // fail: the step works on a copy (its tensors are shared handles), kept only when every
        // phase succeeded, so that a redone step starts from the same state.
        let mut trial = optimizer.clone();
        let mut networks = networks;
        for phase in 0..phases {
            let batches = micro_batches(phase);
            let window = meter.open_window();
            let stepped = phase_step(
                task,
                networks,
                phase,
                &mut trial,
                Box::new(batches.into_iter()),
                settings,
                meter,
            )
            .await;
            let peak_bytes = meter.close_window(window);
            let (next, figures) = stepped.map_err(|error| StepError::InPhase {
                phase: task.phases()[phase],
                index: phase,
                error: Box::new(error),
            })?;
            networks = next;
            outcome.phases.push(PhaseOutcome {
                peak_bytes,
                ..figures
            });
        }
        *optimizer = trial;
        Ok((networks, outcome))
    })
}

/// One phase of a step: gradients over the micro-batches, loss scale undone, clipped, and
/// the optimizer's update of the parameters they reach.
fn phase_step<'a, T: TrainingTask>(
    task: &'a T,
    networks: T::Networks,
    phase: usize,
    optimizer: &'a mut ModuleOptimizer,
    micro_batches: MicroBatches<'a, T::Batch>,
    settings: StepSettings,
    meter: &'a mut MemoryMeter,
) -> LocalFuture<'a, Result<(T::Networks, PhaseOutcome), StepError>> {
    Box::pin(async move {
        let StepSettings {
            step_examples,
            lr,
            clip_norm,
            warming_up,
            precision,
        } = settings;
        let context = StepContext {
            precision,
            warming_up,
        };
        let (mut grads, loss, reported) = gradients_of(
            task,
            &networks,
            phase,
            micro_batches,
            step_examples,
            context,
            meter,
        )
        .await?;
        if precision.loss_scale() != 1.0 {
            scale_gradients(&networks, &mut grads, 1.0 / precision.loss_scale());
        }
        let grad_norm = match clip_norm {
            Some(max) => clip_global_norm(&networks, &mut grads, max).await,
            None => global_norm(&networks, &grads).await,
        }?;
        let gradient_bytes = gradient_bytes(&networks, &grads);
        let networks = optimizer.step(task.learning_rate(phase, lr), networks, grads);
        // The optimizer's peak does not shrink with the micro-batch, so it is measured, not
        // guarded: the plan's fixed cost already holds it.
        let peak_bytes = meter.sample().peak_bytes;
        Ok((
            networks,
            PhaseOutcome {
                loss,
                reported,
                grad_norm,
                peak_bytes,
                gradient_bytes,
            },
        ))
    })
}

/// f32 bytes of the parameters of `model` that `grads` holds a gradient for.
fn gradient_bytes<M: Module>(model: &M, grads: &GradientsParams) -> u64 {
    struct Count<'a> {
        grads: &'a GradientsParams,
        values: u64,
    }
    impl ModuleVisitor for Count<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if self.grads.get::<D>(param.id).is_some() {
                self.values += param.shape().num_elements() as u64;
            }
        }
    }
    let mut count = Count { grads, values: 0 };
    model.visit(&mut count);
    count.values * 4
}

/// L2 norm of all gradients together, as `torch.nn.utils.clip_grad_norm_` measures it.
pub fn global_norm<'a, M: Module>(
    model: &'a M,
    grads: &'a GradientsParams,
) -> LocalFuture<'a, Result<f64, ReadbackError>> {
    Box::pin(async move {
        struct SumSquares<'a> {
            grads: &'a GradientsParams,
            total: Option<Tensor<1>>,
        }
        impl ModuleVisitor for SumSquares<'_> {
            fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
                if let Some(grad) = self.grads.get::<D>(param.id) {
                    let part = grad.square().sum();
                    self.total = Some(match self.total.take() {
                        Some(total) => total + part,
                        None => part,
                    });
                }
            }
        }
        let mut visitor = SumSquares { grads, total: None };
        model.visit(&mut visitor);
        match visitor.total {
            Some(total) => Ok((readback::scalar(total).await? as f64).sqrt()),
            None => Ok(0.0),
        }
    })
}

/// Scales all gradients together so that their global norm is at most `max_norm`, as
/// `clip_grad_norm_` does. burn's own clipping works per parameter tensor, which changes
/// the direction of the update; the model card asks for the global norm. Returns the norm
/// before clipping.
pub fn clip_global_norm<'a, M: Module>(
    model: &'a M,
    grads: &'a mut GradientsParams,
    max_norm: f64,
) -> LocalFuture<'a, Result<f64, ReadbackError>> {
    Box::pin(async move {
        let norm = global_norm(model, grads).await?;
        let scale = max_norm / (norm + 1e-6);
        if scale < 1.0 {
            scale_gradients(model, grads, scale as f32);
        }
        Ok(norm)
    })
}

/// Multiplies every gradient by `factor`.
pub fn scale_gradients<M: Module>(model: &M, grads: &mut GradientsParams, factor: f32) {
    struct Scale<'a> {
        grads: &'a mut GradientsParams,
        factor: f32,
    }
    impl ModuleVisitor for Scale<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if let Some(grad) = self.grads.remove::<D>(param.id) {
                self.grads
                    .register::<D>(param.id, grad.mul_scalar(self.factor));
            }
        }
    }
    model.visit(&mut Scale { grads, factor });
}

pub mod cached;
#[cfg(test)]
mod tests;
