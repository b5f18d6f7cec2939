//! What a plan is: the split the planner chose with its predicted peak, where its bytes go,
//! and the measured steps it rests on. Data only, below the planner that makes it
//! (`crate::plan`) and the events that carry it (`crate::events`).

use serde::{Deserialize, Serialize};

use crate::precision::Precision;

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
}

impl Plan {
    pub fn patches_per_micro_batch(&self) -> usize {
        self.micro_batch * self.n_patches
    }

    /// "micro-batch 35 x 4 patches x accumulation 3 (the last 30)".
    pub fn split_words(&self) -> String {
        let clips = self.effective_batch / self.n_patches.max(1);
        let last = clips.saturating_sub((self.accumulation.max(1) - 1) * self.micro_batch);
        describe(
            self.micro_batch,
            self.n_patches,
            self.accumulation,
            last,
            self.checkpointing,
            self.precision,
        )
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
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
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
}

fn one() -> usize {
    1
}

/// A split in words: "micro-batch 35 x 4 patches x accumulation 3 (the last 30)".
pub(crate) fn describe(
    micro_batch: usize,
    n_patches: usize,
    accumulation: usize,
    last: usize,
    ckpt: bool,
    precision: Precision,
) -> String {
    let rest = if last == micro_batch {
        String::new()
    } else {
        format!(" (the last {last})")
    };
    let half = match precision {
        Precision::F32 => String::new(),
        p => format!(", {p} compute"),
    };
    format!(
        "micro-batch {micro_batch} x {n_patches} patches x accumulation {accumulation}{rest}{}{half}",
        if ckpt { ", checkpointing" } else { "" }
    )
}
