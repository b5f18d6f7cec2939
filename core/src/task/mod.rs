//! The training-task seam: what a kind of training tells the engine, so that one optimizer
//! step ([`crate::step`]) and the planner's measurements ([`crate::plan::calibrate`]) serve
//! every kind.
//!
//! A task has networks (one burn module holding all of them), a micro-batch type, and an
//! optimizer step of one or more phases. Each phase trains one network on the step's
//! micro-batches: its loss, and which of the networks' parameters its gradients update. A
//! spectrogram autoencoder has one phase; a GAN has two (the discriminator, then the
//! generator), each stepping only its own network. The optimizer keeps its state per
//! parameter (burn's `ModuleOptimizer`), so each network's moments are its own and one
//! optimizer record saves them all.
//!
//! Every [`ModelConfig`] is a task ([`patches`]): fixed-size patches through one network,
//! one phase, examples independent of each other.

mod patches;
#[cfg(test)]
mod tests;

use burn::module::Module;
use burn::optim::{GradientsParams, ModuleOptimizer};
use burn::tensor::{Device, Gradients, Tensor};

use crate::backend::BackendKind;
use crate::model::{AnalyticStep, StepLoss};
use crate::precision::Precision;

/// How a task's loss relates the examples of one optimizer step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coupling {
    /// Each example's loss stands alone: micro-batch gradients, each weighted by its share
    /// of the step, sum to the gradient of the whole step, so a step may be accumulated.
    PerExample,
    /// The loss couples every example of a step (a contrastive loss's in-batch negatives):
    /// a micro-batch's gradient is not a share of the step's, so a step is one micro-batch
    /// and the planner does not accumulate it.
    WholeStep,
    /// The loss couples the step's examples only through each example's embedding
    /// ([`TrainingTask::embed`], [`TrainingTask::loss_of_embeddings`]): a step of several
    /// micro-batches computes the whole step's gradient by gradient caching
    /// (`crate::step::cached`), so the planner may split it.
    Embeddings,
}

/// The length of a task's examples where the run chooses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Crop {
    /// Steps (samples) in one example.
    pub len: usize,
    /// Every length the task takes is a multiple of this.
    pub multiple: usize,
}

impl Crop {
    /// The longest crop whose smallest step fits `available` bytes, given what the smallest
    /// step at this crop `needs` and what one more crop adds to it (`per_example`): the
    /// examples' part grows with their length, the rest stays. `None` when not even the
    /// shortest fits or the per-example part is unknown.
    pub fn longest_fitting(self, needed: u64, per_example: u64, available: u64) -> Option<usize> {
        let fixed = needed.saturating_sub(per_example);
        if per_example == 0 || available <= fixed {
            return None;
        }
        let per_step = per_example as f64 / self.len.max(1) as f64;
        let steps = ((available - fixed) as f64 / per_step) as usize;
        let multiple = self.multiple.max(1);
        Some(steps / multiple * multiple).filter(|&len| len > 0)
    }
}

/// What a phase's loss may depend on besides the networks and the batch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepContext {
    /// Compute precision where the task supports mixed precision (it may ignore it).
    pub precision: Precision,
    /// The run is in the task's warm-up steps.
    pub warming_up: bool,
}

