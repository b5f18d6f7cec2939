//! What a plan is: the split the planner chose with its predicted peak, where its bytes go,
//! and the measured steps it rests on. Data only: what the `plan` event carries, and what the
//! planner (`crate::plan`) makes.

use serde::{Deserialize, Serialize};

use crate::lengths::LengthBuckets;
use crate::precision::Precision;
use crate::split::Split;

/// A configuration the planner chose, with its prediction and the reason in words.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub micro_batch: usize,
    pub n_patches: usize,
    pub accumulation: usize,
    pub checkpointing: bool,
    /// Encoder and decoder compute precision (mixed precision: parameters stay f32).
    pub precision: Precision,
    pub effective_batch: usize,
    /// Resident bytes plus the step's predicted peak: comparable with the budget.
    pub predicted_peak_bytes: u64,
    pub budget_bytes: u64,
    pub predicted_patches_per_s: f64,
    pub reason: String,
    /// For examples of every length: the length buckets each step is packed by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lengths: Option<LengthPlan>,
    /// A task of several phases: each phase's own split of the same effective batch, in
    /// the task's order (the plan's own split is the one of fewest examples a micro-batch,
    /// which every phase fits in); empty for one phase.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub phases: Vec<PhasePlan>,
}

/// One phase's part of a plan: the micro-batch and accumulation it takes of each step's
/// examples, and its own predicted peak (resident bytes included).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhasePlan {
    pub phase: String,
    pub micro_batch: usize,
    pub accumulation: usize,
    pub predicted_peak_bytes: u64,
}

/// A plan by length: its buckets and what packing the train split's steps by them pads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LengthPlan {
    pub buckets: LengthBuckets,
    /// The share of padded frames that is padding, over epochs of the train split's
    /// lengths in shuffled steps of the effective batch, packed as the run packs them (the
    /// plan's predicted peak is the largest micro-batch of those epochs).
    pub predicted_padding: f64,
    /// The most any step may reach (resident bytes included): every bucket full, at the
    /// longest it holds. At most the budget.
    #[serde(default)]
    pub most_bytes: u64,
    /// What a step holds beside its micro-batches (resident bytes, the read-ahead): a
    /// step's predicted peak is this plus its largest micro-batch's.
    #[serde(default)]
    pub beside_bytes: u64,
}

impl Plan {
    /// The plan's split of each step.
    pub fn split(&self) -> Split {
        Split::of_step(
            self.effective_batch / self.n_patches.max(1),
            self.micro_batch,
            self.n_patches,
        )
    }

    pub fn patches_per_micro_batch(&self) -> usize {
        self.split().patches_per_micro_batch()
    }

    /// "micro-batch 35 x 4 patches x accumulation 3 (the last 30)".
    pub fn split_words(&self) -> String {
        self.split().words(self.checkpointing, self.precision)
    }
}

/// Where a step's bytes go, by the model's shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Breakdown {
    pub parameters: u64,
    pub gradients: u64,
    /// AdamW's first and second moments.
    pub optimizer: u64,
    /// What autodiff keeps for backward, for the micro-batch.
    pub activations: u64,
    /// The micro-batch's input patches and the quantizer's distance matrix (none where
    /// wgpu's nearest-code kernel runs); in a run's plan on a CPU also the train stream's
    /// read-ahead.
    pub data: u64,
    /// The measured prediction minus the parts above (allocator and kernel workspaces).
    pub overhead: u64,
    /// In use before training: the dataset on a CPU, nothing on a GPU.
    pub resident: u64,
    /// Budget minus the prediction (and minus what was resident before training).
    pub free: u64,
}

/// One measured training step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepMeasurement {
    pub patches: usize,
    pub checkpointing: bool,
    #[serde(default)]
    pub precision: Precision,
    /// Peak bytes of the step above what was allocated before the model existed.
    pub peak_bytes: u64,
    /// Time of the step, after a warm-up step.
    pub seconds: f64,
    /// Micro-batches of `patches` each in the step: 2 for a dry-run of an accumulating plan,
    /// whose later micro-batches hold the gradients summed so far.
    #[serde(default = "one")]
    pub micro_batches: usize,
    /// Frames of each example, for a task measured at several lengths.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frames: Option<usize>,
    /// On a device whose pool carves pages (cubecl): what the footprint was made of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pages: Option<PagedStep>,
    /// A task of several phases (a GAN's discriminator and generator): each phase's own
    /// micro-batches and peak, in the task's order; empty for one phase.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub phases: Vec<PhaseMeasurement>,
    /// Examples in the whole step where its last micro-batch holds fewer than `patches`
    /// (a dry-run of a step's first micro-batch and its remainder).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_examples: Option<usize>,
}

/// One phase of a measured step: its micro-batches and the most it held, above what was
/// allocated before the model existed (the phases before it freed what they held).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhaseMeasurement {
    pub patches: usize,
    pub micro_batches: usize,
    pub peak_bytes: u64,
    /// f32 bytes of the gradients the phase applies (its network's): what its step holds
    /// summed while it accumulates.
    pub gradient_bytes: u64,
}

impl StepMeasurement {
    /// Phase `phase` of the step read as a step of its own: its micro-batches and peak (the
    /// fixed parts, networks and optimizer, are the step's). `None` when the step was not
    /// measured by phase.
    pub fn phase(&self, phase: usize) -> Option<StepMeasurement> {
        let own = self.phases.get(phase)?;
        Some(StepMeasurement {
            patches: own.patches,
            micro_batches: own.micro_batches,
            peak_bytes: own.peak_bytes,
            pages: None,
            phases: Vec::new(),
            step_examples: None,
            ..self.clone()
        })
    }
}

/// A measured step's footprint on a device pool that carves allocations from pages sized to
/// the largest allocation it served (cubecl's adaptive pool): the current pages, and what
/// was in use at the step's sampled phases, both above what was in use before the step.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PagedStep {
    pub page_bytes: u64,
    pub pages: u64,
    pub largest_allocation_bytes: u64,
    pub in_use_bytes: u64,
}

fn one() -> usize {
    1
}