/// A kind of training, as the step and the planner see it.
pub trait TrainingTask: Clone + std::fmt::Debug + Send + 'static {
    /// Every network the task trains, as one module (a struct of modules for several): what
    /// the optimizer steps and a checkpoint saves.
    type Networks: Module + Clone + std::fmt::Debug + Send + 'static;
    /// One micro-batch on the device. Cloned once per phase after the first, so a tensor
    /// (a shared handle) is cheap.
    type Batch: Clone;

    /// The phases of one optimizer step, in order, by name (at least one). A phase sees the
    /// networks as the phases before it left them.
    fn phases(&self) -> &'static [&'static str];

    /// How the loss relates a step's examples; independent unless the task says otherwise.
    fn coupling(&self) -> Coupling {
        Coupling::PerExample
    }

    /// Whether the planner may cut each item of the data (a spectrogram) into several
    /// examples (patches); a task whose examples are whole items (utterances) says no, and
    /// its plans take one example per item.
    fn cut_into_patches(&self) -> bool {
        true
    }

    /// Whether the loss computes in the half precision a step gives it
    /// ([`StepContext::precision`]); a task that does not is planned in f32 only, so that no
    /// plan claims a precision its steps do not use.
    fn mixed_precision(&self) -> bool {
        true
    }

    /// Fresh networks on `device`.
    fn networks(&self, device: &Device) -> Self::Networks;

    /// Examples in a micro-batch: the unit of the planner's micro-batch and of a step's
    /// share weighting.
    fn examples_in(&self, batch: &Self::Batch) -> usize;

    /// `examples` examples of random data shaped as the task's are: what the planner
    /// measures steps with.
    fn measuring_batch(&self, examples: usize, device: &Device) -> Self::Batch;

    /// The same examples as `batches`, in micro-batches of `examples` each, or `None` where
    /// the task cannot cut its batches again (the loop then reads the examples again). A
    /// step whose phases cut it differently is read once and cut again for each phase, so
    /// that the data stream is read in order, once.
    fn recut(&self, _batches: &[Self::Batch], _examples: &[usize]) -> Option<Vec<Self::Batch>> {
        None
    }

    /// For a task whose examples are crops of a length the run asks for (a waveform
    /// model's samples): that length, so that a plan that cannot hold one crop says the
    /// longest that fits. `None` (the default): examples are what the data holds.
    fn crop(&self) -> Option<Crop> {
        None
    }

    /// The task with crops `len` long, for a task of [`TrainingTask::crop`]: what the
    /// planner measures to find the longest crop a budget holds. `None` by default.
    fn at_crop(&self, _len: usize) -> Option<Self> {
        None
    }

    /// The examples per micro-batch of the planner's two calibration steps, where the
    /// default sizes (`crate::plan::calibration_patches`: at least 16) would hold more than
    /// a device has: a task whose one example is a long sequence measures one and two.
    /// `None` (the default): the planner's sizes.
    fn calibration_examples(&self) -> Option<[usize; 2]> {
        None
    }

    /// For examples of every length (utterances): the task whose measuring batches hold
    /// examples `frames` long, so that the planner measures steps at several lengths and
    /// plans micro-batches by length (`crate::plan::lengths`). `None` (the default): every
    /// example is one size.
    fn at_length(&self, _frames: usize) -> Option<Self> {
        None
    }

    /// The loss of phase `phase` (an index into [`TrainingTask::phases`]) on one
    /// micro-batch: a mean over its examples, so that the step can weight it by its share.
    fn loss(
        &self,
        networks: &Self::Networks,
        phase: usize,
        batch: Self::Batch,
        context: StepContext,
    ) -> StepLoss;

    /// Each example's embedding, `[n, width]` (an audio and a text embedding side by side
    /// for a pair), with autodiff: for a task of [`Coupling::Embeddings`], what the loss
    /// couples the examples through. `None` (the default) for any other task.
    fn embed(
        &self,
        _networks: &Self::Networks,
        _phase: usize,
        _batch: Self::Batch,
        _context: StepContext,
    ) -> Option<Tensor<2>> {
        None
    }

    /// The loss of phase `phase` over a whole step's embeddings (`[step examples, width]`,
    /// in the step's order), for a task of [`Coupling::Embeddings`]: its [`TrainingTask::loss`]
    /// is this over [`TrainingTask::embed`]'s output. `None` (the default) for any other task.
    fn loss_of_embeddings(
        &self,
        _networks: &Self::Networks,
        _phase: usize,
        _embeddings: Tensor<2>,
    ) -> Option<StepLoss> {
        None
    }

    /// For a task of [`Coupling::Embeddings`]: the bytes a step of `step_examples` cut into
    /// several micro-batches holds beside one micro-batch's step, the cache (every example's
    /// embedding and its gradient) and the loss over all of them. 0 (the default) for any
    /// other task.
    fn cache_bytes(&self, _step_examples: usize) -> u64 {
        0
    }

    /// The gradients phase `phase` applies, taken from everything its loss reached: by
    /// default every parameter's (one network). A task of several networks keeps the
    /// phase's network's own (`GradientsParams::from_module(grads, &networks.part)`).
    fn phase_gradients(
        &self,
        networks: &Self::Networks,
        _phase: usize,
        grads: Gradients,
    ) -> GradientsParams {
        GradientsParams::from_grads(grads, networks)
    }

    /// The optimizer of a fresh run, which a resumed run loads its saved state into: by
    /// default AdamW as the model card gives it ([`crate::checkpoint::new_optimizer`]).
    fn optimizer(&self) -> ModuleOptimizer {
        crate::checkpoint::new_optimizer()
    }

    /// The learning rate phase `phase` steps its network with, given the step's: by default
    /// the step's (a GAN's generator may learn slower than its discriminator).
    fn learning_rate(&self, _phase: usize, lr: f64) -> f64 {
        lr
    }

    /// Trainable values in all the networks, as PyTorch counts them: an accumulating step
    /// holds a sum of gradients this large.
    fn parameters(&self) -> u64;

    /// The analytic sizes of a step with `examples` examples per micro-batch: how the
    /// task's memory grows with the micro-batch, beside what calibration measures.
    fn step_memory(
        &self,
        backend: BackendKind,
        precision: Precision,
        examples: usize,
    ) -> AnalyticStep;
}
